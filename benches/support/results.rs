//! The results file: every figure a bench prints is also recorded as one
//! row of its run's results file, so that one `cargo bench --no-fail-fast`
//! and one `python3 benches/report.py --latest --write docs/benchmarks.md`
//! regenerate docs/benchmarks.md's table with nothing transcribed by hand.
//!
//! A new figure is one call, next to the `println!` that shows it:
//!
//! ```ignore
//! support::record(support::Row {
//!     bench: "storage",
//!     figure: "pair commits over stdio, 16 sessions (fsync)".into(),
//!     toolwire: format!("{ours:.0} /s"),
//!     baseline: format!("{base:.0} /s: 16 write + fdatasync loops"),
//!     ratio: support::x(ours / base),
//!     target: "≥ 0.8×".into(),
//!     holds: Some(ours / base >= 0.8), // None: reported, no goal
//! });
//! ```
//!
//! The file is JSON lines, appended to (one `write` a line, so a bench that
//! dies leaves every line before it whole): first the run (command, start,
//! commit, machine), then a `begin` line as each bench target starts and one
//! line a row, each with the load it was taken under. Where it goes:
//! `TOOLWIRE_BENCH_RESULTS` names the file when set; otherwise it is
//! `<target>/bench-results/<start>-<pid>.jsonl`, named after the `cargo
//! bench` process that started this bench (its parent), so all the targets
//! of one `cargo bench` land in one file and the next run starts a new one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

/// One figure: what toolwire did, what the baseline measured in the same
/// run did, their ratio and the goal it is held to. Strings, as the table
/// shows them: some figures carry two values (`p50 / p99`) or two
/// baselines, and each bench knows its own units.
pub struct Row {
    /// The bench target (`storage`), the table's first column.
    pub bench: &'static str,
    pub figure: String,
    pub toolwire: String,
    /// The same-run baseline, with what it is: `37,095 /s: 16 fdatasync loops`.
    pub baseline: String,
    /// `support::x(ratio)` for one ratio; free text for several.
    pub ratio: String,
    /// The goal (`≥ 0.8×`), or `report` / `—` where there is none.
    pub target: String,
    /// Whether the goal holds in this run; `None` where there is no goal.
    pub holds: Option<bool>,
}

/// A figure in the shape the e2e and throughput benches print it: a value
/// and its baseline in one unit, and a note that names the baseline after
/// `baseline: ` (what comes before that qualifies the figure).
pub struct Noted<'a> {
    pub bench: &'static str,
    pub name: &'a str,
    pub value: f64,
    pub baseline: f64,
    pub unit: &'a str,
    pub ratio: f64,
    /// `report` where there is no goal.
    pub target: &'a str,
    pub met: bool,
    pub note: &'a str,
}

impl From<Noted<'_>> for Row {
    fn from(f: Noted<'_>) -> Row {
        let (context, what) = match f.note.split_once("baseline: ") {
            Some((context, what)) => (context.trim_end_matches([';', ' ']), what),
            None => (f.note, ""),
        };
        let figure = f.name.trim();
        Row {
            bench: f.bench,
            figure: if context.is_empty() {
                figure.into()
            } else {
                format!("{figure} ({context})")
            },
            toolwire: format!("{:.2} {}", f.value, f.unit),
            baseline: if what.is_empty() {
                format!("{:.2} {}", f.baseline, f.unit)
            } else {
                format!("{:.2} {}: {what}", f.baseline, f.unit)
            },
            ratio: x(f.ratio),
            target: f.target.into(),
            holds: (f.target != "report").then_some(f.met),
        }
    }
}

/// A ratio as the table writes it: `1.20×`.
pub fn x(ratio: f64) -> String {
    format!("{ratio:.2}×")
}

/// Note that `bench` has started, with the load before it runs; each
/// bench's `main` calls it first, so the report can tell a bench that
/// started and recorded nothing (it failed) from one that did not run.
pub fn begin(bench: &'static str) {
    append(json!({"begin": bench, "at": now(), "load": load()}));
}

/// Append `row` to this run's results file (and print nothing: the bench
/// prints its own figures as before).
pub fn record(row: Row) {
    append(json!({
        "bench": row.bench,
        "figure": row.figure,
        "toolwire": row.toolwire,
        "baseline": row.baseline,
        "ratio": row.ratio,
        "target": row.target,
        "holds": row.holds,
        "at": now(),
        "load": load(),
    }));
}

