//! Streaming a transcript back: line by line, never the whole file in
//! memory, tolerant of torn and unparsable lines (skipped and counted).
//!
//! Loading a session or reconstructing its state needs only a few fields of
//! each line (roles, block types, ids, tool names, records), so those paths
//! parse a [`Head`]: everything else, tool output above all, is skipped by
//! the JSON parser without being copied or allocated. `transcript/repair`,
//! which rewrites lines, parses them whole with [`parse_line`].

pub mod claude_code;
mod shadow;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{RECORD_KIND, ReplacementRecord, SeenLine};
use crate::format::{Digest, DigestKind, Format, Side, Skim, anthropic};
use crate::state::{Id, IdHash, Replacement};

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
/// the shape of its messages ([`crate::transcript::import::detect`] on the first
/// bytes), else `anthropic`.
pub fn detect_format(head: &[u8]) -> Format {
    crate::transcript::import::detect(head)
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
    /// A record, and its replacement as the state keeps it when the reader
    /// already made that (on the thread that parsed the line).
    Record(ReplacementRecord, Option<Replacement>),
    Seen(SeenLine),
    Ignored,
}

/// Parse the head of one line (without its newline); `None` when it is not
/// a valid line. A line of Anthropic messages with long strings in it is
/// read through its [`shadow`](shadow), with the same answer.
pub fn parse_head(format: Format, line: &[u8]) -> Option<Head<'_>> {
    if format == Format::Anthropic
        && let Some(head) = shadow::head(line)
    {
        return Some(head);
    }
    parse_head_plain(format, line)
}

/// [`parse_head`] by serde_json alone.
pub fn parse_head_plain(format: Format, line: &[u8]) -> Option<Head<'_>> {
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
                Head::Record(record, None)
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

impl Span {
    /// The span of a line read from offset `at` of its file on.
    pub fn after(self, at: u64) -> Span {
        Span {
            offset: self.offset + at,
            len: self.len,
        }
    }
}

/// How [`read_lines`] reads.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// A longer line is torn: skipped (handed to `f` as unparsable) without
    /// being held in memory, and reading resumes after its newline.
    pub max_line: usize,
    /// How many bytes are read at a time (a longer line grows the buffer
    /// up to `max_line`). A window's complete lines are parsed on two
    /// threads when it is large enough and a spare core is free.
    pub window: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        // No line toolwire writes is longer than the frame that brought it.
        ReadLimits {
            max_line: crate::transport::codec::MAX_FRAME,
            window: 4 << 20,
        }
    }
}

/// A window's lines are split between two threads only from this size on:
/// below it a thread costs more than it saves.
const PARALLEL_FROM: usize = 1 << 20;

