//! What the front remembers between a request and its response, and where
//! each message goes.
//!
//! The client's requests are recorded by id before they are forwarded, so
//! the server's response can be recognized (a handshake to amend, a
//! `tools/call` to budget) and, if the server dies, answered with an error.
//! Server messages are handled one at a time in arrival order: a response
//! being budgeted holds back the messages behind it, so nothing overtakes
//! it (a progress notification never arrives after its result).
//!
//! Each side's era ([`era`]) is learned from how it opens: the client's
//! from its first request (`initialize`, or a request with the modern
//! `_meta`), the server's from its answer to that (the client's own
//! `initialize`, or the `server/discover` probe the front sends for a
//! modern client, falling back to an `initialize` of its own as the stdio
//! transport's backward-compatibility rules say). The client's messages
//! wait while the front finds out; a server that answers neither way is
//! reported to the client as such, and one that does not answer within
//! the handshake timeout likewise.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::era::{self, Era};
use super::pipe::Pipe;
use super::results::Budgeted;
use super::{Scope, results, saved};
use crate::config::Effective;
use crate::error::Error;
use crate::json::ParseError;
use crate::protocol::SessionId;
use crate::session::Registry;
use crate::transport;

/// What a forwarded request was, for handling its response.
#[derive(Debug, Clone)]
enum Kind {
    /// `initialize` (in a batch) or `server/discover`: capabilities to amend.
    Handshake,
    ToolsList,
    ToolsCall {
        tool: String,
    },
    Other,
}

struct Waiting {
    id: Value,
    kind: Kind,
    method: String,
    /// The protocol revision the client made the request under.
    version: Option<String>,
    /// A modern client's request to a legacy server: the response is
    /// completed as the modern revision requires.
    to_modern: bool,
    /// The client cancelled it (`notifications/cancelled`): the server may
    /// never answer, and the client expects nothing.
    cancelled: bool,
    /// A legacy client's request to a modern server, as sent: retried with
    /// the client's answers when the server needs more input.
    retry: Option<Map<String, Value>>,
}

/// What the front learned about its two peers.
#[derive(Default)]
struct Peers {
    /// The protocol version a legacy client's `initialize` settled on.
    version: Option<String>,
    client_era: Option<Era>,
    server_era: Option<Era>,
    /// A legacy client in front of a modern server: the `_meta` its
    /// requests are stamped with (from its `initialize`).
    stamp: Option<Map<String, Value>>,
    /// A modern client in front of a legacy server: the server's
    /// `initialize` result, the source of `server/discover` answers.
    legacy_server: Option<Map<String, Value>>,
    has_resources: Option<bool>,
    has_tools: Option<bool>,
    /// The server lists its own `read_saved_output`: ours steps aside.
    has_read_tool: bool,
    /// Tool of each task a `tools/call` started (revision 2025-11-25): its
    /// result arrives later, answering `tasks/result`, and is budgeted then.
    task_tools: HashMap<String, String>,
    /// Each tool's `_meta["anthropic/maxResultSizeChars"]`, from `tools/list`.
    max_sizes: HashMap<String, u64>,
}

/// What [`Front::ask`] says when the server's output ended first.
const SERVER_EXITED: &str = "nothing: the server exited";

/// A response the front waits for itself: the line as it came and parsed.
type Answer = (Bytes, Value);

pub(super) struct Front {
    pub(super) session: SessionId,
    pub(super) config: Arc<Effective>,
    pub(super) registry: Arc<Registry>,
    read_tool: bool,
    handshake_timeout: Duration,
    to_client: Pipe,
    /// Taken when the client has gone, which closes the server's input.
    to_server: Mutex<Option<Pipe>>,
    waiting: Mutex<HashMap<String, Waiting>>,
    peers: Mutex<Peers>,
    /// Requests whose response the front awaits (its own probes, and a
    /// client's `initialize` while the server's era is being found out).
    answers: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    /// Requests the front made of the client (a modern server's input
    /// requests, for a legacy client), awaiting its answer.
    client_answers: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    own_ids: AtomicU64,
}

impl Scope for Front {
    fn session(&self) -> &SessionId {
        &self.session
    }

    fn config(&self) -> &Arc<Effective> {
        &self.config
    }

    fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    fn read_tool_active(&self) -> bool {
        self.read_tool && !lock(&self.peers).has_read_tool
    }

