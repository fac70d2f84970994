//! The file commands read their file as a stream (issue 52): `check`,
//! `repair --dry-run` and `import --from messages` of a generated 30 MB
//! file, and `import --from <agent>` and `check` of a generated 16 MB
//! session of each agent (Gemini CLI's log and its older single-JSON
//! record both), each peak under 64 MB plus the file's largest line, the
//! goal docs/benchmarks.md measures on 56 MB files. An agent's import must
//! also be the transcript its generator expects, byte for byte. A memory bound, read from the
//! kernel (the child's `ru_maxrss`, its VmHWM), never a time. Before the
//! streaming these commands held the file parsed: about 17 times its size.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Call/result pairs: about 30 MB of transcript.
const PAIRS: usize = 100_000;

/// A pair of messages: an assistant's call and the user's result; one call
/// in 1,000 left unanswered, so that repair has something to do.
fn pair(i: usize) -> (String, String) {
    let call = format!(
        r#"{{"role":"assistant","content":[{{"type":"text","text":"step {i}"}},{{"type":"tool_use","id":"toolu_{i:010}","name":"Read","input":{{"path":"src/m{}.rs"}}}}]}}"#,
        i % 977
    );
    let result = if i % 1000 == 7 {
        format!(r#"{{"role":"user","content":"go on {i}"}}"#)
    } else {
        format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{i:010}","content":"fn f{i}() {{ {} }}"}}]}}"#,
            i * 7919 % 100_003
        )
    };
    (call, result)
}

/// Write the transcript (`wrapped`) or the bare messages; the largest line.
fn generate(path: &Path, wrapped: bool) -> usize {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut largest = 0;
    for i in 0..PAIRS {
        let (call, result) = pair(i);
        for message in [call, result] {
            let line = if wrapped {
                format!(r#"{{"type":"message","message":{message}}}"#)
            } else {
                message
            };
            largest = largest.max(line.len() + 1);
            writeln!(out, "{line}").unwrap();
        }
    }
    out.flush().unwrap();
    largest
}

/// Run the binary with `args`; its exit code and peak resident set in
/// bytes, as the kernel counted it for that child alone.
// The child is reaped by wait4, which `Child::wait` cannot stand in for:
// only wait4 returns the child's own rusage.
#[allow(clippy::zombie_processes)]
fn peak(args: &[&std::ffi::OsStr], home: &Path) -> (i32, u64) {
    let child = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, and the child is ours and not yet
    // reaped (wait4 reaps it; `child` is never waited on after).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64 * 1024)
}

#[test]
fn check_repair_and_import_of_a_30_mb_file_peak_under_64_mb_plus_its_largest_line() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("pairs.jsonl");
    let messages = dir.path().join("messages.jsonl");
    let line = generate(&transcript, true);
    let message_line = generate(&messages, false);
    assert!(std::fs::metadata(&transcript).unwrap().len() > 25 << 20);
    let out = dir.path().join("imported.jsonl");
    let cases: [(&str, Vec<&std::ffi::OsStr>, usize, i32); 3] = [
        (
            "check",
            vec!["check".as_ref(), transcript.as_os_str()],
            line,
            1,
        ),
        (
            "repair --dry-run",
            vec![
                "repair".as_ref(),
                "--dry-run".as_ref(),
                transcript.as_os_str(),
            ],
            line,
            0,
        ),
        (
            "import --from messages",
            vec![
                "import".as_ref(),
                "--from".as_ref(),
                "messages".as_ref(),
                messages.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
            ],
            message_line,
            0,
        ),
    ];
    for (name, args, largest, code) in cases {
        let (exit, peak) = peak(&args, dir.path());
        assert_eq!(exit, code, "{name} exit status");
        let bound = (64 << 20) + largest as u64;
        assert!(
            peak <= bound,
            "{name} peaked at {:.1} MB, over 64 MB + its largest line ({:.1} MB)",
            peak as f64 / (1 << 20) as f64,
            bound as f64 / (1 << 20) as f64
        );
    }
}

/// A generated agent session: its lines, and the transcript `import`
/// must make of it, written as the lines are made.
struct Generated {
    session: std::io::BufWriter<std::fs::File>,
    expected: std::io::BufWriter<std::fs::File>,
    largest: usize,
    written: usize,
    /// The calls left unanswered after the compaction, which `check` of
    /// the session must name.
    unanswered: Vec<String>,
}

