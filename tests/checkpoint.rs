//! Decisions checkpoints (`sessions/.<id>.jsonl.decisions`): a server
//! killed with SIGKILL at any instant, a checkpoint write included, resumes
//! with exactly the decisions a full reading of the transcript gives.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};
use toolwire::transcript::{checkpoint, fork::Logical};

/// `toolwire serve` in `cwd` writing a checkpoint every few KiB, killed by
/// its own test hook at checkpoint-write point `kill_at` if given (its
/// replies then go nowhere: nothing waits for them).
fn spawn(cwd: &Path, kill_at: Option<u64>) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
    cmd.arg("serve")
        .current_dir(cwd)
        .env("TOOLWIRE_TEST_CHECKPOINT_EVERY", "4096")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(n) = kill_at {
        cmd.env("TOOLWIRE_TEST_CHECKPOINT_KILL", n.to_string());
        cmd.stdout(std::process::Stdio::null());
    }
    cmd.spawn().expect("spawn toolwire")
}

/// One LSP-framed request.
fn frame(id: usize, method: &str, params: Value) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// The requests of a session: committed pairs, results replaced by
/// `budget/apply` (journaled `replacement` lines) and kept whole (`seen`
/// lines).
fn script_of(steps: usize) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    for i in 0..steps {
        let id = format!("toolu_{i}");
        let size = if i % 2 == 0 { 70_000 } else { 300 };
        let body = format!("{i} ").repeat(size / 2);
        out.push((
            "pair/append",
            json!({"sessionId": "s", "message": assistant_calls(&[&id])}),
        ));
        out.push((
            "budget/apply",
            json!({"sessionId": "s", "messages": [results(&[(&id, &body)])]}),
        ));
        out.push((
            "pair/append",
            json!({"sessionId": "s", "message": results(&[(&id, &body)])}),
        ));
    }
    out
}

/// `state/get` of `session` in a fresh in-process server on `root`.
async fn state_of(root: &Path, session: &str, reconstruct_from: Option<&Path>) -> Value {
    let (mut c, _t) = connect(new_server());
    c.initialize(root, json!({})).await;
    if let Some(path) = reconstruct_from {
        c.call(
            "state/reconstruct",
            json!({"sessionId": session, "transcript": path.display().to_string()}),
        )
        .await;
    }
    c.call("state/get", json!({"sessionId": session})).await
}

