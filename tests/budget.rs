//! `budget/apply` end to end, through an in-memory connection.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use serde_json::{Value, json};
use toolwire::artifact::{ArtifactStore, FsArtifactStore, Written};
use toolwire::server::Server;
use toolwire::session::Storage;

fn tr(content: Value, id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": content})
}

fn user(blocks: Vec<Value>) -> Value {
    json!({"role": "user", "content": blocks})
}

fn artifact(dir: &Path, session: &str, name: &str) -> PathBuf {
    dir.join(".toolwire/sessions")
        .join(session)
        .join("tool-results")
        .join(name)
}

async fn setup(options: Value) -> (tempfile::TempDir, MemClient) {
    let dir = tempfile::tempdir().unwrap();
    let (mut client, _task) = connect(new_server());
    client.initialize(dir.path(), options).await;
    (dir, client)
}

/// The toolUseIds a `budget/apply` result reports as persisted, in order.
fn persisted_ids(result: &Value) -> Vec<String> {
    result["persisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["toolUseId"].as_str().unwrap().to_owned())
        .collect()
}

fn content_of(result: &Value, msg: usize, block: usize) -> Value {
    result["messages"][msg]["content"][block]["content"].clone()
}

#[tokio::test]
async fn preview_bytes_are_exact_and_replayed_byte_for_byte() {
    let (dir, mut c) = setup(json!({})).await;
    let big = "x".repeat(60_000);
    let lines: String = (0..6000).map(|i| format!("line {i:04}\n")).collect();
    let msgs = json!([
        assistant_calls(&["toolu_1", "toolu_2"]),
        user(vec![tr(json!(big), "toolu_1"), tr(json!(lines), "toolu_2")]),
    ]);
    let r = c
        .call("budget/apply", json!({"sessionId": "s1", "messages": msgs}))
        .await;

    let p1 = artifact(dir.path(), "s1", "toolu_1.txt");
    let p2 = artifact(dir.path(), "s1", "toolu_2.txt");
    let expected1 = format!(
        "<persisted-output>\nOutput too large (58.6KB). Full output saved to: {}\n\nPreview (first 2KB):\n{}\n...\n</persisted-output>",
        p1.display(),
        "x".repeat(2000)
    );
    // 200 lines of 10 characters fill the 2000 exactly; the last newline
    // (at 1999) is past the middle, so the preview stops just before it.
    let preview2: String = lines[..1999].to_owned();
    let expected2 = format!(
        "<persisted-output>\nOutput too large (58.6KB). Full output saved to: {}\n\nPreview (first 2KB):\n{}\n...\n</persisted-output>",
        p2.display(),
        preview2
    );
    assert_eq!(content_of(&r, 1, 0), json!(expected1));
    assert_eq!(content_of(&r, 1, 1), json!(expected2));
    assert_eq!(std::fs::read_to_string(&p1).unwrap(), big);
    assert_eq!(std::fs::read_to_string(&p2).unwrap(), lines);
    assert_eq!(r["records"].as_array().unwrap().len(), 2);
    // Each record names the original it was made from.
    let mut record = r["records"][0].clone();
    let digest = record.as_object_mut().unwrap().remove("digest").unwrap();
    assert!(
        digest
            .as_str()
            .and_then(|d| d.strip_prefix("xxh3:"))
            .is_some_and(|d| d.len() == 16 && d.bytes().all(|b| b.is_ascii_hexdigit()))
    );
    assert_eq!(
        record,
        json!({"kind": "tool-result", "toolUseId": "toolu_1", "replacement": expected1})
    );
    assert_eq!(r["persisted"][0]["originalChars"], json!(60_000));
    assert_eq!(r["persisted"][0]["contentType"], json!("text"));
    assert_eq!(r["persisted"][0]["reused"], json!(false));
    assert_eq!(r["persisted"][0]["path"], json!(p1.display().to_string()));
    assert_eq!(r["overLimit"], json!([]));

    // Again with the originals, and with what was sent: same bytes, no records.
    let again = c
        .call("budget/apply", json!({"sessionId": "s1", "messages": msgs}))
        .await;
    assert_eq!(again["messages"], r["messages"]);
    assert_eq!(again["records"], json!([]));
    assert_eq!(again["persisted"], json!([]));
    let sent = c
        .call(
            "budget/apply",
            json!({"sessionId": "s1", "messages": r["messages"]}),
        )
        .await;
    assert_eq!(sent["messages"], r["messages"]);
    assert_eq!(sent["records"], json!([]));
}

#[tokio::test]
async fn a_result_whose_replacement_would_be_longer_is_sent_whole() {
    // PROTOCOL 10.1: over maxResultChars, but a preview holding all of it
    // plus the header would be longer than the original.
    let (dir, mut c) = setup(json!({"limits": {"maxResultChars": 10}})).await;
    let r = c
        .call("budget/apply", json!({"sessionId": "s", "messages": [user(vec![tr(json!("a\nb\nc\nd\ne\nf"), "t1")])]}))
        .await;
    assert_eq!(content_of(&r, 0, 0), json!("a\nb\nc\nd\ne\nf"));
    assert_eq!(r["persisted"], json!([]));
    assert!(!artifact(dir.path(), "s", "t1.txt").exists());
}

#[tokio::test]
async fn largest_fresh_results_are_chosen_until_the_message_fits() {
    let (_dir, mut c) = setup(json!({})).await;
    // Five results of 45k: none over maxResultChars, 225k together.
    let blocks: Vec<Value> = (0..5)
        .map(|i| tr(json!("y".repeat(45_000 + i)), &format!("t{i}")))
        .collect();
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [user(blocks)]}),
        )
        .await;
    let ids = persisted_ids(&r);
    assert_eq!(ids, ["t4"], "only the largest is needed to fit");

    // One over the per-result limit is chosen even when the message fits.
    let r = c
        .call("budget/apply", json!({"sessionId": "s2", "messages": [user(vec![tr(json!("z".repeat(50_001)), "a"), tr(json!("z".repeat(50_000)), "b")])]}))
        .await;
    let ids = persisted_ids(&r);
    assert_eq!(ids, ["a"]);
    assert_eq!(content_of(&r, 0, 1), json!("z".repeat(50_000)));

    // Ties go by position.
    let r = c
        .call("budget/apply", json!({"sessionId": "s3", "messages": [user(vec![tr(json!("q".repeat(3000)), "first"), tr(json!("q".repeat(3000)), "second")])], "limits": {"maxMessageChars": 5000, "maxResultChars": 10000, "previewChars": 5}}))
        .await;
    let ids = persisted_ids(&r);
    assert_eq!(ids[0], "first");
}

