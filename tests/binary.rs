//! The release binary over real pipes: what only a process can show.

mod common;

use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn serves_over_pipes_big_results_pipelining_and_bad_frames() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut child) = spawn_binary(dir.path());
    // No rootUri: the working directory is the workspace.
    c.call("initialize", json!({"processId": null})).await;

    c.send_raw(b"Content-Length: 3\r\n\r\n{x}").await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32700));
    c.send_raw(b"Nonsense\r\n\r\n").await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32700));

    // A 40 MB tool result.
    let huge: String = (0..800_000).map(|i| format!("{i:>49}\n")).collect();
    assert_eq!(huge.len(), 40_000_000);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "big", "messages": [results(&[("toolu_huge", &huge)])]}),
        )
        .await;
    let path = r["persisted"][0]["path"].as_str().unwrap().to_owned();
    assert!(
        path.starts_with(
            &dir.path()
                .join(".toolwire/sessions/big/tool-results")
                .display()
                .to_string()
        )
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 40_000_000);
    let text = r["messages"][0]["content"][0]["content"].as_str().unwrap();
    assert!(
        text.starts_with("<persisted-output>\nOutput too large (38.1MB)."),
        "{}",
        &text[..80]
    );
    assert!(text.len() < 2200);

    // Pipelined: all sent before any answer is read.
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(
            c.start(
                "pair/append",
                json!({"sessionId": "pipe", "message": user_text(&format!("m{i}"))}),
            )
            .await,
        );
        ids.push(c.start("state/get", json!({"sessionId": "big"})).await);
    }
    for id in ids {
        assert!(c.response(id).await.get("result").is_some());
    }
    let msgs = transcript_messages(&dir.path().join(".toolwire/sessions/pipe.jsonl"));
    let texts: Vec<&str> = msgs
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, (0..50).map(|i| format!("m{i}")).collect::<Vec<_>>());

    assert_eq!(c.call("shutdown", Value::Null).await, Value::Null);
    c.notify("exit", Value::Null).await;
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn exit_without_shutdown_is_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({})).await;
    c.notify("exit", Value::Null).await;
    assert_eq!(child.wait().await.unwrap().code(), Some(1));
}

#[tokio::test]
async fn a_second_process_is_refused_the_transcript_the_first_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut child_a) = spawn_binary(dir.path());
    let (mut b, _child_b) = spawn_binary(dir.path());
    a.initialize(dir.path(), json!({})).await;
    b.initialize(dir.path(), json!({})).await;
    a.call(
        "pair/append",
        json!({"sessionId": "s", "message": user_text("mine")}),
    )
    .await;
    let e = b
        .fails(
            "pair/append",
            json!({"sessionId": "s", "message": user_text("theirs")}),
            -32013,
        )
        .await;
    assert_eq!(e["data"]["kind"], json!("transcriptLocked"));
    b.fails("state/get", json!({"sessionId": "s"}), -32013)
        .await;
    // Other sessions are fine, and the lock goes with its holder.
    b.call(
        "pair/append",
        json!({"sessionId": "other", "message": user_text("ok")}),
    )
    .await;
    a.call("shutdown", Value::Null).await;
    a.notify("exit", Value::Null).await;
    child_a.wait().await.unwrap();
    b.call(
        "pair/append",
        json!({"sessionId": "s", "message": user_text("theirs now")}),
    )
    .await;
    let msgs = transcript_messages(&dir.path().join(".toolwire/sessions/s.jsonl"));
    assert_eq!(msgs, vec![user_text("mine"), user_text("theirs now")]);
}

#[tokio::test]
async fn the_repair_command_fixes_a_file_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let lines = [
        json!({"type": "message", "message": assistant_calls(&["x"])}).to_string(),
        json!({"type": "message", "message": user_text("no results")}).to_string(),
    ];
    std::fs::write(&path, lines.join("\n") + "\n{\"torn").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["repair", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("dropped tool_use x"), "{stdout}");
    assert!(stdout.contains("1 torn"), "{stdout}");
    assert_eq!(transcript_messages(&path), vec![user_text("no results")]);
    assert!(path.with_extension("jsonl.bak").exists());
}

