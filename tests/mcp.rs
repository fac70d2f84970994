//! `toolwire mcp` against real third-party MCP software, pinned and
//! installed by `tests/setup.d/30-mcp.sh`: a server written with the
//! official Python SDK (`tests/mcp/sized_server.py`), the reference
//! "everything" server from npm, and the official Python SDK's stdio client
//! (`tests/mcp/client_checks.py`).

mod common;
mod mcp_peer;

use std::path::Path;
use std::process::Command;

use mcp_peer::{
    Peer, everything_server, front_argv, mcp_dir, odd_server, python, sized_server,
    sized_server_era,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn client_checks(scenario: &str, data: &Path) -> Value {
    client_checks_with(scenario, data, &[])
}

fn client_checks_with(scenario: &str, data: &Path, extra: &[&str]) -> Value {
    let out = Command::new(python())
        .arg(mcp_dir().join("client_checks.py"))
        .args([scenario, env!("CARGO_BIN_EXE_toolwire")])
        .arg(data)
        .args(extra)
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

/// A 2026-07-28 client through the front to the reference server, which
/// (at the pinned version, built on the TypeScript SDK 1.x) speaks
/// 2025-11-25 only: the front makes the handshake for the client and
/// answers its `server/discover`.
#[test]
fn a_modern_client_through_the_front_to_the_everything_server() {
    let data = tempfile::tempdir().unwrap();
    let summary = client_checks("everything-modern", data.path());
    assert_eq!(
        summary["server"],
        json!("mcp-servers/everything"),
        "{summary}"
    );
    assert!(summary["resources"].as_u64().unwrap() > 0, "{summary}");
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

/// The front holds a large result at most about twice while passing it on
/// (the line it read, and the content parsed out of it, which is moved into
/// budgeting and saved from there, not copied): its peak resident memory
/// over its own after `initialize` stays under twice the result's line
/// plus a margin, whether the result is replaced by a preview or passed
/// through whole. (It was 6.5 times the result.) A bound on memory, read
/// from `/proc/PID/status`, not on time.
#[test]
fn a_large_result_is_held_at_most_twice() {
    const SIZE: u64 = 25_000_000;
    // What a debug build touches of its own code and runtime to budget and
    // save a result, beyond the result itself.
    const MARGIN_MB: f64 = 24.0;
    let data = tempfile::tempdir().unwrap();
    for tool in ["text", "text_and_image"] {
        let mut direct = Peer::start(&sized_server(), data.path());
        direct.request(1, &initialize(1, "2025-11-25"));
        direct.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let whole = direct.request(2, &call(2, tool, json!({"size": SIZE})));
        assert!(direct.finish().success());

        let mut front = Peer::start(&front_argv("held", &[], &sized_server()), data.path());
        front.request(1, &initialize(1, "2025-11-25"));
        front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let idle = peak_mb(front.pid());
        let answer = front.request(2, &call(2, tool, json!({"size": SIZE})));
        let peak = peak_mb(front.pid());
        assert!(front.finish().success());
        if tool == "text" {
            assert!(answer.contains("persisted-output"), "replaced");
        } else {
            assert_eq!(answer, whole, "passed through byte for byte");
        }
        let result = whole.len() as f64 / f64::from(1 << 20);
        assert!(
            peak - idle <= 2.0 * result + MARGIN_MB,
            "{tool}: peak {peak:.1} MB, {idle:.1} MB after initialize, for a result of {result:.1} MB"
        );
    }
}

/// A large result whose saved output cannot be written (a file stands
/// where the session's output directory goes) is passed on whole, byte for
/// byte: its text, moved into budgeting to be saved, comes back in place.
#[test]
fn a_result_that_cannot_be_saved_passes_whole_byte_for_byte() {
    let data = tempfile::tempdir().unwrap();
    let mut direct = Peer::start(&sized_server(), data.path());
    direct.request(1, &initialize(1, "2025-11-25"));
    direct.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let whole = direct.request(2, &call(2, "text", json!({"size": 200_000})));
    assert!(direct.finish().success());

    let session = data.path().join(".toolwire/sessions/blocked");
    std::fs::create_dir_all(&session).unwrap();
    std::fs::write(session.join("tool-results"), "not a directory").unwrap();
    let mut front = Peer::start(&front_argv("blocked", &[], &sized_server()), data.path());
    front.request(1, &initialize(1, "2025-11-25"));
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let answer = front.request(2, &call(2, "text", json!({"size": 200_000})));
    assert!(front.finish().success());
    assert_eq!(answer, whole);
}

/// VmHWM of a process, in MB.
fn peak_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb / 1024.0
}

// ------------------------------------------------ MCP revision 2026-07-28 --

/// The official client of one era through the front to the official SDK's
/// server of one era (`client_checks.py pairing`): handshake or discovery
/// answered in the client's terms, tools in the server's order with ours
/// last, small results whole, a large one replaced by a preview and a
/// `resource_link` and read back whole (resources/read and
/// read_saved_output), the server's declared `maxResultSizeChars`
/// honoured, its caching hints unchanged, "resource not found" in the
/// client's revision's numbering, `limit: 0` refused with a reason, and
/// (for a 2025-11-25 client) the server's question to the user answered.
fn pairing(client: &str, server: &str) {
    let data = tempfile::tempdir().unwrap();
    let summary = client_checks_with("pairing", data.path(), &[client, server]);
    let session = format!("pair-{client}-{server}");
    let uri = summary["uri"].as_str().unwrap();
    let saved = std::fs::read(artifact(data.path(), &session, uri)).unwrap();
    let digest: String = Sha256::digest(&saved)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(digest, summary["sha256"].as_str().unwrap(), "{summary}");
    let modern = client == "modern";
    assert_eq!(
        summary["protocolVersion"],
        json!(if modern { "2026-07-28" } else { "2025-11-25" }),
        "{summary}"
    );
    assert_eq!(
        summary["notFoundCode"],
        json!(if modern { -32602 } else { -32002 }),
        "{summary}"
    );
    assert!(
        summary["limitZero"]
            .as_str()
            .unwrap()
            .contains("must be at least 1"),
        "{summary}"
    );
    if !modern {
        // A 2026-07-28 server's input round reaches a 2025-11-25 client as
        // the `elicitation/create` request of its revision.
        assert_eq!(summary["greeting"], json!("Hello, Ada!"), "{summary}");
    }
}

#[test]
fn pairing_legacy_client_legacy_server() {
    pairing("legacy", "legacy");
}

#[test]
fn pairing_legacy_client_modern_server() {
    pairing("legacy", "modern");
}

#[test]
fn pairing_modern_client_legacy_server() {
    pairing("modern", "legacy");
}

#[test]
fn pairing_modern_client_modern_server() {
    pairing("modern", "modern");
}

const META_V: &str = "io.modelcontextprotocol/protocolVersion";

/// A 2026-07-28 request, written out by hand.
fn modern(id: i64, method: &str, params: Value) -> String {
    let mut params = params;
    params["_meta"] = json!({
        META_V: "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A 2026-07-28 conversation, line for line, with the SDK's modern-only
/// server directly and through the front: everything the front has no
/// reason to touch is byte-identical (`server/discover` of a server with
/// resources, small and structured results of any JSON value, the
/// server's resources with their caching hints, prompts, errors, unknown
/// methods); `tools/list` differs only by our tool, appended after the
/// server's in the server's order with its caching hints unchanged.
#[test]
fn modern_results_pass_byte_for_byte() {
    let data = tempfile::tempdir().unwrap();
    let script: Vec<(i64, String)> = vec![
        (1, modern(1, "server/discover", json!({}))),
        (
            2,
            modern(
                2,
                "tools/call",
                json!({"name": "text", "arguments": {"size": 300}}),
            ),
        ),
        (
            3,
            modern(
                3,
                "tools/call",
                json!({"name": "report", "arguments": {"size": 400}}),
            ),
        ),
        (
            4,
            modern(
                4,
                "tools/call",
                json!({"name": "numbers", "arguments": {"count": 4}}),
            ),
        ),
        (
            5,
            modern(5, "resources/read", json!({"uri": "sized://notes/b"})),
        ),
        (6, modern(6, "resources/templates/list", json!({}))),
        (7, modern(7, "prompts/list", json!({}))),
        (
            8,
            modern(
                8,
                "prompts/get",
                json!({"name": "review", "arguments": {"code": "y"}}),
            ),
        ),
        (9, modern(9, "vendor/unknownMethod", json!({"x": 1}))),
        (
            10,
            modern(
                10,
                "tools/call",
                json!({"name": "no_such_tool", "arguments": {}}),
            ),
        ),
        (11, modern(11, "tools/list", json!({}))),
    ];
    let mut answers = Vec::new();
    for argv in [
        sized_server_era("modern"),
        front_argv("modern-raw", &[], &sized_server_era("modern")),
    ] {
        let mut peer = Peer::start(&argv, data.path());
        let got: Vec<String> = script
            .iter()
            .map(|(id, line)| peer.request(*id, line))
            .collect();
        assert!(peer.finish().success());
        answers.push(got);
    }
    for (i, (direct, front)) in answers[0].iter().zip(&answers[1]).enumerate() {
        if script[i].0 == 11 {
            continue;
        }
        assert_eq!(direct, front, "response {} differs", script[i].0);
    }
    let numbers: Value = serde_json::from_str(&answers[1][3]).unwrap();
    assert_eq!(numbers["result"]["structuredContent"], json!([0, 1, 2, 3]));
    let note: Value = serde_json::from_str(&answers[1][4]).unwrap();
    assert_eq!(
        (&note["result"]["ttlMs"], &note["result"]["cacheScope"]),
        (&json!(30_000), &json!("private")),
        "{note}"
    );
    let direct: Value = serde_json::from_str(&answers[0][10]).unwrap();
    let front: Value = serde_json::from_str(&answers[1][10]).unwrap();
    let mut expected = direct["result"].clone();
    let tools = front["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["name"], json!("read_saved_output"));
    expected["tools"]
        .as_array_mut()
        .unwrap()
        .push(tools.last().unwrap().clone());
    assert_eq!(front["result"], expected, "only our tool is added");
    assert_eq!(
        (&front["result"]["ttlMs"], &front["result"]["cacheScope"]),
        (&json!(300_000), &json!("public"))
    );
}

/// A 2025-11-25 client in front of a 2026-07-28-only server: the front
/// answers `initialize` from `server/discover`, answers `ping` and
/// `logging/setLevel` (gone from the modern revision) itself, stamps the
/// client's requests with the modern `_meta`, and passes the server's
/// results on unchanged, caching hints and `resultType` included.
#[test]
fn a_legacy_client_meets_a_modern_server() {
    let data = tempfile::tempdir().unwrap();
    let mut front = Peer::start(
        &front_argv("l2m", &[], &sized_server_era("modern")),
        data.path(),
    );
    let init: Value =
        serde_json::from_str(&front.request(1, &initialize(1, "2025-06-18"))).unwrap();
    assert_eq!(
        init["result"]["protocolVersion"],
        json!("2025-06-18"),
        "{init}"
    );
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        json!("sized"),
        "{init}"
    );
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let ping: Value =
        serde_json::from_str(&front.request(2, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#))
            .unwrap();
    assert_eq!(ping["result"], json!({}), "{ping}");
    let level: Value = serde_json::from_str(&front.request(
        3,
        r#"{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"info"}}"#,
    ))
    .unwrap();
    assert_eq!(level["result"], json!({}), "{level}");
    let list: Value = serde_json::from_str(
        &front.request(4, r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#),
    )
    .unwrap();
    assert_eq!(list["result"]["ttlMs"], json!(300_000), "{list}");
    assert_eq!(list["result"]["cacheScope"], json!("public"), "{list}");
    assert_eq!(list["result"]["resultType"], json!("complete"), "{list}");
    let read_tool = list["result"]["tools"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(read_tool["name"], json!("read_saved_output"));
    let small: Value =
        serde_json::from_str(&front.request(5, &call(5, "text", json!({"size": 300})))).unwrap();
    assert_eq!(small["result"]["resultType"], json!("complete"), "{small}");
    assert!(front.finish().success());
}

/// A 2026-07-28 client in front of a 2025-11-25-only server: the front
/// makes the handshake for it, answers `server/discover`, refuses a
/// version it cannot serve with the renumbered -32022, and completes the
/// server's results with `resultType` and caching hints (fresh for no
/// time, private: the server gave none).
#[test]
fn a_modern_client_meets_a_legacy_server() {
    let data = tempfile::tempdir().unwrap();
    let mut front = Peer::start(
        &front_argv("m2l", &[], &sized_server_era("legacy")),
        data.path(),
    );
    let list: Value =
        serde_json::from_str(&front.request(1, &modern(1, "tools/list", json!({})))).unwrap();
    assert_eq!(list["result"]["resultType"], json!("complete"), "{list}");
    assert_eq!(
        (&list["result"]["ttlMs"], &list["result"]["cacheScope"]),
        (&json!(0), &json!("private"))
    );
    let found: Value =
        serde_json::from_str(&front.request(2, &modern(2, "server/discover", json!({})))).unwrap();
    assert_eq!(
        found["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{found}"
    );
    assert_eq!(
        found["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        json!("sized")
    );
    let mut other = modern(3, "tools/list", json!({}));
    other = other.replace("2026-07-28", "2031-01-01");
    let refused: Value = serde_json::from_str(&front.request(3, &other)).unwrap();
    assert_eq!(refused["error"]["code"], json!(-32022), "{refused}");
    assert_eq!(
        refused["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2031-01-01"})
    );
    let call: Value = serde_json::from_str(&front.request(
        4,
        &modern(
            4,
            "tools/call",
            json!({"name": "text", "arguments": {"size": 60_000}}),
        ),
    ))
    .unwrap();
    let content = call["result"]["content"].as_array().unwrap();
    assert_eq!(content[1]["type"], json!("resource_link"), "{call}");
    assert_eq!(call["result"]["resultType"], json!("complete"));
    assert!(front.finish().success());
}

/// A server that speaks neither revision — refusing both `initialize` and
/// `server/discover`, answering with lines that are not JSON, or silent —
/// gets the client a clear error naming what it answered, not a hang,
/// whichever revision the client speaks.
#[test]
fn a_server_of_neither_revision_is_a_clear_error() {
    let data = tempfile::tempdir().unwrap();
    for mode in ["refuses", "garbage", "silent"] {
        for legacy in [true, false] {
            let mut front = Peer::start(
                &front_argv(
                    "neither",
                    &["--handshake-timeout", "1"],
                    &odd_server(mode, &[]),
                ),
                data.path(),
            );
            let line = if legacy {
                initialize(1, "2025-11-25")
            } else {
                modern(1, "tools/list", json!({}))
            };
            let answer: Value = serde_json::from_str(&front.request(1, &line)).unwrap();
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("speaks neither MCP"),
                "{mode} (legacy client: {legacy}): {answer}"
            );
            let expected = match mode {
                "refuses" => "error -32601",
                _ => "nothing within 1 s",
            };
            assert!(message.contains(expected), "{mode}: {message}");
            assert!(front.finish().success());
        }
    }
}

/// A server with no tools and no resources: the front's own additions are
/// merged into its `initialize` result and (for a 2026-07-28 client,
/// behind the same server) its `server/discover` answer, and the front
/// lists and answers `read_saved_output`, `resources/list` and
/// `resources/templates/list` alone.
#[test]
fn the_fronts_additions_are_merged_into_a_bare_server() {
    let data = tempfile::tempdir().unwrap();
    let mut legacy = Peer::start(
        &front_argv("bare", &[], &odd_server("toolless", &[])),
        data.path(),
    );
    let init: Value =
        serde_json::from_str(&legacy.request(1, &initialize(1, "2025-11-25"))).unwrap();
    assert_eq!(
        init["result"]["capabilities"],
        json!({"prompts": {}, "resources": {}, "tools": {}}),
        "{init}"
    );
    legacy.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let list: Value = serde_json::from_str(
        &legacy.request(2, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#),
    )
    .unwrap();
    let names: Vec<&Value> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, [&json!("read_saved_output")], "{list}");
    assert!(legacy.finish().success());

    let mut modern_client = Peer::start(
        &front_argv("bare", &[], &odd_server("toolless", &[])),
        data.path(),
    );
    let found: Value =
        serde_json::from_str(&modern_client.request(1, &modern(1, "server/discover", json!({}))))
            .unwrap();
    assert_eq!(
        found["result"]["capabilities"],
        json!({"prompts": {}, "resources": {}, "tools": {}}),
        "{found}"
    );
    let list: Value =
        serde_json::from_str(&modern_client.request(2, &modern(2, "tools/list", json!({}))))
            .unwrap();
    assert_eq!(
        list["result"]["tools"][0]["name"],
        json!("read_saved_output")
    );
    assert_eq!(list["result"]["resultType"], json!("complete"), "{list}");
    let templates: Value = serde_json::from_str(
        &modern_client.request(3, &modern(3, "resources/templates/list", json!({}))),
    )
    .unwrap();
    assert_eq!(
        templates["result"],
        json!({"resourceTemplates": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"})
    );
    assert!(modern_client.finish().success());
}

/// `tools.<name>.maxResultChars` in the configuration wins over the
/// server's `anthropic/maxResultSizeChars` on the tool.
#[test]
fn configuration_overrides_a_declared_result_size() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(
        data.path().join("toolwire.toml"),
        "[tools.roomy]\nmax_result_chars = 1000\n",
    )
    .unwrap();
    let mut front = Peer::start(&front_argv("sizes", &[], &sized_server()), data.path());
    front.request(1, &initialize(1, "2025-11-25"));
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    front.request(2, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let roomy = front.request(3, &call(3, "roomy", json!({"size": 5_000})));
    assert!(roomy.contains("<persisted-output>"), "{roomy:.300}");
    let text = front.request(4, &call(4, "text", json!({"size": 5_000})));
    assert!(!text.contains("<persisted-output>"), "{text:.300}");
    assert!(front.finish().success());
}

// ------------------------------------------ the front under attack (#32) --

/// JSON nested deeper than serde_json's default, both ways: within the
/// 1,100 levels toolwire parses, and far past them, a client's request
/// reaches the server byte for byte and the server's answer reaches the
/// client whole (never dropped, never left hanging).
#[test]
fn deep_json_passes_both_ways() {
    let data = tempfile::tempdir().unwrap();
    let mut front = Peer::start(
        &front_argv("deep", &[], &odd_server("echo", &[])),
        data.path(),
    );
    front.request(1, &initialize(1, "2025-11-25"));
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    for (id, depth) in [(2_i64, 1_000_usize), (3, 1_100), (4, 5_000)] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"deep":{nested}}}}}}}"#
        );
        front.send(&line);
        let answer = front.response_unparsed(id);
        let sent: String = Sha256::digest(line.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(
            answer.contains(&format!(r#""text":"{sent}""#)),
            "depth {depth}: the server read the exact request"
        );
        assert!(
            answer.contains(&format!(r#""structuredContent":{{"deep":{nested}}}"#)),
            "depth {depth}: the answer came back whole"
        );
    }
    assert!(front.finish().success());
}

fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"))
}

/// A server writing faster than its client reads: the front stops reading
/// from the server once [`toolwire::mcp::QUEUED`] bytes wait for the
/// client, so the server blocks in its own write and the front's memory
/// stays bounded; when the client reads again, every line arrives, in
/// order.
#[test]
fn a_server_faster_than_its_client_is_held_back() {
    const COUNT: usize = 2_048;
    const SIZE: usize = 128 << 10;
    let data = tempfile::tempdir().unwrap();
    let progress = data.path().join("flood.progress");
    let mut front = Peer::start(
        &front_argv(
            "flood",
            &[],
            &odd_server("flood", &[progress.to_str().unwrap()]),
        ),
        data.path(),
    );
    front.request(1, &initialize(1, "2025-11-25"));
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    front.request(2, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let before = proc_status(front.pid(), "VmRSS:");
    front.send(&call(3, "flood", json!({"count": COUNT, "size": SIZE})));

    // Wait until the server is blocked writing to the front.
    let server: u32 = std::fs::read_to_string(&progress)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let deadline = std::time::Instant::now() + mcp_peer::WAIT;
    let written = loop {
        let syscall =
            std::fs::read_to_string(format!("/proc/{server}/syscall")).unwrap_or_default();
        let written = std::fs::read_to_string(&progress).unwrap().lines().count() - 1;
        if syscall.starts_with("1 0x1 ") {
            break written;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never blocked writing; it wrote {written} of {COUNT}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(written < COUNT / 4, "held back after {written} of {COUNT}");
    let held = proc_status(front.pid(), "VmRSS:");
    eprintln!(
        "flood: held back after {written} of {COUNT} lines of {SIZE} bytes; front RSS {before} kB before, {held} kB held"
    );

    // Reading again: everything, in order, then the result.
    for i in 0..COUNT {
        let line = front.next_line().unwrap();
        assert!(
            line.contains(&format!(r#""progress":{i},"#)),
            "notification {i} in order"
        );
    }
    let done: Value = serde_json::from_str(&front.response(3)).unwrap();
    assert_eq!(done["result"]["content"][0]["text"], json!("flooded"));
    let peak = proc_status(front.pid(), "VmHWM:");
    eprintln!(
        "flood: front peak RSS {peak} kB for {} MiB written",
        (COUNT * SIZE) >> 20
    );
    let bound = before + (toolwire::mcp::QUEUED as u64 >> 10) * 3;
    assert!(peak < bound, "peak RSS {peak} kB, bound {bound} kB");
    assert!(front.finish().success());
}

/// When its server exits in the middle of a call or is killed while idle,
/// the front answers what was pending, closes its stdout and exits with
/// status 1, its client's input still open.
#[test]
fn the_front_ends_with_its_server() {
    let data = tempfile::tempdir().unwrap();
    // Exits mid-call.
    let mut front = Peer::start(&front_argv("ends", &[], &sized_server()), data.path());
    front.request(1, &initialize(1, "2025-11-25"));
    front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let crash: Value =
        serde_json::from_str(&front.request(2, &call(2, "crash", json!({})))).unwrap();
    assert_eq!(crash["error"]["code"], json!(-32603), "{crash}");
    assert_eq!(front.next_line(), None, "stdout closed");
    assert_eq!(front.exit_status().code(), Some(1));

    // Killed while idle, a 2026-07-28 client in front.
    let mut front = Peer::start(
        &front_argv("killed", &[], &sized_server_era("modern")),
        data.path(),
    );
    front.request(1, &modern(1, "server/discover", json!({})));
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", front.pid())).unwrap();
    let server = children
        .split_whitespace()
        .next()
        .expect("the front's server process");
    assert!(
        Command::new("kill")
            .args(["-KILL", server])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(front.next_line(), None, "stdout closed");
    assert_eq!(front.exit_status().code(), Some(1));
}

/// SIGTERM (what `kill`, service managers and container runtimes send) and
/// SIGINT stop the front as its client going away does: the server's input
/// closed, and the commit log of the data directory removed. Before, either
/// signal killed it outright and left `<dataDir>/wal/*.wal` behind.
#[test]
fn a_front_stopped_by_sigterm_or_sigint_removes_its_commit_log() {
    for signal in ["TERM", "INT"] {
        let data = tempfile::tempdir().unwrap();
        let mut front = Peer::start(&front_argv("signalled", &[], &sized_server()), data.path());
        front.request(1, &initialize(1, "2025-11-25"));
        front.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        // A saved output: its decision is a durable commit, through the log.
        let reply = front.request(2, &call(2, "text", json!({"size": 60_000})));
        assert!(reply.contains("<persisted-output>"), "{reply}");
        let data_dir = data.path().join(".toolwire");
        let logs = || common::commit_logs(&data_dir);
        assert_eq!(logs().len(), 1, "SIG{signal}");
        let sent = Command::new("kill")
            .args(["-s", signal, &front.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = front.exit_status();
        assert_eq!(status.code(), Some(0), "SIG{signal}");
        assert_eq!(logs(), Vec::<String>::new(), "SIG{signal}");
    }
}
