//! Configuration: built-in defaults, then `toolwire.toml` at the workspace
//! root, then `initialize`'s `initializationOptions`, then per-request
//! `limits` (PROTOCOL.md section 3).
//!
//! Layers are merged as JSON objects (TOML's snake_case keys are folded to
//! camelCase first) and the result is deserialized once with unknown keys
//! denied, so a typo or a bad value is an error that names its key instead of
//! a silent default.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::budget::{Limits, PreviewMode, Tools};
use crate::error::{Error, Result};
use crate::format::SizeUnit;
use crate::retention::Retention;
use crate::store::StorageConfig;
use crate::transcript::guard::AbortMode;

/// Whether each commit reaches the disk before its reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Durability {
    #[default]
    Fsync,
    None,
}

/// The whole configuration, as accepted in `toolwire.toml` and in
/// `initializationOptions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// Root of everything toolwire writes; relative paths are taken from the
    /// workspace root. Default: `<workspace>/.toolwire`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(deserialize_with = "crate::json::by_name::one")]
    #[schemars(with = "Limits")]
    pub limits: Limits,
    /// Tool names whose results are never replaced.
    pub exempt_tools: Vec<String>,
    pub abort_mode: AbortMode,
    pub durability: Durability,
    pub size_unit: SizeUnit,
    /// How previews are cut: `head` or `headTail`.
    pub preview_mode: PreviewMode,
    /// Per-tool settings by tool name (names kept exactly as the tools
    /// have them, also in `toolwire.toml`).
    pub tools: Tools,
    pub retention: Retention,
    /// `toolwire proxy`: where it listens and where it forwards.
    #[serde(skip_serializing_if = "ProxyConfig::is_default")]
    pub proxy: ProxyConfig,
    /// The provider format of new sessions (PROTOCOL.md 10.3):
    /// `anthropic`, `openai-chat`, `openai-responses` or `gemini`. When
    /// unset, a session keeps the format it was created with and a new one
    /// is `anthropic`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<crate::format::Format>,
    /// Where session state and transcripts live. Read once, from
    /// `toolwire.toml`, when the process starts (`toolwire proxy`,
    /// `serve`, `migrate`, `gc`); every session of the process uses it.
    /// `[storage.objects]`: where saved outputs go.
    #[serde(skip_serializing_if = "StorageConfig::is_default")]
    pub storage: StorageConfig,
    /// Clearing old results (PROTOCOL.md 11.3).
    pub clearing: crate::budget::clearing::Clearing,
    /// `[pricing.<provider>]`: the cache prices `auto` clearing weighs
    /// with, over the documented ones (PROTOCOL.md 12.1).
    #[serde(skip_serializing_if = "crate::budget::pricing::PricingConfig::is_default")]
    pub pricing: crate::budget::pricing::PricingConfig,
}

/// `[proxy]` in `toolwire.toml`: the HTTP face (`toolwire proxy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// Address to listen on (`--listen` overrides it). A non-loopback
    /// address needs `--allow-remote`.
    pub listen: String,
    /// Base URL per provider; the request's path is appended to it.
    pub upstreams: Upstreams,
    /// Largest request body accepted, in bytes; a larger one is answered
    /// 413 with an error in the provider's shape.
    pub max_request_bytes: u64,
    /// Seconds a client has to send a request's head (method, path,
    /// headers) once the proxy waits for it; a connection that takes
    /// longer is closed. HTTP/1.1 waits for the next head as soon as a
    /// response is sent, so this also closes an idle HTTP/1.1 connection.
    pub header_timeout_seconds: u64,
    /// Seconds a client has to send a request's whole body once its head
    /// has arrived; a slower body is answered 408.
    pub body_timeout_seconds: u64,
    /// Seconds a connection may stay open with no request in progress and
    /// no byte moving either way before the proxy closes it.
    pub idle_timeout_seconds: u64,
    /// Whether outbound connections (the upstreams, object storage) go
    /// through the proxy that `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` name
    /// (minus `NO_PROXY`; loopback never). `false`: always direct.
    pub system_proxy: bool,
    /// A PEM file of certificates to trust for outbound TLS besides the
    /// system's store (and `SSL_CERT_FILE` / `SSL_CERT_DIR`): a company's
    /// TLS-inspecting proxy's CA. Relative to the workspace root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The hex SHA-256 of a token that may read `GET /metrics` (a
    /// Prometheus scraper's, sent as `Authorization: Bearer <token>`), so
    /// the scraper needs no tenant's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_token: Option<String>,
    /// Label the proxy's metrics with the tenant too (one series per
    /// tenant and route: only for a handful of tenants).
    pub metrics_by_tenant: bool,
    /// `[proxy.auth]`: the tenants' tokens. Required to listen beyond
    /// loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<ProxyAuth>,
    /// What a fresh preview tells the model about the saved output:
    /// `"mcp"` adds its `toolwire://` link and the `read_saved_output`
    /// tool of the proxy's `/mcp` (for agents that cannot open the proxy's
    /// disk); `"path"` only the path. Unset: `"mcp"` when listening beyond
    /// loopback, else `"path"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previews: Option<Previews>,
}

