//! Reading a saved output back in pages (`artifact/read`, `toolwire show`).
//!
//! A model that met a `<persisted-output>` preview reads the rest of the
//! original here, a page or a search at a time, instead of paying for the
//! whole of it again. Artifacts can be large (a build log of a gigabyte), so
//! nothing here holds a whole file:
//!
//! - A **line index** per artifact (total lines, total size in every unit,
//!   and the byte offset of one line start every [`CHECKPOINT_BYTES`](super::index::CHECKPOINT_BYTES)) is
//!   built by one streaming pass the first time an artifact is read and kept
//!   in a small process-wide cache. Artifacts are written once and never
//!   change, so an index stays true for as long as the file is the same
//!   file (same device, inode, length and modification time). The index
//!   of a large text artifact is also kept on disk beside it, so the next
//!   process reads it instead of the artifact (see [`super::index`]).
//! - A **range** seeks to the checkpoint before its first line and reads
//!   forward: its cost is the range plus at most one checkpoint interval,
//!   whatever the artifact's size.
//! - A **grep** streams the file from the requested line, holding only the
//!   `context` lines before the current one.
//!
//! Only the named session's own artifacts are read: the file name comes
//! from the toolUseId through [`file_name`], which never names anything
//! outside the session's `tool-results` directory, and neither links nor
//! non-regular files are followed.
//!
//! # What `text` holds
//!
//! - **A range** (`offset`, `limit`): the lines `startLine..endLine`
//!   (0-based, end exclusive) exactly as stored, each with its own line end
//!   (`\n` or `\r\n`; the artifact's last line may have none). Concatenating
//!   the `text` of consecutive pages (each starting at the previous
//!   `endLine`) gives back the artifact byte for byte. A page stops early
//!   when the next line would take it past [`MAX_PAGE_BYTES`]; a single line
//!   longer than that is cut there (never inside a character) and the page
//!   is `truncated`.
//! - **A grep**: in the manner of `grep -n -C context`, one line of `text`
//!   per line shown, each ending in `\n`:
//!   `<n>:<line>` for a matching line, `<n>-<line>` for a context line, and
//!   a line `--` between two groups that are not adjacent (only when
//!   `context` > 0). `<n>` is the
//!   **1-based** line number (the line at `offset` = n - 1), `<line>` the
//!   line without its line end. The pattern is matched against each line
//!   without its line end; lines longer than [`MAX_GREP_LINE_BYTES`] are
//!   matched and shown on their first part only. At most `limit` matching
//!   lines are shown, with the trailing context of the last; `startLine` and
//!   `endLine` are the first line shown and one past the last (0-based), so
//!   the next page of matches starts at `offset = endLine`. `truncated` says
//!   that more matches follow (or that a line was shown cut).
//!
//! `totalLines` counts lines as an editor does (a last line without a line
//! end counts; an empty artifact has none); `totalChars` is the artifact's
//! size in the configured `sizeUnit`.
//!
//! A block-array artifact (`.json`) is read as its text blocks joined by
//! newlines, the text its preview was cut from; that needs the array parsed
//! whole, so only plain-text artifacts get the bounded-memory reads.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Cursor, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::index::{Identity, LineIndex, cached_index, file_index};
use super::objects::ObjectArtifacts;
use super::objects::ObjectsConfig;
use super::{ArtifactKind, file_name, session_dir};
use crate::error::{Error, Result};
use crate::format::SizeUnit;
use crate::transcript::SessionId;

/// Lines returned when the request names no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Most bytes of artifact text one reply carries.
pub const MAX_PAGE_BYTES: usize = 1 << 20;
/// Longest part of one line a grep matches and shows.
pub const MAX_GREP_LINE_BYTES: usize = 64 << 10;
/// Longest `grep` pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Most context lines around a grep match.
pub const MAX_CONTEXT: u64 = 100;
/// Compiled-regex memory bound: a hostile pattern is refused, never slow.
const REGEX_SIZE_LIMIT: usize = 4 << 20;
/// How often (in lines) long work checks whether it should stop.
const STOP_CHECK_LINES: u64 = 4096;

/// What to read of an artifact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadRequest {
    /// First line (0-based); with `grep`, where the search starts.
    pub offset: u64,
    /// Lines to return; with `grep`, matching lines to show.
    pub limit: Option<u64>,
    /// A regular expression (Rust `regex` syntax, linear time).
    pub grep: Option<String>,
    /// Lines shown before and after each match.
    pub context: u64,
}

