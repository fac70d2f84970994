//! The pair guard end to end: what reaches the transcript, on disk or, on
//! the postgres matrix (`TOOLWIRE_TEST_BACKEND=postgres`), in the database.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use serde_json::{Value, json};
use toolwire::server::Server;
use toolwire::session::Storage;
use toolwire::store::SharedStore;
use toolwire::transcript::writer::{LogFile, LogFileFactory};

/// Where a test reads a session's transcript back: its file, or on the
/// shared store its commits, read from the database as any replica reads
/// them.
#[derive(Clone)]
enum Transcript {
    File(PathBuf),
    Shared(Arc<dyn SharedStore>, String),
}

impl Transcript {
    /// The transcript of session `id` of a server on `storage` in `dir`.
    fn of(storage: &Storage, dir: &Path, id: &str) -> Self {
        match &storage.shared {
            Some(db) => Transcript::Shared(db.clone(), id.to_owned()),
            None => Transcript::File(dir.join(format!(".toolwire/sessions/{id}.jsonl"))),
        }
    }

    async fn lines(&self) -> Vec<Value> {
        match self {
            Transcript::File(path) => transcript_lines(path),
            Transcript::Shared(db, id) => db
                .read(id, 0)
                .await
                .unwrap()
                .unwrap_or_default()
                .iter()
                .flat_map(|c| std::str::from_utf8(&c.lines).unwrap().lines())
                .map(|l| toolwire::json::from_slice(l.as_bytes()).unwrap())
                .collect(),
        }
    }

    async fn messages(&self) -> Vec<Value> {
        self.lines()
            .await
            .into_iter()
            .filter(|l| l["type"] == "message")
            .map(|l| l["message"].clone())
            .collect()
    }
}

/// A server on the matrix's storage and how to read its transcripts back.
fn matrix_server() -> (Arc<Server>, Storage) {
    let storage = test_storage();
    let handle = Storage {
        shared: storage.shared.clone(),
        ..Storage::default()
    };
    (Server::new(storage), handle)
}

async fn setup(options: Value) -> (tempfile::TempDir, MemClient, Transcript) {
    let dir = tempfile::tempdir().unwrap();
    let (server, storage) = matrix_server();
    let (mut c, _t) = connect(server);
    c.initialize(dir.path(), options).await;
    let transcript = Transcript::of(&storage, dir.path(), "s");
    (dir, c, transcript)
}

async fn append(c: &mut MemClient, message: Value) -> Value {
    c.call("pair/append", json!({"sessionId": "s", "message": message}))
        .await
}

#[tokio::test]
async fn abort_during_tool_execution_writes_nothing() {
    let (_d, mut c, path) = setup(json!({})).await;
    let r = append(&mut c, assistant_calls(&["t1", "t2"])).await;
    assert_eq!(
        r,
        json!({"status": "buffered", "pending": ["t1", "t2"], "written": 0})
    );
    assert_eq!(
        c.call("state/get", json!({"sessionId": "s"})).await["pending"],
        json!(["t1", "t2"])
    );
    let f = c
        .call(
            "pair/flush",
            json!({"sessionId": "s", "reason": "user abort"}),
        )
        .await;
    assert_eq!(
        f,
        json!({"mode": "discard", "discarded": ["t1", "t2"], "synthesized": [], "written": 0})
    );
    assert_eq!(path.lines().await.len(), 0);
    // Late results after the discard answer nothing.
    c.fails(
        "pair/append",
        json!({"sessionId": "s", "message": results(&[("t1", "late")])}),
        -32010,
    )
    .await;
    assert_eq!(path.lines().await.len(), 0);
}

#[tokio::test]
async fn failover_during_tool_execution_writes_nothing() {
    let (_d, mut c, path) = setup(json!({})).await;
    append(&mut c, assistant_calls(&["t1"])).await;
    c.call(
        "pair/flush",
        json!({"sessionId": "s", "mode": "discard", "reason": "provider failover"}),
    )
    .await;
    assert!(path.lines().await.is_empty());
}

