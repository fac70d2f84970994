//! Claude Code sessions (`~/.claude/projects/<project>/<session>.jsonl`)
//! into `anthropic` messages.
//!
//! Format followed: the session JSONL Claude Code 1.0.x–2.x writes, as
//! documented by community tools (microsoft/amplifier
//! `ai_working/claude_code_logging/session_format_specification.md`,
//! dagster-io/erk `docs/agent/claude-code-session-layout.md`):
//!
//! ```text
//! {"type":"summary","summary":"…","leafUuid":"…"}                       title, no message
//! {"type":"user","uuid":"u1","parentUuid":null,"isSidechain":false,"message":{"role":"user","content":"…"},…}
//! {"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"id":"msg_1","role":"assistant","content":[{"type":"thinking",…}],…},…}
//! {"type":"assistant","uuid":"a2","parentUuid":"a1","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use",…}],…},…}
//! {"type":"user","uuid":"u2","parentUuid":"a2","message":{"role":"user","content":[{"type":"tool_result",…}]},"toolUseResult":{…}}
//! {"type":"system","subtype":"compact_boundary","uuid":"s1","parentUuid":null,"logicalParentUuid":"u2",…}
//! {"type":"user","uuid":"u3","parentUuid":"s1","isCompactSummary":true,"message":{…"This session is being continued…"}}
//! {"type":"file-history-snapshot",…}  {"type":"queue-operation",…}  {"type":"progress",…}
//! ```
//!
//! Lines form a tree by `parentUuid`. What Claude Code sends on resume is
//! the chain from the leaf of the main line (the last line of the file
//! that is a message and not on a side chain) back to its root; a
//! compaction starts a new root (`parentUuid: null` on its boundary), so
//! the walk stops there and the summary message after it opens the
//! conversation. Side chains (`isSidechain: true`, the sub-agents of older
//! versions) and abandoned branches ("edit and resend") are left out.
//!
//! Claude Code writes one assistant response as several lines, one per
//! content block, all with the response's `message.id`; they are joined
//! into one message (the later lines' other fields, such as `stop_reason`
//! and `usage`, win). Consecutive user lines (one line per tool result of
//! parallel calls, an interruption note) become one user message, as
//! Claude Code merges them before sending. Synthetic API-error messages
//! (`isApiErrorMessage`) are not sent back by Claude Code and are skipped.
//! The `message` object is kept verbatim otherwise.

use std::collections::{HashMap, HashSet};
use std::io;

use serde_json::{Map, Value};

use super::reread::{Key, SessionFile, Sink, key_of};
use super::{Conversion, Report, append_content, str_of};

/// The whole-file conversion (replays, tests): [`plan`] and [`Plan::emit`]
/// over bytes in memory.
pub fn convert(input: &[u8]) -> Conversion {
    super::converted(super::Agent::ClaudeCode, input)
}

/// What the first pass keeps of a line: where it is, its parent, the
/// response it belongs to, and what it is.
struct Line {
    at: u64,
    parent: Option<Key>,
    /// `message.id` of an assistant message line.
    response: Option<Key>,
    flags: u8,
}

const MESSAGE: u8 = 1;
const SIDE_CHAIN: u8 = 2;
const API_ERROR: u8 = 4;
const USER: u8 = 8;
const ASSISTANT: u8 = 16;
const HAS_UUID: u8 = 32;

/// How a line of the main line goes into the output.
#[derive(Clone, Copy)]
enum How {
    /// It opens a message.
    Opens,
    /// A later line of the response it joins.
    Joins,
    /// A user line merged into the user message before it.
    Merges,
}

/// The main line's messages, worked out from the first pass: for each
/// output message in order, the lines that make it.
pub struct Plan {
    /// (output message, line offset, how), sorted by output message (the
    /// lines of one message in the order of the main line).
    parts: Vec<(usize, u64, How)>,
    report: Report,
}

