//! The one reading of provider conversations: messages, turns, tool calls,
//! tool results and how they pair (PROTOCOL.md sections 10.2 and 10.3).
//!
//! Every provider names calls and results differently (an Anthropic
//! `tool_use` block, an OpenAI Chat `tool_calls[i]`, a Responses
//! `function_call` item, a Gemini `functionCall` part), but the rules are
//! the same: messages of one side in a row are one turn; a result answers
//! the nearest call with its id in the assistant turn directly before it;
//! a result comes before any other content of its turn. A [`Dialect`] says
//! where a provider keeps those things in one message; everything else here
//! (pairing, faults, the budget's view of results) is written once, so the
//! guard, repair, check, reconstruct and the planner never look at provider
//! field names.
//!
//! Messages stay raw `serde_json::Value`s: unknown fields, key order and
//! numbers go back out exactly as they came in.

pub mod anthropic;
pub mod gemini;
pub mod ids;
pub mod openai_chat;
pub mod openai_responses;
mod pairing;
pub mod size;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::json::strings::escape_len;
pub use size::SizeUnit;

/// Opening tag of a preview; text starting with it is never persisted again.
pub const OPEN_TAG: &str = "<persisted-output>";

pub use pairing::{Fault, Pairing, ToolVerdict, Turn, pair};

/// Which provider's message shapes a conversation uses.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    #[default]
    Anthropic,
    OpenaiChat,
    OpenaiResponses,
    Gemini,
}

impl Format {
    pub fn dialect(self) -> &'static dyn Dialect {
        match self {
            Format::Anthropic => &anthropic::Anthropic,
            Format::OpenaiChat => &openai_chat::OpenaiChat,
            Format::OpenaiResponses => &openai_responses::OpenaiResponses,
            Format::Gemini => &gemini::Gemini,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Anthropic => "anthropic",
            Format::OpenaiChat => "openai-chat",
            Format::OpenaiResponses => "openai-responses",
            Format::Gemini => "gemini",
        }
    }

    pub const ALL: [Format; 4] = [
        Format::Anthropic,
        Format::OpenaiChat,
        Format::OpenaiResponses,
        Format::Gemini,
    ];

    pub fn from_name(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Who sent a message, as far as turns go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The user, tool outputs included.
    User,
    /// The model.
    Assistant,
}

/// What one item of a message is to the pairing rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// A client tool call that needs a result in the next user turn.
    Call,
    /// A tool result answering a call.
    Result,
    /// Anything else (text, images, server-side tool blocks that carry
    /// their own result, thinking).
    Other,
}

/// One item of a message: a content block, a part, a `tool_calls` entry,
/// or the message itself when the provider has one item per message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item<'a> {
    pub kind: ItemKind,
    /// Index of the item in its message, as the dialect counts them.
    pub index: usize,
    /// Call id (calls and results; empty for `Other`).
    pub id: Cow<'a, str>,
    /// Tool name, when the item carries one.
    pub name: Cow<'a, str>,
    /// A call outside an assistant message or a result outside a user
    /// message: the provider refuses it, repair drops it.
    pub misplaced: bool,
    /// The provider gave the item no id (Gemini calls without `id`): `id`
    /// is the tool name and the item pairs by order among those of that
    /// name, so two of them may share it.
    pub positional: bool,
}

/// What the pair guard reads of a message: its side, its items and where
/// its last server-side compaction stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View<'a> {
    pub side: Option<Side>,
    pub items: Vec<Item<'a>>,
    /// The item index of its last compaction ([`Dialect::compaction_index`]).
    pub compaction: Option<usize>,
}

impl<'a> View<'a> {
    /// The view of a parsed message.
    pub fn of(dialect: &dyn Dialect, message: &'a Value) -> View<'a> {
        View {
            side: dialect.side(message),
            items: dialect.items(message),
            compaction: dialect.compaction_index(message),
        }
    }

    /// The view with every string its own, borrowing nothing.
    pub fn into_owned(self) -> View<'static> {
        View {
            side: self.side,
            items: self
                .items
                .into_iter()
                .map(|i| Item {
                    id: Cow::Owned(i.id.into_owned()),
                    name: Cow::Owned(i.name.into_owned()),
                    ..i
                })
                .collect(),
            compaction: self.compaction,
        }
    }

    /// `(id, name)` of its calls, as [`calls`] gives them.
    pub fn calls(&self) -> impl Iterator<Item = (&str, &str)> {
        self.items
            .iter()
            .filter(|i| i.kind == ItemKind::Call && !i.misplaced)
            .map(|i| (&*i.id, &*i.name))
    }
}

/// A message reduced to what state is built from, read from a transcript
/// line without copying tool output.
#[derive(Debug, Default)]
pub struct Skim<'a> {
    pub side: Option<Side>,
    /// `(id, name)` of every call, in order.
    pub calls: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// Every result, in order.
    pub results: Vec<SkimResult<'a>>,
}

#[derive(Debug)]
pub struct SkimResult<'a> {
    pub id: Cow<'a, str>,
    /// The result's original content, `None` when the content is itself a
    /// replacement (a `<persisted-output>` preview). Digested by whoever
    /// takes it in, in the kind that id's decisions use.
    pub original: Option<Original<'a>>,
    /// The original's digest in [`Digest::NEW`], when the reader already
    /// made it (on the thread that parsed the line).
    pub digest: Option<Digest>,
}

/// A result's original content as a skim found it.
#[derive(Debug)]
pub enum Original<'a> {
    /// Its raw JSON (valid UTF-8, as the parser found it), borrowed from
    /// the transcript line.
    Raw(&'a [u8]),
    /// Its parsed value (dialects whose skim parses the whole message).
    Value(Value),
    /// Only its digest in [`Digest::NEW`], made where the content was read
    /// (a foreign session file is read in windows that are gone by the time
    /// its messages are taken in). Such a file has no records, so no id of
    /// it is digested in a legacy kind.
    Digested(Digest),
}

impl Original<'_> {
    /// The digest of this original in `kind`: that of its compact JSON as
    /// serde_json writes it. Raw JSON already in that form (as toolwire
    /// writes it) is hashed as it stands; anything else (an imported
    /// transcript with spaces or other escapes) is parsed first, and so is
    /// one that carries a cache marker, which is left out of the digest.
    pub fn digest(&self, kind: DigestKind) -> Digest {
        match self {
            Original::Raw(raw) if is_compact_json(raw) && !has_marker_key(raw) => {
                Digest::of_json_bytes_as(kind, raw)
            }
            Original::Raw(raw) => match crate::json::from_slice::<Value>(raw) {
                Ok(value) => Digest::of_value_as(kind, &value),
                Err(_) => Digest::of_json_bytes_as(kind, raw),
            },
            Original::Value(value) => Digest::of_value_as(kind, value),
            Original::Digested(digest) => {
                debug_assert_eq!(digest.kind(), Some(kind), "a digest asked in another kind");
                *digest
            }
        }
    }
}