impl Generated {
    fn new(dir: &Path, name: &str, format: Option<&str>) -> Generated {
        let file = |n: String| std::io::BufWriter::new(std::fs::File::create(dir.join(n)).unwrap());
        let mut generated = Generated {
            session: file(format!("{name}.jsonl")),
            expected: file(format!("{name}.expected.jsonl")),
            largest: 0,
            written: 0,
            unanswered: Vec::new(),
        };
        if let Some(format) = format {
            writeln!(
                generated.expected,
                r#"{{"type":"session","format":"{format}"}}"#
            )
            .unwrap();
        }
        generated
    }

    /// The session is [`SESSION_BYTES`] long: no turn more.
    fn full(&self) -> bool {
        self.written >= SESSION_BYTES
    }

    fn line(&mut self, line: serde_json::Value) {
        self.raw(&line.to_string());
    }

    fn raw(&mut self, line: &str) {
        self.largest = self.largest.max(line.len() + 1);
        self.written += line.len() + 1;
        writeln!(self.session, "{line}").unwrap();
    }

    fn expect(&mut self, message: serde_json::Value) {
        let line = serde_json::json!({"type": "message", "message": message});
        writeln!(self.expected, "{line}").unwrap();
    }

    /// The largest line, and the calls left unanswered.
    fn finish(mut self) -> (usize, Vec<String>) {
        self.session.flush().unwrap();
        self.expected.flush().unwrap();
        (self.largest, self.unanswered)
    }
}

/// Writes an agent's session and its expected transcript into a directory;
/// the largest line and the calls left unanswered.
type Generator = fn(&Path) -> (usize, Vec<String>);

/// How large each agent's session is made: turns are added until it is.
const SESSION_BYTES: usize = 16 << 20;
/// The turn after which each session compacts (what came before is left
/// out), and how often a call is left unanswered (for `check` to report).
const COMPACT_AFTER: usize = 10;
const UNANSWERED_EVERY: usize = 1000;

/// Tool output of turn `i`: about 1 KB.
fn output(i: usize) -> String {
    format!("fn f{i}() {{ {} }}\n", i * 7919 % 100_003).repeat(40)
}

