//! Gemini CLI sessions (`~/.gemini/tmp/<project>/chats/session-*.jsonl`,
//! or the older single-JSON `session-*.json`) into `gemini` contents.
//!
//! Format followed: google-gemini/gemini-cli
//! `packages/core/src/services/chatRecordingService.ts` and
//! `chatRecordingTypes.ts` as of August 2026 (the JSONL log):
//!
//! ```text
//! {"sessionId":"…","projectHash":"…","startTime":"…","lastUpdated":"…"}     metadata
//! {"id":"m1","timestamp":"…","type":"user","content":[{"text":"…"}]}       a message record
//! {"id":"m2","type":"gemini","content":[…],"toolCalls":[{"id","name","args","result","status",…}],"thoughts":[…],"tokens":{…}}
//! {"id":"m2",…}                            the same id again: the record, updated in place
//! {"$set":{"lastUpdated":"…"}}             metadata update; with "messages": a checkpoint
//! {"$rewindTo":"m5"}                       drop m5 and every record after it
//! ```
//!
//! and the legacy file, one JSON object `{sessionId, projectHash,
//! startTime, lastUpdated, messages: [...]}`. The records are replayed as
//! `loadConversationRecord` does (a `$set` with `messages` is how
//! `/compress` and history rewrites are stored: it replaces every record),
//! then turned into contents as `convertSessionToClientHistory` in
//! `packages/core/src/utils/sessionUtils.ts` does:
//!
//! - `info`, `error` and `warning` records are not sent; a `user` record
//!   whose text is empty or a command (`/…`, `?…`, `<session_context>`,
//!   `<hook_context>`) is not sent either;
//! - a `gemini` record whose `content` holds function calls or thoughts is
//!   sent as it is (a current record); otherwise (an older one) its
//!   `thoughts` become thought parts, then its content, then a
//!   `functionCall` part per entry of `toolCalls`;
//! - each tool call's `result` becomes the `user` content after it: a
//!   string as `{"functionResponse":{"id","name","response":{"output"}}}`,
//!   a part list or a part as stored. A call without a result (cancelled,
//!   or the session ended first) stays unanswered.
//!
//! Current versions also record the tool responses as a `user` record of
//! their own; a `functionResponse` already given from the call's record is
//! not repeated. Parts are copied whole (`thoughtSignature` and unknown
//! fields included); record fields that are not content (`displayContent`,
//! `tokens`, `model`, tool-call UI fields) have no place in a `gemini`
//! content and are not carried.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::{Conversion, Format, ImportError, json_lines, raw_lines, str_of};

/// True when `input` starts like the legacy pretty-printed JSON record
/// (`{` alone on the first line, then `"sessionId"` and `"projectHash"`
/// among the next few keys).
pub(super) fn looks_like_legacy_record(input: &[u8]) -> bool {
    let mut lines = raw_lines(input).map(|l| l.trim_ascii());
    if lines.next() != Some(b"{") {
        return false;
    }
    let head: Vec<&[u8]> = lines.take(8).collect();
    let has = |key: &[u8]| head.iter().any(|l| l.starts_with(key));
    has(b"\"sessionId\":") && has(b"\"projectHash\":")
}

pub fn convert(input: &[u8]) -> Result<Conversion, ImportError> {
    let mut out = Conversion::new(Format::Gemini);
    let records = if looks_like_legacy_record(input) {
        legacy_records(input, &mut out)?
    } else {
        log_records(input, &mut out)
    };
    contents(records, &mut out);
    Ok(out)
}

fn legacy_records(input: &[u8], out: &mut Conversion) -> Result<Vec<Value>, ImportError> {
    let record: Value = crate::json::from_slice(input)
        .map_err(|e| ImportError::Invalid(format!("Gemini CLI session (JSON): {e}")))?;
    let messages = match record.get("messages") {
        Some(Value::Array(messages)) => messages.clone(),
        _ => Vec::new(),
    };
    out.report.lines = messages.len() + 1;
    out.report.skipped = 1;
    Ok(messages)
}

/// Replay the JSONL log into the list of message records it ends with.
fn log_records(input: &[u8], out: &mut Conversion) -> Vec<Value> {
    let mut records: Vec<Value> = Vec::new();
    let position = |records: &[Value], id: &str| {
        records
            .iter()
            .position(|r| r.get("id").and_then(Value::as_str) == Some(id))
    };
    for line in json_lines(input, &mut out.report) {
        if let Some(to) = str_of(&line, "$rewindTo") {
            let cut = position(&records, to).unwrap_or(0);
            out.report.left_out += records.len() - cut;
            records.truncate(cut);
        } else if let Some(id) = str_of(&line, "id") {
            match position(&records, id) {
                // An update keeps the record's place, as a JS Map does.
                Some(at) => records[at] = Value::Object(line),
                None => records.push(Value::Object(line)),
            }
        } else {
            let update = line.get("$set").and_then(Value::as_object);
            let messages = update
                .and_then(|set| set.get("messages"))
                .or_else(|| line.get("messages"))
                .and_then(Value::as_array);
            match messages {
                Some(messages) => {
                    out.report.compactions += usize::from(update.is_some());
                    out.report.left_out += records.len();
                    records = messages
                        .iter()
                        .filter(|m| m.get("id").and_then(Value::as_str).is_some())
                        .cloned()
                        .collect();
                }
                None => out.report.skipped += 1,
            }
        }
    }
    records
}