    fn declared_max(&self, tool: &str) -> Option<u64> {
        if self
            .config
            .tools
            .get(tool)
            .is_some_and(|t| t.max_result_chars.is_some())
        {
            return None;
        }
        lock(&self.peers).max_sizes.get(tool).copied()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request id as a map key (`1` and `"1"` are different ids).
fn key(id: &Value) -> String {
    id.to_string()
}

fn param_str<'a>(obj: &'a Map<String, Value>, name: &str) -> &'a str {
    obj.get("params")
        .and_then(|p| p.get(name))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_request(obj: &Map<String, Value>) -> bool {
    obj.get("method").is_some_and(Value::is_string) && obj.contains_key("id")
}

fn is_response(obj: &Map<String, Value>) -> bool {
    !obj.contains_key("method")
        && obj.contains_key("id")
        && (obj.contains_key("result") || obj.contains_key("error"))
}

/// Put back the content of the `tools/call` result answering `id` as `line`
/// holds it, into `result`: budgeting moved it away and failed (rare: the
/// session's storage failed), so it is read again from the line.
fn restore_content(line: &[u8], id: &Value, result: &mut Map<String, Value>) {
    let Ok(mut parsed) = crate::json::from_slice::<Value>(line) else {
        return;
    };
    let message = match &mut parsed {
        Value::Array(items) => items
            .iter_mut()
            .find(|m| m.get("id") == Some(id) && m.get("method").is_none()),
        other => Some(other),
    };
    if let Some(content) = message.and_then(|m| m.pointer_mut("/result/content")) {
        result.insert("content".into(), content.take());
    }
}

fn encode(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// A response, briefly, for an error message.
fn describe(answer: &Result<Answer, String>) -> String {
    match answer {
        Err(why) => why.clone(),
        Ok((_, msg)) => match msg.get("error") {
            Some(error) => format!(
                "error {} ({})",
                error.get("code").unwrap_or(&Value::Null),
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ),
            None => {
                let mut text = msg.get("result").unwrap_or(&Value::Null).to_string();
                if text.len() > 200 {
                    let mut cut = 200;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                    text.push('…');
                }
                format!("the result {text}")
            }
        },
    }
}

fn result_of(answer: &Result<Answer, String>) -> Option<&Map<String, Value>> {
    answer.as_ref().ok()?.1.get("result")?.as_object()
}

/// Whether `version` is a modern revision (its results carry `resultType`,
/// its "resource not found" is -32602).
fn modern_version(version: Option<&str>) -> bool {
    version.is_some_and(|v| {
        !era::LEGACY_VERSIONS.contains(&v) && saved::at_least(Some(v), era::MODERN)
    })
}

impl Front {
    pub(super) fn new(
        session: SessionId,
        config: Arc<Effective>,
        read_tool: bool,
        handshake_timeout: Duration,
        registry: Arc<Registry>,
        to_client: Pipe,
        to_server: Pipe,
    ) -> Front {
        Front {
            session,
            config,
            registry,
            read_tool,
            handshake_timeout,
            to_client,
            to_server: Mutex::new(Some(to_server)),
            waiting: Mutex::new(HashMap::new()),
            peers: Mutex::new(Peers::default()),
            answers: Mutex::new(HashMap::new()),
            client_answers: Mutex::new(HashMap::new()),
            own_ids: AtomicU64::new(1),
        }
    }

    /// The protocol version in force for a request: its own (the stateless
    /// revisions carry it in `_meta`), else the one `initialize` settled.
    pub(super) fn version_for(&self, params: Option<&Value>) -> Option<String> {
        era::declared_version(params)
            .map(str::to_owned)
            .or_else(|| lock(&self.peers).version.clone())
    }

    fn server_era(&self) -> Option<Era> {
        lock(&self.peers).server_era
    }

    /// Answer a client's request, in its revision's terms.
    pub(super) fn reply(
        &self,
        id: &Value,
        version: Option<&str>,
        result: std::result::Result<Value, Error>,
    ) {
        let mut msg = transport::response(id, result);
        if modern_version(version)
            && let Some(code) = msg.pointer_mut("/error/code")
            && code.as_i64() == Some(era::LEGACY_RESOURCE_NOT_FOUND)
        {
            *code = json!(era::MODERN_RESOURCE_NOT_FOUND);
        }
        self.to_client.send_value(&msg);
    }

    fn reply_error(&self, id: &Value, error: Value) {
        self.to_client
            .send_value(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
    }

    /// A line from the client that is not JSON: answered, never forwarded.
    pub(super) fn reply_parse_error(&self, reason: &str) {
        tracing::warn!(%reason, "the MCP client sent a line that is not JSON");
        self.reply(&Value::Null, None, Err(Error::Parse(reason.to_owned())));
    }

    async fn to_server(&self, line: Bytes) {
        let pipe = lock(&self.to_server).clone();
        if let Some(pipe) = pipe {
            pipe.forward(line).await;
        }
    }

    /// The client has gone: close the server's input.
    pub(super) fn close_server_input(&self) {
        lock(&self.to_server).take();
    }

    // ------------------------------------------------------ from the client --

    /// One line from the client: answered here, or recorded and forwarded
    /// (exactly as it came, unless the server's era needs it translated).
    pub(super) async fn on_client_line(self: &Arc<Self>, line: Bytes) {
        let value: Value = match crate::json::from_slice(&line) {
            Ok(value) => value,
            Err(ParseError::TooDeep { depth }) => {
                // Valid as far as read, only deeper than the front parses:
                // the server is the judge of it.
                tracing::debug!(depth, "forwarding a client message too deep to parse");
                return self.to_server(line).await;
            }
            Err(ParseError::Syntax(err)) => return self.reply_parse_error(&err.to_string()),
        };
        match value {
            Value::Object(obj) if is_request(&obj) => self.on_client_request(obj, line).await,
            Value::Object(obj) => {
                if is_response(&obj)
                    && let Some(tx) = obj
                        .get("id")
                        .and_then(|id| lock(&self.client_answers).remove(&key(id)))
                {
                    let _ = tx.send(Value::Object(obj));
                    return;
                }
                if obj.get("method").and_then(Value::as_str) == Some("notifications/initialized")
                    && self.server_era() == Some(Era::Modern)
                {
                    // The front completed the handshake on the modern
                    // server's behalf; it has none to be told of.
                    return;
                }
                self.note_cancel(&obj);
                self.to_server(line).await;
            }
            // A batch (protocol revisions up to 2025-03-26): forwarded whole,
            // its requests recorded so their responses are handled too.
            Value::Array(items) => {
                for obj in items.iter().filter_map(Value::as_object) {
                    if is_request(obj) {
                        self.record(obj, self.version_for(obj.get("params")), false);
                    } else {
                        self.note_cancel(obj);
                    }
                }
                self.to_server(line).await;
            }
            _ => self.to_server(line).await,
        }
    }

    async fn on_client_request(self: &Arc<Self>, mut obj: Map<String, Value>, line: Bytes) {
        let id = obj.get("id").cloned().unwrap_or(Value::Null);
        let method = obj
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if method == "initialize" {
            return self.client_initialize(&obj, line).await;
        }
        let modern = era::is_modern(obj.get("params"));
        if modern {
            lock(&self.peers).client_era = Some(Era::Modern);
            if self.server_era().is_none()
                && let Err(why) = self.find_server_era(era::meta(obj.get("params"))).await
            {
                return self.reply(&id, Some(era::MODERN), Err(Error::Internal(why)));
            }
        }
        let version = self.version_for(obj.get("params"));
        if self.answer_locally(&obj) {
            return;
        }
        match (modern, self.server_era()) {
            (true, Some(Era::Legacy)) => {
                let declared = era::declared_version(obj.get("params")).unwrap_or_default();
                if declared != era::MODERN {
                    return self.reply_error(&id, era::unsupported_version(declared));
                }
                if method == "server/discover" {
                    let initialized = lock(&self.peers).legacy_server.clone();
                    let mut result = era::discover_result(&initialized.unwrap_or_default());
                    if let Some(result) = result.as_object_mut() {
                        self.on_handshake(result);
                    }
                    return self.reply(&id, version.as_deref(), Ok(result));
                }
                self.record(&obj, version, true);
                era::strip_modern_meta(&mut obj);
                self.to_server(encode(&Value::Object(obj))).await;
            }
            (false, Some(Era::Modern)) => {
                let stamp = lock(&self.peers).stamp.clone();
                match method.as_str() {
                    // Gone from the modern revision: answered here.
                    "ping" => self.reply(&id, version.as_deref(), Ok(json!({}))),
                    "logging/setLevel" => {
                        if let (Some(mut stamp), Some(level)) =
                            (stamp, obj.get("params").and_then(|p| p.get("level")))
                        {
                            stamp.insert(era::META_LOG_LEVEL.into(), level.clone());
                            lock(&self.peers).stamp = Some(stamp);
                        }
                        self.reply(&id, version.as_deref(), Ok(json!({})));
                    }
                    _ => {
                        self.record(&obj, version, false);
                        if let Some(stamp) = stamp {
                            era::stamp_request(&mut obj, &stamp);
                        }
                        if let Some(w) = lock(&self.waiting).get_mut(&key(&id)) {
                            w.retry = Some(obj.clone());
                        }
                        self.to_server(encode(&Value::Object(obj))).await;
                    }
                }
            }
            _ => {
                self.record(&obj, version, false);
                self.to_server(line).await;
            }
        }
    }

    /// A legacy client's `initialize`: forwarded, and when the server turns
    /// it down, answered from the server's `server/discover` instead.
    async fn client_initialize(self: &Arc<Self>, obj: &Map<String, Value>, line: Bytes) {
        let id = obj.get("id").cloned().unwrap_or(Value::Null);
        let params = obj.get("params");
        lock(&self.peers).client_era = Some(Era::Legacy);
        let known = self.server_era();
        let answered = if known == Some(Era::Modern) {
            Err("not sent: the server is known to speak 2026-07-28".to_owned())
        } else {
            self.ask(&id, line).await
        };
        if let Ok((raw, msg)) = &answered {
            if msg.get("result").is_some_and(Value::is_object) {
                lock(&self.peers).server_era = Some(Era::Legacy);
                let mut msg = msg.clone();
                let changed = match msg.get_mut("result") {
                    Some(Value::Object(result)) => self.on_handshake(result),
                    _ => false,
                };
                if changed {
                    self.to_client.send_value(&msg);
                } else {
                    self.to_client.send_raw(raw.clone());
                }
                return;
            }
            if known == Some(Era::Legacy) {
                // A legacy server turning down a second `initialize`.
                self.to_client.send_raw(raw.clone());
                return;
            }
        }
        if answered
            .as_ref()
            .err()
            .is_some_and(|why| why == SERVER_EXITED)
        {
            return self.reply(&id, None, Err(Error::ServerExited(describe(&answered))));
        }
        // Perhaps a server of the modern revision only.
        let stamp = era::stamp_from_initialize(params);
        let probe = self
            .ask_own("server/discover", json!({ "_meta": stamp.clone() }))
            .await;
        match result_of(&probe).filter(|r| era::speaks_modern(r)) {
            Some(discovered) => {
                let asked = params
                    .and_then(|p| p.get("protocolVersion"))
                    .and_then(Value::as_str);
                let mut result = era::initialize_result(discovered, asked);
                {
                    let mut peers = lock(&self.peers);
                    peers.server_era = Some(Era::Modern);
                    peers.stamp = Some(stamp);
                }
                if let Some(result) = result.as_object_mut() {
                    self.on_handshake(result);
                }
                self.reply(&id, None, Ok(result));
            }
            None => {
                let why = format!(
                    "the MCP server speaks neither MCP {} nor {}: initialize answered {}; server/discover answered {}",
                    era::LEGACY,
                    era::MODERN,
                    describe(&answered),
                    describe(&probe)
                );
                tracing::error!("{why}");
                self.reply(&id, None, Err(Error::Internal(why)));
            }
        }
    }

    /// A modern client's first request: find out what the server speaks by
    /// probing with `server/discover`; a server that answers anything but a
    /// modern result (or a modern refusal of the version) is legacy, and
    /// the front makes the `initialize` handshake with it for the client.
    async fn find_server_era(
        &self,
        client_meta: Option<&Map<String, Value>>,
    ) -> Result<(), String> {
        let probe = self
            .ask_own("server/discover", era::discover_params(client_meta))
            .await;
        if let Some(result) = result_of(&probe).filter(|r| era::speaks_modern(r)) {
            self.found_server(Era::Modern, result);
            return Ok(());
        }
        if let Ok((_, msg)) = &probe
            && msg.pointer("/error/code").and_then(Value::as_i64) == Some(era::UNSUPPORTED_VERSION)
        {
            // Modern, with other versions: it tells the client so itself.
            lock(&self.peers).server_era = Some(Era::Modern);
            return Ok(());
        }
        if probe.as_ref().err().is_some_and(|why| why == SERVER_EXITED) {
            return Err(describe(&probe));
        }
        let init = self
            .ask_own("initialize", era::initialize_params(client_meta))
            .await;
        let initialized = result_of(&init).filter(|r| {
            r.get("protocolVersion")
                .and_then(Value::as_str)
                .is_some_and(|v| era::LEGACY_VERSIONS.contains(&v))
        });
        let Some(initialized) = initialized else {
            let why = format!(
                "the MCP server speaks neither MCP {} nor {}: server/discover answered {}; initialize answered {}",
                era::MODERN,
                era::LEGACY,
                describe(&probe),
                describe(&init)
            );
            tracing::error!("{why}");
            return Err(why);
        };
        self.found_server(Era::Legacy, initialized);
        lock(&self.peers).legacy_server = Some(initialized.clone());
        self.to_server(encode(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ))
        .await;
        Ok(())
    }

    /// The server's era is known, and from its handshake result whether it
    /// has resources of its own.
    fn found_server(&self, era: Era, handshake: &Map<String, Value>) {
        let has = |capability: &str| {
            handshake
                .get("capabilities")
                .is_some_and(|c| c.get(capability).is_some())
        };
        let mut peers = lock(&self.peers);
        peers.server_era = Some(era);
        peers.has_resources = Some(has("resources"));
        peers.has_tools = Some(has("tools"));
    }

    /// Send `line` (a request with id `id`) to the server and wait for its
    /// response, which then goes to the caller, not the client.
    async fn ask(&self, id: &Value, line: Bytes) -> Result<Answer, String> {
        let (tx, rx) = oneshot::channel();
        lock(&self.answers).insert(key(id), tx);
        self.to_server(line).await;
        match tokio::time::timeout(self.handshake_timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(SERVER_EXITED.to_owned()),
            Err(_) => {
                lock(&self.answers).remove(&key(id));
                Err(format!(
                    "nothing within {} s (--handshake-timeout)",
                    self.handshake_timeout.as_secs_f64()
                ))
            }
        }
    }

    /// A request of the front's own, awaited.
    async fn ask_own(&self, method: &str, params: Value) -> Result<Answer, String> {
        let n = self.own_ids.fetch_add(1, Ordering::Relaxed);
        let id = json!(format!("toolwire-mcp-front-{n}"));
        self.ask(&id, encode(&era::request(&id, method, params)))
            .await
    }

    fn record(&self, obj: &Map<String, Value>, version: Option<String>, to_modern: bool) {
        let (Some(id), Some(method)) = (obj.get("id"), obj.get("method").and_then(Value::as_str))
        else {
            return;
        };
        let kind = match method {
            "initialize" | "server/discover" => Kind::Handshake,
            "tools/list" => Kind::ToolsList,
            "tools/call" => Kind::ToolsCall {
                tool: param_str(obj, "name").to_owned(),
            },
            "tasks/result" => match lock(&self.peers).task_tools.get(param_str(obj, "taskId")) {
                Some(tool) => Kind::ToolsCall { tool: tool.clone() },
                None => Kind::Other,
            },
            _ => Kind::Other,
        };
        let waiting = Waiting {
            id: id.clone(),
            kind,
            method: method.to_owned(),
            version,
            to_modern,
            cancelled: false,
            retry: None,
        };
        lock(&self.waiting).insert(key(id), waiting);
    }

    fn note_cancel(&self, obj: &Map<String, Value>) {
        if obj.get("method").and_then(Value::as_str) != Some("notifications/cancelled") {
            return;
        }
        let Some(id) = obj.get("params").and_then(|p| p.get("requestId")) else {
            return;
        };
        if let Some(w) = lock(&self.waiting).get_mut(&key(id)) {
            w.cancelled = true;
        }
    }

    /// Requests the front answers itself. Returns whether it took it.
    fn answer_locally(self: &Arc<Self>, obj: &Map<String, Value>) -> bool {
        let (Some(id), Some(method)) = (obj.get("id"), obj.get("method").and_then(Value::as_str))
        else {
            return false;
        };
        let params = obj.get("params");
        let version = self.version_for(params);
        let local = match method {
            "tools/call"
                if self.read_tool_active()
                    && params.and_then(|p| p.get("name")).and_then(Value::as_str)
                        == Some(saved::READ_TOOL) =>
            {
                let arguments = params
                    .and_then(|p| p.get("arguments"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let front = self.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    let result =
                        saved::call_read_tool(&*front, arguments, version.as_deref()).await;
                    front.reply(&id, version.as_deref(), Ok(result));
                });
                return true;
            }
            "resources/read" => {
                let Some(uri) = params
                    .and_then(|p| p.get("uri"))
                    .and_then(Value::as_str)
                    .filter(|uri| uri.starts_with(saved::URI_PREFIX))
                else {
                    return false;
                };
                let (front, id, uri) = (self.clone(), id.clone(), uri.to_owned());
                tokio::spawn(async move {
                    let result = saved::read_resource(&*front, &uri, version.as_deref()).await;
                    front.reply(&id, version.as_deref(), result);
                });
                return true;
            }
            // The front announced resources on the server's behalf.
            "resources/list" if lock(&self.peers).has_resources == Some(false) => {
                json!({"resources": []})
            }
            "resources/templates/list" if lock(&self.peers).has_resources == Some(false) => {
                json!({"resourceTemplates": []})
            }
            // The front announced tools for its own alone.
            "tools/list"
                if lock(&self.peers).has_tools == Some(false) && self.read_tool_active() =>
            {
                json!({"tools": [saved::tool_definition(version.as_deref())]})
            }
            _ => return false,
        };
        let result = saved::complete_for(method, local, version.as_deref());
        self.reply(id, version.as_deref(), Ok(result));
        true
    }

    // ------------------------------------------------------ from the server --

    /// One line from the server: forwarded exactly, unless it answers a
    /// request whose result the front amends or awaits itself.
    pub(super) async fn on_server_line(self: &Arc<Self>, line: Bytes) {
        // A large tool result is parsed and budgeted here: once the front
        // has been without such lines for a moment, what that freed goes
        // back to the system.
        let _large =
            (line.len() > crate::transport::RELEASE_AFTER).then(crate::heap::LargeWork::begin);
        // A large line's long strings are unescaped straight into their
        // place (`json::lifted`): serde_json would build each in a scratch
        // buffer first, holding a large result twice over while parsing.
        let parsed = if line.len() >= crate::json::lifted::LARGE {
            crate::json::lifted::from_slice(&line)
        } else {
            crate::json::from_slice(&line)
        };
        let mut value: Value = match parsed {
            Ok(value) => value,
            Err(ParseError::TooDeep { depth }) => {
                // A message, only deeper than the front parses: never
                // dropped, passed on as it came (unbudgeted).
                tracing::debug!(depth, "forwarding a server message too deep to parse");
                let id = crate::json::request_id(&line);
                if !id.is_null() {
                    lock(&self.waiting).remove(&key(&id));
                    if let Some(tx) = lock(&self.answers).remove(&key(&id)) {
                        let stub = json!({"id": id, "error": {"code": crate::error::code::PARSE_ERROR, "message": "an answer nested too deep to read"}});
                        let _ = tx.send((line, stub));
                        return;
                    }
                }
                return self.to_client.forward(line).await;
            }
            Err(ParseError::Syntax(err)) => {
                // Not a message: passing it on could only break the client.
                tracing::warn!(%err, "dropped a line from the MCP server that is not JSON");
                return;
            }
        };
        if let Value::Object(obj) = &value {
            if is_response(obj)
                && let Some(tx) = obj
                    .get("id")
                    .and_then(|id| lock(&self.answers).remove(&key(id)))
            {
                let _ = tx.send((line, value));
                return;
            }
            if is_request(obj) && self.answer_server_request(obj) {
                return;
            }
        }
        let changed = match &mut value {
            Value::Object(_) => match self.on_server_message(&mut value, &line).await {
                Some(changed) => changed,
                // Taken over by the front (an input round for the client).
                None => return,
            },
            Value::Array(items) => {
                let mut changed = false;
                for item in items.iter_mut() {
                    changed |= self.on_server_message(item, &line).await.unwrap_or(false);
                }
                changed
            }
            _ => false,
        };
        if changed {
            let encoded = encode(&value);
            drop(value);
            self.to_client.forward(encoded).await;
        } else {
            // The parsed copy goes before the line is queued: a large
            // result is then held once more only while it is written.
            drop(value);
            self.to_client.forward(line).await;
        }
    }

    /// A legacy server's request to a modern client, which takes none on
    /// stdio: a `ping` is answered here, anything else refused clearly.
    /// Returns whether it took it.
    fn answer_server_request(&self, obj: &Map<String, Value>) -> bool {
        let (server, client) = {
            let peers = lock(&self.peers);
            (peers.server_era, peers.client_era)
        };
        if server != Some(Era::Legacy) || client != Some(Era::Modern) {
            return false;
        }
        let id = obj.get("id").cloned().unwrap_or(Value::Null);
        let method = obj
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let reply = if method == "ping" {
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": crate::error::code::METHOD_NOT_FOUND,
                "message": format!("{method}: the client speaks MCP {}, in which a server sends no requests on stdio", era::MODERN),
            }})
        };
        if let Some(pipe) = lock(&self.to_server).clone() {
            pipe.send_value(&reply);
        }
        true
    }

