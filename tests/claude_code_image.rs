//! `state/reconstruct` of a Claude Code session file reads it straight
//! into the session image (`transcript::reader::claude_code`) instead of
//! converting it and reading the converted transcript. The conversion
//! stays the reference: on the real file of `tests/data/import`, on
//! generated files (side chains, abandoned branches, compactions, joined
//! responses, consecutive user lines, API errors, torn lines, cycles,
//! another writer's spacing and escapes, cache markers, fields of odd
//! types) and through a real `toolwire serve`, both ways give the same
//! counts and the same state.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use toolwire::format::{Digest, Format};
use toolwire::transcript::import::{self, Agent, Content};
use toolwire::transcript::reader::claude_code::ClaudeCodeFile;
use toolwire::transcript::reader::{self, ReadAt, ReadLimits, SessionImage};

/// What a reconstruct reports and keeps of an image.
#[derive(Debug, PartialEq)]
struct Outcome {
    seen: Vec<(String, Digest)>,
    undecided: BTreeMap<String, String>,
    messages: usize,
    records: usize,
    skipped: usize,
}

fn outcome(image: SessionImage) -> Outcome {
    Outcome {
        seen: image
            .seen
            .iter()
            .map(|(id, d)| (id.to_string(), *d))
            .collect(),
        undecided: image
            .undecided_names
            .iter()
            .map(|(id, name)| (id.to_string(), name.to_string()))
            .collect(),
        messages: image.messages,
        records: image.records,
        skipped: image.skipped,
    }
}

/// The general way: convert, then read the converted transcript.
fn converted(bytes: &[u8]) -> Outcome {
    let (content, transcript) =
        import::as_transcript(Path::new("session.jsonl"), bytes.to_vec()).unwrap();
    assert_eq!(content, Content::Agent(Agent::ClaudeCode));
    let mut image = SessionImage::default();
    let (_, torn) = reader::read_lines(
        Format::Anthropic,
        &transcript[..],
        ReadLimits::default(),
        || false,
        |span, head| image.add(span, head),
    )
    .unwrap();
    if torn {
        image.skipped += 1;
    }
    image.finish_lenient();
    outcome(image)
}

/// The direct way, reading `bytes` in chunks of `chunk` bytes, with reads
/// that come up short.
fn direct(bytes: &[u8], chunk: usize) -> Outcome {
    let short = Short(bytes, (chunk / 3).clamp(1, 4099));
    let file =
        ClaudeCodeFile::read_by(&short, bytes.len() as u64, chunk, || false, |_| {}).unwrap();
    let mut image = SessionImage::default();
    file.feed(&mut image, ReadLimits::default().max_line)
        .unwrap();
    image.finish_lenient();
    outcome(image)
}

/// Bytes whose reads return at most `.1` bytes each.
struct Short<'a>(&'a [u8], usize);

impl ReadAt for Short<'_> {
    fn read_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
        let n = buf.len().min(self.1);
        self.0.read_at(&mut buf[..n], at)
    }
}

fn real_file() -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/import/claude-code/session.jsonl"),
    )
    .unwrap()
}

#[test]
fn the_real_session_reads_as_its_conversion_does() {
    let bytes = real_file();
    let reference = converted(&bytes);
    assert!(!reference.seen.is_empty() && !reference.undecided.is_empty());
    for chunk in [1, 7, 300, 1 << 20] {
        assert_eq!(direct(&bytes, chunk), reference, "chunk {chunk}");
    }
    // Torn anywhere (Claude Code still appending): still the same.
    let first = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    for cut in (first..bytes.len()).step_by(97) {
        assert_eq!(
            direct(&bytes[..cut], 4096),
            converted(&bytes[..cut]),
            "cut {cut}"
        );
    }
}

