//! A scripted model provider for the real-agent tests (tests/agents.rs):
//! it speaks each API as the agent CLIs use it (Anthropic Messages with
//! server-sent events for Claude Code, OpenAI Responses over HTTP with
//! server-sent events for Codex, Gemini streamGenerateContent for Gemini
//! CLI) and answers every turn of the agent's main conversation with a call
//! of the agent's own shell tool, following a fixed list of commands, then
//! with a final text answer.
//!
//! The step a request is at is read from the request itself (how many tool
//! results its conversation holds), never from a counter: a retried
//! request, or one sent again after the proxy restarted, gets the same
//! answer, and the direct run and the run through toolwire see the same
//! model. Requests without the shell tool (a title, a quota check, a
//! router's question) get a short text answer and do not advance the
//! script. A test whose model must react to what came back (read a saved
//! output's pages through an MCP tool, tests/agents_mcp.rs) gives a
//! [`Planner`] instead of a list: it sees each main request and names the
//! next move. Every request is recorded; the prompt cache is simulated by
//! prefix, as in tests/fake_provider (whose server it shares), for the usage figures the agents
//! show.
#![allow(dead_code)]

pub mod pricing;
pub mod tap;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::fake_provider::{serve, sse};

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

/// The API a request was made to, from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    Responses,
    Gemini,
}

/// The final answer every script ends with; the tests look for it in the
/// agent's output.
pub const FINAL_ANSWER: &str = "SCRIPT-DONE: all commands ran.";

/// One request as the provider received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub body: Bytes,
    pub status: u16,
    pub api: Option<Api>,
    /// Whether it carried the agent's shell tool (the main conversation).
    pub main: bool,
    /// How many tool results its conversation held.
    pub step: usize,
    /// Whether the provider held it without ever answering (see
    /// [`ScriptedProvider::hold_main`]).
    pub held: bool,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    /// The prompt as a provider's cache reads it (see [`pricing::prompt`]).
    pub fn prompt(&self) -> Vec<u8> {
        self.api
            .map(|api| pricing::prompt(api, &self.json()))
            .unwrap_or_default()
    }
    /// Requests of one conversation share this key: the cache of each is
    /// compared with the request before it of the same key.
    pub fn conversation(&self) -> String {
        let path = self.path.split('?').next().unwrap_or("");
        format!("{path} main={}", self.main)
    }
}

struct Hold {
    at: usize,
    reached: oneshot::Sender<Bytes>,
}

/// What the model does at one step of the main conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Move {
    /// Call the agent's shell tool with this command.
    Shell(String),
    /// Call the tool named `tool` (one the request declares, or a tool
    /// search found) with `input`; `namespace` is the group a Responses
    /// tool search put it in (Codex's `mcp__<server>`).
    Call {
        tool: String,
        namespace: Option<String>,
        input: Value,
    },
    /// Search the agent's deferred tools (Codex's client-side
    /// `tool_search`, which is where Codex keeps its MCP servers' tools).
    SearchTools { query: String },
    /// Give [`FINAL_ANSWER`].
    Finish,
}

/// One main request as a [`Planner`] sees it.
pub struct Turn<'a> {
    pub api: Api,
    pub body: &'a Value,
    /// How many tool results its conversation holds.
    pub step: usize,
}

/// Chooses the model's move from the request it answers. It must be a
/// function of the request alone (a retried request gets the same move).
pub type Planner = Arc<dyn Fn(&Turn) -> Move + Send + Sync>;

struct State {
    planner: Planner,
    seen: Vec<Seen>,
    recent: HashMap<String, Bytes>,
    hold: Option<Hold>,
}

#[derive(Clone)]
pub struct ScriptedProvider {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl ScriptedProvider {
    /// Start on a loopback port with the commands to have the agent run.
    pub async fn start(script: Vec<String>) -> ScriptedProvider {
        ScriptedProvider::start_planned(Arc::new(move |turn: &Turn| {
            script
                .get(turn.step)
                .map_or(Move::Finish, |command| Move::Shell(command.clone()))
        }))
        .await
    }

