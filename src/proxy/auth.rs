//! Tenants (PROTOCOL.md 12.3): who a request is from, by the token it
//! presents, and the session ids that are that tenant's own.
//!
//! A token comes in `x-toolwire-token: <token>` or as the first path
//! segment of the base URL, `/t/<token>/v1/messages` (many agents let
//! their user set a base URL and nothing else); the segment is taken off
//! before routing, and neither the header nor the segment is ever
//! forwarded or logged. `toolwire.toml` holds only each token's SHA-256:
//! the presented token is hashed, and its digest compared with every
//! tenant's in constant time (`subtle`), all of them every time, so
//! neither the comparison nor which tenant matched shows in the timing.
//!
//! A token is 1 to [`MAX_TOKEN_LEN`] characters of `A-Z a-z 0-9 - . _ ~`
//! (URL-safe, so a path can carry it as it is). Anything else (percent-
//! encoded, longer, not UTF-8, empty) is malformed and answered like a
//! wrong token: 401, forwarded nowhere.
//!
//! Each token is a tenant, and a tenant's session ids are its name, a
//! `.`, and the id the client chose or the proxy derived, on every store
//! (the session's directory and saved outputs, its rows on PostgreSQL, its
//! objects in a bucket, its usage records). A tenant name has no `.`, so
//! no tenant's id can be spelled as another's, whatever id a client picks.

use std::sync::Arc;

use http::HeaderMap;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

use crate::config::ProxyConfig;
use crate::protocol::SessionId;

/// The request header that carries a tenant's token.
pub const TOKEN_HEADER: &str = "x-toolwire-token";

/// The longest token accepted, in bytes.
pub const MAX_TOKEN_LEN: usize = 256;

/// The longest tenant name (it is part of every session id of the
/// tenant, which has 128 characters at most).
const MAX_NAME_LEN: usize = 32;

type Digest = [u8; 32];

/// The tenants of `[proxy.auth]` and the metrics token.
pub struct Tenants {
    tokens: Vec<(Arc<str>, Digest)>,
    metrics: Option<Digest>,
    metrics_by_tenant: bool,
}

/// Who a request is from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No `[proxy.auth]`: the proxy serves whoever reaches it (loopback).
    Anyone,
    Tenant(Arc<str>),
}

/// What the request presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presented {
    /// The token, if one was presented, or why it cannot be one.
    pub token: Option<Result<String, &'static str>>,
    /// The request path with a `/t/<token>` prefix taken off.
    pub path: String,
}

impl Tenants {
    /// Read and check `[proxy.auth]` and `[proxy] metrics_token`; errors
    /// name the key.
    pub fn new(config: &ProxyConfig) -> Result<Tenants, String> {
        let mut tokens: Vec<(Arc<str>, Digest)> = Vec::new();
        for (k, token) in config
            .auth
            .iter()
            .flat_map(|auth| auth.tokens.iter())
            .enumerate()
        {
            let key = format!("proxy.auth.tokens[{k}]");
            let name = &token.name;
            let good_name = (1..=MAX_NAME_LEN).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
            if !good_name {
                return Err(format!(
                    "{key}.name: {name:?} must be 1-{MAX_NAME_LEN} characters of [A-Za-z0-9_-]"
                ));
            }
            let digest = hex_digest(&token.sha256).map_err(|err| format!("{key}.sha256: {err}"))?;
            if tokens.iter().any(|(n, _)| **n == **name) {
                return Err(format!("{key}.name: tenant {name:?} is named twice"));
            }
            if tokens.iter().any(|(_, d)| *d == digest) {
                return Err(format!(
                    "{key}.sha256: the same token is given to two tenants"
                ));
            }
            tokens.push((Arc::from(name.as_str()), digest));
        }
        if config.auth.is_some() && tokens.is_empty() {
            return Err("proxy.auth.tokens: [proxy.auth] has no tokens".to_owned());
        }
        let metrics = match &config.metrics_token {
            Some(hex) => Some(hex_digest(hex).map_err(|err| format!("proxy.metricsToken: {err}"))?),
            None => None,
        };
        Ok(Tenants {
            tokens,
            metrics,
            metrics_by_tenant: config.metrics_by_tenant,
        })
    }

