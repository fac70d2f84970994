//! Idle sessions leave memory (PROTOCOL.md 10.1) and lose nothing by it:
//! every kind of state a session holds is there again after its eviction,
//! what lives only in memory either stays or is journaled first, and
//! requests racing an eviction keep their order.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use toolwire::protocol::SessionId;
use toolwire::server::Server;
use toolwire::session::Storage;

/// A server whose sessions are idle after `idle_ms`, and a client of it.
async fn start(idle_ms: u64) -> (tempfile::TempDir, Arc<Server>, MemClient) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::with_session_idle(Storage::default(), Duration::from_millis(idle_ms));
    let (mut c, _task) = connect(server.clone());
    c.initialize(
        dir.path(),
        json!({"durability": "none", "limits": {"maxResultChars": 100, "previewChars": 20}}),
    )
    .await;
    (dir, server, c)
}

/// Wait until the registry holds `n` sessions (idle ones evicted).
async fn settle_to(server: &Server, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let count = server.registry.session_count();
        if count == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the registry still holds {count} sessions, expected {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn resident(server: &Server, dir: &std::path::Path, id: &str) -> bool {
    let data_dir = std::fs::canonicalize(dir).unwrap().join(".toolwire");
    let id = SessionId::try_from(id.to_owned()).unwrap();
    server.registry.existing(&data_dir, &id).is_some()
}

fn big(id: &str, size: usize) -> Value {
    results(&[(id, &"x".repeat(size))])
}

async fn get(c: &mut MemClient, id: &str) -> Value {
    c.call("state/get", json!({"sessionId": id})).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_state_is_there_after_eviction() {
    let (dir, server, mut c) = start(30).await;
    let sessions = dir.path().join(".toolwire/sessions");

    // Decisions of a harness that only budgets: journaled by budget/apply.
    let budget_msgs = json!([
        assistant_calls(&["b1", "b2"]),
        results(&[("b1", &"y".repeat(500)), ("b2", "small")])
    ]);
    let budgeted = c
        .call(
            "budget/apply",
            json!({"sessionId": "budget-only", "messages": budget_msgs}),
        )
        .await;
    // A paired transcript.
    for m in [
        user_text("hi"),
        assistant_calls(&["p1"]),
        results(&[("p1", "done")]),
    ] {
        c.call("pair/append", json!({"sessionId": "paired", "message": m}))
            .await;
    }
    // A session with nothing in it.
    c.call(
        "budget/apply",
        json!({"sessionId": "blank", "messages": [user_text("no tools")]}),
    )
    .await;
    // State that lives only in memory: reconstructed from messages, with a
    // client's record and an inherited replacement, and no transcript.
    c.call(
        "state/reconstruct",
        json!({
            "sessionId": "recon",
            "messages": [assistant_calls(&["r1", "r2", "r3"]), results(&[("r1", "one"), ("r2", "two"), ("r3", "three")])],
            "records": [{"kind": "tool-result", "toolUseId": "r1", "replacement": "<persisted-output>r1</persisted-output>"}],
            "inheritedReplacements": {"r2": "<persisted-output>r2</persisted-output>"},
        }),
    )
    .await;
    // A fork without its transcript: the state is a copy in memory.
    c.call(
        "state/fork",
        json!({"sessionId": "budget-only", "newSessionId": "bare-fork", "copyTranscript": false}),
    )
    .await;
    // Reconstructed with the name of a call not answered yet (no line
    // holds it): stays in memory.
    c.call(
        "state/reconstruct",
        json!({"sessionId": "named", "messages": [assistant_tool("n1", "Secret")]}),
    )
    .await;
    // Reconstructed over a transcript that says otherwise: stays.
    c.call(
        "budget/apply",
        json!({"sessionId": "over", "messages": [assistant_calls(&["o1"]), big("o1", 500)]}),
    )
    .await;
    c.call(
        "state/reconstruct",
        json!({"sessionId": "over", "messages": [assistant_calls(&["o2"]), results(&[("o2", "other")])]}),
    )
    .await;
    // A pair pending in the guard: stays.
    c.call(
        "pair/append",
        json!({"sessionId": "pending", "message": assistant_calls(&["q1", "q2"])}),
    )
    .await;

    let ids = [
        "budget-only",
        "paired",
        "blank",
        "recon",
        "bare-fork",
        "named",
        "over",
        "pending",
    ];
    let mut before = Vec::new();
    for id in ids {
        before.push(get(&mut c, id).await);
    }

    settle_to(&server, 3).await;
    for id in ["named", "over", "pending"] {
        assert!(resident(&server, dir.path(), id), "{id} was evicted");
    }
    // Memory-only state without a transcript was journaled on its way out.
    assert!(sessions.join("recon.jsonl").exists());
    assert!(sessions.join("bare-fork.jsonl").exists());
    for (id, was) in ids.iter().zip(&before) {
        if *id == "paired" {
            // Loaded again as on a restart: the committed results of its
            // transcript are seen (its messages were never budgeted here).
            assert_eq!(get(&mut c, id).await["seenIds"], json!(["p1"]));
            continue;
        }
        assert_eq!(&get(&mut c, id).await, was, "state of {id} after eviction");
    }
    assert_eq!(
        transcript_messages(&sessions.join("paired.jsonl")).len(),
        3,
        "the paired transcript is whole"
    );

    // Budget-only decisions replay byte for byte, deciding nothing new.
    let again = c
        .call(
            "budget/apply",
            json!({"sessionId": "budget-only", "messages": budget_msgs}),
        )
        .await;
    assert_eq!(again["messages"], budgeted["messages"]);
    assert_eq!(again["records"], json!([]));
    // The reconstructed replacements are put back.
    let recon = c
        .call(
            "budget/apply",
            json!({"sessionId": "recon", "messages": [assistant_calls(&["r1", "r2", "r3"]), results(&[("r1", "one"), ("r2", "two"), ("r3", "three")])]}),
        )
        .await;
    let blocks = &recon["messages"][1]["content"];
    assert_eq!(
        blocks[0]["content"],
        json!("<persisted-output>r1</persisted-output>")
    );
    assert_eq!(
        blocks[1]["content"],
        json!("<persisted-output>r2</persisted-output>")
    );
    assert_eq!(blocks[2]["content"], json!("three"));
    assert_eq!(recon["records"], json!([]));
    // The kept name still makes its tool's result exempt.
    let named = c
        .call(
            "budget/apply",
            json!({"sessionId": "named", "messages": [big("n1", 500)], "tools": {"Secret": {"maxResultChars": null}}}),
        )
        .await;
    assert_eq!(named["persisted"], json!([]));
    // The pending pair completes, then its session goes too.
    let done = c
        .call(
            "pair/append",
            json!({"sessionId": "pending", "message": results(&[("q1", "a"), ("q2", "b")])}),
        )
        .await;
    assert_eq!(done["status"], json!("committed"));
    assert_paired(&transcript_messages(&sessions.join("pending.jsonl")));
    settle_to(&server, 2).await;
    assert!(resident(&server, dir.path(), "over"));
}

/// Requests sent while their session is being evicted and started again,
/// over and over: each takes effect in the order sent and sees every
/// decision made before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_racing_eviction_keep_their_order() {
    let (dir, server, mut c) = start(1).await;
    let data_dir = std::fs::canonicalize(dir.path()).unwrap().join(".toolwire");
    let budget_msgs = json!([assistant_calls(&["z1"]), big("z1", 1000)]);
    let first = c
        .call(
            "budget/apply",
            json!({"sessionId": "reapply", "messages": budget_msgs}),
        )
        .await;
    // A handle taken before the evictions, used after them.
    let stale = server.registry.slot(
        &data_dir,
        &SessionId::try_from("reapply".to_owned()).unwrap(),
    );

    let mut rng = fastrand::Rng::with_seed(17);
    let mut appends = Vec::new();
    let mut applies = Vec::new();
    for i in 0..300 {
        appends.push(
            c.start(
                "pair/append",
                json!({"sessionId": "order", "message": user_text(&format!("m{i}"))}),
            )
            .await,
        );
        if i % 3 == 0 {
            applies.push(
                c.start(
                    "budget/apply",
                    json!({"sessionId": "reapply", "messages": budget_msgs}),
                )
                .await,
            );
        }
        if rng.u8(..4) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.u64(0..4))).await;
        }
    }
    for id in appends {
        let r = c.response(id).await;
        assert_eq!(r["result"]["status"], json!("committed"), "{r}");
    }
    for id in applies {
        let r = c.response(id).await;
        assert_eq!(r["result"]["messages"], first["messages"]);
        assert_eq!(r["result"]["records"], json!([]));
    }
    let texts: Vec<Value> = transcript_messages(&data_dir.join("sessions/order.jsonl"))
        .into_iter()
        .map(|m| m["content"].clone())
        .collect();
    let sent: Vec<Value> = (0..300).map(|i| json!(format!("m{i}"))).collect();
    assert_eq!(texts, sent);

    settle_to(&server, 0).await;
    // The registry is read while the job runs: with a 1 ms idle period the
    // session may be evicted again as soon as the job is done.
    let registry = server.clone();
    let (seen, registered) = stale
        .run(move |session| {
            Box::pin(async move {
                let loaded = session.load().await?;
                Ok((loaded.state.seen_count(), registry.registry.session_count()))
            })
        })
        .await
        .unwrap();
    assert_eq!(seen, 1, "the stale handle reached the session as it is");
    assert_eq!(
        registered, 1,
        "through the session's current, registered slot"
    );
}

/// Ten thousand sessions come and go; the registry holds none of them
/// once they are idle, and every one reloads its decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_leave_nothing_behind_when_idle() {
    let (_dir, server, mut c) = start(20).await;
    let n = 1_000;
    let mut ids = Vec::new();
    for i in 0..n {
        // Half decide something (and get a transcript), half do not.
        let messages = if i % 2 == 0 {
            json!([assistant_calls(&["t"]), big("t", 300)])
        } else {
            json!([user_text("hello")])
        };
        ids.push(
            c.start(
                "budget/apply",
                json!({"sessionId": format!("s{i}"), "messages": messages}),
            )
            .await,
        );
    }
    for id in ids {
        let r = c.response(id).await;
        assert!(r.get("error").is_none(), "{r}");
    }
    settle_to(&server, 0).await;
    for i in (0..n).step_by(97) {
        let s = get(&mut c, &format!("s{i}")).await;
        let expected = if i % 2 == 0 { json!(["t"]) } else { json!([]) };
        assert_eq!(s["seenIds"], expected, "s{i}");
    }
    settle_to(&server, 0).await;
}
