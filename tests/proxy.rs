//! `toolwire proxy` end to end: the real binary between the official
//! provider SDKs (Python, pinned, installed by tests/setup.d/40-proxy.sh)
//! and a fake provider that enforces each provider's pairing rules and
//! simulates prompt caching by byte prefix (tests/fake_provider).

mod fake_provider;
#[path = "common/gzip_bomb.rs"]
mod gzip_bomb;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fake_provider::{FakeProvider, Received};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const LIMIT: Duration = Duration::from_secs(300);

/// A running `toolwire proxy` in its own workspace.
struct Proxy {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Proxy {
    async fn start(upstream: &str, extra_toml: &str) -> Proxy {
        Proxy::start_with(
            &format!(
                "durability = \"none\"\n{extra_toml}\n[proxy.upstreams]\nanthropic = \"{upstream}\"\nopenai = \"{upstream}\"\ngemini = \"{upstream}\"\n"
            ),
            &["--listen", "127.0.0.1:0"],
            "toolwire=warn",
        )
        .await
    }

    async fn start_with(toml: &str, args: &[&str], log: &str) -> Proxy {
        Proxy::start_limited(toml, args, log, None).await
    }

    /// [`Proxy::start_with`], with at most `open_files` descriptors.
    async fn start_limited(toml: &str, args: &[&str], log: &str, open_files: Option<u64>) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("toolwire.toml"), toml).unwrap();
        let (child, url, lines) =
            proxy_process::start_limited(dir.path(), args, log, "proxy", &[], open_files).await;
        // Keep draining stderr (the log) so the proxy never blocks on it.
        let stderr = proxy_process::keep_log(lines);
        Proxy {
            child,
            url,
            dir,
            stderr,
        }
    }

    fn stats(&self) -> Vec<Value> {
        proxy_process::stats(self.dir.path())
    }

    async fn stop(mut self) -> String {
        self.child.kill().await.unwrap();
        let _ = self.child.wait().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.stderr.lock().unwrap().clone()
    }
}

fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxy/.venv/bin/python");
    assert!(
        python.exists(),
        "the provider SDKs are not installed: run ./tests/setup.sh (or bash tests/setup.d/40-proxy.sh)"
    );
    python
}

/// Run tests/proxy/agent.py and return what it printed.
async fn agent(provider: &str, base: &str, mode: &str, stream: bool) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxy/agent.py");
    let mut cmd = Command::new(python());
    cmd.arg(script).args([provider, base, mode]);
    if stream {
        cmd.arg("--stream");
    }
    // The SDKs must reach the proxy directly, whatever the environment says.
    cmd.env("NO_PROXY", "*")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY");
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(LIMIT, cmd.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "agent.py {provider} {mode} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Where the conversation's element `index` ends in `body`.
fn element_end(body: &[u8], key: &str, index: usize) -> usize {
    let text = std::str::from_utf8(body).unwrap();
    let top: std::collections::HashMap<String, &RawValue> = serde_json::from_str(text).unwrap();
    let items: Vec<&RawValue> = serde_json::from_str(top[key].get()).unwrap();
    let raw = items[index].get();
    raw.as_ptr() as usize - text.as_ptr() as usize + raw.len()
}

fn conversation_len(r: &Received, key: &str) -> usize {
    r.json()[key].as_array().unwrap().len()
}

/// The 30-turn loop through the proxy: every request accepted; from the
/// second on, every byte up to its new messages identical to the request
/// before; the cache read exactly that prefix; `toolwire stats` reports the
/// resulting (maximal) hit rate. Returns what the provider received.
async fn loop_through_proxy(provider: &str, key: &str, stream: bool) -> (Vec<Received>, Value) {
    let fake = FakeProvider::start().await;
    // Budgeting alone: clearing breaks the prefix once per batch on
    // purpose (that is tests/clearing.rs's to check).
    let proxy = Proxy::start(&fake.url(), "[clearing]\nmode = \"off\"").await;
    let out = agent(provider, &proxy.url, "loop", stream).await;
    assert_eq!(out["turns"], 30);
    let received = fake.received();
    assert_eq!(received.len(), 30, "{provider}");
    assert!(
        received.iter().all(|r| r.status == 200),
        "{provider}: a request was refused"
    );
    let mut prefix_total = 0u64;
    let mut bytes_total = 0u64;
    for (k, r) in received.iter().enumerate() {
        bytes_total += r.body.len() as u64;
        if k == 0 {
            assert_eq!(r.cache_read, 0);
            continue;
        }
        let before = &received[k - 1];
        let old = conversation_len(before, key);
        let end = element_end(&r.body, key, old - 1);
        assert_eq!(
            r.body[..end],
            before.body[..end],
            "{provider} turn {k}: the bytes before the new messages changed"
        );
        assert_eq!(r.cache_read, end as u64, "{provider} turn {k}");
        prefix_total += end as u64;
    }
    let stats = proxy.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    let s = &stats[0];
    assert_eq!(s["requests"], 30);
    assert_eq!(s["requestsWithoutUsage"], 0);
    assert_eq!(s["tokens"]["cacheRead"], prefix_total);
    let rate = s["cacheHitRate"].as_f64().unwrap();
    let best = prefix_total as f64 / bytes_total as f64;
    assert!(
        (rate - best).abs() < 1e-9,
        "{provider}: hit rate {rate}, best possible {best}"
    );
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["stats", "--session", s["sessionId"].as_str().unwrap()])
        .current_dir(proxy.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(&format!("cache hit rate     {:.1}%", best * 100.0)),
        "{text}"
    );
    eprintln!("{provider} (stream: {stream}):\n{text}");
    proxy.stop().await;
    (received, s.clone())
}

