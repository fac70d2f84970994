//! Decisions checkpoints: a session's decisions as its transcript records
//! them up to some byte offset, saved beside the transcript, so a resume
//! reads the checkpoint and only the lines after that offset instead of
//! the whole file.
//!
//! The transcript stays the only source of truth. A checkpoint is a cache
//! of one reading of it at a commit boundary: the state its decisions make
//! ([`ReplacementState`], saved shard by shard so it is taken back without
//! deciding each id again) and the rest of its [`SessionImage`]. It is
//! taken only while it proves it was made from the bytes now there:
//!
//! - its own checksum (XXH3-64 over everything after its header) and
//!   version, so a torn or half-written file is not read;
//! - the packing of replacements it was written with ([`packing_id`]), so
//!   a build that packs differently does not take its packed text;
//! - `at`, the logical offset it stands for: never past the transcript's
//!   (logical) length;
//! - the device and inode of the file that holds the byte just before
//!   `at` (the transcript, or for a fork the link to its parent's bytes):
//!   a transcript replaced under its name (`transcript/repair` renames a
//!   new file over it, a new session of the same id after gc) is another
//!   file;
//! - the XXH3-128 of the last 4 KiB (or fewer) before `at`: bytes
//!   rewritten in place there by someone else's tool.
//!
//! Whatever fails, the checkpoint is not used and the transcript is read
//! whole (as before checkpoints existed), never part-way from a checkpoint
//! it cannot trust.
//!
//! What this does not prove: that no byte more than 4 KiB before `at` was
//! rewritten in place at the same length. Proving it means reading those
//! bytes, which is what the checkpoint spares, and the file's times move
//! with every commit of its own session. It suffices because nothing
//! writes a transcript's committed bytes in place (commits append, a torn
//! tail is cut after the last commit, the commit log's replay writes only
//! what a transcript lacks, repair and import rename a new file over it,
//! editors save a new file); a tool that does must remove the checkpoint
//! too (docs/transcripts.md).
//!
//! It is written as a temporary file renamed over the old one, so a reader
//! sees the old or the new one whole; `kill -9` at any instant leaves one
//! of them, or a temporary file gc removes. It is not synced: after a
//! power loss it may come back empty or stale, which its checksum and the
//! proof above turn into "read the transcript".
//!
//! The file is named `.<transcript file name>.decisions` (for a session,
//! `sessions/.<id>.jsonl.decisions`): a hidden name, which no session id
//! can take (ids never start with a dot), does not end in `.jsonl`, and
//! gc ([`crate::retention`]) knows as its session's.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fork::Logical;
use super::reader::SessionImage;
use crate::format::{Digest, Format};
use crate::state::{Id, Replacement, ReplacementState, Restore, keep_id, packing_id};

/// Suffix of a checkpoint's name (see the module's doc).
pub const SUFFIX: &str = ".decisions";

/// Prefix of a checkpoint's temporary file (gc removes stale ones).
pub const TEMP_PREFIX: &str = ".decisions-";

/// First bytes of a checkpoint; the last one is its version. Version 1
/// saved the image's lists of results and records, which a resume then
/// decided one by one; its files are not read (a cache: the transcript is
/// read whole once, and a checkpoint of this version written).
const MAGIC: [u8; 8] = *b"TWDECS\x00\x02";

/// How much of the transcript before `at` its digest covers.
const TAIL: u64 = 4096;

/// A session rewrites its checkpoint once this many bytes (or, when more,
/// as many as the checkpoint itself holds) were committed after it: a
/// resume then reads at most about that much of the transcript, and a
/// checkpoint is written at most once per as many transcript bytes as it
/// has itself.
pub const REFRESH_MIN: u64 = 2 << 20;

/// [`REFRESH_MIN`], or what the test hook `TOOLWIRE_TEST_CHECKPOINT_EVERY`
/// (bytes) says, so a test makes many checkpoints from a short session.
pub fn refresh_min() -> u64 {
    use std::sync::OnceLock;
    static MIN: OnceLock<u64> = OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("TOOLWIRE_TEST_CHECKPOINT_EVERY")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(REFRESH_MIN)
    })
}

