//! Retention: removing what toolwire saved once nobody needs it
//! (`toolwire gc`, `storage/gc`, the shared daemon's schedule).
//!
//! The rules (PROTOCOL.md 10.6):
//!
//! - A **session** (its transcript `<id>.jsonl`, with its `.bak`, its
//!   decisions checkpoint `.<id>.jsonl.decisions`, and its
//!   directory `<id>/` of artifacts) expires as a unit when its journal was
//!   last written more than `maxAgeDays` ago. Over `maxTotalBytes`, the
//!   least recently written sessions go first. A session without a journal
//!   is as old as its newest artifact.
//! - A session **held by a client** is never touched: one whose transcript
//!   another open file holds locked (a server, in this process or another,
//!   has it open), one whose artifact directory is locked (a `budget/apply`
//!   is persisting into it), or one the caller says is open.
//! - An **artifact no replacement points at**, older than [`GRACE`], is
//!   removed from a kept session, and so are **temporary leftovers**
//!   (`.tmp-*` of artifact writes, `.fork-*` and `.repair-*` transcripts,
//!   `.gc-*` of an interrupted gc) older than it. Only names the artifact
//!   writer makes are taken for artifacts; anything else is left alone.
//! - **Nothing a kept session points at is removed**: references are read
//!   from every kept session's `replacement` lines (a fork's lines point at
//!   its parent's artifacts), and a session a kept one points into is kept
//!   whole.
//!
//! **Racing `budget/apply`.** An apply holds a shared lock on the session's
//! directory from before it writes (or reuses) an artifact until its
//! `replacement` lines are journaled; gc takes that lock exclusively,
//! without waiting, before removing anything of a session, and re-reads
//! the session's references while holding it. So gc either sees the
//! reference or waits for nothing and skips the session; an apply that
//! finds its session's directory moved away by gc makes a new one. A reply
//! can never point at an artifact gc removed.
//!
//! A dry run makes the same decisions and removes nothing; a real run right
//! after it removes exactly what it listed, unless a session was written or
//! taken by a client in between (then it is kept).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::artifact::objects::{INDEX_SUFFIX, ObjectArtifacts};
use crate::artifact::{TEMP_PREFIX, is_artifact_name};

use crate::error::{Error, Result};
use crate::transcript::SessionId;

/// How old an unreferenced artifact or a temporary file must be before it
/// is removed: long enough for any write in progress to have finished.
pub const GRACE: Duration = Duration::from_secs(3600);

/// Prefixes of temporary files toolwire writes and renames into place.
const TEMP_PREFIXES: &[&str] = &[
    TEMP_PREFIX,
    ".fork-",
    ".repair-",
    crate::transcript::checkpoint::TEMP_PREFIX,
];
/// Prefix of a session directory moved aside to be deleted.
const TRASH_PREFIX: &str = ".gc-";

/// The rules a run applies.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Sessions last written before `now - max_age` expire.
    pub max_age: Option<Duration>,
    pub max_total_bytes: Option<u64>,
    pub grace: Duration,
    pub now: SystemTime,
}

/// What a run removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    /// Ids of the sessions removed whole (transcript and artifacts).
    pub sessions_removed: Vec<String>,
    /// Paths of files removed from kept sessions (unreferenced artifacts)
    /// and of temporary leftovers.
    pub artifacts_removed: Vec<String>,
    /// Bytes of every file removed.
    pub bytes_freed: u64,
    /// Sessions left in place.
    pub kept: u64,
}

/// Where a run is, for progress bars: `done` of `total` sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub phase: &'static str,
    pub done: u64,
    pub total: u64,
}

/// One session as the scan found it: what choosing its fate and acting on
/// it needs, and no more. Its listing and its own references are read,
/// judged and dropped while the session is scanned, so a run holds a few
/// hundred bytes a session whatever the number of its outputs (the
/// outputs a sweep would remove excepted: the report names each anyway).
#[derive(Debug, Default)]
struct Found {
    /// Its transcript as scanned; a removal goes ahead only if it is
    /// still this file, unchanged.
    transcript: Option<Stamp>,
    bak: bool,
    /// Its transcript's decisions checkpoint: size.
    checkpoint: Option<u64>,
    dir: bool,
    last_written: Option<SystemTime>,
    bytes: u64,
    held: bool,
    /// `(session, artifact name)` its replacements point at in other
    /// sessions (a fork's lines point at its parent's artifacts): they
    /// keep those sessions, and those artifacts, while it is kept.
    foreign: Vec<(String, String)>,
    /// Hard links a fork made to its parents' transcripts
    /// (`<id>.jsonl.base-*`, see [`crate::transcript::fork`]): name and
    /// status-change time.
    links: Vec<(String, SystemTime)>,
    /// What a sweep would remove, as judged from the scan (all older than
    /// the grace period): temporary files of its artifact directory;
    temps: Vec<(String, u64)>,
    /// its artifacts there that none of its own replacements points at;
    unreferenced: Vec<(String, u64)>,
    /// line indexes kept there beside artifacts (`<artifact>.idx`, see
    /// [`crate::artifact::index`]; never outputs, whatever their age) that
    /// go with one of `unreferenced` (`false`) or alone, their artifact
    /// being gone (`true`);
    line_indexes: Vec<(String, u64, bool)>,
    /// the same on object storage;
    objects: Vec<(String, u64)>,
    /// and line indexes there (`<artifact>.idx`) that go with one of
    /// `objects` (`false`) or alone, their artifact being gone (`true`).
    indexes: Vec<(String, u64, bool)>,
}

