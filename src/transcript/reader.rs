//! Streaming a transcript back: line by line, never the whole file in
//! memory, tolerant of torn and unparsable lines (skipped and counted).
//!
//! Loading a session or reconstructing its state needs only a few fields of
//! each line (roles, block types, ids, tool names, records), so those paths
//! parse a [`Head`]: everything else, tool output above all, is skipped by
//! the JSON parser without being copied or allocated. `transcript/repair`,
//! which rewrites lines, parses them whole with [`parse_line`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::format::{Digest, DigestKind, Format, Side, Skim, anthropic};
use crate::protocol::{RECORD_KIND, ReplacementRecord, SeenLine};
use crate::state::{Id, Replacement};

/// One parsed transcript line.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Message(Value),
    Record(ReplacementRecord),
    Seen(SeenLine),
    /// A well-formed line of a kind this version does not use.
    Ignored,
}

/// Parse one line (without its newline). `None` when it is not a valid line.
pub fn parse_line(line: &[u8]) -> Option<Entry> {
    let value: Value = crate::json::from_slice(line).ok()?;
    let mut obj = match value {
        Value::Object(obj) => obj,
        _ => return None,
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("message") => match obj.remove("message") {
            Some(m @ Value::Object(_)) => Some(Entry::Message(m)),
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
        Some("seen") => serde_json::from_value(Value::Object(obj))
            .ok()
            .map(Entry::Seen),
        Some(_) => Some(Entry::Ignored),
        None => None,
    }
}

/// The format a transcript's lines say it is in: its `session` line, else
/// the shape of its messages ([`crate::import::detect`] on the first
/// bytes), else `anthropic`.
pub fn detect_format(head: &[u8]) -> Format {
    crate::import::detect(head)
        .map(|c| c.format())
        .unwrap_or_default()
}

/// How much of a transcript [`detect_format`] needs at most.
pub const DETECT_HEAD: u64 = 8 << 20;

/// The first [`DETECT_HEAD`] bytes of a transcript (a fork's read through
/// its parent's).
pub fn read_head(path: &std::path::Path) -> io::Result<Vec<u8>> {
    super::fork::read_head(path, DETECT_HEAD)
}

/// The parts of a transcript line that state is built from; the message is
/// parsed by its format's skim.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LineHead<'a, M> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    message: Option<M>,
    record: Option<ReplacementRecord>,
    tool_use_ids: Option<Vec<String>>,
    #[serde(default)]
    digests: Vec<String>,
}

/// One transcript line, as far as state is concerned.
#[derive(Debug)]
pub enum Head<'a> {
    Message(Skim<'a>),
    Record(ReplacementRecord),
    Seen(SeenLine),
    Ignored,
}

/// Parse the head of one line (without its newline); `None` when it is not
/// a valid line.
pub fn parse_head(format: Format, line: &[u8]) -> Option<Head<'_>> {
    match format {
        Format::Anthropic => head_with::<anthropic::MessageHead>(line, anthropic::skim_head),
        other => {
            let dialect = other.dialect();
            head_with::<&RawValue>(line, |raw| {
                dialect.skim(raw.get().as_bytes()).unwrap_or_default()
            })
        }
    }
}

fn head_with<'a, M: Deserialize<'a>>(
    line: &'a [u8],
    skim: impl FnOnce(M) -> Skim<'a>,
) -> Option<Head<'a>> {
    let head: LineHead<'a, M> = crate::json::from_slice(line).ok()?;
    match head.kind.as_deref() {
        Some("message") => head.message.map(|m| Head::Message(skim(m))),
        Some("replacement") => {
            let record = head.record?;
            Some(if record.kind == RECORD_KIND {
                Head::Record(record)
            } else {
                Head::Ignored
            })
        }
        Some("seen") => head.tool_use_ids.map(|tool_use_ids| {
            Head::Seen(SeenLine {
                tool_use_ids,
                digests: head.digests,
            })
        }),
        Some(_) => Some(Head::Ignored),
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

/// How [`read_lines`] reads.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// A longer line is torn: skipped (handed to `f` as unparsable) without
    /// being held in memory, and reading resumes after its newline.
    pub max_line: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        // No line toolwire writes is longer than the frame that brought it.
        ReadLimits {
            max_line: crate::transport::codec::MAX_FRAME,
        }
    }
}

