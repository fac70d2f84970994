//! `toolwire gc` and `storage/gc` on the shared store, by the rules the
//! local collector ([`crate::retention`]) follows on files:
//!
//! - a session goes as a unit (its commits and decisions, then its saved
//!   outputs under the data directory and in the bucket) when its last
//!   commit is older than `maxAgeDays`, and, over `maxTotalBytes` (its
//!   commits' bytes and its saved outputs'), the least recently written go
//!   first; never one another session forks from (the fork reads its
//!   rows: the parent goes on the run after its last fork);
//! - in a kept session, a saved output no decision points at, and a
//!   temporary leftover of an artifact write, go once older than the grace
//!   period; so do outputs of a session the database does not hold (an
//!   apply that died before its decisions committed, a gc cut short).
//!
//! Nothing is removed from under a replica: before removing a session,
//! gc takes exclusively, without waiting, its directory's lock (for
//! outputs under the data directory), its outputs' hold in the database
//! ([`OutputsHold`]) and its loaded key
//! ([`super::LoadedHold`], which every replica holds shared for
//! each session it has loaded, from before its first read), and skips the
//! session when anyone holds any of them: a replica holding the session
//! loaded, or with an apply in flight on it, keeps it (as a server holding
//! a transcript open keeps it on the local store). Sweeping a kept
//! session's unreferenced outputs takes the directory's lock and the
//! outputs' hold only. Under them it deletes a session's
//! rows only if nothing was committed to it since the scan, and it reads
//! the references again before deleting an output, so it sees every
//! decision an apply made with the outputs it wrote or found.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use super::{OutputsHold, Postgres, SessionRow};
use crate::artifact::objects::{INDEX_SUFFIX, ObjectArtifacts};
use crate::artifact::{TEMP_PREFIX, is_artifact_name};
use crate::error::{Error, Result};
use crate::retention::{GcReport, Listed, Policy};

/// How many sessions' own references one query reads: each row is a
/// whole preview (about 2 KB), so 64 sessions of ten keep the batch near
/// 1 MB, in 160 round trips for 10,000 sessions.
const REFERENCES_BATCH: usize = 64;

