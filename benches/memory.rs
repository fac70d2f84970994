//! Resident memory of a real `toolwire serve` process, each figure next to
//! a baseline measured in the same run: the same server idle after
//! `initialize`.
//!
//!     cargo bench --bench memory              # every figure (about three minutes)
//!     cargo bench --bench memory -- ids       # one part: reconstruct resume apply ids
//!
//! A session of 100,000 seen ids and 10,000 replacements (2 KB previews, as
//! the defaults make them) is built on each path a server meets it by:
//! `state/reconstruct` of a transcript, resume (loaded from its own
//! transcript by its first request), and `budget/apply` deciding it 1,000
//! results at a time. The figure is the server's VmRSS after the path, and
//! again after a `state/get` of the whole state (a ~25 MB reply); VmHWM
//! (the peak) is printed beside it. Then one server touches as many
//! distinct session ids as fit in a minute and a half (up to a million)
//! with a short idle period: its RSS once they are idle after a quarter of
//! a million, against its RSS after the first thousand, and its RSS after
//! the million against that after a quarter (more ids must not grow it).

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;

/// A `toolwire serve` process and a blocking LSP-framed client of it.
struct Served {
    child: Child,
    input: BufWriter<ChildStdin>,
    output: BufReader<ChildStdout>,
    next: u64,
}

impl Served {
    fn start(dir: &Path, env: &[(&str, &str)], options: Value) -> Served {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolwire"));
        command
            .arg("serve")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start toolwire serve");
        let input = BufWriter::with_capacity(1 << 20, child.stdin.take().unwrap());
        let output = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
        let mut served = Served {
            child,
            input,
            output,
            next: 1,
        };
        served.call(
            "initialize",
            json!({"rootUri": format!("file://{}", dir.display()), "initializationOptions": options}),
        );
        served
    }

    /// Queue a request (written on the next flush); returns its id.
    fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        let body = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        write!(self.input, "Content-Length: {}\r\n\r\n", body.len()).unwrap();
        self.input.write_all(&body).unwrap();
        id
    }

    fn flush(&mut self) {
        self.input.flush().unwrap();
    }

    /// The next response (notifications skipped), its body unparsed.
    fn recv_raw(&mut self) -> Vec<u8> {
        loop {
            let mut len = None;
            loop {
                let mut line = String::new();
                assert!(
                    self.output.read_line(&mut line).unwrap() > 0,
                    "server ended"
                );
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(n) = line.strip_prefix("Content-Length:") {
                    len = Some(n.trim().parse::<usize>().unwrap());
                }
            }
            let mut body = vec![0; len.expect("a Content-Length header")];
            self.output.read_exact(&mut body).unwrap();
            if !body.starts_with(br#"{"jsonrpc":"2.0","method""#) {
                return body;
            }
        }
    }

    fn recv(&mut self) -> Value {
        let reply: Value = serde_json::from_slice(&self.recv_raw()).unwrap();
        assert!(reply.get("error").is_none(), "{}", reply["error"]);
        reply
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params);
        self.flush();
        self.recv()["result"].take()
    }

    /// (VmRSS, VmHWM) in MB.
    fn memory(&self) -> (f64, f64) {
        support::memory_of(self.child.id())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SEEN: usize = 100_000;
const REPLACED: usize = 10_000;

fn id(i: usize) -> String {
    format!("toolu_01{i:022}")
}

fn call(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "make"}})
}

fn result(id: &str, body: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": body})
}

/// A transcript of `SEEN` pairs whose first `REPLACED` results were
/// replaced by 2 KB previews (their `replacement` lines follow them).
fn write_transcript(path: &Path, artifacts: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut rng = fastrand::Rng::with_seed(6);
    let mut f = BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..SEEN {
        let id = id(i);
        let a = json!({"role": "assistant", "content": [call(&id)]});
        let u = json!({"role": "user", "content": [result(&id, "ok")]});
        writeln!(f, "{}", json!({"type": "message", "message": a})).unwrap();
        writeln!(f, "{}", json!({"type": "message", "message": u})).unwrap();
        if i < REPLACED {
            let original = toolwire::replay::synthetic::tool_output(&mut rng, 60_000);
            let r = toolwire::budget::preview::replacement(
                &original,
                60_000,
                &toolwire::budget::preview::Saved {
                    path: &artifacts.join(format!("{id}.txt")).display().to_string(),
                    link: None,
                },
                2000,
                Default::default(),
                Default::default(),
            );
            writeln!(f, "{}", json!({"type": "replacement", "record": {"kind": "tool-result", "toolUseId": id, "replacement": r}})).unwrap();
        }
    }
    f.flush().unwrap();
}

struct Row {
    name: String,
    rss: f64,
    hwm: f64,
    baseline: f64,
    /// At most this many MB resident.
    target: Option<f64>,
    /// At most this ratio to the baseline (no growth).
    growth: Option<f64>,
}

