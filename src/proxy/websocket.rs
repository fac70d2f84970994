//! The Responses API's WebSocket mode (`GET /v1/responses` with
//! `Upgrade: websocket`), as Codex speaks it to its own provider.
//!
//! The proxy opens the same WebSocket to the OpenAI upstream first (the
//! agent's headers forwarded as for HTTP), answers the agent's upgrade with
//! the upstream's response headers, then relays messages both ways. Every
//! server event passes unchanged; the usage of `response.completed` is
//! recorded for `toolwire stats`. A client's `response.create` carries the
//! fields of a `POST /v1/responses` body and is budgeted as one: the same
//! repair, budget, clearing, journal and session.
//!
//! On a socket, a client continues a conversation with
//! `previous_response_id` and only the new `input` items (the upstream
//! keeps the rest in the socket's memory). The proxy keeps the whole
//! conversation of its socket (the agent's items and the output items the
//! upstream added), so what it budgets and derives the session from is the
//! full conversation, as an HTTP request of the same turn would carry it:
//! one session and byte-identical previews whichever transport a turn took.
//! What goes upstream is the budgeted tail after what the upstream already
//! holds, with `previous_response_id`; when budgeting changed an item the
//! upstream already holds (clearing, a repair), the whole budgeted
//! conversation goes as a fresh `response.create` without it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::Proxy;
use super::conversation::SESSION_HEADER;
use super::route::{Provider, Route};
use super::stats::Record;
use super::upstream::{ProxyBody, forwardable, shown};
use super::usage::Usage;
use crate::protocol::SessionId;

/// The handshake headers of one side's WebSocket: each side has its own.
const HANDSHAKE: &[&str] = &[
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-accept",
];

/// Client messages of the protocol that are not a new response: they pass
/// as sent (logged at debug; any other type is logged as unknown).
const OTHER_CLIENT_TYPES: &[&str] = &[
    "response.processed",
    "response.steer",
    "response.append",
    "response.cancel",
];