#[tokio::test]
async fn a_decision_belongs_to_its_original_and_each_message_is_budgeted_on_its_own() {
    let (_dir, mut c) = setup(json!({})).await;
    let first = user(vec![tr(json!("small"), "t1")]);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [first]}),
        )
        .await;
    assert_eq!(r["persisted"], json!([]));
    // The same original again: frozen, sent as it was.
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [first.clone(), user(vec![tr(json!("h".repeat(80_000)), "t2")])]}),
        )
        .await;
    assert_eq!(content_of(&r, 0, 0), json!("small"));
    assert_eq!(persisted_ids(&r), ["t2"]);
    // The same id with another original (a provider reusing call ids) is a
    // new result: decided on its own, never shown another's fate.
    let later = user(vec![tr(json!("h".repeat(80_000)), "t1")]);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [first, later]}),
        )
        .await;
    assert_eq!(persisted_ids(&r), ["t1"]);
    assert_eq!(content_of(&r, 0, 0), json!("small"));
    let preview = content_of(&r, 1, 0);
    assert!(preview.as_str().unwrap().starts_with("<persisted-output>"));
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"], json!(["t1", "t2"]));
}

#[tokio::test]
async fn ineligible_results_are_left_alone() {
    let (_dir, mut c) = setup(json!({"exemptTools": ["Read"]})).await;
    let huge = "r".repeat(90_000);
    let already = format!("<persisted-output>\n{}", "p".repeat(90_000));
    let msgs = json!([
        assistant_tool("read1", "Read"),
        user(vec![tr(json!(huge), "read1")]),
        user(vec![tr(
            json!([{"type": "text", "text": huge}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]),
            "img1"
        )]),
        user(vec![tr(json!(already), "prev1")]),
    ]);
    let r = c
        .call("budget/apply", json!({"sessionId": "s", "messages": msgs}))
        .await;
    assert_eq!(r["persisted"], json!([]));
    assert_eq!(r["messages"], msgs);
    assert_eq!(
        r["overLimit"],
        json!([]),
        "each message is on its own under 200k"
    );
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(
        state["seenIds"],
        json!([]),
        "ineligible results do not become seen"
    );

    // Exempt through the transcript: the tool_use was committed earlier.
    c.call(
        "pair/append",
        json!({"sessionId": "t", "message": assistant_tool("read2", "Read")}),
    )
    .await;
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "t", "messages": [user(vec![tr(json!(huge), "read2")])]}),
        )
        .await;
    assert_eq!(r["persisted"], json!([]));
}

