//! The real agent CLIs through `toolwire proxy` (PROTOCOL.md 12.1): Claude
//! Code, Codex, Gemini CLI, pi and opencode, pinned in tests/agents/ and
//! installed by tests/setup.d/70-agents.sh, each run non-interactively in a
//! throwaway HOME against a scripted provider (tests/scripted_provider)
//! that has it run a fixed list of shell commands, big and small. Every
//! script runs twice, straight at the provider and through the proxy in
//! its default configuration, and the test asserts what a user needs: the
//! agent finishes with the final answer, no request is refused, every
//! saved output equals what the agent sent, every preview stays
//! byte-identical in every later request, a proxy killed mid-turn and
//! restarted costs nothing extra, and the input through toolwire, priced
//! as the providers' caches price it, costs no more than the direct run.

#[path = "common/agent_cli.rs"]
mod agent_cli;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;
mod scripted_provider;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_cli::Agent;
use scripted_provider::pricing::{self, Prices};
use scripted_provider::tap::{Sent, Tap};
use scripted_provider::{FINAL_ANSWER, ScriptedProvider, Seen, tool_results as results};
use serde_json::Value;
use tokio::process::Child;

/// How long one agent run may take.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// Through toolwire, a short run may cost at most this much of the direct
/// run (the tolerance for rounding in the agents' own bytes).
const SHORT_LIMIT: f64 = 1.005;
/// A long run must save at least a fifth.
const LONG_LIMIT: f64 = 0.80;