/// One run over the shared store and the saved outputs in `data_dir` and,
/// when configured, in `objects`.
pub async fn collect(
    store: &Postgres,
    data_dir: &Path,
    objects: Option<Arc<ObjectArtifacts>>,
    policy: &Policy,
    dry_run: bool,
) -> Result<GcReport> {
    let mut report = GcReport::default();
    let sessions_dir = data_dir.join("sessions");
    let rows = store.overview().await?;
    // The sessions the bucket holds outputs of, by name only: each one's
    // objects are listed when it is weighed, swept or removed, and
    // dropped after, so no run holds a listing of every output.
    let in_bucket: HashSet<String> = match &objects {
        Some(objects) => sessions_in(objects).await?.into_iter().collect(),
        None => HashSet::new(),
    };
    let mut weighed: Vec<(SessionRow, u64)> = Vec::with_capacity(rows.len());
    for row in rows {
        let mut outputs = dir_bytes(&sessions_dir.join(&row.session));
        if let Some(objects) = objects
            .as_ref()
            .filter(|_| in_bucket.contains(&row.session))
        {
            outputs += list(objects, &row.session)
                .await?
                .iter()
                .map(|(_, size, _)| size)
                .sum::<u64>();
        }
        let bytes = row.bytes + outputs;
        weighed.push((row, bytes));
    }
    let remove = choose(&weighed, policy);

    for (row, bytes) in &weighed {
        let id = &row.session;
        if !remove.contains(id) {
            continue;
        }
        // A dry run asks for the holds too (and lets go at once), so it
        // lists what a real run now would remove: not what a replica holds.
        let Some(held) = hold(store, &sessions_dir, id, Hold::Whole).await? else {
            continue;
        };
        if dry_run {
            held.release().await;
            report.bytes_freed += bytes;
            report.sessions_removed.push(id.clone());
            continue;
        }
        if !store.remove_if_unchanged(id, row.last_seq).await? {
            held.release().await;
            continue;
        }
        // After the rows: never a decision whose output is gone.
        let dir = sessions_dir.join(id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::storage(&dir, &err)),
        }
        if let Some(objects) = objects.as_ref().filter(|_| in_bucket.contains(id)) {
            // Listed now: the rows are gone, whatever is there is nobody's.
            let names = list(objects, id).await?;
            delete(
                objects,
                id,
                names.into_iter().map(|(n, s, _)| (n, s)).collect(),
            )
            .await?;
        }
        held.release().await;
        report.bytes_freed += bytes;
        report.sessions_removed.push(id.clone());
    }

    // Sweep the kept sessions, and outputs of sessions the store does not
    // hold, of what nothing points at.
    let mut sweep: Vec<String> = weighed
        .iter()
        .map(|(row, _)| row.session.clone())
        .filter(|id| !remove.contains(id))
        .collect();
    let known: HashSet<String> = weighed.iter().map(|(r, _)| r.session.clone()).collect();
    let mut orphans: Vec<String> = in_bucket
        .iter()
        .cloned()
        .chain(dir_sessions(&sessions_dir))
        .filter(|id| !known.contains(id))
        .collect();
    orphans.sort();
    orphans.dedup();
    sweep.extend(orphans);
    // What decisions point at across sessions, held whole (it is only
    // what forks inherited); what a session's own decisions point at is
    // read for a batch of sessions at a time, as the sweep comes to them.
    let foreign = store.foreign_references().await?;
    let mut own: HashMap<String, HashSet<String>> = HashMap::new();
    for (i, id) in sweep.iter().enumerate() {
        if i % REFERENCES_BATCH == 0 {
            let batch: Vec<&str> = sweep[i..]
                .iter()
                .take(REFERENCES_BATCH)
                .filter(|id| known.contains(*id))
                .map(String::as_str)
                .collect();
            own = store.own_references(&batch).await?;
        }
        let files = files_of(&sessions_dir, id);
        let in_bucket = match objects.as_ref().filter(|_| in_bucket.contains(id)) {
            Some(objects) => list(objects, id).await?,
            None => Vec::new(),
        };
        if files.is_empty() && in_bucket.is_empty() {
            continue;
        }
        let mut refs = own.remove(id).unwrap_or_default();
        refs.extend(foreign.get(id).into_iter().flatten().cloned());
        let doomed = unreferenced(&files, &in_bucket, &refs, policy);
        if doomed.is_empty() {
            continue;
        }
        let what = if objects.is_some() {
            Hold::Outputs
        } else {
            Hold::Dir
        };
        let Some(held) = hold(store, &sessions_dir, id, what).await? else {
            continue;
        };
        if dry_run {
            // Held and let go at once, as for a removal: a dry run lists
            // what a real run now would remove, not what an apply holds.
            held.release().await;
            for (what, size) in doomed.names(&sessions_dir, objects.as_deref(), id) {
                report.artifacts_removed.push(what);
                report.bytes_freed += size;
            }
            continue;
        }
        // Under the holds no apply is between writing and committing: the
        // references read now are complete.
        let fresh = store.references_into(id).await?;
        let doomed = unreferenced(&files, &in_bucket, &fresh, policy);
        let removed = remove_outputs(&sessions_dir, objects.as_ref(), id, &doomed).await;
        held.release().await;
        for (what, size) in removed? {
            report.artifacts_removed.push(what);
            report.bytes_freed += size;
        }
    }

    report.kept = store.session_count().await?;
    if dry_run {
        report.kept = report
            .kept
            .saturating_sub(report.sessions_removed.len() as u64);
    }
    Ok(report)
}

/// Sessions to remove whole: expired ones, then the least recently written
/// while the store is over its byte limit; never one another forks from.
fn choose(weighed: &[(SessionRow, u64)], policy: &Policy) -> HashSet<String> {
    // How far the policy's clock is ahead of this machine's: a run's
    // policy is taken as of now, a test's may look into the future.
    let ahead = policy
        .now
        .duration_since(SystemTime::now())
        .map_or(0.0, |d| d.as_secs_f64());
    let mut remove = HashSet::new();
    if let Some(max_age) = policy.max_age {
        for (row, _) in weighed {
            if !row.forked && row.age_secs + ahead > max_age.as_secs_f64() {
                remove.insert(row.session.clone());
            }
        }
    }
    if let Some(limit) = policy.max_total_bytes {
        let mut total: u64 = weighed
            .iter()
            .filter(|(row, _)| !remove.contains(&row.session))
            .map(|(_, bytes)| bytes)
            .sum();
        let mut oldest: Vec<&(SessionRow, u64)> = weighed
            .iter()
            .filter(|(row, _)| !remove.contains(&row.session) && !row.forked)
            .collect();
        oldest.sort_by(|(a, _), (b, _)| {
            b.age_secs
                .total_cmp(&a.age_secs)
                .then_with(|| a.session.cmp(&b.session))
        });
        for (row, bytes) in oldest {
            if total <= limit {
                break;
            }
            total = total.saturating_sub(*bytes);
            remove.insert(row.session.clone());
        }
    }
    remove
}

