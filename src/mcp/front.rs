//! What the front remembers between a request and its response, and where
//! each message goes.
//!
//! The client's requests are recorded by id before they are forwarded, so
//! the server's response can be recognized (an `initialize` to amend, a
//! `tools/call` to budget) and, if the server dies, answered with an error.
//! Server messages are handled one at a time in arrival order: a response
//! being budgeted holds back the messages behind it, so nothing overtakes
//! it (a progress notification never arrives after its result).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{results, saved};
use crate::config::Effective;
use crate::error::Error;
use crate::protocol::SessionId;
use crate::session::Registry;
use crate::transport::{self, Outbox};

/// What a forwarded request was, for handling its response.
#[derive(Debug, Clone)]
enum Kind {
    /// `initialize` or `server/discover`: capabilities to amend.
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
    /// The protocol revision the request was made under.
    version: Option<String>,
    /// The client cancelled it (`notifications/cancelled`): the server may
    /// never answer, and the client expects nothing.
    cancelled: bool,
}

/// What the server told us about itself.
#[derive(Default)]
struct Peer {
    /// The protocol version `initialize` settled on.
    version: Option<String>,
    has_resources: Option<bool>,
    /// The server lists its own `read_saved_output`: ours steps aside.
    has_read_tool: bool,
    /// Tool of each task a `tools/call` started (revision 2025-11-25): its
    /// result arrives later, answering `tasks/result`, and is budgeted then.
    task_tools: HashMap<String, String>,
}

pub(super) struct Front {
    pub(super) session: SessionId,
    pub(super) config: Arc<Effective>,
    pub(super) registry: Arc<Registry>,
    read_tool: bool,
    to_client: Outbox,
    waiting: Mutex<HashMap<String, Waiting>>,
    peer: Mutex<Peer>,
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

impl Front {
    pub(super) fn new(
        session: SessionId,
        config: Arc<Effective>,
        read_tool: bool,
        registry: Arc<Registry>,
        to_client: Outbox,
    ) -> Front {
        Front {
            session,
            config,
            registry,
            read_tool,
            to_client,
            waiting: Mutex::new(HashMap::new()),
            peer: Mutex::new(Peer::default()),
        }
    }

    /// The protocol version in force for a request: its own (the stateless
    /// revisions carry it in `_meta`), else the one `initialize` settled.
    pub(super) fn version_for(&self, params: Option<&Value>) -> Option<String> {
        params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| lock(&self.peer).version.clone())
    }

    /// Whether `read_saved_output` is ours to list and answer.
    pub(super) fn read_tool_active(&self) -> bool {
        self.read_tool && !lock(&self.peer).has_read_tool
    }

    pub(super) fn reply(&self, id: &Value, result: std::result::Result<Value, Error>) {
        self.to_client.send_value(&transport::response(id, result));
    }

    /// A line from the client that is not JSON: answered, never forwarded.
    pub(super) fn reply_parse_error(&self, reason: &str) {
        tracing::warn!(%reason, "the MCP client sent a line that is not JSON");
        self.reply(&Value::Null, Err(Error::Parse(reason.to_owned())));
    }

    /// One line from the client: answered here, or recorded and forwarded
    /// exactly as it came.
    pub(super) fn on_client_line(self: &Arc<Self>, line: Bytes, to_server: &Outbox) {
        let value: Value = match serde_json::from_slice(&line) {
            Ok(value) => value,
            Err(err) => return self.reply_parse_error(&err.to_string()),
        };
        match &value {
            Value::Object(obj) if is_request(obj) => {
                if self.answer_locally(obj) {
                    return;
                }
                self.record(obj);
            }
            Value::Object(obj) => self.note_cancel(obj),
            // A batch (protocol revisions up to 2025-03-26): forwarded whole,
            // its requests recorded so their responses are handled too.
            Value::Array(items) => {
                for obj in items.iter().filter_map(Value::as_object) {
                    if is_request(obj) {
                        self.record(obj);
                    } else {
                        self.note_cancel(obj);
                    }
                }
            }
            _ => {}
        }
        to_server.send_raw(line);
    }

