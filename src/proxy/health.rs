//! `GET /healthz` and `GET /readyz` (PROTOCOL.md 12.3): what a load
//! balancer or an orchestrator asks before sending traffic. Both answer
//! without a token and say nothing about sessions.
//!
//! `/healthz` is the process: if it answers, the proxy is up. `/readyz`
//! is whether a request would get through now: the store answers (a query
//! on PostgreSQL; the data directory on the local store) and every
//! configured upstream's host name resolves. Each check is bounded in
//! time, so a hung database makes the proxy unready rather than the
//! probe hang.

use std::path::Path;
use std::time::Duration;

use http::{Response, StatusCode};

use super::upstream::ProxyBody;
use crate::config::Upstreams;
use crate::store::Storage;

/// How long one check may take before it counts as failed.
const CHECK_LIMIT: Duration = Duration::from_secs(2);

/// `/healthz` and `/readyz`, the paths that answer without a token.
pub fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz")
}

pub fn healthz() -> Response<ProxyBody> {
    text(StatusCode::OK, "ok\n".to_owned())
}

/// 200 when every check passes, else 503; the body names each check and
/// what failed (host names and the store's error, never a credential:
/// the store's errors name no password, and upstream URLs are not shown).
pub async fn readyz(
    storage: &Storage,
    data_dir: &Path,
    upstreams: &Upstreams,
) -> Response<ProxyBody> {
    let mut failed = Vec::new();
    let mut report = String::new();
    let store = match &storage.shared {
        Some(shared) => bounded("store", shared.ping())
            .await
            .map(|()| "postgres answers".to_owned()),
        None => local_store(data_dir),
    };
    record(&mut report, &mut failed, "store", store);
    for (name, url) in [
        ("anthropic", &upstreams.anthropic),
        ("openai", &upstreams.openai),
        ("gemini", &upstreams.gemini),
    ] {
        record(&mut report, &mut failed, name, resolves(url).await);
    }
    let status = if failed.is_empty() {
        StatusCode::OK
    } else {
        tracing::info!(failed = ?failed, "not ready");
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, report)
}

fn record(
    report: &mut String,
    failed: &mut Vec<&'static str>,
    name: &'static str,
    outcome: Result<String, String>,
) {
    let line = match outcome {
        Ok(ok) => format!("{name}: ok ({ok})\n"),
        Err(err) => {
            failed.push(name);
            format!("{name}: failed ({err})\n")
        }
    };
    report.push_str(&line);
}

async fn bounded<E: std::fmt::Display>(
    what: &str,
    check: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), String> {
    match tokio::time::timeout(CHECK_LIMIT, check).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!(
            "{what}: no answer within {} s",
            CHECK_LIMIT.as_secs()
        )),
    }
}

/// The local store is the data directory: ready when it is a directory,
/// or when it does not exist yet (the first session makes it).
fn local_store(data_dir: &Path) -> Result<String, String> {
    match std::fs::metadata(data_dir) {
        Ok(meta) if meta.is_dir() => Ok("data directory present".to_owned()),
        Ok(_) => Err(format!("{} is not a directory", data_dir.display())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            Ok("data directory not made yet".to_owned())
        }
        Err(err) => Err(format!("{}: {err}", data_dir.display())),
    }
}

/// Whether an upstream's host name resolves (an IP address always does).
async fn resolves(base: &str) -> Result<String, String> {
    let url = url::Url::parse(base).map_err(|err| format!("not a URL: {err}"))?;
    let host = url
        .host_str()
        .ok_or_else(|| "the URL has no host".to_owned())?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let lookup = async {
        tokio::net::lookup_host((host.as_str(), port))
            .await
            .and_then(|mut addrs| {
                addrs
                    .next()
                    .map(|_| ())
                    .ok_or_else(|| std::io::Error::other("no address"))
            })
    };
    bounded(&host, lookup)
        .await
        .map(|()| format!("{host} resolves"))
        .map_err(|err| format!("{host}: {err}"))
}

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    super::answer(status, "text/plain; charset=utf-8", body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_address_resolves_and_a_bad_url_does_not() {
        assert!(resolves("http://127.0.0.1:9").await.is_ok());
        assert!(resolves("http://[::1]:9").await.is_ok());
        assert!(resolves("not a url").await.is_err());
    }

    #[test]
    fn a_data_directory_that_is_a_file_is_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        assert!(local_store(dir.path()).is_ok());
        assert!(local_store(&dir.path().join("later")).is_ok());
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(local_store(&file).is_err());
    }
}
