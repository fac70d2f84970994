//! The real binary's stdio as every kind of descriptor a client hands it:
//! pipes and sockets (served on epoll), a regular file (the blocking path).
//! Framing stays exact whatever the reads look like — one frame split over
//! a thousand reads, hundreds of frames in one — and the descriptors the
//! server inherited keep their flags for the other processes sharing them.

mod common;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use bytes::BytesMut;
use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio_util::codec::Decoder;
use toolwire::daemon;
use toolwire::transport::codec::{Frame, LspCodec};

/// Bound on how long a child may take to end: a hang fails the test
/// instead of stalling the suite (never a timing assertion).
const HANG: Duration = Duration::from_secs(60);

fn frame(value: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(value).unwrap();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(&body);
    out
}

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL only reads the descriptor's status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert!(flags >= 0, "fcntl: {}", std::io::Error::last_os_error());
    flags & libc::O_NONBLOCK != 0
}

fn toolwire(args: &[&str], cwd: &Path, stdin: Stdio, stdout: Stdio) -> tokio::process::Child {
    toolwire_in(args, cwd, &[], stdin, stdout)
}

fn toolwire_in(
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &Path)],
    stdin: Stdio,
    stdout: Stdio,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn toolwire")
}

async fn exit_code(child: &mut tokio::process::Child) -> Option<i32> {
    tokio::time::timeout(HANG, child.wait())
        .await
        .expect("the server did not exit")
        .unwrap()
        .code()
}

/// What every transport must carry exactly: hundreds of frames arriving in
/// one write, then a 3 MB frame dribbled in 1 KiB writes (so the server
/// reads it in pieces), each answered and committed as sent.
async fn exercise<R, W>(c: &mut Client<R, W>, session: &str)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let base = 10_000;
    let mut burst = Vec::new();
    for i in 0..200 {
        let (method, params) = if i % 2 == 0 {
            (
                "pair/append",
                json!({"sessionId": session, "message": user_text(&format!("m{i}"))}),
            )
        } else {
            ("state/get", json!({"sessionId": session}))
        };
        burst.extend(frame(&request(base + i, method, params)));
    }
    c.send_raw(&burst).await;
    for i in 0..200 {
        let reply = c.response(base + i).await;
        assert!(reply.get("result").is_some(), "{reply}");
    }

    let big: String = (0..60_000).map(|i| format!("{i:>49}\n")).collect();
    let bytes = frame(&request(
        base + 1000,
        "pair/append",
        json!({"sessionId": session, "message": {"role": "assistant", "content": big}}),
    ));
    for chunk in bytes.chunks(1024) {
        c.send_raw(chunk).await;
    }
    let reply = c.response(base + 1000).await;
    assert!(reply.get("result").is_some(), "{reply}");
}

fn check_transcript(workspace: &Path, session: &str) {
    let messages = transcript_messages(
        &workspace
            .join(".toolwire/sessions")
            .join(format!("{session}.jsonl")),
    );
    assert_eq!(messages.len(), 101);
    for (i, m) in messages[..100].iter().enumerate() {
        assert_eq!(m["content"], json!(format!("m{}", 2 * i)));
    }
    let big = messages[100]["content"].as_str().unwrap();
    assert_eq!(big.len(), 3_000_000);
    assert!(big.ends_with(&format!("{:>49}\n", 59_999)));
}

async fn finish<R, W>(c: &mut Client<R, W>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    assert_eq!(c.call("shutdown", Value::Null).await, Value::Null);
    c.notify("exit", Value::Null).await;
}

