//! The local backend (`storage.backend = "local"`, the default): each
//! session's transcript is a JSONL file under the data directory that one
//! process holds locked, committed by [`TranscriptWriter`], read back by
//! [`reader`], forked through hard links ([`fork`]) and collected by
//! [`crate::retention`].

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use super::{ForkSource, Outcome, SessionStore};
use super::{Loaded, SessionKey};
use crate::error::{Error, Result};
use crate::transcript::Lines;
use crate::transcript::checkpoint;
use crate::transcript::fork;
use crate::transcript::guard::Transition;
use crate::transcript::reader::{self, SessionImage};
use crate::transcript::wal;
use crate::transcript::writer::{self, LogFileFactory, TranscriptWriter};
use crate::transcript::{ReplacementRecord, SeenLine};

/// Transcript files, opened through `files` (fault-injecting in tests).
pub struct Local<'a> {
    pub files: &'a Arc<dyn LogFileFactory>,
}

impl SessionStore for Local<'_> {
    async fn load(&self, key: &SessionKey, loaded: &mut Option<Loaded>) -> Result<bool> {
        if loaded.is_some() {
            return Ok(false);
        }
        let key = key.clone();
        let files = self.files.clone();
        let read = tokio::task::spawn_blocking(move || load_from_disk(&key, &*files))
            .await
            .map_err(|err| Error::Internal(format!("loading session: {err}")))??;
        *loaded = Some(read);
        Ok(true)
    }

    async fn commit(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: Lines,
        fsync: bool,
        create: bool,
    ) -> Result<Outcome> {
        let mut created = false;
        if loaded.transcript.is_none() {
            if !create {
                return Ok(Outcome::NOTHING);
            }
            let (key, files) = (key.clone(), self.files.clone());
            let writer = tokio::task::spawn_blocking(move || create_transcript(&key, &*files))
                .await
                .map_err(|err| Error::Internal(format!("creating transcript: {err}")))??;
            loaded.transcript = Some(Arc::new(Mutex::new(writer)));
            created = true;
        }
        let format = *loaded.format.get_or_insert_default();
        let Some(transcript) = loaded.transcript.clone() else {
            return Ok(Outcome::NOTHING);
        };
        let header = crate::transcript::session_line(format).filter(|_| {
            transcript
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
        });
        if lines.is_empty() && header.is_none() {
            return Ok(Outcome::WRITTEN);
        }
        let bytes = match header {
            // A new transcript starts with the line naming its format, in
            // the same commit as its first lines.
            Some(mut bytes) => {
                bytes.extend_from_slice(&lines.bytes);
                bytes
            }
            None => lines.bytes,
        };
        let wal = (fsync && bytes.len() <= wal::MAX_RECORD)
            .then(|| wal::get(&key.data_dir))
            .flatten();
        let outcome = match wal {
            Some(wal) => logged_commit(&wal, &transcript, bytes).await,
            None if fsync => {
                // fdatasync blocks for the device: keep it off the async
                // workers.
                let transcript = transcript.clone();
                tokio::task::spawn_blocking(move || lock_writer(&transcript).commit(&bytes, fsync))
                    .await
                    .map_err(|err| Error::Internal(format!("writing transcript: {err}")))?
            }
            // An append to the page cache is as quick as a thread handoff.
            None => lock_writer(&transcript).commit(&bytes, fsync),
        };
        if outcome.is_err() && created {
            let writer = lock_writer(&transcript);
            if writer.is_empty() {
                // The first append of a new session was refused: the
                // session must not come into being as an empty file.
                // Removed while still locked, so no other process ever
                // sees it.
                let _ = std::fs::remove_file(writer.path());
            }
            drop(writer);
            loaded.transcript = None;
        }
        if outcome.is_ok()
            && let Some(due) = lock_writer(&transcript).checkpoint_due()
        {
            // Off the request: a resume only needs it to be there later.
            tokio::task::spawn_blocking(move || due.run(format));
        }
        outcome.map(|()| Outcome::WRITTEN)
    }

    async fn journal(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        records: &[ReplacementRecord],
        seen: &SeenLine,
        fsync: bool,
    ) -> Result<Outcome> {
        let mut lines = Lines::default();
        for record in records {
            lines.push_record(record);
        }
        if !seen.tool_use_ids.is_empty() {
            lines.push_seen(seen);
        }
        self.commit(key, loaded, lines, fsync, true).await?;
        // The state is the caller's to update: nothing was read back.
        Ok(Outcome::NOTHING)
    }

    async fn fork(&self, target: &SessionKey, source: ForkSource) -> Result<Option<Loaded>> {
        let path = target.transcript_path();
        let files = self.files.clone();
        let parent_id = source.parent.to_string();
        let writer = match source.transcript {
            Some((from, len)) => Some(
                tokio::task::spawn_blocking(move || {
                    let (file, len) = fork_transcript(&parent_id, &from, len, &path)?;
                    // The parent's checkpoint stands for bytes the fork
                    // starts with (the same inodes, through its links):
                    // the fork resumes from it, and proves it as the
                    // parent would.
                    if let (Some(theirs), Some(ours)) =
                        (checkpoint::path_for(&from), checkpoint::path_for(&path))
                    {
                        let _ = std::fs::remove_file(&ours);
                        let _ = std::fs::hard_link(theirs, ours);
                    }
                    let meta = file.metadata().map_err(|err| Error::storage(&path, &err))?;
                    Ok::<_, Error>(TranscriptWriter::new(path, files.wrap(file), len, &meta))
                })
                .await
                .map_err(|e| Error::Internal(e.to_string()))??,
            ),
            None => None,
        };
        let journaled = source.journaled && writer.is_some();
        Ok(Some(Loaded {
            exists: true,
            state: source.state,
            tool_names: source.tool_names,
            transcript: writer.map(|w| Arc::new(Mutex::new(w))),
            guard: Default::default(),
            format: source.format,
            journaled,
            shared_seq: 0,
            pair_row: None,
            incarnation: None,
            hold: None,
        }))
    }

    async fn commit_pair(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: Lines,
        transition: Transition,
        fsync: bool,
    ) -> Result<bool> {
        // The pending pair lives in this process's memory only: it moves
        // once its lines are committed, and nothing else can move it.
        self.commit(key, loaded, lines, fsync, true).await?;
        loaded.guard.apply(transition);
        Ok(true)
    }

    fn shared_by_replicas(&self) -> bool {
        false
    }

    async fn collect(&self, gc: super::Collect) -> Result<crate::retention::GcReport> {
        let super::Collect {
            data_dir,
            objects,
            policy,
            dry_run,
            open,
            mut progress,
        } = gc;
        tokio::task::spawn_blocking(move || {
            crate::retention::collect(
                &data_dir,
                objects.as_deref(),
                &policy,
                dry_run,
                &|id| open.contains(id),
                &mut *progress,
            )
        })
        .await
        .map_err(|err| Error::Internal(format!("gc task failed: {err}")))?
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
    // The parent's last commits may be durable in the commit log only,
    // which names the parent's path: once the fork links the parent's
    // bytes, they must be on the disk whatever later happens at that path.
    parent
        .sync_data()
        .map_err(|err| Error::storage(from, &err))?;
    let (line, links) =
        fork::start_fork(parent_id, &parent, from, len, &fork_id).map_err(storage)?;
    let written = (|| {
        let sync_dir = || std::fs::File::open(dir).and_then(|d| d.sync_all());
        let bytes = line.to_line();
        let mut tmp = crate::private::temp_file_in(dir, ".fork-").map_err(storage)?;
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

fn lock_writer(
    transcript: &Mutex<TranscriptWriter>,
) -> std::sync::MutexGuard<'_, TranscriptWriter> {
    transcript.lock().unwrap_or_else(|p| p.into_inner())
}

/// A small durable commit: appended to the transcript here (the page
/// cache), made durable by the data directory's commit log together with
/// the other sessions' commits of the same moment. Should the log be
/// unable to, the transcript is synced itself, as without a log.
async fn logged_commit(
    wal: &std::sync::Arc<wal::Wal>,
    transcript: &Arc<Mutex<TranscriptWriter>>,
    bytes: Vec<u8>,
) -> Result<()> {
    let len = bytes.len();
    let Some(record) = lock_writer(transcript).stage(bytes)? else {
        return Ok(());
    };
    // The session's commits run one at a time: nothing else writes this
    // transcript until the commit settles.
    let logged = match wal.submit(record) {
        Ok(ack) => ack.await.unwrap_or(false),
        Err(wal::NotLogged) => false,
    };
    if logged {
        return lock_writer(transcript).settle(len, false);
    }
    let transcript = transcript.clone();
    tokio::task::spawn_blocking(move || lock_writer(&transcript).settle(len, true))
        .await
        .map_err(|err| Error::Internal(format!("writing transcript: {err}")))?
}

/// Recover the data directory's commit logs left by dead processes, once
/// per process, before any of its transcripts is read or written.
fn recovered(key: &SessionKey) -> Result<()> {
    wal::open(&key.data_dir)
        .map(drop)
        .map_err(|err| Error::storage(&key.data_dir.join("wal"), &err))
}

fn create_transcript(key: &SessionKey, files: &dyn LogFileFactory) -> Result<TranscriptWriter> {
    recovered(key)?;
    let path = key.transcript_path();
    if let Some(dir) = path.parent() {
        crate::private::create_dir_all(dir).map_err(|err| Error::storage(dir, &err))?;
    }
    let file = writer::open_locked(&path, true)?;
    let meta = file.metadata().map_err(|err| Error::storage(&path, &err))?;
    if meta.len() == 0 {
        // Nothing a checkpoint left here can be of this transcript.
        checkpoint::remove(&path);
    }
    Ok(TranscriptWriter::new(
        path,
        files.wrap(file),
        meta.len(),
        &meta,
    ))
}

fn load_from_disk(key: &SessionKey, files: &dyn LogFileFactory) -> Result<Loaded> {
    recovered(key)?;
    let path = key.transcript_path();
    let mut loaded = Loaded::default();
    match std::fs::symlink_metadata(&path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            loaded.exists = key.session_dir().is_dir();
            loaded.journaled = true;
            return Ok(loaded);
        }
        Err(err) => return Err(Error::storage(&path, &err)),
        // A FIFO or a device planted there would block or never end.
        Ok(meta) if !meta.is_file() => {
            return Err(Error::Storage {
                message: format!("{} is not a regular file", path.display()),
                path: Some(path.display().to_string()),
            });
        }
        Ok(_) => {}
    }
    let file = writer::open_locked_existing(&path)?;
    let storage = |err: std::io::Error| Error::storage(&path, &err);
    let meta = file.metadata().map_err(storage)?;
    let actual = meta.len();
    // A fork's transcript reads through its parent's bytes first.
    let logical = fork::Logical::open(&file, &path, actual).map_err(storage)?;
    // The lines from `start` on, taken into `image`, with a trailing call
    // left without its results cut: how far the transcript is kept (a
    // logical offset), whether its last line was torn, and the image.
    let read_from = |start: u64, mut image: SessionImage, format: crate::format::Format| {
        let (complete, torn) = reader::read_lines(
            format,
            logical.reader_from(start)?,
            reader::ReadLimits::default(),
            || false,
            |span, entry| image.add(span.after(start), entry),
        )?;
        // Only the file's own lines are ours to cut; a parent's committed
        // bytes never end in an open call.
        let keep = match image.open_call_at() {
            Some(at) if at >= logical.inherited => {
                image.cut_open_call();
                at
            }
            _ => {
                image.finish_lenient();
                start + complete
            }
        };
        std::io::Result::Ok((keep, torn, image))
    };
    // Decisions up to a checkpoint that proves itself are read from it,
    // and only the lines after it from the transcript.
    let resumed = match checkpoint::read(&path, &logical) {
        Some(c) => {
            let (keep, torn, mut image) = read_from(c.at, c.image, c.format).map_err(storage)?;
            checkpoint::follow(c.decided, &mut image)
                .map(|decided| (c.format, decided, image, c.at, c.size, keep, torn))
        }
        None => None,
    };
    let (format, decided, image, start, checkpoint_size, keep, torn) = match resumed {
        Some(resumed) => resumed,
        None => {
            let mut head = Vec::new();
            logical
                .reader()
                .and_then(|r| r.take(reader::DETECT_HEAD).read_to_end(&mut head))
                .map_err(storage)?;
            let format = reader::detect_format(&head);
            let (keep, torn, mut image) =
                read_from(0, SessionImage::default(), format).map_err(storage)?;
            // Nothing decided before: the image's decisions follow nothing.
            let decided = checkpoint::follow(Default::default(), &mut image).unwrap_or_default();
            (format, decided, image, 0, 0, keep, torn)
        }
    };
    let keep_logical = keep;
    let keep = logical.physical(keep);
    if keep < actual {
        // A crash between writing the two halves of a commit: cut the torn
        // line and any call left without its results, so no reader ever sees
        // an orphan.
        tracing::warn!(path = %path.display(), torn, cut_bytes = actual - keep, "cutting an incomplete commit off the transcript tail");
        file.set_len(keep).map_err(storage)?;
        file.sync_all().map_err(storage)?;
    }
    // A long read is saved for the next resume: the image stands for the
    // transcript up to `keep` now.
    let mut checkpointed = (logical.physical(start), checkpoint_size);
    if keep_logical.saturating_sub(start) >= checkpoint::refresh_min().max(checkpoint_size) {
        match checkpoint::write(&path, &logical, keep_logical, format, &decided, &image) {
            Ok(Some(size)) => checkpointed = (keep, size),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "could not write the decisions checkpoint")
            }
        }
    }
    // A replacement journaled by `budget/apply` whose message was never
    // appended is still a decision already sent to the provider (`decided`
    // took replacements first); clearings apply over the decisions.
    loaded.state = decided;
    loaded.state.clear(image.cleared.iter().cloned());
    for (id, name) in image.undecided_names {
        if !loaded.state.is_decided(&id) {
            loaded.tool_names.insert_mut(id, name);
        }
    }
    let mut writer = TranscriptWriter::new(path, files.wrap(file), keep, &meta);
    writer.checkpointed(checkpointed.0, checkpointed.1);
    loaded.transcript = Some(Arc::new(Mutex::new(writer)));
    loaded.exists = true;
    loaded.format = Some(format);
    loaded.journaled = true;
    Ok(loaded)
}
