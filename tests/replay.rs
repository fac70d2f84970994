//! `toolwire replay`: the bundled session's summary, checked against counts
//! derived independently from the recording and from what landed on disk.

mod common;
#[path = "common/gzip_bomb.rs"]
mod gzip_bomb;

use std::process::Command;

use common::*;
use serde_json::Value;
use toolwire::replay::{self, Step};

fn run_replay(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .arg("replay")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_bundled_session_replays_with_the_expected_summary() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = run_replay(&["--json", "--data-dir", data.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();

    // What the recording holds, counted here without toolwire's help.
    let steps = replay::parse_recording(&replay::bundled_recording().unwrap()).unwrap();
    let messages: Vec<&Value> = steps
        .iter()
        .filter_map(|s| {
            if let Step::Message(m) = s {
                Some(m)
            } else {
                None
            }
        })
        .collect();
    let results: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    let text_len = |b: &Value| -> u64 {
        match &b["content"] {
            Value::String(s) => s.chars().count() as u64,
            Value::Array(a) => a
                .iter()
                .filter(|x| x["type"] == "text")
                .map(|x| x["text"].as_str().unwrap().chars().count() as u64)
                .sum(),
            _ => 0,
        }
    };
    assert_eq!(s["messages"], messages.len());
    assert_eq!(
        s["turns"],
        messages.iter().filter(|m| m["role"] == "assistant").count()
    );
    assert_eq!(s["toolResults"], results.len());
    assert_eq!(
        s["charsReceived"],
        results.iter().map(|b| text_len(b)).sum::<u64>()
    );
    assert_eq!(s["resumes"], 1);
    // The recording is large enough for budgeting to act.
    assert!(results.iter().filter(|b| text_len(b) > 50_000).count() >= 3);
    let big_message = messages.iter().any(|m| {
        m["role"] == "user"
            && m["content"]
                .as_array()
                .is_some_and(|c| c.iter().map(text_len).sum::<u64>() > 200_000)
    });
    assert!(
        big_message,
        "one user message carries more than 200,000 characters"
    );

    // What landed on disk agrees with the summary.
    let artifacts: Vec<_> = std::fs::read_dir(data.join("sessions/replay/tool-results"))
        .unwrap()
        .collect();
    assert_eq!(s["resultsPersisted"], artifacts.len());
    let bytes: u64 = artifacts
        .iter()
        .map(|e| e.as_ref().unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(s["bytesPersisted"], bytes);
    let transcript = transcript_messages(&data.join("sessions/replay.jsonl"));
    assert_paired(&transcript);
    let pairs = transcript
        .iter()
        .filter(|m| {
            m["role"] == "assistant"
                && m["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"))
        })
        .count();
    assert_eq!(s["pairsCommitted"], pairs);
    assert_eq!(s["pairsDiscarded"], 1, "the interrupted turn");
    assert_eq!(s["pairsSynthesized"], 0);
    // Each result sent replaced appears as a persisted-output preview.
    let sent_previews = transcript
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| {
            b["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("<persisted-output>"))
        })
        .count();
    assert_eq!(s["resultsPersisted"], sent_previews);
    assert!(s["charsSent"].as_u64().unwrap() < s["charsReceived"].as_u64().unwrap() / 5);
    assert!(s["decisionsReapplied"].as_u64().unwrap() > 0);
    assert!(s["latencyP99Ms"].as_f64().unwrap() >= s["latencyP50Ms"].as_f64().unwrap());

    // The human summary names the same figures.
    let out = run_replay(&["--data-dir", dir.path().join("again").to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("results persisted  {}", s["resultsPersisted"])),
        "{text}"
    );
}

#[test]
fn the_bundled_session_is_what_its_script_generates() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/make_demo_session.py"
    );
    let status = Command::new("python3")
        .args([script, "--check"])
        .status()
        .expect("python3");
    assert!(
        status.success(),
        "tests/data/demo-session.jsonl.gz is stale"
    );
}

