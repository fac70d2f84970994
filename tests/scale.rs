//! Scale inside one request: a pair of 100,000 calls, a `budget/apply`
//! persisting thousands of results. Behaviour only; the speed of these is
//! measured by `benches/throughput.rs`.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

const CALLS: usize = 100_000;

/// One model turn of `n` calls and the user turn answering all of them, as
/// the groups `pair/append` takes in `format`.
fn big_pair(format: &str, n: usize) -> Vec<Value> {
    let id = |i: usize| format!("call_{i:06}");
    match format {
        "openai-responses" => vec![
            Value::Array(
                (0..n)
                    .map(|i| json!({"type": "function_call", "call_id": id(i), "name": "Bash", "arguments": "{}"}))
                    .collect(),
            ),
            Value::Array(
                (0..n)
                    .map(|i| json!({"type": "function_call_output", "call_id": id(i), "output": format!("out {i}")}))
                    .collect(),
            ),
        ],
        "gemini" => vec![
            json!({"role": "model", "parts": (0..n).map(|i| json!({"functionCall": {"id": id(i), "name": "Bash", "args": {}}})).collect::<Vec<_>>()}),
            json!({"role": "user", "parts": (0..n).map(|i| json!({"functionResponse": {"id": id(i), "name": "Bash", "response": {"output": format!("out {i}")}}})).collect::<Vec<_>>()}),
        ],
        "openai-chat" => {
            // Each result is a message of its own: one append per result.
            let mut groups = vec![json!({"role": "assistant", "content": null, "tool_calls": (0..n).map(|i| json!({"id": id(i), "type": "function", "function": {"name": "Bash", "arguments": "{}"}})).collect::<Vec<_>>()})];
            groups.extend(
                (0..n).map(|i| json!({"role": "tool", "tool_call_id": id(i), "content": format!("out {i}")})),
            );
            groups
        }
        _ => vec![
            json!({"role": "assistant", "content": (0..n).map(|i| json!({"type": "tool_use", "id": id(i), "name": "Bash", "input": {}})).collect::<Vec<_>>()}),
            json!({"role": "user", "content": (0..n).map(|i| json!({"type": "tool_result", "tool_use_id": id(i), "content": format!("out {i}")})).collect::<Vec<_>>()}),
        ],
    }
}

fn transcript(dir: &Path, session: &str) -> std::path::PathBuf {
    dir.join(format!(".toolwire/sessions/{session}.jsonl"))
}

/// `transcript/check` finds nothing the provider would refuse.
async fn assert_valid(c: &mut MemClient, path: &Path, format: &str) {
    let check = c
        .call(
            "transcript/check",
            json!({"path": path.to_str().unwrap(), "format": format}),
        )
        .await;
    assert_eq!(check, json!({"ok": true, "violations": []}), "{format}");
}

#[tokio::test]
async fn a_pair_of_100k_calls_commits_whole_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;
    for format in ["anthropic", "openai-responses", "gemini", "openai-chat"] {
        // openai-chat answers with one message per call, and every reply
        // lists the calls still open: a pair of that many appends is
        // quadratic by contract, so it is tested with fewer calls. The
        // other formats share the pairing code: 20,000 calls keep the
        // unoptimized test build quick.
        let n = match format {
            "anthropic" => CALLS,
            "openai-chat" => 2_000,
            _ => 20_000,
        };
        let session = format!("big-{format}");
        let groups = big_pair(format, n);
        let last = groups.len() - 1;
        for (i, group) in groups.iter().enumerate() {
            let r = c
                .call(
                    "pair/append",
                    json!({"sessionId": session, "format": format, "message": group}),
                )
                .await;
            if i < last {
                assert_eq!(r["status"], "buffered", "{format}");
                assert_eq!(r["written"], 0, "{format}");
            } else {
                assert_eq!(r["status"], "committed", "{format}");
                assert_eq!(r["pending"], json!([]), "{format}");
            }
            if i == 0 {
                let pending = r["pending"].as_array().unwrap();
                assert_eq!(pending.len(), n, "{format}");
                assert_eq!(pending[n - 1], format!("call_{:06}", n - 1), "{format}");
            }
        }
        // What is on disk is exactly what was appended, in order.
        let path = transcript(dir.path(), &session);
        assert_valid(&mut c, &path, format).await;
        let on_disk = transcript_messages(&path);
        let sent: Vec<Value> = groups
            .into_iter()
            .flat_map(|g| match g {
                Value::Array(items) => items,
                m => vec![m],
            })
            .collect();
        assert_eq!(on_disk.len(), sent.len(), "{format}");
        assert!(on_disk == sent, "{format}: the transcript differs");
        let state = c.call("state/get", json!({"sessionId": session})).await;
        assert_eq!(state["pending"], json!([]), "{format}");
    }
}

