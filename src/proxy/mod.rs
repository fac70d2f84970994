//! `toolwire proxy`: the HTTP face. Agents that only let their user change
//! the provider's base URL get budgeting and the pair guard with no code
//! change (PROTOCOL.md 10.7).
//!
//! Per request: read the body (up to `proxy.maxRequestBytes`), find its
//! session, repair its pairing in memory if the provider would reject it,
//! budget it through the same session registry and `budget/apply` core as
//! the JSON-RPC face, write the changed results back into the body without
//! touching any other byte, forward it with its headers to the configured
//! upstream, and stream the response back as it arrives, reading the
//! provider's token usage off it for `toolwire stats`.

pub mod auth;
pub mod conversation;
pub mod health;
mod mcp;
pub mod metrics;
pub mod route;
pub mod splice;
pub mod stats;
mod timeouts;
pub mod upstream;
pub mod usage;
pub mod websocket;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::TcpListener;

use crate::config::Effective;
use crate::format::size::char_count;
use crate::protocol::SessionId;
use crate::session::Registry;
use auth::{Caller, Tenants};
use conversation::SESSION_HEADER;
use metrics::{ErrorKind, Labels, Metrics, Observer};
use route::{Provider, Route};
use stats::Record;
use upstream::{ProxyBody, Upstream};

/// Response header: what budgeting did (`applied; persisted=N`), or why it
/// did not run (`failed; …`, `none; …`).
pub const BUDGET_HEADER: &str = "x-toolwire-budget";
/// Response header, present only when budgeting failed (the store cannot
/// be reached): what the proxy forwarded instead (PROTOCOL.md 11.1).
pub const DEGRADED_HEADER: &str = "x-toolwire-degraded";
/// Response header, present only when the pairing was repaired:
/// `droppedToolUses=<ids>; droppedToolResults=<ids>; movedToolResults=<ids>`
/// (ids comma-separated, percent-encoded): every change repair made, so a
/// request that only had results moved ahead of text says so too.
pub const REPAIRED_HEADER: &str = "x-toolwire-repaired";
/// Response header, present only when the request cleared old results
/// (PROTOCOL.md 11.3, 12.1): their tool call ids, comma-separated, then
/// why: `; reason=pays|expired|trigger; rentChars=N; costChars=N`,
/// percent-encoded.
pub const CLEARED_HEADER: &str = "x-toolwire-cleared";

/// The proxy: one per process, shared by every connection.
pub struct Proxy {
    registry: Registry,
    config: Arc<Effective>,
    upstream: Upstream,
    tenants: Tenants,
    metrics: Arc<Metrics>,
}

