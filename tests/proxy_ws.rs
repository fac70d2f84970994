//! The Responses API's WebSocket mode through `toolwire proxy` (the real
//! binary): an upstream of the test's own (tokio-tungstenite) answering
//! `response.create` with the Responses events, an agent side of the
//! test's own, and the same conversation over HTTP.

#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const LIMIT: Duration = Duration::from_secs(120);

/// What the upstream received: per connection, its handshake headers and
/// every text message as it came.
#[derive(Default)]
struct Seen {
    headers: Vec<http::HeaderMap>,
    messages: Vec<(usize, String)>,
    http_bodies: Vec<String>,
}

/// An upstream speaking the Responses WebSocket events, and `POST
/// /v1/responses` (one JSON response) for the HTTP half of a test. Each
/// `response.create` is answered with `response.created`, one
/// `response.output_item.done` (a function call, `call_<n>`) and
/// `response.completed` with usage. `{"type":"test.close","code":N}`
/// makes it close the socket with code N.
struct FakeUpstream {
    url: String,
    seen: Arc<Mutex<Seen>>,
}

/// The events answering the n-th `response.create` (from 1), given its body.
type Script = fn(usize, &Value) -> Vec<Value>;

impl FakeUpstream {
    async fn start() -> FakeUpstream {
        FakeUpstream::scripted(|n, _| events(n)).await
    }

    async fn scripted(script: Script) -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Seen::default()));
        let state = seen.clone();
        tokio::spawn(async move {
            let counter = Arc::new(Mutex::new(0usize));
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = state.clone();
                let counter = counter.clone();
                tokio::spawn(serve(stream, state, counter, script));
            }
        });
        FakeUpstream { url, seen }
    }

    fn messages(&self) -> Vec<(usize, String)> {
        self.seen.lock().unwrap().messages.clone()
    }
}

/// One upstream connection: a WebSocket upgrade, or one HTTP request.
async fn serve(
    stream: tokio::net::TcpStream,
    state: Arc<Mutex<Seen>>,
    counter: Arc<Mutex<usize>>,
    script: Script,
) {
    let mut peek = [0u8; 4096];
    let n = stream.peek(&mut peek).await.unwrap_or(0);
    let head = String::from_utf8_lossy(&peek[..n]).to_ascii_lowercase();
    if !head.contains("upgrade: websocket") {
        return serve_http(stream, state, counter, script).await;
    }
    let captured = state.clone();
    #[allow(clippy::result_large_err)] // the handshake callback's type is tungstenite's
    let callback = move |req: &http::Request<()>, resp: http::Response<()>| {
        captured.lock().unwrap().headers.push(req.headers().clone());
        let mut resp = resp;
        resp.headers_mut()
            .insert("x-models-etag", http::HeaderValue::from_static("etag-1"));
        Ok(resp)
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    let conn = state.lock().unwrap().headers.len();
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else {
            if let Message::Binary(bytes) = message {
                let text = format!("binary:{}", String::from_utf8_lossy(&bytes));
                state.lock().unwrap().messages.push((conn, text));
            }
            continue;
        };
        state
            .lock()
            .unwrap()
            .messages
            .push((conn, text.to_string()));
        let Ok(body) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        match body["type"].as_str() {
            Some("response.create") => {
                let n = next(&counter);
                for event in script(n, &body) {
                    if ws.send(Message::text(event.to_string())).await.is_err() {
                        return;
                    }
                }
            }
            Some("test.close") => {
                let code = body["code"].as_u64().unwrap() as u16;
                let _ = ws
                    .close(Some(CloseFrame {
                        code: CloseCode::from(code),
                        reason: "upstream says bye".into(),
                    }))
                    .await;
                // Drain until the other side answers the close.
                while let Some(Ok(_)) = ws.next().await {}
                return;
            }
            _ => {}
        }
    }
}

fn next(counter: &Mutex<usize>) -> usize {
    let mut c = counter.lock().unwrap();
    *c += 1;
    *c
}

fn item(n: usize) -> Value {
    json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
           "name": "shell", "arguments": "{\"cmd\":\"cat big.log\"}", "status": "completed"})
}

fn usage() -> Value {
    json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40},
           "output_tokens": 7, "total_tokens": 107})
}

