//! `state/fork`, `state/reconstruct`, `state/get`, and the replacement
//! invariant under concurrent load.

mod common;

use std::collections::{HashMap, HashSet};

use common::*;
use serde_json::{Value, json};

fn big(id: &str, n: usize) -> Value {
    results(&[(id, &"b".repeat(n))])
}

async fn setup() -> (tempfile::TempDir, MemClient) {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;
    (dir, c)
}

#[tokio::test]
async fn fork_copies_state_then_both_go_their_own_way() {
    let (dir, mut c) = setup().await;
    c.call(
        "pair/append",
        json!({"sessionId": "src", "message": user_text("hello")}),
    )
    .await;
    c.call(
        "budget/apply",
        json!({"sessionId": "src", "messages": [big("t1", 60_000)]}),
    )
    .await;
    let f = c
        .call(
            "state/fork",
            json!({"sessionId": "src", "newSessionId": "dst"}),
        )
        .await;
    assert_eq!(
        f,
        json!({"sessionId": "dst", "seenCount": 1, "replacementCount": 1})
    );
    let src_state = c.call("state/get", json!({"sessionId": "src"})).await;
    let dst_state = c.call("state/get", json!({"sessionId": "dst"})).await;
    assert_eq!(src_state, dst_state);
    // The transcript came along.
    let sessions = dir.path().join(".toolwire/sessions");
    assert_eq!(
        transcript_lines(&sessions.join("dst.jsonl")),
        transcript_lines(&sessions.join("src.jsonl"))
    );

    c.call(
        "budget/apply",
        json!({"sessionId": "dst", "messages": [big("only-dst", 60_000)]}),
    )
    .await;
    c.call(
        "budget/apply",
        json!({"sessionId": "src", "messages": [big("only-src", 60_000)]}),
    )
    .await;
    let src_state = c.call("state/get", json!({"sessionId": "src"})).await;
    let dst_state = c.call("state/get", json!({"sessionId": "dst"})).await;
    assert_eq!(src_state["seenIds"], json!(["only-src", "t1"]));
    assert_eq!(dst_state["seenIds"], json!(["only-dst", "t1"]));

    let e = c
        .fails(
            "state/fork",
            json!({"sessionId": "src", "newSessionId": "dst"}),
            -32011,
        )
        .await;
    assert_eq!(e["data"]["kind"], json!("sessionExists"));
    let e = c
        .fails("state/fork", json!({"sessionId": "ghost"}), -32012)
        .await;
    assert_eq!(e["data"]["kind"], json!("sessionNotFound"));

    // A fresh id, and no transcript when asked not to copy it.
    let f = c
        .call(
            "state/fork",
            json!({"sessionId": "src", "copyTranscript": false}),
        )
        .await;
    let id = f["sessionId"].as_str().unwrap();
    assert!(id.starts_with("fork-"));
    assert!(!sessions.join(format!("{id}.jsonl")).exists());
    assert_eq!(
        c.call("state/get", json!({"sessionId": id})).await["seenIds"],
        json!(["only-src", "t1"])
    );
}

#[tokio::test]
async fn fork_without_transcript_resumes_through_inherited_replacements() {
    let (_dir, mut c) = setup().await;
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "p", "messages": [big("t1", 60_000)]}),
        )
        .await;
    let parent = c.call("state/get", json!({"sessionId": "p"})).await;
    let sent = r["messages"].clone();
    let rec = c
        .call("state/reconstruct", json!({"sessionId": "child", "messages": sent, "inheritedReplacements": parent["replacements"]}))
        .await;
    assert_eq!(
        rec,
        json!({"seenCount": 1, "replacementCount": 1, "messagesRead": 1, "recordsRead": 0, "skippedLines": 0})
    );
    let again = c
        .call(
            "budget/apply",
            json!({"sessionId": "child", "messages": [big("t1", 60_000)]}),
        )
        .await;
    assert_eq!(
        again["messages"], sent,
        "the child replays the parent's bytes"
    );
}

