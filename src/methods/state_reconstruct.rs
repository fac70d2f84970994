//! `state/reconstruct`: rebuild a session's replacement state from what a
//! client or a transcript file says was sent, replacing what it had.
//!
//! `seenIds` = every tool_use_id of a tool_result in the messages and the
//! transcript; each gets its record's replacement, else its inherited one,
//! else none. The transcript is streamed line by line, torn or unparsable
//! lines are skipped and counted, and `$/progress` is reported when the
//! client passed a `workDoneToken`.

use std::collections::HashSet;

use futures_util::future::BoxFuture;
use serde_json::json;

use super::{Reply, RequestCx, SessionMethod};
use crate::error::{Error, Result};
use crate::format::{Digest, Format};
use crate::protocol::{
    RECORD_KIND, SessionId, StateReconstruct, StateReconstructParams, StateReconstructResult,
};
use crate::session::Session;
use crate::state::{Replacement, ReplacementState};
use crate::transcript::checkpoint;
use crate::transcript::fork::Logical;
use crate::transcript::import;
use crate::transcript::reader::claude_code::ClaudeCodeFile;
use crate::transcript::reader::{self, ReadLimits, SessionImage};

impl SessionMethod for StateReconstruct {
    fn session_id(params: &StateReconstructParams) -> &SessionId {
        &params.session_id
    }

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: StateReconstructParams,
    ) -> BoxFuture<'a, Result<Reply<StateReconstructResult>>> {
        Box::pin(async move { reconstruct(session, cx, params).await.map(Reply::Now) })
    }
}

/// From how many decisions a replaced state is freed on a thread of its
/// own (below, freeing it costs less than starting one).
const FREE_APART: usize = 4096;

