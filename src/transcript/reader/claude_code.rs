//! A Claude Code session file read straight into a [`SessionImage`], for
//! `state/reconstruct` of such a file passed by path.
//!
//! The general way (`transcript::import::claude_code::convert`, then the
//! reader over the converted transcript) parses every line into a
//! `serde_json::Value`, builds the conversation and serializes it back out
//! before reading it again: a few times the file's size in copies and
//! allocations. Here each line is parsed once into borrowed fields (the
//! tree links, the message's role and id, its tool blocks; every other
//! field skipped by the parser), a small owned record is kept per line
//! (ids, tool names, each result's digest made right away) and the file is
//! read in chunks by two threads at once (each chunk read and parsed while
//! it is still in its core's cache). The conversion's rules are then
//! applied to the records: the walk up `parentUuid` from the main line's
//! leaf, responses joined by `message.id`, consecutive user lines merged,
//! API-error lines skipped (see `import/claude_code.rs` for why each).
//!
//! Most lines are read by a single walk over their bytes ([`scan`]), which
//! finds where a line ends as it validates it and keeps only those fields;
//! the others by serde_json, through a shadow (`super::shadow`) when they
//! hold long strings.
//!
//! The outcome is the image the general way builds, on every input: a line
//! the fast parse cannot vouch for (not UTF-8, an escape that may be a lone
//! surrogate, nesting that may be deeper than [`crate::json::MAX_DEPTH`],
//! a field of an unusual type, a key written twice) is parsed as a value
//! instead and judged exactly as the conversion and the reader judge it. A
//! merged message whose converted line could exceed the reader's line limit
//! makes [`read`] decline, so the caller takes the general way.

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde_json::{Map, Value};

use super::{Helper, ReadAt, SessionImage};
use crate::format::anthropic::{self, BlockHead};
use crate::format::{Digest, Original, Side, Skim, SkimResult, is_compact_json};
use crate::state::IdHash;

mod scan;

/// How much of the file a thread reads and parses at a time (its last
/// line is read on to its end): small enough to stay in a core's cache
/// between the read and the parse.
const CHUNK: usize = 512 << 10;
/// A file is shared with a helper thread from this size on.
const PARALLEL_FROM: u64 = 1 << 20;

/// What a Claude Code file says, reduced to what its conversation's state
/// is built from: one record per readable line, in order.
///
/// The records stay in the chunks their threads parsed them into: one
/// vector of them all would be a copy of tens of megabytes into fresh
/// memory (its page faults alone were about a tenth of the request's CPU),
/// made on one thread after the parallel read. The serial part looks at
/// them through one reference per line instead.
pub struct ClaudeCodeFile {
    chunks: Vec<Vec<Rec>>,
}

/// One readable line (a JSON object).
///
/// Laid out in the order the serial part reads it (`repr(C)`): each of
/// its passes over tens of thousands of records (far more than the
/// caches hold) then finds what it looks at in one or two cache lines of
/// a record, not spread over its four.
#[derive(Debug, Default)]
#[repr(C)]
struct Rec {
    /// `uuid`'s and `parent`'s hashes (by [`IdHash`]), made by the thread
    /// that parsed the line: the tree is then linked without touching
    /// the strings but to confirm a match.
    uuid_hash: u64,
    parent_hash: u64,
    /// The line's length: its message serializes to no more than this.
    len: usize,
    /// Whether the line has a `uuid` key at all (a leaf needs one).
    has_uuid: bool,
    side_chain: bool,
    api_error: bool,
    uuid: Option<Text>,
    parent: Option<Text>,
    /// The message of a `user` or `assistant` line whose `message` is an
    /// object.
    message: Option<Msg>,
}

#[derive(Debug)]
#[repr(C)]
struct Msg {
    /// `None` when `role` is missing or not a string.
    role: Option<Role>,
    /// `id`'s hash, as the line's.
    id_hash: u64,
    id: Option<Text>,
    content: Content,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
    /// A string that is neither.
    Other,
}

impl Role {
    fn of(role: &str) -> Role {
        match role {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            _ => Role::Other,
        }
    }

    fn side(self) -> Option<Side> {
        match self {
            Role::User => Some(Side::User),
            Role::Assistant => Some(Side::Assistant),
            Role::Other => None,
        }
    }
}

/// A message's `content`, as far as joining and skimming go: joined
/// messages have every part's content turned into blocks (a string into a
/// text block, nothing for an empty string or null), which makes some
/// contents readable that are not on their own and the other way round.
#[derive(Debug)]
enum Content {
    Absent,
    Null,
    Text,
    Blocks(Blocks),
    /// An object: one block once joined, unreadable on its own.
    Single(Blocks),
    /// A number or boolean: unreadable either way.
    Bad,
}