    /// Whether requests need a tenant's token.
    pub fn required(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The caller a request's token makes it; `None`: refuse it (401).
    pub fn caller(&self, token: Option<&Result<String, &'static str>>) -> Option<Caller> {
        match token {
            None if !self.required() => Some(Caller::Anyone),
            Some(Ok(token)) if self.required() => self.tenant(token).map(Caller::Tenant),
            // A token where none is asked for is a client that expects
            // tenants: telling it "no such tenant" beats ignoring it.
            _ => None,
        }
    }

    /// The tenant whose token this is. Every tenant's digest is compared,
    /// whichever matches.
    fn tenant(&self, token: &str) -> Option<Arc<str>> {
        let presented: Digest = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (name, digest) in &self.tokens {
            if bool::from(digest.ct_eq(&presented)) {
                found = Some(name.clone());
            }
        }
        found
    }

    /// Whether a request for `/metrics` may read them: with the metrics
    /// token (also as `Authorization: Bearer`, as Prometheus sends it), or
    /// a tenant's token unless the series are by tenant (one tenant would
    /// learn of another's), or anyone when neither is configured.
    pub fn may_read_metrics(&self, presented: &Presented, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| checked(t.as_bytes()));
        let tokens = [presented.token.as_ref(), bearer.as_ref()];
        if let Some(metrics) = &self.metrics {
            let mut ok = false;
            for token in tokens.into_iter().flatten().flatten() {
                let digest: Digest = Sha256::digest(token.as_bytes()).into();
                ok |= bool::from(digest.ct_eq(metrics));
            }
            if ok {
                return true;
            }
        }
        if !self.required() {
            return self.metrics.is_none() && presented.token.is_none();
        }
        !self.metrics_by_tenant
            && matches!(&presented.token, Some(Ok(token)) if self.tenant(token).is_some())
    }
}

/// The token a request presents, and its path without a `/t/<token>`
/// prefix. When both the header and the path carry one, they must be the
/// same token.
pub fn presented(path: &str, headers: &HeaderMap) -> Presented {
    let (in_path, rest) = match path.strip_prefix("/t/") {
        Some(after) => {
            let (segment, rest) = match after.find('/') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, "/"),
            };
            (Some(checked(segment.as_bytes())), rest.to_owned())
        }
        None => (None, path.to_owned()),
    };
    let mut values = headers.get_all(TOKEN_HEADER).iter();
    let in_header = match (values.next(), values.next()) {
        (None, _) => None,
        (Some(value), None) => Some(checked(value.as_bytes())),
        (Some(_), Some(_)) => Some(Err("x-toolwire-token is given more than once")),
    };
    let token = match (in_path, in_header) {
        (Some(Ok(a)), Some(Ok(b))) if a != b => {
            Some(Err("the path and x-toolwire-token carry different tokens"))
        }
        (Some(Err(err)), _) | (_, Some(Err(err))) => Some(Err(err)),
        (Some(token), _) | (None, Some(token)) => Some(token),
        (None, None) => None,
    };
    Presented { token, path: rest }
}

/// A path as it may be logged or echoed: the segment after every `t`
/// segment shown as `<token>`, wherever a client put it.
pub fn loggable_path(path: &str) -> String {
    let mut out = Vec::new();
    let mut after_t = false;
    for segment in path.split('/') {
        out.push(if after_t { "<token>" } else { segment });
        after_t = segment == "t";
    }
    out.join("/")
}

