//! Every provider format end to end (PROTOCOL.md 10.3, 10.4): the pair
//! guard, synthetic results in each format's own shape, budget reapply
//! across turns and restarts, `transcript/check` with each provider's own
//! words, repair with exact output, and round trips of every block, part
//! and item kind.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq)]
enum F {
    Chat,
    Responses,
    Gemini,
}

const ALL: [F; 3] = [F::Chat, F::Responses, F::Gemini];

impl F {
    fn name(self) -> &'static str {
        match self {
            F::Chat => "openai-chat",
            F::Responses => "openai-responses",
            F::Gemini => "gemini",
        }
    }

    fn user(self, text: &str) -> Value {
        match self {
            F::Chat => json!({"role": "user", "content": text}),
            F::Responses => {
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
            }
            F::Gemini => json!({"role": "user", "parts": [{"text": text}]}),
        }
    }

    fn assistant(self, text: &str) -> Value {
        match self {
            F::Chat => json!({"role": "assistant", "content": text}),
            F::Responses => {
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]})
            }
            F::Gemini => json!({"role": "model", "parts": [{"text": text}]}),
        }
    }

    /// One model response calling `ids` (Responses: a reasoning item first).
    fn calls(self, ids: &[&str]) -> Vec<Value> {
        match self {
            F::Chat => vec![json!({
                "role": "assistant",
                "content": null,
                "tool_calls": ids.iter().map(|id| json!({
                    "id": id, "type": "function",
                    "function": {"name": "shell", "arguments": "{\"cmd\":\"ls\"}"}
                })).collect::<Vec<_>>()
            })],
            F::Responses => {
                let mut items = vec![json!({
                    "type": "reasoning", "id": format!("rs_{}", ids[0]),
                    "summary": [], "encrypted_content": "gAAAA"
                })];
                items.extend(ids.iter().map(|id| {
                    json!({
                        "type": "function_call", "id": format!("fc_{id}"), "call_id": id,
                        "name": "shell", "arguments": "{\"cmd\":\"ls\"}"
                    })
                }));
                items
            }
            F::Gemini => vec![json!({
                "role": "model",
                "parts": ids.iter().map(|id| json!({
                    "functionCall": {"id": id, "name": "shell", "args": {"cmd": "ls"}},
                    "thoughtSignature": "c2ln"
                })).collect::<Vec<_>>()
            })],
        }
    }

    fn results(self, items: &[(&str, &str)]) -> Vec<Value> {
        match self {
            F::Chat => items
                .iter()
                .map(|(id, text)| json!({"role": "tool", "tool_call_id": id, "content": text}))
                .collect(),
            F::Responses => items
                .iter()
                .map(|(id, text)| json!({"type": "function_call_output", "call_id": id, "output": text}))
                .collect(),
            F::Gemini => vec![json!({
                "role": "user",
                "parts": items.iter().map(|(id, text)| json!({
                    "functionResponse": {"id": id, "name": "shell", "response": {"output": text}}
                })).collect::<Vec<_>>()
            })],
        }
    }

    /// The synthetic results `pair/flush` writes, in the format's shape.
    fn synthetic(self, ids: &[&str], reason: &str) -> Vec<Value> {
        let text = format!("Tool call did not complete: {reason}. No result was produced.");
        match self {
            F::Chat => ids
                .iter()
                .map(|id| json!({"role": "tool", "tool_call_id": id, "content": text}))
                .collect(),
            F::Responses => ids
                .iter()
                .map(|id| json!({"type": "function_call_output", "call_id": id, "output": text}))
                .collect(),
            F::Gemini => vec![json!({
                "role": "user",
                "parts": ids.iter().map(|id| json!({
                    "functionResponse": {"id": id, "name": "shell", "response": {"error": text}}
                })).collect::<Vec<_>>()
            })],
        }
    }
}

async fn setup(options: Value) -> (tempfile::TempDir, MemClient, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), options).await;
    let path = dir.path().join(".toolwire/sessions/s.jsonl");
    (dir, c, path)
}

/// Append `messages` as a client of format `f` would: Responses items of
/// one response or one batch as one array, other formats one by one.
async fn append(c: &mut MemClient, f: F, messages: Vec<Value>) -> Value {
    if f == F::Responses {
        let message = if messages.len() == 1 {
            messages.into_iter().next().unwrap()
        } else {
            Value::Array(messages)
        };
        return c
            .call(
                "pair/append",
                json!({"sessionId": "s", "format": f.name(), "message": message}),
            )
            .await;
    }
    let mut last = Value::Null;
    for message in messages {
        last = c
            .call(
                "pair/append",
                json!({"sessionId": "s", "format": f.name(), "message": message}),
            )
            .await;
    }
    last
}

