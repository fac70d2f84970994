//! `toolwire import` and content detection (PROTOCOL.md section 10.5),
//! on the small real-shaped session files of `tests/data/import/<agent>/`:
//! each agent's file converts, through the binary, to its checked-in
//! transcript byte for byte; every file is recognized by its content; a
//! file of no known format is an error that says what its first line is;
//! and the converted `anthropic` transcripts go through today's `repair`
//! and `replay` with their unanswered calls reported.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use toolwire::transcript::import::{self, Agent, Content, Format};

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/import")
        .join(rel)
}

/// Each agent's session files and the transcript each converts to.
fn cases() -> Vec<(Agent, PathBuf, PathBuf)> {
    vec![
        (
            Agent::ClaudeCode,
            data("claude-code/session.jsonl"),
            data("claude-code/expected.jsonl"),
        ),
        (
            Agent::Codex,
            data("codex/rollout-2026-11-20T09-57-59-019a8f3e-2b7c-7d10-9c4e-5a1b2c3d4e5f.jsonl"),
            data("codex/expected.jsonl"),
        ),
        (
            Agent::GeminiCli,
            data("gemini-cli/session-2026-11-20T11-00-5d1e9f2a.jsonl"),
            data("gemini-cli/expected.jsonl"),
        ),
        (
            Agent::GeminiCli,
            data("gemini-cli/session-2025-09-02T08-00-0c4f7b21.json"),
            data("gemini-cli/expected-legacy.jsonl"),
        ),
        (
            Agent::OpenClaw,
            data("openclaw/e2b7c4d1-6f3a-4a8e-9b21-3c5d7e9f1a2b.jsonl"),
            data("openclaw/expected.jsonl"),
        ),
    ]
}

fn toolwire(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .output()
        .expect("run toolwire")
}

fn import(agent: Agent, file: &Path) -> Output {
    toolwire(&[
        "import".as_ref(),
        "--from".as_ref(),
        agent.name().as_ref(),
        file.as_os_str(),
    ])
}

