//! Pending pairs on the shared store: three `toolwire serve` replicas (the
//! real binary, JSON-RPC over stdio) on one real PostgreSQL database
//! (tests/common/pg.rs). An assistant turn's calls are appended on one
//! replica and its results on the others, `pair/flush` on a third; every
//! answer and the transcript are those of one local server given the same
//! requests. Two replicas racing the last result commit it once, and a
//! replica SIGKILLed between appends (or in the middle of one) leaves its
//! pending pair to the others, never half a pair.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolwire::store::SharedStore;
use toolwire::store::postgres::Postgres;

const LIMIT: Duration = Duration::from_secs(120);

/// One replica: its own workspace and data directory, the shared database.
struct Replica {
    client: ProcClient,
    child: tokio::process::Child,
    _workspace: tempfile::TempDir,
}

async fn replica(db: &str) -> Replica {
    let workspace = tempfile::tempdir().unwrap();
    let data = workspace.path().join("data");
    std::fs::write(
        workspace.path().join("toolwire.toml"),
        format!(
            "data_dir = {data:?}\nabort_mode = \"synthetic\"\n[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n"
        ),
    )
    .unwrap();
    let (mut client, child) = spawn_binary(workspace.path());
    client.initialize(workspace.path(), json!({})).await;
    Replica {
        client,
        child,
        _workspace: workspace,
    }
}

/// Three replicas on a fresh migrated database, and the database.
async fn fleet() -> (Vec<Replica>, Postgres) {
    let (url, store) = pg::migrated_database();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(replica(&url).await);
    }
    (replicas, store)
}

/// The transcript of `session` as the database holds it: its messages.
async fn stored_messages(store: &Postgres, session: &str) -> Vec<Value> {
    let commits = store.read(session, 0).await.unwrap().unwrap_or_default();
    commits
        .iter()
        .flat_map(|c| std::str::from_utf8(&c.lines).unwrap().lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["type"] == "message")
        .map(|l| l["message"].clone())
        .collect()
}