#[derive(Debug, Default)]
struct Blocks {
    events: Events,
    /// Whether every block reads as the reader reads a block.
    valid: bool,
}

/// A part's events. Nearly every part has one (a call, or a result), kept
/// in place: an allocation per line, and its free, cost more than the
/// rest of its record.
#[derive(Debug, Default)]
enum Events {
    #[default]
    None,
    One(Event),
    Many(Vec<Event>),
}

impl Events {
    fn as_slice(&self) -> &[Event] {
        match self {
            Events::None => &[],
            Events::One(event) => std::slice::from_ref(event),
            Events::Many(events) => events,
        }
    }
}

impl Extend<Event> for Events {
    fn extend<I: IntoIterator<Item = Event>>(&mut self, events: I) {
        for event in events {
            *self = match std::mem::take(self) {
                Events::None => Events::One(event),
                Events::One(first) => Events::Many(vec![first, event]),
                Events::Many(mut all) => {
                    all.push(event);
                    Events::Many(all)
                }
            };
        }
    }
}

/// A text of a line (a uuid, an id, a tool name): kept in place when short,
/// as nearly all are, else boxed. Most lines' texts then cost no
/// allocation of their own (several per line, tens of thousands of lines),
/// and the tree is linked without a pointer to follow per line.
enum Text {
    Short { len: u8, bytes: [u8; SHORT] },
    Long(Box<str>),
}

/// The longest text kept in place (a UUID is 36 bytes).
const SHORT: usize = 38;

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        match u8::try_from(text.len()) {
            Ok(len) if text.len() <= SHORT => {
                let mut bytes = [0; SHORT];
                bytes[..text.len()].copy_from_slice(text.as_bytes());
                Text::Short { len, bytes }
            }
            _ => Text::Long(text.into()),
        }
    }
}

impl Text {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Short { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Text::Long(text) => text.as_bytes(),
        }
    }
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        let bytes = self.as_bytes();
        // SAFETY: a `Text` is only made by `From<&str>`, which copies a
        // whole `str` (UTF-8) and nothing else into it; it is never
        // changed after. (Checking again cost a UTF-8 validation per id
        // looked at, hundreds of thousands per large session.)
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        match (self, other) {
            // The bytes past `len` are zeros in both: the arrays compare
            // whole, inline (no call per comparison while linking the tree).
            (Text::Short { len, bytes }, Text::Short { len: l, bytes: b }) => {
                len == l && bytes == b
            }
            _ => self.as_bytes() == other.as_bytes(),
        }
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Content {
    /// The events a part with this content adds to its message (`joined`:
    /// whether the message has other parts); `None` when the message does
    /// not read.
    fn events(&self, joined: bool) -> Option<&[Event]> {
        match self {
            Content::Blocks(blocks) => Some(blocks.events.as_slice()).filter(|_| blocks.valid),
            Content::Single(blocks) if joined => {
                Some(blocks.events.as_slice()).filter(|_| blocks.valid)
            }
            Content::Text | Content::Absent => Some(&[]),
            Content::Null if joined => Some(&[]),
            Content::Null | Content::Single(_) | Content::Bad => None,
        }
    }
}

/// What a block means to the state.
#[derive(Debug)]
enum Event {
    Call(Text, Text),
    /// A result: its id and its original's digest (`None` when it is a
    /// preview, not an original).
    Result(Text, Option<Digest>),
    /// A compaction block: the provider drops the calls before it.
    Compaction,
}

impl Event {
    /// What `block` means; a result's digest is made of its raw content
    /// by `digest`.
    fn of<'a>(
        block: BlockHead<'a>,
        digest: impl FnOnce(&'a [u8]) -> Option<Digest>,
    ) -> Option<Event> {
        match block.kind.as_deref() {
            Some("tool_use") => Some(Event::Call(
                Text::from(&*block.id.unwrap_or_default()),
                Text::from(&*block.name.unwrap_or_default()),
            )),
            Some("compaction") => Some(Event::Compaction),
            Some("tool_result") => {
                let raw = block
                    .content
                    .map_or(&b"null"[..], |raw| raw.get().as_bytes());
                Some(Event::Result(
                    Text::from(&*block.tool_use_id.unwrap_or_default()),
                    digest(raw),
                ))
            }
            _ => None,
        }
    }