/// Pipeline a long conversation, `SIGKILL` the server at varied moments,
/// restart it, and check the transcript: every line parses, no orphan.
#[tokio::test]
async fn kill_9_never_leaves_an_orphan_or_a_torn_line() {
    let script = conversation(240);
    for trial in 0..24u64 {
        let mode = if trial % 2 == 0 {
            "discard"
        } else {
            "synthetic"
        };
        let durability = if trial % 4 < 2 { "none" } else { "fsync" };
        let dir = tempfile::tempdir().unwrap();
        let (mut c, mut child) = spawn_binary(dir.path());
        let options = json!({"abortMode": mode, "durability": durability});
        c.initialize(dir.path(), options.clone()).await;
        let mut ids = Vec::new();
        for message in &script {
            ids.push(
                c.start(
                    "pair/append",
                    json!({"sessionId": "crash", "message": message}),
                )
                .await,
            );
        }
        // Wait for a varying number of answers, then kill without warning.
        let wait_for = ((trial * 37) % script.len() as u64) as usize;
        for id in ids.iter().take(wait_for) {
            c.response(*id).await;
        }
        child.start_kill().unwrap();
        child.wait().await.unwrap();

        let (mut c, mut child) = spawn_binary(dir.path());
        c.initialize(dir.path(), options).await;
        c.call("state/get", json!({"sessionId": "crash"})).await;
        let path = dir.path().join(".toolwire/sessions/crash.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "trial {trial}: torn tail survived"
        );
        let msgs = transcript_messages(&path);
        assert_paired(&msgs);
        // What was committed is a prefix of the conversation, in order.
        let texts: Vec<&Value> = msgs.iter().filter(|m| m["content"].is_string()).collect();
        let expected: Vec<&Value> = script
            .iter()
            .filter(|m| m["content"].is_string())
            .take(texts.len())
            .collect();
        assert_eq!(texts, expected, "trial {trial}");
        // The restarted server goes on appending to the same transcript.
        c.call(
            "pair/append",
            json!({"sessionId": "crash", "message": user_text("after restart")}),
        )
        .await;
        assert_paired(&transcript_messages(&path));
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
}

/// A power loss after the replies: the transcripts lose their unsynced
/// tails (cut here by hand, at a line's start or in the middle of one, to
/// exactly what the commit log still covered when the server was killed),
/// and the next server puts back every committed byte before it reads any
/// of them.
#[tokio::test]
async fn a_power_loss_after_the_replies_is_undone_by_the_commit_log() {
    let script = conversation(60);
    let mut restored = 0;
    for trial in 0..6u64 {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, mut child) = spawn_binary(dir.path());
        let options = json!({"durability": "fsync"});
        c.initialize(dir.path(), options.clone()).await;
        let sessions = ["p1", "p2"];
        let mut ids = Vec::new();
        for message in &script {
            for sid in sessions {
                ids.push(
                    c.start("pair/append", json!({"sessionId": sid, "message": message}))
                        .await,
                );
            }
        }
        let big = "x".repeat(60_000);
        for sid in sessions {
            ids.push(
                c.start(
                    "budget/apply",
                    json!({"sessionId": sid, "messages": [results(&[(&format!("big_{sid}"), &big)])]}),
                )
                .await,
            );
        }
        let mut states = Vec::new();
        for id in ids {
            c.response(id).await;
        }
        for sid in sessions {
            states.push(c.call("state/get", json!({"sessionId": sid})).await);
        }
        // Killed at once: the log is checkpointed only after half a
        // second without commits.
        child.start_kill().unwrap();
        child.wait().await.unwrap();

        let data = dir.path().join(".toolwire");
        let logs = toolwire::transcript::wal::log_files(&data).unwrap();
        assert_eq!(logs.len(), 1, "{logs:?}");
        let records = toolwire::transcript::wal::decode(&std::fs::read(&logs[0]).unwrap());
        if records.is_empty() {
            // Checkpointed before the kill (a slow machine): nothing to lose.
            continue;
        }
        let mut whole = Vec::new();
        for sid in sessions {
            let path = data.join(format!("sessions/{sid}.jsonl"));
            let bytes = std::fs::read(&path).unwrap();
            let first = records
                .iter()
                .filter(|r| *r.path == *path)
                .map(|r| r.offset)
                .min();
            if let Some(first) = first {
                // Odd trials tear the first line the log covers.
                let cut = first + (trial % 2) * 7;
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(cut)
                    .unwrap();
                restored += 1;
            }
            whole.push((path, bytes));
        }

        let (mut c, mut child) = spawn_binary(dir.path());
        c.initialize(dir.path(), options).await;
        for (sid, before) in sessions.iter().zip(&states) {
            // Every decision is back (a resumed session also counts its
            // transcript's results as seen, so seenIds only grows).
            let after = c.call("state/get", json!({"sessionId": sid})).await;
            assert_eq!(
                after["replacements"], before["replacements"],
                "trial {trial}: {sid}"
            );
            let seen = after["seenIds"].as_array().unwrap();
            for id in before["seenIds"].as_array().unwrap() {
                assert!(seen.contains(id), "trial {trial}: {sid} lost {id}");
            }
        }
        for (path, bytes) in &whole {
            assert_eq!(
                std::fs::read(path).unwrap(),
                *bytes,
                "trial {trial}: {}",
                path.display()
            );
            assert_paired(&transcript_messages(path));
        }
        assert!(!logs[0].exists(), "the orphan log is deleted once replayed");
        // The restarted server logs its own commits, and a clean exit
        // syncs the transcripts and leaves no log behind.
        c.call(
            "pair/append",
            json!({"sessionId": "p1", "message": user_text("after restart")}),
        )
        .await;
        let live_logs = || toolwire::transcript::wal::log_files(&data).unwrap().len();
        assert_eq!(live_logs(), 1);
        c.call("shutdown", Value::Null).await;
        c.notify("exit", Value::Null).await;
        assert_eq!(child.wait().await.unwrap().code(), Some(0));
        assert_eq!(live_logs(), 0);
        assert_paired(&transcript_messages(&data.join("sessions/p1.jsonl")));
    }
    assert!(restored > 0, "no trial had anything in the log to restore");
}

