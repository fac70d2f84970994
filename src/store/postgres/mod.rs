//! Session state and transcripts on PostgreSQL (`storage.backend =
//! "postgres"`), through `tokio-postgres` with a `deadpool` pool.
//!
//! The schema is in `migrations/*.sql`, applied in order by
//! `toolwire migrate` under an advisory lock (so replicas that run it at
//! once apply each migration once) and recorded in
//! `toolwire_schema_migrations`. A replica refuses to start on a database
//! whose schema is older than it needs.

pub mod gc;

use std::collections::{HashMap, HashSet};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures_util::future::BoxFuture;
use tokio_postgres::NoTls;

use super::{Append, Commit, SharedStore, WithPair};
use crate::error::{Error, Result};
use crate::transcript::Lines;
use crate::transcript::{RECORD_KIND, ReplacementRecord, SeenLine};

/// The migrations, in the order they apply: (version, SQL).
pub const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../../migrations/0001_shared_state.sql")),
    (
        2,
        include_str!("../../../migrations/0002_pending_pairs.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/0003_session_incarnations.sql"),
    ),
];

/// Key of the advisory lock `migrate` holds (an arbitrary constant: "tw16").
const MIGRATE_LOCK: i64 = 0x7477_3136;

/// Seed of the advisory-lock keys that guard a session's saved outputs
/// ([`OutputsHold`]); commits use [`LOCK_SQL`]'s.
const OUTPUTS_SEED: i64 = 17;

/// Seed of the advisory-lock keys that say a replica holds a session
/// loaded ([`LoadedHold`]); gc removes a session only with this key's lock
/// exclusive.
const LOADED_SEED: i64 = 18;

/// The store, holding a pool of connections to one database.
pub struct Postgres {
    pool: Pool,
    /// Connections that hold a session's saved outputs ([`OutputsHold`]),
    /// apart from `pool`, so holds never starve the commits they wait for.
    holds: Pool,
    /// The sessions this process holds loaded ([`LoadedHold`]).
    loads: std::sync::Arc<Loads>,
}

/// A session's saved outputs held through the database: shared by a
/// `budget/apply` from before it writes (or reuses) an object in the bucket
/// until its decisions are committed, exclusive for gc while it re-reads
/// what is referenced and deletes. It is the directory hold of
/// [`crate::retention`] for outputs that replicas on other machines write,
/// where no file lock reaches: gc never deletes an object that an apply
/// has found in place and is about to journal. A session-level advisory
/// lock on a connection of its own; [`OutputsHold::release`] unlocks it,
/// and a hold dropped unreleased (an error, a cancelled request) closes
/// its connection, which releases the lock as surely.
///
/// gc removing a session holds, on the same connection, the session's
/// [`LoadedHold`] key exclusively too: no replica has it loaded.
pub struct OutputsHold {
    client: Option<deadpool_postgres::Object>,
    session: String,
    exclusive: bool,
    /// The seeds of the keys held, each once.
    seeds: Vec<i64>,
}

impl OutputsHold {
    pub async fn release(mut self) {
        if let Some(client) = self.client.take() {
            let sql = if self.exclusive {
                "SELECT pg_advisory_unlock(hashtextextended($1, $2))"
            } else {
                "SELECT pg_advisory_unlock_shared(hashtextextended($1, $2))"
            };
            for seed in &self.seeds {
                if let Err(err) = client.query_one(sql, &[&self.session, seed]).await {
                    tracing::warn!(%err, "releasing a hold on saved outputs; closing its connection");
                    drop(deadpool_postgres::Object::take(client));
                    return;
                }
            }
        }
    }
}

impl Drop for OutputsHold {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Out of the pool and closed: the server releases its locks.
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// A session a replica holds loaded: while it does, gc on any machine
/// leaves the session in place, as the local store's gc leaves a
/// transcript a server holds open. A shared advisory lock on the session's
/// key, on one connection of the process's own that every loaded session
/// shares (a connection each would not scale to thousands of sessions);
/// dropped, it is released. Should that connection break (the database
/// restarted), its locks go with it: the next hold reconnects and takes
/// again the keys of every session still loaded, and until then a replica
/// that finds a session removed under it starts that session afresh (the
/// incarnation check in [`crate::store::shared`]).
pub struct LoadedHold {
    loads: std::sync::Arc<Loads>,
    session: Option<String>,
}

impl Drop for LoadedHold {
    fn drop(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let loads = self.loads.clone();
        // Unlocking is a round trip; outside a runtime (the process is
        // ending) the connection closes and releases the lock as surely.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { loads.release(&session).await });
        }
    }
}

