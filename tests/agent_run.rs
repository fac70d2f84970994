//! `toolwire run -- <agent>`: the real binary starting (or finding) the
//! workspace's proxy and an agent pointed at it; the agents here are small
//! Python scripts that call the base URL they were given, against the fake
//! provider of tests/proxy.rs.

mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use fake_provider::FakeProvider;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

/// An agent on the OpenAI SDK's conventions: it reads OPENAI_BASE_URL and
/// posts one Responses request with a 200,000-character tool result.
const AGENT: &str = r#"
import json, os, sys, urllib.request
base = os.environ["OPENAI_BASE_URL"]
big = "".join(f"line {i}: something happened\n" for i in range(8000))
body = {"model": "gpt-test", "input": [
    {"role": "user", "content": "look at big.log"},
    {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": big}]}
req = urllib.request.Request(base + "/responses", data=json.dumps(body).encode(),
    headers={"content-type": "application/json", "authorization": "Bearer sk-test"})
with urllib.request.urlopen(req) as answer:
    print("budget:", answer.headers["x-toolwire-budget"])
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"#;

fn workspace(upstream: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolwire.toml"),
        format!(
            "durability = \"none\"\n[proxy.upstreams]\nanthropic = \"{upstream}\"\nopenai = \"{upstream}\"\ngemini = \"{upstream}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("agent.py"), AGENT).unwrap();
    dir
}

async fn toolwire_run(dir: &Path, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
    command
        .arg("run")
        .args(args)
        .current_dir(dir)
        .env("NO_PROXY", "*")
        .env_remove("OPENAI_BASE_URL")
        .kill_on_drop(true);
    tokio::time::timeout(LIMIT, command.output())
        .await
        .expect("toolwire run finished in time")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_run_through_its_own_proxy_is_budgeted_and_its_status_comes_back() {
    let fake = FakeProvider::start().await;
    let dir = workspace(&fake.url());
    let out = toolwire_run(dir.path(), &["--", "python3", "agent.py", "3"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("budget: applied; persisted=1"),
        "{stdout}\n{stderr}"
    );
    let received = fake.received();
    assert_eq!(received.len(), 1);
    let body: Value = received[0].json();
    let output = body["input"][2]["output"].as_str().unwrap();
    assert!(output.starts_with("<persisted-output>"), "{output}");
    // The one line of what toolwire saved.
    let line = stderr
        .lines()
        .find(|l| l.starts_with("toolwire: "))
        .unwrap_or_default();
    assert!(line.contains("1 requests in 1 session(s)"), "{stderr}");
    assert!(line.contains("1 results saved to disk"), "{stderr}");
    // Its own proxy is gone, and named nowhere.
    assert!(!dir.path().join(".toolwire/proxy.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_proxy_of_the_workspace_is_used() {
    let fake = FakeProvider::start().await;
    let dir = workspace(&fake.url());
    let (mut proxy, url, lines) = proxy_process::start(
        dir.path(),
        &["--listen", "127.0.0.1:0"],
        "toolwire=warn",
        "proxy",
    )
    .await;
    let _log = proxy_process::keep_log(lines);
    let out = toolwire_run(dir.path(), &["--print-env", "--", "claude", "-p", "hi"]).await;
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains(&format!("ANTHROPIC_BASE_URL={url}\n")),
        "{printed}"
    );
    let out = toolwire_run(dir.path(), &["--", "python3", "agent.py"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("through {url}")), "{stderr}");
    assert_eq!(proxy_process::stats(dir.path())[0]["requests"], 1);
    // SIGTERM: the proxy stops and withdraws its address.
    let pid = proxy.id().unwrap() as libc::pid_t;
    // SAFETY: a signal to the test's own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let _ = tokio::time::timeout(LIMIT, proxy.wait()).await.unwrap();
    assert!(!dir.path().join(".toolwire/proxy.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_reaches_the_agent_and_its_exit_status_comes_back() {
    let fake = FakeProvider::start().await;
    let dir = workspace(&fake.url());
    let script = "import pathlib, signal, sys, time\n\
                  signal.signal(signal.SIGINT, lambda *a: sys.exit(42))\n\
                  pathlib.Path('ready').touch()\n\
                  time.sleep(100)\n";
    std::fs::write(dir.path().join("wait.py"), script).unwrap();
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["run", "--", "python3", "wait.py"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(LIMIT, async {
        while !dir.path().join("ready").exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the agent started");
    let pid = run.id().unwrap() as libc::pid_t;
    // SAFETY: a signal to the test's own child.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = tokio::time::timeout(LIMIT, run.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(42), "the agent's exit status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_env_shows_how_each_agent_is_pointed() {
    let dir = workspace("http://127.0.0.1:9");
    let show = |agent: &'static [&'static str]| {
        let dir = dir.path().to_owned();
        async move {
            let mut args = vec!["--print-env", "--"];
            args.extend_from_slice(agent);
            let out = toolwire_run(&dir, &args).await;
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let url = "http://127.0.0.1:PORT";
    let claude = show(&["claude", "-p", "hi"]).await;
    assert!(
        claude.contains(&format!("ANTHROPIC_BASE_URL={url}\n")),
        "{claude}"
    );
    assert!(claude.contains("# command: claude -p hi\n"), "{claude}");
    let codex = show(&["codex", "exec", "hi"]).await;
    assert!(
        codex.contains(&format!(
            "# command: codex -c openai_base_url={url}/v1 exec hi\n"
        )),
        "{codex}"
    );
    assert!(!codex.contains("BASE_URL="), "{codex}");
    let gemini = show(&["gemini", "-p", "hi"]).await;
    assert!(
        gemini.contains(&format!("GOOGLE_GEMINI_BASE_URL={url}\n")),
        "{gemini}"
    );
    let opencode = show(&["opencode", "run", "hi"]).await;
    let line = opencode
        .lines()
        .find_map(|l| l.strip_prefix("OPENCODE_CONFIG_CONTENT="))
        .unwrap();
    let config: Value = serde_json::from_str(line.trim_matches('\'')).unwrap();
    assert_eq!(
        config["provider"]["anthropic"]["options"]["baseURL"],
        format!("{url}/v1")
    );
    assert_eq!(
        config["provider"]["openai"]["options"]["baseURL"],
        format!("{url}/v1")
    );
    assert_eq!(
        config["provider"]["google"]["options"]["baseURL"],
        format!("{url}/v1beta")
    );
    let pi = show(&["pi", "-p", "hi"]).await;
    assert!(pi.contains("# command: pi -e "), "{pi}");
    assert!(
        pi.contains(&format!(
            "registerProvider(\"anthropic\", {{ baseUrl: \"{url}\" }})"
        )),
        "{pi}"
    );
    let other = show(&["./my-agent"]).await;
    for line in [
        format!("OPENAI_BASE_URL={url}/v1\n"),
        format!("ANTHROPIC_BASE_URL={url}\n"),
        format!("GOOGLE_GEMINI_BASE_URL={url}\n"),
    ] {
        assert!(other.contains(&line), "{other}");
    }
}

/// A provider that answers every conversation with the text "all done",
/// in Anthropic's or Gemini's shape, streamed when asked (what Claude Code
/// and Gemini CLI need to finish a one-prompt session), recording the
/// paths it was asked for.
async fn text_provider() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let paths = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = paths.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let path = req.uri().path().to_owned();
                        let query = req.uri().query().unwrap_or("").to_owned();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        seen.lock().unwrap().push(path.clone());
                        if path.contains("enerateContent") {
                            seen.lock().unwrap().push(body.to_string());
                        }
                        let (kind, text) = text_answer(&path, &query, &body);
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("content-type", kind)
                                .body(http_body_util::Full::new(bytes::Bytes::from(text)))
                                .unwrap(),
                        )
                    }
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, paths)
}

fn text_answer(path: &str, query: &str, body: &Value) -> (&'static str, String) {
    let sse = |events: Vec<(Option<&str>, Value)>| {
        let mut text = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                text.push_str(&format!("event: {name}\n"));
            }
            text.push_str(&format!("data: {data}\n\n"));
        }
        ("text/event-stream", text)
    };
    let usage = serde_json::json!({"input_tokens": 50, "output_tokens": 3,
        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0});
    if path.ends_with("/v1/messages") {
        let model = body["model"].as_str().unwrap_or("claude").to_owned();
        let message = serde_json::json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage});
        if body["stream"] != true {
            let mut whole = message;
            whole["content"] = serde_json::json!([{"type": "text", "text": "all done"}]);
            whole["stop_reason"] = "end_turn".into();
            return ("application/json", whole.to_string());
        }
        return sse(vec![
            (
                Some("message_start"),
                serde_json::json!({"type": "message_start", "message": message}),
            ),
            (
                Some("content_block_start"),
                serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                Some("content_block_delta"),
                serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "all done"}}),
            ),
            (
                Some("content_block_stop"),
                serde_json::json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                Some("message_delta"),
                serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 3}}),
            ),
            (
                Some("message_stop"),
                serde_json::json!({"type": "message_stop"}),
            ),
        ]);
    }
    if path.contains(":generateContent") || path.contains(":streamGenerateContent") {
        let answer = serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "all done"}]},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 3, "totalTokenCount": 53}});
        if path.contains(":stream") && query.contains("alt=sse") {
            return sse(vec![(None, answer)]);
        }
        if path.contains(":stream") {
            return ("application/json", serde_json::json!([answer]).to_string());
        }
        return ("application/json", answer.to_string());
    }
    if path.contains(":countTokens") {
        return (
            "application/json",
            serde_json::json!({"totalTokens": 50}).to_string(),
        );
    }
    ("application/json", serde_json::json!({"type": "error", "error": {"type": "not_found_error", "message": "not here"}}).to_string())
}