fn cat(parts: &[Vec<Value>]) -> Vec<Value> {
    parts.concat()
}

fn session_line(path: &Path, f: F) {
    assert_eq!(
        transcript_lines(path).first(),
        Some(&json!({"type": "session", "format": f.name()})),
        "{f:?}: a transcript starts with its format"
    );
}

#[tokio::test]
async fn the_five_guard_cases_in_every_format() {
    if !common::local_transcripts("the_five_guard_cases_in_every_format") {
        return;
    }
    for f in ALL {
        // Abort during tool execution: nothing but the format line.
        let (_d, mut c, path) = setup(json!({})).await;
        let r = append(&mut c, f, f.calls(&["t1", "t2"])).await;
        assert_eq!(r["status"], "buffered", "{f:?}");
        assert_eq!(r["pending"], json!(["t1", "t2"]), "{f:?}");
        let flushed = c
            .call(
                "pair/flush",
                json!({"sessionId": "s", "reason": "user abort"}),
            )
            .await;
        assert_eq!(flushed["discarded"], json!(["t1", "t2"]), "{f:?}");
        assert!(transcript_messages(&path).is_empty(), "{f:?}");
        session_line(&path, f);
        let late = f.results(&[("t1", "late")]);
        c.fails(
            "pair/append",
            json!({"sessionId": "s", "message": late[0]}),
            -32010,
        )
        .await;

        // Failover: discard writes nothing.
        let (_d, mut c, path) = setup(json!({})).await;
        append(&mut c, f, f.calls(&["t1"])).await;
        c.call(
            "pair/flush",
            json!({"sessionId": "s", "mode": "discard", "reason": "provider failover"}),
        )
        .await;
        assert!(transcript_messages(&path).is_empty(), "{f:?}");

        // A rate limit interrupts: the user messages stay, no orphan.
        let (_d, mut c, path) = setup(json!({})).await;
        append(&mut c, f, vec![f.user("fix the build")]).await;
        append(&mut c, f, f.calls(&["t1"])).await;
        let r = append(&mut c, f, vec![f.user("retry")]).await;
        assert_eq!(r["status"], "committed", "{f:?}");
        assert_eq!(r["flushed"]["discarded"], json!(["t1"]), "{f:?}");
        assert_eq!(
            transcript_messages(&path),
            vec![f.user("fix the build"), f.user("retry")],
            "{f:?}"
        );

        // A normal pair is committed calls first, in one append.
        let (_d, mut c, path) = setup(json!({})).await;
        append(&mut c, f, f.calls(&["t1", "t2"])).await;
        assert!(transcript_messages(&path).is_empty(), "{f:?}");
        let results = f.results(&[("t1", "one"), ("t2", "two")]);
        let r = append(&mut c, f, results.clone()).await;
        let expected = cat(&[f.calls(&["t1", "t2"]), results]);
        assert_eq!(r["status"], "committed", "{f:?}");
        assert_eq!(r["written"], json!(expected.len()), "{f:?}");
        assert_eq!(transcript_messages(&path), expected, "{f:?}");

        // First pair committed, second aborted: only the first.
        let (_d, mut c, path) = setup(json!({})).await;
        append(&mut c, f, f.calls(&["t1"])).await;
        append(&mut c, f, f.results(&[("t1", "ok")])).await;
        append(&mut c, f, f.calls(&["t2"])).await;
        c.call("pair/flush", json!({"sessionId": "s"})).await;
        assert_eq!(
            transcript_messages(&path),
            cat(&[f.calls(&["t1"]), f.results(&[("t1", "ok")])]),
            "{f:?}"
        );
    }
}