/// A page of an artifact (`artifact/read`'s result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadResult {
    /// The lines read: verbatim for a range, numbered `grep -n` style for a
    /// grep (see the module documentation of `artifact::read`).
    pub text: String,
    /// First line shown (0-based).
    pub start_line: u64,
    /// One past the last line shown (0-based): the next page's `offset`.
    pub end_line: u64,
    pub total_lines: u64,
    /// The artifact's size in the configured `sizeUnit`.
    pub total_chars: u64,
    /// More follows what `text` shows (lines after `endLine`, more matches,
    /// or a line shown cut).
    pub truncated: bool,
}

/// Read a page of a session's artifact. The core of `artifact/read`, shared
/// by every face (JSON-RPC, MCP, the command line). `objects`: the
/// workspace's object storage, when saved outputs go there.
pub fn read_artifact(
    data_dir: &Path,
    objects: Option<&ObjectsConfig>,
    session_id: &SessionId,
    tool_use_id: &str,
    request: &ReadRequest,
    unit: SizeUnit,
) -> Result<ReadResult> {
    read_artifact_until(
        data_dir,
        objects,
        session_id,
        tool_use_id,
        None,
        request,
        unit,
        &|| false,
    )
}

/// [`read_artifact`], giving up with [`Error::Cancelled`] once `stop` says
/// so. `inherited`: where the session's journal says the output may be
/// saved, the likeliest first (`crate::store::shared_target`); `None`
/// reads that from its transcript file.
#[allow(clippy::too_many_arguments)]
pub fn read_artifact_until(
    data_dir: &Path,
    objects: Option<&ObjectsConfig>,
    session_id: &SessionId,
    tool_use_id: &str,
    inherited: Option<Vec<(String, String)>>,
    request: &ReadRequest,
    unit: SizeUnit,
    stop: &dyn Fn() -> bool,
) -> Result<ReadResult> {
    let grep = match &request.grep {
        Some(pattern) => Some(compile(pattern)?),
        None => None,
    };
    if request.context > MAX_CONTEXT {
        return Err(Error::invalid_params(
            "context",
            format!("at most {MAX_CONTEXT} lines of context"),
        ));
    }
    if let Some(objects) = objects {
        let store = ObjectArtifacts::open(objects)?;
        return read_object(
            &store,
            data_dir,
            session_id,
            tool_use_id,
            inherited,
            grep.as_ref(),
            request,
            unit,
            stop,
        );
    }
    let found = open_inherited(data_dir, session_id, tool_use_id, inherited)?;
    let storage = |err: io::Error| {
        if stop() {
            Error::Cancelled
        } else {
            Error::storage(&found.path, &err)
        }
    };
    let identity = Identity::of(&found.file, found.kind).map_err(storage)?;
    match found.kind {
        ArtifactKind::Text => {
            let mut source = found.file;
            let index = file_index(identity, &found.path, &mut source, stop).map_err(storage)?;
            page(source, &index, grep.as_ref(), request, unit, stop).map_err(storage)
        }
        ArtifactKind::Json => {
            let text = json_text(found.file).map_err(storage)?;
            let mut source = Cursor::new(text.into_bytes());
            let index = cached_index(identity, &mut source, stop).map_err(storage)?;
            page(source, &index, grep.as_ref(), request, unit, stop).map_err(storage)
        }
    }
    .and_then(|r| r)
}

/// The saved output exactly as stored, and its kind (the MCP link's
/// `resources/read`); `inherited` as for [`read_artifact_until`].
pub fn read_whole(
    data_dir: &Path,
    objects: Option<&ObjectsConfig>,
    session_id: &SessionId,
    tool_use_id: &str,
    inherited: Option<Vec<(String, String)>>,
) -> Result<(Vec<u8>, ArtifactKind)> {
    if let Some(objects) = objects {
        let store = ObjectArtifacts::open(objects)?;
        let found = find_object(&store, data_dir, session_id, tool_use_id, inherited)?;
        let storage = |err: io::Error| Error::storage(Path::new(&found.url), &err);
        let bytes = store
            .get(&found.key)
            .map_err(storage)?
            .ok_or_else(|| not_found(session_id, tool_use_id))?;
        return Ok((bytes.to_vec(), found.kind));
    }
    let mut found = open_inherited(data_dir, session_id, tool_use_id, inherited)?;
    let mut bytes = Vec::new();
    found
        .file
        .read_to_end(&mut bytes)
        .map_err(|err| Error::storage(&found.path, &err))?;
    Ok((bytes, found.kind))
}

