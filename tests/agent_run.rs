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