/// Whether raw JSON may hold a cache marker: the key's quoted name, which
/// inside a JSON string would have its quotes escaped. A string's raw
/// JSON never holds one.
fn has_marker_key(raw: &[u8]) -> bool {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"cache_control\""));
    raw.first() != Some(&b'"') && KEY.find(raw).is_some()
}

/// Objects up to this many members are searched by comparing keys.
const SCAN_MEMBERS: usize = 8;

/// `value.get(key)`, but a small object is searched by comparing its keys
/// in order. serde_json's ordered map SipHashes the key of every lookup
/// of an object of two members or more; a message and its blocks have a
/// handful, and a pair/append looked members up some 60 times per pair:
/// the hashing was a tenth of the server's instructions in the stdio bench.
pub fn member<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.as_object().and_then(|obj| field(obj, key))
}

/// [`member`] of an object already in hand.
pub fn field<'a>(obj: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a Value> {
    if obj.len() <= SCAN_MEMBERS {
        obj.iter().find_map(|(k, v)| (k == key).then_some(v))
    } else {
        obj.get(key)
    }
}

/// Whether `raw` (valid JSON) is byte for byte what `serde_json::to_writer`
/// makes of its value: no whitespace between tokens, every escape the one
/// serde_json writes (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, else
/// `\u00xx` in lowercase, only for control characters), no key twice in an
/// object, an exponent as `e` with its sign. Numbers are otherwise kept
/// as spelled (`arbitrary_precision`) and keys in order (`preserve_order`),
/// so they need no check; but serde_json reads `1E5` and `1e5` as `1e+5`
/// and writes them so.
///
/// `raw` must be one valid JSON value (as a parser handed it over). Tool
/// output is mostly one string: then only two escapes need a look, since
/// every letter escape is the one serde_json writes.
pub fn is_compact_json(raw: &[u8]) -> bool {
    is_compact_json_within(raw, usize::MAX)
}

/// [`is_compact_json`], and nested at most `max_depth` arrays and objects
/// deep.
pub fn is_compact_json_within(raw: &[u8], max_depth: usize) -> bool {
    if let [b'"', inner @ .., b'"'] = raw {
        // Log output has an escaped newline every line; finding the two
        // escapes that may differ (`\/`, `\u`) by a vector search for
        // the pair instead of stopping at every backslash is several times
        // quicker. A match whose backslash is itself escaped (an odd run of
        // backslashes before it) is no escape. The searchers are built once,
        // not per result.
        static ESCAPES: std::sync::LazyLock<[memchr::memmem::Finder<'static>; 2]> =
            std::sync::LazyLock::new(|| [b"\\/", b"\\u"].map(memchr::memmem::Finder::new));
        return ESCAPES.iter().all(|finder| {
            finder.find_iter(inner).all(|at| {
                let run = inner[..at]
                    .iter()
                    .rev()
                    .take_while(|&&b| b == b'\\')
                    .count();
                run % 2 == 1 || escape_len(inner, at).is_some()
            })
        });
    }
    /// Objects with more keys than this are parsed instead (the duplicate
    /// check below is quadratic); tool results rarely have them.
    const MAX_KEYS: usize = 32;
    // The keys of every open object, one list: each open level holds where
    // its object's keys start (`None` for an array).
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut stack: Vec<Option<usize>> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        match b {
            b'"' => {
                let Some(end) = string_end(raw, i + 1) else {
                    return false;
                };
                if expect_key && let Some(&Some(start)) = stack.last() {
                    let key = &raw[i + 1..end];
                    let object = &keys[start..];
                    if object.len() >= MAX_KEYS || object.contains(&key) {
                        return false;
                    }
                    keys.push(key);
                }
                expect_key = false;
                i = end + 1;
            }
            b'{' | b'[' => {
                if stack.len() >= max_depth {
                    return false;
                }
                stack.push((b == b'{').then_some(keys.len()));
                expect_key = b == b'{';
                i += 1;
            }
            b'}' | b']' => {
                if let Some(Some(start)) = stack.pop() {
                    keys.truncate(start);
                }
                i += 1;
            }
            b',' => {
                expect_key = matches!(stack.last(), Some(Some(_)));
                i += 1;
            }
            b' ' | b'\t' | b'\n' | b'\r' => return false,
            // Outside strings an `E` is an exponent's, and an `e` before a
            // digit one without its sign (in `true` and `false` it ends the
            // word): serde_json writes either as `e+`.
            b'E' => return false,
            b'e' if raw.get(i + 1).is_some_and(u8::is_ascii_digit) => return false,
            _ => i += 1,
        }
    }
    true
}

/// The index of the quote closing the string whose content starts at
/// `start`; `None` when an escape in it is not the one serde_json writes.
fn string_end(raw: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    loop {
        i += memchr::memchr2(b'"', b'\\', raw.get(i..)?)?;
        if raw[i] == b'"' {
            return Some(i);
        }
        i += escape_len(raw, i)?;
    }
}

/// Which hash a [`Digest`] was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DigestKind {
    /// The first 8 bytes of SHA-256, written as 16 lowercase hex digits:
    /// every digest written before xxh3 was introduced. Still read, and
    /// still computed for the ids whose decisions carry one.
    Sha256,
    /// XXH3-64, written as `xxh3:` and 16 lowercase hex digits: every new
    /// decision.
    Xxh3,
}

/// Binds a decision to the original it was made from: a hash of the
/// result's content as compact JSON (see [`Dialect::result_value`]), of one
/// [`DigestKind`]. Two digests of different kinds say nothing about each
/// other: an id decided under one kind is digested in that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(Option<(DigestKind, u64)>);

impl Digest {
    /// Stands for any original: decisions read from version-1 journals
    /// (which carry no digest) and results sent as a replacement.
    pub const ANY: Digest = Digest(None);

    /// The kind new decisions are made with.
    pub const NEW: DigestKind = DigestKind::Xxh3;

    /// Prefix of the written form of an XXH3 digest.
    const XXH3_PREFIX: &str = "xxh3:";