async fn reconstruct(
    session: &mut Session,
    cx: &RequestCx,
    params: StateReconstructParams,
) -> Result<StateReconstructResult> {
    // A transcript file says its own format (its session line, else its
    // content) unless the request names one; another agent's session file
    // is read converted.
    let path = params
        .transcript
        .as_ref()
        .map(|p| cx.config.workspace_path(p));
    let (source, file_format) = match &path {
        Some(path) => {
            // Never open a FIFO or a device to look at it.
            let file = reader::open_regular(path)?;
            // A checkpoint stands for the transcript alone (a resume): the
            // client's messages, records or inherited replacements would
            // take effect among its decisions, so with any of them the
            // transcript is read whole.
            let alone = params.messages.as_ref().is_none_or(Vec::is_empty)
                && params.records.as_ref().is_none_or(Vec::is_empty)
                && params
                    .inherited_replacements
                    .as_ref()
                    .is_none_or(|r| r.is_empty());
            if alone && let Some(source) = checkpointed(file, path, params.format)? {
                let format = source.format;
                (Some(Source::Checkpoint(Box::new(source))), Some(format))
            } else {
                let content = match import::detect_file(path) {
                    // An empty transcript is one with nothing in it yet.
                    Err(import::ImportError::Detect {
                        source: import::DetectError::Empty,
                        ..
                    }) => import::Content::Transcript {
                        format: Format::Anthropic,
                        declared: false,
                    },
                    other => other?,
                };
                let source = match content {
                    import::Content::Transcript { .. } => Source::File(path.clone()),
                    import::Content::Agent(import::Agent::ClaudeCode) => {
                        Source::ClaudeCode(path.clone())
                    }
                    _ => Source::Bytes(import::transcript_bytes(path)?.1),
                };
                (
                    Some(source),
                    Some(params.format.unwrap_or(content.format())),
                )
            }
        }
        None => (None, params.format),
    };
    let format = session.format_for(file_format, cx.config.format).await?;
    // A checkpoint is of the transcript read in its own format: read in
    // another, the transcript is read whole.
    let source = match source {
        Some(Source::Checkpoint(c)) if c.format != format => Some(Source::File(c.path)),
        // Read in another format, the converted session is read as such.
        Some(Source::ClaudeCode(path)) if format != Format::Anthropic => {
            Some(Source::Bytes(import::transcript_bytes(&path)?.1))
        }
        other => other,
    };
    let dialect = format.dialect();
    let mut image = SessionImage::default();
    // What a checkpoint decided, followed by the lines after it.
    let mut decided = ReplacementState::default();
    // The client's records apply to the results it says were sent; the
    // transcript's are its journal: every one of them was sent.
    let client_records = SessionImage::default();
    let client_records = params
        .records
        .iter()
        .flatten()
        .filter(|r| r.kind == RECORD_KIND)
        .fold(client_records, |mut image, r| {
            image.add_record(r);
            image
        });
    for (i, m) in params.messages.iter().flatten().enumerate() {
        dialect.validate(&m.0, &format!("messages[{i}]"), false)?;
        // The same skim a transcript line gets: one reading of messages.
        let bytes = serde_json::to_vec(&m.0).map_err(|e| Error::Internal(e.to_string()))?;
        if let Some(mut skim) = dialect.skim(&bytes) {
            let sent = sent_forms(dialect, &m.0, &client_records);
            for result in &mut skim.results {
                if sent.contains(&result.id) {
                    result.original = None;
                    result.digest = None;
                }
            }
            image.add_message(None, skim);
        }
    }
    if let Some(source) = source {
        cx.progress(
            params.work_done_token.as_ref(),
            json!({"kind": "begin", "title": "Reconstructing state", "percentage": 0}),
        );
        let token = params.work_done_token.clone();
        let progress_cx = cx.clone();
        let cancel = cx.cancel.clone();
        let mut source = source;
        (decided, image) = tokio::task::spawn_blocking(move || {
            read_transcript(
                &mut source,
                format,
                image,
                || cancel.is_cancelled(),
                |done, total| {
                    let percentage = (done * 100).checked_div(total).unwrap_or(100);
                    progress_cx.progress(
                        token.as_ref(),
                        json!({"kind": "report", "percentage": percentage}),
                    );
                },
            )
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        cx.progress(params.work_done_token.as_ref(), json!({"kind": "end"}));
    }

    let inherited = params.inherited_replacements.unwrap_or_default();
    let mut state = if client_records.replacements.is_empty() && inherited.is_empty() {
        // A transcript alone (a resume): its decisions as on load, the
        // image's own entries moved into the state rather than copied.
        checkpoint::follow(decided, &mut image).unwrap_or_default()
    } else {
        // Never with a checkpoint (see above): `decided` is empty.
        let mut state = ReplacementState::default();
        decide_with_client(&mut state, &image, &client_records, &inherited);
        state
    };
    // Clearings (the client's and the journal's) end sending a result
    // whole: over the decisions, as on load.
    state.clear(client_records.cleared.iter().chain(&image.cleared).cloned());

    cx.check_cancelled()?;
    let loaded = session.load().await?;
    loaded.exists = true;
    loaded.format.get_or_insert(format);
    let replaced = std::mem::replace(&mut loaded.state, state);
    // The new state lives in memory only (see `Session::settle_idle`).
    loaded.journaled = false;
    for (id, name) in image.undecided_names.drain() {
        loaded.tool_names.insert_mut(id, name);
    }
    let result = StateReconstructResult {
        seen_count: loaded.state.seen_count(),
        replacement_count: loaded.state.replacement_count(),
        messages_read: image.messages,
        records_read: image.records + client_records.records,
        skipped_lines: image.skipped,
    };
    session.publish();
    // The state replaced (a session reconstructed again) is freed apart
    // when large, once no snapshot of it is published.
    if replaced.seen_count() + replaced.replacement_count() >= FREE_APART {
        crate::process::drop_apart(replaced);
    }
    Ok(result)
}

/// The ids of the results of `message` whose content is what a client
/// record without a digest says was sent for them: the replacement
/// itself, not an original. Such a result stands for the decision, as it
/// does for `budget/apply` (which leaves a preview as it is); taken for an
/// original, it bound the record to its own text, and the next apply of
/// the real original was a fresh result, saved and previewed again.
fn sent_forms<'m>(
    dialect: &dyn crate::format::Dialect,
    message: &'m serde_json::Value,
    client_records: &SessionImage,
) -> Vec<std::borrow::Cow<'m, str>> {
    use crate::format::without_cache_markers;
    let unbound = |id: &str| -> Vec<&Replacement> {
        client_records
            .replacements
            .iter()
            .filter(|(rid, digest, _)| *digest == Digest::ANY && **rid == *id)
            .map(|(_, _, r)| r)
            .collect()
    };
    crate::format::results(dialect, message)
        .into_iter()
        .filter(|(index, id)| {
            let Some(content) = dialect.result_value(message, *index) else {
                return false;
            };
            let content = without_cache_markers(content);
            unbound(id).into_iter().any(|replacement| {
                // What the replacement is sent as, in this message's shape.
                let mut sent = message.clone();
                dialect.put_replacement(&mut sent, *index, &replacement.text());
                dialect
                    .result_value(&sent, *index)
                    .is_some_and(|v| *without_cache_markers(v) == *content)
            })
        })
        .map(|(_, id)| id)
        .collect()
}