/// A Claude Code session (shapes of tests/data/import/claude-code): one
/// response written as two lines of one `message.id`, a progress line, a
/// side-chain line, and a compaction after the first turns.
fn claude_code(dir: &Path) -> (usize, Vec<String>) {
    use serde_json::json;
    let mut g = Generated::new(dir, "claude-code", None);
    let uuid = |i: usize, k: usize| format!("c{i:08}-0000-4000-8000-{k:012}");
    let mut parent = serde_json::Value::Null;
    for i in 0.. {
        if g.full() {
            break;
        }
        let base = |kind: &str, parent: &serde_json::Value, k: usize| json!({"parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": "/home/dev/shop", "sessionId": "7f3c2a10-5b7e-4c1d-9a2e-0d4b6c8e1f20", "version": "2.0.31", "type": kind, "uuid": uuid(i, k), "timestamp": "2026-11-20T09:00:00.000Z"});
        if i == COMPACT_AFTER {
            let mut boundary = base("system", &serde_json::Value::Null, 9);
            boundary["subtype"] = json!("compact_boundary");
            boundary["logicalParentUuid"] = parent.clone();
            g.line(boundary);
            parent = json!(uuid(i, 9));
        }
        let expect = i >= COMPACT_AFTER;
        let prompt =
            json!({"role": "user", "content": format!("step {i}: read src/m{}.rs", i % 977)});
        let mut line = base("user", &parent, 1);
        line["message"] = prompt.clone();
        g.line(line);
        let id = format!("msg_{i:010}");
        let call = format!("toolu_{i:010}");
        let first = json!({"id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "thinking", "thinking": format!("Read m{i}."), "signature": "EqQBCkYIBxgCKkB9"}], "stop_reason": null, "usage": {"input_tokens": 3, "output_tokens": 1}});
        let second = json!({"id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "tool_use", "id": call, "name": "Read", "input": {"file_path": format!("src/m{}.rs", i % 977)}}], "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 40}});
        let mut line = base("assistant", &json!(uuid(i, 1)), 2);
        line["message"] = first.clone();
        g.line(line);
        let mut line = base("assistant", &json!(uuid(i, 2)), 3);
        line["message"] = second.clone();
        g.line(line);
        g.line(json!({"type": "progress", "uuid": uuid(i, 7), "parentUuid": uuid(i, 3), "data": {"type": "hook_progress"}}));
        if i % 50 == 0 {
            let mut side = base("user", &serde_json::Value::Null, 8);
            side["isSidechain"] = json!(true);
            side["message"] = json!({"role": "user", "content": "a sub-agent's prompt"});
            g.line(side);
        }
        let answered = i % UNANSWERED_EVERY != 7;
        if !answered && expect {
            g.unanswered.push(call.clone());
        }
        let result = if answered {
            json!({"role": "user", "content": [{"tool_use_id": call, "type": "tool_result", "content": output(i)}]})
        } else {
            json!({"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]})
        };
        let mut line = base("user", &json!(uuid(i, 3)), 4);
        line["message"] = result.clone();
        line["toolUseResult"] = json!({"type": "text"});
        g.line(line);
        let reply = json!({"id": format!("msg_r{i:010}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": format!("Read m{i}.")}], "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 4}});
        let mut line = base("assistant", &json!(uuid(i, 4)), 5);
        line["message"] = reply.clone();
        g.line(line);
        parent = json!(uuid(i, 5));
        if expect {
            let mut joined = second;
            joined["content"] = json!([first["content"][0], joined["content"][0]]);
            for message in [prompt, joined, result, reply] {
                g.expect(message);
            }
        }
    }
    g.finish()
}

/// A Codex rollout (shapes of tests/data/import/codex): reasoning, a call
/// and its output, events and turn contexts between them, and a
/// compaction with its replacement history after the first turns.
fn codex(dir: &Path) -> (usize, Vec<String>) {
    use serde_json::json;
    let mut g = Generated::new(dir, "codex", Some("openai-responses"));
    let line = |kind: &str, payload: serde_json::Value| json!({"timestamp": "2026-11-20T09:58:00.000Z", "type": kind, "payload": payload});
    g.line(line("session_meta", json!({"id": "019a8f3e-2b7c-7d10-9c4e-5a1b2c3d4e5f", "cwd": "/home/dev/shop", "originator": "codex_cli_rs", "cli_version": "0.63.0"})));
    for i in 0.. {
        if g.full() {
            break;
        }
        if i == COMPACT_AFTER {
            let history = json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where is the checkout code?"}]}, {"type": "compaction_summary", "encrypted_content": "gAAAAABpQ"}]);
            g.line(line(
                "compacted",
                json!({"message": "", "replacement_history": history}),
            ));
            for item in history.as_array().unwrap() {
                g.expect(item.clone());
            }
        }
        g.line(line("turn_context", json!({"cwd": "/home/dev/shop", "approval_policy": "on-request", "model": "gpt-5.1-codex"})));
        let call = format!("call_{i:010}");
        let mut items = vec![
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": format!("step {i}: read src/m{}.rs", i % 977)}]}),
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": format!("Reading m{i}")}], "content": null, "encrypted_content": "gAAAAABpQxyz"}),
            json!({"type": "function_call", "name": "shell", "arguments": format!("{{\"command\":[\"cat\",\"src/m{}.rs\"]}}", i % 977), "call_id": call}),
        ];
        if i % UNANSWERED_EVERY != 7 {
            items.push(
                json!({"type": "function_call_output", "call_id": call, "output": output(i)}),
            );
        } else if i >= COMPACT_AFTER {
            g.unanswered.push(call.clone());
        }
        items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("Read m{i}.")}]}));
        for item in items {
            g.line(line("response_item", item.clone()));
            if i >= COMPACT_AFTER {
                g.expect(item);
            }
        }
        g.line(line(
            "event_msg",
            json!({"type": "token_count", "info": null}),
        ));
    }
    g.finish()
}