#[tokio::test]
async fn rate_limit_interruption_keeps_user_messages_and_no_orphan() {
    let (_d, mut c, path) = setup(json!({})).await;
    append(&mut c, user_text("fix the build")).await;
    append(&mut c, assistant_calls(&["t1"])).await;
    let r = append(&mut c, user_text("retry after the rate limit")).await;
    assert_eq!(r["status"], json!("committed"));
    assert_eq!(
        r["flushed"],
        json!({"mode": "discard", "discarded": ["t1"], "synthesized": [], "written": 0})
    );
    let msgs = path.messages().await;
    assert_eq!(
        msgs,
        vec![
            user_text("fix the build"),
            user_text("retry after the rate limit")
        ]
    );
    assert_paired(&msgs);
}

#[tokio::test]
async fn a_normal_pair_is_committed_assistant_first() {
    let (_d, mut c, path) = setup(json!({})).await;
    append(&mut c, assistant_calls(&["t1"])).await;
    assert!(path.lines().await.is_empty(), "nothing before the results");
    let r = append(&mut c, results(&[("t1", "ok")])).await;
    assert_eq!(
        r,
        json!({"status": "committed", "pending": [], "written": 2})
    );
    assert_eq!(
        path.messages().await,
        vec![assistant_calls(&["t1"]), results(&[("t1", "ok")])]
    );
}

#[tokio::test]
async fn first_pair_committed_second_aborted_leaves_only_the_first() {
    let (_d, mut c, path) = setup(json!({})).await;
    append(&mut c, assistant_calls(&["t1"])).await;
    append(&mut c, results(&[("t1", "ok")])).await;
    append(&mut c, assistant_calls(&["t2"])).await;
    c.call("pair/flush", json!({"sessionId": "s"})).await;
    assert_eq!(
        path.messages().await,
        vec![assistant_calls(&["t1"]), results(&[("t1", "ok")])]
    );
}