    /// Start on a loopback port with a model whose moves `planner` picks.
    pub async fn start_planned(planner: Planner) -> ScriptedProvider {
        let state = Arc::new(Mutex::new(State {
            planner,
            seen: Vec::new(),
            recent: HashMap::new(),
            hold: None,
        }));
        let shared = state.clone();
        let addr = serve(move |req| handle(shared.clone(), req)).await;
        ScriptedProvider { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Never answer the first main request at step `at`: record it, send
    /// its body on the returned channel and keep its connection open, so
    /// whoever sent it is killed in the middle of a turn. Its retry is
    /// answered as usual.
    pub fn hold_main(&self, at: usize) -> oneshot::Receiver<Bytes> {
        let (reached, rx) = oneshot::channel();
        self.state.lock().unwrap().hold = Some(Hold { at, reached });
        rx
    }
}

fn api_of(path: &str) -> Option<(Api, bool)> {
    let path = path.split('?').next().unwrap_or("");
    let gemini = path.starts_with("/v1beta/models/") || path.starts_with("/v1/models/");
    match path {
        "/v1/messages" => Some((Api::Anthropic, false)),
        "/v1/responses" => Some((Api::Responses, false)),
        p if gemini && p.ends_with(":generateContent") => Some((Api::Gemini, false)),
        p if gemini && p.ends_with(":streamGenerateContent") => Some((Api::Gemini, true)),
        _ => None,
    }
}

fn arr(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The names of the tools a request declares.
pub fn tool_names(api: Api, body: &Value) -> Vec<&str> {
    match api {
        Api::Anthropic | Api::Responses => arr(body.get("tools"))
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .collect(),
        Api::Gemini => arr(body.get("tools"))
            .iter()
            .flat_map(|t| arr(t.get("functionDeclarations")))
            .filter_map(|f| f.get("name").and_then(Value::as_str))
            .collect(),
    }
}

/// The agent's shell tool, as its request declares it: the tool's name.
fn shell_tool(api: Api, body: &Value) -> Option<String> {
    let names = tool_names(api, body);
    ["Bash", "exec_command", "shell", "run_shell_command", "bash"]
        .into_iter()
        .find(|n| names.contains(n))
        .map(str::to_owned)
}

/// Every tool result in a request, in order: (call id, content as the
/// agent sent it).
pub fn tool_results(api: Api, body: &Value) -> Vec<(String, Value)> {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    match api {
        Api::Anthropic => arr(body.get("messages"))
            .iter()
            .flat_map(|m| arr(m.get("content")))
            .filter(|b| text(b, "type") == "tool_result")
            .map(|b| (text(b, "tool_use_id"), b["content"].clone()))
            .collect(),
        Api::Responses => arr(body.get("input"))
            .iter()
            .filter(|i| {
                let kind = text(i, "type");
                kind.ends_with("call_output") || kind == "tool_search_output"
            })
            .map(|i| (text(i, "call_id"), i["output"].clone()))
            .collect(),
        Api::Gemini => arr(body.get("contents"))
            .iter()
            .flat_map(|c| arr(c.get("parts")))
            .filter_map(|p| p.get("functionResponse"))
            .map(|r| (text(r, "id"), r["response"].clone()))
            .collect(),
    }
}

/// The tool calls in a request's conversation, in order: (call id, tool).
pub fn tool_calls(api: Api, body: &Value) -> Vec<(String, String)> {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    match api {
        Api::Anthropic => arr(body.get("messages"))
            .iter()
            .flat_map(|m| arr(m.get("content")))
            .filter(|b| text(b, "type") == "tool_use")
            .map(|b| (text(b, "id"), text(b, "name")))
            .collect(),
        Api::Responses => arr(body.get("input"))
            .iter()
            .filter_map(|i| match text(i, "type").as_str() {
                "function_call" | "custom_tool_call" => Some((text(i, "call_id"), text(i, "name"))),
                "tool_search_call" => Some((text(i, "call_id"), "tool_search".to_owned())),
                _ => None,
            })
            .collect(),
        Api::Gemini => arr(body.get("contents"))
            .iter()
            .flat_map(|c| arr(c.get("parts")))
            .filter_map(|p| {
                p.get("functionCall")
                    .map(|f| (text(f, "id"), text(f, "name")))
            })
            .collect(),
    }
}

/// How many tool results the conversation of `body` holds.
fn results_in(api: Api, body: &Value) -> usize {
    match api {
        Api::Anthropic => arr(body.get("messages"))
            .iter()
            .flat_map(|m| arr(m.get("content")))
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .count(),
        Api::Responses => arr(body.get("input"))
            .iter()
            .filter(|i| {
                matches!(
                    i.get("type").and_then(Value::as_str),
                    Some("function_call_output" | "custom_tool_call_output" | "tool_search_output")
                )
            })
            .count(),
        Api::Gemini => arr(body.get("contents"))
            .iter()
            .flat_map(|c| arr(c.get("parts")))
            .filter(|p| p.get("functionResponse").is_some())
            .count(),
    }
}

async fn handle(state: Arc<Mutex<State>>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut seen = Seen {
        method: method.to_string(),
        path: path.clone(),
        body: body.clone(),
        status: 200,
        api: None,
        main: false,
        step: 0,
        held: false,
    };
    // Reachability checks (Claude Code sends `HEAD /` before it starts).
    if method != Method::POST {
        state.lock().unwrap().seen.push(seen);
        return reply(
            StatusCode::OK,
            "application/json",
            Bytes::from_static(b"{}"),
        );
    }
    let Some((api, gemini_stream)) = api_of(&path) else {
        seen.status = 404;
        state.lock().unwrap().seen.push(seen);
        return reply(
            StatusCode::NOT_FOUND,
            "application/json",
            Bytes::from(json!({"error": format!("no such endpoint: {path}")}).to_string()),
        );
    };
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        seen.status = 400;
        state.lock().unwrap().seen.push(seen);
        return reply(
            StatusCode::BAD_REQUEST,
            "application/json",
            Bytes::from(json!({"error": "the body is not JSON"}).to_string()),
        );
    };
    let tool = shell_tool(api, &value);
    let step = results_in(api, &value);
    seen.api = Some(api);
    seen.main = tool.is_some();
    seen.step = step;
    let (answer, usage, hold) = {
        let mut s = state.lock().unwrap();
        let key = seen.conversation();
        let cached = s
            .recent
            .get(&key)
            .map(|earlier| crate::fake_provider::common_prefix(earlier, &body))
            .unwrap_or(0) as u64;
        s.recent.insert(key, body.clone());
        // Main turns are numbered by their step, so both runs of a script
        // get the same ids; the others after them.
        let number = if seen.main { step } else { 1000 + s.seen.len() };
        let usage = Usage {
            total: body.len() as u64 / 4,
            cached: cached / 4,
            number,
        };
        let answer = match &tool {
            Some(name) => {
                let turn = Turn {
                    api,
                    body: &value,
                    step,
                };
                let id = format!("tw_call_{step:02}");
                match (s.planner)(&turn) {
                    Move::Shell(command) => Answer::Call {
                        id,
                        tool: name.clone(),
                        namespace: None,
                        input: tool_input(name, &command),
                    },
                    Move::Call {
                        tool,
                        namespace,
                        input,
                    } => Answer::Call {
                        id,
                        tool,
                        namespace,
                        input,
                    },
                    Move::SearchTools { query } => Answer::Search { id, query },
                    Move::Finish => Answer::Text(FINAL_ANSWER.to_owned()),
                }
            }
            None => Answer::Text(side_answer(api, &value)),
        };
        let hold = seen.main && s.hold.as_ref().is_some_and(|h| h.at == step);
        seen.held = hold;
        s.seen.push(seen);
        if hold && let Some(h) = s.hold.take() {
            let _ = h.reached.send(body.clone());
        }
        (answer, usage, hold)
    };
    if hold {
        // Never answer: the sender is killed while it waits.
        std::future::pending::<()>().await;
    }
    let stream = match api {
        Api::Gemini => gemini_stream,
        _ => value.get("stream").and_then(Value::as_bool) == Some(true),
    };
    match api {
        Api::Anthropic if stream => sse(anthropic_events(&answer, usage)),
        Api::Anthropic => json_reply(anthropic_message(&answer, usage)),
        Api::Responses if stream => sse(responses_events(&answer, usage)),
        Api::Responses => json_reply(responses_object(&answer, usage)),
        Api::Gemini if stream => sse(vec![(None, gemini_response(&answer, usage))]),
        Api::Gemini => json_reply(gemini_response(&answer, usage)),
    }
}

/// What a request outside the main conversation gets: a JSON object when
/// it asks for JSON (Gemini CLI's model router), else a word.
fn side_answer(api: Api, body: &Value) -> String {
    let wants_json = api == Api::Gemini
        && body
            .pointer("/generationConfig/responseMimeType")
            .and_then(Value::as_str)
            == Some("application/json");
    if wants_json {
        json!({"complexity_reasoning": "scripted", "complexity_score": 1, "reasoning": "scripted", "model_choice": "flash", "next_speaker": "user"}).to_string()
    } else {
        "Scripted".to_owned()
    }
}

enum Answer {
    Call {
        id: String,
        tool: String,
        namespace: Option<String>,
        input: Value,
    },
    Search {
        id: String,
        query: String,
    },
    Text(String),
}

/// What every answer carries besides its content: its usage, and a
/// number that makes its ids unique (Claude Code merges assistant
/// messages that share a message id into one).
#[derive(Clone, Copy)]
struct Usage {
    total: u64,
    cached: u64,
    number: usize,
}

/// The shell tool's input in the shape its agent declares: Codex's
/// `exec_command` takes `cmd`, its older `shell` an argv; the others take
/// `command`.
fn tool_input(tool: &str, command: &str) -> Value {
    match tool {
        "exec_command" => json!({"cmd": command}),
        "shell" => json!({"command": ["bash", "-lc", command]}),
        "Bash" => json!({"command": command, "description": "Run a scripted command"}),
        _ => json!({"command": command}),
    }
}

fn reply(status: StatusCode, content_type: &str, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body).boxed_unsync());
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert("content-type", v);
    }
    r
}

