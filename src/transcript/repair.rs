//! Rewriting a broken transcript so that it satisfies the pair invariant.
//!
//! - a torn or unparsable line is dropped;
//! - each tool call's results are moved directly after it: to the front of
//!   the next user message, or into a user message of their own when the
//!   call is not followed by one;
//! - a call missing any result is dropped together with its partial
//!   results (an assistant message left empty goes too);
//! - orphan results (no call before them) and duplicates (the first wins)
//!   are dropped.
//!
//! Nothing is invented: every block in the output was in the input, and
//! lines that need no change are copied byte for byte.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::Lines;
use super::reader::{Entry, parse_line};
use super::writer;
use crate::error::{Error, Result};
use crate::message;
use crate::protocol::TranscriptRepairResult;

enum Line {
    /// Copied unchanged (records, unknown kinds, untouched messages).
    Raw(Vec<u8>),
    Message(Value, Vec<u8>),
}

/// Repair transcript bytes; returns the new bytes, the report and whether
/// anything changed.
pub fn repair_bytes(input: &[u8]) -> (Vec<u8>, TranscriptRepairResult, bool) {
    let mut report = TranscriptRepairResult::default();
    let mut lines: Vec<Line> = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let (line, tail, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..], true),
            None => (rest, &rest[rest.len()..], false),
        };
        rest = tail;
        match (complete, parse_line(line)) {
            (true, Some(Entry::Message(m))) => lines.push(Line::Message(m, line.to_vec())),
            (true, Some(_)) => lines.push(Line::Raw(line.to_vec())),
            _ => report.torn_lines += 1,
        }
    }

    // Where each result first appears; later copies are duplicates.
    let mut first_result: HashMap<String, usize> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        if let Line::Message(m, _) = line
            && message::role(m) == Some("user")
        {
            for (_, id) in message::tool_results(m) {
                first_result.entry(id.to_owned()).or_insert(i);
            }
        }
    }

    // Decide each call: claim its results, or drop it.
    let mut claimed: HashSet<String> = HashSet::new();
    let mut placements: HashMap<usize, Vec<String>> = HashMap::new();
    // Lines whose calls are dropped: by line, not by id, since a broken
    // transcript may repeat an id, and a later copy's fate must not undo
    // an earlier complete pair.
    let mut dropped_calls: HashSet<usize> = HashSet::new();
    for (i, line) in lines.iter().enumerate() {
        let Line::Message(m, _) = line else { continue };
        if message::role(m) != Some("assistant") {
            continue;
        }
        let calls: Vec<String> = message::tool_uses(m).map(|(id, _)| id.to_owned()).collect();
        if calls.is_empty() {
            continue;
        }
        let complete = calls
            .iter()
            .all(|id| !claimed.contains(id) && first_result.get(id).is_some_and(|&at| at > i))
            && calls.iter().collect::<HashSet<_>>().len() == calls.len();
        if complete {
            claimed.extend(calls.iter().cloned());
            placements.insert(i, calls);
        } else {
            report.dropped_tool_uses.extend(calls);
            dropped_calls.insert(i);
        }
    }

    // Collect the claimed result blocks (first occurrence) and note drops.
    let mut blocks_by_id: HashMap<String, Value> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        let Line::Message(m, _) = line else { continue };
        if message::role(m) != Some("user") {
            continue;
        }
        for (b, id) in message::tool_results(m) {
            if claimed.contains(id)
                && first_result.get(id) == Some(&i)
                && !blocks_by_id.contains_key(id)
            {
                blocks_by_id.insert(id.to_owned(), message::blocks(m)[b].clone());
            } else {
                report.dropped_tool_results.push(id.to_owned());
            }
        }
    }

    let mut changed = report.torn_lines > 0;
    let mut out = Vec::with_capacity(input.len());
    let mut carry: Option<Vec<Value>> = None;
    for (i, line) in lines.into_iter().enumerate() {
        let (mut msg, raw) = match line {
            Line::Raw(raw) => {
                if let Some(results) = carry.take() {
                    emit_new_user(&mut out, &mut report, results);
                    changed = true;
                }
                out.extend_from_slice(&raw);
                out.push(b'\n');
                report.kept += 1;
                continue;
            }
            Line::Message(m, raw) => (m, raw),
        };
        let original = msg.clone();
        let role = message::role(&msg).unwrap_or_default().to_owned();
        if role == "user" {
            retain_blocks(&mut msg, |b| message::block_type(b) != Some("tool_result"));
            if let Some(results) = carry.take() {
                match msg.get_mut("content") {
                    Some(Value::Array(content)) => {
                        content.splice(0..0, results);
                    }
                    // String content: the results go in a message of their own.
                    _ => emit_new_user(&mut out, &mut report, results),
                }
            }
        } else if let Some(results) = carry.take() {
            emit_new_user(&mut out, &mut report, results);
        }
        if role == "assistant" && dropped_calls.contains(&i) {
            retain_blocks(&mut msg, |b| message::block_type(b) != Some("tool_use"));
        }
        let empty = matches!(msg.get("content"), Some(Value::Array(c)) if c.is_empty());
        if msg == original {
            out.extend_from_slice(&raw);
            out.push(b'\n');
            report.kept += 1;
        } else {
            changed = true;
            if !empty {
                let mut buf = Lines::default();
                buf.push_message(&msg);
                out.extend_from_slice(&buf.bytes);
                report.kept += 1;
            }
        }
        if let Some(ids) = placements.get(&i) {
            carry = Some(
                ids.iter()
                    .filter_map(|id| blocks_by_id.remove(id))
                    .collect(),
            );
        }
    }
    if let Some(results) = carry.take() {
        emit_new_user(&mut out, &mut report, results);
        changed = true;
    }
    (out, report, changed)
}