/// `[proxy] previews`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Previews {
    Mcp,
    Path,
}

/// `[proxy.auth]`: who may use the proxy. Each token is a tenant, whose
/// sessions, saved outputs and stats are its own (PROTOCOL.md 12.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ProxyAuth {
    pub tokens: Vec<TenantToken>,
}

/// One tenant: its name and the hex SHA-256 of its token (the token
/// itself is never written down).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantToken {
    /// 1-32 characters of [A-Za-z0-9_-]; it prefixes the tenant's session
    /// ids.
    pub name: String,
    /// The token's SHA-256, 64 hex digits.
    pub sha256: String,
}

/// `[proxy.upstreams]`: the only hosts the proxy ever forwards to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Upstreams {
    /// For `POST /v1/messages`.
    pub anthropic: String,
    /// For `POST /v1/chat/completions` and `POST /v1/responses`.
    pub openai: String,
    /// For `POST /v1beta/models/{model}:generateContent` and
    /// `:streamGenerateContent`.
    pub gemini: String,
}

impl Default for Upstreams {
    fn default() -> Self {
        Upstreams {
            anthropic: "https://api.anthropic.com".into(),
            openai: "https://api.openai.com".into(),
            gemini: "https://generativelanguage.googleapis.com".into(),
        }
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: "127.0.0.1:8787".into(),
            upstreams: Upstreams::default(),
            // The Messages API's own request limit (32 MB); the other
            // providers' documented limits are no larger.
            max_request_bytes: 32 * 1024 * 1024,
            // hyper's own default for a head, and long enough for any
            // client on a working network.
            header_timeout_seconds: 30,
            // A 32 MiB body at 1 Mbit/s takes about 270 s.
            body_timeout_seconds: 300,
            // The agents keep a connection between turns; a turn's tool
            // calls rarely take this long, and a closed connection only
            // costs the next request a new one.
            idle_timeout_seconds: 120,
            system_proxy: true,
            ca_file: None,
            metrics_token: None,
            metrics_by_tenant: false,
            auth: None,
            previews: None,
        }
    }
}

impl ProxyConfig {
    fn is_default(&self) -> bool {
        *self == ProxyConfig::default()
    }
}

/// The configuration in force for one connection, with paths resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub workspace: PathBuf,
    pub data_dir: PathBuf,
    pub limits: Limits,
    pub exempt_tools: Vec<String>,
    pub abort_mode: AbortMode,
    pub durability: Durability,
    pub size_unit: SizeUnit,
    pub preview_mode: PreviewMode,
    pub tools: Tools,
    pub retention: Retention,
    pub proxy: ProxyConfig,
    pub format: Option<crate::format::Format>,
    pub storage: StorageConfig,
    pub clearing: crate::budget::clearing::Clearing,
    pub pricing: crate::budget::pricing::PricingConfig,
}

impl Effective {
    pub fn fsync(&self) -> bool {
        self.durability == Durability::Fsync
    }