    /// Returns whether `msg` was changed, or `None` when the front took it
    /// over and nothing goes to the client now.
    async fn on_server_message(self: &Arc<Self>, msg: &mut Value, line: &[u8]) -> Option<bool> {
        let Some(obj) = msg.as_object_mut() else {
            return Some(false);
        };
        if !is_response(obj) {
            return Some(false);
        }
        let Some(id) = obj.get("id") else {
            return Some(false);
        };
        let Some(mut waiting) = lock(&self.waiting).remove(&key(id)) else {
            return Some(false);
        };
        // The id as the server wrote it (a retry's own id, see `input_round`).
        let answered = id.clone();
        if let Some(Value::Object(result)) = obj.get("result")
            && result.get("resultType").and_then(Value::as_str) == Some("input_required")
            && let Some(request) = waiting.retry.take()
        {
            // A legacy client knows no input rounds: it is asked the
            // server's questions as the server requests of its revision.
            let front = self.clone();
            let result = result.clone();
            tokio::spawn(async move { front.input_round(waiting, request, result).await });
            return None;
        }
        let mut changed = false;
        if let Some(Value::Object(result)) = obj.get_mut("result") {
            changed = match waiting.kind {
                Kind::Handshake => self.on_handshake(result),
                Kind::ToolsList => self.on_tools_list(result, waiting.version.as_deref()),
                Kind::ToolsCall { ref tool } => {
                    if let Some(task) = result
                        .get("task")
                        .and_then(|t| t.get("taskId"))
                        .and_then(Value::as_str)
                    {
                        lock(&self.peers)
                            .task_tools
                            .insert(task.to_owned(), tool.clone());
                        false
                    } else {
                        match results::budget(&**self, tool, waiting.version.as_deref(), result)
                            .await
                        {
                            Budgeted::Replaced => true,
                            Budgeted::Kept => false,
                            Budgeted::Lost => {
                                restore_content(line, &answered, result);
                                false
                            }
                        }
                    }
                }
                Kind::Other => false,
            };
        }
        if waiting.to_modern {
            changed |= era::modernize_response(&waiting.method, obj);
        }
        if obj.get("id") != Some(&waiting.id) {
            // The answer to a retry the front made (`input_round`).
            obj.insert("id".into(), waiting.id.clone());
            changed = true;
        }
        Some(changed)
    }

