//! Forwarding to the provider and streaming its answer back.
//!
//! `reqwest` (on hyper, with rustls) keeps a pool of connections per
//! upstream, speaks HTTP/2 where the upstream offers it (ALPN) and HTTP/1.1
//! otherwise. It follows no redirect: a request leaves only for the
//! configured upstream, through the forward proxy the environment names
//! and trusting the certificates the system and the user trust
//! ([`crate::egress`]).

use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::header::{self, HeaderName};
use http::request::Parts;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;

use super::metrics::Observer;
use super::route::Provider;
use super::stats::{self, Record};
use super::usage::UsageReader;
use crate::config::Upstreams;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body the proxy sends: streamed, never collected.
pub type ProxyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// The configured upstreams and the client that reaches them.
pub struct Upstream {
    client: reqwest::Client,
    egress: std::sync::Arc<crate::egress::Egress>,
    anthropic: url::Url,
    openai: url::Url,
    gemini: url::Url,
}

/// Headers of one hop only (RFC 9110 7.6.1), never forwarded either way;
/// `host` and `content-length` are set anew for the forwarded body.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

impl Upstream {
    pub fn new(
        upstreams: &Upstreams,
        egress: std::sync::Arc<crate::egress::Egress>,
    ) -> Result<Upstream, String> {
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(30))
            .tcp_nodelay(true);
        let client = egress
            .reqwest(builder)?
            .build()
            .map_err(|err| format!("cannot build the HTTP client: {}", error_chain(&err)))?;
        Ok(Upstream {
            client,
            egress,
            anthropic: base_url("anthropic", &upstreams.anthropic)?,
            openai: base_url("openai", &upstreams.openai)?,
            gemini: base_url("gemini", &upstreams.gemini)?,
        })
    }

    pub(super) fn base(&self, provider: Provider) -> &url::Url {
        match provider {
            Provider::Anthropic => &self.anthropic,
            Provider::OpenAi => &self.openai,
            Provider::Gemini => &self.gemini,
        }
    }

    /// The upstream URL of a request: the base URL with the request's path
    /// (dot segments resolved, as it was routed) and query appended; never
    /// another host, never outside the base URL's own path (a gateway's
    /// `/gateway/anthropic`).
    fn url(&self, provider: Provider, parts: &Parts) -> Option<url::Url> {
        self.url_of(provider, &parts.uri)
    }

    /// [`Upstream::url`] with `ws://` or `wss://` for `http://` or
    /// `https://`: where a WebSocket of the same path opens.
    pub(super) fn websocket_url(&self, provider: Provider, uri: &http::Uri) -> Option<url::Url> {
        let mut url = self.url_of(provider, uri)?;
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme).ok()?;
        Some(url)
    }

    fn url_of(&self, provider: Provider, uri: &http::Uri) -> Option<url::Url> {
        let base = self.base(provider);
        let base_path = base.path().trim_end_matches('/');
        let mut text = base.as_str().trim_end_matches('/').to_owned();
        text.push_str(&super::route::normalize_path(uri.path())?);
        if let Some(query) = uri.query() {
            text.push('?');
            text.push_str(query);
        }
        let url = url::Url::parse(&text).ok()?;
        let same = url.scheme() == base.scheme()
            && url.host_str() == base.host_str()
            && url.port_or_known_default() == base.port_or_known_default()
            && url
                .path()
                .strip_prefix(base_path)
                .is_some_and(|rest| rest.starts_with('/'));
        same.then_some(url)
    }

    /// Send the request upstream and answer with its response as it comes.
    /// `notes` are toolwire's own response headers; the `ledger`'s record
    /// is completed with the status and usage, appended under its session
    /// directory and counted by its observer.
    pub async fn forward(
        &self,
        provider: Provider,
        parts: Parts,
        body: Bytes,
        notes: HeaderMap,
        ledger: Ledger,
    ) -> Response<ProxyBody> {
        let Ledger {
            mut record,
            session_dir,
            observer,
        } = ledger;
        let Some(url) = self.url(provider, &parts) else {
            observer
                .metrics
                .refused(&observer.labels, super::metrics::ErrorKind::BadRequest);
            return super::error(
                provider,
                StatusCode::BAD_REQUEST,
                "toolwire proxy: the request path does not stay on the configured upstream",
            );
        };
        let mut headers = forwardable(&parts.headers);
        headers.remove(super::conversation::SESSION_HEADER);
        // The tenant's token is the proxy's, never the provider's.
        headers.remove(super::auth::TOKEN_HEADER);
        observer.forwarding(body.len() as u64);
        let sent = self
            .client
            .request(parts.method.clone(), url)
            .headers(headers)
            .body(body)
            .send()
            .await;
        let upstream = match sent {
            Ok(response) => response,
            Err(err) => {
                // The error names the host, never the request's headers.
                // reqwest's error would print the whole URL, and Gemini's
                // `?key=` with it: the URL is left out, the base is shown
                // without credentials; so is the forward proxy's URL. A
                // refused certificate or tunnel is said in words first.
                let err = err.without_url();
                let via = self
                    .egress
                    .route(self.base(provider))
                    .map(|route| format!(" through {route}"))
                    .unwrap_or_default();
                let why = match crate::egress::failure_reason(&err) {
                    Some(reason) => format!("{reason} ({})", error_chain(&err)),
                    None => error_chain(&err),
                };
                let message = format!(
                    "toolwire proxy: the {} upstream {}{via} could not be reached: {why}",
                    provider.name(),
                    shown(self.base(provider)),
                );
                tracing::warn!("{message}");
                record.status = 502;
                let mut response = super::error(provider, StatusCode::BAD_GATEWAY, &message);
                response.headers_mut().extend(notes);
                finish(session_dir.as_deref(), record, None, &observer, false);
                return response;
            }
        };
        record.status = upstream.status().as_u16();
        let header_text = |name: HeaderName| {
            upstream
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let reader = UsageReader::new(
            provider,
            &header_text(header::CONTENT_TYPE),
            &header_text(header::CONTENT_ENCODING),
        );
        let mut response = Response::builder().status(upstream.status());
        if let Some(h) = response.headers_mut() {
            *h = forwardable(upstream.headers());
            if let Some(len) = upstream.headers().get(header::CONTENT_LENGTH) {
                h.insert(header::CONTENT_LENGTH, len.clone());
            }
            h.extend(notes);
        }
        let tap = Tap {
            length: upstream.content_length(),
            passed: 0,
            inner: upstream.bytes_stream().boxed(),
            reader: Some(reader),
            record: Some(record),
            session_dir,
            observer,
        };
        let body = StreamBody::new(tap.map(|chunk| chunk.map(Frame::data))).boxed_unsync();
        response.body(body).unwrap_or_else(|err| {
            super::error(
                provider,
                StatusCode::BAD_GATEWAY,
                &format!("toolwire proxy: bad response from upstream: {err}"),
            )
        })
    }
}