/// Which transcript file a scan saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            ino: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }
}

/// Run retention over `data_dir` and, when saved outputs are on object
/// storage, over `objects` by the same rules (listed, then deleted one by
/// one). `is_open(id)` says whether this process holds the session open (it
/// is then never touched).
///
/// Memory stays bounded by the number of sessions, never by the number of
/// outputs: the scan takes the sessions one at a time in sorted order and
/// keeps of each only its [`Found`] summary; acting on them takes them
/// one at a time again, re-listing what it removes.
pub fn collect(
    data_dir: &Path,
    objects: Option<&ObjectArtifacts>,
    policy: &Policy,
    dry_run: bool,
    is_open: &dyn Fn(&str) -> bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<GcReport> {
    let sessions_dir = data_dir.join("sessions");
    let storage = |err: io::Error| Error::storage(&sessions_dir, &err);
    let bucket = |objects: &ObjectArtifacts, err: io::Error| {
        Error::storage(Path::new(&objects.url_of(&objects.sessions())), &err)
    };
    let mut report = GcReport::default();
    let entries = match fs::read_dir(&sessions_dir) {
        Ok(entries) => Some(entries),
        Err(err) if err.kind() == io::ErrorKind::NotFound => None,
        Err(err) => return Err(storage(err)),
    };
    // The sessions the bucket holds outputs of: their names only.
    let in_bucket: HashSet<String> = match objects {
        Some(objects) => object_sessions(objects)
            .map_err(|err| bucket(objects, err))?
            .into_iter()
            .collect(),
        None => HashSet::new(),
    };
    if entries.is_none() && in_bucket.is_empty() {
        return Ok(report);
    }

    // Scan: which sessions there are, and the leftovers beside them.
    let mut ids: Vec<String> = in_bucket.iter().cloned().collect();
    let mut top_leftovers: Vec<(PathBuf, u64, bool)> = Vec::new();
    let mut links: HashMap<String, Vec<(String, SystemTime)>> = HashMap::new();
    let mut checkpoints: HashMap<String, u64> = HashMap::new();
    for entry in entries.into_iter().flatten() {
        let entry = entry.map_err(storage)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        // A fork's link to its parent's bytes belongs to the fork.
        if let Some(id) = crate::transcript::fork::link_owner(&name)
            && meta.is_file()
            && SessionId::try_from(id.to_owned()).is_ok()
        {
            let changed = SystemTime::UNIX_EPOCH
                + Duration::from_secs(u64::try_from(meta.ctime()).unwrap_or(0));
            links
                .entry(id.to_owned())
                .or_default()
                .push((name.clone(), changed));
            ids.push(id.to_owned());
            continue;
        }
        // A transcript's decisions checkpoint goes with its session; one
        // whose transcript is gone (a removal cut short) is a leftover.
        if let Some(id) = crate::transcript::checkpoint::owner(&name)
            && meta.is_file()
            && SessionId::try_from(id.to_owned()).is_ok()
        {
            if fs::symlink_metadata(sessions_dir.join(format!("{id}.jsonl"))).is_ok() {
                checkpoints.insert(id.to_owned(), meta.len());
                ids.push(id.to_owned());
            } else if is_old(&meta, policy) {
                top_leftovers.push((entry.path(), meta.len(), false));
            }
            continue;
        }
        // Leftovers of work cut short: a gc's trash, a fork's or a
        // repair's temporary transcript, a checkpoint's temporary file. Past the grace period, no run that
        // made them can still be at work.
        if name.starts_with(TRASH_PREFIX) || TEMP_PREFIXES.iter().any(|p| name.starts_with(p)) {
            if is_old(&meta, policy) {
                top_leftovers.push((entry.path(), tree_size(&entry.path()), meta.is_dir()));
            }
            continue;
        }
        let id = if meta.is_dir() {
            Some(name.as_str())
        } else {
            name.strip_suffix(".jsonl")
                .or_else(|| name.strip_suffix(".jsonl.bak"))
        };
        if let Some(id) = id
            && SessionId::try_from(id.to_owned()).is_ok()
        {
            ids.push(id.to_owned());
        }
    }
    // A session's names (transcript, backup, checkpoint, directory,
    // links) meet here.
    ids.sort_unstable();
    ids.dedup();
    ids.shrink_to_fit();
    let total = ids.len() as u64;
    let mut found: Vec<Found> = Vec::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        let listed = match objects {
            Some(objects) if in_bucket.contains(id) => {
                list_session(objects, id).map_err(|err| bucket(objects, err))?
            }
            _ => Vec::new(),
        };
        let mut f = scan(&sessions_dir, id, listed, policy).map_err(storage)?;
        f.held = f.held || is_open(id);
        f.links = links.remove(id).unwrap_or_default();
        f.checkpoint = checkpoints.remove(id);
        f.bytes += f.checkpoint.unwrap_or(0);
        found.push(f);
        if i.is_multiple_of(64) || i as u64 + 1 == total {
            progress(Progress {
                phase: "scanning",
                done: i as u64 + 1,
                total,
            });
        }
    }
    drop(in_bucket);

    let remove = choose_sessions(&ids, &found, policy);

    // What kept sessions point at in other sessions, by the session they
    // point into (their own outputs were judged by the scan).
    let mut referenced: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (i, f) in found.iter().enumerate() {
        if remove[i] {
            continue;
        }
        for (session, name) in &f.foreign {
            referenced.entry(session).or_default().insert(name);
        }
    }

    for (i, id) in ids.iter().enumerate() {
        let done = i as u64 + 1;
        let f = &found[i];
        if f.held {
            report.kept += 1;
        } else if remove[i] {
            let removed = remove_session(&sessions_dir, id, f, dry_run).map_err(storage)?;
            if removed.is_some()
                && !dry_run
                && let Some(objects) = objects
            {
                // After the journal, as on disk: never a journal pointing
                // at removed objects.
                delete_session_objects(objects, id)
                    .map_err(|err| Error::storage(Path::new(&objects.session_url(id)), &err))?;
            }
            match removed {
                Some(bytes) => {
                    report.sessions_removed.push(id.clone());
                    report.bytes_freed += bytes;
                }
                None => report.kept += 1,
            }
        } else {
            report.kept += 1;
            let sweep = Sweep {
                sessions_dir: &sessions_dir,
                id,
                f,
                referenced: referenced.get(id.as_str()),
                dry_run,
            };
            sweep_session(&sweep, &mut report).map_err(storage)?;
            sweep_links(&sessions_dir, id, f, policy, dry_run, &mut report).map_err(storage)?;
            if let Some(objects) = objects {
                sweep_objects(objects, &sweep, &mut report)
                    .map_err(|err| Error::storage(Path::new(&objects.session_url(id)), &err))?;
            }
        }
        if done.is_multiple_of(64) || done == total {
            progress(Progress {
                phase: "removing",
                done,
                total,
            });
        }
    }
    for (path, bytes, dir) in top_leftovers {
        let gone = dry_run
            || remove_path(&path, dir).unwrap_or_else(|err| {
                tracing::warn!(path = %path.display(), %err, "could not remove a leftover");
                false
            });
        if gone {
            report.artifacts_removed.push(path.display().to_string());
            report.bytes_freed += bytes;
        }
    }
    Ok(report)
}

