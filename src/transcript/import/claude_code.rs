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

use serde_json::{Map, Value};

use super::{Conversion, Format, append_content, json_lines, str_of};

pub fn convert(input: &[u8]) -> Conversion {
    let mut out = Conversion::new(Format::Anthropic);
    let lines = json_lines(input, &mut out.report);

    let mut by_uuid: HashMap<&str, usize> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(uuid) = str_of(line, "uuid") {
            by_uuid.insert(uuid, i);
        }
    }
    let leaf = lines
        .iter()
        .rposition(|line| is_message(line) && !is_side_chain(line) && line.contains_key("uuid"));

    // The main line, leaf first.
    let mut path: Vec<usize> = Vec::new();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut at = leaf;
    while let Some(i) = at {
        if !seen.insert(i) {
            break; // a cycle: a corrupt file; what was walked stands
        }
        path.push(i);
        at = str_of(&lines[i], "parentUuid").and_then(|p| by_uuid.get(p).copied());
    }
    path.reverse();

    for line in &lines {
        if is_side_chain(line) {
            out.report.side_chain += 1;
        }
        if str_of(line, "type") == Some("system")
            && str_of(line, "subtype") == Some("compact_boundary")
        {
            out.report.compactions += 1;
        }
    }
    let on_path: HashSet<usize> = path.iter().copied().collect();
    for (i, line) in lines.iter().enumerate() {
        if on_path.contains(&i) || is_side_chain(line) {
            continue;
        }
        if is_message(line) {
            out.report.left_out += 1;
        } else {
            out.report.skipped += 1;
        }
    }

    // Where each response (`message.id`) went in the output.
    let mut response_at: HashMap<String, usize> = HashMap::new();
    for i in path {
        let line = &lines[i];
        let Some(message) = line.get("message").filter(|_| is_message(line)) else {
            out.report.skipped += 1;
            continue;
        };
        if line.get("isApiErrorMessage") == Some(&Value::Bool(true)) {
            out.report.skipped += 1;
            continue;
        }
        let message = message.clone();
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "assistant"
            && let Some(id) = message.get("id").and_then(Value::as_str)
        {
            if let Some(&k) = response_at.get(id) {
                join_response(&mut out.messages[k], message);
                out.report.joined += 1;
                continue;
            }
            response_at.insert(id.to_owned(), out.messages.len());
        }
        if role == "user"
            && let Some(last) = out.messages.last_mut()
            && last.get("role").and_then(Value::as_str) == Some("user")
        {
            append_content(last, message);
            continue;
        }
        out.messages.push(message);
    }
    out
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