fn print(rows: &[Row]) {
    println!(
        "\n{:<58} {:>9} {:>9} {:>10} {:>7}  target",
        "figure", "RSS MB", "peak MB", "baseline", "ratio"
    );
    for r in rows {
        let target = match r.target {
            Some(t) if r.rss <= t => format!("<= {t} MB ✓"),
            Some(t) => format!("<= {t} MB ✗"),
            None => String::new(),
        };
        println!(
            "{:<58} {:>9.1} {:>9.1} {:>7.1} MB {:>6.2}x  {target}",
            r.name,
            r.rss,
            r.hwm,
            r.baseline,
            r.rss / r.baseline
        );
        let ratio = r.rss / r.baseline;
        let (target, holds) = match (r.target, r.growth) {
            (Some(t), _) => (format!("≤ {t} MB"), Some(r.rss <= t)),
            (None, Some(g)) => (format!("no growth (≤ {g}×)"), Some(ratio <= g)),
            (None, None) => ("report".into(), None),
        };
        support::record(support::Row {
            bench: "memory",
            figure: r.name.trim().into(),
            toolwire: format!("{:.1} MB (peak {:.1})", r.rss, r.hwm),
            baseline: format!("{:.1} MB", r.baseline),
            ratio: support::x(ratio),
            target,
            holds,
        });
    }
}

/// The figure after the path and after a `state/get` of the session.
fn after_path_and_get(server: &mut Served, path: &str, baseline: f64, rows: &mut Vec<Row>) {
    // Let the runtime's threads go quiet before reading RSS, and the
    // server hand back what the requests freed: it does once a connection
    // has paused for a second after a request that carried a conversation
    // (`transport::RELEASE_AFTER`).
    std::thread::sleep(Duration::from_millis(1500));
    let (rss, hwm) = server.memory();
    rows.push(Row {
        name: format!("100k seen / 10k replaced, after {path}"),
        rss,
        hwm,
        baseline,
        target: Some(30.0),
        growth: None,
    });
    server.send("state/get", json!({"sessionId": "m"}));
    server.flush();
    let body = server.recv_raw();
    let got: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        got["result"]["seenIds"].as_array().map(Vec::len),
        Some(SEEN)
    );
    assert_eq!(
        got["result"]["replacements"].as_object().map(|o| o.len()),
        Some(REPLACED)
    );
    drop(got);
    // As after the path: a reply this large is large work, whose freed
    // memory goes back once the server has had none for a second
    // (`heap::LargeWork`, begun by the connection's writer).
    std::thread::sleep(Duration::from_millis(1500));
    let (rss, hwm) = server.memory();
    rows.push(Row {
        name: format!(
            "  the same after a state/get of it ({} MB reply)",
            body.len() >> 20
        ),
        rss,
        hwm,
        baseline,
        target: Some(30.0),
        growth: None,
    });
}

fn reconstruct(root: &Path, rows: &mut Vec<Row>) {
    let dir = root.join("reconstruct");
    std::fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("resume.jsonl");
    write_transcript(&transcript, &dir.join(".toolwire/sessions/m/tool-results"));
    let mut server = Served::start(&dir, &[], json!({}));
    let (idle, _) = server.memory();
    let r = server.call(
        "state/reconstruct",
        json!({"sessionId": "m", "transcript": transcript.display().to_string()}),
    );
    assert_eq!(
        (r["seenCount"].as_u64(), r["replacementCount"].as_u64()),
        (Some(SEEN as u64), Some(REPLACED as u64))
    );
    after_path_and_get(&mut server, "state/reconstruct", idle, rows);
}

fn resume(root: &Path, rows: &mut Vec<Row>) {
    let dir = root.join("resume");
    let sessions = dir.join(".toolwire/sessions");
    write_transcript(&sessions.join("m.jsonl"), &sessions.join("m/tool-results"));
    let mut server = Served::start(&dir, &[], json!({}));
    let (idle, _) = server.memory();
    // Its first request loads the session from its transcript.
    server.call("budget/apply", json!({"sessionId": "m", "messages": []}));
    after_path_and_get(&mut server, "resume", idle, rows);
}

fn apply(root: &Path, rows: &mut Vec<Row>) {
    let dir = root.join("apply");
    std::fs::create_dir_all(&dir).unwrap();
    // Results over 3,000 chars are replaced by a 2 KB preview; the others
    // are sent whole. 100 requests of 1,000 results, 100 of them large.
    let mut server = Served::start(
        &dir,
        &[],
        json!({"durability": "none", "limits": {"maxResultChars": 3000, "maxMessageChars": 100_000_000}}),
    );
    let (idle, _) = server.memory();
    let mut rng = fastrand::Rng::with_seed(7);
    let per = 1000;
    for batch in 0..SEEN / per {
        let ids: Vec<String> = (0..per).map(|k| id(batch * per + k)).collect();
        let calls: Vec<Value> = ids.iter().map(|id| call(id)).collect();
        let results: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(k, id)| {
                if k % (SEEN / REPLACED) == 0 {
                    result(
                        id,
                        &toolwire::replay::synthetic::tool_output(&mut rng, 4000),
                    )
                } else {
                    result(id, "ok")
                }
            })
            .collect();
        let r = server.call(
            "budget/apply",
            json!({"sessionId": "m", "messages": [
                {"role": "assistant", "content": calls},
                {"role": "user", "content": results},
            ]}),
        );
        assert_eq!(
            r["records"].as_array().map(Vec::len),
            Some(per * REPLACED / SEEN)
        );
    }
    after_path_and_get(
        &mut server,
        "budget/apply (100 x 1,000 results)",
        idle,
        rows,
    );
}