fn is_old(meta: &fs::Metadata, policy: &Policy) -> bool {
    meta.modified()
        .map(|m| m + policy.grace < policy.now)
        .unwrap_or(false)
}

/// Scan one session: its transcript (for its references), its backup, its
/// artifact directory and `listed`, its objects in the bucket.
fn scan(sessions_dir: &Path, id: &str, listed: Listed, policy: &Policy) -> io::Result<Found> {
    let mut f = Found::default();
    let old = |modified: SystemTime| modified + policy.grace < policy.now;
    // The artifacts its own replacements point at.
    let mut own: HashSet<String> = HashSet::new();
    let transcript = sessions_dir.join(format!("{id}.jsonl"));
    match fs::symlink_metadata(&transcript) {
        Ok(meta) if meta.is_file() => {
            f.bytes += meta.len();
            f.last_written = meta.modified().ok();
            f.held = is_locked(&transcript)?;
            match references(&transcript) {
                Ok(refs) => {
                    for (session, name) in refs {
                        if session == id {
                            own.insert(name);
                        } else {
                            f.foreign.push((session, name));
                        }
                    }
                }
                // A fork whose parent's bytes are gone or changed: what it
                // points at is unknown, so nothing of it is touched.
                Err(err) if err.kind() == io::ErrorKind::InvalidData => f.held = true,
                Err(err) => return Err(err),
            }
            f.foreign.sort_unstable();
            f.foreign.shrink_to_fit();
            f.transcript = Some(Stamp::of(&meta));
        }
        Ok(_) => f.held = true, // not a plain file: not ours to judge
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    // Without a journal, what its replacements point at is unknown: its
    // artifacts are left alone (only its temporary files go).
    let journaled = f.transcript.is_some();
    if let Ok(meta) = fs::symlink_metadata(sessions_dir.join(format!("{id}.jsonl.bak"))) {
        f.bak = true;
        f.bytes += meta.len();
    }
    let dir = sessions_dir.join(id);
    match fs::symlink_metadata(&dir) {
        Ok(meta) if meta.is_dir() => {
            f.dir = true;
            f.held = f.held || is_locked(&dir)?;
            let journal_less = f.transcript.is_none();
            if journal_less {
                f.last_written = meta.modified().ok();
            }
            let artifacts = dir.join("tool-results");
            let entries = match fs::read_dir(&artifacts) {
                Ok(entries) => Some(entries),
                Err(err) if err.kind() == io::ErrorKind::NotFound => None,
                Err(err) => return Err(err),
            };
            // This directory's line indexes and artifacts, to pair them
            // once it is read.
            let mut indexes: Vec<(String, u64)> = Vec::new();
            let mut present: HashSet<String> = HashSet::new();
            for entry in entries.into_iter().flatten() {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let Ok(meta) = entry.metadata() else { continue };
                if !meta.is_file() {
                    continue;
                }
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                f.bytes += meta.len();
                if journal_less {
                    f.last_written = f.last_written.max(Some(modified));
                }
                if is_index_name(&name) {
                    indexes.push((name, meta.len()));
                    continue;
                }
                if is_artifact_name(&name) {
                    present.insert(name.clone());
                }
                if !old(modified) {
                    continue;
                }
                if name.starts_with(TEMP_PREFIX) {
                    f.temps.push((name, meta.len()));
                } else if journaled && is_artifact_name(&name) && !own.contains(&name) {
                    f.unreferenced.push((name, meta.len()));
                }
            }
            // Indexes go with their artifacts, and alone once those are
            // gone.
            let going: HashSet<&str> = f.unreferenced.iter().map(|(n, _)| n.as_str()).collect();
            for (name, size) in indexes {
                let artifact = name.strip_suffix(INDEX_SUFFIX).unwrap_or(&name);
                let alone = !present.contains(artifact);
                if alone || going.contains(artifact) {
                    f.line_indexes.push((name, size, alone));
                }
            }
        }
        Ok(_) => f.held = true,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    // Its objects: every one weighs; of the artifacts and their indexes,
    // the ones nothing of its own points at are judged here.
    let mut artifacts: HashSet<&str> = HashSet::new();
    for (name, size, modified) in &listed {
        f.bytes += size;
        if f.transcript.is_none() {
            f.last_written = f.last_written.max(Some(*modified));
        }
        if is_artifact_name(name) {
            artifacts.insert(name);
            if journaled && old(*modified) && !own.contains(name) {
                f.objects.push((name.clone(), *size));
            }
        }
    }
    if journaled {
        let doomed: HashSet<&str> = f.objects.iter().map(|(n, _)| n.as_str()).collect();
        for (name, size, modified) in &listed {
            let Some(artifact) = name
                .strip_suffix(INDEX_SUFFIX)
                .filter(|a| is_artifact_name(a))
            else {
                continue;
            };
            if doomed.contains(artifact) {
                f.indexes.push((name.clone(), *size, false));
            } else if !artifacts.contains(artifact) && old(*modified) {
                f.indexes.push((name.clone(), *size, true));
            }
        }
    }
    Ok(f)
}

/// Whether another open file holds `path` locked (a server has the
/// transcript open; an apply is persisting into the directory).
fn is_locked(path: &Path) -> io::Result<bool> {
    Ok(path.exists() && lock_now(path)?.is_none())
}

/// Lock `path` exclusively without waiting: `None` when someone holds it.
fn lock_now(path: &Path) -> io::Result<Option<File>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(err)) => Err(err),
    }
}