#[tokio::test]
async fn block_array_results_are_saved_as_json() {
    let (dir, mut c) = setup(json!({})).await;
    let content = json!([{"type": "text", "text": "a".repeat(30_000)}, {"type": "text", "text": "b".repeat(30_000)}]);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [user(vec![tr(content.clone(), "j1")])]}),
        )
        .await;
    assert_eq!(r["persisted"][0]["contentType"], json!("json"));
    assert_eq!(r["persisted"][0]["originalChars"], json!(60_000));
    let saved: Value =
        serde_json::from_slice(&std::fs::read(artifact(dir.path(), "s", "j1.json")).unwrap())
            .unwrap();
    assert_eq!(saved, content);
    // Blocks are replaced by a block.
    let text = content_of(&r, 0, 0);
    assert!(
        text[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("<persisted-output>\nOutput too large (58.6KB)."),
        "{text}"
    );
}

#[tokio::test]
async fn size_units_count_as_configured() {
    // 3000 emoji: 3000 chars, 6000 UTF-16 units, 12000 bytes.
    let text = "\u{1F600}".repeat(3000);
    for (unit, persisted) in [("chars", false), ("utf16", true), ("bytes", true)] {
        let (_dir, mut c) = setup(
            json!({"sizeUnit": unit, "limits": {"maxResultChars": 5000, "previewChars": 100}}),
        )
        .await;
        let r = c
            .call(
                "budget/apply",
                json!({"sessionId": "s", "messages": [user(vec![tr(json!(text), "e")])]}),
            )
            .await;
        assert_eq!(
            !r["persisted"].as_array().unwrap().is_empty(),
            persisted,
            "{unit}"
        );
        if persisted {
            let expect = if unit == "utf16" { 6000 } else { 12000 };
            assert_eq!(r["persisted"][0]["originalChars"], json!(expect));
        }
    }
}

#[tokio::test]
async fn per_request_limits_override_the_configuration() {
    let (_dir, mut c) = setup(json!({})).await;
    let m = user(vec![tr(json!("k".repeat(500)), "k1")]);
    let r = c.call("budget/apply", json!({"sessionId": "s", "messages": [m], "limits": {"maxResultChars": 100, "previewChars": 50}})).await;
    assert_eq!(r["persisted"].as_array().unwrap().len(), 1);
    assert!(
        content_of(&r, 0, 0)
            .as_str()
            .unwrap()
            .contains("Preview (first 50 bytes):\n")
    );
    c.fails(
        "budget/apply",
        json!({"sessionId": "s", "messages": [], "limits": {"maxResultChar": 1}}),
        -32602,
    )
    .await;
}

