//! The file commands read their file as a stream (issue 52): `check`,
//! `repair --dry-run` and `import --from messages` of a generated 30 MB
//! file each peak under 64 MB plus the file's largest line, the goal
//! docs/benchmarks.md measures on 56 MB. A memory bound, read from the
//! kernel (the child's `ru_maxrss`, its VmHWM), never a time. Before the
//! streaming these commands held the file parsed: about 17 times its size.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Call/result pairs: about 30 MB of transcript.
const PAIRS: usize = 100_000;

/// A pair of messages: an assistant's call and the user's result; one call
/// in 1,000 left unanswered, so that repair has something to do.
fn pair(i: usize) -> (String, String) {
    let call = format!(
        r#"{{"role":"assistant","content":[{{"type":"text","text":"step {i}"}},{{"type":"tool_use","id":"toolu_{i:010}","name":"Read","input":{{"path":"src/m{}.rs"}}}}]}}"#,
        i % 977
    );
    let result = if i % 1000 == 7 {
        format!(r#"{{"role":"user","content":"go on {i}"}}"#)
    } else {
        format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{i:010}","content":"fn f{i}() {{ {} }}"}}]}}"#,
            i * 7919 % 100_003
        )
    };
    (call, result)
}

/// Write the transcript (`wrapped`) or the bare messages; the largest line.
fn generate(path: &Path, wrapped: bool) -> usize {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut largest = 0;
    for i in 0..PAIRS {
        let (call, result) = pair(i);
        for message in [call, result] {
            let line = if wrapped {
                format!(r#"{{"type":"message","message":{message}}}"#)
            } else {
                message
            };
            largest = largest.max(line.len() + 1);
            writeln!(out, "{line}").unwrap();
        }
    }
    out.flush().unwrap();
    largest
}

/// Run the binary with `args`; its exit code and peak resident set in
/// bytes, as the kernel counted it for that child alone.
// The child is reaped by wait4, which `Child::wait` cannot stand in for:
// only wait4 returns the child's own rusage.
#[allow(clippy::zombie_processes)]
fn peak(args: &[&std::ffi::OsStr], home: &Path) -> (i32, u64) {
    let child = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, and the child is ours and not yet
    // reaped (wait4 reaps it; `child` is never waited on after).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64 * 1024)
}

#[test]
fn check_repair_and_import_of_a_30_mb_file_peak_under_64_mb_plus_its_largest_line() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("pairs.jsonl");
    let messages = dir.path().join("messages.jsonl");
    let line = generate(&transcript, true);
    let message_line = generate(&messages, false);
    assert!(std::fs::metadata(&transcript).unwrap().len() > 25 << 20);
    let out = dir.path().join("imported.jsonl");
    let cases: [(&str, Vec<&std::ffi::OsStr>, usize, i32); 3] = [
        (
            "check",
            vec!["check".as_ref(), transcript.as_os_str()],
            line,
            1,
        ),
        (
            "repair --dry-run",
            vec![
                "repair".as_ref(),
                "--dry-run".as_ref(),
                transcript.as_os_str(),
            ],
            line,
            0,
        ),
        (
            "import --from messages",
            vec![
                "import".as_ref(),
                "--from".as_ref(),
                "messages".as_ref(),
                messages.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
            ],
            message_line,
            0,
        ),
    ];
    for (name, args, largest, code) in cases {
        let (exit, peak) = peak(&args, dir.path());
        assert_eq!(exit, code, "{name} exit status");
        let bound = (64 << 20) + largest as u64;
        assert!(
            peak <= bound,
            "{name} peaked at {:.1} MB, over 64 MB + its largest line ({:.1} MB)",
            peak as f64 / (1 << 20) as f64,
            bound as f64 / (1 << 20) as f64
        );
    }
}