#[tokio::test]
async fn reconstruct_reads_messages_records_and_a_torn_transcript() {
    let (dir, mut c) = setup().await;
    let path = dir.path().join("old.jsonl");
    let lines = [
        json!({"type": "message", "message": assistant_calls(&["a", "b"])}).to_string(),
        json!({"type": "message", "message": results(&[("a", "x"), ("b", "y")])}).to_string(),
        json!({"type": "replacement", "record": {"kind": "tool-result", "toolUseId": "a", "replacement": "RA"}}).to_string(),
        json!({"type": "replacement", "record": {"kind": "future-kind", "toolUseId": "b", "replacement": "ignored"}}).to_string(),
        "{not json".to_owned(),
        json!({"type": "message", "message": results(&[("c", "z")])}).to_string(),
        "{\"type\":\"message\",\"mess".to_owned(),
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    c.call(
        "budget/apply",
        json!({"sessionId": "r", "messages": [big("stale", 60_000)]}),
    )
    .await;
    let rec = c
        .call("state/reconstruct", json!({
            "sessionId": "r",
            "messages": [results(&[("d", "w")])],
            "records": [{"kind": "tool-result", "toolUseId": "d", "replacement": "RD"}, {"kind": "tool-result", "toolUseId": "unseen", "replacement": "RU"}],
            "inheritedReplacements": {"c": "RC", "a": "not used: the record wins"},
            "transcript": path.display().to_string(),
            "workDoneToken": "tok"
        }))
        .await;
    assert_eq!(
        rec,
        json!({"seenCount": 5, "replacementCount": 4, "messagesRead": 4, "recordsRead": 3, "skippedLines": 2})
    );
    let state = c.call("state/get", json!({"sessionId": "r"})).await;
    // The record without a digest for an id no message shows waits for its
    // original (PROTOCOL.md 11.1): it is kept, not dropped.
    assert_eq!(
        state["seenIds"],
        json!(["a", "b", "c", "d", "unseen"]),
        "the old state was replaced"
    );
    assert_eq!(
        state["replacements"],
        json!({"a": "RA", "c": "RC", "d": "RD", "unseen": "RU"})
    );
    let kinds: Vec<&str> = c
        .notifications
        .iter()
        .filter(|n| n["method"] == "$/progress" && n["params"]["token"] == "tok")
        .map(|n| n["params"]["value"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"begin"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"end"), "{kinds:?}");
}

#[tokio::test]
async fn state_get_of_an_unknown_session_is_empty_and_creates_nothing() {
    let (dir, mut c) = setup().await;
    let s = c.call("state/get", json!({"sessionId": "nobody"})).await;
    assert_eq!(s, json!({"seenIds": [], "replacements": {}, "pending": []}));
    c.fails("state/fork", json!({"sessionId": "nobody"}), -32012)
        .await;
    assert!(!dir.path().join(".toolwire/sessions").exists());
}

/// Many clients hammer one session with applies, forks and reads. Every
/// snapshot must show each seen id with exactly the replacement it ends up
/// with, and no id may be recorded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_apply_and_fork_storms_keep_the_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let server = new_server();
    let mut tasks = Vec::new();
    for client in 0..4 {
        let server = server.clone();
        let root = dir.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            let (mut c, _t) = connect(server);
            c.initialize(&root, json!({"durability": "none"})).await;
            let mut pending = Vec::new();
            let mut snapshots = Vec::new();
            let mut records = Vec::new();
            for round in 0..15 {
                // Overlapping ids across clients: each id must be decided once.
                let msg = results(&[
                    (&format!("shared{round}"), &"s".repeat(60_000 + round)),
                    (&format!("c{client}r{round}"), &"o".repeat(1000 * round)),
                ]);
                pending.push((
                    "apply",
                    c.start(
                        "budget/apply",
                        json!({"sessionId": "storm", "messages": [msg]}),
                    )
                    .await,
                ));
                pending.push((
                    "fork",
                    c.start("state/fork", json!({"sessionId": "storm"})).await,
                ));
                pending.push((
                    "get",
                    c.start("state/get", json!({"sessionId": "storm"})).await,
                ));
            }
            for (kind, id) in pending {
                let r = c.response(id).await;
                match kind {
                    "apply" => records.extend(
                        r["result"]["records"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default(),
                    ),
                    "fork" => {
                        if let Some(fid) = r["result"]["sessionId"].as_str() {
                            snapshots.push(c.call("state/get", json!({"sessionId": fid})).await);
                        }
                    }
                    _ => snapshots.push(r["result"].clone()),
                }
            }
            (snapshots, records)
        }));
    }
    let mut snapshots = Vec::new();
    let mut records = Vec::new();
    for t in tasks {
        let (s, r) = t.await.unwrap();
        snapshots.extend(s);
        records.extend(r);
    }
    let (mut c, _t) = connect(server);
    c.initialize(dir.path(), json!({})).await;
    let last = c.call("state/get", json!({"sessionId": "storm"})).await;
    let final_repl: HashMap<String, Value> = last["replacements"]
        .as_object()
        .unwrap()
        .clone()
        .into_iter()
        .collect();

    let mut recorded = HashSet::new();
    for r in &records {
        assert!(
            recorded.insert(r["toolUseId"].as_str().unwrap().to_owned()),
            "recorded twice: {r}"
        );
    }
    assert_eq!(recorded.len(), final_repl.len());
    assert!(snapshots.len() >= 60);
    for snap in snapshots {
        for id in snap["seenIds"].as_array().unwrap() {
            let id = id.as_str().unwrap();
            assert_eq!(
                snap["replacements"].get(id),
                final_repl.get(id),
                "snapshot shows {id} without its replacement"
            );
        }
    }
}