/// The checkpoint's path beside `transcript`.
pub fn path_for(transcript: &Path) -> Option<PathBuf> {
    let name = transcript.file_name()?;
    let mut hidden = OsString::from(".");
    hidden.push(name);
    hidden.push(SUFFIX);
    Some(transcript.with_file_name(hidden))
}

/// The session a file name in `sessions/` is the checkpoint of.
pub fn owner(name: &str) -> Option<&str> {
    name.strip_prefix('.')?
        .strip_suffix(SUFFIX)?
        .strip_suffix(".jsonl")
}

/// A session's decisions as its transcript records them up to `at`.
pub struct Checkpoint {
    /// Logical offset (a fork's counts its parent's bytes) of the first
    /// line the checkpoint has not taken in.
    pub at: u64,
    pub format: Format,
    /// The decisions of the lines before `at` as they take effect
    /// (replacements first, then results sent whole), clearings not
    /// applied: see [`follow`].
    pub decided: ReplacementState,
    /// The rest of the reading (clearings, unanswered calls, legacy ids,
    /// counts); its `seen` and `replacements` are in `decided`, not here.
    pub image: SessionImage,
    /// The checkpoint file's size.
    pub size: u64,
}

/// What proves a checkpoint belongs to the transcript's bytes before `at`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Proof {
    at: u64,
    dev: u64,
    ino: u64,
    tail: u128,
}

impl Proof {
    /// The proof of `logical`'s bytes before `at`; `None` when there are
    /// not that many.
    fn of(logical: &Logical, at: u64) -> io::Result<Option<Proof>> {
        if at == 0 || at > logical.len() {
            return Ok(None);
        }
        let Some(file) = logical.file_at(at - 1) else {
            return Ok(None);
        };
        let meta = file.metadata()?;
        let from = at.saturating_sub(TAIL);
        let mut tail = Vec::with_capacity((at - from) as usize);
        logical
            .reader_from(from)?
            .take(at - from)
            .read_to_end(&mut tail)?;
        if tail.len() as u64 != at - from {
            return Ok(None);
        }
        Ok(Some(Proof {
            at,
            dev: meta.dev(),
            ino: meta.ino(),
            tail: xxhash_rust::xxh3::xxh3_128(&tail),
        }))
    }
}

/// The checkpoint beside `transcript` (opened as `logical`), if there is
/// one it can prove was made from these bytes; `None` otherwise, with the
/// reason logged.
pub fn read(transcript: &Path, logical: &Logical) -> Option<Checkpoint> {
    let path = path_for(transcript)?;
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return None,
        Err(err) => {
            tracing::debug!(path = %path.display(), %err, "decisions checkpoint unreadable");
            return None;
        }
    };
    let why = match decode(file) {
        Some((proof, checkpoint)) => match Proof::of(logical, proof.at) {
            Ok(Some(now)) if now == proof => return Some(checkpoint),
            Ok(_) => "its transcript's bytes are not the ones it was made from",
            Err(_) => "its transcript could not be read",
        },
        None => "torn, of another version, unreadable, or not a checkpoint",
    };
    tracing::debug!(path = %path.display(), why, "decisions checkpoint not used: reading the transcript");
    None
}

/// `decided` (a checkpoint's) followed by the decisions of `tail`, the
/// image of the lines after it, whose `seen` and `replacements` are moved
/// out: the state reading the whole transcript gives, before clearings.
///
/// A whole reading commits every replacement before any result sent whole,
/// so the tail's replacements take effect before the checkpoint's results.
/// Decisions on different ids do not affect each other, so taking the
/// checkpoint's first gives the same state unless a replacement in the tail
/// is for an id the checkpoint decided (a reused id, a binding): then
/// `None`, and the transcript is to be read whole.
pub fn follow(mut decided: ReplacementState, tail: &mut SessionImage) -> Option<ReplacementState> {
    if tail
        .replacements
        .iter()
        .any(|(id, _, _)| decided.is_decided(id))
    {
        return None;
    }
    let replaced = std::mem::take(&mut tail.replacements);
    let seen = std::mem::take(&mut tail.seen);
    decided.commit_decisions(
        replaced
            .into_iter()
            .map(|(id, digest, r)| (id, digest, Some(r)))
            .chain(seen.into_iter().map(|(id, digest)| (id, digest, None))),
    );
    Some(decided)
}

