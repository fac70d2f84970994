//! The line index of a saved output: what one pass over it learns (lines,
//! sizes in every unit, where each stretch of lines starts), so a page is
//! read without scanning from the start. Kept per file identity in memory,
//! stored beside an output on object storage, and kept on disk beside a
//! large local one (see "the index on disk" below).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use serde::{Deserialize, Serialize};

use crate::budget::names::ArtifactKind;
use crate::format::SizeUnit;

/// Suffix of an artifact's line index kept beside it (`<name>.idx`), on
/// object storage and on disk.
pub const INDEX_SUFFIX: &str = ".idx";
/// Line-index granularity: a range read starts at most this far before
/// its first line.
pub const CHECKPOINT_BYTES: u64 = 64 << 10;
/// Line indexes kept in memory (a few hundred KB each for a 1 GB artifact).
const INDEX_CACHE_ENTRIES: usize = 64;

/// What one pass over an artifact learns (also stored beside an artifact
/// on object storage, see [`super::objects`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineIndex {
    pub total_lines: u64,
    pub len: u64,
    chars: u64,
    utf16: u64,
    /// `(line, byte offset of its start)`, ascending, starting at `(0, 0)`.
    pub(crate) checkpoints: Vec<(u64, u64)>,
}

impl LineIndex {
    pub fn total(&self, unit: SizeUnit) -> u64 {
        match unit {
            SizeUnit::Chars => self.chars,
            SizeUnit::Utf16 => self.utf16,
            SizeUnit::Bytes => self.len,
        }
    }

    /// Whether the index could describe a file of `len` bytes: checkpoints
    /// from `(0, 0)`, ascending, within the file. (An index read from disk
    /// must never send a read outside the artifact.)
    fn is_plausible(&self) -> bool {
        self.checkpoints.first() == Some(&(0, 0))
            && self
                .checkpoints
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
            && self
                .checkpoints
                .last()
                .is_some_and(|&(line, byte)| line <= self.total_lines && byte <= self.len)
            && self.total_lines <= self.len
            && self.chars <= self.len
            && self.utf16 >= self.chars
            && self.utf16 <= 2 * self.chars
    }

    /// The last checkpoint at or before `line`.
    pub fn checkpoint_for(&self, line: u64) -> (u64, u64) {
        let after = self.checkpoints.partition_point(|&(l, _)| l <= line);
        self.checkpoints
            .get(after.saturating_sub(1))
            .copied()
            .unwrap_or((0, 0))
    }

    /// One streaming pass over `source`.
    pub fn build(source: &mut impl Read, stop: &dyn Fn() -> bool) -> io::Result<LineIndex> {
        let mut index = LineIndex {
            total_lines: 0,
            len: 0,
            chars: 0,
            utf16: 0,
            checkpoints: vec![(0, 0)],
        };
        let mut newlines = 0u64;
        let mut last_byte = b'\n';
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if stop() {
                return Err(io::Error::new(io::ErrorKind::Interrupted, "cancelled"));
            }
            let chunk = &buf[..n];
            for pos in memchr::memchr_iter(b'\n', chunk) {
                newlines += 1;
                let next_start = index.len + pos as u64 + 1;
                let last = index.checkpoints.last().map_or(0, |&(_, b)| b);
                if next_start - last >= CHECKPOINT_BYTES {
                    index.checkpoints.push((newlines, next_start));
                }
            }
            let (starts, astral) = count_chars(chunk);
            index.chars += starts;
            index.utf16 += starts + astral;
            index.len += n as u64;
            last_byte = chunk[n - 1];
        }
        index.total_lines = newlines + u64::from(last_byte != b'\n');
        Ok(index)
    }
}

/// Characters in `bytes` (UTF-8) and how many of them take four bytes (two
/// UTF-16 units): a character is a byte that does not continue another
/// (`10xxxxxx`), a four-byte one starts with `11110xxx`. Eight bytes at a
/// time, so a gigabyte is counted in well under a second.
fn count_chars(bytes: &[u8]) -> (u64, u64) {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut continuing = 0u64;
    let mut astral = 0u64;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let w = u64::from_le_bytes(w);
        // Bit 7 of each byte: set where bit 7 is 1 and bit 6 is 0.
        continuing += u64::from((w & !(w << 1) & HIGH).count_ones());
        astral += u64::from((w & (w << 1) & (w << 2) & (w << 3) & HIGH).count_ones());
    }
    for &b in words.remainder() {
        continuing += u64::from(b & 0xC0 == 0x80);
        astral += u64::from(b >= 0xF0);
    }
    (bytes.len() as u64 - continuing, astral)
}

/// A file's identity: an index built for it stays true while it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    File {
        dev: u64,
        ino: u64,
        len: u64,
        mtime_ns: i128,
        kind: ArtifactKind,
    },
    /// An object without a stored index: its URL, size and version (an
    /// object is written once, but gc may remove it and a new one come).
    Object {
        url: String,
        len: u64,
        version: Option<String>,
    },
}