/// 10.1: `state/get` of an unknown session keeps nothing, not even a slot in
/// memory, while a session known only from disk is still read.
#[tokio::test]
async fn state_get_of_an_unknown_session_keeps_no_memory() {
    if !common::local_transcripts("state_get_of_an_unknown_session_keeps_no_memory") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = new_server();
    let (mut c, _t) = connect(server.clone());
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;
    for k in 0..50 {
        let s = c
            .call("state/get", json!({"sessionId": format!("probe-{k}")}))
            .await;
        assert_eq!(s["seenIds"], json!([]));
    }
    assert_eq!(server.registry.session_count(), 0);

    // A session another server wrote is found on disk.
    let other = new_server();
    let (mut w, _t2) = connect(other.clone());
    w.initialize(
        dir.path(),
        json!({"durability": "none", "limits": {"maxResultChars": 100}}),
    )
    .await;
    w.call(
        "budget/apply",
        json!({"sessionId": "written", "messages": [big("toolu_w", 500)]}),
    )
    .await;
    other.registry.close_all().await;
    let s = c.call("state/get", json!({"sessionId": "written"})).await;
    assert_eq!(s["seenIds"], json!(["toolu_w"]));
}

/// 10.1: a `rootUri` that does not exist is refused and never created.
#[tokio::test]
async fn a_root_that_does_not_exist_is_refused_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-workspace");
    let (mut c, _t) = connect(new_server());
    let e = c
        .fails("initialize", json!({"rootUri": file_uri(&missing)}), -32602)
        .await;
    assert_eq!(e["data"]["path"], json!("rootUri"), "{e}");
    assert!(!missing.exists());
}

/// 10.1: two spellings of one workspace (a link, a `..`) are one data
/// directory, so their clients share sessions.
#[tokio::test]
async fn two_spellings_of_one_workspace_share_their_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&root, &link).unwrap();
    let server = new_server();
    let (mut a, _ta) = connect(server.clone());
    a.initialize(
        &root,
        json!({"durability": "none", "limits": {"maxResultChars": 100, "previewChars": 50}}),
    )
    .await;
    let (mut b, _tb) = connect(server.clone());
    b.initialize(&link.join("sub").join(".."), json!({"durability": "none"}))
        .await;
    let r = a
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [big("toolu_1", 5000)]}),
        )
        .await;
    let s = b.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(s["seenIds"], json!(["toolu_1"]));
    assert_eq!(
        s["replacements"]["toolu_1"], r["messages"][0]["content"][0]["content"],
        "one session, one decision"
    );
    assert_eq!(server.registry.session_count(), 1);
}