    fn sha256(hash: &[u8]) -> Digest {
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash[..8]);
        // Zero stood for `ANY` when this was the only kind: a real SHA-256
        // digest was never written as zero.
        Digest(Some((DigestKind::Sha256, u64::from_be_bytes(first).max(1))))
    }

    /// The digest of compact JSON bytes, in the kind new decisions use.
    pub fn of_json_bytes(bytes: &[u8]) -> Digest {
        Digest::of_json_bytes_as(Digest::NEW, bytes)
    }

    pub fn of_json_bytes_as(kind: DigestKind, bytes: &[u8]) -> Digest {
        match kind {
            DigestKind::Sha256 => {
                use sha2::{Digest as _, Sha256};
                Digest::sha256(&Sha256::digest(bytes))
            }
            DigestKind::Xxh3 => Digest(Some((kind, xxhash_rust::xxh3::xxh3_64(bytes)))),
        }
    }

    /// The digest of a value, in the kind new decisions use.
    pub fn of_value(value: &Value) -> Digest {
        Digest::of_value_as(Digest::NEW, value)
    }

    /// The digest of a value, as it would be written compactly: exactly
    /// the bytes `serde_json::to_writer` writes (keys in order, numbers as
    /// spelled, its escapes), streamed into the hash without being built,
    /// with every [`CACHE_MARKER`] member left out, at any depth.
    pub fn of_value_as(kind: DigestKind, value: &Value) -> Digest {
        match kind {
            DigestKind::Sha256 => {
                let sha: sha2::Sha256 = HashWriter::digest(value);
                use sha2::Digest as _;
                Digest::sha256(&sha.finalize())
            }
            DigestKind::Xxh3 => match value {
                Value::String(s) if s.len() >= RECENT_FROM => recent_string_digest(s),
                _ => {
                    let xxh: xxhash_rust::xxh3::Xxh3 = HashWriter::digest(value);
                    Digest(Some((kind, xxh.digest())))
                }
            },
        }
    }

    /// The kind of hash; `None` for [`Digest::ANY`].
    pub fn kind(self) -> Option<DigestKind> {
        self.0.map(|(kind, _)| kind)
    }

    /// The written form (16 hex digits for SHA-256, `xxh3:` and 16 hex
    /// digits for XXH3); `None` for [`Digest::ANY`] (written as no digest).
    pub fn hex(self) -> Option<String> {
        self.0.map(|(kind, value)| match kind {
            DigestKind::Sha256 => format!("{value:016x}"),
            DigestKind::Xxh3 => format!("{}{value:016x}", Digest::XXH3_PREFIX),
        })
    }

    /// The digest as a tag (0 for [`Digest::ANY`], 1 SHA-256, 2 XXH3) and
    /// its value, for binary files ([`Digest::from_bits`] reads it back).
    pub fn to_bits(self) -> (u8, u64) {
        match self.0 {
            None => (0, 0),
            Some((DigestKind::Sha256, value)) => (1, value),
            Some((DigestKind::Xxh3, value)) => (2, value),
        }
    }

    /// What [`Digest::to_bits`] wrote; `None` for an unknown tag.
    pub fn from_bits(tag: u8, value: u64) -> Option<Digest> {
        match tag {
            0 => Some(Digest::ANY),
            1 => Some(Digest(Some((DigestKind::Sha256, value)))),
            2 => Some(Digest(Some((DigestKind::Xxh3, value)))),
            _ => None,
        }
    }

    /// Read a written digest; `None` when it is neither form.
    pub fn parse(text: &str) -> Option<Digest> {
        let (kind, hex) = match text.strip_prefix(Digest::XXH3_PREFIX) {
            Some(hex) => (DigestKind::Xxh3, hex),
            None => (DigestKind::Sha256, text),
        };
        let value = (hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u64::from_str_radix(hex, 16).ok())
            .flatten()?;
        Some(match (kind, value) {
            // Version 2's first journals wrote no zero digest; one read is
            // taken as it was then: any original.
            (DigestKind::Sha256, 0) => Digest::ANY,
            (kind, value) => Digest(Some((kind, value))),
        })
    }
}

/// Strings at least this long have their digest remembered (see
/// [`recent_string_digest`]); below it, writing the digest costs about as
/// much as looking it up.
const RECENT_FROM: usize = 8 << 10;

/// Slots of the table of recent digests: a conversation's large results
/// several times over, in 48 bytes each (96 KiB in all).
const RECENT_SLOTS: usize = 1 << 11;

/// Slots per set of that table: a string may sit in any of the slots of
/// the set its hash picks.
const RECENT_WAYS: usize = 4;

/// The XXH3 digest of a long string as JSON, remembered by a 128-bit hash
/// of its raw bytes. Every turn a client sends its whole conversation
/// again, so every large original is digested again: writing its JSON
/// escapes into the hash (a newline every few dozen bytes of tool output)
/// cost as much as parsing the request, where hashing the bytes as they
/// are runs several times faster. The table is process-wide and a fixed
/// size; a string it has not seen, or no longer holds, is digested the
/// long way. Only XXH3 digests are kept: a SHA-256 one stands for a
/// stronger binding than a 128-bit non-cryptographic key could.
fn recent_string_digest(s: &str) -> Digest {
    static RECENT: std::sync::Mutex<Recent> = std::sync::Mutex::new(Recent::new());
    let digest = remembered(&RECENT, s, |s| {
        let mut out: HashWriter<xxhash_rust::xxh3::Xxh3> = HashWriter {
            hash: Default::default(),
            buf: Vec::with_capacity(HashWriter::<xxhash_rust::xxh3::Xxh3>::BLOCK),
        };
        out.string(s);
        out.hash.update(&out.buf);
        out.hash.digest()
    });
    Digest(Some((DigestKind::Xxh3, digest)))
}

/// `s`'s digest from `recent` when it holds it, else `digest(s)`, then
/// remembered.
fn remembered(recent: &std::sync::Mutex<Recent>, s: &str, digest: impl FnOnce(&str) -> u64) -> u64 {
    let key = xxhash_rust::xxh3::xxh3_128(s.as_bytes());
    let lock = || recent.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(held) = lock().get(key) {
        return held;
    }
    let computed = digest(s);
    lock().put(key, computed);
    computed
}

/// Digests by key, in sets of [`RECENT_WAYS`] slots, each set in order of
/// last use. A direct-mapped table (one slot per key) let two strings of
/// one conversation that hash to the same slot evict each other on every
/// turn: of 200 large results, about one in eleven, each digested the
/// long way on every request. With four slots a set, a conversation of a
/// few hundred large results fits whole.
struct Recent {
    sets: Vec<[Option<(u128, u64)>; RECENT_WAYS]>,
}

impl Recent {
    const fn new() -> Recent {
        Recent { sets: Vec::new() }
    }