/// Read every line, handing each to `f` with its span and head (`None` for
/// an unparsable or overlong line). Returns the length up to the end of the
/// last complete line, and whether a torn (unterminated) tail followed it.
///
/// `cancelled` is asked before each read; once it says yes, reading stops
/// with an [`io::ErrorKind::Interrupted`] error.
pub fn read_lines<R: BufRead>(
    format: Format,
    mut reader: R,
    limits: ReadLimits,
    cancelled: impl Fn() -> bool,
    mut f: impl FnMut(Span, Option<Head>),
) -> io::Result<(u64, bool)> {
    let mut buf = Vec::new();
    let mut offset = 0u64;
    // Bytes of the current line consumed so far, and whether it has
    // outgrown the limit (its bytes are then dropped as they come).
    let mut line_len = 0u64;
    let mut overlong = false;
    loop {
        if cancelled() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "reading cancelled",
            ));
        }
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if chunk.is_empty() {
            return Ok((offset, line_len > 0));
        }
        let newline = memchr::memchr(b'\n', chunk);
        if let (Some(i), 0) = (newline, line_len) {
            // The whole line is in the buffer (the usual case): parse it
            // where it is instead of copying it out first.
            let span = Span {
                offset,
                len: i as u64 + 1,
            };
            f(
                span,
                if i > limits.max_line {
                    None
                } else {
                    parse_head(format, &chunk[..i])
                },
            );
            offset += span.len;
            reader.consume(i + 1);
            continue;
        }
        let (take, complete) = match newline {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let body = &chunk[..if complete { take - 1 } else { take }];
        if !overlong {
            if buf.len() + body.len() > limits.max_line {
                overlong = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(body);
            }
        }
        line_len += take as u64;
        reader.consume(take);
        if complete {
            let span = Span {
                offset,
                len: line_len,
            };
            f(
                span,
                if overlong {
                    None
                } else {
                    parse_head(format, &buf)
                },
            );
            offset += line_len;
            line_len = 0;
            overlong = false;
            buf.clear();
        }
    }
}

/// Open `path` for reading only if it is a regular file: a FIFO would
/// block the reader forever and a device such as `/dev/zero` never ends.
/// Opened without blocking and without following a final symbolic link's
/// target into a non-file.
pub fn open_regular(path: &std::path::Path) -> crate::error::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|err| crate::error::Error::storage(path, &err))?;
    let meta = file
        .metadata()
        .map_err(|err| crate::error::Error::storage(path, &err))?;
    if !meta.is_file() {
        return Err(crate::error::Error::Storage {
            message: format!("{} is not a regular file", path.display()),
            path: Some(path.display().to_string()),
        });
    }
    Ok(file)
}

