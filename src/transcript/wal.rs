//! Group commit for durable transcript appends: a write-ahead log per data
//! directory and process, `<dataDir>/wal/<name>.wal`.
//!
//! Under `durability: fsync` every commit must be on the disk before its
//! reply. Syncing each session's transcript costs a file-system journal
//! commit per append, and a server that multiplexes sessions on a few
//! threads pays a handoff to a blocking thread per sync on top. Instead, a
//! small commit is appended to its transcript (the page cache) and a copy of
//! its bytes is queued here; one thread writes whatever is queued as one
//! batch into a preallocated log file, and two flusher threads sync it,
//! once for every session in the batch. Writes inside a file's existing,
//! already written blocks need no journal commit, so that sync is a data
//! flush only. Two syncs may be in flight ([`FLUSHERS`]), each covering
//! every batch written before it began; a batch's commits are answered
//! once it and every batch before it are synced, so an answered commit
//! never sits after a record that might be torn.
//!
//! The transcripts themselves are synced at a checkpoint: when the log is
//! full, or when it has been idle for [`CHECKPOINT_AFTER`]. Only then is the
//! log reset, by clearing its first record (synced) and starting a new
//! generation from the top.
//!
//! A record names its transcript by path and by the device and inode the
//! bytes went to, and holds the offset and the bytes:
//!
//! ```text
//! magic u32 "TWL1" | generation u64 | sequence u64 | device u64 | inode u64
//! | offset u64 | path length u32 | data length u32 | path | data | xxh3-64
//! ```
//!
//! (little-endian; the hash covers everything before it). The live records
//! are the run from the top of the file that starts with sequence 0 and
//! keeps one generation and consecutive sequences with a good hash: a torn
//! write, a cleared first record or an older generation ends it.
//!
//! **Recovery** ([`open`], once per data directory and process, before any
//! transcript in it is read or written): every log whose lock is free
//! belongs to a process that is gone. Its records are grouped by inode; a
//! record at offset `o` supersedes the same log's earlier records at `o` or
//! later (a failed commit was rolled back and the offset reused). Each
//! transcript then gets the bytes it lacks: a record whose range the file
//! already holds is checked byte for byte and passed; one the file stops
//! short of is written from the file's end; a mismatch, a gap, another
//! inode at the path or a transcript another process holds stops that
//! transcript's replay (it was rewritten or is in use, and the log is
//! stale for it). Repaired transcripts are synced before the orphan logs
//! are deleted. After a process is killed with the machine still up, the
//! page cache already holds every byte, so recovery only compares; after a
//! power loss it restores what the transcripts' unsynced tails lost.
//!
//! When a write or sync of the log fails, the log is disabled for the rest
//! of the process: the waiting commits and every later one sync their
//! transcripts themselves, as without a log, and the file is kept for the
//! next start's recovery.
//!
//! Two cases recovery cannot tell apart, both needing a power loss on top
//! of something else: a commit whose log sync failed *and* whose own sync
//! then failed too is rolled back and answered with an error, yet its
//! record may have reached the disk; if nothing was committed after it,
//! replay puts it back. And a transcript removed and made again at the
//! same path, given the same inode number by the file system, within the
//! time the log still holds the old one's records (at most until the next
//! checkpoint), could get an old record replayed if it is exactly as long
//! as the old one was at that record.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use xxhash_rust::xxh3::xxh3_64;

/// The log's size, written with zeros once when it is made.
pub const SEGMENT: u64 = 1 << 20;

/// The largest commit that goes through the log; a larger one syncs its
/// transcript directly (copying it twice would cost more than its sync).
pub const MAX_RECORD: usize = 64 << 10;

/// How many syncs of the log may be in flight at once. With one at a time
/// the device sits idle while the thread that waited for a sync is woken
/// and writes the next batch, which on a busy machine takes milliseconds:
/// 16 sessions each syncing a file of their own then outran the log. Syncs
/// of one file overlap on the device as those of separate files do, and a
/// sync covers every byte written to the file before it began, so each
/// flusher takes every batch written since the last sync started. Four
/// split 16 waiting sessions into syncs of about four commits, and the
/// syncs took a quarter of the server's CPU: with two, the commits that
/// arrive while both run all go into the next one (`cargo bench --bench
/// storage -- stdio`, docs/benchmarks.md).
pub const FLUSHERS: usize = 2;

/// How long the log may hold records with no new commit before the
/// transcripts are synced and it is reset.
pub const CHECKPOINT_AFTER: Duration = Duration::from_millis(500);

const MAGIC: [u8; 4] = *b"TWL1";
/// magic, generation, sequence, device, inode, offset, two lengths.
const HEAD: usize = 4 + 8 * 5 + 4 + 4;
const HASH: usize = 8;