    /// How outbound connections leave (`[proxy] system_proxy`, `ca_file`
    /// from the workspace root), for [`crate::egress::configure`].
    pub fn egress(&self) -> crate::egress::Settings {
        crate::egress::Settings {
            system_proxy: self.proxy.system_proxy,
            ca_file: self.proxy.ca_file.as_ref().map(|f| self.workspace.join(f)),
        }
    }

    /// A path from a request: absolute as given, else from the workspace root.
    pub fn workspace_path(&self, path: &str) -> PathBuf {
        let path = PathBuf::from(path);
        if path.is_absolute() {
            path
        } else {
            self.workspace.join(path)
        }
    }
}

/// Name of the per-workspace configuration file.
pub const CONFIG_FILE: &str = "toolwire.toml";

/// Build the configuration for a workspace from its `toolwire.toml` (when
/// present) and the client's `initializationOptions` (when given).
pub fn load(workspace: &Path, init_options: Option<&Value>) -> Result<Effective> {
    load_with_file(workspace, &workspace.join(CONFIG_FILE), false, init_options)
}

/// [`load`] with the configuration file named explicitly (`--config FILE`):
/// when `required`, a missing file is an error rather than an empty layer.
pub fn load_with_file(
    workspace: &Path,
    file: &Path,
    required: bool,
    init_options: Option<&Value>,
) -> Result<Effective> {
    let mut merged = Value::Object(Map::new());
    match std::fs::read_to_string(file) {
        Ok(text) => merge(&mut merged, read_file(file, &text)?),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && !required => {}
        Err(err) => return Err(Error::storage(file, &err)),
    }
    match init_options {
        None | Some(Value::Null) => {}
        // Neovim encodes an empty Lua table as `[]` (it cannot tell an
        // empty list from an empty map), so `init_options = {}` arrives as
        // an empty array: it means "no overrides", as `{}` does. A
        // non-empty array is still refused.
        Some(Value::Array(items)) if items.is_empty() => {}
        Some(value @ Value::Object(_)) => merge(&mut merged, camel_keys(value.clone())),
        Some(_) => {
            return Err(Error::invalid_params(
                "initializationOptions",
                "expected an object (a toolwire Config)",
            ));
        }
    }
    let config: Config = crate::error::from_value(merged, "initializationOptions")?;
    config.retention.check("retention")?;
    if let Some(objects) = &config.storage.objects {
        // Opening checks the URL and the options without any request.
        crate::artifact::objects::ObjectArtifacts::open(objects)?;
    }
    Ok(resolve(workspace, config))
}

/// The layer `toolwire.toml` contributes, checked on its own so that a
/// mistake in it is reported at its key and line in the file, not at the
/// merged configuration's path.
fn read_file(file: &Path, text: &str) -> Result<Value> {
    let at_line = |span: Option<std::ops::Range<usize>>| match span {
        Some(span) => format!("{}:{}", file.display(), line_of(text, span.start)),
        None => file.display().to_string(),
    };
    let table: toml::Table = toml::from_str(text).map_err(|err| {
        Error::invalid_params(
            CONFIG_FILE,
            format!("{}: {}", at_line(err.span()), err.message()),
        )
    })?;
    let value = serde_json::to_value(table)
        .map_err(|err| Error::invalid_params(CONFIG_FILE, format!("{}: {err}", file.display())))?;
    let value = camel_keys(value);
    if let Err(err) = serde_path_to_error::deserialize::<_, Config>(value.clone()) {
        let (key, span) = locate(text, err.path());
        let path = if key.is_empty() {
            CONFIG_FILE.to_owned()
        } else {
            format!("{CONFIG_FILE}:{key}")
        };
        // serde names an unknown key as camelCase; say it as the file does.
        let mut message = err.inner().to_string();
        if let (Some(serde_path_to_error::Segment::Map { key: camel }), Some(spelled)) =
            (err.path().iter().next_back(), key.rsplit('.').next())
        {
            message = message.replacen(&format!("`{camel}`"), &format!("`{spelled}`"), 1);
            // And the keys it suggests in the file's style too: snake_case
            // (what the docs write) unless the file wrote this key in
            // camelCase, so the suggestion can be pasted as it is.
            // Only for an unknown key: an unknown value's suggestions are
            // values, spelled one way everywhere (`headTail`).
            if message.starts_with("unknown field")
                && !spelled.chars().any(|c| c.is_ascii_uppercase())
            {
                message = snake_suggestions(&message);
            }
        }
        return Err(Error::invalid_params(
            path,
            format!("{}: `{key}`: {message}", at_line(span)),
        ));
    }
    Ok(value)
}

