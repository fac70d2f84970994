//! Session transcripts: JSON Lines at `<dataDir>/sessions/<sessionId>.jsonl`.
//!
//! ```text
//! {"type":"message","message":{"role":"assistant","content":[{"type":"tool_use",...}]}}
//! {"type":"message","message":{"role":"user","content":[{"type":"tool_result",...}]}}
//! {"type":"replacement","record":{"kind":"tool-result","toolUseId":"...","replacement":"...","digest":"..."}}
//! {"type":"seen","toolUseIds":["..."],"digests":["..."]}
//! ```
//!
//! [`writer`] appends commits durably ([`wal`] makes the small ones of
//! many sessions durable with one sync), [`guard`] decides what a message
//! appends (holding tool calls back until all their results are in),
//! [`reader`] streams a transcript back, [`checkpoint`] saves what it read
//! so a resume reads only what came after, and [`repair`] rewrites a
//! broken one.

pub mod check;
pub mod checkpoint;
pub mod fork;
pub mod guard;
pub mod import;
pub mod reader;
pub mod repair;
mod stream;
pub mod targets;
pub mod wal;
pub mod writer;

use serde_json::Value;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A session id: 1–128 characters of `[A-Za-z0-9._-]`, not starting with `.`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

impl SessionId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SessionId {
    type Error = String;
    fn try_from(id: String) -> Result<Self, String> {
        let ok = (1..=128).contains(&id.len())
            && !id.starts_with('.')
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(SessionId(id))
        } else {
            Err(format!(
                "invalid session id {id:?}: use 1-128 characters of [A-Za-z0-9._-], not starting with '.'"
            ))
        }
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.0
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for SessionId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SessionId".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "1-128 characters of [A-Za-z0-9._-], not starting with '.'",
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"
        })
    }
}

/// The exact string that was sent in place of an original tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplacementRecord {
    /// `"tool-result"`; records of other kinds are ignored on read.
    pub kind: String,
    pub tool_use_id: String,
    pub replacement: String,
    /// Digest of the original the replacement was made from, a hash of
    /// the result's content as compact JSON: `xxh3:` and 16 hex digits
    /// (XXH3-64), or 16 hex digits (the first 8 bytes of SHA-256, written
    /// before XXH3 and still read). The replacement is put back only on
    /// that original.
    /// Absent in version-1 transcripts: then it applies to any original
    /// with this id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The replacement clears an old result that was sent whole before
    /// (PROTOCOL.md 11.3): it takes the place of that earlier decision.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cleared: bool,
}

/// Results `budget/apply` decided to send whole, journaled before it
/// replies (`{"type":"seen","toolUseIds":[...],"digests":[...]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeenLine {
    pub tool_use_ids: Vec<String>,
    /// The digest of each id's original, in the same order (see
    /// `ReplacementRecord.digest`); may be shorter in hand-written files,
    /// an id without a digest then applies to any original.
    #[serde(default)]
    pub digests: Vec<String>,
}

pub const RECORD_KIND: &str = "tool-result";

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum LineRef<'a> {
    /// What [`Lines::push_message`] writes (without serde); the tests hold
    /// it to this.
    #[cfg_attr(not(test), allow(dead_code))]
    Message {
        message: &'a Value,
    },
    Replacement {
        record: &'a ReplacementRecord,
    },
    Seen {
        #[serde(flatten)]
        seen: &'a SeenLine,
    },
}

/// What [`Lines`] reserves for its first line: a pair's message or result
/// line fits, a large one grows from there. The lines are short-lived
/// (written, then dropped), so the room is never kept. Under 1 KiB, so
/// glibc serves it from the thread's own cache: a block of 1 KiB or more
/// takes its shared arena's lock and may first merge its free lists.
const LINE_ROOM: usize = 1000;

/// Lines ready to be appended in one write.
#[derive(Debug, Default, Clone)]
pub struct Lines {
    pub bytes: Vec<u8>,
    pub count: usize,
}

