//! Lifecycle, framing, errors, batches, pipelining and cancellation.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::{Value, json};
use toolwire::artifact::{ArtifactStore, FsArtifactStore, Written};
use toolwire::server::Server;
use toolwire::session::Storage;

#[tokio::test]
async fn lifecycle_follows_lsp() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, task) = connect(new_server());
    let e = c
        .fails("state/get", json!({"sessionId": "s"}), -32002)
        .await;
    assert_eq!(e["data"]["kind"], json!("notInitialized"));
    // Notifications before initialize are dropped, not answered.
    c.notify("$/cancelRequest", json!({"id": 99})).await;
    let init = c.initialize(dir.path(), json!({})).await;
    assert_eq!(init["serverInfo"]["name"], json!("toolwire"));
    let caps = &init["capabilities"]["experimental"]["toolwire"];
    assert_eq!(caps["protocolVersion"], json!(4));
    let methods: Vec<&str> = caps["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    for m in [
        "budget/apply",
        "state/fork",
        "state/reconstruct",
        "state/get",
        "pair/append",
        "pair/flush",
        "transcript/repair",
    ] {
        assert!(methods.contains(&m), "{m} missing from {methods:?}");
    }
    c.fails("initialize", json!({}), -32600).await;
    assert_eq!(c.call("shutdown", Value::Null).await, Value::Null);
    c.fails("state/get", json!({"sessionId": "s"}), -32600)
        .await;
    c.notify("exit", Value::Null).await;
    let end = task.await.unwrap();
    assert!(end.exit && end.shutdown);
    assert_eq!(end.exit_code(), 0);
}

#[tokio::test]
async fn a_bad_configuration_fails_initialize_naming_the_key_and_changes_nothing() {
    if !common::local_transcripts(
        "a_bad_configuration_fails_initialize_naming_the_key_and_changes_nothing",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    let e = c.fails("initialize", json!({"rootUri": file_uri(dir.path()), "initializationOptions": {"abortMode": "explode"}}), -32602).await;
    assert_eq!(e["data"]["path"], json!("initializationOptions.abortMode"));
    let e = c
        .fails("initialize", json!({"rootUri": "not a uri"}), -32602)
        .await;
    assert_eq!(e["data"]["path"], json!("rootUri"));
    std::fs::write(
        dir.path().join("toolwire.toml"),
        "[limits]\npreview_chars = \"many\"\n",
    )
    .unwrap();
    let e = c
        .fails(
            "initialize",
            json!({"rootUri": file_uri(dir.path())}),
            -32602,
        )
        .await;
    // Blamed on the file, with the key as it spells it and its line.
    assert_eq!(
        e["data"]["path"],
        json!("toolwire.toml:limits.preview_chars")
    );
    let message = e["message"].as_str().unwrap();
    let file = dir.path().join("toolwire.toml");
    assert!(message.contains(&format!("{}:2: ", file.display())), "{e}");
    std::fs::write(dir.path().join("toolwire.toml"), "durability = \"none\"\n").unwrap();
    // A request after the refused `initialize` is told why it was refused,
    // not to send `initialize` (which the client did).
    let e = c
        .fails("state/get", json!({"sessionId": "s"}), -32002)
        .await;
    let message = e["message"].as_str().unwrap();
    assert!(
        message.starts_with("server not initialized: `initialize` failed: ")
            && message.contains("limits.preview_chars"),
        "{e}"
    );
    assert_eq!(e["data"]["kind"], json!("notInitialized"));
    c.initialize(dir.path(), json!({"dataDir": "elsewhere"}))
        .await;
    c.call(
        "pair/append",
        json!({"sessionId": "s", "message": user_text("hi")}),
    )
    .await;
    assert!(dir.path().join("elsewhere/sessions/s.jsonl").is_file());
}

#[tokio::test]
async fn empty_initialization_options_may_be_an_empty_array_as_neovim_sends_them() {
    // Neovim encodes `init_options = {}` as `[]`: no overrides, as `{}`.
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    let e = c
        .fails(
            "initialize",
            json!({"rootUri": file_uri(dir.path()), "initializationOptions": [1]}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("initializationOptions"));
    let init = c.initialize(dir.path(), json!([])).await;
    assert_eq!(init["serverInfo"]["name"], json!("toolwire"));
    c.call("state/get", json!({"sessionId": "s"})).await;
}

/// A bad frame followed at once by a valid one, in one write and with no
/// newline between them: the bad one is answered with a parse error and
/// the valid request after it is answered too, never swallowed as part of
/// the garbage (issue 52, loose end 1).
#[tokio::test]
async fn a_request_right_after_garbage_is_still_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let request = |id: i64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "state/get", "params": {"sessionId": "s"}})
            .to_string();
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    };
    for (id, garbage) in [
        (10, "Content-Length: -1\r\n\r\n{\"x\":1}"),
        (11, "{\"unframed\":true}"),
        (12, "Nonsense"),
        (13, "\r\n"),
    ] {
        c.send_raw(format!("{garbage}{}", request(id)).as_bytes())
            .await;
        let mut errors = 0;
        loop {
            // Bounded, so that a request the server lost fails the test
            // instead of hanging it.
            let m = tokio::time::timeout(std::time::Duration::from_secs(30), c.read())
                .await
                .unwrap_or_else(|_| panic!("{garbage:?}: request {id} was never answered"))
                .unwrap();
            if m["id"] == json!(id) {
                assert!(m.get("result").is_some(), "{garbage:?}: {m}");
                break;
            }
            assert_eq!(m["error"]["code"], json!(-32700), "{garbage:?}: {m}");
            errors += 1;
        }
        assert!(errors <= 2, "{garbage:?}: {errors} parse errors");
    }
}

