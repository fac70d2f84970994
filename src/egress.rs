//! How toolwire's outbound connections leave the machine: through the
//! forward proxy the environment names, trusting the certificates the
//! operating system and the user trust (PROTOCOL.md 12.2).
//!
//! Behind a company's egress proxy (`HTTPS_PROXY`) and a TLS-inspecting
//! one (the company's CA in the system store or `SSL_CERT_FILE`), the
//! agents and the official SDKs work; so must the proxy's upstream client
//! and the object-storage client, both on reqwest.
//!
//! - **Proxies**: `https_proxy`/`HTTPS_PROXY`, `http_proxy`/`HTTP_PROXY`,
//!   `all_proxy`/`ALL_PROXY` (for either scheme when the scheme's own is
//!   unset) and `no_proxy`/`NO_PROXY`, lower case first as curl reads
//!   them. Loopback (`localhost`, 127.0.0.0/8, ::1) is never proxied. They
//!   are read and checked here, not left to reqwest's reading of the
//!   environment, which skips a URL it cannot parse without a word: a bad
//!   one is a configuration error naming its variable.
//! - **Certificates**: reqwest's built-in web PKI roots, the operating
//!   system's store (reqwest's `rustls-tls-native-roots`, through
//!   `rustls-native-certs`, which reads `SSL_CERT_FILE` and `SSL_CERT_DIR`
//!   in place of the system store when set, as OpenSSL does) and
//!   `[proxy] ca_file`. An unreadable `SSL_CERT_FILE`/`SSL_CERT_DIR` or
//!   `ca_file` is a configuration error naming it.
//!
//! The settings are the process's: the environment is, and `[proxy]` is
//! read once at start ([`configure`]); every client built afterwards takes
//! [`current`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What `toolwire.toml` says about outbound connections (`[proxy]
/// system_proxy`, `[proxy] ca_file`, resolved against the workspace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub system_proxy: bool,
    pub ca_file: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            system_proxy: true,
            ca_file: None,
        }
    }
}

/// Never sent through a proxy, whatever `NO_PROXY` says: the proxy and its
/// tests reach local services, and a forward proxy cannot reach our
/// loopback anyway.
const LOOPBACK: &str = "localhost,127.0.0.0/8,::1";

/// One proxy the environment names.
#[derive(Debug, Clone)]
struct ProxyVar {
    /// The variable it came from, for messages.
    var: &'static str,
    /// With its credentials, if any (sent as `Proxy-Authorization`).
    url: url::Url,
}

/// The outbound settings in force: proxies, extra trusted certificates.
#[derive(Debug)]
pub struct Egress {
    http: Option<ProxyVar>,
    https: Option<ProxyVar>,
    /// `NO_PROXY` with loopback added.
    no_proxy: String,
    /// `[proxy] ca_file`'s certificates, DER.
    extra_roots: Vec<Vec<u8>>,
    ca_file: Option<PathBuf>,
}

static CURRENT: Mutex<Option<Arc<Egress>>> = Mutex::new(None);

/// Read the environment and `settings` and make them the process's.
pub fn configure(settings: &Settings) -> Result<Arc<Egress>, String> {
    let egress = Arc::new(Egress::from_env(settings)?);
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(egress.clone());
    Ok(egress)
}

/// The process's settings: those [`configure`] made, or the environment
/// read with the defaults.
pub fn current() -> Result<Arc<Egress>, String> {
    let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(egress) = current.as_ref() {
        return Ok(egress.clone());
    }
    let egress = Arc::new(Egress::from_env(&Settings::default())?);
    *current = Some(egress.clone());
    Ok(egress)
}

/// The value of the first of `names` that is set and not empty.
fn first_env(names: &[&'static str]) -> Option<(&'static str, String)> {
    names.iter().find_map(|name| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (*name, v))
    })
}