fn json_reply(body: Value) -> Response<Body> {
    reply(
        StatusCode::OK,
        "application/json",
        Bytes::from(body.to_string()),
    )
}

// ---------------------------------------------------------- Anthropic --

fn anthropic_usage(u: Usage) -> Value {
    json!({"input_tokens": u.total - u.cached, "cache_read_input_tokens": u.cached, "cache_creation_input_tokens": 0, "output_tokens": 20})
}

fn anthropic_blocks(answer: &Answer) -> Vec<Value> {
    match answer {
        Answer::Call {
            id, tool, input, ..
        } => vec![
            json!({"type": "text", "text": "Running the next command."}),
            json!({"type": "tool_use", "id": id, "name": tool, "input": input}),
        ],
        Answer::Text(text) => vec![json!({"type": "text", "text": text})],
        Answer::Search { .. } => vec![json!({"type": "text", "text": NO_SEARCH})],
    }
}

/// What a tool search becomes in an API without one.
const NO_SEARCH: &str = "(no tool search in this API)";

fn stop_reason(answer: &Answer) -> &'static str {
    match answer {
        Answer::Call { .. } => "tool_use",
        Answer::Text(_) | Answer::Search { .. } => "end_turn",
    }
}

fn anthropic_message(answer: &Answer, u: Usage) -> Value {
    json!({"id": format!("msg_tw_{:04}", u.number), "type": "message", "role": "assistant", "model": "claude-scripted",
           "content": anthropic_blocks(answer), "stop_reason": stop_reason(answer), "stop_sequence": null,
           "usage": anthropic_usage(u)})
}

