//! The proxy degrades without forgetting (PROTOCOL.md 11.1; issue 32 item
//! 3): a real `toolwire proxy` on real PostgreSQL, whose database is
//! stopped mid-conversation. Its own test binary, so stopping the
//! process's PostgreSQL cluster touches no other test.

mod common;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use fake_provider::FakeProvider;
use serde_json::{Value, json};

fn tool_use(id: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "make"}}]})
}

fn tool_result(id: &str) -> Value {
    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
           "content": format!("{id}: {}", "x".repeat(60_000))}]})
}

/// The tool_result contents the provider received in its last request.
fn results_received(fake: &FakeProvider) -> Vec<(String, String)> {
    let last = fake.received().pop().unwrap();
    common::results_sent(&serde_json::from_slice(&last.body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_database_stopped_the_proxy_puts_back_what_it_decided() {
    let fake = FakeProvider::start().await;
    let (db, _store) = common::pg::migrated_database();
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("toolwire.toml"),
        format!(
            "data_dir = {data:?}\ndurability = \"none\"\n[proxy.upstreams]\nanthropic = {up:?}\n\
             [storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {db:?}\n",
            data = data.path().display().to_string(),
            up = fake.url(),
        ),
    )
    .unwrap();
    let (_child, url, _lines) = proxy_process::start(
        ws.path(),
        &["--listen", "127.0.0.1:0"],
        "toolwire=warn",
        "degraded",
    )
    .await;
    let http = reqwest::Client::new();
    let send = |messages: Vec<Value>| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let r = http
                .post(format!("{url}/v1/messages"))
                .header("x-toolwire-session", "conv")
                .header("x-api-key", "test")
                .header("anthropic-version", "2023-06-01")
                .json(&json!({"model": "m", "max_tokens": 8, "messages": messages}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{}", r.status());
            let degraded = r
                .headers()
                .get("x-toolwire-degraded")
                .map(|v| v.to_str().unwrap().to_owned());
            let _ = r.bytes().await.unwrap();
            degraded
        }
    };
    let mut messages = vec![
        json!({"role": "user", "content": "fix the build"}),
        tool_use("r1"),
        tool_result("r1"),
    ];
    assert_eq!(send(messages.clone()).await, None);
    let first = results_received(&fake);
    assert!(first[0].1.len() < 10_000, "r1 was replaced: {first:?}");

    common::pg::stop_cluster();
    messages.push(tool_use("r2"));
    messages.push(tool_result("r2"));
    let degraded = send(messages).await;
    let header = degraded.expect("the response says the proxy is degraded");
    assert!(header.starts_with("known decisions put back"), "{header}");
    let second = results_received(&fake);
    assert_eq!(second[0], first[0], "r1's preview, byte for byte");
    assert_eq!(second[1].0, "r2");
    assert!(second[1].1.len() > 60_000, "the fresh result goes whole");
}
