//! MCP over Streamable HTTP at the proxy's `/mcp` (PROTOCOL.md 12.3),
//! through the real binary: two tenants each budget a large tool result
//! through one proxy in front of a fake provider, then read it back over
//! `/mcp` with plain HTTP requests, in both MCP revisions. Each reads
//! every page of its own output byte-exact through `read_saved_output`
//! and whole through `resources/read`; the other tenant's links, and
//! session ids chosen to be the other's, are "not found", never
//! "forbidden"; a request without a tenant's token is 401.

mod common;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;
#[path = "common/s3.rs"]
mod s3;
#[path = "common/tenants.rs"]
mod tenants;

use fake_provider::FakeProvider;
use serde_json::{Value, json};
use tenants::{ALICE, BOB, Store};

/// A proxy with alice and bob as tenants, in front of `fake`, on `store`,
/// with `[proxy]` settings `proxy`.
async fn start(fake: &FakeProvider, store: Store<'_>, proxy: &str) -> tenants::Proxy {
    tenants::start(fake, store, proxy, "toolwire=info").await
}

/// One Anthropic request whose tool result `t1` is `output`, as `token`
/// in session `session`.
async fn budget(url: &str, token: &str, session: &str, output: &str) {
    let r = reqwest::Client::new()
        .post(format!("{url}/t/{token}/v1/messages"))
        .header("x-toolwire-session", session)
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "m", "max_tokens": 8, "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": output}]},
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await;
}