    /// Its ids and name, for a look at each.
    fn texts(&self) -> impl Iterator<Item = &str> {
        let (a, b) = match self {
            Event::Call(id, name) => (Some(&**id), Some(&**name)),
            Event::Result(id, _) => (Some(&**id), None),
            Event::Compaction => (None, None),
        };
        a.into_iter().chain(b)
    }
}

/// The digest of a result's content as the converted transcript would
/// hold it (compact, as serde_json writes it), `None` for a preview.
/// Content already in that form (as Claude Code writes it) is taken as it
/// stands; any other spelling is parsed and written compact first, so a
/// preview is told by the same bytes.
fn result_digest(raw: &[u8]) -> Option<Digest> {
    if raw.first() == Some(&b'"') && is_compact_json(raw) {
        // What `Original::digest` does with a compact string (no cache
        // marker can be in one), without checking its form twice.
        return (!anthropic::is_replacement_json(raw))
            .then(|| Digest::of_json_bytes_as(Digest::NEW, raw));
    }
    if is_compact_json(raw) {
        return (!anthropic::is_replacement_json(raw))
            .then(|| Original::Raw(raw).digest(Digest::NEW));
    }
    let compact = crate::json::from_slice::<Value>(raw)
        .ok()
        .and_then(|value| serde_json::to_vec(&value).ok());
    let compact = compact.as_deref().unwrap_or(raw);
    (!anthropic::is_replacement_json(compact)).then(|| Original::Raw(compact).digest(Digest::NEW))
}

impl ClaudeCodeFile {
    /// Read a Claude Code session file of `len` bytes from `source`: every
    /// line, [`CHUNK`] bytes at a time (Claude Code may be appending: a
    /// torn last line is read as the conversion reads it). `cancelled` is
    /// asked before each chunk; `progress` is told the bytes read so far
    /// after each chunk this thread reads.
    pub fn read(
        source: &(impl ReadAt + Sync + ?Sized),
        len: u64,
        cancelled: impl Fn() -> bool,
        progress: impl FnMut(u64),
    ) -> io::Result<ClaudeCodeFile> {
        Self::read_by(source, len, CHUNK, cancelled, progress)
    }

