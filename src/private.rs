//! The data directory is private and keeps itself out of commits
//! (PROTOCOL.md 12.2).
//!
//! Transcripts and saved outputs hold whatever the agent's tools printed:
//! secrets in environment dumps, customer data in query results. So every
//! directory toolwire makes under its data directory is 0700 and every file
//! 0600, whatever the umask, and the data directory holds a `.gitignore`
//! of `*`, as pytest's, ruff's and uv's caches do, so `git add -A` in the
//! workspace never picks a saved output up.
//!
//! Everything that creates a directory or a file under a data directory
//! goes through here rather than setting modes at each site:
//! [`create_dir_all`], [`file_options`], [`temp_file_in`]. A data directory
//! is named to this module once, when its configuration is loaded
//! ([`register`]): then the directory that [`create_dir_all`] makes as that
//! root gets its `.gitignore` at once, even when it is made mid-run. At a
//! face's start [`prepare`] brings a directory an older version made (0755
//! directories, 0644 transcripts, no `.gitignore`) to the same state.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Mode of every directory under a data directory, and of the data
/// directory itself.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file toolwire writes under a data directory.
pub const FILE_MODE: u32 = 0o600;
/// The file that keeps a data directory out of git.
pub const GITIGNORE: &str = ".gitignore";
const GITIGNORE_TEXT: &str = "# Written by toolwire: its data directory holds transcripts and saved\n\
     # tool output, which do not belong in a commit.\n*\n";

/// The data directories this process uses, as their configuration names
/// them (absolute).
static ROOTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Note `root` as a data directory: when [`create_dir_all`] creates it,
/// it gets its `.gitignore`. No I/O.
pub fn register(root: &Path) {
    let mut roots = ROOTS.lock().unwrap_or_else(|p| p.into_inner());
    if !roots.iter().any(|r| r == root) {
        roots.push(root.to_path_buf());
    }
}

fn is_root(dir: &Path) -> bool {
    ROOTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|r| r == dir)
}

/// `OpenOptions` whose newly created file is 0600 (an existing file keeps
/// its mode; [`prepare`] tightened it).
pub fn file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// A temporary file in `dir`, 0600, whose name starts with `prefix`: the
/// crash-atomic writes (saved outputs, checkpoints, indexes, the commit
/// log, forks) are made as one and renamed into place.
pub fn temp_file_in(dir: &Path, prefix: &str) -> io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(Permissions::from_mode(FILE_MODE))
        .tempfile_in(dir)
}

/// `fs::create_dir_all`, with every directory it creates 0700; a data
/// directory it creates (see [`register`]) gets its `.gitignore`.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    match DirBuilder::new().mode(DIR_MODE).create(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => return Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            let Some(parent) = parent else {
                return Err(err);
            };
            create_dir_all(parent)?;
            match DirBuilder::new().mode(DIR_MODE).create(path) {
                Ok(()) => {}
                // Another thread or process made it meanwhile.
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => {
                    return Ok(());
                }
                Err(err) => return Err(err),
            }
        }
        Err(err) => return Err(err),
    }
    if is_root(path) {
        write_gitignore(path)?;
    }
    Ok(())
}

/// Bring an existing data directory to the rules above: registered, its
/// `.gitignore` there, and, when an older version made it (a missing
/// `.gitignore`, or a root open to others), every directory under it 0700
/// and every file without group or other bits. A directory that does not
/// exist yet is left for [`create_dir_all`] to make. Never fails the
/// caller: a data directory that cannot be changed (mounted read-only,
/// files of another user) is served as it is, with a warning naming what
/// stayed open.
pub fn prepare(root: &Path) {
    register(root);
    let meta = match fs::symlink_metadata(root) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return,
        Err(err) => {
            tracing::warn!(data_dir = %root.display(), %err, "cannot check the data directory's modes");
            return;
        }
    };
    if !meta.is_dir() {
        // Whoever reads or writes under it reports what it is.
        return;
    }
    if root.join(".git").exists() {
        // A repository's own root as the data directory: a `*` ignore
        // would hide the project from git, and tightening would close
        // its sources. Say so instead.
        tracing::warn!(data_dir = %root.display(), "the data directory is a git repository's root: no .gitignore written and modes left as they are; set data_dir to a directory of its own");
        return;
    }
    let has_ignore = fs::symlink_metadata(root.join(GITIGNORE)).is_ok();
    if has_ignore && meta.permissions().mode() & 0o077 == 0 {
        return;
    }
    tighten(root);
    if !has_ignore && let Err(err) = write_gitignore(root) {
        tracing::warn!(path = %root.join(GITIGNORE).display(), %err, "cannot write the data directory's .gitignore");
    }
}

/// Close `root` and everything under it to group and others, never
/// through a symbolic link.
fn tighten(root: &Path) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if let Err(err) = close(&dir, true) {
            tracing::warn!(path = %dir.display(), %err, "cannot make a data directory private");
        }
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) => {
                tracing::warn!(path = %dir.display(), %err, "cannot read a data directory");
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => stack.push(path),
                Ok(kind) if kind.is_file() => {
                    if let Err(err) = close(&path, false) {
                        tracing::warn!(path = %path.display(), %err, "cannot make a data file private");
                    }
                }
                // Links are not followed (a link's own mode means nothing);
                // sockets and FIFOs are not toolwire's.
                _ => {}
            }
        }
    }
}

