//! A fake model provider for the proxy's tests and benchmarks: the four
//! endpoints (Anthropic Messages, OpenAI Chat Completions and Responses,
//! Gemini generateContent / streamGenerateContent), each enforcing its
//! provider's pairing rules with the provider's own error text, answering
//! with a tool call (or text) as JSON or as a server-sent event stream in
//! the provider's event shapes, and simulating prompt caching by prefix:
//! the cached tokens of a request are the length of the longest byte
//! prefix it shares with an earlier request to the same endpoint (one
//! token per byte, so the test can compute the figures independently).
//!
//! Its pairing checks are written here, independently of toolwire's.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

/// One request as the fake provider received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub status: u16,
    /// The cached tokens reported (bytes of shared prefix).
    pub cache_read: u64,
    /// Anthropic only: the prompt as Anthropic's cache reads it (see
    /// [`anthropic_prompt`]), for tests of moving cache markers.
    pub prompt: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    /// The last few bodies per endpoint, for the prefix cache.
    recent: HashMap<String, VecDeque<Bytes>>,
    calls: u64,
}

/// How many earlier requests per endpoint the prefix cache compares with.
const CACHE_DEPTH: usize = 4;

#[derive(Clone)]
pub struct FakeProvider {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl FakeProvider {
    /// Start on a loopback port, serving until the runtime ends.
    pub async fn start() -> FakeProvider {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let addr = serve(move |req| handle(shared.clone(), req)).await;
        FakeProvider { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    pub fn clear(&self) {
        let mut s = self.state.lock().unwrap();
        s.received.clear();
        s.recent.clear();
    }
}

/// Serve HTTP/1 and HTTP/2 on a fresh loopback port, every request
/// answered by `answer`, until the runtime ends; returns the address.
pub async fn serve<F, Fut, B>(answer: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let reply = answer(req);
                    async move { Ok::<_, Infallible>(reply.await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Anthropic,
    Chat,
    Responses,
    Gemini,
}

async fn handle(state: Arc<Mutex<State>>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let (kind, gemini_stream) = match path.as_str() {
        "/v1/messages" => (Kind::Anthropic, false),
        "/v1/chat/completions" => (Kind::Chat, false),
        "/v1/responses" => (Kind::Responses, false),
        p if gemini_model_path(p) && p.ends_with(":generateContent") => (Kind::Gemini, false),
        p if gemini_model_path(p) && p.ends_with(":streamGenerateContent") => (Kind::Gemini, true),
        _ => {
            return json_response(
                StatusCode::NOT_FOUND,
                json!({"error": format!("no such endpoint: {path}")}),
            );
        }
    };
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let fault = match kind {
        Kind::Anthropic => check_anthropic(&value),
        Kind::Chat => check_chat(&value),
        Kind::Responses => check_responses(&value),
        Kind::Gemini => check_gemini(&value),
    };
    let mut s = state.lock().unwrap();
    if let Some(message) = fault {
        s.received.push(Received {
            path,
            headers,
            body,
            status: 400,
            cache_read: 0,
            prompt: Vec::new(),
        });
        return json_response(StatusCode::BAD_REQUEST, error_body(kind, &message));
    }
    let recent = s.recent.entry(path.clone()).or_default();
    let cache_read = recent
        .iter()
        .map(|earlier| common_prefix(earlier, &body))
        .max()
        .unwrap_or(0) as u64;
    recent.push_back(body.clone());
    if recent.len() > CACHE_DEPTH {
        recent.pop_front();
    }
    s.calls += 1;
    let call = s.calls;
    let total = body.len() as u64;
    let prompt = match kind {
        Kind::Anthropic => anthropic_prompt(&value),
        _ => Vec::new(),
    };
    s.received.push(Received {
        path,
        headers,
        body,
        status: 200,
        cache_read,
        prompt,
    });
    drop(s);
    let stream = match kind {
        Kind::Gemini => gemini_stream && query.contains("alt=sse"),
        _ => value.get("stream").and_then(Value::as_bool) == Some(true),
    };
    let wants_tool = has_tools(kind, &value);
    let reply = Reply {
        call,
        total,
        cache_read,
        wants_tool,
    };
    match (kind, stream) {
        (Kind::Anthropic, false) => json_response(StatusCode::OK, reply.anthropic()),
        (Kind::Anthropic, true) => sse(reply.anthropic_events()),
        (Kind::Chat, false) => json_response(StatusCode::OK, reply.chat()),
        (Kind::Chat, true) => sse(reply.chat_events(&value)),
        (Kind::Responses, false) => json_response(StatusCode::OK, reply.responses()),
        (Kind::Responses, true) => sse(reply.responses_events()),
        (Kind::Gemini, false) => json_response(StatusCode::OK, reply.gemini()),
        (Kind::Gemini, true) => sse(vec![(None, reply.gemini())]),
    }
}

/// The Gemini API answers under `v1beta` and, for current SDKs, `v1`.
fn gemini_model_path(path: &str) -> bool {
    path.starts_with("/v1beta/models/") || path.starts_with("/v1/models/")
}

/// The prompt of an Anthropic request as its prompt cache sees it: tools,
/// then system, then messages (the order its prompt caching guide gives
/// for cache prefixes), with the `cache_control` markers left out (they
/// say where to cache, they are not prompt content) and a `content` string
/// read as the one text block it is shorthand for (the Messages API
/// reference: a string is shorthand for an array of one `text` block).
pub fn anthropic_prompt(body: &Value) -> Vec<u8> {
    cache_prompt(body, ["tools", "system", "messages"])
}

/// [`anthropic_prompt`] for any provider's body: the three members named
/// (its tools, its system prompt, its conversation), in that order.
pub fn cache_prompt(body: &Value, members: [&str; 3]) -> Vec<u8> {
    fn normalize(v: &Value) -> Value {
        match v {
            Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| k.as_str() != "cache_control")
                    .map(|(k, v)| match (k.as_str(), v) {
                        ("content", Value::String(text)) => {
                            (k.clone(), json!([{"type": "text", "text": text}]))
                        }
                        _ => (k.clone(), normalize(v)),
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let parts = Value::Array(
        members
            .iter()
            .map(|m| body.get(*m).map(normalize).unwrap_or(Value::Null))
            .collect(),
    );
    serde_json::to_vec(&parts).unwrap_or_default()
}

pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn has_tools(kind: Kind, v: &Value) -> bool {
    let tools = match kind {
        Kind::Gemini => v.get("tools"),
        _ => v.get("tools"),
    };
    tools
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
}

fn json_response(status: StatusCode, body: Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r.headers_mut()
        .insert("x-fake-provider", "1".parse().unwrap());
    r
}

/// A server-sent event stream, one event a frame, as providers send it.
pub fn sse(events: Vec<(Option<&'static str>, Value)>) -> Response<Body> {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = events
        .into_iter()
        .map(|(event, data)| {
            // `[DONE]` goes bare, as OpenAI sends it.
            let data = match data {
                Value::String(text) => text,
                other => other.to_string(),
            };
            let text = match event {
                Some(name) => format!("event: {name}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            };
            Ok(Frame::data(Bytes::from(text)))
        })
        .collect();
    let mut r = Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync());
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r.headers_mut()
        .insert("cache-control", "no-cache".parse().unwrap());
    r
}

fn error_body(kind: Kind, message: &str) -> Value {
    match kind {
        Kind::Anthropic => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}, "request_id": "req_fake"})
        }
        Kind::Chat | Kind::Responses => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": null}})
        }
        Kind::Gemini => {
            json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})
        }
    }
}

// ------------------------------------------------------------ pairing --

fn arr(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The Messages API: every tool_use is answered in the very next message,
/// and every tool_result answers a tool_use of the message before it.
fn check_anthropic(body: &Value) -> Option<String> {
    let all = arr(body.get("messages"));
    // Compaction: the API drops every block before the newest compaction
    // block (docs: build-with-claude/compaction).
    let cut = all.iter().rposition(|m| {
        arr(m.get("content"))
            .iter()
            .any(|b| s(b, "type") == "compaction")
    });
    let mut messages: Vec<Value> = all[cut.unwrap_or(0)..].to_vec();
    if let Some(first) = cut.and(messages.first_mut()) {
        let blocks = arr(first.get("content")).to_vec();
        let from = blocks
            .iter()
            .rposition(|b| s(b, "type") == "compaction")
            .unwrap_or(0);
        first["content"] = Value::Array(blocks[from..].to_vec());
    }
    let offset = cut.unwrap_or(0);
    // Tool use ids: the pattern and uniqueness within the request.
    let mut ids = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in arr(m.get("content")).iter().enumerate() {
            if s(b, "type") != "tool_use" {
                continue;
            }
            let id = s(b, "id");
            let at = format!("messages.{}.content.{j}", i + offset);
            if id.is_empty()
                || !id
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
            {
                return Some(format!(
                    "{at}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                ));
            }
            if !ids.insert(id) {
                return Some(format!("{at}: `tool_use` ids must be unique"));
            }
        }
    }
    for (i, m) in messages.iter().enumerate() {
        let blocks = arr(m.get("content"));
        if s(m, "role") == "assistant" {
            let uses: Vec<&str> = blocks
                .iter()
                .filter(|b| s(b, "type") == "tool_use")
                .map(|b| s(b, "id"))
                .collect();
            if uses.is_empty() {
                continue;
            }
            let next = messages.get(i + 1);
            let answered: HashSet<&str> = next
                .filter(|n| s(n, "role") == "user")
                .map(|n| {
                    arr(n.get("content"))
                        .iter()
                        .filter(|b| s(b, "type") == "tool_result")
                        .map(|b| s(b, "tool_use_id"))
                        .collect()
                })
                .unwrap_or_default();
            let missing: Vec<&str> = uses
                .iter()
                .copied()
                .filter(|id| !answered.contains(id))
                .collect();
            if !missing.is_empty() {
                return Some(format!(
                    "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    i + offset,
                    missing.join(", ")
                ));
            }
        } else {
            let previous: HashSet<&str> = i
                .checked_sub(1)
                .map(|p| &messages[p])
                .filter(|p| s(p, "role") == "assistant")
                .map(|p| {
                    arr(p.get("content"))
                        .iter()
                        .filter(|b| s(b, "type") == "tool_use")
                        .map(|b| s(b, "id"))
                        .collect()
                })
                .unwrap_or_default();
            for (j, b) in blocks.iter().enumerate() {
                if s(b, "type") == "tool_result" && !previous.contains(s(b, "tool_use_id")) {
                    return Some(format!(
                        "messages.{}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
                        i + offset,
                        s(b, "tool_use_id")
                    ));
                }
            }
        }
    }
    None
}

/// Chat Completions: an assistant message's tool_calls are answered by the
/// `tool` messages right after it; a `tool` message answers one of them.
fn check_chat(body: &Value) -> Option<String> {
    let messages = arr(body.get("messages"));
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        match s(m, "role") {
            "tool" => {
                let id = s(m, "tool_call_id").to_owned();
                match open.iter().position(|o| *o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => return Some("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".into()),
                }
            }
            _ => {
                if !open.is_empty() {
                    return Some(format!(
                        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                        open.join(", ")
                    ));
                }
                open = arr(m.get("tool_calls"))
                    .iter()
                    .map(|c| s(c, "id").to_owned())
                    .collect();
            }
        }
    }
    if !open.is_empty() {
        return Some(format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            open.join(", ")
        ));
    }
    None
}

/// Responses: every function_call has its output somewhere in the input and
/// every output answers a call made before it.
fn check_responses(body: &Value) -> Option<String> {
    let items = arr(body.get("input"));
    // Compaction: what stands before the newest compaction item is dropped.
    let items = &items[items
        .iter()
        .rposition(|i| s(i, "type") == "compaction")
        .unwrap_or(0)..];
    let mut calls: HashSet<&str> = HashSet::new();
    let outputs: HashSet<&str> = items
        .iter()
        .filter(|i| s(i, "type") == "function_call_output")
        .map(|i| s(i, "call_id"))
        .collect();
    for item in items {
        match s(item, "type") {
            "function_call" => {
                if !outputs.contains(s(item, "call_id")) {
                    return Some(format!(
                        "No tool output found for function call {}.",
                        s(item, "call_id")
                    ));
                }
                calls.insert(s(item, "call_id"));
            }
            "function_call_output" if !calls.contains(s(item, "call_id")) => {
                return Some(format!(
                    "No tool call found for function call output with call_id {}.",
                    s(item, "call_id")
                ));
            }
            _ => {}
        }
    }
    None
}

/// Gemini: a turn of functionResponse parts comes right after the model
/// turn of functionCall parts, with as many parts.
fn check_gemini(body: &Value) -> Option<String> {
    let contents = arr(body.get("contents"));
    let count = |c: &Value, key: &str| {
        arr(c.get("parts"))
            .iter()
            .filter(|p| p.get(key).is_some())
            .count()
    };
    for (i, c) in contents.iter().enumerate() {
        let calls = count(c, "functionCall");
        let responses = count(c, "functionResponse");
        if responses > 0 {
            let before = i
                .checked_sub(1)
                .map(|p| count(&contents[p], "functionCall"))
                .unwrap_or(0);
            if before == 0 {
                return Some("Please ensure that function response turn comes immediately after a function call turn.".into());
            }
            if before != responses {
                return Some("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into());
            }
        }
        if calls > 0 {
            let after = contents
                .get(i + 1)
                .map(|n| count(n, "functionResponse"))
                .unwrap_or(0);
            if after != calls {
                return Some("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into());
            }
        }
    }
    None
}

// ------------------------------------------------------------ replies --

struct Reply {
    call: u64,
    total: u64,
    cache_read: u64,
    wants_tool: bool,
}

const TEXT: &str = "Looking at the output now.";

impl Reply {
    fn tool_input(&self) -> Value {
        json!({"command": format!("cat part-{}.log", self.call)})
    }

    fn anthropic_usage(&self) -> Value {
        json!({"input_tokens": self.total - self.cache_read, "cache_read_input_tokens": self.cache_read, "cache_creation_input_tokens": 0, "output_tokens": 12})
    }

    fn anthropic(&self) -> Value {
        let mut content = vec![json!({"type": "text", "text": TEXT})];
        if self.wants_tool {
            content.push(json!({"type": "tool_use", "id": format!("toolu_{:04}", self.call), "name": "bash", "input": self.tool_input()}));
        }
        json!({"id": format!("msg_{:04}", self.call), "type": "message", "role": "assistant", "model": "claude-fake", "content": content,
               "stop_reason": if self.wants_tool { "tool_use" } else { "end_turn" }, "stop_sequence": null, "usage": self.anthropic_usage()})
    }

    fn anthropic_events(&self) -> Vec<(Option<&'static str>, Value)> {
        let mut start = self.anthropic();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        start["usage"]["output_tokens"] = json!(1);
        let mut events = vec![
            (
                Some("message_start"),
                json!({"type": "message_start", "message": start}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
        ];
        for word in TEXT.split_inclusive(' ') {
            events.push((Some("content_block_delta"), json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word}})));
        }
        events.push((
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": 0}),
        ));
        if self.wants_tool {
            events.push((Some("content_block_start"), json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": format!("toolu_{:04}", self.call), "name": "bash", "input": {}}})));
            events.push((Some("content_block_delta"), json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": self.tool_input().to_string()}})));
            events.push((
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 1}),
            ));
        }
        events.push((Some("message_delta"), json!({"type": "message_delta", "delta": {"stop_reason": if self.wants_tool { "tool_use" } else { "end_turn" }, "stop_sequence": null}, "usage": {"output_tokens": 12}})));
        events.push((Some("message_stop"), json!({"type": "message_stop"})));
        events
    }

    fn chat_usage(&self) -> Value {
        json!({"prompt_tokens": self.total, "completion_tokens": 12, "total_tokens": self.total + 12, "prompt_tokens_details": {"cached_tokens": self.cache_read}})
    }

    fn chat_message(&self) -> Value {
        let mut m = json!({"role": "assistant", "content": TEXT});
        if self.wants_tool {
            m["tool_calls"] = json!([{"id": format!("call_{:04}", self.call), "type": "function", "function": {"name": "bash", "arguments": self.tool_input().to_string()}}]);
        }
        m
    }

    fn chat(&self) -> Value {
        json!({"id": format!("chatcmpl-{}", self.call), "object": "chat.completion", "created": 1, "model": "gpt-fake",
               "choices": [{"index": 0, "message": self.chat_message(), "finish_reason": if self.wants_tool { "tool_calls" } else { "stop" }}],
               "usage": self.chat_usage()})
    }

    fn chat_events(&self, request: &Value) -> Vec<(Option<&'static str>, Value)> {
        let chunk = |delta: Value, finish: Value| json!({"id": format!("chatcmpl-{}", self.call), "object": "chat.completion.chunk", "created": 1, "model": "gpt-fake", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        let mut events = vec![(
            None,
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        )];
        for word in TEXT.split_inclusive(' ') {
            events.push((None, chunk(json!({"content": word}), Value::Null)));
        }
        if self.wants_tool {
            events.push((None, chunk(json!({"tool_calls": [{"index": 0, "id": format!("call_{:04}", self.call), "type": "function", "function": {"name": "bash", "arguments": self.tool_input().to_string()}}]}), Value::Null)));
        }
        events.push((
            None,
            chunk(
                json!({}),
                json!(if self.wants_tool {
                    "tool_calls"
                } else {
                    "stop"
                }),
            ),
        ));
        if request
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true)
        {
            events.push((None, json!({"id": format!("chatcmpl-{}", self.call), "object": "chat.completion.chunk", "created": 1, "model": "gpt-fake", "choices": [], "usage": self.chat_usage()})));
        }
        let mut events: Vec<(Option<&'static str>, Value)> = events;
        events.push((None, Value::String("[DONE]".into())));
        events
    }

    fn responses_output(&self) -> Vec<Value> {
        let mut out = vec![
            json!({"type": "message", "id": format!("msg_{}", self.call), "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}),
        ];
        if self.wants_tool {
            out.push(json!({"type": "function_call", "id": format!("fc_{}", self.call), "call_id": format!("call_{:04}", self.call), "name": "bash", "arguments": self.tool_input().to_string(), "status": "completed"}));
        }
        out
    }

    fn responses(&self) -> Value {
        json!({"id": format!("resp_{}", self.call), "object": "response", "created_at": 1, "status": "completed", "model": "gpt-fake",
               "output": self.responses_output(), "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
               "usage": {"input_tokens": self.total, "input_tokens_details": {"cached_tokens": self.cache_read}, "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": self.total + 12}})
    }

    fn responses_events(&self) -> Vec<(Option<&'static str>, Value)> {
        let full = self.responses();
        let mut created = full.clone();
        created["status"] = json!("in_progress");
        created["output"] = json!([]);
        created["usage"] = Value::Null;
        let mut events = vec![(
            Some("response.created"),
            json!({"type": "response.created", "sequence_number": 0, "response": created}),
        )];
        for (i, item) in self.responses_output().into_iter().enumerate() {
            events.push((Some("response.output_item.added"), json!({"type": "response.output_item.added", "sequence_number": 1 + 2 * i, "output_index": i, "item": item})));
            events.push((Some("response.output_item.done"), json!({"type": "response.output_item.done", "sequence_number": 2 + 2 * i, "output_index": i, "item": item})));
        }
        events.push((
            Some("response.completed"),
            json!({"type": "response.completed", "sequence_number": 9, "response": full}),
        ));
        events
    }

    fn gemini(&self) -> Value {
        let mut parts = vec![json!({"text": TEXT})];
        if self.wants_tool {
            parts.push(json!({"functionCall": {"name": "bash", "args": self.tool_input()}}));
        }
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": {"promptTokenCount": self.total, "cachedContentTokenCount": self.cache_read, "candidatesTokenCount": 12, "totalTokenCount": self.total + 12},
               "modelVersion": "gemini-fake"})
    }
}