#[tokio::test]
async fn synthetic_mode_closes_the_pair_with_errors_naming_the_reason() {
    let (_d, mut c, path) = setup(json!({"abortMode": "synthetic"})).await;
    append(&mut c, assistant_calls(&["t1", "t2"])).await;
    append(&mut c, results(&[("t1", "partial")])).await;
    let f = c
        .call(
            "pair/flush",
            json!({"sessionId": "s", "reason": "rate limited"}),
        )
        .await;
    assert_eq!(
        f,
        json!({"mode": "synthetic", "discarded": [], "synthesized": ["t2"], "written": 3})
    );
    let msgs = path.messages().await;
    assert_eq!(msgs.len(), 3);
    assert_paired(&msgs);
    let synthetic = &msgs[2]["content"][0];
    assert_eq!(synthetic["tool_use_id"], json!("t2"));
    assert_eq!(synthetic["is_error"], json!(true));
    assert!(
        synthetic["content"]
            .as_str()
            .unwrap()
            .contains("rate limited")
    );
    // Overridable per call; interruption uses the configured mode.
    append(&mut c, assistant_calls(&["t3"])).await;
    let r = append(&mut c, user_text("stop")).await;
    assert_eq!(r["flushed"]["synthesized"], json!(["t3"]));
    assert_eq!(r["written"], json!(3));
    // Consecutive assistant messages are one turn: the second joins the
    // pending pair instead of interrupting it (PROTOCOL 10.2).
    append(&mut c, assistant_calls(&["t4"])).await;
    let r = append(&mut c, assistant_calls(&["t5"])).await;
    assert_eq!(r["status"], json!("buffered"));
    assert_eq!(r["pending"], json!(["t4", "t5"]));
    assert!(r.get("flushed").is_none_or(Value::is_null), "{r}");
    let f = c
        .call("pair/flush", json!({"sessionId": "s", "mode": "discard"}))
        .await;
    assert_eq!(f["discarded"], json!(["t4", "t5"]));
    let msgs = path.messages().await;
    assert_paired(&msgs);
    assert!(
        msgs[4]["content"][0]["content"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );
    // Nothing pending: an empty flush.
    let f = c.call("pair/flush", json!({"sessionId": "s"})).await;
    assert_eq!(
        f,
        json!({"mode": "synthetic", "discarded": [], "synthesized": [], "written": 0})
    );
}

#[tokio::test]
async fn results_may_arrive_over_several_messages() {
    let (_d, mut c, path) = setup(json!({})).await;
    append(&mut c, assistant_calls(&["a", "b", "c"])).await;
    let r = append(&mut c, results(&[("b", "2")])).await;
    assert_eq!(
        r,
        json!({"status": "buffered", "pending": ["a", "c"], "written": 0})
    );
    append(&mut c, results(&[("c", "3")])).await;
    let r = append(&mut c, results(&[("a", "1")])).await;
    assert_eq!(r["written"], json!(4));
    let msgs = path.messages().await;
    assert_eq!(msgs[0], assistant_calls(&["a", "b", "c"]));
    assert_paired(&msgs);
}

#[tokio::test]
async fn unknown_duplicate_and_malformed_results_change_nothing() {
    let (_d, mut c, path) = setup(json!({})).await;
    c.fails(
        "pair/append",
        json!({"sessionId": "s", "message": results(&[("nobody", "x")])}),
        -32010,
    )
    .await;
    append(&mut c, assistant_calls(&["a", "b"])).await;
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "s", "message": results(&[("a", "1"), ("zzz", "?")])}),
            -32010,
        )
        .await;
    assert_eq!(e["data"]["toolUseId"], json!("zzz"));
    c.fails(
        "pair/append",
        json!({"sessionId": "s", "message": results(&[("a", "1"), ("a", "again")])}),
        -32010,
    )
    .await;
    append(&mut c, results(&[("a", "1")])).await;
    c.fails(
        "pair/append",
        json!({"sessionId": "s", "message": results(&[("a", "already answered")])}),
        -32010,
    )
    .await;
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "s", "message": assistant_calls(&["d", "d"])}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("message.content"));
    let e = c
        .fails("pair/append", json!({"sessionId": "s", "message": {"role": "assistant", "content": [{"type": "tool_use", "name": "x", "input": {}}]}}), -32602)
        .await;
    assert_eq!(e["data"]["path"], json!("message.content[0].id"));
    assert_eq!(
        c.call("state/get", json!({"sessionId": "s"})).await["pending"],
        json!(["b"]),
        "buffer intact"
    );
    assert!(path.lines().await.is_empty());
    append(&mut c, results(&[("b", "2")])).await;
    assert_eq!(path.messages().await.len(), 3);
}

#[tokio::test]
async fn server_side_tool_blocks_are_not_pending() {
    let (_d, mut c, path) = setup(json!({})).await;
    let msg = json!({"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "srv1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "srv1", "content": []},
        {"type": "mcp_tool_use", "id": "mcp1", "name": "x", "server_name": "s", "input": {}},
        {"type": "mcp_tool_result", "tool_use_id": "mcp1", "content": []},
        {"type": "text", "text": "done"}
    ]});
    let r = append(&mut c, msg.clone()).await;
    assert_eq!(
        r,
        json!({"status": "committed", "pending": [], "written": 1})
    );
    assert_eq!(path.messages().await, vec![msg]);
}

#[tokio::test]
async fn a_client_that_goes_away_has_its_pairs_flushed_others_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (server, storage) = matrix_server();
    let (mut a, ta) = connect(server.clone());
    let (mut b, _tb) = connect(server.clone());
    a.initialize(dir.path(), json!({"abortMode": "synthetic"}))
        .await;
    b.initialize(dir.path(), json!({})).await;
    a.call(
        "pair/append",
        json!({"sessionId": "sa", "message": assistant_calls(&["a1"])}),
    )
    .await;
    b.call(
        "pair/append",
        json!({"sessionId": "sb", "message": assistant_calls(&["b1"])}),
    )
    .await;
    a.close().await;
    ta.await.unwrap();
    let msgs = Transcript::of(&storage, dir.path(), "sa").messages().await;
    assert_eq!(msgs.len(), 2, "synthetic flush on EOF");
    assert!(
        msgs[1]["content"][0]["content"]
            .as_str()
            .unwrap()
            .contains("connection ended")
    );
    assert_eq!(
        b.call("state/get", json!({"sessionId": "sb"})).await["pending"],
        json!(["b1"])
    );
    b.call(
        "pair/append",
        json!({"sessionId": "sb", "message": results(&[("b1", "fine")])}),
    )
    .await;
    assert_eq!(
        Transcript::of(&storage, dir.path(), "sb")
            .messages()
            .await
            .len(),
        2
    );
}