/// The connection of the loaded holds, and how many holds of this process
/// each session's lock stands for.
pub struct Loads {
    config: tokio_postgres::Config,
    conn: tokio::sync::Mutex<LoadsConn>,
}

#[derive(Default)]
struct LoadsConn {
    client: Option<tokio_postgres::Client>,
    counts: std::collections::HashMap<String, usize>,
}

impl Loads {
    /// Count one more hold of `session`, locking its key if it is the
    /// first; `false` when a gc holds the key.
    async fn try_hold(&self, session: &str) -> Result<bool> {
        let mut conn = self.conn.lock().await;
        if let Some(count) = conn.counts.get_mut(session) {
            *count += 1;
            return Ok(true);
        }
        let client = self.connected(&mut conn).await?;
        let got: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock_shared(hashtextextended($1, $2))",
                &[&session, &LOADED_SEED],
            )
            .await
            .map_err(|err| db_error("holding a session", err))?
            .get(0);
        if got {
            conn.counts.insert(session.to_owned(), 1);
        }
        Ok(got)
    }

    async fn release(&self, session: &str) {
        let mut conn = self.conn.lock().await;
        let Some(count) = conn.counts.get_mut(session) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        conn.counts.remove(session);
        if let Some(client) = conn.client.as_ref().filter(|c| !c.is_closed()) {
            let unlocked = client
                .query_one(
                    "SELECT pg_advisory_unlock_shared(hashtextextended($1, $2))",
                    &[&session, &LOADED_SEED],
                )
                .await;
            if let Err(err) = unlocked {
                // Closing the connection releases every lock on it; the
                // next hold reconnects and locks what is still loaded.
                tracing::warn!(%err, "releasing a loaded session; reconnecting");
                conn.client = None;
            }
        }
    }

    /// The connection, made anew (and every held key locked again on it)
    /// when it is missing or broken.
    async fn connected<'c>(&self, conn: &'c mut LoadsConn) -> Result<&'c tokio_postgres::Client> {
        if conn.client.as_ref().is_none_or(|c| c.is_closed()) {
            conn.client = None;
            let (client, connection) = self
                .config
                .connect(NoTls)
                .await
                .map_err(|err| db_error("connecting", err))?;
            tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::warn!(%err, "the connection holding loaded sessions ended");
                }
            });
            for session in conn.counts.keys() {
                let got: bool = client
                    .query_one(
                        "SELECT pg_try_advisory_lock_shared(hashtextextended($1, $2))",
                        &[session, &LOADED_SEED],
                    )
                    .await
                    .map_err(|err| db_error("holding a session", err))?
                    .get(0);
                if !got {
                    tracing::info!(%session, "a gc holds a loaded session; its next read finds out");
                }
            }
            conn.client = Some(client);
        }
        conn.client
            .as_ref()
            .ok_or_else(|| Error::Internal("no connection for loaded sessions".into()))
    }
}

/// One session as retention sees it ([`Postgres::overview`]).
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub session: String,
    /// Seconds since its last commit, by the database's clock.
    pub age_secs: f64,
    /// Its newest commit: unchanged, nothing was committed since.
    pub last_seq: i64,
    /// The bytes of its commits.
    pub bytes: u64,
    /// Whether another session forks from it (and reads its rows).
    pub forked: bool,
}

fn db_error(what: &str, err: impl std::fmt::Display + std::fmt::Debug) -> Error {
    // tokio-postgres says only "db error" in its Display; the server's
    // message is in the source, which the alternate Debug shows.
    let text = err.to_string();
    let text = if text == "db error" {
        format!("{err:?}")
    } else {
        text
    };
    Error::Storage {
        message: format!("postgres: {what}: {text}"),
        path: None,
    }
}

/// A connection URL with its password hidden, for messages and logs.
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

