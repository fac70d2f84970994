//! Clearing old results (PROTOCOL.md 11.3): `budget/apply` in process with
//! its clock driven through the test hook, and a 60-turn conversation of
//! the official Anthropic SDK through `toolwire proxy` to the fake
//! provider, whose prefix cache shows every break.

#[path = "common/agent_py.rs"]
mod agent_py;
mod common;
mod fake_provider;
#[path = "common/proxy_process.rs"]
mod proxy_process;

use std::path::Path;

use common::*;
use fake_provider::{FakeProvider, Received};
use serde_json::{Value, json};

/// The test clock is one per process: the tests that drive it take turns.
static CLOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn call(id: &str, name: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": {}}]})
}

fn result(id: &str, text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": text}]})
}

fn text_of(id: usize) -> String {
    format!("output of call {id}\n").repeat(40)
}

fn result_text(messages: &Value, i: usize) -> String {
    messages[i]["content"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// `cold`: over the trigger the old results stay whole while the session
/// is warm, and are all cleared in the first apply after the idle gap;
/// never the kept turns, an exempt tool's result or anything before a
/// compaction. The clearing is then replayed byte for byte, also by a new
/// server on the same data directory, and each cleared result reads back
/// whole.
#[tokio::test]
async fn cold_clears_after_the_idle_gap_and_replays_byte_for_byte() {
    let _clock = CLOCK.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let options = json!({
        "exemptTools": ["Exempt"],
        "clearing": {"mode": "cold", "keepRecent": 2, "minChars": 100,
                     "triggerChars": 2000, "coldAfterSeconds": 300},
    });
    let server = new_server();
    let (mut c, task) = connect(server.clone());
    c.initialize(dir.path(), options.clone()).await;
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    // Call 0 stands before a compaction; call 2 is of an exempt tool.
    let mut clock = 1_000_000;
    for n in 0..8 {
        let id = format!("t{n}");
        let mut assistant = call(&id, if n == 2 { "Exempt" } else { "Read" });
        if n == 1 {
            assistant["content"].as_array_mut().unwrap().insert(
                0,
                json!({"type": "compaction", "content": "what came before"}),
            );
        }
        messages.push(assistant);
        messages.push(result(&id, &text_of(n)));
        clock += 10;
        let r = apply_at(&mut c, clock, &messages).await;
        // Warm: calls 1, 3, 4, 5 are old and over 2000 chars, under 8000.
        assert_eq!(r["cleared"], json!([]), "turn {n}");
    }
    // Idle for 301 s: the old results after the compaction, but for the
    // exempt one, are cleared at once; t6 and t7 are the kept turns.
    clock += 301;
    let r = apply_at(&mut c, clock, &messages).await;
    assert_eq!(r["cleared"], json!(["t1", "t3", "t4", "t5"]));
    let sent = r["messages"].clone();
    for (i, n) in [(2, 0), (6, 2), (14, 6), (16, 7)] {
        assert_eq!(result_text(&sent, i), text_of(n), "t{n} stays whole");
    }
    for (i, n) in [(4, 1), (8, 3), (10, 4), (12, 5)] {
        let preview = result_text(&sent, i);
        assert!(
            preview.starts_with("<persisted-output>\nOld output cleared to save context (680 bytes). Full output saved to: "),
            "{preview}"
        );
        let read = c
            .call(
                "artifact/read",
                json!({"sessionId": "s", "toolUseId": format!("t{n}")}),
            )
            .await;
        assert_eq!(
            read["text"].as_str().unwrap().trim_end(),
            text_of(n).trim_end()
        );
        assert_eq!(read["totalChars"], text_of(n).len());
    }
    // Journaled: the record says it clears.
    assert!(
        r["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["cleared"] == true)
    );
    assert_eq!(r["records"].as_array().unwrap().len(), 4);

    // Replayed byte for byte on the next turn, and nothing more cleared.
    clock += 10;
    let again = apply_at(&mut c, clock, &messages).await;
    assert_eq!(again["messages"], sent);
    assert_eq!(again["cleared"], json!([]));

    // A new server on the same data directory sends the same bytes.
    c.close().await;
    task.await.unwrap();
    server.registry.close_all().await;
    let (mut c2, _task2) = connect(new_server());
    c2.initialize(dir.path(), options).await;
    let restarted = c2
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": messages}),
        )
        .await;
    assert_eq!(restarted["messages"], sent);
    assert_eq!(restarted["cleared"], json!([]));
    toolwire::budget::clearing::set_test_clock(None);
}

/// `auto`, the default (PROTOCOL.md 12.1): a conversation growing turn by
/// turn is cleared only once the cache reads its old results ran up reach
/// what clearing them costs, says why at every turn, replays the clearing
/// byte for byte, and clears at once after an idle gap past the cache's
/// lifetime.
#[tokio::test]
async fn auto_clears_only_when_the_reads_pay_for_the_rewrite() {
    let _clock = CLOCK.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = new_server();
    let (mut c, _task) = connect(server.clone());
    c.initialize(dir.path(), json!({})).await;
    let apply = |messages: &[Value]| {
        json!({"sessionId": "s", "messages": messages,
               "pricing": {"model": "claude-sonnet-4-5"}})
    };
    let mut messages = vec![json!({"role": "user", "content": "go"})];
    let mut clock = 2_000_000;
    let mut cleared_at = None;
    for n in 0..40 {
        let id = format!("t{n}");
        messages.push(call(&id, "Read"));
        messages.push(result(&id, &format!("line {n}\n").repeat(1_500)));
        clock += 10;
        toolwire::budget::clearing::set_test_clock(Some(clock));
        let r = c.call("budget/apply", apply(&messages)).await;
        let why = &r["clearing"];
        assert_eq!(why["mode"], "auto");
        assert_eq!(why["pricing"]["provider"], "anthropic");
        assert_eq!(why["pricing"]["source"], "model");
        assert_eq!(why["pricing"]["cacheWrite"], json!(1.25));
        let (rent, cost) = (
            why["rentChars"].as_u64().unwrap(),
            why["costChars"].as_u64().unwrap(),
        );
        match why["decision"].as_str().unwrap() {
            // Fewer than four calling turns: nothing is old yet.
            "none" => assert!(n < 3, "turn {n}: {why}"),
            "waiting" => {
                assert!(rent < cost, "turn {n}: {why}");
                assert_eq!(r["cleared"], json!([]));
            }
            "cleared" => {
                assert!(rent >= cost, "turn {n}: {why}");
                assert!(!r["cleared"].as_array().unwrap().is_empty());
                cleared_at = Some((n, r["messages"].clone(), r["cleared"].clone()));
                break;
            }
            other => panic!("turn {n}: {other}"),
        }
    }
    let (n, sent, cleared) = cleared_at.expect("auto clears within 40 turns");
    // Not on the first turn it could: an old result must be read several
    // times before a rewrite of everything after it pays.
    assert!(n > 4, "cleared at turn {n}");
    // The first old result, t0, is in the batch, never a kept turn.
    assert_eq!(cleared[0], "t0");
    let kept: Vec<String> = (n - 2..=n).map(|k| format!("t{k}")).collect();
    for id in cleared.as_array().unwrap() {
        assert!(!kept.contains(&id.as_str().unwrap().to_owned()), "{id}");
    }
    // A retry of the same request sends the same bytes and clears nothing.
    let again = c.call("budget/apply", apply(&messages)).await;
    assert_eq!(again["messages"], sent);
    assert_eq!(again["cleared"], json!([]));

    // Idle past Anthropic's five minutes: every old result goes at once.
    for k in n + 1..n + 3 {
        let id = format!("t{k}");
        messages.push(call(&id, "Read"));
        messages.push(result(&id, &format!("line {k}\n").repeat(1_500)));
    }
    clock += 301;
    toolwire::budget::clearing::set_test_clock(Some(clock));
    let r = c.call("budget/apply", apply(&messages)).await;
    assert_eq!(r["clearing"]["decision"], "expired", "{}", r["clearing"]);
    assert_eq!(r["cleared"].as_array().unwrap().len(), 2);
    toolwire::budget::clearing::set_test_clock(None);
}

/// What `auto` is told about prices: an unknown model falls back to the
/// provider's documented default and says so; a bad mode or a negative
/// price is refused at its key.
#[tokio::test]
async fn auto_prices_fall_back_to_defaults_and_bad_settings_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _task) = connect(new_server());
    c.initialize(dir.path(), json!({})).await;
    let messages = vec![call("t0", "Read"), result("t0", "x")];
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "p", "messages": messages, "format": "anthropic"}),
        )
        .await;
    assert_eq!(r["clearing"]["decision"], "none");
    assert_eq!(r["clearing"]["pricing"]["source"], "default");
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "q", "messages": [{"role": "user", "content": "hi"}],
                   "format": "openai-chat", "pricing": {"model": "gpt-4o-2024-08-06"}}),
        )
        .await;
    assert_eq!(r["clearing"]["pricing"]["cacheRead"], json!(0.5));
    assert_eq!(r["clearing"]["pricing"]["source"], "model");
    let e = c
        .fails(
            "budget/apply",
            json!({"sessionId": "p", "messages": messages, "pricing": {"cacheRead": -0.1}}),
            -32602,
        )
        .await;
    assert!(e.to_string().contains("cacheRead"), "{e}");

    for (toml, key) in [
        ("[clearing]\nmode = \"sometimes\"\n", "clearing.mode"),
        (
            "[pricing.anthropic]\ncache_write = -1\n",
            "pricing.anthropic.cache_write",
        ),
    ] {
        let bad = tempfile::tempdir().unwrap();
        std::fs::write(bad.path().join("toolwire.toml"), toml).unwrap();
        let (mut c, _task) = connect(new_server());
        let e = c
            .request(
                "initialize",
                json!({"processId": null, "rootUri": file_uri(bad.path())}),
            )
            .await
            .unwrap_err();
        assert_eq!(e["code"], -32602, "{e}");
        assert!(e["data"]["path"].as_str().unwrap().contains(key), "{e}");
    }
}