#[tokio::test]
async fn shutdown_flushes_this_clients_pairs() {
    let (_d, mut c, path) = setup(json!({"abortMode": "synthetic"})).await;
    append(&mut c, assistant_calls(&["t1"])).await;
    c.call("shutdown", Value::Null).await;
    assert_eq!(path.messages().await.len(), 2);
}

// ------------------------------------------------------ storage faults --

/// A transcript file that fails on demand after writing part of a commit.
struct Faulty {
    inner: std::fs::File,
    fail: Arc<AtomicBool>,
    errno: i32,
}
impl LogFile for Faulty {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            // Half of the commit reaches the file before the disk gives out.
            io::Write::write_all(&mut self.inner, &bytes[..bytes.len() / 2])?;
            return Err(io::Error::from_raw_os_error(self.errno));
        }
        io::Write::write_all(&mut self.inner, bytes)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}
struct FaultyFiles {
    fail: Arc<AtomicBool>,
    errno: i32,
}
impl LogFileFactory for FaultyFiles {
    fn wrap(&self, file: std::fs::File) -> Box<dyn LogFile> {
        Box::new(Faulty {
            inner: file,
            fail: self.fail.clone(),
            errno: self.errno,
        })
    }
}

#[tokio::test]
async fn a_failing_disk_is_a_storage_error_and_leaves_the_file_as_it_was() {
    for errno in [libc::ENOSPC, libc::EACCES] {
        let fail = Arc::new(AtomicBool::new(false));
        let server = Server::new(Storage {
            files: Arc::new(FaultyFiles {
                fail: fail.clone(),
                errno,
            }),
            ..Storage::default()
        });
        let (mut c, _t) = connect(server);
        let dir = tempfile::tempdir().unwrap();
        c.initialize(dir.path(), json!({})).await;
        let path = dir.path().join(".toolwire/sessions/s.jsonl");
        append(&mut c, user_text("before")).await;
        append(&mut c, assistant_calls(&["t1"])).await;
        let before = std::fs::read(&path).unwrap();

        fail.store(true, Ordering::SeqCst);
        let e = c
            .fails(
                "pair/append",
                json!({"sessionId": "s", "message": results(&[("t1", "out")])}),
                -32014,
            )
            .await;
        assert_eq!(e["data"]["kind"], json!("storage"));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "no half-written commit remains"
        );
        assert_eq!(
            c.call("state/get", json!({"sessionId": "s"})).await["pending"],
            json!(["t1"])
        );
        let e = c
            .fails(
                "budget/apply",
                json!({"sessionId": "s", "messages": [results(&[("big", &"x".repeat(60_000))])]}),
                -32014,
            )
            .await;
        assert_eq!(e["data"]["kind"], json!("storage"));
        assert_eq!(
            c.call("state/get", json!({"sessionId": "s"})).await["seenIds"],
            json!([]),
            "an unjournaled decision is not taken"
        );

        fail.store(false, Ordering::SeqCst);
        append(&mut c, results(&[("t1", "out")])).await;
        let msgs = transcript_messages(&path);
        assert_eq!(msgs.len(), 3);
        assert_paired(&msgs);
    }
}

#[tokio::test]
async fn an_unwritable_data_directory_is_a_storage_error() {
    if !local_transcripts("an_unwritable_data_directory_is_a_storage_error") {
        return;
    }
    let (dir, mut c, _path) = setup(json!({})).await;
    let sessions = dir.path().join(".toolwire/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join("ro"), "not a directory").unwrap();
    // The session directory is taken by a file: persisting fails, reported.
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "ro", "messages": [results(&[("x", &"x".repeat(60_000))])]}),
        )
        .await;
    assert_eq!(r["failures"].as_array().unwrap().len(), 1);
    // The transcript location is a directory: appending fails cleanly.
    std::fs::create_dir_all(sessions.join("dirt.jsonl")).unwrap();
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "dirt", "message": user_text("x")}),
            -32014,
        )
        .await;
    assert_eq!(e["data"]["kind"], json!("storage"));
    append(&mut c, user_text("still serving")).await;
}