fn events(n: usize) -> Vec<Value> {
    let id = format!("resp_{n}");
    vec![
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item(n)}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item(n)}),
        json!({"type": "response.completed", "response": {"id": id, "status": "completed",
               "output": [item(n)], "usage": usage()}}),
    ]
}

/// `POST /v1/responses`: the body recorded, one completed response back.
async fn serve_http(
    stream: tokio::net::TcpStream,
    state: Arc<Mutex<Seen>>,
    counter: Arc<Mutex<usize>>,
    script: Script,
) {
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let state = state.clone();
        let counter = counter.clone();
        async move {
            use http_body_util::BodyExt;
            let path = req.uri().path().to_owned();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let text = String::from_utf8_lossy(&body).into_owned();
            let answer = |kind: &str, text: String| {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", kind)
                        .body(http_body_util::Full::new(bytes::Bytes::from(text)))
                        .unwrap(),
                )
            };
            if !path.ends_with("/responses") {
                // Model lists and the like: nothing here.
                return answer(
                    "application/json",
                    json!({"object": "list", "data": []}).to_string(),
                );
            }
            state.lock().unwrap().http_bodies.push(text.clone());
            let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let events = script(next(&counter), &body);
            if body["stream"] == true {
                let sse: String = events
                    .iter()
                    .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                    .collect();
                return answer("text/event-stream", sse);
            }
            let done = events.last().unwrap()["response"].clone();
            answer("application/json", done.to_string())
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}

struct Proxy {
    _child: tokio::process::Child,
    url: String,
    dir: tempfile::TempDir,
    log: Arc<Mutex<String>>,
}

impl Proxy {
    async fn start(upstream: &str, extra: &str) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("toolwire.toml"),
            format!("durability = \"none\"\n{extra}\n[proxy.upstreams]\nopenai = \"{upstream}\"\n"),
        )
        .unwrap();
        let (child, url, lines) = proxy_process::start(
            dir.path(),
            &["--listen", "127.0.0.1:0"],
            "toolwire=info",
            "proxy",
        )
        .await;
        let log = proxy_process::keep_log(lines);
        Proxy {
            _child: child,
            url,
            dir,
            log,
        }
    }

    fn ws_url(&self) -> String {
        format!("{}/v1/responses", self.url.replacen("http://", "ws://", 1))
    }

    fn stats(&self) -> Vec<Value> {
        proxy_process::stats(self.dir.path())
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

type Agent =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(proxy: &Proxy) -> (Agent, http::Response<Option<Vec<u8>>>) {
    let mut request = proxy.ws_url().into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        http::HeaderValue::from_static("Bearer sk-test-secret"),
    );
    request.headers_mut().insert(
        "openai-beta",
        http::HeaderValue::from_static("responses_websockets=2026-02-06"),
    );
    tokio::time::timeout(LIMIT, tokio_tungstenite::connect_async(request))
        .await
        .unwrap()
        .unwrap()
}

/// Send a message and read events until `response.completed`.
async fn turn(agent: &mut Agent, body: &Value) -> Vec<Value> {
    agent.send(Message::text(body.to_string())).await.unwrap();
    let mut events = Vec::new();
    loop {
        let message = tokio::time::timeout(LIMIT, agent.next()).await.unwrap();
        let Some(Ok(Message::Text(text))) = message else {
            panic!("expected an event, got {message:?}");
        };
        let event: Value = serde_json::from_str(&text).unwrap();
        let done = event["type"] == "response.completed";
        events.push(event);
        if done {
            return events;
        }
    }
}

fn big_output() -> String {
    (0..4000)
        .map(|i| format!("line {i}: something happened here\n"))
        .collect()
}

fn user() -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look at big.log"}]})
}

fn create(input: Vec<Value>, previous: Option<&str>) -> Value {
    let mut body = json!({"type": "response.create", "model": "gpt-test", "instructions": "be brief",
                          "input": input, "tools": [], "store": false});
    if let Some(id) = previous {
        body["previous_response_id"] = json!(id);
    }
    body
}

fn output_of(item: &Value) -> Option<String> {
    (item["type"] == "function_call_output").then(|| item["output"].as_str().unwrap().to_owned())
}