/// `(session, artifact name)` pairs the `replacement` lines of a transcript
/// point at (every file a link may name: keeping one too many is safe).
fn references(transcript: &Path) -> io::Result<HashSet<(String, String)>> {
    let own = crate::transcript::targets::session_of(transcript);
    let mut refs = HashSet::new();
    crate::transcript::targets::for_each_replacement(transcript, &mut |_, text| {
        refs.extend(crate::budget::preview::preview_targets(text, &own));
        true
    })?;
    Ok(refs)
}

/// Sessions to remove whole (by index into `ids`): expired ones, then the
/// least recently written while the store is over its size limit; never a
/// held one, nor one that a kept session points into.
fn choose_sessions(ids: &[String], found: &[Found], policy: &Policy) -> Vec<bool> {
    let mut remove = vec![false; ids.len()];
    let cutoff = policy.max_age.and_then(|age| policy.now.checked_sub(age));
    for (i, f) in found.iter().enumerate() {
        if !f.held
            && let (Some(cutoff), Some(written)) = (cutoff, f.last_written)
            && written < cutoff
        {
            remove[i] = true;
        }
    }
    if let Some(limit) = policy.max_total_bytes {
        let mut total: u64 = found
            .iter()
            .zip(&remove)
            .filter(|(_, gone)| !**gone)
            .map(|(f, _)| f.bytes)
            .sum();
        let mut oldest: Vec<usize> = (0..ids.len())
            .filter(|&i| !remove[i] && !found[i].held)
            .collect();
        oldest.sort_by_key(|&i| (found[i].last_written, &ids[i]));
        for i in oldest {
            if total <= limit {
                break;
            }
            total -= found[i].bytes;
            remove[i] = true;
        }
    }
    // A session a kept one points into stays, and then so does any it
    // points into in turn.
    loop {
        let pointed: HashSet<&str> = found
            .iter()
            .zip(&remove)
            .filter(|(_, gone)| !**gone)
            .flat_map(|(f, _)| f.foreign.iter().map(|(s, _)| s.as_str()))
            .collect();
        let mut changed = false;
        for (i, id) in ids.iter().enumerate() {
            if remove[i] && pointed.contains(id.as_str()) {
                remove[i] = false;
                changed = true;
            }
        }
        if !changed {
            return remove;
        }
    }
}

