//! Retention end to end: `storage/gc` and `toolwire gc` on a store of
//! expired, live, held, forked and half-written sessions; a dry run that
//! lists exactly what the real run removes; and `budget/apply` racing gc.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use common::*;
use serde_json::{Value, json};
use toolwire::retention::{self, Policy};

const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3600);

fn age(path: &Path, by: Duration) {
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .or_else(|_| std::fs::File::open(path))
        .unwrap();
    file.set_modified(SystemTime::now() - by).unwrap();
}

fn sessions(root: &Path) -> PathBuf {
    root.join(".toolwire/sessions")
}

/// A session with a transcript: a call answered by `results` (each over
/// the limit, so persisted), appended as a harness does.
async fn make_session(c: &mut MemClient, id: &str, results: &[(&str, String)]) -> Vec<String> {
    let ids: Vec<&str> = results.iter().map(|(i, _)| *i).collect();
    c.call(
        "pair/append",
        json!({"sessionId": id, "message": assistant_calls(&ids)}),
    )
    .await;
    let items: Vec<(&str, &str)> = results.iter().map(|(i, t)| (*i, t.as_str())).collect();
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": id, "messages": [results_msg(&items)]}),
        )
        .await;
    c.call(
        "pair/append",
        json!({"sessionId": id, "message": r["messages"][0]}),
    )
    .await;
    r["persisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_owned())
        .collect()
}

/// A server and a client of it in workspace `dir`, saving results over
/// 100 chars with 20-char previews.
async fn small_limits(
    dir: &Path,
) -> (
    Arc<toolwire::server::Server>,
    MemClient,
    tokio::task::JoinHandle<toolwire::server::ConnectionEnd>,
) {
    let server = new_server();
    let (mut c, task) = connect(server.clone());
    c.initialize(
        dir,
        json!({"limits": {"maxResultChars": 100, "previewChars": 20}}),
    )
    .await;
    (server, c, task)
}

fn results_msg(items: &[(&str, &str)]) -> Value {
    results(items)
}

fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            out.insert(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(&p, base, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

#[tokio::test]
async fn gc_removes_by_the_rules_and_a_dry_run_lists_exactly_that() {
    if !common::local_only(
        "gc_removes_by_the_rules_and_a_dry_run_lists_exactly_that",
        "ages transcript files to drive the local collector (gc on the shared store: tests/fleet.rs)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (server, mut c, _task) = small_limits(dir.path()).await;
    let big = |tag: &str| format!("{tag} ").repeat(100);
    make_session(&mut c, "expired", &[("toolu_e1", big("e1"))]).await;
    let live = make_session(&mut c, "live", &[("toolu_l1", big("l1"))]).await;
    make_session(&mut c, "held", &[("toolu_h1", big("h1"))]).await;
    make_session(&mut c, "parent", &[("toolu_p1", big("p1"))]).await;
    c.call(
        "state/fork",
        json!({"sessionId": "parent", "newSessionId": "child"}),
    )
    .await;
    // Every session is closed (its locks released), as after a restart.
    server.registry.close_all().await;

    let s = sessions(dir.path());
    let old = 40 * DAY;
    for id in ["expired", "held", "parent"] {
        age(&s.join(format!("{id}.jsonl")), old);
    }
    // In `live`: its referenced artifact is old, but pointed at; an
    // unreferenced one past the grace period goes, a recent one stays; a
    // temporary file of a killed write goes once old; a file that is not
    // an artifact's name is not ours.
    let lr = s.join("live/tool-results");
    age(Path::new(&live[0]), 3 * HOUR);
    for (name, by) in [
        ("toolu_orphan.txt", 2 * HOUR),
        ("toolu_recent.txt", Duration::from_secs(600)),
        (".tmp-killed", 2 * HOUR),
        (".tmp-writing", Duration::from_secs(60)),
        ("notes.bin", 10 * DAY),
    ] {
        std::fs::write(lr.join(name), "x".repeat(10)).unwrap();
        age(&lr.join(name), by);
    }
    // Line indexes kept beside artifacts (`<artifact>.idx`): never outputs
    // of their own. The orphan's goes with it, one whose artifact is gone
    // goes, those of kept artifacts stay; none is named in the report.
    let kept_index = format!("{}.idx", live[0]);
    for index in [
        lr.join("toolu_orphan.txt.idx"),
        lr.join("toolu_gone.txt.idx"),
        lr.join("toolu_recent.txt.idx"),
        PathBuf::from(&kept_index),
    ] {
        std::fs::write(&index, "{}").unwrap();
        age(&index, 2 * HOUR);
    }
    // Half-written: a session whose only file is a killed write's leftover.
    let hw = s.join("half/tool-results");
    std::fs::create_dir_all(&hw).unwrap();
    std::fs::write(hw.join(".tmp-abc"), "partial").unwrap();
    age(&hw.join(".tmp-abc"), old);
    age(&hw, old);
    age(&s.join("half"), old);
    // Leftovers beside the sessions: a killed fork's copy, a gc's trash.
    std::fs::write(s.join(".fork-XYZ"), "copy").unwrap();
    age(&s.join(".fork-XYZ"), 2 * HOUR);
    std::fs::create_dir_all(s.join(".gc-gone-1-2/tool-results")).unwrap();
    std::fs::write(s.join(".gc-gone-1-2/tool-results/a.txt"), "abc").unwrap();
    age(&s.join(".gc-gone-1-2"), 2 * HOUR);
    // `held`: another process has its transcript open and locked.
    let holder = std::fs::File::open(s.join("held.jsonl")).unwrap();
    holder.try_lock().unwrap();
    std::fs::write(s.join("held/tool-results/.tmp-old"), "x").unwrap();
    age(&s.join("held/tool-results/.tmp-old"), 2 * DAY);

    let before = tree(&s);
    let dry = c.call("storage/gc", json!({"dryRun": true})).await;
    assert_eq!(tree(&s), before, "a dry run removes nothing");
    let real = c.call("storage/gc", json!({})).await;
    assert_eq!(
        dry, real,
        "the dry run lists exactly what the real run removes"
    );

    let removed: BTreeSet<&str> = real["sessionsRemoved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    // `parent` is old but `child` points into it (a fork's lines).
    assert_eq!(removed, BTreeSet::from(["expired", "half"]), "{real}");
    let files: BTreeSet<String> = real["artifactsRemoved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            Path::new(v.as_str().unwrap())
                .strip_prefix(&s)
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        files,
        BTreeSet::from([
            "live/tool-results/toolu_orphan.txt".to_owned(),
            "live/tool-results/.tmp-killed".to_owned(),
            ".fork-XYZ".to_owned(),
            ".gc-gone-1-2".to_owned(),
        ])
    );
    assert_eq!(real["kept"], json!(4));

    let after = tree(&s);
    let gone: BTreeSet<&String> = before.difference(&after).collect();
    let mut expected: BTreeSet<String> = before
        .iter()
        .filter(|p| {
            p.starts_with("expired")
                || p.starts_with("half")
                || p.starts_with(".gc-gone-1-2")
                || p.starts_with(".fork-XYZ")
        })
        .cloned()
        .collect();
    expected.insert("live/tool-results/toolu_orphan.txt".into());
    expected.insert("live/tool-results/toolu_orphan.txt.idx".into());
    expected.insert("live/tool-results/toolu_gone.txt.idx".into());
    expected.insert("live/tool-results/.tmp-killed".into());
    assert_eq!(gone, expected.iter().collect(), "removed on disk");
    assert!(Path::new(&kept_index).exists());
    let size: u64 = real["bytesFreed"].as_u64().unwrap();
    assert!(size > 200, "{real}");
    // What a kept session points at is still there, and still readable.
    for path in &live {
        assert!(Path::new(path).exists());
    }
    // The fork reads it through its own journal's replacement line.
    let r = c
        .call(
            "artifact/read",
            json!({"sessionId": "child", "toolUseId": "toolu_p1"}),
        )
        .await;
    assert!(r["text"].as_str().unwrap().starts_with("p1 p1"), "{r}");
    drop(holder);

    // Released by its holder, the expired session goes on the next run.
    let again = c.call("storage/gc", json!({})).await;
    assert_eq!(again["sessionsRemoved"], json!(["held"]));
    assert_eq!(again["artifactsRemoved"], json!([]));
}

#[tokio::test]
async fn over_the_size_limit_the_least_recently_written_go_first() {
    if !common::local_only(
        "over_the_size_limit_the_least_recently_written_go_first",
        "ages transcript files to drive the local collector (gc on the shared store: tests/fleet.rs)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = new_server();
    let (mut c, _task) = connect(server.clone());
    c.initialize(
        dir.path(),
        json!({"limits": {"maxResultChars": 100, "previewChars": 20}, "retention": {"maxAgeDays": null, "maxTotalBytes": 32_000}}),
    )
    .await;
    for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
        make_session(&mut c, id, &[(&format!("toolu_{id}"), "z".repeat(10_000))]).await;
        server.registry.close_all().await;
        // `a` is the oldest, `d` the newest.
        age(
            &sessions(dir.path()).join(format!("{id}.jsonl")),
            Duration::from_secs(3600 * (10 - i as u64)),
        );
    }
    let r = c.call("storage/gc", json!({})).await;
    assert_eq!(r["sessionsRemoved"], json!(["a", "b"]), "{r}");
    assert_eq!(r["kept"], json!(2));
}

#[tokio::test]
async fn a_session_open_in_this_server_is_never_touched() {
    if !common::local_only(
        "a_session_open_in_this_server_is_never_touched",
        "ages transcript files to drive the local collector (gc on the shared store: tests/fleet.rs)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _task) = connect(new_server());
    c.initialize(
        dir.path(),
        json!({"limits": {"maxResultChars": 100, "previewChars": 20}, "retention": {"maxAgeDays": 0}}),
    )
    .await;
    let paths = make_session(&mut c, "open", &[("toolu_o", "o".repeat(500))]).await;
    age(&sessions(dir.path()).join("open.jsonl"), 400 * DAY);
    let r = c.call("storage/gc", json!({})).await;
    assert_eq!(r["sessionsRemoved"], json!([]));
    assert_eq!(r["kept"], json!(1));
    assert!(Path::new(&paths[0]).exists());
}

#[test]
fn toolwire_gc_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("toolwire.toml"),
        "[retention]\nmax_age_days = 1\n",
    )
    .unwrap();
    let s = sessions(dir.path());
    std::fs::create_dir_all(s.join("old/tool-results")).unwrap();
    std::fs::write(s.join("old.jsonl"), "").unwrap();
    std::fs::write(s.join("old/tool-results/toolu_1.txt"), "saved").unwrap();
    age(&s.join("old.jsonl"), 2 * DAY);
    std::fs::write(s.join("new.jsonl"), "").unwrap();
    let gc = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .arg("gc")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let dry: Value = serde_json::from_str(&gc(&["--dry-run", "--json"])).unwrap();
    assert_eq!(
        dry,
        json!({"sessionsRemoved": ["old"], "artifactsRemoved": [], "bytesFreed": 5, "kept": 1})
    );
    assert!(s.join("old.jsonl").exists());
    let text = gc(&[]);
    assert!(text.contains("removed session old\n"), "{text}");
    assert!(
        text.ends_with("removed 1 sessions and 0 other files, 5 bytes; kept 1 sessions\n"),
        "{text}"
    );
    assert!(!s.join("old.jsonl").exists() && !s.join("old").exists());
    assert!(s.join("new.jsonl").exists());
}

/// `budget/apply` and gc on the same sessions at the same time, gc as
/// eager as it can be (no grace period) and run from outside the server
/// (as `toolwire gc` would). Sessions close their transcripts between
/// requests, so gc does get at them. No reply may ever point at an artifact
/// that is missing, then or at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_racing_gc_never_leaves_a_preview_pointing_at_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = toolwire::server::Server::with_session_idle(
        toolwire::session::Storage::default(),
        Duration::from_millis(5),
    );
    let (mut c, _task) = connect(server.clone());
    c.initialize(
        dir.path(),
        json!({"limits": {"maxResultChars": 100, "previewChars": 20}, "durability": "none"}),
    )
    .await;
    let data_dir = dir.path().join(".toolwire");
    let stop = Arc::new(AtomicBool::new(false));
    let swept = Arc::new(AtomicUsize::new(0));
    let gc = {
        let (stop, swept, data_dir) = (stop.clone(), swept.clone(), data_dir.clone());
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(Ordering::SeqCst) || runs < 3 {
                let policy = Policy {
                    max_age: None,
                    max_total_bytes: None,
                    grace: Duration::ZERO,
                    now: SystemTime::now() + Duration::from_secs(1),
                };
                let r =
                    retention::collect(&data_dir, None, &policy, false, &|_| false, &mut |_| {})
                        .unwrap();
                swept.fetch_add(r.artifacts_removed.len(), Ordering::SeqCst);
                runs += 1;
            }
        })
    };
    let mut pointed: Vec<String> = Vec::new();
    for round in 0..150 {
        let session = format!("s{}", round % 3);
        let ids: Vec<String> = (0..3).map(|k| format!("toolu_{round}_{k}")).collect();
        // Orphans with the very names and bytes this round will persist:
        // gc races to remove them while the apply reuses them.
        let results_dir = data_dir
            .join("sessions")
            .join(&session)
            .join("tool-results");
        std::fs::create_dir_all(&results_dir).unwrap();
        let text = |k: usize| format!("round {round} result {k} ").repeat(20);
        for (k, id) in ids.iter().enumerate().take(2) {
            std::fs::write(results_dir.join(format!("{id}.txt")), text(k)).unwrap();
        }
        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        c.call(
            "pair/append",
            json!({"sessionId": session, "message": assistant_calls(&id_refs)}),
        )
        .await;
        let texts: Vec<String> = (0..3).map(text).collect();
        let items: Vec<(&str, &str)> = id_refs
            .iter()
            .zip(&texts)
            .map(|(i, t)| (*i, t.as_str()))
            .collect();
        let r = c
            .call(
                "budget/apply",
                json!({"sessionId": session, "messages": [results(&items)]}),
            )
            .await;
        for p in r["persisted"].as_array().unwrap() {
            let path = p["path"].as_str().unwrap();
            assert!(
                Path::new(path).exists(),
                "round {round}: reply points at missing {path}"
            );
            pointed.push(path.to_owned());
        }
        c.call(
            "pair/append",
            json!({"sessionId": session, "message": r["messages"][0]}),
        )
        .await;
        if round % 7 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stop.store(true, Ordering::SeqCst);
    gc.join().unwrap();
    assert_eq!(pointed.len(), 450);
    let missing: Vec<&String> = pointed.iter().filter(|p| !Path::new(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "previews point at removed artifacts: {missing:?}"
    );
    // The race was real: gc did remove files around the applies.
    assert!(swept.load(Ordering::SeqCst) > 0);
}

/// Kills the workspace's daemon when dropped, whatever happened.
struct DaemonRig {
    workspace: tempfile::TempDir,
    run: tempfile::TempDir,
}

impl Drop for DaemonRig {
    fn drop(&mut self) {
        let paths =
            toolwire::daemon::paths_in(self.run.path().join("toolwire"), self.workspace.path())
                .unwrap();
        if let Some(pid) = toolwire::daemon::daemon_pid(&paths) {
            // SAFETY: signalling a pid read from our own daemon's lock file.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

#[tokio::test]
async fn the_shared_daemon_collects_on_its_schedule_unless_told_not_to() {
    let rig = DaemonRig {
        workspace: tempfile::tempdir().unwrap(),
        run: tempfile::tempdir().unwrap(),
    };
    let ws = rig.workspace.path();
    let toml = |auto: bool| {
        std::fs::write(
            ws.join("toolwire.toml"),
            format!("[retention]\nmax_age_days = 1\ninterval_hours = 0.0003\nauto = {auto}\n"),
        )
        .unwrap();
    };
    toml(false);
    let s = sessions(ws);
    std::fs::create_dir_all(&s).unwrap();
    std::fs::write(s.join("old.jsonl"), "").unwrap();
    age(&s.join("old.jsonl"), 2 * DAY);

    let (mut c, _child) = spawn_shared(ws, rig.run.path(), 60);
    c.initialize(ws, json!({})).await;
    // Off: several intervals (about a second each) pass, nothing goes.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(s.join("old.jsonl").exists());
    assert!(!ws.join(".toolwire").join(retention::STAMP_FILE).exists());

    // On (read again at the next check): the expired session goes.
    toml(true);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while s.join("old.jsonl").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not collect the expired session"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ws.join(".toolwire").join(retention::STAMP_FILE).exists());
}

/// With `previews = "mcp"` (`linkSession`), previews name links, not
/// files: gc keeps what they link to and removes what nothing links to, as
/// for paths, and a kept fork of an expired session of the same tenant
/// keeps its parent's outputs and reads them.
#[tokio::test]
async fn link_previews_keep_their_outputs_and_nothing_more() {
    if !common::local_only(
        "link_previews_keep_their_outputs_and_nothing_more",
        "ages transcript files to drive the local collector",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (server, mut c, _task) = small_limits(dir.path()).await;
    let big = |tag: &str| format!("{tag} ").repeat(100);
    // Sessions of tenant alice as the proxy keeps them, linking the ids
    // alice knows.
    for (session, id) in [
        ("alice.live", "toolu_l1"),
        ("alice.parent", "toolu_p1"),
        ("alice.expired", "toolu_e1"),
    ] {
        c.call(
            "pair/append",
            json!({"sessionId": session, "message": assistant_calls(&[id])}),
        )
        .await;
        let linked = session.strip_prefix("alice.").unwrap();
        let r = c
            .call(
                "budget/apply",
                json!({"sessionId": session, "linkSession": linked, "messages": [results(&[(id, &big(id))])]}),
            )
            .await;
        let preview = r["messages"][0]["content"][0]["content"].as_str().unwrap();
        assert!(
            preview.contains(&format!("toolwire://saved-output/{linked}/{id} ")),
            "{preview}"
        );
        assert!(!preview.contains("saved to:"), "{preview}");
        c.call(
            "pair/append",
            json!({"sessionId": session, "message": r["messages"][0]}),
        )
        .await;
    }
    c.call(
        "state/fork",
        json!({"sessionId": "alice.parent", "newSessionId": "alice.child"}),
    )
    .await;
    server.registry.close_all().await;

    let s = sessions(dir.path());
    for id in ["alice.parent", "alice.expired"] {
        age(&s.join(format!("{id}.jsonl")), 40 * DAY);
    }
    // Linked outputs are old but pointed at; an orphan beside them goes.
    for session in ["alice.live", "alice.parent"] {
        for entry in std::fs::read_dir(s.join(session).join("tool-results")).unwrap() {
            age(&entry.unwrap().path(), 3 * HOUR);
        }
    }
    let orphan = s.join("alice.live/tool-results/toolu_orphan.txt");
    std::fs::write(&orphan, "x".repeat(10)).unwrap();
    age(&orphan, 2 * HOUR);

    let real = c.call("storage/gc", json!({})).await;
    assert_eq!(real["sessionsRemoved"], json!(["alice.expired"]), "{real}");
    assert_eq!(
        real["artifactsRemoved"],
        json!([orphan.display().to_string()]),
        "{real}"
    );
    assert!(s.join("alice.live/tool-results/toolu_l1.txt").exists());
    assert!(s.join("alice.parent/tool-results/toolu_p1.txt").exists());
    for (session, id, tag) in [
        ("alice.live", "toolu_l1", "toolu_l1 "),
        ("alice.child", "toolu_p1", "toolu_p1 "),
    ] {
        let r = c
            .call(
                "artifact/read",
                json!({"sessionId": session, "toolUseId": id}),
            )
            .await;
        assert_eq!(r["text"], json!(tag.repeat(100)), "{session}: {r}");
    }
}