/// Save `decided` and `image` (see [`Checkpoint`]), the reading of
/// `logical` (the transcript at `transcript`) up to `at`, as its
/// checkpoint. Nothing is written (`Ok(false)`) when
/// the image ends in an open call (a later line may still answer or cut
/// it) or the transcript is shorter than `at`. Returns the checkpoint's
/// size in bytes when written.
pub fn write(
    transcript: &Path,
    logical: &Logical,
    at: u64,
    format: Format,
    decided: &ReplacementState,
    image: &SessionImage,
) -> io::Result<Option<u64>> {
    if image.open_call_at().is_some() {
        return Ok(None);
    }
    let (Some(path), Some(proof)) = (path_for(transcript), Proof::of(logical, at)?) else {
        return Ok(None);
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = crate::private::temp_file_in(dir, TEMP_PREFIX)?;
    kill_point();
    // Streamed to the file rather than built whole in memory first: the
    // session's state is already held, and a copy of it in a buffer
    // (9 MB for 100,000 ids and 10,000 previews) would be on top of it.
    let size = encode(tmp.as_file_mut(), &proof, format, decided, image)?;
    kill_point();
    tmp.persist(&path).map_err(|err| err.error)?;
    kill_point();
    Ok(Some(size))
}

/// Take out the checkpoint beside `transcript`, if any (a transcript
/// rewritten under its name).
pub fn remove(transcript: &Path) {
    if let Some(path) = path_for(transcript) {
        let _ = std::fs::remove_file(path);
    }
}

/// Bring the checkpoint beside `transcript` up to the transcript's first
/// `len` bytes (its physical, committed length): the old checkpoint, if it
/// proves itself, and the lines after it are read, and the result saved.
/// Returns the new checkpoint's size, or `None` when none was written.
///
/// The state read here is dropped once written: its entries are made
/// outside the heap sessions keep theirs in ([`crate::heap::transient`]).
pub fn refresh(transcript: &Path, format: Format, len: u64) -> io::Result<Option<u64>> {
    crate::heap::transient(|| refresh_now(transcript, format, len))
}

fn refresh_now(transcript: &Path, format: Format, len: u64) -> io::Result<Option<u64>> {
    let file = File::open(transcript)?;
    let logical = Logical::open(&file, transcript, len)?;
    let from = |at: u64, mut image: SessionImage| -> io::Result<(u64, SessionImage)> {
        let (complete, _) = super::reader::read_lines(
            format,
            logical.reader_from(at)?,
            super::reader::ReadLimits::default(),
            || false,
            |span, head| image.add(span.after(at), head),
        )?;
        Ok((at + complete, image))
    };
    let followed = match read(transcript, &logical) {
        Some(c) if c.format == format => {
            let (end, mut image) = from(c.at, c.image)?;
            follow(c.decided, &mut image).map(|decided| (end, decided, image))
        }
        _ => None,
    };
    let (end, decided, image) = match followed {
        Some(done) => done,
        None => {
            let (end, mut image) = from(0, SessionImage::default())?;
            let decided = follow(ReplacementState::default(), &mut image).unwrap_or_default();
            (end, decided, image)
        }
    };
    write(transcript, &logical, end, format, &decided, &image)
}

/// Test hook (`TOOLWIRE_TEST_CHECKPOINT_KILL=<n>`): the process sends
/// itself SIGKILL at the n-th point (counted from 0, over the process's
/// life) of writing checkpoints (after the temporary file is made, half
/// written, written, renamed), so a test can kill it at each instant of a
/// write without timing anything.
fn kill_point() {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let at = AT.get_or_init(|| {
        std::env::var("TOOLWIRE_TEST_CHECKPOINT_KILL")
            .ok()
            .and_then(|n| n.parse().ok())
    });
    if let Some(at) = at
        && COUNT.fetch_add(1, Ordering::SeqCst) == *at
    {
        // SAFETY: raise(2) with a valid signal number has no preconditions.
        unsafe { libc::raise(libc::SIGKILL) };
    }
}

// ------------------------------------------------------------- encoding --
//
// Little-endian: MAGIC, body length (u64), XXH3-64 of the body (u64), then
// the body: packing id, shards per state, at, dev, ino, tail digest
// (u128), format name, messages, records, skipped; the state: how many
// shards are listed, then each as its index and its decisions, then the
// decisions on reused ids (each list a u64 count; a decision is its id,
// digest and replacement, the replacement a presence byte, then its sizes
// and packed text); then the lists (each a u64 count): clearings (id,
// digest, sizes, packed text), unanswered calls (id, tool name), legacy
// ids. Strings and byte strings are a u32 length and the bytes.

/// Write the checkpoint to `file` (new and empty): the header's length and
/// checksum are written last, over zeros, so a file cut short anywhere
/// has no magic or a checksum that fails. Returns its size.
fn encode(
    file: &mut File,
    proof: &Proof,
    format: Format,
    decided: &ReplacementState,
    image: &SessionImage,
) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut e = Enc {
        buf: Vec::with_capacity(Enc::CHUNK + 4096),
        file,
        hash: xxhash_rust::xxh3::Xxh3::new(),
        len: 0,
    };
    e.file.write_all(&[0; 24])?;
    e.u64(packing_id());
    e.u64(Restore::SHARDS as u64);
    e.u64(proof.at);
    e.u64(proof.dev);
    e.u64(proof.ino);
    e.buf.extend_from_slice(&proof.tail.to_le_bytes());
    e.str(format.name());
    e.u64(image.messages as u64);
    e.u64(image.records as u64);
    e.u64(image.skipped as u64);
    let shards: Vec<_> = decided.shards_saved().collect();
    e.u64(shards.len() as u64);
    for (ix, decisions) in shards {
        e.u64(ix as u64);
        e.decisions(decisions)?;
    }
    // Most of it is written, the header not yet: a kill here leaves a
    // file that is not a checkpoint.
    kill_point();
    e.decisions(decided.reused_saved())?;
    e.u64(image.cleared.len() as u64);
    for (id, digest, replacement) in &image.cleared {
        e.str(id);
        e.digest(*digest);
        e.replacement(replacement);
        e.spill()?;
    }
    e.u64(image.undecided_names.len() as u64);
    for (id, name) in &image.undecided_names {
        e.str(id);
        e.str(name);
        e.spill()?;
    }
    e.u64(image.legacy.len() as u64);
    for id in &image.legacy {
        e.str(id);
        e.spill()?;
    }
    e.flush()?;
    let mut head = [0u8; 24];
    head[..8].copy_from_slice(&MAGIC);
    head[8..16].copy_from_slice(&e.len.to_le_bytes());
    head[16..24].copy_from_slice(&e.hash.digest().to_le_bytes());
    e.file.write_all_at(&head, 0)?;
    Ok(24 + e.len)
}