/// Read every line, handing each to `f` in order with its span and head
/// (`None` for an unparsable or overlong line). Returns the length up to
/// the end of the last complete line, and whether a torn (unterminated)
/// tail followed it.
///
/// Reads a window at a time. While a spare core is free (one helper per
/// spare core, process-wide), a large window's complete lines are cut into
/// pieces that a helper thread starts on at once and this one joins in on
/// once it has read the next window. Whichever thread
/// parses a line also digests its results' originals and packs its
/// record's replacement. `f` sees the same lines in the same order either
/// way. `cancelled` is asked before each read; once it
/// says yes, reading stops with an [`io::ErrorKind::Interrupted`] error.
pub fn read_lines<R: io::Read>(
    format: Format,
    mut reader: R,
    limits: ReadLimits,
    cancelled: impl Fn() -> bool,
    mut f: impl FnMut(Span, Option<Head>),
) -> io::Result<(u64, bool)> {
    let mut cur = vec![0u8; limits.window.clamp(1, limits.max_line.saturating_add(1))];
    // Read into while a helper parses `cur`; allocated when first needed.
    let mut next = Vec::new();
    // `cur[..filled]` holds the stream from `base` on; while an overlong
    // line is being dropped, `skipping` is where it began.
    let (mut filled, mut eof) = fill(&mut reader, &mut cur, 0, &cancelled)?;
    let mut base = 0u64;
    let mut skipping: Option<u64> = None;
    // A read large enough for a helper frees much on two threads' heaps
    // when done: counted as large work, which hands it back once the
    // process has gone quiet.
    let mut large = None;
    loop {
        let mut pos = 0;
        if let Some(start) = skipping {
            match memchr::memchr(b'\n', &cur[..filled]) {
                Some(i) => {
                    let end = base + i as u64 + 1;
                    f(
                        Span {
                            offset: start,
                            len: end - start,
                        },
                        None,
                    );
                    skipping = None;
                    pos = i + 1;
                }
                None => pos = filled,
            }
        }
        // Whole lines in `cur[pos..end]`, then the start of one.
        let end = match skipping {
            Some(_) => filled,
            None => memchr::memrchr(b'\n', &cur[pos..filled]).map_or(pos, |i| pos + i + 1),
        };
        let rest = filled - end;
        // An unfinished line longer than allowed is dropped as it comes.
        if skipping.is_none() && rest > limits.max_line {
            skipping = Some(base + end as u64);
        }
        let carry = if skipping.is_some() { 0 } else { rest };
        let next_base = base + (filled - carry) as u64;
        let region = &cur[pos..end];
        let helper = match (eof, region.len() >= PARALLEL_FROM) {
            (false, true) => Helper::take(),
            _ => None,
        };
        if let Some(helper) = helper {
            large.get_or_insert_with(crate::heap::LargeWork::begin);
            if next.len() != cur.len() {
                // Zeroed by the system as it is first written, not here.
                next = vec![0; cur.len()];
            }
            next[..carry].copy_from_slice(&cur[filled - carry..filled]);
            let at = base + pos as u64;
            let pieces = pieces(region);
            // Both threads take the next piece left until none is: the
            // helper from the start, this one once it has read the next
            // window, so neither waits for the other but at the very end
            // (a fixed split left one idle while the other still parsed).
            let taken = AtomicUsize::new(0);
            let work = || {
                let mut parsed = Vec::new();
                loop {
                    let i = taken.fetch_add(1, Ordering::Relaxed);
                    let Some(&(from, to)) = pieces.get(i) else {
                        return parsed;
                    };
                    parsed.push((
                        i,
                        parse_all(format, &region[from..to], at + from as u64, limits),
                    ));
                }
            };
            // The helper allocates as this thread does (`heap::transient`).
            let transient = crate::heap::is_transient();
            let (mine, theirs, read) = std::thread::scope(|scope| {
                let other = std::thread::Builder::new()
                    .name("toolwire-reader".into())
                    .stack_size(crate::process::THREAD_STACK)
                    .spawn_scoped(scope, move || crate::heap::transient_if(transient, work));
                let read = fill(&mut reader, &mut next, carry, &cancelled);
                let mine = work();
                let theirs = other.ok().and_then(|other| other.join().ok());
                #[cfg(test)]
                if theirs.as_ref().is_some_and(|t| !t.is_empty()) {
                    HELPED.fetch_add(1, Ordering::Relaxed);
                }
                (mine, theirs, read)
            });
            drop(helper);
            let mut parsed: Vec<Option<Vec<_>>> = pieces.iter().map(|_| None).collect();
            for (i, lines) in mine.into_iter().chain(theirs.into_iter().flatten()) {
                parsed[i] = Some(lines);
            }
            for (&(from, to), lines) in pieces.iter().zip(parsed) {
                match lines {
                    Some(lines) => lines.into_iter().for_each(|(span, head)| f(span, head)),
                    // The helper failed on it (it cannot, short of a bug):
                    // parsed here, so no line is ever lost.
                    None => each_line(format, &region[from..to], at + from as u64, limits, &mut f),
                }
            }
            (filled, eof) = read?;
            std::mem::swap(&mut cur, &mut next);
        } else {
            each_line(format, region, base + pos as u64, limits, &mut f);
            if eof {
                return Ok(match skipping {
                    Some(start) => (start, true),
                    None => (base + end as u64, rest > 0),
                });
            }
            cur.copy_within(filled - carry..filled, 0);
            if carry == cur.len() {
                // One line fills the window: make room for the rest of it.
                let grown = (cur.len() * 2).min(limits.max_line.saturating_add(1));
                cur.resize(grown, 0);
            }
            (filled, eof) = fill(&mut reader, &mut cur, carry, &cancelled)?;
        }
        base = next_base;
    }
}

/// How many pieces a window shared with a helper is cut into.
const PIECES: usize = 32;

/// `region` (whole lines) cut into about [`PIECES`] ranges at line ends.
fn pieces(region: &[u8]) -> Vec<(usize, usize)> {
    let mut pieces = Vec::with_capacity(PIECES);
    let mut start = 0;
    for k in 1..PIECES {
        let from = (region.len() * k / PIECES).max(start);
        let end = memchr::memchr(b'\n', &region[from..]).map_or(region.len(), |i| from + i + 1);
        if end > start {
            pieces.push((start, end));
        }
        start = end;
    }
    if start < region.len() {
        pieces.push((start, region.len()));
    }
    pieces
}