/// The results file of this run, created with its run line by the first
/// bench of the run to write.
fn file() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = std::env::var_os("TOOLWIRE_BENCH_RESULTS")
            .map(PathBuf::from)
            .unwrap_or_else(default_path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        // Whoever creates the file writes the run line; a later bench of the
        // same run finds it there.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            let mut line = serde_json::to_string(&json!({"run": run()})).unwrap();
            line.push('\n');
            f.write_all(line.as_bytes()).unwrap();
        }
        eprintln!("bench results: {}", path.display());
        path
    })
}

fn append(line: Value) {
    let mut text = serde_json::to_string(&line).unwrap();
    text.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(file())
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// `<target>/bench-results/<start>-<pid>.jsonl` of the process that
/// started this bench when that is cargo (one file for every target of a
/// `cargo bench`), else of this process (a bench run on its own).
fn default_path() -> PathBuf {
    // SAFETY: getppid takes no arguments and cannot fail.
    let parent = unsafe { libc::getppid() } as u32;
    let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).unwrap_or_default();
    let pid = if comm.trim() == "cargo" {
        parent
    } else {
        std::process::id()
    };
    let started = started(pid).unwrap_or_else(unix_now);
    super::target_dir()
        .join("bench-results")
        .join(format!("{}-{pid}.jsonl", stamp(started)))
}

/// What the run is: the command, when it started, of which commit, on
/// what machine, built how.
fn run() -> Value {
    // SAFETY: getppid takes no arguments and cannot fail.
    let parent = unsafe { libc::getppid() };
    let cmdline = |pid: String| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let mut command = cmdline(parent.to_string());
    let from_cargo = command
        .first()
        .is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "cargo"));
    if from_cargo {
        command[0] = "cargo".into();
    } else {
        command = cmdline("self".into());
    }
    let manifest = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(manifest)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(c)
            if git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty()) =>
        {
            format!("{c} with uncommitted changes")
        }
        Some(c) => c,
        None => "unknown".into(),
    };
    json!({
        "command": command.join(" "),
        "started": now(),
        "commit": commit,
        "profile": if cfg!(debug_assertions) { "debug (unoptimized)" } else { "release (the bench profile)" },
        "machine": machine(),
        "load": load(),
    })
}

fn machine() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map_or("unknown CPU".into(), |(_, m)| m.trim().to_string());
    let meminfo = read("/proc/meminfo");
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map_or("unknown OS".into(), |v| v.trim_matches('"').to_string());
    let kernel = read("/proc/sys/kernel/osrelease");
    let rust =
        std::process::Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .arg("--version")
            .output()
            .ok()
            .map_or("unknown".into(), |o| {
                String::from_utf8_lossy(&o.stdout).trim().to_string()
            });
    json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "memory": format!("{:.1} GiB", mem_kib / (1 << 20) as f64),
        "disk": disk(),
        "os": format!("{os}, Linux {}", kernel.trim()),
        "rust": rust,
    })
}

/// The file system the benches work on (`bench_root`'s parent) and its
/// device, from this process's mount table: the mount whose point is the
/// longest prefix of that directory.
fn disk() -> String {
    let dir = std::env::var("TOOLWIRE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let dir = dir.canonicalize().unwrap_or(dir);
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            // `id parent dev root point options [optional…] - fstype source super`
            let (before, after) = l.split_once(" - ")?;
            let point = before.split(' ').nth(4)?;
            let mut after = after.split(' ');
            Some((point, after.next()?, after.next()?))
        })
        .filter(|(point, _, _)| dir.starts_with(point))
        .max_by_key(|(point, _, _)| point.len())
        .map_or("unknown".into(), |(point, fstype, source)| {
            format!("{fstype} on {source} ({} under {point})", dir.display())
        })
}

/// The 1, 5 and 15-minute load averages and the running/total tasks, as
/// `/proc/loadavg` has them.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn now() -> String {
    utc(unix_now())
}

/// When process `pid` started, in seconds since the epoch: its start in
/// clock ticks after boot (`/proc/PID/stat`, field 22) plus the boot time.
fn started(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may itself hold spaces and `)`.
    let rest = &stat[stat.rfind(')')? + 2..];
    let ticks: u64 = rest.split(' ').nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(boot + ticks / hz)
}

/// `2026-11-26 07:19:03 UTC` (civil date from days since the epoch, after
/// Howard Hinnant's `civil_from_days`).
fn utc(secs: u64) -> String {
    let (y, m, d) = civil(secs / 86_400);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// A file name's form of the same instant: `2026-11-26-071903`.
fn stamp(secs: u64) -> String {
    utc(secs)
        .replace(" UTC", "")
        .replace(' ', "-")
        .replace(':', "")
}

fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}