#[tokio::test]
async fn hostile_ids_never_reach_outside_the_artifact_directory() {
    let (dir, mut c) = setup(json!({"limits": {"maxResultChars": 10, "previewChars": 20}})).await;
    let long = "L".repeat(5000);
    let ids = [
        "../escape",
        "/etc/passwd",
        "a\u{0}b",
        "..",
        "a/../../b",
        long.as_str(),
        "x\\y",
        "%2e%2e",
    ];
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| {
            tr(
                json!(format!("payload for {id:?} {}", "p".repeat(2000))),
                id,
            )
        })
        .collect();
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [user(blocks)]}),
        )
        .await;
    let tool_results = dir.path().join(".toolwire/sessions/s/tool-results");
    let persisted = r["persisted"].as_array().unwrap();
    assert_eq!(persisted.len(), ids.len(), "{r}");
    for p in persisted {
        let path = PathBuf::from(p["path"].as_str().unwrap());
        assert_eq!(path.parent().unwrap(), tool_results, "{path:?}");
        assert!(path.file_name().unwrap().len() < 100);
        assert!(path.is_file());
    }
    // Nothing else was created anywhere in the workspace but the session's
    // journal, the data directory's commit log and its `.gitignore`.
    let journal = dir.path().join(".toolwire/sessions/s.jsonl");
    let wal = dir.path().join(".toolwire/wal");
    let ignore = dir.path().join(".toolwire/.gitignore");
    let mut found = Vec::new();
    walk(dir.path(), &mut found);
    for f in found {
        assert!(
            f.starts_with(&tool_results) || f == journal || f == ignore || f.starts_with(&wal),
            "unexpected file {f:?}"
        );
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out)
        } else {
            out.push(path)
        }
    }
}

#[tokio::test]
async fn a_link_planted_in_the_artifact_directory_is_never_followed() {
    let (dir, mut c) = setup(json!({})).await;
    let outside = dir.path().join("precious.txt");
    std::fs::write(&outside, "do not touch").unwrap();
    let tool_results = dir.path().join(".toolwire/sessions/s/tool-results");
    std::fs::create_dir_all(&tool_results).unwrap();
    std::os::unix::fs::symlink(&outside, tool_results.join("evil.txt")).unwrap();

    let big = "e".repeat(60_000);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [user(vec![tr(json!(big), "evil")])]}),
        )
        .await;
    assert_eq!(r["persisted"], json!([]));
    assert_eq!(r["failures"][0]["toolUseId"], json!("evil"));
    assert!(
        r["failures"][0]["message"]
            .as_str()
            .unwrap()
            .contains("link"),
        "{r}"
    );
    assert_eq!(
        content_of(&r, 0, 0),
        json!(big),
        "a failed persist leaves the result as it was"
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "do not touch");
    // Frozen as original: not retried on the next turn.
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"], json!(["evil"]));
    assert_eq!(state["replacements"], json!({}));
}

/// Fails every write.
struct BrokenDisk;
impl ArtifactStore for BrokenDisk {
    fn write_once(&self, _: &Path, _: &[u8], _: bool) -> std::io::Result<Written> {
        Err(std::io::Error::other("No space left on device (injected)"))
    }
}

#[tokio::test]
async fn failed_persists_are_reported_frozen_and_over_limit() {
    let server = Server::new(Storage {
        artifacts: Arc::new(BrokenDisk),
        ..Storage::default()
    });
    let (mut c, _t) = connect(server);
    let dir = tempfile::tempdir().unwrap();
    c.initialize(dir.path(), json!({})).await;
    let blocks: Vec<Value> = (0..3)
        .map(|i| tr(json!("f".repeat(90_000)), &format!("f{i}")))
        .collect();
    let msgs = json!([user_text("hi"), user(blocks)]);
    let r = c
        .call("budget/apply", json!({"sessionId": "s", "messages": msgs}))
        .await;
    assert_eq!(r["failures"].as_array().unwrap().len(), 3);
    assert!(
        r["failures"][0]["message"]
            .as_str()
            .unwrap()
            .contains("injected")
    );
    assert_eq!(r["messages"], msgs);
    assert_eq!(r["overLimit"], json!([1]));
    assert_eq!(r["records"], json!([]));
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"], json!(["f0", "f1", "f2"]));
}

