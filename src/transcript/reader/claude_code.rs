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
//! read a window at a time into one buffer. The conversion's rules are then
//! applied to the records: the walk up `parentUuid` from the main line's
//! leaf, responses joined by `message.id`, consecutive user lines merged,
//! API-error lines skipped (see `import/claude_code.rs` for why each).
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
use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde_json::{Map, Value};

use super::{Helper, SessionImage, fill};
use crate::format::anthropic::{self, BlockHead};
use crate::format::{Digest, Original, Side, Skim, SkimResult, is_compact_json};
use crate::state::IdHash;

/// How much of the file is read at a time (a longer line grows it).
const WINDOW: usize = 8 << 20;
/// A window's lines are shared with a helper thread from this size on.
const PARALLEL_FROM: usize = 1 << 20;
/// How many pieces a shared window is cut into (each thread takes the next
/// piece left when it is done with one).
const PIECES: usize = 32;

/// What a Claude Code file says, reduced to what its conversation's state
/// is built from: one record per readable line, in order.
pub struct ClaudeCodeFile {
    lines: Vec<Rec>,
}

/// One readable line (a JSON object).
#[derive(Debug, Default)]
struct Rec {
    uuid: Option<Text>,
    /// Whether the line has a `uuid` key at all (a leaf needs one).
    has_uuid: bool,
    parent: Option<Text>,
    side_chain: bool,
    api_error: bool,
    /// The message of a `user` or `assistant` line whose `message` is an
    /// object.
    message: Option<Msg>,
    /// The line's length: its message serializes to no more than this.
    len: usize,
    /// `uuid`'s and `parent`'s hashes (by [`IdHash`]), made by the thread
    /// that parsed the line: the tree is then linked without touching
    /// the strings but to confirm a match.
    uuid_hash: u64,
    parent_hash: u64,
}

#[derive(Debug)]
struct Msg {
    /// `None` when `role` is missing or not a string.
    role: Option<Role>,
    id: Option<Text>,
    /// `id`'s hash, as the line's.
    id_hash: u64,
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
    events: Vec<Event>,
    /// Whether every block reads as the reader reads a block.
    valid: bool,
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

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            // Copied whole from a `str`: always UTF-8.
            Text::Short { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Text::Long(text) => text,
        }
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        (**self).fmt(f)
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
    /// Read a Claude Code session file: every line, a window at a time,
    /// until the end of what `reader` gives (Claude Code may be appending:
    /// a torn last line is read as the conversion reads it).
    /// `cancelled` is asked before each read; `progress` is told the bytes
    /// read so far after each.
    pub fn read(
        mut reader: impl io::Read,
        cancelled: impl Fn() -> bool,
        mut progress: impl FnMut(u64),
    ) -> io::Result<ClaudeCodeFile> {
        let mut lines = Vec::new();
        let mut cur = vec![0u8; WINDOW];
        // Read into while `cur`'s lines are parsed; allocated when needed.
        let mut next: Vec<u8> = Vec::new();
        let (mut filled, mut eof) = fill(&mut reader, &mut cur, 0, &cancelled)?;
        let mut total = filled as u64;
        loop {
            progress(total);
            if eof {
                // The rest is the last line, with or without its newline.
                parse_region(&cur[..filled], &mut lines, || ());
                return Ok(ClaudeCodeFile { lines });
            }
            let end = memchr::memrchr(b'\n', &cur[..filled]).map_or(0, |i| i + 1);
            if end == 0 {
                // One line fills the window: make room for the rest of it.
                cur.resize(cur.len() * 2, 0);
                let before = filled;
                (filled, eof) = fill(&mut reader, &mut cur, filled, &cancelled)?;
                total += (filled - before) as u64;
                continue;
            }
            let carry = filled - end;
            if next.len() != cur.len() {
                next = vec![0; cur.len()];
            }
            next[..carry].copy_from_slice(&cur[end..filled]);
            // The next window is read while this one's lines are parsed.
            (filled, eof) = parse_region(&cur[..end], &mut lines, || {
                fill(&mut reader, &mut next, carry, &cancelled)
            })?;
            total += (filled - carry) as u64;
            std::mem::swap(&mut cur, &mut next);
        }
    }

    /// Free the records apart from the caller: a large session's tens of
    /// thousands of small allocations take milliseconds to free, which
    /// the request need not wait for.
    pub fn discard(self) {
        let lines = self.lines;
        // When no thread can be started, the closure, records and all, is
        // dropped (freed) right here.
        let _ = std::thread::Builder::new()
            .name("toolwire-free".into())
            .spawn(move || drop(lines));
    }

    /// Take the conversation in, message by message, as the reader takes
    /// in the converted transcript; `None` (nothing taken in) when a
    /// message's converted line could be longer than `max_line`, which the
    /// reader would skip: then the caller converts the file instead.
    pub fn feed(&self, image: &mut SessionImage, max_line: usize) -> Option<()> {
        let messages = self.conversation();
        // `{"type":"message","message":` … `}`, and per part a comma and a
        // text block's wrapper at most.
        if messages.iter().any(|m| {
            m.parts
                .iter()
                .map(|&i| self.lines[i].len + 32)
                .sum::<usize>()
                + 64
                > max_line
        }) {
            return None;
        }
        for message in &messages {
            match self.skim(message) {
                Some(skim) => image.add_message(None, skim),
                None => image.skipped += 1,
            }
        }
        Some(())
    }

