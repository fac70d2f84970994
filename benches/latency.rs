//! Null round trip over real stdio: `state/get` of a loaded session, back to
//! back (each request sent when the previous answer arrived), from a
//! vscode-jsonrpc client in node — what an editor extension pays per call.
//!
//!     ./tests/setup.sh                 # once: vscode-jsonrpc, pinned (editors/typescript)
//!     cargo bench --bench latency      # about half a minute
//!     cargo bench --bench latency -- --calls 5000 --rounds 7
//!
//! The same client, in the same run, drives:
//! - `toolwire serve`;
//! - a node echo server (vscode-jsonrpc, answers every request with its
//!   params) — the baseline of the goal (≤ 0.9×);
//! - a minimal Rust echo server on toolwire's stack: this bench binary
//!   re-run as `--echo-server` (toolwire's runtime, `transport::stdio`,
//!   `LspCodec` and writer task; it answers inline) — the floor (≤ 1.1×);
//! - the same Rust echo with tokio's blocking-pool stdio (what toolwire
//!   used before stdio went on epoll), for reference;
//! - `toolwire serve --shared` through its forwarder (≤ 1.2× node echo).
//!
//! Each round runs every target once, in a rotated order; the figure is a
//! target's median over the rounds (the machine is shared: medians of
//! interleaved rounds keep one busy moment from deciding a ratio).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_util::codec::FramedRead;
use toolwire::transport::codec::{Frame, LspCodec};
use toolwire::transport::{self, stdio};

mod support;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--echo-server") {
        let blocking = args.get(i + 1).is_some_and(|a| a == "blocking");
        echo_server(blocking);
        return;
    }
    support::begin("latency");
    let option = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let calls = option("--calls", 3000);
    let rounds = option("--rounds", 5);
    bench(calls, rounds);
}

/// The minimal Rust echo server on toolwire's stack: every request is
/// answered inline with its params; `exit` (or the end of stdin) ends it.
fn echo_server(blocking: bool) {
    let rt = toolwire::process::runtime().expect("runtime");
    rt.block_on(async move {
        let task = tokio::spawn(async move {
            let (outbox, writer) = if blocking {
                transport::spawn_writer(tokio::io::stdout())
            } else {
                transport::spawn_writer(stdio::stdout())
            };
            let reader: Box<dyn tokio::io::AsyncRead + Unpin + Send> = if blocking {
                Box::new(tokio::io::stdin())
            } else {
                Box::new(stdio::stdin())
            };
            let mut frames = FramedRead::new(reader, LspCodec::default());
            while let Some(Ok(Frame::Body(body))) = frames.next().await {
                let Ok(mut message) = serde_json::from_slice::<Value>(&body) else {
                    continue;
                };
                if message["method"] == "exit" {
                    break;
                }
                if let Some(id) = message.get_mut("id").map(Value::take) {
                    let params = message["params"].take();
                    outbox.send_value(&json!({"jsonrpc": "2.0", "id": id, "result": params}));
                }
            }
            drop(outbox);
            let _ = writer.await;
        });
        let _ = task.await;
    });
    rt.shutdown_background();
}

struct Target {
    name: &'static str,
    /// `toolwire` (initialize, then create the session) or `echo`.
    init: &'static str,
    command: Vec<String>,
}