/// Kill the server at each point of its checkpoint writes (the test hook)
/// and after varied numbers of replies, durable or not; after each kill,
/// resuming the session and reconstructing from its transcript give what
/// a server reading a copy of the transcript without its checkpoint gives.
#[tokio::test]
async fn kill_9_at_any_instant_never_resumes_wrong_decisions() {
    if !local_transcripts("kill_9_at_any_instant_never_resumes_wrong_decisions") {
        return;
    }
    let script = script_of(24);
    let long_script = script_of(240);
    let mut proved = 0;
    let trials = 28u64;
    for trial in 0..trials {
        // Even trials die by the hook at write point trial / 2 (four per
        // write: made, half written, written, renamed); odd ones are
        // killed from outside after a varying number of replies.
        let hook = (trial % 2 == 0).then_some(trial / 2);
        let durability = if trial % 4 < 2 { "none" } else { "fsync" };
        let dir = tempfile::tempdir().unwrap();
        let mut child = spawn(dir.path(), hook);
        let options = json!({"durability": durability});
        if hook.is_some() {
            // It dies on its own, at the hook: the requests are written
            // without waiting for replies, and a pipe it closed by dying
            // ends the writing. A checkpoint job still running when the
            // next one falls due absorbs it, so how many writes a script
            // makes depends on how fast each runs (a loaded machine makes
            // fewer): this script goes on ten times as long as the one
            // whose commits are checked, to reach the hook however the
            // writes coalesce.
            let mut input = frame(
                0,
                "initialize",
                json!({"rootUri": file_uri(dir.path()), "initializationOptions": options}),
            );
            for (i, (method, params)) in long_script.iter().enumerate() {
                input.extend(frame(i + 1, method, params.clone()));
            }
            let mut stdin = child.stdin.take().unwrap();
            let _ = tokio::io::AsyncWriteExt::write_all(&mut stdin, &input).await;
            drop(stdin);
            let status = child.wait().await.unwrap();
            // Every hook point of these trials is reached: it dies by it.
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9),
                "trial {trial}: killed at checkpoint-write point {}",
                trial / 2
            );
        } else {
            let stdin = child.stdin.take().unwrap();
            let mut c = Client::new(child.stdout.take().unwrap(), stdin);
            c.initialize(dir.path(), options).await;
            let mut ids = Vec::new();
            for (method, params) in &script {
                ids.push(c.start(method, params.clone()).await);
            }
            let wait_for = ((trial * 29) % ids.len() as u64) as usize;
            for id in ids.iter().take(wait_for) {
                c.response(*id).await;
            }
            child.start_kill().unwrap();
            child.wait().await.unwrap();
        }

        let sessions = dir.path().join(".toolwire/sessions");
        let transcript = sessions.join("s.jsonl");
        if !transcript.exists() {
            continue;
        }
        if let Ok((_, logical)) = Logical::open_path(&transcript)
            && checkpoint::read(&transcript, &logical).is_some()
        {
            proved += 1;
        }
        // Resumed (from the checkpoint when it proves itself), and
        // reconstructed from the file beside it.
        let resumed = state_of(dir.path(), "s", None).await;
        let rebuilt = state_of(dir.path(), "r", Some(&transcript)).await;
        // The same transcript without any checkpoint, read whole.
        let copy = tempfile::tempdir().unwrap();
        let copy_sessions = copy.path().join(".toolwire/sessions");
        std::fs::create_dir_all(&copy_sessions).unwrap();
        std::fs::copy(&transcript, copy_sessions.join("s.jsonl")).unwrap();
        let whole = state_of(copy.path(), "s", None).await;
        let whole_rebuilt = state_of(
            copy.path(),
            "r",
            Some(&copy.path().join(".toolwire/sessions/s.jsonl")),
        )
        .await;
        assert_eq!(resumed, whole, "trial {trial}: resume");
        assert_eq!(rebuilt, whole_rebuilt, "trial {trial}: reconstruct");
        assert!(
            !whole["replacements"].as_object().unwrap().is_empty()
                || whole["seenIds"].as_array().unwrap().len() < 2,
            "trial {trial}: the session decided replacements: {whole}"
        );
    }
    // Most trials left a checkpoint that proved itself, so the resumes
    // above did read from one.
    assert!(
        proved * 2 > trials,
        "{proved} of {trials} trials had a usable checkpoint"
    );
}