/// Text turns, single calls, multi-call pairs answered over two messages.
fn conversation(n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut i = 0;
    while out.len() < n {
        out.push(user_text(&format!("turn {i}")));
        let a = format!("a{i}");
        let b = format!("b{i}");
        out.push(assistant_calls(&[&a, &b]));
        out.push(results(&[(&a, &"r".repeat(200 + i % 7 * 1000))]));
        out.push(results(&[(&b, "done")]));
        let c = format!("c{i}");
        out.push(assistant_calls(&[&c]));
        out.push(results(&[(&c, "ok")]));
        i += 1;
    }
    out
}

/// Issue-2 behaviours again, through the release binary's pipes: a
/// pipelined storm of applies, forks and reads on one session, hostile ids,
/// a planted link, unknown fields, and the exact preview bytes.
#[tokio::test]
async fn the_binary_keeps_its_promises_under_a_pipelined_storm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _child) = spawn_binary(dir.path());
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;
    let tool_results = dir.path().join(".toolwire/sessions/s/tool-results");
    std::fs::create_dir_all(&tool_results).unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "keep").unwrap();
    std::os::unix::fs::symlink(&outside, tool_results.join("planted.txt")).unwrap();

    let long = "L".repeat(5000);
    let hostile = ["../up", "/abs/path", "nul\u{0}byte", long.as_str()];
    let mut sent = Vec::new();
    for round in 0..30 {
        let id = match round % 6 {
            0 => hostile[round / 6 % hostile.len()].to_owned(),
            1 => "planted".to_owned(),
            _ => format!("toolu_{round}"),
        };
        let msg = json!({"role": "user", "meta": {"z": 1, "a": 2}, "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "p".repeat(60_000), "cache_control": {"type": "ephemeral"}},
            {"type": "future_block", "payload": [1.5, 12345678901234567890u64]}
        ]});
        sent.push((
            "apply",
            c.start("budget/apply", json!({"sessionId": "s", "messages": [msg]}))
                .await,
        ));
        sent.push((
            "fork",
            c.start("state/fork", json!({"sessionId": "s"})).await,
        ));
        sent.push(("get", c.start("state/get", json!({"sessionId": "s"})).await));
    }
    let mut records = Vec::new();
    let mut snapshots = Vec::new();
    let mut forks = Vec::new();
    for (kind, id) in sent {
        let r = c.response(id).await;
        let result = r
            .get("result")
            .unwrap_or_else(|| panic!("{kind}: {r}"))
            .clone();
        match kind {
            "apply" => {
                let block = &result["messages"][0]["content"];
                assert_eq!(
                    block[1],
                    json!({"type": "future_block", "payload": [1.5, 12345678901234567890u64]})
                );
                assert_eq!(block[0]["cache_control"], json!({"type": "ephemeral"}));
                assert_eq!(result["messages"][0]["meta"], json!({"z": 1, "a": 2}));
                records.extend(result["records"].as_array().cloned().unwrap());
            }
            "fork" => forks.push(result["sessionId"].as_str().unwrap().to_owned()),
            _ => snapshots.push(result),
        }
    }
    for fork in forks {
        snapshots.push(c.call("state/get", json!({"sessionId": fork})).await);
    }
    let last = c.call("state/get", json!({"sessionId": "s"})).await;
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["toolUseId"].as_str().unwrap())
        .collect();
    let unique: std::collections::HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "an id was recorded twice");
    for snap in &snapshots {
        for id in snap["seenIds"].as_array().unwrap() {
            let id = id.as_str().unwrap();
            assert_eq!(
                snap["replacements"].get(id),
                last["replacements"].get(id),
                "{id} seen without its replacement"
            );
        }
    }
    // The planted link was refused and left alone; hostile ids stayed inside.
    assert!(last["replacements"].get("planted").is_none());
    assert!(
        last["seenIds"]
            .as_array()
            .unwrap()
            .contains(&json!("planted"))
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    for entry in std::fs::read_dir(dir.path().join(".toolwire/sessions")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            // The session's directory and its journal (decisions are
            // journaled even with no transcript: PROTOCOL 10.1).
            name == "s" || name == "s.jsonl" || name.starts_with("fork-"),
            "unexpected {name}"
        );
    }
    // The exact preview bytes.
    let path = tool_results.join("toolu_2.txt");
    let expected = format!(
        "<persisted-output>\nOutput too large (58.6KB). Full output saved to: {}\n\nPreview (first 2KB):\n{}\n...\n</persisted-output>",
        path.display(),
        "p".repeat(2000)
    );
    assert_eq!(last["replacements"]["toolu_2"], json!(expected));
}