fn not_found(session_id: &SessionId, tool_use_id: &str) -> Error {
    Error::ArtifactNotFound {
        session_id: session_id.to_string(),
        tool_use_id: tool_use_id.to_owned(),
    }
}

/// An artifact found on object storage.
struct FoundObject {
    key: object_store::path::Path,
    url: String,
    kind: ArtifactKind,
    len: u64,
    version: Option<String>,
}

/// The object of a session's artifact for `tool_use_id`, found as on disk:
/// the session's own `.txt` or `.json`, else (a fork) where the session's
/// journal says it was saved.
fn find_object(
    store: &ObjectArtifacts,
    data_dir: &Path,
    session_id: &SessionId,
    tool_use_id: &str,
    inherited: Option<Vec<(String, String)>>,
) -> Result<FoundObject> {
    let mut candidates: Vec<(String, String, ArtifactKind)> =
        [ArtifactKind::Text, ArtifactKind::Json]
            .into_iter()
            .map(|kind| (session_id.to_string(), file_name(tool_use_id, kind), kind))
            .collect();
    candidates.extend(inherited_artifact(
        data_dir,
        session_id,
        tool_use_id,
        inherited,
    ));
    for (session, name, kind) in candidates {
        let key = store.key(&session, &name);
        let url = store.url_of(&key);
        let head = store
            .head(&key)
            .map_err(|err| Error::storage(Path::new(&url), &err))?;
        if let Some(meta) = head {
            return Ok(FoundObject {
                key,
                url,
                kind,
                len: meta.size,
                version: meta.e_tag.or(meta.version),
            });
        }
    }
    Err(not_found(session_id, tool_use_id))
}

/// [`read_artifact_until`] on object storage: the stored line index, then
/// ranged reads of what the page needs.
#[allow(clippy::too_many_arguments)]
fn read_object(
    store: &ObjectArtifacts,
    data_dir: &Path,
    session_id: &SessionId,
    tool_use_id: &str,
    inherited: Option<Vec<(String, String)>>,
    grep: Option<&regex::bytes::Regex>,
    request: &ReadRequest,
    unit: SizeUnit,
    stop: &dyn Fn() -> bool,
) -> Result<ReadResult> {
    let found = find_object(store, data_dir, session_id, tool_use_id, inherited)?;
    let storage = |err: io::Error| {
        if stop() {
            Error::Cancelled
        } else {
            Error::storage(Path::new(&found.url), &err)
        }
    };
    match found.kind {
        ArtifactKind::Text => {
            let stored = store
                .index(&found.key)
                .map_err(storage)?
                .filter(|index| index.len == found.len);
            let index = match stored {
                Some(index) => Arc::new(index),
                None => {
                    let identity = Identity::Object {
                        url: found.url.clone(),
                        len: found.len,
                        version: found.version.clone(),
                    };
                    let mut source = store.reader(&found.key, found.len);
                    cached_index(identity, &mut source, stop).map_err(storage)?
                }
            };
            let source = store.reader(&found.key, found.len);
            page(source, &index, grep, request, unit, stop).map_err(storage)?
        }
        ArtifactKind::Json => {
            let bytes = store
                .get(&found.key)
                .map_err(storage)?
                .ok_or_else(|| not_found(session_id, tool_use_id))?;
            let text = json_text(&bytes[..]).map_err(storage)?;
            let mut source = Cursor::new(text.into_bytes());
            let index = LineIndex::build(&mut source, stop).map_err(storage)?;
            source.set_position(0);
            page(source, &index, grep, request, unit, stop).map_err(storage)?
        }
    }
}

/// An artifact found and opened.
pub struct Found {
    pub file: File,
    pub kind: ArtifactKind,
    pub path: PathBuf,
}