/// One commit as the log keeps it.
#[derive(Debug, Clone)]
pub struct Record {
    pub path: Arc<Path>,
    /// Device and inode of the transcript the bytes were appended to.
    pub file: (u64, u64),
    pub offset: u64,
    pub data: Vec<u8>,
}

impl Record {
    fn encoded_len(&self) -> usize {
        HEAD + self.path.as_os_str().len() + self.data.len() + HASH
    }

    fn encode(&self, generation: u64, sequence: u64, out: &mut Vec<u8>) {
        use std::os::unix::ffi::OsStrExt;
        let start = out.len();
        let path = self.path.as_os_str().as_bytes();
        out.extend_from_slice(&MAGIC);
        for n in [generation, sequence, self.file.0, self.file.1, self.offset] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        // Both fit: paths are short, data is at most MAX_RECORD.
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(&self.data);
        let hash = xxh3_64(&out[start..]);
        out.extend_from_slice(&hash.to_le_bytes());
    }
}

/// The live records of a log file's bytes, in order (see the module docs).
pub fn decode(bytes: &[u8]) -> Vec<Record> {
    use std::os::unix::ffi::OsStrExt;
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let u32_at = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let mut records = Vec::new();
    let mut pos = 0;
    let mut generation = None;
    loop {
        let one = || -> Option<(u64, Record, usize)> {
            if bytes.get(pos..pos + 4)? != MAGIC {
                return None;
            }
            let sequence = u64_at(pos + 12)?;
            let path_len = u32_at(pos + 44)?;
            let data_len = u32_at(pos + 48)?;
            let end = (pos + HEAD).checked_add(path_len)?.checked_add(data_len)?;
            let hash = u64_at(end)?;
            if xxh3_64(bytes.get(pos..end)?) != hash || sequence != records.len() as u64 {
                return None;
            }
            let path = Path::new(std::ffi::OsStr::from_bytes(
                &bytes[pos + HEAD..pos + HEAD + path_len],
            ));
            let record = Record {
                path: Arc::from(path),
                file: (u64_at(pos + 20)?, u64_at(pos + 28)?),
                offset: u64_at(pos + 36)?,
                data: bytes[pos + HEAD + path_len..end].to_vec(),
            };
            Some((u64_at(pos + 4)?, record, end + HASH))
        };
        match one() {
            Some((g, record, next)) if *generation.get_or_insert(g) == g => {
                records.push(record);
                pos = next;
            }
            _ => return records,
        }
    }
}

/// The log of one data directory in this process.
pub struct Wal {
    dir: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    queue: Vec<(Record, oneshot::Sender<bool>)>,
    /// The writing thread, once started.
    thread: Option<std::thread::JoinHandle<()>>,
    /// A write or sync failed, or the process is ending: commits sync
    /// their transcripts themselves.
    disabled: bool,
    /// [`close_all`] asked the thread to checkpoint and end.
    closing: bool,
}

/// Why a commit's record was not made durable by the log: the caller
/// syncs its transcript itself.
#[derive(Debug)]
pub struct NotLogged;

impl Wal {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `record` for the next batch; the answer is `true` once the
    /// log holds it on the disk, `false` (or a dropped sender) when the
    /// caller must sync its transcript itself.
    pub fn submit(self: &Arc<Self>, record: Record) -> Result<oneshot::Receiver<bool>, NotLogged> {
        let (tx, rx) = oneshot::channel();
        let mut state = self.lock();
        if state.disabled {
            return Err(NotLogged);
        }
        if state.thread.is_none() {
            let wal = self.clone();
            let thread = std::thread::Builder::new()
                .name("toolwire-wal".into())
                .spawn(move || {
                    let run = std::panic::AssertUnwindSafe(|| wal.clone().run());
                    if std::panic::catch_unwind(run).is_err() {
                        // No commit may wait on a thread that is gone.
                        wal.disable();
                    }
                })
                .map_err(|_| NotLogged)?;
            state.thread = Some(thread);
        }
        state.queue.push((record, tx));
        drop(state);
        self.wake.notify_one();
        Ok(rx)
    }