/// A session's locks, held by gc while it removes the session.
struct Taken {
    _dir: Option<File>,
    _transcript: Option<File>,
}

/// Take a session's locks without waiting; `None` when a client took it
/// or wrote to it since the scan (it is then kept).
fn take_session(sessions_dir: &Path, id: &str, f: &Found) -> io::Result<Option<Taken>> {
    let dir = match f.dir {
        true => match lock_now(&sessions_dir.join(id))? {
            Some(lock) => Some(lock),
            None => return Ok(None),
        },
        false => None,
    };
    let transcript = match &f.transcript {
        Some(before) => match lock_now(&sessions_dir.join(format!("{id}.jsonl")))? {
            Some(lock) => {
                if Stamp::of(&lock.metadata()?) != *before {
                    return Ok(None);
                }
                Some(lock)
            }
            None => return Ok(None),
        },
        None => None,
    };
    Ok(Some(Taken {
        _dir: dir,
        _transcript: transcript,
    }))
}

/// Remove a session as a unit, holding its locks; `None` when a client
/// took it or wrote to it since the scan (it is then kept). A dry run
/// takes the locks and lets go at once, so it lists what a real run
/// would now remove.
fn remove_session(
    sessions_dir: &Path,
    id: &str,
    f: &Found,
    dry_run: bool,
) -> io::Result<Option<u64>> {
    let dir = sessions_dir.join(id);
    let transcript = sessions_dir.join(format!("{id}.jsonl"));
    let Some(_taken) = take_session(sessions_dir, id, f)? else {
        return Ok(None);
    };
    if dry_run {
        return Ok(Some(f.bytes));
    }
    // The checkpoint before its transcript: a crash between leaves a
    // transcript read whole on resume, never a checkpoint of nothing.
    if f.checkpoint.is_some()
        && let Some(path) = crate::transcript::checkpoint::path_for(&transcript)
    {
        remove_file_if_there(&path)?;
    }
    // The journal goes first: a crash after it leaves artifacts without a
    // journal, which the next run removes; never a journal pointing at
    // removed artifacts.
    if f.transcript.is_some() {
        remove_file_if_there(&transcript)?;
    }
    if f.bak {
        remove_file_if_there(&sessions_dir.join(format!("{id}.jsonl.bak")))?;
    }
    // Its links to its parents' bytes (the parents keep their own names).
    for (name, _) in &f.links {
        remove_file_if_there(&sessions_dir.join(name))?;
    }
    if f.dir {
        // Moved aside first, so an apply that already waits for the
        // directory's lock finds no directory and makes a new one.
        let trash = sessions_dir.join(format!(
            "{TRASH_PREFIX}{id}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        fs::rename(&dir, &trash)?;
        fs::remove_dir_all(&trash)?;
    }
    Ok(Some(f.bytes))
}

/// One kept session to sweep, as the scan found it.
struct Sweep<'a> {
    sessions_dir: &'a Path,
    id: &'a str,
    f: &'a Found,
    /// Its artifacts that other kept sessions point at.
    referenced: Option<&'a HashSet<&'a str>>,
    dry_run: bool,
}

impl Sweep<'_> {
    /// Whether another kept session points at artifact `name` of this one.
    fn pointed_at(&self, name: &str) -> bool {
        self.referenced.is_some_and(|r| r.contains(name))
    }
}

