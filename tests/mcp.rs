//! `toolwire mcp` against real third-party MCP software, pinned and
//! installed by `tests/setup.d/30-mcp.sh`: a server written with the
//! official Python SDK (`tests/mcp/sized_server.py`), the reference
//! "everything" server from npm, and the official Python SDK's stdio client
//! (`tests/mcp/client_checks.py`).

mod common;
mod mcp_peer;

use std::path::Path;
use std::process::Command;

use mcp_peer::{Peer, everything_server, front_argv, mcp_dir, python, sized_server};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn client_checks(scenario: &str, data: &Path) -> Value {
    let out = Command::new(python())
        .arg(mcp_dir().join("client_checks.py"))
        .args([scenario, env!("CARGO_BIN_EXE_toolwire")])
        .arg(data)
        .output()
        .expect("running client_checks.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client_checks.py {scenario} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|err| panic!("summary is not JSON ({err}): {stdout}"))
}

fn artifact(data: &Path, session: &str, uri: &str) -> std::path::PathBuf {
    let id = uri.rsplit('/').next().unwrap();
    data.join(".toolwire/sessions")
        .join(session)
        .join("tool-results")
        .join(format!("{id}.txt"))
}

/// The official client through the front to the Python SDK server: small
/// results whole, large ones as preview + link, the exact original back
/// through `resources/read` and `read_saved_output` in pages, the server's
/// resources and prompts untouched, a crash mid-call an error.
#[test]
fn official_client_through_the_front_to_a_python_sdk_server() {
    let data = tempfile::tempdir().unwrap();
    let summary = client_checks("sized", data.path());

    let uri = summary["uri"].as_str().unwrap();
    let saved = std::fs::read(artifact(data.path(), "checks", uri)).unwrap();
    let digest: String = Sha256::digest(&saved)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        digest,
        summary["sha256"].as_str().unwrap(),
        "the artifact holds the original, byte for byte"
    );
    let path = artifact(data.path(), "checks", uri);
    let preview = summary["preview"].as_str().unwrap();
    assert!(
        preview.contains(&format!("Full output saved to: {}", path.display())),
        "the preview names the artifact: {preview:.300}"
    );
    assert!(summary["pages"].as_u64().unwrap() > 2);
    let crash = &summary["crashError"];
    assert_eq!(crash["code"], json!(-32603), "{crash}");
    assert!(
        crash["message"]
            .as_str()
            .unwrap()
            .contains("MCP server exited"),
        "{crash}"
    );
}

/// The official client through the front to the reference server.
#[test]
fn official_client_through_the_front_to_the_everything_server() {
    let data = tempfile::tempdir().unwrap();
    let summary = client_checks("everything", data.path());
    assert!(summary["resources"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["prompts"].as_u64().unwrap() > 0, "{summary}");
    assert!(
        data.path()
            .join(".toolwire/sessions/checks/tool-results")
            .is_dir(),
        "the large echo was saved"
    );
}

/// Written by hand, with spacing, key order and numbers no serializer
/// would produce, and a field no revision defines.
fn initialize(id: i64, version: &str) -> String {
    format!(
        r#"{{"id": {id}, "jsonrpc":"2.0", "method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"raw","version":"0"}},"xUnknownField":{{"kept":[1,2.50,1e400]}}}}}}"#
    )
}

fn call(id: i64, tool: &str, args: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
        .to_string()
}

/// The same conversation, line for line, directly and through the front:
/// every response that the front has no reason to touch is byte-identical
/// (small results, structured content, images, resources, prompts, errors,
/// a method nobody knows, a request with fields nobody knows).
#[test]
fn small_results_and_everything_else_pass_byte_for_byte() {
    let data = tempfile::tempdir().unwrap();
    let script: Vec<(i64, String)> = vec![
        (1, initialize(1, "2025-11-25")),
        (2, call(2, "text", json!({"size": 300}))),
        (3, call(3, "report", json!({"size": 400}))),
        (4, call(4, "text_and_image", json!({"size": 200_000}))),
        (5, json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": "sized://notes/b"}}).to_string()),
        (6, json!({"jsonrpc": "2.0", "id": 6, "method": "prompts/get", "params": {"name": "review", "arguments": {"code": "y"}}}).to_string()),
        (7, json!({"jsonrpc": "2.0", "id": 7, "method": "prompts/list"}).to_string()),
        (8, json!({"jsonrpc": "2.0", "id": 8, "method": "resources/templates/list"}).to_string()),
        (9, json!({"jsonrpc": "2.0", "id": 9, "method": "vendor/unknownMethod", "params": {"x": 1}}).to_string()),
        (10, json!({"jsonrpc": "2.0", "id": 10, "method": "ping"}).to_string()),
        (11, call(11, "no_such_tool", json!({}))),
        (12, json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "text", "arguments": {"size": 5}, "_meta": {"progressToken": "p1"}}, "xExtra": true}).to_string()),
    ];
    let mut answers = Vec::new();
    for argv in [sized_server(), front_argv("raw", &[], &sized_server())] {
        let mut peer = Peer::start(&argv, data.path());
        let mut got = Vec::new();
        for (id, line) in &script {
            got.push(peer.request(*id, line));
            if *id == 1 {
                peer.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
            }
        }
        assert!(peer.finish().success());
        answers.push(got);
    }
    for (i, (direct, front)) in answers[0].iter().zip(&answers[1]).enumerate() {
        assert_eq!(direct, front, "response {} differs", script[i].0);
    }
    // Nothing was big enough to save (the image result is never eligible).
    assert!(
        !data
            .path()
            .join(".toolwire/sessions/raw/tool-results")
            .exists()
    );
}