/// A file large enough to be read by two threads reads the same.
#[test]
fn a_large_session_reads_as_its_conversion_does() {
    let mut bytes = Vec::new();
    let mut parent = Value::Null;
    for i in 0..3000 {
        let big = format!("{}\\u00e9 \"q\" / done", "output line\n".repeat(i % 600));
        let call = json!({"type": "assistant", "uuid": format!("a{i}"), "parentUuid": parent,
            "message": {"id": format!("m{i}"), "role": "assistant",
                "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {}}]}});
        let result = json!({"type": "user", "uuid": format!("u{i}"), "parentUuid": format!("a{i}"),
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": big}]},
            "toolUseResult": {"stdout": big}});
        for line in [call, result] {
            bytes.extend_from_slice(line.to_string().as_bytes());
            bytes.push(b'\n');
        }
        parent = json!(format!("u{i}"));
    }
    assert!(bytes.len() > 16 << 20);
    let reference = converted(&bytes);
    assert_eq!(reference.seen.len(), 3000);
    // One chunk, chunks of the size `state/reconstruct` reads, and small
    // ones that many lines cross; large enough files are read by two
    // threads.
    for chunk in [usize::MAX, 512 << 10, 4099] {
        assert_eq!(direct(&bytes, chunk), reference, "chunk {chunk}");
    }
}

/// A tool result's content, as Claude Code or another writer spells it.
fn result_content() -> impl Strategy<Value = Value> {
    // Long enough to be read through the shadow (strings of 128 bytes on).
    let long = "caf\u{e9} a/b \"q\" hello \\ \t\n done\n".repeat(12);
    prop_oneof![
        Just(json!(long.clone())),
        Just(json!(format!("<persisted-output>\n{long}"))),
        Just(
            json!([{"type": "text", "text": long.clone()}, {"type": "image", "source": {"data": long.clone()}}])
        ),
        Just(json!([{"type": "text", "text": long, "cache_control": {"type": "ephemeral"}}])),
        Just(json!("plain output")),
        Just(json!("caf\u{e9} a/b \"q\" \\ \t\n done")),
        Just(json!("<persisted-output>\nkept preview")),
        Just(json!("")),
        Just(json!(null)),
        Just(json!([{"type": "text", "text": "x/y é"}])),
        Just(json!([{"type": "text", "text": "<persisted-output>\npreview"}])),
        Just(json!([{"type": "text", "text": "marked", "cache_control": {"type": "ephemeral"}}])),
        Just(json!({"odd": [1, 2.50, true]})),
        Just(json!(12)),
    ]
}

/// A call id: mostly short, sometimes long (emptied in a shadow) or empty,
/// or about as long as the reader keeps in place (38 bytes).
fn call_id() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0..6u8).prop_map(|i| format!("t{i}")),
        1 => (36..38usize).prop_map(|n| format!("t{}", "M".repeat(n))),
        1 => (0..2u8).prop_map(|i| format!("t{i}{}", "L".repeat(130))),
        1 => Just(String::new()),
    ]
}

fn block() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (call_id(), prop_oneof![Just("Bash"), Just("Read")]).prop_map(|(id, name)| json!({"type": "tool_use", "id": id, "name": name, "input": {"p": "a/b"}})),
        3 => (call_id(), result_content(), any::<bool>()).prop_map(|(id, content, err)| json!({"type": "tool_result", "tool_use_id": id, "content": content, "is_error": err})),
        2 => Just(json!({"type": "text", "text": "hello"})),
        1 => Just(json!({"type": "thinking", "thinking": "hm", "signature": "s"})),
        1 => Just(json!({"type": "compaction", "content": "summary"})),
        1 => Just(json!({"type": "tool_use", "id": 5, "name": "Bash"})),
        1 => Just(json!({"type": "tool_result"})),
        1 => Just(json!(["tool_use", "t1", null, "Bash"])),
        1 => Just(json!("a bare string block")),
    ]
}

fn content() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        6 => prop::collection::vec(block(), 0..4).prop_map(|b| Some(Value::Array(b))),
        2 => Just(Some(json!("typed text"))),
        1 => Just(Some(json!(""))),
        1 => Just(Some(Value::Null)),
        1 => Just(None),
        1 => block().prop_map(Some),
        1 => Just(Some(json!(7))),
    ]
}