/// Read into `buf[filled..]` until it is full or the stream ends; the new
/// length, and whether the stream ended.
fn fill(
    reader: &mut impl io::Read,
    buf: &mut [u8],
    mut filled: usize,
    cancelled: &impl Fn() -> bool,
) -> io::Result<(usize, bool)> {
    while filled < buf.len() {
        if cancelled() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "reading cancelled",
            ));
        }
        match reader.read(&mut buf[filled..]) {
            Ok(0) => return Ok((filled, true)),
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok((filled, false))
}

/// Every line of `region` with its head, in order.
fn parse_all(
    format: Format,
    region: &[u8],
    offset: u64,
    limits: ReadLimits,
) -> Vec<(Span, Option<Head<'_>>)> {
    let mut out = Vec::new();
    each_line(format, region, offset, limits, &mut |span, head| {
        out.push((span, head))
    });
    out
}

/// Parse each line of `region` where it lies, digest its results'
/// originals in the kind new journals use and pack its record's
/// replacement (the costly parts of taking a line in, done here so they
/// run on whichever thread parses the line).
fn each_line<'a>(
    format: Format,
    region: &'a [u8],
    mut offset: u64,
    limits: ReadLimits,
    f: &mut impl FnMut(Span, Option<Head<'a>>),
) {
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', region) {
        let line = &region[start..end];
        let span = Span {
            offset,
            len: (end + 1 - start) as u64,
        };
        offset += span.len;
        start = end + 1;
        let mut head = if line.len() > limits.max_line {
            None
        } else {
            parse_head(format, line)
        };
        match &mut head {
            Some(Head::Message(skim)) => {
                for result in &mut skim.results {
                    if result.digest.is_none() {
                        result.digest = result.original.as_ref().map(|o| o.digest(Digest::NEW));
                    }
                }
            }
            Some(Head::Record(record, replacement)) => {
                *replacement = Some(Replacement::new(&record.replacement));
            }
            _ => {}
        }
        f(span, head);
    }
}

/// Bytes read by position: what lets threads read parts of one file at
/// once, each at its own offset.
pub trait ReadAt {
    /// Read into `buf` from offset `at`: how many bytes were read, 0 at the
    /// end. Fewer than asked is not the end.
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize>;
}

impl ReadAt for crate::transcript::fork::Logical {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        crate::transcript::fork::Logical::read_at(self, buf, at)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        let rest = usize::try_from(at).map_or(&[][..], |at| self.get(at..).unwrap_or_default());
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}

/// A claim on one of the process's spare cores for a reader helper thread
/// (so however many sessions load at once, helpers never outnumber the
/// cores); given back when dropped.
struct Helper;

/// Helpers running now, process-wide.
static HELPERS: AtomicUsize = AtomicUsize::new(0);

/// Parts of windows parsed by a helper (for the tests).
#[cfg(test)]
static HELPED: AtomicUsize = AtomicUsize::new(0);

