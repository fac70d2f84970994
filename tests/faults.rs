//! Reliability at the edges: hostile shapes of valid input, exhausted
//! resources and clients that vanish. Each test here failed on the code
//! before issue 13.

mod common;

use common::*;
use serde_json::{Value, json};

/// A tool input nested `depth` levels: `{"a":{"a":...{"a":1}}}`.
fn nested_input(depth: usize) -> Value {
    let text = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    toolwire::json::from_slice(text.as_bytes()).unwrap()
}

fn deep_call(id: &str, depth: usize) -> Value {
    json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": id, "name": "Deep", "input": nested_input(depth)}
    ]})
}

/// Nesting up to 1,000 levels inside a tool input is taken, written,
/// reloaded and answered; deeper input is refused with the request's own id.
async fn deep_nesting_round_trips<R, W>(c: &mut Client<R, W>, transcript: &std::path::Path)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let call = deep_call("toolu_deep", 1000);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "deep", "messages": [call.clone(), results(&[("toolu_deep", "ok")])]}),
        )
        .await;
    assert_eq!(r["messages"][0], call);
    c.call("pair/append", json!({"sessionId": "deep", "message": call}))
        .await;
    c.call(
        "pair/append",
        json!({"sessionId": "deep", "message": results(&[("toolu_deep", "ok")])}),
    )
    .await;
    let lines = transcript_messages(transcript);
    assert_eq!(lines, vec![call.clone(), results(&[("toolu_deep", "ok")])]);

    // Far deeper than anything accepted: refused, answering its own id.
    let deep = "[".repeat(100_000);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"too-deep","method":"budget/apply","params":{{"sessionId":"deep","messages":{deep}}}}}"#
    );
    c.send_raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes())
        .await;
    let answer = c.read().await.unwrap();
    assert_eq!(answer["id"], json!("too-deep"), "{answer}");
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("levels"),
        "{answer}"
    );
    // The session is untouched and still answers.
    let state = c.call("state/get", json!({"sessionId": "deep"})).await;
    assert_eq!(state["seenIds"], json!(["toolu_deep"]));
}

/// Runs `test` on the runtime the binary uses (its threads sized for
/// deep messages), as the in-process server needs.
fn on_server_runtime<F: std::future::Future<Output = ()> + Send + 'static>(test: F) {
    let rt = toolwire::process::runtime().unwrap();
    rt.block_on(async { tokio::spawn(test).await.unwrap() });
}

#[test]
fn nesting_of_a_thousand_levels_is_accepted_deeper_is_answered_by_id() {
    if !common::local_transcripts(
        "nesting_of_a_thousand_levels_is_accepted_deeper_is_answered_by_id",
    ) {
        return;
    }
    on_server_runtime(async {
        let dir = tempfile::tempdir().unwrap();
        let transcript = dir.path().join(".toolwire/sessions/deep.jsonl");
        let server = new_server();
        let (mut c, _task) = connect(server.clone());
        c.initialize(dir.path(), json!({})).await;
        deep_nesting_round_trips(&mut c, &transcript).await;
        server.registry.close_all().await;

        // The binary, on its own threads: a restart reloads the deep line...
        let (mut c, mut child) = spawn_binary(dir.path());
        c.initialize(dir.path(), json!({})).await;
        let state = c.call("state/get", json!({"sessionId": "deep"})).await;
        assert_eq!(state["seenIds"], json!(["toolu_deep"]));
        child.kill().await.unwrap();
        // ... and it takes and refuses the same input.
        std::fs::remove_file(&transcript).unwrap();
        let (mut c, _child) = spawn_binary(dir.path());
        c.initialize(dir.path(), json!({})).await;
        deep_nesting_round_trips(&mut c, &transcript).await;
    });
}

