//! The durable transcript writer.
//!
//! Each commit is one append of complete lines, made durable (under
//! `fsync` durability) before the caller is answered: by `fdatasync`, or,
//! for a small commit, by the data directory's commit log ([`wal`]). A
//! failed write is rolled back by truncating to the last committed length,
//! so a full disk never leaves half a line behind in a file the server
//! keeps using. The process holds an exclusive `flock` on every transcript
//! it has open.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::wal;
use crate::error::{Error, Result};

/// The file operations a transcript needs. Behind a trait so tests can make
/// the disk fail mid-commit.
pub trait LogFile: Send {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

impl LogFile for File {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
}

/// Turns an opened (and locked) transcript file into a [`LogFile`].
pub trait LogFileFactory: Send + Sync + 'static {
    fn wrap(&self, file: File) -> Box<dyn LogFile>;
}

/// Plain files.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainFiles;

impl LogFileFactory for PlainFiles {
    fn wrap(&self, file: File) -> Box<dyn LogFile> {
        Box::new(file)
    }
}

pub struct TranscriptWriter {
    path: Arc<Path>,
    file: Box<dyn LogFile>,
    len: u64,
    /// Device and inode of the file, which a commit log record names.
    identity: (u64, u64),
    checkpoint: Arc<CheckpointTrack>,
}

/// How far the transcript's decisions checkpoint
/// ([`super::checkpoint`]) goes, shared with the job that brings it up
/// to date.
#[derive(Debug, Default)]
struct CheckpointTrack {
    /// The transcript's (physical) length the checkpoint stands for.
    len: AtomicU64,
    /// The checkpoint's own size.
    size: AtomicU64,
    /// A job is bringing it up to date.
    busy: AtomicBool,
}

/// A checkpoint to bring up to the transcript's committed length: run it
/// off the async workers (it reads the lines since the last one).
pub struct CheckpointDue {
    path: Arc<Path>,
    len: u64,
    track: Arc<CheckpointTrack>,
}

impl CheckpointDue {
    pub fn run(self, format: crate::format::Format) {
        let refreshed = super::checkpoint::refresh(&self.path, format, self.len);
        // The refresh read a whole state and dropped it (outside the
        // sessions' heap): handed back now, on this blocking thread, since
        // it may end after the pause that released the requests' memory.
        crate::heap::release_free_memory();
        match refreshed {
            Ok(Some(size)) => {
                self.track.len.store(self.len, Ordering::Release);
                self.track.size.store(size, Ordering::Release);
            }
            Ok(None) => {}
            // Only resumes are slower for it: they read more of the
            // transcript.
            Err(err) => {
                tracing::warn!(path = %self.path.display(), %err, "could not write the decisions checkpoint")
            }
        }
        self.track.busy.store(false, Ordering::Release);
    }
}

impl TranscriptWriter {
    /// Adopt an opened, locked file whose committed length is `len`;
    /// `meta` is that open file's own metadata (the caller has read it).
    pub fn new(path: PathBuf, file: Box<dyn LogFile>, len: u64, meta: &Metadata) -> Self {
        TranscriptWriter {
            path: Arc::from(path),
            file,
            len,
            identity: (meta.dev(), meta.ino()),
            checkpoint: Arc::default(),
        }
    }

    /// Say that the decisions checkpoint stands for the transcript's first
    /// `len` bytes and holds `size` bytes.
    pub fn checkpointed(&mut self, len: u64, size: u64) {
        self.checkpoint.len.store(len, Ordering::Release);
        self.checkpoint.size.store(size, Ordering::Release);
    }

    /// The checkpoint job, when enough was committed since the checkpoint
    /// (see [`super::checkpoint::refresh_min`]) and no job is at it.
    pub fn checkpoint_due(&self) -> Option<CheckpointDue> {
        let track = &self.checkpoint;
        let since = self.len.saturating_sub(track.len.load(Ordering::Acquire));
        let due = since >= super::checkpoint::refresh_min().max(track.size.load(Ordering::Acquire));
        (due && !track.busy.swap(true, Ordering::AcqRel)).then(|| CheckpointDue {
            path: self.path.clone(),
            len: self.len,
            track: track.clone(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Length of the committed transcript.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `bytes` (complete lines) to the page cache, as the first half
    /// of a commit whose durability the caller sees to: the record for
    /// the commit log, or `None` (nothing written) when `bytes` is empty.
    /// Until [`TranscriptWriter::settle`], the committed length stays
    /// where it was; a failed append is rolled back here.
    pub fn stage(&mut self, bytes: Vec<u8>) -> Result<Option<wal::Record>> {
        if bytes.is_empty() {
            return Ok(None);
        }
        if let Err(err) = self.file.append(&bytes) {
            self.rollback();
            return Err(Error::storage(&self.path, &err));
        }
        Ok(Some(wal::Record {
            path: self.path.clone(),
            file: self.identity,
            offset: self.len,
            data: bytes,
        }))
    }

    /// Finish a staged commit of `len` bytes: durable in the commit log,
    /// or (`sync`) made durable here. A failed sync is rolled back.
    pub fn settle(&mut self, len: usize, sync: bool) -> Result<()> {
        if sync && let Err(err) = self.file.sync() {
            self.rollback();
            return Err(Error::storage(&self.path, &err));
        }
        self.len += len as u64;
        Ok(())
    }

    /// Take back whatever part of an unsettled commit reached the file.
    pub fn rollback(&mut self) {
        if let Err(undo) = self.file.truncate(self.len) {
            tracing::error!(path = %self.path.display(), %undo, "could not roll back a failed commit; the torn tail is cut on next open");
        }
    }

    /// Append `bytes` (complete lines) as one commit.
    pub fn commit(&mut self, bytes: &[u8], fsync: bool) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let outcome = self
            .file
            .append(bytes)
            .and_then(|()| if fsync { self.file.sync() } else { Ok(()) });
        match outcome {
            Ok(()) => {
                self.len += bytes.len() as u64;
                Ok(())
            }
            Err(err) => {
                self.rollback();
                Err(Error::storage(&self.path, &err))
            }
        }
    }
}

/// Open (creating if asked) and exclusively lock a transcript file.
pub fn open_locked(path: &Path, create: bool) -> Result<File> {
    let file = crate::private::file_options()
        .read(true)
        .append(true)
        .create(create)
        .open(path)
        .map_err(|err| Error::storage(path, &err))?;
    lock(&file, path)?;
    Ok(file)
}

/// As [`open_locked`] an existing transcript, or, where this process may
/// only read it (a read-only data directory), opened for reading: the
/// session then serves reads, and a commit to it fails with the file
/// system's refusal.
pub fn open_locked_existing(path: &Path) -> Result<File> {
    let file = match OpenOptions::new().read(true).append(true).open(path) {
        Ok(file) => file,
        Err(err) if super::wal::is_read_only(&err) => {
            File::open(path).map_err(|err| Error::storage(path, &err))?
        }
        Err(err) => return Err(Error::storage(path, &err)),
    };
    lock(&file, path)?;
    Ok(file)
}

/// How long a lock held by someone else may be waited for before the
/// transcript counts as held: `toolwire gc` (in this process or another)
/// probes a transcript's lock for an instant to learn whether a server has
/// it open, and a session opened at that instant must not fail for it. A
/// server that really holds the transcript holds it far longer.
const LOCK_ATTEMPTS: u32 = 20;
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(5);

pub fn lock(file: &File, path: &Path) -> Result<()> {
    let mut attempt = 1;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if attempt < LOCK_ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(LOCK_RETRY);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::TranscriptLocked {
                    path: path.display().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(Error::storage(path, &err)),
        }
    }
}