type Upstream = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;
type Client = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Whether a request asks for a WebSocket (HTTP/1.1 upgrade).
pub fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.method() == http::Method::GET
        && req
            .headers()
            .get(header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Answer a WebSocket upgrade on `path` (already normalized): open the
/// upstream's first, then switch protocols and relay in a task of its own.
pub async fn accept(
    proxy: Arc<Proxy>,
    mut req: Request<Incoming>,
    path: &str,
    caller: super::auth::Caller,
) -> Response<ProxyBody> {
    let provider = Provider::OpenAi;
    if Route::of(path) != Some(Route::OpenAiResponses) {
        return super::error(
            provider,
            StatusCode::NOT_FOUND,
            &format!("toolwire proxy: no WebSocket route for {path} (only /v1/responses)"),
        );
    }
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        return super::error(
            provider,
            StatusCode::BAD_REQUEST,
            "toolwire proxy: a WebSocket upgrade without Sec-WebSocket-Key",
        );
    };
    let named = match req.headers().get(SESSION_HEADER) {
        None => None,
        Some(value) => match value
            .to_str()
            .map_err(|e| e.to_string())
            .and_then(|s| SessionId::try_from(s.to_owned()))
        {
            Ok(id) => Some(id),
            Err(err) => {
                return super::error(
                    provider,
                    StatusCode::BAD_REQUEST,
                    &format!("toolwire proxy: header {SESSION_HEADER}: {err}"),
                );
            }
        },
    };
    let Some(url) = proxy.upstream.websocket_url(provider, req.uri()) else {
        return super::error(
            provider,
            StatusCode::BAD_REQUEST,
            "toolwire proxy: the request path does not stay on the configured upstream",
        );
    };
    let base = shown(proxy.upstream.base(provider));
    let mut request = match url.as_str().into_client_request() {
        Ok(request) => request,
        Err(err) => {
            return super::error(
                provider,
                StatusCode::BAD_GATEWAY,
                &format!(
                    "toolwire proxy: cannot open a WebSocket to the openai upstream {base}: {err}"
                ),
            );
        }
    };
    let mut headers = forwardable(req.headers());
    headers.remove(SESSION_HEADER);
    headers.remove(super::auth::TOKEN_HEADER);
    strip_handshake(&mut headers);
    request.headers_mut().extend(headers);
    let config = socket_config(proxy.config.proxy.max_request_bytes);
    let connected = tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async_tls_with_config(request, Some(config), true, None),
    )
    .await;
    let (upstream, answer) = match connected {
        Ok(Ok(connected)) => connected,
        Ok(Err(tungstenite::Error::Http(refused))) => {
            // The provider refused the upgrade (401, 429, …): its answer,
            // status, headers and body, is the agent's to read.
            tracing::info!(
                status = refused.status().as_u16(),
                "the upstream refused the WebSocket upgrade"
            );
            let (parts, body) = refused.into_parts();
            let mut response = Response::new(
                Full::new(bytes::Bytes::from(body.unwrap_or_default()))
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            );
            *response.status_mut() = parts.status;
            *response.headers_mut() = forwardable(&parts.headers);
            return response;
        }
        Ok(Err(err)) => {
            let message = format!(
                "toolwire proxy: the openai upstream {base} could not be reached over WebSocket: {err}"
            );
            tracing::warn!("{message}");
            return super::error(provider, StatusCode::BAD_GATEWAY, &message);
        }
        Err(_) => {
            let message = format!(
                "toolwire proxy: the openai upstream {base} did not accept a WebSocket within 30 s"
            );
            tracing::warn!("{message}");
            return super::error(provider, StatusCode::GATEWAY_TIMEOUT, &message);
        }
    };
    let mut response = Response::new(
        Full::new(bytes::Bytes::new())
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let mut headers = forwardable(answer.headers());
    strip_handshake(&mut headers);
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    if let Ok(value) = HeaderValue::from_str(&accept) {
        headers.insert("sec-websocket-accept", value);
    }
    *response.headers_mut() = headers;
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(&mut req).await {
            Ok(upgraded) => upgraded,
            Err(err) => {
                tracing::info!(%err, "the agent's WebSocket upgrade did not complete");
                return;
            }
        };
        let client =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        Relay::new(proxy, named, caller).run(client, upstream).await;
    });
    response
}

/// Messages up to the HTTP body limit are read for budgeting; larger ones
/// (up to four times that, at least 64 MiB) are still taken and passed on.
fn socket_config(limit: u64) -> WebSocketConfig {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let max = limit.saturating_mul(4).max(64 << 20);
    WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
}

/// One socket's relay: the conversation so far, and the response in flight.
struct Relay {
    proxy: Arc<Proxy>,
    /// From the agent's `x-toolwire-session` header, if it sent one.
    named: Option<SessionId>,
    /// Whose sessions the socket's conversation is among.
    caller: super::auth::Caller,
    /// The whole conversation as the agent holds it (its input items and
    /// the upstream's output items), as of the last completed response.
    client: Vec<Value>,
    /// The same conversation as the upstream holds it (budgeted).
    upstream: Vec<Value>,
    /// The id of the last completed response: what a continuation names.
    last_response: Option<String>,
    pending: Option<Pending>,
}

/// A `response.create` forwarded, until its response ends.
struct Pending {
    record: Record,
    session_dir: Option<PathBuf>,
    /// The conversation after this request, on either side.
    client: Vec<Value>,
    upstream: Vec<Value>,
    /// Output items (`response.output_item.done`) as they come.
    output: Vec<Value>,
    usage: Option<Usage>,
}

impl Relay {
    fn new(proxy: Arc<Proxy>, named: Option<SessionId>, caller: super::auth::Caller) -> Relay {
        Relay {
            proxy,
            named,
            caller,
            client: Vec::new(),
            upstream: Vec::new(),
            last_response: None,
            pending: None,
        }
    }