fn bench(calls: usize, rounds: usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = root.join("editors/typescript/node_modules");
    if !modules.join("vscode-jsonrpc").is_dir() {
        eprintln!(
            "latency bench: vscode-jsonrpc is not installed in {}; run ./tests/setup.sh (or editors/install.sh)",
            modules.display()
        );
        std::process::exit(2);
    }
    if Command::new("node").arg("--version").output().is_err() {
        eprintln!("latency bench: node is required: apt-get install nodejs npm");
        std::process::exit(2);
    }
    let workspace = tempfile::Builder::new()
        .prefix("toolwire-bench-latency-")
        .tempdir()
        .expect("workspace");
    // The shared daemon keeps the session it served loaded (holding its
    // transcript's lock) for its idle period, so it gets a workspace of its
    // own; otherwise the next round's `toolwire serve` finds the lock taken.
    let shared_workspace = tempfile::Builder::new()
        .prefix("toolwire-bench-latency-shared-")
        .tempdir()
        .expect("workspace");
    let run = tempfile::Builder::new()
        .prefix("toolwire-bench-run-")
        .tempdir()
        .expect("runtime dir");
    let toolwire = env!("CARGO_BIN_EXE_toolwire").to_owned();
    let me = std::env::current_exe()
        .expect("bench path")
        .display()
        .to_string();
    let node_echo = root.join("benches/node/echo.js").display().to_string();
    let targets = [
        Target {
            name: "toolwire serve",
            init: "toolwire",
            command: vec![toolwire.clone(), "serve".into()],
        },
        Target {
            name: "node echo (vscode-jsonrpc)",
            init: "echo",
            command: vec!["node".into(), node_echo],
        },
        Target {
            name: "Rust echo, toolwire's stack",
            init: "echo",
            command: vec![me.clone(), "--echo-server".into()],
        },
        Target {
            name: "Rust echo, blocking-pool stdio",
            init: "echo",
            command: vec![me, "--echo-server".into(), "blocking".into()],
        },
        Target {
            name: "toolwire serve --shared",
            init: "toolwire",
            command: vec![
                toolwire,
                "serve".into(),
                "--shared".into(),
                "--idle-timeout".into(),
                "30".into(),
            ],
        },
    ];
    println!(
        "null round trip (state/get), vscode-jsonrpc client, {calls} calls back to back, median of {rounds} rounds"
    );
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for k in 0..targets.len() {
            let i = (k + round) % targets.len();
            let ws = if targets[i].command.iter().any(|a| a == "--shared") {
                shared_workspace.path()
            } else {
                workspace.path()
            };
            let ns = run_client(&modules, ws, run.path(), &targets[i], calls);
            samples[i].push(ns);
        }
    }
    stop_daemon(run.path());
    let median: Vec<f64> = samples
        .iter_mut()
        .map(|s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect();
    let (serve, node, rust, blocking, shared) =
        (median[0], median[1], median[2], median[3], median[4]);
    for (target, us) in targets.iter().zip(&median) {
        println!("  {:<34} {:>8.1} µs/call", target.name, us / 1000.0);
    }
    println!(
        "  serve / node echo          {:>6.2}×   (goal ≤ 0.90)",
        serve / node
    );
    println!(
        "  serve / Rust echo          {:>6.2}×   (goal ≤ 1.10)",
        serve / rust
    );
    println!(
        "  serve --shared / node echo {:>6.2}×   (goal ≤ 1.20)",
        shared / node
    );
    println!(
        "  blocking-pool / epoll stdio (Rust echo) {:>5.2}×",
        blocking / rust
    );
    let us = |ns: f64| format!("{:.1} µs", ns / 1000.0);
    let (to_node, to_rust) = (serve / node, serve / rust);
    support::record(support::Row {
        bench: "latency",
        figure: "null round trip (`state/get`), vscode-jsonrpc client, `serve`".into(),
        toolwire: us(serve),
        baseline: format!(
            "{}: node echo; {}: Rust echo on toolwire's stack",
            us(node),
            us(rust)
        ),
        ratio: format!(
            "{} node, {} Rust echo",
            support::x(to_node),
            support::x(to_rust)
        ),
        target: "≤ 0.9× node, ≤ 1.1× Rust echo".into(),
        holds: Some(to_node <= 0.9 && to_rust <= 1.1),
    });
    support::record(support::Row {
        bench: "latency",
        figure: "the same through `serve --shared`".into(),
        toolwire: us(shared),
        baseline: format!("{}: node echo", us(node)),
        ratio: support::x(shared / node),
        target: "≤ 1.2×".into(),
        holds: Some(shared / node <= 1.2),
    });
    support::record(support::Row {
        bench: "latency",
        figure: "Rust echo on tokio's blocking-pool stdio (toolwire before issue 17)".into(),
        toolwire: us(blocking),
        baseline: format!("{}: the same echo on epoll stdio", us(rust)),
        ratio: support::x(blocking / rust),
        target: "—".into(),
        holds: None,
    });
}

/// One run of the node client against `target`; nanoseconds per call.
fn run_client(modules: &Path, workspace: &Path, run: &Path, target: &Target, calls: usize) -> f64 {
    let client = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/node/client.js");
    let output = Command::new("node")
        .arg(client)
        .arg(calls.to_string())
        .arg((calls / 10).max(100).to_string())
        .arg(target.init)
        .args(&target.command)
        .current_dir(workspace)
        .env("NODE_PATH", modules)
        .env("XDG_RUNTIME_DIR", run)
        .output()
        .expect("run node");
    assert!(
        output.status.success(),
        "{}: the client failed: {}",
        target.name,
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("client report");
    report["perCallNs"].as_f64().expect("perCallNs")
}

/// Stop the shared daemon the `--shared` rounds started (its pid is in its
/// lock file) and wait until it is gone, so nothing outlives the bench.
fn stop_daemon(run: &Path) {
    let Ok(entries) = std::fs::read_dir(run.join("toolwire")) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "lock") {
            continue;
        }
        let Some(pid) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill only sends a signal.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        for _ in 0..200 {
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