/// In a kept session: remove artifacts nothing points at and temporary
/// files, both older than the grace period.
fn sweep_session(sweep: &Sweep, report: &mut GcReport) -> io::Result<()> {
    let Sweep {
        sessions_dir,
        id,
        f,
        dry_run,
        ..
    } = *sweep;
    let unreferenced: Vec<&(String, u64)> = f
        .unreferenced
        .iter()
        .filter(|(name, _)| !sweep.pointed_at(name))
        .collect();
    // Indexes go with their artifacts, and alone once those are gone.
    let going: HashSet<&str> = unreferenced.iter().map(|(n, _)| n.as_str()).collect();
    let indexes: Vec<(&str, u64)> = f
        .line_indexes
        .iter()
        .filter(|(name, _, alone)| {
            *alone || going.contains(name.strip_suffix(INDEX_SUFFIX).unwrap_or(name))
        })
        .map(|(name, size, _)| (name.as_str(), *size))
        .collect();
    if f.temps.is_empty() && unreferenced.is_empty() && indexes.is_empty() {
        return Ok(());
    }
    let results = sessions_dir.join(id).join("tool-results");
    // A dry run takes the lock too (and lets go at once), so it lists
    // what a real run would now remove, not what an apply holds.
    let Some(_lock) = lock_now(&sessions_dir.join(id))? else {
        return Ok(());
    };
    if dry_run {
        for (name, bytes) in f.temps.iter().chain(unreferenced) {
            report
                .artifacts_removed
                .push(results.join(name).display().to_string());
            report.bytes_freed += bytes;
        }
        report.bytes_freed += indexes.iter().map(|(_, size)| size).sum::<u64>();
        return Ok(());
    }
    // Under the lock no apply is between writing and journaling: read the
    // references again, they are now complete.
    let fresh = references(&sessions_dir.join(format!("{id}.jsonl")))?;
    for (name, bytes) in &f.temps {
        if remove_file_if_there(&results.join(name))? {
            report
                .artifacts_removed
                .push(results.join(name).display().to_string());
            report.bytes_freed += bytes;
        }
    }
    for (name, bytes) in unreferenced {
        if fresh.contains(&(id.to_owned(), name.clone())) {
            continue;
        }
        let path = results.join(name);
        // Still the file that was judged old (a reuse by an apply would
        // have journaled a reference, checked above).
        if remove_file_if_there(&path)? {
            report.artifacts_removed.push(path.display().to_string());
            report.bytes_freed += bytes;
        }
    }
    // After their artifacts (a reader may index one again meanwhile: the
    // next run finds that index alone and removes it). An index whose
    // artifact stays because a reference appeared since the scan goes
    // too: it is only a cache, rebuilt by the next read.
    for (name, size) in indexes {
        if remove_file_if_there(&results.join(name))? {
            report.bytes_freed += size;
        }
    }
    Ok(())
}

/// Whether `name` is a line index kept beside a local artifact.
fn is_index_name(name: &str) -> bool {
    name.strip_suffix(INDEX_SUFFIX)
        .is_some_and(is_artifact_name)
}

/// Of the file names of one `tool-results` directory (`names`), the line
/// indexes to remove: those of the artifacts in `doomed`, and those whose
/// artifact is not there.
pub(crate) fn orphan_indexes<'a>(
    names: impl Iterator<Item = &'a str>,
    doomed: impl Iterator<Item = &'a str>,
) -> Vec<&'a str> {
    let mut indexes = Vec::new();
    let mut present = HashSet::new();
    for name in names {
        if is_index_name(name) {
            indexes.push(name);
        } else {
            present.insert(name);
        }
    }
    for name in doomed {
        present.remove(name);
    }
    indexes.retain(|index| {
        index
            .strip_suffix(INDEX_SUFFIX)
            .is_none_or(|artifact| !present.contains(artifact))
    });
    indexes
}