/// A token as presented, if it is one a tenant can have.
fn checked(bytes: &[u8]) -> Result<String, &'static str> {
    if bytes.is_empty() {
        return Err("the token is empty");
    }
    if bytes.len() > MAX_TOKEN_LEN {
        return Err("the token is too long");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err("the token has a character other than A-Z a-z 0-9 - . _ ~");
    }
    // All ASCII, so UTF-8.
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn hex_digest(hex: &str) -> Result<Digest, String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{} characters given; the hex SHA-256 of the token is 64 hex digits (`printf %s TOKEN | sha256sum`)",
            hex.len()
        ));
    }
    let mut out = [0u8; 32];
    for (k, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * k..2 * k + 2], 16)
            .map_err(|err| format!("not hex: {err}"))?;
    }
    Ok(out)
}

impl Caller {
    pub fn tenant(&self) -> Option<&Arc<str>> {
        match self {
            Caller::Anyone => None,
            Caller::Tenant(name) => Some(name),
        }
    }

    /// The session id `id` is for this caller on the stores: the tenant's
    /// name and a `.` before it.
    pub fn scoped(&self, id: SessionId) -> Result<SessionId, String> {
        match self {
            Caller::Anyone => Ok(id),
            Caller::Tenant(name) => {
                let room = 128 - name.len() - 1;
                if id.as_str().len() > room {
                    return Err(format!(
                        "session id {:?} is longer than the {room} characters a session of tenant {name:?} can have",
                        id.as_str()
                    ));
                }
                SessionId::try_from(format!("{name}.{}", id.as_str()))
            }
        }
    }