    async fn run(mut self, mut client: Client, mut upstream: Upstream) {
        loop {
            tokio::select! {
                client_message = client.next() => match client_message {
                    Some(Ok(Message::Text(text))) => {
                        let out = self.client_message(text.as_str()).await;
                        if upstream.send(out).await.is_err() {
                            break self.upstream_gone(&mut client, None).await;
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let _ = upstream.send(Message::Close(frame)).await;
                        break;
                    }
                    // tungstenite answers pings itself, on each side.
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(message)) => {
                        if upstream.send(message).await.is_err() {
                            break self.upstream_gone(&mut client, None).await;
                        }
                    }
                    Some(Err(err)) => {
                        tracing::info!(%err, "the agent's WebSocket failed");
                        if let tungstenite::Error::Capacity(_) = err {
                            let frame = CloseFrame {
                                code: CloseCode::Size,
                                reason: "toolwire proxy: message too big".into(),
                            };
                            let _ = client.send(Message::Close(Some(frame))).await;
                        }
                        let _ = upstream.close(None).await;
                        break;
                    }
                    None => {
                        let _ = upstream.close(None).await;
                        break;
                    }
                },
                from_upstream = upstream.next() => match from_upstream {
                    Some(Ok(Message::Text(text))) => {
                        self.server_event(text.as_str());
                        if client.send(Message::Text(text)).await.is_err() {
                            let _ = upstream.close(None).await;
                            break;
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        break self.upstream_gone(&mut client, frame).await;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(message)) => {
                        if client.send(message).await.is_err() {
                            let _ = upstream.close(None).await;
                            break;
                        }
                    }
                    Some(Err(err)) => {
                        tracing::info!(%err, "the upstream WebSocket failed");
                        break self.upstream_gone(&mut client, None).await;
                    }
                    None => break self.upstream_gone(&mut client, None).await,
                },
            }
        }
        self.end_pending(false);
    }

    /// The upstream's socket ended: the agent's is closed with the
    /// provider's close code, or 1011 when it gave none.
    async fn upstream_gone(&mut self, client: &mut Client, frame: Option<CloseFrame>) {
        let frame = frame.unwrap_or_else(|| CloseFrame {
            code: CloseCode::Error,
            reason: "toolwire proxy: the upstream WebSocket ended without a close frame".into(),
        });
        tracing::info!(
            code = u16::from(frame.code),
            "the upstream closed the WebSocket; closing the agent's"
        );
        let _ = client.send(Message::Close(Some(frame))).await;
        let _ = client.flush().await;
    }

    /// A text message from the agent: what to send upstream for it.
    async fn client_message(&mut self, text: &str) -> Message {
        let as_sent = || Message::text(text.to_owned());
        let limit = self.proxy.config.proxy.max_request_bytes;
        if text.len() as u64 > limit {
            tracing::info!(
                bytes = text.len(),
                limit,
                "a WebSocket message larger than proxy.maxRequestBytes passes as sent"
            );
            return as_sent();
        }
        let Ok(Value::Object(body)) = serde_json::from_str::<Value>(text) else {
            tracing::info!("a WebSocket message that is not a JSON object passes as sent");
            return as_sent();
        };
        let kind = body.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "response.create" {
            if OTHER_CLIENT_TYPES.contains(&kind) {
                tracing::debug!(
                    kind,
                    "a WebSocket message that creates no response passes as sent"
                );
            } else {
                tracing::info!(
                    kind,
                    "a WebSocket message of an unknown type passes as sent"
                );
            }
            return as_sent();
        }
        match self.create(body, text).await {
            Some(out) => Message::text(out),
            None => as_sent(),
        }
    }

    /// Budget a `response.create`; `None` to send it as it came.
    async fn create(&mut self, mut body: Map<String, Value>, text: &str) -> Option<String> {
        // A response still in flight ends here: the protocol runs one at
        // a time on a socket.
        self.end_pending(false);
        let mut record = Record {
            format: Route::OpenAiResponses.format().name().to_owned(),
            chars_received: crate::format::size::char_count(text),
            ..Record::default()
        };
        record.chars_sent = record.chars_received;
        let delta = match body.get("input") {
            Some(Value::Array(items)) => items.clone(),
            _ => {
                tracing::info!("a response.create without an input array passes as sent");
                self.forget();
                return None;
            }
        };
        // Priced as the HTTP route prices the same body (its model and
        // cache retention; the conversation plays no part).
        let pricing = super::conversation::pricing(
            Route::OpenAiResponses,
            &Value::Object(
                body.iter()
                    .filter(|(k, _)| matches!(k.as_str(), "model" | "prompt_cache_retention"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            "",
            "",
        );
        let previous = body.get("previous_response_id").and_then(Value::as_str);
        let (mut client, held) = match previous {
            None => (Vec::new(), Vec::new()),
            Some(id) if self.last_response.as_deref() == Some(id) => (
                std::mem::take(&mut self.client),
                std::mem::take(&mut self.upstream),
            ),
            Some(_) => {
                tracing::info!(
                    "a response.create continues a response this socket did not carry; it passes as sent"
                );
                self.forget();
                return None;
            }
        };
        let sent = delta.clone();
        client.extend(delta);
        self.last_response = None;
        // The session is derived from the whole conversation, as the HTTP
        // route derives it from a body's `input`.
        let whole = Value::Object(Map::from_iter([("input".to_owned(), Value::Array(client))]));
        let session = self
            .named
            .clone()
            .or_else(|| super::conversation::derive_session(Route::OpenAiResponses, &whole))
            // A tenant's sessions are its own (PROTOCOL.md 12.3); an id too
            // long to scope is not budgeted.
            .and_then(|id| self.caller.scoped(id).ok());
        let client = match whole {
            Value::Object(mut map) => match map.remove("input") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        // No session without a conversation (Codex's warm-up request has
        // an empty input): nothing to budget or record, but the response
        // it makes is one the next request may continue.
        let (budgeted, session_dir) = match &session {
            Some(session) => (
                self.budget(session, client.clone(), pricing, &mut record)
                    .await,
                Some(
                    crate::session::SessionKey {
                        data_dir: self.proxy.config.data_dir.clone(),
                        id: session.clone(),
                    }
                    .session_dir(),
                ),
            ),
            None => (client.clone(), None),
        };
        let continues = previous.is_some()
            && budgeted.len() >= held.len()
            && budgeted[..held.len()] == held[..];
        let out = if continues {
            let tail = &budgeted[held.len()..];
            if tail == sent.as_slice() {
                None
            } else {
                body.insert("input".to_owned(), Value::Array(tail.to_vec()));
                serde_json::to_string(&body).ok()
            }
        } else {
            if previous.is_some() {
                tracing::debug!(session = ?session, "budgeting changed what the upstream holds; sending the whole conversation");
            }
            if previous.is_none() && budgeted == sent {
                None
            } else {
                body.shift_remove("previous_response_id");
                body.insert("input".to_owned(), Value::Array(budgeted.clone()));
                serde_json::to_string(&body).ok()
            }
        };
        if let Some(out) = &out {
            record.chars_sent = crate::format::size::char_count(out);
        }
        self.pending = Some(Pending {
            record,
            session_dir,
            client,
            upstream: budgeted,
            output: Vec::new(),
            usage: None,
        });
        out
    }

    /// The conversation repaired and budgeted as an HTTP request's; on
    /// failure, the decisions already known put back, or as it came.
    async fn budget(
        &self,
        session: &SessionId,
        conversation: Vec<Value>,
        pricing: crate::budget::pricing::PricingParams,
        record: &mut Record,
    ) -> Vec<Value> {
        let format = Route::OpenAiResponses.format();
        let (messages, repaired) = crate::transcript::repair::repair_owned(format, conversation);
        if let Some(report) = &repaired {
            tracing::info!(session = %session, dropped_tool_uses = ?report.dropped_tool_uses, dropped_tool_results = ?report.dropped_tool_results, moved_tool_results = ?report.moved_tool_results, "repaired the pairing of a WebSocket request");
            record.repaired = true;
        }
        let link = self.proxy.link_session(&self.caller, session);
        let params_of = |messages: Vec<Value>| {
            super::conversation::apply_params(session, messages, format, &pricing, link)
        };
        let registry = self.proxy.registry();
        let config = self.proxy.config.clone();
        match crate::methods::budget_apply_queued_tracked(
            registry,
            config.clone(),
            params_of(messages.clone()),
        )
        .await
        {
            Ok(applied) => {
                let result = applied.result;
                record.results_persisted = result.persisted.len() as u64;
                record.results_cleared = result.cleared.len() as u64;
                record.budgeted = true;
                if !result.cleared.is_empty() {
                    tracing::info!(session = %session, cleared = ?result.cleared, "cleared old results of a WebSocket request");
                }
                result.messages.into_iter().map(|m| m.0).collect()
            }
            Err(err) => {
                let known = crate::methods::reapply_known_queued(
                    registry,
                    config,
                    params_of(messages.clone()),
                )
                .await;
                match known {
                    Ok(Some(known)) => {
                        tracing::warn!(session = %session, %err, "budgeting failed; forwarding with the decisions already known put back");
                        known.into_iter().map(|m| m.0).collect()
                    }
                    _ => {
                        tracing::warn!(session = %session, %err, "budgeting failed; forwarding the conversation unbudgeted (repaired if it had to be)");
                        messages
                    }
                }
            }
        }
    }

    /// A server event: read, never changed.
    fn server_event(&mut self, text: &str) {
        if self.pending.is_none() {
            return;
        }
        let Ok(event) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        let Some(pending) = self.pending.as_mut() else {
            return;
        };
        match kind {
            "response.output_item.done" => {
                if let Some(item) = event.get("item") {
                    pending.output.push(item.clone());
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" | "error" => {
                if let Some(usage) = Usage::find(Provider::OpenAi, &event) {
                    pending.usage = Some(usage);
                }
                pending.record.status = match kind {
                    "response.failed" => 500,
                    "error" => event
                        .get("status")
                        .and_then(Value::as_u64)
                        .and_then(|s| u16::try_from(s).ok())
                        .unwrap_or(400),
                    _ => 200,
                };
                let response = event.get("response");
                if kind == "response.completed" {
                    if pending.output.is_empty()
                        && let Some(Value::Array(items)) = response.and_then(|r| r.get("output"))
                    {
                        pending.output = items.clone();
                    }
                    let id = response
                        .and_then(|r| r.get("id"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    if let Some(mut done) = self.pending.take() {
                        let output = std::mem::take(&mut done.output);
                        self.client = std::mem::take(&mut done.client);
                        self.client.extend(output.iter().cloned());
                        self.upstream = std::mem::take(&mut done.upstream);
                        self.upstream.extend(output);
                        self.last_response = id;
                        finish(done, true);
                    }
                } else {
                    self.end_pending(true);
                }
            }
            _ => {}
        }
    }

    /// Nothing known of the conversation any more: a continuation of it
    /// passes as sent.
    fn forget(&mut self) {
        self.client.clear();
        self.upstream.clear();
        self.last_response = None;
    }

    fn end_pending(&mut self, complete: bool) {
        if let Some(pending) = self.pending.take() {
            finish(pending, complete);
        }
    }
}

fn finish(pending: Pending, complete: bool) {
    let Pending {
        mut record,
        session_dir,
        usage,
        ..
    } = pending;
    record.complete = complete;
    if let Some(dir) = session_dir {
        super::upstream::record_usage(&dir, record, usage);
    }
}

/// The handshake headers never cross from one side to the other.
fn strip_handshake(headers: &mut HeaderMap) {
    for name in HANDSHAKE {
        headers.remove(*name);
    }
}