fn message() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            4 => Just(json!("user")),
            4 => Just(json!("assistant")),
            1 => Just(json!("system")),
            1 => Just(Value::Null),
            1 => Just(json!(3)),
        ],
        prop_oneof![3 => (0..4u8).prop_map(|i| json!(format!("msg_{i}"))), 1 => Just(Value::Null), 1 => Just(json!(["x"]))],
        content(),
    )
        .prop_map(|(role, id, content)| {
            let mut m = json!({"role": role});
            if !id.is_null() {
                m["id"] = id;
            }
            if let Some(content) = content {
                m["content"] = content;
            }
            m
        })
}

/// An id of the tree: mostly the line's own (`SELF`) or the previous
/// line's (`PREV`), as Claude Code chains them, else a small pool, so lines
/// share, repeat and cycle.
fn tree_id() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => Just(json!("SELF")),
        8 => Just(json!("PREV")),
        6 => (0..12u8).prop_map(|i| json!(format!("n{i}"))),
        1 => (36..38usize).prop_map(|n| json!(format!("n{}", "M".repeat(n)))),
        1 => Just(json!(format!("n1{}", "L".repeat(130)))),
        1 => Just(Value::Null),
        1 => Just(json!(9)),
    ]
}

fn line() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            6 => Just("user"),
            6 => Just("assistant"),
            1 => Just("system"),
            1 => Just("progress"),
            1 => Just("file-history-snapshot"),
        ],
        prop::option::of(tree_id()),
        prop::option::of(tree_id()),
        prop_oneof![6 => Just(None), 1 => Just(Some(json!(true))), 1 => Just(Some(json!(false))), 1 => Just(Some(json!("true")))],
        prop_oneof![8 => Just(None), 1 => Just(Some(json!(true)))],
        prop_oneof![8 => message().prop_map(Some), 1 => Just(None), 1 => Just(Some(json!("text")))],
        any::<bool>(),
    )
        .prop_map(|(kind, uuid, parent, side, api, message, boundary)| {
            let mut line = json!({"type": kind});
            if let Some(uuid) = uuid {
                line["uuid"] = uuid;
            }
            if let Some(parent) = parent {
                line["parentUuid"] = parent;
            }
            if let Some(side) = side {
                line["isSidechain"] = side;
            }
            if let Some(api) = api {
                line["isApiErrorMessage"] = api;
            }
            if kind == "system" && boundary {
                line["subtype"] = json!("compact_boundary");
                line["parentUuid"] = Value::Null;
            }
            if let Some(message) = message {
                line["message"] = message;
            }
            line
        })
}

/// How a line is written: compact (as Claude Code writes), spaced, with
/// escapes serde_json would not write (`\u00e9`, `\/`, a surrogate pair,
/// a lone surrogate), a key written twice, or broken.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    Compact,
    Spaced,
    Escaped,
    Pair,
    Lone,
    TwiceKeyed,
    Garbage,
    Blank,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    prop_oneof![
        10 => Just(Spelling::Compact),
        2 => Just(Spelling::Spaced),
        2 => Just(Spelling::Escaped),
        1 => Just(Spelling::Pair),
        1 => Just(Spelling::Lone),
        1 => Just(Spelling::TwiceKeyed),
        1 => Just(Spelling::Garbage),
        1 => Just(Spelling::Blank),
    ]
}

/// Spaces after every `:` and `,` outside strings.
fn spaced(compact: &str) -> String {
    let mut out = String::new();
    let (mut in_string, mut escaped) = (false, false);
    for c in compact.chars() {
        out.push(c);
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ':' | ',' if !in_string => out.push(' '),
            _ => {}
        }
    }
    out
}

