//! OpenClaw and pi sessions (`~/.openclaw/agents/<agent>/sessions/*.jsonl`,
//! `~/.pi/agent/sessions/<cwd>/*.jsonl`) into `anthropic` messages.
//!
//! Format followed: session version 3 of badlogic/pi-mono
//! `packages/coding-agent/docs/session.md` and `src/core/session-manager.ts`
//! (March 2026), which OpenClaw writes too:
//!
//! ```text
//! {"type":"session","version":3,"id":"…","timestamp":"…","cwd":"…"}
//! {"type":"message","id":"a1","parentId":null,"message":{"role":"user","content":"…","timestamp":…}}
//! {"type":"message","id":"b2","parentId":"a1","message":{"role":"assistant","content":[{"type":"toolCall","id","name","arguments"}],"stopReason":"toolUse",…}}
//! {"type":"message","id":"c3","parentId":"b2","message":{"role":"toolResult","toolCallId":"…","toolName":"…","content":[…],"isError":false}}
//! {"type":"compaction","id":"d4","parentId":"c3","summary":"…","firstKeptEntryId":"b2","tokensBefore":…}
//! model_change, thinking_level_change, branch_summary, custom, custom_message, label, session_info
//! ```
//!
//! The context is built as pi's `buildSessionContext` does: the path from
//! the leaf (the last entry) back to the root by `parentId` (every entry in
//! order for version 1 files, which have no ids); after the last compaction
//! on it, its summary, then the entries from `firstKeptEntryId` up to it,
//! then those after it; `custom_message` and `branch_summary` entries are
//! messages. Messages then become provider messages as pi's `convertToLlm`
//! and pi-ai's Anthropic provider (`convertMessages`) do:
//!
//! - `user`: as is (string or blocks; `image` `{data, mimeType}` becomes a
//!   base64 `source`);
//! - `assistant`: `text`, `thinking` (with its signature; redacted thinking
//!   becomes `redacted_thinking`, unsigned thinking plain text) and
//!   `toolCall` `{id, name, arguments}` becomes `tool_use` `{id, name,
//!   input}`; messages that ended in `error` or `aborted` are not sent by
//!   pi and are skipped;
//! - a run of `toolResult` messages: one user message of `tool_result`
//!   blocks (`toolCallId` → `tool_use_id`, `isError` → `is_error`);
//! - `bashExecution`, `custom`, `branchSummary` and `compactionSummary`:
//!   user text, worded as pi words it.
//!
//! Fields with no Anthropic counterpart (`timestamp`, `usage`, `details`,
//! `thoughtSignature`, …) are kept beside the renamed ones. Unlike pi,
//! nothing is invented for a call left without result.

use std::collections::{HashMap, HashSet};
use std::io;

use serde_json::{Map, Value, json};

use super::reread::{Key, SessionFile, Sink, key_of};
use super::{Conversion, Report, str_of};

const COMPACTION_SUMMARY_PREFIX: &str = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
const COMPACTION_SUMMARY_SUFFIX: &str = "\n</summary>";
const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
const BRANCH_SUMMARY_SUFFIX: &str = "</summary>";

/// The whole-file conversion (replays, tests): [`plan`] and [`Plan::emit`]
/// over bytes in memory.
pub fn convert(input: &[u8]) -> Conversion {
    super::converted(super::Agent::OpenClaw, input)
}

/// What the first pass keeps of an entry.
struct Entry {
    at: u64,
    id: Option<Key>,
    /// It has an `id` (of any type): it can be the leaf.
    has_id: bool,
    parent: Option<Key>,
    compaction: bool,
    carries_message: bool,
    /// A compaction's `firstKeptEntryId`.
    first_kept: Option<Key>,
}

/// The context pi builds, as the offsets of the entries that make it.
pub struct Plan {
    /// The compaction whose summary opens the context.
    summary: Option<u64>,
    /// The entries whose messages follow, in order.
    entries: Vec<u64>,
    report: Report,
}