/// `pair/append`'s params in the plain envelope are checked to be JSON by
/// the session's parse, not the reader's: whatever they are, the answer is
/// the one the same params get in an envelope spelled otherwise, which the
/// reader reads the ordinary way (same length before the params, so a
/// parse error names the same column).
#[tokio::test]
async fn unchecked_params_are_answered_as_the_reader_answers_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let params: Vec<Vec<u8>> = vec![
        br#"{"sessionId":"s","message":{"role":"user","content":"hi"}"#.to_vec(),
        br#"{"sessionId":"s","message":{"role":"user","content":"hi"}} x"#.to_vec(),
        br#"{"sessionId":"s","message":{"role":"user","content":"hi",}}"#.to_vec(),
        br#"{"sessionId":"s","message":{"role":"user","content":"\x"}}"#.to_vec(),
        b"{\"sessionId\":\"s\",\"message\":{\"role\":\"user\",\"content\":\"\xff\"}}".to_vec(),
        b"{\"sessionId\":\"s\",\"message\":{\"role\":\"user\",\"content\":\"a\nb\"}}".to_vec(),
        br#"{"sessionId":"s","message":{"role":"user","content":[{"type":"text","text":"a"}]},"message":1}"#.to_vec(),
        br#"{"sessionId":"s\u0041","message":{"role":"user","content":"hi"}}"#.to_vec(),
        br#"{"sessionId":"s","message":{"role":"user","content":"hi"},"sessionId":"t"}"#.to_vec(),
        br#"{"sessionId":"s","message":{"role":"user","content":"hi"},"extra":1}"#.to_vec(),
        br#"{"sessionId":"s" , "message":nul}"#.to_vec(),
        br#"{"sessionId":"s""#.to_vec(),
        br#"{"sessionId":"s"}"#.to_vec(),
        br#"{"sessionId":"s"}}"#.to_vec(),
        // Nested past serde_json's limit: parsed without it, then past
        // toolwire's own (answered with the request's id).
        format!(r#"{{"sessionId":"s","message":{{"role":"user","content":{}}}}}"#, deep(200))
            .into_bytes(),
        format!(r#"{{"sessionId":"s","message":{{"role":"user","content":{}}}}}"#, deep(2000))
            .into_bytes(),
        format!(r#"{{"sessionId":"s","message":{{"role":"user","content":{}"#, deep(200))
            .into_bytes(),
    ];
    let frame = |body: Vec<u8>| {
        let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
        frame.extend(body);
        frame
    };
    for (i, p) in params.iter().enumerate() {
        let mut replies = Vec::new();
        for head in [
            r#"{"jsonrpc":"2.0","id":7,"method":"pair/append","params":"#,
            r#"{"id":7,"jsonrpc":"2.0","method":"pair/append","params":"#,
        ] {
            let mut body = head.as_bytes().to_vec();
            body.extend_from_slice(p);
            body.push(b'}');
            c.send_raw(&frame(body)).await;
            let reply = tokio::time::timeout(std::time::Duration::from_secs(30), c.read())
                .await
                .unwrap_or_else(|_| panic!("params {i}: never answered"))
                .unwrap();
            replies.push(reply);
        }
        assert_eq!(
            replies[0],
            replies[1],
            "params {i}: {}",
            String::from_utf8_lossy(p)
        );
    }
    // And the connection still serves plain requests.
    c.call(
        "pair/append",
        json!({"sessionId": "s", "message": {"role": "user", "content": "hi"}}),
    )
    .await;
}

#[tokio::test]
async fn bad_input_gets_errors_and_the_server_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;

    c.send_raw(b"Content-Length: 9\r\n\r\n{not json").await;
    let m = c.read().await.unwrap();
    assert_eq!(m["error"]["code"], json!(-32700));
    assert_eq!(m["id"], Value::Null);

    c.send_raw(b"Garbage-Header\r\n\r\n").await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32700));
    c.send_raw(b"Content-Length: many\r\n\r\n").await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32700));

    c.send(&json!({"id": 5, "method": "state/get"})).await;
    let m = c.read().await.unwrap();
    assert_eq!(
        (m["id"].clone(), m["error"]["code"].clone()),
        (json!(5), json!(-32600))
    );
    c.send(&json!([])).await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32600));
    c.send(&json!("just a string")).await;
    assert_eq!(c.read().await.unwrap()["error"]["code"], json!(-32600));

    let e = c.fails("no/such", json!({}), -32601).await;
    assert_eq!(e["data"]["kind"], json!("methodNotFound"));
    c.fails("state/get", json!({"sessionId": ""}), -32602).await;
    c.fails("state/get", json!({"sessionId": ".hidden"}), -32602)
        .await;
    c.fails("state/get", json!({"sessionId": "x".repeat(129)}), -32602)
        .await;
    c.fails("state/get", json!({"sessionId": "a/b"}), -32602)
        .await;
    let e = c
        .fails("state/get", json!({"sessionId": "s", "extra": 1}), -32602)
        .await;
    assert!(e["message"].as_str().unwrap().contains("extra"), "{e}");
    c.fails("state/get", json!([1, 2]), -32602).await;
    c.fails(
        "transcript/repair",
        json!({"path": dir.path().join("none.jsonl")}),
        -32014,
    )
    .await;

    // Still serving.
    let state = c.call("state/get", json!({"sessionId": "ok-1.2_3"})).await;
    assert_eq!(state["seenIds"], json!([]));
}