/// `url` as a message may show it: scheme, host and port, no credentials,
/// no path.
fn shown(url: &url::Url) -> String {
    match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{}://{host}:{port}", url.scheme()),
        (Some(host), None) => format!("{}://{host}", url.scheme()),
        _ => format!("{}://", url.scheme()),
    }
}

fn parse_proxy(var: &'static str, value: &str) -> Result<ProxyVar, String> {
    let value = value.trim();
    // curl takes a proxy without a scheme as http://.
    let text = if value.contains("://") {
        value.to_owned()
    } else {
        format!("http://{value}")
    };
    // The value may hold a password: the message shows what it is not,
    // never the value itself.
    let url = url::Url::parse(&text)
        .map_err(|err| format!("{var} is not a proxy URL ({err}); expected http://host:port"))?;
    match url.scheme() {
        "http" | "https" => {}
        "socks4" | "socks4a" | "socks5" | "socks5h" => {
            return Err(format!(
                "{var} names a SOCKS proxy ({}), which toolwire does not speak; give an HTTP proxy (http://host:port) or set [proxy] system_proxy = false",
                shown(&url)
            ));
        }
        other => {
            return Err(format!(
                "{var} has the scheme {other:?}; expected an HTTP proxy (http://host:port or https://host:port)"
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{var} names no host; expected http://host:port"));
    }
    Ok(ProxyVar { var, url })
}

/// The certificates of a PEM file, checked one by one as rustls will take
/// them.
fn read_ca_file(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let named = |why: String| format!("[proxy] ca_file {}: {why}", path.display());
    let bytes = std::fs::read(path).map_err(|err| named(format!("cannot read it: {err}")))?;
    let mut store = rustls::RootCertStore::empty();
    let mut certs = Vec::new();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|err| named(format!("not PEM certificates: {err}")))?;
        store
            .add(cert.clone())
            .map_err(|err| named(format!("a certificate rustls cannot use: {err}")))?;
        certs.push(cert.to_vec());
    }
    if certs.is_empty() {
        return Err(named(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

/// When `SSL_CERT_FILE` or `SSL_CERT_DIR` is set, what it names must be
/// readable and hold certificates: it replaces the system store.
fn check_ssl_cert_env() -> Result<(), String> {
    let file = first_env(&["SSL_CERT_FILE"]);
    let dir = first_env(&["SSL_CERT_DIR"]);
    if file.is_none() && dir.is_none() {
        return Ok(());
    }
    let named = || {
        [file.as_ref(), dir.as_ref()]
            .into_iter()
            .flatten()
            .map(|(var, value)| format!("{var}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let loaded = rustls_native_certs::load_native_certs();
    if let Some(err) = loaded.errors.first() {
        return Err(format!("{}: {err}", named()));
    }
    if loaded.certs.is_empty() {
        return Err(format!("{}: no certificate found there", named()));
    }
    Ok(())
}

impl Egress {
    pub fn from_env(settings: &Settings) -> Result<Egress, String> {
        check_ssl_cert_env()?;
        let extra_roots = match &settings.ca_file {
            Some(path) => read_ca_file(path)?,
            None => Vec::new(),
        };
        let (mut http, mut https, mut no_proxy) = (None, None, LOOPBACK.to_owned());
        if settings.system_proxy {
            let all = first_env(&["all_proxy", "ALL_PROXY"])
                .map(|(var, value)| parse_proxy(var, &value))
                .transpose()?;
            http = first_env(&["http_proxy", "HTTP_PROXY"])
                .map(|(var, value)| parse_proxy(var, &value))
                .transpose()?
                .or_else(|| all.clone());
            https = first_env(&["https_proxy", "HTTPS_PROXY"])
                .map(|(var, value)| parse_proxy(var, &value))
                .transpose()?
                .or(all);
            if let Some((_, list)) = first_env(&["no_proxy", "NO_PROXY"]) {
                no_proxy = format!("{list},{LOOPBACK}");
            }
        }
        Ok(Egress {
            http,
            https,
            no_proxy,
            extra_roots,
            ca_file: settings.ca_file.clone(),
        })
    }

    /// `builder` with these proxies (and no other: reqwest's own reading
    /// of the environment is off) and the extra certificates.
    pub fn reqwest(
        &self,
        builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, String> {
        let mut builder = builder.no_proxy();
        let no_proxy = || reqwest::NoProxy::from_string(&self.no_proxy);
        let bad = |var: &str, err: reqwest::Error| format!("{var}: {err}");
        if let Some(p) = &self.http {
            let proxy = reqwest::Proxy::http(p.url.as_str()).map_err(|e| bad(p.var, e))?;
            builder = builder.proxy(proxy.no_proxy(no_proxy()));
        }
        if let Some(p) = &self.https {
            let proxy = reqwest::Proxy::https(p.url.as_str()).map_err(|e| bad(p.var, e))?;
            builder = builder.proxy(proxy.no_proxy(no_proxy()));
        }
        for der in &self.extra_roots {
            let cert = reqwest::Certificate::from_der(der).map_err(|err| {
                let file = self.ca_file.as_deref().unwrap_or(Path::new("?"));
                format!("[proxy] ca_file {}: {err}", file.display())
            })?;
            builder = builder.add_root_certificate(cert);
        }
        Ok(builder)
    }

    /// `options` for object_store's client with the same proxy and
    /// certificates. Object storage is reached over HTTPS, so its proxy is
    /// the HTTPS one (else the HTTP one); object_store takes one proxy for
    /// every request.
    pub fn object_store(
        &self,
        mut options: object_store::ClientOptions,
    ) -> Result<object_store::ClientOptions, String> {
        match self.https.as_ref().or(self.http.as_ref()) {
            Some(p) => {
                options = options
                    .with_proxy_url(p.url.as_str())
                    .with_proxy_excludes(&self.no_proxy);
            }
            None => {
                // object_store's reqwest client reads the environment's
                // proxies itself unless given one: a proxy that takes
                // nothing turns that off, so `system_proxy = false` holds.
                // (`*` excludes every name, the two ranges every address.)
                options = options
                    .with_proxy_url("http://127.0.0.1:9")
                    .with_proxy_excludes("*,0.0.0.0/0,::/0");
            }
        }
        for der in &self.extra_roots {
            let cert = object_store::Certificate::from_der(der).map_err(|err| err.to_string())?;
            options = options.with_root_certificate(cert);
        }
        Ok(options)
    }

    /// How a request to `url` leaves: `Some("the proxy http://host:3128
    /// (HTTPS_PROXY)")` when through a proxy, for messages.
    pub fn route(&self, url: &url::Url) -> Option<String> {
        let p = match url.scheme() {
            "https" => self.https.as_ref(),
            _ => self.http.as_ref(),
        }?;
        let uri: http::Uri = url.as_str().parse().ok()?;
        let matcher = hyper_util::client::proxy::matcher::Matcher::builder()
            .http(p.url.as_str())
            .https(p.url.as_str())
            .no(self.no_proxy.as_str())
            .build();
        matcher.intercept(&uri)?;
        Some(format!("the proxy {} ({})", shown(&p.url), p.var))
    }
}

/// Why a connection failed, in words a user can act on, when it is a
/// certificate refused or a proxy that would not open a tunnel; `None`
/// for anything else (the caller shows the error itself).
pub fn failure_reason(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(err);
    while let Some(cause) = next {
        // io::Error hides the error it wraps from `source()`.
        let inner = cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|e| e as &(dyn std::error::Error + 'static));
        for e in [Some(cause), inner].into_iter().flatten() {
            if let Some(tls) = e.downcast_ref::<rustls::Error>() {
                return Some(match tls {
                    rustls::Error::InvalidCertificate(why) => format!(
                        "certificate problem: the server's TLS certificate was refused ({why:?}); if a company proxy or CA signs it, trust that CA through the system store, SSL_CERT_FILE, SSL_CERT_DIR or [proxy] ca_file"
                    ),
                    other => format!("TLS handshake failed: {other}"),
                });
            }
            let text = e.to_string();
            if text.starts_with("tunnel error") {
                let why = e.source().map(|s| format!(" ({s})")).unwrap_or_default();
                return Some(format!(
                    "the forward proxy refused the connection: {text}{why}"
                ));
            }
        }
        next = cause.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_variable_that_is_no_url_is_named_and_its_value_is_not_shown() {
        let err = parse_proxy("HTTPS_PROXY", "http://user:s3cret@[bad").unwrap_err();
        assert!(err.starts_with("HTTPS_PROXY is not a proxy URL"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        let err = parse_proxy("ALL_PROXY", "socks5://user:s3cret@host:1080").unwrap_err();
        assert!(
            err.contains("ALL_PROXY names a SOCKS proxy (socks5://host:1080)"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        let err = parse_proxy("http_proxy", "ftp://host:21").unwrap_err();
        assert!(
            err.starts_with("http_proxy has the scheme \"ftp\""),
            "{err}"
        );
    }

    #[test]
    fn a_proxy_without_a_scheme_is_http_as_curl_takes_it() {
        let p = parse_proxy("HTTPS_PROXY", "proxy.corp:3128").unwrap();
        assert_eq!(shown(&p.url), "http://proxy.corp:3128");
    }

    #[test]
    fn loopback_never_goes_through_the_proxy_and_no_proxy_is_honoured() {
        let egress = Egress {
            http: Some(parse_proxy("HTTP_PROXY", "http://proxy:3128").unwrap()),
            https: Some(parse_proxy("HTTPS_PROXY", "http://u:p@proxy:3128").unwrap()),
            no_proxy: format!("internal.corp,{LOOPBACK}"),
            extra_roots: Vec::new(),
            ca_file: None,
        };
        let route = |u: &str| egress.route(&url::Url::parse(u).unwrap());
        assert_eq!(
            route("https://api.anthropic.com/v1/messages").as_deref(),
            Some("the proxy http://proxy:3128 (HTTPS_PROXY)")
        );
        assert_eq!(route("https://models.internal.corp/v1"), None);
        assert_eq!(route("http://127.0.0.1:8080/"), None);
        assert_eq!(route("http://localhost:8080/"), None);
        assert_eq!(route("http://[::1]:8080/"), None);
    }

    #[test]
    fn object_storage_takes_the_https_proxy_or_none_at_all() {
        use object_store::{ClientConfigKey, ClientOptions};
        let mut egress = Egress {
            http: Some(parse_proxy("HTTP_PROXY", "http://plain:3128").unwrap()),
            https: Some(parse_proxy("HTTPS_PROXY", "http://u:p@secure:3128").unwrap()),
            no_proxy: format!("internal.corp,{LOOPBACK}"),
            extra_roots: Vec::new(),
            ca_file: None,
        };
        let options = egress.object_store(ClientOptions::new()).unwrap();
        let get = |o: &ClientOptions, key| o.get_config_value(&key).unwrap_or_default();
        assert_eq!(
            get(&options, ClientConfigKey::ProxyUrl),
            "http://u:p@secure:3128/"
        );
        assert_eq!(
            get(&options, ClientConfigKey::ProxyExcludes),
            egress.no_proxy
        );
        // No proxy configured (or system_proxy = false): object_store's
        // client must not read the environment's itself.
        egress.http = None;
        egress.https = None;
        let options = egress.object_store(ClientOptions::new()).unwrap();
        assert_eq!(
            get(&options, ClientConfigKey::ProxyExcludes),
            "*,0.0.0.0/0,::/0"
        );
    }

    #[test]
    fn an_unreadable_or_empty_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = read_ca_file(&missing).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "[proxy] ca_file {}: cannot read it",
                missing.display()
            )),
            "{err}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = read_ca_file(&empty).unwrap_err();
        assert!(err.contains("holds no PEM certificate"), "{err}");
    }
}
