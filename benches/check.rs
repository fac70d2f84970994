//! `toolwire check` next to `toolwire repair` of the same transcript, both
//! through the CLI binary as users (and both editors' Check commands) run
//! them, in the same run.
//!
//!     cargo bench --bench check
//!
//! The transcript: 200,000 Anthropic pairs (about 100 MB), with a fault
//! every 1,000 pairs (an unanswered call, and an orphan result 500 pairs
//! later), so `check` has violations to name and `repair` work to do.
//! `repair` rewrites its file, so each run gets a fresh copy (copied
//! outside the timing). A smaller transcript shows the growth: `check`
//! used to compare every turn with every result, quadratic in the pairs.
//! Each figure is the median of three runs; the file is in the page cache
//! for both (just written or copied).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

mod support;

fn main() {
    support::begin("check");
    let parts = support::Parts::from_args();
    if !parts.want("check") {
        return;
    }
    let root = support::bench_root();
    println!(
        "toolwire check vs repair ({} cores)\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for pairs in [20_000, 200_000] {
        compare(root.path(), pairs);
    }
}

/// A transcript of `pairs` pairs with a fault every 1,000 of them.
fn write_transcript(path: &Path, pairs: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let body: String = (0..6)
        .map(|i| format!("{i}: compiling crate number {i:04} of the workspace, warnings 0\n"))
        .collect();
    for i in 0..pairs {
        let [call, result] = support::pair(&format!("toolu_{i:07}"), &body);
        writeln!(f, "{}", json!({"type": "message", "message": call})).unwrap();
        if i % 1_000 == 999 {
            // Unanswered: the next turn is another assistant message.
            continue;
        }
        writeln!(f, "{}", json!({"type": "message", "message": result})).unwrap();
        if i % 1_000 == 499 {
            let [_, orphan] = support::pair("toolu_nowhere", "late");
            writeln!(f, "{}", json!({"type": "message", "message": orphan})).unwrap();
        }
    }
    f.into_inner().unwrap().sync_all().unwrap();
}

/// Run the binary; `check` exits 1 when it finds violations.
fn run(args: &[&std::ffi::OsStr], ok_codes: &[i32]) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .output()
        .expect("run toolwire");
    let took = start.elapsed();
    assert!(
        out.status.code().is_some_and(|c| ok_codes.contains(&c)),
        "{args:?}: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (took, out.stdout)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn compare(root: &Path, pairs: usize) {
    let path = root.join(format!("check-{pairs}.jsonl"));
    write_transcript(&path, pairs);
    let size = std::fs::metadata(&path).unwrap().len();
    let copy = root.join(format!("repair-{pairs}.jsonl"));
    let (mut checks, mut repairs) = (Vec::new(), Vec::new());
    let mut violations = 0;
    for _ in 0..3 {
        let (took, out) = run(&["check".as_ref(), path.as_os_str()], &[1]);
        violations = String::from_utf8_lossy(&out)
            .lines()
            .filter(|l| l.starts_with("  message "))
            .count();
        checks.push(took);
        std::fs::copy(&path, &copy).unwrap();
        let (took, _) = run(&["repair".as_ref(), copy.as_os_str()], &[0]);
        repairs.push(took);
    }
    // Two faults every 1,000 pairs, each named.
    assert_eq!(violations, pairs / 1_000 * 2);
    let (check, repair) = (median(checks), median(repairs));
    let ratio = check.as_secs_f64() / repair.as_secs_f64();
    println!(
        "check, {pairs} pairs ({} MB, {violations} violations)   toolwire check {:>8.0} ms   toolwire repair {:>8.0} ms   ratio {ratio:.2}x   target <= 2x {}",
        size >> 20,
        check.as_secs_f64() * 1e3,
        repair.as_secs_f64() * 1e3,
        if ratio <= 2.0 { "met" } else { "MISSED" }
    );
    support::record(support::Row {
        bench: "check",
        figure: format!(
            "`toolwire check` of a {pairs}-pair transcript ({} MB, {violations} violations)",
            size >> 20
        ),
        toolwire: format!("{:.0} ms", check.as_secs_f64() * 1e3),
        baseline: format!(
            "{:.0} ms: `toolwire repair` of the same file",
            repair.as_secs_f64() * 1e3
        ),
        ratio: support::x(ratio),
        target: "≤ 2×".into(),
        holds: Some(ratio <= 2.0),
    });
}