/// Read the checkpoint in `file`, or `None` when it is torn, of another
/// version or packing, or fails its checksum.
///
/// It is read and decoded a chunk at a time, never whole: a whole copy
/// in memory (3.6 MB for 42,000 ids) cost a resume more to fault in and
/// unmap than to decode, and sat on top of the state being built. What
/// is decoded before the checksum is known is bounded by the file's
/// length like anything else read from it, and thrown away when the
/// checksum fails at the end.
fn decode(mut file: File) -> Option<(Proof, Checkpoint)> {
    let mut head = [0u8; 24];
    file.read_exact(&mut head).ok()?;
    if head[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(head[8..16].try_into().ok()?);
    let sum = u64::from_le_bytes(head[16..24].try_into().ok()?);
    // A file longer or shorter than its header says is not one whole
    // checkpoint.
    if file.metadata().ok()?.len() != 24u64.checked_add(len)? {
        return None;
    }
    let size = 24 + len;
    let mut d = Dec {
        file: file.take(len),
        buf: Vec::with_capacity(Dec::CHUNK),
        pos: 0,
        hash: xxhash_rust::xxh3::Xxh3::new(),
        left: len,
    };
    if d.u64()? != packing_id() || d.count()? != Restore::SHARDS {
        return None;
    }
    let proof = Proof {
        at: d.u64()?,
        dev: d.u64()?,
        ino: d.u64()?,
        tail: u128::from_le_bytes(d.take(16)?.try_into().ok()?),
    };
    let name = d.str()?;
    let format = Format::ALL.into_iter().find(|f| f.name() == name)?;
    let mut image = SessionImage::default();
    image.messages = d.count()?;
    image.records = d.count()?;
    image.skipped = d.count()?;
    // Counts are read before the checksum is known to hold; each entry
    // takes at least a few bytes, so what the body still holds bounds
    // what is reserved.
    let mut restore = Restore::new();
    for _ in 0..d.count()? {
        let ix = d.count()?;
        let n = d.count()?;
        let mut shard = restore.shard(ix, n.min(d.left() / 14))?;
        // A shard's ids and previews are allocated in the separate heap
        // under one taking of its lock (a thirty-second of the state at a
        // time, so other threads wait at most that long for the heap).
        crate::heap::held(|| {
            for _ in 0..n {
                let (id, digest, replacement) = d.decision()?;
                if !shard.insert(id, digest, replacement) {
                    return None;
                }
            }
            Some(())
        })?;
    }
    for _ in 0..d.count()? {
        let (id, digest, replacement) = d.decision()?;
        if !restore.reused(id, digest, replacement) {
            return None;
        }
    }
    let n = d.count()?;
    image.cleared.reserve(n.min(d.left() / 45));
    for _ in 0..n {
        let id = d.id()?;
        let digest = d.digest()?;
        let replacement = d.replacement()?;
        image.cleared.push((id, digest, replacement));
    }
    for _ in 0..d.count()? {
        let id = d.id()?;
        let name = image.intern(d.str()?);
        image.undecided_names.insert(id, name);
    }
    for _ in 0..d.count()? {
        image.legacy.insert(Arc::from(d.str()?));
    }
    // Every byte of the body taken, and all of it what was checksummed.
    (d.left == 0 && d.hash.digest() == sum).then_some((
        proof,
        Checkpoint {
            at: proof.at,
            format,
            decided: restore.finish(),
            image,
            size,
        },
    ))
}

/// The body being written: bytes gathered in `buf`, hashed and written
/// out a chunk at a time.
struct Enc<'a> {
    buf: Vec<u8>,
    file: &'a mut File,
    hash: xxhash_rust::xxh3::Xxh3,
    len: u64,
}