    /// [`ClaudeCodeFile::read`] with chunks of `chunk` bytes (at least
    /// one): the lines and records do not depend on it.
    ///
    /// Each chunk's lines are those that start in it; the last of them is
    /// read on past the chunk's end to its newline. Chunks are taken in
    /// turn by this thread and, for a file of [`PARALLEL_FROM`] bytes or
    /// more when a spare core is free, by a helper thread: each thread
    /// reads a chunk into a buffer of its own and parses it while the
    /// bytes are still in its core's cache, so the kernel's copy out of
    /// the page cache is shared by both cores too.
    pub fn read_by(
        source: &(impl ReadAt + Sync + ?Sized),
        len: u64,
        chunk: usize,
        cancelled: impl Fn() -> bool,
        mut progress: impl FnMut(u64),
    ) -> io::Result<ClaudeCodeFile> {
        let chunk = chunk.max(1);
        let chunks = len.div_ceil(chunk as u64);
        let shared = Chunks {
            next: AtomicU64::new(0),
            done: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        };
        let work = |mine: &mut dyn FnMut() -> io::Result<()>| {
            let mut buf = Vec::new();
            let mut parsed = Vec::new();
            // Room for about as many records as the last chunk had: a
            // vector grown from empty copies each chunk's records several
            // times over (tens of megabytes for a large file).
            let mut room = 0;
            loop {
                mine()?;
                let k = shared.next.fetch_add(1, Ordering::Relaxed);
                if k >= chunks || shared.stop.load(Ordering::Relaxed) {
                    return Ok(parsed);
                }
                let mut recs = Vec::with_capacity(room);
                read_chunk(source, len, chunk as u64, k, &mut buf, &mut recs)?;
                room = recs.len() + recs.len() / 4;
                parsed.push((k, recs));
                let end = (k + 1).saturating_mul(chunk as u64).min(len);
                shared
                    .done
                    .fetch_add(end - k * chunk as u64, Ordering::Relaxed);
            }
        };
        let helper = (len >= PARALLEL_FROM).then(Helper::take).flatten();
        // The helper allocates as this thread does (`heap::transient`).
        let transient = crate::heap::is_transient();
        let (mine, theirs) = std::thread::scope(|scope| {
            let theirs = helper.as_ref().and_then(|_| {
                std::thread::Builder::new()
                    .name("toolwire-reader".into())
                    .stack_size(crate::process::THREAD_STACK)
                    .spawn_scoped(scope, || {
                        let parsed = crate::heap::transient_if(transient, || work(&mut || Ok(())));
                        if parsed.is_err() {
                            shared.stop.store(true, Ordering::Relaxed);
                        }
                        parsed
                    })
                    .ok()
            });
            let mine = work(&mut || {
                progress(shared.done.load(Ordering::Relaxed));
                if cancelled() {
                    return Err(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "reading cancelled",
                    ));
                }
                Ok(())
            });
            if mine.is_err() {
                shared.stop.store(true, Ordering::Relaxed);
            }
            let theirs = theirs.map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a reader thread panicked")))
            });
            (mine, theirs)
        });
        drop(helper);
        let mut parsed: Vec<Option<Vec<Rec>>> = (0..chunks).map(|_| None).collect();
        let theirs = theirs.transpose()?.unwrap_or_default();
        #[cfg(test)]
        HELPED.fetch_add(theirs.len(), Ordering::Relaxed);
        for (k, recs) in mine?.into_iter().chain(theirs) {
            parsed[k as usize] = Some(recs);
        }
        let mut parts = Vec::with_capacity(parsed.len());
        for (k, recs) in parsed.into_iter().enumerate() {
            match recs {
                Some(recs) => parts.push(recs),
                // Every chunk is taken by one thread or the other before
                // both stop, short of a bug: read it here, so no line is
                // ever lost.
                None => {
                    let (mut buf, mut recs) = (Vec::new(), Vec::new());
                    read_chunk(source, len, chunk as u64, k as u64, &mut buf, &mut recs)?;
                    parts.push(recs);
                }
            }
        }
        progress(len);
        Ok(ClaudeCodeFile { chunks: parts })
    }

    /// Every line's record, in the file's order.
    fn lines(&self) -> Vec<&Rec> {
        let mut lines = Vec::with_capacity(self.chunks.iter().map(Vec::len).sum());
        lines.extend(self.chunks.iter().flatten());
        lines
    }

    /// Free the records apart from the caller: a large session's tens of
    /// thousands of small allocations take milliseconds to free, which
    /// the request need not wait for.
    pub fn discard(self) {
        crate::process::drop_apart(self.chunks);
    }

    /// Take the conversation in, message by message, as the reader takes
    /// in the converted transcript; `None` (nothing taken in) when a
    /// message's converted line could be longer than `max_line`, which the
    /// reader would skip: then the caller converts the file instead.
    pub fn feed(&self, image: &mut SessionImage, max_line: usize) -> Option<()> {
        let lines = self.lines();
        let messages = conversation(&lines);
        // `{"type":"message","message":` … `}` around the parts.
        if messages.iter().any(|m| m.len + 64 > max_line) {
            return None;
        }
        for message in &messages {
            match skim(&lines, message) {
                Some(skim) => image.add_message(None, skim),
                None => image.skipped += 1,
            }
        }
        Some(())
    }
}

/// The conversation as the conversion builds it: the line indices of
/// each message's parts.
fn conversation(lines: &[&Rec]) -> Vec<Merged> {
    // Each uuid's last line (a uuid written twice names its last), and
    // the lines a later one with the same uuid supersedes.
    let mut by_uuid: HashTable<usize> = HashTable::with_capacity(lines.len());
    let mut superseded = vec![false; lines.len()];
    for (i, line) in lines.iter().enumerate() {
        let Some(uuid) = &line.uuid else {
            continue;
        };
        let same = |&j: &usize| lines[j].uuid.as_ref() == Some(uuid);
        match by_uuid.entry(line.uuid_hash, same, |&j| lines[j].uuid_hash) {
            Entry::Occupied(mut at) => superseded[std::mem::replace(at.get_mut(), i)] = true,
            Entry::Vacant(at) => {
                at.insert(i);
            }
        }
    }
    // The line named by `i`'s parent. Nearly always it is the line just
    // before, and then the answer is found beside it, not in the table
    // (a lookup in it is a cache miss or two per line of the walk).
    let parent_of = |i: usize| {
        let parent = lines[i].parent.as_ref()?;
        if let Some(before) = i.checked_sub(1)
            && !superseded[before]
            && lines[before].uuid_hash == lines[i].parent_hash
            && lines[before].uuid.as_ref() == Some(parent)
        {
            return Some(before);
        }
        by_uuid
            .find(lines[i].parent_hash, |&j| {
                lines[j].uuid.as_ref() == Some(parent)
            })
            .copied()
    };
    let leaf = lines
        .iter()
        .rposition(|line| line.message.is_some() && !line.side_chain && line.has_uuid);
    let mut path = Vec::new();
    let mut walked = vec![false; lines.len()];
    let mut at = leaf;
    while let Some(i) = at {
        if std::mem::replace(&mut walked[i], true) {
            break; // a cycle: what was walked stands, as in the conversion
        }
        path.push(i);
        at = parent_of(i);
    }
    path.reverse();

    let mut out: Vec<Merged> = Vec::with_capacity(path.len());
    // Where each response's first part went, by `message.id`.
    let mut response_at: HashTable<(usize, usize)> = HashTable::with_capacity(path.len());
    for i in path {
        let line = &lines[i];
        let Some(message) = &line.message else {
            continue;
        };
        if line.api_error {
            continue;
        }
        if message.role == Some(Role::Assistant)
            && let Some(id) = &message.id
        {
            let id_of = |j: usize| lines[j].message.as_ref().and_then(|m| m.id.as_ref());
            let hash_of = |j: usize| lines[j].message.as_ref().map_or(0, |m| m.id_hash);
            match response_at.entry(
                message.id_hash,
                |&(j, _)| id_of(j) == Some(id),
                |&(j, _)| hash_of(j),
            ) {
                Entry::Occupied(first) => {
                    out[first.get().1].take(i, line.len);
                    continue;
                }
                Entry::Vacant(first) => {
                    first.insert((i, out.len()));
                }
            }
        }
        if message.role == Some(Role::User)
            && let Some(last) = out.last_mut()
            && last.role == Some(Role::User)
        {
            last.take(i, line.len);
            continue;
        }
        out.push(Merged {
            role: message.role,
            first: i,
            more: Vec::new(),
            len: line.len + PART,
        });
    }
    out
}

