//! The release binary over real pipes: what only a process can show.

mod common;

use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn serves_over_pipes_big_results_pipelining_and_bad_frames() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut child) = spawn_binary(dir.path());
    // No rootUri: the working directory is the workspace.
    c.call("initialize", json!({"processId": null})).await;

    c.send_raw(b"Content-Length: 3\r\n\r\n{x}").await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32700));
    c.send_raw(b"Nonsense\r\n\r\n").await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32700));

    // A 40 MB tool result.
    let huge: String = (0..800_000).map(|i| format!("{i:>49}\n")).collect();
    assert_eq!(huge.len(), 40_000_000);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "big", "messages": [results(&[("toolu_huge", &huge)])]}),
        )
        .await;
    let path = r["persisted"][0]["path"].as_str().unwrap().to_owned();
    assert!(
        path.starts_with(
            &dir.path()
                .join(".toolwire/sessions/big/tool-results")
                .display()
                .to_string()
        )
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 40_000_000);
    let text = r["messages"][0]["content"][0]["content"].as_str().unwrap();
    assert!(
        text.starts_with("<persisted-output>\nOutput too large (38.1MB)."),
        "{}",
        &text[..80]
    );
    assert!(text.len() < 2200);

    // Pipelined: all sent before any answer is read.
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(
            c.start(
                "pair/append",
                json!({"sessionId": "pipe", "message": user_text(&format!("m{i}"))}),
            )
            .await,
        );
        ids.push(c.start("state/get", json!({"sessionId": "big"})).await);
    }
    for id in ids {
        assert!(c.response(id).await.get("result").is_some());
    }
    let msgs = transcript_messages(&dir.path().join(".toolwire/sessions/pipe.jsonl"));
    let texts: Vec<&str> = msgs
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, (0..50).map(|i| format!("m{i}")).collect::<Vec<_>>());

    assert_eq!(c.call("shutdown", Value::Null).await, Value::Null);
    c.notify("exit", Value::Null).await;
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn exit_without_shutdown_is_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    c.notify("exit", Value::Null).await;
    assert_eq!(child.wait().await.unwrap().code(), Some(1));
}

#[tokio::test]
async fn a_second_process_is_refused_the_transcript_the_first_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut child_a) = spawn_binary(dir.path());
    let (mut b, _child_b) = spawn_binary(dir.path());
    a.initialize(dir.path(), json!({})).await;
    b.initialize(dir.path(), json!({})).await;
    a.call(
        "pair/append",
        json!({"sessionId": "s", "message": user_text("mine")}),
    )
    .await;
    let e = b
        .fails(
            "pair/append",
            json!({"sessionId": "s", "message": user_text("theirs")}),
            -32013,
        )
        .await;
    assert_eq!(e["data"]["kind"], json!("transcriptLocked"));
    b.fails("state/get", json!({"sessionId": "s"}), -32013)
        .await;
    // Other sessions are fine, and the lock goes with its holder.
    b.call(
        "pair/append",
        json!({"sessionId": "other", "message": user_text("ok")}),
    )
    .await;
    a.call("shutdown", Value::Null).await;
    a.notify("exit", Value::Null).await;
    child_a.wait().await.unwrap();
    b.call(
        "pair/append",
        json!({"sessionId": "s", "message": user_text("theirs now")}),
    )
    .await;
    let msgs = transcript_messages(&dir.path().join(".toolwire/sessions/s.jsonl"));
    assert_eq!(msgs, vec![user_text("mine"), user_text("theirs now")]);
}

#[tokio::test]
async fn the_repair_command_fixes_a_file_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let lines = [
        json!({"type": "message", "message": assistant_calls(&["x"])}).to_string(),
        json!({"type": "message", "message": user_text("no results")}).to_string(),
    ];
    std::fs::write(&path, lines.join("\n") + "\n{\"torn").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["repair", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("dropped tool_use x"), "{stdout}");
    assert!(stdout.contains("1 torn"), "{stdout}");
    assert_eq!(transcript_messages(&path), vec![user_text("no results")]);
    assert!(path.with_extension("jsonl.bak").exists());
}

/// Pipeline a long conversation, `SIGKILL` the server at varied moments,
/// restart it, and check the transcript: every line parses, no orphan.
#[tokio::test]
async fn kill_9_never_leaves_an_orphan_or_a_torn_line() {
    let script = conversation(240);
    for trial in 0..24u64 {
        let mode = if trial % 2 == 0 {
            "discard"
        } else {
            "synthetic"
        };
        let durability = if trial % 4 < 2 { "none" } else { "fsync" };
        let dir = tempfile::tempdir().unwrap();
        let (mut c, mut child) = spawn_binary(dir.path());
        let options = json!({"abortMode": mode, "durability": durability});
        c.initialize(dir.path(), options.clone()).await;
        let mut ids = Vec::new();
        for message in &script {
            ids.push(
                c.start(
                    "pair/append",
                    json!({"sessionId": "crash", "message": message}),
                )
                .await,
            );
        }
        // Wait for a varying number of answers, then kill without warning.
        let wait_for = ((trial * 37) % script.len() as u64) as usize;
        for id in ids.iter().take(wait_for) {
            c.response(*id).await;
        }
        child.start_kill().unwrap();
        child.wait().await.unwrap();

        let (mut c, mut child) = spawn_binary(dir.path());
        c.initialize(dir.path(), options).await;
        c.call("state/get", json!({"sessionId": "crash"})).await;
        let path = dir.path().join(".toolwire/sessions/crash.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "trial {trial}: torn tail survived"
        );
        let msgs = transcript_messages(&path);
        assert_paired(&msgs);
        // What was committed is a prefix of the conversation, in order.
        let texts: Vec<&Value> = msgs.iter().filter(|m| m["content"].is_string()).collect();
        let expected: Vec<&Value> = script
            .iter()
            .filter(|m| m["content"].is_string())
            .take(texts.len())
            .collect();
        assert_eq!(texts, expected, "trial {trial}");
        // The restarted server goes on appending to the same transcript.
        c.call(
            "pair/append",
            json!({"sessionId": "crash", "message": user_text("after restart")}),
        )
        .await;
        assert_paired(&transcript_messages(&path));
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
}

/// Text turns, single calls, multi-call pairs answered over two messages.
fn conversation(n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut i = 0;
    while out.len() < n {
        out.push(user_text(&format!("turn {i}")));
        let a = format!("a{i}");
        let b = format!("b{i}");
        out.push(assistant_calls(&[&a, &b]));
        out.push(results(&[(&a, &"r".repeat(200 + i % 7 * 1000))]));
        out.push(results(&[(&b, "done")]));
        let c = format!("c{i}");
        out.push(assistant_calls(&[&c]));
        out.push(results(&[(&c, "ok")]));
        i += 1;
    }
    out
}