/// Issue 31, reproduction 2 (PROTOCOL.md 11.1, "inherited decisions are
/// put back on the originals"): a fork resumed with only its parent's
/// replacements (no transcript, no messages) meets the original and sends
/// the parent's exact preview; the decision is then frozen to that
/// original (a later, different result under the same id is fresh), and
/// the binding is journaled, so a restart keeps both.
#[tokio::test]
async fn inherited_replacements_bind_to_the_first_original_met() {
    let dir = tempfile::tempdir().unwrap();
    let original = "c".repeat(150_000);
    let turn = json!([assistant_calls(&["c"]), results(&[("c", &original)])]);
    let other = json!([
        assistant_calls(&["c"]),
        results(&[("c", &"o".repeat(90_000))])
    ]);
    let child_outputs = dir.path().join(".toolwire/sessions/child/tool-results");
    let (parent_sent, other_sent);
    {
        let server = new_server();
        let (mut c, task) = connect(server.clone());
        c.initialize(dir.path(), json!({})).await;
        let parent = c
            .call("budget/apply", json!({"sessionId": "p", "messages": turn}))
            .await;
        parent_sent = parent["messages"].clone();
        let replacements =
            c.call("state/get", json!({"sessionId": "p"})).await["replacements"].clone();
        c.call(
            "state/reconstruct",
            json!({"sessionId": "child", "inheritedReplacements": replacements}),
        )
        .await;
        let child = c
            .call(
                "budget/apply",
                json!({"sessionId": "child", "messages": turn}),
            )
            .await;
        assert_eq!(child["messages"], parent_sent, "the parent's exact bytes");
        assert_eq!(child["persisted"], json!([]));
        // The binding is a record with the original's digest.
        assert_eq!(child["records"].as_array().unwrap().len(), 1, "{child}");
        assert!(child["records"][0]["digest"].is_string());
        assert!(!child_outputs.exists(), "nothing saved again");
        // Applied again: nothing new.
        let again = c
            .call(
                "budget/apply",
                json!({"sessionId": "child", "messages": turn}),
            )
            .await;
        assert_eq!(again["records"], json!([]));
        // Frozen to that original: another result under the id is fresh.
        let fresh = c
            .call(
                "budget/apply",
                json!({"sessionId": "child", "messages": other}),
            )
            .await;
        assert_eq!(persisted_count(&fresh), 1, "{fresh}");
        other_sent = fresh["messages"].clone();
        assert_ne!(
            other_sent[1]["content"][0]["content"],
            parent_sent[1]["content"][0]["content"]
        );
        c.close().await;
        task.await.unwrap();
        server.registry.close_all().await;
    }
    if !local_transcripts("inherited_replacements_bind_to_the_first_original_met") {
        return;
    }
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    for (messages, sent) in [(&turn, &parent_sent), (&other, &other_sent)] {
        let r = c
            .call(
                "budget/apply",
                json!({"sessionId": "child", "messages": messages}),
            )
            .await;
        assert_eq!(&r["messages"], sent);
        assert_eq!(r["records"], json!([]));
    }
}

/// The same for a client's record without a digest, for an id its
/// messages do not show.
#[tokio::test]
async fn a_record_without_a_digest_binds_to_the_first_original_met() {
    let (_dir, mut c) = setup().await;
    c.call(
        "state/reconstruct",
        json!({"sessionId": "r", "records": [{"kind": "tool-result", "toolUseId": "c", "replacement": "<persisted-output>\nold\n</persisted-output>"}]}),
    )
    .await;
    let first = c
        .call(
            "budget/apply",
            json!({"sessionId": "r", "messages": [big("c", 60_000)]}),
        )
        .await;
    assert_eq!(
        first["messages"][0]["content"][0]["content"],
        json!("<persisted-output>\nold\n</persisted-output>")
    );
    let second = c
        .call(
            "budget/apply",
            json!({"sessionId": "r", "messages": [big("c", 70_000)]}),
        )
        .await;
    assert_eq!(persisted_count(&second), 1, "{second}");
}

/// Messages that carry the sent form (the result's content is the
/// record's replacement) and a record without a digest: the decision is
/// the one that was sent, not a decision on the preview text as an
/// original. The next apply with the original puts the same replacement
/// back and saves nothing again (issue 52, loose end 3).
#[tokio::test]
async fn a_reconstruct_from_the_sent_form_binds_to_the_original() {
    let (_dir, mut c) = setup().await;
    let original = "o".repeat(60_000);
    let turn = json!([assistant_calls(&["c"]), results(&[("c", &original)])]);
    let first = c
        .call("budget/apply", json!({"sessionId": "a", "messages": turn}))
        .await;
    assert_eq!(persisted_count(&first), 1, "{first}");
    let replacement = first["records"][0]["replacement"].clone();
    let sent = first["messages"].clone();
    assert_eq!(sent[1]["content"][0]["content"], replacement);
    for (session, content, replacement) in [
        ("plain", replacement.clone(), replacement.clone()),
        (
            "block",
            json!([{"type": "text", "text": replacement}]),
            replacement.clone(),
        ),
        // A replacement of the client's own making, not a preview.
        ("own", json!("see the log"), json!("see the log")),
    ] {
        let mut messages = sent.clone();
        messages[1]["content"][0]["content"] = content;
        c.call(
            "state/reconstruct",
            json!({"sessionId": session, "messages": messages,
                "records": [{"kind": "tool-result", "toolUseId": "c", "replacement": replacement}]}),
        )
        .await;
        let next = c
            .call(
                "budget/apply",
                json!({"sessionId": session, "messages": turn}),
            )
            .await;
        assert_eq!(persisted_count(&next), 0, "{session}: {next}");
        assert_eq!(
            next["messages"][1]["content"][0]["content"], replacement,
            "{session}"
        );
    }
}