#[tokio::test]
async fn a_commit_log_that_cannot_be_made_leaves_commits_durable_one_by_one() {
    if !local_transcripts("a_commit_log_that_cannot_be_made_leaves_commits_durable_one_by_one") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Where the data directory's commit log goes, a file is in the way.
    let wal = dir.path().join(".toolwire/wal");
    std::fs::create_dir_all(dir.path().join(".toolwire")).unwrap();
    std::fs::write(&wal, "in the way").unwrap();
    let (server, _storage) = matrix_server();
    let (mut c, _t) = connect(server);
    c.initialize(dir.path(), json!({"durability": "fsync"}))
        .await;
    for i in 0..20 {
        let a = format!("a{i}");
        let r = append(&mut c, assistant_calls(&[&a])).await;
        assert_eq!(r["status"], json!("buffered"), "{r}");
        let r = append(&mut c, results(&[(&a, "ok")])).await;
        assert_eq!(r["status"], json!("committed"), "{r}");
    }
    let path = dir.path().join(".toolwire/sessions/s.jsonl");
    let msgs = transcript_messages(&path);
    assert_eq!(msgs.len(), 40);
    assert_paired(&msgs);
    assert_eq!(std::fs::read_to_string(&wal).unwrap(), "in the way");
}

// ----------------------------------------------------------- repair --

fn write_lines(path: &Path, lines: &[Value], torn: Option<&str>) {
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    if let Some(t) = torn {
        text.push_str(t);
    }
    std::fs::write(path, text).unwrap();
}

fn m(message: Value) -> Value {
    json!({"type": "message", "message": message})
}

fn tr(id: &str, text: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": text})
}

#[tokio::test]
async fn repair_fixes_every_kind_of_damage_exactly() {
    let (dir, mut c, _p) = setup(json!({})).await;
    let path = dir.path().join("broken.jsonl");
    let record = json!({"type": "replacement", "record": {"kind": "tool-result", "toolUseId": "a", "replacement": "R"}});
    write_lines(
        &path,
        &[
            m(user_text("start")),
            // Results for a arrive after text, and in a later message.
            m(
                json!({"role": "assistant", "content": [{"type": "text", "text": "calling"}, {"type": "tool_use", "id": "a", "name": "Bash", "input": {}}]}),
            ),
            m(json!({"role": "user", "content": [{"type": "text", "text": "note"}]})),
            m(json!({"role": "user", "content": [tr("a", "A"), tr("a", "duplicate")]})),
            record.clone(),
            // b and c: c never answered, so both go, with b's partial result.
            m(assistant_calls(&["b", "c"])),
            m(
                json!({"role": "user", "content": [tr("b", "B"), {"type": "text", "text": "keep me"}]}),
            ),
            // An orphan result.
            m(json!({"role": "user", "content": [tr("ghost", "boo")]})),
            "not json at all".into(),
            m(user_text("end")),
        ],
        Some("{\"type\":\"message\",\"mess"),
    );
    // Raw junk line must be written verbatim, not as a JSON string.
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"not json at all\"", "not json at all");
    std::fs::write(&path, &text).unwrap();

    let dry = c
        .call(
            "transcript/repair",
            json!({"path": path.display().to_string(), "dryRun": true}),
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text,
        "dry run writes nothing"
    );
    let r = c
        .call(
            "transcript/repair",
            json!({"path": path.display().to_string()}),
        )
        .await;
    assert_eq!(r, dry);
    assert_eq!(
        r,
        json!({"changed": true, "kept": 8, "droppedToolUses": ["c"], "droppedToolResults": ["a", "ghost"], "movedToolResults": ["a"], "renamedToolUses": [], "tornLines": 2})
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("broken.jsonl.bak")).unwrap(),
        text
    );
    // Every real result stays: a's first result moves in front of the
    // note of its turn, b keeps its answered call and its result; only the
    // unanswered c, the duplicate and the orphan go.
    let expected = vec![
        m(user_text("start")),
        m(
            json!({"role": "assistant", "content": [{"type": "text", "text": "calling"}, {"type": "tool_use", "id": "a", "name": "Bash", "input": {}}]}),
        ),
        m(json!({"role": "user", "content": [tr("a", "A")]})),
        m(json!({"role": "user", "content": [{"type": "text", "text": "note"}]})),
        record,
        m(assistant_calls(&["b"])),
        m(json!({"role": "user", "content": [tr("b", "B"), {"type": "text", "text": "keep me"}]})),
        m(user_text("end")),
    ];
    assert_eq!(
        transcript_lines(&path),
        expected,
        "{}",
        std::fs::read_to_string(&path).unwrap()
    );
    assert_paired(&transcript_messages(&path));
    // Already sound: nothing changes, no backup is taken again.
    std::fs::remove_file(dir.path().join("broken.jsonl.bak")).unwrap();
    let again = c
        .call(
            "transcript/repair",
            json!({"path": path.display().to_string()}),
        )
        .await;
    assert_eq!(
        again,
        json!({"changed": false, "kept": 8, "droppedToolUses": [], "droppedToolResults": [], "movedToolResults": [], "renamedToolUses": [], "tornLines": 0})
    );
    assert!(!dir.path().join("broken.jsonl.bak").exists());
}

