//! Throughput inside one request, each figure next to a baseline measured
//! in the same run:
//!
//!     cargo bench --bench throughput                 # every figure
//!     cargo bench --bench throughput -- reapply      # only the named ones
//!
//! - `reapply`: a reapply-only `budget/apply` of a 20 MB conversation sent
//!   to a real `toolwire serve` over its stdin/stdout, against serde_json
//!   parsing and serializing the same request bytes in this process.
//! - `pair`: one pair of 10,000 and of 100,000 calls against 1,000 calls,
//!   per call (linear scaling is a ratio of 1).
//! - `stall`: p99 of `state/get` on session B while session A persists
//!   100,000 results, against the p99 with A idle; and the most threads the
//!   server had meanwhile (`/proc/PID/task`).

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use toolwire::transport::codec::{Frame, LspCodec};

mod support;
use support::pair_in;

/// A real `toolwire serve` spoken to over its stdin/stdout, with every
/// reply read by a task of its own (so requests can overlap).
struct Proc {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::UnboundedReceiver<(i64, Bytes)>,
    /// Replies read while waiting for another id.
    early: HashMap<i64, Bytes>,
    next: i64,
}

impl Proc {
    async fn start(dir: &Path, options: Value) -> Proc {
        std::fs::create_dir_all(dir).unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .arg("serve")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut frames = FramedRead::new(child.stdout.take().unwrap(), LspCodec::new(1 << 30));
        let (tx, replies) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(Frame::Body(body))) = frames.next().await {
                // Only the head is parsed: the id comes first in replies.
                let head = &body[..body.len().min(64)];
                let id = std::str::from_utf8(head)
                    .ok()
                    .and_then(|h| h.split("\"id\":").nth(1))
                    .and_then(|rest| {
                        rest.split(|c: char| !c.is_ascii_digit())
                            .next()
                            .and_then(|n| n.parse().ok())
                    });
                if let Some(id) = id
                    && tx.send((id, body)).is_err()
                {
                    break;
                }
            }
        });
        let mut p = Proc {
            child,
            stdin,
            replies,
            early: HashMap::new(),
            next: 1,
        };
        p.call(
            "initialize",
            json!({"rootUri": format!("file://{}", dir.display()), "initializationOptions": options}),
        )
        .await;
        p
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// The framed request; returns its id.
    fn frame(&mut self, method: &str, params: &Value) -> (i64, Vec<u8>) {
        let id = self.next;
        self.next += 1;
        let body = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        (id, body)
    }

    async fn send(&mut self, body: &[u8]) {
        let header = format!("Content-Length: {}\r\n\r\n", body.len());
        self.stdin.write_all(header.as_bytes()).await.unwrap();
        self.stdin.write_all(body).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn reply(&mut self, id: i64) -> Bytes {
        if let Some(b) = self.early.remove(&id) {
            return b;
        }
        loop {
            let (got, body) = self.replies.recv().await.unwrap();
            if got == id {
                return body;
            }
            self.early.insert(got, body);
        }
    }

    /// Whether the reply to `id` has arrived (without waiting).
    fn arrived(&mut self, id: i64) -> bool {
        while let Ok((got, body)) = self.replies.try_recv() {
            self.early.insert(got, body);
        }
        self.early.contains_key(&id)
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let (id, body) = self.frame(method, &params);
        self.send(&body).await;
        let reply: Value = serde_json::from_slice(&self.reply(id).await).unwrap();
        assert!(reply.get("error").is_none(), "{method}: {}", reply["error"]);
        reply["result"].clone()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[((v.len() - 1) * 99).div_ceil(100)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Print a figure and record it as a row of the run's results.
fn row(name: &str, value: f64, unit: &str, baseline: f64, target: &str, met: bool, note: &str) {
    println!(
        "{name:<50} {value:>10.2} {unit:<6} baseline {baseline:>10.2}  ratio {:>6.2}  target {target:<8} {}  {note}",
        value / baseline,
        if met { "met" } else { "MISSED" },
    );
    support::record(
        support::Noted {
            bench: "throughput",
            name,
            value,
            baseline,
            unit,
            ratio: value / baseline,
            target,
            met,
            note,
        }
        .into(),
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    support::begin("throughput");
    let root = support::bench_root();
    let parts = support::Parts::from_args();
    let want = |name: &str| parts.want(name);
    println!(
        "toolwire throughput benchmarks ({} cores)\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if want("reapply") {
        for format in ["anthropic", "openai-chat", "openai-responses", "gemini"] {
            reapply_over_stdio(root.path(), format).await;
        }
    }
    if want("pair") {
        pair_scaling(root.path()).await;
    }
    if want("stall") {
        stall(root.path()).await;
    }
}

/// Reapply-only `budget/apply` of 200 results of 100 KB (20 MB), sent to a
/// real server over stdio and answered in full, against serde_json parsing
/// and serializing the same request bytes in process. The requests go back
/// to back; the same request after a pause is reported beside them.
async fn reapply_over_stdio(root: &Path, format: &str) {
    let dir = root.join(format!("reapply-{format}"));
    let mut p = Proc::start(&dir, json!({"durability": "none"})).await;
    let mut rng = fastrand::Rng::with_seed(1);
    let mut messages = Vec::new();
    for i in 0..200 {
        let body = toolwire::replay::synthetic::tool_output(&mut rng, 100_000);
        messages.extend(pair_in(format, &format!("toolu_{i:04}"), &body));
    }
    let params = json!({"sessionId": "r", "format": format, "messages": messages});
    p.call("budget/apply", params.clone()).await; // decide once
    let (_, body) = p.frame("budget/apply", &params);
    let mb = body.len() as f64 / 1e6;
    let mut ours = Vec::new();
    let mut base = Vec::new();
    // What no reapply can skip today, timed alone: parsing the request and
    // digesting every result's original (SHA-256 of its compact JSON).
    let mut parse = Vec::new();
    let mut digest = Vec::new();
    for _ in 0..7 {
        // The same request again: the id is reused, as the reply is read
        // before the next is sent.
        let t = Instant::now();
        p.send(&body).await;
        let reply = p.reply(p.next - 1).await;
        ours.push(t.elapsed());
        assert!(!reply.windows(8).any(|w| w == b"\"error\":"));
        let t = Instant::now();
        let v: Value = serde_json::from_slice(&body).unwrap();
        let out = serde_json::to_vec(&v).unwrap();
        base.push(t.elapsed());
        std::hint::black_box(out);
        let t = Instant::now();
        let v: Value = serde_json::from_slice(&body).unwrap();
        parse.push(t.elapsed());
        let dialect = toolwire::format::Format::from_name(format)
            .unwrap()
            .dialect();
        let t = Instant::now();
        for m in v["params"]["messages"].as_array().unwrap() {
            for (i, _) in toolwire::format::results(dialect, m) {
                std::hint::black_box(toolwire::budget::original_digest(
                    dialect,
                    m,
                    i,
                    toolwire::format::Digest::NEW,
                ));
            }
        }
        digest.push(t.elapsed());
    }
    // The same request after a pause longer than the connection keeps a
    // large read buffer: it is read into fresh memory, as the first
    // request of an agent's turn is.
    let pause = toolwire::transport::BUFFER_IDLE + Duration::from_millis(500);
    let mut paused = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(pause).await;
        let t = Instant::now();
        p.send(&body).await;
        let reply = p.reply(p.next - 1).await;
        paused.push(t.elapsed());
        assert!(!reply.windows(8).any(|w| w == b"\"error\":"));
    }
    let (o, b) = (median(ours), median(base));
    let ratio = o.as_secs_f64() / b.as_secs_f64();
    let (p, d) = (median(parse), median(digest));
    let paused = median(paused);
    row(
        &format!("reapply-only budget/apply over stdio, {format}"),
        ms(o),
        "ms",
        ms(b),
        "≤ 0.8×",
        ratio <= 0.8,
        &format!(
            "{mb:.1} MB request; baseline: serde_json parse + serialize in process; of it, parse alone {:.1} ms ({:.2}x) + digests {:.1} ms ({:.2}x)",
            ms(p),
            ms(p) / ms(b),
            ms(d),
            ms(d) / ms(b),
        ),
    );
    row(
        &format!("  the same after a pause, {format}"),
        ms(paused),
        "ms",
        ms(b),
        "report",
        true,
        &format!(
            "each sent {:.1} s after the last reply: read into fresh memory",
            pause.as_secs_f64()
        ),
    );
}

/// One pair of `n` calls through a real server: the assistant turn, then
/// the user turn with every result, committed as one.
async fn one_pair(p: &mut Proc, session: &str, n: usize) -> Duration {
    let calls: Vec<Value> = (0..n)
        .map(|i| json!({"type": "tool_use", "id": format!("toolu_{i:07}"), "name": "Bash", "input": {"command": "ls"}}))
        .collect();
    let results: Vec<Value> = (0..n)
        .map(|i| json!({"type": "tool_result", "tool_use_id": format!("toolu_{i:07}"), "content": "ok"}))
        .collect();
    let (a, a_body) = p.frame(
        "pair/append",
        &json!({"sessionId": session, "message": {"role": "assistant", "content": calls}}),
    );
    let (u, u_body) = p.frame(
        "pair/append",
        &json!({"sessionId": session, "message": {"role": "user", "content": results}}),
    );
    let t = Instant::now();
    p.send(&a_body).await;
    p.reply(a).await;
    p.send(&u_body).await;
    let reply = p.reply(u).await;
    let took = t.elapsed();
    assert!(reply.windows(11).any(|w| w == b"\"committed\""));
    took
}

/// Per-call cost of one pair of 10,000 and of 100,000 calls against one
/// of 1,000. The two are measured in alternation, round by round, so the
/// load of a shared machine falls on both alike; the ratio is the median
/// of the rounds'.
async fn pair_scaling(root: &Path) {
    let mut p = Proc::start(&root.join("pair"), json!({"durability": "none"})).await;
    let per_call = |d: Duration, n: usize| d.as_secs_f64() * 1e6 / n as f64;
    for n in [10_000, 100_000] {
        let (mut small, mut big, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..3 {
            // As many calls in pairs of 1,000 as in the one big pair.
            let mut total = Duration::ZERO;
            for k in 0..n / 1_000 {
                total += one_pair(&mut p, &format!("small-{n}-{round}-{k}"), 1_000).await;
            }
            let s = per_call(total, n);
            let b = per_call(one_pair(&mut p, &format!("big-{n}-{round}"), n).await, n);
            small.push(s);
            big.push(b);
            ratios.push(b / s);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (ours, base, ratio) = (median(big), median(small), median(ratios));
        let name = format!("pair of {n} calls, per call");
        let note =
            "baseline: the same calls in pairs of 1,000, alternating; ratio: median of 3 rounds";
        println!(
            "{name:<50} {ours:>10.2} us     baseline {base:>10.2}  ratio {ratio:>6.2}  target <= 2x    {}  {note}",
            if ratio <= 2.0 { "met" } else { "MISSED" },
        );
        support::record(
            support::Noted {
                bench: "throughput",
                name: &name,
                value: ours,
                baseline: base,
                unit: "µs",
                ratio,
                target: "≤ 2×",
                met: ratio <= 2.0,
                note,
            }
            .into(),
        );
    }
}

/// `state/get` on session B, back to back, while session A's `budget/apply`
/// persists 100,000 results of 500 bytes; against the same with A idle.
async fn stall(root: &Path) {
    let dir = root.join("stall");
    let mut p = Proc::start(&dir, json!({"durability": "none"})).await;
    let pid = p.pid();
    // B is loaded and has state, as a live session does.
    let mut rng = fastrand::Rng::with_seed(3);
    let b_messages: Vec<Value> = (0..100)
        .flat_map(|i| {
            pair_in(
                "anthropic",
                &format!("toolu_b{i:04}"),
                &toolwire::replay::synthetic::tool_output(&mut rng, 500),
            )
        })
        .collect();
    p.call(
        "budget/apply",
        json!({"sessionId": "b", "messages": b_messages, "limits": {"maxResultChars": 100, "previewChars": 20}}),
    )
    .await;
    let get = |p: &mut Proc| p.frame("state/get", &json!({"sessionId": "b"}));
    let mut idle = Vec::new();
    for _ in 0..500 {
        let (id, body) = get(&mut p);
        let t = Instant::now();
        p.send(&body).await;
        p.reply(id).await;
        idle.push(t.elapsed());
    }
    let idle_threads = threads(pid);

    // A: 100,000 results over 100 chars in 100 user turns of 1,000.
    const RESULTS: usize = 100_000;
    let mut messages = Vec::new();
    for turn in 0..100 {
        let calls: Vec<Value> = (0..1000)
            .map(|i| json!({"type": "tool_use", "id": format!("toolu_a{turn:03}{i:04}"), "name": "Bash", "input": {}}))
            .collect();
        let results: Vec<Value> = (0..1000)
            .map(|i| json!({"type": "tool_result", "tool_use_id": format!("toolu_a{turn:03}{i:04}"), "content": toolwire::replay::synthetic::tool_output(&mut rng, 500)}))
            .collect();
        messages.push(json!({"role": "assistant", "content": calls}));
        messages.push(json!({"role": "user", "content": results}));
    }
    let (a, a_body) = p.frame(
        "budget/apply",
        &json!({"sessionId": "a", "messages": messages, "limits": {"maxResultChars": 100, "previewChars": 20}}),
    );
    let started = Instant::now();
    p.send(&a_body).await;
    let mut busy = Vec::new();
    let mut most_threads = threads(pid);
    while !p.arrived(a) {
        let (id, body) = get(&mut p);
        let t = Instant::now();
        p.send(&body).await;
        p.reply(id).await;
        busy.push(t.elapsed());
        most_threads = most_threads.max(threads(pid));
    }
    let a_took = started.elapsed();
    let reply: Value = serde_json::from_slice(&p.reply(a).await).unwrap();
    let persisted = reply["result"]["persisted"].as_array().map_or(0, Vec::len);
    assert_eq!(persisted, RESULTS, "{}", reply["error"]);
    let written = std::fs::read_dir(dir.join(".toolwire/sessions/a/tool-results"))
        .unwrap()
        .count();
    assert_eq!(written, RESULTS);

    let (ours, base) = (p99(busy.clone()), p99(idle));
    row(
        "state/get p99 on B while A persists 100k",
        ms(ours),
        "ms",
        ms(base),
        "≤ 10 ms",
        ms(ours) <= 10.0,
        &format!(
            "{} gets during A's {:.1} s; baseline: p99 with A idle",
            busy.len(),
            a_took.as_secs_f64()
        ),
    );
    row(
        "server threads while A persists 100k",
        most_threads as f64,
        "threads",
        idle_threads as f64,
        "≤ 32",
        // Tokio's blocking pool alone may grow to 512 threads; what stays
        // is the runtime's workers, stdio and the few artifact writers.
        most_threads <= 32,
        "most seen in /proc/PID/task; baseline: the idle server",
    );
}