/// Open a session's artifact for `tool_use_id` (`.txt` or `.json`), or
/// `artifactNotFound`. Refuses links and anything but a regular file.
pub fn open(data_dir: &Path, session_id: &SessionId, tool_use_id: &str) -> Result<Found> {
    open_inherited(data_dir, session_id, tool_use_id, None)
}

/// Where the session's journal says `tool_use_id`'s output may be saved
/// when that is another session's (a fork's inherited output), as
/// (session, file name, kind), the likeliest first: the targets the caller
/// read from the shared store, else the ones in the session's transcript
/// file's replacement lines.
fn inherited_artifact(
    data_dir: &Path,
    session_id: &SessionId,
    tool_use_id: &str,
    inherited: Option<Vec<(String, String)>>,
) -> Vec<(String, String, ArtifactKind)> {
    let targets = match inherited {
        Some(targets) => targets,
        None => {
            let transcript = data_dir
                .join("sessions")
                .join(format!("{}.jsonl", session_id.as_str()));
            crate::transcript::targets::replacement_target(&transcript, tool_use_id)
                .unwrap_or_default()
        }
    };
    targets
        .into_iter()
        .filter(|(other, name)| {
            other != session_id.as_str()
                && SessionId::try_from(other.clone()).is_ok()
                && crate::artifact::is_artifact_name(name)
        })
        .map(|(other, name)| {
            let kind = if name.ends_with(".json") {
                ArtifactKind::Json
            } else {
                ArtifactKind::Text
            };
            (other, name, kind)
        })
        .collect()
}

/// [`open`], with `inherited` as for [`read_artifact_until`].
fn open_inherited(
    data_dir: &Path,
    session_id: &SessionId,
    tool_use_id: &str,
    inherited: Option<Vec<(String, String)>>,
) -> Result<Found> {
    let dir = session_dir(data_dir, session_id.as_str());
    let mut own = true;
    for d in [dir.parent(), Some(dir.as_path())].into_iter().flatten() {
        match std::fs::symlink_metadata(d) {
            Ok(meta) if meta.file_type().is_dir() => {}
            Ok(_) => {
                return Err(Error::storage(
                    d,
                    &io::Error::other("not a directory (a link?); refusing to read through it"),
                ));
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => own = false,
            Err(err) => return Err(Error::storage(d, &err)),
        }
    }
    // A fork's previews point into its parent's directory (its journal
    // copied the parent's replacement lines): where the session's own
    // journal says this id's output was saved, within this data directory.
    let mut candidates: Vec<(PathBuf, ArtifactKind)> = [ArtifactKind::Text, ArtifactKind::Json]
        .into_iter()
        .filter(|_| own)
        .map(|kind| (dir.join(file_name(tool_use_id, kind)), kind))
        .collect();
    if candidates.iter().all(|(path, _)| !path.exists()) {
        candidates = inherited_artifact(data_dir, session_id, tool_use_id, inherited)
            .into_iter()
            .filter(|(other, _, _)| is_real_dir(&session_dir(data_dir, other)))
            .map(|(other, name, kind)| (session_dir(data_dir, &other).join(name), kind))
            .collect();
    }
    for (path, kind) in candidates {
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
                return Err(Error::storage(
                    &path,
                    &io::Error::other("a symbolic link; refusing to follow it"),
                ));
            }
            Err(err) => return Err(Error::storage(&path, &err)),
        };
        let meta = file.metadata().map_err(|err| Error::storage(&path, &err))?;
        if !meta.is_file() {
            return Err(Error::storage(
                &path,
                &io::Error::other("not a regular file; refusing to read it"),
            ));
        }
        return Ok(Found { file, kind, path });
    }
    Err(not_found(session_id, tool_use_id))
}

/// A directory that is no link, nor inside a linked session directory.
fn is_real_dir(dir: &Path) -> bool {
    [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .all(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.file_type().is_dir()))
}

fn compile(pattern: &str) -> Result<regex::bytes::Regex> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(Error::invalid_params(
            "grep",
            format!("pattern longer than {MAX_PATTERN_BYTES} bytes"),
        ));
    }
    // `regex` runs in time linear in the input whatever the pattern (no
    // backtracking), so an untrusted pattern cannot hang a search; the size
    // limits bound what compiling it may cost.
    regex::bytes::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| Error::invalid_params("grep", err.to_string()))
}