#[tokio::test]
async fn repair_moves_results_after_a_call_at_the_end_and_refuses_a_live_transcript() {
    let (dir, mut c, live) = setup(json!({})).await;
    let path = dir.path().join("t.jsonl");
    write_lines(
        &path,
        &[
            m(json!({"role": "user", "content": [tr("z", "early")]})),
            m(assistant_calls(&["z"])),
        ],
        None,
    );
    let r = c
        .call(
            "transcript/repair",
            json!({"path": path.display().to_string()}),
        )
        .await;
    assert_eq!(
        r["droppedToolUses"],
        json!(["z"]),
        "a result before its call is an orphan"
    );
    assert_eq!(r["droppedToolResults"], json!(["z"]));
    assert!(transcript_lines(&path).is_empty());

    // A live transcript is a locked file: there is none on the shared store.
    let Transcript::File(live) = live else {
        return;
    };
    append(&mut c, user_text("open session")).await;
    let e = c
        .fails(
            "transcript/repair",
            json!({"path": live.display().to_string()}),
            -32013,
        )
        .await;
    assert_eq!(e["data"]["kind"], json!("transcriptLocked"));
}

#[tokio::test]
async fn a_commit_torn_by_a_crash_is_cut_when_the_session_opens() {
    if !local_transcripts("a_commit_torn_by_a_crash_is_cut_when_the_session_opens") {
        return;
    }
    let (dir, mut c, path) = setup(json!({})).await;
    let Transcript::File(path) = path else {
        unreachable!("the local backend keeps transcript files")
    };
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // The assistant half of a pair reached the disk, its results only partly.
    let first = m(user_text("kept"));
    let call = m(assistant_calls(&["t1", "t2"]));
    let half = m(results(&[("t1", "one")]));
    let text = format!(
        "{first}\n{call}\n{half}\n{{\"type\":\"message\",\"message\":{{\"role\":\"user\",\"con"
    );
    std::fs::write(&path, text).unwrap();
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(
        state["seenIds"],
        json!([]),
        "the cut pair's results are not seen"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        format!("{first}\n")
    );
    let _ = dir;
}