/// The text of every tool result in a request body, read the way each
/// provider's API defines it.
fn result_texts(provider: &str, body: &Value) -> Vec<String> {
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap().to_owned();
    let mut out = Vec::new();
    match provider {
        "anthropic" => {
            for m in list(&body["messages"]) {
                for b in list(&m["content"]) {
                    if b["type"] == "tool_result" {
                        out.push(text(&b["content"]));
                    }
                }
            }
        }
        "openai-chat" => {
            for m in list(&body["messages"]) {
                if m["role"] == "tool" {
                    out.push(text(&m["content"]));
                }
            }
        }
        "openai-responses" => {
            for item in list(&body["input"]) {
                if item["type"] == "function_call_output" {
                    out.push(text(&item["output"]));
                }
            }
        }
        "gemini" => {
            for c in list(&body["contents"]) {
                for p in list(&c["parts"]) {
                    if let Some(r) = p.get("functionResponse") {
                        out.push(text(&r["response"]["output"]));
                    }
                }
            }
        }
        _ => panic!("unknown provider {provider}"),
    }
    out
}

/// What the Anthropic loop and every other route's loop must show: no
/// result over maxResultChars went upstream, the large ones were replaced
/// by previews, and fewer characters left than came in.
fn assert_budgeted(provider: &str, received: &[Received], stats: &Value) {
    let mut replaced = 0;
    for r in received {
        for text in result_texts(provider, &r.json()) {
            assert!(
                text.chars().count() <= 50_000,
                "{provider}: a result over maxResultChars went out"
            );
            replaced += usize::from(text.starts_with("<persisted-output>"));
        }
    }
    assert!(replaced > 0, "{provider}: no result was replaced");
    assert!(
        stats["charsSent"].as_u64() < stats["charsReceived"].as_u64(),
        "{provider}: {stats}"
    );
    // 120 KB and 60 KB results, five of each in 30 turns.
    assert_eq!(stats["resultsPersisted"], 10, "{provider}");
    assert_eq!(
        received[29].header("x-toolwire-session"),
        None,
        "toolwire's header stays local"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sdk_30_turns_budgeted_and_byte_stable() {
    for stream in [false, true] {
        let (received, stats) = loop_through_proxy("anthropic", "messages", stream).await;
        assert_budgeted("anthropic", &received, &stats);
        // The credential goes upstream untouched (this SDK version sends it
        // as a bearer token; older ones as x-api-key).
        let credential = received[29]
            .header("x-api-key")
            .or(received[29].header("authorization"));
        assert!(credential.is_some_and(|c| c.ends_with("sk-ant-test")));
    }
}

/// Issue 31, reproduction 1, through the official SDK: the loop as Claude
/// Code sends it, results as text blocks and the cache breakpoint moved to
/// the last block of the last user message on every turn (PROTOCOL.md
/// 11.1). Every preview is byte-identical from the turn it is made on, with
/// the marker on its text block that turn; each large result is saved
/// once; and the provider's prompt cache (markers are not prompt content)
/// reads the whole previous request on every turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sdk_moving_cache_markers_keep_previews_and_the_cache() {
    let fake = FakeProvider::start().await;
    // Budgeting's previews alone: clearing changes old results on purpose
    // (tests/clearing.rs).
    let proxy = Proxy::start(&fake.url(), "[clearing]\nmode = \"off\"").await;
    let out = agent("anthropic", &proxy.url, "markers", false).await;
    assert_eq!(out["turns"], 30);
    let received = fake.received();
    assert_eq!(received.len(), 30);
    assert!(
        received.iter().all(|r| r.status == 200),
        "a request was refused"
    );
    let mut previews: std::collections::HashMap<String, String> = Default::default();
    for (k, r) in received.iter().enumerate() {
        let body = r.json();
        let messages = body["messages"].as_array().unwrap();
        for (m, message) in messages.iter().enumerate() {
            for b in message["content"].as_array().into_iter().flatten() {
                if b["type"] != "tool_result" {
                    continue;
                }
                let id = b["tool_use_id"].as_str().unwrap().to_owned();
                let (text, marked) = match &b["content"] {
                    Value::String(s) => (s.clone(), false),
                    Value::Array(blocks) => (
                        blocks[0]["text"].as_str().unwrap().to_owned(),
                        blocks[0].get("cache_control").is_some(),
                    ),
                    other => panic!("{other}"),
                };
                let last = m + 1 == messages.len();
                assert_eq!(
                    marked, last,
                    "turn {k}: the marker is where the agent put it"
                );
                match previews.get(&id) {
                    Some(first) => assert_eq!(first, &text, "turn {k}: {id}'s preview changed"),
                    None if text.starts_with("<persisted-output>") => {
                        previews.insert(id, text);
                    }
                    None => assert!(text.chars().count() <= 50_000),
                }
            }
        }
        if k > 0 {
            let before = &received[k - 1].prompt;
            let read = fake_provider::common_prefix(before, &r.prompt);
            assert!(
                read >= before.len() - 2,
                "turn {k}: the cache read {read} of {}",
                before.len()
            );
        }
    }
    // Two sizes of agent.py's cycle of six are over the limit (120 KB and
    // 60 KB): ten results in 30 turns, each saved once.
    assert_eq!(previews.len(), 10, "{:?}", previews.keys());
    let sessions = proxy.dir.path().join(".toolwire/sessions");
    let mut saved = 0;
    for session in std::fs::read_dir(&sessions).unwrap() {
        let outputs = session.unwrap().path().join("tool-results");
        if outputs.is_dir() {
            saved += std::fs::read_dir(outputs).unwrap().count();
        }
    }
    assert_eq!(saved, 10);
    proxy.stop().await;
}

/// PROTOCOL.md 11.1 through the proxy: a fork whose conversation shares the
/// parent's first messages (the same derived session) sends the parent's
/// exact bytes for the shared prefix, decisions included, and gets its own
/// for what it does differently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_sharing_the_parents_first_messages_sends_the_parents_bytes() {
    let fake = FakeProvider::start().await;
    let proxy = Proxy::start(&fake.url(), "").await;
    let call = |id: &str| json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": id}}]});
    let result = |id: &str, n: usize| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": format!("{id}: warning\n").repeat(n)}]});
    let shared = vec![
        json!({"role": "user", "content": "fix the build"}),
        call("toolu_1"),
        result("toolu_1", 8000),
        call("toolu_2"),
        result("toolu_2", 7000),
    ];
    let mut parent = shared.clone();
    parent.extend([call("toolu_3"), result("toolu_3", 9000)]);
    let mut fork = shared.clone();
    fork.extend([call("toolu_f"), result("toolu_f", 6000)]);
    for messages in [&parent, &fork] {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages});
        let (status, answer) = raw_request(&proxy.url, "/v1/messages", &body.to_string()).await;
        assert_eq!(status, 200, "{answer}");
    }
    let received = fake.received();
    let end = element_end(&received[0].body, "messages", shared.len() - 1);
    assert_eq!(
        end,
        element_end(&received[1].body, "messages", shared.len() - 1)
    );
    assert_eq!(received[1].body[..end], received[0].body[..end]);
    let texts = result_texts("anthropic", &received[1].json());
    assert!(
        texts.iter().all(|t| t.starts_with("<persisted-output>")),
        "{texts:?}"
    );
    assert_ne!(texts[2], result_texts("anthropic", &received[0].json())[2]);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_chat_sdk_30_turns_budgeted_and_byte_stable() {
    for stream in [false, true] {
        let (received, stats) = loop_through_proxy("openai-chat", "messages", stream).await;
        assert_budgeted("openai-chat", &received, &stats);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_responses_sdk_30_turns_budgeted_and_byte_stable() {
    for stream in [false, true] {
        let (received, stats) = loop_through_proxy("openai-responses", "input", stream).await;
        assert_budgeted("openai-responses", &received, &stats);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_sdk_30_turns_budgeted_and_byte_stable() {
    for stream in [false, true] {
        let (received, stats) = loop_through_proxy("gemini", "contents", stream).await;
        assert_budgeted("gemini", &received, &stats);
    }
}

/// Post an Anthropic `body` through the proxy at `url`; its
/// `x-toolwire-repaired` header (the request must succeed).
async fn repaired_header(url: &str, body: &Value) -> String {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.headers()["x-toolwire-repaired"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_call_is_repaired_through_the_proxy_and_refused_directly() {
    let fake = FakeProvider::start().await;
    let proxy = Proxy::start(&fake.url(), "").await;
    let direct = agent("anthropic", &fake.url(), "orphan", false).await;
    assert_eq!(direct["ok"], false);
    assert_eq!(direct["status"], 400);
    assert_eq!(
        direct["body"]["error"]["message"],
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_lost. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    );
    let through = agent("anthropic", &proxy.url, "orphan", false).await;
    assert_eq!(through["ok"], true, "{through}");
    let last = fake.received().pop().unwrap();
    assert_eq!(last.status, 200);
    assert!(!String::from_utf8_lossy(&last.body).contains("toolu_lost"));

    // The response says what was repaired.
    let body = json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_lost", "name": "bash", "input": {}}]},
        {"role": "user", "content": "never mind"}]});
    assert_eq!(
        repaired_header(&proxy.url, &body).await,
        "droppedToolUses=toolu_lost; droppedToolResults=; movedToolResults=; renamedToolUses="
    );

    // A repair that only moved a result ahead of text says so: the
    // provider would have refused the request as sent (its results must
    // come first in the message answering the calls).
    let body = json!({"model": "m", "max_tokens": 8, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_late", "name": "bash", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "here you are"},
                                     {"type": "tool_result", "tool_use_id": "toolu_late", "content": "ok"}]}]});
    assert_eq!(
        repaired_header(&proxy.url, &body).await,
        "droppedToolUses=; droppedToolResults=; movedToolResults=toolu_late; renamedToolUses="
    );
    let sent: Value = serde_json::from_slice(&fake.received().pop().unwrap().body).unwrap();
    let blocks = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(2)
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .map(|b| b["type"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(blocks, ["tool_result", "text"], "{sent}");

    // The same through OpenAI Chat: the provider refuses the orphaned
    // call, the proxy's repaired request is accepted.
    let direct = agent("openai-chat", &fake.url(), "orphan", false).await;
    assert_eq!(direct["ok"], false, "{direct}");
    assert_eq!(direct["status"], 400);
    let through = agent("openai-chat", &proxy.url, "orphan", false).await;
    assert_eq!(through["ok"], true, "{through}");
    let last = fake.received().pop().unwrap();
    assert_eq!(last.status, 200);
    assert!(!String::from_utf8_lossy(&last.body).contains("call_lost"));
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_headers_and_errors_pass_unchanged() {
    let fake = FakeProvider::start().await;
    let proxy = Proxy::start(&fake.url(), "[proxy]\nmax_request_bytes = 400000").await;
    let client = reqwest::Client::new();
    let big = "x".repeat(60_000);
    // Odd spacing, escapes, unknown fields and key order, a big result.
    let body = format!(
        "{{\"zeta\": 1.50, \"messages\" : [\n {{\"role\":\"user\",\"content\":\"caf\\u00e9 \\/ go\",\"extra\":{{\"b\":1,\"a\":2}}}},\n {{\"content\":[{{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"bash\",\"input\":{{}}}}],\"role\":\"assistant\"}},\n {{\"role\":\"user\",\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"{big}\",\"zz\":true}}]}}\n ], \"model\":\"m\", \"max_tokens\": 8}}"
    );
    let r = client
        .post(format!("{}/v1/messages", proxy.url))
        .header("x-api-key", "sk-ant-secret")
        .header("x-custom-header", "kept")
        .header("x-toolwire-session", "s1")
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-toolwire-session"], "s1");
    assert_eq!(r.headers()["x-toolwire-budget"], "applied; persisted=1");
    assert_eq!(
        r.headers()["x-fake-provider"],
        "1",
        "response headers pass through"
    );
    let sent = fake.received().pop().unwrap();
    assert_eq!(sent.header("x-custom-header"), Some("kept"));
    let sent_text = String::from_utf8(sent.body.to_vec()).unwrap();
    let replacement = sent.json()["messages"][2]["content"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(replacement.starts_with("<persisted-output>"));
    let expected = body.replace(
        &format!("\"{big}\""),
        &serde_json::to_string(&replacement).unwrap(),
    );
    assert_eq!(sent_text, expected, "only the replaced result changed");
    assert!(
        proxy
            .dir
            .path()
            .join(".toolwire/sessions/s1/tool-results/t1.txt")
            .exists(),
        "the original is persisted in the session's data dir"
    );

    // A bad session header is the agent's error, in the provider's shape.
    let r = client
        .post(format!("{}/v1/messages", proxy.url))
        .header("x-toolwire-session", "../etc")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-toolwire-session")
    );

    // Over the body limit: 413 naming the setting.
    let r = client
        .post(format!("{}/v1/chat/completions", proxy.url))
        .body(vec![b' '; 500_000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let e: Value = r.json().await.unwrap();
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maxRequestBytes"),
        "{e}"
    );

    // HTTP/2 from the agent (prior knowledge), a Gemini path with a query.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let r = h2
        .post(format!(
            "{}/v1beta/models/gemini-2.5-flash:generateContent?x=1",
            proxy.url
        ))
        .header("x-goog-api-key", "AIza-secret")
        .body(r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.version(), reqwest::Version::HTTP_2);
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-toolwire-budget"], "applied; persisted=0");

    // A Responses request whose input is a string has nothing to budget.
    let r = client
        .post(format!("{}/v1/responses", proxy.url))
        .header("authorization", "Bearer sk-secret")
        .body(r#"{"model":"gpt-5","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-toolwire-budget"], "none; no conversation");

    // Unknown paths are not forwarded anywhere.
    let r = client
        .post(format!("{}/admin", proxy.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let log = proxy.stop().await;
    assert!(!log.contains("secret"), "a credential reached the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_502_in_the_providers_shape() {
    // A port bound and held, never listened on: connecting is refused, and
    // no other process on the machine can take the port while the test runs.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = held.local_addr().unwrap().port();
    let proxy = Proxy::start(&format!("http://127.0.0.1:{port}"), "").await;
    let client = reqwest::Client::new();
    let cases = [
        ("/v1/messages", "/error/type", "api_error"),
        ("/v1/chat/completions", "/error/type", "server_error"),
        (
            "/v1beta/models/g:streamGenerateContent",
            "/error/status",
            "UNAVAILABLE",
        ),
    ];
    for (path, pointer, expected) in cases {
        let r = client
            .post(format!("{}{path}", proxy.url))
            .body(r#"{"messages":[{"role":"user","content":"hi"}],"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 502, "{path}");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e.pointer(pointer).unwrap(), expected, "{path}: {e}");
        assert!(e.to_string().contains("could not be reached"), "{e}");
    }
    let stats = proxy.stats();
    assert_eq!(
        stats
            .iter()
            .map(|s| s["requests"].as_u64().unwrap())
            .sum::<u64>(),
        3
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_listens_on_loopback_unless_told_otherwise_and_logs_no_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["proxy", "--listen", "0.0.0.0:0"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));

    let fake = FakeProvider::start().await;
    let toml = format!(
        "durability = \"none\"\n[proxy.upstreams]\nanthropic = \"{0}\"\nopenai = \"{0}\"\ngemini = \"{0}\"\n",
        fake.url()
    );
    let proxy = Proxy::start_with(&toml, &["--listen", "127.0.0.1:0"], "toolwire=trace").await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", proxy.url))
        .header("authorization", "Bearer sk-very-secret")
        .body(r#"{"messages":[{"role":"user","content":"body-marker-123"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let log = proxy.stop().await;
    assert!(
        log.contains("authorization: <redacted>"),
        "the request was logged: {log}"
    );
    assert!(
        !log.contains("sk-very-secret") && !log.contains("body-marker-123"),
        "{log}"
    );
}

/// After a request large enough to carry a conversation, once the proxy
/// has had a quiet second, it hands what budgeting freed back to the
/// system (`heap::LargeWork`), once per quiet spell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_proxy_hands_back_what_a_large_request_freed() {
    const RELEASED: &str = "handed the memory freed by large work back to the system";
    let fake = FakeProvider::start().await;
    let toml = format!(
        "durability = \"none\"\n[proxy.upstreams]\nanthropic = \"{0}\"\nopenai = \"{0}\"\ngemini = \"{0}\"\n",
        fake.url()
    );
    let proxy = Proxy::start_with(
        &toml,
        &["--listen", "127.0.0.1:0"],
        "toolwire=warn,toolwire::heap=debug",
    )
    .await;
    let client = reqwest::Client::new();
    let released = || proxy.stderr.lock().unwrap().matches(RELEASED).count();
    for round in 1..=2 {
        let id = format!("toolu_big_{round}");
        let body = json!({"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "log line\n".repeat(30_000)}]}]});
        let r = client
            .post(format!("{}/v1/messages", proxy.url))
            .header("x-toolwire-session", "quiet")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while released() < round {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no release after round {round}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(released(), round, "one release per quiet spell");
    }
    proxy.stop().await;
}

/// An upstream that only writes down what reached it (path and query as
/// sent on the wire, and the body) and answers `{}`.
struct Recorder {
    url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, bytes::Bytes)>>>,
}

/// Serve `answer` on a loopback port (HTTP/1.1) until the runtime ends;
/// the base URL.
async fn upstream<F, Fut>(answer: F) -> String
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<http_body_util::Full<bytes::Bytes>>>
        + Send
        + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let answer = answer.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    url
}

impl Recorder {
    async fn start() -> Recorder {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let url = upstream(move |req: hyper::Request<hyper::body::Incoming>| {
            let log = log.clone();
            async move {
                use http_body_util::BodyExt;
                let uri = req.uri().to_string();
                let body = req.into_body().collect().await.unwrap().to_bytes();
                log.lock().unwrap().push((uri, body));
                hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
            }
        })
        .await;
        Recorder { url, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(uri, _)| uri.clone())
            .collect()
    }

    fn bodies(&self) -> Vec<bytes::Bytes> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, body)| body.clone())
            .collect()
    }
}

/// One HTTP/1.1 request with its target written exactly as given (no
/// client library resolves its dot segments first); the status and body.
async fn raw_request(base: &str, target: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {target} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// #32 item 7: the proxy routes on the path as it will leave, with dot
/// segments (literal or `%2e`) resolved, so none reaches the upstream and
/// a path that resolves outside the provider endpoints goes nowhere; a
/// base URL with a path keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_never_reach_the_upstream_and_a_base_path_is_kept() {
    let upstream = Recorder::start().await;
    let toml = format!(
        "durability = \"none\"\n[proxy.upstreams]\nanthropic = \"{0}/gateway/anthropic\"\nopenai = \"{0}/gateway/openai/\"\ngemini = \"{0}/gateway/gemini\"\n",
        upstream.url
    );
    let proxy = Proxy::start_with(&toml, &["--listen", "127.0.0.1:0"], "toolwire=warn").await;
    let chat = r#"{"messages":[{"role":"user","content":"hi"}]}"#;
    for refused in [
        "/v1/messages/../../etc/passwd",
        "/v1/messages/%2e%2e/%2E%2e/etc/passwd",
        "/v1/messages/.%2e/.%2E/.%2e/etc/passwd",
        "/v1beta/../x",
        "/v1beta/models/../../../x:generateContent",
        "/v1/messages/..%2f..%2fetc/passwd",
        "/v1/messages/..%5c..%5cetc/passwd",
    ] {
        let (status, body) = raw_request(&proxy.url, refused, chat).await;
        assert_eq!(status, 404, "{refused}: {body}");
    }
    assert_eq!(
        upstream.seen(),
        Vec::<String>::new(),
        "nothing was forwarded"
    );

    let forwarded = [
        ("/v1beta/../v1/messages", "/gateway/anthropic/v1/messages"),
        (
            "/v1/messages/./x/../count_tokens",
            "/gateway/anthropic/v1/messages/count_tokens",
        ),
        (
            "/v1/chat/%2e/completions",
            "/gateway/openai/v1/chat/completions",
        ),
        (
            "/v1beta/models/g:generateContent?alt=sse",
            "/gateway/gemini/v1beta/models/g:generateContent?alt=sse",
        ),
    ];
    for (sent, _) in forwarded {
        let (status, body) = raw_request(&proxy.url, sent, chat).await;
        assert_eq!(status, 200, "{sent}: {body}");
    }
    let expected: Vec<String> = forwarded.iter().map(|(_, to)| to.to_string()).collect();
    assert_eq!(upstream.seen(), expected);
    proxy.stop().await;
}

/// #32 item 6: Gemini takes its API key in the query (`?key=`); when the
/// upstream cannot be reached, neither the log (at any level) nor the 502
/// sent back carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_the_url_never_reaches_a_log_or_an_error() {
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = held.local_addr().unwrap().port();
    let toml = format!(
        "durability = \"none\"\n[proxy.upstreams]\nanthropic = \"http://127.0.0.1:{port}\"\nopenai = \"http://127.0.0.1:{port}\"\ngemini = \"http://127.0.0.1:{port}\"\n"
    );
    let proxy = Proxy::start_with(&toml, &["--listen", "127.0.0.1:0"], "trace").await;
    for path in [
        "/v1beta/models/g:generateContent?key=AIza-query-secret",
        "/v1beta/models/g:streamGenerateContent?alt=sse&key=AIza-query-secret",
        "/v1beta/models?key=AIza-query-secret",
    ] {
        let r = reqwest::Client::new()
            .post(format!("{}{path}", proxy.url))
            .body(r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 502, "{path}");
        let body = r.text().await.unwrap();
        assert!(body.contains("could not be reached"), "{body}");
        assert!(!body.contains("query-secret"), "{path}: {body}");
    }
    let log = proxy.stop().await;
    assert!(log.contains("could not be reached"), "{log}");
    assert!(!log.contains("query-secret"), "{log}");
}

/// #32 item 8: a turn whose tool_use input nests deeper than serde_json's
/// default 128 levels (200, then 1,000) is budgeted like any other: the
/// result replaced on turn 1 goes as the same preview on the later turns,
/// and the deep input reaches the provider byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_json_keeps_the_budget() {
    let upstream = Recorder::start().await;
    let proxy = Proxy::start(&upstream.url, "").await;
    let client = reqwest::Client::new();
    let big = "line of tool output\\n".repeat(4_000);
    let mut messages = format!(
        r#"{{"role":"user","content":"go"}},{{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"bash","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":"{big}"}}]}}"#
    );
    let mut preview = None;
    for (turn, depth) in [(1, 0), (2, 200), (3, 1_000)] {
        if depth > 0 {
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            messages.push_str(&format!(
                r#",{{"role":"assistant","content":[{{"type":"tool_use","id":"t{turn}","name":"edit","input":{{"v":{deep}}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{turn}","content":"ok"}}]}}"#
            ));
        }
        let body = format!(r#"{{"model":"m","max_tokens":8,"messages":[{messages}]}}"#);
        let r = client
            .post(format!("{}/v1/messages", proxy.url))
            .header("x-toolwire-session", "deep")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "turn {turn}");
        let expected = if turn == 1 {
            "applied; persisted=1"
        } else {
            "applied; persisted=0"
        };
        assert_eq!(r.headers()["x-toolwire-budget"], expected, "turn {turn}");
        let sent = String::from_utf8(upstream.bodies().pop().unwrap().to_vec()).unwrap();
        let start = sent
            .find("<persisted-output>")
            .expect("the result went replaced");
        let end = start + sent[start..].find('"').unwrap();
        let this = sent[start..end].to_owned();
        assert_eq!(preview.get_or_insert(this.clone()), &this, "turn {turn}");
        assert_eq!(
            sent,
            body.replace(&format!("\"{big}\""), &format!("\"{this}\"")),
            "turn {turn}: only the replaced result changed"
        );
    }
    proxy.stop().await;
}

/// Every file of the data directory but the proxy's usage records, by
/// path: what a commit (and so a disk sync) would change.
fn store_files(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.join(".toolwire")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if !path.ends_with("proxy-usage.jsonl") {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// #52: under the defaults (durable commits, `auto` clearing), a request
/// that decides nothing new commits nothing, so it never waits on a disk
/// sync: after the first request of a conversation, the same request again
/// leaves the journal, the write-ahead log and the saved outputs as they
/// were, and is forwarded with the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_deciding_nothing_commits_nothing_under_the_defaults() {
    let upstream = Recorder::start().await;
    let toml = format!("[proxy.upstreams]\nanthropic = \"{}\"\n", upstream.url);
    let proxy = Proxy::start_with(&toml, &["--listen", "127.0.0.1:0"], "toolwire=warn").await;
    let mut messages = vec![json!({"role": "user", "content": "The build fails."})];
    for t in 0..20 {
        let id = format!("toolu_{t:04}");
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "bash", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": format!("line {t} of the build log\n").repeat(400)}]}));
    }
    let body = json!({"model": "m", "max_tokens": 8, "messages": messages}).to_string();
    let client = reqwest::Client::new();
    let send = || async {
        let r = client
            .post(format!("{}/v1/messages", proxy.url))
            .header("x-toolwire-session", "quiet")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let budget = r.headers()["x-toolwire-budget"]
            .to_str()
            .unwrap()
            .to_owned();
        (budget, r.headers().contains_key("x-toolwire-cleared"))
    };
    let (first, _) = send().await;
    assert!(first.starts_with("applied;"), "{first}");
    let decided = store_files(proxy.dir.path());
    assert!(
        decided
            .keys()
            .any(|p| p.extension().is_some_and(|e| e == "jsonl")),
        "the first request journals its decisions: {:?}",
        decided.keys()
    );
    let forwarded = upstream.bodies().pop().unwrap();
    for turn in 2..=6 {
        assert_eq!(
            send().await,
            ("applied; persisted=0".to_owned(), false),
            "request {turn}"
        );
        assert_eq!(
            upstream.bodies().pop().unwrap(),
            forwarded,
            "request {turn}"
        );
        assert!(
            store_files(proxy.dir.path()) == decided,
            "request {turn} decided nothing, yet the store changed"
        );
    }
    proxy.stop().await;
}

/// #32 item 14: a body that is not UTF-8 goes as sent, and says why it
/// was not budgeted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_utf8_says_so() {
    let upstream = Recorder::start().await;
    let proxy = Proxy::start(&upstream.url, "").await;
    let body = b"{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}".to_vec();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", proxy.url))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-toolwire-budget"],
        "none; the request body is not UTF-8"
    );
    assert_eq!(upstream.bodies(), vec![bytes::Bytes::from(body)]);
    proxy.stop().await;
}

/// The peak resident size of a process so far, in MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024
}

/// #32 item 9: a hostile upstream answers with a 1 MiB gzip body that
/// inflates to 1 GiB, as JSON and as an event stream. The agent gets the
/// body as sent (the proxy never decodes what it forwards), and reading
/// its usage costs the proxy a bounded amount of memory (the reported run
/// grew by about 380 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_bomb_from_upstream_costs_bounded_memory() {
    let bomb = bytes::Bytes::from(gzip_bomb::gzip_bomb(0, 1 << 30));
    let served = bomb.clone();
    let url = upstream(move |req: hyper::Request<hyper::body::Incoming>| {
        let body = served.clone();
        async move {
            let sse = req.uri().path() == "/v1/chat/completions";
            hyper::Response::builder()
                .header("content-encoding", "gzip")
                .header(
                    "content-type",
                    if sse {
                        "text/event-stream"
                    } else {
                        "application/json"
                    },
                )
                .body(http_body_util::Full::new(body))
                .unwrap()
        }
    })
    .await;
    let proxy = Proxy::start(&url, "").await;
    let pid = proxy.child.id().unwrap();
    let client = reqwest::Client::new();
    let conversation = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    // One ordinary exchange first: the baseline is a proxy that has served.
    let r = client
        .post(format!("{}/v1/models", proxy.url))
        .send()
        .await
        .unwrap();
    r.bytes().await.unwrap();
    let before = peak_rss_mib(pid);
    for path in ["/v1/messages", "/v1/chat/completions"] {
        for _ in 0..3 {
            let r = client
                .post(format!("{}{path}", proxy.url))
                .body(conversation)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.headers()["content-encoding"], "gzip");
            assert_eq!(r.bytes().await.unwrap(), bomb, "{path}: passed as sent");
        }
    }
    let after = peak_rss_mib(pid);
    eprintln!("proxy peak RSS: {before} MiB before six 1 GiB bombs, {after} MiB after");
    assert!(after < before + 100, "{before} MiB -> {after} MiB");
    proxy.stop().await;
}

