//! The session registry: one ordered queue and one worker task per session.
//!
//! Requests that change a session are turned into jobs and pushed, by the
//! connection reader, onto that session's queue without waiting; the
//! session's worker runs them one at a time in arrival order. So mutations
//! of one session take effect in the order the server received them (across
//! all connections), while different sessions run side by side and a reader
//! never waits for a handler.
//!
//! The worker owns the [`Session`]: its replacement state, its pair guard
//! and its open transcript. After every change it publishes an immutable
//! snapshot ([`Published`]) that readers such as `state/get` take without
//! queueing; a snapshot is only ever replaced whole, after the work it
//! reflects has completed.
//!
//! A session idle for a while is evicted: its worker ends and its slot
//! leaves the registry, so a server that sees a million session ids holds
//! memory only for those in use (PROTOCOL.md 10.1). Only a session whose
//! memory holds nothing the disk does not is evicted; see
//! [`Session::settle_idle`] for which ones stay, and [`Slot::enqueue`] for
//! why a request racing an eviction still runs in order.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::format::Format;
use crate::protocol::SessionId;
use crate::state::ReplacementState;
use crate::store::SessionStore;
pub use crate::store::{KeyParts, Loaded, SessionKey, SessionTable, Storage};
use crate::transcript::Lines;

/// The storage of a process serving the workspace `dir` (`serve`, the
/// shared daemon): [`crate::store::open`] on what its `toolwire.toml` configures, or files
/// when the configuration does not load (a file that does not parse is
/// reported at each client's `initialize`, where the client sees it).
pub async fn open_workspace(dir: &std::path::Path) -> Result<Storage> {
    match crate::config::load(dir, None) {
        Ok(config) => {
            crate::private::prepare(&config.data_dir);
            // Object storage is the only outbound client here: a bad
            // proxy variable or CA file matters (and is refused) with it.
            if config.storage.objects.is_some() {
                crate::egress::configure(&config.egress())
                    .map_err(|why| Error::invalid_params("proxy", why))?;
            }
            crate::store::open(&config.storage).await
        }
        Err(_) => Ok(Storage::default()),
    }
}

pub type Job = Box<dyn for<'a> FnOnce(&'a mut Session) -> BoxFuture<'a, ()> + Send>;

/// Where a queued job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// On the session's worker task, a thread of the runtime.
    OnWorker,
    /// On a thread started for it, which ends with it (see `on_own_thread`).
    OwnThread,
}

/// A job as its session's queue holds it.
struct Queued {
    job: Job,
    runs: Runs,
}

/// What readers may see of a session without queueing.
#[derive(Clone, Default)]
pub struct Published {
    pub state: ReplacementState,
    pub pending: Vec<String>,
}

type PublishedCell = Arc<RwLock<Option<Arc<Published>>>>;

pub struct Slot {
    pub key: SessionKey,
    /// `None` once the worker has retired (the session was evicted).
    queue: Mutex<Option<mpsc::UnboundedSender<Queued>>>,
    published: PublishedCell,
    registry: Weak<Slots>,
}

impl Slot {
    /// Queue a job; it runs after every job queued before it.
    ///
    /// A handle may outlive its worker: the worker retires only while
    /// holding this slot's queue lock and seeing its queue empty, so a job
    /// either lands before the retirement (and the worker stays for it) or
    /// finds the queue gone and goes to the session's current slot, whose
    /// worker starts after the old one let go of everything (the transcript
    /// and its lock included). Either way it runs after every job sent
    /// before it.
    pub fn enqueue(&self, job: Job) -> Result<()> {
        self.enqueue_to_run(job, Runs::OnWorker)
    }

    /// [`Slot::enqueue`], the job to run as `runs` says. Where it runs
    /// changes nothing of its order: the worker waits for it either way.
    pub fn enqueue_to_run(&self, job: Job, runs: Runs) -> Result<()> {
        let job = match self.send(Queued { job, runs }) {
            Ok(()) => return Ok(()),
            Err(job) => job,
        };
        let registry = self
            .registry
            .upgrade()
            .ok_or_else(|| Error::Internal(format!("session {} has stopped", self.key.id)))?;
        registry
            .slot(&self.key.data_dir, &self.key.id)
            .enqueue_to_run(job.job, job.runs)
    }