    /// The writing thread, for the process's life: it writes each batch of
    /// queued records into the log as it comes and leaves the syncs to
    /// [`FLUSHERS`] threads, so that several can be in flight; a commit is
    /// acknowledged once its batch and every batch before it are synced.
    fn run(self: Arc<Self>) {
        let mut log = match Log::create(&self.dir) {
            Ok(log) => log,
            Err(err) => {
                tracing::error!(dir = %self.dir.display(), %err, "cannot make the commit log; transcripts are synced one by one");
                self.disable();
                return;
            }
        };
        let flushes = match Flushes::start(&log.file) {
            Ok(flushes) => flushes,
            Err(err) => return self.fail(&log, &err),
        };
        let mut buf = Vec::new();
        loop {
            let batch = {
                let mut state = self.lock();
                while state.queue.is_empty() {
                    if state.closing {
                        drop(state);
                        if let Err(err) = flushes.settle() {
                            return self.fail(&log, &err);
                        }
                        return self.close(log);
                    }
                    if log.dirty.is_empty() {
                        state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                        continue;
                    }
                    let (next, timeout) = self
                        .wake
                        .wait_timeout(state, CHECKPOINT_AFTER)
                        .unwrap_or_else(|p| p.into_inner());
                    state = next;
                    if timeout.timed_out() && state.queue.is_empty() {
                        drop(state);
                        if let Err(err) = flushes.settle().and_then(|()| log.checkpoint()) {
                            return self.fail(&log, &err);
                        }
                        state = self.lock();
                    }
                }
                // As many as fit after the records already in the log; a
                // full log is checkpointed first, once every sync of what
                // it holds is done.
                let mut room = SEGMENT - log.pos;
                if state.queue[0].0.encoded_len() as u64 > room {
                    drop(state);
                    if let Err(err) = flushes.settle().and_then(|()| log.checkpoint()) {
                        return self.fail(&log, &err);
                    }
                    state = self.lock();
                    room = SEGMENT;
                }
                let mut take = 0;
                for (record, _) in &state.queue {
                    let len = record.encoded_len() as u64;
                    if len > room {
                        break;
                    }
                    room -= len;
                    take += 1;
                }
                state.queue.drain(..take).collect::<Vec<_>>()
            };
            buf.clear();
            for (record, _) in &batch {
                record.encode(log.generation, log.sequence, &mut buf);
                log.sequence += 1;
            }
            match log.write(&buf) {
                Ok(()) => {
                    let mut acks = Vec::with_capacity(batch.len());
                    for (record, done) in batch {
                        log.dirty.insert(record.file, record.path);
                        acks.push(done);
                    }
                    if let Err(err) = flushes.push(acks) {
                        return self.fail(&log, &err);
                    }
                }
                Err(err) => {
                    // Dropping the batch's senders tells its waiters to
                    // sync themselves; the batches before it are still
                    // acknowledged as their syncs finish.
                    drop(batch);
                    return self.fail(&log, &err);
                }
            }
        }
    }

    /// The process is ending: sync the transcripts and remove the log,
    /// which then holds nothing a recovery would need.
    fn close(&self, mut log: Log) {
        match log.checkpoint() {
            Ok(()) => {
                if let Err(err) = std::fs::remove_file(&log.path) {
                    tracing::warn!(path = %log.path.display(), %err, "could not remove the commit log");
                }
            }
            Err(err) => self.fail(&log, &err),
        }
    }

    /// Stop logging: every waiting and later commit syncs its own
    /// transcript. The file stays for the next start's recovery.
    fn fail(&self, log: &Log, err: &io::Error) {
        tracing::error!(path = %log.path.display(), %err, "the commit log failed; transcripts are synced one by one from now on");
        self.disable();
    }

    fn disable(&self) {
        let queue = {
            let mut state = self.lock();
            state.disabled = true;
            std::mem::take(&mut state.queue)
        };
        // Dropping the senders tells each waiter to sync itself.
        drop(queue);
    }
}

/// This process's log file.
struct Log {
    path: PathBuf,
    file: File,
    generation: u64,
    sequence: u64,
    pos: u64,
    /// Transcripts with records in this generation, by device and inode.
    dirty: HashMap<(u64, u64), Arc<Path>>,
}