/// The agent CLIs of tests/agents (installed by tests/setup.sh), each run
/// by `toolwire run` in a workspace whose proxy goes to [`text_provider`].
async fn real_agent(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // opencode has a folder of its own (tests/setup.d/70-agents.sh says why).
    let folder = if name == "opencode" {
        "tests/agents/opencode"
    } else {
        "tests/agents"
    };
    let agent = root.join(folder).join("node_modules/.bin").join(name);
    assert!(
        agent.exists(),
        "{name} is not installed at {}: run ./tests/setup.sh (tests/setup.d/70-agents.sh)",
        agent.display()
    );
    let (url, paths) = text_provider().await;
    let dir = workspace(&url);
    // A workspace toolwire has served before: its data directory exists.
    std::fs::create_dir_all(dir.path().join(".toolwire/sessions/px-earlier")).unwrap();
    std::fs::write(
        dir.path().join(".geminiignore"),
        ".toolwire/\ntoolwire.toml\n",
    )
    .unwrap();
    std::fs::write(
        dir.path()
            .join(".toolwire/sessions/px-earlier/proxy-usage.jsonl"),
        "",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    // Gemini CLI takes GOOGLE_GEMINI_BASE_URL with an API key only when
    // its settings select that auth (else it reads the variable as a
    // "gateway" auth it then refuses in -p mode).
    std::fs::create_dir_all(home.path().join(".gemini")).unwrap();
    std::fs::write(
        home.path().join(".gemini/settings.json"),
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    )
    .unwrap();
    // The agents keep scratch files under $TMPDIR (Claude Code's
    // claude-<uid>, pi's jiti cache, opencode's and its runtime's): in the
    // throwaway HOME, so nothing is left in the suite's TMPDIR.
    let scratch = home.path().join("tmp");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
    command
        .args(["run", "--"])
        .arg(&agent)
        .args(args)
        .current_dir(dir.path())
        .env("HOME", home.path())
        .env("TMPDIR", &scratch)
        .env("NO_PROXY", "*")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(LIMIT, command.output())
        .await
        .expect("the agent finished in time")
        .unwrap();
    let paths = paths.lock().unwrap().clone();
    (out, paths)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolwire_run_claude_p_goes_through_the_proxy() {
    let (out, paths) = real_agent(
        "claude",
        &["-p", "say hi"],
        &[
            ("ANTHROPIC_API_KEY", "sk-ant-test"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}\n{paths:?}");
    assert!(stdout.contains("all done"), "{stdout}\n{stderr}");
    assert!(paths.iter().any(|p| p == "/v1/messages"), "{paths:?}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("toolwire: ") && l.contains("requests in")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolwire_run_gemini_p_goes_through_the_proxy() {
    let (out, paths) = real_agent(
        "gemini",
        // A model named: Gemini 3 models are routed by a classifier call
        // first, which wants JSON this provider does not write.
        &["-m", "gemini-2.5-flash", "-p", "say hi"],
        &[
            ("GEMINI_API_KEY", "test-key"),
            ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}\n{paths:?}");
    assert!(stdout.contains("all done"), "{stdout}\n{stderr}");
    assert!(
        paths
            .iter()
            .any(|p| p.contains("GenerateContent") || p.contains("generateContent")),
        "{paths:?}"
    );
    // Its first message lists the workspace: toolwire's files stay out
    // through the workspace's .geminiignore (docs/proxy.md).
    let first = paths.iter().find(|p| p.contains("Showing up to")).unwrap();
    assert!(first.contains("agent.py"), "{first}");
    // (Gemini CLI still names an ignored directory, as `.toolwire/...`.)
    assert!(
        !first.contains("toolwire.toml")
            && !first.contains("sessions")
            && !first.contains("run-proxy.log"),
        "{first}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("toolwire: ") && l.contains("requests in")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolwire_run_pi_p_goes_through_the_proxy() {
    let (out, paths) = real_agent(
        "pi",
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
            "--no-session",
            "-p",
            "say hi",
        ],
        &[("ANTHROPIC_API_KEY", "sk-ant-test"), ("PI_OFFLINE", "1")],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}\n{paths:?}");
    assert!(stdout.contains("all done"), "{stdout}\n{stderr}");
    assert!(paths.iter().any(|p| p == "/v1/messages"), "{paths:?}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("toolwire: ") && l.contains("requests in")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolwire_run_opencode_run_goes_through_the_proxy() {
    let (out, paths) = real_agent(
        "opencode",
        &[
            "run",
            "--pure",
            "-m",
            "anthropic/claude-sonnet-4-5",
            "say hi",
        ],
        &[
            ("ANTHROPIC_API_KEY", "sk-ant-test"),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
            ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
            ("OPENCODE_DISABLE_SHARE", "1"),
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}\n{paths:?}");
    assert!(stdout.contains("all done"), "{stdout}\n{stderr}");
    assert!(paths.iter().any(|p| p == "/v1/messages"), "{paths:?}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("toolwire: ") && l.contains("requests in")),
        "{stderr}"
    );
}