/// After a frame larger than `BUFFER_KEPT` the connection keeps its read
/// buffer for the next frame, and frees it once the client pauses for
/// `BUFFER_IDLE`. Either way every frame is read whole: large requests
/// back to back, then one sent in two halves around a pause past the
/// release, each answered with exactly the result it carried. (Time is
/// paused: the pause takes none.)
#[tokio::test(start_paused = true)]
async fn large_frames_are_read_whole_back_to_back_and_across_a_pause() {
    use toolwire::transport::codec::LspCodec;
    use toolwire::transport::{BUFFER_IDLE, BUFFER_KEPT};
    if !common::local_only(
        "large_frames_are_read_whole_back_to_back_and_across_a_pause",
        "runs on paused time, which would fire the database client's timeouts; frames are read alike on every backend",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    let unlimited = json!({"maxResultChars": 100_000_000, "maxMessageChars": 100_000_000});
    c.initialize(
        dir.path(),
        json!({"durability": "none", "limits": unlimited}),
    )
    .await;
    // Each request carries a result of its own, sent whole and so echoed
    // in the reply: a byte of another frame would show.
    let params = |i: usize, fill: &str| {
        let id = format!("toolu_big_{i}");
        let text = format!("<{i}>{}</{i}>", fill.repeat(BUFFER_KEPT + i * 100_000));
        let messages = json!([assistant_calls(&[&id]), results(&[(&id, &text)])]);
        (json!({"sessionId": "big", "messages": messages}), text)
    };
    for (i, fill) in ["a", "b", "c"].into_iter().enumerate() {
        let (params, text) = params(i, fill);
        let r = c.call("budget/apply", params).await;
        assert_eq!(r["messages"][1]["content"][0]["content"], json!(text));
    }
    let (params, text) = params(3, "d");
    let body = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": 1000, "method": "budget/apply", "params": params}),
    )
    .unwrap();
    let mut frame = bytes::BytesMut::new();
    tokio_util::codec::Encoder::encode(&mut LspCodec::default(), body.into(), &mut frame).unwrap();
    let (first, rest) = frame.split_at(frame.len() / 2);
    c.send_raw(first).await;
    tokio::time::sleep(BUFFER_IDLE * 3).await;
    c.send_raw(rest).await;
    // A frame lost in the release would leave the server waiting for the
    // rest of it: with time paused, the timeout ends that wait at once.
    let m = tokio::time::timeout(BUFFER_IDLE * 600, c.response(1000))
        .await
        .expect("the frame sent in two halves was never answered");
    assert_eq!(
        m["result"]["messages"][1]["content"][0]["content"],
        json!(text)
    );
    // And small frames after it, once the buffer is freed again.
    tokio::time::sleep(BUFFER_IDLE * 3).await;
    let state = c.call("state/get", json!({"sessionId": "big"})).await;
    assert_eq!(state["seenIds"].as_array().map(Vec::len), Some(4));
}