/// The first pass: the path from the leaf to the root by `parentId`, and
/// the part of it the last compaction on it leaves.
pub fn plan(file: SessionFile) -> io::Result<Plan> {
    let mut report = Report::default();
    let mut entries: Vec<Entry> = Vec::new();
    let mut first = true;
    file.each_object(&mut report, |at, entry, report| {
        if std::mem::take(&mut first) && str_of(&entry, "type") == Some("session") {
            report.skipped += 1;
            return;
        }
        entries.push(Entry {
            at,
            id: key_of(&entry, "id"),
            has_id: entry.contains_key("id"),
            parent: key_of(&entry, "parentId"),
            compaction: str_of(&entry, "type") == Some("compaction"),
            carries_message: carries_message(&entry),
            first_kept: key_of(&entry, "firstKeptEntryId"),
        });
    })?;
    let path = current_path(&entries);
    let on_path: HashSet<usize> = path.iter().copied().collect();
    for (i, entry) in entries.iter().enumerate() {
        if !on_path.contains(&i) {
            if entry.carries_message {
                report.left_out += 1;
            } else {
                report.skipped += 1;
            }
        }
    }
    drop(on_path);

    let compaction = path.iter().rposition(|&i| entries[i].compaction);
    let offsets = |part: &[usize]| part.iter().map(|&i| entries[i].at).collect::<Vec<u64>>();
    let plan = match compaction {
        Some(at) => {
            report.compactions += 1;
            let entry = &entries[path[at]];
            let first_kept = entry.first_kept;
            let kept_from = path[..at]
                .iter()
                .position(|&i| first_kept.is_some() && entries[i].id == first_kept)
                .unwrap_or(at);
            for &i in &path[..kept_from] {
                if entries[i].carries_message {
                    report.left_out += 1;
                } else {
                    report.skipped += 1;
                }
            }
            let mut kept = offsets(&path[kept_from..at]);
            kept.extend(offsets(&path[at + 1..]));
            Plan {
                summary: Some(entry.at),
                entries: kept,
                report,
            }
        }
        None => Plan {
            summary: None,
            entries: offsets(&path),
            report,
        },
    };
    Ok(plan)
}

impl Plan {
    pub fn report(&self) -> Report {
        self.report.clone()
    }

    /// The second pass: the compaction's summary, then each entry's
    /// message, as Anthropic messages in order.
    pub fn emit(&self, file: SessionFile, out: &mut Sink) -> io::Result<()> {
        let mut lines = file.lines();
        let mut context: Vec<Value> = Vec::new();
        if let Some(at) = self.summary {
            let entry = lines.object_at(at)?;
            let summary = str_of(entry, "summary").unwrap_or_default();
            context.push(user_text(format!(
                "{COMPACTION_SUMMARY_PREFIX}{summary}{COMPACTION_SUMMARY_SUFFIX}"
            )));
        }
        for &at in &self.entries {
            for message in context.drain(..) {
                llm_message(message, out)?;
            }
            agent_message(lines.object_at(at)?, &mut context, &mut out.report);
        }
        for message in context {
            llm_message(message, out)?;
        }
        Ok(())
    }
}

/// Indices of the entries from the root to the leaf.
fn current_path(entries: &[Entry]) -> Vec<usize> {
    let by_id: HashMap<Key, usize> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((e.id?, i)))
        .collect();
    if by_id.is_empty() {
        return (0..entries.len()).collect(); // version 1: a plain list
    }
    let mut path = Vec::new();
    let mut seen = HashSet::new();
    let mut at = entries.iter().rposition(|e| e.has_id);
    while let Some(i) = at {
        if !seen.insert(i) {
            break;
        }
        path.push(i);
        at = entries[i].parent.and_then(|p| by_id.get(&p).copied());
    }
    path.reverse();
    path
}

fn carries_message(entry: &Map<String, Value>) -> bool {
    matches!(
        str_of(entry, "type"),
        Some("message" | "custom_message" | "branch_summary")
    )
}

fn user_text(text: String) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