/// The decisions of `image` with the client's records and inherited
/// replacements: the client's records for seen results, then every
/// journaled record (a decision that was sent, as on load); each other
/// seen result gets its inherited replacement, else none. Records bind to
/// their original when they carry a digest.
fn decide_with_client(
    state: &mut ReplacementState,
    image: &SessionImage,
    client_records: &SessionImage,
    inherited: &std::collections::BTreeMap<String, String>,
) {
    let seen_ids: HashSet<&str> = image.seen.iter().map(|(id, _)| &**id).collect();
    state.commit_decisions(
        client_records
            .replacements
            .iter()
            .filter(|(id, _, _)| seen_ids.contains(&**id))
            .chain(&image.replacements)
            .map(|(id, digest, r)| (id.clone(), *digest, Some(r.clone()))),
    );
    // A result whose id a record already decided binds that record (when
    // it carried no digest); the inherited replacement is for the others.
    let seen: Vec<_> = image
        .seen
        .iter()
        .map(|(id, digest)| {
            let replacement = (!state.is_decided(id))
                .then(|| inherited.get(&**id).map(|r| Replacement::new(r)))
                .flatten();
            (id.clone(), *digest, replacement)
        })
        .collect();
    state.commit_decisions(seen);
    // A replacement that arrives without its original (inherited, or a
    // client record without a digest, for an id the messages do not show)
    // is put back on the first original met for its id afterwards and
    // bound to it then (PROTOCOL.md 11.1): a fork resumed from its
    // parent's replacements sends the parent's bytes.
    let unseen_records = client_records
        .replacements
        .iter()
        .filter(|(id, digest, _)| *digest == Digest::ANY && !seen_ids.contains(&**id))
        .map(|(id, _, r)| (id.clone(), Digest::ANY, Some(r.clone())));
    let inherited_unseen = inherited
        .iter()
        .filter(|(id, _)| !seen_ids.contains(id.as_str()))
        .map(|(id, r)| {
            (
                crate::state::keep_id(id),
                Digest::ANY,
                Some(Replacement::new(r)),
            )
        });
    state.commit_decisions(unseen_records.chain(inherited_unseen).collect::<Vec<_>>());
    drop(seen_ids);
}

/// Where a transcript is read from: a toolwire transcript file, streamed,
/// from its decisions checkpoint on when it has one that proves itself,
/// or the converted bytes of another agent's session.
enum Source {
    File(std::path::PathBuf),
    Checkpoint(Box<Checkpointed>),
    /// A Claude Code session read in its own format: read straight into
    /// the image (`reader::claude_code`), not converted first.
    ClaudeCode(std::path::PathBuf),
    Bytes(Vec<u8>),
}

/// A transcript file whose checkpoint proved itself.
struct Checkpointed {
    path: std::path::PathBuf,
    logical: Logical,
    format: Format,
    checkpoint: checkpoint::Checkpoint,
}

/// The transcript at `path` (opened as `file`) with its checkpoint, when
/// it has one that proves itself and is in the format asked for (if any).
fn checkpointed(
    file: std::fs::File,
    path: &std::path::Path,
    format: Option<Format>,
) -> Result<Option<Checkpointed>> {
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    // A transcript with a fork line it cannot read has no checkpoint to
    // use: reading it whole says why.
    let Ok(logical) = Logical::open(&file, path, len) else {
        return Ok(None);
    };
    Ok(checkpoint::read(path, &logical)
        .filter(|c| format.is_none_or(|f| f == c.format))
        .map(|checkpoint| Checkpointed {
            path: path.to_path_buf(),
            format: checkpoint.format,
            logical,
            checkpoint,
        }))
}