    fn record(&self, obj: &Map<String, Value>) {
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
            "tasks/result" => match lock(&self.peer).task_tools.get(param_str(obj, "taskId")) {
                Some(tool) => Kind::ToolsCall { tool: tool.clone() },
                None => Kind::Other,
            },
            _ => Kind::Other,
        };
        let waiting = Waiting {
            id: id.clone(),
            kind,
            version: self.version_for(obj.get("params")),
            cancelled: false,
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
        let modern = self.version_for(params);
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
                    let result = saved::call_read_tool(&front, arguments, modern.as_deref()).await;
                    front.reply(&id, Ok(result));
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
                    let result = saved::read_resource(&front, &uri, modern.as_deref()).await;
                    front.reply(&id, result);
                });
                return true;
            }
            // The front announced resources on the server's behalf.
            "resources/list" if lock(&self.peer).has_resources == Some(false) => {
                json!({"resources": []})
            }
            "resources/templates/list" if lock(&self.peer).has_resources == Some(false) => {
                json!({"resourceTemplates": []})
            }
            _ => return false,
        };
        self.reply(id, Ok(saved::complete(local, modern.as_deref())));
        true
    }

    /// One line from the server: forwarded exactly, unless it answers a
    /// request whose result the front amends.
    pub(super) async fn on_server_line(&self, line: Bytes) {
        // A large tool result is parsed and budgeted here: once the front
        // has been without such lines for a moment, what that freed goes
        // back to the system.
        let _large =
            (line.len() > crate::transport::RELEASE_AFTER).then(crate::heap::LargeWork::begin);
        let mut value: Value = match serde_json::from_slice(&line) {
            Ok(value) => value,
            Err(err) => {
                // Not a message: passing it on could only break the client.
                tracing::warn!(%err, "dropped a line from the MCP server that is not JSON");
                return;
            }
        };
        let changed = match &mut value {
            Value::Object(_) => self.on_server_message(&mut value).await,
            Value::Array(items) => {
                let mut changed = false;
                for item in items.iter_mut() {
                    changed |= self.on_server_message(item).await;
                }
                changed
            }
            _ => false,
        };
        if changed {
            self.to_client.send_value(&value);
        } else {
            self.to_client.send_raw(line);
        }
    }

    /// Returns whether `msg` was changed.
    async fn on_server_message(&self, msg: &mut Value) -> bool {
        let Some(obj) = msg.as_object_mut() else {
            return false;
        };
        if !is_response(obj) {
            return false;
        }
        let Some(id) = obj.get("id") else {
            return false;
        };
        let Some(waiting) = lock(&self.waiting).remove(&key(id)) else {
            return false;
        };
        let Some(Value::Object(result)) = obj.get_mut("result") else {
            return false;
        };
        match waiting.kind {
            Kind::Handshake => self.on_handshake(result),
            Kind::ToolsList => self.on_tools_list(result),
            Kind::ToolsCall { tool } => {
                if let Some(task) = result
                    .get("task")
                    .and_then(|t| t.get("taskId"))
                    .and_then(Value::as_str)
                {
                    lock(&self.peer).task_tools.insert(task.to_owned(), tool);
                    return false;
                }
                results::budget(self, &tool, waiting.version.as_deref(), result).await
            }
            Kind::Other => false,
        }
    }

    fn on_handshake(&self, result: &mut Map<String, Value>) -> bool {
        let mut peer = lock(&self.peer);
        if let Some(version) = result.get("protocolVersion").and_then(Value::as_str) {
            peer.version = Some(version.to_owned());
        }
        let Some(Value::Object(caps)) = result.get_mut("capabilities") else {
            return false;
        };
        let has = caps.contains_key("resources");
        peer.has_resources = Some(has);
        if has {
            return false;
        }
        // Our links must be readable with `resources/read`.
        caps.insert("resources".into(), json!({}));
        true
    }

    fn on_tools_list(&self, result: &mut Map<String, Value>) -> bool {
        let Some(Value::Array(tools)) = result.get_mut("tools") else {
            return false;
        };
        if tools
            .iter()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(saved::READ_TOOL))
        {
            lock(&self.peer).has_read_tool = true;
        }
        // Appended once, to the last page.
        if !self.read_tool_active() || result.get("nextCursor").is_some_and(|c| !c.is_null()) {
            return false;
        }
        let version = lock(&self.peer).version.clone();
        if let Some(Value::Array(tools)) = result.get_mut("tools") {
            tools.push(saved::tool_definition(version.as_deref()));
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
                Err(Error::ServerExited(format!(
                    "the MCP server exited ({status}) before answering"
                ))),
            );
        }
    }
}
