//! The two eras of MCP the front speaks, and the translation between them.
//!
//! - **Legacy** (2025-11-25 and earlier): an `initialize` handshake settles
//!   the protocol version and both sides' capabilities for the life of the
//!   process.
//! - **Modern** (2026-07-28): no handshake. Every request carries its
//!   protocol version, the client's capabilities and identity in `_meta`
//!   (`io.modelcontextprotocol/*`), the server describes itself through
//!   `server/discover`, every result carries `resultType`, and the results
//!   of `server/discover`, the list methods and `resources/read` carry
//!   caching hints (`ttlMs`, `cacheScope`).
//!
//! Sources: the 2026-07-28 specification's changelog
//! (<https://modelcontextprotocol.io/specification/2026-07-28/changelog>),
//! versioning page (`basic/versioning`, the compatibility matrix), stdio
//! transport (`basic/transports/stdio`, the `server/discover` probe),
//! `server/discover` and `server/utilities/caching` pages.
//!
//! When the client and the server are of the same era the front passes
//! their messages through. When they differ it stands in for the missing
//! half of the protocol (see `front`): a legacy client's `initialize` is
//! answered from the server's `server/discover`, and its requests are
//! stamped with the modern `_meta`; a modern client's `server/discover` is
//! answered from the `initialize` the front made with the legacy server,
//! and the server's results are completed with `resultType` and caching
//! hints.

use serde_json::{Map, Value, json};

/// The modern revision the front speaks.
pub const MODERN: &str = "2026-07-28";
/// The legacy revision the front asks a legacy server for.
pub const LEGACY: &str = "2025-11-25";
/// Revisions with an `initialize` handshake.
pub const LEGACY_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// `UnsupportedProtocolVersionError` (renumbered from -32004 in 2026-07-28).
pub const UNSUPPORTED_VERSION: i64 = -32022;
/// "Resource not found": -32002 before 2026-07-28, Invalid Params since.
pub const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;
pub const MODERN_RESOURCE_NOT_FOUND: i64 = -32602;

/// Methods whose complete results carry `ttlMs` and `cacheScope`.
pub const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    Legacy,
    Modern,
}

/// The `_meta` of a request's params.
pub fn meta(params: Option<&Value>) -> Option<&Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

/// The protocol version a request declares in `_meta` (modern requests).
pub fn declared_version(params: Option<&Value>) -> Option<&str> {
    meta(params)?.get(META_VERSION)?.as_str()
}

/// Whether a request is made under a modern revision: it declares a
/// version, and not one of the handshake era's.
pub fn is_modern(params: Option<&Value>) -> bool {
    declared_version(params).is_some_and(|v| !LEGACY_VERSIONS.contains(&v))
}

/// The name and version toolwire gives when it speaks for itself.
pub fn own_info() -> Value {
    json!({"name": "toolwire", "version": env!("CARGO_PKG_VERSION")})
}