#[tokio::test]
async fn batches_are_answered_in_one_array() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    c.send(&json!([
        {"jsonrpc": "2.0", "id": "a", "method": "pair/append", "params": {"sessionId": "s", "message": user_text("one")}},
        {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "zzz"}},
        {"jsonrpc": "2.0", "id": "b", "method": "state/get", "params": {"sessionId": "s"}},
        {"jsonrpc": "2.0", "id": "c", "method": "nope"},
        {"bogus": true}
    ]))
    .await;
    let reply = c.read().await.unwrap();
    let items = reply.as_array().expect("a batch answer is an array");
    assert_eq!(items.len(), 4);
    let by_id = |id: &str| {
        items
            .iter()
            .find(|m| m["id"] == json!(id))
            .cloned()
            .unwrap()
    };
    assert_eq!(by_id("a")["result"]["status"], json!("committed"));
    assert!(by_id("b")["result"]["seenIds"].is_array());
    assert_eq!(by_id("c")["error"]["code"], json!(-32601));
    assert!(items.iter().any(|m| m["error"]["code"] == json!(-32600)));
}

#[tokio::test]
async fn pipelined_appends_take_effect_in_the_order_sent() {
    if !common::local_transcripts("pipelined_appends_take_effect_in_the_order_sent") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _t) = connect(new_server());
    c.initialize(dir.path(), json!({"durability": "none"}))
        .await;
    let mut ids = Vec::new();
    for i in 0..201 {
        let message = if i % 3 == 1 {
            assistant_calls(&[&format!("call{i}")])
        } else if i % 3 == 2 {
            results(&[(&format!("call{}", i - 1), "out")])
        } else {
            user_text(&format!("turn {i}"))
        };
        ids.push(
            c.start("pair/append", json!({"sessionId": "p", "message": message}))
                .await,
        );
    }
    for id in ids {
        let r = c.response(id).await;
        assert!(r.get("result").is_some(), "{r}");
    }
    let messages = transcript_messages(&dir.path().join(".toolwire/sessions/p.jsonl"));
    assert_eq!(messages.len(), 201);
    assert_eq!(messages[0], user_text("turn 0"));
    assert_eq!(messages[198], user_text("turn 198"));
    assert_paired(&messages);
}