    /// A modern server needs more input for a legacy client's request
    /// (`resultType: "input_required"`, the multi round-trip pattern): each
    /// of its `inputRequests` goes to the client as the request the client's
    /// revision knows (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`), and the original request is retried, under its own
    /// id, with the answers as `inputResponses` and the server's
    /// `requestState`. The client sees one request and one result.
    async fn input_round(
        self: Arc<Self>,
        waiting: Waiting,
        mut request: Map<String, Value>,
        result: Map<String, Value>,
    ) {
        let mut responses = Map::new();
        let asked = result
            .get("inputRequests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (name, ask) in asked {
            let n = self.own_ids.fetch_add(1, Ordering::Relaxed);
            let own = json!(format!("toolwire-mcp-front-{n}"));
            let (tx, rx) = oneshot::channel();
            lock(&self.client_answers).insert(key(&own), tx);
            let method = ask.get("method").cloned().unwrap_or(Value::Null);
            let params = ask.get("params").cloned().unwrap_or_else(|| json!({}));
            self.to_client.send_value(
                &json!({"jsonrpc": "2.0", "id": own, "method": method, "params": params}),
            );
            // No time limit: a person may be answering.
            let Ok(answer) = rx.await else {
                return;
            };
            match answer.get("result") {
                Some(result) => {
                    responses.insert(name, result.clone());
                }
                None => {
                    let error = answer.get("error").cloned().unwrap_or(Value::Null);
                    let why =
                        format!("the client answered the server's {method} with an error: {error}");
                    return self.reply(
                        &waiting.id,
                        waiting.version.as_deref(),
                        Err(Error::Internal(why)),
                    );
                }
            }
        }
        if let Some(Value::Object(params)) = request.get_mut("params") {
            params.insert("inputResponses".into(), Value::Object(responses));
            match result.get("requestState") {
                Some(state) => params.insert("requestState".into(), state.clone()),
                None => params.remove("requestState"),
            };
        }
        // A retry is a new request (the server has answered the first):
        // its own id, mapped back to the client's when the answer comes.
        let n = self.own_ids.fetch_add(1, Ordering::Relaxed);
        let retry_id = json!(format!("toolwire-mcp-front-{n}"));
        request.insert("id".into(), retry_id.clone());
        lock(&self.waiting).insert(
            key(&retry_id),
            Waiting {
                retry: Some(request.clone()),
                ..waiting
            },
        );
        self.to_server(encode(&Value::Object(request))).await;
    }

