//! Where session state and transcripts live: `storage.backend`.
//!
//! `local` (the default) is the transcript files under the data directory
//! that one process holds locked ([`crate::session`], [`crate::transcript`]).
//! `postgres` puts the same transcript lines in a database that many
//! replicas share ([`postgres`]): a session's transcript is its commits in
//! order, each commit one row written in one transaction, and a decision is
//! raced through a keyed insert so that the first replica to decide wins and
//! every replica replays the winner's bytes.
//!
//! Both keep the transcript as lines in the one format readers know, so
//! loading state, `transcript/check` and `repair` read them the same way.

pub mod loaded;
pub mod local;
pub mod postgres;
pub mod settings;
pub mod shared;

use futures_util::future::BoxFuture;

use crate::error::Result;
pub use loaded::{KeyParts, Loaded, SessionKey, SessionTable, Storage};
pub use settings::{Backend, PostgresConfig, StorageConfig};

/// One commit read back: its number and its complete transcript lines.
#[derive(Debug, Clone)]
pub struct Commit {
    pub seq: i64,
    pub lines: Vec<u8>,
}

/// A session's commits, its pending pair's row and its incarnation, read
/// as of one moment.
#[derive(Debug)]
pub struct WithPair {
    pub commits: Vec<Commit>,
    pub pair: Option<Vec<u8>>,
    /// Which life of the session this is: a session gc removed and a
    /// commit made again has another (see the migration).
    pub incarnation: i64,
}

/// A decision to race: the first replica to insert its key wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub tool_use_id: String,
    /// Hex digest of the original; `None` matches any original.
    pub digest: Option<String>,
    /// The exact replacement, or `None` for a result sent whole.
    pub replacement: Option<String>,
    /// A clearing of a result decided before (PROTOCOL.md 11.3): raced
    /// under a key of its own, since the original is already decided.
    pub cleared: bool,
}

/// What one append commits, in one transaction.
#[derive(Debug, Default)]
pub struct Append {
    /// Prepended when this append creates the session (its format line).
    pub header: Option<Vec<u8>>,
    /// Complete transcript lines (messages).
    pub lines: Vec<u8>,
    /// Decisions to race; the ones won are journaled after `lines`.
    pub decisions: Vec<Decision>,
}

/// A shared store of session state and transcripts.
pub trait SharedStore: Send + Sync + 'static {
    /// Whether the store answers a query now (the proxy's `GET /readyz`).
    fn ping(&self) -> BoxFuture<'_, Result<()>>;

    /// The commits of `session` numbered above `after`, in commit order,
    /// its fork parents' included up to each fork; `None` when the session
    /// does not exist.
    fn read(&self, session: &str, after: i64) -> BoxFuture<'_, Result<Option<Vec<Commit>>>>;

    /// As [`SharedStore::read`], with the session's pending pair (its row
    /// of `toolwire_pending_pairs`, see [`SharedStore::append_pair`]), both
    /// as of one moment.
    fn read_with_pair(&self, session: &str, after: i64) -> BoxFuture<'_, Result<Option<WithPair>>>;

    /// Commit `append` and set the session's pending pair to `pair` (none:
    /// removed) in one transaction under the session's lock, if its pending
    /// pair is still `expected`; `false`, with nothing written, when
    /// another writer changed it first.
    fn append_pair<'a>(
        &'a self,
        session: &'a str,
        append: Append,
        expected: Option<Vec<u8>>,
        pair: Option<Vec<u8>>,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Commit `append` to `session` (creating it) in one transaction. Of
    /// its decisions, those another writer made first are left out; the
    /// caller reads the winners back with [`SharedStore::read`].
    fn append<'a>(&'a self, session: &'a str, append: Append) -> BoxFuture<'a, Result<()>>;

    /// Create `child` as a fork of `parent` as committed now: it shares
    /// the parent's commits instead of copying them. Fails when `child`
    /// exists already.
    fn fork<'a>(&'a self, parent: &'a str, child: &'a str) -> BoxFuture<'a, Result<()>>;

    /// Hold `session`'s saved outputs while a `budget/apply` writes or
    /// reuses them in the bucket and commits its decisions, so that gc on
    /// any machine keeps off them ([`postgres::OutputsHold`]).
    fn hold_outputs<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, Result<Option<postgres::OutputsHold>>>;

    /// Hold `session` loaded for as long as the hold lives, waiting while
    /// a gc removes it: gc on any machine leaves a session a replica holds
    /// loaded in place ([`postgres::LoadedHold`]).
    fn hold_loaded<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<postgres::LoadedHold>>;

    /// Retention over the store and the saved outputs in `data_dir`, or in
    /// `objects` when they are on object storage (`toolwire gc`,
    /// `storage/gc`; see [`gc`]).
    fn collect<'a>(
        &'a self,
        data_dir: &'a std::path::Path,
        objects: Option<std::sync::Arc<crate::artifact::objects::ObjectArtifacts>>,
        policy: &'a crate::retention::Policy,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<crate::retention::GcReport>>;
}