impl Enc<'_> {
    const CHUNK: usize = 256 << 10;

    /// Write out what was gathered.
    fn flush(&mut self) -> io::Result<()> {
        self.hash.update(&self.buf);
        self.file.write_all(&self.buf)?;
        self.len += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
    /// Write out what was gathered once it is a chunk.
    fn spill(&mut self) -> io::Result<()> {
        if self.buf.len() >= Self::CHUNK {
            self.flush()?;
        }
        Ok(())
    }
    fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        // Ids, names and previews are far below 4 GiB (a frame's limit).
        self.buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    fn digest(&mut self, digest: Digest) {
        let (tag, value) = digest.to_bits();
        self.buf.push(tag);
        self.u64(value);
    }
    fn replacement(&mut self, replacement: &Replacement) {
        let (sizes, packed) = replacement.to_packed();
        for size in sizes {
            self.u64(*size);
        }
        self.bytes(packed);
    }
    fn decisions<'a>(
        &mut self,
        decisions: impl ExactSizeIterator<Item = (&'a Id, Digest, Option<&'a Replacement>)>,
    ) -> io::Result<()> {
        self.u64(decisions.len() as u64);
        for (id, digest, replacement) in decisions {
            self.str(id);
            self.digest(digest);
            match replacement {
                Some(r) => {
                    self.buf.push(1);
                    self.replacement(r);
                }
                None => self.buf.push(0),
            }
            self.spill()?;
        }
        Ok(())
    }
}