/// The text a block-array artifact's preview was cut from.
fn json_text(mut source: impl Read) -> io::Result<String> {
    // Read whole, then parsed as deep as a tool result may nest.
    let mut bytes = Vec::new();
    source.read_to_end(&mut bytes)?;
    let content: serde_json::Value = crate::json::from_slice(&bytes)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
    Ok(crate::format::ResultContent::of_value(Some(&content))
        .preview_text()
        .into_owned())
}

// ------------------------------------------------------------ the index --

/// Append one line (through its `\n`) to `out`, keeping at most `cap` of
/// its bytes. Returns the line's full length, or `None` at the end.
fn read_line_capped(
    reader: &mut impl BufRead,
    out: &mut Vec<u8>,
    cap: usize,
) -> io::Result<Option<u64>> {
    let mut len = 0u64;
    let mut kept = 0usize;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if buf.is_empty() {
            return Ok((len > 0).then_some(len));
        }
        let (take, done) = match memchr::memchr(b'\n', buf) {
            Some(pos) => (pos + 1, true),
            None => (buf.len(), false),
        };
        let keep = take.min(cap - kept);
        out.extend_from_slice(&buf[..keep]);
        kept += keep;
        len += take as u64;
        reader.consume(take);
        if done {
            return Ok(Some(len));
        }
    }
}

/// Cut `bytes` back to the last whole character.
fn cut_to_char(bytes: &mut Vec<u8>) {
    if let Err(err) = std::str::from_utf8(bytes)
        && err.error_len().is_none()
    {
        bytes.truncate(err.valid_up_to());
    }
}

fn into_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

/// `line` without its `\n` or `\r\n`.
fn strip_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A reader positioned at line `target` (or at the end).
fn seek_to_line<R: Read + Seek>(
    mut source: R,
    index: &LineIndex,
    target: u64,
) -> io::Result<BufReader<R>> {
    let (mut line, byte) = index.checkpoint_for(target);
    source.seek(SeekFrom::Start(byte))?;
    let mut reader = BufReader::with_capacity(64 << 10, source);
    let mut sink = Vec::new();
    while line < target {
        sink.clear();
        if read_line_capped(&mut reader, &mut sink, 0)?.is_none() {
            break;
        }
        line += 1;
    }
    Ok(reader)
}

fn page<R: Read + Seek>(
    source: R,
    index: &LineIndex,
    grep: Option<&regex::bytes::Regex>,
    request: &ReadRequest,
    unit: SizeUnit,
    stop: &dyn Fn() -> bool,
) -> io::Result<Result<ReadResult>> {
    let offset = request.offset.min(index.total_lines);
    let limit = request.limit.unwrap_or(DEFAULT_LIMIT);
    let reader = seek_to_line(source, index, offset)?;
    let mut result = match grep {
        None => range(reader, offset, limit, index.total_lines)?,
        Some(re) => match search(reader, offset, limit, request.context, re, stop)? {
            Ok(result) => result,
            Err(err) => return Ok(Err(err)),
        },
    };
    result.total_lines = index.total_lines;
    result.total_chars = index.total(unit);
    Ok(Ok(result))
}

fn range(
    mut reader: impl BufRead,
    offset: u64,
    limit: u64,
    total_lines: u64,
) -> io::Result<ReadResult> {
    let mut out = Vec::new();
    let mut end = offset;
    let mut cut = false;
    while end - offset < limit {
        let before = out.len();
        let Some(len) = read_line_capped(&mut reader, &mut out, MAX_PAGE_BYTES - before)? else {
            break;
        };
        if (out.len() - before) as u64 == len {
            end += 1;
            continue;
        }
        // The line does not fit: a page of whole lines stops before it; a
        // line alone too long for any page is cut.
        if before == 0 {
            cut_to_char(&mut out);
            cut = true;
            end += 1;
        } else {
            out.truncate(before);
        }
        break;
    }
    Ok(ReadResult {
        text: into_text(out),
        start_line: offset,
        end_line: end,
        total_lines,
        total_chars: 0,
        truncated: cut || end < total_lines,
    })
}

/// The `grep -n -C` rendering of the lines shown.
struct GrepOut {
    text: Vec<u8>,
    /// One past the last line written.
    next: Option<u64>,
    first: Option<u64>,
    /// As grep, groups are separated only when context is shown.
    separate: bool,
}