impl Helper {
    fn take() -> Option<Helper> {
        static SPARE: OnceLock<usize> = OnceLock::new();
        let spare = *SPARE.get_or_init(|| {
            std::thread::available_parallelism().map_or(0, |n| n.get().saturating_sub(1))
        });
        HELPERS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |busy| {
                (busy < spare).then_some(busy + 1)
            })
            .ok()
            .map(|_| Helper)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        HELPERS.fetch_sub(1, Ordering::AcqRel);
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
    /// Records clearing a result sent whole before (PROTOCOL.md 11.3), in
    /// order: applied over the decisions, never in place of one.
    pub cleared: Vec<(Id, Digest, Replacement)>,
    /// Calls whose result has not been seen: id → tool name.
    pub undecided_names: HashMap<Id, Arc<str>, IdHash>,
    pub(super) interned: HashSet<Arc<str>, IdHash>,
    /// Ids a record or `seen` line names with a SHA-256 digest (written
    /// before XXH3 digests were introduced): the originals of these in
    /// later messages are digested in SHA-256 too, so the old decision
    /// binds to them exactly as it did. Empty for new journals.
    pub(super) legacy: HashSet<Arc<str>, IdHash>,
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
            Some(Head::Record(record, replacement)) => self.add_prepared(&record, replacement),
            Some(Head::Seen(seen)) => self.add_seen(&seen),
            Some(Head::Message(msg)) => self.add_message(Some(span.offset), msg),
        }
    }

    /// A replacement record.
    pub fn add_record(&mut self, record: &ReplacementRecord) {
        self.add_prepared(record, None);
    }

    /// A replacement record, with its replacement if already made.
    fn add_prepared(&mut self, record: &ReplacementRecord, replacement: Option<Replacement>) {
        self.records += 1;
        let digest = record
            .digest
            .as_deref()
            .and_then(Digest::parse)
            .unwrap_or(Digest::ANY);
        self.note_kind(&record.tool_use_id, digest);
        let entry = (
            crate::state::keep_id(&record.tool_use_id),
            digest,
            replacement.unwrap_or_else(|| Replacement::new(&record.replacement)),
        );
        if record.cleared {
            self.cleared.push(entry);
        } else {
            self.replacements.push(entry);
        }
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
                Some(original) => {
                    let kind = self.kind_of(id);
                    match result.digest {
                        Some(digest) if digest.kind() == Some(kind) => digest,
                        _ => original.digest(kind),
                    }
                }
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

    pub(super) fn intern(&mut self, name: &str) -> Arc<str> {
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
        let read = |window: usize, max_line: usize| {
            let mut seen = Vec::new();
            let end = read_lines(
                Format::Anthropic,
                // A byte at a time: every read comes up short.
                OneByte(&input),
                ReadLimits { max_line, window },
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
            for window in [1, 7, 64, 333] {
                assert_eq!(read(window, max_line), whole, "window {window}");
            }
        }
    }

    /// About `len` bytes of text with what tool output holds: paths, quotes,
    /// backslashes, tabs, non-ASCII, newlines.
    fn tool_output(rng: &mut fastrand::Rng, len: usize) -> String {
        let mut out = String::with_capacity(len + 80);
        while out.len() < len {
            let line = rng.u32(1..2000);
            out.push_str(&format!(
                "src/session.rs:{line}: warning: unused \"x\" in C:\\dir\tcol é\n"
            ));
        }
        out
    }

    /// A reader that hands over one byte per read.
    struct OneByte<'a>(&'a [u8]);

    impl io::Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Windows parsed on two threads build the same image as lines read
    /// one by one: the same results, in the same order, with the same
    /// digests, a legacy journal's SHA-256 ones included.
    #[test]
    fn a_transcript_parsed_on_two_threads_builds_the_same_image() {
        let mut input = Vec::new();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut push = |line: serde_json::Value| {
            input.extend_from_slice(line.to_string().as_bytes());
            input.push(b'\n');
        };
        for i in 0..700 {
            let id = format!("t{i}");
            let len = rng.usize(10..9000);
            let body = tool_output(&mut rng, len);
            push(
                serde_json::json!({"type": "message", "message": {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {}}]}}),
            );
            if i == 300 {
                // A record from before XXH3: this id's originals are
                // digested in SHA-256 from here on.
                push(
                    serde_json::json!({"type": "replacement", "record": {"kind": "tool-result", "toolUseId": "t301", "replacement": "r", "digest": "00000000000000ff"}}),
                );
            }
            push(
                serde_json::json!({"type": "message", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": body}]}}),
            );
        }
        input.extend_from_slice(b"{\"type\":\"mess");
        assert!(input.len() > 3 * PARALLEL_FROM);
        let image = |window: usize| {
            let mut image = SessionImage::default();
            let read = read_lines(
                Format::Anthropic,
                &input[..],
                ReadLimits {
                    window,
                    ..ReadLimits::default()
                },
                || false,
                |span, head| image.add(span, head),
            )
            .unwrap();
            (read, image.seen, image.replacements.len(), image.messages)
        };
        let one_by_one = image(4096);
        assert_eq!(one_by_one.1.len(), 700);
        assert_eq!(
            one_by_one.1[301].1.kind(),
            Some(DigestKind::Sha256),
            "the legacy id is digested as its record was"
        );
        let helped = || HELPED.load(Ordering::Relaxed);
        let before = helped();
        for _ in 0..50 {
            assert_eq!(image(PARALLEL_FROM * 2), one_by_one);
            if helped() > before {
                break;
            }
        }
        if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
            assert!(helped() > before, "a helper thread parsed part of a window");
        }
    }
}
