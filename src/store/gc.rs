//! `toolwire gc` and `storage/gc` on the shared store: sessions whose last
//! commit is older than `retention.maxAgeDays` go, with their commits and
//! decisions and their saved outputs: under the data directory, and on
//! object storage when `storage.objects` puts them there (every object
//! under `sessions/<id>/`, deleted after the session's rows, so a session
//! is never left with decisions whose saved outputs are gone).
//!
//! What the local collector does on files holds here too: a session some
//! `budget/apply` is persisting into is never touched (the apply holds its
//! artifact directory's lock shared until its decisions are committed; gc
//! takes it exclusively without waiting, and skips the session when it
//! cannot), and the row is deleted only if the session is still expired
//! under the session's own commit lock, so a commit that came in since the
//! scan keeps it. A session that another forks from is kept while the fork
//! lives (the fork reads its rows). `maxTotalBytes` and the removal of
//! unreferenced artifacts from kept sessions are the local collector's
//! alone.

use std::path::Path;
use std::sync::Arc;

use super::postgres::Postgres;
use crate::artifact::objects::ObjectArtifacts;
use crate::error::{Error, Result};
use crate::retention::{GcReport, Policy};

/// One run over the shared store and the saved outputs in `data_dir`.
pub async fn collect(
    store: &Postgres,
    data_dir: &Path,
    objects: Option<Arc<ObjectArtifacts>>,
    policy: &Policy,
    dry_run: bool,
) -> Result<GcReport> {
    let mut report = GcReport::default();
    let Some(max_age) = policy.max_age else {
        report.kept = store.session_count().await?;
        return Ok(report);
    };
    let max_age_secs = max_age.as_secs_f64();
    let expired = store.expired(max_age_secs).await?;
    for id in expired {
        let dir = crate::artifact::session_dir(data_dir, &id);
        let session_dir = dir.parent().map(Path::to_path_buf);
        if dry_run {
            report.bytes_freed += session_dir.as_deref().map_or(0, dir_bytes);
            if let Some(objects) = &objects {
                report.bytes_freed += session_objects(objects, &id, false).await?;
            }
            report.sessions_removed.push(id);
            continue;
        }
        // Held exclusively while the rows and the files go.
        let hold = match &session_dir {
            Some(d) => match lock_now(d) {
                Ok(Some(hold)) => Some(hold),
                Ok(None) => continue,
                Err(err) => return Err(Error::storage(d, &err)),
            },
            None => None,
        };
        if !store.remove_if_expired(&id, max_age_secs).await? {
            continue;
        }
        if let Some(d) = &session_dir {
            report.bytes_freed += dir_bytes(d);
            match std::fs::remove_dir_all(d) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(Error::storage(d, &err)),
            }
        }
        if let Some(objects) = &objects {
            report.bytes_freed += session_objects(objects, &id, true).await?;
        }
        drop(hold);
        report.sessions_removed.push(id);
    }
    report.kept = store.session_count().await?;
    if dry_run {
        report.kept = report
            .kept
            .saturating_sub(report.sessions_removed.len() as u64);
    }
    Ok(report)
}

/// The bytes of every object under `sessions/<id>/` in `objects`, each
/// deleted too when `delete`. The store's client is blocking (it runs its
/// own runtime), so this runs on a blocking thread.
async fn session_objects(objects: &Arc<ObjectArtifacts>, id: &str, delete: bool) -> Result<u64> {
    let objects = objects.clone();
    let prefix = objects.sessions().join(id);
    let url = objects.url_of(&prefix);
    tokio::task::spawn_blocking(move || {
        let mut bytes = 0;
        for meta in objects.list(&prefix)? {
            if delete {
                objects.delete(&meta.location)?;
            }
            bytes += meta.size;
        }
        Ok::<_, std::io::Error>(bytes)
    })
    .await
    .map_err(|err| Error::Internal(format!("gc task failed: {err}")))?
    .map_err(|err| Error::storage(Path::new(&url), &err))
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
