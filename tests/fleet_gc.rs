//! gc on the shared store against live replicas (PROTOCOL.md 11.1: a reply
//! never names an output gc removed, on any store). Real PostgreSQL
//! (tests/common/pg.rs) and a real S3 server (moto, tests/common/s3.rs) for
//! saved outputs; replicas are in-process servers and a real `serve`
//! process. Races are pinned with PostgreSQL's own locks (a transaction
//! holding a table lock, the lock table showing who waits), never sleeps.

mod common;
#[path = "common/s3.rs"]
mod s3;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::pg::{HELD_ADVISORY, WAITING_ADVISORY, WAITING_TABLE, sql, wait_for_locks};

use serde_json::{Value, json};
use toolwire::artifact::objects::ObjectArtifacts;
use toolwire::retention::{GcReport, Policy};
use toolwire::server::Server;
use toolwire::store::SharedStore;
use toolwire::store::postgres::Postgres;

/// An in-process replica on `db` (its own pool) and a client of it,
/// initialized with saved outputs in `objects` (under `data_dir` without).
async fn replica(
    db: &str,
    data_dir: &Path,
    objects: Option<&Value>,
) -> (Arc<Server>, common::MemClient, tempfile::TempDir) {
    let server = Server::new(toolwire::session::Storage {
        shared: Some(Arc::new(Postgres::connect(db, 8).unwrap())),
        ..Default::default()
    });
    let (mut c, _task) = common::connect(server.clone());
    let ws = tempfile::tempdir().unwrap();
    let mut params =
        json!({"dataDir": data_dir, "durability": "none", "limits": {"maxResultChars": 1000}});
    if let Some(objects) = objects {
        params["storage"] = json!({ "objects": objects });
    }
    c.initialize(ws.path(), params).await;
    (server, c, ws)
}

fn call(id: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": id}}]})
}

fn result(id: &str) -> Value {
    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
           "content": format!("{id}: {}", "o".repeat(30_000))}]})
}

/// A conversation whose calls `ids` each got a 30 KB result.
fn conversation(ids: &[String]) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": "fix the build"})];
    for id in ids {
        messages.push(call(id));
        messages.push(result(id));
    }
    messages
}

fn ids(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The URLs of the saved outputs the previews of `messages` name.
fn previews(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| {
            let text = b["content"].as_str()?;
            let url = text.split("Full output saved to: ").nth(1)?;
            Some(url.lines().next()?.to_owned())
        })
        .collect()
}

/// Assert every URL in `urls` is an object of `bucket` that exists now.
fn assert_objects_exist(s3: &s3::S3Server, bucket: &str, urls: &[String], what: &str) {
    for url in urls {
        let key = url
            .strip_prefix(&format!("s3://{bucket}/"))
            .unwrap_or_else(|| panic!("{what}: not an object of the bucket: {url}"));
        assert!(
            s3.keys(bucket, key).iter().any(|k| k == key),
            "{what}: a preview names a removed object: {url}"
        );
    }
}