#[test]
fn synthetic_sessions_replay_and_are_deterministic() {
    assert_eq!(
        replay::synthetic::generate(30, 7),
        replay::synthetic::generate(30, 7)
    );
    assert_ne!(
        replay::synthetic::generate(30, 7),
        replay::synthetic::generate(30, 8)
    );
    let dir = tempfile::tempdir().unwrap();
    let out = run_replay(&[
        "--synthetic",
        "30",
        "--seed",
        "7",
        "--json",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["turns"], 30);
    assert_eq!(s["pairsDiscarded"], 1, "turn 25 is interrupted");
    assert_paired(&transcript_messages(
        &dir.path().join("sessions/replay.jsonl"),
    ));
}

#[test]
fn bad_recordings_are_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"robot\",\"content\":\"?\"}\n",
    )
    .unwrap();
    let out = run_replay(&[path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("line 2"), "{err}");
    std::fs::write(&path, "{\"type\":\"weird\"}\n").unwrap();
    let err = String::from_utf8(run_replay(&[path.to_str().unwrap()]).stderr).unwrap();
    assert!(err.contains("line 1") && err.contains("weird"), "{err}");
}

/// #32 item 14: a 1 MiB gzip bomb (1 GiB inflated) is refused at its first
/// line without being inflated whole: one that is not JSON at once, one
/// whose first line never ends at the line limit, each in a fraction of
/// the memory the reported run took (1.1 GB).
#[test]
fn a_gzip_bomb_is_refused_in_bounded_memory() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    for (byte, expected) in [
        (0u8, "line 1: not JSON"),
        (b'{', "line 1: longer than 64 MiB"),
    ] {
        let path = dir.path().join(format!("bomb-{byte}.jsonl.gz"));
        let bomb = gzip_bomb::gzip_bomb(byte, 1 << 30);
        assert!(bomb.len() < 1_100_000, "{}", bomb.len());
        std::fs::write(&path, bomb).unwrap();
        // Reaped by `wait4` below, which std's `wait` cannot stand in for.
        #[allow(clippy::zombie_processes)]
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .arg("replay")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        // Waited for here, for its own peak resident size.
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of the plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 writes only to the two locals it is given.
        let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
        assert_eq!(pid, child.id() as i32);
        let status = std::process::ExitStatus::from_raw(status);
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains(expected), "{err}");
        let peak_mib = usage.ru_maxrss / 1024;
        eprintln!("replay of a 1 GiB bomb of {byte:?}: peak RSS {peak_mib} MiB");
        assert!(peak_mib < 200, "peak RSS {peak_mib} MiB");
    }
}

/// `toolwire replay ARGS` with the temporary directory in `tmp`.
fn replay_in(tmp: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .arg("replay")
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .unwrap()
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_temporary_data_directory_is_removed_unless_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = replay_in(tmp.path(), &["--synthetic", "5"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("--keep or --data-dir DIR keeps it"), "{text}");
    assert_eq!(entries(tmp.path()), Vec::<String>::new());

    let out = replay_in(tmp.path(), &["--synthetic", "5", "--keep"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kept = entries(tmp.path());
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].starts_with("toolwire-replay-"), "{kept:?}");
    let transcript = tmp.path().join(&kept[0]).join("sessions/replay.jsonl");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("transcript: {}", transcript.display())),
        "{text}"
    );
    assert!(transcript.is_file());

    // --keep is about the temporary directory: with --data-dir it makes no sense.
    let out = replay_in(tmp.path(), &["--keep", "--data-dir", "x"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_empty_recording_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("empty.jsonl");
    for content in ["", "\n\n", "{\"type\":\"resume\"}\n"] {
        std::fs::write(&path, content).unwrap();
        let out = replay_in(tmp.path(), &[path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{content:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(&format!("{}: no messages to replay", path.display())),
            "{err}"
        );
        assert!(out.stdout.is_empty());
    }
    assert_eq!(entries(tmp.path()), ["empty.jsonl"]);
}

#[test]
fn every_figure_of_the_summary_is_explained_in_its_legend() {
    let tmp = tempfile::tempdir().unwrap();
    let out = replay_in(tmp.path(), &["--synthetic", "5"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let (figures, legend) = text.split_once("what the figures mean:").unwrap();
    // The figures: the indented lines before the legend.
    let terms: Vec<&str> = figures
        .lines()
        .filter(|l| l.starts_with("  ") && !l.trim().is_empty())
        .map(|l| l.trim_start())
        .collect();
    assert_eq!(terms.len(), replay::LEGEND.len(), "{figures}");
    for (term, meaning) in replay::LEGEND {
        assert!(
            terms.iter().any(|t| t.starts_with(term)),
            "{term}: {figures}"
        );
        assert!(
            legend.contains(&format!("  {term:<18} {}", meaning[0])),
            "{legend}"
        );
    }
}
