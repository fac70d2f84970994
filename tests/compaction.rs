//! Server-side compaction (PROTOCOL.md 11.2): an Anthropic `compaction`
//! block and an OpenAI Responses `compaction` item mark where the provider
//! drops what came before. Calls before, across and after one, in both
//! formats, through check, repair, the guard and the budget.

mod common;

use common::*;
use serde_json::{Value, json};
use toolwire::format::Format;
use toolwire::transcript::check::check_messages;
use toolwire::transcript::repair::repair_messages;

fn call(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "make"}})
}
fn result(id: &str, text: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": text})
}
fn compaction() -> Value {
    json!({"type": "compaction", "content": "Summary: the build failed in crate m3; fixing it."})
}
fn a(blocks: Vec<Value>) -> Value {
    json!({"role": "assistant", "content": blocks})
}
fn u(blocks: Vec<Value>) -> Value {
    json!({"role": "user", "content": blocks})
}

fn kinds(format: Format, messages: &[Value]) -> Vec<(usize, String)> {
    check_messages(format.dialect(), messages)
        .violations
        .into_iter()
        .map(|v| (v.index, v.kind))
        .collect()
}

/// Anthropic, the matrix: a call before the compaction block (in an
/// earlier message, or earlier in the same one) waits for nothing; its
/// result after the block is an orphan; a call after the block is paired
/// as ever. Repair never touches what stands before the block.
#[test]
fn anthropic_calls_before_across_and_after_a_compaction_block() {
    let f = Format::Anthropic;
    // Before: the reproduction 4 (a call with no result, then the
    // compaction): valid, left alone.
    for before in [
        vec![
            user_text("go"),
            a(vec![call("toolu_A")]),
            a(vec![
                compaction(),
                json!({"type": "text", "text": "Continuing."}),
            ]),
            user_text("next"),
        ],
        vec![
            user_text("go"),
            a(vec![call("toolu_A"), compaction()]),
            user_text("next"),
        ],
    ] {
        assert_eq!(kinds(f, &before), []);
        assert!(repair_messages(f, &before).is_none());
    }
    // Across: the result after the block answers a call the provider
    // dropped: an orphan, dropped with its now empty message; nothing
    // before the block changes.
    let across = vec![
        user_text("go"),
        a(vec![call("toolu_A")]),
        a(vec![compaction()]),
        u(vec![result("toolu_A", "out")]),
        a(vec![json!({"type": "text", "text": "ok"})]),
    ];
    assert_eq!(kinds(f, &across), [(3, "unexpectedResult".to_owned())]);
    let (repaired, report) = repair_messages(f, &across).unwrap();
    assert_eq!(report.dropped_tool_results, ["toolu_A"]);
    assert_eq!(report.dropped_tool_uses, Vec::<String>::new());
    assert_eq!(repaired[..3], across[..3]);
    assert_eq!(repaired.len(), 4);
    // After: paired as ever; a missing result is dropped, the block kept.
    let after = vec![
        user_text("go"),
        a(vec![call("toolu_A")]),
        a(vec![compaction(), call("toolu_B")]),
        user_text("stop"),
    ];
    assert_eq!(kinds(f, &after), [(2, "missingResult".to_owned())]);
    let (repaired, report) = repair_messages(f, &after).unwrap();
    assert_eq!(report.dropped_tool_uses, ["toolu_B"]);
    assert_eq!(repaired[2], a(vec![compaction()]));
    assert_eq!(repaired[..2], after[..2]);
    // Only the newest compaction counts.
    let twice = vec![
        a(vec![compaction(), call("toolu_A")]),
        a(vec![compaction()]),
        u(vec![result("toolu_A", "late")]),
    ];
    assert_eq!(kinds(f, &twice), [(2, "unexpectedResult".to_owned())]);
}

/// Ids before the block are never rewritten (nor reported: the provider
/// drops them); a call after it that reuses one of them is renamed, since
/// nothing says the provider's uniqueness check skips dropped blocks.
#[test]
fn anthropic_ids_are_judged_from_the_compaction_on() {
    let f = Format::Anthropic;
    let messages = vec![
        a(vec![call("functions.eval:0")]),
        u(vec![result("functions.eval:0", "one")]),
        a(vec![compaction(), call("functions.eval:0")]),
        u(vec![result("functions.eval:0", "two")]),
    ];
    let faults = kinds(f, &messages);
    assert_eq!(
        faults,
        [
            (2, "invalidToolUseId".to_owned()),
            (2, "duplicateToolUseId".to_owned()),
            (3, "invalidToolUseId".to_owned())
        ]
    );
    let (repaired, _) = repair_messages(f, &messages).unwrap();
    assert_eq!(repaired[..2], messages[..2]);
    assert_eq!(repaired[2]["content"][1]["id"], json!("functions_eval_0"));
    assert_eq!(
        repaired[3]["content"][0]["tool_use_id"],
        json!("functions_eval_0")
    );
    assert!(check_messages(f.dialect(), &repaired).ok);
}