/// The first pass: the tree of lines by `parentUuid`, the main line from
/// its leaf, and which of its lines open, join or merge into which message.
pub fn plan(file: SessionFile) -> io::Result<Plan> {
    let mut report = Report::default();
    let mut lines: Vec<Line> = Vec::new();
    let mut by_uuid: HashMap<Key, usize> = HashMap::new();
    file.each_object(&mut report, |at, line, report| {
        if let Some(uuid) = key_of(&line, "uuid") {
            by_uuid.insert(uuid, lines.len());
        }
        let message = line.get("message").filter(|_| is_message(&line));
        let role = message.and_then(|m| m.get("role")).and_then(Value::as_str);
        let mut flags = 0;
        for (set, flag) in [
            (message.is_some(), MESSAGE),
            (is_side_chain(&line), SIDE_CHAIN),
            (
                line.get("isApiErrorMessage") == Some(&Value::Bool(true)),
                API_ERROR,
            ),
            (role == Some("user"), USER),
            (role == Some("assistant"), ASSISTANT),
            (line.contains_key("uuid"), HAS_UUID),
        ] {
            if set {
                flags |= flag;
            }
        }
        if flags & SIDE_CHAIN != 0 {
            report.side_chain += 1;
        }
        if str_of(&line, "type") == Some("system")
            && str_of(&line, "subtype") == Some("compact_boundary")
        {
            report.compactions += 1;
        }
        let response = match message {
            Some(Value::Object(m)) if role == Some("assistant") => key_of(m, "id"),
            _ => None,
        };
        lines.push(Line {
            at,
            parent: key_of(&line, "parentUuid"),
            response,
            flags,
        });
    })?;
    let has = |line: &Line, flag: u8| line.flags & flag != 0;
    let leaf = lines
        .iter()
        .rposition(|line| has(line, MESSAGE) && !has(line, SIDE_CHAIN) && has(line, HAS_UUID));

    // The main line, leaf first.
    let mut path: Vec<usize> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut at = leaf;
    while let Some(i) = at {
        if !seen.insert(i) {
            break; // a cycle: a corrupt file; what was walked stands
        }
        path.push(i);
        at = lines[i].parent.and_then(|p| by_uuid.get(&p).copied());
    }
    drop(by_uuid);
    path.reverse();

    for (i, line) in lines.iter().enumerate() {
        if seen.contains(&i) || has(line, SIDE_CHAIN) {
            continue;
        }
        if has(line, MESSAGE) {
            report.left_out += 1;
        } else {
            report.skipped += 1;
        }
    }
    drop(seen);

    // Where each response (`message.id`) went in the output, and whether
    // the last message opened is a user's.
    let mut response_at: HashMap<Key, usize> = HashMap::new();
    let mut parts = Vec::new();
    let mut opened = 0;
    let mut last_is_user = false;
    for i in path {
        let line = &lines[i];
        if !has(line, MESSAGE) || has(line, API_ERROR) {
            report.skipped += 1;
            continue;
        }
        if has(line, ASSISTANT)
            && let Some(id) = line.response
        {
            if let Some(&k) = response_at.get(&id) {
                parts.push((k, line.at, How::Joins));
                report.joined += 1;
                continue;
            }
            response_at.insert(id, opened);
        }
        if has(line, USER) && last_is_user {
            parts.push((opened - 1, line.at, How::Merges));
            continue;
        }
        parts.push((opened, line.at, How::Opens));
        opened += 1;
        last_is_user = has(line, USER);
    }
    parts.sort_by_key(|&(k, _, _)| k);
    Ok(Plan { parts, report })
}

impl Plan {
    pub fn report(&self) -> Report {
        self.report.clone()
    }

    /// The second pass: each message of the main line, made from its
    /// lines, in order.
    pub fn emit(&self, file: SessionFile, out: &mut Sink) -> io::Result<()> {
        let mut lines = file.lines();
        let mut message: Option<Value> = None;
        for &(_, at, into) in &self.parts {
            let line = lines.object_at(at)?;
            let Some(next) = line.get("message").cloned() else {
                return Err(lines.changed(at));
            };
            match (into, &mut message) {
                (How::Opens, _) => {
                    if let Some(whole) = message.replace(next) {
                        out.push(whole)?;
                    }
                }
                (How::Joins, Some(message)) => join_response(message, next),
                (How::Merges, Some(message)) => append_content(message, next),
                (_, None) => return Err(lines.changed(at)),
            }
        }
        if let Some(whole) = message {
            out.push(whole)?;
        }
        Ok(())
    }
}

fn is_message(line: &Map<String, Value>) -> bool {
    matches!(str_of(line, "type"), Some("user" | "assistant"))
        && line.get("message").is_some_and(Value::is_object)
}

fn is_side_chain(line: &Map<String, Value>) -> bool {
    line.get("isSidechain") == Some(&Value::Bool(true))
}

/// Add a later line of one response to the message of its first line.
fn join_response(message: &mut Value, later: Value) {
    let Value::Object(mut later) = later else {
        return;
    };
    let content = later.shift_remove("content");
    if let Some(obj) = message.as_object_mut() {
        for (key, value) in later {
            obj.insert(key, value);
        }
    }
    let mut rest = Map::new();
    if let Some(content) = content {
        rest.insert("content".to_owned(), content);
    }
    append_content(message, Value::Object(rest));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_cycle_ends_the_walk_instead_of_looping() {
        let input = br#"{"type":"user","uuid":"a","parentUuid":"b","message":{"role":"user","content":"x"}}
{"type":"assistant","uuid":"b","parentUuid":"a","message":{"id":"m","role":"assistant","content":[{"type":"text","text":"y"}]}}
"#;
        let out = convert(input);
        assert_eq!(out.messages.len(), 2);
    }

    #[test]
    fn a_torn_last_line_is_counted_and_skipped() {
        let input = br#"{"type":"user","uuid":"a","parentUuid":null,"message":{"role":"user","content":"x"}}
{"type":"assistant","uuid":"b","parentUuid":"a","mess"#;
        let out = convert(input);
        assert_eq!(
            out.messages,
            [serde_json::json!({"role": "user", "content": "x"})]
        );
        assert_eq!(out.report.unreadable, 1);
    }
}