fn contents(records: Vec<Value>, out: &mut Conversion) {
    // Calls already answered from their call record.
    let mut answered: HashSet<String> = HashSet::new();
    for record in records {
        let Value::Object(record) = record else {
            continue;
        };
        match str_of(&record, "type") {
            Some("user") => {
                let mut parts = part_list(record.get("content"));
                if is_ignored_user_content(&parts) {
                    out.report.skipped += 1;
                    continue;
                }
                parts.retain(|part| response_id(part).is_none_or(|id| !answered.contains(id)));
                if parts.is_empty() {
                    out.report.skipped += 1;
                    continue;
                }
                out.messages.push(json!({"role": "user", "parts": parts}));
            }
            Some("gemini") => model_turn(&record, &mut answered, out),
            _ => out.report.skipped += 1,
        }
    }
}

fn model_turn(record: &Map<String, Value>, answered: &mut HashSet<String>, out: &mut Conversion) {
    let content = part_list(record.get("content"));
    let calls: &[Value] = match record.get("toolCalls") {
        Some(Value::Array(calls)) => calls,
        _ => &[],
    };
    let current = content
        .iter()
        .any(|p| p.get("functionCall").is_some() || p.get("thought").is_some());
    let mut parts = Vec::new();
    if current {
        parts = content;
    } else {
        if let Some(Value::Array(thoughts)) = record.get("thoughts") {
            for thought in thoughts {
                let subject = thought.get("subject").and_then(Value::as_str);
                let description = thought
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let text = match subject {
                    Some(subject) if !subject.is_empty() => format!("**{subject}** {description}"),
                    _ => description.to_owned(),
                };
                parts.push(json!({"text": text, "thought": true}));
            }
        }
        parts.extend(content);
        for call in calls {
            parts.push(json!({"functionCall": {
                "id": call.get("id").cloned().unwrap_or(Value::Null),
                "name": call.get("name").cloned().unwrap_or(Value::Null),
                "args": call.get("args").cloned().unwrap_or_else(|| json!({})),
            }}));
        }
    }
    if parts.is_empty() {
        out.report.skipped += 1;
        return;
    }
    out.messages.push(json!({"role": "model", "parts": parts}));

    let mut responses = Vec::new();
    for call in calls {
        let (id, name) = (call.get("id"), call.get("name"));
        match call.get("result") {
            None | Some(Value::Null) => {}
            Some(Value::String(output)) if !output.is_empty() => responses.push(json!({
                "functionResponse": {
                    "id": id.cloned().unwrap_or(Value::Null),
                    "name": name.cloned().unwrap_or(Value::Null),
                    "response": {"output": output},
                }
            })),
            Some(Value::String(_)) => {}
            Some(result) => responses.extend(part_list(Some(result))),
        }
    }
    for part in &responses {
        if let Some(id) = response_id(part) {
            answered.insert(id.to_owned());
        }
    }
    if !responses.is_empty() {
        out.messages
            .push(json!({"role": "user", "parts": responses}));
    }
}

fn response_id(part: &Value) -> Option<&str> {
    part.get("functionResponse")?.get("id")?.as_str()
}

/// A `PartListUnion` (a string, a part, or a list of both) as parts.
fn part_list(content: Option<&Value>) -> Vec<Value> {
    match content {
        // An empty string is no content (Gemini CLI tests it as falsy).
        Some(Value::String(text)) if text.is_empty() => Vec::new(),
        Some(Value::String(text)) => vec![json!({"text": text})],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => json!({"text": text}),
                part => part.clone(),
            })
            .collect(),
        Some(part @ Value::Object(_)) => vec![part.clone()],
        _ => Vec::new(),
    }
}

/// Gemini CLI's `isIgnoredUserContent` on the parts' text (non-text parts
/// read as a bracketed placeholder, as its `partToString` does).
fn is_ignored_user_content(parts: &[Value]) -> bool {
    let mut text = String::new();
    for part in parts {
        match part.get("text").and_then(Value::as_str) {
            Some(t) => text.push_str(t),
            None => text.push_str("[part]"),
        }
    }
    let text = text.trim();
    text.is_empty()
        || text.starts_with('/')
        || text.starts_with('?')
        || text.starts_with("<session_context>")
        || text.starts_with("<hook_context>")
}