#[tokio::test]
async fn synthetic_mode_closes_pairs_in_each_formats_own_shape() {
    if !common::local_transcripts("synthetic_mode_closes_pairs_in_each_formats_own_shape") {
        return;
    }
    for f in ALL {
        let (_d, mut c, path) = setup(json!({"abortMode": "synthetic"})).await;
        append(&mut c, f, f.calls(&["t1", "t2"])).await;
        if f != F::Gemini {
            // Some results in: only the rest are synthesized.
            append(&mut c, f, f.results(&[("t1", "done")])).await;
        }
        let r = c
            .call(
                "pair/flush",
                json!({"sessionId": "s", "reason": "user abort"}),
            )
            .await;
        let open: &[&str] = if f == F::Gemini {
            &["t1", "t2"]
        } else {
            &["t2"]
        };
        assert_eq!(r["synthesized"], json!(open), "{f:?}");
        let mut expected = f.calls(&["t1", "t2"]);
        if f != F::Gemini {
            expected.extend(f.results(&[("t1", "done")]));
        }
        expected.extend(f.synthetic(open, "user abort"));
        assert_eq!(transcript_messages(&path), expected, "{f:?}");
        let check = c
            .call("transcript/check", json!({"path": path.to_str().unwrap()}))
            .await;
        assert_eq!(check["ok"], true, "{f:?}: {check}");
    }
}

#[tokio::test]
async fn a_session_keeps_its_format() {
    let (_d, mut c, _path) = setup(json!({})).await;
    append(&mut c, F::Gemini, vec![F::Gemini.user("hi")]).await;
    let err = c
        .fails(
            "budget/apply",
            json!({"sessionId": "s", "format": "openai-chat", "messages": []}),
            -32602,
        )
        .await;
    assert_eq!(err["data"]["path"], "format");
    // Without a format the session's own is used.
    let r = c
        .call(
            "pair/append",
            json!({"sessionId": "s", "message": F::Gemini.user("again")}),
        )
        .await;
    assert_eq!(r["status"], "committed");
    // An array is only for openai-responses.
    c.fails(
        "pair/append",
        json!({"sessionId": "s", "message": [F::Gemini.user("x")]}),
        -32602,
    )
    .await;
}

#[tokio::test]
async fn items_the_provider_accepts_between_call_and_output_are_no_interruption() {
    if !common::local_transcripts(
        "items_the_provider_accepts_between_call_and_output_are_no_interruption",
    ) {
        return;
    }
    let (_d, mut c, path) = setup(json!({})).await;
    let f = F::Responses;
    append(&mut c, f, f.calls(&["c1"])).await;
    let dev = json!({"type": "message", "role": "developer", "content": "be brief"});
    let r = append(&mut c, f, vec![dev.clone()]).await;
    assert_eq!(r["status"], "buffered");
    assert_eq!(r["pending"], json!(["c1"]));
    append(&mut c, f, f.results(&[("c1", "ok")])).await;
    assert_eq!(
        transcript_messages(&path),
        cat(&[
            f.calls(&["c1"]),
            vec![dev.clone()],
            f.results(&[("c1", "ok")])
        ])
    );
    // Discarded, the pair goes and the developer message stays.
    append(&mut c, f, f.calls(&["c2"])).await;
    append(&mut c, f, vec![dev.clone()]).await;
    c.call("pair/flush", json!({"sessionId": "s"})).await;
    let messages = transcript_messages(&path);
    assert_eq!(messages.last(), Some(&dev));
    assert_eq!(messages.len(), 5);
}