/// In a kept session: remove links its transcript does not name (left by a
/// fork cut short, or by a repair that wrote the fork out whole), once
/// older than the grace period (a fork in progress names them last).
fn sweep_links(
    sessions_dir: &Path,
    id: &str,
    f: &Found,
    policy: &Policy,
    dry_run: bool,
    report: &mut GcReport,
) -> io::Result<()> {
    if f.links.is_empty() {
        return Ok(());
    }
    let named = crate::transcript::fork::linked_names(&sessions_dir.join(format!("{id}.jsonl")));
    for (name, changed) in &f.links {
        if named.contains(name) || *changed + policy.grace >= policy.now {
            continue;
        }
        let path = sessions_dir.join(name);
        if dry_run || remove_file_if_there(&path)? {
            report.artifacts_removed.push(path.display().to_string());
        }
    }
    Ok(())
}

/// Objects of one session: name, size, last modified.
pub(crate) type Listed = Vec<(String, u64, SystemTime)>;

/// The sessions the bucket holds objects of, sorted: the folders under the
/// store's `sessions/` that are session ids, from a delimited listing (the
/// names only, not their objects).
pub(crate) fn object_sessions(objects: &ObjectArtifacts) -> io::Result<Vec<String>> {
    let mut ids: Vec<String> = objects
        .list_dirs(&objects.sessions())?
        .into_iter()
        .filter(|id| SessionId::try_from(id.clone()).is_ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// The objects of session `id`: `sessions/<id>/tool-results/<name>` gives
/// `(name, size, last modified)`. Anything else there is not ours and left
/// alone.
pub(crate) fn list_session(objects: &ObjectArtifacts, id: &str) -> io::Result<Listed> {
    let root = objects.sessions().join(id);
    let mut listed = Vec::new();
    for meta in objects.list(&root)? {
        let Some(rest) = meta.location.prefix_match(&root) else {
            continue;
        };
        let parts: Vec<String> = rest.map(|p| p.as_ref().to_owned()).collect();
        let [dir, name] = &parts[..] else {
            continue;
        };
        if dir != "tool-results" {
            continue;
        }
        listed.push((
            name.clone(),
            meta.size,
            SystemTime::from(meta.last_modified),
        ));
    }
    Ok(listed)
}

/// Whether `name` is an output toolwire writes to a bucket: an artifact or
/// an artifact's line index.
pub(crate) fn is_output_object(name: &str) -> bool {
    is_artifact_name(name)
        || name
            .strip_suffix(INDEX_SUFFIX)
            .is_some_and(is_artifact_name)
}

/// Delete a removed session's outputs from the bucket (listed now: its
/// journal is gone, so whatever is there is nobody's).
fn delete_session_objects(objects: &ObjectArtifacts, id: &str) -> io::Result<()> {
    for (name, _, _) in list_session(objects, id)? {
        if is_output_object(&name) {
            objects.delete(&objects.key(id, &name))?;
        }
    }
    Ok(())
}

/// [`sweep_session`] on object storage: in a kept session with a journal,
/// remove the artifacts nothing points at (with their indexes), and
/// indexes whose artifact is gone, all older than the grace period.
fn sweep_objects(
    objects: &ObjectArtifacts,
    sweep: &Sweep,
    report: &mut GcReport,
) -> io::Result<()> {
    let (id, f) = (sweep.id, sweep.f);
    if f.objects.is_empty() && f.indexes.is_empty() {
        return Ok(());
    }
    // Read again now: an apply that journaled since the scan is seen.
    let fresh = references(&sweep.sessions_dir.join(format!("{id}.jsonl")))?;
    let kept =
        |name: &str| fresh.contains(&(id.to_owned(), name.to_owned())) || sweep.pointed_at(name);
    let mut doomed: Vec<(&str, u64)> = f
        .objects
        .iter()
        .filter(|(name, _)| !kept(name))
        .map(|(name, size)| (name.as_str(), *size))
        .collect();
    let going: HashSet<&str> = doomed.iter().map(|(name, _)| *name).collect();
    for (name, size, alone) in &f.indexes {
        let artifact = name.strip_suffix(INDEX_SUFFIX).unwrap_or(name);
        if *alone || going.contains(artifact) {
            doomed.push((name, *size));
        }
    }
    for (name, size) in doomed {
        let key = objects.key(id, name);
        if sweep.dry_run || objects.delete(&key)? {
            report.artifacts_removed.push(objects.url_of(&key));
            report.bytes_freed += size;
        }
    }
    Ok(())
}

fn remove_file_if_there(path: &Path) -> io::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

fn remove_path(path: &Path, dir: bool) -> io::Result<bool> {
    let outcome = if dir {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    match outcome {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

fn tree_size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| tree_size(&e.path()))
        .sum()
}

/// Where a scheduled run records when it last ran (its modification time),
/// so a daemon that restarts keeps the schedule.
pub const STAMP_FILE: &str = ".last-gc";

/// When saved outputs are removed (`toolwire gc`, `storage/gc`, and the
/// shared daemon's schedule).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Retention {
    /// A session whose journal was last written more than this many days
    /// ago, and that no client holds, is removed with its artifacts;
    /// `null`: never by age.
    pub max_age_days: Option<f64>,
    /// Over this many bytes in all, the least recently written sessions go
    /// first; `null`: no limit.
    pub max_total_bytes: Option<u64>,
    /// Whether the shared daemon collects on a schedule.
    pub auto: bool,
    /// Hours between the shared daemon's collections.
    pub interval_hours: f64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age_days: Some(30.0),
            max_total_bytes: None,
            auto: true,
            interval_hours: 24.0,
        }
    }
}