    /// Queue a job on this worker only; the job back if it has retired.
    fn send(&self, job: Queued) -> std::result::Result<(), Queued> {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        match queue.as_ref() {
            Some(tx) => tx.send(job).map_err(|err| err.0),
            None => Err(job),
        }
    }

    /// Run `f` on the session in queue order and wait for its answer.
    pub async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut Session) -> BoxFuture<'a, Result<T>> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.enqueue(Box::new(move |session| {
            Box::pin(async move {
                let _ = tx.send(f(session).await);
            })
        }))?;
        rx.await
            .map_err(|_| Error::Internal(format!("session {} job was dropped", self.key.id)))?
    }

    /// The latest snapshot, once the session has been loaded.
    pub fn published(&self) -> Option<Arc<Published>> {
        self.published.read().ok().and_then(|p| p.clone())
    }
}

/// A handle on the process's sessions; clones share them.
#[derive(Clone)]
pub struct Registry {
    slots: Arc<Slots>,
}

/// The sessions this process holds, each with its worker.
struct Slots {
    /// Searched on every request: hashed with [`IdHash`], not SipHash.
    map: Mutex<SessionTable<Arc<Slot>>>,
    storage: Arc<Storage>,
    idle: Duration,
    open: Arc<OpenTranscripts>,
    /// A release of freed memory is scheduled (see [`Slots::retired`]).
    release_due: std::sync::atomic::AtomicBool,
    /// Releases scheduled so far: a burst's late release is skipped when a
    /// later burst's is due after it.
    releases: std::sync::atomic::AtomicU64,
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, SessionTable<Arc<Slot>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot of `key`, starting its worker on first use.
    fn slot(self: &Arc<Self>, data_dir: &Path, id: &SessionId) -> Arc<Slot> {
        let mut map = self.lock();
        if let Some(slot) = map.get(&(data_dir, id) as &dyn KeyParts) {
            return slot.clone();
        }
        let key = SessionKey {
            data_dir: data_dir.to_path_buf(),
            id: id.clone(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let published = PublishedCell::default();
        let slot = Arc::new(Slot {
            key: key.clone(),
            queue: Mutex::new(Some(tx)),
            published: published.clone(),
            registry: Arc::downgrade(self),
        });
        // The worker holds no handle to its own queue: it ends (closing the
        // transcript and releasing its lock) once every slot handle is gone,
        // or when it retires.
        let session = Session {
            key: key.clone(),
            published,
            storage: self.storage.clone(),
            loaded: None,
            open: self.open.clone(),
            slot: Arc::downgrade(&slot),
            evicting: true,
            stale: true,
        };
        tokio::spawn(run_worker(session, rx, self.idle));
        map.insert(key, slot.clone());
        slot
    }

    /// Take `slot` out of the registry and end its queue, if no job is
    /// waiting in it (`queue`, the worker's end). Lock order: the map, then
    /// the slot's queue, as [`Slot::enqueue`] never holds the queue lock
    /// while it takes the map's.
    fn retire(&self, slot: &Arc<Slot>, queue: &mpsc::UnboundedReceiver<Queued>) -> bool {
        let mut map = self.lock();
        let mut sender = slot.queue.lock().unwrap_or_else(|p| p.into_inner());
        if !queue.is_empty() {
            return false;
        }
        *sender = None;
        drop(sender);
        if map.get(&slot.key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            map.remove(&slot.key);
            // A burst of sessions leaves a table sized for it: give it back
            // once most of it is empty.
            let len = map.len();
            if map.capacity() > 64 && len < map.capacity() / 4 {
                map.shrink_to(len * 2);
            }
        }
        true
    }

    /// Sessions were evicted: a second later, once the evictions around
    /// this one are done too, hand the memory they freed back to the
    /// system. glibc returns only the top of its heaps by itself, so a
    /// burst of sessions would otherwise leave the server at its peak for
    /// good. One release covers every eviction of that second, runs on a
    /// blocking thread, and is never on a request's path.
    ///
    /// A burst also starts blocking threads (its sessions' loads), and
    /// each keeps small blocks in a cache of its own until it ends, idle,
    /// [`crate::process::BLOCKING_KEEP_ALIVE`] later; those blocks pin the
    /// pages around them. So once they have ended, memory is released
    /// again, unless a later burst's release is already on its way: after
    /// 100,000 session ids the first release alone left 58 MB, the second
    /// 15 MB.
    fn retired(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.release_due.swap(true, Ordering::AcqRel) {
            return;
        }
        let burst = self.releases.fetch_add(1, Ordering::AcqRel) + 1;
        let slots = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Some(slots) = slots.upgrade() {
                slots.release_due.store(false, Ordering::Release);
            }
            let _ = tokio::task::spawn_blocking(crate::heap::release_free_memory).await;
            tokio::time::sleep(crate::process::BLOCKING_KEEP_ALIVE + Duration::from_secs(1)).await;
            let latest = slots
                .upgrade()
                .is_some_and(|slots| slots.releases.load(Ordering::Acquire) == burst);
            if latest {
                let _ = tokio::task::spawn_blocking(crate::heap::release_free_memory).await;
            }
        });
    }
}