/// PROTOCOL.md 11.2 through the proxy: Kimi-style ids reused across turns
/// are refused by the provider when sent directly, and mapped by the proxy
/// (named in `x-toolwire-repaired`) so the same request is accepted; a
/// conversation compacted by the provider keeps everything before its
/// compaction block byte for byte while the orphan after it is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_id_rules_and_compaction_through_the_proxy() {
    let fake = FakeProvider::start().await;
    let proxy = Proxy::start(&fake.url(), "").await;
    let call = |id: &str, cmd: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": cmd}});
    let result =
        |id: &str, text: &str| json!({"type": "tool_result", "tool_use_id": id, "content": text});
    let kimi = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": [call("functions.bash:0", "make")]},
        {"role": "user", "content": [result("functions.bash:0", "error in m3")]},
        {"role": "assistant", "content": [call("functions.bash:0", "make -C m3")]},
        {"role": "user", "content": [result("functions.bash:0", "ok")]},
    ]});
    let (status, answer) = raw_request(&fake.url(), "/v1/messages", &kimi.to_string()).await;
    assert_eq!(status, 400);
    assert!(answer.contains("String should match pattern"), "{answer}");
    let header = repaired_header(&proxy.url, &kimi).await;
    assert!(
        header.contains("renamedToolUses=functions.bash%3A0>functions_bash_0,functions.bash%3A0>functions_bash_0_dup1"),
        "{header}"
    );
    let sent = fake.received().last().unwrap().clone();
    assert_eq!(sent.status, 200);
    let body = sent.json();
    assert_eq!(
        body["messages"][3]["content"][0]["id"],
        json!("functions_bash_0_dup1")
    );
    assert_eq!(
        body["messages"][4]["content"][0]["tool_use_id"],
        json!("functions_bash_0_dup1")
    );
    // Decisions follow the mapped id: a large result of the renamed call is
    // saved under the new id, and the next turn sends the same bytes.
    // (A conversation of its own: another first message.)
    let mut big = kimi.clone();
    big["messages"][0]["content"] = json!("build it, all of it");
    big["messages"][4]["content"][0]["content"] = json!("m3: warning\n".repeat(6000));
    let mut sent = Vec::new();
    for _ in 0..2 {
        let (status, answer) = raw_request(&proxy.url, "/v1/messages", &big.to_string()).await;
        assert_eq!(status, 200, "{answer}");
        sent.push(fake.received().last().unwrap().body.clone());
    }
    assert_eq!(sent[0], sent[1]);
    let text = result_texts("anthropic", &serde_json::from_slice(&sent[0]).unwrap())[1].clone();
    assert!(
        text.contains("/tool-results/functions_bash_0_dup1.txt"),
        "{text}"
    );
    // Compaction: a call before the block, its result after it.
    let compacted = json!({"model": "claude-opus-4-6", "max_tokens": 64, "messages": [
        {"role": "user", "content": "refactor the parser"},
        {"role": "assistant", "content": [call("toolu_old", "grep -rn parse src")]},
        {"role": "assistant", "content": [{"type": "compaction", "content": "Summary: 14 call sites found."}]},
        {"role": "user", "content": [result("toolu_old", "src/a.rs:1: parse()")]},
        {"role": "user", "content": "go on"},
    ]});
    let header = repaired_header(&proxy.url, &compacted).await;
    assert!(header.contains("droppedToolResults=toolu_old;"), "{header}");
    let sent = fake.received().last().unwrap().clone();
    assert_eq!(sent.status, 200);
    let end = element_end(&sent.body, "messages", 2);
    let original = serde_json::to_vec(&compacted).unwrap();
    assert_eq!(
        sent.body[..end],
        original[..end],
        "the compacted part passes byte for byte"
    );
    proxy.stop().await;
}