fn outputs(text: &str) -> Vec<String> {
    let body: Value = serde_json::from_str(text).unwrap();
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(output_of)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_result_over_the_socket_is_budgeted_and_replayed_byte_identical() {
    let upstream = FakeUpstream::start().await;
    let proxy = Proxy::start(&upstream.url, "").await;
    let (mut agent, answer) = connect(&proxy).await;
    assert_eq!(answer.status(), 101);
    assert_eq!(
        answer
            .headers()
            .get("x-models-etag")
            .map(|v| v.to_str().unwrap()),
        Some("etag-1"),
        "the upstream's handshake headers reach the agent"
    );
    // Turn 1: the user asks; the model calls a tool.
    let events = turn(&mut agent, &create(vec![user()], None)).await;
    assert_eq!(events.len(), 4);
    assert_eq!(
        events[3]["response"]["usage"],
        usage(),
        "events pass unchanged"
    );
    // Turn 2: the tool's large result, as a continuation (new items only).
    let big = big_output();
    let result = json!({"type": "function_call_output", "call_id": "call_1", "output": big});
    turn(&mut agent, &create(vec![result.clone()], Some("resp_1"))).await;
    // Turn 3: more from the user; the result is not sent again.
    let more = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]});
    let call_2_out = json!({"type": "function_call_output", "call_id": "call_2", "output": "ok"});
    turn(&mut agent, &create(vec![call_2_out, more], Some("resp_2"))).await;

    let seen = upstream.messages();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let headers = &upstream.seen.lock().unwrap().headers[0].clone();
    assert_eq!(headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(headers["openai-beta"], "responses_websockets=2026-02-06");
    // The large result went up as a preview, on a continuation.
    let second: Value = serde_json::from_str(&seen[1].1).unwrap();
    assert_eq!(
        second["previous_response_id"], "resp_1",
        "the continuation is kept"
    );
    let sent = outputs(&seen[1].1);
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].starts_with("<persisted-output>"),
        "{}",
        &sent[0][..200.min(sent[0].len())]
    );
    assert!(sent[0].len() < 10_000);
    // The third turn continues too: the upstream holds the preview already.
    let third: Value = serde_json::from_str(&seen[2].1).unwrap();
    assert_eq!(third["previous_response_id"], "resp_2");
    assert!(!seen[2].1.contains("persisted-output"), "{}", seen[2].1);
    // Stats: three responses, their usage, one session.
    let stats = proxy.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0]["requests"], 3);
    assert_eq!(stats[0]["resultsPersisted"], 1);
    assert_eq!(stats[0]["requestsWithoutUsage"], 0);
    assert_eq!(stats[0]["tokens"]["cacheRead"], 120);
    assert_eq!(stats[0]["tokens"]["input"], 180);
    assert!(
        !proxy.log().contains("sk-test-secret"),
        "a key reached the log"
    );

    // A new socket (Codex reconnects) sends the whole conversation: the
    // same session, and the preview byte-identical to the first.
    let (mut again, _) = connect(&proxy).await;
    let whole = vec![user(), item(1), result.clone()];
    turn(&mut again, &create(whole, None)).await;
    let seen = upstream.messages();
    let replayed = outputs(&seen[3].1);
    assert_eq!(
        replayed, sent,
        "the preview is byte-identical on a new socket"
    );
    assert_eq!(proxy.stats().len(), 1, "one session across sockets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_moving_from_http_to_the_socket_keeps_its_session_and_previews() {
    let upstream = FakeUpstream::start().await;
    let proxy = Proxy::start(&upstream.url, "").await;
    let big = big_output();
    let result = json!({"type": "function_call_output", "call_id": "call_1", "output": big});
    let http_body =
        json!({"model": "gpt-test", "input": [user(), item(1), result.clone()], "store": false});
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{}/v1/responses", proxy.url))
        .header("authorization", "Bearer sk-test-secret")
        .json(&http_body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let session = answer.headers()["x-toolwire-session"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = answer.bytes().await.unwrap();
    let over_http = outputs(&upstream.seen.lock().unwrap().http_bodies[0]);
    assert!(over_http[0].starts_with("<persisted-output>"));

    let (mut agent, _) = connect(&proxy).await;
    turn(&mut agent, &create(vec![user(), item(1), result], None)).await;
    let seen = upstream.messages();
    assert_eq!(
        outputs(&seen[0].1),
        over_http,
        "the socket sends the HTTP preview"
    );
    let stats = proxy.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0]["sessionId"], session);
    assert_eq!(stats[0]["requests"], 2);
    assert_eq!(stats[0]["resultsPersisted"], 1, "persisted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_pass_as_sent_and_the_upstreams_close_code_reaches_the_agent() {
    let upstream = FakeUpstream::start().await;
    // A small body limit, so "too large" is cheap to send.
    let proxy = Proxy::start(&upstream.url, "[proxy]\nmax_request_bytes = 100000").await;
    let (mut agent, _) = connect(&proxy).await;
    let not_json = "this is { not json";
    let unknown = json!({"type": "response.unheard_of", "input": [{"x": 1}]}).to_string();
    let big = big_output();
    let result =
        json!({"type": "function_call_output", "call_id": "call_1", "output": big.clone()});
    let oversized = create(vec![user(), item(1), result, json!({"pad": big})], None).to_string();
    assert!(oversized.len() > 100_000);
    for text in [not_json, &unknown, &oversized] {
        agent.send(Message::text(text.to_owned())).await.unwrap();
    }
    agent
        .send(Message::binary(b"raw bytes".to_vec()))
        .await
        .unwrap();
    // The oversized create is answered by the upstream as sent.
    loop {
        let message = tokio::time::timeout(LIMIT, agent.next()).await.unwrap();
        let Some(Ok(Message::Text(text))) = message else {
            panic!("{message:?}")
        };
        if text.contains("response.completed") {
            break;
        }
    }
    // A continuation of a response this socket never carried goes as sent.
    let stranger = create(
        vec![json!({"type": "function_call_output", "call_id": "call_9", "output": "ok"})],
        Some("resp_from_elsewhere"),
    )
    .to_string();
    turn(&mut agent, &serde_json::from_str(&stranger).unwrap()).await;
    agent
        .send(Message::text(
            json!({"type": "test.close", "code": 4004}).to_string(),
        ))
        .await
        .unwrap();
    let closed = loop {
        match tokio::time::timeout(LIMIT, agent.next()).await.unwrap() {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    let frame = closed.expect("a close frame with a code");
    assert_eq!(u16::from(frame.code), 4004);
    assert_eq!(frame.reason.as_str(), "upstream says bye");

    let seen: Vec<String> = upstream.messages().into_iter().map(|(_, m)| m).collect();
    assert_eq!(seen[0], not_json);
    assert_eq!(seen[1], unknown);
    assert_eq!(seen[2], oversized, "an oversized message goes as sent");
    assert_eq!(seen[3], "binary:raw bytes");
    assert_eq!(seen[4], stranger, "an unknown continuation goes as sent");
    let log = proxy.log();
    assert!(log.contains("not a JSON object passes as sent"), "{log}");
    assert!(log.contains("unknown type passes as sent"), "{log}");
    assert!(log.contains("larger than proxy.maxRequestBytes"), "{log}");
    assert!(log.contains("did not carry"), "{log}");
    // The proxy is still up.
    let (_again, answer) = connect(&proxy).await;
    assert_eq!(answer.status(), 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_on_another_path_is_refused_and_an_unreachable_upstream_is_a_502() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let proxy = Proxy::start(&dead, "").await;
    let request = proxy.ws_url().into_client_request().unwrap();
    let err = tokio_tungstenite::connect_async(request).await.unwrap_err();
    let tokio_tungstenite::tungstenite::Error::Http(response) = err else {
        panic!("expected an HTTP refusal, got {err}");
    };
    assert_eq!(response.status(), 502);
    let other = proxy
        .ws_url()
        .replace("/v1/responses", "/v1/chat/completions");
    let err = tokio_tungstenite::connect_async(other.into_client_request().unwrap())
        .await
        .unwrap_err();
    let tokio_tungstenite::tungstenite::Error::Http(response) = err else {
        panic!("expected an HTTP refusal, got {err}");
    };
    assert_eq!(response.status(), 404);
}

/// Codex as it ships (`codex exec`, its own provider, `openai_base_url`
/// pointing at the proxy): over the WebSocket, no 404, no fallback to
/// HTTPS; its shell command's large output reaches the upstream as a
/// preview, and the usage counts in `toolwire stats`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_speaks_websocket_through_the_proxy() {
    let upstream = FakeUpstream::scripted(codex_script).await;
    // Codex caps a command's output at about 10,000 tokens itself.
    let proxy = Proxy::start(&upstream.url, "[limits]\nmax_result_chars = 2000").await;
    let base = format!("openai_base_url={}/v1", proxy.url);
    let out = codex(&proxy, &["exec", "-c", &base]).await;
    assert_codex_went_over_the_socket(&upstream, &proxy, &out, 2);
}

/// The same through `toolwire run -- codex exec …` in the proxy's
/// workspace: it finds the running proxy and adds the `-c` itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolwire_run_codex_exec_speaks_websocket_through_the_proxy() {
    let upstream = FakeUpstream::scripted(codex_script).await;
    let proxy = Proxy::start(&upstream.url, "[limits]\nmax_result_chars = 2000").await;
    let out = codex(&proxy, &["exec"]).await;
    assert_codex_went_over_the_socket(&upstream, &proxy, &out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("toolwire: "))
        .unwrap_or_default();
    assert!(line.contains(&format!("through {}", proxy.url)), "{stderr}");
}

/// Run Codex in a throwaway home, in the proxy's workspace: `exec` with
/// `args` given straight, or through `toolwire run` when `args` is only
/// `["exec"]`.
async fn codex(proxy: &Proxy, args: &[&str]) -> std::process::Output {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let codex = root.join("tests/agents/node_modules/.bin/codex");
    assert!(
        codex.exists(),
        "Codex is not installed at {}: run ./tests/setup.sh (tests/setup.d/70-agents.sh)",
        codex.display()
    );
    let home = tempfile::tempdir().unwrap();
    let mut command = if args == ["exec"] {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
        c.args(["run", "--"]).arg(&codex);
        c
    } else {
        tokio::process::Command::new(&codex)
    };
    command
        .args(args)
        .args([
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "list the numbers",
        ])
        .current_dir(proxy.dir.path())
        .env("HOME", home.path())
        .env("CODEX_HOME", home.path())
        .env("OPENAI_API_KEY", "sk-test-secret")
        .env("NO_PROXY", "*")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(LIMIT, command.output())
        .await
        .expect("codex exec finished in time")
        .unwrap()
}

/// Codex finished over the WebSocket: no 404, no reconnect, no fallback
/// to HTTPS; its command's output went up as a preview; at least
/// `requests` responses counted, each with its usage; no key logged.
fn assert_codex_went_over_the_socket(
    upstream: &FakeUpstream,
    proxy: &Proxy,
    out: &std::process::Output,
    requests: u64,
) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let both = format!("{stdout}\n{stderr}");
    let log = proxy.log();
    assert!(
        out.status.success(),
        "codex exec failed:\n{both}\nproxy log:\n{log}"
    );
    assert!(both.contains("all numbers listed"), "{both}");
    assert!(!both.contains("Falling back"), "{both}");
    assert!(!both.contains("Reconnecting"), "{both}");
    assert!(!log.contains("no route"), "{log}");
    let seen = upstream.messages();
    let creates: Vec<Value> = seen
        .iter()
        .filter_map(|(_, m)| serde_json::from_str::<Value>(m).ok())
        .filter(|m| m["type"] == "response.create")
        .collect();
    let previews: Vec<String> = creates
        .iter()
        .flat_map(|c| c["input"].as_array().cloned().unwrap_or_default())
        .filter_map(|i| output_of(&i))
        .filter(|o| o.contains("<persisted-output>"))
        .collect();
    assert!(
        !previews.is_empty(),
        "the command's output went up whole: {seen:?}"
    );
    assert!(
        upstream.seen.lock().unwrap().http_bodies.is_empty(),
        "Codex fell back to HTTP"
    );
    let stats = proxy.stats();
    let counted: u64 = stats.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
    assert!(counted >= requests, "{stats:?}");
    assert!(
        stats.iter().all(|s| s["requestsWithoutUsage"] == 0),
        "{stats:?}"
    );
    assert!(!log.contains("sk-test-secret"), "a key reached the log");
}

/// The model Codex talks to: first a command printing 200k characters,
/// then, once that output came back, a final message.
fn codex_script(n: usize, body: &Value) -> Vec<Value> {
    let id = format!("resp_{n}");
    let has_output = body["input"]
        .as_array()
        .is_some_and(|items| items.iter().any(|i| i["type"] == "function_call_output"));
    let item = if has_output {
        json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "all numbers listed", "annotations": []}]})
    } else {
        json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
               "name": "exec_command", "status": "completed",
               "arguments": json!({"cmd": "seq 1 40000"}).to_string()})
    };
    vec![
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed", "response": {"id": id, "status": "completed",
               "output": [item], "usage": usage()}}),
    ]
}