impl Proxy {
    pub fn new(registry: Registry, config: Effective) -> Result<Arc<Proxy>, String> {
        let egress = crate::egress::configure(&config.egress())?;
        let upstream = Upstream::new(&config.proxy.upstreams, egress)?;
        let tenants = Tenants::new(&config.proxy)?;
        Ok(Arc::new(Proxy {
            registry,
            config: Arc::new(config),
            upstream,
            tenants,
            metrics: Arc::new(Metrics::new()),
        }))
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The id fresh previews of `session` name in their `toolwire://`
    /// links, with `previews = "mcp"`: the one the caller knows, which its
    /// `/mcp` scopes back to `session`. Chosen as the decision is made, so
    /// a preview's text never changes after.
    fn link_session<'a>(&self, caller: &Caller, session: &'a SessionId) -> Option<&'a str> {
        (self.config.proxy.previews == Some(crate::config::Previews::Mcp))
            .then(|| caller.unscoped(session))
    }

    /// Accept connections until the listener fails; each connection speaks
    /// HTTP/1.1 or HTTP/2 (prior knowledge), as the client chooses.
    ///
    /// Running out of descriptors never ends the proxy. It holds at most
    /// [`connection_cap`] connections, leaving the other half of its
    /// descriptors to the upstream connections and the store; beyond that,
    /// and whenever accepting fails for want of descriptors or memory,
    /// clients wait in the listen backlog until a connection closes.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        let cap = connection_cap(crate::process::raise_open_files());
        let slots = Arc::new(tokio::sync::Semaphore::new(cap));
        let closed = Arc::new(tokio::sync::Notify::new());
        tracing::debug!(connections = cap, "accepting connections");
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return Ok(());
            };
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) if out_of_resources(&err) => {
                    tracing::warn!(%err, "cannot accept a connection now; waiting for one to close");
                    drop(slot);
                    // A connection that closes gives its descriptor back;
                    // other descriptors (the store's, upstream's) have no
                    // such signal, so a second at most.
                    let _ = tokio::time::timeout(Duration::from_secs(1), closed.notified()).await;
                    continue;
                }
                Err(err) if transient(&err) => continue,
                Err(err) => return Err(err),
            };
            let _ = stream.set_nodelay(true);
            let proxy = self.clone();
            let closed = closed.clone();
            tokio::spawn(async move {
                proxy.connection(stream, peer).await;
                drop(slot);
                closed.notify_one();
            });
        }
    }

    /// Serve one connection until it ends, is idle too long, or its client
    /// is too slow with a request's head.
    async fn connection(self: Arc<Self>, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let activity = Arc::new(timeouts::Activity::default());
        let proxy = self.clone();
        let requests = activity.clone();
        let service = hyper::service::service_fn(move |req| {
            let proxy = proxy.clone();
            let busy = requests.begin();
            async move {
                let response = proxy.handle(req, peer).await;
                // In progress until the response body is sent or dropped.
                Ok::<_, Infallible>(response.map(|body| busy.hold(body)))
            }
        });
        let timeouts = &self.config.proxy;
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(seconds(timeouts.header_timeout_seconds));
        builder.http2().timer(TokioTimer::new());
        let io = TokioIo::new(timeouts::Watched::new(stream, activity.clone()));
        let conn = builder.serve_connection_with_upgrades(io, service);
        tokio::pin!(conn);
        let idle = seconds(timeouts.idle_timeout_seconds);
        let watching = idle.is_some();
        let idle = idle.unwrap_or(Duration::MAX);
        // Set once a graceful close has begun: an HTTP/2 client that
        // neither finishes nor answers the GOAWAY is dropped after one
        // more idle spell.
        let mut closing: Option<tokio::time::Instant> = None;
        let ended = loop {
            let deadline = closing.unwrap_or_else(|| activity.idle_deadline(idle));
            tokio::select! {
                ended = conn.as_mut() => break ended,
                () = tokio::time::sleep_until(deadline), if watching => {
                    if closing.is_some() {
                        break Ok(());
                    }
                    if activity.idle_for(idle) {
                        tracing::debug!(%peer, "closing an idle connection");
                        conn.as_mut().graceful_shutdown();
                        closing = Some(tokio::time::Instant::now() + idle);
                    }
                }
            }
        };
        if let Err(err) = ended {
            tracing::debug!(%peer, %err, "connection ended with an error");
        }
    }

    async fn handle(
        self: &Arc<Self>,
        mut req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<ProxyBody> {
        // The token is taken off the path before anything logs or routes it.
        let presented = auth::presented(req.uri().path(), req.headers());
        tracing::debug!(%peer, method = %req.method(), path = %auth::loggable_path(&presented.path), headers = %redacted(req.headers()), "request");
        if let Some(answer) = self.operations(&req, &presented).await {
            return answer;
        }
        let caller = self.tenants.caller(presented.token.as_ref());
        let raw_path = presented.path.as_str();
        // Routed on the path as it will leave (`Upstream::url` resolves
        // it the same way), never on what the agent spelled.
        let target = route::normalize_path(raw_path)
            .and_then(|path| Target::of(req.method(), &path, req.headers()));
        let tenant = caller.as_ref().and_then(Caller::tenant).cloned();
        let labels = |provider: Provider, route: &'static str| {
            let tenant = tenant
                .clone()
                .filter(|_| self.config.proxy.metrics_by_tenant);
            Labels::new(provider, route, tenant)
        };
        let Some(caller) = caller else {
            let provider = target.map_or_else(|| Provider::guess(req.headers()), Target::provider);
            self.metrics
                .refused(&labels(provider, "other"), ErrorKind::Unauthorized);
            let why = match &presented.token {
                None => "no token: send x-toolwire-token or use a base URL ending in /t/<token>",
                Some(Err(why)) => why,
                Some(Ok(_)) if self.tenants.required() => "the token is not a tenant's",
                Some(Ok(_)) => "this proxy has no tenants: send no token",
            };
            return error(
                provider,
                StatusCode::UNAUTHORIZED,
                &format!("toolwire proxy: {why}"),
            );
        };
        // MCP for reading saved outputs back, the caller's own only.
        if raw_path == mcp::PATH {
            return self.mcp(req, &caller).await;
        }
        // The Responses API's WebSocket mode (Codex's own provider), for a
        // caller the tokens admit, its sessions scoped as the caller's.
        if websocket::is_upgrade(&req)
            && let Some(path) = route::normalize_path(raw_path)
        {
            return websocket::accept(self.clone(), req, &path, caller).await;
        }
        let Some(target) = target else {
            let path = auth::loggable_path(raw_path);
            let provider = Provider::guess(req.headers());
            self.metrics
                .refused(&labels(provider, "other"), ErrorKind::NoRoute);
            return error(
                provider,
                StatusCode::NOT_FOUND,
                &format!("toolwire proxy: no route for {} {path}", req.method()),
            );
        };
        if presented.path != req.uri().path() {
            let stripped = match req.uri().query() {
                Some(query) => format!("{}?{query}", presented.path),
                None => presented.path.clone(),
            };
            match http::Uri::builder().path_and_query(stripped).build() {
                Ok(uri) => *req.uri_mut() = uri,
                Err(_) => {
                    return error(
                        target.provider(),
                        StatusCode::BAD_REQUEST,
                        "toolwire proxy: the request path is not a valid URI path",
                    );
                }
            }
        }
        let provider = target.provider();
        let labels = labels(provider, target.format());
        let limit = self.config.proxy.max_request_bytes;
        let (parts, body) = req.into_parts();
        let declared = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            self.metrics.refused(&labels, ErrorKind::TooLarge);
            return too_large(provider, limit);
        }
        let body_timeout = self.config.proxy.body_timeout_seconds;
        let collected = tokio::time::timeout(
            seconds(body_timeout).unwrap_or(Duration::MAX),
            Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX)).collect(),
        )
        .await;
        let Ok(collected) = collected else {
            self.metrics.refused(&labels, ErrorKind::BodyTimeout);
            return error(
                provider,
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "toolwire proxy: the request body did not arrive within {body_timeout} s (proxy.bodyTimeoutSeconds in toolwire.toml)"
                ),
            );
        };
        let body = match collected {
            Ok(collected) => collected.to_bytes(),
            Err(err) if err.is::<http_body_util::LengthLimitError>() => {
                self.metrics.refused(&labels, ErrorKind::TooLarge);
                return too_large(provider, limit);
            }
            Err(err) => {
                self.metrics.refused(&labels, ErrorKind::BadRequest);
                return error(
                    provider,
                    StatusCode::BAD_REQUEST,
                    &format!("toolwire proxy: reading the request body failed: {err}"),
                );
            }
        };

        // A conversation's worth of body: once the proxy has been without
        // such requests for a moment, what budgeting it freed goes back to
        // the system.
        let _large =
            (body.len() > crate::transport::RELEASE_AFTER).then(crate::heap::LargeWork::begin);
        let observer = Observer {
            metrics: self.metrics.clone(),
            labels,
            received: body.len() as u64,
            started: std::time::Instant::now(),
        };
        let mut side = Beside {
            record: Record {
                format: target.format().to_owned(),
                ..Record::default()
            },
            notes: HeaderMap::new(),
            leftovers: Leftovers::default(),
        };
        let (session, body) = match target {
            Target::Route(route) if parts.method == Method::POST => {
                let prepared = self.prepare(route, &parts, &caller, body, &mut side).await;
                side.leftovers.free();
                match prepared {
                    Ok(prepared) => prepared,
                    Err(response) => {
                        observer
                            .metrics
                            .refused(&observer.labels, ErrorKind::BadRequest);
                        return response;
                    }
                }
            }
            _ => {
                side.notes.insert(
                    BUDGET_HEADER,
                    HeaderValue::from_static("none; not a conversation"),
                );
                side.record.chars_received = body_chars(&body);
                side.record.chars_sent = side.record.chars_received;
                (None, body)
            }
        };
        let Beside {
            record, mut notes, ..
        } = side;
        let session_dir = session.as_ref().map(|id| {
            crate::session::SessionKey {
                data_dir: self.config.data_dir.clone(),
                id: id.clone(),
            }
            .session_dir()
        });
        if let Some(id) = &session
            && let Ok(value) = HeaderValue::from_str(caller.unscoped(id))
        {
            notes.insert(SESSION_HEADER, value);
        }
        if notes.contains_key(DEGRADED_HEADER) {
            observer
                .metrics
                .error(&observer.labels, ErrorKind::BudgetFailed);
        }
        self.upstream
            .forward(
                provider,
                parts,
                body,
                notes,
                upstream::Ledger {
                    record,
                    session_dir,
                    observer,
                },
            )
            .await
    }

    /// `/healthz`, `/readyz` and `/metrics`, which no provider has and
    /// which are never forwarded; `None` for any other request.
    async fn operations(
        &self,
        req: &Request<Incoming>,
        presented: &auth::Presented,
    ) -> Option<Response<ProxyBody>> {
        if req.method() != Method::GET {
            return None;
        }
        match presented.path.as_str() {
            // Probes answer without a token, and only on their own path.
            "/healthz" if req.uri().path() == "/healthz" => Some(health::healthz()),
            "/readyz" if req.uri().path() == "/readyz" => Some(
                health::readyz(
                    self.registry.storage(),
                    &self.config.data_dir,
                    &self.config.proxy.upstreams,
                )
                .await,
            ),
            "/metrics" => Some(if self.tenants.may_read_metrics(presented, req.headers()) {
                answer(StatusCode::OK, metrics::CONTENT_TYPE, self.metrics.encode())
            } else {
                error(
                    Provider::OpenAi,
                    StatusCode::UNAUTHORIZED,
                    "toolwire proxy: /metrics needs the metrics token (Authorization: Bearer) or a tenant's",
                )
            }),
            _ => None,
        }
    }

    /// Find the session, then repair and budget the conversation where the
    /// format allows. Returns the session and the body to forward; an
    /// `Err` is an answer to give the agent at once.
    async fn prepare(
        &self,
        route: Route,
        parts: &http::request::Parts,
        caller: &Caller,
        body: Bytes,
        side: &mut Beside,
    ) -> Result<(Option<SessionId>, Bytes), Response<ProxyBody>> {
        let Beside {
            record,
            notes,
            leftovers,
        } = side;
        let provider = route.provider();
        let (path, headers) = (parts.uri.path(), &parts.headers);
        let named = match headers.get(SESSION_HEADER) {
            None => None,
            Some(value) => {
                let id = value
                    .to_str()
                    .map_err(|e| e.to_string())
                    .and_then(|s| SessionId::try_from(s.to_owned()));
                match id {
                    Ok(id) => Some(id),
                    Err(err) => {
                        return Err(error(
                            provider,
                            StatusCode::BAD_REQUEST,
                            &format!("toolwire proxy: header {SESSION_HEADER}: {err}"),
                        ));
                    }
                }
            }
        };
        // A body that is not JSON is the provider's to refuse: it goes as sent.
        let Ok(text) = simdutf8::basic::from_utf8(&body) else {
            notes.insert(
                BUDGET_HEADER,
                HeaderValue::from_static("none; the request body is not UTF-8"),
            );
            record.chars_received = body.len() as u64;
            record.chars_sent = record.chars_received;
            return Ok((named, body));
        };
        // Counted once: a body forwarded as sent has as many again, and
        // one toolwire rewrote is counted as it is written.
        record.chars_received = char_count(text);
        record.chars_sent = record.chars_received;
        let key = route.conversation_key();
        // Parsed once; the conversation is then moved out of the parsed
        // body, repaired and budgeted in place, and only the elements
        // budgeting changed are read again to splice them into the text.
        let mut parsed = match splice::Body::parse(text, key) {
            Ok(parsed) => parsed,
            Err(err) => {
                notes.insert(BUDGET_HEADER, note(&format!("none; {err}")));
                return Ok((named, body));
            }
        };
        let session = named.or_else(|| conversation::derive_session(route, &parsed.value));
        // The tenant's own: no id a client picks reaches another's.
        let session = match session.map(|id| caller.scoped(id)).transpose() {
            Ok(session) => session,
            Err(err) => {
                return Err(error(
                    provider,
                    StatusCode::BAD_REQUEST,
                    &format!("toolwire proxy: header {SESSION_HEADER}: {err}"),
                ));
            }
        };
        let (Some(session), Some(messages)) = (session.clone(), parsed.take_conversation(key))
        else {
            notes.insert(
                BUDGET_HEADER,
                HeaderValue::from_static("none; no conversation"),
            );
            return Ok((session, body));
        };
        let format = route.format();
        let pricing = conversation::pricing(route, &parsed.value, text, path);
        let (messages, repaired) = crate::transcript::repair::repair_owned(format, messages);
        if let Some(report) = &repaired {
            tracing::info!(session = %session, dropped_tool_uses = ?report.dropped_tool_uses, dropped_tool_results = ?report.dropped_tool_results, moved_tool_results = ?report.moved_tool_results, "repaired the pairing of a request");
            notes.insert(
                REPAIRED_HEADER,
                note(&format!(
                    "droppedToolUses={}; droppedToolResults={}; movedToolResults={}; renamedToolUses={}",
                    id_list(&report.dropped_tool_uses),
                    id_list(&report.dropped_tool_results),
                    id_list(&report.moved_tool_results),
                    renamed_list(&report.renamed_tool_uses)
                )),
            );
            record.repaired = true;
        }
        let link = self.link_session(caller, &session);
        let params_of = |messages: Vec<Value>| {
            conversation::apply_params(&session, messages, format, &pricing, link)
        };
        let params = params_of(messages);
        match crate::methods::budget_apply_queued_tracked(
            &self.registry,
            self.config.clone(),
            params,
        )
        .await
        {
            Ok(applied) => {
                let result = applied.result;
                let persisted = result.persisted.len();
                record.results_persisted = persisted as u64;
                record.results_cleared = result.cleared.len() as u64;
                record.budgeted = true;
                if !result.cleared.is_empty() {
                    use crate::budget::clearing::{ClearingMode, Decision};
                    let reason = match result.clearing.map(|c| (c.mode, c.decision)) {
                        Some((_, Decision::Expired)) => "expired",
                        Some((ClearingMode::Auto, _)) => "pays",
                        _ => "trigger",
                    };
                    let why = result.clearing.map_or(String::new(), |c| {
                        format!("; rentChars={}; costChars={}", c.rent_chars, c.cost_chars)
                    });
                    notes.insert(
                        CLEARED_HEADER,
                        note(&format!(
                            "{}; reason={reason}{why}",
                            id_list(&result.cleared)
                        )),
                    );
                }
                let budgeted: Vec<Value> = result.messages.into_iter().map(|m| m.0).collect();
                let spliced = if repaired.is_some() {
                    // Elements dropped or moved: matched against the
                    // conversation as sent, element by element.
                    parsed
                        .original_conversation()
                        .and_then(|original| parsed.with_conversation(&original, &budgeted))
                        .map(Some)
                } else {
                    parsed.with_changes(&budgeted, &applied.changed)
                };
                leftovers.values = budgeted;
                leftovers.values.push(std::mem::take(&mut parsed.value));
                match spliced {
                    Ok(text) => {
                        notes.insert(
                            BUDGET_HEADER,
                            note(&format!("applied; persisted={persisted}")),
                        );
                        let body = match text {
                            Some(text) => {
                                leftovers.body = Some(body);
                                rewritten(text, record)
                            }
                            None => body,
                        };
                        Ok((Some(session), body))
                    }
                    Err(err) => {
                        record.budgeted = false;
                        notes.insert(BUDGET_HEADER, note(&format!("failed; {err}")));
                        Ok((Some(session), body))
                    }
                }
            }
            Err(err) => {
                // Never stand between the agent and its provider: a
                // conversation toolwire cannot budget goes on, and the
                // provider has its say. Degraded, never forgetting: every
                // decision this process already holds for the session is
                // put back, so only fresh results go whole (the repair is
                // a pure function of the conversation: the same again).
                notes.insert(BUDGET_HEADER, note(&format!("failed; {err}")));
                let spliced = match parsed.original_conversation() {
                    Ok(original) => {
                        let messages =
                            crate::transcript::repair::repair_messages(format, &original)
                                .map_or_else(|| original.clone(), |(repaired, _)| repaired);
                        let known = crate::methods::reapply_known_queued(
                            &self.registry,
                            self.config.clone(),
                            params_of(messages),
                        )
                        .await;
                        match known {
                            Ok(Some(messages)) => {
                                let messages: Vec<Value> =
                                    messages.into_iter().map(|m| m.0).collect();
                                parsed.with_conversation(&original, &messages).ok()
                            }
                            _ => None,
                        }
                    }
                    Err(_) => None,
                };
                match spliced {
                    Some(text) => {
                        tracing::warn!(session = %session, %err, "budgeting failed; forwarding with the decisions already known put back");
                        notes.insert(
                            DEGRADED_HEADER,
                            note(&format!(
                                "known decisions put back, fresh results whole; {err}"
                            )),
                        );
                        Ok((Some(session), rewritten(text, record)))
                    }
                    None => {
                        tracing::warn!(session = %session, %err, "budgeting failed; forwarding the request as sent");
                        notes.insert(
                            DEGRADED_HEADER,
                            note(&format!("no decisions known here, sent as is; {err}")),
                        );
                        Ok((Some(session), body))
                    }
                }
            }
        }
    }
}

