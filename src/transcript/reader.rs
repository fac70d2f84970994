//! Streaming a transcript back: line by line, never the whole file in
//! memory, tolerant of torn and unparsable lines (skipped and counted).

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead};
use std::sync::Arc;

use serde_json::Value;

use crate::message;
use crate::protocol::{RECORD_KIND, ReplacementRecord};
use crate::state::Replacement;

/// One parsed transcript line.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Message(Value),
    Record(ReplacementRecord),
    /// A well-formed line of a kind this version does not use.
    Ignored,
}

/// Parse one line (without its newline). `None` when it is not a valid line.
pub fn parse_line(line: &[u8]) -> Option<Entry> {
    let value: Value = serde_json::from_slice(line).ok()?;
    let mut obj = match value {
        Value::Object(obj) => obj,
        _ => return None,
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("message") => match obj.remove("message") {
            Some(m @ Value::Object(_)) if message::role(&m).is_some() => Some(Entry::Message(m)),
            _ => None,
        },
        Some("replacement") => {
            let record: ReplacementRecord = serde_json::from_value(obj.remove("record")?).ok()?;
            if record.kind == RECORD_KIND {
                Some(Entry::Record(record))
            } else {
                Some(Entry::Ignored)
            }
        }
        Some(_) => Some(Entry::Ignored),
        None => None,
    }
}

/// Where a line sits in its file.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub offset: u64,
    /// Length including the newline.
    pub len: u64,
}

/// Read every line, handing each to `f` with its span and parse (`None`
/// for an unparsable line). Returns the length up to the end of the last
/// complete line, and whether a torn (unterminated) tail followed it.
pub fn read_lines<R: BufRead>(
    mut reader: R,
    mut f: impl FnMut(Span, Option<Entry>),
) -> io::Result<(u64, bool)> {
    let mut buf = Vec::new();
    let mut offset = 0u64;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok((offset, false));
        }
        if buf.last() != Some(&b'\n') {
            return Ok((offset, true));
        }
        let span = Span {
            offset,
            len: n as u64,
        };
        f(span, parse_line(&buf[..n - 1]));
        offset += n as u64;
    }
}

/// A session's state as its transcript records it, rebuilt in one pass.
///
/// A tool call is only taken in once all its results have followed it: a
/// trailing call left without results (a crash between the two halves of a
/// commit, or a hand-edited file) is reported through `open_call_at` so the
/// owner can cut it off, and none of it is counted.
#[derive(Debug, Default)]
pub struct SessionImage {
    pub seen: Vec<Arc<str>>,
    pub replacements: HashMap<Arc<str>, Arc<Replacement>>,
    pub tool_names: Vec<(Arc<str>, Arc<str>)>,
    pub messages: usize,
    pub records: usize,
    pub skipped: usize,
    /// Offset of a trailing tool call still missing results.
    pub open_call_at: Option<u64>,
    staged: Staged,
}

#[derive(Debug, Default)]
struct Staged {
    outstanding: HashSet<String>,
    seen: Vec<Arc<str>>,
    names: Vec<(Arc<str>, Arc<str>)>,
    messages: usize,
}

impl SessionImage {
    pub fn add(&mut self, span: Span, entry: Option<Entry>) {
        match entry {
            None => self.skipped += 1,
            Some(Entry::Ignored) => {}
            Some(Entry::Record(record)) => {
                self.records += 1;
                self.replacements.insert(
                    record.tool_use_id.into(),
                    Arc::new(Replacement::new(&record.replacement)),
                );
            }
            Some(Entry::Message(msg)) => self.add_message(span, &msg),
        }
    }

    fn add_message(&mut self, span: Span, msg: &Value) {
        let answers = message::role(msg) == Some("user") && message::has_tool_results(msg);
        if self.open_call_at.is_some() && !answers {
            // A call left open in the middle of the file is not a torn tail:
            // take it as it stands (fixing it is `transcript/repair`'s job).
            self.finish_lenient();
        }
        let calls: Vec<(&str, &str)> = if message::role(msg) == Some("assistant") {
            message::tool_uses(msg).collect()
        } else {
            Vec::new()
        };
        if self.open_call_at.is_none() && !calls.is_empty() {
            self.open_call_at = Some(span.offset);
            self.staged.outstanding = calls.iter().map(|(id, _)| id.to_string()).collect();
        }
        let staging = self.open_call_at.is_some();
        let (seen, names, messages) = if staging {
            (
                &mut self.staged.seen,
                &mut self.staged.names,
                &mut self.staged.messages,
            )
        } else {
            (&mut self.seen, &mut self.tool_names, &mut self.messages)
        };
        *messages += 1;
        for (id, name) in calls {
            names.push((id.into(), name.into()));
        }
        if message::role(msg) == Some("user") {
            for (_, id) in message::tool_results(msg) {
                seen.push(id.into());
                self.staged.outstanding.remove(id);
            }
        }
        if staging && self.staged.outstanding.is_empty() {
            let staged = std::mem::take(&mut self.staged);
            self.seen.extend(staged.seen);
            self.tool_names.extend(staged.names);
            self.messages += staged.messages;
            self.open_call_at = None;
        }
    }

    /// Fold a trailing open call in anyway (reading someone else's file,
    /// where nothing is cut).
    pub fn finish_lenient(&mut self) {
        let staged = std::mem::take(&mut self.staged);
        self.seen.extend(staged.seen);
        self.tool_names.extend(staged.names);
        self.messages += staged.messages;
        self.open_call_at = None;
    }
}