/// Not run by default (`cargo test --test proxy_ws -- --ignored`): Codex's
/// session straight to the WebSocket upstream and through the proxy,
/// five runs each, printing the wall times (docs/proxy.md quotes them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn codex_over_the_socket_direct_and_through_the_proxy_timed() {
    let upstream = FakeUpstream::scripted(codex_script).await;
    let proxy = Proxy::start(&upstream.url, "[limits]\nmax_result_chars = 2000").await;
    let mut times = Vec::new();
    for round in 0..10 {
        let base = if round % 2 == 0 {
            &upstream.url
        } else {
            &proxy.url
        };
        let option = format!("openai_base_url={base}/v1");
        let started = std::time::Instant::now();
        let out = codex(&proxy, &["exec", "-c", &option]).await;
        let took = started.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        times.push((round % 2 == 1, took));
    }
    for through in [false, true] {
        let runs: Vec<f64> = times
            .iter()
            .filter(|(t, _)| *t == through)
            .map(|(_, d)| d.as_secs_f64())
            .collect();
        eprintln!(
            "{}: {runs:.2?} s, mean {:.2} s",
            if through {
                "through the proxy"
            } else {
                "direct"
            },
            runs.iter().sum::<f64>() / runs.len() as f64
        );
    }
}

/// Clearing rewrites an item the upstream already holds: that turn goes as
/// the whole budgeted conversation without `previous_response_id`, and the
/// next turn continues from it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_clears_old_results_resends_the_whole_conversation_once() {
    let upstream = FakeUpstream::start().await;
    let proxy = Proxy::start(
        &upstream.url,
        "[clearing]\nmode = \"batch\"\nkeep_recent = 1\nmin_chars = 100\ntrigger_chars = 2000",
    )
    .await;
    let (mut agent, _) = connect(&proxy).await;
    let result = |n: usize| {
        let text: String = (0..150).map(|i| format!("call {n} line {i}\n")).collect();
        json!({"type": "function_call_output", "call_id": format!("call_{n}"), "output": text})
    };
    turn(&mut agent, &create(vec![user()], None)).await;
    for n in 1..=4 {
        turn(
            &mut agent,
            &create(vec![result(n)], Some(&format!("resp_{n}"))),
        )
        .await;
    }
    let seen: Vec<Value> = upstream
        .messages()
        .iter()
        .map(|(_, m)| serde_json::from_str(m).unwrap())
        .collect();
    let whole: Vec<usize> = (0..seen.len())
        .filter(|&k| seen[k].get("previous_response_id").is_none())
        .collect();
    // The first turn, and each turn that cleared: whole, and only those.
    assert!(whole.len() >= 2, "no turn cleared: {seen:?}");
    assert_eq!(whole[0], 0);
    let stats = proxy.stats();
    let cleared = stats[0]["resultsCleared"].as_u64().unwrap();
    assert!(cleared >= 1, "{stats:?}");
    for &k in &whole[1..] {
        let input = seen[k]["input"].as_array().unwrap();
        assert_eq!(input[0], user(), "turn {k} starts from the user's message");
        let outputs: Vec<String> = input.iter().filter_map(output_of).collect();
        assert!(
            outputs.iter().any(|o| !o.starts_with("call ")),
            "turn {k} went whole without a cleared result: {outputs:?}"
        );
    }
    // After a whole turn, the next one continues from it.
    let last = *whole.last().unwrap();
    if last + 1 < seen.len() {
        assert!(seen[last + 1].get("previous_response_id").is_some());
    }
}