fn write(line: &Value, spelling: Spelling) -> String {
    let compact = line.to_string();
    match spelling {
        Spelling::Compact => compact,
        Spelling::Spaced => format!("  {} ", spaced(&compact)),
        // é and / only occur inside strings here.
        Spelling::Escaped => compact.replace('é', "\\u00e9").replace('/', "\\/"),
        Spelling::Pair => compact.replace("hello", "\\ud83d\\ude00 hello"),
        Spelling::Lone => compact.replace("hello", "\\ud800 hello"),
        Spelling::TwiceKeyed => match compact.strip_prefix('{') {
            Some(rest) => format!("{{\"type\":\"progress\",\"uuid\":\"n0\",{rest}"),
            None => compact,
        },
        Spelling::Garbage => format!(
            "{{\"type\":\"user\",{}",
            String::from_utf8_lossy(&compact.as_bytes()[1..compact.len() / 2])
        ),
        Spelling::Blank => " \t".to_owned(),
    }
}

/// A generated session: a summary line first (so the file is told as a
/// Claude Code session by its content), then the lines, maybe torn.
fn session(lines: &[(Value, Spelling)], cut: usize) -> Vec<u8> {
    let mut out = b"{\"type\":\"summary\",\"summary\":\"s\",\"leafUuid\":\"n1\"}\n".to_vec();
    let head = out.len();
    for (k, (line, spelling)) in lines.iter().enumerate() {
        let mut line = line.clone();
        for key in ["uuid", "parentUuid"] {
            match line[key].as_str() {
                Some("SELF") => line[key] = json!(format!("l{k}")),
                Some("PREV") => line[key] = json!(format!("l{}", k.wrapping_sub(1))),
                _ => {}
            }
        }
        out.extend_from_slice(write(&line, *spelling).as_bytes());
        out.push(b'\n');
    }
    let keep = out.len() - cut.min(out.len() - head);
    out.truncate(keep);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn generated_sessions_read_as_their_conversion_does(
        lines in prop::collection::vec((line(), spelling()), 0..40),
        cut in prop_oneof![3 => Just(0usize), 1 => 0..60usize],
        chunk in prop_oneof![Just(usize::MAX), 1..200usize],
    ) {
        let bytes = session(&lines, cut);
        prop_assert_eq!(direct(&bytes, chunk), converted(&bytes));
    }
}

/// Through a real server: `state/reconstruct` of the Claude Code file
/// reports and keeps what it does for the transcript its conversion
/// writes.
#[tokio::test]
async fn a_served_reconstruct_of_the_file_keeps_the_state_of_its_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    let session_file = dir.path().join("claude.jsonl");
    let mut bytes = real_file();
    // Another writer's escapes in a result, and a line left torn.
    bytes.extend_from_slice(
        br#"{"type":"user","uuid":"x1","parentUuid":"c0000000-0000-4000-8000-000000000031","message":{"role":"user","content":"more"}}
{"type":"assistant","uuid":"x2","parentUuid":"x1","message":{"id":"msg_x","role":"assistant","content":[{"type":"tool_use","id":"toolu_X","name":"Read","input":{}}]}}
{"type":"user","uuid":"x3","parentUuid":"x2","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_X","content":"caf\u00e9 a\/b"}]}}
{"type":"assistant","uuid":"x4","parentUuid":"x3","message":{"id":"msg_y","role":"assistant","content":[{"type":"tool_use","id":"toolu_Y","name":"Grep","input":{}}]}}
{"type":"user","uuid":"x5","parentUu"#,
    );
    std::fs::write(&session_file, &bytes).unwrap();
    let transcript_file = dir.path().join("converted.jsonl");
    let (_, transcript) = import::transcript_bytes(&session_file).unwrap();
    std::fs::write(&transcript_file, &transcript).unwrap();

    let direct = c
        .call(
            "state/reconstruct",
            json!({"sessionId": "direct", "transcript": session_file}),
        )
        .await;
    let reference = c
        .call(
            "state/reconstruct",
            json!({"sessionId": "reference", "transcript": transcript_file}),
        )
        .await;
    assert_eq!(direct, reference);
    assert!(direct["seenCount"].as_u64().unwrap() > 3, "{direct}");
    let got = c.call("state/get", json!({"sessionId": "direct"})).await;
    let want = c.call("state/get", json!({"sessionId": "reference"})).await;
    assert_eq!(got, want);
}