/// #32 item 10: with 64 descriptors and 300 idle connections held open
/// (the report: 256 and 300, and the proxy exited with "Too many open
/// files"), the proxy keeps running; a request made meanwhile waits in the
/// listen backlog and is answered once the idle connections close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_it_waits_for_connections_to_close() {
    let upstream = Recorder::start().await;
    let toml = format!(
        "durability = \"none\"\n[proxy]\nheader_timeout_seconds = 0\nidle_timeout_seconds = 0\n[proxy.upstreams]\nanthropic = \"{0}\"\nopenai = \"{0}\"\ngemini = \"{0}\"\n",
        upstream.url
    );
    let mut proxy = Proxy::start_limited(
        &toml,
        &["--listen", "127.0.0.1:0"],
        "toolwire=warn",
        Some(64),
    )
    .await;
    let addr = proxy.url.strip_prefix("http://").unwrap().to_owned();
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let url = proxy.url.clone();
    let waiting = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .body(r#"{"messages":[{"role":"user","content":"hi"}]}"#)
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    assert!(
        proxy.child.try_wait().unwrap().is_none(),
        "the proxy is still running"
    );
    drop(idle);
    let status = tokio::time::timeout(LIMIT, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    assert!(proxy.child.try_wait().unwrap().is_none());
    let log = proxy.stop().await;
    assert!(!log.contains("Too many open files"), "{log}");
}

/// Read from `stream` until the proxy closes it; what it sent.
async fn until_closed(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer))
        .await
        .expect("the proxy closed the connection")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// #32 item 10: a partial head, a partial body and a silent connection
