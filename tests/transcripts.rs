//! Real-world transcripts (PROTOCOL 10.1, 10.2): each bug seen in use, as
//! a test through the layer where it was seen (the binary for the CLI and
//! restarts), decisions that survive a `SIGKILL`, and a property test of
//! repair against an independent pairing checker written here.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use toolwire::format::Format;
use toolwire::transcript::repair::repair_bytes;

fn tr(id: &str, content: Value) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": content})
}

fn user(blocks: Vec<Value>) -> Value {
    json!({"role": "user", "content": blocks})
}

fn line(message: &Value) -> String {
    format!("{}\n", json!({"type": "message", "message": message}))
}

fn toolwire(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn mem(dir: &Path, options: Value) -> MemClient {
    let (mut c, _task) = connect(new_server());
    c.initialize(dir, options).await;
    c
}

// ------------------------------------------- decisions that survive --

/// Bug: `budget/apply` on a session with no transcript, then the pair
/// appended, then a restart: the 120,000-char result went out whole.
/// Here the server is killed with `SIGKILL` at each point in between.
#[tokio::test]
async fn budget_only_decisions_survive_sigkill_with_identical_bytes_and_no_new_records() {
    let dir = tempfile::tempdir().unwrap();
    let big = "r".repeat(120_000);
    let msgs = json!([
        assistant_calls(&["t1", "t2"]),
        user(vec![
            tr("t1", json!(big)),
            tr("t2", json!("small, sent whole"))
        ]),
    ]);
    let journal = dir.path().join(".toolwire/sessions/s.jsonl");

    let (mut c, mut child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    let first = c
        .call("budget/apply", json!({"sessionId": "s", "messages": msgs}))
        .await;
    assert_eq!(first["records"].as_array().unwrap().len(), 1);
    let preview = first["messages"][1]["content"][0]["content"].clone();
    assert!(preview.as_str().unwrap().starts_with("<persisted-output>"));
    // Journaled before the reply: a replacement line and a seen line.
    let lines = transcript_lines(&journal);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["type"], json!("replacement"));
    assert_eq!(lines[1]["type"], json!("seen"));
    assert_eq!(lines[1]["toolUseIds"], json!(["t2"]));
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    // Restarted: the same bytes, nothing decided again, nothing written.
    let before = std::fs::read(&journal).unwrap();
    let (mut c, mut child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    let again = c
        .call("budget/apply", json!({"sessionId": "s", "messages": msgs}))
        .await;
    assert_eq!(again["messages"], first["messages"]);
    assert_eq!(again["records"], json!([]));
    assert_eq!(again["persisted"], json!([]));
    assert_eq!(std::fs::read(&journal).unwrap(), before, "no new records");
    // The harness appends the pair as it was sent; then another kill.
    c.call("pair/append", json!({"sessionId": "s", "message": msgs[0]}))
        .await;
    c.call(
        "pair/append",
        json!({"sessionId": "s", "message": again["messages"][1]}),
    )
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (mut c, mut child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    let third = c
        .call("budget/apply", json!({"sessionId": "s", "messages": msgs}))
        .await;
    assert_eq!(third["messages"], first["messages"]);
    assert_eq!(third["records"], json!([]));
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"], json!(["t1", "t2"]));
    assert_eq!(state["replacements"]["t1"], preview);
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

/// Bug: 800 results of about 270 chars (over `maxMessageChars` together)
/// grew from 241,440 to 397,330 chars: every one was "persisted" behind a
/// longer preview.
#[tokio::test]
async fn budgeting_never_makes_a_message_bigger() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = mem(dir.path(), json!({})).await;
    let blocks: Vec<Value> = (0..800)
        .map(|i| {
            tr(
                &format!("call_{i:04}"),
                json!(format!("{i:04} {}", "o".repeat(265))),
            )
        })
        .collect();
    let msg = user(blocks);
    let size = |m: &Value| -> usize {
        m["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["content"].as_str().unwrap().chars().count())
            .sum()
    };
    let before = size(&msg);
    assert!(before > 200_000);
    let r = c
        .call("budget/apply", json!({"sessionId": "s", "messages": [msg]}))
        .await;
    let after = size(&r["messages"][0]);
    assert!(after <= before, "grew from {before} to {after}");
    assert_eq!(r["persisted"], json!([]), "no preview is shorter");
    assert_eq!(r["overLimit"], json!([0]));
}

/// Bug: a provider reusing a call id across turns (`functions.eval:301`):
/// the second turn's 2-line result was sent as the first turn's 58 KB
/// preview. Also across a restart of the real binary.
#[tokio::test]
async fn a_reused_call_id_never_gets_another_results_preview() {
    let dir = tempfile::tempdir().unwrap();
    let id = "functions.eval:301";
    let big = "x".repeat(60_000);
    let small = "line one\nline two";
    let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "eval", "input": {}}]});
    let turn1 = [call.clone(), user(vec![tr(id, json!(big))])];
    let turn2 = [call.clone(), user(vec![tr(id, json!(small))])];

    let (mut c, mut child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    let r1 = c
        .call("budget/apply", json!({"sessionId": "s", "messages": turn1}))
        .await;
    let preview = r1["messages"][1]["content"][0]["content"].clone();
    assert!(preview.as_str().unwrap().starts_with("<persisted-output>"));
    for m in [&turn1[0], &r1["messages"][1]] {
        c.call("pair/append", json!({"sessionId": "s", "message": m}))
            .await;
    }
    let conversation: Vec<Value> = turn1.iter().chain(&turn2).cloned().collect();
    let r2 = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": conversation}),
        )
        .await;
    assert_eq!(r2["messages"][1]["content"][0]["content"], preview);
    assert_eq!(r2["messages"][3]["content"][0]["content"], json!(small));
    // A reused id after a committed call is a new call (PROTOCOL 10.2).
    for m in [&turn2[0], &r2["messages"][3]] {
        let a = c
            .call("pair/append", json!({"sessionId": "s", "message": m}))
            .await;
        assert_ne!(a["status"], json!("error"));
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (mut c, mut child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    let r3 = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": conversation}),
        )
        .await;
    assert_eq!(r3["messages"], r2["messages"]);
    assert_eq!(r3["records"], json!([]));
    let messages = transcript_messages(&dir.path().join(".toolwire/sessions/s.jsonl"));
    assert_eq!(messages.len(), 4);
    assert_paired(&messages);
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

// ------------------------------------------------------- pair/append --

/// Bug: `pair/append` answered `committed` for an assistant message holding
/// a `tool_result`, leaving an orphan in the transcript.
#[tokio::test]
async fn wrong_role_blocks_are_refused_and_nothing_is_written() {
    if !common::local_transcripts("wrong_role_blocks_are_refused_and_nothing_is_written") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = mem(dir.path(), json!({})).await;
    let path = dir.path().join(".toolwire/sessions/s.jsonl");
    c.call(
        "pair/append",
        json!({"sessionId": "s", "message": user_text("hi")}),
    )
    .await;
    let before = std::fs::read(&path).unwrap();
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "s", "message": {"role": "assistant", "content": [tr("x", json!("stray"))]}}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("message.content[0].type"));
    c.fails(
        "pair/append",
        json!({"sessionId": "s", "message": {"role": "user", "content": [{"type": "tool_use", "id": "u", "name": "t", "input": {}}]}}),
        -32602,
    )
    .await;
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

// ------------------------------------------------------------ repair --

fn write(dir: &Path, name: &str, lines: &[Value]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.iter().map(line).collect::<String>()).unwrap();
    path
}