/// One request of a conversation: which replica gets it (on the fleet),
/// the method and its params.
type Step = (usize, &'static str, Value);

/// A conversation exercising every case of `pair/append` and `pair/flush`
/// (PROTOCOL.md section 6) with calls and results on different replicas.
fn script(session: &str) -> Vec<Step> {
    let s = session;
    let mut steps: Vec<Step> = vec![(
        0,
        "pair/append",
        json!({"sessionId": s, "message": user_text("go")}),
    )];
    // Round robin: each turn's calls on one replica, its two results on
    // the other two, the pending ids read from the third.
    for turn in 0..6 {
        let (a, b) = (format!("a{turn}"), format!("b{turn}"));
        let on = turn % 3;
        steps.push((
            on,
            "pair/append",
            json!({"sessionId": s, "message": assistant_calls(&[&a, &b])}),
        ));
        steps.push((
            (on + 1) % 3,
            "pair/append",
            json!({"sessionId": s, "message": results(&[(&a, "one")])}),
        ));
        steps.push(((on + 2) % 3, "state/get", json!({"sessionId": s})));
        // A result already answered, and one nobody called: -32010, the
        // pair stays as it is.
        steps.push((
            (on + 2) % 3,
            "pair/append",
            json!({"sessionId": s, "message": results(&[(&a, "again")])}),
        ));
        steps.push((
            (on + 1) % 3,
            "pair/append",
            json!({"sessionId": s, "message": results(&[("nobody", "x")])}),
        ));
        steps.push((
            (on + 2) % 3,
            "pair/append",
            json!({"sessionId": s, "message": results(&[(&b, "two")])}),
        ));
    }
    // An interruption: calls on one replica, a new user message on another
    // closes them with synthetic errors (the configured abort mode).
    steps.push((
        1,
        "pair/append",
        json!({"sessionId": s, "message": assistant_calls(&["i1"])}),
    ));
    steps.push((
        2,
        "pair/append",
        json!({"sessionId": s, "message": user_text("never mind")}),
    ));
    // A flush on a third replica of calls appended and half answered on
    // the other two.
    steps.push((
        0,
        "pair/append",
        json!({"sessionId": s, "message": assistant_calls(&["f1", "f2"])}),
    ));
    steps.push((
        1,
        "pair/append",
        json!({"sessionId": s, "message": results(&[("f1", "done")])}),
    ));
    steps.push((
        2,
        "pair/flush",
        json!({"sessionId": s, "mode": "discard", "reason": "user abort"}),
    ));
    steps.push((0, "pair/flush", json!({"sessionId": s})));
    // A late result of the discarded pair answers nothing.
    steps.push((
        0,
        "pair/append",
        json!({"sessionId": s, "message": results(&[("f2", "late")])}),
    ));
    for on in 0..3 {
        steps.push((on, "state/get", json!({"sessionId": s})));
    }
    steps
}

/// The answer to one request: its result, or its error's code and kind.
async fn answer<R, W>(client: &mut Client<R, W>, method: &str, params: Value) -> Value
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    match client.request(method, params).await {
        Ok(result) => result,
        Err(error) => json!({"error": error["code"], "kind": error["data"]["kind"]}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairs_spread_over_replicas_behave_as_on_one_local_server() {
    tokio::time::timeout(LIMIT, async {
        // The same requests on one local server.
        let local_dir = tempfile::tempdir().unwrap();
        std::fs::write(
            local_dir.path().join("toolwire.toml"),
            "abort_mode = \"synthetic\"\n",
        )
        .unwrap();
        let (mut local, _local_child) = spawn_binary(local_dir.path());
        local.initialize(local_dir.path(), json!({})).await;
        let mut expected = Vec::new();
        for (_, method, params) in script("conv") {
            expected.push(answer(&mut local, method, params).await);
        }
        local.close().await;
        let local_messages =
            transcript_messages(&local_dir.path().join(".toolwire/sessions/conv.jsonl"));

        let (mut replicas, store) = fleet().await;
        let mut got = Vec::new();
        for (on, method, params) in script("conv") {
            got.push(answer(&mut replicas[on].client, method, params).await);
        }
        for (i, (step, (want, have))) in script("conv")
            .iter()
            .zip(expected.iter().zip(&got))
            .enumerate()
        {
            let (want, have) = match step.1 {
                // `seenIds` of a shared session include the results of
                // the pairs it read back from the database, as a local
                // session's do once loaded from its file again (not while
                // it stays in memory): the pending pair is what is compared.
                "state/get" => (&want["pending"], &have["pending"]),
                _ => (want, have),
            };
            assert_eq!(
                have, want,
                "step {i} ({} on replica {}) answers as on one server",
                step.1, step.0
            );
        }
        let states: Vec<&Value> = got.iter().rev().take(3).collect();
        assert!(
            states.iter().all(|s| s == &states[0]),
            "every replica's state is the same: {states:?}"
        );
        // The answers cover every case: committed pairs, errors, both
        // kinds of flush.
        assert!(got.iter().any(|a| a["error"] == json!(-32010)));
        assert!(
            got.iter()
                .any(|a| a["status"] == "committed" && a["written"] == json!(3))
        );
        assert!(
            got.iter()
                .any(|a| a["flushed"]["synthesized"] == json!(["i1"]))
        );
        assert!(got.iter().any(|a| a["discarded"] == json!(["f1", "f2"])));

        let messages = stored_messages(&store, "conv").await;
        assert_eq!(
            messages, local_messages,
            "the same transcript as one local server"
        );
        assert_paired(&messages);
        for r in replicas {
            r.client.close().await;
        }
    })
    .await
    .expect("within the time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_the_last_result_commit_it_once() {
    tokio::time::timeout(LIMIT, async {
        let (mut replicas, store) = fleet().await;
        for round in 0..8 {
            let session = format!("race{round}");
            let call = format!("r{round}");
            let calls = json!({"sessionId": session, "message": assistant_calls(&[&call])});
            replicas[0].client.call("pair/append", calls).await;
            // The same last result sent to two replicas at once.
            let last = json!({"sessionId": session, "message": results(&[(&call, "out")])});
            let (b, c) = replicas.split_at_mut(2);
            let (first, second) = tokio::join!(
                answer(&mut b[1].client, "pair/append", last.clone()),
                answer(&mut c[0].client, "pair/append", last),
            );
            let committed = [&first, &second]
                .iter()
                .filter(|a| a["status"] == "committed")
                .count();
            let refused = [&first, &second]
                .iter()
                .filter(|a| a["error"] == json!(-32010))
                .count();
            assert_eq!(
                (committed, refused),
                (1, 1),
                "one commit, the other result unknown: {first} {second}"
            );
            let messages = stored_messages(&store, &session).await;
            assert_eq!(
                messages,
                vec![assistant_calls(&[&call]), results(&[(&call, "out")])],
                "the pair once"
            );
            for r in replicas.iter_mut() {
                let state = r
                    .client
                    .call("state/get", json!({"sessionId": session}))
                    .await;
                assert_eq!(state["pending"], json!([]));
            }
        }
        for r in replicas {
            r.client.close().await;
        }
    })
    .await
    .expect("within the time limit");
}

/// Kill a replica with SIGKILL: no flush, no goodbye.
fn kill(replica: &mut Replica) {
    let pid = replica.child.id().expect("running") as i32;
    // SAFETY: killing the replica this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_between_appends_leaves_its_pending_pair_to_the_others() {
    tokio::time::timeout(LIMIT, async {
        let (url, store) = pg::migrated_database();
        let mut a = replica(&url).await;
        let mut b = replica(&url).await;
        let mut c = replica(&url).await;
        a.client
            .call(
                "pair/append",
                json!({"sessionId": "k", "message": assistant_calls(&["k1", "k2"])}),
            )
            .await;
        b.client
            .call(
                "pair/append",
                json!({"sessionId": "k", "message": results(&[("k1", "one")])}),
            )
            .await;
        kill(&mut a);
        a.child.wait().await.unwrap();
        let state = c.client.call("state/get", json!({"sessionId": "k"})).await;
        assert_eq!(
            state["pending"],
            json!(["k2"]),
            "the pair survives its replica"
        );
        let r = c
            .client
            .call(
                "pair/append",
                json!({"sessionId": "k", "message": results(&[("k2", "two")])}),
            )
            .await;
        assert_eq!(
            r,
            json!({"status": "committed", "pending": [], "written": 3})
        );
        let messages = stored_messages(&store, "k").await;
        assert_eq!(
            messages,
            vec![
                assistant_calls(&["k1", "k2"]),
                results(&[("k1", "one")]),
                results(&[("k2", "two")])
            ]
        );
        assert_paired(&messages);

        // Killed in the middle of the last result's append: the pair is
        // either whole in the transcript or still pending, never half.
        for round in 0..4 {
            let session = format!("mid{round}");
            let mut d = replica(&url).await;
            b.client
                .call(
                    "pair/append",
                    json!({"sessionId": session, "message": assistant_calls(&["m1"])}),
                )
                .await;
            let id = d
                .client
                .start(
                    "pair/append",
                    json!({"sessionId": session, "message": results(&[("m1", "out")])}),
                )
                .await;
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(round * 3)).await;
            }
            kill(&mut d);
            d.child.wait().await.unwrap();
            let _ = id;
            // The killed replica may have sent its COMMIT already: the
            // database then finishes it after the process is gone, at any
            // moment of the reads below. The pair only ever goes from
            // pending to whole, so a transcript read the same before and
            // after the `state/get` pins the state that `state/get` saw.
            let (messages, pending) = loop {
                let before = stored_messages(&store, &session).await;
                let pending = b
                    .client
                    .call("state/get", json!({"sessionId": session}))
                    .await["pending"]
                    .clone();
                let after = stored_messages(&store, &session).await;
                if before == after {
                    break (after, pending);
                }
                assert_eq!(
                    (before.len(), after.len()),
                    (0, 2),
                    "the pair went from pending to whole, never through half"
                );
            };
            match messages.len() {
                2 => assert_eq!(pending, json!([]), "committed whole"),
                0 => {
                    assert_eq!(pending, json!(["m1"]), "still pending, nothing committed");
                    let r = c
                        .client
                        .request(
                            "pair/append",
                            json!({"sessionId": session, "message": results(&[("m1", "out")])}),
                        )
                        .await;
                    match r {
                        Ok(r) => assert_eq!(r["status"], "committed"),
                        // The killed replica had sent its COMMIT: the
                        // database may finish it after the process is gone
                        // and after the reads above. Then the pair is
                        // whole (checked below) and nothing is pending.
                        Err(err) => assert_eq!(err["code"], -32010, "{err}"),
                    }
                }
                n => panic!("{n} messages: half a pair"),
            }
            let messages = stored_messages(&store, &session).await;
            assert_eq!(
                messages,
                vec![assistant_calls(&["m1"]), results(&[("m1", "out")])]
            );
        }
        for r in [b, c] {
            r.client.close().await;
        }
    })
    .await
    .expect("within the time limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_pending_pairs_is_refused_until_migrated() {
    tokio::time::timeout(LIMIT, async {
        // A database a toolwire before pending pairs migrated: version 1.
        let url = pg::fresh_database();
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let (version, sql) = toolwire::store::postgres::MIGRATIONS[0];
        assert_eq!(version, 1);
        client
            .batch_execute(&format!(
                "CREATE TABLE toolwire_schema_migrations (version integer PRIMARY KEY,
                    applied_at timestamptz NOT NULL DEFAULT now());
                 {sql}
                 INSERT INTO toolwire_schema_migrations (version) VALUES (1);"
            ))
            .await
            .unwrap();
        let store = Postgres::connect(&url, 2).unwrap();
        let err = store.check_schema().await.unwrap_err().to_string();
        let latest = toolwire::store::postgres::MIGRATIONS.last().unwrap().0;
        assert!(
            err.contains(&format!(
                "at version 1 and this toolwire needs {latest}: run `toolwire migrate`"
            )),
            "{err}"
        );
        // `toolwire migrate`, the real command, brings it up to date.
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(
            workspace.path().join("toolwire.toml"),
            format!("[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {url:?}\n"),
        )
        .unwrap();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .args(["migrate", "--workspace"])
            .arg(workspace.path())
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        store.check_schema().await.unwrap();
        // And a replica on it keeps pending pairs.
        let mut r = replica(&url).await;
        let a = r
            .client
            .call(
                "pair/append",
                json!({"sessionId": "m", "message": assistant_calls(&["x"])}),
            )
            .await;
        assert_eq!(a["pending"], json!(["x"]));
        r.client.close().await;
    })
    .await
    .expect("within the time limit");
}