/// The skim the reader makes of a message's converted line; `None`
/// when it would not read it.
fn skim<'a>(lines: &[&'a Rec], message: &Merged) -> Option<Skim<'a>> {
    let role = message.role?;
    let contents = || {
        message
            .parts()
            .filter_map(|i| lines[i].message.as_ref().map(|m| &m.content))
    };
    let joined = !message.more.is_empty();
    // Every part is looked at before any is taken in (no list of
    // events is built for the message).
    if contents().any(|content| content.events(joined).is_none()) {
        return None;
    }
    let events = contents().flat_map(|content| content.events(joined).unwrap_or_default());
    let side = role.side();
    let mut skim = Skim {
        side,
        ..Skim::default()
    };
    for event in events {
        match event {
            Event::Call(id, name) if side == Some(Side::Assistant) => {
                skim.calls.push((Cow::Borrowed(id), Cow::Borrowed(name)))
            }
            Event::Compaction => skim.calls.clear(),
            Event::Result(id, digest) if side == Some(Side::User) => {
                skim.results.push(SkimResult {
                    id: Cow::Borrowed(id),
                    original: digest.map(Original::Digested),
                    digest: *digest,
                })
            }
            _ => {}
        }
    }
    Some(skim)
}

/// One message of the conversation: the line indices of its parts (most
/// messages have one, which then costs no allocation).
struct Merged {
    role: Option<Role>,
    first: usize,
    more: Vec<usize>,
    /// What the parts' converted line may take at most: each part's line
    /// length and [`PART`].
    len: usize,
}

/// Per part of a message, a comma and a text block's wrapper at most.
const PART: usize = 32;

impl Merged {
    /// Take line `i` (of `len` bytes) in as a further part.
    fn take(&mut self, i: usize, len: usize) {
        self.more.push(i);
        self.len += len + PART;
    }

    fn parts(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.first).chain(self.more.iter().copied())
    }
}

/// Each non-blank line of `region` (the last one may lack its newline)
/// that is a JSON object, as a record.
///
/// A line is first read by the one-pass scan ([`scan::line`]), which also
/// finds its end; one it cannot vouch for is cut at its newline and read
/// by [`parse_line`].
fn parse_lines(region: &[u8], out: &mut Vec<Rec>) {
    let mut start = 0;
    while start < region.len() {
        let rest = &region[start..];
        if rest[0] == b'{'
            && let Some((rec, end)) = scan::line(rest)
        {
            out.push(hashed(rec));
            start += end + 1;
            continue;
        }
        let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
        let line = &rest[..end];
        start += end + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some(rec) = parse_line(line) {
            out.push(rec);
        }
    }
}

/// Chunks read by a helper thread (for the tests).
#[cfg(test)]
static HELPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How the threads reading a file share its chunks.
struct Chunks {
    /// The next chunk not yet taken.
    next: AtomicU64,
    /// Bytes of the chunks read so far.
    done: AtomicU64,
    /// Set when one thread fails or is cancelled: the other stops too.
    stop: AtomicBool,
}

