//! What a transcript's `replacement` lines point at: the saved output each
//! preview names, read without parsing the (large) message lines.

use std::io::{self, BufRead, BufReader};
use std::path::Path;

/// The `(session, artifact name)`s the transcript's replacement for
/// `tool_use_id` (the last one journaled) may point at, the likeliest
/// first (one for a path; for a link, as
/// [`preview_targets`](crate::budget::preview::preview_targets) resolves
/// it in the transcript's session, `<session>.jsonl`).
pub fn replacement_target(
    transcript: &Path,
    tool_use_id: &str,
) -> io::Result<Vec<(String, String)>> {
    let own = session_of(transcript);
    let mut found = Vec::new();
    for_each_replacement(transcript, &mut |id, text| {
        if id == tool_use_id {
            found = crate::budget::preview::preview_targets(text, &own);
        }
        true
    })?;
    Ok(found)
}

/// The session whose transcript `transcript` is: its name less `.jsonl`.
pub fn session_of(transcript: &Path) -> String {
    let name = transcript
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.strip_suffix(".jsonl").unwrap_or(&name).to_owned()
}

/// Call `f(toolUseId, replacement)` for each `replacement` line of a
/// transcript, until it returns false. Only those lines are read whole;
/// message lines (which may be large) are skipped as they stream by.
pub fn for_each_replacement(
    transcript: &Path,
    f: &mut dyn FnMut(&str, &str) -> bool,
) -> io::Result<()> {
    // A fork's replacements include its parent's, read through its lines.
    let logical = match super::fork::Logical::open_path(transcript) {
        Ok((_, logical)) => logical,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    let mut reader = BufReader::with_capacity(64 << 10, logical.reader()?);
    let mut line = Vec::new();
    loop {
        line.clear();
        // The line's start says its type (writers put `type` first).
        if peek_line_start(&mut reader, &mut line, 48)?.is_none() {
            return Ok(());
        }
        let is_record = line
            .windows(b"\"replacement\"".len())
            .any(|w| w == b"\"replacement\"");
        if !is_record {
            skip_line(&mut reader)?;
            continue;
        }
        reader.read_until(b'\n', &mut line)?;
        let Ok(value) = crate::json::from_slice::<serde_json::Value>(&line) else {
            continue;
        };
        let field = |p: &str| value.pointer(p).and_then(|v| v.as_str());
        if field("/type") == Some("replacement")
            && let (Some(id), Some(text)) =
                (field("/record/toolUseId"), field("/record/replacement"))
            && !f(id, text)
        {
            return Ok(());
        }
    }
}

/// Read up to `n` bytes of the next line into `out` (not past its end).
fn peek_line_start(
    reader: &mut impl BufRead,
    out: &mut Vec<u8>,
    n: usize,
) -> io::Result<Option<()>> {
    while out.len() < n {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok((!out.is_empty()).then_some(()));
        }
        let want = (n - out.len()).min(buf.len());
        let take = match memchr::memchr(b'\n', &buf[..want]) {
            Some(pos) => pos + 1,
            None => want,
        };
        out.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if out.last() == Some(&b'\n') {
            break;
        }
    }
    Ok(Some(()))
}

/// Consume the rest of the current line (nothing if it already ended).
fn skip_line(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match memchr::memchr(b'\n', buf) {
            Some(pos) => {
                reader.consume(pos + 1);
                return Ok(());
            }
            None => {
                let len = buf.len();
                reader.consume(len);
            }
        }
    }
}