/// What preparing a request's body leaves beside it: the request's usage
/// record so far, the headers that tell the agent what toolwire did, and
/// what to free once the body has left.
struct Beside {
    record: Record,
    notes: HeaderMap,
    leftovers: Leftovers,
}

/// What a request's budgeting built and no longer needs once its body is
/// written: the conversation's values and the body as it came. Freeing
/// them is about 4% of a large request's instructions, done on a task of
/// its own while the request goes upstream rather than before it leaves.
#[derive(Default)]
struct Leftovers {
    values: Vec<Value>,
    body: Option<Bytes>,
}

impl Leftovers {
    fn free(&mut self) {
        let leftovers = std::mem::take(self);
        if !leftovers.values.is_empty() || leftovers.body.is_some() {
            tokio::spawn(async move { drop(leftovers) });
        }
    }
}

/// A body toolwire wrote, counted for the usage record as it goes.
fn rewritten(text: String, record: &mut Record) -> Bytes {
    record.chars_sent = char_count(&text);
    Bytes::from(text)
}

/// What a request is for: a conversation route, or another path of a
/// provider's API that is passed through as it is (token counting, model
/// lists), always to that provider's configured upstream.
#[derive(Debug, Clone, Copy)]
enum Target {
    Route(Route),
    Other(Provider),
}