/// A request of the front's own.
pub fn request(id: &Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The modern `_meta` a legacy client's requests are stamped with, from its
/// `initialize` params.
pub fn stamp_from_initialize(params: Option<&Value>) -> Map<String, Value> {
    let mut stamp = Map::new();
    stamp.insert(META_VERSION.into(), json!(MODERN));
    stamp.insert(
        META_CAPABILITIES.into(),
        params
            .and_then(|p| p.get("capabilities"))
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    stamp.insert(
        META_CLIENT_INFO.into(),
        params
            .and_then(|p| p.get("clientInfo"))
            .cloned()
            .unwrap_or_else(own_info),
    );
    stamp
}

/// Put `stamp` into a request's `_meta`, keeping what the request has
/// (a `progressToken`, say).
pub fn stamp_request(obj: &mut Map<String, Value>, stamp: &Map<String, Value>) {
    let params = obj
        .entry("params")
        .or_insert_with(|| Value::Object(Map::new()));
    if !params.is_object() {
        return;
    }
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        for (key, value) in stamp {
            meta.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
}

/// Take the modern `_meta` keys out of a request for a legacy server
/// (which may refuse requests that carry them, as the official SDK's does),
/// and `_meta` itself when nothing else was in it.
pub fn strip_modern_meta(obj: &mut Map<String, Value>) {
    let Some(Value::Object(params)) = obj.get_mut("params") else {
        return;
    };
    let Some(Value::Object(meta)) = params.get_mut("_meta") else {
        return;
    };
    meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
    if meta.is_empty() {
        params.remove("_meta");
    }
}

/// The `initialize` the front sends a legacy server for a modern client:
/// the client's capabilities and identity from its first request's `_meta`.
pub fn initialize_params(client_meta: Option<&Map<String, Value>>) -> Value {
    let pick = |key: &str| client_meta.and_then(|m| m.get(key)).cloned();
    json!({
        "protocolVersion": LEGACY,
        "capabilities": pick(META_CAPABILITIES).unwrap_or_else(|| json!({})),
        "clientInfo": pick(META_CLIENT_INFO).unwrap_or_else(own_info),
    })
}

/// The probe a modern client's first request makes the front send, with
/// that client's `_meta`.
pub fn discover_params(client_meta: Option<&Map<String, Value>>) -> Value {
    let pick = |key: &str| client_meta.and_then(|m| m.get(key)).cloned();
    json!({"_meta": {
        META_VERSION: MODERN,
        META_CLIENT_INFO: pick(META_CLIENT_INFO).unwrap_or_else(own_info),
        META_CAPABILITIES: pick(META_CAPABILITIES).unwrap_or_else(|| json!({})),
    }})
}

/// Whether a `server/discover` result says the server speaks our modern
/// revision.
pub fn speaks_modern(result: &Map<String, Value>) -> bool {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v.as_str() == Some(MODERN)))
}

/// A legacy `initialize` result made from a modern server's
/// `server/discover` result, at the version the client asked for (when the
/// front knows it) or the newest legacy one.
pub fn initialize_result(discover: &Map<String, Value>, asked: Option<&str>) -> Value {
    let version = asked
        .filter(|v| LEGACY_VERSIONS.contains(v))
        .unwrap_or(LEGACY);
    let server_info = discover
        .get("_meta")
        .and_then(|m| m.get(META_SERVER_INFO))
        .filter(|info| info.get("name").is_some_and(Value::is_string))
        .cloned()
        .unwrap_or_else(|| json!({"name": "unknown", "version": "0"}));
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": discover.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        "serverInfo": server_info,
    });
    if let (Some(obj), Some(instructions)) = (result.as_object_mut(), discover.get("instructions"))
    {
        obj.insert("instructions".into(), instructions.clone());
    }
    result
}

/// A modern `server/discover` result made from a legacy server's
/// `initialize` result. The legacy server gave no caching hints: the
/// result is fresh for no time and for this caller only.
pub fn discover_result(initialized: &Map<String, Value>) -> Value {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": [MODERN],
        "capabilities": initialized.get("capabilities").cloned().unwrap_or_else(|| json!({})),
    });
    if let Some(obj) = result.as_object_mut() {
        if let Some(info) = initialized.get("serverInfo") {
            obj.insert("_meta".into(), json!({ META_SERVER_INFO: info }));
        }
        if let Some(instructions) = initialized.get("instructions") {
            obj.insert("instructions".into(), instructions.clone());
        }
        add_cache_hints(obj);
    }
    result
}

/// `ttlMs` and `cacheScope` where a result has none: immediately stale,
/// not to be shared (the spec's defaults for an older server's results).
pub fn add_cache_hints(result: &mut Map<String, Value>) {
    if !result.contains_key("ttlMs") {
        result.insert("ttlMs".into(), json!(0));
    }
    if !result.contains_key("cacheScope") {
        result.insert("cacheScope".into(), json!("private"));
    }
}

/// A legacy server's response made modern, for the method asked: results
/// complete (with caching hints where the method is cacheable), and the
/// renumbered "resource not found". Returns whether it changed.
pub fn modernize_response(method: &str, response: &mut Map<String, Value>) -> bool {
    if let Some(Value::Object(result)) = response.get_mut("result") {
        let before = result.len();
        if !result.contains_key("resultType") {
            result.insert("resultType".into(), json!("complete"));
        }
        if CACHEABLE.contains(&method) {
            add_cache_hints(result);
        }
        return result.len() != before;
    }
    if method == "resources/read"
        && let Some(Value::Object(error)) = response.get_mut("error")
        && error.get("code").and_then(Value::as_i64) == Some(LEGACY_RESOURCE_NOT_FOUND)
    {
        error.insert("code".into(), json!(MODERN_RESOURCE_NOT_FOUND));
        return true;
    }
    false
}