    /// The conversation as the conversion builds it: the line indices of
    /// each message's parts.
    fn conversation(&self) -> Vec<Merged> {
        let lines = &self.lines;
        // Each uuid's last line (a uuid written twice names its last).
        let mut by_uuid: HashTable<usize> = HashTable::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            let Some(uuid) = &line.uuid else {
                continue;
            };
            let same = |&j: &usize| lines[j].uuid.as_ref() == Some(uuid);
            match by_uuid.entry(line.uuid_hash, same, |&j| lines[j].uuid_hash) {
                Entry::Occupied(mut at) => *at.get_mut() = i,
                Entry::Vacant(at) => {
                    at.insert(i);
                }
            }
        }
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
            at = lines[i].parent.as_deref().and_then(|parent| {
                by_uuid
                    .find(lines[i].parent_hash, |&j| {
                        lines[j].uuid.as_deref() == Some(parent)
                    })
                    .copied()
            });
        }
        path.reverse();

        let mut out: Vec<Merged> = Vec::new();
        // Where each response's first part went, by `message.id`.
        let mut response_at: HashTable<(usize, usize)> = HashTable::new();
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
                        out[first.get().1].parts.push(i);
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
                last.parts.push(i);
                continue;
            }
            out.push(Merged {
                role: message.role,
                parts: vec![i],
            });
        }
        out
    }

    /// The skim the reader makes of a message's converted line; `None`
    /// when it would not read it.
    fn skim(&self, message: &Merged) -> Option<Skim<'_>> {
        let role = message.role?;
        let parts = message
            .parts
            .iter()
            .filter_map(|&i| self.lines[i].message.as_ref().map(|m| &m.content));
        let joined = message.parts.len() > 1;
        let mut events = Vec::new();
        for content in parts {
            match content {
                Content::Blocks(blocks) => {
                    if !blocks.valid {
                        return None;
                    }
                    events.extend(&blocks.events);
                }
                Content::Single(blocks) if joined => {
                    if !blocks.valid {
                        return None;
                    }
                    events.extend(&blocks.events);
                }
                Content::Text | Content::Absent => {}
                Content::Null if joined => {}
                Content::Null | Content::Single(_) | Content::Bad => return None,
            }
        }
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
}

/// One message of the conversation.
struct Merged {
    role: Option<Role>,
    parts: Vec<usize>,
}

/// Each non-blank line of `region` (the last one may lack its newline)
/// that is a JSON object, as a record.
fn parse_lines(region: &[u8], out: &mut Vec<Rec>) {
    let mut start = 0;
    let ends = memchr::memchr_iter(b'\n', region).chain([region.len()]);
    for end in ends {
        let line = &region[start..end];
        start = end + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Some(rec) = parse_line(line) {
            out.push(rec);
        }
    }
}

/// Every line of `region` as a record, in order, appended to `out`, with
/// `also` (the next read) done on this thread on the way.
///
/// A large region is cut into [`PIECES`] at line ends. When a spare core is
/// free, a helper thread starts on the pieces at once while this thread
/// does `also`, and then both take pieces until none is left: however
/// long `also` takes, neither thread waits for the other but at the very
/// end (a fixed split left one thread idle while the other still parsed).
fn parse_region<R>(region: &[u8], out: &mut Vec<Rec>, also: impl FnOnce() -> R) -> R {
    let helper = (region.len() >= PARALLEL_FROM).then(Helper::take).flatten();
    let Some(helper) = helper else {
        let done = also();
        parse_lines(region, out);
        return done;
    };
    let mut pieces = Vec::with_capacity(PIECES);
    let mut start = 0;
    for k in 1..PIECES {
        let from = (region.len() * k / PIECES).max(start);
        let end = memchr::memchr(b'\n', &region[from..]).map_or(region.len(), |i| from + i + 1);
        pieces.push(&region[start..end]);
        start = end;
    }
    pieces.push(&region[start..]);
    let taken = AtomicUsize::new(0);
    let work = || {
        let mut parsed = Vec::new();
        loop {
            let i = taken.fetch_add(1, Ordering::Relaxed);
            let Some(piece) = pieces.get(i) else {
                return parsed;
            };
            let mut recs = Vec::new();
            parse_lines(piece, &mut recs);
            parsed.push((i, recs));
        }
    };
    let (done, mine, theirs) = std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("toolwire-reader".into())
            .stack_size(crate::process::THREAD_STACK)
            .spawn_scoped(scope, work);
        let done = also();
        let mine = work();
        (done, mine, other.ok().and_then(|other| other.join().ok()))
    });
    drop(helper);
    let mut parsed: Vec<Option<Vec<Rec>>> = (0..pieces.len()).map(|_| None).collect();
    for (i, recs) in mine.into_iter().chain(theirs.into_iter().flatten()) {
        parsed[i] = Some(recs);
    }
    out.reserve(parsed.iter().flatten().map(Vec::len).sum());
    for (piece, recs) in pieces.iter().zip(parsed) {
        match recs {
            Some(mut recs) => out.append(&mut recs),
            // The helper failed on it (it cannot, short of a bug): read
            // here, so no line is ever lost.
            None => parse_lines(piece, out),
        }
    }
    done
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
    let hasher = IdHash::default();
    let hash = |text: &Option<Text>| text.as_deref().map_or(0, |t| hasher.hash_one(t));
    rec.uuid_hash = hash(&rec.uuid);
    rec.parent_hash = hash(&rec.parent);
    if let Some(message) = &mut rec.message {
        message.id_hash = hash(&message.id);
    }
    Some(rec)
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
        events: Vec::new(),
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
                        let mut events = Vec::with_capacity(heads.len());
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
                        if failed || events.iter().flat_map(Event::texts).any(|t| !kept(t)) {
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
