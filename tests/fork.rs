//! Forks with their transcript: the fork's file names its parent's
//! committed bytes (hard-linked) instead of copying them. Every reader
//! reads through them, the parent's later writes never leak in, gc keeps
//! what a kept fork reads, and a fork killed half-way leaves no fork or a
//! whole one.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::*;
use serde_json::{Value, json};
use toolwire::retention::{self, Policy};
use toolwire::transcript::fork;

fn sessions(root: &Path) -> PathBuf {
    root.join(".toolwire/sessions")
}

/// A call and its result, committed.
async fn commit_pair(c: &mut MemClient, sid: &str, id: &str, text: &str) {
    c.call(
        "pair/append",
        json!({"sessionId": sid, "message": assistant_calls(&[id])}),
    )
    .await;
    c.call(
        "pair/append",
        json!({"sessionId": sid, "message": results(&[(id, text)])}),
    )
    .await;
}

/// A call whose (large) result is budgeted, then committed as sent.
async fn commit_budgeted(c: &mut MemClient, sid: &str, id: &str) {
    c.call(
        "pair/append",
        json!({"sessionId": sid, "message": assistant_calls(&[id])}),
    )
    .await;
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": sid, "messages": [results(&[(id, &"x".repeat(60_000))])]}),
        )
        .await;
    c.call(
        "pair/append",
        json!({"sessionId": sid, "message": r["messages"][0]}),
    )
    .await;
}

async fn start(root: &Path) -> (std::sync::Arc<toolwire::server::Server>, MemClient) {
    let server = new_server();
    let (mut c, _task) = connect(server.clone());
    c.initialize(root, json!({"durability": "fsync"})).await;
    (server, c)
}

fn logical(path: &Path) -> Vec<u8> {
    fork::read_all(path).unwrap()
}