/// Params are by name: a by-position array is refused with -32602 wherever
/// a struct is expected, top level or nested, and changes nothing.
#[tokio::test]
async fn by_position_params_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _task) = connect(new_server());
    let e = c
        .fails("initialize", json!([null, "file:///"]), -32602)
        .await;
    assert_eq!(e["data"]["path"], json!("params"), "{e}");
    let e = c
        .fails(
            "initialize",
            json!({"rootUri": file_uri(dir.path()), "initializationOptions": {"limits": [10]}}),
            -32602,
        )
        .await;
    assert_eq!(
        e["data"]["path"],
        json!("initializationOptions.limits"),
        "{e}"
    );
    let e = c
        .fails(
            "initialize",
            json!({"rootUri": file_uri(dir.path()), "clientInfo": ["x", "1"]}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("clientInfo"), "{e}");
    c.initialize(dir.path(), json!({})).await;

    let big = "x".repeat(100);
    let msg = results(&[("toolu_1", big.as_str())]);
    let e = c
        .fails(
            "budget/apply",
            json!({"sessionId": "s", "messages": [msg.clone()], "limits": [10]}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("limits"), "{e}");
    let e = c.fails("budget/apply", json!(["s", [msg]]), -32602).await;
    assert_eq!(e["data"]["path"], json!("params"), "{e}");
    let e = c.fails("state/get", json!(["s"]), -32602).await;
    assert_eq!(e["data"]["path"], json!("params"), "{e}");
    let e = c
        .fails(
            "state/reconstruct",
            json!({"sessionId": "s", "records": [["tool-result", "toolu_1", "r"]]}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("records[0]"), "{e}");
    // Nothing was decided or created by any of them.
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"], json!([]));
    assert!(!dir.path().join(".toolwire/sessions").exists());
}

/// The peak resident memory of a process, from /proc.
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// `state/reconstruct` reads only regular files, bounds a line by the frame
/// limit (an overlong one is skipped and counted, never held in memory),
/// and a long read stays cancellable; the session answers afterwards.
#[tokio::test]
async fn reconstruct_reads_only_regular_files_bounds_lines_and_can_be_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, child) = spawn_binary(dir.path());
    let pid = child.id().unwrap();
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;

    let fifo = dir.path().join("fifo");
    let cpath = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
    for path in [fifo.to_str().unwrap(), "/dev/zero"] {
        let e = c
            .fails(
                "state/reconstruct",
                json!({"sessionId": "r", "transcript": path}),
                -32014,
            )
            .await;
        assert_eq!(e["data"]["path"], json!(path), "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("not a regular file"),
            "{e}"
        );
    }

    // A FIFO planted where a session's transcript goes: refused, not read.
    let sessions = dir.path().join(".toolwire/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let planted = sessions.join("planted.jsonl");
    let cpath = std::ffi::CString::new(planted.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "planted", "message": user_text("x")}),
            -32014,
        )
        .await;
    assert_eq!(e["data"]["path"], json!(planted), "{e}");

    // A line longer than the frame limit (1 GiB, a sparse run of zeros):
    // skipped and counted, the lines around it read.
    let torn = dir.path().join("torn.jsonl");
    {
        use std::io::{Seek, Write};
        let mut f = std::fs::File::create(&torn).unwrap();
        let line = |id: &str| {
            format!(
                "{}\n{}\n",
                json!({"type": "message", "message": assistant_calls(&[id])}),
                json!({"type": "message", "message": results(&[(id, "ok")])})
            )
        };
        f.write_all(line("toolu_a").as_bytes()).unwrap();
        let at = f.stream_position().unwrap();
        f.seek(std::io::SeekFrom::Start(
            at + 2 * toolwire::transport::codec::MAX_FRAME as u64,
        ))
        .unwrap();
        f.write_all(b"\n").unwrap();
        f.write_all(line("toolu_b").as_bytes()).unwrap();
    }
    let r = c
        .call(
            "state/reconstruct",
            json!({"sessionId": "r", "transcript": torn}),
        )
        .await;
    assert_eq!(r["skippedLines"], json!(1), "{r}");
    assert_eq!(r["messagesRead"], json!(4), "{r}");
    assert_eq!(r["seenCount"], json!(2), "{r}");
    // At most one frame's worth is held for a line (before, the whole line).
    let peak = peak_rss_bytes(pid);
    let bound = toolwire::transport::codec::MAX_FRAME as u64 + (256 << 20);
    assert!(peak < bound, "peak resident memory {peak} bytes");

    // A transcript whose second line is 64 GiB (sparse) with no newline:
    // cancelled. (A file whose first line is no transcript line at all is
    // refused up front, PROTOCOL.md 10.5.)
    let endless = dir.path().join("endless.jsonl");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&endless).unwrap();
        let first = json!({"type": "message", "message": assistant_calls(&["toolu_c"])});
        writeln!(f, "{first}").unwrap();
        f.set_len(64 << 30).unwrap();
    }
    let id = c
        .start(
            "state/reconstruct",
            json!({"sessionId": "r", "transcript": endless}),
        )
        .await;
    c.notify("$/cancelRequest", json!({"id": id})).await;
    let answer = c.response(id).await;
    assert_eq!(answer["error"]["code"], json!(-32800), "{answer}");
    // The session's queue moved on, and the cancelled read changed nothing.
    let state = c.call("state/get", json!({"sessionId": "r"})).await;
    assert_eq!(state["seenIds"], json!(["toolu_a", "toolu_b"]));
}