/// `toolwire import --from AGENT FILE -o OUT`.
fn import_to(agent: Agent, file: &Path, out: &Path) -> Output {
    toolwire(&[
        "import".as_ref(),
        "--from".as_ref(),
        agent.name().as_ref(),
        file.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The transcript's messages, parsed (after the session line, if any).
fn messages(transcript: &[u8]) -> Vec<serde_json::Value> {
    text(transcript)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["type"] == "message")
        .map(|l| l["message"].clone())
        .collect()
}

#[test]
fn each_agent_converts_to_its_expected_transcript_byte_for_byte() {
    for (agent, session, expected) in cases() {
        let out = import(agent, &session);
        assert!(
            out.status.success(),
            "{}: {}",
            session.display(),
            text(&out.stderr)
        );
        let want = std::fs::read(&expected).unwrap();
        assert!(
            out.stdout == want,
            "{} converted differs from {}:\n{}",
            session.display(),
            expected.display(),
            text(&out.stdout)
        );
        // What was read and left out goes to stderr, never into the
        // transcript.
        assert!(
            text(&out.stderr).contains(&format!("{} -> ", agent.title())),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn output_file_is_written_whole_with_the_usual_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (agent, session, expected) = cases().remove(1);
    let out_path = dir.path().join("codex.jsonl");
    let out = import_to(agent, &session, &out_path);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert_eq!(
        std::fs::read(&out_path).unwrap(),
        std::fs::read(&expected).unwrap()
    );
    let mode = std::fs::metadata(&out_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode & 0o044,
        0o044 & !umask_of_this_process(),
        "mode {mode:o}"
    );
    // Nothing else is left in the directory (no temporary file).
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["codex.jsonl"]);
}

/// The umask, read from /proc (the tests never change it).
fn umask_of_this_process() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
        .unwrap()
}

#[test]
fn what_each_conversion_keeps_and_leaves_out() {
    let read = |rel| messages(&std::fs::read(data(rel)).unwrap());

    // Claude Code: the main line after the compaction; split lines joined,
    // parallel results in one user turn, side chain and abandoned branch
    // gone, the synthetic API error skipped.
    let cc = read("claude-code/expected.jsonl");
    let all = serde_json::to_string(&cc).unwrap();
    assert!(
        cc[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("This session is being continued")
    );
    assert!(
        !all.contains("The checkout tests fail, can you look?"),
        "before the compaction"
    );
    assert!(!all.contains("toolu_01S"), "side chain");
    assert!(!all.contains("remove line 41 instead"), "abandoned branch");
    assert!(!all.contains("API Error"), "synthetic error message");
    let joined = &cc[1];
    assert_eq!(joined["id"], "msg_01BBB");
    let kinds: Vec<_> = joined["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(
        joined["stop_reason"], "tool_use",
        "the last line's fields win"
    );
    let results: Vec<_> = cc[2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["toolu_01B", "toolu_01C"]);
    assert_eq!(
        cc[2]["content"][0]["content"][0]["source"]["data"], PNG,
        "image result kept"
    );
    assert_eq!(cc[3]["content"][0]["type"], "redacted_thinking");
    assert_eq!(
        cc[7]["content"][0]["cache_control"]["type"], "ephemeral",
        "unknown block fields kept"
    );

    // Codex: the replacement history, then reasoning travelling with its
    // calls, no ghost snapshot, the rolled-back turn gone.
    let codex = read("codex/expected.jsonl");
    let types: Vec<_> = codex.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "message",
            "message",
            "compaction",
            "message",
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
            "custom_tool_call",
            "custom_tool_call_output",
            "message",
            "message",
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output"
        ]
    );
    let all = serde_json::to_string(&codex).unwrap();
    assert!(!all.contains("basket.js"), "rolled back");
    assert!(!all.contains("ghost_commit"));
    assert!(all.contains("input_image"));
    assert_eq!(
        codex[16]["call_id"], "call_B2",
        "call_B1 is left unanswered"
    );

    // Gemini CLI: the compression checkpoint, no slash command, no rewound
    // turn, responses not repeated, thoughtSignature kept.
    let gemini = read("gemini-cli/expected.jsonl");
    let all = serde_json::to_string(&gemini).unwrap();
    assert!(
        gemini[0]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("<state_snapshot>")
    );
    assert!(!all.contains("/stats") && !all.contains("delete the tests"));
    assert_eq!(all.matches("\"functionResponse\"").count(), 3);
    assert_eq!(
        gemini[3]["parts"][1]["thoughtSignature"],
        "CiQBjz1rX0Jm2Vq8"
    );
    assert_eq!(
        gemini[3]["parts"].as_array().unwrap().len(),
        3,
        "thought and two parallel calls"
    );
    assert_eq!(
        gemini[4]["parts"].as_array().unwrap().len(),
        2,
        "both responses in one content"
    );
    assert_eq!(
        gemini.last().unwrap()["role"],
        "model",
        "the cancelled call has no response"
    );

    // OpenClaw/pi: summary first, kept entries, pi's own kinds as user
    // text, the aborted response skipped, toolCall/toolResult renamed.
    let pi = read("openclaw/expected.jsonl");
    assert!(
        pi[0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("compacted into the following summary")
    );
    assert_eq!(pi[1]["content"][1]["source"]["media_type"], "image/png");
    assert_eq!(pi[2]["content"][0]["signature"], "EqQBCkYIBxgCKkB9");
    assert_eq!(pi[2]["content"][2]["input"]["path"], "src/cart.js");
    assert_eq!(pi[3]["content"][1]["is_error"], true);
    assert_eq!(
        pi[3]["content"][1]["details"]["truncation"]["totalLines"], 1850,
        "unknown fields kept"
    );
    let all = serde_json::to_string(&pi).unwrap();
    assert!(!all.contains("delete the test instead"), "abandoned branch");
    assert!(!all.contains("Request was aborted"), "aborted response");
    assert!(!all.contains("toolCall") && !all.contains("toolResult"));
}

#[test]
fn every_file_is_recognized_by_its_content() {
    for (agent, session, expected) in cases() {
        assert_eq!(
            import::detect_file(&session).unwrap(),
            Content::Agent(agent),
            "{}",
            session.display()
        );
        let format = agent.format();
        assert_eq!(
            import::detect_file(&expected).unwrap(),
            Content::Transcript {
                format,
                declared: format != Format::Anthropic,
            },
            "{}",
            expected.display()
        );
    }
    // Bare messages of each shape, and transcripts without a session line.
    let shapes = [
        (
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}"#,
            Format::Anthropic,
        ),
        (
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}"#,
            Format::OpenaiChat,
        ),
        (
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}"#,
            Format::OpenaiResponses,
        ),
        (
            r#"{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]}"#,
            Format::Gemini,
        ),
    ];
    for (line, format) in shapes {
        let bare = format!("{line}\n");
        assert_eq!(
            import::detect(bare.as_bytes()),
            Ok(Content::Messages { format }),
            "{line}"
        );
        let wrapped = format!("{{\"type\":\"message\",\"message\":{line}}}\n");
        assert_eq!(
            import::detect(wrapped.as_bytes()),
            Ok(Content::Transcript {
                format,
                declared: false
            }),
            "{line}"
        );
    }
    // Plain text tells nothing: anthropic.
    assert_eq!(
        import::detect(b"{\"role\":\"user\",\"content\":\"hi\"}\n"),
        Ok(Content::Messages {
            format: Format::Anthropic
        })
    );
    // The replay demo session (bare anthropic messages) is what it was.
    let demo = toolwire::replay::bundled_recording().unwrap();
    assert_eq!(
        import::detect(demo.as_bytes()),
        Ok(Content::Messages {
            format: Format::Anthropic
        })
    );
}