impl Lines {
    /// The line `{"type":"message","message":M}`, as serde writes
    /// [`LineRef::Message`], written without serde (`json::write`).
    pub fn push_message(&mut self, message: &Value) {
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(LINE_ROOM);
        }
        self.bytes
            .extend_from_slice(br#"{"type":"message","message":"#);
        crate::json::write::write_value(&mut self.bytes, message);
        self.bytes.extend_from_slice(b"}\n");
        self.count += 1;
    }

    /// The line of a message the pair guard holds: a message held as its
    /// compact text is written as it came, which is what
    /// [`Lines::push_message`] writes of its value.
    pub fn push_msg(&mut self, message: &guard::Msg) {
        match message {
            guard::Msg::Value(value) => self.push_message(value),
            guard::Msg::Text { text, .. } => {
                let text = text.get().as_bytes();
                if self.bytes.capacity() == 0 {
                    self.bytes.reserve(LINE_ROOM.max(text.len() + 32));
                }
                self.bytes
                    .extend_from_slice(br#"{"type":"message","message":"#);
                self.bytes.extend_from_slice(text);
                self.bytes.extend_from_slice(b"}\n");
                self.count += 1;
            }
        }
    }

    pub fn push_record(&mut self, record: &ReplacementRecord) {
        self.push(&LineRef::Replacement { record });
    }

    pub fn push_seen(&mut self, seen: &SeenLine) {
        self.push(&LineRef::Seen { seen });
    }

    fn push(&mut self, line: &LineRef) {
        // Room for a typical line at once, rather than growing through a
        // reallocation at every doubling from 8 bytes while it serializes.
        if self.bytes.capacity() == 0 {
            self.bytes.reserve(LINE_ROOM);
        }
        // Serializing a `Value` or plain strings cannot fail.
        if serde_json::to_writer(&mut self.bytes, line).is_ok() {
            self.bytes.push(b'\n');
            self.count += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The first line of a transcript in a format other than `anthropic`
/// (with its newline); `None` for `anthropic`, whose transcripts have none.
pub fn session_line(format: crate::format::Format) -> Option<Vec<u8>> {
    (format != crate::format::Format::Anthropic).then(|| {
        format!(
            "{{\"type\":\"session\",\"format\":\"{}\"}}\n",
            format.name()
        )
        .into_bytes()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_line_is_what_serde_writes_of_it() {
        let message: Value = serde_json::from_str(
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t\"1","content":"a\nb","n":1E5}]}"#,
        )
        .unwrap();
        let mut lines = Lines::default();
        lines.push_message(&message);
        lines.push_message(&Value::Null);
        let mut expected = Vec::new();
        for message in [&message, &Value::Null] {
            serde_json::to_writer(&mut expected, &LineRef::Message { message }).unwrap();
            expected.push(b'\n');
        }
        assert_eq!(String::from_utf8(lines.bytes), String::from_utf8(expected));
        assert_eq!(lines.count, 2);
    }

    #[test]
    fn a_message_held_as_text_is_written_as_its_value() {
        let text = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"n":1e+5,"s":"a\"\u0001é"}}]}"#;
        assert!(crate::format::is_compact_json(text.as_bytes()));
        let raw = serde_json::value::RawValue::from_string(text.to_owned()).unwrap();
        let held = guard::Msg::anthropic_text(raw).unwrap();
        let mut lines = Lines::default();
        lines.push_msg(&held);
        let mut expected = Lines::default();
        expected.push_message(&serde_json::from_str(text).unwrap());
        assert_eq!(
            String::from_utf8(lines.bytes),
            String::from_utf8(expected.bytes)
        );
        assert_eq!(lines.count, 1);
        // As a shared store keeps a pending pair: the same JSON.
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::to_string(&held).unwrap(),
            serde_json::to_string(&guard::Msg::Value(value)).unwrap()
        );
    }
}
