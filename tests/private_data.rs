//! The data directory is private and keeps itself out of git (PROTOCOL.md
//! 12.2): after every face has written (serve, the shared daemon, gc,
//! import, repair, proxy, mcp), every directory under it is 0700, every
//! file closed to group and others, and its `.gitignore` holds `*`, also
//! when an older version made the directory (0755 and 0644, no
//! `.gitignore`). And issue 49's done-when: in a fresh git repository,
//! after `toolwire proxy` served a conversation of the official SDK and
//! `toolwire mcp` a call, `git status --porcelain` and `find .toolwire
//! -perm /077` print nothing.

#[path = "common/agent_py.rs"]
mod agent_py;
mod common;
mod fake_provider;
mod mcp_peer;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{results, spawn_binary, spawn_shared};
use fake_provider::FakeProvider;
use mcp_peer::{Peer, front_argv};
use serde_json::json;

/// A result over the default budget, holding what a secret looks like.
fn big() -> String {
    "SECRET=abc build output line\n".repeat(4000)
}

/// Every problem with `data`'s privacy, by path.
fn open_to_others(data: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let ignore = std::fs::read_to_string(data.join(".gitignore")).unwrap_or_default();
    if !ignore.lines().any(|l| l.trim() == "*") {
        problems.push(format!(
            "{}/.gitignore holds no `*`: {ignore:?}",
            data.display()
        ));
    }
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mode = std::fs::symlink_metadata(&dir).unwrap().mode() & 0o7777;
        if mode != 0o700 {
            problems.push(format!("{} is a directory of mode {mode:o}", dir.display()));
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.path().symlink_metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.mode() & 0o077 != 0 {
                problems.push(format!(
                    "{} is a file of mode {:o}",
                    entry.path().display(),
                    meta.mode() & 0o7777
                ));
            }
        }
    }
    problems
}

fn assert_private(data: &Path, after: &str) {
    let problems = open_to_others(data);
    assert!(problems.is_empty(), "after {after}: {problems:#?}");
}

/// Make `data` look as an older version left it: directories 0755, files
/// 0644, no `.gitignore`.
fn as_an_older_version_left_it(data: &Path) {
    let _ = std::fs::remove_file(data.join(".gitignore"));
    let mut stack = vec![data.to_path_buf()];
    while let Some(dir) = stack.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = path.symlink_metadata().unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
    }
    assert!(!open_to_others(data).is_empty());
}

fn toolwire(ws: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "toolwire {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `toolwire serve`: one `budget/apply` of a large result in `session`.
async fn serve_writes(ws: &Path, session: &str) {
    let (mut c, mut child) = spawn_binary(ws);
    c.initialize(ws, json!({})).await;
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": session, "messages": [results(&[("toolu_1", &big())])]}),
        )
        .await;
    assert_eq!(r["persisted"].as_array().unwrap().len(), 1, "{r}");
    c.close().await;
    child.wait().await.unwrap();
}

/// A small stdio MCP server (no SDK) whose one tool answers with a result
/// over the budget.
fn big_mcp_server(dir: &Path) -> Vec<String> {
    let script = dir.join("big_server.py");
    std::fs::write(
        &script,
        r#"import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "big", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "env", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "SECRET=abc build output line\n" * 4000}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                          "error": {"code": -32601, "message": "no such method"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#,
    )
    .unwrap();
    vec!["python3".into(), script.display().to_string()]
}

/// `toolwire mcp`: one call whose large result the front saves.
fn mcp_writes(ws: &Path, server_dir: &Path, session: &str) {
    let mut front = Peer::start(&front_argv(session, &[], &big_mcp_server(server_dir)), ws);
    front.request(
        1,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#,
    );
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let reply = front.request(
        2,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"env","arguments":{}}}"#,
    );
    assert!(reply.contains("persisted-output"), "{reply:.300}");
    assert!(front.finish().success());
}