#[tokio::test]
async fn unknown_fields_and_blocks_round_trip_unchanged() {
    let (_dir, mut c) = setup(json!({})).await;
    let raw = r#"{"sessionId":"s","messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"tool_use","id":"u1","name":"Bash","input":{"n":12345678901234567890123,"f":1.50,"z":{"b":1,"a":2}},"cache_control":{"type":"ephemeral"}}],"custom":{"y":1,"x":2}},{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"ok","is_error":false,"extra":[1,2]},{"type":"mystery","data":null}],"meta":"kept"}]}"#;
    let params: Value = serde_json::from_str(raw).unwrap();
    let r = c.call("budget/apply", params.clone()).await;
    assert_eq!(r["messages"], params["messages"]);
    let text = serde_json::to_string(&r["messages"]).unwrap();
    assert!(
        text.contains("12345678901234567890123"),
        "big integers keep their digits: {text}"
    );
    assert!(
        text.contains(r#""z":{"b":1,"a":2}"#),
        "key order is kept: {text}"
    );
}

#[tokio::test]
async fn records_are_journaled_and_artifacts_reused_after_a_restart() {
    if !common::local_transcripts("records_are_journaled_and_artifacts_reused_after_a_restart") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let big = "j".repeat(70_000);
    let msgs = json!([assistant_calls(&["t1"]), user(vec![tr(json!(big), "t1")])]);
    let first;
    {
        let server = new_server();
        let (mut c, task) = connect(server.clone());
        c.initialize(dir.path(), json!({})).await;
        c.call(
            "pair/append",
            json!({"sessionId": "s", "message": user_text("start")}),
        )
        .await;
        first = c
            .call("budget/apply", json!({"sessionId": "s", "messages": msgs}))
            .await;
        let lines = transcript_lines(&dir.path().join(".toolwire/sessions/s.jsonl"));
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[1],
            json!({"type": "replacement", "record": first["records"][0]})
        );
        // A session without a transcript gets one: its decisions are
        // journaled before the reply (PROTOCOL 10.1).
        let other = c
            .call(
                "budget/apply",
                json!({"sessionId": "nofile", "messages": msgs}),
            )
            .await;
        assert_eq!(
            transcript_lines(&dir.path().join(".toolwire/sessions/nofile.jsonl")),
            [json!({"type": "replacement", "record": other["records"][0]})]
        );
        c.close().await;
        task.await.unwrap();
        server.registry.close_all().await;
    }
    // A new server resumes the session from its transcript.
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(
        state["replacements"]["t1"],
        first["records"][0]["replacement"]
    );
    let again = c
        .call("budget/apply", json!({"sessionId": "s", "messages": msgs}))
        .await;
    assert_eq!(again["messages"], first["messages"]);
    assert_eq!(again["records"], json!([]));
    // The session that had no transcript resumes from the one its apply
    // created: the same bytes, nothing decided again.
    let fresh = c
        .call(
            "budget/apply",
            json!({"sessionId": "nofile", "messages": msgs}),
        )
        .await;
    assert_eq!(fresh["records"], json!([]));
    assert_eq!(fresh["persisted"], json!([]));
    assert_eq!(
        fresh["messages"][1]["content"][0]["content"]
            .as_str()
            .unwrap()
            .replace("nofile", "s"),
        first["messages"][1]["content"][0]["content"]
            .as_str()
            .unwrap()
    );
}

#[tokio::test]
async fn an_existing_artifact_with_other_bytes_is_a_failure_not_a_wrong_preview() {
    let (dir, mut c) = setup(json!({})).await;
    let path = artifact(dir.path(), "s", "t.txt");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    FsArtifactStore
        .write_once(&path, b"something else", false)
        .unwrap();
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [user(vec![tr(json!("w".repeat(60_000)), "t")])]}),
        )
        .await;
    assert_eq!(r["persisted"], json!([]));
    assert!(
        r["failures"][0]["message"]
            .as_str()
            .unwrap()
            .contains("other content"),
        "{r}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"something else");
}