/// A session's state as a transcript records it, built in one pass; also
/// fed the messages and records a client passes to `state/reconstruct`.
///
/// A tool call is only taken in once all its results have followed it: a
/// trailing call left without results (a crash between the two halves of a
/// commit, or a hand-edited file) is reported through [`open_call_at`] so
/// the owner can cut it off and [`cut_open_call`] its effects.
///
/// Built to leave no garbage between the allocations it keeps: a call's id
/// is allocated once, when the call is read, and the same allocation
/// becomes the seen id when its result arrives; tool names are interned.
///
/// [`open_call_at`]: SessionImage::open_call_at
/// [`cut_open_call`]: SessionImage::cut_open_call
#[derive(Debug, Default)]
pub struct SessionImage {
    /// Results taken in, with the digest of their original
    /// ([`Digest::ANY`] when what was sent is a replacement), in order:
    /// from messages and from `seen` lines.
    pub seen: Vec<(Id, Digest)>,
    /// Replacement records in order (the first for an id and original wins).
    pub replacements: Vec<(Id, Digest, Replacement)>,
    /// Calls whose result has not been seen: id → tool name.
    pub undecided_names: HashMap<Id, Arc<str>>,
    interned: HashSet<Arc<str>>,
    /// Ids a record or `seen` line names with a SHA-256 digest (written
    /// before XXH3 digests were introduced): the originals of these in
    /// later messages are digested in SHA-256 too, so the old decision
    /// binds to them exactly as it did. Empty for new journals.
    legacy: HashSet<Arc<str>>,
    pub messages: usize,
    pub records: usize,
    pub skipped: usize,
    open: Option<OpenCall>,
}

/// A tool call read but not yet fully answered.
#[derive(Debug)]
struct OpenCall {
    at: u64,
    ids: Vec<Id>,
    outstanding: usize,
    seen_before: usize,
    messages_before: usize,
}

impl SessionImage {
    pub fn add(&mut self, span: Span, head: Option<Head>) {
        match head {
            None => self.skipped += 1,
            Some(Head::Ignored) => {}
            Some(Head::Record(record)) => self.add_record(&record),
            Some(Head::Seen(seen)) => self.add_seen(&seen),
            Some(Head::Message(msg)) => self.add_message(Some(span.offset), msg),
        }
    }

    /// A replacement record.
    pub fn add_record(&mut self, record: &ReplacementRecord) {
        self.records += 1;
        let digest = record
            .digest
            .as_deref()
            .and_then(Digest::parse)
            .unwrap_or(Digest::ANY);
        self.note_kind(&record.tool_use_id, digest);
        self.replacements.push((
            crate::state::keep_id(&record.tool_use_id),
            digest,
            Replacement::new(&record.replacement),
        ));
    }

    /// A `seen` line: results `budget/apply` decided to send whole.
    pub fn add_seen(&mut self, seen: &SeenLine) {
        self.records += 1;
        for (i, id) in seen.tool_use_ids.iter().enumerate() {
            let digest = seen
                .digests
                .get(i)
                .and_then(|d| Digest::parse(d))
                .unwrap_or(Digest::ANY);
            self.note_kind(id, digest);
            let key = match self.undecided_names.remove_entry(id.as_str()) {
                Some((key, _)) => key,
                None => crate::state::keep_id(id),
            };
            self.seen.push((key, digest));
        }
    }

    fn note_kind(&mut self, id: &str, digest: Digest) {
        if digest.kind() == Some(DigestKind::Sha256) && !self.legacy.contains(id) {
            self.legacy.insert(Arc::from(id));
        }
    }

    /// The kind the originals of `id` are digested in (see `legacy`).
    fn kind_of(&self, id: &str) -> DigestKind {
        if !self.legacy.is_empty() && self.legacy.contains(id) {
            DigestKind::Sha256
        } else {
            Digest::NEW
        }
    }