/// How much of the separate heap `toolwire serve` keeps session state in is
/// resident, in kB, from `/proc/<pid>/smaps`; `None` if the server has no
/// such heap. The heap is one reserved range of 16 GiB: a committed prefix
/// (`rw-p`) and the rest still reserved (`---p`), adjacent, with no file.
fn separate_heap_rss_kb(pid: u32) -> Option<u64> {
    struct Mapping {
        start: u64,
        end: u64,
        perms: String,
        anonymous: bool,
        rss: u64,
    }
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut maps: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some((start, end)) = words[0].split_once('-')
            && let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        {
            maps.push(Mapping {
                start,
                end,
                perms: words[1].to_owned(),
                anonymous: words.len() < 6,
                rss: 0,
            });
        } else if words[0] == "Rss:"
            && let Some(last) = maps.last_mut()
        {
            last.rss = words[1].parse().unwrap();
        }
    }
    maps.iter().enumerate().find_map(|(i, m)| {
        if !(m.anonymous && m.perms == "---p") {
            return None;
        }
        let committed = i
            .checked_sub(1)
            .map(|j| &maps[j])
            .filter(|p| p.anonymous && p.perms == "rw-p" && p.end == m.start);
        let start = committed.map_or(m.start, |p| p.start);
        (m.end - start >= 15 << 30).then(|| committed.map_or(0, |p| p.rss))
    })
}

