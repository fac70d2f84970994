//! Fork transcripts: a fork's transcript does not copy its parent's lines,
//! it starts with one line saying where they are.
//!
//! ```text
//! {"type":"fork","parent":"big","segments":[{"file":"fork-1a2b.jsonl.base-9f3c-0","from":0,"to":29318822,"tail":"5d41…"}]}
//! ```
//!
//! Each segment is a byte range of another transcript file, read in order
//! before the fork's own lines (everything after this first line): the
//! logical transcript is the segments' bytes, then the fork's own. `file`
//! names a **hard link** to that transcript's inode, made by the fork in the
//! same directory, so the bytes stay reachable whatever happens to the
//! parent's name afterwards:
//!
//! - the parent keeps appending to its inode, past `to`: never read;
//! - `transcript/repair` replaces the parent by renaming a new file over
//!   its name: the link keeps the old inode;
//! - gc removes the parent: the link keeps the inode.
//!
//! Nothing toolwire does rewrites a committed byte in place (a failed
//! commit and a torn tail are only ever cut after the committed length), so
//! a segment's bytes never change. Should someone else's tool rewrite one
//! in place, `tail` (the SHA-256 of the segment's last 4 KiB or fewer, hex)
//! no longer matches and reading the fork fails naming the file, instead of
//! reading someone else's bytes as the fork's.
//!
//! A fork of a fork links its parent's segments again (under its own
//! names) and adds the parent's own lines as one more segment, so a reader
//! never recurses and each fork owns every link it reads.

use std::fs::File;
use std::io::{self, BufRead, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// How much of a segment's end its `tail` digest covers.
const TAIL: u64 = 4096;

/// The longest first line taken for a fork line (a fork of a fork of …
/// lists one segment per generation).
const MAX_FORK_LINE: u64 = 16 << 20;

/// Infix of the hard links a fork makes beside its transcript:
/// `<id>.jsonl.base-<token>-<n>`.
pub const LINK_INFIX: &str = ".jsonl.base-";

/// The first line of a fork's transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkLine {
    /// The session this one was forked from.
    pub parent: String,
    /// Byte ranges of other transcripts, read in order before this file's
    /// own lines.
    pub segments: Vec<Segment>,
}

/// One byte range of another transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    /// A hard link, in the fork's directory, to the transcript the bytes
    /// are in.
    pub file: String,
    /// First byte (the start of a line).
    pub from: u64,
    /// End, exclusive (the end of a line).
    pub to: u64,
    /// SHA-256 of the range's last 4 KiB (or all of it when shorter), hex.
    pub tail: String,
}

#[derive(Serialize)]
struct Tagged<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    line: &'a ForkLine,
}

impl ForkLine {
    /// The line's bytes, with its newline.
    pub fn to_line(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(&Tagged {
            kind: "fork",
            line: self,
        })
        .unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// The fork line at the start of `first` (the first line of a file,
/// without its newline), if it is one.
fn parse(first: &[u8]) -> Option<ForkLine> {
    // Writers put `type` first: most files are told apart by one compare.
    if !first.starts_with(br#"{"type":"fork""#) {
        return None;
    }
    crate::json::from_slice(first).ok()
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("fork transcript {}: {what}", path.display()),
    )
}

/// The fork line of the open file `file` and its length with its newline;
/// `None` when the file is no fork.
pub fn header_of(file: &File, path: &Path) -> io::Result<Option<(ForkLine, u64)>> {
    let mut start = [0u8; 14];
    let n = read_full_at(file, &mut start, 0)?;
    if &start[..n] != br#"{"type":"fork""# {
        return Ok(None);
    }
    let mut line = Vec::new();
    let mut reader = io::BufReader::new(Reader::part(file, 0, MAX_FORK_LINE));
    reader.read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(invalid(path, "its fork line is torn or too long"));
    }
    let len = line.len() as u64;
    line.pop();
    match parse(&line) {
        Some(fork) => Ok(Some((fork, len))),
        None => Err(invalid(path, "its fork line does not parse")),
    }
}

fn read_full_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(done)
}