/// What of one session's outputs goes: files under the data directory and
/// objects in the bucket, by name, with their sizes.
#[derive(Default)]
struct Doomed {
    files: Vec<(String, u64)>,
    objects: Vec<(String, u64)>,
    /// Line indexes kept beside local artifacts (`<name>.idx`) whose
    /// artifact goes or is gone: removed with them, never named as an
    /// output.
    indexes: Vec<String>,
}

impl Doomed {
    fn is_empty(&self) -> bool {
        self.files.is_empty() && self.objects.is_empty() && self.indexes.is_empty()
    }

    /// What a report names: a file's path, an object's URL.
    fn names(
        &self,
        sessions_dir: &Path,
        objects: Option<&ObjectArtifacts>,
        id: &str,
    ) -> Vec<(String, u64)> {
        let results = sessions_dir.join(id).join("tool-results");
        let files = self
            .files
            .iter()
            .map(|(name, size)| (results.join(name).display().to_string(), *size));
        let objects = objects.into_iter().flat_map(|o| {
            self.objects
                .iter()
                .map(move |(name, size)| (o.url_of(&o.key(id, name)), *size))
        });
        files.chain(objects).collect()
    }
}

/// The outputs of one session older than the grace period that no
/// reference into it (`refs`, by name) names (an artifact's line index
/// goes with it, or alone once its artifact is gone), and its temporary
/// leftovers.
fn unreferenced(
    files: &Listed,
    in_bucket: &Listed,
    refs: &HashSet<String>,
    policy: &Policy,
) -> Doomed {
    let old = |modified: &SystemTime| *modified + policy.grace < policy.now;
    let free = |name: &str| !refs.contains(name);
    let local = files;
    let files: Vec<(String, u64)> = local
        .iter()
        .filter(|(name, _, modified)| {
            old(modified)
                && (name.starts_with(TEMP_PREFIX) || (is_artifact_name(name) && free(name)))
        })
        .map(|(name, size, _)| (name.clone(), *size))
        .collect();
    let local_indexes = crate::retention::orphan_indexes(
        local.iter().map(|(name, _, _)| name.as_str()),
        files.iter().map(|(name, _)| name.as_str()),
    )
    .into_iter()
    .map(str::to_owned)
    .collect();
    let mut objects: Vec<(String, u64)> = in_bucket
        .iter()
        .filter(|(name, _, modified)| is_artifact_name(name) && old(modified) && free(name))
        .map(|(name, size, _)| (name.clone(), *size))
        .collect();
    let there: HashSet<&str> = in_bucket.iter().map(|(n, _, _)| n.as_str()).collect();
    let going: HashSet<&str> = objects.iter().map(|(n, _)| n.as_str()).collect();
    let indexes: Vec<(String, u64)> = in_bucket
        .iter()
        .filter(|(name, _, modified)| {
            let Some(artifact) = name.strip_suffix(INDEX_SUFFIX) else {
                return false;
            };
            going.contains(artifact) || (!there.contains(artifact) && old(modified))
        })
        .map(|(name, size, _)| (name.clone(), *size))
        .collect();
    objects.extend(indexes);
    Doomed {
        files,
        objects,
        indexes: local_indexes,
    }
}

/// Remove what `doomed` names; what was there to remove, as the report
/// names it.
async fn remove_outputs(
    sessions_dir: &Path,
    objects: Option<&Arc<ObjectArtifacts>>,
    id: &str,
    doomed: &Doomed,
) -> Result<Vec<(String, u64)>> {
    let mut removed = Vec::new();
    let results = sessions_dir.join(id).join("tool-results");
    for (name, size) in &doomed.files {
        let path = results.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push((path.display().to_string(), *size)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::storage(&path, &err)),
        }
    }
    for name in &doomed.indexes {
        let path = results.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::storage(&path, &err)),
        }
    }
    if let Some(objects) = objects {
        removed.extend(delete(objects, id, doomed.objects.clone()).await?);
    }
    Ok(removed)
}