fn repair(path: &Path, dry_run: bool) -> std::process::Output {
    let mut args = vec!["repair".as_ref(), path.as_os_str()];
    if dry_run {
        args.push("--dry-run".as_ref());
    }
    toolwire(&args)
}

fn check(path: &Path) -> std::process::Output {
    toolwire(&["check".as_ref(), path.as_os_str()])
}

/// Bug: with one tool_use id in two turns, repair dropped both calls but
/// kept the first result, so its output began with an orphan and a second
/// repair changed it again. They are two calls, both kept with their
/// results; since version 3 (PROTOCOL.md 11.2) the second is renamed,
/// since Anthropic refuses one id twice in a request.
#[test]
fn one_id_in_two_turns_is_two_calls_the_second_renamed() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "t.jsonl",
        &[
            assistant_calls(&["dup"]),
            user(vec![tr("dup", json!("first"))]),
            assistant_calls(&["dup"]),
            user(vec![tr("dup", json!("second"))]),
        ],
    );
    let checked = check(&path);
    assert!(!checked.status.success());
    assert!(
        text(&checked.stdout).contains("messages.2.content.0: `tool_use` ids must be unique"),
        "{}",
        text(&checked.stdout)
    );
    let out = repair(&path, false);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("renamed tool_use dup to dup_dup1"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        messages_of(&std::fs::read(&path).unwrap()),
        [
            assistant_calls(&["dup"]),
            user(vec![tr("dup", json!("first"))]),
            assistant_calls(&["dup_dup1"]),
            user(vec![tr("dup_dup1", json!("second"))]),
        ]
    );
    assert!(check(&path).status.success());
    // Repaired again: nothing to change.
    assert!(text(&repair(&path, false).stdout).contains("valid, nothing to change"));
}