/// Read the `k`th chunk (`chunk` bytes) of `source`'s `len` bytes into
/// `buf` and append a record for each line that starts in it to `out`.
///
/// The byte before the chunk is read too: a line starts at the chunk's
/// first byte only if that one is a newline, else after the chunk's first
/// newline (what comes before it is the previous chunk's last line). The
/// chunk's last line is read on to its newline, or to the end of the file.
fn read_chunk(
    source: &(impl ReadAt + ?Sized),
    len: u64,
    chunk: u64,
    k: u64,
    buf: &mut Vec<u8>,
    out: &mut Vec<Rec>,
) -> io::Result<()> {
    let start = k * chunk;
    let end = start.saturating_add(chunk).min(len);
    let from = start.saturating_sub(1);
    let mut filled = read_into(source, buf, 0, from, end)?;
    let first = if k == 0 {
        0
    } else {
        match memchr::memchr(b'\n', &buf[..filled]) {
            Some(i) => i + 1,
            None => return Ok(()),
        }
    };
    if from + first as u64 >= end {
        // No line starts in this chunk.
        return Ok(());
    }
    let mut last = filled;
    if buf[..filled].last() != Some(&b'\n') && from + filled as u64 == end {
        // The last line goes on past the chunk: read on to its newline.
        loop {
            let at = from + filled as u64;
            let before = filled;
            filled = read_into(source, buf, filled, at, at.saturating_add(chunk).min(len))?;
            if let Some(i) = memchr::memchr(b'\n', &buf[before..filled]) {
                last = before + i + 1;
                break;
            }
            last = filled;
            if filled == before {
                break; // the end of the file (or of what is there now)
            }
        }
    }
    parse_lines(&buf[first..last], out);
    Ok(())
}