#[tokio::test]
async fn malformed_messages_are_rejected_naming_the_field_without_changing_state() {
    let (_dir, mut c) = setup(json!({})).await;
    let e = c.fails("budget/apply", json!({"sessionId": "s", "messages": [user_text("ok"), {"role": "robot", "content": "x"}]}), -32602).await;
    assert_eq!(e["data"]["path"], json!("messages[1].role"));
    let e = c.fails("budget/apply", json!({"sessionId": "s", "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}), -32602).await;
    assert_eq!(
        e["data"]["path"],
        json!("messages[0].content[0].tool_use_id")
    );
    let e = c
        .fails(
            "budget/apply",
            json!({"sessionId": "../s", "messages": []}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("sessionId"));
    let e = c
        .fails("budget/apply", json!({"sessionId": "s"}), -32602)
        .await;
    assert!(e["message"].as_str().unwrap().contains("messages"), "{e}");
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(
        state,
        json!({"seenIds": [], "replacements": {}, "pending": []})
    );
}

/// Issue 31, reproduction 1 (PROTOCOL.md 11.1, "cache markers are not
/// content"): Claude Code puts `cache_control` on the text block inside the
/// last tool_result and moves it on the next turn. The result is still the
/// same original: one decision, one saved output (without the marker), the
/// same preview; the marker of each request rides on the replacement's text
/// block, which stays a block when the marker has moved away. Also after a
/// restart, read back from the journal.
#[tokio::test]
async fn a_moved_cache_marker_is_not_a_new_original() {
    let dir = tempfile::tempdir().unwrap();
    let big = "compiling crate foo v0.1.0\n".repeat(2500);
    let marker = json!({"type": "ephemeral"});
    let marked = json!([{"type": "text", "text": big, "cache_control": marker}]);
    let bare = json!([{"type": "text", "text": big}]);
    let turn1 = json!([
        assistant_calls(&["toolu_A1"]),
        user(vec![tr(marked.clone(), "toolu_A1")])
    ]);
    // Turn 2: the marker has moved to the new last block.
    let turn2 = json!([
        assistant_calls(&["toolu_A1"]),
        user(vec![tr(bare.clone(), "toolu_A1")]),
        assistant_calls(&["toolu_A2"]),
        user(vec![tr(
            json!([{"type": "text", "text": "ok", "cache_control": marker}]),
            "toolu_A2"
        )]),
    ]);
    let saved = artifact(dir.path(), "s", "toolu_A1.json");
    let preview;
    {
        let server = new_server();
        let (mut c, task) = connect(server.clone());
        c.initialize(dir.path(), json!({})).await;
        let first = c
            .call("budget/apply", json!({"sessionId": "s", "messages": turn1}))
            .await;
        assert_eq!(persisted_ids(&first), ["toolu_A1"]);
        let sent = content_of(&first, 1, 0);
        preview = first["records"][0]["replacement"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            sent,
            json!([{"type": "text", "text": preview, "cache_control": marker}])
        );
        let second = c
            .call("budget/apply", json!({"sessionId": "s", "messages": turn2}))
            .await;
        assert_eq!(second["records"], json!([]), "{second}");
        assert_eq!(second["persisted"], json!([]));
        // Only the marker changed: the replacement keeps its block form
        // (issue 52, loose end 2).
        assert_eq!(
            content_of(&second, 1, 0),
            json!([{"type": "text", "text": preview}])
        );
        // The marker moved back (a retry of turn 1): the same bytes again.
        let retry = c
            .call("budget/apply", json!({"sessionId": "s", "messages": turn1}))
            .await;
        assert_eq!(retry["messages"], first["messages"]);
        c.close().await;
        task.await.unwrap();
        server.registry.close_all().await;
    }
    let names: Vec<String> = std::fs::read_dir(saved.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["toolu_A1.json"]);
    let on_disk: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert_eq!(on_disk, bare);
    if !common::local_transcripts("a_moved_cache_marker_is_not_a_new_original") {
        return;
    }
    // A new server reads the decision back from the journal.
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let again = c
        .call("budget/apply", json!({"sessionId": "s", "messages": turn2}))
        .await;
    assert_eq!(again["records"], json!([]));
    assert_eq!(
        content_of(&again, 1, 0),
        json!([{"type": "text", "text": preview}])
    );
}

/// Under the default `durability = "fsync"`, an apply that only puts back
/// decisions already made (the proxy's every request of a conversation that
/// did not grow) commits nothing: not a byte of the data directory changes
/// (transcript, commit log, saved outputs), so it waits on no disk sync.
/// Measured from outside too: `strace -f -e trace=fsync,fdatasync` of
/// `toolwire proxy` counts no sync over 20 repeats of a conversation after
/// its first request (issue 52, first performance bullet).
#[tokio::test]
async fn an_apply_that_decides_nothing_new_writes_nothing() {
    if !common::local_transcripts("an_apply_that_decides_nothing_new_writes_nothing") {
        return;
    }
    let (dir, mut c) = setup(json!({"durability": "fsync"})).await;
    let ids: Vec<String> = (0..21).map(|i| format!("toolu_{i}")).collect();
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    for (i, id) in ids.iter().enumerate() {
        // Twenty results under the budget, one over it.
        let size = if i == 20 { 80_000 } else { 9_800 };
        messages.push(assistant_calls(&[id]));
        messages.push(results(&[(id, &"x".repeat(size))]));
    }
    let first = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": messages}),
        )
        .await;
    // The large result, and the old ones clearing (on by default) saves.
    assert!(persisted_ids(&first).contains(&"toolu_20".to_owned()));
    let snapshot = |root: &std::path::Path| {
        let mut files = Vec::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let bytes = std::fs::read(&path).unwrap();
                    files.push((path, bytes));
                }
            }
        }
        files.sort();
        files
    };
    let before = snapshot(dir.path());
    assert!(!before.is_empty());
    for _ in 0..3 {
        let again = c
            .call(
                "budget/apply",
                json!({"sessionId": "s", "messages": messages}),
            )
            .await;
        assert_eq!(again["records"], json!([]));
        assert_eq!(again["messages"], first["messages"]);
    }
    assert!(
        snapshot(dir.path()) == before,
        "an apply of nothing new wrote"
    );
}