/// `budget/apply` of `messages` with the clock at `clock`.
async fn apply_at(c: &mut MemClient, clock: u64, messages: &[Value]) -> Value {
    toolwire::budget::clearing::set_test_clock(Some(clock));
    c.call(
        "budget/apply",
        json!({"sessionId": "s", "messages": messages}),
    )
    .await
}

/// A running `toolwire proxy` on a workspace directory.
struct Proxy {
    child: tokio::process::Child,
    url: String,
}

async fn proxy(dir: &Path, upstream: &str, clock: &Path) -> Proxy {
    let toml = format!(
        "durability = \"none\"\n[clearing]\nkeep_recent = 3\n[proxy.upstreams]\nanthropic = \"{upstream}\"\n"
    );
    std::fs::write(dir.join("toolwire.toml"), toml).unwrap();
    let clock = clock.to_str().unwrap();
    let (child, url, mut lines) = proxy_process::start_env(
        dir,
        &["--listen", "127.0.0.1:0"],
        "toolwire=warn",
        "proxy",
        &[("TOOLWIRE_CLOCK_FILE", clock)],
    )
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Proxy { child, url }
}

impl Proxy {
    async fn stop(mut self) {
        self.child.kill().await.unwrap();
        let _ = self.child.wait().await;
    }
}