impl Target {
    fn of(method: &Method, path: &str, headers: &HeaderMap) -> Option<Target> {
        if let Some(route) = Route::of(path) {
            return (method == Method::POST).then_some(Target::Route(route));
        }
        if path.starts_with("/v1/messages/") {
            return Some(Target::Other(Provider::Anthropic));
        }
        if path.starts_with("/v1beta/") {
            return Some(Target::Other(Provider::Gemini));
        }
        if path == "/v1/models" || path.starts_with("/v1/models/") {
            return Some(Target::Other(Provider::guess(headers)));
        }
        None
    }

    fn provider(self) -> Provider {
        match self {
            Target::Route(route) => route.provider(),
            Target::Other(provider) => provider,
        }
    }

    fn format(self) -> &'static str {
        match self {
            Target::Route(route) => route.format().name(),
            Target::Other(_) => "other",
        }
    }
}

impl Provider {
    /// Which provider's client sent a request, by the headers its SDK
    /// always sets (for errors on paths that say nothing).
    fn guess(headers: &HeaderMap) -> Provider {
        if headers.contains_key("anthropic-version") || headers.contains_key("x-api-key") {
            Provider::Anthropic
        } else if headers.contains_key("x-goog-api-key") {
            Provider::Gemini
        } else {
            Provider::OpenAi
        }
    }
}