/// The sessions holding their transcript open, least recently used first.
///
/// Each open transcript holds a file descriptor (and its lock) for as long
/// as its session stays loaded. Past `max` of them, the least recently used
/// session is asked, in its own queue, to close its transcript (as an idle
/// one does); its next request reopens it, taking the lock again. A session
/// with a pending pair cannot close (the pair lives only in memory), so it
/// stays open and the next one in line goes instead.
pub struct OpenTranscripts {
    max: usize,
    lru: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    stamp: u64,
    by_key: SessionTable<(u64, Weak<Slot>)>,
    by_stamp: BTreeMap<u64, SessionKey>,
}

impl OpenTranscripts {
    pub fn new(max: usize) -> Self {
        OpenTranscripts {
            max: max.max(1),
            lru: Mutex::new(Lru::default()),
        }
    }

    /// The bound for a process whose soft limit on open files is `limit`:
    /// half of it, leaving the rest for artifacts being written, sockets,
    /// and transcripts being read.
    pub fn for_open_files_limit(limit: u64) -> Self {
        OpenTranscripts::new(usize::try_from(limit / 2).unwrap_or(usize::MAX).max(8))
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// How many transcripts are open now.
    pub fn count(&self) -> usize {
        self.lock().by_key.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `slot`'s session has its transcript open and was just used. Asks the
    /// least recently used sessions to close theirs while over the bound.
    fn touch(&self, key: &SessionKey, slot: &Weak<Slot>, evict: bool) {
        let victims = {
            let mut lru = self.lock();
            lru.stamp += 1;
            let stamp = lru.stamp;
            // A session already open (every job of a busy one) moves to
            // the back of the line without its key cloned again.
            let old = match lru.by_key.get_mut(key) {
                Some(entry) => Some(std::mem::replace(entry, (stamp, slot.clone())).0),
                None => {
                    lru.by_key.insert(key.clone(), (stamp, slot.clone()));
                    None
                }
            };
            let key = match old.and_then(|old| lru.by_stamp.remove(&old)) {
                Some(key) => key,
                None => key.clone(),
            };
            lru.by_stamp.insert(stamp, key);
            let mut victims = Vec::new();
            while evict && lru.by_key.len() > self.max {
                let Some((_, oldest)) = lru.by_stamp.pop_first() else {
                    break;
                };
                if let Some((_, victim)) = lru.by_key.remove(&oldest) {
                    victims.push(victim);
                }
            }
            victims
        };
        for victim in victims.iter().filter_map(Weak::upgrade) {
            let _ = victim.enqueue(Box::new(|session| {
                Box::pin(async move {
                    session.close_if_idle();
                    // Still open (a pair is pending): back in line, without
                    // evicting another in turn (which could go round and
                    // round while every session has a pending pair).
                    session.evicting = false;
                })
            }));
        }
    }

    fn closed(&self, key: &SessionKey) {
        let mut lru = self.lock();
        if let Some((stamp, _)) = lru.by_key.remove(key) {
            lru.by_stamp.remove(&stamp);
        }
    }
}

/// How long a session stays in memory with nothing to do: then it is
/// evicted (its transcript closed, releasing the lock and the file
/// descriptor, and its worker ended) unless its memory holds something the
/// disk does not; its next request loads it again. A long-lived server may
/// see millions of sessions.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// Environment variable overriding [`DEFAULT_SESSION_IDLE`], in
/// milliseconds (benchmarks and operators who want memory back sooner).
pub const SESSION_IDLE_ENV: &str = "TOOLWIRE_SESSION_IDLE_MS";

/// The session idle period: [`SESSION_IDLE_ENV`] when set to a number of
/// milliseconds, else [`DEFAULT_SESSION_IDLE`].
pub fn session_idle() -> Duration {
    std::env::var(SESSION_IDLE_ENV)
        .ok()
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(DEFAULT_SESSION_IDLE, Duration::from_millis)
}

impl Registry {
    pub fn new(storage: Storage, idle: Duration) -> Self {
        let open = OpenTranscripts::for_open_files_limit(crate::process::open_files_limit());
        Registry::with_open_bound(storage, idle, open)
    }

    pub fn with_open_bound(storage: Storage, idle: Duration, open: OpenTranscripts) -> Self {
        Registry {
            slots: Arc::new(Slots {
                map: Mutex::new(SessionTable::default()),
                storage: Arc::new(storage),
                idle,
                open: Arc::new(open),
                release_due: Default::default(),
                releases: Default::default(),
            }),
        }
    }

    pub fn open_transcripts(&self) -> &OpenTranscripts {
        &self.slots.open
    }

    pub fn storage(&self) -> &Arc<Storage> {
        &self.slots.storage
    }

    /// The slot of a session, starting its worker on first use. Cheap and
    /// never blocks on I/O: loading from disk is the worker's first job.
    pub fn slot(&self, data_dir: &Path, id: &SessionId) -> Arc<Slot> {
        self.slots.slot(data_dir, id)
    }

    /// The slot of a session this process already has, creating nothing.
    pub fn existing(&self, data_dir: &Path, id: &SessionId) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .get(&(data_dir, id) as &dyn KeyParts)
            .cloned()
    }

    /// How many sessions this process keeps a slot (and a worker) for.
    pub fn session_count(&self) -> usize {
        self.slots.lock().len()
    }

    /// Ids of the sessions of `data_dir` this process has loaded: clients
    /// hold them open, so retention leaves them alone.
    pub fn open_sessions(&self, data_dir: &Path) -> std::collections::HashSet<String> {
        let slots = self.slots.lock();
        slots
            .iter()
            .filter(|(key, slot)| key.data_dir == data_dir && slot.published().is_some())
            .map(|(key, _)| key.id.to_string())
            .collect()
    }

    /// Unload every session (closing transcripts, releasing their locks)
    /// after the work already queued on it. Used when the process winds down.
    pub async fn close_all(&self) {
        let slots: Vec<Arc<Slot>> = self.slots.lock().drain().map(|(_, slot)| slot).collect();
        for slot in slots {
            let _ = slot
                .run(|session| {
                    Box::pin(async move {
                        session.unload();
                        Ok(())
                    })
                })
                .await;
        }
    }
}

async fn run_worker(
    mut session: Session,
    mut queue: mpsc::UnboundedReceiver<Queued>,
    idle: Duration,
) {
    loop {
        // A job already queued is taken without arming the idle timer:
        // under load most are, and a timer armed and cancelled per job is
        // work on every request.
        let next = match queue.try_recv() {
            Ok(job) => {
                // What `recv` would charge: a long queue still lets the
                // worker's other tasks run in turn.
                tokio::task::consume_budget().await;
                Ok(Some(job))
            }
            Err(mpsc::error::TryRecvError::Disconnected) => Ok(None),
            Err(mpsc::error::TryRecvError::Empty) => tokio::time::timeout(idle, queue.recv()).await,
        };
        let Queued { job, runs } = match next {
            Ok(Some(job)) => job,
            Ok(None) => break,
            Err(_) => {
                if session.settle_idle().await && session.retire(&queue) {
                    tracing::debug!(session = %session.key.id, "evicted idle session");
                    return;
                }
                continue;
            }
        };
        let panicked = match runs {
            Runs::OnWorker => here(&mut session, job).await,
            Runs::OwnThread => {
                let panicked;
                (session, panicked) = on_own_thread(session, job).await;
                panicked
            }
        };
        if panicked {
            // A bug, not bad input. Forget what is in memory; the next job
            // reloads the session from disk, which holds only whole commits.
            tracing::error!(session = %session.key.id, "session job panicked; reloading from disk");
            session.unload();
        }
        let evict = std::mem::replace(&mut session.evicting, true);
        session.track_open(evict);
        // On a shared store another replica may commit before the next job.
        session.stale = true;
    }
    session.unload();
}

/// Run `job` on `session` on this task; whether it panicked.
async fn here(session: &mut Session, job: Job) -> bool {
    AssertUnwindSafe(job(session)).catch_unwind().await.is_err()
}

/// How many jobs run on threads of their own at once ([`on_own_thread`]):
/// more than a machine's cores would only take turns on them.
const OWN_THREADS: usize = 8;

/// Run `job` on `session` on a thread started for it, and give the
/// session back with whether the job panicked; the worker's task waits
/// meanwhile without holding its thread.
///
/// Why: glibc's malloc keeps each thread's last freed small blocks (up to
/// 7 of each size to 1,032 bytes) in a cache of the thread's own, and
/// counts them as in use: `malloc_trim` keeps every page one of them lies
/// on. A large request's last frees (its messages, its reply) are spread
/// over all the pages it used, and a runtime worker, whose thread never
/// ends, would keep them in its cache for good. A thread that ends frees
/// its cache, so the release after the request (`server`) finds those
/// pages free. The price, a thread started per job (its stack reserved,
/// not touched), is for jobs that allocate far more than that.
///
/// At most [`OWN_THREADS`] such jobs run at once (of all sessions); the
/// others wait for one to end, as they would for a runtime worker. Such a
/// job must not wait for another session's own-thread job.
///
/// Only on a multi-threaded runtime: there the runtime's own threads
/// drive I/O and timers while this thread waits in `block_on`. Elsewhere,
/// or when no thread can be started, the job runs on the worker.
async fn on_own_thread(mut session: Session, job: Job) -> (Session, bool) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    static RUNNING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(OWN_THREADS);
    let handle = match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => handle,
        _ => {
            let panicked = here(&mut session, job).await;
            return (session, panicked);
        }
    };
    // What the worker gets back should the thread end without answering
    // (it cannot: the job's panic is caught), so the session is never
    // lost: the same session, nothing loaded, read again from disk.
    let spare = session.unloaded();
    // Held here as well, so a thread that cannot be started gives the
    // session and the job back.
    let work = Arc::new(Mutex::new(Some((session, job))));
    let taken = work.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    // The semaphore is never closed: a permit always comes.
    let permit = RUNNING.acquire().await.ok();
    let started = std::thread::Builder::new()
        .name("toolwire-job".into())
        .stack_size(crate::process::THREAD_STACK)
        .spawn(move || {
            let Some((mut session, job)) = taken.lock().unwrap_or_else(|p| p.into_inner()).take()
            else {
                return;
            };
            let panicked =
                std::panic::catch_unwind(AssertUnwindSafe(|| handle.block_on(job(&mut session))))
                    .is_err();
            let _ = tx.send((session, panicked));
            drop(permit);
        });
    if started.is_err() {
        let held = work.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((mut session, job)) = held {
            let panicked = here(&mut session, job).await;
            return (session, panicked);
        }
    }
    rx.await.unwrap_or((spare, true))
}

