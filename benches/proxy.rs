//! `toolwire proxy` benchmarks, each figure next to a baseline measured in
//! the same run against the same fake provider (tests/fake_provider):
//!
//!     cargo bench --bench proxy
//!
//! - added latency: time to first byte and total time of a streamed
//!   Anthropic response for a 200 KB conversation, through the proxy vs
//!   straight to the fake provider (interleaved, ≥ 1000 requests each);
//! - throughput: requests/s with 16 concurrent clients, proxy vs direct;
//! - prompt cache hit rate over a 30-turn loop: through toolwire vs a
//!   simulated proxy that truncates results afresh every turn.
//!
//! The proxy is the real binary (`toolwire proxy`, as users run it) in a
//! process of its own; the client and the fake provider run in this one,
//! over real loopback TCP. So the direct baseline and the proxied figure
//! share the client and the provider, and differ only by the hop through
//! toolwire, whose work is not hidden in (or slowed by) the client's
//! runtime.

#[path = "../tests/fake_provider/mod.rs"]
mod fake_provider;
#[path = "../tests/common/proxy_process.rs"]
mod proxy_process;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_provider::FakeProvider;
use futures_util::StreamExt;
use serde_json::{Value, json};

const REQUESTS: usize = 1000;
const CONCURRENCY: usize = 16;
const THROUGHPUT_REQUESTS: usize = 2000;
const TURNS: usize = 30;

/// A `toolwire proxy` process on a workspace of its own, in front of
/// `upstream`; killed when dropped.
struct ProxyProcess {
    _child: tokio::process::Child,
    url: String,
}

async fn start_proxy(upstream: &str, dir: &std::path::Path) -> ProxyProcess {
    std::fs::create_dir_all(dir).unwrap();
    let toml = format!(
        "durability = \"none\"\n[proxy.upstreams]\nanthropic = \"{upstream}\"\nopenai = \"{upstream}\"\ngemini = \"{upstream}\"\n"
    );
    std::fs::write(dir.join("toolwire.toml"), toml).unwrap();
    let (child, url, mut lines) =
        proxy_process::start(dir, &["--listen", "127.0.0.1:0"], "toolwire=warn", "proxy").await;
    // Keep reading its log, so the proxy never blocks on a full pipe.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("proxy: {line}");
        }
    });
    ProxyProcess { _child: child, url }
}

fn result_text(turn: usize, size: usize) -> String {
    let line = format!("turn {turn}: compiling crate {turn} ... warning: unused variable `x`\n");
    line.repeat(size / line.len() + 1)[..size].to_owned()
}

/// An Anthropic conversation of `turns` tool rounds with results of the
/// given sizes (cycled).
fn conversation(turns: usize, sizes: &[usize]) -> Vec<Value> {
    let mut messages = vec![json!({"role": "user", "content": "The build fails; find out why."})];
    for t in 0..turns {
        let id = format!("toolu_{t:04}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": id, "name": "bash", "input": {"command": format!("cat part-{t}.log")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": result_text(t, sizes[t % sizes.len()])}]}));
    }
    messages
}

fn body(messages: &[Value], stream: bool) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"model": "claude-fake", "max_tokens": 1024, "stream": stream,
        "system": "You are a coding agent.", "messages": messages}),
    )
    .unwrap()
}

/// Time to first body byte and total time of one streamed request.
async fn timed(client: &reqwest::Client, url: &str, body: &[u8]) -> (Duration, Duration) {
    let start = Instant::now();
    let response = client
        .post(format!("{url}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-toolwire-session", "bench")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut first = None;
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
        first.get_or_insert_with(|| start.elapsed());
    }
    (first.unwrap_or_default(), start.elapsed())
}