/// Delete `names` of `id` from the bucket; the ones that were there, by
/// URL, with their sizes. The store's client is blocking (it runs its own
/// runtime), so this runs on a blocking thread.
async fn delete(
    objects: &Arc<ObjectArtifacts>,
    id: &str,
    names: Vec<(String, u64)>,
) -> Result<Vec<(String, u64)>> {
    let objects = objects.clone();
    let id = id.to_owned();
    let url = objects.session_url(&id);
    tokio::task::spawn_blocking(move || {
        let mut deleted = Vec::new();
        for (name, size) in names {
            let key = objects.key(&id, &name);
            if objects.delete(&key)? {
                deleted.push((objects.url_of(&key), size));
            }
        }
        Ok::<_, std::io::Error>(deleted)
    })
    .await
    .map_err(|err| Error::Internal(format!("gc task failed: {err}")))?
    .map_err(|err| Error::storage(Path::new(&url), &err))
}

/// The sessions the bucket holds outputs of (their names only).
async fn sessions_in(objects: &Arc<ObjectArtifacts>) -> Result<Vec<String>> {
    let objects = objects.clone();
    let url = objects.url_of(&objects.sessions());
    tokio::task::spawn_blocking(move || crate::retention::object_sessions(&objects))
        .await
        .map_err(|err| Error::Internal(format!("gc task failed: {err}")))?
        .map_err(|err| Error::storage(Path::new(&url), &err))
}

/// The outputs of session `id` in the bucket.
async fn list(objects: &Arc<ObjectArtifacts>, id: &str) -> Result<Listed> {
    let objects = objects.clone();
    let id = id.to_owned();
    let url = objects.session_url(&id);
    tokio::task::spawn_blocking(move || crate::retention::list_session(&objects, &id))
        .await
        .map_err(|err| Error::Internal(format!("gc task failed: {err}")))?
        .map_err(|err| Error::storage(Path::new(&url), &err))
}

/// A session's holds, both taken without waiting.
struct Held {
    _dir: Option<std::fs::File>,
    outputs: Option<OutputsHold>,
}

impl Held {
    async fn release(self) {
        if let Some(outputs) = self.outputs {
            outputs.release().await;
        }
    }
}

/// What gc holds of a session before it touches it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Its directory under the data directory only (sweeping outputs
    /// there).
    Dir,
    /// Its directory and its outputs in the database (sweeping outputs in
    /// a bucket).
    Outputs,
    /// Everything: its directory, its outputs, and its loaded key, so that
    /// no replica has it loaded or an apply on it in flight (removing it).
    Whole,
}

/// Hold `id`'s directory (when it exists) and, as `what` says, its keys in
/// the database, exclusively; `None` when an apply or a replica holds any.
async fn hold(store: &Postgres, sessions_dir: &Path, id: &str, what: Hold) -> Result<Option<Held>> {
    let dir = sessions_dir.join(id);
    let dir = match lock_now(&dir) {
        Ok(Some(dir)) => dir,
        Ok(None) => return Ok(None),
        Err(err) => return Err(Error::storage(&dir, &err)),
    };
    let outputs = if what == Hold::Dir {
        None
    } else {
        match store.gc_hold(id, what == Hold::Whole).await? {
            Some(hold) => Some(hold),
            None => return Ok(None),
        }
    };
    Ok(Some(Held { _dir: dir, outputs }))
}

/// The directory opened and locked exclusively, or `None` when someone
/// holds it (or it does not exist: then there is nothing to hold).
fn lock_now(dir: &Path) -> std::io::Result<Option<Option<std::fs::File>>> {
    let file = match std::fs::File::open(dir) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Some(None)),
        Err(err) => return Err(err),
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(Some(file))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(err)) => Err(err),
    }
}

/// The files in `id`'s `tool-results` directory.
fn files_of(sessions_dir: &Path, id: &str) -> Listed {
    let Ok(entries) = std::fs::read_dir(sessions_dir.join(id).join("tool-results")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file().then(|| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    meta.len(),
                    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                )
            })
        })
        .collect()
}

/// The session directories under the data directory.
fn dir_sessions(sessions_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(sessions_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| crate::transcript::SessionId::try_from(name.clone()).is_ok())
        .collect()
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}