/// Read `source`'s bytes `[at, to)` into `buf` from `filled` on (growing
/// it as needed) until they are all there or the source ends; the new
/// filled length.
fn read_into(
    source: &(impl ReadAt + ?Sized),
    buf: &mut Vec<u8>,
    mut filled: usize,
    mut at: u64,
    to: u64,
) -> io::Result<usize> {
    let want = filled + usize::try_from(to.saturating_sub(at)).unwrap_or(usize::MAX);
    if buf.len() < want {
        buf.resize(want, 0);
    }
    while filled < want {
        match source.read_at(&mut buf[filled..want], at) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                at += n as u64;
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// One line as a record; `None` when it is not a JSON object.
///
/// A line with long strings (tool output) is read through its shadow
/// (`super::shadow`: the same line with its long strings emptied, each
/// scanned 64 bytes at a time instead of by serde_json), any other line
/// by the fast parse, and a line neither can vouch for as a value.
fn parse_line(line: &[u8]) -> Option<Rec> {
    let shadowed = super::shadow::with(line, |shadow, rebase| {
        let MapOnly(fast) = serde_json::from_str::<MapOnly<FastLine>>(vouched(shadow)?).ok()?;
        // An empty id may be a long one emptied: read the line itself.
        fast.rec(
            |text| !text.is_empty(),
            |raw| {
                let (text, known) = rebase.content(raw)?;
                Some(match known {
                    Some(digest) => (!anthropic::is_replacement_json(text)).then_some(digest),
                    None => result_digest(text),
                })
            },
        )
    });
    // Valid UTF-8 checked once here, then read as text: the parser does not
    // check the long strings again.
    let fast = || {
        let MapOnly(fast) = serde_json::from_str::<MapOnly<FastLine>>(vouched(line)?).ok()?;
        fast.rec(|_| true, |raw| Some(result_digest(raw)))
    };
    let mut rec = match shadowed.or_else(fast) {
        Some(rec) => rec,
        None => match crate::json::from_slice::<Value>(line) {
            Ok(Value::Object(obj)) => rec_of_value(&obj),
            _ => return None,
        },
    };
    rec.len = line.len();
    Some(hashed(rec))
}

/// `rec` with its ids' hashes made.
fn hashed(mut rec: Rec) -> Rec {
    let hasher = IdHash::default();
    let hash = |text: &Option<Text>| text.as_deref().map_or(0, |t| hasher.hash_one(t));
    rec.uuid_hash = hash(&rec.uuid);
    rec.parent_hash = hash(&rec.parent);
    if let Some(message) = &mut rec.message {
        message.id_hash = hash(&message.id);
    }
    rec
}

/// `line` as text when the fast parse reads it as the value parse would: valid
/// UTF-8 (fields the fast parse skips are not checked by it), no `\ud…`
/// escape (a lone surrogate is refused by the value parse only), and
/// fewer brackets than the deepest nesting accepted.
fn vouched(line: &[u8]) -> Option<&str> {
    // `\u` is rare in what serde_json or JSON.stringify write (control
    // characters only): each is looked at.
    static ESCAPE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\\u"));
    let surrogate = ESCAPE
        .find_iter(line)
        .any(|at| matches!(line.get(at + 2), Some(b'd' | b'D')));
    let shallow = memchr::memchr2_iter(b'[', b'{', line)
        .nth(crate::json::MAX_DEPTH)
        .is_none();
    (!surrogate && shallow)
        .then(|| std::str::from_utf8(line).ok())
        .flatten()
}

/// A line's record from its value, as the conversion reads the value.
fn rec_of_value(obj: &Map<String, Value>) -> Rec {
    let text = |key| obj.get(key).and_then(Value::as_str).map(Text::from);
    let is_true = |key| obj.get(key) == Some(&Value::Bool(true));
    let is_message = matches!(
        obj.get("type").and_then(Value::as_str),
        Some("user" | "assistant")
    );
    Rec {
        uuid: text("uuid"),
        has_uuid: obj.contains_key("uuid"),
        parent: text("parentUuid"),
        side_chain: is_true("isSidechain"),
        api_error: is_true("isApiErrorMessage"),
        message: match obj.get("message") {
            Some(Value::Object(message)) if is_message => Some(msg_of_value(message)),
            _ => None,
        },
        len: 0,
        uuid_hash: 0,
        parent_hash: 0,
    }
}

fn msg_of_value(message: &Map<String, Value>) -> Msg {
    Msg {
        role: message.get("role").and_then(Value::as_str).map(Role::of),
        id: message.get("id").and_then(Value::as_str).map(Text::from),
        id_hash: 0,
        content: match message.get("content") {
            None => Content::Absent,
            Some(Value::Null) => Content::Null,
            Some(Value::String(_)) => Content::Text,
            Some(Value::Array(blocks)) => Content::Blocks(blocks_of_values(blocks)),
            Some(block @ Value::Object(_)) => {
                Content::Single(blocks_of_values(std::slice::from_ref(block)))
            }
            Some(_) => Content::Bad,
        },
    }
}

/// Blocks judged as the reader judges them: written compact, as the
/// converted line holds them, and read as a block.
fn blocks_of_values(blocks: &[Value]) -> Blocks {
    let mut out = Blocks {
        events: Events::None,
        valid: true,
    };
    for block in blocks {
        let bytes = serde_json::to_vec(block).unwrap_or_default();
        match crate::json::from_slice::<BlockHead>(&bytes) {
            Ok(head) => out.events.extend(Event::of(head, result_digest)),
            Err(_) => out.valid = false,
        }
    }
    out
}

/// A line read by the fast parse: any field of another type than these
/// (or written twice) fails it, and the line is read as a value instead.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FastLine<'a> {
    #[serde(rename = "type", borrow, default, deserialize_with = "anthropic::text")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    uuid: Option<Option<Cow<'a, str>>>,
    #[serde(borrow, default, deserialize_with = "anthropic::text")]
    parent_uuid: Option<Cow<'a, str>>,
    is_sidechain: Option<bool>,
    is_api_error_message: Option<bool>,
    #[serde(borrow)]
    message: Option<MapOnly<FastMessage<'a>>>,
}

impl<'a> FastLine<'a> {
    /// The line's record. Each id and name it keeps must pass `kept`, and
    /// `digest` must digest each result's raw content, or there is none.
    fn rec(
        self,
        kept: impl Fn(&str) -> bool,
        digest: impl Fn(&'a [u8]) -> Option<Option<Digest>>,
    ) -> Option<Rec> {
        let is_message = matches!(self.kind.as_deref(), Some("user" | "assistant"));
        let text = |t: Option<Cow<str>>| match t {
            Some(t) if !kept(&t) => Err(()),
            t => Ok(t.map(|t| Text::from(&*t))),
        };
        let message = match self.message.filter(|_| is_message) {
            None => None,
            Some(MapOnly(m)) => Some(Msg {
                role: m.role.as_deref().map(Role::of),
                id: text(m.id).ok()?,
                id_hash: 0,
                content: match m.content {
                    None => Content::Absent,
                    Some(FastContent::Null) => Content::Null,
                    Some(FastContent::Text) => Content::Text,
                    Some(FastContent::Blocks(heads)) => {
                        let mut events = Events::None;
                        let mut failed = false;
                        for head in heads {
                            let event = Event::of(head, |raw| {
                                digest(raw).unwrap_or_else(|| {
                                    failed = true;
                                    None
                                })
                            });
                            events.extend(event);
                        }
                        if failed
                            || events
                                .as_slice()
                                .iter()
                                .flat_map(Event::texts)
                                .any(|t| !kept(t))
                        {
                            return None;
                        }
                        Content::Blocks(Blocks {
                            events,
                            valid: true,
                        })
                    }
                },
            }),
        };
        Some(Rec {
            has_uuid: self.uuid.is_some(),
            uuid: text(self.uuid.flatten()).ok()?,
            parent: text(self.parent_uuid).ok()?,
            side_chain: self.is_sidechain == Some(true),
            api_error: self.is_api_error_message == Some(true),
            message,
            len: 0,
            uuid_hash: 0,
            parent_hash: 0,
        })
    }
}

#[derive(Deserialize)]
struct FastMessage<'a> {
    #[serde(borrow, default, deserialize_with = "anthropic::text")]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "anthropic::text")]
    id: Option<Cow<'a, str>>,
    /// `null` is a content of its own here (unreadable unless joined).
    #[serde(borrow, default, deserialize_with = "some_content")]
    content: Option<FastContent<'a>>,
}

fn some_content<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<FastContent<'a>>, D::Error> {
    FastContent::deserialize(d).map(Some)
}