#[tokio::test]
async fn a_flushed_pair_of_100k_calls_closes_every_open_call() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(
        dir.path(),
        json!({"durability": "none", "abortMode": "synthetic"}),
    )
    .await;
    for format in ["anthropic", "openai-responses", "gemini"] {
        let session = format!("flush-{format}");
        let n = if format == "anthropic" { CALLS } else { 20_000 };
        let groups = big_pair(format, n);
        c.call(
            "pair/append",
            json!({"sessionId": session, "format": format, "message": groups[0]}),
        )
        .await;
        let f = c
            .call(
                "pair/flush",
                json!({"sessionId": session, "reason": "abort"}),
            )
            .await;
        assert_eq!(f["synthesized"].as_array().unwrap().len(), n);
        assert_valid(&mut c, &transcript(dir.path(), &session), format).await;
    }
}

/// The real store, counting writes per path and the most at once.
#[derive(Default)]
struct CountingStore {
    writes: std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, usize>>,
    active: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl toolwire::artifact::ArtifactStore for CountingStore {
    fn write_once(
        &self,
        path: &Path,
        bytes: &[u8],
        fsync: bool,
    ) -> std::io::Result<toolwire::artifact::Written> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.active.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        *self
            .writes
            .lock()
            .unwrap()
            .entry(path.to_path_buf())
            .or_default() += 1;
        let written = toolwire::artifact::FsArtifactStore.write_once(path, bytes, fsync);
        self.active.fetch_sub(1, SeqCst);
        written
    }
}

#[tokio::test]
async fn persisting_thousands_of_results_writes_each_once_a_few_at_a_time_and_commits_all() {
    const RESULTS: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(CountingStore::default());
    let server = toolwire::server::Server::new(toolwire::session::Storage {
        artifacts: store.clone(),
        ..Default::default()
    });
    let (mut c, _t) = connect(server);
    c.initialize(dir.path(), json!({"durability": "fsync"}))
        .await;
    // Ten user turns of 500 results, each over the limit.
    let mut messages = Vec::new();
    for turn in 0..10 {
        let ids: Vec<String> = (0..RESULTS / 10)
            .map(|i| format!("toolu_{turn:02}_{i:04}"))
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        messages.push(assistant_calls(&ids));
        let bodies: Vec<String> = ids
            .iter()
            .map(|id| format!("output of {id} ").repeat(40))
            .collect();
        let items: Vec<(&str, &str)> = ids
            .iter()
            .copied()
            .zip(bodies.iter().map(String::as_str))
            .collect();
        messages.push(results(&items));
    }
    let params = json!({"sessionId": "many", "messages": messages, "limits": {"maxResultChars": 100, "previewChars": 20}});
    let r = c.call("budget/apply", params.clone()).await;
    assert_eq!(r["persisted"].as_array().unwrap().len(), RESULTS);
    assert_eq!(r["failures"], json!([]));

    // Every artifact written exactly once, holding its original; nothing
    // else (no temporary file) left in the directory.
    let writes = store.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), RESULTS);
    assert!(writes.values().all(|&n| n == 1));
    let most = store.most.load(std::sync::atomic::Ordering::SeqCst);
    assert!((1..=8).contains(&most), "{most} artifact writes at once");
    let artifacts = dir.path().join(".toolwire/sessions/many/tool-results");
    assert_eq!(std::fs::read_dir(&artifacts).unwrap().count(), RESULTS);
    for p in r["persisted"].as_array().unwrap() {
        let id = p["toolUseId"].as_str().unwrap();
        let on_disk = std::fs::read_to_string(p["path"].as_str().unwrap()).unwrap();
        assert_eq!(on_disk, format!("output of {id} ").repeat(40));
    }

    // The decisions are committed and journaled.
    let state = c.call("state/get", json!({"sessionId": "many"})).await;
    assert_eq!(state["seenIds"].as_array().unwrap().len(), RESULTS);
    assert_eq!(state["replacements"].as_object().unwrap().len(), RESULTS);
    let journal = transcript_lines(&transcript(dir.path(), "many"));
    assert_eq!(
        journal
            .iter()
            .filter(|l| l["type"] == "replacement")
            .count(),
        RESULTS
    );

    // The reply is the conversation with each result's content replaced by
    // exactly its record's replacement, every other byte as sent; the
    // reapply sends the same bytes and writes nothing.
    let replacement: std::collections::HashMap<&str, &str> = r["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rec| {
            (
                rec["toolUseId"].as_str().unwrap(),
                rec["replacement"].as_str().unwrap(),
            )
        })
        .collect();
    let mut expected = messages.clone();
    for m in &mut expected {
        for block in m["content"].as_array_mut().unwrap() {
            if block["type"] == "tool_result" {
                let id = block["tool_use_id"].as_str().unwrap().to_owned();
                block["content"] = json!(replacement[id.as_str()]);
            }
        }
    }
    let bytes = |v: &Value| serde_json::to_string(v).unwrap();
    assert_eq!(bytes(&r["messages"]), bytes(&json!(expected)));
    let again = c.call("budget/apply", params).await;
    assert_eq!(bytes(&again["messages"]), bytes(&r["messages"]));
    assert_eq!(again["persisted"], json!([]));
    assert_eq!(store.writes.lock().unwrap().len(), RESULTS);
}