#[tokio::test]
async fn pipes_carry_split_and_batched_frames_and_keep_their_flags() {
    let dir = tempfile::tempdir().unwrap();
    // Pipes we make ourselves, keeping a copy of the server's ends: the
    // same open file descriptions the server inherits.
    let (in_read, in_write) = std::io::pipe().unwrap();
    let (out_read, out_write) = std::io::pipe().unwrap();
    let theirs_in = in_read.try_clone().unwrap();
    let theirs_out = out_write.try_clone().unwrap();
    let mut child = toolwire(
        &["serve"],
        dir.path(),
        Stdio::from(in_read),
        Stdio::from(out_write),
    );
    let writer = tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(in_write)).unwrap();
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(out_read)).unwrap();
    let mut c = Client::new(reader, writer);
    c.initialize(dir.path(), json!({})).await;
    // Both pipes were widened to 1 MiB, as far as this user may: a pipe
    // made here, widened here, says how far that is.
    let (probe, _probe_write) = std::io::pipe().unwrap();
    // SAFETY: F_SETPIPE_SZ and F_GETPIPE_SZ only set and read a pipe's
    // capacity.
    let (allowed, sizes) = unsafe {
        libc::fcntl(probe.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
        (
            libc::fcntl(probe.as_raw_fd(), libc::F_GETPIPE_SZ),
            [theirs_in.as_raw_fd(), theirs_out.as_raw_fd()]
                .map(|fd| libc::fcntl(fd, libc::F_GETPIPE_SZ)),
        )
    };
    assert_eq!(sizes, [allowed, allowed]);

    exercise(&mut c, "pipes").await;
    // Served on epoll, yet what the parent shares was never made
    // non-blocking.
    assert!(!nonblocking(theirs_in.as_raw_fd()));
    assert!(!nonblocking(theirs_out.as_raw_fd()));
    // Our copy of the write end would keep the server's stdout open.
    drop(theirs_out);
    finish(&mut c).await;
    assert_eq!(exit_code(&mut child).await, Some(0));
    assert!(!nonblocking(theirs_in.as_raw_fd()));
    check_transcript(dir.path(), "pipes");
}

/// Run `toolwire ARGS` with one end of a socket pair as both its stdin and
/// stdout, put it through [`exercise`] and end it cleanly; the socket the
/// child inherited must still be blocking for its other holders.
async fn over_a_socket(args: &[&str], workspace: &Path, env: &[(&str, &Path)], session: &str) {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_copy = theirs.try_clone().unwrap();
    let mut child = toolwire_in(
        args,
        workspace,
        env,
        Stdio::from(OwnedFd::from(theirs.try_clone().unwrap())),
        Stdio::from(OwnedFd::from(theirs)),
    );
    ours.set_nonblocking(true).unwrap();
    let (read, write) = tokio::net::UnixStream::from_std(ours).unwrap().into_split();
    let mut c = Client::new(read, write);
    c.initialize(workspace, json!({})).await;

    exercise(&mut c, session).await;
    assert!(!nonblocking(theirs_copy.as_raw_fd()));
    finish(&mut c).await;
    assert_eq!(exit_code(&mut child).await, Some(0));
    assert!(!nonblocking(theirs_copy.as_raw_fd()));
    check_transcript(workspace, session);
}

#[tokio::test]
async fn a_socket_as_stdin_and_stdout_carries_every_frame_and_keeps_its_flags() {
    let dir = tempfile::tempdir().unwrap();
    over_a_socket(&["serve"], dir.path(), &[], "socket").await;
}