/// A session as its worker holds it.
pub struct Session {
    key: SessionKey,
    published: PublishedCell,
    storage: Arc<Storage>,
    loaded: Option<Loaded>,
    open: Arc<OpenTranscripts>,
    slot: Weak<Slot>,
    /// Whether the job just run may make other sessions close theirs
    /// (false for the job that asked this one to close).
    evicting: bool,
    /// On a shared store: whether commits of other replicas may have come
    /// in since the last read (set between jobs).
    stale: bool,
}

impl Session {
    /// The same session with nothing loaded (its next job reads it from
    /// disk).
    fn unloaded(&self) -> Session {
        Session {
            key: self.key.clone(),
            published: self.published.clone(),
            storage: self.storage.clone(),
            loaded: None,
            open: self.open.clone(),
            slot: self.slot.clone(),
            evicting: self.evicting,
            stale: true,
        }
    }

    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The slot this worker serves (`None` only once it has left the
    /// registry, which never happens while a job runs).
    pub fn own_slot(&self) -> Option<Arc<Slot>> {
        self.slot.upgrade()
    }

    /// The session's contents, read from disk on first use: its transcript
    /// (locked, a torn tail cut off) and the state it records. On a shared
    /// store, also what other replicas committed since the last read.
    pub async fn load(&mut self) -> Result<&mut Loaded> {
        if self.loaded.is_none() || self.stale {
            let storage = self.storage.clone();
            if storage.store().load(&self.key, &mut self.loaded).await? {
                self.publish();
            }
            self.stale = false;
        }
        self.loaded
            .as_mut()
            .ok_or_else(|| Error::Internal("session not loaded".into()))
    }

    /// Journal `budget/apply`'s decisions as one commit. On a shared store
    /// each decision is raced (the first replica to decide an original
    /// wins) and the state is read back, so `loaded.state` then holds the
    /// winners; returns whether it does.
    pub async fn journal(
        &mut self,
        records: &[crate::protocol::ReplacementRecord],
        seen: &crate::protocol::SeenLine,
        fsync: bool,
    ) -> Result<bool> {
        let storage = self.storage.clone();
        let key = self.key.clone();
        let loaded = self.load().await?;
        let outcome = storage
            .store()
            .journal(&key, loaded, records, seen, fsync)
            .await?;
        if outcome.reread {
            self.publish();
        }
        Ok(outcome.reread)
    }

    /// The contents if already loaded; never touches the disk.
    pub fn loaded_mut(&mut self) -> Option<&mut Loaded> {
        self.loaded.as_mut()
    }

    /// Publish the current state for lock-free readers.
    pub fn publish(&self) {
        let snapshot = self.loaded.as_ref().map(|l| {
            Arc::new(Published {
                state: l.state.clone(),
                pending: l.guard.pending_ids(),
            })
        });
        if let Ok(mut p) = self.published.write() {
            *p = snapshot;
        }
    }

    /// The latest published snapshot (empty before the first load).
    pub fn snapshot(&self) -> Arc<Published> {
        self.published
            .read()
            .ok()
            .and_then(|p| p.clone())
            .unwrap_or_default()
    }

    /// Close the transcript of a session that can be reloaded from it as it
    /// is (no pending pair, nothing that lives only in memory).
    fn close_if_idle(&mut self) {
        let reloadable = self
            .loaded
            .as_ref()
            .is_some_and(|l| l.transcript.is_some() && l.reloadable());
        if reloadable {
            tracing::debug!(session = %self.key.id, "closing idle session");
            self.unload();
        }
    }

    /// After the idle period: drop from memory whatever the disk holds too,
    /// journaling first a state that lives only in memory when it can be.
    /// Returns whether nothing is left in memory, so the worker may retire.
    ///
    /// What stays: a session with a pending pair (the pair invariant keeps
    /// it off the disk until its results are in), and a session whose
    /// state was replaced in memory over a transcript that says otherwise
    /// (`state/reconstruct` on a session with a transcript: no line can
    /// take decisions back) or that knows tool names of unanswered calls.
    async fn settle_idle(&mut self) -> bool {
        let Some(loaded) = &self.loaded else {
            return true;
        };
        if !loaded.reloadable() {
            if !loaded.journalable() {
                return false;
            }
            if let Err(err) = self.journal_state().await {
                tracing::warn!(session = %self.key.id, %err, "could not journal an idle session; it stays in memory");
                return false;
            }
        }
        self.unload();
        true
    }

    /// Write the state of a session without a transcript into a new one:
    /// its replacements, then the results sent whole; first decisions of
    /// each id before those on a reused id's other originals, so they load
    /// back in the same order. Durable before the session leaves memory.
    async fn journal_state(&mut self) -> Result<()> {
        let Some(loaded) = &self.loaded else {
            return Ok(());
        };
        let mut lines = Lines::default();
        for reused in [false, true] {
            let mut seen = crate::protocol::SeenLine {
                tool_use_ids: Vec::new(),
                digests: Vec::new(),
            };
            for (id, digest, replacement, is_reused) in loaded.state.decisions_tagged() {
                if is_reused != reused {
                    continue;
                }
                match replacement {
                    Some(r) => lines.push_record(&crate::protocol::ReplacementRecord {
                        kind: crate::protocol::RECORD_KIND.to_owned(),
                        tool_use_id: id.to_string(),
                        replacement: r.text(),
                        digest: digest.hex(),
                        cleared: false,
                    }),
                    None => {
                        seen.tool_use_ids.push(id.to_string());
                        seen.digests.push(digest.hex().unwrap_or_default());
                    }
                }
            }
            if !seen.tool_use_ids.is_empty() {
                lines.push_seen(&seen);
            }
        }
        self.write(lines, true, true).await?;
        if let Some(loaded) = self.loaded.as_mut() {
            loaded.journaled = true;
        }
        Ok(())
    }

    /// End this worker's queue and leave the registry, if no job is waiting.
    fn retire(&self, queue: &mpsc::UnboundedReceiver<Queued>) -> bool {
        let Some(slot) = self.slot.upgrade() else {
            return false;
        };
        let Some(slots) = slot.registry.upgrade() else {
            return false;
        };
        let retired = slots.retire(&slot, queue);
        if retired {
            slots.retired();
        }
        retired
    }

    /// Report whether the transcript is open to the bound on open
    /// transcripts, as the most recently used.
    fn track_open(&self, evict: bool) {
        if self.loaded.as_ref().is_some_and(|l| l.transcript.is_some()) {
            self.open.touch(&self.key, &self.slot, evict);
        } else {
            self.open.closed(&self.key);
        }
    }

    /// Drop what is in memory; the next job reloads from disk.
    pub fn unload(&mut self) {
        self.loaded = None;
        self.open.closed(&self.key);
        if let Ok(mut p) = self.published.write() {
            *p = None;
        }
    }

    /// Append `lines` to the transcript as one durable commit. Without a
    /// transcript, one is created when `create` is set; otherwise nothing is
    /// written and `false` is returned.
    pub async fn write(&mut self, lines: Lines, fsync: bool, create: bool) -> Result<bool> {
        let storage = self.storage.clone();
        let key = self.key.clone();
        let loaded = self.load().await?;
        let outcome = storage
            .store()
            .commit(&key, loaded, lines, fsync, create)
            .await?;
        if outcome.reread {
            self.publish();
        }
        Ok(outcome.done)
    }

    /// Commit one step of the pair guard: `lines`, with the pending pair
    /// moved by `transition`, as one commit. `false` when another replica
    /// moved the pending pair since this job read it: nothing was written,
    /// and the next [`Session::load`] reads the session again, so the
    /// caller plans its step anew.
    pub async fn commit_pair(
        &mut self,
        lines: Lines,
        transition: crate::transcript::guard::Transition,
        fsync: bool,
    ) -> Result<bool> {
        let storage = self.storage.clone();
        let key = self.key.clone();
        let loaded = self.load().await?;
        let done = storage
            .store()
            .commit_pair(&key, loaded, lines, transition, fsync)
            .await?;
        if !done {
            self.stale = true;
        }
        Ok(done)
    }

    /// The contents when reading them opens nothing: the session as this
    /// process holds it, or on a shared store as the store holds it; `None`
    /// for a local session not loaded (which has no pending pair).
    pub async fn load_held(&mut self) -> Result<Option<&mut Loaded>> {
        if self.loaded.is_none() && !self.storage.store().shared_by_replicas() {
            return Ok(None);
        }
        self.load().await.map(Some)
    }

    /// Make this (new) session a fork of `source`.
    pub async fn fork_from(&mut self, source: crate::store::ForkSource) -> Result<&mut Loaded> {
        let storage = self.storage.clone();
        match storage.store().fork(&self.key, source).await? {
            Some(loaded) => self.set_loaded(loaded),
            None => self.unload(),
        }
        self.load().await
    }

    /// The format a request in `requested` (else `configured`) runs in: a
    /// session keeps the format it was created with, and a request naming
    /// another is refused. Nothing is bound here: a request binds the
    /// format once it succeeds ([`Loaded::format`]).
    pub async fn format_for(
        &mut self,
        requested: Option<Format>,
        configured: Option<Format>,
    ) -> Result<Format> {
        let loaded = self.load().await?;
        match (loaded.format, requested) {
            (Some(own), Some(asked)) if own != asked => Err(Error::invalid_params(
                "format",
                format!(
                    "session {} is in the {} format, not {}",
                    self.key.id,
                    own.name(),
                    asked.name()
                ),
            )),
            (Some(own), _) => Ok(own),
            (None, asked) => Ok(asked.or(configured).unwrap_or_default()),
        }
    }

    /// Replace the whole loaded contents (fork targets, reconstruct).
    pub fn set_loaded(&mut self, loaded: Loaded) {
        self.loaded = Some(loaded);
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which job ran, and the name of the thread it ran on.
    type Seen = Arc<Mutex<Vec<(usize, Option<String>)>>>;

    /// Queue a job that records which thread it ran on (and then does
    /// `then` to the session) and wait for it.
    async fn record(slot: &Slot, runs: Runs, seen: &Seen, order: usize, then: fn(&mut Session)) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let seen = seen.clone();
        slot.enqueue_to_run(
            Box::new(move |session| {
                Box::pin(async move {
                    let name = std::thread::current().name().map(str::to_owned);
                    seen.lock().unwrap().push((order, name));
                    let _answer_on_drop = tx;
                    then(session);
                })
            }),
            runs,
        )
        .unwrap();
        // The sender is dropped when the job ends, panicking or not.
        let _ = rx.await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_on_its_own_thread_keeps_its_place_in_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(Storage::default(), Duration::from_secs(600));
        let id = SessionId::try_from("s".to_owned()).unwrap();
        let slot = registry.slot(dir.path(), &id);
        let seen = Seen::default();
        // Queued at once, without waiting: they run in this order.
        let queued = [Runs::OnWorker, Runs::OwnThread, Runs::OnWorker];
        let jobs = queued
            .iter()
            .enumerate()
            .map(|(order, &runs)| record(&slot, runs, &seen, order, |_| {}));
        futures_util::future::join_all(jobs).await;
        let seen = std::mem::take(&mut *seen.lock().unwrap());
        let order: Vec<usize> = seen.iter().map(|(order, _)| *order).collect();
        assert_eq!(order, [0, 1, 2]);
        let names: Vec<Option<&str>> = seen.iter().map(|(_, name)| name.as_deref()).collect();
        assert_eq!(names[1], Some("toolwire-job"));
        assert!(names[0] != Some("toolwire-job") && names[2] != Some("toolwire-job"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_that_panics_on_its_own_thread_leaves_the_session_to_be_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(Storage::default(), Duration::from_secs(600));
        let id = SessionId::try_from("s".to_owned()).unwrap();
        let slot = registry.slot(dir.path(), &id);
        let loaded = slot
            .run(|session| {
                Box::pin(async move {
                    session.load().await?;
                    Ok(session.loaded_mut().is_some())
                })
            })
            .await;
        assert_eq!(loaded.ok(), Some(true));
        let seen = Seen::default();
        record(&slot, Runs::OwnThread, &seen, 0, |_| panic!("a bug")).await;
        // The worker goes on: the next job runs, on a session unloaded.
        let unloaded = slot
            .run(|session| Box::pin(async move { Ok(session.loaded_mut().is_none()) }))
            .await;
        assert_eq!(unloaded.ok(), Some(true));
    }
}