impl Log {
    /// Make a zero-filled log, locked, under a temporary name, and give it
    /// its name only once it is whole on the disk: recovery never sees a
    /// log that is not locked by a live process or left by a dead one.
    fn create(dir: &Path) -> io::Result<Log> {
        crate::private::create_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            File::open(parent)?.sync_all()?;
        }
        let tmp = crate::private::temp_file_in(dir, ".wal-")?;
        tmp.as_file().lock()?;
        let zeros = vec![0u8; 64 << 10];
        let mut at = 0;
        while at < SEGMENT {
            tmp.as_file().write_all_at(&zeros, at)?;
            at += zeros.len() as u64;
        }
        tmp.as_file().sync_all()?;
        let path = dir.join(format!("{:016x}.wal", random()));
        let file = tmp.persist_noclobber(&path).map_err(|e| e.error)?;
        File::open(dir)?.sync_all()?;
        Ok(Log {
            path,
            file,
            generation: random(),
            sequence: 0,
            pos: 0,
            dirty: HashMap::new(),
        })
    }

    /// Write a batch after the records already in the log; the flushers
    /// sync it.
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, self.pos)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Sync every transcript the log has records for, then reset it: its
    /// first record is cleared on the disk before a new generation starts
    /// from the top.
    fn checkpoint(&mut self) -> io::Result<()> {
        // Side by side: each transcript's sync waits for a journal commit,
        // and the file system commits the ones in flight together. One
        // after another, 16 sessions' transcripts took 30 ms on a busy
        // machine, during which no commit was answered.
        let dirty: Vec<_> = self.dirty.iter().collect();
        let part = dirty.len().div_ceil(CHECKPOINT_THREADS).max(1);
        std::thread::scope(|scope| {
            let mut synced = Ok(());
            let mut threads = Vec::new();
            for files in dirty.chunks(part) {
                let sync = move || {
                    files
                        .iter()
                        .try_for_each(|(file, path)| sync_transcript(**file, path))
                };
                match std::thread::Builder::new().spawn_scoped(scope, sync) {
                    Ok(thread) => threads.push(thread),
                    // No thread to spare: this one syncs them.
                    Err(_) => synced = synced.and_then(|()| sync()),
                }
            }
            for thread in threads {
                let outcome = thread
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a transcript's sync panicked")));
                synced = synced.and(outcome);
            }
            synced
        })?;
        self.dirty.clear();
        if self.pos > 0 {
            self.file.write_all_at(&[0; 4], 0)?;
            self.file.sync_data()?;
        }
        self.generation = random();
        self.sequence = 0;
        self.pos = 0;
        Ok(())
    }
}

/// The writing thread's hold on its flushers: however the thread ends (a
/// panic included), they stop and drop what they have not synced, whose
/// waiters then sync their transcripts themselves, so no commit waits on a
/// batch nobody will sync.
struct Flushers(Arc<Flushes>);

impl Drop for Flushers {
    fn drop(&mut self) {
        self.0.stop();
    }
}

impl std::ops::Deref for Flushers {
    type Target = Flushes;
    fn deref(&self) -> &Flushes {
        &self.0
    }
}

/// The batches written to the log and not yet acknowledged, shared by the
/// writing thread and the flusher threads that sync them.
struct Flushes {
    state: Mutex<Flushing>,
    /// A batch was written, or the flushers are to stop.
    work: Condvar,
    /// A sync finished.
    done: Condvar,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct Flushing {
    /// Oldest first; each batch's commits are acknowledged once it and
    /// every batch before it are synced.
    batches: VecDeque<Written>,
    /// The id the next written batch gets.
    next_id: u64,
    /// The first batch no started sync covers.
    uncovered: u64,
    /// A sync failed: no later batch is acknowledged (a sync after a
    /// failed one may report success for pages the kernel gave up on).
    failed: Option<io::ErrorKind>,
    stop: bool,
}

struct Written {
    id: u64,
    acks: Vec<oneshot::Sender<bool>>,
    synced: bool,
}

impl Flushes {
    fn lock(&self) -> MutexGuard<'_, Flushing> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start the flusher threads of the log `file`.
    fn start(file: &File) -> io::Result<Flushers> {
        let flushes = Arc::new(Flushes {
            state: Mutex::new(Flushing::default()),
            work: Condvar::new(),
            done: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        });
        let mut threads = Vec::new();
        for _ in 0..FLUSHERS {
            let file = file.try_clone()?;
            let me = flushes.clone();
            let spawned = std::thread::Builder::new()
                .name("toolwire-wal-sync".into())
                .spawn(move || me.flush(&file));
            match spawned {
                Ok(thread) => threads.push(thread),
                // Fewer flushers only means fewer syncs in flight.
                Err(_) if !threads.is_empty() => break,
                Err(err) => return Err(err),
            }
        }
        *flushes.threads.lock().unwrap_or_else(|p| p.into_inner()) = threads;
        Ok(Flushers(flushes))
    }

    /// Hand a written batch's waiters to the flushers.
    fn push(&self, acks: Vec<oneshot::Sender<bool>>) -> io::Result<()> {
        let mut state = self.lock();
        if let Some(kind) = state.failed {
            // Dropped: its waiters sync their transcripts themselves.
            return Err(kind.into());
        }
        let id = state.next_id;
        state.next_id += 1;
        state.batches.push_back(Written {
            id,
            acks,
            synced: false,
        });
        drop(state);
        self.work.notify_one();
        Ok(())
    }