#[test]
fn transcript_bytes_converts_agent_files_and_passes_transcripts_through() {
    for (agent, session, expected) in cases() {
        let (content, bytes) = import::transcript_bytes(&session).unwrap();
        assert_eq!(content, Content::Agent(agent));
        assert_eq!(
            bytes,
            std::fs::read(&expected).unwrap(),
            "{}",
            session.display()
        );
        let (content, bytes) = import::transcript_bytes(&expected).unwrap();
        assert!(matches!(content, Content::Transcript { .. }));
        assert_eq!(bytes, std::fs::read(&expected).unwrap());
    }
}

#[test]
fn a_file_of_no_known_format_is_an_error_naming_its_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        path
    };
    let cases = [
        (
            write(
                "events.jsonl",
                "{\"type\":\"heartbeat\",\"at\":1}\n{\"type\":\"heartbeat\",\"at\":2}\n",
            ),
            "its first line has type \"heartbeat\"",
        ),
        (
            write("notes.md", "# Notes\n\nnot JSON at all\n"),
            "its first line is not JSON",
        ),
        (
            write("config.jsonl", "{\"name\":\"x\",\"size\":3}\n"),
            "its first line is JSON without a \"type\" field (its keys: name, size)",
        ),
        (write("empty.jsonl", "\n\n"), "the file is empty"),
    ];
    for (path, message) in cases {
        let err = import::detect_file(&path).unwrap_err().to_string();
        assert!(err.contains(message), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        let out = import(Agent::ClaudeCode, &path);
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        assert!(text(&out.stderr).contains(message), "{}", text(&out.stderr));
    }
    // The wrong agent named: says what the file is.
    let out = import(Agent::Codex, &data("claude-code/session.jsonl"));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("this is a Claude Code session, not a Codex rollout"),
        "{}",
        text(&out.stderr)
    );
    // A toolwire transcript is not an agent's session.
    let out = import(Agent::ClaudeCode, &data("claude-code/expected.jsonl"));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("this is a toolwire transcript (anthropic)"),
        "{}",
        text(&out.stderr)
    );
}

