//! `toolwire mcp` from a client in its own process, in front of the
//! Python SDK test server:
//!
//! - `latency`: added latency per `tools/call`, the same sequential calls
//!   made directly and through the front, in alternating rounds so both
//!   see the same machine;
//! - `memory`: the front's peak resident memory (VmHWM) while it passes
//!   one result of 10, 25 and 50 MB, replaced by a preview (saved once) or
//!   passed through whole (it holds an image too), against the size of the
//!   result as the server writes it. Target (issue 52): the peak over the
//!   front's own after `initialize` at most twice the result plus 8 MB.
//!
//! ```sh
//! cargo bench --bench mcp                 # both parts
//! cargo bench --bench mcp -- latency --calls 2000
//! cargo bench --bench mcp -- memory
//! ```

#[path = "../tests/mcp_peer/mod.rs"]
mod mcp_peer;
mod support;

use std::time::{Duration, Instant};

use mcp_peer::{Peer, front_argv, sized_server};
use serde_json::json;

const ROUNDS: usize = 4;

fn main() {
    support::begin("mcp");
    let parts = support::Parts::from_args();
    if parts.want("latency") {
        latency();
    }
    if parts.want("memory") {
        memory();
    }
}

fn latency() {
    let args: Vec<String> = std::env::args().collect();
    let calls: usize = args
        .iter()
        .position(|a| a == "--calls")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let data = tempfile::tempdir().expect("temp dir");

    println!("toolwire mcp: added latency per tools/call ({calls} calls x {ROUNDS} rounds each)");
    for (label, size) in [
        ("small result (300 chars, passed through)", 300u64),
        (
            "large result (100,000 chars, replaced by preview + link)",
            100_000,
        ),
    ] {
        let mut direct = Vec::new();
        let mut front = Vec::new();
        for _ in 0..ROUNDS {
            direct.extend(measure(&sized_server(), data.path(), size, calls / ROUNDS));
            front.extend(measure(
                &front_argv("bench", &[], &sized_server()),
                data.path(),
                size,
                calls / ROUNDS,
            ));
        }
        let (d50, d99) = percentiles(&mut direct);
        let (f50, f99) = percentiles(&mut front);
        println!("\n{label}");
        println!(
            "  direct   p50 {:>8.3} ms   p99 {:>8.3} ms",
            ms(d50),
            ms(d99)
        );
        println!(
            "  front    p50 {:>8.3} ms   p99 {:>8.3} ms",
            ms(f50),
            ms(f99)
        );
        println!(
            "  added    p50 {:>8.3} ms   p99 {:>8.3} ms   (ratio p50 {:.2}x, p99 {:.2}x)",
            ms(f50.saturating_sub(d50)),
            ms(f99.saturating_sub(d99)),
            f50.as_secs_f64() / d50.as_secs_f64(),
            f99.as_secs_f64() / d99.as_secs_f64()
        );
        support::record(support::Row {
            bench: "mcp",
            figure: format!("added latency of `toolwire mcp` per `tools/call`, {label}: p50 / p99"),
            toolwire: format!(
                "+{:.3} / +{:.3} ms",
                ms(f50.saturating_sub(d50)),
                ms(f99.saturating_sub(d99))
            ),
            baseline: format!("{:.3} / {:.3} ms: direct", ms(d50), ms(d99)),
            ratio: format!(
                "{:.2} / {}",
                f50.as_secs_f64() / d50.as_secs_f64(),
                support::x(f99.as_secs_f64() / d99.as_secs_f64())
            ),
            target: "report".into(),
            holds: None,
        });
    }
}

/// What the front may hold beyond twice the result while passing it (its
/// own buffers and the saved output's line index).
const CONSTANT_MB: f64 = 8.0;

/// The front's peak memory passing one large result.
fn memory() {
    let data = tempfile::tempdir().expect("temp dir");
    println!("\ntoolwire mcp: peak resident memory passing one result");
    for (tool, how) in [
        ("text", "replaced by a preview"),
        ("text_and_image", "passed through whole"),
    ] {
        for mb in [10u64, 25, 50] {
            let size = mb * 1_000_000;
            // The result as the server writes it: the line the front reads.
            let mut direct = Peer::start(&sized_server(), data.path());
            handshake(&mut direct);
            let result =
                direct.request(1, &tool_call(1, tool, size)).len() as f64 / (1u64 << 20) as f64;
            let _ = direct.finish();

            let mut front = Peer::start(&front_argv("memory", &[], &sized_server()), data.path());
            handshake(&mut front);
            let (_, idle) = support::memory_of(front.pid());
            let answer = front.request(1, &tool_call(1, tool, size));
            let (_, peak) = support::memory_of(front.pid());
            let _ = front.finish();
            let replaced = answer.len() < 100_000;
            assert_eq!(
                replaced,
                tool == "text",
                "{tool}: {} bytes came back",
                answer.len()
            );
            let ratio = (peak - idle) / result;
            let holds = peak - idle <= 2.0 * result + CONSTANT_MB;
            println!(
                "  {mb:>2} MB of text, {how}: result {result:.1} MB, front peak {peak:.1} MB (idle {idle:.1} MB): {ratio:.2}x the result over idle (target <= 2x + {CONSTANT_MB} MB)"
            );
            support::record(support::Row {
                bench: "mcp",
                figure: format!("peak memory of `toolwire mcp` passing one {mb} MB result, {how}"),
                toolwire: format!("{peak:.1} MB (idle {idle:.1} MB)"),
                baseline: format!("{result:.1} MB: the result as the server writes it"),
                ratio: support::x(ratio),
                target: format!("≤ 2× + {CONSTANT_MB} MB (peak over idle)"),
                holds: Some(holds),
            });
        }
    }
}

fn handshake(peer: &mut Peer) {
    peer.request(
        0,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
        .to_string(),
    );
    peer.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
}

fn tool_call(id: i64, tool: &str, size: u64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"size": size}}})
        .to_string()
}

/// Latency of `calls` sequential `tools/call`s, after a warm-up.
fn measure(argv: &[String], cwd: &std::path::Path, size: u64, calls: usize) -> Vec<Duration> {
    let mut peer = Peer::start(argv, cwd);
    peer.request(
        0,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
        .to_string(),
    );
    peer.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "text", "arguments": {"size": size}}})
            .to_string()
    };
    for id in 1..=50 {
        peer.request(id, &call(id));
    }
    let mut out = Vec::with_capacity(calls);
    for i in 0..calls {
        let id = 100 + i as i64;
        let line = call(id);
        let start = Instant::now();
        peer.request(id, &line);
        out.push(start.elapsed());
    }
    let _ = peer.finish();
    out
}

fn percentiles(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