/// A Gemini CLI log (shapes of tests/data/import/gemini-cli): a model
/// record written, then updated in place with its call's result, the
/// tool responses' own record, `$set` updates, and a checkpoint after the
/// first turns.
fn gemini_cli(dir: &Path) -> (usize, Vec<String>) {
    gemini_records(dir, false)
}

/// The older single-JSON Gemini CLI record of the same turns: the records
/// the log ends with (no checkpoint), one a line of one document.
fn gemini_cli_legacy(dir: &Path) -> (usize, Vec<String>) {
    gemini_records(dir, true)
}

fn gemini_records(dir: &Path, legacy: bool) -> (usize, Vec<String>) {
    use serde_json::json;
    let name = if legacy {
        "gemini-cli-legacy"
    } else {
        "gemini-cli"
    };
    let mut g = Generated::new(dir, name, Some("gemini"));
    if legacy {
        for line in [
            "{",
            r#"  "sessionId": "0c4f7b21-9e3a-4d5b-8f60-7a1b2c3d4e5f","#,
            r#"  "projectHash": "b3f1c9d27a4e","#,
            r#"  "startTime": "2025-09-02T08:00:00.000Z","#,
            r#"  "messages": ["#,
        ] {
            g.raw(line);
        }
    } else {
        g.line(json!({"sessionId": "5d1e9f2a-8c3b-4e7d-a6f0-2b9c4d8e1a37", "projectHash": "b3f1c9d27a4e", "startTime": "2026-11-20T11:00:00.000Z", "lastUpdated": "2026-11-20T11:00:00.000Z", "kind": "main"}));
    }
    // A record of the legacy document: a value of its array.
    let mut first = true;
    let mut record = |g: &mut Generated, record: serde_json::Value| {
        if !legacy {
            return g.line(record);
        }
        let comma = if std::mem::take(&mut first) { "" } else { "," };
        g.raw(&format!("    {comma}{record}"));
    };
    for i in 0.. {
        if g.full() {
            break;
        }
        if i == COMPACT_AFTER && !legacy {
            let summary = json!({"id": "c-01", "type": "user", "content": [{"text": "<state_snapshot>goal</state_snapshot>"}]});
            g.line(json!({"$set": {"messages": [summary]}}));
            g.expect(json!({"role": "user", "parts": summary["content"]}));
        }
        let expect = legacy || i >= COMPACT_AFTER;
        let user = json!({"id": format!("u-{i}"), "timestamp": "2026-11-20T11:07:00.000Z", "type": "user", "content": [{"text": format!("step {i}: read src/m{}.rs", i % 977)}]});
        record(&mut g, user.clone());
        if !legacy {
            g.line(json!({"$set": {"lastUpdated": "2026-11-20T11:07:00.000Z"}}));
        }
        let call = format!("read_file-{i:010}");
        let args = json!({"absolute_path": format!("/home/dev/shop/src/m{}.rs", i % 977)});
        let content = json!([{"text": format!("**Reading** m{i}"), "thought": true}, {"functionCall": {"id": call, "name": "read_file", "args": args}, "thoughtSignature": "CiQBjz1rX0Jm2Vq8"}]);
        let model = |calls: serde_json::Value| json!({"id": format!("g-{i}"), "timestamp": "2026-11-20T11:07:05.000Z", "type": "gemini", "content": content, "toolCalls": calls, "thoughts": [], "model": "gemini-2.5-pro"});
        if !legacy {
            g.line(model(
                json!([{"id": call, "name": "read_file", "args": args, "status": "executing"}]),
            ));
        }
        let response = json!([{"functionResponse": {"id": call, "name": "read_file", "response": {"output": output(i)}}}]);
        let answered = i % UNANSWERED_EVERY != 7;
        if !answered && expect {
            g.unanswered.push(call.clone());
        }
        let calls = if answered {
            json!([{"id": call, "name": "read_file", "args": args, "result": response, "status": "success"}])
        } else {
            json!([{"id": call, "name": "read_file", "args": args, "status": "cancelled"}])
        };
        record(&mut g, model(calls));
        if answered {
            record(
                &mut g,
                json!({"id": format!("r-{i}"), "type": "user", "content": response}),
            );
        }
        if expect {
            g.expect(json!({"role": "user", "parts": user["content"]}));
            g.expect(json!({"role": "model", "parts": content}));
            if answered {
                g.expect(json!({"role": "user", "parts": response}));
            }
        }
    }
    if legacy {
        g.raw("  ]");
        g.raw("}");
    }
    g.finish()
}