/// A message's content by the fast parse: a string, null, or an array of
/// objects (anything else fails the parse).
enum FastContent<'a> {
    Null,
    Text,
    Blocks(Vec<BlockHead<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for FastContent<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = FastContent<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, null or an array of blocks")
            }
            fn visit_str<E>(self, _: &str) -> Result<FastContent<'a>, E> {
                Ok(FastContent::Text)
            }
            fn visit_unit<E>(self) -> Result<FastContent<'a>, E> {
                Ok(FastContent::Null)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<FastContent<'a>, A::Error> {
                let mut blocks = Vec::new();
                while let Some(MapOnly(block)) = seq.next_element::<MapOnly<BlockHead<'a>>>()? {
                    blocks.push(block);
                }
                Ok(FastContent::Blocks(blocks))
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// `T` read from a JSON object only (serde's derived structs also take an
/// array of their fields, which the value parse would not see as one).
struct MapOnly<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = MapOnly<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<MapOnly<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(MapOnly)
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// A field that may be null: `Some(None)` when present as null, so a
/// missing field (`None` by default) is told from it.
fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<Cow<'de, str>>>, D::Error> {
    anthropic::text(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file read in small chunks, by two threads when a core is spare,
    /// gives the records one read of it whole gives, in the same order:
    /// lines that cross chunks, lines longer than a chunk, blank lines and
    /// a torn last line included.
    #[test]
    fn chunks_read_by_two_threads_give_the_records_of_one_read() {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut input = Vec::new();
        for i in 0..1500 {
            let output = "x".repeat(rng.usize(0..6000));
            let call = serde_json::json!({"type": "assistant", "uuid": format!("a{i}"),
                "parentUuid": if i == 0 { Value::Null } else { Value::from(format!("u{}", i - 1)) },
                "message": {"id": format!("m{i}"), "role": "assistant",
                    "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {}}]}});
            let result = serde_json::json!({"type": "user", "uuid": format!("u{i}"), "parentUuid": format!("a{i}"),
                "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": output}]}});
            for line in [call, result] {
                input.extend_from_slice(line.to_string().as_bytes());
                input.extend_from_slice(if rng.u8(..) < 8 { b"\n\n" } else { b"\n" });
            }
        }
        input.extend_from_slice(b"{\"type\":\"us");
        let len = input.len() as u64;
        assert!(len > 4 * PARALLEL_FROM);
        let records = |chunk: usize| {
            let file = ClaudeCodeFile::read_by(&input[..], len, chunk, || false, |_| {}).unwrap();
            format!("{:?}", file.lines())
        };
        let whole = records(usize::MAX);
        assert!(whole.matches("uuid: Some").count() == 3000);
        let before = HELPED.load(Ordering::Relaxed);
        for _ in 0..50 {
            for chunk in [4096, 65536] {
                assert_eq!(records(chunk), whole, "chunk {chunk}");
            }
            if HELPED.load(Ordering::Relaxed) > before {
                break;
            }
        }
        if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
            assert!(
                HELPED.load(Ordering::Relaxed) > before,
                "a helper read chunks"
            );
        }
    }
}
