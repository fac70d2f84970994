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

pub mod gc;
pub mod postgres;

use futures_util::future::BoxFuture;

use crate::error::Result;

/// One commit read back: its number and its complete transcript lines.
#[derive(Debug, Clone)]
pub struct Commit {
    pub seq: i64,
    pub lines: Vec<u8>,
}

/// A decision to race: the first replica to insert its key wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub tool_use_id: String,
    /// Hex digest of the original; `None` matches any original.
    pub digest: Option<String>,
    /// The exact replacement, or `None` for a result sent whole.
    pub replacement: Option<String>,
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
    /// The commits of `session` numbered above `after`, in commit order,
    /// its fork parents' included up to each fork; `None` when the session
    /// does not exist.
    fn read(&self, session: &str, after: i64) -> BoxFuture<'_, Result<Option<Vec<Commit>>>>;

    /// Commit `append` to `session` (creating it) in one transaction. Of
    /// its decisions, those another writer made first are left out; the
    /// caller reads the winners back with [`SharedStore::read`].
    fn append<'a>(&'a self, session: &'a str, append: Append) -> BoxFuture<'a, Result<()>>;

    /// Create `child` as a fork of `parent` as committed now: it shares
    /// the parent's commits instead of copying them. Fails when `child`
    /// exists already.
    fn fork<'a>(&'a self, parent: &'a str, child: &'a str) -> BoxFuture<'a, Result<()>>;

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

/// The PostgreSQL store `config` names, if any (`storage.backend =
/// "postgres"` without `[storage.postgres]` is an error naming the key).
pub fn postgres_of(config: &crate::config::StorageConfig) -> Result<Option<postgres::Postgres>> {
    use crate::config::Backend;
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

/// The [`crate::session::Storage`] of a process configured with `config`:
/// files, or the shared store once its schema is checked to be current.
pub async fn open(config: &crate::config::StorageConfig) -> Result<crate::session::Storage> {
    let mut storage = crate::session::Storage::default();
    if let Some(pg) = postgres_of(config)? {
        pg.check_schema().await?;
        storage.shared = Some(std::sync::Arc::new(pg));
    }
    Ok(storage)
}