impl GrepOut {
    fn line(&mut self, number: u64, line: &[u8], matched: bool) {
        if let Some(next) = self.next
            && number > next
            && self.separate
        {
            self.text.extend_from_slice(b"--\n");
        }
        self.first.get_or_insert(number);
        self.text.extend_from_slice(
            format!("{}{}", number + 1, if matched { ':' } else { '-' }).as_bytes(),
        );
        self.text.extend_from_slice(strip_line_end(line));
        self.text.push(b'\n');
        self.next = Some(number + 1);
    }
}

fn search(
    mut reader: impl BufRead,
    offset: u64,
    limit: u64,
    context: u64,
    re: &regex::bytes::Regex,
    stop: &dyn Fn() -> bool,
) -> io::Result<Result<ReadResult>> {
    let mut out = GrepOut {
        text: Vec::new(),
        next: None,
        first: None,
        separate: context > 0,
    };
    let mut before: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut matches = 0u64;
    // Context lines still to show after the last match.
    let mut after = 0u64;
    let mut cut = false;
    let mut more = false;
    let mut number = offset;
    let mut line = Vec::new();
    loop {
        if number.is_multiple_of(STOP_CHECK_LINES) && stop() {
            return Ok(Err(Error::Cancelled));
        }
        line.clear();
        let Some(len) = read_line_capped(&mut reader, &mut line, MAX_GREP_LINE_BYTES)? else {
            break;
        };
        let long = (line.len() as u64) < len;
        if long {
            cut_to_char(&mut line);
        }
        let matched = re.is_match(strip_line_end(&line));
        if matched && matches == limit {
            more = true;
            break;
        }
        if matched {
            if out.text.len() + line.len() + before.iter().map(|(_, l)| l.len()).sum::<usize>()
                > MAX_PAGE_BYTES
                && matches > 0
            {
                more = true;
                break;
            }
            for (n, l) in before.drain(..) {
                out.line(n, &l, false);
            }
            out.line(number, &line, true);
            cut |= long;
            matches += 1;
            after = context;
        } else if after > 0 {
            if out.text.len() + line.len() > MAX_PAGE_BYTES {
                more = true;
                break;
            }
            out.line(number, &line, false);
            cut |= long;
            after -= 1;
        } else if matches == limit {
            // Past the last match's context: only whether more follow
            // remains to be learned.
        } else if context > 0 {
            if before.len() as u64 == context {
                before.pop_front();
            }
            before.push_back((number, std::mem::take(&mut line)));
        }
        number += 1;
    }
    let start = out.first.unwrap_or(offset);
    let end = out.next.unwrap_or(offset);
    Ok(Ok(ReadResult {
        text: into_text(out.text),
        start_line: start,
        end_line: end,
        total_lines: 0,
        total_chars: 0,
        truncated: more || cut,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(text: &str) -> LineIndex {
        LineIndex::build(&mut text.as_bytes(), &|| false).unwrap()
    }

    fn read(text: &str, request: ReadRequest) -> ReadResult {
        let index = index(text);
        let grep = request.grep.as_deref().map(|p| compile(p).unwrap());
        page(
            Cursor::new(text.as_bytes().to_vec()),
            &index,
            grep.as_ref(),
            &request,
            SizeUnit::Chars,
            &|| false,
        )
        .unwrap()
        .unwrap()
    }

    fn lines(offset: u64, limit: u64) -> ReadRequest {
        ReadRequest {
            offset,
            limit: Some(limit),
            ..ReadRequest::default()
        }
    }

    #[test]
    fn ranges_at_the_edges() {
        let text = "zero\r\none\ntwo \u{1F600}\nthree";
        let r = read(text, lines(0, 2));
        assert_eq!(r.text, "zero\r\none\n");
        assert_eq!((r.start_line, r.end_line, r.total_lines), (0, 2, 4));
        assert!(r.truncated);
        let r = read(text, lines(2, 5));
        assert_eq!(r.text, "two \u{1F600}\nthree");
        assert_eq!((r.start_line, r.end_line), (2, 4));
        assert!(!r.truncated);
        assert_eq!(r.total_chars, 21);
        let r = read(text, lines(4, 5));
        assert_eq!((r.text.as_str(), r.start_line, r.end_line), ("", 4, 4));
        let r = read(text, lines(99, 5));
        assert_eq!((r.text.as_str(), r.start_line, r.end_line), ("", 4, 4));
        let r = read(text, lines(1, 0));
        assert_eq!((r.text.as_str(), r.end_line, r.truncated), ("", 1, true));
    }

    #[test]
    fn pages_concatenate_to_the_original_across_checkpoints() {
        let mut text = String::new();
        for i in 0..40_000 {
            text.push_str(&format!("line {i} {}\n", "\u{e9}".repeat(i % 7)));
        }
        text.push_str("no newline at the end");
        let idx = index(&text);
        assert!(idx.checkpoints.len() > 5, "{}", idx.checkpoints.len());
        let mut joined = String::new();
        let mut offset = 0;
        loop {
            let r = read(&text, lines(offset, 777));
            joined.push_str(&r.text);
            offset = r.end_line;
            if !r.truncated {
                break;
            }
        }
        assert_eq!(joined, text);
        let r = read(&text, lines(30_001, 1));
        assert_eq!(
            r.text,
            format!("line 30001 {}\n", "\u{e9}".repeat(30_001 % 7))
        );
    }

    #[test]
    fn a_line_longer_than_a_page_is_cut_between_characters() {
        let text = format!("{}\nafter\n", "\u{1F600}".repeat(MAX_PAGE_BYTES / 4 + 10));
        let r = read(&text, lines(0, 10));
        assert!(r.truncated);
        assert_eq!(r.end_line, 1);
        assert_eq!(r.text.len(), MAX_PAGE_BYTES);
        assert!(r.text.chars().all(|c| c == '\u{1F600}'));
        // Whole lines that do not fit are left for the next page.
        let text = format!("a\n{}\n", "b".repeat(MAX_PAGE_BYTES));
        let r = read(&text, lines(0, 10));
        assert_eq!((r.text.as_str(), r.end_line, r.truncated), ("a\n", 1, true));
    }

    fn grep(text: &str, pattern: &str, context: u64, offset: u64, limit: u64) -> ReadResult {
        read(
            text,
            ReadRequest {
                offset,
                limit: Some(limit),
                grep: Some(pattern.into()),
                context,
            },
        )
    }

    #[test]
    fn grep_numbers_lines_and_merges_overlapping_context() {
        let text = "a\nerr 1\nb\nc\nerr 2\nd\ne\nf\ng\nerr 3\r\nh";
        let r = grep(text, "^err", 1, 0, 100);
        assert_eq!(
            r.text,
            "1-a\n2:err 1\n3-b\n4-c\n5:err 2\n6-d\n--\n9-g\n10:err 3\n11-h\n"
        );
        assert_eq!((r.start_line, r.end_line, r.total_lines), (0, 11, 11));
        assert!(!r.truncated);
        // Overlapping context is shown once; `$` matches before a CRLF.
        let r = grep(text, r"\d$", 2, 0, 100);
        assert_eq!(
            r.text,
            "1-a\n2:err 1\n3-b\n4-c\n5:err 2\n6-d\n7-e\n8-f\n9-g\n10:err 3\n11-h\n"
        );
        // Paging through matches.
        let r = grep(text, "^err", 0, 0, 2);
        assert_eq!(r.text, "2:err 1\n5:err 2\n");
        assert_eq!((r.start_line, r.end_line, r.truncated), (1, 5, true));
        let r = grep(text, "^err", 0, r.end_line, 2);
        assert_eq!(r.text, "10:err 3\n");
        assert_eq!((r.start_line, r.end_line, r.truncated), (9, 10, false));
        // The last match's trailing context stops before a further match.
        let r = grep(text, "^err", 3, 0, 1);
        assert_eq!(r.text, "1-a\n2:err 1\n3-b\n4-c\n");
        assert!(r.truncated);
        let r = grep(text, "nothing", 3, 0, 10);
        assert_eq!(
            (r.text.as_str(), r.start_line, r.end_line, r.truncated),
            ("", 0, 0, false)
        );
    }

    #[test]
    fn hostile_patterns_are_refused_not_slow() {
        assert!(compile("(").is_err());
        assert!(compile(&"a".repeat(MAX_PATTERN_BYTES + 1)).is_err());
        assert!(compile(r"(\w{100}){100}").is_err());
        assert!(compile(r"(a+)+$").is_ok());
    }
}