/// Start `toolwire serve` with resource limits set before it runs.
fn spawn_limited(
    cwd: &std::path::Path,
    limits: &[(libc::__rlimit_resource_t, u64, u64)],
) -> (ProcClient, tokio::process::Child) {
    let limits = limits.to_vec();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
    command
        .arg("serve")
        .current_dir(cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(move || {
            for &(resource, soft, hard) in &limits {
                let limit = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(resource as _, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("spawn toolwire");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    (Client::new(stdout, stdin), child)
}

/// With a file-size limit, writes past it fail with EFBIG instead of the
/// process dying of SIGXFSZ: an artifact becomes a `failures` entry, a
/// transcript commit a `storage` error rolled back; the server lives on.
#[tokio::test]
async fn a_file_size_limit_fails_writes_instead_of_killing_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 1u64 << 20;
    let (mut c, mut child) = spawn_limited(dir.path(), &[(libc::RLIMIT_FSIZE, limit, limit)]);
    c.initialize(dir.path(), json!({})).await;
    let big = "b".repeat(2 << 20);
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [results(&[("toolu_big", big.as_str())])]}),
        )
        .await;
    assert_eq!(r["persisted"], json!([]), "{r}");
    assert_eq!(r["failures"][0]["toolUseId"], json!("toolu_big"), "{r}");
    assert!(
        r["failures"][0]["message"]
            .as_str()
            .unwrap()
            .contains("too large"),
        "{r}"
    );

    c.call(
        "pair/append",
        json!({"sessionId": "t", "message": user_text("small")}),
    )
    .await;
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "t", "message": user_text(&big)}),
            -32014,
        )
        .await;
    assert_eq!(e["data"]["kind"], json!("storage"));
    // Rolled back: the transcript holds exactly the first commit, and the
    // session goes on.
    c.call(
        "pair/append",
        json!({"sessionId": "t", "message": user_text("after")}),
    )
    .await;
    let texts: Vec<Value> = transcript_messages(&dir.path().join(".toolwire/sessions/t.jsonl"))
        .into_iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(texts, vec![json!("small"), json!("after")]);
    // A refused first append does not bring a session into being.
    c.fails(
        "pair/append",
        json!({"sessionId": "u", "message": user_text(&big)}),
        -32014,
    )
    .await;
    assert!(!dir.path().join(".toolwire/sessions/u.jsonl").exists());
    c.fails("state/fork", json!({"sessionId": "u"}), -32012)
        .await;
    c.call(
        "pair/append",
        json!({"sessionId": "u", "message": user_text("later")}),
    )
    .await;
    assert_eq!(
        transcript_messages(&dir.path().join(".toolwire/sessions/u.jsonl")),
        vec![user_text("later")]
    );
    // No temporary file of the failed artifact is left.
    let tool_results = dir.path().join(".toolwire/sessions/s/tool-results");
    let left: Vec<_> = std::fs::read_dir(&tool_results)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert!(child.try_wait().unwrap().is_none(), "the server died");
}