    fn set(key: u128) -> usize {
        (key as usize) % (RECENT_SLOTS / RECENT_WAYS)
    }

    /// Where `key` sits in its set.
    fn way(set: &[Option<(u128, u64)>; RECENT_WAYS], key: u128) -> Option<usize> {
        set.iter()
            .position(|slot| matches!(slot, Some((held, _)) if *held == key))
    }

    fn get(&mut self, key: u128) -> Option<u64> {
        let set = self.sets.get_mut(Recent::set(key))?;
        let way = Recent::way(set, key)?;
        // Most recently used first.
        set[..=way].rotate_right(1);
        set[0].map(|(_, digest)| digest)
    }

    /// Remember `digest` for `key`, first in its set: in place of the
    /// least recently used, or of itself when another thread put it in
    /// while this one was digesting (the digest is made outside the lock).
    fn put(&mut self, key: u128, digest: u64) {
        if self.sets.is_empty() {
            self.sets
                .resize(RECENT_SLOTS / RECENT_WAYS, [None; RECENT_WAYS]);
        }
        let set = &mut self.sets[Recent::set(key)];
        let way = Recent::way(set, key).unwrap_or(RECENT_WAYS - 1);
        set[..=way].rotate_right(1);
        set[0] = Some((key, digest));
    }
}

/// A hash that [`HashWriter`] feeds.
trait Sink: Default {
    fn update(&mut self, bytes: &[u8]);
}

impl Sink for sha2::Sha256 {
    fn update(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

impl Sink for xxhash_rust::xxh3::Xxh3 {
    fn update(&mut self, bytes: &[u8]) {
        xxhash_rust::xxh3::Xxh3::update(self, bytes);
    }
}

/// Compact JSON written straight into a hash, for [`Digest::of_value_as`].
///
/// Tool output is mostly long strings; serde_json's writer hands them over
/// in a piece per escaped character (every newline), which the hash then
/// takes a few bytes at a time. Here strings are scanned eight bytes at a
/// time for the few bytes JSON escapes, and everything reaches the hash in
/// large blocks. The bytes are serde_json's own (the digests of transcripts
/// already written depend on it): a unit test holds the two together.
struct HashWriter<H> {
    hash: H,
    buf: Vec<u8>,
}

impl<H: Sink> HashWriter<H> {
    const BLOCK: usize = 16 << 10;

    fn digest(value: &Value) -> H {
        let mut out = HashWriter {
            hash: H::default(),
            buf: Vec::with_capacity(Self::BLOCK),
        };
        out.value(value);
        out.hash.update(&out.buf);
        out.hash
    }

    fn put(&mut self, bytes: &[u8]) {
        if self.buf.len() + bytes.len() > Self::BLOCK {
            self.hash.update(&self.buf);
            self.buf.clear();
            if bytes.len() >= Self::BLOCK {
                self.hash.update(bytes);
                return;
            }
        }
        self.buf.extend_from_slice(bytes);
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.put(b"null"),
            Value::Bool(true) => self.put(b"true"),
            Value::Bool(false) => self.put(b"false"),
            // Written as serde_json writes it (its spelling as received,
            // with `arbitrary_precision`).
            Value::Number(n) => self.put(n.to_string().as_bytes()),
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                self.put(b"[");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.put(b",");
                    }
                    self.value(item);
                }
                self.put(b"]");
            }
            Value::Object(map) => {
                self.put(b"{");
                // Cache markers are not content (PROTOCOL.md 11.1): an
                // original is the same whichever of its blocks carries one.
                let content = map.iter().filter(|(key, _)| !is_cache_marker(key));
                for (i, (key, item)) in content.enumerate() {
                    if i > 0 {
                        self.put(b",");
                    }
                    self.string(key);
                    self.put(b":");
                    self.value(item);
                }
                self.put(b"}");
            }
        }
    }

    /// A JSON string as serde_json escapes it: `"` and `\\` and the control
    /// characters, the usual ones by letter and the rest as `\u00xx`.
    fn string(&mut self, s: &str) {
        self.put(b"\"");
        let bytes = s.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            // Eight bytes at a time: skip them when plain, else go straight
            // to the first that JSON escapes.
            if let Some(chunk) = bytes.get(i..i + 8) {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                let escapes = escape_mask(u64::from_le_bytes(word));
                if escapes == 0 {
                    i += 8;
                    continue;
                }
                i += (escapes.trailing_zeros() / 8) as usize;
            }
            let b = bytes[i];
            let escape: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0x00..=0x1f => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    self.put(&bytes[start..i]);
                    self.put(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[(b >> 4) as usize],
                        HEX[(b & 0xf) as usize],
                    ]);
                    i += 1;
                    start = i;
                    continue;
                }
                _ => {
                    i += 1;
                    continue;
                }
            };
            self.put(&bytes[start..i]);
            self.put(escape);
            i += 1;
            start = i;
        }
        self.put(&bytes[start..]);
        self.put(b"\"");
    }
}

/// The key under which a provider's prompt-cache breakpoint rides on a
/// content block (Anthropic's `cache_control`, also spelled so by gateways
/// that pass OpenAI-shaped parts on to Anthropic). A client moves it from
/// turn to turn (Claude Code puts it on the last block of the last user
/// message), so it is never part of what identifies a result's original.
pub const CACHE_MARKER: &str = "cache_control";

fn is_cache_marker(key: &str) -> bool {
    key == CACHE_MARKER
}

/// `value` with every cache marker taken out, at any depth: what a saved
/// output holds, so that it is the same whichever turn saved it.
pub fn without_cache_markers(value: &Value) -> Cow<'_, Value> {
    fn strip(value: &mut Value) {
        match value {
            Value::Array(items) => items.iter_mut().for_each(strip),
            Value::Object(map) => {
                map.shift_remove(CACHE_MARKER);
                map.values_mut().for_each(strip);
            }
            _ => {}
        }
    }
    fn has(value: &Value) -> bool {
        match value {
            Value::Array(items) => items.iter().any(has),
            Value::Object(map) => map.contains_key(CACHE_MARKER) || map.values().any(has),
            _ => false,
        }
    }
    if !has(value) {
        return Cow::Borrowed(value);
    }
    let mut owned = value.clone();
    strip(&mut owned);
    Cow::Owned(owned)
}

/// The cache marker carried by a block *inside* a result's content (the
/// last one, when several do): the replacement's text block carries it on
/// in its place.
pub fn inner_cache_marker(content: Option<&Value>) -> Option<&Value> {
    match content? {
        Value::Array(blocks) => blocks.iter().rev().find_map(|b| b.get(CACHE_MARKER)),
        _ => None,
    }
}