/// A conversation of 1,200 calls and results, every tenth result over the
/// limit of 3,000 chars: thousands of values, budgeted on a thread of its
/// own on a multi-threaded runtime.
fn many_results() -> Value {
    let ids: Vec<String> = (0..1200).map(|i| format!("toolu_{i:05}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let bodies: Vec<String> = (0..ids.len())
        .map(|i| {
            if i % 10 == 0 {
                (0..400)
                    .map(|line| format!("result {i} line {line}\n"))
                    .collect()
            } else {
                "ok".to_owned()
            }
        })
        .collect();
    let pairs: Vec<(&str, &str)> = ids
        .iter()
        .copied()
        .zip(bodies.iter().map(String::as_str))
        .collect();
    json!([assistant_calls(&ids), results(&pairs)])
}

/// A large conversation runs on a thread started for it (it frees
/// thousands of small blocks, which a runtime worker's allocator cache
/// would keep); its answer is the one the session's worker gives, and the
/// session's queue keeps its order around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_conversation_on_its_own_thread_answers_as_the_worker_does_in_order() {
    let options = json!({"limits": {"maxResultChars": 3000}});
    let (dir, mut c) = setup(options.clone()).await;
    let messages = many_results();
    let first_large = messages[1]["content"][0].clone();
    // Queued at once: the second request (small, on the session's worker)
    // repeats the first request's first large result, and must find it
    // decided by the first.
    let large = c
        .start(
            "budget/apply",
            json!({"sessionId": "s", "messages": messages}),
        )
        .await;
    let small = c
        .start(
            "budget/apply",
            json!({"sessionId": "s", "messages": [
                assistant_calls(&["toolu_00000"]),
                user(vec![first_large]),
            ]}),
        )
        .await;
    let large = c.response(large).await["result"].take();
    let small = c.response(small).await["result"].take();
    assert_eq!(large["records"].as_array().map(Vec::len), Some(120));
    assert_eq!(small["records"], json!([]));
    assert_eq!(
        content_of(&small, 1, 0),
        content_of(&large, 1, 0),
        "the second request saw the first one's decision"
    );

    // The same request on a runtime of one thread, where every job runs
    // on the session's worker: the same answer, but for the directory.
    let other = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let (dir, mut c) = setup(options).await;
            let r = c
                .call(
                    "budget/apply",
                    json!({"sessionId": "s", "messages": many_results()}),
                )
                .await;
            (dir, r)
        })
    });
    let (other_dir, on_worker) = other.join().unwrap();
    let here = serde_json::to_string(&large).unwrap().replace(
        &*dir.path().to_string_lossy(),
        &other_dir.path().to_string_lossy(),
    );
    assert_eq!(here, serde_json::to_string(&on_worker).unwrap());
}