/// Bad JSON from either side, an old protocol revision, the read tool
/// turned off, and a clean exit when the client goes.
#[test]
fn bad_lines_old_revisions_and_options() {
    let data = tempfile::tempdir().unwrap();
    let mut front = Peer::start(&front_argv("old", &[], &sized_server()), data.path());
    front.send("this is not json");
    let parse: Value = serde_json::from_str(&front.next_line().unwrap()).unwrap();
    assert_eq!(parse["error"]["code"], json!(-32700), "{parse}");
    assert_eq!(parse["id"], Value::Null);

    // 2025-03-26 has no resource_link and no outputSchema.
    let init: Value =
        serde_json::from_str(&front.request(1, &initialize(1, "2025-03-26"))).unwrap();
    assert_eq!(init["result"]["protocolVersion"], json!("2025-03-26"));
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let list: Value = serde_json::from_str(
        &front.request(2, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#),
    )
    .unwrap();
    let tools = list["result"]["tools"].as_array().unwrap();
    let read = tools.last().unwrap();
    assert_eq!(read["name"], json!("read_saved_output"));
    assert!(read.get("outputSchema").is_none(), "{read}");

    let big: Value =
        serde_json::from_str(&front.request(3, &call(3, "text", json!({"size": 60_000})))).unwrap();
    let content = big["result"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{content:?}");
    assert!(
        content[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("<persisted-output>")
    );
    assert_eq!(content[1]["type"], json!("text"));
    assert!(
        content[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("Saved output: toolwire://saved-output/old/mcp-")
    );

    // A line from the server that is not JSON is dropped; the call after it
    // is answered as usual.
    let noise: Value =
        serde_json::from_str(&front.request(4, &call(4, "noise", json!({})))).unwrap();
    assert_eq!(
        noise["result"]["content"][0]["text"],
        json!("ok"),
        "{noise}"
    );
    assert!(
        front.other.iter().all(|l| !l.contains("not JSON")),
        "{:?}",
        front.other
    );
    assert!(
        front.finish().success(),
        "the front exits 0 when its client goes"
    );

    // --no-read-tool: not listed, and a call goes to the server (which has
    // no such tool).
    let mut off = Peer::start(
        &front_argv("off", &["--no-read-tool"], &sized_server()),
        data.path(),
    );
    off.request(1, &initialize(1, "2025-11-25"));
    off.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let list: Value =
        serde_json::from_str(&off.request(2, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#))
            .unwrap();
    assert!(
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"] != json!("read_saved_output"))
    );
    let call: Value =
        serde_json::from_str(&off.request(3, &call(3, "read_saved_output", json!({"uri": "x"}))))
            .unwrap();
    assert_eq!(
        call["result"]["isError"],
        json!(true),
        "the server's own unknown-tool answer: {call}"
    );
    assert!(off.finish().success());
}

/// A server that cannot be started is a clear error, not a hang.
#[test]
fn a_missing_server_command_fails_clearly() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolwire"))
        .current_dir(data.path())
        .args(["mcp", "--", "/nonexistent/mcp-server"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot start the MCP server `/nonexistent/mcp-server`"),
        "{stderr}"
    );
}

#[test]
fn the_everything_server_is_installed() {
    // The reference server is required, not optional: its absence fails here
    // with the command that installs it.
    let argv = everything_server();
    assert!(Path::new(&argv[1]).exists());
}

/// With `storage.backend = "postgres"` in the workspace's toolwire.toml the
/// front decides through the shared store: its decision is a row in the
/// database (no transcript file), and a session forked from the front's by
/// a `toolwire serve` replica on the same database reads the output its
/// parent saved, through another front's `read_saved_output` and
/// `resources/read`.
#[test]
fn on_the_shared_store_a_fork_reads_what_the_front_saved() {
    let (db, _store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(
        data.path().join("toolwire.toml"),
        format!("[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n"),
    )
    .unwrap();
    let link_of = |reply: &str| -> String {
        let at = reply
            .find("toolwire://saved-output/")
            .unwrap_or_else(|| panic!("no saved-output link: {reply}"));
        reply[at..]
            .split(['"', '\\', ' '])
            .next()
            .unwrap()
            .to_owned()
    };

    // The original, straight from the server.
    let mut direct = Peer::start(&sized_server(), data.path());
    direct.request(1, &initialize(1, "2025-11-25"));
    direct.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let original: Value =
        serde_json::from_str(&direct.request(2, &call(2, "text", json!({"size": 60_000}))))
            .unwrap();
    let original = original["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(direct.finish().success());

    let mut parent = Peer::start(&front_argv("mcp-parent", &[], &sized_server()), data.path());
    parent.request(1, &initialize(1, "2025-11-25"));
    parent.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let saved = link_of(&parent.request(2, &call(2, "text", json!({"size": 60_000}))));
    assert!(parent.finish().success());
    assert!(
        !data
            .path()
            .join(".toolwire/sessions/mcp-parent.jsonl")
            .exists(),
        "the front's decision went to the database, not to a transcript file"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (mut serve, _child) = common::spawn_binary(data.path());
        serve.initialize(data.path(), json!({})).await;
        let parent = serve
            .call("state/get", json!({"sessionId": "mcp-parent"}))
            .await;
        assert_eq!(
            parent["seenIds"].as_array().map(Vec::len),
            Some(1),
            "a replica on the same database sees the front's decision: {parent}"
        );
        serve
            .call(
                "state/fork",
                json!({"sessionId": "mcp-parent", "newSessionId": "mcp-child"}),
            )
            .await;
    });

    let inherited = saved.replace("/mcp-parent/", "/mcp-child/");
    let mut child = Peer::start(&front_argv("mcp-child", &[], &sized_server()), data.path());
    child.request(1, &initialize(1, "2025-11-25"));
    child.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let read: Value = serde_json::from_str(&child.request(
        2,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": inherited}})
            .to_string(),
    ))
    .unwrap();
    assert_eq!(
        read["result"]["contents"][0]["text"].as_str(),
        Some(original.as_str()),
        "{read}"
    );
    let page: Value = serde_json::from_str(&child.request(
        3,
        &call(
            3,
            "read_saved_output",
            json!({"uri": inherited, "limit": 3}),
        ),
    ))
    .unwrap();
    let first_lines: Vec<&str> = original.lines().take(3).collect();
    assert_eq!(
        page["result"]["content"][0]["text"]
            .as_str()
            .map(|t| t.lines().collect::<Vec<_>>()),
        Some(first_lines),
        "{page}"
    );
    assert!(child.finish().success());
}

/// After a tool result large enough to budget, once the front has had a
/// quiet second, it hands what budgeting freed back to the system
/// (`heap::LargeWork`).
#[test]
fn a_quiet_front_hands_back_what_a_large_result_freed() {
    const RELEASED: &str = "handed the memory freed by large work back to the system";
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("front.log");
    let mut front = Peer::start_logging(
        &front_argv("quiet", &[], &sized_server()),
        data.path(),
        "toolwire=warn,toolwire::heap=debug",
        &log,
    );
    let released = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .matches(RELEASED)
            .count()
    };
    let wait_for = |count: usize| {
        let deadline = std::time::Instant::now() + mcp_peer::WAIT;
        while released() < count {
            assert!(std::time::Instant::now() < deadline, "no release {count}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    front.request(1, &initialize(1, "2025-11-25"));
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    for (id, round) in [(2, 1), (3, 2)] {
        let reply = front.request(id, &call(id, "text", json!({"size": 200_000})));
        assert!(reply.contains("persisted-output"), "{reply}");
        wait_for(round);
        assert_eq!(released(), round, "one release per quiet spell");
    }
    assert!(front.finish().success());
}