/// (HTTP/1.1 and HTTP/2) are each cut off by their timeout (1 s here),
/// while a request whose answer takes longer than the idle timeout is
/// not: it is in progress. Each waits on the proxy's own act (a closed
/// connection), never on a sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_are_cut_off_and_slow_answers_are_not() {
    use tokio::io::AsyncWriteExt;
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let url = upstream(move |_req: hyper::Request<hyper::body::Incoming>| {
        let gate = gate.clone();
        async move {
            gate.notified().await;
            hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(b"{}")))
        }
    })
    .await;
    let toml = format!(
        "durability = \"none\"\n[proxy]\nheader_timeout_seconds = 1\nbody_timeout_seconds = 1\nidle_timeout_seconds = 1\n[proxy.upstreams]\nanthropic = \"{url}\"\nopenai = \"{url}\"\ngemini = \"{url}\"\n"
    );
    let proxy = Proxy::start_with(&toml, &["--listen", "127.0.0.1:0"], "toolwire=warn").await;
    let addr = proxy.url.strip_prefix("http://").unwrap().to_owned();

    // A request whose answer is held back by the upstream.
    let slow_url = proxy.url.clone();
    let slow = tokio::spawn(async move {
        let r = reqwest::Client::new()
            .post(format!("{slow_url}/v1/chat/completions"))
            .body(r#"{"messages":[{"role":"user","content":"hi"}]}"#)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    });

    // A partial head.
    let mut head = tokio::net::TcpStream::connect(&addr).await.unwrap();
    head.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    until_closed(&mut head).await;

    // A partial body: the proxy answers 408 in the provider's shape.
    let mut body = tokio::net::TcpStream::connect(&addr).await.unwrap();
    body.write_all(
        b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"messages\":",
    )
    .await
    .unwrap();
    let answer = until_closed(&mut body).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("bodyTimeoutSeconds"), "{answer}");

    // Silent connections, HTTP/1.1 (nothing sent) and HTTP/2 (the
    // preface and settings, then nothing).
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    until_closed(&mut silent).await;
    let mut h2 = tokio::net::TcpStream::connect(&addr).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    until_closed(&mut h2).await;

    // Idle connections were closed while the slow request waited, longer
    // than the idle timeout: it is answered all the same.
    assert!(!slow.is_finished());
    release.notify_one();
    let (status, text) = tokio::time::timeout(LIMIT, slow).await.unwrap().unwrap();
    assert_eq!((status, text.as_str()), (200, "{}"));
    proxy.stop().await;
}
