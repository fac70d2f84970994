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