/// Take group and other bits off `path`,
/// through a descriptor opened without following a link, so a path
/// swapped for a link meanwhile is refused rather than followed.
fn close(path: &Path, dir: bool) -> io::Result<()> {
    let mut flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    if dir {
        flags |= libc::O_DIRECTORY;
    }
    let file = match OpenOptions::new().read(true).custom_flags(flags).open(path) {
        Ok(file) => file,
        // A file of ours without the read bit: chmod by path is the only
        // way, and the open above just saw it was no link.
        Err(err) if err.kind() == io::ErrorKind::PermissionDenied => {
            let mode = fs::symlink_metadata(path)?.permissions().mode();
            return fs::set_permissions(path, Permissions::from_mode(closed(mode)));
        }
        Err(err) => return Err(err),
    };
    let mode = file.metadata()?.permissions().mode();
    if mode & 0o7777 != closed(mode) {
        file.set_permissions(Permissions::from_mode(closed(mode)))?;
    }
    Ok(())
}

/// The owner's bits only: 0755 becomes 0700 and 0644 0600, while a
/// directory or file its owner made read-only (0555, 0444) stays so
/// (0500, 0400) rather than becoming writable.
fn closed(mode: u32) -> u32 {
    mode & 0o700
}

/// Write the data directory's `.gitignore` unless one is there (a user's
/// own is kept).
fn write_gitignore(root: &Path) -> io::Result<()> {
    let path = root.join(GITIGNORE);
    let mut file: File = match file_options().write(true).create_new(true).open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(err) => return Err(err),
    };
    file.write_all(GITIGNORE_TEXT.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_registered_root_made_mid_run_gets_its_gitignore_and_private_modes() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("data");
        register(&root);
        create_dir_all(&root.join("sessions/s1/tool-results")).unwrap();
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("sessions/s1/tool-results")), 0o700);
        assert_eq!(
            fs::read_to_string(root.join(GITIGNORE))
                .unwrap()
                .lines()
                .last(),
            Some("*")
        );
        assert_eq!(mode(&root.join(GITIGNORE)), 0o600);
        // An unregistered directory gets none.
        create_dir_all(&temp.path().join("other/x")).unwrap();
        assert!(!temp.path().join("other").join(GITIGNORE).exists());
    }

    #[test]
    fn prepare_tightens_what_an_older_version_made_without_following_links() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("data");
        let outside = temp.path().join("outside.txt");
        fs::write(&outside, b"x").unwrap();
        fs::set_permissions(&outside, Permissions::from_mode(0o644)).unwrap();
        fs::create_dir_all(root.join("sessions/s1")).unwrap();
        for dir in [&root, &root.join("sessions"), &root.join("sessions/s1")] {
            fs::set_permissions(dir, Permissions::from_mode(0o755)).unwrap();
        }
        fs::write(root.join("sessions/s1.jsonl"), b"{}\n").unwrap();
        fs::set_permissions(
            root.join("sessions/s1.jsonl"),
            Permissions::from_mode(0o644),
        )
        .unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sessions/link")).unwrap();
        prepare(&root);
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("sessions/s1")), 0o700);
        assert_eq!(mode(&root.join("sessions/s1.jsonl")), 0o600);
        assert_eq!(mode(&outside), 0o644, "a link was followed");
        assert!(root.join(GITIGNORE).is_file());
    }

    #[test]
    fn what_its_owner_made_read_only_stays_read_only() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("data");
        fs::create_dir_all(root.join("sessions")).unwrap();
        fs::write(root.join("sessions/s1.jsonl"), b"{}\n").unwrap();
        fs::write(root.join(GITIGNORE), b"*\n").unwrap();
        fs::set_permissions(
            root.join("sessions/s1.jsonl"),
            Permissions::from_mode(0o444),
        )
        .unwrap();
        fs::set_permissions(root.join("sessions"), Permissions::from_mode(0o555)).unwrap();
        fs::set_permissions(&root, Permissions::from_mode(0o555)).unwrap();
        prepare(&root);
        assert_eq!(mode(&root), 0o500);
        assert_eq!(mode(&root.join("sessions")), 0o500);
        assert_eq!(mode(&root.join("sessions/s1.jsonl")), 0o400);
        for dir in [root.join("sessions"), root] {
            fs::set_permissions(dir, Permissions::from_mode(0o700)).unwrap();
        }
    }

    #[test]
    fn a_repository_root_as_data_dir_is_left_alone() {
        let temp = tempfile::tempdir().unwrap();
        fs::create_dir(temp.path().join(".git")).unwrap();
        fs::set_permissions(temp.path(), Permissions::from_mode(0o755)).unwrap();
        prepare(temp.path());
        assert!(!temp.path().join(GITIGNORE).exists());
        assert_eq!(mode(temp.path()), 0o755);
    }
}