impl Postgres {
    /// A pool for `url` (`postgresql://user@host:port/db`, or a key=value
    /// connection string). Connects lazily; [`Postgres::check_schema`]
    /// makes the first connection.
    pub fn connect(url: &str, max_connections: usize) -> Result<Postgres> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|err| db_error(&format!("storage.postgres.url {}", redacted(url)), err))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = |manager, size: usize| {
            Pool::builder(manager)
                .max_size(size.max(1))
                .runtime(Runtime::Tokio1)
                .build()
                .map_err(|err| db_error("building the pool", err))
        };
        let holds = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Ok(Postgres {
            pool: pool(manager, max_connections)?,
            holds: pool(holds, max_connections / 4)?,
            loads: std::sync::Arc::new(Loads {
                config,
                conn: tokio::sync::Mutex::new(LoadsConn::default()),
            }),
        })
    }

    /// Hold `session`'s saved outputs ([`OutputsHold`]): shared, waiting
    /// while a gc deletes; or exclusive, `None` at once when anyone holds
    /// them.
    pub async fn outputs_hold(
        &self,
        session: &str,
        exclusive: bool,
    ) -> Result<Option<OutputsHold>> {
        if exclusive {
            return self.gc_hold(session, false).await;
        }
        let client = self.hold_client().await?;
        client
            .query_one(
                "SELECT pg_advisory_lock_shared(hashtextextended($1, $2))",
                &[&session, &OUTPUTS_SEED],
            )
            .await
            .map_err(|err| db_error("holding saved outputs", err))?;
        Ok(Some(OutputsHold {
            client: Some(client),
            session: session.to_owned(),
            exclusive: false,
            seeds: vec![OUTPUTS_SEED],
        }))
    }

    /// gc's hold on `session`, exclusive and taken without waiting: its
    /// saved outputs, and with `whole` (gc is to remove the session) also
    /// its [`LoadedHold`] key, so that no replica has it loaded. `None`
    /// when anyone holds either.
    pub async fn gc_hold(&self, session: &str, whole: bool) -> Result<Option<OutputsHold>> {
        let mut hold = OutputsHold {
            client: Some(self.hold_client().await?),
            session: session.to_owned(),
            exclusive: true,
            seeds: Vec::new(),
        };
        let seeds: &[i64] = if whole {
            &[LOADED_SEED, OUTPUTS_SEED]
        } else {
            &[OUTPUTS_SEED]
        };
        for seed in seeds {
            let Some(client) = &hold.client else {
                return Ok(None);
            };
            let got: bool = client
                .query_one(
                    "SELECT pg_try_advisory_lock(hashtextextended($1, $2))",
                    &[&session, seed],
                )
                .await
                .map_err(|err| db_error("gc: holding a session", err))?
                .get(0);
            if !got {
                hold.release().await;
                return Ok(None);
            }
            hold.seeds.push(*seed);
        }
        Ok(Some(hold))
    }

    async fn hold_client(&self) -> Result<deadpool_postgres::Object> {
        self.holds
            .get()
            .await
            .map_err(|err| db_error("connecting", err))
    }

    /// Hold `session` loaded ([`LoadedHold`]), waiting while a gc removes
    /// it. Taken before the session is first read, so what the replica
    /// reads is either from before gc removed it (then gc skips it) or
    /// from after (then the replica starts from what is there now).
    pub async fn hold_loaded_session(&self, session: &str) -> Result<LoadedHold> {
        loop {
            if self.loads.try_hold(session).await? {
                return Ok(LoadedHold {
                    loads: self.loads.clone(),
                    session: Some(session.to_owned()),
                });
            }
            // A gc holds the key exclusively: wait for it on a connection
            // of the pool, so the connection of the loaded holds (which
            // every session of this process shares) never waits.
            let client = self.hold_client().await?;
            for sql in [
                "SELECT pg_advisory_lock_shared(hashtextextended($1, $2))",
                "SELECT pg_advisory_unlock_shared(hashtextextended($1, $2))",
            ] {
                client
                    .query_one(sql, &[&session, &LOADED_SEED])
                    .await
                    .map_err(|err| db_error("waiting for gc", err))?;
            }
        }
    }

    /// Every session, with what retention weighs it by.
    pub async fn overview(&self) -> Result<Vec<SessionRow>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT s.session,
                        extract(epoch FROM now() - s.last_write_at)::float8,
                        COALESCE(m.last_seq, 0),
                        COALESCE(m.bytes, 0)::bigint,
                        EXISTS (SELECT 1 FROM toolwire_sessions c WHERE c.parent = s.session)
                   FROM toolwire_sessions s
                   LEFT JOIN (SELECT session, max(seq) AS last_seq, sum(octet_length(lines)) AS bytes
                                FROM toolwire_commits GROUP BY session) m
                     ON m.session = s.session
                  ORDER BY s.session",
                &[],
            )
            .await
            .map_err(|err| db_error("gc", err))?;
        Ok(rows
            .iter()
            .map(|row| SessionRow {
                session: row.get(0),
                age_secs: row.get(1),
                last_seq: row.get(2),
                bytes: u64::try_from(row.get::<_, i64>(3)).unwrap_or(0),
                forked: row.get(4),
            })
            .collect())
    }

    /// Delete `session` (its commits and decisions) if, under its commit
    /// lock, nothing was committed to it since `last_seq` and no session
    /// forks from it; whether it was deleted.
    pub async fn remove_if_unchanged(&self, session: &str, last_seq: i64) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = locked(&mut client, session, "gc").await?;
        let deleted = tx
            .execute(
                "DELETE FROM toolwire_sessions s
                  WHERE s.session = $1
                    AND COALESCE((SELECT max(seq) FROM toolwire_commits WHERE session = $1), 0) <= $2
                    AND NOT EXISTS (SELECT 1 FROM toolwire_sessions c WHERE c.parent = s.session)",
                &[&session, &last_seq],
            )
            .await
            .map_err(|err| db_error("gc", err))?;
        tx.commit()
            .await
            .map_err(|err| db_error("gc: commit", err))?;
        Ok(deleted == 1)
    }

    /// The saved outputs that decisions point at in sessions other than
    /// their own (a decision bound to an inherited replacement names its
    /// parent's output), by the session pointed into. The decisions are
    /// streamed and only these few are kept: gc never holds every
    /// decision, nor every output referenced.
    pub async fn foreign_references(&self) -> Result<HashMap<String, HashSet<String>>> {
        use futures_util::TryStreamExt;
        let client = self.client().await?;
        let rows = client
            .query_raw(
                "SELECT session, replacement FROM toolwire_decisions WHERE replacement IS NOT NULL",
                std::iter::empty::<&str>(),
            )
            .await
            .map_err(|err| db_error("gc", err))?;
        futures_util::pin_mut!(rows);
        let mut foreign: HashMap<String, HashSet<String>> = HashMap::new();
        while let Some(row) = rows.try_next().await.map_err(|err| db_error("gc", err))? {
            let session: &str = row.get(0);
            let bytes: &[u8] = row.get(1);
            for (target, name) in targets_of(bytes, session) {
                if target != session {
                    foreign.entry(target).or_default().insert(name);
                }
            }
        }
        Ok(foreign)
    }

    /// The saved outputs that each of `sessions` points at in itself, by
    /// its own decisions (read by the table's key), by session: gc reads a
    /// batch of sessions at a time, in few round trips and bounded memory.
    pub async fn own_references(
        &self,
        sessions: &[&str],
    ) -> Result<HashMap<String, HashSet<String>>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT session, replacement FROM toolwire_decisions
                  WHERE replacement IS NOT NULL AND session = ANY($1)",
                &[&sessions],
            )
            .await
            .map_err(|err| db_error("gc", err))?;
        let mut own: HashMap<String, HashSet<String>> = HashMap::new();
        for row in &rows {
            let session: &str = row.get(0);
            for (target, name) in targets_of(row.get(1), session) {
                if target == session {
                    own.entry(target).or_default().insert(name);
                }
            }
        }
        Ok(own)
    }

    /// The saved outputs of `session` that any decision points at now: its
    /// own, and any other session's (found by the session's name in the
    /// replacement: a preview's path names the session's folder verbatim,
    /// its link the session as the tenant knows it, which is the name or
    /// the name less a tenant's prefix).
    pub async fn references_into(&self, session: &str) -> Result<HashSet<String>> {
        let link = |named: &str| format!("{}{named}/", crate::budget::preview::LINK_PREFIX);
        let unprefixed = session.split_once('.').map_or(session, |(_, rest)| rest);
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT session, replacement FROM toolwire_decisions
                  WHERE replacement IS NOT NULL
                    AND (session = $1 OR position(convert_to($1, 'UTF8') in replacement) > 0
                         OR position(convert_to($2, 'UTF8') in replacement) > 0
                         OR position(convert_to($3, 'UTF8') in replacement) > 0)",
                &[&session, &link(session), &link(unprefixed)],
            )
            .await
            .map_err(|err| db_error("gc", err))?;
        Ok(rows
            .iter()
            .flat_map(|row| targets_of(row.get(1), row.get(0)))
            .filter(|(target, _)| target == session)
            .map(|(_, name)| name)
            .collect())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(|err| db_error("connecting", err))
    }

    /// Create or upgrade the schema; returns the versions applied now.
    /// Idempotent, and safe when several replicas run it at once: the
    /// whole upgrade runs in one transaction holding an advisory lock.
    pub async fn migrate(&self) -> Result<Vec<i32>> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|err| db_error("migrate", err))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
            .await
            .map_err(|err| db_error("migrate: lock", err))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS toolwire_schema_migrations (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(|err| db_error("migrate", err))?;
        let done: Vec<i32> = tx
            .query("SELECT version FROM toolwire_schema_migrations", &[])
            .await
            .map_err(|err| db_error("migrate", err))?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut applied = Vec::new();
        for (version, sql) in MIGRATIONS {
            if done.contains(version) {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(|err| db_error(&format!("migration {version}"), err))?;
            tx.execute(
                "INSERT INTO toolwire_schema_migrations (version) VALUES ($1)",
                &[version],
            )
            .await
            .map_err(|err| db_error("migrate", err))?;
            applied.push(*version);
        }
        tx.commit()
            .await
            .map_err(|err| db_error("migrate: commit", err))?;
        Ok(applied)
    }

    /// Fail unless every migration this version knows has been applied.
    pub async fn check_schema(&self) -> Result<()> {
        let client = self.client().await?;
        let latest = MIGRATIONS.iter().map(|(v, _)| *v).max().unwrap_or(0);
        let have: Option<i32> = client
            .query_opt("SELECT max(version) FROM toolwire_schema_migrations", &[])
            .await
            .ok()
            .flatten()
            .and_then(|row| row.get(0));
        if have.unwrap_or(0) < latest {
            return Err(Error::Storage {
                message: format!(
                    "postgres: the database's schema is at version {} and this toolwire needs {latest}: run `toolwire migrate`",
                    have.unwrap_or(0)
                ),
                path: None,
            });
        }
        Ok(())
    }

    /// How many sessions the store holds.
    pub async fn session_count(&self) -> Result<u64> {
        let client = self.client().await?;
        let n: i64 = client
            .query_one("SELECT count(*) FROM toolwire_sessions", &[])
            .await
            .map_err(|err| db_error("gc", err))?
            .get(0);
        Ok(n.max(0) as u64)
    }
}