fn anthropic_events(answer: &Answer, u: Usage) -> Vec<(Option<&'static str>, Value)> {
    let mut start = anthropic_message(answer, u);
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let mut events = vec![(
        Some("message_start"),
        json!({"type": "message_start", "message": start}),
    )];
    for (index, block) in anthropic_blocks(answer).into_iter().enumerate() {
        let (empty, delta) = match block["type"].as_str() {
            Some("tool_use") => {
                let mut empty = block.clone();
                empty["input"] = json!({});
                let delta =
                    json!({"type": "input_json_delta", "partial_json": block["input"].to_string()});
                (empty, delta)
            }
            _ => (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": block["text"]}),
            ),
        };
        events.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": index, "content_block": empty}),
        ));
        events.push((
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        events.push((
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        Some("message_delta"),
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(answer), "stop_sequence": null}, "usage": {"output_tokens": 20}}),
    ));
    events.push((Some("message_stop"), json!({"type": "message_stop"})));
    events
}

// ---------------------------------------------------------- Responses --

fn responses_output(answer: &Answer, u: Usage) -> Vec<Value> {
    match answer {
        Answer::Call {
            id,
            tool,
            namespace,
            input,
        } => {
            let mut call = json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": tool,
                   "arguments": input.to_string(), "status": "completed"});
            if let Some(namespace) = namespace {
                call["namespace"] = json!(namespace);
            }
            vec![call]
        }
        Answer::Search { id, query } => vec![
            json!({"type": "tool_search_call", "id": format!("ts_{id}"), "call_id": id, "status": "completed",
                   "execution": "client", "arguments": {"query": query}}),
        ],
        Answer::Text(text) => vec![
            json!({"type": "message", "id": format!("msg_tw_{:04}", u.number), "status": "completed", "role": "assistant",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        ],
    }
}