impl Identity {
    pub fn of(file: &File, kind: ArtifactKind) -> io::Result<Identity> {
        let meta = file.metadata()?;
        Ok(Identity::File {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            kind,
        })
    }
}

/// Indexes by the identity of their file, most recently used last.
type IndexCache = Vec<(Identity, Arc<LineIndex>)>;
static INDEXES: LazyLock<Mutex<IndexCache>> = LazyLock::new(|| Mutex::new(Vec::new()));

pub fn cached_index(
    identity: Identity,
    source: &mut (impl Read + Seek),
    stop: &dyn Fn() -> bool,
) -> io::Result<Arc<LineIndex>> {
    if let Some(index) = from_cache(&identity) {
        return Ok(index);
    }
    let index = Arc::new(LineIndex::build(source, stop)?);
    source.seek(SeekFrom::Start(0))?;
    to_cache(identity, index.clone());
    Ok(index)
}

fn from_cache(identity: &Identity) -> Option<Arc<LineIndex>> {
    let mut cache = INDEXES.lock().unwrap_or_else(|p| p.into_inner());
    let at = cache.iter().position(|(id, _)| id == identity)?;
    let entry = cache.remove(at);
    let index = entry.1.clone();
    cache.push(entry);
    Some(index)
}

fn to_cache(identity: Identity, index: Arc<LineIndex>) {
    let mut cache = INDEXES.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= INDEX_CACHE_ENTRIES {
        cache.remove(0);
    }
    cache.push((identity, index));
}

// ---------------------------------------------------- the index on disk --
//
// A process that reads one page (`toolwire show`, an editor's command, a
// fresh server) would otherwise pay a pass over the whole artifact for it:
// half a second for a gigabyte. So the index of a large text artifact is
// kept beside it, `<name>.idx` as on object storage, written the first
// time a process builds it and read by every later one.
//
// - Written atomically: a temporary file (`TEMP_PREFIX`, which gc sweeps
//   when a crash leaves one) renamed into place; nothing reads a partial
//   one. It is a cache, never synced: a crash that leaves it with other
//   bytes than written fails its digest and it is rebuilt.
// - Checked before use against the artifact's size and modification time
//   and its own SHA-256; stale, corrupt, foreign or too large means
//   ignored, rebuilt and replaced, never a wrong page.
// - Where it cannot be written (a read-only directory, a full disk) the
//   read goes on without it.

/// Smallest artifact whose index is kept on disk: below it, one pass over
/// the artifact costs about what reading an index would.
pub const DISK_INDEX_MIN_BYTES: u64 = 1 << 20;

/// A line index as kept on disk beside its artifact.
#[derive(Serialize, Deserialize)]
struct DiskIndex {
    /// The artifact's modification time when it was indexed: seconds and
    /// nanoseconds since the epoch.
    mtime: (i64, i64),
    /// SHA-256 (hex) of `[mtime, index]` serialized as JSON.
    sha256: String,
    /// The index, as object storage keeps it (`<name>.idx` there).
    index: LineIndex,
}

impl DiskIndex {
    fn digest(mtime: (i64, i64), index: &LineIndex) -> io::Result<String> {
        use sha2::{Digest, Sha256};
        let bytes = serde_json::to_vec(&(mtime, index)).map_err(io::Error::other)?;
        Ok(Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    }
}

/// Where the index of the artifact at `path` is kept.
pub fn index_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(INDEX_SUFFIX);
    PathBuf::from(name)
}

/// The index of a local text artifact: from the process's cache, else from
/// disk, else built by one pass (and then kept on disk for large ones).
pub fn file_index(
    identity: Identity,
    path: &Path,
    source: &mut File,
    stop: &dyn Fn() -> bool,
) -> io::Result<Arc<LineIndex>> {
    if let Some(index) = from_cache(&identity) {
        return Ok(index);
    }
    let Identity::File { len, mtime_ns, .. } = identity else {
        return cached_index(identity, source, stop);
    };
    if len < DISK_INDEX_MIN_BYTES {
        return cached_index(identity, source, stop);
    }
    let mtime = seconds_nanos(mtime_ns);
    let at = index_path(path);
    let index = match load_index(&at, len, mtime) {
        Some(index) => index,
        None => {
            let index = LineIndex::build(source, stop)?;
            source.seek(SeekFrom::Start(0))?;
            // Only what was indexed as the file it was judged to be.
            if index.len == len {
                // Best effort: without it the next process indexes again.
                let _ = store_index(&at, mtime, &index);
            }
            index
        }
    };
    let index = Arc::new(index);
    to_cache(identity, index.clone());
    Ok(index)
}

/// A modification time in nanoseconds as (seconds, nanoseconds).
fn seconds_nanos(mtime_ns: i128) -> (i64, i64) {
    (
        i64::try_from(mtime_ns.div_euclid(1_000_000_000)).unwrap_or(i64::MAX),
        i64::try_from(mtime_ns.rem_euclid(1_000_000_000)).unwrap_or(0),
    )
}