#[tokio::test]
async fn a_regular_file_as_stdin_is_read_to_its_end_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut input = Vec::new();
    input.extend(frame(&request(
        1,
        "initialize",
        json!({"processId": null, "rootUri": file_uri(dir.path())}),
    )));
    for i in 0..50 {
        input.extend(frame(&request(
            2 + i,
            "pair/append",
            json!({"sessionId": "file", "message": user_text(&format!("m{i}"))}),
        )));
    }
    // One frame far larger than any single read of the file.
    let big: String = (0..40_000).map(|i| format!("{i:>49}\n")).collect();
    input.extend(frame(&request(
        100,
        "pair/append",
        json!({"sessionId": "file", "message": {"role": "assistant", "content": big}}),
    )));
    input.extend(frame(&request(
        101,
        "state/get",
        json!({"sessionId": "file"}),
    )));
    input.extend(frame(&request(102, "shutdown", Value::Null)));
    input.extend(frame(&json!({"jsonrpc": "2.0", "method": "exit"})));
    let file = dir.path().join("input.bin");
    std::fs::write(&file, &input).unwrap();

    let mut child = toolwire(
        &["serve"],
        dir.path(),
        Stdio::from(std::fs::File::open(&file).unwrap()),
        Stdio::piped(),
    );
    let mut stdout = child.stdout.take().unwrap();
    let mut output = Vec::new();
    tokio::time::timeout(HANG, stdout.read_to_end(&mut output))
        .await
        .expect("the server did not close its output")
        .unwrap();
    assert_eq!(exit_code(&mut child).await, Some(0));

    let mut buf = BytesMut::from(&output[..]);
    let mut codec = LspCodec::default();
    let mut ids = Vec::new();
    while let Some(frame) = codec.decode(&mut buf).unwrap() {
        let Frame::Body(body) = frame else {
            panic!("a malformed frame: {frame:?}")
        };
        let reply: Value = serde_json::from_slice(&body).unwrap();
        assert!(reply.get("result").is_some(), "{reply}");
        ids.push(reply["id"].as_i64().unwrap());
    }
    assert!(buf.is_empty(), "trailing bytes: {buf:?}");
    ids.sort_unstable();
    let mut expected: Vec<i64> = (1..52).collect();
    expected.extend([100, 101, 102]);
    assert_eq!(ids, expected);
    let messages = transcript_messages(&dir.path().join(".toolwire/sessions/file.jsonl"));
    assert_eq!(messages.len(), 51);
    assert_eq!(messages[50]["content"].as_str().unwrap().len(), 2_000_000);
}

#[tokio::test]
async fn a_client_that_stops_reading_and_leaves_gets_its_pair_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut child) = spawn_binary(dir.path());
    // Synthetic: the flush at the end commits the pair, so the transcript
    // shows it happened.
    c.initialize(dir.path(), json!({"abortMode": "synthetic"}))
        .await;
    c.call(
        "pair/append",
        json!({"sessionId": "gone", "message": assistant_calls(&["t1", "t2"])}),
    )
    .await;
    // Requests the client will never read the answers of, including big
    // ones that fill the pipe; then it closes its end of stdout and stdin.
    let mut burst = Vec::new();
    for i in 0..300 {
        burst.extend(frame(&request(
            1000 + i,
            "artifact/read",
            json!({"sessionId": "gone", "toolUseId": "none"}),
        )));
        burst.extend(frame(&request(
            2000 + i,
            "state/get",
            json!({"sessionId": "gone"}),
        )));
    }
    c.send_raw(&burst).await;
    // Dropped: its end of stdout closes first, then its end of stdin.
    drop(c);
    assert_eq!(exit_code(&mut child).await, Some(1));
    let messages = transcript_messages(&dir.path().join(".toolwire/sessions/gone.jsonl"));
    assert_paired(&messages);
    let ids: Vec<&Value> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_use")
        .map(|b| &b["id"])
        .collect();
    assert_eq!(ids, [&json!("t1"), &json!("t2")]);
}

/// A forwarder whose stdio is one socket: the same frames arrive whole at
/// the shared daemon and back.
#[tokio::test]
async fn the_shared_forwarder_carries_every_frame_over_a_socket() {
    let workspace = tempfile::tempdir().unwrap();
    let run = tempfile::tempdir().unwrap();
    struct KillDaemon(daemon::Paths);
    impl Drop for KillDaemon {
        fn drop(&mut self) {
            if let Some(pid) = daemon::daemon_pid(&self.0) {
                // SAFETY: signalling the pid our own daemon's lock file records.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
    let _daemon =
        KillDaemon(daemon::paths_in(run.path().join("toolwire"), workspace.path()).unwrap());
    over_a_socket(
        &["serve", "--shared", "--idle-timeout", "30"],
        workspace.path(),
        &[("XDG_RUNTIME_DIR", run.path())],
        "shared",
    )
    .await;
}