    /// Wait until every written batch is synced and acknowledged (before a
    /// checkpoint resets the log), or a sync has failed.
    fn settle(&self) -> io::Result<()> {
        let mut state = self.lock();
        loop {
            if let Some(kind) = state.failed {
                return Err(kind.into());
            }
            if state.batches.is_empty() {
                return Ok(());
            }
            state = self.done.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// End the flushers; a batch not yet synced is dropped, and its
    /// waiters sync their transcripts themselves.
    fn stop(&self) {
        let mut state = self.lock();
        state.stop = true;
        state.batches.clear();
        drop(state);
        self.work.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for thread in threads {
            let _ = thread.join();
        }
    }

    /// One flusher: sync every batch written since the last sync started,
    /// then acknowledge the synced batches at the front.
    fn flush(&self, file: &File) {
        let mut state = self.lock();
        loop {
            if state.stop {
                return;
            }
            let last = state.batches.back().map(|b| b.id);
            let Some(last) = last.filter(|&last| last >= state.uncovered) else {
                state = self.work.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            let covered = state.uncovered..last + 1;
            state.uncovered = last + 1;
            drop(state);
            let synced = file.sync_data();
            state = self.lock();
            match synced {
                Ok(()) if state.failed.is_none() => {
                    for batch in &mut state.batches {
                        if covered.contains(&batch.id) {
                            batch.synced = true;
                        }
                    }
                    while state.batches.front().is_some_and(|b| b.synced) {
                        let Some(batch) = state.batches.pop_front() else {
                            break;
                        };
                        for ack in batch.acks {
                            let _ = ack.send(true);
                        }
                    }
                }
                Ok(()) => {}
                Err(err) => {
                    state.failed.get_or_insert(err.kind());
                    // Every waiter syncs its transcript itself.
                    state.batches.clear();
                }
            }
            self.done.notify_all();
        }
    }
}

/// How many threads a checkpoint syncs its transcripts on.
const CHECKPOINT_THREADS: usize = 16;

/// Sync a transcript the log has records for, unless it was replaced
/// (repaired: the old inode is gone) or removed (collected) since.
fn sync_transcript((dev, ino): (u64, u64), path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(file) => {
            let meta = file.metadata()?;
            if (meta.dev(), meta.ino()) == (dev, ino) {
                file.sync_data()?;
            }
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

fn random() -> u64 {
    RandomState::new().hash_one(Instant::now())
}

fn registry() -> MutexGuard<'static, HashMap<PathBuf, Arc<Wal>>> {
    static WALS: OnceLock<Mutex<HashMap<PathBuf, Arc<Wal>>>> = OnceLock::new();
    WALS.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The log of `data_dir` if [`open`] has made it: a transcript is only
/// written after it was opened, so a commit never recovers.
pub fn get(data_dir: &Path) -> Option<Arc<Wal>> {
    registry().get(data_dir).cloned()
}

/// The log of `data_dir`, after recovering what logs of dead processes
/// hold for it (once per data directory and process). Blocking.
pub fn open(data_dir: &Path) -> io::Result<Arc<Wal>> {
    if let Some(wal) = get(data_dir) {
        return Ok(wal);
    }
    // Outside the registry's lock, which commits take: recovery's own lock
    // file makes a second caller wait until the first is done.
    let dir = data_dir.join("wal");
    recover(&dir)?;
    let wal = registry()
        .entry(data_dir.to_path_buf())
        .or_insert_with(|| {
            Arc::new(Wal {
                dir,
                state: Mutex::new(State::default()),
                wake: Condvar::new(),
            })
        })
        .clone();
    Ok(wal)
}

/// Checkpoint and remove every log this process made, for a clean exit.
/// Commits after this sync their transcripts themselves.
pub fn close_all() {
    let wals: Vec<_> = registry().values().cloned().collect();
    for wal in wals {
        let thread = {
            let mut state = wal.lock();
            state.closing = true;
            state.disabled = true;
            state.thread.take()
        };
        wal.wake.notify_all();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

/// Recover the logs of the data directory a transcript at
/// `<dataDir>/sessions/<id>.jsonl` belongs to, for a command that reads or
/// rewrites it outside a server. A path elsewhere has no log.
pub fn recover_beside(transcript: &Path) -> io::Result<()> {
    let Ok(path) = transcript.canonicalize() else {
        return Ok(());
    };
    let data_dir = path
        .parent()
        .filter(|dir| dir.file_name().is_some_and(|n| n == "sessions"))
        .and_then(Path::parent);
    match data_dir {
        Some(data_dir) if data_dir.join("wal").is_dir() => open(data_dir).map(drop),
        _ => Ok(()),
    }
}

/// Whether `err` says the file system refuses writes here (read-only, or
/// not ours to write), rather than that something is broken.
pub fn is_read_only(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    )
}

/// The named log files of `data_dir` (live or orphaned), for inspection.
pub fn log_files(data_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(data_dir.join("wal"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wal") {
            logs.push(path);
        }
    }
    Ok(logs)
}

/// What [`recover`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub logs: usize,
    pub records: usize,
    /// Bytes written back into transcripts.
    pub restored: u64,
}

/// Replay the logs in `dir` that no live process holds into their
/// transcripts, then delete them (see the module docs).
pub fn recover(dir: &Path) -> io::Result<Recovered> {
    let mut done = Recovered::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // Nothing there, or something in the way that is no log (the
        // log cannot be made there either, and commits sync themselves).
        Err(err)
            if matches!(
                err.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(done);
        }
        Err(err) => return Err(err),
    };
    // One recovery at a time: a second process waits for the first to
    // finish rather than read transcripts it is still mending.
    let guard = match crate::private::file_options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("recover.lock"))
    {
        Ok(guard) => guard,
        // A data directory this process may only read (mounted read-only,
        // another user's): it can mend nothing there, and reads must not
        // need the log. A log a dead process left stays for a process
        // that can write to replay; until then reads see the transcripts
        // as they are on disk, without the commits only that log holds.
        Err(err) if is_read_only(&err) => {
            let left = log_files(dir.parent().unwrap_or(dir)).map_or(0, |logs| logs.len());
            if left > 0 {
                tracing::warn!(dir = %dir.display(), logs = left, "read-only data directory: commit logs left by a dead process cannot be replayed; reading the transcripts as they are");
            }
            return Ok(done);
        }
        Err(err) => return Err(err),
    };
    guard.lock()?;
    let mut orphans = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let temporary = name.starts_with(".wal-");
        if !temporary && !name.ends_with(".wal") {
            continue;
        }
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(err)) => return Err(err),
        }
        if temporary {
            // A log its maker died before naming: it never held a commit.
            std::fs::remove_file(&path)?;
            continue;
        }
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut &file, &mut bytes)?;
        orphans.push((path, file, decode(&bytes)));
    }
    // By transcript; within one log, a record supersedes its earlier ones
    // at its offset or beyond.
    let mut by_file: HashMap<(u64, u64), Vec<Record>> = HashMap::new();
    for (_, _, records) in &orphans {
        let mut mine: HashMap<(u64, u64), Vec<Record>> = HashMap::new();
        for record in records {
            let list = mine.entry(record.file).or_default();
            list.retain(|r| r.offset < record.offset);
            list.push(record.clone());
        }
        for (file, list) in mine {
            by_file.entry(file).or_default().extend(list);
        }
    }
    for (file, mut records) in by_file {
        records.sort_by_key(|r| r.offset);
        done.records += records.len();
        done.restored += replay(file, &records)?;
    }
    for (path, _file, _) in &orphans {
        std::fs::remove_file(path)?;
    }
    if !orphans.is_empty() {
        File::open(dir)?.sync_all()?;
    }
    done.logs = orphans.len();
    drop(guard);
    Ok(done)
}