/// Where what happened to one request is written when its response ends.
pub struct Ledger {
    pub record: Record,
    /// The session's directory, for its usage file (none: no session).
    pub session_dir: Option<PathBuf>,
    pub observer: Observer,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
            Provider::Gemini => "gemini",
        }
    }
}

fn base_url(name: &str, text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text)
        .map_err(|err| format!("proxy.upstreams.{name}: {text:?} is not a URL: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "proxy.upstreams.{name}: {text:?} must be an http:// or https:// URL with a host"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "proxy.upstreams.{name}: {text:?} must not have a query or fragment"
        ));
    }
    Ok(url)
}

/// A URL as the proxy prints it (logs, error bodies): no password, and
/// no query value, since providers take keys there (Gemini's `?key=`).
pub fn shown(url: &url::Url) -> String {
    let mut url = url.clone();
    let _ = url.set_password(None);
    if url.query().is_some() {
        let names: Vec<String> = url
            .query_pairs()
            .map(|(name, _)| name.into_owned())
            .collect();
        url.query_pairs_mut()
            .clear()
            .extend_pairs(names.iter().map(|name| (name.as_str(), "<redacted>")));
    }
    url.to_string()
}

/// The end-to-end headers of a message, in order.
pub(super) fn forwardable(headers: &HeaderMap) -> HeaderMap {
    // Headers named by `Connection` are hop-by-hop too.
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_ascii_lowercase())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if !HOP_BY_HOP.contains(&n) && !named.iter().any(|c| c == n) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A response has ended (or the upstream was not `reached`): its record
/// goes to the session's usage file, when it has a session, and to the
/// metrics.
fn finish(
    session_dir: Option<&std::path::Path>,
    record: Record,
    usage_reader: Option<UsageReader>,
    observer: &Observer,
    reached: bool,
) {
    let record = stamped(record, usage_reader.and_then(UsageReader::finish));
    if let Some(dir) = session_dir {
        append(dir, &record);
    }
    observer.finished(&record, reached);
}

/// Append a request's record, with its usage and the time it ended, to the
/// session's usage file (a WebSocket's responses, which no [`Tap`] reads).
pub(super) fn record_usage(
    session_dir: &std::path::Path,
    record: Record,
    usage: Option<super::usage::Usage>,
) {
    append(session_dir, &stamped(record, usage));
}

fn stamped(mut record: Record, usage: Option<super::usage::Usage>) -> Record {
    record.usage = usage;
    record.time_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    record
}

fn append(dir: &std::path::Path, record: &Record) {
    if let Err(err) = stats::append(dir, record) {
        tracing::warn!(dir = %dir.display(), %err, "could not record usage");
    }
}

/// The upstream's body on its way to the agent, chunk by chunk as it
/// arrives; the usage is read off the chunks as they pass. The record is
/// written when the stream ends, before the agent sees its end (so a
/// client that has read the whole response finds it in `toolwire stats`
/// when the response was framed by chunks), or when the agent hangs up.
struct Tap {
    /// The upstream's `Content-Length`, and the bytes passed on so far:
    /// a body whose every byte went out is complete even when the server
    /// stops polling for its end (hyper does, with a length).
    length: Option<u64>,
    passed: u64,
    inner: futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    reader: Option<UsageReader>,
    record: Option<Record>,
    session_dir: Option<PathBuf>,
    observer: Observer,
}

impl Tap {
    fn end(&mut self, complete: bool) {
        if let Some(mut record) = self.record.take() {
            record.complete = complete;
            let reader = self.reader.take();
            finish(
                self.session_dir.as_deref(),
                record,
                reader,
                &self.observer,
                true,
            );
        }
    }
}

impl Stream for Tap {
    type Item = Result<Bytes, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.inner.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(reader) = self.reader.as_mut() {
                    reader.feed(&chunk);
                }
                self.passed += chunk.len() as u64;
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(err))) => {
                self.end(false);
                // Logged when the connection ends: without the URL's key.
                Poll::Ready(Some(Err(Box::new(err.without_url()))))
            }
            Poll::Ready(None) => {
                self.end(true);
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let whole = self.length == Some(self.passed);
        self.end(whole);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_url_carries_no_key() {
        let url = url::Url::parse(
            "https://u:pw@example.com/v1beta/models/m:generateContent?key=AIza-secret&alt=sse",
        )
        .unwrap();
        let text = shown(&url);
        assert!(
            !text.contains("AIza-secret") && !text.contains("pw"),
            "{text}"
        );
        assert!(
            text.contains("/v1beta/models/m:generateContent?key="),
            "{text}"
        );
    }
}