/// The same matrix in the Responses API, where the compaction is an item.
#[test]
fn responses_calls_before_across_and_after_a_compaction_item() {
    let f = Format::OpenaiResponses;
    let fc = |id: &str| json!({"type": "function_call", "call_id": id, "name": "shell", "arguments": "{}"});
    let out = |id: &str| json!({"type": "function_call_output", "call_id": id, "output": "done"});
    let item = json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-opaque"});
    let msg = json!({"role": "user", "content": "next"});
    let before = vec![msg.clone(), fc("call_A"), item.clone(), msg.clone()];
    assert_eq!(kinds(f, &before), []);
    assert!(repair_messages(f, &before).is_none());
    let across = vec![msg.clone(), fc("call_A"), item.clone(), out("call_A")];
    assert_eq!(kinds(f, &across), [(3, "unexpectedResult".to_owned())]);
    let (repaired, _) = repair_messages(f, &across).unwrap();
    assert_eq!(repaired, across[..3]);
    let after = vec![item.clone(), fc("call_B"), out("call_B"), msg.clone()];
    assert_eq!(kinds(f, &after), []);
    let unanswered = vec![fc("call_A"), item.clone(), fc("call_B"), msg.clone()];
    let (repaired, report) = repair_messages(f, &unanswered).unwrap();
    assert_eq!(report.dropped_tool_uses, ["call_B"]);
    assert_eq!(repaired, [fc("call_A"), item, msg]);
}

/// The guard: a response that compacts the conversation leaves the pending
/// pair before its block, where the provider no longer reads it, and only
/// calls after the block wait for results.
#[tokio::test]
async fn the_guard_reads_history_from_the_compaction_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let append = |m: Value| json!({"sessionId": "s", "message": m});
    let r = c
        .call("pair/append", append(a(vec![call("toolu_A")])))
        .await;
    assert_eq!(r["pending"], json!(["toolu_A"]));
    // Compacted in the next response: A no longer waits; B does.
    let r = c
        .call(
            "pair/append",
            append(a(vec![compaction(), call("toolu_B")])),
        )
        .await;
    assert_eq!(r["pending"], json!(["toolu_B"]));
    assert!(r.get("flushed").is_none_or(Value::is_null), "{r}");
    // A's result is an orphan now.
    c.fails(
        "pair/append",
        append(u(vec![result("toolu_A", "x")])),
        -32010,
    )
    .await;
    let r = c
        .call("pair/append", append(u(vec![result("toolu_B", "y")])))
        .await;
    assert_eq!(r["status"], json!("committed"));
    // A call before the block in the same message waits for nothing.
    let r = c
        .call(
            "pair/append",
            append(a(vec![call("toolu_C"), compaction()])),
        )
        .await;
    assert_eq!(r["pending"], json!([]));
    if !local_transcripts("the_guard_reads_history_from_the_compaction_on") {
        return;
    }
    let path = dir.path().join(".toolwire/sessions/s.jsonl");
    let check = c
        .call(
            "transcript/check",
            json!({"path": path.display().to_string()}),
        )
        .await;
    assert_eq!(check["ok"], json!(true), "{check}");
}

/// The budget persists nothing before the compaction (the model never sees
/// it) and keeps putting back what it decided there before the
/// compaction came; the block passes byte for byte.
#[tokio::test]
async fn the_budget_decides_nothing_before_the_compaction_and_keeps_what_it_decided() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let big = |n: usize| "log line\n".repeat(n);
    let turn1 = vec![
        a(vec![call("toolu_1")]),
        u(vec![result("toolu_1", &big(8000))]),
    ];
    let first = c
        .call("budget/apply", json!({"sessionId": "s", "messages": turn1}))
        .await;
    assert_eq!(first["persisted"].as_array().unwrap().len(), 1);
    let mut later = turn1.clone();
    later.extend([
        a(vec![call("toolu_2")]),
        u(vec![result("toolu_2", &big(9000))]),
        a(vec![compaction(), call("toolu_3")]),
        u(vec![result("toolu_3", &big(10_000))]),
    ]);
    let r = c
        .call("budget/apply", json!({"sessionId": "s", "messages": later}))
        .await;
    let persisted: Vec<&str> = r["persisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["toolUseId"].as_str().unwrap())
        .collect();
    assert_eq!(persisted, ["toolu_3"], "{r}");
    // The decision made before the compaction is put back, byte for byte.
    assert_eq!(r["messages"][1], first["messages"][1]);
    // The result before it that was never decided is sent whole.
    assert_eq!(r["messages"][3], later[3]);
    // The compaction block passes unchanged.
    assert_eq!(r["messages"][4]["content"][0], compaction());
    // Nothing was decided for toolu_2: a state without it.
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"], json!(["toolu_1", "toolu_3"]));
}

/// Issue 31, reproduction 4, through the CLI: a transcript with a call
/// before a compaction block and no result is valid for `toolwire check`,
/// and `toolwire repair` leaves it byte for byte.
#[test]
fn the_cli_reads_a_compacted_transcript_as_the_provider_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let lines: String = [
        user_text("go"),
        a(vec![call("toolu_A")]),
        a(vec![
            compaction(),
            json!({"type": "text", "text": "Continuing."}),
        ]),
        user_text("next"),
    ]
    .iter()
    .map(|m| format!("{}\n", json!({"type": "message", "message": m})))
    .collect();
    std::fs::write(&path, &lines).unwrap();
    let run = |cmd: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .arg(cmd)
            .arg(&path)
            .output()
            .unwrap()
    };
    let check = run("check");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let repair = run("repair");
    assert!(repair.status.success());
    assert!(String::from_utf8_lossy(&repair.stdout).contains("valid, nothing to change"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), lines);
}