/// gc removes a session's checkpoint with it, keeps it with a kept one,
/// and never counts it as an orphan or a session of its own.
#[tokio::test]
async fn gc_keeps_or_removes_the_checkpoint_with_its_session() {
    if !local_transcripts("gc_keeps_or_removes_the_checkpoint_with_its_session") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join(".toolwire/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let mut lines = String::new();
    for i in 0..400 {
        let id = format!("toolu_{i}");
        lines += &json!({"type": "message", "message": assistant_calls(&[&id])}).to_string();
        lines.push('\n');
        let body = "x".repeat(9000);
        lines += &json!({"type": "message", "message": results(&[(&id, &body)])}).to_string();
        lines.push('\n');
    }
    for id in ["old", "new"] {
        std::fs::write(sessions.join(format!("{id}.jsonl")), &lines).unwrap();
    }
    // Resuming a transcript longer than a checkpoint's step writes one.
    for id in ["old", "new"] {
        state_of(dir.path(), id, None).await;
        assert!(sessions.join(format!(".{id}.jsonl.decisions")).is_file());
    }
    // A checkpoint whose transcript is gone is a leftover.
    std::fs::write(sessions.join(".gone.jsonl.decisions"), b"stale").unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(90 * 86_400);
    for name in ["old.jsonl", ".gone.jsonl.decisions"] {
        std::fs::File::options()
            .write(true)
            .open(sessions.join(name))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let out = output_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .args(["gc", "--json"])
            .current_dir(dir.path()),
    );
    let report: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(report["sessionsRemoved"], json!(["old"]), "{report}");
    assert_eq!(report["kept"], 1, "{report}");
    assert!(!sessions.join(".old.jsonl.decisions").exists());
    assert!(!sessions.join(".gone.jsonl.decisions").exists());
    assert!(sessions.join(".new.jsonl.decisions").is_file());
    // The kept session still resumes from it, to the same state.
    let resumed = state_of(dir.path(), "new", None).await;
    assert_eq!(resumed["seenIds"].as_array().unwrap().len(), 400);
}

/// A checkpoint followed by a replacement for a result it already holds
/// (a client that appended the result before `budget/apply` replaced it):
/// a whole reading commits every replacement before any result sent whole,
/// so taking the checkpoint's results first would freeze what was
/// replaced. The resume and the reconstruct read the transcript whole and
/// give what a reading without the checkpoint gives.
#[tokio::test]
async fn a_replacement_for_a_checkpointed_id_reads_the_transcript_whole() {
    if !local_transcripts("a_replacement_for_a_checkpointed_id_reads_the_transcript_whole") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn(dir.path(), None);
    let stdin = child.stdin.take().unwrap();
    let mut c = Client::new(child.stdout.take().unwrap(), stdin);
    c.initialize(dir.path(), json!({"durability": "fsync"}))
        .await;
    let transcript = dir.path().join(".toolwire/sessions/s.jsonl");
    for (method, params) in script_of(6) {
        c.call(method, params).await;
    }
    let body = "late ".repeat(20_000);
    let late = results(&[("late", &body)]);
    c.call(
        "pair/append",
        json!({"sessionId": "s", "message": assistant_calls(&["late"])}),
    )
    .await;
    c.call("pair/append", json!({"sessionId": "s", "message": late}))
        .await;
    let checkpoint_at = std::fs::metadata(&transcript).unwrap().len();
    c.call(
        "budget/apply",
        json!({"sessionId": "s", "messages": [late]}),
    )
    .await;
    drop(c);
    child.wait().await.unwrap();
    let bytes = std::fs::read(&transcript).unwrap();
    let tail = String::from_utf8_lossy(&bytes[checkpoint_at as usize..]).into_owned();
    assert!(
        tail.contains(r#""type":"replacement""#) && tail.contains(r#""toolUseId":"late""#),
        "the tail replaces the result: {tail:.300}"
    );
    // The checkpoint stands for the transcript up to the result.
    checkpoint::refresh(
        &transcript,
        toolwire::format::Format::Anthropic,
        checkpoint_at,
    )
    .unwrap();
    let (_, logical) = Logical::open_path(&transcript).unwrap();
    let c = checkpoint::read(&transcript, &logical).expect("the checkpoint proves itself");
    assert_eq!(c.at, checkpoint_at);
    assert!(c.decided.is_decided("late"));

    let resumed = state_of(dir.path(), "s", None).await;
    let rebuilt = state_of(dir.path(), "r", Some(&transcript)).await;
    let copy = tempfile::tempdir().unwrap();
    let copy_sessions = copy.path().join(".toolwire/sessions");
    std::fs::create_dir_all(&copy_sessions).unwrap();
    std::fs::write(copy_sessions.join("s.jsonl"), &bytes).unwrap();
    let whole = state_of(copy.path(), "s", None).await;
    let whole_rebuilt = state_of(copy.path(), "r", Some(&copy_sessions.join("s.jsonl"))).await;
    assert_eq!(resumed, whole);
    assert_eq!(rebuilt, whole_rebuilt);
    assert!(whole["replacements"]["late"].is_string(), "{whole}");
}

/// What a checkpoint proves, exactly as docs/transcripts.md says: the same
/// file (device and inode), at least its offset's bytes, and the 4 KiB
/// before that offset unchanged. A same-length edit in place further back
/// is not seen (proving it would mean reading what the checkpoint spares
/// reading); toolwire never writes committed bytes in place, and the
/// documented remedy, removing the checkpoint, makes the next resume read
/// the transcript whole (issue 52, loose end 4).
#[tokio::test]
async fn a_checkpoint_proves_its_file_and_its_last_4_kib_and_no_more() {
    if !local_transcripts("a_checkpoint_proves_its_file_and_its_last_4_kib_and_no_more") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let server = new_server();
        let (mut c, task) = connect(server.clone());
        c.initialize(dir.path(), json!({"durability": "none"}))
            .await;
        for (method, params) in script_of(6) {
            c.call(method, params).await;
        }
        c.close().await;
        task.await.unwrap();
        server.registry.close_all().await;
    }
    let transcript = dir.path().join(".toolwire/sessions/s.jsonl");
    let original = std::fs::read(&transcript).unwrap();
    let at = original.len() as u64;
    let format = toolwire::format::Format::Anthropic;
    checkpoint::refresh(&transcript, format, at).unwrap();
    let proves = || {
        let (_, logical) = Logical::open_path(&transcript).unwrap();
        checkpoint::read(&transcript, &logical).is_some()
    };
    assert!(proves(), "a fresh checkpoint proves itself");
    let whole = {
        let copy = tempfile::tempdir().unwrap();
        let sessions = copy.path().join(".toolwire/sessions");
        std::fs::create_dir_all(&sessions).unwrap();
        std::fs::write(sessions.join("s.jsonl"), &original).unwrap();
        state_of(copy.path(), "s", None).await
    };
    assert_eq!(state_of(dir.path(), "s", None).await, whole);

    // Edit the first `replacement` line's preview in place, same length.
    let line = find(&original, br#""type":"replacement""#).unwrap();
    let tag = line + find(&original[line..], b"<persisted-output>").unwrap();
    assert!(
        (at as usize) - tag > 4096,
        "the edit is before the last 4 KiB"
    );
    let mut edited = original.clone();
    edited[tag + 1..tag + 10].copy_from_slice(b"PERSISTED");
    let write_in_place = |bytes: &[u8]| {
        use std::io::{Seek, Write};
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&transcript)
            .unwrap();
        file.seek(std::io::SeekFrom::Start(0)).unwrap();
        file.write_all(bytes).unwrap();
    };
    write_in_place(&edited);
    assert!(
        proves(),
        "an edit in place before the last 4 KiB is not seen"
    );

    // The same edit inside the last 4 KiB is seen.
    write_in_place(&original);
    let mut near = original.clone();
    let last = near.len() - 100;
    near[last] = if near[last] == b'x' { b'y' } else { b'x' };
    write_in_place(&near);
    assert!(!proves(), "an edit in the last 4 KiB before the offset");
    write_in_place(&original);
    assert!(proves());

    // The edit written as a new file renamed over the transcript (what
    // editors, `sed -i` and `toolwire repair` do) is another file.
    let new = transcript.with_extension("new");
    std::fs::write(&new, &edited).unwrap();
    std::fs::rename(&new, &transcript).unwrap();
    assert!(!proves(), "another inode");
    let edited_whole = state_of(dir.path(), "s", None).await;
    assert_ne!(edited_whole, whole, "the edit changes the decisions");

    // Back in place with a checkpoint of the original bytes, then the edit
    // in place: the checkpoint is still taken; removed, the resume reads
    // the transcript whole and sees the edit.
    std::fs::write(&transcript, &original).unwrap();
    checkpoint::refresh(&transcript, format, at).unwrap();
    write_in_place(&edited);
    assert!(proves());
    std::fs::remove_file(checkpoint::path_for(&transcript).unwrap()).unwrap();
    assert_eq!(state_of(dir.path(), "s", None).await, edited_whole);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