/// The ids with a replacement in the store's decisions for `session`.
async fn replaced_ids(store: &Postgres, session: &str) -> Vec<String> {
    let commits = store.read(session, 0).await.unwrap().unwrap_or_default();
    let mut ids: Vec<String> = commits
        .iter()
        .flat_map(|c| c.lines.split(|b| *b == b'\n'))
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).unwrap())
        .filter(|l| l["type"] == "replacement")
        .map(|l| l["record"]["toolUseId"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// gc over `db` and the bucket by a policy that finds every session
/// expired (a day past `max_age_days = 1`, and past the grace period).
async fn gc_all(store: &Postgres, data_dir: &Path, objects: &Arc<ObjectArtifacts>) -> GcReport {
    let policy = Policy {
        max_age: Some(Duration::from_secs(86_400)),
        max_total_bytes: None,
        grace: toolwire::retention::GRACE,
        now: SystemTime::now() + Duration::from_secs(2 * 86_400),
    };
    toolwire::store::postgres::gc::collect(store, data_dir, Some(objects.clone()), &policy, false)
        .await
        .unwrap()
}

fn open_objects(config: &Value) -> Arc<ObjectArtifacts> {
    ObjectArtifacts::open(&serde_json::from_value(config.clone()).unwrap()).unwrap()
}

/// Issue 32, item 1. Replica A saved `o1` for session S; S expired; gc
/// starts and is held at its row deletion (a transaction holds
/// `toolwire_decisions` in SHARE ROW EXCLUSIVE mode) while a fresh replica
/// B applies S with `o1` and a new result. B waits for gc, then decides
/// afresh: both previews name objects that exist, the database holds both
/// decisions, and `artifact/read` of `o1` reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_apply_racing_gc_on_the_shared_store_decides_afresh_and_names_no_removed_object() {
    const BUCKET: &str = "gc-race";
    let f = &s3::SharedFixture::start(BUCKET, "race", common::pg::migrated_database());
    let (s3, objects, db, store) = (&f.s3, &f.objects, &f.db, &f.store);
    let data_dir = &f.data_dir;
    let sql = sql(db).await;

    let (a, mut ca, _wa) = replica(db, data_dir, Some(objects)).await;
    let first = ca
        .call(
            "budget/apply",
            json!({"sessionId": "S", "messages": conversation(&ids(&["o1"]))}),
        )
        .await;
    assert_eq!(
        first["persisted"].as_array().map(Vec::len),
        Some(1),
        "{first}"
    );
    // A lets go of S (as an idle replica does), and S expires.
    common::pg::unload(&a, db).await;
    sql.execute(
        "UPDATE toolwire_sessions SET last_write_at = now() - interval '30 days' WHERE session = 'S'",
        &[],
    )
    .await
    .unwrap();

    // gc, held at its row deletion.
    let blocker = common::pg::sql(db).await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE toolwire_decisions IN SHARE ROW EXCLUSIVE MODE")
        .await
        .unwrap();
    let gc_store = Postgres::connect(db, 4).unwrap();
    let gc_objects = open_objects(objects);
    let gc_dir = data_dir.clone();
    let gc = tokio::spawn(async move { gc_all(&gc_store, &gc_dir, &gc_objects).await });
    wait_for_locks(&sql, WAITING_TABLE, false).await;

    // B applies S with o1 and a new result while gc is held; once B is
    // seen waiting, gc is let go.
    let (_b, mut cb, _wb) = replica(db, data_dir, Some(objects)).await;
    let (reply, report) = tokio::join!(
        cb.call(
            "budget/apply",
            json!({"sessionId": "S", "messages": conversation(&ids(&["o1", "o2"]))}),
        ),
        async {
            wait_for_locks(&sql, WAITING_ADVISORY, false).await;
            blocker.batch_execute("COMMIT").await.unwrap();
            gc.await.unwrap()
        }
    );
    assert_eq!(report.sessions_removed, ["S"], "{report:?}");
    let named = previews(&reply["messages"]);
    assert_eq!(named.len(), 2, "{reply}");
    assert_objects_exist(s3, BUCKET, &named, "after the race");
    assert_eq!(
        reply["persisted"].as_array().map(Vec::len),
        Some(2),
        "o1 was decided afresh: {reply}"
    );
    assert_eq!(replaced_ids(store, "S").await, ["o1", "o2"]);
    let page = cb
        .call(
            "artifact/read",
            json!({"sessionId": "S", "toolUseId": "o1"}),
        )
        .await;
    assert!(
        page["text"].as_str().unwrap().starts_with("o1: ooo"),
        "{page}"
    );
}

/// Issue 32, item 2. A `serve` replica (the real binary) has session
/// "live-old" loaded; `toolwire gc` from another workspace with
/// `max_total_bytes = 100000` leaves it (and the replica's other session)
/// in place, and the replica's next reply names objects that exist and are
/// journaled. Once the replica is gone, the same gc removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_from_another_workspace_keeps_the_sessions_a_serve_replica_holds_loaded() {
    const BUCKET: &str = "gc-live";
    let f = &s3::SharedFixture::start(BUCKET, "live", common::pg::migrated_database());
    let (s3, objects, db, store) = (&f.s3, &f.objects, &f.db, &f.store);
    let sql = sql(db).await;
    let toml = |data_dir: &Path, extra: &str| {
        let o = &objects["options"];
        format!(
            "data_dir = {data:?}\ndurability = \"none\"\n[limits]\nmax_result_chars = 1000\n\
             [storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n\
             [storage.objects]\nurl = {url:?}\n[storage.objects.options]\nendpoint = {endpoint:?}\n\
             region = \"us-east-1\"\nallow_http = true\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n{extra}",
            data = data_dir.display().to_string(),
            url = objects["url"].as_str().unwrap(),
            endpoint = o["endpoint"].as_str().unwrap(),
        )
    };
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("toolwire.toml"), toml(data.path(), "")).unwrap();
    let (mut replica, mut child) = common::spawn_binary(ws.path());
    replica.initialize(ws.path(), json!({})).await;
    for session in ["live-old", "live-new"] {
        let reply = replica
            .call(
                "budget/apply",
                json!({"sessionId": session, "messages": conversation(&ids(&[&format!("{session}-1"), &format!("{session}-2")]))}),
            )
            .await;
        assert_eq!(
            reply["persisted"].as_array().map(Vec::len),
            Some(2),
            "{reply}"
        );
    }

    // gc from another workspace, with a data directory of its own.
    let other = tempfile::tempdir().unwrap();
    let gc_ws = tempfile::tempdir().unwrap();
    std::fs::write(
        gc_ws.path().join("toolwire.toml"),
        toml(other.path(), "[retention]\nmax_total_bytes = 100_000\n"),
    )
    .unwrap();
    let gc = || {
        let out = common::output_ok(
            std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
                .args(["gc", "--json", "--workspace"])
                .arg(gc_ws.path()),
        );
        serde_json::from_slice::<Value>(&out).unwrap()
    };
    let report = gc();
    assert_eq!(report["sessionsRemoved"], json!([]), "{report}");

    // The replica goes on with live-old: the outputs it replays exist.
    let ids3 = ids(&["live-old-1", "live-old-2", "live-old-3"]);
    let reply = replica
        .call(
            "budget/apply",
            json!({"sessionId": "live-old", "messages": conversation(&ids3)}),
        )
        .await;
    let named = previews(&reply["messages"]);
    assert_eq!(named.len(), 3, "{reply}");
    assert_objects_exist(s3, BUCKET, &named, "after gc");
    assert_eq!(replaced_ids(store, "live-old").await, ids3);

    // Without the replica nothing holds them: over the cap, the least
    // recently written goes.
    child.kill().await.unwrap();
    wait_for_locks(&sql, HELD_ADVISORY, true).await;
    let report = gc();
    assert_eq!(report["sessionsRemoved"], json!(["live-new"]), "{report}");
    assert!(store.read("live-new", 0).await.unwrap().is_none());
}