/// Bug: a stray result earlier in the file made repair drop a later valid
/// pair; one unanswered call among parallel calls made it drop its
/// answered siblings and their real results.
#[test]
fn repair_drops_only_what_cannot_be_sent_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "t.jsonl",
        &[
            user(vec![tr("z", json!("stray"))]),
            assistant_calls(&["z"]),
            user(vec![tr("z", json!("the real z"))]),
            assistant_calls(&["read", "lost", "exec"]),
            user(vec![
                tr("read", json!("file text")),
                tr("exec", json!("exec really ran")),
            ]),
            user_text("thanks"),
        ],
    );
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let report = text(&out.stdout);
    assert!(
        report.contains("unexpected `tool_use_id` found in `tool_result` blocks: z"),
        "{report}"
    );
    assert!(
        report.contains(
            "`tool_use` ids were found without `tool_result` blocks immediately after: lost"
        ),
        "{report}"
    );

    let out = repair(&path, false);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let expected = [
        assistant_calls(&["z"]),
        user(vec![tr("z", json!("the real z"))]),
        assistant_calls(&["read", "exec"]),
        user(vec![
            tr("read", json!("file text")),
            tr("exec", json!("exec really ran")),
        ]),
        user_text("thanks"),
    ];
    assert_eq!(transcript_messages(&path), expected);
    assert!(check(&path).status.success());
    // Repairing the output again changes nothing and writes no backup.
    std::fs::remove_file(dir.path().join("t.jsonl.bak")).unwrap();
    let once = std::fs::read(&path).unwrap();
    let out = repair(&path, false);
    assert!(text(&out.stdout).contains("valid, nothing to change"));
    assert_eq!(std::fs::read(&path).unwrap(), once);
    assert!(!dir.path().join("t.jsonl.bak").exists());
}

/// Bug: results `pair/append` itself wrote over two consecutive user
/// messages (parallel calls finishing one by one) were merged and
/// reordered by repair, with a `.bak`; `--dry-run` said "would keep 4 lines".
#[tokio::test]
async fn a_transcript_pair_append_wrote_is_never_rewritten() {
    if !common::local_transcripts("a_transcript_pair_append_wrote_is_never_rewritten") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = mem(dir.path(), json!({})).await;
    for m in [
        user_text("run both"),
        assistant_calls(&["a", "b"]),
        user(vec![tr("b", json!("b finished first"))]),
        user(vec![tr("a", json!("a finished second"))]),
    ] {
        c.call("pair/append", json!({"sessionId": "s", "message": m}))
            .await;
    }
    let path = dir.path().join(".toolwire/sessions/s.jsonl");
    let before = std::fs::read(&path).unwrap();
    // Through the protocol (the server holds the file: copy it first).
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(&path, &copy).unwrap();
    let r = c
        .call(
            "transcript/repair",
            json!({"path": copy.display().to_string(), "dryRun": true}),
        )
        .await;
    assert_eq!(r["changed"], json!(false));
    let out = repair(&copy, true);
    assert!(
        text(&out.stdout).contains("valid, nothing to change"),
        "{}",
        text(&out.stdout)
    );
    let out = repair(&copy, false);
    assert!(out.status.success());
    assert_eq!(std::fs::read(&copy).unwrap(), before);
    assert!(!dir.path().join("copy.jsonl.bak").exists());
    let r = c
        .call(
            "transcript/check",
            json!({"path": copy.display().to_string()}),
        )
        .await;
    assert_eq!(r, json!({"ok": true, "violations": []}));
}