/// The body being read: a chunk of the file at a time into `buf`, each
/// chunk hashed as it is read.
struct Dec {
    file: io::Take<File>,
    buf: Vec<u8>,
    /// Where in `buf` the bytes not yet taken start.
    pos: usize,
    hash: xxhash_rust::xxh3::Xxh3,
    /// Bytes of the body not yet taken (read into `buf` or not).
    left: u64,
}

impl Dec {
    const CHUNK: usize = 64 << 10;

    /// Bytes of the body not yet taken, as a bound on what counts read
    /// from it can still stand for.
    fn left(&self) -> usize {
        usize::try_from(self.left).unwrap_or(usize::MAX)
    }
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.buf.len() - self.pos < n {
            self.fill(n)?;
        }
        let v = self.buf.get(self.pos..self.pos + n)?;
        self.pos += n;
        self.left -= n as u64;
        Some(v)
    }
    /// Read on until at least `n` bytes are not yet taken; `None` when the
    /// body does not hold that many.
    fn fill(&mut self, n: usize) -> Option<()> {
        if n as u64 > self.left {
            return None;
        }
        let have = self.buf.len() - self.pos;
        self.buf.copy_within(self.pos.., 0);
        self.pos = 0;
        // A chunk, or more for one long string; never past the body.
        let want = n.max(Self::CHUNK).min(self.left());
        self.buf.resize(want, 0);
        let mut filled = have;
        while filled < n {
            match self.file.read(&mut self.buf[filled..]) {
                Ok(0) => return None,
                Ok(got) => {
                    self.hash.update(&self.buf[filled..filled + got]);
                    filled += got;
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        self.buf.truncate(filled);
        Some(())
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn count(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }
    fn bytes(&mut self) -> Option<&[u8]> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        self.take(n as usize)
    }
    fn str(&mut self) -> Option<&str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    fn id(&mut self) -> Option<Id> {
        self.str().map(keep_id)
    }
    fn digest(&mut self) -> Option<Digest> {
        let tag = self.take(1)?[0];
        Digest::from_bits(tag, self.u64()?)
    }
    fn replacement(&mut self) -> Option<Replacement> {
        let sizes = [self.u64()?, self.u64()?, self.u64()?];
        Replacement::from_packed(sizes, self.bytes()?)
    }
    fn decision(&mut self) -> Option<(Id, Digest, Option<Replacement>)> {
        let id = self.id()?;
        let digest = self.digest()?;
        let replacement = match self.take(1)?[0] {
            0 => None,
            1 => Some(self.replacement()?),
            _ => return None,
        };
        Some((id, digest, replacement))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::reader::{ReadLimits, read_lines};

    /// A transcript of `pairs` pairs with a record every third pair, a
    /// `seen` line every fifth and a call left unanswered at the end.
    fn transcript(pairs: usize, from: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut push = |line: serde_json::Value| {
            out.extend_from_slice(line.to_string().as_bytes());
            out.push(b'\n');
        };
        for i in from..from + pairs {
            let id = format!("toolu_{i}");
            push(
                serde_json::json!({"type": "message", "message": {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {}}]}}),
            );
            push(
                serde_json::json!({"type": "message", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "x".repeat(i % 300)}]}}),
            );
            if i % 3 == 0 {
                push(
                    serde_json::json!({"type": "replacement", "record": {"kind": "tool-result", "toolUseId": id, "replacement": format!("preview {i}"), "digest": "xxh3:00000000000000ff", "cleared": i % 9 == 0}}),
                );
            }
            if i % 5 == 0 {
                push(
                    serde_json::json!({"type": "seen", "toolUseIds": [format!("other_{i}")], "digests": ["0000000000000abc"]}),
                );
            }
        }
        push(
            serde_json::json!({"type": "message", "message": {"role": "assistant", "content": [{"type": "tool_use", "id": format!("open_{from}"), "name": "Read", "input": {}}]}}),
        );
        push(
            serde_json::json!({"type": "message", "message": {"role": "user", "content": "go on"}}),
        );
        out
    }

    /// The image of `logical` read from `at` on, after `image`.
    fn read_from(logical: &Logical, at: u64, mut image: SessionImage) -> SessionImage {
        read_lines(
            Format::Anthropic,
            logical.reader_from(at).unwrap(),
            ReadLimits::default(),
            || false,
            |span, head| image.add(span.after(at), head),
        )
        .unwrap();
        image.finish_lenient();
        image
    }

    /// What a reading decides (the state `decided` and the rest of
    /// `image`, as a resume takes them), in a comparable form.
    fn summary(decided: &ReplacementState, image: &SessionImage) -> String {
        let mut state = decided.clone();
        state.clear(image.cleared.iter().cloned());
        let mut decisions: Vec<_> = state
            .decisions()
            .map(|(id, digest, r)| format!("{id} {digest:?} {r:?}"))
            .collect();
        decisions.sort();
        let mut names: Vec<_> = image.undecided_names.iter().collect();
        names.sort();
        let mut legacy: Vec<_> = image.legacy.iter().collect();
        legacy.sort();
        format!(
            "{decisions:?} {} {} {:?} {names:?} {legacy:?} {} {} {}",
            state.seen_count(),
            state.replacement_count(),
            image.cleared,
            image.messages,
            image.records,
            image.skipped
        )
    }

    /// The whole reading of `logical`: its decided state and the rest.
    fn whole(logical: &Logical) -> (ReplacementState, SessionImage) {
        let mut image = read_from(logical, 0, SessionImage::default());
        let decided = follow(ReplacementState::default(), &mut image).unwrap();
        (decided, image)
    }

    fn open(path: &Path) -> Logical {
        Logical::open_path(path).unwrap().1
    }

    /// A checkpoint and the lines after it give exactly the image of the
    /// whole file; a transcript grown since is read from the checkpoint on.
    #[test]
    fn a_checkpoint_and_the_tail_read_as_the_whole_transcript() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, transcript(60, 0)).unwrap();
        let logical = open(&path);
        let (decided, image) = whole(&logical);
        let at = logical.len();
        assert!(
            write(&path, &logical, at, Format::Anthropic, &decided, &image)
                .unwrap()
                .is_some()
        );
        let append = |bytes: &[u8]| {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(bytes).unwrap();
        };
        append(&transcript(40, 60));
        let logical = open(&path);
        let c = read(&path, &logical).expect("the checkpoint proves itself");
        assert_eq!(c.at, at);
        assert_eq!(c.decided.seen_count(), decided.seen_count());
        let mut tail = read_from(&logical, c.at, c.image);
        let resumed = follow(c.decided, &mut tail).expect("the tail decides other ids");
        let (all, rest) = whole(&logical);
        assert_eq!(summary(&resumed, &tail), summary(&all, &rest));
        assert!(!rest.cleared.is_empty() && !rest.legacy.is_empty());
        assert!(rest.undecided_names.contains_key("open_0"));
        assert!(all.replacement_count() > 0 && all.seen_count() > 100);

        // A replacement in the tail for an id the checkpoint decided takes
        // effect before that id's result in a whole reading: the
        // checkpoint is not followed.
        append(
            format!(
                "{}\n",
                serde_json::json!({"type": "replacement", "record": {"kind": "tool-result", "toolUseId": "toolu_4", "replacement": "late", "digest": "xxh3:0000000000000001"}})
            )
            .as_bytes(),
        );
        let logical = open(&path);
        let c = read(&path, &logical).expect("the checkpoint proves itself");
        let mut tail = read_from(&logical, c.at, c.image);
        assert!(follow(c.decided, &mut tail).is_none());
        // Saved again from a whole reading, it is followed again.
        let (all, rest) = whole(&logical);
        write(
            &path,
            &logical,
            logical.len(),
            Format::Anthropic,
            &all,
            &rest,
        )
        .unwrap();
        let c = read(&path, &logical).expect("the new checkpoint proves itself");
        let mut tail = read_from(&logical, c.at, c.image);
        let resumed = follow(c.decided, &mut tail).unwrap();
        assert_eq!(summary(&resumed, &tail), summary(&all, &rest));
    }

    /// A torn, flipped, foreign or stale checkpoint, or a transcript
    /// shortened, rewritten or replaced under its name, is never taken.
    #[test]
    fn a_checkpoint_that_cannot_prove_itself_is_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let ckpt = path_for(&path).unwrap();
        assert_eq!(ckpt.file_name().unwrap(), ".s.jsonl.decisions");
        assert_eq!(owner(".s.jsonl.decisions"), Some("s"));
        assert_eq!(owner("s.jsonl"), None);
        let bytes = transcript(50, 0);
        std::fs::write(&path, &bytes).unwrap();
        let logical = open(&path);
        let (decided, image) = whole(&logical);
        let at = logical.len();
        write(&path, &logical, at, Format::Anthropic, &decided, &image).unwrap();
        let good = std::fs::read(&ckpt).unwrap();
        assert!(read(&path, &logical).is_some());

        // Torn at every length, and each byte flipped.
        for len in 0..good.len() {
            std::fs::write(&ckpt, &good[..len]).unwrap();
            assert!(read(&path, &logical).is_none(), "torn at {len}");
        }
        for i in (0..good.len()).step_by(7) {
            let mut bad = good.clone();
            bad[i] ^= 0x20;
            std::fs::write(&ckpt, &bad).unwrap();
            assert!(read(&path, &logical).is_none(), "byte {i} flipped");
        }
        std::fs::write(&ckpt, &good).unwrap();
        assert!(read(&path, &logical).is_some());

        // The transcript shortened (a power loss), then grown again with
        // other bytes.
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        assert!(read(&path, &open(&path)).is_none(), "shorter than `at`");
        let mut other = bytes.clone();
        let n = other.len();
        other[n - 20] = b' ';
        std::fs::write(&path, &other).unwrap();
        assert!(read(&path, &open(&path)).is_none(), "rewritten in place");
        // The same bytes in another file renamed over it (a repair).
        let new = dir.path().join("new");
        std::fs::write(&new, &bytes).unwrap();
        std::fs::rename(&new, &path).unwrap();
        assert!(read(&path, &open(&path)).is_none(), "another file");
        // A checkpoint beside another transcript is not this one's.
        let other_path = dir.path().join("t.jsonl");
        std::fs::write(&other_path, transcript(50, 1)).unwrap();
        std::fs::copy(&ckpt, path_for(&other_path).unwrap()).unwrap();
        assert!(read(&other_path, &open(&other_path)).is_none());
    }

    /// An image that ends in an open call is not saved; an empty one
    /// (nothing before `at`) neither.
    #[test]
    fn only_a_commit_boundary_is_saved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut bytes = transcript(3, 0);
        bytes.extend_from_slice(
            serde_json::json!({"type": "message", "message": {"role": "assistant", "content": [{"type": "tool_use", "id": "late", "name": "Bash", "input": {}}]}}).to_string().as_bytes(),
        );
        bytes.push(b'\n');
        std::fs::write(&path, &bytes).unwrap();
        let logical = open(&path);
        let mut image = SessionImage::default();
        read_lines(
            Format::Anthropic,
            logical.reader().unwrap(),
            ReadLimits::default(),
            || false,
            |span, head| image.add(span, head),
        )
        .unwrap();
        assert!(image.open_call_at().is_some());
        assert!(
            write(
                &path,
                &logical,
                logical.len(),
                Format::Anthropic,
                &ReplacementState::default(),
                &image
            )
            .unwrap()
            .is_none()
        );
        assert!(
            write(
                &path,
                &logical,
                0,
                Format::Anthropic,
                &ReplacementState::default(),
                &SessionImage::default()
            )
            .unwrap()
            .is_none()
        );
        assert!(!path_for(&path).unwrap().exists());
    }
}