fn persisted_count(result: &Value) -> usize {
    result["persisted"].as_array().map_or(0, Vec::len)
}

/// Previews of tool output, as the defaults make them, pack in the state to
/// under 40 % of their size (LZ4 kept 50 %: 1,092 of 2,194 bytes).
#[test]
fn replacements_pack_small() {
    let mut rng = fastrand::Rng::with_seed(6);
    let (mut raw, mut packed) = (0, 0);
    for i in 0..200 {
        let original = toolwire::replay::synthetic::tool_output(&mut rng, 60_000);
        let path = format!("/tmp/ws/.toolwire/sessions/m/tool-results/toolu_01{i:022}.txt");
        let r = toolwire::budget::preview::replacement(
            &original,
            60_000,
            &toolwire::budget::preview::Saved {
                path: &path,
                link: None,
            },
            2000,
            Default::default(),
            Default::default(),
        );
        let rep = toolwire::state::Replacement::new(&r);
        assert_eq!(rep.text(), r);
        raw += r.len();
        packed += rep.packed_len();
    }
    eprintln!("previews: {raw} bytes, packed {packed}");
    assert!(packed * 10 < raw * 4, "{packed} of {raw}");
}

/// A tenant's session as the proxy keeps it (`alice.p`) with
/// `previews = "mcp"`: its previews name the link of the id the tenant
/// knows (`p`), and no path. Its forks, forks of forks, and a session
/// reconstructed from its replacements read its outputs through that link,
/// resolved within the tenant (PROTOCOL.md 12.3).
#[tokio::test]
async fn forks_of_a_session_whose_previews_link_read_its_outputs() {
    let (_dir, mut c) = setup().await;
    let output: String = (0..6000).map(|i| format!("line {i:05}\n")).collect();
    c.call(
        "pair/append",
        json!({"sessionId": "alice.p", "message": assistant_calls(&["t1"])}),
    )
    .await;
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "alice.p", "linkSession": "p", "messages": [results(&[("t1", &output)])]}),
        )
        .await;
    let preview = r["messages"][0]["content"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        preview.contains(
            "Full output saved as toolwire://saved-output/p/t1 - read it with the read_saved_output tool"
        ),
        "{preview}"
    );
    assert!(!preview.contains("saved to:"), "{preview}");
    c.call(
        "pair/append",
        json!({"sessionId": "alice.p", "message": r["messages"][0]}),
    )
    .await;
    c.call(
        "state/fork",
        json!({"sessionId": "alice.p", "newSessionId": "alice.f"}),
    )
    .await;
    c.call(
        "state/fork",
        json!({"sessionId": "alice.f", "newSessionId": "alice.g"}),
    )
    .await;
    let parent = c.call("state/get", json!({"sessionId": "alice.p"})).await;
    c.call(
        "state/reconstruct",
        json!({"sessionId": "alice.r", "messages": r["messages"], "inheritedReplacements": parent["replacements"]}),
    )
    .await;
    // The reconstructed session journals the inherited decision once it
    // sends the result again (the parent's preview, byte for byte).
    let again = c
        .call(
            "budget/apply",
            json!({"sessionId": "alice.r", "messages": [results(&[("t1", &output)])]}),
        )
        .await;
    assert_eq!(
        again["messages"][0]["content"][0]["content"],
        json!(preview)
    );
    c.call(
        "pair/append",
        json!({"sessionId": "alice.r", "message": assistant_calls(&["t1"])}),
    )
    .await;
    c.call(
        "pair/append",
        json!({"sessionId": "alice.r", "message": again["messages"][0]}),
    )
    .await;
    for session in ["alice.p", "alice.f", "alice.g", "alice.r"] {
        let read = c
            .call(
                "artifact/read",
                json!({"sessionId": session, "toolUseId": "t1", "offset": 5998, "limit": 5}),
            )
            .await;
        assert_eq!(
            (&read["text"], &read["totalLines"]),
            (&json!("line 05998\nline 05999\n"), &json!(6000)),
            "{session}: {read}"
        );
    }
    // Bob's session of the same id is none of alice's sessions' parent.
    c.fails(
        "artifact/read",
        json!({"sessionId": "bob.p", "toolUseId": "t1"}),
        -32015,
    )
    .await;
}