/// Whether another open file description can take the transcript's lock.
fn lockable(path: &Path) -> bool {
    std::fs::File::open(path)
        .map(|f| f.try_lock().is_ok())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_release_their_transcripts_and_reload_on_use() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        Server::with_session_idle(Storage::default(), std::time::Duration::from_millis(50));
    let (mut c, _t) = connect(server);
    c.initialize(dir.path(), json!({})).await;
    let sessions = dir.path().join(".toolwire/sessions");
    c.call(
        "pair/append",
        json!({"sessionId": "idle", "message": user_text("hello")}),
    )
    .await;
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "idle", "messages": [results(&[("big", &"i".repeat(60_000))])]}),
        )
        .await;
    // A session with a pending pair must stay open: its pair is only in memory.
    c.call(
        "pair/append",
        json!({"sessionId": "busy", "message": user_text("hi")}),
    )
    .await;
    c.call(
        "pair/append",
        json!({"sessionId": "busy", "message": assistant_calls(&["b1"])}),
    )
    .await;
    assert!(!lockable(&sessions.join("idle.jsonl")));

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !lockable(&sessions.join("idle.jsonl")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle session never released its transcript"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        !lockable(&sessions.join("busy.jsonl")),
        "a session with a pending pair stays open"
    );

    // Used again, it reloads and replays its decisions byte for byte.
    let again = c
        .call(
            "budget/apply",
            json!({"sessionId": "idle", "messages": [results(&[("big", &"i".repeat(60_000))])]}),
        )
        .await;
    assert_eq!(again["messages"], r["messages"]);
    assert_eq!(again["records"], json!([]));
    assert!(!lockable(&sessions.join("idle.jsonl")));
    c.call(
        "pair/append",
        json!({"sessionId": "busy", "message": results(&[("b1", "done")])}),
    )
    .await;
    assert_paired(&transcript_messages(&sessions.join("busy.jsonl")));
}

/// `pair/append` with its params spelled as `spelling` says: compact (as
/// serde_json writes them) or pretty-printed, under request id `id`.
async fn append_spelled(c: &mut MemClient, id: i64, params: &Value, pretty: bool) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "pair/append", "params": params});
    let body = match pretty {
        true => serde_json::to_string_pretty(&request),
        false => serde_json::to_string(&request),
    }
    .unwrap();
    c.send_raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes())
        .await;
    let mut reply = c.response(id).await;
    reply.as_object_mut().unwrap().remove("id");
    reply
}

/// A compact message is held and written as the text it came in, a
/// spaced one as its value: the replies, the errors and the lines are the
/// same either way, byte for byte, through commits, a pair answered in
/// two messages, a refused message and a synthetic flush.
#[tokio::test]
async fn a_message_makes_the_same_lines_however_it_is_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let (server, storage) = matrix_server();
    let (mut c, _t) = connect(server);
    c.initialize(dir.path(), json!({"abortMode": "synthetic"}))
        .await;
    let mut call = assistant_calls(&["t1", "t2"]);
    call["content"].as_array_mut().unwrap().insert(
        0,
        json!({"type": "text", "text": "Two at once: \"é\" \u{1F600}\n"}),
    );
    call["content"][1]["input"] = json!({"n": 1.5e10, "list": [1, -2, true, null]});
    let steps = [
        user_text("fix the build"),
        call,
        results(&[("t1", "ok")]),
        results(&[("t2", "exit status 0")]),
        // Refused: a result in an assistant message.
        json!({"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}),
        json!({"role": "system", "content": "a reminder"}),
        assistant_tool("t3", "Read"),
        // Interrupts the pair: closed with a synthetic result.
        user_text("stop, do something else"),
    ];
    let mut id = 100_000;
    for step in &steps {
        let mut replies = Vec::new();
        for (session, pretty) in [("a", false), ("b", true)] {
            id += 1;
            let params = json!({"sessionId": session, "message": step});
            replies.push(append_spelled(&mut c, id, &params, pretty).await);
        }
        assert_eq!(replies[0], replies[1], "{step}");
    }
    let a = Transcript::of(&storage, dir.path(), "a").lines().await;
    let b = Transcript::of(&storage, dir.path(), "b").lines().await;
    assert_eq!(a.len(), 8, "{a:?}");
    assert_eq!(a, b);
    if storage.shared.is_none() {
        let file =
            |s: &str| std::fs::read(dir.path().join(format!(".toolwire/sessions/{s}.jsonl")));
        assert_eq!(
            String::from_utf8(file("a").unwrap()),
            String::from_utf8(file("b").unwrap())
        );
    }
}