/// Today's `toolwire repair --dry-run` reads the converted `anthropic`
/// transcripts and reports exactly their unanswered calls, changing
/// nothing.
#[test]
fn converted_anthropic_transcripts_report_their_unanswered_calls_in_repair() {
    let dir = tempfile::tempdir().unwrap();
    for (agent, unanswered) in [
        (Agent::ClaudeCode, "toolu_01E"),
        (Agent::OpenClaw, "toolu_P4"),
    ] {
        let (_, session, expected) = cases().into_iter().find(|(a, ..)| *a == agent).unwrap();
        let path = dir.path().join(format!("{}.jsonl", agent.name()));
        let out = import_to(agent, &session, &path);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let out = toolwire(&["repair".as_ref(), "--dry-run".as_ref(), path.as_os_str()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report = text(&out.stdout);
        let dropped: Vec<&str> = report.lines().filter(|l| l.contains("dropped")).collect();
        assert_eq!(
            dropped,
            [format!(
                "  dropped tool_use {unanswered} (no result in the next turn)"
            )],
            "{report}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&expected).unwrap(),
            "dry run"
        );
    }
}

/// The converted `anthropic` transcripts replay through a real server: the
/// unanswered calls end as interrupted pairs.
#[test]
fn converted_anthropic_transcripts_replay() {
    for agent in [Agent::ClaudeCode, Agent::OpenClaw] {
        let (_, _, expected) = cases().into_iter().find(|(a, ..)| *a == agent).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = toolwire(&[
            "replay".as_ref(),
            expected.as_os_str(),
            "--json".as_ref(),
            "--data-dir".as_ref(),
            dir.path().as_os_str(),
        ]);
        assert!(out.status.success(), "{}: {}", agent, text(&out.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = messages(&std::fs::read(&expected).unwrap()).len();
        assert_eq!(summary["messages"], n, "{summary}");
        let ended = |key: &str| summary[key].as_u64().unwrap();
        assert_eq!(
            ended("pairsDiscarded") + ended("pairsSynthesized"),
            1,
            "{summary}"
        );
    }
}

#[test]
fn a_closed_stdout_ends_the_import_quietly() {
    let (agent, session, _) = cases().remove(0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["import", "--from", agent.name()])
        .arg(&session)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}

/// #32 item 8: a valid Claude Code session whose tool_use input nests past
/// serde_json's default 128 levels (130, and 1,000 as the JSON-RPC face
/// accepts) imports whole, its parentUuid chain unbroken, and `check`
/// finds it (and its transcript) valid.
#[test]
fn a_deep_tool_input_keeps_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for depth in [130, 1_000] {
        let deep = format!("{}{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        let input = format!(r#"{{"v":{deep}}}"#);
        let line = |kind: &str, uuid: &str, parent: &str, message: &str| {
            format!(
                r#"{{"parentUuid":{parent},"isSidechain":false,"userType":"external","cwd":"/w","sessionId":"7f3c2a10-5b7e-4c1d-9a2e-0d4b6c8e1f20","version":"2.0.31","type":"{kind}","message":{message},"uuid":"{uuid}","timestamp":"2026-11-20T09:00:00.000Z"}}"#
            )
        };
        let session = [
            line("user", "u1", "null", r#"{"role":"user","content":"go"}"#),
            line(
                "assistant",
                "u2",
                r#""u1""#,
                &format!(
                    r#"{{"id":"m1","type":"message","role":"assistant","model":"x","content":[{{"type":"tool_use","id":"toolu_01A","name":"Edit","input":{input}}}]}}"#
                ),
            ),
            line(
                "user",
                "u3",
                r#""u2""#,
                r#"{"role":"user","content":[{"tool_use_id":"toolu_01A","type":"tool_result","content":"ok"}]}"#,
            ),
            line(
                "assistant",
                "u4",
                r#""u3""#,
                r#"{"id":"m2","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"done"}]}"#,
            ),
        ]
        .join("\n");
        let file = dir.path().join(format!("deep-{depth}.jsonl"));
        std::fs::write(&file, format!("{session}\n")).unwrap();
        let out = dir.path().join(format!("deep-{depth}.transcript.jsonl"));
        let imported = import_to(Agent::ClaudeCode, &file, &out);
        assert!(imported.status.success(), "{}", text(&imported.stderr));
        assert!(
            text(&imported.stderr).contains("-> 4 anthropic messages (4 lines read)"),
            "depth {depth}: {}",
            text(&imported.stderr)
        );
        let transcript = std::fs::read_to_string(&out).unwrap();
        assert_eq!(transcript.lines().count(), 4, "depth {depth}");
        assert!(
            transcript.contains(&format!(r#""input":{input}}}"#)),
            "depth {depth}: the deep input kept byte for byte"
        );
        for checked in [&file, &out] {
            let check = toolwire(&["check".as_ref(), checked.as_os_str()]);
            assert!(
                check.status.success(),
                "depth {depth}: {}{}",
                text(&check.stdout),
                text(&check.stderr)
            );
        }
    }
}

/// `detect_file` looks at a file's first 64 KiB before its first 8 MiB:
/// what it says must not depend on where the deciding line falls. A
/// first line longer than the first look, undeciding lines that run past
/// it before one decides, a first line that is not JSON: each is told as
/// `detect` tells the whole file.
#[test]
fn a_file_is_told_the_same_wherever_its_deciding_line_falls() {
    let dir = tempfile::tempdir().unwrap();
    let long = "x".repeat(100 << 10);
    let claude = format!(
        "{}\n",
        serde_json::json!({"type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "s",
            "message": {"role": "user", "content": long}})
    );
    // Plain text messages decide no format; the tool call after them does.
    let plain = format!(
        "{}\n",
        serde_json::json!({"role": "user", "content": "y".repeat(20 << 10)})
    );
    let chat = "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}\n";
    let late = format!("{}{chat}", plain.repeat(5));
    let not_json = format!("{long}\n{}\n", serde_json::json!({"type": "heartbeat"}));
    for (name, body) in [
        ("claude.jsonl", claude),
        ("late.jsonl", late),
        ("not-json.jsonl", not_json),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &body).unwrap();
        assert!(body.len() > 64 << 10);
        let by_path = import::detect_file(&path).map_err(|err| match err {
            import::ImportError::Detect { source, .. } => source,
            other => panic!("{other}"),
        });
        assert_eq!(by_path, import::detect(body.as_bytes()), "{name}");
    }
    assert_eq!(
        import::detect_file(&dir.path().join("claude.jsonl")).unwrap(),
        Content::Agent(Agent::ClaudeCode)
    );
    assert_eq!(
        import::detect_file(&dir.path().join("late.jsonl")).unwrap(),
        Content::Messages {
            format: Format::OpenaiChat
        }
    );
}