/// An artifact store whose writes wait until the test opens the gate.
#[derive(Clone, Default)]
struct Gate {
    open: Arc<(Mutex<bool>, std::sync::Condvar)>,
    entered: Arc<tokio::sync::Notify>,
}
impl Gate {
    fn release(&self) {
        let (lock, cvar) = &*self.open;
        *lock.lock().unwrap() = true;
        cvar.notify_all();
    }
}
impl ArtifactStore for Gate {
    fn write_once(&self, path: &Path, bytes: &[u8], fsync: bool) -> std::io::Result<Written> {
        self.entered.notify_one();
        let (lock, cvar) = &*self.open;
        let mut open = lock.lock().unwrap();
        while !*open {
            open = cvar.wait(open).unwrap();
        }
        FsArtifactStore.write_once(path, bytes, fsync)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_requests_answer_32800_and_commit_nothing() {
    let gate = Gate::default();
    let server = Server::new(Storage {
        artifacts: Arc::new(gate.clone()),
        ..Storage::default()
    });
    let (mut c, _t) = connect(server);
    let dir = tempfile::tempdir().unwrap();
    c.initialize(dir.path(), json!({})).await;
    let big =
        |id: &str| json!({"sessionId": "s", "messages": [results(&[(id, &"c".repeat(60_000))])]});

    // A is persisting (held at the gate); B waits behind it in the queue.
    let a = c.start("budget/apply", big("A")).await;
    gate.entered.notified().await;
    let b = c.start("budget/apply", big("B")).await;
    let g = c.start("state/get", json!({"sessionId": "s"})).await;
    // Readers do not queue behind the session's work.
    assert_eq!(c.response(g).await["result"]["seenIds"], json!([]));
    c.notify("$/cancelRequest", json!({"id": a})).await;
    c.notify("$/cancelRequest", json!({"id": b})).await;
    // A sync point: the reader has handled both cancels once this answers.
    c.call("state/get", json!({"sessionId": "other"})).await;
    gate.release();
    for id in [a, b] {
        let r = c.response(id).await;
        assert_eq!(r["error"]["code"], json!(-32800), "{r}");
        assert_eq!(r["error"]["data"]["kind"], json!("cancelled"));
    }
    let state = c.call("state/get", json!({"sessionId": "s"})).await;
    assert_eq!(state["seenIds"], json!([]), "nothing half-committed");
    // Not cancelled: the same work goes through, reusing A's artifact.
    let r = c.call("budget/apply", big("A")).await;
    assert_eq!(r["persisted"][0]["reused"], json!(true));
}

#[tokio::test]
async fn connections_share_sessions_and_order_across_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = new_server();
    let (mut a, _ta) = connect(server.clone());
    let (mut b, _tb) = connect(server.clone());
    a.initialize(dir.path(), json!({})).await;
    b.initialize(dir.path(), json!({})).await;
    a.call(
        "budget/apply",
        json!({"sessionId": "shared", "messages": [results(&[("x", &"s".repeat(60_000))])]}),
    )
    .await;
    let state = b.call("state/get", json!({"sessionId": "shared"})).await;
    assert_eq!(state["seenIds"], json!(["x"]));
}

/// A small `pair/append` has its params decoded from the request's text,
/// not from a parsed value first; every request that way does what it did
/// the value's way: a duplicate member counts once (the last), an unknown
/// member or a bad message is refused naming it and changes nothing, an
/// escaped method name and a request with an extra envelope member are
/// answered as before.
#[tokio::test]
async fn pair_append_params_read_from_text_are_those_the_value_gives() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _task) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let frame = |body: &str| format!("Content-Length: {}\r\n\r\n{body}", body.len());
    let calls = assistant_calls(&["toolu_dup"]).to_string();

    // The last `sessionId` is the one the call appends to.
    c.send_raw(
        frame(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"pair/append","params":{{"sessionId":"first","message":{calls},"sessionId":"last"}}}}"#
        ))
        .as_bytes(),
    )
    .await;
    let m = c.read().await.unwrap();
    assert_eq!(m["id"], json!(1), "{m}");
    assert_eq!(m["result"]["pending"], json!(["toolu_dup"]), "{m}");
    let last = c.call("state/get", json!({"sessionId": "last"})).await;
    assert_eq!(last["pending"], json!(["toolu_dup"]), "{last}");
    let first = c.call("state/get", json!({"sessionId": "first"})).await;
    assert_eq!(first["pending"], json!([]), "{first}");
    // The same when the last one is spelled with escapes, behind a first
    // one the reader's quick look could take.
    c.send_raw(
        frame(&format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"pair/append","params":{{"sessionId":"one","message":{calls},"session\u0049d":"other"}}}}"#
        ))
        .as_bytes(),
    )
    .await;
    let m = c.read().await.unwrap();
    assert_eq!(m["id"], json!(5), "{m}");
    assert_eq!(m["result"]["pending"], json!(["toolu_dup"]), "{m}");
    let other = c.call("state/get", json!({"sessionId": "other"})).await;
    assert_eq!(other["pending"], json!(["toolu_dup"]), "{other}");
    let one = c.call("state/get", json!({"sessionId": "one"})).await;
    assert_eq!(one["pending"], json!([]), "{one}");

    // Refused, naming what is wrong; the session is unchanged.
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "bad", "message": user_text("hi"), "extra": 1}),
            -32602,
        )
        .await;
    assert!(e["message"].as_str().unwrap().contains("extra"), "{e}");
    let e = c
        .fails(
            "pair/append",
            json!({"sessionId": "bad", "message": 5}),
            -32602,
        )
        .await;
    assert!(e["message"].as_str().unwrap().contains("message"), "{e}");
    let e = c
        .fails("pair/append", json!({"message": user_text("hi")}), -32602)
        .await;
    assert!(e["message"].as_str().unwrap().contains("sessionId"), "{e}");
    let bad = c.call("state/get", json!({"sessionId": "bad"})).await;
    assert_eq!(bad["pending"], json!([]), "{bad}");
    assert!(
        !dir.path().join(".toolwire/sessions/bad.jsonl").exists(),
        "a refused append created the transcript"
    );

    // A session id with an escape in it is not read by the reader's quick
    // look; the append still reaches the session it names.
    c.send_raw(
        frame(&format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"pair/append","params":{{"sessionId":"s\u002dx","message":{calls}}}}}"#
        ))
        .as_bytes(),
    )
    .await;
    let m = c.read().await.unwrap();
    assert_eq!(m["result"]["pending"], json!(["toolu_dup"]), "{m}");
    let escaped = c.call("state/get", json!({"sessionId": "s-x"})).await;
    assert_eq!(escaped["pending"], json!(["toolu_dup"]), "{escaped}");

    // An escaped method name, and an envelope with a member JSON-RPC does
    // not define, still reach the method.
    let user = user_text("plain").to_string();
    for (id, body) in [
        (
            2,
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"pair\/append","params":{{"sessionId":"esc","message":{user}}}}}"#
            ),
        ),
        (
            3,
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"pair/append","params":{{"sessionId":"esc","message":{user}}},"x":1}}"#
            ),
        ),
    ] {
        c.send_raw(frame(&body).as_bytes()).await;
        let m = c.read().await.unwrap();
        assert_eq!(m["id"], json!(id), "{m}");
        assert_eq!(m["result"]["written"], json!(1), "{m}");
    }
}