/// An OpenClaw/pi session (shapes of tests/data/import/openclaw): entries
/// linked by `parentId`, calls and their results renamed into Anthropic's
/// shape, and a compaction keeping the turns from an earlier entry.
fn openclaw(dir: &Path) -> (usize, Vec<String>) {
    use serde_json::json;
    let mut g = Generated::new(dir, "openclaw", None);
    g.line(json!({"type": "session", "version": 3, "id": "e2b7c4d1-6f3a-4a8e-9b21-3c5d7e9f1a2b", "timestamp": "2026-11-20T12:00:00.000Z", "cwd": "/home/dev/shop"}));
    let mut parent = serde_json::Value::Null;
    let mut n = 0;
    let mut entry = |g: &mut Generated,
                     parent: &mut serde_json::Value,
                     fields: serde_json::Value| {
        n += 1;
        let id = format!("{n:08x}");
        let mut line = json!({"type": "message", "id": id, "parentId": parent.clone(), "timestamp": "2026-11-20T12:01:05.000Z"});
        for (k, v) in fields.as_object().unwrap() {
            line[k] = v.clone();
        }
        g.line(line);
        *parent = json!(id);
        id
    };
    let kept_from = COMPACT_AFTER - 2;
    let mut first_kept = String::new();
    let mut kept = Vec::new();
    for i in 0.. {
        if g.full() {
            break;
        }
        if i == COMPACT_AFTER {
            entry(
                &mut g,
                &mut parent,
                json!({"type": "compaction", "summary": "## Goal\nRead the files.", "firstKeptEntryId": first_kept, "tokensBefore": 155210}),
            );
            g.expect(json!({"role": "user", "content": [{"type": "text", "text": "The conversation history before this point was compacted into the following summary:\n\n<summary>\n## Goal\nRead the files.\n</summary>"}]}));
            for message in kept.drain(..) {
                g.expect(message);
            }
        }
        let prompt = format!("step {i}: read src/m{}.rs", i % 977);
        let id = entry(
            &mut g,
            &mut parent,
            json!({"message": {"role": "user", "content": prompt, "timestamp": 1763640001000u64}}),
        );
        if i == kept_from {
            first_kept = id;
        }
        let call = format!("toolu_{i:010}");
        let path = format!("src/m{}.rs", i % 977);
        entry(
            &mut g,
            &mut parent,
            json!({"message": {"role": "assistant", "content": [{"type": "text", "text": format!("Reading m{i}.")}, {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": path}}], "api": "anthropic-messages", "model": "claude-sonnet-4-5", "stopReason": "toolUse", "timestamp": 1763640005000u64}}),
        );
        let answered = i % UNANSWERED_EVERY != 7;
        if !answered && i >= COMPACT_AFTER {
            g.unanswered.push(call.clone());
        }
        if answered {
            entry(
                &mut g,
                &mut parent,
                json!({"message": {"role": "toolResult", "toolCallId": call, "toolName": "read", "content": [{"type": "text", "text": output(i)}], "isError": false, "timestamp": 1763640006000u64}}),
            );
        }
        let mut messages = vec![
            json!({"role": "user", "content": prompt, "timestamp": 1763640001000u64}),
            json!({"role": "assistant", "content": [{"type": "text", "text": format!("Reading m{i}.")}, {"type": "tool_use", "id": call, "name": "read", "input": {"path": path}}], "api": "anthropic-messages", "model": "claude-sonnet-4-5", "stopReason": "toolUse", "timestamp": 1763640005000u64}),
        ];
        if answered {
            messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": [{"type": "text", "text": output(i)}], "is_error": false, "toolName": "read", "timestamp": 1763640006000u64}]}));
        }
        if i >= COMPACT_AFTER {
            for message in messages {
                g.expect(message);
            }
        } else if i >= kept_from {
            kept.extend(messages);
        }
    }
    g.finish()
}

/// Where the files at `a` and `b` first differ, if they do.
fn first_difference(a: &Path, b: &Path) -> Option<u64> {
    use std::io::Read;
    let open = |p: &Path| std::io::BufReader::new(std::fs::File::open(p).unwrap());
    let (mut a, mut b) = (open(a), open(b));
    let (mut x, mut y) = (vec![0; 1 << 16], vec![0; 1 << 16]);
    let mut at = 0;
    loop {
        let n = a.read(&mut x).unwrap();
        let m = b.read_exact(&mut y[..n]).map(|()| n);
        match m {
            Ok(0) => return (b.read(&mut y).unwrap() > 0).then_some(at),
            Ok(n) if x[..n] == y[..n] => at += n as u64,
            Ok(n) => {
                let i = x[..n].iter().zip(&y[..n]).position(|(p, q)| p != q);
                return Some(at + i.unwrap_or(0) as u64);
            }
            Err(_) => return Some(at),
        }
    }
}

/// Run the binary; its exit code, stdout and stderr (with `HOME` set).
fn output_of(args: &[&std::ffi::OsStr], home: &Path) -> (Option<i32>, Vec<u8>, Vec<u8>) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .env("HOME", home)
        .output()
        .unwrap();
    (out.status.code(), out.stdout, out.stderr)
}

#[test]
fn import_and_check_of_16_mb_agent_sessions_peak_under_64_mb_plus_their_largest_line() {
    let dir = tempfile::tempdir().unwrap();
    let agents: [(&str, &str, Generator); 5] = [
        ("claude-code", "claude-code", claude_code),
        ("codex", "codex", codex),
        ("gemini-cli", "gemini-cli", gemini_cli),
        ("gemini-cli-legacy", "gemini-cli", gemini_cli_legacy),
        ("openclaw", "openclaw", openclaw),
    ];
    // Two agents at a time: each child's peak is its own.
    std::thread::scope(|scope| {
        let dir = dir.path();
        let runs: Vec<_> = agents
            .chunks(3)
            .map(|pair| {
                scope.spawn(move || {
                    for &(name, agent, generate) in pair {
                        agent_session_case(dir, name, agent, generate);
                    }
                })
            })
            .collect();
        for run in runs {
            run.join().unwrap();
        }
    });
}

/// One agent's case: its import equals the transcript the generator
/// expects, byte for byte; `check` of the session names the calls left
/// unanswered after the compaction; both commands peak under the bound.
fn agent_session_case(dir: &Path, name: &str, agent: &str, generate: Generator) {
    let (largest, unanswered) = generate(dir);
    let session = dir.join(format!("{name}.jsonl"));
    let size = std::fs::metadata(&session).unwrap().len();
    assert!(
        size >= SESSION_BYTES as u64,
        "{name}: only {size} bytes generated"
    );
    let out = dir.join(format!("{name}.imported.jsonl"));
    let import: Vec<&std::ffi::OsStr> = vec![
        "import".as_ref(),
        "--from".as_ref(),
        agent.as_ref(),
        session.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    let check: Vec<&std::ffi::OsStr> = vec!["check".as_ref(), session.as_os_str()];
    let bound = (64 << 20) + largest as u64;
    for (command, args, code) in [("import", &import, 0), ("check", &check, 1)] {
        let (exit, peak) = peak(args, dir);
        assert_eq!(exit, code, "{command} of {name}: exit status");
        assert!(
            peak <= bound,
            "{command} of {name} peaked at {:.1} MB, over 64 MB + its largest line ({:.1} MB)",
            peak as f64 / (1 << 20) as f64,
            bound as f64 / (1 << 20) as f64
        );
    }
    // Compared a block at a time: what this process holds when it starts
    // the next child counts in that child's peak (Linux carries a
    // process's high-water mark across exec).
    let expected = dir.join(format!("{name}.expected.jsonl"));
    if let Some(at) = first_difference(&out, &expected) {
        panic!("{name}: the imported transcript differs from the expected one at byte {at}");
    }
    // The calls left unanswered after the compaction, each named once.
    let (_, stdout, _) = output_of(&check, dir);
    let said = String::from_utf8_lossy(&stdout);
    let count = format!(": {} violation", unanswered.len());
    assert!(
        said.contains(&count) && unanswered.iter().all(|id| said.contains(id.as_str())),
        "{name}: check does not name the {} unanswered calls: {said:.2000}",
        unanswered.len()
    );
}