/// The server raises its soft limit on open files to the hard limit, and
/// under a hard limit it cannot raise, it bounds its open transcripts:
/// hundreds of sessions work, the least recently used close and reopen on
/// demand, and writes of open sessions keep working.
#[tokio::test]
async fn open_files_are_raised_and_open_transcripts_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let nofile = libc::RLIMIT_NOFILE;
    let (mut c, child) = spawn_limited(dir.path(), &[(nofile, 64, 4096)]);
    c.initialize(dir.path(), json!({})).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id().unwrap())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_owned();
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>()[3..5],
        ["4096", "4096"],
        "{line}"
    );
    drop(c);
    drop(child);

    let (mut c, child) = spawn_limited(dir.path(), &[(nofile, 64, 64)]);
    let pid = child.id().unwrap();
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;
    let sessions = 200;
    for i in 0..sessions {
        c.call(
            "pair/append",
            json!({"sessionId": format!("s{i}"), "message": user_text(&format!("m{i}"))}),
        )
        .await;
        if i % 20 == 0 {
            // An artifact write in a busy server still finds a descriptor.
            let big = "x".repeat(60_000);
            let r = c
                .call(
                    "budget/apply",
                    json!({"sessionId": format!("s{i}"), "messages": [results(&[(&format!("toolu_{i}"), big.as_str())])]}),
                )
                .await;
            assert_eq!(r["failures"], json!([]), "{r}");
            assert_eq!(r["persisted"].as_array().unwrap().len(), 1, "{r}");
        }
    }
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    assert!(open < 64, "{open} descriptors open");
    // Every session, closed or not, reopens and goes on.
    for i in 0..sessions {
        c.call(
            "pair/append",
            json!({"sessionId": format!("s{i}"), "message": user_text("again")}),
        )
        .await;
    }
    for i in (0..sessions).step_by(37) {
        let msgs = transcript_messages(&dir.path().join(format!(".toolwire/sessions/s{i}.jsonl")));
        assert_eq!(msgs.len(), 2, "s{i}");
    }
    let state = c.call("state/get", json!({"sessionId": "s0"})).await;
    assert_eq!(state["seenIds"], json!(["toolu_0"]));

    // Locks stay correct: a session closed for the bound has released its
    // lock, so another process may take it, and then this server is refused
    // (it never writes beside the other) until the other lets go.
    for i in 1..sessions {
        // Touch the others so that s0 is the least recently used again.
        c.call("state/get", json!({"sessionId": format!("s{i}")}))
            .await;
    }
    let (mut other, other_child) = spawn_binary(dir.path());
    other.initialize(dir.path(), json!({})).await;
    other
        .call(
            "pair/append",
            json!({"sessionId": "s0", "message": user_text("other")}),
        )
        .await;
    c.fails(
        "pair/append",
        json!({"sessionId": "s0", "message": user_text("refused")}),
        -32013,
    )
    .await;
    drop(other);
    drop(other_child);
    let s0 = dir.path().join(".toolwire/sessions/s0.jsonl");
    // Dropping the child kills it; its lock goes with it.
    let mut tries = 0;
    loop {
        match c
            .request(
                "pair/append",
                json!({"sessionId": "s0", "message": user_text("mine")}),
            )
            .await
        {
            Ok(_) => break,
            Err(e) => {
                assert_eq!(e["code"], json!(-32013), "{e}");
                tries += 1;
                assert!(tries < 200, "the lock was never released");
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
        }
    }
    let texts: Vec<Value> = transcript_messages(&s0)
        .into_iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(
        texts,
        [json!("m0"), json!("again"), json!("other"), json!("mine")]
    );
}
