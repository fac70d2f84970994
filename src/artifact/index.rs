//! The line index of a saved output: what one pass over it learns (lines,
//! sizes in every unit, where each stretch of lines starts), so a page is
//! read without scanning from the start. Kept per file identity in memory,
//! and stored beside an output on object storage.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, LazyLock, Mutex};

use serde::{Deserialize, Serialize};

use crate::budget::names::ArtifactKind;
use crate::format::SizeUnit;

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
    {
        let mut cache = INDEXES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = cache.iter().position(|(id, _)| *id == identity) {
            let entry = cache.remove(at);
            let index = entry.1.clone();
            cache.push(entry);
            return Ok(index);
        }
    }
    let index = Arc::new(LineIndex::build(source, stop)?);
    source.seek(SeekFrom::Start(0))?;
    let mut cache = INDEXES.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= INDEX_CACHE_ENTRIES {
        cache.remove(0);
    }
    cache.push((identity, index.clone()));
    Ok(index)
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

    proptest::proptest! {
        #[test]
        fn counts_characters_as_std_does(text in ".{0,64}") {
            let (chars, astral) = count_chars(text.as_bytes());
            proptest::prop_assert_eq!(chars, text.chars().count() as u64);
            proptest::prop_assert_eq!(chars + astral, text.encode_utf16().count() as u64);
        }
    }
}