/// serde's "expected one of `maxResultChars`, `previewChars`" with the
/// suggested keys in snake_case; everything before "expected" is kept.
fn snake_suggestions(message: &str) -> String {
    let Some(at) = message.find("expected") else {
        return message.to_owned();
    };
    let (head, tail) = message.split_at(at);
    let mut out = head.to_owned();
    for (i, part) in tail.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        // Odd parts are the names between backticks.
        if i % 2 == 1 {
            for c in part.chars() {
                if c.is_ascii_uppercase() {
                    out.push('_');
                    out.push(c.to_ascii_lowercase());
                } else {
                    out.push(c);
                }
            }
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The key at `path` (camelCase, as the merged configuration names it)
/// spelled as `text` spells it, and the span of its deepest part found.
fn locate(
    text: &str,
    path: &serde_path_to_error::Path,
) -> (String, Option<std::ops::Range<usize>>) {
    use serde_path_to_error::Segment;
    use toml::de::{DeTable, DeValue};
    let Ok(root) = DeTable::parse(text) else {
        return (path.to_string(), None);
    };
    let mut key = String::new();
    let mut span = None;
    let mut table = Some(root.get_ref());
    let mut array: Option<&toml::de::DeArray> = None;
    for segment in path {
        let value = match (segment, table, array) {
            (Segment::Map { key: name }, Some(t), _) => {
                // Tool names are not camel-cased: match them as written too.
                let Some((k, v)) = t
                    .iter()
                    .find(|(k, _)| k.get_ref() == name || to_camel(k.get_ref()) == *name)
                else {
                    break;
                };
                if !key.is_empty() {
                    key.push('.');
                }
                key.push_str(k.get_ref());
                span = Some(k.span());
                v
            }
            (Segment::Seq { index }, _, Some(items)) => {
                let Some(v) = items.get(*index) else {
                    break;
                };
                key.push_str(&format!("[{index}]"));
                span = Some(v.span());
                v
            }
            _ => break,
        };
        (table, array) = match value.get_ref() {
            DeValue::Table(t) => (Some(t), None),
            DeValue::Array(a) => (None, Some(a)),
            _ => (None, None),
        };
    }
    (key, span)
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `path` with its longest existing ancestor canonicalized (links and `..`
/// resolved) and the rest, not created yet, appended as written: sessions
/// are keyed by data directory, so two spellings of one directory must give
/// one key (10.1).
pub fn canonical(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut base = path;
    loop {
        if let Ok(found) = std::fs::canonicalize(base) {
            return rest.iter().rev().fold(found, |acc, part| acc.join(part));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                base = parent;
            }
            // Nothing of it exists (or it ends in `..`): keep it as given.
            _ => return path.to_path_buf(),
        }
    }
}

/// Resolve a parsed [`Config`] against its workspace root.
pub fn resolve(workspace: &Path, config: Config) -> Effective {
    let data_dir = canonical(&match config.data_dir {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => workspace.join(dir),
        None => workspace.join(".toolwire"),
    });
    // A data directory made from here on gets its `.gitignore` (PROTOCOL.md 12.2).
    crate::private::register(&data_dir);
    Effective {
        workspace: workspace.to_path_buf(),
        data_dir,
        limits: config.limits,
        exempt_tools: config.exempt_tools,
        abort_mode: config.abort_mode,
        durability: config.durability,
        size_unit: config.size_unit,
        preview_mode: config.preview_mode,
        tools: config.tools,
        retention: config.retention,
        proxy: config.proxy,
        format: config.format,
        storage: config.storage,
        clearing: config.clearing,
        pricing: config.pricing,
    }
}

/// Overlay `top` onto `base`, object by object.
fn merge(base: &mut Value, top: Value) {
    match (base, top) {
        (Value::Object(base), Value::Object(top)) => {
            for (key, value) in top {
                match base.get_mut(&key) {
                    Some(slot) => merge(slot, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (slot, top) => *slot = top,
    }
}

/// `max_result_chars` → `maxResultChars`, recursively through objects,
/// except the names of the `tools` table: those are tool names, kept as the
/// tools spell them (`run_tests` stays `run_tests`).
fn camel_keys(value: Value) -> Value {
    let Value::Object(map) = value else {
        return value;
    };
    Value::Object(
        map.into_iter()
            .map(|(key, value)| {
                let key = to_camel(&key);
                let value = match value {
                    Value::Object(tools) if key == "tools" => Value::Object(
                        tools
                            .into_iter()
                            .map(|(name, settings)| (name, camel_all(settings)))
                            .collect(),
                    ),
                    other => camel_all(other),
                };
                (key, value)
            })
            .collect(),
    )
}

fn camel_all(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| (to_camel(&key), camel_all(value)))
                .collect(),
        ),
        other => other,
    }
}

fn to_camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for ch in key.chars() {
        if ch == '_' {
            upper = true;
        } else if upper {
            out.extend(ch.to_uppercase());
            upper = false;
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::ToolPolicy;
    use serde_json::json;

    #[test]
    fn layers_rise_in_precedence_and_bad_values_name_their_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "abort_mode = \"synthetic\"\n[limits]\nmax_result_chars = 10\npreview_chars = 5\n",
        )
        .unwrap();
        let eff = load(dir.path(), Some(&json!({"limits": {"previewChars": 7}}))).unwrap();
        assert_eq!(eff.abort_mode, AbortMode::Synthetic);
        assert_eq!(eff.limits.max_result_chars, 10);
        assert_eq!(eff.limits.preview_chars, 7);
        assert_eq!(eff.limits.max_message_chars, 200_000);
        assert_eq!(eff.data_dir, dir.path().join(".toolwire"));

        let err = load(
            dir.path(),
            Some(&json!({"limits": {"maxMessageChars": -1}})),
        )
        .unwrap_err();
        match err {
            Error::InvalidParams { path, .. } => {
                assert_eq!(path, "initializationOptions.limits.maxMessageChars")
            }
            other => panic!("unexpected {other:?}"),
        }
        let err = load(dir.path(), Some(&json!({"sizeUnit": "words"}))).unwrap_err();
        assert!(
            matches!(err, Error::InvalidParams { ref path, .. } if path == "initializationOptions.sizeUnit"),
            "{err:?}"
        );
        let err = load(dir.path(), Some(&json!({"abortmode": "discard"}))).unwrap_err();
        assert!(err.to_string().contains("abortmode"), "{err}");
    }

    fn file_error(toml: &str) -> (String, String) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), toml).unwrap();
        match load(dir.path(), Some(&json!({"limits": {"previewChars": 7}}))).unwrap_err() {
            Error::InvalidParams { path, message } => {
                let file = dir.path().join(CONFIG_FILE).display().to_string();
                assert!(message.starts_with(&file), "{message}");
                (path, message[file.len()..].to_owned())
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn an_unknown_key_gets_suggestions_in_the_files_style() {
        // snake_case, as the docs write toolwire.toml: snake_case suggestions.
        let (_, message) = file_error("[limits]\npreview_charz = 3\n");
        assert!(
            message.ends_with(
                "unknown field `preview_charz`, expected one of `max_result_chars`, `max_message_chars`, `preview_chars`"
            ),
            "{message}"
        );
        // A key written in camelCase keeps camelCase suggestions.
        let (_, message) = file_error("[limits]\npreviewCharz = 3\n");
        assert!(
            message
                .ends_with("expected one of `maxResultChars`, `maxMessageChars`, `previewChars`"),
            "{message}"
        );
        // Values are spelled one way in every layer: never rewritten.
        let (_, message) = file_error("preview_mode = \"tail\"\n");
        assert!(message.contains("`headTail`"), "{message}");
        // Each suggestion, pasted as written, is accepted.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[limits]\nmax_result_chars = 1\nmax_message_chars = 2\npreview_chars = 3\n",
        )
        .unwrap();
        assert_eq!(load(dir.path(), None).unwrap().limits.preview_chars, 3);
    }

    #[test]
    fn a_bad_key_in_the_file_is_named_as_the_file_spells_it_with_its_line() {
        let (path, message) = file_error("durability = \"none\"\n\n[limits]\nbogus_key = 1\n");
        assert_eq!(path, "toolwire.toml:limits.bogus_key");
        assert!(
            message.starts_with(":4: `limits.bogus_key`: unknown field"),
            "{message}"
        );

        let (path, message) = file_error("[limits]\nmaxResultChars = -1\n");
        assert_eq!(path, "toolwire.toml:limits.maxResultChars");
        assert!(message.starts_with(":2: "), "{message}");

        let (path, message) = file_error("exempt_tools = [\"Read\",\n  3]\n");
        assert_eq!(path, "toolwire.toml:exempt_tools[1]");
        assert!(message.starts_with(":2: "), "{message}");

        let (path, message) = file_error("abort_mode = \"synthetic\"\nsize_unit = \n");
        assert_eq!(path, "toolwire.toml");
        assert!(message.starts_with(":2: "), "{message}");
    }

    #[test]
    fn tool_settings_keep_tool_names_and_layer_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "preview_mode = \"headTail\"\n[tools.run_tests]\nmax_result_chars = 100\npreview_mode = \"head\"\n[tools.Read]\nmax_result_chars = \"never\"\n",
        )
        .unwrap();
        let eff = load(
            dir.path(),
            Some(&json!({"tools": {"run_tests": {"maxResultChars": null}, "Bash": {"previewMode": "headTail"}}})),
        )
        .unwrap();
        assert_eq!(eff.preview_mode, PreviewMode::HeadTail);
        let tool = |name: &str| eff.tools.get(name).cloned().unwrap_or_default();
        assert_eq!(tool("run_tests").max_result_chars, Some(None));
        assert_eq!(tool("run_tests").preview_mode, Some(PreviewMode::Head));
        assert_eq!(tool("Read").max_result_chars, Some(None));
        assert_eq!(tool("Bash").max_result_chars, None);
        let limits = Limits::default();
        let policy = |name| ToolPolicy::resolve(&eff.tools, Some(name), &limits, eff.preview_mode);
        assert_eq!(policy("run_tests").max_result_chars, None);
        assert_eq!(policy("Bash").max_result_chars, Some(50_000));
        assert_eq!(policy("Bash").preview_mode, PreviewMode::HeadTail);
        assert_eq!(policy("Other").preview_mode, PreviewMode::HeadTail);
        let (path, message) = file_error("[tools.run_tests]\nmax_result_chars = -1\n");
        assert_eq!(path, "toolwire.toml:tools.run_tests.max_result_chars");
        assert!(message.starts_with(":2: "), "{message}");

        for (bad, path) in [
            (
                json!({"tools": {"x": {"maxResultChars": -1}}}),
                "initializationOptions.tools.x.maxResultChars",
            ),
            (
                json!({"tools": {"x": {"maxResultChars": "always"}}}),
                "initializationOptions.tools.x.maxResultChars",
            ),
            (
                json!({"tools": {"x": {"previewMode": "tail"}}}),
                "initializationOptions.tools.x.previewMode",
            ),
            (
                json!({"tools": {"x": {"previewChars": 5}}}),
                "initializationOptions.tools.x.previewChars",
            ),
            (
                json!({"previewMode": "middle"}),
                "initializationOptions.previewMode",
            ),
        ] {
            match load(dir.path(), Some(&bad)).unwrap_err() {
                Error::InvalidParams { path: got, .. } => assert_eq!(got, path, "{bad}"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