/// gc in a loop against a stream of applies on the same sessions across
/// two replicas, each turn adding a result to one of three sessions. Every
/// round runs one gc (finding every session expired) at the same time as
/// one apply; every third round both replicas first let go of what they
/// hold, so gc removes the sessions nobody is applying and races the apply
/// for the one being applied. After every reply, with no gc running, every
/// preview it sent names an object that exists. Bounded: 36 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gc_in_a_loop_against_two_replicas_applying_never_leaves_a_preview_without_its_object() {
    const BUCKET: &str = "gc-stress";
    const ROUNDS: usize = 36;
    let f = &s3::SharedFixture::start(BUCKET, "stress", common::pg::migrated_database());
    let (s3, objects, db, store) = (&f.s3, &f.objects, &f.db, &f.store);
    let data_dir = &f.data_dir;
    let gc_objects = open_objects(objects);
    let (a, mut ca, _wa) = replica(db, data_dir, Some(objects)).await;
    let (b, mut cb, _wb) = replica(db, data_dir, Some(objects)).await;

    let sessions = ["s0", "s1", "s2"];
    let mut calls: Vec<Vec<String>> = vec![Vec::new(); sessions.len()];
    let mut removed = 0;
    let mut reapplied_after_removal = 0;
    let mut gone = std::collections::HashSet::new();
    for round in 0..ROUNDS {
        if round % 3 == 0 {
            a.registry.close_all().await;
            common::pg::unload(&b, db).await;
        }
        let s = round % sessions.len();
        let session = sessions[s];
        calls[s].push(format!("{session}-{round}"));
        // Keep the conversation bounded: the last four calls.
        let from = calls[s].len().saturating_sub(4);
        let messages = conversation(&calls[s][from..]);
        let client = if round % 2 == 0 { &mut ca } else { &mut cb };
        let (reply, report) = tokio::join!(
            client.call(
                "budget/apply",
                json!({"sessionId": session, "messages": messages}),
            ),
            gc_all(store, data_dir, &gc_objects)
        );
        let named = previews(&reply["messages"]);
        assert!(!named.is_empty(), "round {round}: {reply}");
        assert_objects_exist(s3, BUCKET, &named, &format!("round {round} ({session})"));
        if gone.remove(session) {
            reapplied_after_removal += 1;
        }
        removed += report.sessions_removed.len();
        gone.extend(report.sessions_removed.iter().cloned());
    }
    assert!(
        removed > 0,
        "gc never removed a session: the loop raced nothing"
    );
    assert!(
        reapplied_after_removal > 0,
        "no session was applied again after gc removed it"
    );
}