fn ids_in(path: &Path) -> Vec<String> {
    transcript_messages(path)
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|b| {
            b.get("id")
                .or_else(|| b.get("tool_use_id"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn a_fork_of_a_fork_resumes_with_exactly_its_parents_state_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = sessions(dir.path());
    let (server, mut c) = start(dir.path()).await;
    commit_pair(&mut c, "p", "toolu_p1", "one").await;
    commit_budgeted(&mut c, "p", "toolu_p2").await;
    c.call(
        "state/fork",
        json!({"sessionId": "p", "newSessionId": "f1"}),
    )
    .await;
    let p_at_fork = logical(&s.join("p.jsonl"));
    commit_pair(&mut c, "f1", "toolu_f1", "in f1").await;
    // The parent goes on after the fork: none of it may reach the fork.
    commit_pair(&mut c, "p", "toolu_p_late", "late").await;
    commit_budgeted(&mut c, "p", "toolu_p_late2").await;
    c.call(
        "state/fork",
        json!({"sessionId": "f1", "newSessionId": "f2"}),
    )
    .await;
    let f1_bytes = logical(&s.join("f1.jsonl"));
    commit_pair(&mut c, "f1", "toolu_f1_late", "late in f1").await;

    // The fork's file holds one line, not a copy.
    let own = std::fs::read(s.join("f2.jsonl")).unwrap();
    assert_eq!(own.iter().filter(|&&b| b == b'\n').count(), 1);
    assert!(own.starts_with(br#"{"type":"fork","parent":"f1""#));
    assert!(f1_bytes.starts_with(&p_at_fork));
    assert_eq!(logical(&s.join("f2.jsonl")), f1_bytes);

    // Restarted: the fork of the fork resumes exactly as a plain copy of
    // its parent's bytes at the fork would.
    server.registry.close_all().await;
    std::fs::write(s.join("copy.jsonl"), &f1_bytes).unwrap();
    let (_server, mut c) = start(dir.path()).await;
    let f1_state = c.call("state/get", json!({"sessionId": "copy"})).await;
    assert_eq!(
        f1_state["seenIds"],
        json!(["toolu_f1", "toolu_p1", "toolu_p2"])
    );
    assert_eq!(
        c.call("state/get", json!({"sessionId": "f2"})).await,
        f1_state
    );
    let ids = ids_in(&s.join("f2.jsonl"));
    assert_eq!(
        ids,
        [
            "toolu_p1", "toolu_p1", "toolu_p2", "toolu_p2", "toolu_f1", "toolu_f1"
        ]
    );
    // The fork appends after its inherited lines; the result it replays
    // is the parent's byte for byte.
    commit_pair(&mut c, "f2", "toolu_f2", "in f2").await;
    let again = c
        .call(
            "budget/apply",
            json!({"sessionId": "f2", "messages": [results(&[("toolu_p2", &"x".repeat(60_000))])]}),
        )
        .await;
    assert_eq!(
        again["messages"][0]["content"][0]["content"],
        f1_state["replacements"]["toolu_p2"]
    );
    let mut expected = f1_bytes.clone();
    let tail = std::fs::read(s.join("f2.jsonl")).unwrap();
    let nl = tail.iter().position(|&b| b == b'\n').unwrap();
    expected.extend_from_slice(&tail[nl + 1..]);
    assert_eq!(logical(&s.join("f2.jsonl")), expected);
    assert_eq!(
        ids_in(&s.join("f2.jsonl")).last().map(String::as_str),
        Some("toolu_f2")
    );
    // And the parent's late lines are still only the parent's.
    assert!(ids_in(&s.join("p.jsonl")).contains(&"toolu_p_late".to_owned()));
    assert!(!ids_in(&s.join("f1.jsonl")).contains(&"toolu_p_late".to_owned()));
}

/// A parent with a fault in the middle (an unanswered call, which resume
/// keeps as it is: fixing it is repair's job).
fn write_faulty_parent(path: &Path) {
    let lines = [
        json!({"type": "message", "message": assistant_calls(&["toolu_a"])}),
        json!({"type": "message", "message": results(&[("toolu_a", "fine")])}),
        json!({"type": "message", "message": assistant_calls(&["toolu_orphan"])}),
        json!({"type": "message", "message": user_text("never answered")}),
        json!({"type": "message", "message": assistant_calls(&["toolu_b"])}),
        json!({"type": "message", "message": results(&[("toolu_b", "fine too")])}),
    ];
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn check_repair_reconstruct_and_import_read_through_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let s = sessions(dir.path());
    write_faulty_parent(&s.join("p.jsonl"));
    let (server, mut c) = start(dir.path()).await;
    c.call("state/fork", json!({"sessionId": "p", "newSessionId": "f"}))
        .await;
    commit_pair(&mut c, "f", "toolu_f", "own").await;
    let fork_path = s.join("f.jsonl");
    let path = fork_path.display().to_string();

    // check: the fault sits in the parent's lines (message 2).
    let check = c.call("transcript/check", json!({"path": path})).await;
    assert_eq!(check["ok"], json!(false));
    assert_eq!(check["violations"][0]["index"], json!(2));
    assert_eq!(check["violations"][0]["ids"], json!(["toolu_orphan"]));

    // reconstruct into another session: every result, the parent's too.
    let r = c
        .call(
            "state/reconstruct",
            json!({"sessionId": "r", "transcript": path}),
        )
        .await;
    assert_eq!(r["messagesRead"], json!(8));
    assert_eq!(r["seenCount"], json!(3));

    // The command line reads it the same way.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["check", &path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("toolu_orphan"));
    // `toolwire import` of a toolwire transcript reads it whole too (as
    // what it is, converting nothing).
    let detect = toolwire::transcript::import::transcript_bytes(&fork_path).unwrap();
    assert_eq!(detect.1, logical(&fork_path));

    // repair (the server lets go of it first): the fork is written out
    // whole, the parent's lines repaired in it; the parent is untouched.
    server.registry.close_all().await;
    let parent_before = std::fs::read(s.join("p.jsonl")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["repair", &path])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read(s.join("p.jsonl")).unwrap(), parent_before);
    let repaired = std::fs::read(&fork_path).unwrap();
    assert!(!repaired.starts_with(br#"{"type":"fork""#));
    assert_eq!(
        ids_in(&fork_path),
        [
            "toolu_a", "toolu_a", "toolu_b", "toolu_b", "toolu_f", "toolu_f"
        ]
    );
    let (_server, mut c) = start(dir.path()).await;
    let check = c.call("transcript/check", json!({"path": path})).await;
    assert_eq!(check["ok"], json!(true));
    assert_eq!(
        c.call("state/get", json!({"sessionId": "f"})).await["seenIds"],
        json!(["toolu_a", "toolu_b", "toolu_f"])
    );
}

#[tokio::test]
async fn a_repaired_or_collected_parent_leaves_its_forks_whole() {
    let dir = tempfile::tempdir().unwrap();
    let s = sessions(dir.path());
    write_faulty_parent(&s.join("p.jsonl"));
    let (server, mut c) = start(dir.path()).await;
    c.call("state/fork", json!({"sessionId": "p", "newSessionId": "f"}))
        .await;
    let state = c.call("state/get", json!({"sessionId": "f"})).await;
    let bytes = logical(&s.join("f.jsonl"));
    server.registry.close_all().await;

    // Repair replaces the parent's file: the fork still reads the bytes it
    // was forked from.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["repair", &s.join("p.jsonl").display().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_ne!(logical(&s.join("p.jsonl")), bytes);
    assert_eq!(logical(&s.join("f.jsonl")), bytes);

    // gc: the parent expired, the fork did not. The parent goes; the fork
    // still reads every byte it was forked from.
    let old = SystemTime::now() - Duration::from_secs(40 * 86_400);
    for name in ["p.jsonl", "p.jsonl.bak"] {
        let f = std::fs::File::options()
            .write(true)
            .open(s.join(name))
            .unwrap();
        f.set_modified(old).unwrap();
    }
    let policy = Policy {
        max_age: Some(Duration::from_secs(30 * 86_400)),
        max_total_bytes: None,
        grace: retention::GRACE,
        now: SystemTime::now(),
    };
    let report = retention::collect(
        &dir.path().join(".toolwire"),
        None,
        &policy,
        false,
        &|_| false,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.sessions_removed, ["p"]);
    assert!(!s.join("p.jsonl").exists());
    assert_eq!(logical(&s.join("f.jsonl")), bytes);
    let (server, mut c) = start(dir.path()).await;
    assert_eq!(c.call("state/get", json!({"sessionId": "f"})).await, state);
    server.registry.close_all().await;

    // A link no transcript names (a fork killed before naming its file)
    // goes once past the grace period; the fork's own links stay.
    let named = fork::linked_names(&s.join("f.jsonl"));
    assert_eq!(named.len(), 1);
    std::fs::hard_link(s.join(&named[0]), s.join("g.jsonl.base-dead-0")).unwrap();
    let later = Policy {
        now: SystemTime::now() + 2 * retention::GRACE,
        ..policy.clone()
    };
    retention::collect(
        &dir.path().join(".toolwire"),
        None,
        &later,
        false,
        &|_| false,
        &mut |_| {},
    )
    .unwrap();
    assert!(!s.join("g.jsonl.base-dead-0").exists());
    assert!(s.join(&named[0]).exists());
    assert_eq!(logical(&s.join("f.jsonl")), bytes);

    // The fork removed as a unit takes its links with it.
    let expired = Policy {
        max_age: Some(Duration::from_secs(1)),
        now: SystemTime::now() + Duration::from_secs(10),
        ..policy
    };
    let report = retention::collect(
        &dir.path().join(".toolwire"),
        None,
        &expired,
        false,
        &|_| false,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(report.sessions_removed, ["f"]);
    let left: Vec<String> = std::fs::read_dir(&s)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_fork_killed_half_way_leaves_no_fork_or_a_whole_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = sessions(dir.path());
    // A parent of some size, so forks and the kill overlap.
    {
        let (server, mut c) = start(dir.path()).await;
        for i in 0..50 {
            commit_pair(&mut c, "p", &format!("toolu_{i}"), &"r".repeat(2000)).await;
        }
        server.registry.close_all().await;
    }
    let parent = logical(&s.join("p.jsonl"));
    for trial in 0..4u64 {
        let (mut c, mut child) = spawn_binary(dir.path());
        c.initialize(dir.path(), json!({"durability": "fsync"}))
            .await;
        c.call("state/get", json!({"sessionId": "p"})).await;
        let mut forks = Vec::new();
        for i in 0..200 {
            forks.push(
                c.start(
                    "state/fork",
                    json!({"sessionId": "p", "newSessionId": format!("k{trial}-{i}")}),
                )
                .await,
            );
        }
        // Killed once a few forks (more each trial) have answered, while
        // the rest are still being made: no clock decides what finished.
        c.response(forks[(trial * 3) as usize]).await;
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
    let mut whole = 0;
    for entry in std::fs::read_dir(&s).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".jsonl")
            && id != "p"
        {
            // Named means complete: it reads as the parent, byte for byte.
            assert_eq!(logical(&s.join(&name)), parent, "{id}");
            whole += 1;
        }
    }
    assert!(whole > 0, "no fork finished before the kills");
    // Each one resumes.
    let (_server, mut c) = start(dir.path()).await;
    let want = c.call("state/get", json!({"sessionId": "p"})).await;
    for entry in std::fs::read_dir(&s).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".jsonl") {
            assert_eq!(
                c.call("state/get", json!({"sessionId": id})).await,
                want,
                "{id}"
            );
        }
    }
}
