//! `toolwire serve --shared`: one daemon per workspace, shared by every
//! client, started on demand, private to its user, gone when idle.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use toolwire::daemon;

/// A workspace and an isolated runtime directory; kills the daemon when
/// dropped, whatever happened.
struct Rig {
    workspace: tempfile::TempDir,
    run: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            workspace: tempfile::tempdir().unwrap(),
            run: tempfile::tempdir().unwrap(),
        }
    }
    fn paths(&self) -> daemon::Paths {
        daemon::paths_in(self.run.path().join("toolwire"), self.workspace.path()).unwrap()
    }
    fn ws(&self) -> &Path {
        self.workspace.path()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(pid) = daemon::daemon_pid(&self.paths()) {
            // SAFETY: signalling a pid we read from our own daemon's lock file.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

fn alive(pid: u32) -> bool {
    // Zombies count as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn clients_of_one_workspace_share_one_server() {
    let rig = Rig::new();
    let (mut a, mut child_a) = spawn_shared(rig.ws(), rig.run.path(), 30);
    let (mut b, mut child_b) = spawn_shared(rig.ws(), rig.run.path(), 30);
    a.initialize(rig.ws(), json!({})).await;
    b.initialize(rig.ws(), json!({})).await;
    a.call(
        "pair/append",
        json!({"sessionId": "s", "message": assistant_calls(&["t1"])}),
    )
    .await;
    // The same guard, the same lock: B answers the call A made.
    assert_eq!(
        b.call("state/get", json!({"sessionId": "s"})).await["pending"],
        json!(["t1"])
    );
    let r = b
        .call(
            "pair/append",
            json!({"sessionId": "s", "message": results(&[("t1", "done")])}),
        )
        .await;
    assert_eq!(r["status"], json!("committed"));
    assert_eq!(
        a.call("state/get", json!({"sessionId": "s"})).await["pending"],
        json!([])
    );
    assert_eq!(
        transcript_messages(&rig.ws().join(".toolwire/sessions/s.jsonl")).len(),
        2
    );

    let paths = rig.paths();
    let pid = daemon::daemon_pid(&paths).expect("the daemon records its pid");
    assert!(alive(pid));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&paths.socket).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&paths.dir).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
    // The daemon's stderr is its log file, private like the socket.
    let log = std::fs::symlink_metadata(&paths.log).expect("the daemon's log file");
    assert!(log.is_file());
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&log.permissions()) & 0o777,
        0o600
    );

    // `exit` ends one client's connection, not the daemon.
    a.call("shutdown", Value::Null).await;
    a.notify("exit", Value::Null).await;
    assert!(child_a.wait().await.unwrap().success());
    assert!(alive(pid));
    b.call("state/get", json!({"sessionId": "s"})).await;
    b.close().await;
    assert!(child_b.wait().await.unwrap().success());
}

#[tokio::test]
async fn racing_starters_yield_one_daemon() {
    let rig = Rig::new();
    let mut clients: Vec<_> = (0..5)
        .map(|_| spawn_shared(rig.ws(), rig.run.path(), 30))
        .collect();
    for (i, (c, _)) in clients.iter_mut().enumerate() {
        c.initialize(rig.ws(), json!({"durability": "none"})).await;
        // Two daemons would fight over this transcript's lock.
        c.call(
            "pair/append",
            json!({"sessionId": "race", "message": user_text(&format!("from {i}"))}),
        )
        .await;
    }
    assert_eq!(
        transcript_messages(&rig.ws().join(".toolwire/sessions/race.jsonl")).len(),
        5
    );
    let daemons = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|cmd| {
            let cmd = String::from_utf8_lossy(cmd);
            cmd.contains("daemon") && cmd.contains(&*rig.ws().to_string_lossy())
        })
        .count();
    assert_eq!(daemons, 1);
}

