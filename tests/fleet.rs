//! A fleet: three `toolwire proxy` replicas (the real binary) on one real
//! PostgreSQL database (tests/common/pg.rs) and one bucket of a real S3
//! server (moto, tests/common/s3.rs) for saved outputs, in front of the
//! fake provider. A conversation's turns go round robin; the same first
//! decision is raced from all three; a replica is SIGKILLed in the middle of
//! a request and the others carry on. Then the shared store's other faces:
//! gc, and reading back an output a fork inherited.

mod common;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;
#[path = "common/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fake_provider::FakeProvider;
use serde_json::{Value, json};
use tokio::process::Child;
use toolwire::store::SharedStore;

const LIMIT: Duration = Duration::from_secs(120);

/// The fleet's bucket on the test's S3 server.
const BUCKET: &str = "fleet";

/// One replica: its own workspace, data directory and toolwire.toml, the
/// shared database and bucket.
struct Replica {
    child: Child,
    url: String,
    _workspace: tempfile::TempDir,
    _data: tempfile::TempDir,
}

fn toml(db: &str, data_dir: &Path, upstream: &str) -> String {
    format!(
        "data_dir = {data:?}\ndurability = \"none\"\n[proxy.upstreams]\nanthropic = {upstream:?}\n[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n",
        data = data_dir.display().to_string(),
    )
}

/// The `[storage.objects]` table of `objects` (an S3 server's config).
fn objects_toml(objects: &Value) -> String {
    let o = &objects["options"];
    format!(
        "[storage.objects]\nurl = {url:?}\n[storage.objects.options]\nendpoint = {endpoint:?}\n\
         region = \"us-east-1\"\nallow_http = true\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n",
        url = objects["url"].as_str().unwrap(),
        endpoint = o["endpoint"].as_str().unwrap(),
    )
}

fn workspace(db: &str, data_dir: &Path, upstream: &str) -> tempfile::TempDir {
    workspace_with(&toml(db, data_dir, upstream))
}

fn workspace_with(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolwire.toml"), toml).unwrap();
    dir
}

impl Replica {
    /// A replica on `db` with its saved outputs in the bucket `objects`
    /// names, and a data directory of its own (nothing else is shared).
    async fn start(db: &str, objects: &Value, upstream: &str) -> Replica {
        let data = tempfile::tempdir().unwrap();
        let ws = workspace_with(&format!(
            "{}{}",
            toml(db, data.path(), upstream),
            objects_toml(objects)
        ));
        let (child, url, mut lines) = proxy_process::start(
            ws.path(),
            &["--listen", "127.0.0.1:0"],
            "toolwire=warn",
            "replica",
        )
        .await;
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("replica: {line}");
            }
        });
        Replica {
            child,
            url,
            _workspace: ws,
            _data: data,
        }
    }
}

fn migrate(db: &str, data_dir: &Path) -> (std::process::Child, tempfile::TempDir) {
    let ws = workspace(db, data_dir, "http://127.0.0.1:9");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["migrate", "--workspace"])
        .arg(ws.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, ws)
}

fn tool_use(id: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "make"}}]})
}

fn tool_result(id: &str, text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": text}]})
}

/// The conversation after `turns` tool calls, each with a 60 KB result.
fn conversation(tag: &str, turns: usize) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": format!("fix the build ({tag})")})];
    for t in 0..turns {
        let id = format!("{tag}-call-{t}");
        messages.push(tool_use(&id));
        messages.push(tool_result(&id, &format!("{id}: {}", "x".repeat(60_000))));
    }
    messages
}

async fn send(http: &reqwest::Client, replica: &str, session: &str, messages: &[Value]) -> String {
    let response = http
        .post(format!("{replica}/v1/messages"))
        .header("x-toolwire-session", session)
        .header("x-api-key", "test")
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "claude-test", "max_tokens": 16, "messages": messages}))
        .send()
        .await
        .unwrap();
    let budget = response
        .headers()
        .get("x-toolwire-budget")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(response.status().is_success(), "{}", response.status());
    let _ = response.bytes().await.unwrap();
    budget
}

/// Every replacement record and `seen` id the shared store holds for
/// `session`, in commit order.
async fn journal(store: &toolwire::store::postgres::Postgres, session: &str) -> Vec<Value> {
    let commits = store.read(session, 0).await.unwrap().unwrap_or_default();
    commits
        .iter()
        .flat_map(|c| c.lines.split(|b| *b == b'\n'))
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).unwrap())
        .collect()
}

/// The saved outputs of `session` in the fleet's bucket (without the line
/// indexes beside them).
fn saved_objects(s3: &s3::S3Server, session: &str) -> Vec<String> {
    s3.keys(BUCKET, &format!("fleet/sessions/{session}/tool-results/"))
        .into_iter()
        .filter(|k| !k.ends_with(".idx"))
        .collect()
}