/// Put `text` as the content `field` of `target` (a result block or
/// message), keeping the current request's inner cache marker. The shape
/// follows the original's, which is the same on every turn: content that
/// is a list of blocks becomes a single `text` block (carrying the inner
/// marker when the request has one, so the client's breakpoint stays
/// where it put it), a string stays a string. Choosing the block by the
/// marker instead sent a block on the turn the marker was there and the
/// plain string on the next, when it had moved on: only the marker may
/// change between turns (PROTOCOL.md 11.1). A marker on `target` itself
/// stays untouched.
pub fn put_text_keeping_marker(target: &mut Value, field: &str, text: &str) {
    let marker = inner_cache_marker(target.get(field)).cloned();
    let blocks = matches!(target.get(field), Some(Value::Array(_)));
    let Some(obj) = target.as_object_mut() else {
        return;
    };
    let content = match marker {
        Some(marker) => serde_json::json!([{"type": "text", "text": text, CACHE_MARKER: marker}]),
        None if blocks => serde_json::json!([{"type": "text", "text": text}]),
        None => Value::String(text.to_owned()),
    };
    obj.insert(field.into(), content);
}

/// The bytes of a little-endian word that are `"`, `\\` or below 0x20, as
/// their high bits (the SWAR test for a zero byte, applied to the word
/// xored with each of the two, and to the word itself for bytes below
/// 0x20). Only bytes above a match may be flagged falsely, so the lowest
/// flag is always a byte to escape.
fn escape_mask(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let quote = has_zero(word ^ (ONES * b'"' as u64));
    let backslash = has_zero(word ^ (ONES * b'\\' as u64));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    quote | backslash | control
}

/// A result's content in the shapes the budget knows.
pub enum ResultContent<'a> {
    Text(&'a str),
    /// Content blocks; `text` blocks count, anything else is non-text.
    Blocks(&'a [Value]),
    /// A structured value whose text is its compact JSON (a Gemini
    /// `functionResponse.response` without a string `output`).
    Json(&'a Value),
    /// Missing or of another shape: counts as empty text, never persisted.
    Other,
}

impl<'a> ResultContent<'a> {
    /// A content value as the budget reads it: a string, or blocks.
    pub fn of_value(content: Option<&'a Value>) -> Self {
        match content {
            Some(Value::String(s)) => ResultContent::Text(s),
            Some(Value::Array(b)) => ResultContent::Blocks(b),
            _ => ResultContent::Other,
        }
    }

    fn texts(&self) -> impl Iterator<Item = &'a str> {
        let blocks: &'a [Value] = match self {
            ResultContent::Blocks(b) => b,
            _ => &[],
        };
        blocks
            .iter()
            .filter(|b| is_text_part(b))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
    }

    /// Size in `unit`: the string, or the sum over `text` blocks.
    pub fn size(&self, unit: SizeUnit) -> u64 {
        match self {
            ResultContent::Text(s) => unit.len(s),
            ResultContent::Blocks(_) => self.texts().map(|t| unit.len(t)).sum(),
            ResultContent::Json(v) => unit.len(&v.to_string()),
            ResultContent::Other => 0,
        }
    }

    /// Whether the content holds anything but text (images, documents…).
    pub fn has_non_text(&self) -> bool {
        match self {
            ResultContent::Blocks(b) => b.iter().any(|b| !is_text_part(b)),
            ResultContent::Text(_) | ResultContent::Json(_) => false,
            ResultContent::Other => true,
        }
    }

    /// The text a preview is cut from: text blocks are joined by newlines.
    pub fn preview_text(&self) -> Cow<'a, str> {
        match self {
            ResultContent::Text(s) => Cow::Borrowed(s),
            ResultContent::Blocks(_) => Cow::Owned(self.texts().collect::<Vec<_>>().join("\n")),
            ResultContent::Json(v) => Cow::Owned(v.to_string()),
            ResultContent::Other => Cow::Borrowed(""),
        }
    }

    pub fn first_text(&self) -> &'a str {
        match self {
            ResultContent::Text(s) => s,
            ResultContent::Blocks(_) => self.texts().next().unwrap_or_default(),
            ResultContent::Json(_) | ResultContent::Other => "",
        }
    }

    /// Whether the original is plain text (persisted as `.txt`) rather than
    /// structured content (persisted as `.json`).
    pub fn is_text(&self) -> bool {
        matches!(self, ResultContent::Text(_))
    }
}

/// A text part of result content: Anthropic's `text` block, the Responses
/// API's `input_text`/`output_text` parts.
fn is_text_part(part: &Value) -> bool {
    matches!(
        part.get("type").and_then(Value::as_str),
        Some("text" | "input_text" | "output_text")
    )
}

/// Where one provider keeps calls, results and content in a message.
///
/// Implementations read and edit single messages; turns, pairing and
/// repair are built on top of them in this module.
pub trait Dialect: Send + Sync {
    fn format(&self) -> Format;

    /// Check the parts of a message the contract relies on, naming the
    /// first offending field (`path` is the message's own, e.g. `message`).
    /// With `strict_roles`, tool items in the wrong role are refused too.
    fn validate(&self, message: &Value, path: &str, strict_roles: bool) -> Result<()>;

    /// The side of a message; `None` for messages that belong to no turn
    /// (they neither split a turn nor answer anything).
    fn side(&self, message: &Value) -> Option<Side>;