/// Bug: repair on a symlink replaced the link with an empty regular file,
/// on a FIFO it hung, on `README.md` it exited 0 after cutting 363 "torn"
/// lines, the mode changed from 0644 to 0600, and a no-op still wrote a
/// `.bak`.
#[test]
fn repair_refuses_what_is_not_a_transcript_file_and_keeps_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let target = write(
        dir.path(),
        "real.jsonl",
        &[assistant_calls(&["a"]), user_text("no result")],
    );
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = repair(&link, false);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("symbolic link"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );

    let fifo = dir.path().join("fifo.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let out = repair(&fifo, false);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("FIFO"), "{}", text(&out.stderr));
    let out = repair(dir.path(), false);
    assert!(
        text(&out.stderr).contains("directory"),
        "{}",
        text(&out.stderr)
    );

    let readme = dir.path().join("README.md");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"),
        &readme,
    )
    .unwrap();
    let before = std::fs::read(&readme).unwrap();
    let out = repair(&readme, false);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not a transcript")
            || text(&out.stderr).contains("not a toolwire transcript"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&readme).unwrap(), before);
    assert!(!dir.path().join("README.md.bak").exists());
    let claude = dir.path().join("claude.jsonl");
    std::fs::write(
        &claude,
        "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n",
    )
    .unwrap();
    let out = repair(&claude, false);
    assert!(
        text(&out.stderr).contains("\"user\""),
        "{}",
        text(&out.stderr)
    );

    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = repair(&target, false);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    assert_eq!(transcript_messages(&target), [user_text("no result")]);
}

