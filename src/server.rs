//! The server: one process-wide [`Server`] (sessions and storage) serving
//! any number of connections, each with the LSP lifecycle.
//!
//! A connection's reader decodes frames and dispatches each message without
//! waiting for any handler: lifecycle messages are handled inline (they only
//! touch the connection), session-changing requests are queued on their
//! session, and everything else runs on its own task. Replies go out as they
//! complete, in any order, through the connection's writer task.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::config::{self, Effective};
use crate::error::{Error, Result};
use crate::methods::{self, ConnShared, RequestCx};
use crate::protocol::{
    Experimental, InitializeParams, InitializeResult, NameVersion, ServerCapabilities,
    ToolwireCapabilities,
};
use crate::session::{Registry, Storage};
use crate::transport::codec::{Frame, LspCodec};
use crate::transport::{self, Incoming, Outbox};

pub const PROTOCOL_VERSION: u32 = 4;

/// How many requests the connection's reader dispatches before it lets the
/// tasks it woke run on its thread. One read often brings many requests
/// (a harness sends every session's next pair at once); without a pause
/// the reader parses them all before the first session job starts on its
/// thread, so every reply of the batch waits for the whole batch, and the
/// client sends nothing new meanwhile. Yielding every few requests lets
/// replies leave while the rest are read (measured on the storage bench's
/// stdio client: 72k pairs/s without, 85-87k with 8 or 16; 4 or every
/// request switches threads more than it saves).
const DISPATCH_BEFORE_YIELD: u32 = 16;

pub struct Server {
    pub registry: Registry,
    next_conn: AtomicU64,
}

impl Server {
    pub fn new(storage: Storage) -> Arc<Server> {
        Server::with_session_idle(storage, crate::session::session_idle())
    }

    /// A server whose idle sessions close their transcripts after `idle`.
    pub fn with_session_idle(storage: Storage, idle: std::time::Duration) -> Arc<Server> {
        Arc::new(Server {
            registry: Registry::new(storage, idle),
            // Connection ids own pending pairs, which a shared store keeps
            // for every replica: each process starts at its own random
            // point, so one replica's connection never passes for another's.
            next_conn: AtomicU64::new(fastrand::u64(1..1 << 62)),
        })
    }
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionEnd {
    /// The client sent `exit`.
    pub exit: bool,
    /// `shutdown` was received before the end.
    pub shutdown: bool,
}

impl ConnectionEnd {
    /// The LSP exit code for a process serving this one connection.
    pub fn exit_code(&self) -> i32 {
        if self.shutdown { 0 } else { 1 }
    }
}

enum Phase {
    Uninitialized,
    Running(Arc<Effective>),
    ShuttingDown(Arc<Effective>),
}

/// Where a reply goes: straight out, or into a batch being assembled.
#[derive(Clone)]
enum ReplySink {
    Direct(Outbox),
    Batch(mpsc::UnboundedSender<Value>),
}

impl ReplySink {
    fn reply(&self, id: &Value, result: Result<Value>) {
        let message = transport::response(id, result);
        match self {
            ReplySink::Direct(outbox) => outbox.send_value(&message),
            ReplySink::Batch(tx) => {
                let _ = tx.send(message);
            }
        }
    }