#[tokio::test]
async fn a_client_that_goes_away_flushes_only_its_own_pairs() {
    let rig = Rig::new();
    let (mut a, mut child_a) = spawn_shared(rig.ws(), rig.run.path(), 30);
    let (mut b, _child_b) = spawn_shared(rig.ws(), rig.run.path(), 30);
    a.initialize(rig.ws(), json!({"abortMode": "synthetic"}))
        .await;
    b.initialize(rig.ws(), json!({})).await;
    a.call(
        "pair/append",
        json!({"sessionId": "sa", "message": assistant_calls(&["a1"])}),
    )
    .await;
    b.call(
        "pair/append",
        json!({"sessionId": "sb", "message": assistant_calls(&["b1"])}),
    )
    .await;
    a.close().await; // the client's end of the pipe: EOF
    child_a.wait().await.unwrap();
    let sa = rig.ws().join(".toolwire/sessions/sa.jsonl");
    eventually("A's pair flushed", || transcript_messages(&sa).len() == 2).await;
    assert_paired(&transcript_messages(&sa));
    assert_eq!(
        b.call("state/get", json!({"sessionId": "sb"})).await["pending"],
        json!(["b1"])
    );
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_an_idle_daemon_leaves() {
    let rig = Rig::new();
    let paths = rig.paths();
    // A socket file with nobody listening, as a crashed daemon leaves it.
    drop(std::os::unix::net::UnixListener::bind(&paths.socket).unwrap());
    assert!(paths.socket.exists());
    let (mut c, mut child) = spawn_shared(rig.ws(), rig.run.path(), 1);
    c.initialize(rig.ws(), json!({})).await;
    let pid = daemon::daemon_pid(&paths).unwrap();
    c.close().await;
    child.wait().await.unwrap();
    eventually("the idle daemon exits", || !alive(pid)).await;
    assert!(!paths.socket.exists(), "the socket goes with its daemon");
}

#[tokio::test]
async fn the_daemon_checks_versions_and_the_directory_must_be_private() {
    let rig = Rig::new();
    let (mut c, _child) = spawn_shared(rig.ws(), rig.run.path(), 30);
    c.initialize(rig.ws(), json!({})).await;
    let mut raw = tokio::net::UnixStream::connect(rig.paths().socket)
        .await
        .unwrap();
    raw.write_all(b"toolwire/0.0.0-other\n").await.unwrap();
    let mut answer = String::new();
    tokio::io::BufReader::new(&mut raw)
        .read_line(&mut answer)
        .await
        .unwrap();
    assert!(answer.starts_with("error"), "{answer}");

    let open = tempfile::tempdir().unwrap();
    let dir = open.path().join("toolwire");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["serve", "--shared"])
        .current_dir(rig.ws())
        .env("XDG_RUNTIME_DIR", open.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("0700"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The client closing its stdin right after pipelining requests still gets
/// every reply: the forwarder drains the daemon's answers before exiting.
#[tokio::test]
async fn the_forwarder_delivers_every_reply_after_stdin_ends() {
    let rig = Rig::new();
    let (mut c, mut child) = spawn_shared(rig.ws(), rig.run.path(), 30);
    c.initialize(rig.ws(), json!({"durability": "none"})).await;
    let big = "r".repeat(80_000);
    let mut ids = Vec::new();
    for i in 0..50 {
        let msg = results(&[(&format!("toolu_{i}"), big.as_str())]);
        ids.push(
            c.start("budget/apply", json!({"sessionId": "s", "messages": [msg]}))
                .await,
        );
    }
    c.close_input().await;
    let mut answered = std::collections::HashSet::new();
    while let Some(msg) = c.read().await {
        assert!(msg.get("result").is_some(), "{msg}");
        answered.insert(msg["id"].as_i64().unwrap());
    }
    assert_eq!(answered.len(), 50);
    assert!(ids.iter().all(|id| answered.contains(id)));
    assert!(child.wait().await.unwrap().success());
}

/// A directory where the socket or the lock file goes is reported at once,
/// naming it, instead of a refused connection after seconds of retrying.
#[tokio::test]
async fn a_directory_in_the_way_is_named_at_once() {
    for which in ["socket", "lock"] {
        let rig = Rig::new();
        let paths = rig.paths();
        let in_the_way = if which == "socket" {
            &paths.socket
        } else {
            &paths.lock
        };
        std::fs::create_dir(in_the_way).unwrap();
        let started = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .args(["serve", "--shared"])
            .current_dir(rig.ws())
            .env("XDG_RUNTIME_DIR", rig.run.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&in_the_way.display().to_string()) && stderr.contains("directory"),
            "{which}: {stderr}"
        );
        // Not the 10 s of connection attempts it used to be: the error is
        // found before any daemon is started.
        assert!(started.elapsed() < Duration::from_secs(5), "{which}");
        assert!(daemon::daemon_pid(&paths).is_none());
    }
    // A runtime directory that cannot be made is named too.
    let rig = Rig::new();
    let blocker = rig.run.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["serve", "--shared"])
        .current_dir(rig.ws())
        .env("XDG_RUNTIME_DIR", &blocker)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&blocker.join("toolwire").display().to_string()),
        "{stderr}"
    );
}