/// Bug: `toolwire repair … | head` panicked on the closed pipe.
#[test]
fn a_closed_stdout_ends_repair_and_check_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "t.jsonl",
        &[assistant_calls(&["a", "b"]), user_text("interrupted")],
    );
    for args in [vec!["check"], vec!["repair", "--dry-run"], vec!["repair"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .args(&args)
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let expected = if args == ["check"] { Some(1) } else { Some(0) };
        assert_eq!(
            out.status.code(),
            expected,
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            !text(&out.stderr).contains("panicked"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(transcript_messages(&path), [user_text("interrupted")]);
}

// ---------------------------------------------------- property test --

/// One generated line: what the generator meant it to be.
#[derive(Debug, Clone)]
enum Gen {
    Calls(Vec<u8>),
    Results(Vec<u8>),
    Text(bool),
    /// A result in an assistant message or a call in a user message.
    WrongRole(bool, u8),
    Torn,
    Record,
}

fn gen_line() -> impl Strategy<Value = Gen> {
    prop_oneof![
        3 => prop::collection::vec(0u8..6, 1..4).prop_map(Gen::Calls),
        3 => prop::collection::vec(0u8..6, 1..4).prop_map(Gen::Results),
        2 => any::<bool>().prop_map(Gen::Text),
        1 => (any::<bool>(), 0u8..6).prop_map(|(a, i)| Gen::WrongRole(a, i)),
        1 => Just(Gen::Torn),
        1 => Just(Gen::Record),
    ]
}

fn render(lines: &[Gen]) -> Vec<u8> {
    let mut out = String::new();
    for (serial, g) in lines.iter().enumerate() {
        let id = |i: &u8| format!("id{i}");
        let msg = match g {
            Gen::Calls(ids) => {
                let blocks: Vec<Value> = ids
                    .iter()
                    .map(|i| json!({"type": "tool_use", "id": id(i), "name": "t", "input": {}}))
                    .collect();
                json!({"role": "assistant", "content": blocks})
            }
            Gen::Results(ids) => user(
                ids.iter()
                    .map(|i| tr(&id(i), json!(format!("out {serial}"))))
                    .collect(),
            ),
            Gen::Text(true) => {
                json!({"role": "assistant", "content": [{"type": "text", "text": "hm"}]})
            }
            Gen::Text(false) => user_text("go on"),
            Gen::WrongRole(true, i) => {
                json!({"role": "assistant", "content": [tr(&id(i), json!("x"))]})
            }
            Gen::WrongRole(false, i) => user(vec![
                json!({"type": "tool_use", "id": id(i), "name": "t", "input": {}}),
            ]),
            Gen::Torn => {
                out.push_str("{\"type\":\"message\",\"mess\n");
                continue;
            }
            Gen::Record => {
                out.push_str("{\"type\":\"seen\",\"toolUseIds\":[\"id1\"]}\n");
                continue;
            }
        };
        out.push_str(&line(&msg));
    }
    out.into_bytes()
}

/// The provider's pairing rules, written here independently of
/// `toolwire::format`: turns of one role; every call of an assistant turn
/// answered exactly once by the next turn's results, which come before any
/// other content of that turn; every result answering a call of the turn
/// just before; no tool block in the wrong role.
fn violations(messages: &[Value]) -> Vec<String> {
    let mut faults = Vec::new();
    // The provider drops every block before the newest compaction block
    // (PROTOCOL.md 11.2): read from there on.
    let mut messages = messages.to_vec();
    let blocks_of = |m: &Value| m["content"].as_array().cloned().unwrap_or_default();
    if let Some(at) = messages
        .iter()
        .rposition(|m| blocks_of(m).iter().any(|b| b["type"] == "compaction"))
    {
        let blocks = blocks_of(&messages[at]);
        let from = blocks
            .iter()
            .rposition(|b| b["type"] == "compaction")
            .unwrap();
        messages[at]["content"] = Value::Array(blocks[from..].to_vec());
        messages.drain(..at);
    }
    // Merge into turns.
    let mut turns: Vec<(String, Vec<Value>)> = Vec::new();
    for m in &messages {
        let role = m["role"].as_str().unwrap().to_owned();
        let blocks = match &m["content"] {
            Value::Array(b) => b.clone(),
            other => vec![json!({"type": "text", "text": other})],
        };
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let mut open: Vec<String> = Vec::new();
    // Anthropic: call ids unique within the request (PROTOCOL.md 11.2).
    let mut every_call: std::collections::HashSet<String> = Default::default();
    for (role, blocks) in &turns {
        if role == "assistant" {
            if !open.is_empty() {
                faults.push(format!("unanswered {open:?}"));
            }
            open.clear();
            for b in blocks {
                match b["type"].as_str() {
                    Some("tool_use") => {
                        let id = b["id"].as_str().unwrap().to_owned();
                        if open.contains(&id) {
                            faults.push(format!("{id} twice in one turn"));
                        } else if !every_call.insert(id.clone()) {
                            faults.push(format!("{id} used by an earlier call"));
                        }
                        open.push(id)
                    }
                    Some("tool_result") => faults.push("result in assistant".into()),
                    _ => {}
                }
            }
        } else {
            let mut seen_other = false;
            for b in blocks {
                match b["type"].as_str() {
                    Some("tool_result") => {
                        let id = b["tool_use_id"].as_str().unwrap();
                        match open.iter().position(|o| o == id) {
                            Some(p) if !seen_other => {
                                open.remove(p);
                            }
                            Some(_) => faults.push(format!("{id} after content")),
                            None => faults.push(format!("orphan {id}")),
                        }
                    }
                    Some("tool_use") => faults.push("call in user".into()),
                    _ => seen_other = true,
                }
            }
            if !open.is_empty() {
                faults.push(format!("unanswered {open:?}"));
            }
            open.clear();
        }
    }
    if !open.is_empty() {
        faults.push(format!("unanswered at the end {open:?}"));
    }
    faults
}

fn messages_of(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "message")
        .map(|v| v["message"].clone())
        .collect()
}

/// Results whose call is in the assistant turn directly before their own,
/// as (turn-independent) `(id, content)` pairs, counting each call once.
fn real_results(messages: &[Value]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut calls: Vec<String> = Vec::new();
    let mut prev_calls: Vec<String> = Vec::new();
    let mut last_role = String::new();
    for m in messages {
        let role = m["role"].as_str().unwrap();
        if role != last_role {
            if role == "user" {
                prev_calls = std::mem::take(&mut calls);
            } else {
                calls.clear();
                prev_calls.clear();
            }
            last_role = role.to_owned();
        }
        for b in m["content"].as_array().into_iter().flatten() {
            // One id twice in a turn is one call the provider can answer.
            if role == "assistant" && b["type"] == "tool_use" {
                let id = b["id"].as_str().unwrap().to_owned();
                if !calls.contains(&id) {
                    calls.push(id);
                }
            }
            if role == "user" && b["type"] == "tool_result" {
                let id = b["tool_use_id"].as_str().unwrap();
                if let Some(p) = prev_calls.iter().position(|c| c == id) {
                    prev_calls.remove(p);
                    out.push((id.to_owned(), b["content"].clone()));
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn repair_satisfies_the_pairing_rules_keeps_real_results_and_is_idempotent(
        lines in prop::collection::vec(gen_line(), 0..24)
    ) {
        let input = render(&lines);
        let (output, report, changed) = repair_bytes(Format::Anthropic, &input);
        let out_messages = messages_of(&output);
        prop_assert_eq!(violations(&out_messages), Vec::<String>::new(), "{}", String::from_utf8_lossy(&output));
        // A valid input is left byte for byte.
        let in_messages = messages_of(&input);
        let valid = violations(&in_messages).is_empty() && report.torn_lines == 0;
        if valid {
            prop_assert!(!changed);
            prop_assert_eq!(&output, &input);
        }
        // Every result whose call is in the turn before it and that the
        // provider could accept stays: those of fully answered calls.
        // A call that reused an earlier call's id keeps its result under
        // its new id (`<id>_dupN`).
        let kept = real_results(&out_messages);
        for r in real_results(&in_messages) {
            let dup = format!("{}_dup", r.0);
            prop_assert!(
                kept.iter().any(|(id, content)| *content == r.1 && (*id == r.0 || id.starts_with(&dup))),
                "lost {:?}: {}", r, String::from_utf8_lossy(&output)
            );
        }
        // Idempotent.
        let (again, _, changed_again) = repair_bytes(Format::Anthropic, &output);
        prop_assert!(!changed_again);
        prop_assert_eq!(again, output);
    }
}

// ------------------------------------------------- check, at scale --

/// `transcript/check` as it was before it grouped unanswered calls in one
/// pass: for every turn, every verdict. Kept here, quadratic and plain, as
/// the reference the linear one must match violation for violation, in
/// order.
fn reference_check(
    dialect: &dyn toolwire::format::Dialect,
    messages: &[Value],
) -> toolwire::protocol::TranscriptCheckResult {
    use toolwire::format::Fault;
    use toolwire::protocol::Violation;
    let messages: Vec<&Value> = messages.iter().collect();
    let pairing = toolwire::format::pair(dialect, messages.iter().copied());
    let mut violations: Vec<Violation> = Vec::new();
    for ((m, index), fault, id) in toolwire::format::ids::faults(dialect, &messages) {
        let ids = vec![id];
        violations.push(Violation {
            index: m,
            kind: fault.kind().to_owned(),
            provider_error: dialect.provider_error(fault, m, index, &ids),
            ids,
        });
    }
    for turn in &pairing.turns {
        let missing: Vec<_> = pairing
            .verdicts
            .iter()
            .filter(|v| v.fault == Some(Fault::Unanswered) && turn.messages.contains(&v.message))
            .collect();
        if let Some(first) = missing.first() {
            let ids: Vec<String> = missing.iter().map(|v| v.id.clone()).collect();
            violations.push(Violation {
                index: first.message,
                kind: Fault::Unanswered.kind().to_owned(),
                provider_error: dialect.provider_error(
                    Fault::Unanswered,
                    first.message,
                    first.index,
                    &ids,
                ),
                ids,
            });
        }
    }
    for v in pairing.faults() {
        let fault = match v.fault {
            Some(Fault::Unanswered) | None => continue,
            Some(f) => f,
        };
        let ids = vec![v.id.clone()];
        let (index, at) = match (fault, v.answers) {
            (Fault::Late, Some(call)) => {
                (pairing.verdicts[call].message, pairing.verdicts[call].index)
            }
            _ => (v.message, v.index),
        };
        violations.push(Violation {
            index,
            kind: fault.kind().to_owned(),
            provider_error: dialect.provider_error(fault, index, at, &ids),
            ids,
        });
    }
    violations.sort_by_key(|v| v.index);
    toolwire::protocol::TranscriptCheckResult {
        ok: violations.is_empty(),
        violations,
    }
}

/// One block of a faulty transcript: every kind of fault `check` names,
/// with ids of block `k` (plus one id every block shares, reused).
fn faulty_block(k: usize) -> Vec<Value> {
    let call = |id: &str| json!({"type": "tool_use", "id": id, "name": "t", "input": {"k": k}});
    let (a, b, c, d, e) = (
        format!("a{k}"),
        format!("b{k}"),
        format!("c{k}"),
        format!("d{k}"),
        format!("e{k}"),
    );
    vec![
        // A result in an assistant message.
        json!({"role": "assistant", "content": [call(&a), call(&b), call(&c), tr("z", json!("x"))]}),
        // A duplicate and an orphan.
        user(vec![
            tr(&a, json!("1")),
            tr(&a, json!("2")),
            tr("q", json!("3")),
        ]),
        // A late result; `c` stays unanswered.
        user(vec![
            json!({"type": "text", "text": "hm"}),
            tr(&b, json!("4")),
        ]),
        // An id outside the pattern and one an earlier call had.
        json!({"role": "assistant", "content": [call(&format!("bad.id:{k}")), call("shared"), call(&a)]}),
        user(vec![
            tr(&format!("bad.id:{k}"), json!("5")),
            tr("shared", json!("6")),
        ]),
        // Two unanswered calls in two messages of one turn.
        assistant_calls(&[&d]),
        json!({"role": "assistant", "content": [call(&e)]}),
        user_text("go on"),
        user(vec![tr(&d, json!("7"))]),
    ]
}

/// The linear `check` reports exactly what the quadratic one did, on a
/// transcript with faults throughout, through the binary as users run it
/// and in process (the JSON-RPC method calls the same function).
#[test]
fn check_of_a_large_faulty_transcript_reports_exactly_what_the_reference_does() {
    let messages: Vec<Value> = (0..1_500).flat_map(faulty_block).collect();
    let dialect = Format::Anthropic.dialect();
    let want = reference_check(dialect, &messages);
    assert!(
        want.violations.len() > 10 * 1_500,
        "{}",
        want.violations.len()
    );
    let got = toolwire::transcript::check::check_messages(dialect, &messages);
    assert_eq!(got, want);

    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "big.jsonl", &messages);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let mut expected = format!(
        "{}: {} violation(s) the provider would refuse\n",
        path.display(),
        want.violations.len()
    );
    for v in &want.violations {
        expected.push_str(&format!(
            "  message {} {}: {}\n",
            v.index, v.kind, v.provider_error
        ));
    }
    assert!(
        text(&out.stdout) == expected,
        "output differs from the reference"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// On any transcript the generator makes (every fault kind, torn
    /// lines, records between messages, ids reused across turns), `check`
    /// says what the reference says, in the same order.
    #[test]
    fn check_matches_the_reference_on_generated_transcripts(
        lines in prop::collection::vec(gen_line(), 0..40)
    ) {
        let messages = messages_of(&render(&lines));
        let dialect = Format::Anthropic.dialect();
        prop_assert_eq!(
            toolwire::transcript::check::check_messages(dialect, &messages),
            reference_check(dialect, &messages)
        );
    }
}

// ------------------------------------------------------------ corpus --

/// Other agents' transcript-repair test cases, translated into toolwire
/// transcripts (`tests/data/repair-corpus/`): each repaired as that agent's
/// test expects, or as `cases.json` says toolwire deliberately differs.
#[test]
fn other_agents_repair_cases_give_the_expected_transcripts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/repair-corpus");
    let cases: Vec<Value> =
        serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap()).unwrap();
    assert!(cases.len() >= 9);
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let input = std::fs::read(dir.join(format!("{name}.jsonl"))).unwrap();
        let (output, _, changed) = repair_bytes(Format::Anthropic, &input);
        if case["unchanged"] == json!(true) {
            assert!(!changed, "{name}");
            assert_eq!(output, input, "{name}");
        } else {
            let expected = std::fs::read(dir.join(format!("{name}.expected.jsonl"))).unwrap();
            assert_eq!(messages_of(&output), messages_of(&expected), "{name}");
        }
        assert!(violations(&messages_of(&output)).is_empty(), "{name}");
        let (again, _, changed_again) = repair_bytes(Format::Anthropic, &output);
        assert!(
            !changed_again && again == output,
            "{name} is not a fixed point"
        );
    }
}

/// Ids with the characters providers put in them (`.`, `:`, `/`), drawn
/// from a small set so they repeat within turns and across them, as
/// Kimi-style providers' ids do.
const IDS: [&str; 7] = [
    "functions.eval:0",
    "functions.eval:1",
    "toolu_a",
    "a/b",
    "a:b",
    "a_b",
    "toolu_a_dup1",
];

/// A conversation of call turns, each call answered in order by the next
/// user turn: `(id, input, result)` per call.
fn id_conversation(turns: &[Vec<(usize, u8, u8)>]) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    for turn in turns {
        messages.push(
            json!({"role": "assistant", "content": turn.iter().map(|(id, input, _)| {
            json!({"type": "tool_use", "id": IDS[*id], "name": "eval", "input": {"n": input}})
        }).collect::<Vec<_>>()}),
        );
        messages.push(user(
            turn.iter()
                .map(|(id, _, out)| tr(IDS[*id], json!(format!("out {out}"))))
                .collect(),
        ));
    }
    messages
}

/// `(input, result)` of every answered call, read by the provider's rules
/// (ids unique, so by id).
fn answered_pairs(messages: &[Value]) -> Vec<(String, String)> {
    let mut calls = std::collections::HashMap::new();
    let mut out = Vec::new();
    for m in messages {
        for b in m["content"].as_array().into_iter().flatten() {
            match b["type"].as_str() {
                Some("tool_use") => {
                    calls.insert(b["id"].as_str().unwrap().to_owned(), b["input"].to_string());
                }
                Some("tool_result") => {
                    let input = calls[b["tool_use_id"].as_str().unwrap()].clone();
                    out.push((input, b["content"].to_string()));
                }
                _ => {}
            }
        }
    }
    out.sort();
    out
}

proptest! {
    /// PROTOCOL.md 11.2: repair's output keeps both of Anthropic's id
    /// rules, keeps every real result (each distinct call and result once),
    /// is idempotent and deterministic; `check` names each fault of the
    /// input in Anthropic's words.
    #[test]
    fn repair_maps_ids_to_anthropic_rules(
        turns in prop::collection::vec(prop::collection::vec((0usize..IDS.len(), 0u8..2, 0u8..2), 1..4), 1..7),
    ) {
        let dialect = Format::Anthropic.dialect();
        let input = id_conversation(&turns);
        let check = toolwire::transcript::check::check_messages(dialect, &input);
        // Every fault of the input, in the provider's words.
        let mut seen = std::collections::HashSet::new();
        for (m, msg) in input.iter().enumerate() {
            for (i, b) in msg["content"].as_array().into_iter().flatten().enumerate() {
                let (id, field) = match b["type"].as_str() {
                    Some("tool_use") => (b["id"].as_str().unwrap(), "tool_use.id"),
                    Some("tool_result") => (b["tool_use_id"].as_str().unwrap(), "tool_result.tool_use_id"),
                    _ => continue,
                };
                let said = |text: &str| check.violations.iter().any(|v| v.index == m && v.provider_error == text);
                if !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                    let words = format!("messages.{m}.content.{i}.{field}: String should match pattern '^[a-zA-Z0-9_-]+$'");
                    prop_assert!(said(&words), "{words}");
                }
                if field == "tool_use.id" && !seen.insert(id.to_owned()) {
                    let words = format!("messages.{m}.content.{i}: `tool_use` ids must be unique");
                    prop_assert!(said(&words), "{words}");
                }
            }
        }
        let repaired = toolwire::transcript::repair::repair_messages(Format::Anthropic, &input)
            .map(|(m, _)| m)
            .unwrap_or_else(|| input.clone());
        let after = toolwire::transcript::check::check_messages(dialect, &repaired);
        prop_assert!(after.ok, "{:?}", after.violations);
        // Every real result kept, an exact repetition of a pair (same id,
        // input and result) once.
        let distinct: std::collections::BTreeSet<(usize, u8, u8)> = turns.iter().flatten().copied().collect();
        let mut want: Vec<(String, String)> = distinct.iter()
            .map(|(_, i, o)| (json!({"n": i}).to_string(), json!(format!("out {o}")).to_string()))
            .collect();
        want.sort();
        prop_assert_eq!(answered_pairs(&repaired), want);
        // Idempotent, and a pure function of the conversation.
        prop_assert!(toolwire::transcript::repair::repair_messages(Format::Anthropic, &repaired).is_none());
        let again = toolwire::transcript::repair::repair_messages(Format::Anthropic, &input).map(|(m, _)| m);
        prop_assert_eq!(serde_json::to_string(&again.unwrap_or_else(|| input.clone())).unwrap(), serde_json::to_string(&repaired).unwrap());
    }
}

/// Found by the `dialects` fuzz target: OpenAI Chat reads `tool_calls` on a
/// message of any role (a misplaced call) but repair only removed them from
/// assistant messages, so it reported a drop it never made, sixteen times,
/// and a repaired conversation was "repaired" again forever. Now the call
/// goes, the message stays, and a second repair finds nothing to do.
#[test]
fn misplaced_chat_calls_are_dropped_and_repair_reaches_its_fixed_point() {
    use toolwire::transcript::repair::repair_messages;
    let messages = [
        json!({"role": "user", "content": "go"}),
        json!({"role": "assisvant", "tool_calls": [
            {"kd": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]}),
    ];
    let (repaired, report) = repair_messages(Format::OpenaiChat, &messages).unwrap();
    assert_eq!(report.dropped_tool_uses, [""]);
    assert_eq!(
        repaired,
        [
            json!({"role": "user", "content": "go"}),
            json!({"role": "assisvant"})
        ]
    );
    assert!(repair_messages(Format::OpenaiChat, &repaired).is_none());
}
