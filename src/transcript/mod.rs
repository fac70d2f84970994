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
//! [`reader`] streams a transcript back, and [`repair`] rewrites a broken one.

pub mod check;
pub mod fork;
pub mod guard;
pub mod reader;
pub mod repair;
mod shadow;
pub mod wal;
pub mod writer;

use serde::Serialize;
use serde_json::Value;

use crate::protocol::{ReplacementRecord, SeenLine};

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum LineRef<'a> {
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

/// Lines ready to be appended in one write.
#[derive(Debug, Default, Clone)]
pub struct Lines {
    pub bytes: Vec<u8>,
    pub count: usize,
}

impl Lines {
    pub fn push_message(&mut self, message: &Value) {
        self.push(&LineRef::Message { message });
    }

    pub fn push_record(&mut self, record: &ReplacementRecord) {
        self.push(&LineRef::Replacement { record });
    }

    pub fn push_seen(&mut self, seen: &SeenLine) {
        self.push(&LineRef::Seen { seen });
    }

    fn push(&mut self, line: &LineRef) {
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