/// Codex's session over HTTP (a provider of its own without WebSocket)
/// and over the socket, each through a proxy of its own: the same result
/// persisted, and the same preview but for the session's directory it
/// names and what Codex itself varies between runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_over_http_and_over_the_socket_gets_the_same_previews() {
    let call_id = regex::Regex::new(r"call_\d+").unwrap();
    let chunk_id = regex::Regex::new(r"Chunk ID: \w+").unwrap();
    let wall_time = regex::Regex::new(r"Wall time: [0-9.]+ seconds").unwrap();
    let mut previews = Vec::new();
    for http in [true, false] {
        let upstream = FakeUpstream::scripted(codex_script).await;
        let proxy = Proxy::start(&upstream.url, "[limits]\nmax_result_chars = 2000").await;
        let base = format!("openai_base_url={}/v1", proxy.url);
        // Over HTTP: a provider of its own that does not speak WebSocket.
        let provider = format!(
            "model_providers.tw={{name=\"tw\", base_url=\"{}/v1\", wire_api=\"responses\", env_key=\"OPENAI_API_KEY\", supports_websockets=false}}",
            proxy.url
        );
        let args: Vec<&str> = if http {
            vec!["exec", "-c", &provider, "-c", "model_provider=\"tw\""]
        } else {
            vec!["exec", "-c", &base]
        };
        let out = codex(&proxy, &args).await;
        let both = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{both}");
        assert!(both.contains("all numbers listed"), "{both}");
        let bodies: Vec<String> = if http {
            upstream.seen.lock().unwrap().http_bodies.clone()
        } else {
            assert!(upstream.seen.lock().unwrap().http_bodies.is_empty());
            upstream.messages().into_iter().map(|(_, m)| m).collect()
        };
        assert!(
            !bodies.is_empty(),
            "nothing reached the upstream (http: {http})"
        );
        let sessions = proxy.dir.path().join(".toolwire/sessions");
        let found: Vec<String> = bodies
            .iter()
            .filter_map(|b| serde_json::from_str::<Value>(b).ok())
            .flat_map(|b| b["input"].as_array().cloned().unwrap_or_default())
            .filter_map(|i| output_of(&i))
            .filter(|o| o.contains("<persisted-output>"))
            .map(|o| {
                // The saved output's path names this run's session.
                let o = o.replace(&sessions.display().to_string(), "<sessions>");
                let o = proxy.stats().iter().fold(o, |o, s| {
                    o.replace(s["sessionId"].as_str().unwrap(), "<session>")
                });
                // What Codex itself sends differently per run: its call
                // ids (the socket's warm-up response takes resp_1), and a
                // random chunk id and the command's wall time in its output.
                let o = call_id.replace_all(&o, "call_N");
                let o = chunk_id.replace_all(&o, "Chunk ID: X");
                wall_time
                    .replace_all(&o, "Wall time: T seconds")
                    .into_owned()
            })
            .collect();
        assert!(!found.is_empty(), "no preview went up (http: {http})");
        let stats = proxy.stats();
        let persisted: u64 = stats
            .iter()
            .map(|s| s["resultsPersisted"].as_u64().unwrap())
            .sum();
        assert_eq!(persisted, 1, "{stats:?}");
        previews.push(found[0].clone());
    }
    assert_eq!(previews[0], previews[1]);
}

/// `x-toolwire-session` on the upgrade names the socket's session, and is
/// not forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_header_on_the_upgrade_names_the_session() {
    let upstream = FakeUpstream::start().await;
    let proxy = Proxy::start(&upstream.url, "").await;
    let mut request = proxy.ws_url().into_client_request().unwrap();
    request.headers_mut().insert(
        "x-toolwire-session",
        http::HeaderValue::from_static("named-by-agent"),
    );
    let (mut agent, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let result =
        json!({"type": "function_call_output", "call_id": "call_1", "output": big_output()});
    turn(&mut agent, &create(vec![user(), item(1), result], None)).await;
    let stats = proxy.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0]["sessionId"], "named-by-agent");
    assert_eq!(stats[0]["resultsPersisted"], 1);
    let headers = upstream.seen.lock().unwrap().headers[0].clone();
    assert!(!headers.contains_key("x-toolwire-session"));
}