/// The index kept at `at`, if it is whole and was made for an artifact of
/// `len` bytes last modified at `mtime`.
fn load_index(at: &Path, len: u64, mtime: (i64, i64)) -> Option<LineIndex> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(at)
        .ok()?;
    let meta = file.metadata().ok()?;
    // A checkpoint every 64 KiB takes at most ~45 bytes of JSON: anything
    // much larger is not an index of this artifact (and is not read).
    let most = len / 512 + (64 << 10);
    if !meta.is_file() || meta.len() > most {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    file.take(most).read_to_end(&mut bytes).ok()?;
    let disk: DiskIndex = serde_json::from_slice(&bytes).ok()?;
    let fits = disk.mtime == mtime && disk.index.len == len && disk.index.is_plausible();
    (fits && DiskIndex::digest(disk.mtime, &disk.index).ok()? == disk.sha256).then_some(disk.index)
}

/// Keep `index` at `at`: written to a temporary file beside it, then
/// renamed over whatever stood there (a stale index, never followed if a
/// link).
fn store_index(at: &Path, mtime: (i64, i64), index: &LineIndex) -> io::Result<()> {
    let dir = at
        .parent()
        .ok_or_else(|| io::Error::other("an index path has a directory"))?;
    let disk = DiskIndex {
        mtime,
        sha256: DiskIndex::digest(mtime, index)?,
        index: index.clone(),
    };
    let mut tmp = crate::private::temp_file_in(dir, super::TEMP_PREFIX)?;
    let mut out = io::BufWriter::new(tmp.as_file_mut());
    serde_json::to_writer(&mut out, &disk).map_err(io::Error::other)?;
    // Flushed here, not on drop, where a failed write would go unseen.
    out.flush()?;
    drop(out);
    tmp.persist(at).map_err(|err| err.error)?;
    Ok(())
}

// ------------------------------------------------------------- reading --

#[cfg(test)]
mod tests {
    use super::*;

    fn index(text: &str) -> LineIndex {
        LineIndex::build(&mut text.as_bytes(), &|| false).unwrap()
    }

    #[test]
    fn counts_lines_like_an_editor() {
        assert_eq!(index("").total_lines, 0);
        assert_eq!(index("a").total_lines, 1);
        assert_eq!(index("a\n").total_lines, 1);
        assert_eq!(index("a\nb").total_lines, 2);
        assert_eq!(index("\n\n").total_lines, 2);
        let i = index("h\u{e9}\u{1F600}\r\n");
        assert_eq!(
            (
                i.total(SizeUnit::Chars),
                i.total(SizeUnit::Utf16),
                i.total(SizeUnit::Bytes)
            ),
            (5, 6, 9)
        );
    }

    /// A kept index stands for the pass over the artifact: given an empty
    /// source, the index comes back whole from disk; once the artifact's
    /// modification time moves, the kept one is ignored.
    #[test]
    fn a_kept_index_is_used_instead_of_a_pass_and_only_while_it_matches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let text: String = (0..100_000)
            .map(|i| format!("line {i} of a.txt\n"))
            .collect();
        std::fs::write(&path, &text).unwrap();
        let file = File::open(&path).unwrap();
        let built = index(&text);
        assert!(built.len >= DISK_INDEX_MIN_BYTES && built.checkpoints.len() > 10);
        let Identity::File { mtime_ns, .. } = Identity::of(&file, ArtifactKind::Text).unwrap()
        else {
            panic!("a file's identity")
        };
        store_index(&index_path(&path), seconds_nanos(mtime_ns), &built).unwrap();
        let mut empty = tempfile::tempfile().unwrap();
        let identity = Identity::of(&file, ArtifactKind::Text).unwrap();
        let got = file_index(identity, &path, &mut empty, &|| false).unwrap();
        assert_eq!(*got, built);

        // Another modification time: the kept index is not this file's.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let identity = Identity::of(&file, ArtifactKind::Text).unwrap();
        let Identity::File { mtime_ns, .. } = identity else {
            panic!("a file's identity")
        };
        assert!(load_index(&index_path(&path), built.len, seconds_nanos(mtime_ns)).is_none());
        let got = file_index(identity, &path, &mut File::open(&path).unwrap(), &|| false).unwrap();
        assert_eq!(*got, built);
        // Rebuilt, and kept again for the new time.
        assert_eq!(
            load_index(&index_path(&path), built.len, seconds_nanos(mtime_ns)),
            Some(built)
        );
    }

    proptest::proptest! {
        #[test]
        fn counts_characters_as_std_does(text in ".{0,64}") {
            let (chars, astral) = count_chars(text.as_bytes());
            proptest::prop_assert_eq!(chars, text.chars().count() as u64);
            proptest::prop_assert_eq!(chars + astral, text.encode_utf16().count() as u64);
        }
    }
}