/// Assert that every decision the store holds for `session` names an
/// object that exists in the bucket (no decision without its object);
/// returns how many decisions there are.
async fn assert_decisions_have_objects(
    s3: &s3::S3Server,
    store: &toolwire::store::postgres::Postgres,
    session: &str,
) -> usize {
    let objects = saved_objects(s3, session);
    let lines = journal(store, session).await;
    let mut decided = 0;
    for line in lines.iter().filter(|l| l["type"] == "replacement") {
        let text = line["record"]["replacement"].as_str().unwrap();
        let url = text
            .split("Full output saved to: ")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .unwrap();
        let key = url
            .strip_prefix(&format!("s3://{BUCKET}/"))
            .unwrap_or_else(|| panic!("not an object of the bucket: {url}"));
        assert!(
            objects.iter().any(|o| o == key),
            "decision without its object: {url} (bucket: {objects:?})"
        );
        decided += 1;
    }
    decided
}

fn saved_outputs(data_dir: &Path, session: &str) -> Vec<PathBuf> {
    let dir = data_dir.join("sessions").join(session).join("tool-results");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_on_one_database_and_one_bucket_decide_once_and_replay_the_same_bytes() {
    let s3 = s3::S3Server::start();
    s3.create_bucket(BUCKET);
    let objects = s3.objects_config(BUCKET, "fleet");
    let db = common::pg::fresh_database();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().canonicalize().unwrap();
    let provider = FakeProvider::start().await;

    // A replica refuses a database without the schema, naming the fix.
    let ws = workspace(&db, &data_dir, &provider.url());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run `toolwire migrate`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Three replicas migrate at once: one applies, the others find it done.
    let outputs: Vec<_> = (0..3)
        .map(|_| migrate(&db, &data_dir))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|(c, _ws)| c.wait_with_output().unwrap())
        .collect();
    let said: Vec<String> = outputs
        .iter()
        .map(|o| {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        })
        .collect();
    assert_eq!(
        said.iter()
            .filter(|s| s.starts_with("applied migration 1"))
            .count(),
        1,
        "{said:?}"
    );
    assert_eq!(
        said.iter().filter(|s| *s == "schema up to date").count(),
        2,
        "{said:?}"
    );

    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Replica::start(&db, &objects, &provider.url()).await);
    }
    let urls: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
    let http = reqwest::Client::new();
    let store = toolwire::store::postgres::Postgres::connect(&db, 2).unwrap();

    // Round robin: turn k goes to replica k % 3.
    for turn in 1..=6 {
        let messages = conversation("rr", turn);
        let budget = send(&http, &urls[turn % 3], "fleet-rr", &messages).await;
        assert!(budget.starts_with("applied"), "{budget}");
    }
    let received = provider.received();
    assert_eq!(received.len(), 6);
    // Every result was replaced once and every later turn, whichever
    // replica served it, sent the very same bytes for it, naming its object.
    let mut first_seen: std::collections::HashMap<String, String> = Default::default();
    for r in &received {
        for (id, content) in common::results_sent(&r.json()) {
            assert!(
                content.starts_with("<persisted-output>"),
                "{id}: {content:.80}"
            );
            assert!(
                content.contains(&format!(
                    "Full output saved to: s3://{BUCKET}/fleet/sessions/fleet-rr/tool-results/"
                )),
                "{id} does not name its object: {content:.300}"
            );
            let first = first_seen.entry(id.clone()).or_insert(content.clone());
            assert_eq!(*first, content, "{id} changed between replicas");
        }
    }
    let lines = journal(&store, "fleet-rr").await;
    let records: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "replacement")
        .collect();
    assert_eq!(records.len(), 6, "one decision per result: {lines:?}");
    assert_eq!(
        saved_objects(&s3, "fleet-rr").len(),
        6,
        "one object per result"
    );
    assert_decisions_have_objects(&s3, &store, "fleet-rr").await;
    assert!(
        saved_outputs(&data_dir, "fleet-rr").is_empty(),
        "saved outputs went to the bucket"
    );

    // A race: the same first decision from all three at once.
    provider.clear();
    let messages = conversation("race", 3);
    let sends = urls
        .iter()
        .map(|u| send(&http, u, "fleet-race", &messages))
        .collect::<Vec<_>>();
    futures_util::future::join_all(sends).await;
    let bodies: Vec<Vec<(String, String)>> = provider
        .received()
        .iter()
        .map(|r| common::results_sent(&r.json()))
        .collect();
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies.iter().all(|b| *b == bodies[0]),
        "replicas sent different bytes"
    );
    assert!(bodies[0].iter().all(|(_, c)| {
        c.starts_with("<persisted-output>")
            && c.contains(&format!(
                "s3://{BUCKET}/fleet/sessions/fleet-race/tool-results/"
            ))
    }));
    let lines = journal(&store, "fleet-race").await;
    let mut ids: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "replacement")
        .map(|l| l["record"]["toolUseId"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        ["race-call-0", "race-call-1", "race-call-2"],
        "one decision each"
    );
    assert_eq!(
        saved_objects(&s3, "fleet-race").len(),
        3,
        "one object per result, whoever wrote it"
    );
    assert_decisions_have_objects(&s3, &store, "fleet-race").await;

    // SIGKILL one replica in the middle of a request (once its first object
    // is in the bucket, before or while it commits): the others carry on
    // and no decision is left without its object.
    provider.clear();
    let messages = conversation("kill", 12);
    let victim = replicas.remove(0);
    let pid = victim.child.id().unwrap() as i32;
    let request = {
        let http = http.clone();
        let url = victim.url.clone();
        let messages = messages.clone();
        tokio::spawn(async move {
            let _ = http
                .post(format!("{url}/v1/messages"))
                .header("x-toolwire-session", "fleet-kill")
                .json(&json!({"model": "m", "max_tokens": 1, "messages": messages}))
                .send()
                .await;
        })
    };
    let deadline = std::time::Instant::now() + LIMIT;
    while s3.keys(BUCKET, "fleet/sessions/fleet-kill/").is_empty() {
        assert!(std::time::Instant::now() < deadline, "no object appeared");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // SAFETY: killing the replica this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = request.await;
    drop(victim);
    for (i, url) in urls[1..].iter().enumerate() {
        let budget = send(&http, url, "fleet-kill", &messages).await;
        assert!(budget.starts_with("applied"), "replica {}: {budget}", i + 1);
    }
    let bodies: Vec<Vec<(String, String)>> = provider
        .received()
        .iter()
        .map(|r| common::results_sent(&r.json()))
        .collect();
    let survivors = &bodies[bodies.len() - 2..];
    assert_eq!(survivors[0], survivors[1]);
    let decided = assert_decisions_have_objects(&s3, &store, "fleet-kill").await;
    assert_eq!(decided, 12, "one decision per result after the kill");
    assert_eq!(
        saved_objects(&s3, "fleet-kill").len(),
        12,
        "one object per result after the kill"
    );
    // No session's transcript holds a call without its result.
    for session in ["fleet-rr", "fleet-race", "fleet-kill"] {
        let messages: Vec<Value> = journal(&store, session)
            .await
            .into_iter()
            .filter(|l| l["type"] == "message")
            .map(|l| l["message"].clone())
            .collect();
        common::assert_paired(&messages);
    }
}

/// `toolwire gc --json` on the shared store `db` with `retention` (one
/// line of its `[retention]` table); its report.
fn gc_cli(db: &str, data_dir: &Path, retention: &str, dry_run: bool) -> Value {
    let ws = workspace_with(&format!(
        "{}[retention]\n{retention}\n",
        toml(db, data_dir, "http://127.0.0.1:9")
    ));
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"));
    cmd.args(["gc", "--json", "--workspace"]).arg(ws.path());
    if dry_run {
        cmd.arg("--dry-run");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap()
}

/// An in-process server on the shared store at `db`.
fn shared_server(db: &str) -> std::sync::Arc<toolwire::server::Server> {
    toolwire::server::Server::new(toolwire::session::Storage {
        shared: Some(std::sync::Arc::new(
            toolwire::store::postgres::Postgres::connect(db, 4).unwrap(),
        )),
        ..Default::default()
    })
}

/// A client of an in-process replica on `db`, initialized with saved
/// outputs under `data_dir` and a small result limit; its task and
/// workspace, to keep.
async fn shared_client(
    db: &str,
    data_dir: &Path,
) -> (
    common::MemClient,
    std::sync::Arc<toolwire::server::Server>,
    tempfile::TempDir,
) {
    let server = shared_server(db);
    let (mut c, _task) = common::connect(server.clone());
    let ws = tempfile::tempdir().unwrap();
    c.initialize(
        ws.path(),
        json!({"dataDir": data_dir, "durability": "none", "limits": {"maxResultChars": 100}}),
    )
    .await;
    (c, server, ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_on_the_shared_store_removes_expired_sessions_and_keeps_fork_parents() {
    let (db, store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().canonicalize().unwrap();
    let (mut c, server, _ws) = shared_client(&db, &data_dir).await;
    for session in ["old", "solo"] {
        let messages = conversation(session, 1);
        c.call(
            "budget/apply",
            json!({"sessionId": session, "messages": messages}),
        )
        .await;
        assert_eq!(saved_outputs(&data_dir, session).len(), 1);
    }
    c.call(
        "state/fork",
        json!({"sessionId": "old", "newSessionId": "child"}),
    )
    .await;
    // The fork reads its parent's rows: it knows the parent's decision.
    let child = c.call("state/get", json!({"sessionId": "child"})).await;
    assert_eq!(child["seenIds"], json!(["old-call-0"]));
    // The replica lets go of them, as it does of idle sessions: gc never
    // removes a session a replica holds loaded.
    common::pg::unload(&server, &db).await;

    let gc = |dry: bool| gc_cli(&db, &data_dir, "max_age_days = 0", dry);
    let dry = gc(true);
    assert_eq!(dry["sessionsRemoved"], json!(["child", "solo"]));
    assert!(
        store.read("solo", 0).await.unwrap().is_some(),
        "a dry run removes nothing"
    );
    let report = gc(false);
    assert_eq!(report["sessionsRemoved"], json!(["child", "solo"]));
    assert_eq!(report["kept"], json!(1));
    assert!(store.read("solo", 0).await.unwrap().is_none());
    assert!(saved_outputs(&data_dir, "solo").is_empty());
    assert_eq!(
        saved_outputs(&data_dir, "old").len(),
        1,
        "a fork's parent is kept"
    );
    // With its fork gone, the parent goes on the next run.
    let report = gc(false);
    assert_eq!(report["sessionsRemoved"], json!(["old"]));
    assert!(saved_outputs(&data_dir, "old").is_empty());
}

/// On the shared store with saved outputs in a bucket: gc deletes an
/// expired session's objects with its rows, through `toolwire gc` as
/// through `storage/gc`, and a dry run deletes nothing but counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_on_the_shared_store_deletes_expired_sessions_objects_from_the_bucket() {
    const BUCKET: &str = "fleet-gc";
    let f = &s3::SharedFixture::start(BUCKET, "team", common::pg::migrated_database());
    let (s3, objects, db, store) = (&f.s3, &f.objects, &f.db, &f.store);
    let data_dir = &f.data_dir;
    let server = shared_server(db);
    let (mut c, _task) = common::connect(server.clone());
    let ws = tempfile::tempdir().unwrap();
    c.initialize(
        ws.path(),
        json!({"dataDir": data_dir, "durability": "none", "limits": {"maxResultChars": 100},
               "storage": {"objects": objects}, "retention": {"maxAgeDays": 0}}),
    )
    .await;
    for session in ["one", "two"] {
        let reply = c
            .call(
                "budget/apply",
                json!({"sessionId": session, "messages": conversation(session, 1)}),
            )
            .await;
        assert_eq!(
            reply["persisted"].as_array().map(Vec::len),
            Some(1),
            "{reply}"
        );
    }
    let keys = s3.keys(BUCKET, "team/sessions/");
    for session in ["one", "two"] {
        assert!(
            keys.iter()
                .any(|k| k.starts_with(&format!("team/sessions/{session}/"))),
            "{keys:?}"
        );
    }
    assert!(
        saved_outputs(data_dir, "one").is_empty(),
        "saved outputs went to the bucket"
    );
    // Idle, the replica lets go of them: then gc may remove them.
    common::pg::unload(&server, db).await;

    // `toolwire gc --dry-run` over the same database and bucket.
    let gc_ws = workspace_with(&format!(
        "{}{}[retention]\nmax_age_days = 0\n",
        toml(db, data_dir, "http://127.0.0.1:9"),
        objects_toml(objects)
    ));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .args(["gc", "--json", "--dry-run", "--workspace"])
        .arg(gc_ws.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dry: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dry["sessionsRemoved"], json!(["one", "two"]), "{dry}");
    assert!(dry["bytesFreed"].as_u64().unwrap() > 0, "{dry}");
    assert_eq!(
        s3.keys(BUCKET, "team/sessions/"),
        keys,
        "a dry run deletes nothing"
    );

    // `storage/gc` for real: the same report, rows and objects gone.
    let real = c.call("storage/gc", json!({})).await;
    assert_eq!(real, dry);
    assert!(store.read("one", 0).await.unwrap().is_none());
    assert_eq!(s3.keys(BUCKET, "team/sessions/"), Vec::<String>::new());
}

/// On the shared store a fork reads its parent's rows, and the outputs it
/// inherited were saved under the parent's directory or prefix: there is no
/// transcript file to find them through, so `artifact/read` of the fork
/// looks them up in its commits. With saved outputs in a directory and in
/// a bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_on_the_shared_store_reads_the_outputs_it_inherited() {
    let s3 = s3::S3Server::start();
    s3.create_bucket("fleet-fork");
    for objects in [None, Some(s3.objects_config("fleet-fork", "forks"))] {
        let (db, _store) = common::pg::migrated_database();
        let data = tempfile::tempdir().unwrap();
        let (mut c, _task) = common::connect(shared_server(&db));
        let ws = tempfile::tempdir().unwrap();
        let mut options = json!({"dataDir": data.path(), "durability": "none",
                                 "limits": {"maxResultChars": 100}});
        if let Some(objects) = &objects {
            options["storage"] = json!({"objects": objects});
        }
        c.initialize(ws.path(), options).await;
        let messages = conversation("parent", 1);
        let reply = c
            .call(
                "budget/apply",
                json!({"sessionId": "parent", "messages": messages}),
            )
            .await;
        assert_eq!(
            reply["persisted"].as_array().map(Vec::len),
            Some(1),
            "{reply}"
        );
        c.call(
            "state/fork",
            json!({"sessionId": "parent", "newSessionId": "child"}),
        )
        .await;
        let original = messages[2]["content"][0]["content"].as_str().unwrap();
        for session in ["parent", "child"] {
            let page = c
                .call(
                    "artifact/read",
                    json!({"sessionId": session, "toolUseId": "parent-call-0"}),
                )
                .await;
            assert_eq!(page["text"], original, "{session} ({objects:?})");
            let found = c
                .call(
                    "artifact/read",
                    json!({"sessionId": session, "toolUseId": "parent-call-0", "grep": "^parent-call-0: x"}),
                )
                .await;
            assert_eq!(
                found["text"].as_str().unwrap().lines().count(),
                1,
                "{found}"
            );
        }
        // The fork's later decisions are its own; an id neither made is
        // not found.
        c.fails(
            "artifact/read",
            json!({"sessionId": "child", "toolUseId": "nobody"}),
            -32015,
        )
        .await;
    }
}

/// `serve --shared` on the shared store: the workspace's daemon opens the
/// database its toolwire.toml names, so what its clients decide is the
/// fleet's (a plain `serve` replica on the same database replays the same
/// bytes and decides nothing anew, and no transcript file is written), and
/// its scheduled retention runs through the database (an expired session
/// written by another replica is removed from it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_daemon_decides_and_collects_on_the_shared_store() {
    let (db, store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().canonicalize().unwrap();
    let options = json!({"dataDir": data_dir, "durability": "none",
                         "limits": {"maxResultChars": 100}});

    // Another replica wrote a session the daemon's retention finds expired.
    let other_server = shared_server(&db);
    let (mut other, _task) = common::connect(other_server.clone());
    let ws_other = tempfile::tempdir().unwrap();
    other.initialize(ws_other.path(), options.clone()).await;
    other
        .call(
            "budget/apply",
            json!({"sessionId": "expired", "messages": conversation("expired", 1)}),
        )
        .await;
    assert!(store.read("expired", 0).await.unwrap().is_some());
    // And let go of it, idle.
    common::pg::unload(&other_server, &db).await;

    let upstream = "http://127.0.0.1:9";
    let ws = workspace_with(&format!(
        "{}[retention]\nmax_age_days = 0\n",
        toml(&db, &data_dir, upstream)
    ));
    let run = tempfile::tempdir().unwrap();
    struct KillDaemon(toolwire::daemon::Paths);
    impl Drop for KillDaemon {
        fn drop(&mut self) {
            if let Some(pid) = toolwire::daemon::daemon_pid(&self.0) {
                // SAFETY: signalling the pid in our own daemon's lock file.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
    let _daemon =
        KillDaemon(toolwire::daemon::paths_in(run.path().join("toolwire"), ws.path()).unwrap());
    let (mut c, _child) = common::spawn_shared(ws.path(), run.path(), 30);
    c.initialize(ws.path(), options.clone()).await;

    // The daemon's first scheduled run, at its start, removes the rows.
    let deadline = std::time::Instant::now() + LIMIT;
    while store.read("expired", 0).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon's scheduled gc never removed the expired session's rows"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let messages = conversation("live", 2);
    let params = json!({"sessionId": "live", "messages": messages});
    let first = c.call("budget/apply", params.clone()).await;
    assert_eq!(
        first["persisted"].as_array().map(Vec::len),
        Some(2),
        "{first}"
    );
    let decided = journal(&store, "live")
        .await
        .iter()
        .filter(|l| l["type"] == "replacement")
        .count();
    assert_eq!(
        decided, 2,
        "the daemon's decisions are rows in the database"
    );
    assert!(
        !data_dir.join("sessions/live.jsonl").exists(),
        "and not a transcript file"
    );

    let replica_ws = workspace_with(&toml(&db, &data_dir, upstream));
    let (mut replica, _replica_child) = common::spawn_binary(replica_ws.path());
    replica.initialize(replica_ws.path(), options).await;
    let again = replica.call("budget/apply", params).await;
    assert_eq!(again["messages"], first["messages"], "the same bytes");
    assert_eq!(again["persisted"], json!([]), "nothing decided anew");
}

/// `retention.max_total_bytes` on the shared store: over the cap, the least
/// recently written sessions go first (rows and saved outputs), never one a
/// fork still reads; a dry run lists the same and removes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_on_the_shared_store_keeps_under_max_total_bytes_oldest_first() {
    let (db, store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().canonicalize().unwrap();
    let (mut c, server, _ws) = shared_client(&db, &data_dir).await;
    // Written in this order: a (then forked), b, c; about 61 KB each.
    for session in ["a", "b", "c"] {
        c.call(
            "budget/apply",
            json!({"sessionId": session, "messages": conversation(session, 1)}),
        )
        .await;
        assert_eq!(saved_outputs(&data_dir, session).len(), 1);
    }
    c.call(
        "state/fork",
        json!({"sessionId": "a", "newSessionId": "a-fork"}),
    )
    .await;
    common::pg::unload(&server, &db).await;

    let gc = |dry: bool| gc_cli(&db, &data_dir, "max_total_bytes = 150_000", dry);
    let dry = gc(true);
    // a is the oldest but a fork reads it: b goes, and that is enough.
    assert_eq!(dry["sessionsRemoved"], json!(["b"]), "{dry}");
    assert!(dry["bytesFreed"].as_u64().unwrap() > 60_000, "{dry}");
    assert!(
        store.read("b", 0).await.unwrap().is_some(),
        "a dry run removes nothing"
    );
    let real = gc(false);
    assert_eq!(real, dry);
    assert!(store.read("b", 0).await.unwrap().is_none());
    assert!(saved_outputs(&data_dir, "b").is_empty());
    for kept in ["a", "c"] {
        assert!(store.read(kept, 0).await.unwrap().is_some(), "{kept}");
        assert_eq!(saved_outputs(&data_dir, kept).len(), 1, "{kept}");
    }
    // Under the cap now: nothing more goes.
    assert_eq!(gc(false)["sessionsRemoved"], json!([]));
}

/// In kept sessions on the shared store, saved outputs no decision points
/// at (and outputs of a session the database does not hold) go once older
/// than the grace period, under a directory and in a bucket; the referenced
/// ones stay. While a `budget/apply` holds a session's outputs (as it does
/// from its first write until its decisions commit), gc leaves them alone;
/// and an apply waits while gc holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_on_the_shared_store_sweeps_unreferenced_outputs_and_respects_holds() {
    const SWEEP_BUCKET: &str = "fleet-sweep";
    let s3 = s3::S3Server::start();
    s3.create_bucket(SWEEP_BUCKET);
    for objects in [None, Some(s3.objects_config(SWEEP_BUCKET, "sweep"))] {
        let (db, store) = common::pg::migrated_database();
        let data = tempfile::tempdir().unwrap();
        let data_dir = data.path().canonicalize().unwrap();
        let (mut c, _task) = common::connect(shared_server(&db));
        let ws = tempfile::tempdir().unwrap();
        let mut options = json!({"dataDir": data_dir, "durability": "none",
                                 "limits": {"maxResultChars": 100}});
        if let Some(objects) = &objects {
            options["storage"] = json!({"objects": objects});
        }
        c.initialize(ws.path(), options).await;
        c.call(
            "budget/apply",
            json!({"sessionId": "s", "messages": conversation("s", 1)}),
        )
        .await;
        // Outputs nothing points at: a stray in the kept session, and one of
        // a session the database never heard of.
        let outputs = |session: &str| -> Vec<String> {
            match &objects {
                Some(_) => s3
                    .keys(
                        SWEEP_BUCKET,
                        &format!("sweep/sessions/{session}/tool-results/"),
                    )
                    .into_iter()
                    .filter(|k| !k.ends_with(".idx"))
                    .map(|k| k.rsplit('/').next().unwrap().to_owned())
                    .collect(),
                None => saved_outputs(&data_dir, session)
                    .iter()
                    .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                    .filter(|name| !name.ends_with(".idx"))
                    .collect(),
            }
        };
        for (session, name) in [("s", "stray.txt"), ("ghost", "lost.txt")] {
            match &objects {
                Some(_) => s3.put(
                    SWEEP_BUCKET,
                    &format!("sweep/sessions/{session}/tool-results/{name}"),
                    "nobody points here",
                ),
                None => {
                    let dir = data_dir.join("sessions").join(session).join("tool-results");
                    std::fs::create_dir_all(&dir).unwrap();
                    std::fs::write(dir.join(name), "nobody points here").unwrap();
                    // A line index kept beside it goes with it, unnamed.
                    std::fs::write(dir.join(format!("{name}.idx")), "{}").unwrap();
                }
            }
        }
        // Local line indexes of a kept output, and of one that is gone.
        let index = |name: &str| {
            data_dir
                .join("sessions/s/tool-results")
                .join(format!("{name}.idx"))
        };
        if objects.is_none() {
            for name in ["s-call-0.txt", "gone.txt"] {
                std::fs::write(index(name), "{}").unwrap();
            }
        }
        assert_eq!(outputs("s"), ["s-call-0.txt", "stray.txt"], "{objects:?}");
        assert_eq!(outputs("ghost"), ["lost.txt"]);

        let objects_store = objects.as_ref().map(|o| {
            toolwire::artifact::objects::ObjectArtifacts::open(
                &serde_json::from_value(o.clone()).unwrap(),
            )
            .unwrap()
        });
        let run = |dry_run: bool, later: bool| {
            let store = &store;
            let objects_store = objects_store.clone();
            let data_dir = data_dir.clone();
            async move {
                let now = std::time::SystemTime::now();
                let policy = toolwire::retention::Policy {
                    max_age: None,
                    max_total_bytes: None,
                    grace: toolwire::retention::GRACE,
                    // Past the grace period of everything written so far.
                    now: if later {
                        now + 2 * toolwire::retention::GRACE
                    } else {
                        now
                    },
                };
                toolwire::store::postgres::gc::collect(
                    store,
                    &data_dir,
                    objects_store,
                    &policy,
                    dry_run,
                )
                .await
                .unwrap()
            }
        };
        // Within the grace period nothing goes.
        assert!(run(false, false).await.artifacts_removed.is_empty());
        // A dry run asks for the holds a real run takes (and lets go at
        // once): what an apply holds is not listed, as it would not be
        // removed. Held here as an apply holds it: its directory's lock
        // shared, or its outputs in the database.
        let only_ghost = |report: &toolwire::retention::GcReport| {
            assert!(
                report.artifacts_removed.iter().all(|a| !a.contains("/s/")),
                "{report:?}"
            );
            assert!(
                report
                    .artifacts_removed
                    .iter()
                    .any(|a| a.contains("/ghost/")),
                "{report:?}"
            );
        };
        match &objects {
            None => {
                let dir = std::fs::File::open(data_dir.join("sessions/s")).unwrap();
                dir.lock_shared().unwrap();
                only_ghost(&run(true, true).await);
                dir.unlock().unwrap();
            }
            Some(_) => {
                let held = store.outputs_hold("s", false).await.unwrap().unwrap();
                only_ghost(&run(true, true).await);
                held.release().await;
            }
        }
        if objects.is_some() {
            // An apply holding the session's outputs keeps gc off them.
            let held = store.outputs_hold("s", false).await.unwrap().unwrap();
            let report = run(false, true).await;
            assert!(
                report.artifacts_removed.iter().all(|a| !a.contains("/s/")),
                "{report:?}"
            );
            assert_eq!(outputs("s"), ["s-call-0.txt", "stray.txt"]);
            assert!(outputs("ghost").is_empty(), "other sessions are swept");
            held.release().await;

            // And while gc holds them, an apply that writes waits for it.
            let gc_hold = store.outputs_hold("s", true).await.unwrap().unwrap();
            let apply = c.call(
                "budget/apply",
                json!({"sessionId": "s", "messages": conversation("s", 2)}),
            );
            tokio::pin!(apply);
            assert!(
                tokio::time::timeout(Duration::from_secs(1), &mut apply)
                    .await
                    .is_err(),
                "the apply persisted while gc held the session's outputs"
            );
            gc_hold.release().await;
            let reply = apply.await;
            assert_eq!(
                reply["persisted"].as_array().map(Vec::len),
                Some(1),
                "{reply}"
            );
        }
        let dry = run(true, true).await;
        let real = run(false, true).await;
        assert_eq!(real, dry, "a real run removes what the dry run listed");
        // The stray, and the ghost's output unless the held run took it.
        let expected = if objects.is_some() { 1 } else { 2 };
        assert_eq!(real.artifacts_removed.len(), expected, "{real:?}");
        assert!(real.sessions_removed.is_empty());
        let mut kept = vec!["s-call-0.txt".to_owned()];
        if objects.is_some() {
            kept.push("s-call-1.txt".to_owned());
        }
        assert_eq!(outputs("s"), kept, "the referenced outputs stay");
        assert!(outputs("ghost").is_empty());
        if objects.is_none() {
            // Indexes went with their outputs (never named as outputs) and
            // alone when theirs was gone; a kept output's stays.
            assert!(index("s-call-0.txt").exists());
            for gone in [index("stray.txt"), index("gone.txt")] {
                assert!(!gone.exists(), "{}", gone.display());
            }
            let ghost = saved_outputs(&data_dir, "ghost");
            assert!(ghost.is_empty(), "{ghost:?}");
        }
    }
}

/// Clearing on the shared store (PROTOCOL.md 11.3: a clearing is replayed
/// byte for byte on every later turn, retry and replica). Replica A applies
/// a conversation turn by turn until `batch` clearing fires; a retry of that
/// request on A gives the same bytes; replica B, a separate server on the
/// same database (and, with no bucket, the same data directory, as
/// docs/operations.md requires) that never loaded the session, applies the
/// same conversation plus one more turn: everything before that turn is A's
/// reply byte for byte, nothing A cleared is cleared again, and B reads a
/// cleared result back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clearing_is_replayed_byte_for_byte_on_another_replica() {
    let (db, _store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    // Results of about 1 KB stay whole when fresh (no budget decision);
    // three old ones pass the trigger.
    let options = json!({"dataDir": data.path(), "durability": "none",
                         "clearing": {"mode": "batch", "keepRecent": 2,
                                      "minChars": 100, "triggerChars": 2500}});
    let text = |t: usize| format!("line {t} of the build log\n").repeat(40);
    let mut messages = vec![json!({"role": "user", "content": "fix the build"})];
    let turn = |messages: &mut Vec<Value>, t: usize| {
        let id = format!("call-{t}");
        messages.push(tool_use(&id));
        messages.push(tool_result(&id, &text(t)));
    };
    let apply = |messages: &[Value]| json!({"sessionId": "s", "messages": messages});

    let ws_a = tempfile::tempdir().unwrap();
    let (mut a, _task_a) = common::connect(shared_server(&db));
    a.initialize(ws_a.path(), options.clone()).await;
    let mut fired = None;
    for t in 0..8 {
        turn(&mut messages, t);
        let reply = a.call("budget/apply", apply(&messages)).await;
        if reply["cleared"] != json!([]) {
            fired = Some(reply);
            break;
        }
    }
    let first = fired.expect("batch clearing never fired on replica A");
    let cleared: Vec<String> = first["cleared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    // Turn 4: calls 0-2 are old, 3 x 960 chars over the trigger.
    assert_eq!(cleared, ["call-0", "call-1", "call-2"]);
    let sent = first["messages"].as_array().unwrap().clone();
    let bytes = |m: &[Value]| m.iter().map(Value::to_string).collect::<Vec<_>>();
    for id in &cleared {
        let n: usize = id.trim_start_matches("call-").parse().unwrap();
        let preview = sent[2 + 2 * n]["content"][0]["content"].as_str().unwrap();
        assert!(preview.starts_with("<persisted-output>"), "{id}: {preview}");
    }

    // A retry of the same request on A: the same bytes, nothing cleared anew.
    let retry = a.call("budget/apply", apply(&messages)).await;
    assert_eq!(bytes(retry["messages"].as_array().unwrap()), bytes(&sent));
    assert_eq!(retry["cleared"], json!([]));
    assert_eq!(retry["records"], json!([]), "a retry decides nothing anew");

    // Replica B has never loaded the session; it gets one more turn.
    let ws_b = tempfile::tempdir().unwrap();
    let (mut b, _task_b) = common::connect(shared_server(&db));
    b.initialize(ws_b.path(), options).await;
    let before = messages.len();
    turn(&mut messages, before / 2);
    let on_b = b.call("budget/apply", apply(&messages)).await;
    let on_b_messages = on_b["messages"].as_array().unwrap();
    assert_eq!(bytes(&on_b_messages[..before]), bytes(&sent));
    assert_eq!(on_b_messages.len(), before + 2);
    for id in on_b["cleared"].as_array().unwrap() {
        assert!(
            !cleared.iter().any(|c| c == id),
            "B cleared {id} again: A already had"
        );
    }
    // Only call 3 became old (960 chars, under the trigger): B clears
    // nothing and journals no decision; its new turn stays whole.
    assert_eq!(on_b["cleared"], json!([]));
    assert_eq!(on_b["records"], json!([]), "{on_b}");
    assert_eq!(on_b_messages[before + 1], messages[before + 1]);
    // Every cleared result reads back whole on B.
    for id in &cleared {
        let n: usize = id.trim_start_matches("call-").parse().unwrap();
        let read = b
            .call("artifact/read", json!({"sessionId": "s", "toolUseId": id}))
            .await;
        assert_eq!(read["text"], text(n), "{id}");
        assert_eq!(read["totalChars"], text(n).len(), "{id}");
    }
}