    /// Reply with a result already encoded; written out as it is.
    fn reply_encoded(&self, id: &Value, result: Result<Box<RawValue>>) {
        match self {
            ReplySink::Direct(outbox) => {
                outbox.send_raw(transport::response_bytes(id, result).into());
            }
            // A batch is answered as one array of values.
            ReplySink::Batch(_) => self.reply(
                id,
                result.and_then(|raw| {
                    crate::json::from_slice(raw.get().as_bytes())
                        .map_err(|e| Error::Internal(e.to_string()))
                }),
            ),
        }
    }
}

struct Connection {
    server: Arc<Server>,
    shared: Arc<ConnShared>,
    phase: Phase,
    /// Why the last `initialize` was refused, repeated to the requests
    /// that follow it (they are otherwise told to send `initialize`).
    initialize_failed: Option<String>,
    inflight: Arc<Mutex<Inflight>>,
    end: ConnectionEnd,
}

/// The requests of a connection in flight, each with its cancellation.
/// Every request is inserted and removed once: XXH3 rather than SipHash.
type Inflight = HashMap<RequestKey, CancellationToken, crate::state::IdHash>;

/// A request id as the in-flight map keys it: an integer id (what nearly
/// every client sends) as itself, with no string formatted per request;
/// any other id by its JSON text, which tells apart `1`, `1.0` and `"1"`.
#[derive(Hash, PartialEq, Eq)]
enum RequestKey {
    Int(i64),
    Text(String),
}

impl RequestKey {
    fn of(id: &Value) -> RequestKey {
        match id {
            // `-0` reads as the integer 0 but is another id than `0`.
            Value::Number(n) => match n.as_i64() {
                Some(i) if i != 0 || !n.to_string().starts_with('-') => RequestKey::Int(i),
                _ => RequestKey::Text(id.to_string()),
            },
            _ => RequestKey::Text(id.to_string()),
        }
    }
}

/// Serve one client until it exits or its input ends; then flush every pair
/// it left pending and wait for its replies to be written.
pub async fn serve_connection<R, W>(server: Arc<Server>, reader: R, writer: W) -> ConnectionEnd
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (outbox, writer_task) = transport::spawn_writer(writer);
    let id = server.next_conn.fetch_add(1, Ordering::Relaxed);
    let mut conn = Connection {
        server,
        shared: Arc::new(ConnShared {
            id,
            outbox,
            touched: Mutex::new(Default::default()),
        }),
        phase: Phase::Uninitialized,
        initialize_failed: None,
        inflight: Arc::new(Mutex::new(Inflight::default())),
        end: ConnectionEnd {
            exit: false,
            shutdown: false,
        },
    };
    let mut frames = FramedRead::new(reader, LspCodec::default());
    // A large request leaves a read buffer of its size behind. It reads
    // the next frame in place, once this one is dropped, unless the
    // client pauses: then what it holds is copied out and it is freed.
    let mut large_buffer = false;
    // A request carrying a conversation leaves memory freed behind it
    // (its parsed values, the previews it rendered). Once the client
    // pauses and nothing is in flight, it is handed back to the system.
    let mut release_due = false;
    // Requests dispatched since the reader last yielded its thread.
    let mut dispatched = 0;
    loop {
        let frame = if large_buffer || release_due {
            // Reading a frame is cancel-safe: a frame half read when the
            // pause ends stays in the buffer, and is copied with it.
            tokio::select! {
                frame = frames.next() => frame,
                () = tokio::time::sleep(transport::BUFFER_IDLE) => {
                    let release = release_due && conn.is_idle();
                    if large_buffer || release {
                        let buffer = frames.read_buffer_mut();
                        *buffer = bytes::BytesMut::from(&buffer[..]);
                        large_buffer = false;
                    }
                    if release {
                        conn.shared.outbox.release_buffer();
                        crate::heap::release_in_background();
                        release_due = false;
                    }
                    continue;
                }
            }
        } else {
            frames.next().await
        };
        let Some(frame) = frame else { break };
        match frame {
            Ok(Frame::Body(body)) => {
                large_buffer |= body.len() > transport::BUFFER_KEPT;
                release_due |= body.len() > transport::RELEASE_AFTER;
                conn.on_body(&body);
                dispatched += 1;
                if dispatched == DISPATCH_BEFORE_YIELD {
                    dispatched = 0;
                    tokio::task::yield_now().await;
                }
            }
            Ok(Frame::Malformed(reason)) => {
                tracing::warn!(%reason, "malformed frame");
                ReplySink::Direct(conn.shared.outbox.clone())
                    .reply(&Value::Null, Err(Error::Parse(reason)));
            }
            Err(err) => {
                tracing::warn!(%err, "reading from the client failed");
                break;
            }
        }
        if conn.end.exit {
            break;
        }
    }
    conn.flush_pairs("client connection ended").await;
    let end = conn.end;
    drop(conn);
    let _ = writer_task.await;
    end
}