/// SHA-256 of the last [`TAIL`] bytes of `[from, to)` of `file`, hex.
fn tail_digest(file: &File, from: u64, to: u64) -> io::Result<Option<String>> {
    let start = to.saturating_sub(TAIL).max(from);
    let mut buf = vec![0u8; (to - start) as usize];
    if read_full_at(file, &mut buf, start)? < buf.len() {
        return Ok(None);
    }
    let digest = Sha256::digest(&buf);
    Ok(Some(digest.iter().map(|b| format!("{b:02x}")).collect()))
}

/// A transcript as its readers see it: a fork's inherited segments, then
/// its own lines; any other file as it is.
pub struct Logical {
    parts: Vec<(File, u64, u64)>,
    /// Bytes that come from segments (before the file's own lines).
    pub inherited: u64,
    /// Length of the file's fork line (0 when it is no fork).
    pub header: u64,
    /// The fork line, when the file is a fork.
    pub fork: Option<ForkLine>,
}

impl Logical {
    /// Open the transcript at `path` (already opened as `file`) for
    /// reading through its segments, checking each is still there and
    /// unchanged. `len` is how much of the file itself to read.
    pub fn open(file: &File, path: &Path, len: u64) -> io::Result<Logical> {
        let own = file.try_clone()?;
        let Some((fork, header)) = header_of(file, path)? else {
            return Ok(Logical {
                parts: vec![(own, 0, len)],
                inherited: 0,
                header: 0,
                fork: None,
            });
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut parts = Vec::with_capacity(fork.segments.len() + 1);
        let mut inherited = 0;
        for segment in &fork.segments {
            if segment.file.contains('/') || segment.from > segment.to {
                return Err(invalid(path, format!("bad segment {:?}", segment.file)));
            }
            let linked = dir.join(&segment.file);
            let seg = File::open(&linked).map_err(|err| {
                invalid(
                    path,
                    format!("its parent's bytes ({}) are gone: {err}", linked.display()),
                )
            })?;
            if tail_digest(&seg, segment.from, segment.to)?.as_deref() != Some(&segment.tail) {
                return Err(invalid(
                    path,
                    format!(
                        "its parent's bytes ({}) changed since the fork",
                        linked.display()
                    ),
                ));
            }
            inherited += segment.to - segment.from;
            parts.push((seg, segment.from, segment.to - segment.from));
        }
        parts.push((own, header, len.saturating_sub(header)));
        Ok(Logical {
            parts,
            inherited,
            header,
            fork: Some(fork),
        })
    }

    /// Open the file at `path` and read it whole as [`Logical::open`].
    pub fn open_path(path: &Path) -> io::Result<(File, Logical)> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let logical = Logical::open(&file, path, len)?;
        Ok((file, logical))
    }

    /// Total logical length.
    pub fn len(&self) -> u64 {
        self.parts.iter().map(|p| p.2).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where logical offset `at` of the file's own lines sits in the file.
    pub fn physical(&self, at: u64) -> u64 {
        at.saturating_sub(self.inherited) + self.header
    }

    /// A reader of the logical bytes.
    pub fn reader(&self) -> io::Result<Reader> {
        self.reader_from(0)
    }

    /// A reader of the logical bytes from offset `at` on.
    pub fn reader_from(&self, mut at: u64) -> io::Result<Reader> {
        let mut parts = Vec::with_capacity(self.parts.len());
        for (file, from, len) in &self.parts {
            let skip = at.min(*len);
            at -= skip;
            if skip < *len {
                parts.push((file.try_clone()?, from + skip, len - skip));
            }
        }
        Ok(Reader { parts, at: 0 })
    }

    /// Read logical bytes from offset `at` into `buf`, as far as the part
    /// that holds `at` goes: how many were read, 0 at the end (or where a
    /// file turned out shorter than its part). Takes no shared offset, so
    /// threads may read different parts of the transcript at once.
    pub fn read_at(&self, buf: &mut [u8], mut at: u64) -> io::Result<usize> {
        for (file, from, len) in &self.parts {
            if at < *len {
                let want = buf
                    .len()
                    .min(usize::try_from(len - at).unwrap_or(usize::MAX));
                return file.read_at(&mut buf[..want], from + at);
            }
            at -= len;
        }
        Ok(0)
    }

    /// The file that holds logical byte `at` (a segment's link, or the
    /// transcript itself), if the logical transcript is that long.
    pub fn file_at(&self, mut at: u64) -> Option<&File> {
        for (file, _, len) in &self.parts {
            if at < *len {
                return Some(file);
            }
            at -= len;
        }
        None
    }
}

/// Reads byte ranges of files in order, by position (no shared offsets).
pub struct Reader {
    parts: Vec<(File, u64, u64)>,
    at: usize,
}

impl Reader {
    fn part(file: &File, from: u64, len: u64) -> Reader {
        Reader {
            parts: file
                .try_clone()
                .map(|f| vec![(f, from, len)])
                .unwrap_or_default(),
            at: 0,
        }
    }
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while let Some((file, from, left)) = self.parts.get_mut(self.at) {
            if *left == 0 {
                self.at += 1;
                continue;
            }
            let want = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
            let n = file.read_at(&mut buf[..want], *from)?;
            if n == 0 {
                // The file is shorter than the range: end of this part.
                *left = 0;
                continue;
            }
            *from += n as u64;
            *left -= n as u64;
            return Ok(n);
        }
        Ok(0)
    }
}