fn emit_new_user(out: &mut Vec<u8>, report: &mut TranscriptRepairResult, results: Vec<Value>) {
    let mut buf = Lines::default();
    buf.push_message(&json!({ "role": "user", "content": results }));
    out.extend_from_slice(&buf.bytes);
    report.kept += 1;
}

fn retain_blocks(msg: &mut Value, keep: impl Fn(&Value) -> bool) {
    if let Some(Value::Array(content)) = msg.get_mut("content") {
        content.retain(|b| keep(b));
    }
}

/// Repair the transcript at `path` in place (atomically, the original kept
/// as `<path>.bak`), or only report with `dry_run`. Refuses a transcript
/// another writer holds locked.
pub fn repair_file(path: &Path, dry_run: bool) -> Result<TranscriptRepairResult> {
    // Only a regular file: a FIFO or a device would block or never end.
    let mut source = super::reader::open_regular(path)?;
    let file = writer::open_locked(path, false)?;
    let mut input = Vec::new();
    std::io::Read::read_to_end(&mut source, &mut input)
        .map_err(|err| Error::storage(path, &err))?;
    let (output, report, changed) = repair_bytes(&input);
    if dry_run || !changed {
        drop(file);
        return Ok(report);
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let storage = |err: std::io::Error| Error::storage(path, &err);
    let mut tmp = tempfile::Builder::new()
        .prefix(".repair-")
        .tempfile_in(dir)
        .map_err(storage)?;
    tmp.write_all(&output).map_err(storage)?;
    tmp.as_file().sync_all().map_err(storage)?;
    // The original inode becomes `<path>.bak` (replacing an older one
    // atomically), then the repaired file takes its name.
    let bak = bak_path(path);
    let bak_tmp = dir.join(format!(".repair-bak-{}", std::process::id()));
    let _ = fs::remove_file(&bak_tmp);
    fs::hard_link(path, &bak_tmp).map_err(storage)?;
    fs::rename(&bak_tmp, &bak).map_err(storage)?;
    tmp.persist(path).map_err(|e| storage(e.error))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(storage)?;
    drop(file);
    Ok(report)
}

pub fn bak_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

/// Repair a conversation held in memory (the proxy's request) by the same
/// rules as a transcript. `None` when it already satisfies the pair
/// invariant, so a valid conversation is never touched.
pub fn repair_messages(messages: &[Value]) -> Option<(Vec<Value>, TranscriptRepairResult)> {
    let mut lines = Lines::default();
    for m in messages {
        lines.push_message(m);
    }
    let (output, report, changed) = repair_bytes(&lines.bytes);
    if !changed {
        return None;
    }
    let repaired = output
        .split(|&b| b == b'\n')
        .filter_map(parse_line)
        .filter_map(|entry| match entry {
            Entry::Message(m) => Some(m),
            _ => None,
        })
        .collect();
    Some((repaired, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(message: serde_json::Value) -> String {
        format!(
            "{}\n",
            serde_json::json!({"type": "message", "message": message})
        )
    }

    /// Found by the `repair` fuzz target: a later call repeating an id must
    /// not take an earlier complete pair down with it (which left the
    /// earlier result behind as an orphan, and a second repair changing
    /// the output again).
    #[test]
    fn a_repeated_call_id_drops_only_the_incomplete_copy() {
        let call = serde_json::json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "Bash", "input": {}}
        ]});
        let result = serde_json::json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "ok"}
        ]});
        let pair = format!("{}{}", line(call.clone()), line(result));
        let input = format!("{pair}{}", line(call));
        let (out, report, changed) = repair_bytes(input.as_bytes());
        assert!(changed);
        assert_eq!(String::from_utf8(out.clone()).unwrap(), pair);
        assert_eq!(report.dropped_tool_uses, vec!["a".to_owned()]);
        assert!(report.dropped_tool_results.is_empty());
        let (again, _, changed) = repair_bytes(&out);
        assert!(!changed);
        assert_eq!(again, out);
    }
}