impl Connection {
    /// No request of this connection is being handled.
    fn is_idle(&self) -> bool {
        self.inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    fn on_body(&mut self, body: &[u8]) {
        if self.on_plain_request(body) {
            return;
        }
        let direct = ReplySink::Direct(self.shared.outbox.clone());
        // Valid JSON the server will not hold is answered as the request
        // it carries, not with an anonymous parse error.
        let value: Value = match crate::json::request_or_refusal(body) {
            Ok(value) => value,
            Err(refusal) => {
                let (id, err) = *refusal;
                return direct.reply(&id, Err(err));
            }
        };
        match value {
            Value::Array(items) if items.is_empty() => {
                direct.reply(
                    &Value::Null,
                    Err(Error::InvalidRequest("empty batch".into())),
                );
            }
            Value::Array(items) => self.on_batch(items),
            single => self.on_message(Incoming::classify(single), &direct),
        }
    }

    /// A JSON-RPC batch: every element is dispatched in order, and the
    /// replies go back together in one array once all are ready.
    fn on_batch(&mut self, items: Vec<Value>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = ReplySink::Batch(tx);
        let mut expected = 0;
        for item in items {
            let incoming = Incoming::classify(item);
            if matches!(
                incoming,
                Incoming::Request { .. } | Incoming::Invalid { .. }
            ) {
                expected += 1;
            }
            self.on_message(incoming, &sink);
        }
        drop(sink);
        let outbox = self.shared.outbox.clone();
        tokio::spawn(async move {
            let mut replies = Vec::with_capacity(expected);
            while let Some(reply) = rx.recv().await {
                replies.push(reply);
            }
            if !replies.is_empty() {
                outbox.send_value(&Value::Array(replies));
            }
        });
    }

    fn on_message(&mut self, incoming: Incoming, sink: &ReplySink) {
        match incoming {
            Incoming::Invalid { id, error } => sink.reply(&id, Err(error)),
            Incoming::Response => {}
            Incoming::Notification { method, params } => self.on_notification(&method, params),
            Incoming::Request { id, method, params } => self.on_request(id, &method, params, sink),
        }
    }

    fn on_notification(&mut self, method: &str, params: Value) {
        match method {
            "exit" => self.end.exit = true,
            "$/cancelRequest" => {
                if let Some(id) = params.get("id") {
                    let inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(token) = inflight.get(&RequestKey::of(id)) {
                        token.cancel();
                    }
                }
            }
            // `initialized`, `$/setTrace` and unknown notifications need no answer.
            _ => tracing::debug!(method, "notification ignored"),
        }
    }

    fn on_request(&mut self, id: Value, method: &str, params: Value, sink: &ReplySink) {
        let config = match (&self.phase, method) {
            (Phase::Uninitialized, "initialize") => {
                let result = self.initialize(params);
                self.initialize_failed = result.as_ref().err().map(|err| err.to_string());
                sink.reply(&id, result);
                return;
            }
            (Phase::Uninitialized, _) => {
                let initialize_failed = self.initialize_failed.clone();
                return sink.reply(&id, Err(Error::NotInitialized { initialize_failed }));
            }
            (_, "initialize") => {
                return sink.reply(
                    &id,
                    Err(Error::InvalidRequest(
                        "`initialize` may be sent only once".into(),
                    )),
                );
            }
            (Phase::ShuttingDown(_), _) => {
                return sink.reply(
                    &id,
                    Err(Error::InvalidRequest("the server is shutting down".into())),
                );
            }
            (Phase::Running(config), "shutdown") => {
                let config = config.clone();
                self.phase = Phase::ShuttingDown(config.clone());
                self.end.shutdown = true;
                let slots = self.take_touched();
                let (owner, sink, id) = (self.shared.id, sink.clone(), id);
                tokio::spawn(async move {
                    methods::flush_for_connection(
                        slots,
                        owner,
                        config.abort_mode,
                        config.fsync(),
                        "server shutting down",
                    )
                    .await;
                    sink.reply(&id, Ok(Value::Null));
                });
                return;
            }
            (Phase::Running(config), _) => config.clone(),
        };
        let (cx, respond) = self.begin(config, id, sink);
        methods::dispatch(method, cx, params, respond);
    }

    /// A request `dispatch` may take with its params as text: a custom
    /// method's, an object with an integer or string id, from a small body
    /// in a running connection. Anything else (a batch, a notification, a
    /// lifecycle method, an envelope with a duplicate or extra member, an
    /// escaped method name, a large body) is not matched, and goes the
    /// ordinary way, which answers it as it always has.
    fn on_plain_request(&mut self, body: &[u8]) -> bool {
        let Phase::Running(config) = &self.phase else {
            return false;
        };
        if body.len() >= crate::json::lifted::LARGE {
            return false;
        }
        if let Some(envelope) = transport::envelope::plain_envelope(body)
            && let Some((route, session)) =
                methods::dispatch_unchecked(envelope.method, &body[envelope.params.clone()])
        {
            let config = config.clone();
            let sink = ReplySink::Direct(self.shared.outbox.clone());
            let (cx, respond) = self.begin(config, Value::from(envelope.id), &sink);
            let body = methods::UncheckedBody {
                body: body.into(),
                params: envelope.params,
            };
            route(cx, session, body, respond);
            return true;
        }
        let Some(request) = transport::envelope::read(body) else {
            return false;
        };
        if !matches!(request.id, Value::Number(_) | Value::String(_))
            || !request.params.get().starts_with('{')
        {
            return false;
        }
        let Some(route) = methods::dispatch_text(request.method) else {
            return false;
        };
        let config = config.clone();
        let sink = ReplySink::Direct(self.shared.outbox.clone());
        let (cx, respond) = self.begin(config, request.id, &sink);
        route(cx, request.params, respond);
        true
    }

    /// Register request `id` as in flight, with what its handler needs and
    /// where its answer goes (which takes it out of flight again).
    fn begin(
        &mut self,
        config: Arc<Effective>,
        id: Value,
        sink: &ReplySink,
    ) -> (RequestCx, methods::Respond) {
        let token = CancellationToken::new();
        let key = RequestKey::of(&id);
        self.inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(RequestKey::of(&id), token.clone());
        let cx = RequestCx {
            registry: self.server.registry.clone(),
            conn: self.shared.clone(),
            config,
            cancel: token,
        };
        let inflight = self.inflight.clone();
        let sink = sink.clone();
        let respond = methods::Respond::new(move |answer_id, result| {
            inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            sink.reply_encoded(answer_id.as_ref().unwrap_or(&id), result);
        });
        (cx, respond)
    }

    fn initialize(&mut self, raw: Value) -> Result<Value> {
        let params: InitializeParams = methods::params(raw)?;
        let workspace = workspace_root(&params)?;
        let config = config::load(&workspace, params.initialization_options.as_ref())?;
        crate::private::prepare(&config.data_dir);
        tracing::info!(workspace = %workspace.display(), data_dir = %config.data_dir.display(), client = ?params.client_info.as_ref().map(|c| &c.name), "initialized");
        self.phase = Phase::Running(Arc::new(config));
        let result = InitializeResult {
            server_info: NameVersion {
                name: "toolwire".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            },
            capabilities: ServerCapabilities {
                experimental: Experimental {
                    toolwire: ToolwireCapabilities {
                        protocol_version: PROTOCOL_VERSION,
                        methods: methods::CUSTOM_METHODS
                            .iter()
                            .map(|m| m.to_string())
                            .collect(),
                    },
                },
            },
        };
        serde_json::to_value(result).map_err(|e| Error::Internal(e.to_string()))
    }

    fn take_touched(&self) -> Vec<Arc<crate::session::Slot>> {
        let mut touched = self
            .shared
            .touched
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        touched.drain().map(|(_, slot)| slot).collect()
    }

    async fn flush_pairs(&mut self, reason: &'static str) {
        let config = match &self.phase {
            Phase::Running(c) | Phase::ShuttingDown(c) => c.clone(),
            Phase::Uninitialized => return,
        };
        let slots = self.take_touched();
        methods::flush_for_connection(
            slots,
            self.shared.id,
            config.abort_mode,
            config.fsync(),
            reason,
        )
        .await;
    }
}

/// The workspace root: `rootUri`, else the first workspace folder, else the
/// current directory.
fn workspace_root(params: &InitializeParams) -> Result<PathBuf> {
    let (uri, path) = match (&params.root_uri, &params.workspace_folders) {
        (Some(uri), _) => (uri.as_str(), "rootUri"),
        (None, Some(folders)) if !folders.is_empty() => {
            (folders[0].uri.as_str(), "workspaceFolders[0].uri")
        }
        _ => {
            return std::env::current_dir()
                .map_err(|err| Error::Internal(format!("no current directory: {err}")));
        }
    };
    let root = url::Url::parse(uri)
        .ok()
        .filter(|u| u.scheme() == "file")
        .and_then(|u| u.to_file_path().ok())
        .ok_or_else(|| {
            Error::invalid_params(path, format!("expected a file:// URI, got {uri:?}"))
        })?;
    // A workspace that does not exist is a mistake to report, never a
    // directory to create (10.1); an existing one is named canonically so
    // two spellings of it share their sessions.
    match std::fs::canonicalize(&root) {
        Ok(dir) if dir.is_dir() => Ok(dir),
        Ok(_) => Err(Error::invalid_params(
            path,
            format!("{} is not a directory", root.display()),
        )),
        Err(err) => Err(Error::invalid_params(
            path,
            format!("{}: {err}", root.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::RequestKey;

    /// Ids are told apart as their JSON text tells them apart.
    #[test]
    fn request_keys_are_as_distinct_as_the_ids() {
        let ids = [
            "0",
            "-0",
            "1",
            "1.0",
            "\"1\"",
            "-7",
            "1e2",
            "100",
            "18446744073709551616",
        ];
        for (i, a) in ids.iter().enumerate() {
            for (j, b) in ids.iter().enumerate() {
                let (ka, kb) = (
                    RequestKey::of(&serde_json::from_str(a).unwrap()),
                    RequestKey::of(&serde_json::from_str(b).unwrap()),
                );
                assert_eq!(ka == kb, i == j, "{a} and {b}");
            }
        }
    }
}