/// Every logical byte of the transcript at `path`.
pub fn read_all(path: &Path) -> io::Result<Vec<u8>> {
    let (_, logical) = Logical::open_path(path)?;
    let mut out = Vec::with_capacity(logical.len() as usize);
    logical.reader()?.read_to_end(&mut out)?;
    Ok(out)
}

/// The first `n` logical bytes of the transcript at `path`.
pub fn read_head(path: &Path, n: u64) -> io::Result<Vec<u8>> {
    let (_, logical) = Logical::open_path(path)?;
    let mut out = Vec::new();
    logical.reader()?.take(n).read_to_end(&mut out)?;
    Ok(out)
}

/// The transcript a fork of `parent` (open, committed length `len`) starts
/// with: its fork line, and the hard links it names, made in `dir` next to
/// where the fork's transcript will be. The links are made here; the
/// caller writes the line and then names the transcript. On error every
/// link made is removed.
pub fn start_fork(
    parent_id: &str,
    parent: &File,
    parent_path: &Path,
    len: u64,
    fork_id: &str,
) -> io::Result<(ForkLine, Vec<PathBuf>)> {
    let dir = parent_path.parent().unwrap_or(Path::new("."));
    let token = format!("{:08x}", fastrand::u32(..));
    let mut made = Vec::new();
    let outcome = (|| {
        // The parent's own segments first (a fork of a fork), each linked
        // again under this fork's name, then the parent's own lines.
        let mut sources: Vec<(PathBuf, Segment)> = Vec::new();
        let own_from = match header_of(parent, parent_path)? {
            Some((line, header)) => {
                for segment in line.segments {
                    sources.push((dir.join(&segment.file), segment));
                }
                header
            }
            None => 0,
        };
        if len > own_from {
            let tail = tail_digest(parent, own_from, len)?
                .ok_or_else(|| invalid(parent_path, "is shorter than its committed length"))?;
            sources.push((
                parent_path.to_path_buf(),
                Segment {
                    file: String::new(),
                    from: own_from,
                    to: len,
                    tail,
                },
            ));
        }
        let mut segments = Vec::with_capacity(sources.len());
        for (n, (source, mut segment)) in sources.into_iter().enumerate() {
            let name = format!("{fork_id}{LINK_INFIX}{token}-{n}");
            let link = dir.join(&name);
            std::fs::hard_link(&source, &link)?;
            made.push(link);
            segment.file = name;
            segments.push(segment);
        }
        Ok(ForkLine {
            parent: parent_id.to_owned(),
            segments,
        })
    })();
    match outcome {
        Ok(line) => Ok((line, made)),
        Err(err) => {
            for link in &made {
                let _ = std::fs::remove_file(link);
            }
            Err(err)
        }
    }
}

/// Names of the links a transcript's fork line names (none when it is no
/// fork or cannot be read).
pub fn linked_names(path: &Path) -> Vec<String> {
    File::open(path)
        .ok()
        .and_then(|f| header_of(&f, path).ok().flatten())
        .map(|(line, _)| line.segments.into_iter().map(|s| s.file).collect())
        .unwrap_or_default()
}

/// The session id a fork link belongs to, from its file name.
pub fn link_owner(name: &str) -> Option<&str> {
    name.split_once(LINK_INFIX).map(|(id, _)| id)
}