#[tokio::test]
async fn gemini_calls_without_ids_pair_by_order_and_name() {
    if !common::local_transcripts("gemini_calls_without_ids_pair_by_order_and_name") {
        return;
    }
    let (_d, mut c, path) = setup(json!({})).await;
    let call = |name: &str, n: u32| json!({"functionCall": {"name": name, "args": {"n": n}}});
    let resp = |name: &str, out: &str| json!({"functionResponse": {"name": name, "response": {"output": out}}});
    let model =
        json!({"role": "model", "parts": [call("read", 1), call("read", 2), call("ls", 3)]});
    let r = append(&mut c, F::Gemini, vec![model.clone()]).await;
    assert_eq!(r["pending"], json!(["read", "read", "ls"]));
    let first = json!({"role": "user", "parts": [resp("read", "one"), resp("ls", "three")]});
    let r = append(&mut c, F::Gemini, vec![first.clone()]).await;
    assert_eq!(r["pending"], json!(["read"]));
    // A third `read` answers nothing.
    c.fails(
        "pair/append",
        json!({"sessionId": "s", "message": {"role": "user", "parts": [resp("read", "x"), resp("read", "y")]}}),
        -32010,
    )
    .await;
    let second = json!({"role": "user", "parts": [resp("read", "two")]});
    append(&mut c, F::Gemini, vec![second.clone()]).await;
    assert_eq!(transcript_messages(&path), vec![model, first, second]);
    let check = c
        .call("transcript/check", json!({"path": path.to_str().unwrap()}))
        .await;
    assert_eq!(check["ok"], true, "{check}");
    // One response short: the counts differ.
    let short = json!([
        {"role": "model", "parts": [call("read", 1), call("read", 2)]},
        {"role": "user", "parts": [resp("read", "one")]},
    ]);
    let check = c
        .call(
            "transcript/check",
            json!({"messages": short, "format": "gemini"}),
        )
        .await;
    assert_eq!(check["violations"][0]["kind"], "missingResult");
    assert!(
        check["violations"][0]["providerError"]
            .as_str()
            .unwrap()
            .starts_with("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
    );
}

/// A conversation of `f` with one result of `size` characters per turn.
fn conversation(f: F, turns: usize, size: usize) -> Vec<Value> {
    let mut out = vec![f.user("start")];
    for t in 0..turns {
        let id = format!("call{t}");
        out.extend(f.calls(&[&id]));
        let body: String = (0..size)
            .map(|i| {
                if i % 80 == 79 {
                    '\n'
                } else {
                    (b'a' + (i % 26) as u8) as char
                }
            })
            .collect();
        out.extend(f.results(&[(&id, &body)]));
        out.push(f.assistant("next"));
    }
    out
}

#[tokio::test]
async fn budget_reapply_is_byte_identical_across_turns_and_restarts() {
    if !common::local_transcripts("budget_reapply_is_byte_identical_across_turns_and_restarts") {
        return;
    }
    for f in ALL {
        let dir = tempfile::tempdir().unwrap();
        let server = new_server();
        let (mut c, task) = connect(server.clone());
        c.initialize(dir.path(), json!({})).await;
        let apply = |messages: Vec<Value>| json!({"sessionId": "s", "format": f.name(), "messages": messages});
        let first = c
            .call("budget/apply", apply(conversation(f, 1, 60_000)))
            .await;
        assert_eq!(first["records"].as_array().unwrap().len(), 1, "{f:?}");
        let text = first.to_string();
        assert!(text.contains("<persisted-output>"), "{f:?}");
        let sent: Vec<Value> = first["messages"].as_array().unwrap().clone();
        let again = c
            .call("budget/apply", apply(conversation(f, 1, 60_000)))
            .await;
        assert_eq!(again["messages"].to_string(), first["messages"].to_string());
        assert_eq!(again["records"], json!([]), "{f:?}");
        // Next turn: what was sent stays byte for byte.
        let second = c
            .call("budget/apply", apply(conversation(f, 2, 60_000)))
            .await;
        let now = second["messages"].as_array().unwrap();
        for (i, m) in sent.iter().enumerate() {
            assert_eq!(now[i].to_string(), m.to_string(), "{f:?} message {i}");
        }
        let session_file = dir.path().join(".toolwire/sessions/s.jsonl");
        session_line(&session_file, f);
        c.close().await;
        task.await.unwrap();
        // The old server lets go of its transcripts, as on exit.
        server.registry.close_all().await;
        // A restarted server resumes the decisions from the journal.
        let (mut c, _t) = connect(new_server());
        c.initialize(dir.path(), json!({})).await;
        let third = c
            .call(
                "budget/apply",
                json!({"sessionId": "s", "messages": conversation(f, 2, 60_000)}),
            )
            .await;
        assert_eq!(
            third["messages"].to_string(),
            second["messages"].to_string(),
            "{f:?}"
        );
        assert_eq!(third["records"], json!([]), "{f:?}");
    }
}

fn write_transcript(path: &Path, f: F, messages: &[Value]) {
    let mut text = format!("{{\"type\":\"session\",\"format\":\"{}\"}}\n", f.name());
    for m in messages {
        text.push_str(&json!({"type": "message", "message": m}).to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// Every fault kind of `f`, each in a conversation of its own, with the
/// provider's words it must be reported with.
fn faults(f: F) -> Vec<(&'static str, Vec<Value>, &'static str)> {
    let mut out = vec![
        (
            "missingResult",
            cat(&[f.calls(&["a"]), vec![f.user("stop")]]),
            match f {
                F::Chat => {
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: a"
                }
                F::Responses => "No tool output found for function call a.",
                F::Gemini => {
                    "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
                }
            },
        ),
        (
            "unexpectedResult",
            cat(&[vec![f.user("hi")], f.results(&[("z", "x")])]),
            match f {
                F::Chat => {
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
                }
                F::Responses => "No tool call found for function call output with call_id z.",
                F::Gemini => {
                    "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
                }
            },
        ),
        (
            "duplicateResult",
            cat(&[f.calls(&["a"]), f.results(&[("a", "x"), ("a", "y")])]),
            match f {
                F::Chat => {
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
                }
                F::Responses => "No tool call found for function call output with call_id a.",
                F::Gemini => {
                    "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
                }
            },
        ),
        (
            "resultAfterContent",
            cat(&[
                f.calls(&["a"]),
                vec![f.user("wait")],
                f.results(&[("a", "x")]),
            ]),
            match f {
                F::Chat => {
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: a"
                }
                F::Responses => "No tool output found for function call a.",
                F::Gemini => {
                    "Please ensure that function response turn comes immediately after a function call turn."
                }
            },
        ),
    ];
    match f {
        F::Chat => out.push((
            "wrongRole",
            vec![json!({"role": "user", "content": "x", "tool_calls": [{"id": "q", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]})],
            "Additional properties are not allowed ('tool_calls' was unexpected)",
        )),
        F::Gemini => out.push((
            "wrongRole",
            vec![json!({"role": "user", "parts": [{"functionCall": {"id": "q", "name": "shell", "args": {}}}]})],
            "Please ensure that function call turn comes immediately after a user turn or after a function response turn.",
        )),
        // Responses items carry their side in their type: no wrong role.
        F::Responses => {}
    }
    out
}

#[tokio::test]
async fn check_reports_each_providers_own_error_for_each_fault() {
    let (dir, mut c, _path) = setup(json!({})).await;
    for f in ALL {
        for (kind, messages, words) in faults(f) {
            let path = dir.path().join(format!("{}-{kind}.jsonl", f.name()));
            write_transcript(&path, f, &messages);
            // By file (its session line names the format) and by messages.
            let by_file = c
                .call("transcript/check", json!({"path": path.to_str().unwrap()}))
                .await;
            let by_messages = c
                .call(
                    "transcript/check",
                    json!({"messages": messages, "format": f.name()}),
                )
                .await;
            assert_eq!(by_file, by_messages, "{f:?} {kind}");
            assert_eq!(by_file["ok"], false, "{f:?} {kind}");
            let v = &by_file["violations"][0];
            assert_eq!(v["kind"], kind, "{f:?}: {by_file}");
            let error = v["providerError"].as_str().unwrap();
            assert!(error.starts_with(words), "{f:?} {kind}: {error}");
            // The CLI says the same and exits 1.
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
                .args(["check", path.to_str().unwrap()])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1), "{f:?} {kind}");
            assert!(String::from_utf8_lossy(&out.stdout).contains(words));
        }
    }
}

#[tokio::test]
async fn repair_fixes_every_fault_kind_exactly_in_every_format() {
    let (dir, mut c, _path) = setup(json!({})).await;
    for f in ALL {
        // Calls a and b, only a answered; a duplicate; an orphan after
        // content; a late result moved to the front of its turn; a call
        // in the last turn never answered.
        let damaged = cat(&[
            vec![f.user("go")],
            f.calls(&["a", "b"]),
            f.results(&[("a", "A")]),
            f.results(&[("a", "again")]),
            vec![f.assistant("ok")],
            vec![f.user("later")],
            f.results(&[("z", "orphan")]),
            f.calls(&["c"]),
            vec![f.user("wait")],
            f.results(&[("c", "C")]),
            f.calls(&["d"]),
        ]);
        let path = dir.path().join(format!("{}-repair.jsonl", f.name()));
        write_transcript(&path, f, &damaged);
        let r = c
            .call("transcript/repair", json!({"path": path.to_str().unwrap()}))
            .await;
        assert_eq!(r["changed"], true, "{f:?}");
        let mut dropped_uses = vec!["b", "d"];
        dropped_uses.sort();
        let mut got: Vec<String> = serde_json::from_value(r["droppedToolUses"].clone()).unwrap();
        got.sort();
        assert_eq!(got, dropped_uses, "{f:?}");
        let mut got: Vec<String> = serde_json::from_value(r["droppedToolResults"].clone()).unwrap();
        got.sort();
        assert_eq!(got, vec!["a", "z"], "{f:?}");
        let expected = cat(&[
            vec![f.user("go")],
            f.calls(&["a"]),
            f.results(&[("a", "A")]),
            vec![f.assistant("ok")],
            vec![f.user("later")],
            f.calls(&["c"]),
            f.results(&[("c", "C")]),
            vec![f.user("wait")],
        ]);
        // The Responses reasoning item of the dropped call `d` went with
        // it; the one of `a` stayed with `a`.
        let lines = transcript_lines(&path);
        assert_eq!(lines[0], json!({"type": "session", "format": f.name()}));
        assert_eq!(transcript_messages(&path), expected, "{f:?}");
        // Idempotent: the repaired file is valid and left alone.
        let again = c
            .call("transcript/repair", json!({"path": path.to_str().unwrap()}))
            .await;
        assert_eq!(again["changed"], false, "{f:?}");
        let check = c
            .call("transcript/check", json!({"path": path.to_str().unwrap()}))
            .await;
        assert_eq!(check["ok"], true, "{f:?}");
        let _ = std::fs::remove_file(path.with_extension("jsonl.bak"));
    }
}

/// A conversation with every block, part or item kind of the provider,
/// and one result large enough to be persisted (the last of `results`).
fn every_kind(f: F, big: &str) -> Vec<Value> {
    match f {
        F::Chat => vec![
            json!({"role": "system", "content": "You are terse.", "name": "sys"}),
            json!({"role": "developer", "content": [{"type": "text", "text": "rules"}]}),
            json!({"role": "user", "content": [
                {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "high"}},
                {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
                {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}}
            ]}),
            json!({"role": "assistant", "content": null, "refusal": null, "reasoning_content": "think",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":1.50}"}},
                {"id": "call_2", "type": "custom", "custom": {"name": "patch", "input": "*** Begin"}}
            ]}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "small"}]}),
            json!({"role": "tool", "tool_call_id": "call_2", "content": big, "x_extra": {"n": [1, -0.5]}}),
            json!({"role": "assistant", "content": "done", "audio": {"id": "audio_1"}, "annotations": []}),
        ],
        F::Responses => vec![
            json!({"type": "message", "role": "developer", "content": "rules"}),
            json!({"role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "auto"},
                {"type": "input_file", "file_id": "file-1"}
            ]}),
            json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}], "encrypted_content": "gAAA"}),
            json!({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}}),
            json!({"type": "mcp_list_tools", "id": "ml_1", "server_label": "gh", "tools": []}),
            json!({"type": "mcp_call", "id": "mc_1", "server_label": "gh", "name": "x", "arguments": "{}", "output": "y"}),
            json!({"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBO"}),
            json!({"type": "code_interpreter_call", "id": "ci_1", "code": "1+1", "outputs": []}),
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read", "arguments": "{}", "status": "completed"}),
            json!({"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "patch", "input": "*** Begin"}),
            json!({"type": "local_shell_call", "id": "lsh_1", "call_id": "call_3", "status": "completed", "action": {"type": "exec", "command": ["ls"]}}),
            json!({"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "small"}]}),
            json!({"type": "custom_tool_call_output", "call_id": "call_2", "output": "patched"}),
            json!({"type": "function_call_output", "call_id": "call_3", "output": big}),
            json!({"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                "content": [{"type": "output_text", "text": "done", "annotations": [{"type": "url_citation", "url": "u"}]}]}),
        ],
        F::Gemini => vec![
            json!({"role": "user", "parts": [
                {"text": "look"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
                {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/a.pdf"}}
            ]}),
            json!({"role": "model", "parts": [
                {"text": "plan", "thought": true},
                {"executableCode": {"language": "PYTHON", "code": "1+1"}},
                {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "2"}},
                {"functionCall": {"name": "read", "args": {"p": 1.50}}, "thoughtSignature": "c2lnMQ=="},
                {"functionCall": {"id": "fc-2", "name": "grep", "args": {}}}
            ]}),
            json!({"role": "user", "parts": [
                {"functionResponse": {"name": "read", "response": {"result": {"lines": 3}}}},
                {"functionResponse": {"id": "fc-2", "name": "grep", "response": {"output": big}, "willContinue": false}}
            ]}),
            json!({"role": "model", "parts": [{"text": "done", "thoughtSignature": "c2ln"}]}),
        ],
    }
}

#[tokio::test]
async fn every_kind_round_trips_through_budget_and_the_guard() {
    if !common::local_transcripts("every_kind_round_trips_through_budget_and_the_guard") {
        return;
    }
    let big: String = "x".repeat(70_000);
    for f in ALL {
        let (_d, mut c, path) = setup(json!({})).await;
        let input = every_kind(f, &big);
        let out = c
            .call(
                "budget/apply",
                json!({"sessionId": "s", "format": f.name(), "messages": input}),
            )
            .await;
        let out = out["messages"].as_array().unwrap();
        assert_eq!(out.len(), input.len());
        let mut replaced = 0;
        for (sent, got) in input.iter().zip(out) {
            if serde_json::to_string(sent).unwrap() == serde_json::to_string(got).unwrap() {
                continue;
            }
            // Only the big result differs, and only in its text.
            replaced += 1;
            let text = got.to_string();
            assert!(text.contains("<persisted-output>"), "{f:?}: {text}");
            let mut restored = got.clone();
            match f {
                F::Chat => restored["content"] = json!(big),
                F::Responses => restored["output"] = json!(big),
                F::Gemini => {
                    restored["parts"][1]["functionResponse"]["response"] = json!({"output": big})
                }
            }
            assert_eq!(restored.to_string(), sent.to_string(), "{f:?}");
        }
        assert_eq!(replaced, 1, "{f:?}");
        // The guard writes every message as it came.
        match f {
            F::Chat => {
                for m in &input {
                    append(&mut c, f, vec![m.clone()]).await;
                }
            }
            F::Responses => {
                append(&mut c, f, input[..2].to_vec()).await;
                append(&mut c, f, input[2..11].to_vec()).await;
                append(&mut c, f, input[11..14].to_vec()).await;
                append(&mut c, f, input[14..].to_vec()).await;
            }
            F::Gemini => {
                for m in &input {
                    append(&mut c, f, vec![m.clone()]).await;
                }
            }
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let written: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("{\"type\":\"message\""))
            .collect();
        let expected: Vec<String> = input
            .iter()
            .map(|m| json!({"type": "message", "message": m}).to_string())
            .collect();
        assert_eq!(written, expected, "{f:?}");
    }
}

fn toolwire(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .output()
        .unwrap()
}

fn data(rel: &str) -> String {
    format!("{}/tests/data/import/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// Each agent's session file, its format, and the call it leaves
/// unanswered (none for the legacy Gemini CLI file).
fn agent_files() -> Vec<(String, &'static str, Option<&'static str>)> {
    vec![
        (
            data("claude-code/session.jsonl"),
            "anthropic",
            Some("toolu_01E"),
        ),
        (
            data("codex/rollout-2026-11-20T09-57-59-019a8f3e-2b7c-7d10-9c4e-5a1b2c3d4e5f.jsonl"),
            "openai-responses",
            Some("call_B1"),
        ),
        (
            data("gemini-cli/session-2026-11-20T11-00-5d1e9f2a.jsonl"),
            "gemini",
            Some("run_shell_command-1763636950000-d4"),
        ),
        (
            data("gemini-cli/session-2025-09-02T08-00-0c4f7b21.json"),
            "gemini",
            None,
        ),
        (
            data("openclaw/e2b7c4d1-6f3a-4a8e-9b21-3c5d7e9f1a2b.jsonl"),
            "anthropic",
            Some("toolu_P4"),
        ),
    ]
}

#[tokio::test]
async fn other_agents_files_are_checked_repaired_reconstructed_and_replayed_by_content() {
    let (dir, mut c, _path) = setup(json!({})).await;
    for (i, (file, format, unanswered)) in agent_files().into_iter().enumerate() {
        let before = std::fs::read(&file).unwrap();
        // check: the provider's words for the unanswered call.
        let check = c.call("transcript/check", json!({"path": file})).await;
        match unanswered {
            Some(id) => {
                assert_eq!(check["ok"], false, "{file}");
                assert_eq!(check["violations"][0]["ids"], json!([id]), "{file}");
                assert_eq!(check["violations"][0]["kind"], "missingResult");
            }
            None => assert_eq!(check["ok"], true, "{file}: {check}"),
        }
        let out = toolwire(&["check", &file]);
        assert_eq!(
            out.status.code(),
            Some(if unanswered.is_some() { 1 } else { 0 })
        );
        // repair --dry-run reports it; a real repair refuses to rewrite
        // another agent's file.
        let r = c
            .call("transcript/repair", json!({"path": file, "dryRun": true}))
            .await;
        let expected: Vec<&str> = unanswered.into_iter().collect();
        assert_eq!(r["droppedToolUses"], json!(expected), "{file}");
        let err = c
            .fails("transcript/repair", json!({"path": file}), -32602)
            .await;
        assert!(
            err["message"].as_str().unwrap().contains("toolwire import"),
            "{err}"
        );
        assert_eq!(std::fs::read(&file).unwrap(), before, "nothing written");
        // state/reconstruct reads its calls and results in its format.
        let sid = format!("agent{i}");
        let r = c
            .call(
                "state/reconstruct",
                json!({"sessionId": sid, "transcript": file}),
            )
            .await;
        assert!(r["messagesRead"].as_u64().unwrap() > 0, "{file}: {r}");
        assert!(r["seenCount"].as_u64().unwrap() > 0, "{file}: {r}");
        c.fails(
            "budget/apply",
            json!({"sessionId": sid, "format": if format == "gemini" { "anthropic" } else { "gemini" }, "messages": []}),
            -32602,
        )
        .await;
        // replay drives it through a real server; an unanswered call ends
        // as a discarded pair.
        let data_dir = dir.path().join(format!("replay{i}"));
        let out = toolwire(&[
            "replay",
            &file,
            "--json",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(summary["pairsCommitted"].as_u64().unwrap() > 0, "{summary}");
        assert_eq!(
            summary["pairsDiscarded"],
            json!(usize::from(unanswered.is_some())),
            "{file}: {summary}"
        );
        let transcript = data_dir.join("sessions/replay.jsonl");
        if format != "anthropic" {
            session_line(
                &transcript,
                if format == "gemini" {
                    F::Gemini
                } else {
                    F::Responses
                },
            );
        }
        assert_eq!(
            c.call("transcript/check", json!({"path": transcript}))
                .await["ok"],
            true
        );
    }
    // A file of no known format is an error naming its first line, in
    // every reader.
    let odd = dir.path().join("events.jsonl");
    std::fs::write(&odd, "{\"type\":\"heartbeat\",\"at\":1}\n").unwrap();
    let odd = odd.to_str().unwrap();
    for (method, params) in [
        ("transcript/check", json!({"path": odd})),
        ("transcript/repair", json!({"path": odd, "dryRun": true})),
        (
            "state/reconstruct",
            json!({"sessionId": "odd", "transcript": odd}),
        ),
    ] {
        let err = c.fails(method, params, -32602).await;
        assert!(
            err["message"].as_str().unwrap().contains("\"heartbeat\""),
            "{method}: {err}"
        );
    }
    let out = toolwire(&["replay", odd]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("heartbeat"));
}

#[test]
fn replay_runs_the_demo_and_synthetic_sessions_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    for f in ALL {
        for extra in [&[][..], &["--synthetic", "12"][..]] {
            let data_dir = dir.path().join(format!("{}{}", f.name(), extra.len()));
            let mut args = vec![
                "replay",
                "--format",
                f.name(),
                "--json",
                "--data-dir",
                data_dir.to_str().unwrap(),
            ];
            args.extend_from_slice(extra);
            let out = toolwire(&args);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(
                summary["resultsPersisted"].as_u64().unwrap() > 0,
                "{summary}"
            );
            assert!(summary["pairsCommitted"].as_u64().unwrap() > 0, "{summary}");
            let transcript = data_dir.join("sessions/replay.jsonl");
            session_line(&transcript, f);
            let check = toolwire(&["check", transcript.to_str().unwrap()]);
            assert!(
                check.status.success(),
                "{}",
                String::from_utf8_lossy(&check.stdout)
            );
            // The same recording gives the same session, byte for byte.
            if extra.is_empty() {
                let again_dir = dir.path().join(format!("{}again", f.name()));
                let mut again = args.clone();
                again[5] = again_dir.to_str().unwrap();
                assert!(toolwire(&again).status.success());
                // Byte for byte, but for the data directory in previews.
                let text = |d: &Path| {
                    std::fs::read_to_string(d.join("sessions/replay.jsonl"))
                        .unwrap()
                        .replace(d.to_str().unwrap(), "DATA")
                };
                assert_eq!(text(&data_dir), text(&again_dir), "{f:?}");
            }
        }
    }
}