    /// The id the caller knows for a scoped session id (the prefix off).
    pub fn unscoped<'a>(&self, id: &'a SessionId) -> &'a str {
        match self {
            Caller::Anyone => id.as_str(),
            Caller::Tenant(name) => id
                .as_str()
                .strip_prefix(name.as_ref())
                .and_then(|rest| rest.strip_prefix('.'))
                .unwrap_or(id.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ProxyAuth, TenantToken};

    fn sha(token: &str) -> String {
        Sha256::digest(token.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn tenants() -> Tenants {
        let config = ProxyConfig {
            auth: Some(ProxyAuth {
                tokens: vec![
                    TenantToken {
                        name: "alice".into(),
                        sha256: sha("tok-a"),
                    },
                    TenantToken {
                        name: "bob".into(),
                        sha256: sha("tok-b").to_uppercase(),
                    },
                ],
            }),
            ..ProxyConfig::default()
        };
        Tenants::new(&config).unwrap()
    }

    fn token_of(path: &str, header: Option<&[u8]>) -> Presented {
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            headers.insert(TOKEN_HEADER, http::HeaderValue::from_bytes(h).unwrap());
        }
        presented(path, &headers)
    }

    #[test]
    fn a_token_in_the_header_or_the_path_names_its_tenant() {
        let t = tenants();
        let p = token_of("/t/tok-a/v1/messages", None);
        assert_eq!(p.path, "/v1/messages");
        assert_eq!(
            t.caller(p.token.as_ref()),
            Some(Caller::Tenant("alice".into()))
        );
        let p = token_of("/v1/messages", Some(b"tok-b"));
        assert_eq!(
            t.caller(p.token.as_ref()),
            Some(Caller::Tenant("bob".into()))
        );
        let p = token_of("/t/tok-a", None);
        assert_eq!(p.path, "/");
    }

    #[test]
    fn missing_wrong_and_malformed_tokens_are_refused() {
        let t = tenants();
        let long = format!("/t/{}/v1/messages", "a".repeat(MAX_TOKEN_LEN + 1));
        for (path, header) in [
            ("/v1/messages", None),
            ("/t/tok-c/v1/messages", None),
            ("/t/tok%2Da/v1/messages", None),
            ("/t//v1/messages", None),
            (long.as_str(), None),
            ("/v1/messages", Some(&b"tok-a\xff"[..])),
            ("/v1/messages", Some(&b"tok a"[..])),
            ("/t/tok-a/v1/messages", Some(&b"tok-b"[..])),
        ] {
            let p = token_of(path, header);
            assert_eq!(t.caller(p.token.as_ref()), None, "{path} {header:?}");
        }
        // Without tenants, no token is asked for and none is taken.
        let open = Tenants::new(&ProxyConfig::default()).unwrap();
        assert_eq!(open.caller(None), Some(Caller::Anyone));
        let p = token_of("/t/tok-a/v1/messages", None);
        assert_eq!(open.caller(p.token.as_ref()), None);
    }

    #[test]
    fn a_logged_path_shows_no_token() {
        assert_eq!(loggable_path("/x/t/secret/v1"), "/x/t/<token>/v1");
        assert_eq!(loggable_path("/v1/messages"), "/v1/messages");
        assert_eq!(loggable_path("/t/secret"), "/t/<token>");
    }

    #[test]
    fn bad_settings_name_their_key() {
        let mut config = ProxyConfig {
            auth: Some(ProxyAuth {
                tokens: vec![TenantToken {
                    name: "a.b".into(),
                    sha256: sha("x"),
                }],
            }),
            ..ProxyConfig::default()
        };
        let err = Tenants::new(&config).err().unwrap();
        assert!(err.starts_with("proxy.auth.tokens[0].name"), "{err}");
        config.auth = Some(ProxyAuth {
            tokens: vec![TenantToken {
                name: "a".into(),
                sha256: "secret".into(),
            }],
        });
        let err = Tenants::new(&config).err().unwrap();
        assert!(err.starts_with("proxy.auth.tokens[0].sha256"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        config.auth = None;
        config.metrics_token = Some("x".into());
        let err = Tenants::new(&config).err().unwrap();
        assert!(err.starts_with("proxy.metricsToken"), "{err}");
    }

    #[test]
    fn session_ids_are_scoped_so_no_tenant_can_spell_another_s() {
        let a = Caller::Tenant("a".into());
        let ab = Caller::Tenant("a-b".into());
        let id = |s: &str| SessionId::try_from(s.to_owned()).unwrap();
        let one = a.scoped(id("b.x")).unwrap();
        let two = ab.scoped(id("x")).unwrap();
        assert_ne!(one, two);
        assert_eq!(one.as_str(), "a.b.x");
        assert_eq!(a.unscoped(&one), "b.x");
        assert!(a.scoped(id(&"x".repeat(127))).is_err());
        assert_eq!(Caller::Anyone.scoped(id("x")).unwrap(), id("x"));
    }

    #[test]
    fn the_metrics_token_reads_metrics_and_nothing_else() {
        let mut config = ProxyConfig {
            metrics_token: Some(sha("scrape")),
            ..ProxyConfig::default()
        };
        let t = Tenants::new(&config).unwrap();
        let mut headers = HeaderMap::new();
        let p = presented("/metrics", &headers);
        assert!(!t.may_read_metrics(&p, &headers));
        headers.insert(
            "authorization",
            http::HeaderValue::from_static("Bearer scrape"),
        );
        assert!(t.may_read_metrics(&p, &headers));
        config.auth = tenants_config();
        config.metrics_by_tenant = true;
        let t = Tenants::new(&config).unwrap();
        let p = presented("/t/tok-a/metrics", &HeaderMap::new());
        assert!(
            !t.may_read_metrics(&p, &HeaderMap::new()),
            "by tenant: not a tenant's"
        );
        assert_eq!(
            t.caller(
                presented("/t/scrape/v1/messages", &HeaderMap::new())
                    .token
                    .as_ref()
            ),
            None
        );
    }

    fn tenants_config() -> Option<ProxyAuth> {
        Some(ProxyAuth {
            tokens: vec![TenantToken {
                name: "alice".into(),
                sha256: sha("tok-a"),
            }],
        })
    }
}