/// The daemon logs to a capped file in its runtime directory, honouring
/// `RUST_LOG`, and `serve --shared --help` says where.
#[tokio::test]
async fn the_daemon_logs_to_a_file_beside_its_socket() {
    let rig = Rig::new();
    let (mut c, _child) = spawn_shared(rig.ws(), rig.run.path(), 30);
    c.initialize(rig.ws(), json!({})).await;
    let big = "x".repeat(80_000);
    c.call(
        "budget/apply",
        json!({"sessionId": "s", "messages": [results(&[("toolu_logged", big.as_str())])]}),
    )
    .await;
    let log = rig.paths().log;
    eventually("the log names the artifact", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("toolu_logged"))
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("daemon listening"), "{text}");

    let help = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("$XDG_RUNTIME_DIR/toolwire")
            && help.contains("<hash>-<version>.{sock,lock,log}"),
        "{help}"
    );
}

/// What a process's descriptors point at (`pipe:[…]`, `socket:[…]`, paths).
fn fd_targets(pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A forwarder whose stdin and stdout are pipes hands them to the daemon,
/// which answers the client on them directly; the forwarder stays until
/// the daemon is done with them (here: `exit` while stdin is still open),
/// then exits successfully, and the daemon keeps no copy.
#[tokio::test]
async fn the_forwarder_hands_its_pipes_to_the_daemon_and_leaves_when_it_is_done() {
    let rig = Rig::new();
    let (mut c, mut child) = spawn_shared(rig.ws(), rig.run.path(), 30);
    c.initialize(rig.ws(), json!({})).await;
    let forwarder = child.id().unwrap();
    let daemon = daemon::daemon_pid(&rig.paths()).unwrap();
    let link = |fd: u32| std::fs::read_link(format!("/proc/{forwarder}/fd/{fd}")).unwrap();
    let (input, output) = (link(0), link(1));
    assert!(input.to_string_lossy().starts_with("pipe:"), "{input:?}");
    let held = fd_targets(daemon);
    assert!(
        held.contains(&input) && held.contains(&output),
        "the daemon holds {held:?}, not {input:?} and {output:?}"
    );
    c.call(
        "pair/append",
        json!({"sessionId": "s", "message": assistant_calls(&["t1"])}),
    )
    .await;
    assert_eq!(
        c.call("state/get", json!({"sessionId": "s"})).await["pending"],
        json!(["t1"])
    );
    c.call("shutdown", Value::Null).await;
    c.notify("exit", Value::Null).await;
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the forwarder exits once the daemon is done")
        .unwrap();
    assert!(status.success(), "{status}");
    let held = fd_targets(daemon);
    assert!(
        !held.contains(&input) && !held.contains(&output),
        "the daemon still holds the client's pipes: {held:?}"
    );
    // The daemon still serves others.
    let (mut d, _child) = spawn_shared(rig.ws(), rig.run.path(), 30);
    d.initialize(rig.ws(), json!({})).await;
    assert_eq!(
        d.call("state/get", json!({"sessionId": "s"})).await["pending"],
        json!([]),
        "the shutdown closed the pair its client left pending"
    );
}

/// Stdio the daemon could not serve on epoll (here a regular file as
/// stdin) is not handed over: the forwarder carries the bytes, in order,
/// and every reply reaches the client before it exits.
#[tokio::test]
async fn a_forwarder_with_a_file_as_stdin_forwards_bytes() {
    let rig = Rig::new();
    let frame = |v: Value| {
        let body = v.to_string();
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    };
    let root = url::Url::from_file_path(std::fs::canonicalize(rig.ws()).unwrap()).unwrap();
    let mut input = frame(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"rootUri": root.as_str(), "capabilities": {}}}));
    for id in 2..52 {
        input += &frame(json!({"jsonrpc": "2.0", "id": id, "method": "state/get",
            "params": {"sessionId": format!("s{id}")}}));
    }
    input += &frame(json!({"jsonrpc": "2.0", "id": 52, "method": "shutdown"}));
    input += &frame(json!({"jsonrpc": "2.0", "method": "exit"}));
    let file = rig.run.path().join("requests");
    std::fs::write(&file, input).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["serve", "--shared", "--idle-timeout", "30"])
        .current_dir(rig.ws())
        .env("XDG_RUNTIME_DIR", rig.run.path())
        .stdin(std::fs::File::open(&file).unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("the forwarder exits after `exit`")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let ids: Vec<i64> = text
        .split("Content-Length: ")
        .skip(1)
        .map(|f| {
            let body = &f[f.find("\r\n\r\n").unwrap() + 4..];
            let v: Value = serde_json::from_str(body).unwrap();
            assert!(v.get("result").is_some(), "{v}");
            v["id"].as_i64().unwrap()
        })
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (1..=52).collect::<Vec<_>>());
}