/// tests/proxy/agent.py with the official Anthropic SDK.
async fn agent(args: &[&str]) -> Value {
    agent_py::run(args).await
}

/// Every tool result's text in a request, by tool_use_id.
fn results(r: &Received) -> Vec<(String, String)> {
    let body = r.json();
    let mut out = Vec::new();
    for m in body["messages"].as_array().unwrap() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                let text = match &b["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.push((b["tool_use_id"].as_str().unwrap().to_owned(), text));
            }
        }
    }
    out
}

/// 60 turns of the SDK through the proxy with the default clearing but
/// `keepRecent = 3`: the cache breaks exactly once per clearing batch (each
/// batch's results all change in one request, and nothing else ever
/// changes), never inside the 3 kept turns; each cleared result's saved
/// output is the original whole; and after a restart the proxy sends the
/// same conversation byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_sdk_turns_break_the_cache_once_per_batch() {
    let fake = FakeProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let clock = dir.path().join("clock");
    std::fs::write(&clock, "1000000").unwrap();
    let p = proxy(dir.path(), &fake.url(), &clock).await;
    let dump = dir.path().join("conversation.json");
    let out = agent(&[
        "anthropic",
        &p.url,
        "loop",
        "--turns",
        "60",
        "--dump",
        dump.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out["turns"], 60);
    let received = fake.received();
    assert_eq!(received.len(), 60);
    let original: Vec<Value> = serde_json::from_slice(&std::fs::read(&dump).unwrap()).unwrap();

    let mut breaks = 0;
    let mut cleared_ids: Vec<String> = Vec::new();
    for k in 1..received.len() {
        let (before, now) = (results(&received[k - 1]), results(&received[k]));
        let changed: Vec<&(String, String)> = now
            .iter()
            .zip(&before)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a)
            .collect();
        if changed.is_empty() {
            assert!(
                received[k].cache_read > 0,
                "turn {k}: the prefix should have been read"
            );
            continue;
        }
        breaks += 1;
        // A batch: every change is a result becoming a cleared preview,
        // at most once each, and never one of the 3 newest calls' results.
        for (id, text) in &changed {
            assert!(
                text.starts_with("<persisted-output>\nOld output cleared"),
                "turn {k}: {text}"
            );
            assert!(!cleared_ids.contains(id), "{id} changed twice");
            cleared_ids.push(id.clone());
        }
        let calls_now = now.len();
        let kept: Vec<&String> = now[calls_now.saturating_sub(3)..]
            .iter()
            .map(|(id, _)| id)
            .collect();
        assert!(
            changed.iter().all(|(id, _)| !kept.contains(&id)),
            "turn {k}: a kept result was cleared"
        );
    }
    // The proxy's usage records: one request with clearing per break.
    let usage_dir = dir.path().join(".toolwire/sessions");
    let mut batches = 0;
    let mut cleared_total = 0;
    for entry in std::fs::read_dir(&usage_dir).unwrap().flatten() {
        let file = entry.path().join("proxy-usage.jsonl");
        if let Ok(text) = std::fs::read_to_string(&file) {
            for line in text.lines() {
                let r: Value = serde_json::from_str(line).unwrap();
                let n = r["resultsCleared"].as_u64().unwrap_or(0);
                batches += u64::from(n > 0);
                cleared_total += n;
            }
        }
    }
    assert!(
        breaks >= 2,
        "60 turns should clear more than once: {breaks}"
    );
    assert_eq!(breaks, batches);
    assert_eq!(cleared_total as usize, cleared_ids.len());

    // Each cleared result's saved output is its original, whole.
    let originals: std::collections::HashMap<String, String> =
        results_sent(&json!({ "messages": original }))
            .into_iter()
            .collect();
    let last = results(received.last().unwrap());
    for (id, text) in &last {
        if cleared_ids.contains(id) {
            let (session, name) = toolwire::budget::preview::preview_target(text).unwrap();
            let saved =
                std::fs::read_to_string(usage_dir.join(session).join("tool-results").join(name))
                    .unwrap();
            assert_eq!(&saved, &originals[id]);
        }
    }

    // The whole conversation once more, then again after a restart: the
    // provider receives the same bytes.
    let messages = dump.to_str().unwrap();
    agent(&["anthropic", &p.url, "resend", "--messages", messages]).await;
    p.stop().await;
    let p = proxy(dir.path(), &fake.url(), &clock).await;
    agent(&["anthropic", &p.url, "resend", "--messages", messages]).await;
    p.stop().await;
    let received = fake.received();
    let (a, b) = (&received[received.len() - 2], &received[received.len() - 1]);
    assert_eq!(a.body, b.body, "the restarted proxy sent other bytes");
}