    /// Every item of a message, in order.
    fn items<'a>(&self, message: &'a Value) -> Vec<Item<'a>>;

    /// The content of the result item at `index`, as the budget sizes it.
    fn result_content<'a>(&self, message: &'a Value, index: usize) -> ResultContent<'a>;

    /// The value a result's digest and its artifact are made from.
    fn result_value<'a>(&self, message: &'a Value, index: usize) -> Option<&'a Value>;

    /// Put a preview (or a stored replacement) in place of the result at
    /// `index`.
    fn put_replacement(&self, message: &mut Value, index: usize, text: &str);

    /// Messages answering `calls` (`(id, name)`, made in the messages of
    /// `turn`) with error results that carry `text`.
    fn error_results(&self, calls: &[(String, String)], turn: &[Value], text: &str) -> Vec<Value>;

    /// Whether the message belongs with the call items that follow it in
    /// its turn (a Responses `reasoning` item): repair drops it when it
    /// drops every item that followed it, and never otherwise.
    fn leads_calls(&self, _message: &Value) -> bool {
        false
    }

    /// `message` without the items at `drop` (sorted indexes); `None` when
    /// nothing of it is left to send.
    fn without_items(&self, message: &Value, drop: &[usize]) -> Option<Value>;

    /// The items at `take` (sorted indexes) of the user message, as one
    /// message (or several) holding only them, in order.
    fn only_items(&self, message: &Value, take: &[usize]) -> Vec<Value>;

    /// Whether the budget's "message" is a run of consecutive result-bearing
    /// messages (OpenAI Chat's `tool` messages) rather than each message on
    /// its own (an Anthropic user message, PROTOCOL.md section 4).
    fn budget_runs(&self) -> bool {
        false
    }

    /// Skim a message from a transcript line (`message` is its raw JSON)
    /// without copying tool output; `None` when it is not a message of this
    /// format.
    fn skim<'a>(&self, message: &'a [u8]) -> Option<Skim<'a>>;

    /// The provider's own words for a fault, as its API answers with HTTP
    /// 400 (`message` is the index the provider would name).
    fn provider_error(&self, fault: Fault, message: usize, index: usize, ids: &[String]) -> String;

    /// Whether the provider documents rules on call ids that [`ids`]
    /// checks and maps (PROTOCOL.md 11.2); other formats pass ids as they
    /// are.
    fn checks_ids(&self) -> bool {
        false
    }

    /// The call or result item at `index` as sent (the content block), for
    /// telling two pairs apart; `None` where items are not blocks.
    fn item_value<'a>(&self, _message: &'a Value, _index: usize) -> Option<&'a Value> {
        None
    }

    /// Give the call or result item at `index` the id `id`.
    fn set_item_id(&self, _message: &mut Value, _index: usize, _id: &str) {}

    /// The item index of the last server-side compaction in `message` (an
    /// Anthropic `compaction` block, a Responses `compaction` item): the
    /// provider drops everything before it (PROTOCOL.md 11.2).
    fn compaction_index(&self, _message: &Value) -> Option<usize> {
        None
    }
}

/// Where the provider starts reading the conversation: `(message, item)`
/// of its newest compaction, if any. What stands before it is never sent
/// to the model: pairing is judged from here on, repair leaves what is
/// before it alone, and budgeting decides nothing there.
pub fn compaction_cut<'m>(
    dialect: &dyn Dialect,
    messages: impl DoubleEndedIterator<Item = &'m Value> + ExactSizeIterator,
) -> Option<(usize, usize)> {
    last_compaction(messages.map(|message| dialect.compaction_index(message)))
}

/// [`compaction_cut`] from each message's compaction index, already read.
pub fn last_compaction(
    indexes: impl DoubleEndedIterator<Item = Option<usize>> + ExactSizeIterator,
) -> Option<(usize, usize)> {
    indexes
        .enumerate()
        .rev()
        .find_map(|(m, index)| Some((m, index?)))
}

/// Whether the item `(message, index)` stands before `cut`.
pub fn before_cut(cut: Option<(usize, usize)>, message: usize, index: usize) -> bool {
    cut.is_some_and(|cut| (message, index) < cut)
}

/// A skim built from the parsed message, for dialects whose transcripts
/// are read whole (the original is [`Dialect::result_value`], as the
/// budget digests it).
pub fn skim_value<'a>(dialect: &dyn Dialect, message: &'a [u8]) -> Option<Skim<'a>> {
    let value: Value = crate::json::from_slice(message).ok()?;
    if !value.is_object() {
        return None;
    }
    let side = dialect.side(&value);
    let mut skim = Skim {
        side,
        ..Skim::default()
    };
    for item in dialect.items(&value) {
        if item.misplaced {
            continue;
        }
        match item.kind {
            ItemKind::Call => skim.calls.push((
                Cow::Owned(item.id.into_owned()),
                Cow::Owned(item.name.into_owned()),
            )),
            ItemKind::Result => {
                let replacement = dialect
                    .result_content(&value, item.index)
                    .first_text()
                    .starts_with(OPEN_TAG);
                let original = (!replacement).then(|| {
                    Original::Value(
                        dialect
                            .result_value(&value, item.index)
                            .cloned()
                            .unwrap_or(Value::Null),
                    )
                });
                skim.results.push(SkimResult {
                    id: Cow::Owned(item.id.into_owned()),
                    original,
                    digest: None,
                });
            }
            ItemKind::Other => {}
        }
    }
    Some(skim)
}

/// [`Dialect::only_items`] of a message that is one item in itself (an
/// OpenAI Chat `tool` message, a Responses item).
pub fn whole_message(message: &Value, take: &[usize]) -> Vec<Value> {
    if take.contains(&0) {
        vec![message.clone()]
    } else {
        Vec::new()
    }
}

/// Set the top-level text field `field` of a message (where a preview goes
/// when the result is the whole message).
pub fn set_text(message: &mut Value, field: &str, text: &str) {
    if let Some(obj) = message.as_object_mut() {
        obj.insert(field.into(), Value::String(text.to_owned()));
    }
}

/// Results of `message` with their item index and id.
pub fn results<'a>(dialect: &dyn Dialect, message: &'a Value) -> Vec<(usize, Cow<'a, str>)> {
    dialect
        .items(message)
        .into_iter()
        .filter(|i| i.kind == ItemKind::Result && !i.misplaced)
        .map(|i| (i.index, i.id))
        .collect()
}

/// Calls of `message` with their id and tool name.
pub fn calls<'a>(dialect: &dyn Dialect, message: &'a Value) -> Vec<(Cow<'a, str>, Cow<'a, str>)> {
    dialect
        .items(message)
        .into_iter()
        .filter(|i| i.kind == ItemKind::Call && !i.misplaced)
        .map(|i| (i.id, i.name))
        .collect()
}