/// Where a session's journal says the output of `tool_use_id` may be saved,
/// as (session, file name)s, the likeliest first (a link names no file by
/// itself: `budget::preview::preview_targets`), read from the shared store;
/// `None` when it says nothing of it. On PostgreSQL there
/// is no transcript file to find an output a fork inherited from its
/// parent through, so the caller looks it up here first (the fork's
/// commits include its parent's replacement lines) and hands it to
/// `artifact::read::read_artifact_until` or `read_whole`.
pub async fn shared_target(
    shared: &dyn SharedStore,
    session_id: &crate::transcript::SessionId,
    tool_use_id: &str,
) -> Result<Option<Vec<(String, String)>>> {
    let Some(commits) = shared.read(session_id.as_str(), 0).await? else {
        return Ok(None);
    };
    let mut found = Vec::new();
    for line in commits.iter().flat_map(|c| c.lines.split(|b| *b == b'\n')) {
        // Only replacement lines are parsed (message lines may be large).
        if !line.windows(13).any(|w| w == b"\"replacement\"") {
            continue;
        }
        let Ok(value) = crate::json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        let record = &value["record"];
        if record["toolUseId"] == tool_use_id
            && let Some(text) = record["replacement"].as_str()
        {
            found = crate::budget::preview::preview_targets(text, session_id.as_str());
        }
    }
    Ok((!found.is_empty()).then_some(found))
}

/// What a commit did, for the session that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the lines are committed (false: the session has no
    /// transcript and none was to be created).
    pub done: bool,
    /// Whether the loaded state was read back and changed, so the session
    /// publishes a new snapshot.
    pub reread: bool,
}

impl Outcome {
    pub const NOTHING: Outcome = Outcome {
        done: false,
        reread: false,
    };
    pub const WRITTEN: Outcome = Outcome {
        done: true,
        reread: false,
    };
}

/// A session as `state/fork` found it in the source's queue.
pub struct ForkSource {
    pub parent: crate::transcript::SessionId,
    /// The source's committed transcript file and its length, when it is
    /// to be shared (local backend).
    pub transcript: Option<(std::path::PathBuf, u64)>,
    pub state: crate::state::ReplacementState,
    pub tool_names: rpds::HashTrieMapSync<crate::state::Id, std::sync::Arc<str>>,
    pub format: Option<crate::format::Format>,
    pub journaled: bool,
}

/// One retention run (`toolwire gc`, `storage/gc`).
pub struct Collect {
    pub data_dir: std::path::PathBuf,
    pub objects: Option<std::sync::Arc<crate::artifact::objects::ObjectArtifacts>>,
    pub policy: crate::retention::Policy,
    pub dry_run: bool,
    /// Sessions this process holds open (left alone by the local backend).
    pub open: std::collections::HashSet<String>,
    pub progress: Box<dyn FnMut(crate::retention::Progress) + Send>,
}

impl Collect {
    /// A run over `data_dir` (and the bucket of `objects`, when saved
    /// outputs go to one) by `retention`'s policy as of now; `open`: the
    /// sessions the caller's server holds.
    pub fn of(
        data_dir: &std::path::Path,
        objects: Option<&crate::artifact::objects::ObjectsConfig>,
        retention: &crate::retention::Retention,
        open: std::collections::HashSet<String>,
        dry_run: bool,
        progress: Box<dyn FnMut(crate::retention::Progress) + Send>,
    ) -> Result<Collect> {
        let objects = match objects {
            Some(objects) => Some(crate::artifact::objects::ObjectArtifacts::open(objects)?),
            None => None,
        };
        Ok(Collect {
            data_dir: data_dir.to_path_buf(),
            objects,
            policy: retention.policy(std::time::SystemTime::now()),
            dry_run,
            open,
            progress,
        })
    }
}