/// The short script: outputs of 169k and 63k chars, three of about 24k,
/// small ones between; with the final answer, 11 model requests.
fn short_script() -> Vec<String> {
    [
        "seq 1 30000",
        "echo first small step",
        "seq 1 12000",
        "echo second small step",
        "seq 100000 103428",
        "echo third small step",
        "seq 200000 203428",
        "echo fourth small step",
        "seq 300000 303428",
        "echo fifth small step",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The long script: the short one and 20 more commands, every fourth
/// about 24k chars; with the final answer, 31 model requests.
fn long_script() -> Vec<String> {
    let mut script = short_script();
    for i in 0..20u32 {
        script.push(if i % 4 == 0 {
            let from = 400_000 + i * 10_000;
            format!("seq {from} {}", from + 3428)
        } else {
            format!("echo small step {i}")
        });
    }
    script
}

/// A running proxy in its workspace, its log drained in the background.
struct Proxy {
    child: Child,
    url: String,
}

/// The workspace's toolwire.toml: the default configuration, with every
/// provider's upstream the scripted provider.
fn write_proxy_config(dir: &Path, upstream: &str) {
    std::fs::write(
        dir.join("toolwire.toml"),
        format!(
            "[proxy.upstreams]\nanthropic = \"{upstream}\"\nopenai = \"{upstream}\"\ngemini = \"{upstream}\"\n"
        ),
    )
    .unwrap();
}

/// Start the proxy in `dir`, its warnings and errors appended to `log`.
async fn start_proxy(dir: &Path, listen: &str, log: Arc<Mutex<String>>) -> Proxy {
    let (child, url, mut lines) =
        proxy_process::start(dir, &["--listen", listen], "toolwire=warn", "proxy").await;
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = log.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    Proxy { child, url }
}

#[derive(Clone, Copy)]
enum Route {
    Direct,
    Proxy,
    /// Through the proxy, killed with SIGKILL while the provider holds
    /// the main request at this step, and restarted on the same port and
    /// data directory.
    ProxyKilledAt(usize),
}

/// What one run left behind.
struct Run {
    output: Output,
    /// What the provider received.
    seen: Vec<Seen>,
    /// What the agent sent (through the proxy only).
    sent: Vec<Sent>,
    /// The proxy's workspace (its data directory is `.toolwire/`).
    workspace: Option<tempfile::TempDir>,
    /// The body of the request the proxy was killed in.
    held: Option<bytes::Bytes>,
    /// The proxy's warnings and errors.
    proxy_log: String,
}

async fn run(agent: Agent, script: Vec<String>, route: Route) -> Run {
    let provider = ScriptedProvider::start(script).await;
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let hold = match route {
        Route::ProxyKilledAt(step) => Some(provider.hold_main(step)),
        _ => None,
    };
    let log = Arc::new(Mutex::new(String::new()));
    let (workspace, proxy, tap) = match route {
        Route::Direct => (None, None, None),
        Route::Proxy | Route::ProxyKilledAt(_) => {
            let workspace = tempfile::tempdir().unwrap();
            write_proxy_config(workspace.path(), &provider.url());
            let proxy = start_proxy(workspace.path(), "127.0.0.1:0", log.clone()).await;
            let tap = Tap::start(proxy.url.clone()).await;
            (Some(workspace), Some(proxy), Some(tap))
        }
    };
    let base = tap.as_ref().map(Tap::url).unwrap_or_else(|| provider.url());
    let child = agent
        .command(&base, home.path(), cwd.path())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: could not start: {e}", agent.name()));
    let finished = tokio::spawn(tokio::time::timeout(RUN_LIMIT, child.wait_with_output()));
    let mut held = None;
    let mut proxy = proxy;
    if let (Some(hold), Some(workspace)) = (hold, &workspace)
        && let Some(mut killed) = proxy.take()
    {
        let body = tokio::time::timeout(RUN_LIMIT, hold)
            .await
            .unwrap_or_else(|_| panic!("{}: the request to hold never came", agent.name()))
            .unwrap();
        held = Some(body);
        // SIGKILL, in the middle of the turn: the provider has the
        // request and has not answered.
        killed.child.kill().await.unwrap();
        let _ = killed.child.wait().await;
        let listen = killed.url.trim_start_matches("http://").to_owned();
        proxy = Some(start_proxy(workspace.path(), &listen, log.clone()).await);
    }
    let output = finished
        .await
        .unwrap()
        .unwrap_or_else(|_| {
            let seen: Vec<String> = provider
                .seen()
                .iter()
                .map(|s| {
                    format!(
                        "{} {} main={} step={} status={}",
                        s.method, s.path, s.main, s.step, s.status
                    )
                })
                .collect();
            panic!(
                "{}: did not finish within {RUN_LIMIT:?}; the provider saw:\n{}",
                agent.name(),
                seen.join("\n")
            )
        })
        .unwrap();
    drop(proxy);
    let seen = provider.seen();
    // For looking into a run by hand: every request the provider got.
    if let Some(dir) = std::env::var_os("TOOLWIRE_AGENTS_DUMP") {
        let name = match route {
            Route::Direct => "direct",
            Route::Proxy => "proxy",
            Route::ProxyKilledAt(_) => "killed",
        };
        let dir = Path::new(&dir).join(format!("{}-{name}-{}", agent.name(), seen.len()));
        std::fs::create_dir_all(&dir).unwrap();
        for (k, s) in seen.iter().enumerate() {
            std::fs::write(dir.join(format!("{k:03}.json")), &s.body).unwrap();
        }
    }
    Run {
        output,
        seen,
        sent: tap.map(|t| t.sent()).unwrap_or_default(),
        workspace,
        held,
        proxy_log: log.lock().unwrap().clone(),
    }
}

/// The agent finished with the final answer, nothing was refused, and
/// the main conversation got every step of the script.
fn assert_finished(agent: Agent, what: &str, run: &Run, steps: usize) {
    let stdout = String::from_utf8_lossy(&run.output.stdout);
    let stderr = String::from_utf8_lossy(&run.output.stderr);
    assert!(
        run.output.status.success() && stdout.contains(FINAL_ANSWER),
        "{} {what}: exited {:?} without the final answer\nstdout:\n{stdout}\nstderr:\n{stderr}",
        agent.name(),
        run.output.status
    );
    let refused: Vec<String> = run
        .seen
        .iter()
        .filter(|s| s.method == "POST" && (400..500).contains(&s.status))
        .map(|s| format!("{} {} -> {}", s.method, s.path, s.status))
        .chain(
            run.sent
                .iter()
                .filter(|s| s.method == "POST" && (400..500).contains(&s.status))
                .map(|s| format!("(agent) {} {} -> {}", s.method, s.path, s.status)),
        )
        .collect();
    assert!(
        refused.is_empty(),
        "{} {what}: model requests refused: {refused:?}",
        agent.name()
    );

    let last = run
        .seen
        .iter()
        .filter(|s| s.main && s.api == Some(agent.api()) && !s.held)
        .map(|s| s.step)
        .max();
    assert_eq!(
        last,
        Some(steps),
        "{} {what}: the main conversation did not reach the final step",
        agent.name()
    );
}

/// Through the proxy, every request was read and budgeted: none was
/// forwarded untouched because toolwire could not read it.
fn assert_budgeted(agent: Agent, what: &str, run: &Run) {
    let failed: Vec<&str> = run
        .proxy_log
        .lines()
        .filter(|l| l.contains("budgeting failed") || l.contains("ERROR"))
        .collect();
    assert!(
        failed.is_empty(),
        "{} {what}: the proxy could not budget the agent's requests:\n{}",
        agent.name(),
        failed.join("\n")
    );
}

/// Every value a saved output could have been cut from: the result, and
/// each string and array inside it.
fn candidates(v: &Value, out: &mut Vec<Value>) {
    out.push(v.clone());
    match v {
        Value::Array(items) => items.iter().for_each(|i| candidates(i, out)),
        Value::Object(map) => map.values().for_each(|i| candidates(i, out)),
        _ => {}
    }
}

fn saved_outputs(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.parent().and_then(Path::file_name) == Some("tool-results".as_ref()) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Saved outputs equal what the agent sent; previews never change once
/// sent. Returns how many outputs toolwire saved and how many of the
/// previews are its own.
fn assert_outputs_and_previews(agent: Agent, what: &str, run: &Run) -> (usize, usize) {
    let api = agent.api();
    let mut originals = Vec::new();
    // Every version of each result the agent sent: an agent that rewrites
    // an old result itself (Gemini CLI masks old outputs in long
    // sessions) changes what toolwire previewed, and that change is the
    // agent's, not toolwire's.
    let mut versions: HashMap<String, HashSet<String>> = HashMap::new();
    for s in &run.sent {
        if let Ok(body) = serde_json::from_slice::<Value>(&s.body) {
            for (id, content) in results(api, &body) {
                versions.entry(id).or_default().insert(content.to_string());
                candidates(&content, &mut originals);
            }
        }
    }
    let rewritten: HashSet<&String> = versions
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(id, _)| id)
        .collect();
    if !rewritten.is_empty() {
        println!(
            "{} {what}: the agent itself rewrote {} old results: {rewritten:?}",
            agent.name(),
            rewritten.len()
        );
    }
    let workspace = run.workspace.as_ref().unwrap();
    let saved = saved_outputs(&workspace.path().join(".toolwire"));
    for path in &saved {
        let bytes = std::fs::read(path).unwrap();
        let value = if path.extension() == Some("json".as_ref()) {
            serde_json::from_slice(&bytes).unwrap()
        } else {
            Value::String(String::from_utf8(bytes).unwrap())
        };
        assert!(
            originals.contains(&value),
            "{} {what}: the saved output {} is not what the agent sent",
            agent.name(),
            path.display()
        );
    }
    // The first preview of each result, then the same bytes every time.
    let mut previews: HashMap<String, Value> = HashMap::new();
    for (k, s) in run.seen.iter().enumerate() {
        if !s.main || s.held {
            continue;
        }
        for (id, content) in results(api, &s.json()) {
            if rewritten.contains(&id) {
                continue;
            }
            if let Some(first) = previews.get(&id) {
                assert_eq!(
                    &content,
                    first,
                    "{} {what}: request {k} changed the preview of {id}",
                    agent.name()
                );
            } else if content.to_string().contains("<persisted-output>") {
                // The agent's own previews (Claude Code saves big
                // outputs itself) must stay put as well.
                previews.insert(id, content);
            }
        }
    }
    let ours = previews.values().filter(|p| !originals.contains(p)).count();
    (saved.len(), ours)
}

fn ratios(direct: &Run, through: &Run) -> Vec<(Prices, f64)> {
    pricing::ALL
        .iter()
        .map(|p| {
            (
                *p,
                pricing::price_run(&through.seen, *p) / pricing::price_run(&direct.seen, *p),
            )
        })
        .collect()
}

fn report(agent: Agent, what: &str, ratios: &[(Prices, f64)]) -> String {
    let parts: Vec<String> = ratios
        .iter()
        .map(|(p, r)| format!("{} {r:.3}", p.name))
        .collect();
    let line = format!(
        "{} {what}: through/direct {}",
        agent.name(),
        parts.join(", ")
    );
    println!("{line}");
    line
}

/// The short script direct, through the proxy, and through a proxy killed
/// mid-turn and restarted.
async fn short(agent: Agent) {
    let script = short_script();
    let steps = script.len();
    let (direct, through, killed) = tokio::join!(
        run(agent, script.clone(), Route::Direct),
        run(agent, script.clone(), Route::Proxy),
        run(agent, script.clone(), Route::ProxyKilledAt(4))
    );
    assert_finished(agent, "direct", &direct, steps);
    assert_finished(agent, "through toolwire", &through, steps);
    let (saved, previews) = assert_outputs_and_previews(agent, "through toolwire", &through);
    println!(
        "{}: toolwire saved {saved} outputs and sent {previews} previews of its own",
        agent.name()
    );
    let r = ratios(&direct, &through);
    let line = report(agent, "short", &r);

    assert_finished(agent, "killed and restarted", &killed, steps);
    assert_outputs_and_previews(agent, "killed and restarted", &killed);
    let held = killed.held.clone().unwrap();
    let retry = killed
        .seen
        .iter()
        .find(|s| s.main && !s.held && s.step == 4)
        .expect("the held request was sent again");
    assert!(
        retry.body == held,
        "{}: the request sent again after the restart differs from the one the proxy was killed in",
        agent.name()
    );
    let restart = ratios(&through, &killed);
    report(agent, "killed mid-turn / not killed", &restart);
    for (p, x) in &restart {
        assert!(
            *x <= 1.0 + 1e-3,
            "{}: the restart cost {x:.4}× under {} prices",
            agent.name(),
            p.name
        );
    }
    assert_budgeted(agent, "through toolwire", &through);
    assert_budgeted(agent, "killed and restarted", &killed);
    for (p, x) in &r {
        assert!(
            *x <= SHORT_LIMIT,
            "{line}: through toolwire costs more than direct under {} prices",
            p.name
        );
    }
}

/// The long script, direct and through the proxy: clearing must pay.
async fn long(agent: Agent) {
    let script = long_script();
    let steps = script.len();
    let (direct, through) = tokio::join!(
        run(agent, script.clone(), Route::Direct),
        run(agent, script.clone(), Route::Proxy)
    );
    assert_finished(agent, "direct (long)", &direct, steps);
    assert_finished(agent, "through toolwire (long)", &through, steps);
    assert_outputs_and_previews(agent, "through toolwire (long)", &through);
    let r = ratios(&direct, &through);
    let line = report(agent, "long", &r);
    assert_budgeted(agent, "through toolwire (long)", &through);
    for (p, x) in &r {
        assert!(
            *x <= LONG_LIMIT,
            "{line}: through toolwire must cost at most {LONG_LIMIT}× direct under {} prices",
            p.name
        );
    }
}

/// Each agent's two tests, `<agent>::short` and `<agent>::long`.
macro_rules! agent_tests {
    ($($module:ident => $agent:expr),* $(,)?) => {$(
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn short() {
                super::short($agent).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn long() {
                super::long($agent).await;
            }
        }
    )*};
}

agent_tests! {
    claude_code => super::Agent::ClaudeCode,
    codex => super::Agent::Codex,
    gemini_cli => super::Agent::GeminiCli,
    pi => super::Agent::Pi,
    opencode => super::Agent::Opencode,
}