async fn decide_and_reapply(c: &mut ProcClient) {
    c.call("initialize", json!({"processId": null})).await;
    let big = "x".repeat(100_000);
    let turn = json!([
        assistant_calls(&["t1", "t2"]),
        results(&[("t1", &big), ("t2", "ok")])
    ]);
    let first = c
        .call("budget/apply", json!({"sessionId": "s", "messages": turn}))
        .await;
    assert_eq!(first["records"].as_array().unwrap().len(), 1);
    let again = c
        .call("budget/apply", json!({"sessionId": "s", "messages": turn}))
        .await;
    assert_eq!(
        again["messages"], first["messages"],
        "replayed byte for byte"
    );
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn session_state_lives_in_its_own_heap_or_without_one() {
    // As it comes: the state's entries are in the separate range.
    let dir = tempfile::tempdir().unwrap();
    let (mut c, child) = spawn_binary(dir.path());
    decide_and_reapply(&mut c).await;
    let rss = separate_heap_rss_kb(child.id().unwrap());
    assert!(rss.is_some_and(|kb| kb > 0), "separate heap: {rss:?}");

    // Under an address-space limit that refuses the reservation, every
    // block comes from the system allocator, and nothing else changes.
    let dir = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
    command
        .arg("serve")
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let mut c = Client::new(stdout, stdin);
    decide_and_reapply(&mut c).await;
    assert_eq!(separate_heap_rss_kb(child.id().unwrap()), None);
}

/// Issue 32, item 13. A data directory this process may only read (owned
/// by another user, or without write permission) still serves reads:
/// `state/get` and `artifact/read` of a session a writer left, and
/// `state/reconstruct` from its transcript. The commit log directory the
/// writer left there is not needed to read. Root ignores file modes, so
/// under root the reader runs as `nobody` (through `setpriv`).
#[tokio::test]
async fn a_read_only_data_directory_still_serves_reads() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let base = if root {
        std::path::PathBuf::from("/var/tmp")
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::tempdir_in(base).unwrap();
    let ws = dir.path();
    let data = ws.join(".toolwire");
    let big = "line of output\n".repeat(4000);
    {
        let (mut w, mut child) = spawn_binary(ws);
        w.initialize(ws, json!({"limits": {"maxResultChars": 100}}))
            .await;
        let reply = w
            .call(
                "budget/apply",
                json!({"sessionId": "t", "messages": [
                    assistant_calls(&["a"]), results(&[("a", &big)])]}),
            )
            .await;
        assert_eq!(
            reply["persisted"].as_array().map(Vec::len),
            Some(1),
            "{reply}"
        );
        w.call(
            "pair/append",
            json!({"sessionId": "t", "message": assistant_calls(&["a"])}),
        )
        .await;
        w.call(
            "pair/append",
            json!({"sessionId": "t", "message": results(&[("a", &big)])}),
        )
        .await;
        w.call("shutdown", Value::Null).await;
        w.notify("exit", Value::Null).await;
        child.wait().await.unwrap();
    }
    assert!(
        data.join("wal").is_dir(),
        "the writer left its log directory"
    );
    // Readable by everyone, writable by no one but root.
    set_tree_modes(ws, 0o555, Some(0o444));

    let mut cmd = if root {
        let mut cmd = tokio::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        cmd.arg(env!("CARGO_BIN_EXE_toolwire"));
        cmd
    } else {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
    };
    let mut child = cmd
        .arg("serve")
        .current_dir(ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut r = Client::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    r.initialize(ws, json!({"limits": {"maxResultChars": 100}}))
        .await;
    let state = r.call("state/get", json!({"sessionId": "t"})).await;
    assert_eq!(state["seenIds"], json!(["a"]), "{state}");
    let page = r
        .call(
            "artifact/read",
            json!({"sessionId": "t", "toolUseId": "a", "limit": 4000}),
        )
        .await;
    assert_eq!(page["text"], json!(big), "{page}");
    let transcript = data.join("sessions/t.jsonl");
    let rebuilt = r
        .call(
            "state/reconstruct",
            json!({"sessionId": "r", "transcript": transcript.display().to_string()}),
        )
        .await;
    assert_eq!(rebuilt["seenCount"], json!(1), "{rebuilt}");
    assert_eq!(rebuilt["replacementCount"], json!(1), "{rebuilt}");
    // A write is refused by the file system, by name, and changes nothing.
    r.fails(
        "pair/append",
        json!({"sessionId": "t", "message": user_text("more")}),
        -32014,
    )
    .await;
    drop(r);
    let _ = child.kill().await;
    set_tree_modes(ws, 0o755, None);
}

/// Set the mode of every directory under `root` (itself included) to
/// `dirs`, and of every other file to `files` when given.
fn set_tree_modes(root: &std::path::Path, dirs: u32, files: Option<u32>) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &std::path::Path, m: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).unwrap()
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            mode(&path, dirs);
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if let Some(files) = files {
            mode(&path, files);
        }
    }
}

/// `serve` runs on half the cores' runtime workers, at least one, unless
/// `TOKIO_WORKER_THREADS` says otherwise (`process::server_workers`); the
/// runtime's own count, as its debug log line gives it.
#[test]
fn serve_runs_on_half_the_cores_workers_or_the_operators_number() {
    let workers = |env: Option<&str>| -> usize {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
        cmd.arg("serve")
            .current_dir(dir.path())
            .env("RUST_LOG", "toolwire=debug")
            .env_remove("TOKIO_WORKER_THREADS")
            .stdin(std::process::Stdio::null());
        if let Some(n) = env {
            cmd.env("TOKIO_WORKER_THREADS", n);
        }
        // No client: input ends at once, and the server stops.
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stderr
            .lines()
            .find(|l| l.contains("the server's runtime started"))
            .unwrap_or_else(|| panic!("no runtime line in: {stderr}"));
        let n = line.split("workers=").nth(1).unwrap();
        n.split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(workers(None), (cores / 2).max(1));
    assert_eq!(workers(Some("3")), 3);
}