impl Retention {
    /// The rules of one run, at `now`.
    pub fn policy(&self, now: std::time::SystemTime) -> Policy {
        Policy {
            max_age: self
                .max_age_days
                .and_then(|d| std::time::Duration::try_from_secs_f64(d * 86_400.0).ok()),
            max_total_bytes: self.max_total_bytes,
            grace: GRACE,
            now,
        }
    }

    /// Numbers serde cannot bound: days and hours are finite and not
    /// negative (the interval above zero).
    pub fn check(&self, at: &str) -> Result<()> {
        let bad = |key: &str, what: &str| Err(Error::invalid_params(format!("{at}.{key}"), what));
        if self
            .max_age_days
            .is_some_and(|d| !(d.is_finite() && d >= 0.0))
        {
            return bad("maxAgeDays", "expected a number of days >= 0, or null");
        }
        if !(self.interval_hours.is_finite() && self.interval_hours > 0.0) {
            return bad("intervalHours", "expected a number of hours > 0");
        }
        Ok(())
    }

    /// The time between scheduled runs (at least a second).
    pub fn interval(&self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.interval_hours * 3600.0)
            .unwrap_or(std::time::Duration::MAX)
            .max(std::time::Duration::from_secs(1))
    }
}

/// Whether the shared daemon's scheduled run is due: `config.retention.auto`
/// is on and the last run (by the stamp in the data directory) is at least
/// an interval ago. A due run is stamped before it starts, so one that
/// fails is not retried in a loop. With files (`shared` false) a data
/// directory without sessions has nothing to collect; on the shared store
/// the sessions are in the database, and the stamp is this machine's.
pub fn due(retention: &Retention, data_dir: &Path, shared: bool) -> Result<bool> {
    if !retention.auto {
        return Ok(false);
    }
    let stamp = data_dir.join(STAMP_FILE);
    let now = SystemTime::now();
    let last = fs::metadata(&stamp).and_then(|m| m.modified()).ok();
    if last.is_some_and(|last| last + retention.interval() > now) {
        return Ok(false);
    }
    if shared {
        crate::private::create_dir_all(data_dir).map_err(|err| Error::storage(data_dir, &err))?;
    } else if !data_dir.join("sessions").is_dir() {
        return Ok(false);
    }
    let file = crate::private::file_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&stamp)
        .map_err(|err| Error::storage(&stamp, &err))?;
    file.set_modified(now)
        .map_err(|err| Error::storage(&stamp, &err))?;
    Ok(true)
}

/// A shared hold on a session's artifact directory, kept by `budget/apply`
/// from before it writes or reuses an artifact until its replacement lines
/// are journaled: gc never removes anything of a session while it is held.
pub struct SessionHold {
    _dir: File,
}

/// Take a shared hold on the session directory that holds `artifact_dir`
/// (creating both), waiting for a gc that holds it to finish. When gc
/// moved the directory away meanwhile, a new one is made.
pub fn hold_session(artifact_dir: &Path) -> io::Result<SessionHold> {
    let session_dir = artifact_dir
        .parent()
        .ok_or_else(|| io::Error::other("artifact directory has no session directory"))?;
    for _ in 0..64 {
        crate::private::create_dir_all(artifact_dir)?;
        let dir = match File::open(session_dir) {
            Ok(dir) => dir,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        dir.lock_shared()?;
        let held = dir.metadata()?;
        match fs::symlink_metadata(session_dir) {
            Ok(now) if now.is_dir() && now.ino() == held.ino() && now.dev() == held.dev() => {
                return Ok(SessionHold { _dir: dir });
            }
            _ => continue,
        }
    }
    Err(io::Error::other(format!(
        "{} keeps disappearing; is a gc looping on it?",
        session_dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_names_are_exactly_the_writers() {
        for name in [
            "toolu_01A-b.txt",
            "x.json",
            &format!("h.{}.json", "a".repeat(64)),
        ] {
            assert!(is_artifact_name(name), "{name}");
        }
        for name in [".tmp-abc", "x.bin", ".txt", "h.abc.txt", "a.b.txt", "notes"] {
            assert!(!is_artifact_name(name), "{name}");
        }
    }
}