/// Commits of a session and of its fork ancestors up to each fork point,
/// in `seq` order.
const READ_SQL: &str = "
WITH RECURSIVE chain (session, upto) AS (
    SELECT $1::text, NULL::bigint
  UNION ALL
    SELECT s.parent, LEAST(c.upto, s.fork_seq)
      FROM toolwire_sessions s JOIN chain c ON s.session = c.session
     WHERE s.parent IS NOT NULL
)
SELECT m.seq, m.lines
  FROM toolwire_commits m JOIN chain c ON m.session = c.session
 WHERE m.seq > $2 AND (c.upto IS NULL OR m.seq <= c.upto)
 ORDER BY m.seq";

/// A transaction holding `session`'s commit lock ([`LOCK_SQL`]).
async fn locked<'c>(
    client: &'c mut deadpool_postgres::Object,
    session: &str,
    what: &str,
) -> Result<deadpool_postgres::Transaction<'c>> {
    let tx = client
        .transaction()
        .await
        .map_err(|err| db_error(what, err))?;
    tx.execute(LOCK_SQL, &[&session])
        .await
        .map_err(|err| db_error(&format!("{what}: lock"), err))?;
    Ok(tx)
}

/// Write `append` to `session` (creating it) in `tx`, which holds the
/// session's lock: its lines and the decisions it wins, as one commit.
async fn write_commit(
    tx: &tokio_postgres::Transaction<'_>,
    session: &str,
    append: Append,
) -> Result<()> {
    // `xmax = 0` only on a row this statement inserted.
    let created: bool = tx
        .query_one(
            "INSERT INTO toolwire_sessions (session) VALUES ($1)
             ON CONFLICT (session) DO UPDATE SET last_write_at = now()
             RETURNING (xmax = 0)",
            &[&session],
        )
        .await
        .map_err(|err| db_error("append", err))?
        .get(0);
    let mut bytes = match (created, append.header) {
        (true, Some(header)) => header,
        _ => Vec::new(),
    };
    bytes.extend_from_slice(&append.lines);
    let mut lines = Lines::default();
    let mut seen = SeenLine {
        tool_use_ids: Vec::new(),
        digests: Vec::new(),
    };
    let insert = tx
        .prepare(
            "INSERT INTO toolwire_decisions (session, tool_use_id, digest, replacement)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .await
        .map_err(|err| db_error("append", err))?;
    for decision in append.decisions {
        let digest = decision.digest.clone().unwrap_or_default();
        // A clearing races other clearings of the same original, not its
        // first decision (which is already in the table).
        let key = if decision.cleared {
            format!("cleared:{digest}")
        } else {
            digest.clone()
        };
        let won = tx
            .execute(
                &insert,
                &[
                    &session,
                    &decision.tool_use_id.as_bytes(),
                    &key,
                    &decision.replacement.as_ref().map(String::as_bytes),
                ],
            )
            .await
            .map_err(|err| db_error("append: decision", err))?
            == 1;
        if !won {
            continue;
        }
        match decision.replacement {
            Some(replacement) => lines.push_record(&ReplacementRecord {
                kind: RECORD_KIND.to_owned(),
                tool_use_id: decision.tool_use_id,
                replacement,
                digest: decision.digest,
                cleared: decision.cleared,
            }),
            None => {
                seen.tool_use_ids.push(decision.tool_use_id);
                seen.digests.push(digest);
            }
        }
    }
    if !seen.tool_use_ids.is_empty() {
        lines.push_seen(&seen);
    }
    bytes.extend_from_slice(&lines.bytes);
    if !bytes.is_empty() {
        tx.execute(
            "INSERT INTO toolwire_commits (session, lines) VALUES ($1, $2)",
            &[&session, &bytes],
        )
        .await
        .map_err(|err| db_error("append", err))?;
    }
    Ok(())
}

/// The commits of a session as [`READ_SQL`] reads them, then one row (its
/// `seq` NULL) with the session's pending pair and incarnation, when the
/// session exists.
const READ_WITH_PAIR_SQL: &str = "
WITH RECURSIVE chain (session, upto) AS (
    SELECT $1::text, NULL::bigint
  UNION ALL
    SELECT s.parent, LEAST(c.upto, s.fork_seq)
      FROM toolwire_sessions s JOIN chain c ON s.session = c.session
     WHERE s.parent IS NOT NULL
)
SELECT m.seq, m.lines, NULL::bytea, NULL::bigint
  FROM toolwire_commits m JOIN chain c ON m.session = c.session
 WHERE m.seq > $2 AND (c.upto IS NULL OR m.seq <= c.upto)
UNION ALL
SELECT NULL::bigint, NULL::bytea, p.pair, s.incarnation
  FROM toolwire_sessions s LEFT JOIN toolwire_pending_pairs p ON p.session = s.session
 WHERE s.session = $1
 ORDER BY 1 NULLS LAST";

/// The `(session, output name)`s a replacement's preview, decided in
/// session `own`, may name (every file a link may name: gc keeping one
/// too many is safe).
fn targets_of(replacement: &[u8], own: &str) -> Vec<(String, String)> {
    std::str::from_utf8(replacement)
        .map(|text| crate::budget::preview::preview_targets(text, own))
        .unwrap_or_default()
}

/// Serialize the commits of one session (see the migration).
const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 16))";