    /// One message, skimmed. `offset` is its place in a transcript file
    /// (for cutting an incomplete tail), if any.
    pub fn add_message(&mut self, offset: Option<u64>, msg: Skim) {
        let results = if msg.side == Some(Side::User) {
            msg.results
        } else {
            Vec::new()
        };
        if self.open.is_some() && results.is_empty() {
            // A call left open in the middle of a file is not a torn tail:
            // take it as it stands (fixing it is `transcript/repair`'s job).
            self.open = None;
        }
        self.messages += 1;
        if msg.side == Some(Side::Assistant) {
            let mut ids = Vec::new();
            for (id, name) in msg.calls {
                let id = crate::state::keep_id(&id);
                let name = self.intern(&name);
                self.undecided_names.insert(id.clone(), name);
                ids.push(id);
            }
            if let (Some(at), None, false) = (offset, &self.open, ids.is_empty()) {
                self.open = Some(OpenCall {
                    at,
                    outstanding: ids.len(),
                    ids,
                    seen_before: self.seen.len(),
                    messages_before: self.messages - 1,
                });
            }
        }
        for result in results {
            let id: &str = &result.id;
            let key = match self.undecided_names.remove_entry(id) {
                Some((key, _)) => key,
                None => crate::state::keep_id(id),
            };
            if let Some(open) = &mut self.open
                && open.ids.iter().any(|o| **o == *id)
            {
                open.outstanding = open.outstanding.saturating_sub(1);
            }
            let digest = match &result.original {
                Some(original) => original.digest(self.kind_of(id)),
                None => Digest::ANY,
            };
            self.seen.push((key, digest));
        }
        if self.open.as_ref().is_some_and(|o| o.outstanding == 0) {
            self.open = None;
        }
    }

    /// Every decision the image records, in the order they take effect:
    /// replacements first (a journaled replacement was sent, whether or not
    /// its message was appended), then results sent whole.
    pub fn decisions(&self) -> impl Iterator<Item = (Id, Digest, Option<Replacement>)> {
        self.replacements
            .iter()
            .map(|(id, d, r)| (id.clone(), *d, Some(r.clone())))
            .chain(self.seen.iter().map(|(id, d)| (id.clone(), *d, None)))
    }

    fn intern(&mut self, name: &str) -> Arc<str> {
        match self.interned.get(name) {
            Some(name) => name.clone(),
            None => {
                let name: Arc<str> = Arc::from(name);
                self.interned.insert(name.clone());
                name
            }
        }
    }

    /// Offset of a trailing tool call still missing results.
    pub fn open_call_at(&self) -> Option<u64> {
        self.open.as_ref().map(|o| o.at)
    }

    /// Forget everything from the trailing open call on, as if the file
    /// ended before it.
    pub fn cut_open_call(&mut self) {
        if let Some(open) = self.open.take() {
            self.seen.truncate(open.seen_before);
            self.messages = open.messages_before;
            for id in &open.ids {
                self.undecided_names.remove(id);
            }
        }
    }

    /// Take a trailing open call as it stands (reading a file that is not
    /// ours to cut).
    pub fn finish_lenient(&mut self) {
        self.open = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines parsed in place (whole in the buffer) and lines gathered
    /// across reads come out the same, torn and overlong ones included.
    #[test]
    fn lines_read_the_same_whatever_the_buffer_size() {
        let mut input = Vec::new();
        for i in 0..40 {
            let line = serde_json::json!({"type": "message", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "x".repeat(i * 7)}]}});
            input.extend_from_slice(line.to_string().as_bytes());
            input.push(b'\n');
            if i % 9 == 0 {
                input.extend_from_slice(b"{not json\n");
            }
        }
        input.extend_from_slice(b"{\"type\":\"mess");
        let read = |capacity: usize, max_line: usize| {
            let mut seen = Vec::new();
            let end = read_lines(
                Format::Anthropic,
                io::BufReader::with_capacity(capacity, &input[..]),
                ReadLimits { max_line },
                || false,
                |span, head| {
                    let ids = match head {
                        Some(Head::Message(skim)) => {
                            skim.results.iter().map(|r| r.id.to_string()).collect()
                        }
                        Some(_) => vec!["other".to_owned()],
                        None => vec!["skipped".to_owned()],
                    };
                    seen.push((span.offset, span.len, ids));
                },
            )
            .unwrap();
            (end, seen)
        };
        for max_line in [200, 1 << 20] {
            let whole = read(1 << 20, max_line);
            assert!(whole.0.1, "the torn tail is reported");
            assert_eq!(whole.1.len(), 45);
            for capacity in [1, 7, 64, 333] {
                assert_eq!(read(capacity, max_line), whole, "capacity {capacity}");
            }
        }
    }
}