/// Stream a transcript into `image`, with what its checkpoint decided when
/// read from one (else an empty state), calling `progress(bytes, total)` every
/// few megabytes. Nothing is cut: the file may be anyone's. Only a regular
/// file is read (a FIFO or a device could block or never end), a line
/// longer than a frame is skipped and counted without being held, and
/// `cancelled` is polled between reads.
fn read_transcript(
    source: &mut Source,
    format: Format,
    mut image: SessionImage,
    cancelled: impl Fn() -> bool,
    progress: impl Fn(u64, u64),
) -> Result<(ReplacementState, SessionImage)> {
    const STEP: u64 = 8 << 20;
    if let Source::ClaudeCode(path) = source {
        let (_, logical) = Logical::open_path(path).map_err(|err| Error::storage(path, &err))?;
        let total = logical.len();
        let file =
            match ClaudeCodeFile::read(&logical, total, &cancelled, |done| progress(done, total)) {
                Ok(file) => file,
                Err(_) if cancelled() => return Err(Error::Cancelled),
                Err(err) => return Err(Error::storage(path, &err)),
            };
        if file
            .feed(&mut image, ReadLimits::default().max_line)
            .is_some()
        {
            file.discard();
            image.finish_lenient();
            return Ok((ReplacementState::default(), image));
        }
        // A message too long for a transcript line: read converted below,
        // where the reader skips it.
    }
    let converted;
    let mut next_report = STEP;
    let mut start = 0;
    let mut decided = ReplacementState::default();
    let (reader, total, path): (Box<dyn std::io::Read>, u64, &std::path::Path) = match source {
        Source::Checkpoint(c) => {
            // Only a transcript alone is read from its checkpoint: `image`
            // has nothing yet.
            start = c.checkpoint.at;
            image = std::mem::take(&mut c.checkpoint.image);
            decided = std::mem::take(&mut c.checkpoint.decided);
            let reader = c
                .logical
                .reader_from(start)
                .map_err(|err| Error::storage(&c.path, &err))?;
            (Box::new(reader), c.logical.len(), &c.path)
        }
        Source::File(path) => {
            let file = reader::open_regular(path)?;
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            // A fork's transcript is read through its parent's bytes.
            let logical = crate::transcript::fork::Logical::open(&file, path, len)
                .map_err(|err| Error::storage(path, &err))?;
            let total = logical.len();
            let reader = logical.reader().map_err(|err| Error::storage(path, &err))?;
            (Box::new(reader), total, path)
        }
        Source::ClaudeCode(path) => {
            converted = import::transcript_bytes(path)?.1;
            (
                Box::new(&converted[..]),
                converted.len() as u64,
                path.as_path(),
            )
        }
        Source::Bytes(bytes) => (
            Box::new(&bytes[..]),
            bytes.len() as u64,
            std::path::Path::new("converted session"),
        ),
    };
    let read = reader::read_lines(
        format,
        reader,
        ReadLimits::default(),
        &cancelled,
        |span, head| {
            let span = span.after(start);
            image.add(span, head);
            if span.offset + span.len >= next_report {
                next_report += STEP;
                progress(span.offset + span.len, total);
            }
        },
    );
    let (_, torn) = match read {
        Ok(read) => read,
        Err(_) if cancelled() => return Err(Error::Cancelled),
        Err(err) => return Err(Error::storage(path, &err)),
    };
    if torn {
        image.skipped += 1;
    }
    image.finish_lenient();
    if let Source::Checkpoint(c) = source {
        // The tail's replacements follow the checkpoint's decisions only
        // when they are for other ids (see `checkpoint::follow`); else the
        // transcript is read whole.
        match checkpoint::follow(decided, &mut image) {
            Some(followed) => decided = followed,
            None => {
                *source = Source::File(c.path.clone());
                return read_transcript(
                    source,
                    format,
                    SessionImage::default(),
                    cancelled,
                    progress,
                );
            }
        }
    }
    Ok((decided, image))
}