impl SharedStore for Postgres {
    fn ping(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.client()
                .await?
                .simple_query("SELECT 1")
                .await
                .map_err(|err| db_error("ping", err))?;
            Ok(())
        })
    }

    fn hold_outputs<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<Option<OutputsHold>>> {
        Box::pin(self.outputs_hold(session, false))
    }

    fn hold_loaded<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<LoadedHold>> {
        Box::pin(self.hold_loaded_session(session))
    }

    fn read(&self, session: &str, after: i64) -> BoxFuture<'_, Result<Option<Vec<Commit>>>> {
        let session = session.to_owned();
        Box::pin(async move {
            let client = self.client().await?;
            let exists = client
                .query_opt(
                    "SELECT 1 FROM toolwire_sessions WHERE session = $1",
                    &[&session],
                )
                .await
                .map_err(|err| db_error("read", err))?
                .is_some();
            if !exists {
                return Ok(None);
            }
            let rows = client
                .query(READ_SQL, &[&session, &after])
                .await
                .map_err(|err| db_error("read", err))?;
            Ok(Some(
                rows.into_iter()
                    .map(|row| Commit {
                        seq: row.get(0),
                        lines: row.get(1),
                    })
                    .collect(),
            ))
        })
    }

    fn append<'a>(&'a self, session: &'a str, append: Append) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = locked(&mut client, session, "append").await?;
            write_commit(&tx, session, append).await?;
            tx.commit()
                .await
                .map_err(|err| db_error("append: commit", err))
        })
    }

    fn read_with_pair(&self, session: &str, after: i64) -> BoxFuture<'_, Result<Option<WithPair>>> {
        let session = session.to_owned();
        Box::pin(async move {
            let client = self.client().await?;
            // One statement, so the commits and the pending pair are of
            // one snapshot.
            let rows = client
                .query(READ_WITH_PAIR_SQL, &[&session, &after])
                .await
                .map_err(|err| db_error("read", err))?;
            let mut commits = Vec::with_capacity(rows.len());
            let mut pair = None;
            let mut incarnation = None;
            for row in rows {
                match row.get::<_, Option<i64>>(0) {
                    Some(seq) => commits.push(Commit {
                        seq,
                        lines: row.get(1),
                    }),
                    None => {
                        incarnation = row.get(3);
                        pair = row.get(2);
                    }
                }
            }
            Ok(incarnation.map(|incarnation| WithPair {
                commits,
                pair,
                incarnation,
            }))
        })
    }

    fn append_pair<'a>(
        &'a self,
        session: &'a str,
        append: Append,
        expected: Option<Vec<u8>>,
        pair: Option<Vec<u8>>,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = locked(&mut client, session, "pair").await?;
            let current: Option<Vec<u8>> = tx
                .query_opt(
                    "SELECT pair FROM toolwire_pending_pairs WHERE session = $1",
                    &[&session],
                )
                .await
                .map_err(|err| db_error("pair", err))?
                .map(|row| row.get(0));
            if current != expected {
                // Another replica moved the pair first; dropping the
                // transaction rolls it back.
                return Ok(false);
            }
            write_commit(&tx, session, append).await?;
            match &pair {
                Some(pair) => {
                    tx.execute(
                        "INSERT INTO toolwire_pending_pairs (session, pair) VALUES ($1, $2)
                         ON CONFLICT (session) DO UPDATE SET pair = EXCLUDED.pair",
                        &[&session, pair],
                    )
                    .await
                }
                None => {
                    tx.execute(
                        "DELETE FROM toolwire_pending_pairs WHERE session = $1",
                        &[&session],
                    )
                    .await
                }
            }
            .map_err(|err| db_error("pair", err))?;
            tx.commit()
                .await
                .map_err(|err| db_error("pair: commit", err))?;
            Ok(true)
        })
    }

    fn collect<'a>(
        &'a self,
        data_dir: &'a std::path::Path,
        objects: Option<std::sync::Arc<crate::artifact::objects::ObjectArtifacts>>,
        policy: &'a crate::retention::Policy,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<crate::retention::GcReport>> {
        Box::pin(gc::collect(self, data_dir, objects, policy, dry_run))
    }

    fn fork<'a>(&'a self, parent: &'a str, child: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client
                .transaction()
                .await
                .map_err(|err| db_error("fork", err))?;
            // Under the parent's lock, every commit numbered up to the
            // fork point has committed.
            tx.execute(LOCK_SQL, &[&parent])
                .await
                .map_err(|err| db_error("fork: lock", err))?;
            let upto: i64 = tx
                .query_one("SELECT COALESCE(max(seq), 0) FROM toolwire_commits", &[])
                .await
                .map_err(|err| db_error("fork", err))?
                .get(0);
            let inserted = tx
                .execute(
                    "INSERT INTO toolwire_sessions (session, parent, fork_seq)
                     SELECT $1, session, $3 FROM toolwire_sessions WHERE session = $2
                     ON CONFLICT DO NOTHING",
                    &[&child, &parent, &upto],
                )
                .await
                .map_err(|err| db_error("fork", err))?;
            if inserted == 0 {
                return Err(Error::SessionExists {
                    session_id: child.to_owned(),
                });
            }
            tx.commit()
                .await
                .map_err(|err| db_error("fork: commit", err))
        })
    }
}