    /// An `initialize` or `server/discover` result: the front's links must
    /// be readable with `resources/read`, so it has a `resources`
    /// capability whatever the server has, and a `tools` one while the
    /// front lists `read_saved_output`.
    fn on_handshake(&self, result: &mut Map<String, Value>) -> bool {
        let mut peers = lock(&self.peers);
        if let Some(version) = result.get("protocolVersion").and_then(Value::as_str) {
            peers.version = Some(version.to_owned());
        }
        let Some(Value::Object(caps)) = result.get_mut("capabilities") else {
            return false;
        };
        let has_resources = caps.contains_key("resources");
        let has_tools = caps.contains_key("tools");
        peers.has_resources = Some(has_resources);
        peers.has_tools = Some(has_tools);
        let mut changed = false;
        if !has_resources {
            caps.insert("resources".into(), json!({}));
            changed = true;
        }
        if !has_tools && self.read_tool {
            // `read_saved_output` is a tool, listed by the front alone.
            caps.insert("tools".into(), json!({}));
            changed = true;
        }
        changed
    }

    /// A `tools/list` page, in the server's order: each tool's declared
    /// result size is noted, and `read_saved_output` goes after the last
    /// page's tools.
    fn on_tools_list(&self, result: &mut Map<String, Value>, version: Option<&str>) -> bool {
        let Some(Value::Array(tools)) = result.get_mut("tools") else {
            return false;
        };
        {
            let mut peers = lock(&self.peers);
            for tool in tools.iter() {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if name == saved::READ_TOOL {
                    peers.has_read_tool = true;
                }
                match tool
                    .get("_meta")
                    .and_then(|m| m.get(results::MAX_RESULT_SIZE_META))
                    .and_then(Value::as_u64)
                {
                    Some(max) => peers.max_sizes.insert(name.to_owned(), max),
                    None => peers.max_sizes.remove(name),
                };
            }
        }
        // Appended once, to the last page.
        if !self.read_tool_active() || result.get("nextCursor").is_some_and(|c| !c.is_null()) {
            return false;
        }
        if let Some(Value::Array(tools)) = result.get_mut("tools") {
            tools.push(saved::tool_definition(version));
        }
        true
    }

    /// The server has gone: every request still waiting for it gets an
    /// error, so no client call hangs.
    pub(super) fn fail_pending(&self, status: &str) {
        let waiting: Vec<Waiting> = lock(&self.waiting).drain().map(|(_, w)| w).collect();
        for w in waiting.into_iter().filter(|w| !w.cancelled) {
            self.reply(
                &w.id,
                w.version.as_deref(),
                Err(Error::ServerExited(format!(
                    "the MCP server exited ({status}) before answering"
                ))),
            );
        }
    }

    /// The server's output has ended: whatever the front awaits from it
    /// will not come.
    pub(super) fn server_gone(&self) {
        lock(&self.answers).clear();
    }

    /// The front is ending: questions put to the client will not be answered.
    pub(super) fn client_gone(&self) {
        lock(&self.client_answers).clear();
    }
}