/// A `toolwire proxy` for `ws` forwarding to `fake`; stopped when dropped.
async fn proxy_for(ws: &Path) -> (tokio::process::Child, String) {
    let (child, url, mut lines) =
        proxy_process::start(ws, &["--listen", "127.0.0.1:0"], "toolwire=warn", "proxy").await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

fn config_for(ws: &Path, fake: &FakeProvider) {
    std::fs::write(
        ws.join("toolwire.toml"),
        format!(
            "durability = \"none\"\n[proxy.upstreams]\nanthropic = \"{0}\"\nopenai = \"{0}\"\ngemini = \"{0}\"\n",
            fake.url()
        ),
    )
    .unwrap();
}

#[tokio::test]
async fn every_face_leaves_the_data_directory_private_even_one_an_older_version_made() {
    let ws = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let ws = ws.path();
    let data = ws.join(".toolwire");
    let fake = FakeProvider::start().await;
    config_for(ws, &fake);

    // Made by this version.
    serve_writes(ws, "s1").await;
    assert_private(&data, "serve made the data directory");

    as_an_older_version_left_it(&data);
    serve_writes(ws, "s2").await;
    assert_private(&data, "serve");

    as_an_older_version_left_it(&data);
    let run = tempfile::tempdir().unwrap();
    let (mut c, mut child) = spawn_shared(ws, run.path(), 1);
    c.initialize(ws, json!({})).await;
    c.call(
        "budget/apply",
        json!({"sessionId": "s3", "messages": [results(&[("toolu_1", &big())])]}),
    )
    .await;
    c.close().await;
    child.wait().await.unwrap();
    assert_private(&data, "serve --shared (the daemon)");

    as_an_older_version_left_it(&data);
    toolwire(ws, &["gc"]);
    assert_private(&data, "gc");

    // import writes a transcript into the data directory, repair rewrites
    // it beside its `.bak`.
    as_an_older_version_left_it(&data);
    let bare = other.path().join("bare.jsonl");
    // Bare messages with a call never answered: repair has work to do.
    let lines: Vec<String> = [
        json!({"role": "user", "content": "list"}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]}),
        json!({"role": "user", "content": "never answered"}),
    ]
    .iter()
    .map(|m| format!("{m}\n"))
    .collect();
    std::fs::write(&bare, lines.concat()).unwrap();
    let imported = data.join("sessions/imported.jsonl");
    let bare = bare.display().to_string();
    let imported_arg = imported.display().to_string();
    toolwire(
        ws,
        &["import", "--from", "messages", &bare, "-o", &imported_arg],
    );
    assert!(imported.is_file());
    assert_private(&data, "import");

    as_an_older_version_left_it(&data);
    let out = toolwire(ws, &["repair", &imported_arg]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("dropped tool_use toolu_1"),
        "{out:?}"
    );
    assert!(data.join("sessions/imported.jsonl.bak").is_file());
    assert_private(&data, "repair");

    as_an_older_version_left_it(&data);
    let (mut proxy, url) = proxy_for(ws).await;
    let response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{url}/v1/messages"))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", "2023-06-01")
        .header("x-toolwire-session", "p1")
        .json(&json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 16,
            "messages": [
                {"role": "user", "content": "build it"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_b", "name": "bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": big()}]},
            ],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.bytes().await;
    proxy.kill().await.unwrap();
    assert!(data.join("sessions/p1/tool-results").is_dir());
    assert_private(&data, "proxy");

    as_an_older_version_left_it(&data);
    mcp_writes(ws, other.path(), "m1");
    assert_private(&data, "mcp");
}

/// Issue 49's done-when, in a fresh git repository.
#[tokio::test]
async fn a_repository_stays_clean_and_the_data_directory_closed_after_proxy_and_mcp() {
    let ws = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let ws = ws.path();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=test",
                "-c",
                "user.email=test@toolwire.invalid",
            ])
            .args(args)
            .current_dir(ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let fake = FakeProvider::start().await;
    git(&["init", "-q"]);
    config_for(ws, &fake);
    git(&["add", "toolwire.toml"]);
    git(&["commit", "-q", "-m", "toolwire's configuration"]);

    let (mut proxy, url) = proxy_for(ws).await;
    let out = agent_py::run(&["anthropic", &url, "loop", "--turns", "3"]).await;
    assert_eq!(out["turns"], 3);
    proxy.kill().await.unwrap();
    mcp_writes(ws, other.path(), "m1");

    let saved: Vec<PathBuf> = std::fs::read_dir(ws.join(".toolwire/sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(saved.len() >= 2, "the proxy and the front wrote: {saved:?}");
    assert_eq!(git(&["status", "--porcelain", "--untracked-files=all"]), "");
    let find = Command::new("find")
        .args([".toolwire", "-perm", "/077"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(find.status.success());
    assert_eq!(String::from_utf8_lossy(&find.stdout), "");
}
