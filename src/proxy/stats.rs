//! What the proxy did, per request, kept in the session's data directory
//! (`<dataDir>/sessions/<id>/proxy-usage.jsonl`, one JSON line a request),
//! and the per-session summary `toolwire stats` prints.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::usage::Usage;

/// The file of a session's usage records.
pub const USAGE_FILE: &str = "proxy-usage.jsonl";

/// One request through the proxy.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Record {
    /// Milliseconds since the Unix epoch, when the response ended.
    pub time_ms: u64,
    /// The conversation format of the route (`anthropic`, `openai-chat`, …).
    pub format: String,
    /// The upstream's status; 502 when it could not be reached.
    pub status: u16,
    /// Whether the response ran to its end (false: the agent or the
    /// upstream hung up first).
    pub complete: bool,
    /// Characters of the request body the agent sent.
    pub chars_received: u64,
    /// Characters of the request body forwarded upstream.
    pub chars_sent: u64,
    /// Tool results newly persisted (and replaced) for this request.
    pub results_persisted: u64,
    /// Old results cleared for this request (PROTOCOL.md 11.3).
    pub results_cleared: u64,
    /// Whether the conversation was budgeted (false: it had none, or
    /// budgeting failed and it went as sent).
    pub budgeted: bool,
    /// Whether the pairing was repaired before forwarding.
    pub repaired: bool,
    /// The provider's usage, when the response reported one.
    pub usage: Option<Usage>,
}

/// Append one record to the session's usage file.
pub fn append(session_dir: &Path, record: &Record) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let path = session_dir.join(USAGE_FILE);
    let open = || {
        crate::private::file_options()
            .create(true)
            .append(true)
            .open(&path)
    };
    // The session's directory is made only when it is missing (a
    // session's first request): every later request opens the file
    // straight away, two system calls fewer on each proxied request.
    let mut file = match open() {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            crate::private::create_dir_all(session_dir)?;
            open()?
        }
        opened => opened?,
    };
    // One write of one short line with O_APPEND: concurrent requests of a
    // session never interleave within a line.
    file.write_all(&line)
}

/// Totals over a session's requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStats {
    pub session_id: String,
    pub requests: u64,
    pub chars_received: u64,
    pub chars_sent: u64,
    pub results_persisted: u64,
    pub results_cleared: u64,
    pub repaired_requests: u64,
    /// Requests whose response carried no usage.
    pub requests_without_usage: u64,
    pub tokens: Usage,
    /// `cacheRead / (input + cacheRead + cacheCreation)`; null with no
    /// input tokens.
    pub cache_hit_rate: Option<f64>,
}

impl SessionStats {
    fn add(&mut self, r: &Record) {
        self.requests += 1;
        self.chars_received += r.chars_received;
        self.chars_sent += r.chars_sent;
        self.results_persisted += r.results_persisted;
        self.results_cleared += r.results_cleared;
        self.repaired_requests += u64::from(r.repaired);
        match r.usage {
            Some(u) => {
                self.tokens.input += u.input;
                self.tokens.cache_read += u.cache_read;
                self.tokens.cache_creation += u.cache_creation;
                self.tokens.output += u.output;
            }
            None => self.requests_without_usage += 1,
        }
        let prompt = self.tokens.input + self.tokens.cache_read + self.tokens.cache_creation;
        self.cache_hit_rate = (prompt > 0).then(|| self.tokens.cache_read as f64 / prompt as f64);
    }
}

/// The stats of every session under `data_dir` with usage records (or of
/// the one named), by session id. Unreadable lines are skipped.
pub fn collect(data_dir: &Path, only: Option<&str>) -> std::io::Result<Vec<SessionStats>> {
    let sessions = data_dir.join("sessions");
    let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
    match std::fs::read_dir(&sessions) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let file = entry.path().join(USAGE_FILE);
                if only.is_none_or(|id| id == name) && file.is_file() {
                    files.insert(name, file);
                }
            }
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let mut out = Vec::new();
    for (id, file) in files {
        let mut stats = SessionStats {
            session_id: id,
            ..SessionStats::default()
        };
        for line in BufReader::new(std::fs::File::open(file)?).lines() {
            if let Ok(record) = serde_json::from_str::<Record>(&line?) {
                stats.add(&record);
            }
        }
        out.push(stats);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_first_record_makes_the_session_directory_and_later_ones_append() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join(".toolwire");
        let dir = data.join("sessions").join("s1");
        let record = |chars| Record {
            format: "anthropic".into(),
            chars_received: chars,
            ..Record::default()
        };
        append(&dir, &record(10)).unwrap();
        append(&dir, &record(20)).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let text = std::fs::read_to_string(dir.join(USAGE_FILE)).unwrap();
        assert_eq!(text.lines().count(), 2);
        let stats = collect(&data, None).unwrap();
        assert_eq!(stats.len(), 1);
        assert_eq!((stats[0].requests, stats[0].chars_received), (2, 30));
    }
}