/// A saved output that only another session's decision points at (as a
/// decision bound to an inherited replacement names its parent's output)
/// is referenced: the sweep, which reads each session's own references
/// when it comes to it and holds only those across sessions, keeps it in a
/// dry run and a real one alike, and removes it once nothing points at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_only_another_sessions_decision_points_at_is_kept() {
    let (db, store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().canonicalize().unwrap();
    let (_server, mut c, _ws) = replica(&db, &data_dir, None).await;
    for session in ["a", "b"] {
        let messages = conversation(&ids(&[&format!("{session}-1")]));
        let reply = c
            .call(
                "budget/apply",
                json!({"sessionId": session, "messages": messages}),
            )
            .await;
        assert_eq!(reply["persisted"].as_array().map(Vec::len), Some(1));
    }
    // An output of `a` that none of a's decisions names, and a decision of
    // `b` that names it.
    let shared = data_dir.join("sessions/a/tool-results/shared.txt");
    std::fs::write(&shared, "pointed at from b").unwrap();
    let preview = format!(
        "<persisted-output>\nOutput too large (17 bytes). Full output saved to: {}\n\nPreview (first 17 bytes):\npointed at from b\n</persisted-output>",
        shared.display()
    );
    let client = sql(&db).await;
    client
        .execute(
            "INSERT INTO toolwire_decisions (session, tool_use_id, digest, replacement)
             VALUES ('b', 'inherited'::bytea, '', $1)",
            &[&preview.as_bytes()],
        )
        .await
        .unwrap();

    let run = |dry_run: bool| {
        let (store, data_dir) = (&store, &data_dir);
        async move {
            let policy = Policy {
                max_age: None,
                max_total_bytes: None,
                grace: toolwire::retention::GRACE,
                // Past the grace period of everything written so far.
                now: SystemTime::now() + 2 * toolwire::retention::GRACE,
            };
            toolwire::store::postgres::gc::collect(store, data_dir, None, &policy, dry_run)
                .await
                .unwrap()
        }
    };
    let dry = run(true).await;
    let real = run(false).await;
    assert_eq!(real, dry, "a real run removes what the dry run listed");
    assert!(real.artifacts_removed.is_empty(), "{real:?}");
    assert!(shared.exists(), "b's decision keeps a's output");

    client
        .execute(
            "DELETE FROM toolwire_decisions WHERE session = 'b' AND tool_use_id = 'inherited'::bytea",
            &[],
        )
        .await
        .unwrap();
    let real = run(false).await;
    assert_eq!(real.artifacts_removed, [shared.display().to_string()]);
    assert!(!shared.exists());
    assert_eq!(real.kept, 2);
}

/// The same with `previews = "mcp"`: decisions name links, not files, and
/// a session's link is the id its tenant knows (`a` for `alice.a`). gc on
/// the shared store keeps what a session's own links and another session
/// of its tenant's links name, and removes an orphan beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_that_link_previews_name_are_kept() {
    let (db, store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().canonicalize().unwrap();
    let (_server, mut c, _ws) = replica(&db, &data_dir, None).await;
    for session in ["a", "b"] {
        let messages = conversation(&ids(&[&format!("{session}-1")]));
        let reply = c
            .call(
                "budget/apply",
                json!({"sessionId": format!("alice.{session}"), "linkSession": session, "messages": messages}),
            )
            .await;
        let preview = reply["messages"][2]["content"][0]["content"]
            .as_str()
            .unwrap();
        assert!(
            preview.contains(&format!(
                "saved as toolwire://saved-output/{session}/{session}-1 "
            )),
            "{preview}"
        );
    }
    // An output of `alice.a` none of its decisions names, which a decision
    // of `alice.b` links to; and one nothing links to.
    let results = data_dir.join("sessions/alice.a/tool-results");
    let inherited = results.join("inherited.txt");
    let orphan = results.join("orphan.txt");
    for file in [&inherited, &orphan] {
        std::fs::write(file, "pointed at from b, or not").unwrap();
    }
    let preview = "<persisted-output>\nOutput too large (25 bytes). Full output saved as toolwire://saved-output/a/inherited - read it with the read_saved_output tool (MCP server toolwire).\n\nPreview (first 25 bytes):\npointed at from b, or not\n</persisted-output>";
    let client = sql(&db).await;
    client
        .execute(
            "INSERT INTO toolwire_decisions (session, tool_use_id, digest, replacement)
             VALUES ('alice.b', 'inherited'::bytea, '', $1)",
            &[&preview.as_bytes()],
        )
        .await
        .unwrap();
    let policy = Policy {
        max_age: None,
        max_total_bytes: None,
        grace: toolwire::retention::GRACE,
        now: SystemTime::now() + 2 * toolwire::retention::GRACE,
    };
    let real = toolwire::store::postgres::gc::collect(&store, &data_dir, None, &policy, false)
        .await
        .unwrap();
    assert_eq!(real.artifacts_removed, [orphan.display().to_string()]);
    assert!(inherited.exists(), "alice.b's link keeps alice.a's output");
    assert!(results.join("a-1.txt").exists(), "alice.a's own link");
    assert!(
        data_dir
            .join("sessions/alice.b/tool-results/b-1.txt")
            .exists(),
        "alice.b's own link"
    );
}