/// A large output of many distinct lines, one of them unlike the rest.
fn output(who: &str) -> String {
    (0..6000)
        .map(|i| format!("{who} line {i:05} {}", "x".repeat(i % 37)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One JSON-RPC request to `<url>/mcp` with `token` (in the path, or in
/// the header when `in_header`); returns the HTTP status and the body.
async fn rpc(
    url: &str,
    token: Option<&str>,
    in_header: bool,
    version_header: Option<&str>,
    message: Value,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = match (token, in_header) {
        (Some(token), false) => client.post(format!("{url}/t/{token}/mcp")),
        (Some(token), true) => client
            .post(format!("{url}/mcp"))
            .header("x-toolwire-token", token),
        (None, _) => client.post(format!("{url}/mcp")),
    };
    if let Some(v) = version_header {
        req = req.header("mcp-protocol-version", v);
    }
    let r = req
        .header("accept", "application/json, text/event-stream")
        .json(&message)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Every page of `uri` through `read_saved_output`, joined.
async fn read_all(
    url: &str,
    token: &str,
    version: Option<&str>,
    meta: Option<&Value>,
    uri: &str,
) -> (String, usize) {
    let mut text = String::new();
    let mut offset = 0u64;
    let mut pages = 0;
    loop {
        let mut params = json!({"name": "read_saved_output", "arguments": {"uri": uri, "offset": offset, "limit": 1000}});
        if let Some(meta) = meta {
            params["_meta"] = meta.clone();
        }
        let (status, body) = rpc(
            url,
            Some(token),
            false,
            version,
            request(10 + pages as u64, "tools/call", params),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let result = &body["result"];
        assert_ne!(result["isError"], json!(true), "{body}");
        let page = &result["structuredContent"];
        text.push_str(page["text"].as_str().unwrap());
        pages += 1;
        if !page["truncated"].as_bool().unwrap() {
            return (text, pages);
        }
        offset = page["endLine"].as_u64().unwrap();
        assert!(pages < 100, "no end of pages");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_reads_its_own_saved_outputs_over_mcp_and_nothing_else() {
    each_tenant_reads_its_own(Store::Local).await;
}

/// The same on the shared store: decisions on PostgreSQL, every page read
/// from the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_reads_its_own_over_mcp_on_postgres_and_object_storage() {
    let shared = s3::SharedFixture::start("mcp", "tw", common::pg::migrated_database());
    each_tenant_reads_its_own(Store::Shared {
        db: &shared.db,
        objects: &shared.objects,
    })
    .await;
    // Saved in the bucket, each under its tenant's session; nothing of
    // them in the data directory.
    let keys = shared.s3.keys("mcp", "tw/");
    for key in [
        "tw/sessions/alice.shared/tool-results/t1.txt",
        "tw/sessions/bob.shared/tool-results/t1.txt",
        "tw/sessions/bob.only-bob/tool-results/t1.txt",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} not in {keys:?}");
    }
}

async fn each_tenant_reads_its_own(store: Store<'_>) {
    let fake = FakeProvider::start().await;
    let proxy = start(&fake, store, "").await;
    let url = &proxy.url;
    let (alice_out, bob_out) = (output("alice"), output("bob"));
    // The same session id for both: two sessions all the same.
    budget(url, ALICE, "shared", &alice_out).await;
    budget(url, BOB, "shared", &bob_out).await;
    budget(url, BOB, "only-bob", &bob_out).await;
    let link = "toolwire://saved-output/shared/t1";
    // On loopback previews name the path alone unless told otherwise.
    for request in fake.received() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(body.contains("Full output saved to: "), "no preview");
        assert!(!body.contains("toolwire://"), "{body}");
    }

    // Legacy revision: initialize, then the header names the version.
    let (status, init) = rpc(url, Some(ALICE), false, None, request(1, "initialize", json!({
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}
    }))).await;
    assert_eq!(status, 200, "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    let (status, none) = rpc(
        url,
        Some(ALICE),
        false,
        Some("2025-06-18"),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202, "{none}");
    let (_, tools) = rpc(
        url,
        Some(ALICE),
        true,
        Some("2025-06-18"),
        request(2, "tools/list", json!({})),
    )
    .await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_saved_output"], "{tools}");

    for (token, expected) in [(ALICE, &alice_out), (BOB, &bob_out)] {
        let (text, pages) = read_all(url, token, Some("2025-06-18"), None, link).await;
        assert!(pages > 2, "{pages} pages");
        assert!(
            text == *expected,
            "pages differ from the output ({} vs {} chars)",
            text.len(),
            expected.len()
        );
        let (status, whole) = rpc(
            url,
            Some(token),
            false,
            Some("2025-06-18"),
            request(3, "resources/read", json!({"uri": link})),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            whole["result"]["contents"][0]["text"].as_str(),
            Some(expected.as_str())
        );
    }

    // Bob's own session is nowhere for alice: not found, never forbidden.
    for uri in [
        "toolwire://saved-output/only-bob/t1",
        "toolwire://saved-output/bob.shared/t1",
        "toolwire://saved-output/bob.only-bob/t1",
        "toolwire://saved-output/shared/t2",
    ] {
        let (status, body) = rpc(
            url,
            Some(ALICE),
            false,
            Some("2025-06-18"),
            request(4, "resources/read", json!({"uri": uri})),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body["error"]["code"], json!(-32002), "{uri}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not found"),
            "{body}"
        );
        let (_, body) = rpc(
            url,
            Some(ALICE),
            false,
            Some("2025-06-18"),
            request(
                5,
                "tools/call",
                json!({"name": "read_saved_output", "arguments": {"uri": uri}}),
            ),
        )
        .await;
        assert_eq!(body["result"]["isError"], json!(true), "{body}");
        let message = body["result"]["content"][0]["text"].as_str().unwrap();
        assert!(message.contains("not found"), "{message}");
        assert!(
            !message.contains("forbidden") && !message.contains("alice."),
            "{message}"
        );
    }
    // ...while bob reads it.
    let (_, body) = rpc(
        url,
        Some(BOB),
        false,
        Some("2025-06-18"),
        request(
            6,
            "resources/read",
            json!({"uri": "toolwire://saved-output/only-bob/t1"}),
        ),
    )
    .await;
    assert_eq!(
        body["result"]["contents"][0]["text"].as_str(),
        Some(bob_out.as_str())
    );

    // Modern revision: no handshake, the version in every request's _meta.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    });
    let (_, discover) = rpc(
        url,
        Some(BOB),
        false,
        None,
        request(7, "server/discover", json!({"_meta": meta})),
    )
    .await;
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{discover}"
    );
    let (_, tools) = rpc(
        url,
        Some(BOB),
        false,
        None,
        request(8, "tools/list", json!({"_meta": meta})),
    )
    .await;
    assert_eq!(tools["result"]["resultType"], "complete", "{tools}");
    let (text, _) = read_all(url, BOB, None, Some(&meta), link).await;
    assert!(text == bob_out);
    let (_, body) = rpc(
        url,
        Some(BOB),
        false,
        None,
        request(
            9,
            "resources/read",
            json!({"uri": "toolwire://saved-output/alice.shared/t1", "_meta": meta}),
        ),
    )
    .await;
    assert_eq!(body["error"]["code"], json!(-32602), "{body}");

    // GET is not served; no token, a wrong one, a malformed one: 401.
    let r = reqwest::Client::new()
        .get(format!("{url}/t/{ALICE}/mcp"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let init = request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    for token in [None, Some("tok-mallory"), Some("tok%2Dalice")] {
        let (status, body) = rpc(url, token, false, None, init.clone()).await;
        assert_eq!(status, 401, "{token:?}: {body}");
        let (status, _) = rpc(url, token, true, None, init.clone()).await;
        assert_eq!(status, 401, "{token:?} in the header");
    }
    // None of it reached the provider.
    assert_eq!(fake.received().len(), 3);
}

/// `previews = "mcp"`: a fresh preview names the output's link (with the
/// session id the tenant knows) and the tool instead of any path on the
/// proxy's disk, and that link, taken from the request the provider got,
/// reads the output back through `/mcp`, every page exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_previews_name_the_link_the_tenant_reads() {
    mcp_previews_name_the_link(Store::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_previews_name_the_link_on_postgres_and_object_storage() {
    let shared = s3::SharedFixture::start("links", "tw", common::pg::migrated_database());
    mcp_previews_name_the_link(Store::Shared {
        db: &shared.db,
        objects: &shared.objects,
    })
    .await;
}

/// The preview of `t1` in the `n`-th request the provider received.
fn sent_preview(fake: &FakeProvider, n: usize) -> String {
    let sent: Value = serde_json::from_slice(&fake.received()[n].body).unwrap();
    sent["messages"][2]["content"][0]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"))
        .to_owned()
}

/// The link a `previews = "mcp"` preview names (it ends at a space).
fn link_in(preview: &str) -> &str {
    preview
        .split("saved as ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no link in {preview}"))
}

async fn mcp_previews_name_the_link(store: Store<'_>) {
    let fake = FakeProvider::start().await;
    let proxy = start(&fake, store, "previews = \"mcp\"").await;
    let url = &proxy.url;
    let out = output("carol");
    budget(url, ALICE, "s-1", &out).await;
    let preview = &sent_preview(&fake, 0);
    assert!(
        preview.starts_with(
            "<persisted-output>\nOutput too large (210.8KB). Full output saved as toolwire://saved-output/s-1/t1 - read it with the read_saved_output tool (MCP server toolwire).\n\nPreview (first 2KB):\n"
        ),
        "{preview}"
    );
    // No path on the proxy's disk, nor in its bucket: the link alone.
    let data_dir = proxy.ws.path().display().to_string();
    for path_like in [
        data_dir.as_str(),
        "Full output saved to: ",
        "sessions/",
        "tool-results",
        "s3://",
    ] {
        assert!(!preview.contains(path_like), "{path_like:?} in {preview}");
    }
    let link = link_in(preview);
    assert_eq!(link, "toolwire://saved-output/s-1/t1");
    let (text, pages) = read_all(url, ALICE, Some("2025-11-25"), None, link).await;
    assert!(pages > 2, "{pages} pages");
    assert!(
        text == out,
        "pages differ from the output ({} vs {} chars)",
        text.len(),
        out.len()
    );
    // The same link is nothing of bob's, even for a session of his own
    // of the same id.
    budget(url, BOB, "s-1", &output("dave")).await;
    let (_, body) = rpc(
        url,
        Some(BOB),
        false,
        Some("2025-11-25"),
        request(1, "resources/read", json!({"uri": link})),
    )
    .await;
    assert_eq!(
        body["result"]["contents"][0]["text"].as_str(),
        Some(output("dave").as_str())
    );
    for uri in [
        "toolwire://saved-output/alice.s-1/t1",
        "toolwire://saved-output/s-2/t1",
    ] {
        let (_, body) = rpc(
            url,
            Some(BOB),
            false,
            Some("2025-11-25"),
            request(2, "resources/read", json!({"uri": uri})),
        )
        .await;
        assert_eq!(body["error"]["code"], json!(-32002), "{uri}: {body}");
        assert!(!body.to_string().contains("forbidden"), "{body}");
    }
    // The decision is frozen: the same result sent again keeps its text.
    budget(url, ALICE, "s-1", &out).await;
    assert_eq!(&sent_preview(&fake, 2), preview);
    // The id sent again with another output (a provider reusing ids): its
    // own saved output and its own link, `t1` and the original's digest,
    // each reading its own output.
    let other = output("erin");
    budget(url, ALICE, "s-1", &other).await;
    let reused = sent_preview(&fake, 3);
    let other_link = link_in(&reused);
    assert!(
        other_link.starts_with("toolwire://saved-output/s-1/t1%23"),
        "{reused}"
    );
    let (text, _) = read_all(url, ALICE, Some("2025-11-25"), None, other_link).await;
    assert!(text == other, "the reused id's link reads another output");
    let (text, _) = read_all(url, ALICE, Some("2025-11-25"), None, link).await;
    assert!(text == out);
}

/// Without tenants (loopback), `/mcp` answers the agents, which send no
/// `Origin`, and refuses a web page of another origin (DNS rebinding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_a_web_pages_origin_is_refused() {
    let fake = FakeProvider::start().await;
    let proxy = tenants::start_with(
        &format!("[proxy.upstreams]\nanthropic = \"{}\"\n", fake.url()),
        "toolwire=info",
    )
    .await;
    let url = &proxy.url;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    for (origin, expected) in [
        (None, 200),
        (Some("http://localhost:5173"), 200),
        (Some("https://evil.example"), 403),
    ] {
        let mut req = reqwest::Client::new()
            .post(format!("{url}/mcp"))
            .json(&ping);
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), expected, "{origin:?}");
    }
}