/// Text of a synthetic result closing an interrupted call.
pub fn interrupted_text(reason: &str) -> String {
    let reason = if reason.trim().is_empty() {
        "interrupted"
    } else {
        reason
    };
    format!("Tool call did not complete: {reason}. No result was produced.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A small object searched by comparing keys and a large one by its
    /// hash find the same members as `Value::get`, and nothing else.
    #[test]
    fn member_finds_what_get_finds() {
        let small = json!({"role": "user", "content": [1], "z": null});
        let large: Value = (0..SCAN_MEMBERS + 4)
            .map(|i| (format!("k{i}"), json!(i)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        for object in [&small, &large] {
            let keys: Vec<&String> = object.as_object().unwrap().keys().collect();
            for key in keys {
                assert_eq!(member(object, key), object.get(key));
                assert!(member(object, key).is_some());
            }
            assert_eq!(member(object, "missing"), None);
            assert_eq!(member(object, ""), None);
        }
        assert_eq!(member(&json!([1, 2]), "role"), None);
        assert_eq!(member(&json!("role"), "role"), None);
    }

    fn serde_digest(kind: DigestKind, value: &Value) -> Digest {
        Digest::of_json_bytes_as(kind, &serde_json::to_vec(value).unwrap_or_default())
    }

    const KINDS: [DigestKind; 2] = [DigestKind::Sha256, DigestKind::Xxh3];

    /// JSON values with the strings tool output has: every control
    /// character, quotes, backslashes, multi-byte text, long runs.
    fn json_value() -> impl Strategy<Value = Value> {
        let text = prop::collection::vec(
            prop_oneof![
                (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap_or(' ')),
                Just('"'),
                Just('\\'),
                Just('/'),
                Just('\u{7f}'),
                Just('é'),
                Just('\u{2028}'),
                Just('😀'),
                prop::char::range('a', 'z'),
            ],
            0..40,
        )
        .prop_map(|cs| cs.into_iter().collect::<String>());
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "(-?[0-9]{1,3}(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?)"
                .prop_map(|n| serde_json::from_str::<Value>(&n).unwrap_or(Value::Null)),
            text.clone().prop_map(Value::String),
            (text.clone(), 1usize..200).prop_map(|(t, n)| Value::String(t.repeat(n))),
        ];
        leaf.prop_recursive(4, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((text.clone(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Digests written into transcripts so far were made from
        /// serde_json's bytes: the streamed writer must make the same.
        #[test]
        fn the_streamed_digest_is_that_of_serde_json_bytes(value in json_value()) {
            for kind in KINDS {
                prop_assert_eq!(Digest::of_value_as(kind, &value), serde_digest(kind, &value));
            }
        }

        /// serde_json's own bytes pass as compact (and are hashed as they
        /// stand); the same value pretty-printed does not, unless nothing
        /// in it could be spelled otherwise.
        #[test]
        fn serde_json_bytes_are_compact(value in json_value()) {
            let compact = serde_json::to_vec(&value).unwrap_or_default();
            prop_assert!(is_compact_json(&compact));
            let pretty = serde_json::to_vec_pretty(&value).unwrap_or_default();
            prop_assert_eq!(is_compact_json(&pretty), pretty == compact);
        }
    }

    proptest! {
        /// A string is compact exactly when none of its escapes is one
        /// serde_json would not write, however escapes and escaped
        /// backslashes follow each other.
        #[test]
        fn a_string_is_compact_unless_an_escape_is_spelled_otherwise(
            pieces in prop::collection::vec(prop::sample::select(vec![
                ("x", true), ("u/", true), ("\\\\", true), ("\\n", true), ("\\\"", true),
                ("\\u001f", true), ("\\u001F", false), ("\\u000a", false),
                ("\\u00e9", false), ("\\/", false),
            ]), 0..12)
        ) {
            let raw = format!("\"{}\"", pieces.iter().map(|(p, _)| *p).collect::<String>());
            let compact = pieces.iter().all(|(_, ok)| *ok);
            prop_assert_eq!(is_compact_json(raw.as_bytes()), compact, "{}", raw);
        }
    }

    #[test]
    fn other_spellings_are_not_compact() {
        // What serde_json writes of the value it reads from `raw`.
        let compact = |raw: &str| {
            serde_json::to_string(&serde_json::from_str::<Value>(raw).unwrap()).unwrap()
        };
        for raw in [
            r#""a\/b""#,
            r#""\u00e9""#,
            r#""\u001F""#,
            r#""\u000a""#,
            r#""\\\u00e9""#,
            r#""\\\\\/""#,
            r#"{"a":1,"a":2}"#,
            r#"[1, 2]"#,
            "[\n1]",
            "-1.50e3",
            "1E5",
            "[2E+5]",
            r#"{"a":1E-5}"#,
        ] {
            assert!(!is_compact_json(raw.as_bytes()), "{raw}");
            assert_ne!(compact(raw), raw, "serde_json writes {raw} as it is");
        }
        for raw in [
            r#""\u001f\n\"\\""#,
            r#""\\u00e9\\/\\\\u""#,
            r#"{"a":{"a":1},"b":[{"a":2}]}"#,
            "-1.50e+3",
            "[1e-5,true,false]",
        ] {
            assert!(is_compact_json(raw.as_bytes()), "{raw}");
            assert_eq!(compact(raw), raw);
        }
        // Nesting: at most the depth asked for.
        let deep = format!("{}1{}", "[".repeat(3), "]".repeat(3));
        assert!(is_compact_json_within(deep.as_bytes(), 3));
        assert!(!is_compact_json_within(deep.as_bytes(), 2));
        assert!(is_compact_json_within(br#"{"a":{"a":1},"b":[{"a":2}]}"#, 3));
        assert!(!is_compact_json_within(br#"{"a":{"a":1},"a":2}"#, 3));
    }

    /// The written forms: a SHA-256 digest as version 2 always wrote it
    /// (the first 8 bytes of the hash, 16 hex digits), an XXH3 one with
    /// its prefix; each reads back as itself.
    #[test]
    fn digests_are_written_in_forms_that_tell_their_kind() {
        let value = json!("first original");
        let sha = Digest::of_value_as(DigestKind::Sha256, &value);
        // python3: hashlib.sha256(b'"first original"').hexdigest()[:16]
        assert_eq!(sha.hex().as_deref(), Some("b2cb85c76de358c6"));
        let new = Digest::of_value(&value);
        assert_eq!(new.kind(), Some(DigestKind::Xxh3));
        let written = new.hex().unwrap_or_default();
        assert!(
            written.starts_with("xxh3:") && written.len() == 21,
            "{written}"
        );
        for digest in [sha, new] {
            assert_eq!(
                Digest::parse(&digest.hex().unwrap_or_default()),
                Some(digest)
            );
        }
        assert_eq!(Digest::parse("0000000000000000"), Some(Digest::ANY));
        for bad in [
            "",
            "xxh3:",
            "b2cb85c76de358c",
            "+2c2b5e9f8ef1b2b",
            "sha:b2cb85c76de358c6",
        ] {
            assert_eq!(Digest::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn long_strings_digest_as_serde_json_writes_them() {
        let text = "fn main() {\n\t\"x\" \\ é\u{1}\u{1f}\u{7f}😀\r\n}\n".repeat(5_000);
        for value in [
            json!(text),
            json!([{"type": "text", "text": text}]),
            json!({"output": text, "n": 1.50, "e": 1e3}),
        ] {
            for kind in KINDS {
                assert_eq!(
                    Digest::of_value_as(kind, &value),
                    serde_digest(kind, &value)
                );
            }
        }
    }

    /// A conversation's large results are all remembered from one turn to
    /// the next: none is digested the long way twice, and the least
    /// recently used gives way once a set is full.
    #[test]
    fn a_conversation_of_large_results_is_remembered_whole() {
        let recent = std::sync::Mutex::new(Recent::new());
        let long_way = std::cell::Cell::new(0);
        let digest = |s: &str| {
            long_way.set(long_way.get() + 1);
            s.len() as u64
        };
        let results: Vec<String> = (0..300).map(|i| format!("result {i}")).collect();
        for turn in 0..3 {
            for r in &results {
                assert_eq!(remembered(&recent, r, digest), r.len() as u64);
            }
            assert_eq!(long_way.replace(0), if turn == 0 { 300 } else { 0 });
        }
        // Five strings of one set: the first, least recently used, went.
        let mut one_set = Vec::new();
        for i in 0.. {
            let s = format!("same set {i}");
            let key = xxhash_rust::xxh3::xxh3_128(s.as_bytes());
            if Recent::set(key) == 0 {
                one_set.push(s);
                if one_set.len() == RECENT_WAYS + 1 {
                    break;
                }
            }
        }
        for s in &one_set {
            remembered(&recent, s, digest);
        }
        long_way.set(0);
        for s in one_set[1..].iter().rev() {
            remembered(&recent, s, digest);
        }
        assert_eq!(long_way.replace(0), 0, "the last four are held");
        // A key put in twice (two threads digesting it at once) takes one
        // slot, not two: the other three stay.
        let raced = xxhash_rust::xxh3::xxh3_128(one_set[1].as_bytes());
        recent.lock().unwrap().put(raced, one_set[1].len() as u64);
        for s in &one_set[1..] {
            remembered(&recent, s, digest);
        }
        assert_eq!(long_way.replace(0), 0, "the four are still held");
        remembered(&recent, &one_set[0], digest);
        assert_eq!(long_way.get(), 1, "the first was evicted");
    }

    /// A long string's remembered digest is its digest: when first seen,
    /// when seen again, and after many others took the slots, and two
    /// strings that differ in one byte never share one.
    #[test]
    fn remembered_digests_are_the_digests() {
        let texts: Vec<String> = (0..3 * RECENT_SLOTS)
            .map(|i| {
                format!(
                    "{i}\n\"quoted\"\t{}",
                    "line of output\n".repeat(RECENT_FROM / 15 + 1)
                )
            })
            .collect();
        for _ in 0..2 {
            for text in texts.iter().step_by(97).chain(&texts[..3]) {
                let value = json!(text);
                assert_eq!(Digest::of_value(&value), serde_digest(Digest::NEW, &value));
            }
        }
        let mut other = texts[0].clone().into_bytes();
        let last = other.len() - 1;
        other[last] = b'X';
        let other = json!(String::from_utf8(other).unwrap());
        assert_eq!(Digest::of_value(&other), serde_digest(Digest::NEW, &other));
        assert_ne!(Digest::of_value(&other), Digest::of_value(&json!(texts[0])));
    }

    /// PROTOCOL.md 11.1: two results that differ only in where the client
    /// put its cache breakpoint are one original, whether read from a
    /// request or from a transcript line, and the saved output is the same.
    #[test]
    fn cache_markers_are_not_content() {
        let big = "log line\n".repeat(50);
        let bare = json!([{"type": "text", "text": big}]);
        let marked = json!([{"type": "text", "text": big, "cache_control": {"type": "ephemeral"}}]);
        let deep = json!([{"type": "text", "text": big, "meta": {"cache_control": {"ttl": "1h"}}}]);
        for kind in KINDS {
            let emptied = json!([{"type": "text", "text": big, "meta": {}}]);
            for (v, same) in [(&marked, &bare), (&deep, &emptied)] {
                let want = Digest::of_value_as(kind, same);
                assert_eq!(Digest::of_value_as(kind, v), want);
                let raw = serde_json::to_vec(v).unwrap();
                assert_eq!(Original::Raw(&raw).digest(kind), want);
                assert_eq!(Original::Value(v.clone()).digest(kind), want);
            }
            // Text that merely mentions the key is content.
            let mention = json!([{"type": "text", "text": "\"cache_control\""}]);
            let raw = serde_json::to_vec(&mention).unwrap();
            assert_eq!(
                Original::Raw(&raw).digest(kind),
                Digest::of_value_as(kind, &mention)
            );
            assert_ne!(
                Digest::of_value_as(kind, &mention),
                Digest::of_value_as(kind, &json!([{"type": "text", "text": ""}]))
            );
        }
        assert_eq!(*without_cache_markers(&marked), bare);
        assert_eq!(
            *without_cache_markers(&deep),
            json!([{"type": "text", "text": big, "meta": {}}])
        );
        assert!(matches!(without_cache_markers(&bare), Cow::Borrowed(_)));
    }

    /// The replacement carries the current request's marker: an inner
    /// block's onto the replacement's text block, the result block's own
    /// where it was.
    #[test]
    fn the_replacement_carries_the_current_markers() {
        let marker = json!({"type": "ephemeral"});
        let mut inner = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
            "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y", "cache_control": marker}]}]});
        anthropic::Anthropic.put_replacement(&mut inner, 0, "P");
        assert_eq!(
            inner["content"][0]["content"],
            json!([{"type": "text", "text": "P", "cache_control": marker}])
        );
        let mut outer = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
            "content": [{"type": "text", "text": "x"}], "cache_control": marker}]});
        anthropic::Anthropic.put_replacement(&mut outer, 0, "P");
        assert_eq!(
            outer["content"][0],
            json!({"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "P"}], "cache_control": marker})
        );
        let mut chat = json!({"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "x", "cache_control": marker}]});
        openai_chat::OpenaiChat.put_replacement(&mut chat, 0, "P");
        assert_eq!(
            chat["content"],
            json!([{"type": "text", "text": "P", "cache_control": marker}])
        );
        // The marker gone (moved on to a later block): the same block
        // without it, never the string.
        let mut moved = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
            "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}]});
        anthropic::Anthropic.put_replacement(&mut moved, 0, "P");
        assert_eq!(
            moved["content"][0]["content"],
            json!([{"type": "text", "text": "P"}])
        );
        let mut plain = json!({"role": "tool", "tool_call_id": "a", "content": "x"});
        openai_chat::OpenaiChat.put_replacement(&mut plain, 0, "P");
        assert_eq!(plain["content"], json!("P"));
    }
}
