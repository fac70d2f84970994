//! A size-capped log file for the shared daemon, which has no terminal.
//!
//! Lines are appended to `<name>.log`; once it passes [`LogFile::cap`]
//! bytes it is renamed to `<name>.log.1` (replacing the previous one) and a
//! fresh file is started, so the two together never hold much more than
//! twice the cap. Writing the log never fails the daemon: an error is
//! swallowed and the line lost.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Bytes a daemon log file may reach before it is rotated.
pub const DEFAULT_CAP: u64 = 4 << 20;

pub struct LogFile {
    path: PathBuf,
    cap: u64,
    file: Option<File>,
    len: u64,
}

impl LogFile {
    /// Open (or create, mode 0600) `path` for appending.
    pub fn open(path: &Path, cap: u64) -> io::Result<LogFile> {
        let mut log = LogFile {
            path: path.to_path_buf(),
            cap,
            file: None,
            len: 0,
        };
        log.reopen()?;
        Ok(log)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The previous generation's path: `<path>.1`.
    pub fn rotated_path(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(".1");
        PathBuf::from(name)
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)?;
        self.len = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        std::fs::rename(&self.path, Self::rotated_path(&self.path))?;
        self.reopen()
    }
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.len >= self.cap || self.file.is_none() {
            // Nothing sensible to do if this fails: keep logging where we can.
            let _ = self.rotate();
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(buf.len());
        };
        match file.write_all(buf) {
            Ok(()) => self.len += buf.len() as u64,
            Err(_) => self.len = self.cap,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_past_the_cap_keeping_one_old_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.log");
        let mut log = LogFile::open(&path, 100).unwrap();
        for i in 0..100 {
            writeln!(log, "line {i:04} of the log").unwrap();
        }
        let current = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(LogFile::rotated_path(&path))
            .unwrap()
            .len();
        assert!(current <= 100 + 30 && old <= 100 + 30, "{current} {old}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("line 0099 of the log\n"), "{text}");
        let entries = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(entries, 2);
    }
}