/// Touch distinct session ids for up to `budget`, `window` requests in
/// flight; returns how many were touched. One in a hundred decides a
/// result (and so gets a transcript); the rest budget a turn with no tool
/// result yet, as a conversation's first request does.
fn touch(server: &mut Served, from: usize, to: usize, budget: Duration) -> usize {
    let start = Instant::now();
    let window = 512;
    let mut i = from;
    while i < to && start.elapsed() < budget {
        let end = (i + window).min(to);
        for k in i..end {
            let messages = if k % 100 == 0 {
                json!([
                    {"role": "assistant", "content": [call("t1")]},
                    {"role": "user", "content": [result("t1", "fine")]},
                ])
            } else {
                json!([{"role": "user", "content": "hello"}])
            };
            server.send(
                "budget/apply",
                json!({"sessionId": format!("s{k}"), "messages": messages}),
            );
        }
        server.flush();
        for _ in i..end {
            server.recv();
        }
        i = end;
    }
    i - from
}

fn many_ids(root: &Path, rows: &mut Vec<Row>) {
    let dir = root.join("ids");
    std::fs::create_dir_all(&dir).unwrap();
    let idle_ms = 500;
    // Idle sessions go after `idle_ms`, the memory they freed is handed
    // back a second after the evictions, and again once the blocking
    // threads their loads started have ended (10 s idle), 12 s after.
    let settle = Duration::from_millis(idle_ms * 3 + 15_000);
    let mut server = Served::start(
        &dir,
        &[("TOOLWIRE_SESSION_IDLE_MS", &idle_ms.to_string())],
        json!({"durability": "none"}),
    );
    let (idle, _) = server.memory();
    let first = touch(&mut server, 0, 1000, Duration::from_secs(3600));
    std::thread::sleep(settle);
    let (after_1k, _) = server.memory();
    rows.push(Row {
        name: format!("{first} distinct session ids, once idle"),
        rss: after_1k,
        hwm: server.memory().1,
        baseline: idle,
        target: None,
        growth: None,
    });
    // A quarter of a million first: what the ids still live leave behind
    // once idle (allocator fragmentation at the peak of live sessions) is
    // reached by then; from there on, more ids must not grow the server.
    let quarter = touch(&mut server, first, 250_000, Duration::from_secs(30));
    std::thread::sleep(settle);
    let (after_quarter, hwm_quarter) = server.memory();
    rows.push(Row {
        name: format!("{} distinct session ids, once idle", first + quarter),
        rss: after_quarter,
        hwm: hwm_quarter,
        baseline: after_1k,
        target: None,
        growth: None,
    });
    let start = Instant::now();
    let more = touch(
        &mut server,
        first + quarter,
        1_000_000,
        Duration::from_secs(60),
    );
    let rate = more as f64 / start.elapsed().as_secs_f64();
    std::thread::sleep(settle);
    let (rss, hwm) = server.memory();
    let total = first + quarter + more;
    rows.push(Row {
        name: format!("{total} distinct session ids ({rate:.0}/s), once idle"),
        rss,
        hwm,
        baseline: after_quarter,
        target: None,
        growth: Some(1.1),
    });
    println!(
        "  {total} ids vs {}: {:.2}x the RSS (target: no growth, <= 1.1x); vs 1,000: {:.2}x; peak {hwm:.1} MB while {idle_ms} ms of sessions were live",
        first + quarter,
        rss / after_quarter,
        rss / after_1k,
    );
}

fn main() {
    support::begin("memory");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parts = ["reconstruct", "resume", "apply", "ids"];
    let chosen: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| {
            !args.iter().any(|a| parts.contains(&a.as_str())) || args.iter().any(|a| a == p)
        })
        .collect();
    let root = tempfile::Builder::new()
        .prefix("toolwire-bench-memory-")
        .tempdir()
        .unwrap();
    let mut rows = Vec::new();
    for part in chosen {
        eprintln!("memory: {part}...");
        match part {
            "reconstruct" => reconstruct(root.path(), &mut rows),
            "resume" => resume(root.path(), &mut rows),
            "apply" => apply(root.path(), &mut rows),
            _ => many_ids(root.path(), &mut rows),
        }
    }
    print(&rows);
    println!(
        "\nbaseline: the same server idle after initialize (for the 250k row: after the first 1,000 ids; for the 1M row: after 250k)"
    );
}