fn responses_object(answer: &Answer, u: Usage) -> Value {
    json!({"id": format!("resp_tw_{:04}", u.number), "object": "response", "created_at": 1, "status": "completed", "model": "gpt-scripted",
           "output": responses_output(answer, u), "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
           "usage": {"input_tokens": u.total, "input_tokens_details": {"cached_tokens": u.cached}, "output_tokens": 20,
                     "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": u.total + 20}})
}

fn responses_events(answer: &Answer, u: Usage) -> Vec<(Option<&'static str>, Value)> {
    let full = responses_object(answer, u);
    let mut created = full.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    created["usage"] = Value::Null;
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };
    let mut events = vec![(
        Some("response.created"),
        json!({"type": "response.created", "sequence_number": next(), "response": created}),
    )];
    for (i, item) in responses_output(answer, u).into_iter().enumerate() {
        events.push((Some("response.output_item.added"), json!({"type": "response.output_item.added", "sequence_number": next(), "output_index": i, "item": item})));
        if let Some(text) = item.pointer("/content/0/text") {
            events.push((Some("response.output_text.delta"), json!({"type": "response.output_text.delta", "sequence_number": next(), "output_index": i, "item_id": item["id"], "content_index": 0, "delta": text})));
        }
        events.push((Some("response.output_item.done"), json!({"type": "response.output_item.done", "sequence_number": next(), "output_index": i, "item": item})));
    }
    events.push((
        Some("response.completed"),
        json!({"type": "response.completed", "sequence_number": next(), "response": full}),
    ));
    events
}

// ------------------------------------------------------------- Gemini --

fn gemini_response(answer: &Answer, u: Usage) -> Value {
    let parts = match answer {
        Answer::Call {
            id, tool, input, ..
        } => vec![json!({"functionCall": {"id": id, "name": tool, "args": input}})],
        Answer::Text(text) => vec![json!({"text": text})],
        Answer::Search { .. } => vec![json!({"text": NO_SEARCH})],
    };
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
           "usageMetadata": {"promptTokenCount": u.total, "cachedContentTokenCount": u.cached, "candidatesTokenCount": 20, "totalTokenCount": u.total + 20},
           "modelVersion": "gemini-scripted"})
}