/// Where element `index` of the body's `messages` ends.
fn element_end(body: &[u8], index: usize) -> usize {
    use serde_json::value::RawValue;
    let text = std::str::from_utf8(body).unwrap();
    let top: std::collections::HashMap<String, &RawValue> = serde_json::from_str(text).unwrap();
    let items: Vec<&RawValue> = serde_json::from_str(top["messages"].get()).unwrap();
    let raw = items[index].get();
    raw.as_ptr() as usize - text.as_ptr() as usize + raw.len()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn latency(fake: &FakeProvider, proxy: &str) {
    // 200 KB: 20 rounds of ~9 KB results and one 60 KB result (persisted
    // on the first request, its preview reapplied on every later one).
    let mut sizes = vec![7_000; 20];
    sizes[3] = 60_000;
    let messages = conversation(20, &sizes);
    let body = body(&messages, true);
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    // Warm up both paths (connections, the session's first decisions).
    for _ in 0..20 {
        timed(&client, &fake.url(), &body).await;
        timed(&client, proxy, &body).await;
    }
    let (mut direct_first, mut direct_total, mut proxy_first, mut proxy_total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REQUESTS {
        let (f, t) = timed(&client, &fake.url(), &body).await;
        direct_first.push(f);
        direct_total.push(t);
        let (f, t) = timed(&client, proxy, &body).await;
        proxy_first.push(f);
        proxy_total.push(t);
    }
    for v in [
        &mut direct_first,
        &mut direct_total,
        &mut proxy_first,
        &mut proxy_total,
    ] {
        v.sort();
    }
    println!(
        "streamed response, {} KB conversation, {REQUESTS} requests each (interleaved)",
        body.len() / 1024
    );
    println!("| figure | through toolwire | direct (baseline) | added | ratio |");
    println!("|---|---|---|---|---|");
    for (name, proxied, direct) in [
        ("time to first byte", &proxy_first, &direct_first),
        ("total time", &proxy_total, &direct_total),
    ] {
        for p in [0.5, 0.99] {
            let (a, b) = (percentile(proxied, p), percentile(direct, p));
            println!(
                "| {name} p{} | {:.3} ms | {:.3} ms | {:+.3} ms | {:.2}× |",
                (p * 100.0) as u32,
                ms(a),
                ms(b),
                ms(a) - ms(b),
                ms(a) / ms(b)
            );
        }
    }
    println!();
    let p50 = |v: &[Duration]| ms(percentile(v, 0.5));
    let added = p50(&proxy_first) - p50(&direct_first);
    support::record(support::Row {
        bench: "proxy",
        figure: format!(
            "streamed response through the proxy, {} KB conversation: first byte p50 / total p50",
            body.len() / 1024
        ),
        toolwire: format!("{:.3} / {:.3} ms", p50(&proxy_first), p50(&proxy_total)),
        baseline: format!(
            "{:.3} / {:.3} ms: direct",
            p50(&direct_first),
            p50(&direct_total)
        ),
        ratio: format!(
            "{:.2} / {}",
            p50(&proxy_first) / p50(&direct_first),
            support::x(p50(&proxy_total) / p50(&direct_total))
        ),
        target: format!("< 0.5 ms added at first byte (+{added:.3} ms)"),
        holds: Some(added < 0.5),
    });
}

async fn throughput(fake: &FakeProvider, proxy: &str) {
    let mut sizes = vec![7_000; 20];
    sizes[3] = 60_000;
    let body = Arc::new(body(&conversation(20, &sizes), true));
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let run = |url: String| {
        let client = client.clone();
        let body = body.clone();
        async move {
            let start = Instant::now();
            let per = THROUGHPUT_REQUESTS / CONCURRENCY;
            let tasks: Vec<_> = (0..CONCURRENCY)
                .map(|_| {
                    let (client, body, url) = (client.clone(), body.clone(), url.clone());
                    tokio::spawn(async move {
                        for _ in 0..per {
                            timed(&client, &url, &body).await;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            (per * CONCURRENCY) as f64 / start.elapsed().as_secs_f64()
        }
    };
    let direct = run(fake.url()).await;
    let proxied = run(proxy.to_owned()).await;
    println!(
        "throughput, {CONCURRENCY} concurrent clients, {THROUGHPUT_REQUESTS} requests, {} KB each",
        body.len() / 1024
    );
    println!("| through toolwire | direct (baseline) | ratio |");
    println!("|---|---|---|");
    println!(
        "| {proxied:.0} req/s | {direct:.0} req/s | {:.2}× |\n",
        proxied / direct
    );
    support::record(support::Row {
        bench: "proxy",
        figure: format!(
            "throughput, {CONCURRENCY} concurrent clients, {} KB each",
            body.len() / 1024
        ),
        toolwire: format!("{proxied:.0} req/s"),
        baseline: format!("{direct:.0} req/s: direct"),
        ratio: support::x(proxied / direct),
        target: "≥ 0.8×".into(),
        holds: Some(proxied / direct >= 0.8),
    });
}

/// A compressing proxy that truncates every large result to its share of a
/// fixed context budget, recomputed from the whole conversation each turn
/// (as proxies that rewrite history to fit a window do): as the
/// conversation grows, earlier results are cut shorter, so earlier bytes
/// change from one request to the next.
fn truncate_afresh(messages: &[Value]) -> Vec<Value> {
    const BUDGET: usize = 100_000;
    let results: Vec<usize> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].as_str().map_or(0, str::len))
        .collect();
    let share = (BUDGET / results.len().max(1)).max(200);
    let mut out = messages.to_vec();
    for m in &mut out {
        for b in m["content"].as_array_mut().into_iter().flatten() {
            if b["type"] == "tool_result"
                && let Some(text) = b["content"].as_str()
                && text.len() > share
            {
                let cut = format!(
                    "{}\n[truncated {} chars]",
                    &text[..share],
                    text.len() - share
                );
                b["content"] = json!(cut);
            }
        }
    }
    out
}

async fn cache_rate(dir: &std::path::Path) {
    let sizes = [120_000, 4_000, 60_000, 30_000, 45_000, 2_000];
    let client = reqwest::Client::new();
    let mut rates = Vec::new();
    for simulated in [false, true] {
        let fake = FakeProvider::start().await;
        let proxy = if simulated {
            None
        } else {
            Some(start_proxy(&fake.url(), &dir.join("cache")).await)
        };
        let url = proxy.as_ref().map_or_else(|| fake.url(), |p| p.url.clone());
        for turn in 1..=TURNS {
            let messages = conversation(turn, &sizes);
            let messages = if simulated {
                truncate_afresh(&messages)
            } else {
                messages
            };
            timed(&client, &url, &body(&messages, false)).await;
        }
        let received = fake.received();
        let read: u64 = received.iter().map(|r| r.cache_read).sum();
        let total: u64 = received.iter().map(|r| r.body.len() as u64).sum();
        // A full hit: everything before the turn's new messages was cached.
        let hits = (1..received.len())
            .filter(|&k| {
                let before = received[k - 1].json()["messages"]
                    .as_array()
                    .map_or(0, Vec::len);
                received[k].cache_read as usize >= element_end(&received[k].body, before - 1)
            })
            .count();
        rates.push((read as f64 / total as f64, hits, total));
    }
    println!(
        "prompt cache over a {TURNS}-turn loop (tokens = bytes, cached = longest shared prefix)"
    );
    println!(
        "| | hit rate by tokens | turns 2–{TURNS} whose earlier conversation was all cached | bytes sent |"
    );
    println!("|---|---|---|---|");
    println!(
        "| through toolwire | {:.1}% | {}/{} | {} |",
        rates[0].0 * 100.0,
        rates[0].1,
        TURNS - 1,
        rates[0].2
    );
    println!(
        "| truncating afresh each turn (simulated) | {:.1}% | {}/{} | {} |\n",
        rates[1].0 * 100.0,
        rates[1].1,
        TURNS - 1,
        rates[1].2
    );
    support::record(support::Row {
        bench: "proxy",
        figure: format!("prompt-cache hit rate over {TURNS} turns (tokens = bytes)"),
        toolwire: format!("{:.1} %", rates[0].0 * 100.0),
        baseline: format!("{:.1} %: truncating afresh each turn", rates[1].0 * 100.0),
        ratio: "—".into(),
        target: "—".into(),
        holds: None,
    });
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    support::begin("proxy");
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "toolwire proxy benchmarks ({} cores)\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let fake = FakeProvider::start().await;
    let proxy = start_proxy(&fake.url(), &dir.path().join("proxy")).await;
    if want("latency") {
        latency(&fake, &proxy.url).await;
    }
    if want("throughput") {
        throughput(&fake, &proxy.url).await;
    }
    if want("cache") {
        cache_rate(dir.path()).await;
    }
}