/// Give one transcript the bytes of `records` (sorted by offset) it lacks;
/// the bytes written. Synced before returning.
fn replay((dev, ino): (u64, u64), records: &[Record]) -> io::Result<u64> {
    let Some(first) = records.first() else {
        return Ok(0);
    };
    let path = &first.path;
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let meta = file.metadata()?;
    if (meta.dev(), meta.ino()) != (dev, ino) || !meta.is_file() {
        return Ok(0);
    }
    match file.try_lock() {
        Ok(()) => {}
        // A live process has it open: it recovered before opening it.
        Err(std::fs::TryLockError::WouldBlock) => return Ok(0),
        Err(std::fs::TryLockError::Error(err)) => return Err(err),
    }
    let mut len = meta.len();
    let mut written = 0;
    let mut held = Vec::new();
    for record in records {
        let end = record.offset + record.data.len() as u64;
        if record.offset > len {
            tracing::warn!(path = %path.display(), offset = record.offset, len, "commit log record past the transcript's end; not replayed");
            break;
        }
        let have = (len.min(end) - record.offset) as usize;
        held.resize(have, 0);
        file.read_exact_at(&mut held, record.offset)?;
        if held != record.data[..have] {
            tracing::warn!(path = %path.display(), offset = record.offset, "transcript differs from its commit log; not replayed");
            break;
        }
        if end > len {
            file.write_all_at(&record.data[have..], len)?;
            written += end - len;
            len = end;
        }
    }
    if written > 0 {
        file.sync_data()?;
        tracing::warn!(path = %path.display(), bytes = written, "restored committed lines from the commit log");
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &Path, offset: u64, data: &[u8]) -> Record {
        let meta = std::fs::metadata(path).unwrap();
        Record {
            path: Arc::from(path),
            file: (meta.dev(), meta.ino()),
            offset,
            data: data.to_vec(),
        }
    }

    fn log_of(records: &[Record], generation: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, r) in records.iter().enumerate() {
            r.encode(generation, i as u64, &mut out);
        }
        out
    }

    #[test]
    fn records_read_back_until_the_first_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.jsonl");
        std::fs::write(&t, b"").unwrap();
        let records: Vec<_> = (0..5)
            .map(|i| record(&t, i * 10, format!("line {i}\n").as_bytes()))
            .collect();
        let mut bytes = log_of(&records, 7);
        let whole = bytes.len();
        bytes.resize(SEGMENT as usize, 0);
        let back = decode(&bytes);
        assert_eq!(back.len(), 5);
        assert_eq!(back[3].data, b"line 3\n");
        assert_eq!(back[4].offset, 40);
        // A torn last record ends the run there.
        let mut torn = bytes.clone();
        torn[whole - 3] ^= 1;
        assert_eq!(decode(&torn).len(), 4);
        // Records of an older generation after the live ones are not read.
        let mut older = log_of(&records[..2], 9);
        older.extend_from_slice(&log_of(&records, 7)[older.len()..]);
        assert_eq!(decode(&older).len(), 2);
        // A cleared first record hides the whole log.
        let mut cleared = bytes;
        cleared[..4].fill(0);
        assert!(decode(&cleared).is_empty());
        // So does a log whose first record is not sequence 0.
        let mut skipped = Vec::new();
        records[0].encode(7, 1, &mut skipped);
        assert!(decode(&skipped).is_empty());
    }

    /// Write an orphan log (not locked by anyone) holding `records`.
    fn orphan(dir: &Path, records: &[Record]) {
        std::fs::create_dir_all(dir).unwrap();
        let mut bytes = log_of(records, 3);
        bytes.resize(SEGMENT as usize, 0);
        std::fs::write(dir.join(format!("{:016x}.wal", random())), bytes).unwrap();
    }

    /// A scratch directory with a log directory path and one transcript
    /// holding `content`.
    fn scratch(content: &[u8]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let wal = root.path().join("wal");
        let t = root.path().join("t.jsonl");
        std::fs::write(&t, content).unwrap();
        (root, wal, t)
    }

    #[test]
    fn recovery_restores_lost_tails_and_checks_the_rest() {
        let (root, wal, a) = scratch(b"one\ntwo\n");
        let b = root.path().join("b.jsonl");
        std::fs::write(&b, b"x\n").unwrap();
        // `a` lost its last commit entirely and half of the one before;
        // `b` kept everything.
        let records = [
            record(&a, 0, b"one\n"),
            record(&b, 0, b"x\n"),
            record(&a, 4, b"two\nthree\n"),
            record(&a, 14, b"four\n"),
        ];
        orphan(&wal, &records);
        let done = recover(&wal).unwrap();
        assert_eq!(
            done,
            Recovered {
                logs: 1,
                records: 4,
                restored: 11
            }
        );
        assert_eq!(std::fs::read(&a).unwrap(), b"one\ntwo\nthree\nfour\n");
        assert_eq!(std::fs::read(&b).unwrap(), b"x\n");
        // The orphan is gone; a second recovery finds nothing.
        assert_eq!(recover(&wal).unwrap(), Recovered::default());
    }

    #[test]
    fn recovery_never_writes_over_what_it_cannot_vouch_for() {
        let (root, wal, changed) = scratch(b"");
        let replaced = root.path().join("replaced.jsonl");
        let held = root.path().join("held.jsonl");
        let gap = root.path().join("gap.jsonl");
        for p in [&replaced, &held, &gap] {
            std::fs::write(p, b"").unwrap();
        }
        let records = [
            record(&changed, 0, b"old\n"),
            record(&replaced, 0, b"old\n"),
            record(&held, 0, b"old\n"),
            record(&gap, 10, b"late\n"),
        ];
        std::fs::write(&changed, b"new\n").unwrap();
        // A rewrite by rename: another inode at the same path.
        let tmp = root.path().join("tmp");
        std::fs::write(&tmp, b"").unwrap();
        std::fs::rename(&tmp, &replaced).unwrap();
        let holder = File::open(&held).unwrap();
        holder.lock().unwrap();
        orphan(&wal, &records);
        let done = recover(&wal).unwrap();
        assert_eq!(done.restored, 0);
        assert_eq!(std::fs::read(&changed).unwrap(), b"new\n");
        assert_eq!(std::fs::read(&replaced).unwrap(), b"");
        assert_eq!(std::fs::read(&held).unwrap(), b"");
        assert_eq!(std::fs::read(&gap).unwrap(), b"");
    }

    #[test]
    fn a_rolled_back_commit_is_not_replayed_over_the_one_after_it() {
        let (_root, wal, t) = scratch(b"a\n");
        // `failed` reached the log but was rolled back; `retried` took its
        // offset; both were lost from the transcript.
        let records = [
            record(&t, 0, b"a\n"),
            record(&t, 2, b"failed\n"),
            record(&t, 2, b"retried\n"),
        ];
        orphan(&wal, &records);
        recover(&wal).unwrap();
        assert_eq!(std::fs::read(&t).unwrap(), b"a\nretried\n");
    }

    #[test]
    fn a_live_process_log_is_left_alone() {
        let (_root, wal, t) = scratch(b"");
        orphan(&wal, &[record(&t, 0, b"kept\n")]);
        let name = std::fs::read_dir(&wal)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "wal"))
            .unwrap();
        let live = File::open(&name).unwrap();
        live.lock().unwrap();
        assert_eq!(recover(&wal).unwrap(), Recovered::default());
        assert!(name.exists());
        assert_eq!(std::fs::read(&t).unwrap(), b"");
        drop(live);
        assert_eq!(recover(&wal).unwrap().restored, 5);
        assert_eq!(std::fs::read(&t).unwrap(), b"kept\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_written_batch_is_answered_once_synced() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create(dir.path().join("log")).unwrap();
        let flushes = Flushes::start(&file).unwrap();
        let mut answers = Vec::new();
        for _ in 0..200 {
            let (tx, rx) = oneshot::channel();
            flushes.push(vec![tx]).unwrap();
            answers.push(rx);
        }
        flushes.settle().unwrap();
        for answer in answers {
            assert_eq!(answer.await, Ok(true));
        }
    }

    #[tokio::test]
    async fn after_a_failed_sync_no_batch_is_answered_as_logged() {
        // A pipe cannot be synced (EINVAL): every sync of it fails.
        let (_read, write) = std::io::pipe().unwrap();
        let file = File::from(std::os::fd::OwnedFd::from(write));
        let flushes = Flushes::start(&file).unwrap();
        let (tx, rx) = oneshot::channel();
        flushes.push(vec![tx]).unwrap();
        // Dropped, not answered: its waiter syncs its transcript itself.
        assert!(rx.await.is_err());
        assert!(flushes.settle().is_err());
        let (tx, rx) = oneshot::channel();
        assert!(flushes.push(vec![tx]).is_err());
        assert!(rx.await.is_err());
    }

    /// A fresh data directory and its (not yet made) log.
    fn data_dir_with_log() -> (tempfile::TempDir, PathBuf, Arc<Wal>) {
        let root = tempfile::tempdir().unwrap();
        let data_dir = root.path().join("data");
        std::fs::create_dir_all(&data_dir).unwrap();
        let wal = open(&data_dir).unwrap();
        (root, data_dir, wal)
    }

    /// The one log file of `data_dir`.
    fn the_log(data_dir: &Path) -> PathBuf {
        let logs = log_files(data_dir).unwrap();
        assert_eq!(logs.len(), 1, "{logs:?}");
        logs.into_iter().next().unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commits_are_logged_in_batches_and_checkpointed() {
        let (_root, data_dir, wal) = data_dir_with_log();
        let mut waits = Vec::new();
        for i in 0..50u64 {
            let t = data_dir.join(format!("{}.jsonl", i % 5));
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&t)
                .unwrap();
            let r = record(&t, i, b"x\n");
            waits.push(wal.submit(r).unwrap());
        }
        for w in waits {
            assert!(w.await.unwrap());
        }
        let logs = [the_log(&data_dir)];
        assert_eq!(std::fs::metadata(&logs[0]).unwrap().len(), SEGMENT);
        let live = decode(&std::fs::read(&logs[0]).unwrap());
        assert_eq!(live.len(), 50);
        // Idle, the log is checkpointed and cleared.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !decode(&std::fs::read(&logs[0]).unwrap()).is_empty() {
            assert!(Instant::now() < deadline, "the log was never checkpointed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The same data directory has one log per process.
        assert!(Arc::ptr_eq(&wal, &open(&data_dir).unwrap()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_log_is_checkpointed_and_started_again() {
        let (_root, data_dir, wal) = data_dir_with_log();
        let t = data_dir.join("t.jsonl");
        std::fs::write(&t, b"").unwrap();
        // Three and a half logs' worth, in records of the largest size.
        let data = vec![b'x'; MAX_RECORD];
        let count = (SEGMENT as usize * 7 / 2) / MAX_RECORD;
        let mut waits = Vec::new();
        for i in 0..count {
            let r = record(&t, (i * MAX_RECORD) as u64, &data);
            waits.push(wal.submit(r).unwrap());
        }
        for w in waits {
            assert!(w.await.unwrap());
        }
        let log = the_log(&data_dir);
        // The file never grows; what it holds now is the last generation
        // only, from the top.
        assert_eq!(std::fs::metadata(&log).unwrap().len(), SEGMENT);
        let live = decode(&std::fs::read(&log).unwrap());
        let per_log = SEGMENT as usize / live[0].encoded_len();
        assert!(!live.is_empty() && live.len() <= per_log, "{}", live.len());
        assert_eq!(
            live.last().unwrap().offset,
            ((count - 1) * MAX_RECORD) as u64
        );
    }
}
