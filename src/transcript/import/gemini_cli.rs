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

use std::collections::{HashMap, HashSet};
use std::io;

use serde_json::{Map, Value, json};

pub mod legacy;

use super::reread::{Key, SessionFile, Sink, key_of};
use super::{Conversion, Format, ImportError, Report, raw_lines, str_of};

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

/// The whole-file conversion: the legacy JSON record read whole, a JSONL
/// log through [`plan`] and [`Plan::emit`] over bytes in memory.
pub fn convert(input: &[u8]) -> Result<Conversion, ImportError> {
    if !looks_like_legacy_record(input) {
        return Ok(super::converted(super::Agent::GeminiCli, input));
    }
    let mut out = Conversion::new(Format::Gemini);
    let mut messages = Vec::new();
    let mut emit = |message| {
        messages.push(message);
        Ok(())
    };
    let mut sink = Sink::new(Report::default(), &mut emit);
    let records = legacy_records(input, &mut sink.report)?;
    let report = contents(records.into_iter(), &mut sink)
        .and_then(|()| sink.finish())
        .map_err(|e| ImportError::Invalid(e.to_string()))?;
    out.messages = messages;
    out.report = report;
    Ok(out)
}

fn legacy_records(input: &[u8], report: &mut Report) -> Result<Vec<Value>, ImportError> {
    let record: Value = crate::json::from_slice(input)
        .map_err(|e| ImportError::Invalid(format!("Gemini CLI session (JSON): {e}")))?;
    let messages = match record.get("messages") {
        Some(Value::Array(messages)) => messages.clone(),
        _ => Vec::new(),
    };
    report.lines = messages.len() + 1;
    report.skipped = 1;
    Ok(messages)
}

/// A message record of the replayed log, as the first pass keeps it: the
/// offset of the line that holds it (and its place in that line's
/// `messages` when a checkpoint wrote it), and the key of its id.
#[derive(Clone, Copy)]
struct Record {
    at: u64,
    in_messages: Option<usize>,
    id: Key,
}

/// The message records the log ends with, as offsets.
pub struct Plan {
    records: Vec<Record>,
    report: Report,
}

/// The first pass: the JSONL log replayed as `loadConversationRecord`
/// replays it, with records kept as offsets.
pub fn plan(file: SessionFile) -> io::Result<Plan> {
    let mut report = Report::default();
    let mut records: Vec<Record> = Vec::new();
    // The first record with each id (where an update lands).
    let mut first: HashMap<Key, usize> = HashMap::new();
    file.each_object(&mut report, |at, line, report| {
        if let Some(to) = key_of(&line, "$rewindTo") {
            let cut = first.get(&to).copied().unwrap_or(0);
            report.left_out += records.len() - cut;
            for (n, record) in records.iter().enumerate().skip(cut) {
                if first.get(&record.id) == Some(&n) {
                    first.remove(&record.id);
                }
            }
            records.truncate(cut);
        } else if let Some(id) = key_of(&line, "id") {
            let record = Record {
                at,
                in_messages: None,
                id,
            };
            match first.get(&id) {
                // An update keeps the record's place, as a JS Map does.
                Some(&n) => records[n] = record,
                None => {
                    first.insert(id, records.len());
                    records.push(record);
                }
            }
        } else {
            let update = line.get("$set").and_then(Value::as_object);
            match checkpoint(&line) {
                Some(messages) => {
                    report.compactions += usize::from(update.is_some());
                    report.left_out += records.len();
                    records.clear();
                    first.clear();
                    for (n, message) in messages.iter().enumerate() {
                        let Some(id) = message.as_object().and_then(|m| key_of(m, "id")) else {
                            continue;
                        };
                        first.entry(id).or_insert(records.len());
                        records.push(Record {
                            at,
                            in_messages: Some(n),
                            id,
                        });
                    }
                }
                None => report.skipped += 1,
            }
        }
    })?;
    Ok(Plan { records, report })
}

/// The records a line without an id replaces every record with: its
/// `$set`'s `messages` (how `/compress` and history rewrites are stored),
/// or its own.
fn checkpoint(line: &Map<String, Value>) -> Option<&Vec<Value>> {
    line.get("$set")
        .and_then(Value::as_object)
        .and_then(|set| set.get("messages"))
        .or_else(|| line.get("messages"))
        .and_then(Value::as_array)
}

impl Plan {
    pub fn report(&self) -> Report {
        self.report.clone()
    }

    /// The second pass: each record read again and turned into contents.
    pub fn emit(&self, file: SessionFile, out: &mut Sink) -> io::Result<()> {
        let mut lines = file.lines();
        let mut failed = None;
        let records = self.records.iter().map_while(|record| {
            let read = match lines.object_at(record.at) {
                Ok(line) => match record.in_messages {
                    None => Some(Value::Object(line.clone())),
                    Some(n) => checkpoint(line).and_then(|m| m.get(n)).cloned(),
                },
                Err(err) => {
                    failed = Some(err);
                    return None;
                }
            };
            if read.is_none() {
                failed = Some(lines.changed(record.at));
            }
            read
        });
        contents(records, out)?;
        match failed {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

fn contents(records: impl Iterator<Item = Value>, out: &mut Sink) -> io::Result<()> {
    let mut contents = Contents::default();
    for record in records {
        contents.record(record, out)?;
    }
    Ok(())
}

/// Records turned into contents, one at a time.
#[derive(Default)]
struct Contents {
    /// Calls already answered from their call record.
    answered: HashSet<Key>,
}

impl Contents {
    fn record(&mut self, record: Value, out: &mut Sink) -> io::Result<()> {
        let Value::Object(record) = record else {
            return Ok(());
        };
        match str_of(&record, "type") {
            Some("user") => {
                let mut parts = part_list(record.get("content"));
                if is_ignored_user_content(&parts) {
                    out.report.skipped += 1;
                    return Ok(());
                }
                let answered = &self.answered;
                parts
                    .retain(|part| response_id(part).is_none_or(|id| !answered.contains(&key(id))));
                if parts.is_empty() {
                    out.report.skipped += 1;
                    return Ok(());
                }
                out.push(json!({"role": "user", "parts": parts}))?;
            }
            Some("gemini") => model_turn(&record, &mut self.answered, out)?,
            _ => out.report.skipped += 1,
        }
        Ok(())
    }
}

fn key(id: &str) -> Key {
    crate::format::ids::id_key(id)
}

fn model_turn(
    record: &Map<String, Value>,
    answered: &mut HashSet<Key>,
    out: &mut Sink,
) -> io::Result<()> {
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
        return Ok(());
    }
    out.push(json!({"role": "model", "parts": parts}))?;

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
            answered.insert(key(id));
        }
    }
    if !responses.is_empty() {
        out.push(json!({"role": "user", "parts": responses}))?;
    }
    Ok(())
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
