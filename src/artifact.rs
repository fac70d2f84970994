//! Where the full original of a replaced result goes, written exactly once.
//!
//! `<dataDir>/sessions/<sessionId>/tool-results/<name>.<txt|json>`. The name
//! is the toolUseId itself when it is a plain token (`[A-Za-z0-9_-]`, at most
//! 128 characters: what providers issue), else `h.` and the SHA-256 of the id.
//! The two forms cannot meet (plain names have no `.`), and no id, however
//! hostile, names anything outside the directory.
//!
//! A write goes to a temporary file in the same directory, is synced, and is
//! moved into place with a no-clobber rename, then the directory is synced:
//! a reader sees either no artifact or the whole one, even after a crash. An
//! artifact already in place is reused only when it holds the same bytes.
//! Nothing here follows a symbolic link.

pub mod index;
pub mod objects;
pub mod read;

pub use crate::budget::names::{ArtifactKind, file_name, is_artifact_name};

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Prefix of an artifact write in progress (a temporary file in the same
/// directory). A write killed before its rename leaves one behind; no
/// artifact name can start with it (plain names have no `.`, hashed ones
/// start with `h.`), so a leftover is never taken for an artifact and may be
/// swept.
pub const TEMP_PREFIX: &str = ".tmp-";

/// The artifact directory of a session.
pub fn session_dir(data_dir: &Path, session_id: &str) -> PathBuf {
    data_dir
        .join("sessions")
        .join(session_id)
        .join("tool-results")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// An identical artifact was already there and was kept.
    pub reused: bool,
}

/// Writes artifacts. Behind a trait so tests can inject faults and another
/// backend can stand in.
pub trait ArtifactStore: Send + Sync + 'static {
    fn write_once(&self, path: &Path, bytes: &[u8], fsync: bool) -> io::Result<Written>;
}

/// The local-filesystem store.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsArtifactStore;

impl ArtifactStore for FsArtifactStore {
    fn write_once(&self, path: &Path, bytes: &[u8], fsync: bool) -> io::Result<Written> {
        let dir = path.parent().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "artifact path has no directory",
            )
        })?;
        ensure_real_dir(dir)?;
        if let Some(written) = reuse_existing(path, bytes)? {
            return Ok(written);
        }
        let mut tmp = crate::private::temp_file_in(dir, TEMP_PREFIX)?;
        tmp.write_all(bytes)?;
        if fsync {
            tmp.as_file().sync_all()?;
        }
        match tmp.persist_noclobber(path) {
            Ok(_) => {}
            Err(err) if err.error.kind() == io::ErrorKind::AlreadyExists => {
                // Lost a race with another writer of the same id.
                return reuse_existing(path, bytes)?.ok_or(err.error);
            }
            Err(err) => return Err(err.error),
        }
        if fsync {
            File::open(dir)?.sync_all()?;
        }
        Ok(Written { reused: false })
    }
}

/// Create `dir` (and parents) and make sure neither it nor its parent, the
/// session directory, is a symbolic link.
fn ensure_real_dir(dir: &Path) -> io::Result<()> {
    crate::private::create_dir_all(dir)?;
    for d in [Some(dir), dir.parent()].into_iter().flatten() {
        let meta = fs::symlink_metadata(d)?;
        if !meta.file_type().is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory (a link?); refusing to write through it",
                d.display()
            )));
        }
    }
    Ok(())
}

/// `Some` when an artifact with exactly `bytes` already exists; an error
/// when something else is there (other bytes, a link, a directory).
fn reuse_existing(path: &Path, bytes: &[u8]) -> io::Result<Option<Written>> {
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => {
            return Err(io::Error::other(format!(
                "{} is a symbolic link; refusing to follow it",
                path.display()
            )));
        }
        Err(err) => return Err(err),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() != bytes.len() as u64 {
        return Err(conflict(path));
    }
    let mut existing = Vec::with_capacity(bytes.len());
    file.read_to_end(&mut existing)?;
    if existing != bytes {
        return Err(conflict(path));
    }
    // A reused artifact is in use again: its time starts over, so retention
    // (which spares recent files) sees it as the new write it stands for.
    file.set_modified(std::time::SystemTime::now())?;
    Ok(Some(Written { reused: true }))
}

fn conflict(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} already exists with other content; not replacing it",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_and_distinct() {
        assert_eq!(
            file_name("toolu_01Ab-9", ArtifactKind::Text),
            "toolu_01Ab-9.txt"
        );
        for hostile in [
            "../x",
            "/etc/passwd",
            "a\0b",
            ".",
            "..",
            "a/b",
            &"x".repeat(5000),
        ] {
            let name = file_name(hostile, ArtifactKind::Json);
            assert!(name.starts_with("h.") && name.len() < 100, "{name}");
            assert!(!name.contains('/') && !name.contains('\0'));
        }
        assert_ne!(
            file_name("../x", ArtifactKind::Text),
            file_name("../y", ArtifactKind::Text)
        );
    }

    #[test]
    fn temporary_files_are_never_artifact_names() {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..50 {
            let tmp = tempfile::Builder::new()
                .prefix(TEMP_PREFIX)
                .tempfile_in(dir.path())
                .unwrap();
            let name = tmp
                .path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            assert!(!is_artifact_name(&name), "{name}");
        }
        for id in ["toolu_1", "../x", ".tmp-abc", "h.x", &"y".repeat(300)] {
            for kind in [ArtifactKind::Text, ArtifactKind::Json] {
                let name = file_name(id, kind);
                assert!(is_artifact_name(&name), "{name}");
                assert!(!name.starts_with(TEMP_PREFIX), "{name}");
            }
        }
        for other in [".tmp-a.txt", "a.b.txt", "x.jsonl", "h.abc.txt", ".txt"] {
            assert!(!is_artifact_name(other), "{other}");
        }
    }

    #[test]
    fn writes_once_reuses_same_bytes_refuses_others_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let tr = dir.path().join("s").join("tool-results");
        let path = tr.join("a.txt");
        let store = FsArtifactStore;
        assert_eq!(
            store.write_once(&path, b"hello", true).unwrap(),
            Written { reused: false }
        );
        assert_eq!(
            store.write_once(&path, b"hello", true).unwrap(),
            Written { reused: true }
        );
        assert!(store.write_once(&path, b"other", true).is_err());
        assert_eq!(fs::read(&path).unwrap(), b"hello");

        let target = dir.path().join("target");
        fs::write(&target, b"secret").unwrap();
        let link = tr.join("b.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(store.write_once(&link, b"secret", true).is_err());
        assert!(store.write_once(&link, b"new", true).is_err());
        assert_eq!(fs::read(&target).unwrap(), b"secret");
        // No temporary file is left behind.
        let leftovers: Vec<_> = fs::read_dir(&tr)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