/// `UnsupportedProtocolVersionError` for a version the front cannot serve.
pub fn unsupported_version(requested: &str) -> Value {
    json!({
        "code": UNSUPPORTED_VERSION,
        "message": "Unsupported protocol version",
        "data": {"supported": [MODERN], "requested": requested},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_requests_declare_a_version_of_no_handshake_era() {
        assert!(is_modern(Some(&json!({"_meta": {META_VERSION: MODERN}}))));
        assert!(is_modern(Some(
            &json!({"_meta": {META_VERSION: "2027-01-01"}})
        )));
        assert!(!is_modern(Some(&json!({"_meta": {META_VERSION: LEGACY}}))));
        assert!(!is_modern(Some(&json!({"_meta": {"progressToken": 1}}))));
        assert!(!is_modern(None));
    }

    #[test]
    fn stamps_keep_what_the_request_has() {
        let mut obj = json!({"method": "tools/call", "params": {"name": "x", "_meta": {"progressToken": 7, META_VERSION: "mine"}}});
        let stamp = stamp_from_initialize(Some(&json!({"capabilities": {"roots": {}}})));
        stamp_request(obj.as_object_mut().unwrap(), &stamp);
        let meta = &obj["params"]["_meta"];
        assert_eq!(meta["progressToken"], json!(7));
        assert_eq!(meta[META_VERSION], json!("mine"));
        assert_eq!(meta[META_CAPABILITIES], json!({"roots": {}}));
        let mut bare = json!({"method": "tools/list"});
        stamp_request(bare.as_object_mut().unwrap(), &stamp);
        assert_eq!(bare["params"]["_meta"][META_VERSION], json!(MODERN));
    }

    #[test]
    fn legacy_servers_get_no_modern_meta() {
        let mut obj =
            json!({"params": {"name": "x", "_meta": {META_VERSION: MODERN, "progressToken": 1}}});
        strip_modern_meta(obj.as_object_mut().unwrap());
        assert_eq!(
            obj,
            json!({"params": {"name": "x", "_meta": {"progressToken": 1}}})
        );
        let mut only = json!({"params": {"_meta": {META_VERSION: MODERN}}});
        strip_modern_meta(only.as_object_mut().unwrap());
        assert_eq!(only, json!({"params": {}}));
    }

    #[test]
    fn handshakes_translate_both_ways() {
        let discover = json!({"resultType": "complete", "supportedVersions": [MODERN], "capabilities": {"tools": {}}, "_meta": {META_SERVER_INFO: {"name": "s", "version": "1"}}, "instructions": "hi", "ttlMs": 5, "cacheScope": "public"});
        let init = initialize_result(discover.as_object().unwrap(), Some("2025-06-18"));
        assert_eq!(
            init,
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}, "instructions": "hi"})
        );
        let back = discover_result(init.as_object().unwrap());
        assert_eq!(back["supportedVersions"], json!([MODERN]));
        assert_eq!(back["_meta"][META_SERVER_INFO]["name"], json!("s"));
        assert_eq!(
            (&back["ttlMs"], &back["cacheScope"]),
            (&json!(0), &json!("private"))
        );
    }

    #[test]
    fn legacy_responses_are_completed_for_modern_clients() {
        let mut list = json!({"id": 1, "result": {"tools": [], "ttlMs": 9}});
        assert!(modernize_response(
            "tools/list",
            list.as_object_mut().unwrap()
        ));
        assert_eq!(
            list["result"],
            json!({"tools": [], "ttlMs": 9, "resultType": "complete", "cacheScope": "private"})
        );
        let mut call = json!({"id": 1, "result": {"content": []}});
        modernize_response("tools/call", call.as_object_mut().unwrap());
        assert!(call["result"].get("ttlMs").is_none());
        let mut missing = json!({"id": 1, "error": {"code": -32002, "message": "no"}});
        assert!(modernize_response(
            "resources/read",
            missing.as_object_mut().unwrap()
        ));
        assert_eq!(missing["error"]["code"], json!(-32602));
    }
}