/// Where a session's transcript and state live, as its worker sees them:
/// [`local::Local`] files, or [`shared::Shared`] on a [`SharedStore`].
/// The session ([`crate::session`]) loads, commits, journals, forks and
/// collects through this trait only; [`Store`] picks the implementation
/// the configuration names, with static dispatch (no boxed future on the
/// commit path).
pub trait SessionStore {
    /// Bring `loaded` up to date: read the session on first use (local),
    /// or what any replica committed since the last read (shared). Returns
    /// whether the session publishes a new snapshot.
    fn load(
        &self,
        key: &SessionKey,
        loaded: &mut Option<Loaded>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Commit `lines` as one durable commit; without a transcript one is
    /// created when `create` is set.
    fn commit(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: crate::transcript::Lines,
        fsync: bool,
        create: bool,
    ) -> impl Future<Output = Result<Outcome>> + Send;

    /// Journal `budget/apply`'s decisions as one commit; `reread` when
    /// the decisions were raced and `loaded.state` now holds the winners.
    fn journal(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        records: &[crate::transcript::ReplacementRecord],
        seen: &crate::transcript::SeenLine,
        fsync: bool,
    ) -> impl Future<Output = Result<Outcome>> + Send;

    /// Make `target` a fork of `source`; the target's contents, or `None`
    /// when the target is to be read back from the store.
    fn fork(
        &self,
        target: &SessionKey,
        source: ForkSource,
    ) -> impl Future<Output = Result<Option<Loaded>>> + Send;

    /// Commit one step of the pair guard ([`crate::transcript::guard`]):
    /// `lines`, with the pending pair moved by `transition`, as one commit.
    /// `false` when another replica moved the pending pair since it was
    /// read: nothing was written, and the caller reads the session again
    /// and plans its step anew.
    fn commit_pair(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: crate::transcript::Lines,
        transition: crate::transcript::guard::Transition,
        fsync: bool,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Whether replicas share the sessions: every request reads what
    /// others committed, and reading a session opens nothing (no file, no
    /// lock).
    fn shared_by_replicas(&self) -> bool;

    /// Retention over the sessions and their saved outputs.
    fn collect(
        &self,
        gc: Collect,
    ) -> impl Future<Output = Result<crate::retention::GcReport>> + Send;
}

/// The backend a process is configured with.
pub enum Store<'a> {
    Local(local::Local<'a>),
    Shared(shared::Shared<'a>),
}

/// Run `$call` on whichever backend `$store` is.
macro_rules! dispatch {
    ($store:expr, $s:ident => $call:expr) => {
        match $store {
            Store::Local($s) => $call.await,
            Store::Shared($s) => $call.await,
        }
    };
}

impl SessionStore for Store<'_> {
    async fn load(&self, key: &SessionKey, loaded: &mut Option<Loaded>) -> Result<bool> {
        dispatch!(self, s => s.load(key, loaded))
    }

    async fn commit(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: crate::transcript::Lines,
        fsync: bool,
        create: bool,
    ) -> Result<Outcome> {
        dispatch!(self, s => s.commit(key, loaded, lines, fsync, create))
    }

    async fn journal(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        records: &[crate::transcript::ReplacementRecord],
        seen: &crate::transcript::SeenLine,
        fsync: bool,
    ) -> Result<Outcome> {
        dispatch!(self, s => s.journal(key, loaded, records, seen, fsync))
    }

    async fn fork(&self, target: &SessionKey, source: ForkSource) -> Result<Option<Loaded>> {
        dispatch!(self, s => s.fork(target, source))
    }

    async fn commit_pair(
        &self,
        key: &SessionKey,
        loaded: &mut Loaded,
        lines: crate::transcript::Lines,
        transition: crate::transcript::guard::Transition,
        fsync: bool,
    ) -> Result<bool> {
        dispatch!(self, s => s.commit_pair(key, loaded, lines, transition, fsync))
    }

    fn shared_by_replicas(&self) -> bool {
        matches!(self, Store::Shared(_))
    }

    async fn collect(&self, gc: Collect) -> Result<crate::retention::GcReport> {
        dispatch!(self, s => s.collect(gc))
    }
}

/// The PostgreSQL store `config` names, if any (`storage.backend =
/// "postgres"` without `[storage.postgres]` is an error naming the key).
pub fn postgres_of(config: &crate::store::StorageConfig) -> Result<Option<postgres::Postgres>> {
    use crate::store::Backend;
    match (config.backend, &config.postgres) {
        (Backend::Local, _) => Ok(None),
        (Backend::Postgres, None) => Err(crate::error::Error::invalid_params(
            "storage.postgres.url",
            "storage.backend = \"postgres\" needs storage.postgres.url",
        )),
        (Backend::Postgres, Some(pg)) => {
            postgres::Postgres::connect(&pg.url, pg.max_connections).map(Some)
        }
    }
}

/// The [`Storage`] of a process configured with `config`:
/// files, or the shared store once its schema is checked to be current.
pub async fn open(config: &crate::store::StorageConfig) -> Result<Storage> {
    let mut storage = Storage::default();
    if let Some(pg) = postgres_of(config)? {
        pg.check_schema().await?;
        storage.shared = Some(std::sync::Arc::new(pg));
    }
    Ok(storage)
}