#[tokio::test]
async fn a_reapply_answers_with_the_bytes_it_always_did() {
    // Spellings a parser may normalize: whitespace, escapes, key order,
    // numbers; the reply is the compact form of what was sent, with each
    // decided result's stored replacement in place.
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;
    let big = "line \u{e9}\t\"quoted\" \\ end\n".repeat(3000);
    let first = json!({"sessionId": "b", "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"n": 1.50, "z": 1, "a": [true, null]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": big}, {"type": "text", "text": "go on"}], "zeta": 1e3, "alpha": "\u{2028}"},
    ]});
    let decided = c.call("budget/apply", first.clone()).await;
    let preview = decided["records"][0]["replacement"]
        .as_str()
        .unwrap()
        .to_owned();
    // The same request, spelled differently.
    let escaped = serde_json::to_string(&json!(big))
        .unwrap()
        .replace("\\\"", "\\u0022")
        .replace('\u{e9}', "\\u00e9");
    let body = format!(
        r#"{{ "sessionId" : "b", "messages" : [
          {{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"Bash","input":{{"n": 1.50,"z":1,"a":[true, null]}}}}]}},
          {{"role" : "user", "content" : [ {{"type":"tool_result","tool_use_id":"t1","content": {escaped} }}, {{"type":"text","text":"go\u0020on"}} ], "zeta": 1e3, "alpha": "\u2028" }}
        ] }}"#
    );
    let request = format!(r#"{{"jsonrpc":"2.0","id":77,"method":"budget/apply","params":{body}}}"#);
    let frame = format!("Content-Length: {}\r\n\r\n{request}", request.len());
    c.send_raw(frame.as_bytes()).await;
    let reply = c.response(77).await;
    let expected = r#"[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"n":1.50,"z":1,"a":[true,null]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":PREVIEW},{"type":"text","text":"go on"}],"zeta":1e+3,"alpha":"\u2028"}]"#
        .replace("PREVIEW", &serde_json::to_string(&preview).unwrap())
        .replace("\\u2028", "\u{2028}");
    assert_eq!(
        serde_json::to_string(&reply["result"]["messages"]).unwrap(),
        expected
    );
    assert_eq!(reply["result"]["persisted"], json!([]));
}