/// SIGTERM or SIGINT stops the daemon as the idle timeout does: socket
/// removed, sessions closed, the commit log checkpointed and removed
/// (before, either signal killed it and left `<dataDir>/wal/*.wal`).
#[tokio::test]
async fn a_daemon_stopped_by_sigterm_or_sigint_removes_its_commit_log() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let rig = Rig::new();
        let paths = rig.paths();
        let (mut c, mut child) = spawn_shared(rig.ws(), rig.run.path(), 30);
        c.initialize(rig.ws(), json!({})).await;
        let r = c
            .call(
                "pair/append",
                json!({"sessionId": "s", "message": user_text("hi")}),
            )
            .await;
        assert_eq!(r["status"], json!("committed"));
        let data_dir = rig.ws().join(".toolwire");
        let logs = || common::commit_logs(&data_dir);
        assert_eq!(logs().len(), 1, "signal {signal}");
        let pid = daemon::daemon_pid(&paths).unwrap();
        // SAFETY: signalling a pid we read from our own daemon's lock file.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
        eventually("the signalled daemon exits", || !alive(pid)).await;
        assert_eq!(logs(), Vec::<String>::new(), "signal {signal}");
        assert!(!paths.socket.exists(), "the socket goes with its daemon");
        // Its client sees the connection end.
        let _ = child.wait().await;
    }
}

/// Issue 32, item 4. A client that connects at the moment the daemon has
/// decided to exit for idleness is served, not reset: pinned by the
/// daemon's test hook, which holds it at that decision until the client is
/// in the socket's backlog. The daemon then stays for it, and leaves once
/// idle again.
#[tokio::test]
async fn a_client_connecting_as_the_daemon_goes_idle_is_served() {
    let rig = Rig::new();
    let paths = rig.paths();
    let hook = rig.run.path().join("idle-exit");
    let reached = rig.run.path().join("idle-exit.reached");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["serve", "--shared", "--idle-timeout", "1"])
        .current_dir(rig.ws())
        .env("XDG_RUNTIME_DIR", rig.run.path())
        .env("TOOLWIRE_TEST_IDLE_EXIT_HOOK", &hook)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut c = Client::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    c.initialize(rig.ws(), json!({})).await;
    let pid = daemon::daemon_pid(&paths).unwrap();
    c.close().await;
    child.wait().await.unwrap();
    eventually("the daemon decides to exit", || reached.exists()).await;

    // Connected while the daemon is exiting: in the listener's backlog.
    let stream = tokio::net::UnixStream::connect(&paths.socket)
        .await
        .unwrap();
    std::fs::write(&hook, b"").unwrap();
    let (read, mut write) = stream.into_split();
    let mut read = tokio::io::BufReader::new(read);
    write
        .write_all(format!("toolwire/{}\n", env!("CARGO_PKG_VERSION")).as_bytes())
        .await
        .unwrap();
    let mut answer = String::new();
    read.read_line(&mut answer).await.unwrap();
    assert_eq!(answer, "ok\n", "the connecting client was dropped");
    let mut late = Client::new(read, write);
    let init = late.initialize(rig.ws(), json!({})).await;
    assert_eq!(init["serverInfo"]["name"], "toolwire", "{init}");
    assert_eq!(
        daemon::daemon_pid(&paths),
        Some(pid),
        "served by the same daemon"
    );
    late.close().await;
    eventually("the daemon exits once idle again", || !alive(pid)).await;
    assert!(!paths.socket.exists());
}
