//! Decisions journaled with SHA-256 digests (every journal written before
//! XXH3 digests) still bind to their originals: resumed, mixed with new
//! decisions, reconstructed and forked.
//!
//! `tests/data/sha-journal.jsonl` was written by the version before XXH3
//! (`tests/data/make_sha_journal.py` drove its binary): three results, two
//! persisted (replacement records with a digest) and one sent whole (a
//! `seen` line with its digest), then the pair as sent.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};
use toolwire::server::{ConnectionEnd, Server};
use toolwire::session::Storage;

const FIXTURE: &str = include_str!("data/sha-journal.jsonl");

/// The conversation the fixture was made from, with its originals.
fn originals() -> Vec<Value> {
    let big: String = (0..3000)
        .map(|i| format!("line {i:04} of the first big output\n"))
        .collect();
    let rows: String = (0..9000).map(|i| format!("row {i:05}\n")).collect();
    let call = |id: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}});
    let result = |id: &str, content: Value| json!({"type": "tool_result", "tool_use_id": id, "content": content});
    vec![
        json!({"role": "assistant", "content": [call("toolu_big"), call("toolu_blocks"), call("toolu_small")]}),
        json!({"role": "user", "content": [
            result("toolu_big", json!(big)),
            result("toolu_blocks", json!([{"type": "text", "text": rows}])),
            result("toolu_small", json!("small output\n\t\"quoted\" é")),
        ]}),
    ]
}

/// The fixture's records, by id.
fn fixture_replacement(id: &str) -> Value {
    FIXTURE
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "replacement" && l["record"]["toolUseId"] == id)
        .map(|l| l["record"]["replacement"].clone())
        .unwrap()
}

/// The conversation as the fixture's decisions render it. A result whose
/// original is a list of blocks is replaced by one text block (the shape
/// follows the original, PROTOCOL.md 11.1; the release that wrote the
/// fixture sent the plain string there unless a cache marker was inside).
fn as_sent() -> Vec<Value> {
    let mut messages = originals();
    messages[1]["content"][0]["content"] = fixture_replacement("toolu_big");
    messages[1]["content"][1]["content"] =
        json!([{"type": "text", "text": fixture_replacement("toolu_blocks")}]);
    messages
}

async fn start(dir: &Path) -> (MemClient, tokio::task::JoinHandle<ConnectionEnd>) {
    let (mut c, task) = connect(Server::new(Storage::default()));
    c.initialize(dir, json!({})).await;
    (c, task)
}

/// `budget/apply` of `messages` on `session` decides nothing anew and
/// renders the fixture's decisions.
async fn binds_as_before(c: &mut MemClient, session: &str, messages: &[Value]) {
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": session, "messages": messages}),
        )
        .await;
    assert_eq!(r["messages"], json!(as_sent()), "{session}");
    assert_eq!(r["records"], json!([]), "{session}");
    assert_eq!(r["persisted"], json!([]), "{session}");
}

fn with_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join(".toolwire/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join("old.jsonl"), FIXTURE).unwrap();
    dir
}

#[tokio::test]
async fn an_old_journal_resumes_and_binds_as_before() {
    let dir = with_fixture();
    let (mut c, _task) = start(dir.path()).await;
    let state = c.call("state/get", json!({"sessionId": "old"})).await;
    assert_eq!(state["seenIds"].as_array().map(Vec::len), Some(3));
    assert_eq!(state["replacements"].as_object().map(|r| r.len()), Some(2));
    // The originals find their decisions; what was sent stays as it is.
    binds_as_before(&mut c, "old", &originals()).await;
    binds_as_before(&mut c, "old", &as_sent()).await;

    // Another original under an old id is fresh, and is decided in the
    // kind that id's decisions use.
    let mut changed = originals();
    changed[1]["content"][0]["content"] = json!("other ".repeat(20_000));
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "old", "messages": changed}),
        )
        .await;
    assert_eq!(r["persisted"].as_array().unwrap().len(), 1, "{r}");
    let digest = r["records"][0]["digest"].as_str().unwrap();
    assert!(
        digest.len() == 16 && !digest.starts_with("xxh3:"),
        "{digest}"
    );
}

#[tokio::test]
async fn old_and_new_decisions_bind_together_after_a_restart() {
    let dir = with_fixture();
    let (mut c, task) = start(dir.path()).await;
    let mut messages = originals();
    messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_new", "name": "Bash", "input": {}}]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_new", "content": "new ".repeat(20_000)},
        {"type": "tool_result", "tool_use_id": "toolu_new2", "content": "a small new one"},
    ]}));
    let first = c
        .call(
            "budget/apply",
            json!({"sessionId": "old", "messages": messages}),
        )
        .await;
    // Only the new results are decided, with new digests.
    let records = first["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{first}");
    assert_eq!(records[0]["toolUseId"], json!("toolu_new"));
    assert!(records[0]["digest"].as_str().unwrap().starts_with("xxh3:"));
    assert_eq!(first["messages"].as_array().unwrap()[..2], as_sent()[..]);
    c.close().await;
    let _ = task.await;

    // The journal now holds both kinds; a restarted server reads both.
    let text = std::fs::read_to_string(dir.path().join(".toolwire/sessions/old.jsonl")).unwrap();
    assert!(text.contains("\"digests\":[\"xxh3:"), "the new seen line");
    let (mut c, _task) = start(dir.path()).await;
    let again = c
        .call(
            "budget/apply",
            json!({"sessionId": "old", "messages": messages}),
        )
        .await;
    assert_eq!(again["messages"], first["messages"]);
    assert_eq!(again["records"], json!([]));
    assert_eq!(again["persisted"], json!([]));
    let state = c.call("state/get", json!({"sessionId": "old"})).await;
    assert_eq!(state["seenIds"].as_array().map(Vec::len), Some(5));
    assert_eq!(state["replacements"].as_object().map(|r| r.len()), Some(3));
}

#[tokio::test]
async fn a_fork_and_a_reconstruction_of_an_old_session_bind_as_before() {
    let dir = with_fixture();
    let (mut c, _task) = start(dir.path()).await;
    let f = c
        .call(
            "state/fork",
            json!({"sessionId": "old", "newSessionId": "fork"}),
        )
        .await;
    assert_eq!(f["seenCount"], json!(3), "{f}");
    binds_as_before(&mut c, "fork", &originals()).await;

    let path = dir.path().join(".toolwire/sessions/old.jsonl");
    let r = c
        .call(
            "state/reconstruct",
            json!({"sessionId": "rebuilt", "transcript": path.display().to_string()}),
        )
        .await;
    assert_eq!(r["seenCount"], json!(3), "{r}");
    assert_eq!(r["replacementCount"], json!(2), "{r}");
    binds_as_before(&mut c, "rebuilt", &originals()).await;
}