/// A timeout setting: 0 is none.
fn seconds(setting: u64) -> Option<Duration> {
    (setting > 0).then(|| Duration::from_secs(setting))
}

/// How many connections the proxy holds at once with `open_files`
/// descriptors: half of them, less a few for the listener, logs and
/// store, so that every connection can still open one upstream.
pub fn connection_cap(open_files: u64) -> usize {
    let cap = open_files.saturating_sub(16) / 2;
    usize::try_from(cap)
        .unwrap_or(usize::MAX)
        .clamp(1, tokio::sync::Semaphore::MAX_PERMITS)
}

/// Accepting failed for want of descriptors or memory: it will work once
/// something closes.
fn out_of_resources(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Accepting failed for this one connection only (it was reset or aborted
/// before it was taken).
fn transient(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        err.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted
    ) || matches!(err.raw_os_error(), Some(libc::EPROTO | libc::EPERM))
}

/// An error answered by the proxy itself, in the provider's error shape.
pub fn error(provider: Provider, status: StatusCode, message: &str) -> Response<ProxyBody> {
    tracing::info!(status = status.as_u16(), message, "answering an error");
    let body = provider.error_body(status.as_u16(), message).to_string();
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An answer of the proxy's own that is not an error in a provider's
/// shape (probes, metrics); never cached on the way.
fn answer(status: StatusCode, content_type: &'static str, body: String) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    response
}

fn too_large(provider: Provider, limit: u64) -> Response<ProxyBody> {
    error(
        provider,
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "toolwire proxy: the request body is larger than {limit} bytes (proxy.maxRequestBytes in toolwire.toml)"
        ),
    )
}

/// A header value from free text: anything not visible ASCII becomes `?`.
fn note(text: &str) -> HeaderValue {
    let clean: String = text
        .chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .take(512)
        .collect();
    HeaderValue::from_str(&clean).unwrap_or_else(|_| HeaderValue::from_static("?"))
}

fn id_list(ids: &[String]) -> String {
    ids.iter()
        .map(|id| url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>())
        .collect::<Vec<_>>()
        .join(",")
}

/// Renamed ids as `from>to` (each side encoded as in [`id_list`]).
fn renamed_list(renamed: &[crate::protocol::RenamedId]) -> String {
    renamed
        .iter()
        .map(|r| {
            format!(
                "{}>{}",
                id_list(std::slice::from_ref(&r.from)),
                id_list(std::slice::from_ref(&r.to))
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The characters of a body that is UTF-8, else its bytes.
fn body_chars(body: &[u8]) -> u64 {
    match simdutf8::basic::from_utf8(body) {
        Ok(text) => char_count(text),
        Err(_) => body.len() as u64,
    }
}

/// Headers that carry credentials: logged as `<redacted>`, never in clear.
const SECRET_HEADERS: &[&str] = &[
    auth::TOKEN_HEADER,
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "cookie",
];

/// Headers for a log line, credentials redacted. Bodies are never logged.
pub fn redacted(headers: &HeaderMap) -> String {
    let mut out = String::new();
    for (name, value) in headers {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(name.as_str());
        out.push_str(": ");
        if SECRET_HEADERS.contains(&name.as_str()) {
            out.push_str("<redacted>");
        } else {
            out.push_str(value.to_str().unwrap_or("<binary>"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_reach_a_log_line() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("sk-ant-secret"));
        headers.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-secret"),
        );
        headers.insert("x-goog-api-key", HeaderValue::from_static("AIza-secret"));
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        let line = redacted(&headers);
        assert!(!line.contains("secret"), "{line}");
        assert!(line.contains("anthropic-version: 2023-06-01"), "{line}");
        assert_eq!(line.matches("<redacted>").count(), 3, "{line}");
    }
}
