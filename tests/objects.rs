//! Saved outputs on object storage (`storage.objects`), against a real
//! S3-compatible server (moto, started per test on loopback; see
//! tests/common/s3.rs): create-only writes, previews naming the object's
//! URL, reuse by a second writer, ranged reads for `artifact/read`, and a
//! store that stops answering.

mod common;
mod mcp_peer;
#[path = "common/s3.rs"]
mod s3;

use common::*;
use s3::S3Server;
use serde_json::{Value, json};

const BUCKET: &str = "toolwire-test";

fn tr(content: Value, id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": content})
}

fn user(blocks: Vec<Value>) -> Value {
    json!({"role": "user", "content": blocks})
}

fn server() -> S3Server {
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    s3
}

async fn client(dir: &std::path::Path, options: Value) -> MemClient {
    let (mut client, _task) = connect(new_server());
    client.initialize(dir, options).await;
    client
}

fn objects_options(s3: &S3Server, prefix: &str) -> Value {
    json!({"storage": {"objects": s3.objects_config(BUCKET, prefix)}})
}

fn lines(n: usize) -> String {
    (0..n)
        .map(|i| format!("line {i:06} of the build log\n"))
        .collect()
}

fn apply(session: &str, messages: Value) -> Value {
    json!({"sessionId": session, "messages": messages})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_name_the_object_and_match_the_local_bytes() {
    let s3 = server();
    let local_dir = tempfile::tempdir().unwrap();
    let bucket_dir = tempfile::tempdir().unwrap();
    let mut local = client(local_dir.path(), json!({})).await;
    let mut remote = client(bucket_dir.path(), objects_options(&s3, "fleet")).await;
    let text = lines(3000);
    let blocks =
        json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b".repeat(60_000)}]);
    let msgs = json!([
        assistant_calls(&["toolu_1", "toolu_2"]),
        user(vec![
            tr(json!(text), "toolu_1"),
            tr(blocks.clone(), "toolu_2")
        ]),
    ]);
    let l = local.call("budget/apply", apply("s1", msgs.clone())).await;
    let r = remote.call("budget/apply", apply("s1", msgs.clone())).await;

    let base = format!("s3://{BUCKET}/fleet/sessions/s1/tool-results");
    let local_base = local_dir
        .path()
        .canonicalize()
        .unwrap()
        .join(".toolwire/sessions/s1/tool-results");
    for (i, name) in [(0, "toolu_1.txt"), (1, "toolu_2.json")] {
        let url = format!("{base}/{name}");
        assert_eq!(r["persisted"][i]["path"], json!(url));
        assert_eq!(r["persisted"][i]["reused"], json!(false));
        // The preview is the local one, byte for byte, but for the URL.
        let local_preview = l["records"][i]["replacement"].as_str().unwrap();
        let remote_preview = r["records"][i]["replacement"].as_str().unwrap();
        let local_path = local_base.join(name).display().to_string();
        assert!(local_preview.contains(&local_path), "{local_preview}");
        assert_eq!(local_preview.replace(&local_path, &url), remote_preview);
    }
    // Nothing went under the data directory: the bytes are in the bucket.
    assert!(
        !bucket_dir
            .path()
            .join(".toolwire/sessions/s1/tool-results")
            .exists()
    );
    assert_eq!(
        s3.keys(BUCKET, "fleet/"),
        vec![
            "fleet/sessions/s1/tool-results/toolu_1.txt",
            "fleet/sessions/s1/tool-results/toolu_1.txt.idx",
            "fleet/sessions/s1/tool-results/toolu_2.json",
        ]
    );
    // `artifact/read` resolves them: the text whole, the blocks as text.
    let page = remote
        .call(
            "artifact/read",
            json!({"sessionId": "s1", "toolUseId": "toolu_1", "limit": 5000}),
        )
        .await;
    assert_eq!(page["text"], json!(text));
    assert_eq!(page["totalLines"], json!(3000));
    assert_eq!(page["truncated"], json!(false));
    let page = remote
        .call(
            "artifact/read",
            json!({"sessionId": "s1", "toolUseId": "toolu_2", "offset": 1}),
        )
        .await;
    assert_eq!(page["text"], json!("b".repeat(60_000)));
    // Replayed byte for byte on the next turn.
    let again = remote.call("budget/apply", apply("s1", msgs)).await;
    assert_eq!(again["messages"], r["messages"]);
    assert_eq!(again["records"], json!([]));
    // An id with nothing saved is artifactNotFound, as on disk.
    remote
        .fails(
            "artifact/read",
            json!({"sessionId": "s1", "toolUseId": "toolu_none"}),
            -32015,
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_reuses_the_first_object_and_other_bytes_are_refused() {
    let s3 = server();
    let options = objects_options(&s3, "race");
    let text = lines(5000);
    let msgs = json!([
        assistant_calls(&["toolu_r"]),
        user(vec![tr(json!(text), "toolu_r")]),
    ]);
    // Two servers with their own data directories (two replicas) decide
    // the same result at once.
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut a = client(dirs[0].path(), options.clone()).await;
    let mut b = client(dirs[1].path(), options.clone()).await;
    let (ra, rb) = tokio::join!(
        a.call("budget/apply", apply("s1", msgs.clone())),
        b.call("budget/apply", apply("s1", msgs.clone())),
    );
    assert_eq!(ra["messages"], rb["messages"]);
    let mut reused = [&ra, &rb].map(|r| r["persisted"][0]["reused"].as_bool().unwrap());
    reused.sort();
    assert_eq!(reused, [false, true], "exactly one wrote: {ra} {rb}");
    assert_eq!(
        s3.keys(BUCKET, "race/"),
        vec![
            "race/sessions/s1/tool-results/toolu_r.txt",
            "race/sessions/s1/tool-results/toolu_r.txt.idx",
        ]
    );
    // A third replica with other bytes under the same name is refused and
    // told so; the object keeps the first bytes.
    let dir = tempfile::tempdir().unwrap();
    let mut c = client(dir.path(), options).await;
    let other = json!([
        assistant_calls(&["toolu_r"]),
        user(vec![tr(json!(lines(5001)), "toolu_r")]),
    ]);
    let rc = c.call("budget/apply", apply("s1", other)).await;
    assert_eq!(rc["persisted"], json!([]));
    let message = rc["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("already exists with other content"),
        "{message}"
    );
    let page = a
        .call(
            "artifact/read",
            json!({"sessionId": "s1", "toolUseId": "toolu_r", "limit": 10000}),
        )
        .await;
    assert_eq!(page["text"], json!(text));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_and_grep_of_a_large_object_read_ranges() {
    let s3 = server();
    let dir = tempfile::tempdir().unwrap();
    let mut c = client(dir.path(), objects_options(&s3, "big")).await;
    // About 12 MB: many line-index checkpoints and ranged reads.
    let mut text = lines(400_000);
    text.push_str("FATAL: the one failure\nno newline at the end");
    let msgs = json!([
        assistant_calls(&["toolu_big"]),
        user(vec![tr(json!(text), "toolu_big")]),
    ]);
    c.call("budget/apply", apply("s1", msgs)).await;
    let all: Vec<&str> = text.split_inclusive('\n').collect();
    let check_pages = |page: &Value, offset: usize, limit: usize| {
        assert_eq!(page["text"], json!(all[offset..offset + limit].concat()));
        assert_eq!(page["startLine"], json!(offset));
        assert_eq!(page["endLine"], json!(offset + limit));
        assert_eq!(page["totalLines"], json!(all.len()));
        assert_eq!(page["totalChars"], json!(text.chars().count()));
    };
    let read =
        json!({"sessionId": "s1", "toolUseId": "toolu_big", "offset": 350_123, "limit": 2000});
    let page = c.call("artifact/read", read.clone()).await;
    check_pages(&page, 350_123, 2000);
    assert_eq!(page["truncated"], json!(true));
    let grep = json!({"sessionId": "s1", "toolUseId": "toolu_big", "grep": "^FATAL", "context": 1});
    let found = c.call("artifact/read", grep.clone()).await;
    assert_eq!(
        found["text"],
        json!(
            "400000-line 399999 of the build log\n400001:FATAL: the one failure\n400002-no newline at the end\n"
        )
    );
    assert_eq!(found["truncated"], json!(false));
    // Without the stored index (an object written by something else), one
    // pass over ranged reads builds it: the same answers.
    s3.delete(BUCKET, "big/sessions/s1/tool-results/toolu_big.txt.idx");
    let page = c.call("artifact/read", read).await;
    check_pages(&page, 350_123, 2000);
    assert_eq!(c.call("artifact/read", grep).await, found);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stops_answering_fails_the_request_and_decides_nothing() {
    let mut s3 = server();
    let dir = tempfile::tempdir().unwrap();
    let mut c = client(dir.path(), objects_options(&s3, "down")).await;
    s3.stop();
    let msgs = json!([
        assistant_calls(&["toolu_1"]),
        user(vec![tr(json!(lines(5000)), "toolu_1")]),
    ]);
    let err = c
        .fails("budget/apply", apply("s1", msgs.clone()), -32014)
        .await;
    assert_eq!(err["data"]["kind"], json!("storage"), "{err}");
    let state = c.call("state/get", json!({"sessionId": "s1"})).await;
    assert_eq!(state["seenIds"], json!([]), "{state}");
    assert_eq!(state["replacements"], json!({}));
    // Nothing journaled either: a restart decides afresh.
    let transcript = dir.path().join(".toolwire/sessions/s1.jsonl");
    assert!(
        !transcript.exists() || transcript_lines(&transcript).is_empty(),
        "{:?}",
        std::fs::read_to_string(&transcript)
    );
    c.fails(
        "artifact/read",
        json!({"sessionId": "s1", "toolUseId": "toolu_1"}),
        -32014,
    )
    .await;
}

#[tokio::test]
async fn bad_object_settings_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _task) = connect(new_server());
    for (objects, path) in [
        (json!({"url": "ftp://x/y"}), "storage.objects.url"),
        (json!({"url": "not a url"}), "storage.objects.url"),
        (
            json!({"url": "s3://b/p", "options": {"no_such_option": "1"}}),
            "storage.objects.options.noSuchOption",
        ),
    ] {
        let err = c
            .fails(
                "initialize",
                json!({"processId": null, "rootUri": file_uri(dir.path()),
                       "initializationOptions": {"storage": {"objects": objects}}}),
                -32602,
            )
            .await;
        assert_eq!(err["data"]["path"], json!(path), "{err}");
    }
}

/// The object a test puts in the bucket itself, as another client would.
fn put_object(s3: &S3Server, key: &str, body: &str) {
    s3.put(BUCKET, key, body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_and_keeps_the_right_objects() {
    if !common::local_only(
        "gc_removes_and_keeps_the_right_objects",
        "ages transcript files to drive the local collector (gc on the shared store: tests/fleet.rs)",
    ) {
        return;
    }
    use std::time::{Duration, SystemTime};
    use toolwire::retention::{self, Policy};
    let s3 = server();
    let dir = tempfile::tempdir().unwrap();
    let server = new_server();
    let (mut c, _task) = connect(server.clone());
    let options = objects_options(&s3, "gc");
    c.initialize(dir.path(), options.clone()).await;
    for (session, id) in [("expired", "toolu_e"), ("live", "toolu_l")] {
        let msgs = json!([
            assistant_calls(&[id]),
            user(vec![tr(json!(lines(3000)), id)]),
        ]);
        c.call("budget/apply", apply(session, msgs)).await;
    }
    let results = "gc/sessions/live/tool-results";
    // In `live`: an artifact nothing points at with its index, an index
    // whose artifact is gone, and an object that is not ours.
    for name in [
        "toolu_orphan.txt",
        "toolu_orphan.txt.idx",
        "toolu_gone.txt.idx",
        "notes.bin",
    ] {
        put_object(&s3, &format!("{results}/{name}"), "x");
    }
    server.registry.close_all().await;
    let transcript = dir.path().join(".toolwire/sessions/expired.jsonl");
    let file = std::fs::File::options()
        .write(true)
        .open(&transcript)
        .unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(40 * 86_400))
        .unwrap();

    // Now: `expired` goes whole, objects and all; every object of `live`
    // is too recent to judge.
    let dry = c.call("storage/gc", json!({"dryRun": true})).await;
    let before = s3.keys(BUCKET, "gc/");
    assert_eq!(before.len(), 8, "{before:?}");
    let real = c.call("storage/gc", json!({})).await;
    assert_eq!(dry, real);
    assert_eq!(real["sessionsRemoved"], json!(["expired"]), "{real}");
    assert_eq!(real["artifactsRemoved"], json!([]));
    let after: Vec<String> = before
        .iter()
        .filter(|k| !k.starts_with("gc/sessions/expired/"))
        .cloned()
        .collect();
    assert_eq!(s3.keys(BUCKET, "gc/"), after);

    // Two hours on: past the grace period, what nothing points at goes;
    // the referenced artifact, its index and the foreign object stay.
    let data_dir = dir.path().canonicalize().unwrap().join(".toolwire");
    let objects_config: toolwire::artifact::objects::ObjectsConfig =
        serde_json::from_value(s3.objects_config(BUCKET, "gc")).unwrap();
    let objects = toolwire::artifact::objects::ObjectArtifacts::open(&objects_config).unwrap();
    let policy = Policy {
        max_age: Some(Duration::from_secs(30 * 86_400)),
        max_total_bytes: None,
        grace: retention::GRACE,
        now: SystemTime::now() + Duration::from_secs(2 * 3600),
    };
    let report = tokio::task::spawn_blocking(move || {
        retention::collect(
            &data_dir,
            Some(&objects),
            &policy,
            false,
            &|_| false,
            &mut |_| {},
        )
    })
    .await
    .unwrap()
    .unwrap();
    let url = format!("s3://{BUCKET}/{results}");
    let mut removed = report.artifacts_removed.clone();
    removed.sort();
    assert_eq!(
        removed,
        vec![
            format!("{url}/toolu_gone.txt.idx"),
            format!("{url}/toolu_orphan.txt"),
            format!("{url}/toolu_orphan.txt.idx"),
        ]
    );
    assert_eq!(
        s3.keys(BUCKET, "gc/"),
        vec![
            format!("{results}/notes.bin"),
            format!("{results}/toolu_l.txt"),
            format!("{results}/toolu_l.txt.idx"),
        ]
    );
    // What is kept still reads.
    let page = c
        .call(
            "artifact/read",
            json!({"sessionId": "live", "toolUseId": "toolu_l", "limit": 1}),
        )
        .await;
    assert_eq!(page["text"], json!("line 000000 of the build log\n"));
}

/// `toolwire mcp` with saved outputs in the bucket: the preview names the
/// object, and `resources/read` of the link (and `read_saved_output`)
/// return it from there.
#[test]
fn the_mcp_link_reads_the_object() {
    use mcp_peer::{Peer, front_argv, sized_server};
    let s3 = server();
    let ws = tempfile::tempdir().unwrap();
    let objects = s3.objects_config(BUCKET, "mcp");
    let options = objects["options"].as_object().unwrap();
    let mut toml = format!(
        "[storage.objects]\nurl = {}\n[storage.objects.options]\n",
        objects["url"]
    );
    for (key, value) in options {
        toml.push_str(&format!("{key} = {value}\n"));
    }
    std::fs::write(ws.path().join("toolwire.toml"), toml).unwrap();
    let mut peer = Peer::start(&front_argv("m1", &[], &sized_server()), ws.path());
    let line = |id: i64, method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    peer.request(
        1,
        &line(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        ),
    );
    peer.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let called: Value = serde_json::from_str(&peer.request(
        2,
        &line(
            2,
            "tools/call",
            json!({"name": "text", "arguments": {"size": 200_000}}),
        ),
    ))
    .unwrap();
    let content = called["result"]["content"].as_array().unwrap();
    let preview = content[0]["text"].as_str().unwrap();
    let url = format!("s3://{BUCKET}/mcp/sessions/m1/tool-results/");
    assert!(preview.contains(&url), "{preview}");
    let uri = content
        .iter()
        .find(|c| c["type"] == "resource_link")
        .and_then(|c| c["uri"].as_str())
        .unwrap()
        .to_owned();
    let keys = s3.keys(BUCKET, "mcp/");
    assert_eq!(keys.len(), 2, "the artifact and its index: {keys:?}");
    let read: Value =
        serde_json::from_str(&peer.request(3, &line(3, "resources/read", json!({"uri": uri}))))
            .unwrap();
    let whole = read["result"]["contents"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(whole.chars().count(), 200_000);
    let paged: Value = serde_json::from_str(&peer.request(
        4,
        &line(4, "tools/call", json!({"name": "read_saved_output", "arguments": {"uri": uri, "offset": 3, "limit": 2}})),
    ))
    .unwrap();
    let expected: String = whole.split_inclusive('\n').skip(3).take(2).collect();
    assert_eq!(
        paged["result"]["structuredContent"]["text"],
        json!(expected),
        "{paged}"
    );
    assert!(peer.finish().success());
}