/// The agent message an entry contributes to the context, already in
/// pi's LLM shape for the kinds `convertToLlm` rewrites.
fn agent_message(entry: &Map<String, Value>, context: &mut Vec<Value>, report: &mut Report) {
    match str_of(entry, "type") {
        Some("message") => match entry.get("message") {
            Some(Value::Object(message)) => {
                if let Some(m) = to_llm(message) {
                    context.push(m);
                } else {
                    report.skipped += 1;
                }
            }
            _ => report.skipped += 1,
        },
        Some("custom_message") => {
            let custom = json!({
                "role": "custom",
                "content": entry.get("content").cloned().unwrap_or(Value::Null),
            });
            context.extend(custom.as_object().and_then(to_llm));
        }
        Some("branch_summary") if str_of(entry, "summary").is_some_and(|s| !s.is_empty()) => {
            let summary = str_of(entry, "summary").unwrap_or_default();
            context.push(user_text(format!(
                "{BRANCH_SUMMARY_PREFIX}{summary}{BRANCH_SUMMARY_SUFFIX}"
            )));
        }
        _ => report.skipped += 1,
    }
}

/// pi's `convertToLlm`: its own message kinds as user text.
fn to_llm(message: &Map<String, Value>) -> Option<Value> {
    match str_of(message, "role") {
        Some("user" | "assistant" | "toolResult") => Some(Value::Object(message.clone())),
        Some("custom") => Some(match message.get("content") {
            Some(Value::String(text)) => user_text(text.clone()),
            content => json!({"role": "user", "content": content.cloned().unwrap_or(Value::Null)}),
        }),
        Some("branchSummary") => Some(user_text(format!(
            "{BRANCH_SUMMARY_PREFIX}{}{BRANCH_SUMMARY_SUFFIX}",
            str_of(message, "summary").unwrap_or_default()
        ))),
        Some("compactionSummary") => Some(user_text(format!(
            "{COMPACTION_SUMMARY_PREFIX}{}{COMPACTION_SUMMARY_SUFFIX}",
            str_of(message, "summary").unwrap_or_default()
        ))),
        Some("bashExecution") if message.get("excludeFromContext") != Some(&Value::Bool(true)) => {
            Some(user_text(bash_execution_text(message)))
        }
        _ => None,
    }
}

