//! `state/fork`: a new session starting from a snapshot of another.
//!
//! The snapshot is taken in the source's queue (after every change received
//! before the fork) and costs O(1): the replacement state is a persistent
//! map shared with the source until either side changes. The target is then
//! set up in its own queue, so a fork never holds the source's queue while
//! it writes its transcript, and two sessions forking onto each other
//! cannot wait on one another. The fork's transcript names the parent's
//! committed bytes instead of copying them ([`crate::transcript::fork`]).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::{Reply, RequestCx, SessionMethod};
use crate::error::{Error, Result};
use crate::protocol::{SessionId, StateFork, StateForkParams, StateForkResult};
use crate::session::{Loaded, Session};
use crate::transcript::fork;
use crate::transcript::writer::{self, TranscriptWriter};

impl SessionMethod for StateFork {
    fn session_id(params: &StateForkParams) -> &SessionId {
        &params.session_id
    }

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: StateForkParams,
    ) -> BoxFuture<'a, Result<Reply<StateForkResult>>> {
        Box::pin(async move {
            let source_id = params.session_id.clone();
            let loaded = session.load().await?;
            if !loaded.exists {
                return Err(Error::SessionNotFound {
                    session_id: source_id.to_string(),
                });
            }
            let state = loaded.state.clone();
            let tool_names = loaded.tool_names.clone();
            let format = loaded.format;
            // A fork with a copy of a journaled source's transcript loads
            // back from that copy as it starts; any other lives in memory.
            let copied_journal = loaded.journaled;
            // The committed transcript as of now: its path and length.
            let transcript = match (&loaded.transcript, params.copy_transcript.unwrap_or(true)) {
                (Some(t), true) => {
                    let t = t.lock().unwrap_or_else(|p| p.into_inner());
                    Some((t.path().to_path_buf(), t.len()))
                }
                _ => None,
            };
            let target_id = match params.new_session_id {
                Some(id) => id,
                None => fresh_id()?,
            };
            let target = cx.slot(&target_id);
            let files = session.storage().files.clone();
            let parent_id = source_id.to_string();
            let later = async move {
                target
                    .run(move |target_session| {
                        Box::pin(async move {
                            if target_session.load().await?.exists {
                                return Err(Error::SessionExists {
                                    session_id: target_session.key().id.to_string(),
                                });
                            }
                            if let Some(shared) = target_session.storage().shared.clone() {
                                // Shared store: the fork reads the source's
                                // commits up to now instead of copying them.
                                shared
                                    .fork(source_id.as_str(), target_session.key().id.as_str())
                                    .await?;
                                target_session.unload();
                                let session_id = target_session.key().id.clone();
                                let loaded = target_session.load().await?;
                                return Ok(StateForkResult {
                                    session_id,
                                    seen_count: loaded.state.seen_count(),
                                    replacement_count: loaded.state.replacement_count(),
                                });
                            }
                            let path = target_session.key().transcript_path();
                            let writer = match transcript {
                                Some((from, len)) => Some(
                                    tokio::task::spawn_blocking(move || {
                                        fork_transcript(&parent_id, &from, len, &path).map(
                                            |(file, len)| {
                                                TranscriptWriter::new(path, files.wrap(file), len)
                                            },
                                        )
                                    })
                                    .await
                                    .map_err(|e| Error::Internal(e.to_string()))??,
                                ),
                                None => None,
                            };
                            let journaled = copied_journal && writer.is_some();
                            let result = StateForkResult {
                                session_id: target_session.key().id.clone(),
                                seen_count: state.seen_count(),
                                replacement_count: state.replacement_count(),
                            };
                            target_session.set_loaded(Loaded {
                                exists: true,
                                state,
                                tool_names,
                                transcript: writer.map(|w| Arc::new(Mutex::new(w))),
                                guard: Default::default(),
                                format,
                                journaled,
                                shared_seq: 0,
                            });
                            Ok(result)
                        })
                    })
                    .await
            };
            Ok(Reply::Later(Box::pin(later)))
        })
    }
}

/// Start the transcript of the fork at `to`: one line naming the parent's
/// committed bytes (hard-linked beside it, see [`fork`]) instead of a copy,
/// so a fork costs the same whatever the parent's size. Atomic: the links
/// are made and synced first, then the transcript is written under a
/// temporary name, synced, and named without replacing anything; a crash at
/// any point leaves no fork (at worst unnamed links gc removes). Returns
/// the transcript opened for appending, locked, and its length.
fn fork_transcript(
    parent_id: &str,
    from: &std::path::Path,
    len: u64,
    to: &std::path::Path,
) -> Result<(std::fs::File, u64)> {
    let storage = |err: std::io::Error| Error::storage(to, &err);
    let dir = to
        .parent()
        .ok_or_else(|| Error::Internal("transcript path has no directory".into()))?;
    let fork_id = to
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = std::fs::File::open(from).map_err(|err| Error::storage(from, &err))?;
    let (line, links) =
        fork::start_fork(parent_id, &parent, from, len, &fork_id).map_err(storage)?;
    let written = (|| {
        let sync_dir = || std::fs::File::open(dir).and_then(|d| d.sync_all());
        let bytes = line.to_line();
        let mut tmp = tempfile::Builder::new()
            .prefix(".fork-")
            .tempfile_in(dir)
            .map_err(storage)?;
        writer::lock(tmp.as_file(), to)?;
        tmp.write_all(&bytes).map_err(storage)?;
        tmp.as_file().sync_data().map_err(storage)?;
        // The links must be on disk before any name can point at them.
        sync_dir().map_err(storage)?;
        let file = tmp.persist_noclobber(to).map_err(|err| {
            if err.error.kind() == std::io::ErrorKind::AlreadyExists {
                Error::SessionExists {
                    session_id: fork_id.clone(),
                }
            } else {
                storage(err.error)
            }
        })?;
        sync_dir().map_err(storage)?;
        // Reopen for appending; the lock lives on the inode we still hold.
        let appender = std::fs::OpenOptions::new()
            .append(true)
            .read(true)
            .open(to)
            .map_err(storage)?;
        drop(file);
        writer::lock(&appender, to)?;
        Ok((appender, bytes.len() as u64))
    })();
    if written.is_err() {
        for link in &links {
            let _ = std::fs::remove_file(link);
        }
    }
    written
}

/// A new session id nobody has used: time, process and a counter, hashed.
fn fresh_id() -> Result<SessionId> {
    use sha2::{Digest, Sha256};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seed = format!(
        "{nanos}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let digest = Sha256::digest(seed.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    SessionId::try_from(format!("fork-{hex}")).map_err(Error::Internal)
}