fn bash_execution_text(m: &Map<String, Value>) -> String {
    let mut text = format!("Ran `{}`\n", str_of(m, "command").unwrap_or_default());
    match str_of(m, "output") {
        Some(output) if !output.is_empty() => text.push_str(&format!("```\n{output}\n```")),
        _ => text.push_str("(no output)"),
    }
    if m.get("cancelled") == Some(&Value::Bool(true)) {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = m.get("exitCode").and_then(Value::as_i64)
        && code != 0
    {
        text.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    if m.get("truncated") == Some(&Value::Bool(true))
        && let Some(path) = str_of(m, "fullOutputPath")
    {
        text.push_str(&format!("\n\n[Output truncated. Full output: {path}]"));
    }
    text
}

/// One LLM message as an Anthropic message, appended to `out`.
fn llm_message(message: Value, out: &mut Sink) -> io::Result<()> {
    let Value::Object(mut m) = message else {
        return Ok(());
    };
    match str_of(&m, "role") {
        Some("user") => {
            let content = match m.get_mut("content").map(Value::take) {
                Some(Value::Array(blocks)) => {
                    let blocks: Vec<Value> = blocks
                        .into_iter()
                        .map(media_block)
                        .filter(|b| !is_blank_text(b))
                        .collect();
                    if blocks.is_empty() {
                        out.report.skipped += 1;
                        return Ok(());
                    }
                    Value::Array(blocks)
                }
                Some(Value::String(s)) if !s.trim().is_empty() => Value::String(s),
                _ => {
                    out.report.skipped += 1;
                    return Ok(());
                }
            };
            m.insert("content".to_owned(), content);
            out.push(Value::Object(m))?;
        }
        Some("assistant") => {
            if matches!(str_of(&m, "stopReason"), Some("error" | "aborted")) {
                out.report.skipped += 1;
                return Ok(());
            }
            let blocks: Vec<Value> = match m.get_mut("content").map(Value::take) {
                Some(Value::Array(blocks)) => {
                    blocks.into_iter().filter_map(assistant_block).collect()
                }
                _ => Vec::new(),
            };
            if blocks.is_empty() {
                out.report.skipped += 1;
                return Ok(());
            }
            m.insert("content".to_owned(), Value::Array(blocks));
            out.push(Value::Object(m))?;
        }
        Some("toolResult") => {
            let block = tool_result_block(m);
            // A run of results is one user message, as pi-ai sends it.
            if let Some(last) = out.last_mut()
                && is_tool_result_message(last)
                && let Some(Value::Array(blocks)) = last.get_mut("content")
            {
                blocks.push(block);
                return Ok(());
            }
            out.push(json!({"role": "user", "content": [block]}))?;
        }
        _ => out.report.skipped += 1,
    }
    Ok(())
}

fn is_tool_result_message(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("user")
        && message
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|b| {
                !b.is_empty()
                    && b.iter()
                        .all(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            })
}

fn is_blank_text(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("text")
        && block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| t.trim().is_empty())
}

/// Rename `from` to `to` in `block`, keeping its place.
fn rename(block: Map<String, Value>, renames: &[(&str, &str)]) -> Map<String, Value> {
    block
        .into_iter()
        .map(|(k, v)| match renames.iter().find(|(from, _)| *from == k) {
            Some((_, to)) => ((*to).to_owned(), v),
            None => (k, v),
        })
        .collect()
}

/// pi's `{type:"image", data, mimeType}` as an Anthropic base64 image.
fn media_block(block: Value) -> Value {
    let Value::Object(mut b) = block else {
        return block;
    };
    if str_of(&b, "type") != Some("image") || b.contains_key("source") {
        return Value::Object(b);
    }
    let data = b.shift_remove("data").unwrap_or(Value::Null);
    let media_type = b.shift_remove("mimeType").unwrap_or(Value::Null);
    b.insert(
        "source".to_owned(),
        json!({"type": "base64", "media_type": media_type, "data": data}),
    );
    Value::Object(b)
}

fn assistant_block(block: Value) -> Option<Value> {
    let Value::Object(mut b) = block else {
        return Some(block);
    };
    match str_of(&b, "type") {
        Some("text") if is_blank_text(&Value::Object(b.clone())) => None,
        Some("thinking") => {
            if b.get("redacted") == Some(&Value::Bool(true)) {
                let data = b.shift_remove("thinkingSignature").unwrap_or(Value::Null);
                return Some(json!({"type": "redacted_thinking", "data": data}));
            }
            let thinking = str_of(&b, "thinking").unwrap_or_default().to_owned();
            if thinking.trim().is_empty() {
                return None;
            }
            let signed = str_of(&b, "thinkingSignature").is_some_and(|s| !s.trim().is_empty());
            if signed {
                Some(Value::Object(rename(
                    b,
                    &[("thinkingSignature", "signature")],
                )))
            } else {
                // Anthropic refuses thinking without a signature; pi sends
                // it as text.
                Some(json!({"type": "text", "text": thinking}))
            }
        }
        Some("toolCall") => {
            b.insert("type".to_owned(), json!("tool_use"));
            if b.get("arguments").is_none_or(Value::is_null) {
                b.insert("arguments".to_owned(), json!({}));
            }
            Some(Value::Object(rename(b, &[("arguments", "input")])))
        }
        _ => Some(Value::Object(b)),
    }
}

fn tool_result_block(mut m: Map<String, Value>) -> Value {
    m.shift_remove("role");
    let content = match m.shift_remove("content") {
        Some(Value::Array(blocks)) => Value::Array(blocks.into_iter().map(media_block).collect()),
        Some(other) => other,
        None => json!([]),
    };
    let mut block = Map::new();
    block.insert("type".to_owned(), json!("tool_result"));
    block.insert(
        "tool_use_id".to_owned(),
        m.shift_remove("toolCallId").unwrap_or(Value::Null),
    );
    block.insert("content".to_owned(), content);
    if let Some(is_error) = m.shift_remove("isError") {
        block.insert("is_error".to_owned(), is_error);
    }
    block.extend(m);
    Value::Object(block)
}
