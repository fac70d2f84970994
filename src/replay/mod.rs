//! `toolwire replay`: drive a recorded agent session through a real
//! `toolwire serve` child, turn by turn, as a harness would.
//!
//! For every assistant message: `pair/append`. For every user message:
//! `budget/apply` on the conversation's tail, then `pair/append` of the
//! budgeted message. An interrupted turn (a tool call followed by anything
//! but its results, an explicit `interrupt` line, or the end of the
//! recording) is resolved with `pair/flush`. A `resume` line restarts the
//! server, which picks the session up from its transcript.
//!
//! Recordings are JSON Lines: bare messages (`{"role":…,"content":…}`),
//! toolwire transcript lines (`{"type":"message","message":…}`; replacement
//! lines are skipped), and the two markers `{"type":"interrupt","reason":…}`
//! and `{"type":"resume"}`.

pub mod convert;
pub mod price;
pub mod synthetic;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::budget;
use crate::client::{ClientError, RpcClient};
use crate::format::SizeUnit;
use crate::format::{self, Dialect, Format, Side};

/// The bundled demo session (see `tests/data/make_demo_session.py`).
pub const BUNDLED: &[u8] = include_bytes!("../../tests/data/demo-session.jsonl.gz");

/// One step of a recording.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Message(Value),
    Interrupt(String),
    Resume,
}

/// Parse a recording in whatever it is: a toolwire transcript or bare
/// messages of any format (told by its `session` line, else its content),
/// or another agent's session file (converted). An error names the
/// offending line.
pub fn parse_any(text: &str) -> Result<(Format, Vec<Step>), String> {
    match crate::transcript::import::detect(text.as_bytes()) {
        Ok(crate::transcript::import::Content::Agent(agent)) => {
            let conversion = crate::transcript::import::convert(agent, text.as_bytes())
                .map_err(|e| e.to_string())?;
            let steps = conversion.messages.into_iter().map(Step::Message).collect();
            Ok((conversion.format, group(conversion.format, steps)))
        }
        Ok(content) => {
            let format = content.format();
            parse_recording_in(format, text).map(|steps| (format, group(format, steps)))
        }
        // Recording lines (`interrupt`, `resume`) first: read as anthropic,
        // which names any bad line.
        Err(_) => parse_recording(text).map(|steps| (Format::Anthropic, steps)),
    }
}

/// Responses items of one side in a row go as one append (one model
/// response, one batch of outputs), as a harness sends them.
fn group(format: Format, steps: Vec<Step>) -> Vec<Step> {
    if format != Format::OpenaiResponses {
        return steps;
    }
    let dialect = format.dialect();
    let mut out: Vec<Step> = Vec::new();
    let mut batch: Vec<Value> = Vec::new();
    let flush = |batch: &mut Vec<Value>, out: &mut Vec<Step>| match batch.len() {
        0 => {}
        1 => out.push(Step::Message(batch.remove(0))),
        _ => out.push(Step::Message(Value::Array(std::mem::take(batch)))),
    };
    for step in steps {
        match step {
            Step::Message(m) => {
                let side = dialect.side(&m);
                if side.is_none() || batch.first().is_some_and(|b| dialect.side(b) != side) {
                    flush(&mut batch, &mut out);
                }
                if side.is_none() {
                    out.push(Step::Message(m));
                } else {
                    batch.push(m);
                }
            }
            other => {
                flush(&mut batch, &mut out);
                out.push(other);
            }
        }
    }
    flush(&mut batch, &mut out);
    out
}

/// Parse an anthropic recording; an error names the offending line.
pub fn parse_recording(text: &str) -> Result<Vec<Step>, String> {
    parse_recording_in(Format::Anthropic, text)
}

fn parse_recording_in(format: Format, text: &str) -> Result<Vec<Step>, String> {
    let dialect = format.dialect();
    let mut steps = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = crate::json::from_slice(line.as_bytes())
            .map_err(|e| format!("line {line_no}: not JSON: {e}"))?;
        let step = match value.get("type").and_then(Value::as_str) {
            // A transcript line (a bare Responses `message` item has no
            // `message` field).
            Some("message") if value.get("message").is_some() => {
                Step::Message(value.get("message").cloned().unwrap_or(Value::Null))
            }
            Some("replacement" | "seen" | "session") => continue,
            Some(other)
                if format == Format::OpenaiResponses
                    && !matches!(other, "interrupt" | "resume") =>
            {
                Step::Message(value)
            }
            Some("interrupt") => Step::Interrupt(
                value
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("interrupted")
                    .to_owned(),
            ),
            Some("resume") => Step::Resume,
            Some(other) if value.get("role").is_none() => {
                return Err(format!("line {line_no}: unknown line type {other:?}"));
            }
            _ => Step::Message(value),
        };
        if let Step::Message(m) = &step {
            dialect
                .validate(m, "message", false)
                .map_err(|e| format!("line {line_no}: {e}"))?;
        }
        steps.push(step);
    }
    Ok(steps)
}

/// Decompress the bundled session.
pub fn bundled_recording() -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(BUNDLED)
        .read_to_string(&mut text)
        .map_err(|e| format!("bundled session: {e}"))?;
    Ok(text)
}

pub struct Options {
    /// The `toolwire` executable to run as the server.
    pub server: PathBuf,
    pub data_dir: PathBuf,
    pub session_id: String,
    /// How many earlier messages go with each `budget/apply`.
    pub tail: usize,
    /// The recording's provider format.
    pub format: Format,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub session_id: String,
    pub data_dir: String,
    pub messages: usize,
    /// Assistant turns.
    pub turns: usize,
    pub tool_results: usize,
    /// Tool-result characters in the recording.
    pub chars_received: u64,
    /// Tool-result characters in the user messages sent after budgeting.
    pub chars_sent: u64,
    pub results_persisted: usize,
    pub bytes_persisted: u64,
    /// Results sent with a replacement decided on an earlier turn.
    pub decisions_reapplied: usize,
    pub pairs_committed: usize,
    pub pairs_discarded: usize,
    pub pairs_synthesized: usize,
    pub resumes: usize,
    pub calls: usize,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("starting the server {0}: {1}")]
    Spawn(String, std::io::Error),
}

type ChildClient = RpcClient<tokio::process::ChildStdout, tokio::process::ChildStdin>;

struct Server {
    client: ChildClient,
    child: tokio::process::Child,
}

impl Server {
    async fn start(opts: &Options) -> Result<Server, ReplayError> {
        let mut child = tokio::process::Command::new(&opts.server)
            .arg("serve")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ReplayError::Spawn(opts.server.display().to_string(), e))?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(ReplayError::Spawn(
                opts.server.display().to_string(),
                std::io::Error::other("no pipes"),
            ));
        };
        let mut client = RpcClient::new(stdout, stdin);
        let root = url::Url::from_file_path(&opts.data_dir)
            .map(|u| u.to_string())
            .unwrap_or_default();
        client
            .request(
                "initialize",
                json!({"processId": std::process::id(), "rootUri": root, "clientInfo": {"name": "toolwire-replay"},
                       "initializationOptions": {"dataDir": opts.data_dir}}),
            )
            .await?;
        client.notify("initialized", json!({})).await?;
        Ok(Server { client, child })
    }

    async fn stop(mut self) -> Result<(), ReplayError> {
        self.client.request("shutdown", Value::Null).await?;
        self.client.notify("exit", Value::Null).await?;
        let _ = self.child.wait().await;
        Ok(())
    }
}

/// Replay `steps`; `on_step` is called after each one (progress display).
pub async fn run(
    steps: &[Step],
    opts: &Options,
    mut on_step: impl FnMut(),
) -> Result<Summary, ReplayError> {
    let mut summary = Summary {
        session_id: opts.session_id.clone(),
        data_dir: opts.data_dir.display().to_string(),
        ..Summary::default()
    };
    let mut latencies: Vec<Duration> = Vec::new();
    let mut server = Server::start(opts).await?;
    let mut conversation: Vec<Value> = Vec::new();
    let mut pending: HashSet<String> = HashSet::new();
    let sid = opts.session_id.as_str();
    let dialect = opts.format.dialect();

    macro_rules! call {
        ($method:expr, $params:expr) => {{
            let start = Instant::now();
            let r = server.client.request($method, $params).await?;
            latencies.push(start.elapsed());
            r
        }};
    }

    for step in steps {
        match step {
            Step::Resume => {
                if !pending.is_empty() {
                    let f = call!(
                        "pair/flush",
                        json!({"sessionId": sid, "reason": "session suspended"})
                    );
                    count_flush(&mut summary, &f);
                    pending.clear();
                }
                server.stop().await?;
                server = Server::start(opts).await?;
                summary.resumes += 1;
            }
            Step::Interrupt(reason) => {
                let f = call!("pair/flush", json!({"sessionId": sid, "reason": reason}));
                count_flush(&mut summary, &f);
                pending.clear();
            }
            Step::Message(msg) => {
                // One message, or a batch of Responses items.
                let items: Vec<Value> = match msg {
                    Value::Array(items) => items.clone(),
                    one => vec![one.clone()],
                };
                summary.messages += items.len();
                let is_user = items.iter().any(|m| dialect.side(m) == Some(Side::User));
                let answers = items
                    .iter()
                    .any(|m| !format::results(dialect, m).is_empty());
                if !pending.is_empty()
                    && !answers
                    && items.iter().any(|m| dialect.side(m).is_some())
                {
                    // The recording moved on without the results: the
                    // harness resolves the pair on its exit path.
                    let f = call!(
                        "pair/flush",
                        json!({"sessionId": sid, "reason": "turn interrupted"})
                    );
                    count_flush(&mut summary, &f);
                    pending.clear();
                }
                let mut sent = msg.clone();
                if is_user {
                    let refs: Vec<&Value> = items.iter().collect();
                    summary.chars_received +=
                        budget::message_total(dialect, &refs, SizeUnit::Chars);
                    summary.tool_results += items
                        .iter()
                        .map(|m| format::results(dialect, m).len())
                        .sum::<usize>();
                    conversation.extend(items.iter().cloned());
                    let from = conversation.len().saturating_sub(opts.tail + items.len());
                    let tail = &conversation[from..];
                    let r = call!(
                        "budget/apply",
                        json!({"sessionId": sid, "format": opts.format, "messages": tail})
                    );
                    count_apply(dialect, &mut summary, &r, tail);
                    if let Some(out) = r["messages"].as_array() {
                        let budgeted = out[out.len().saturating_sub(items.len())..].to_vec();
                        let refs: Vec<&Value> = budgeted.iter().collect();
                        summary.chars_sent +=
                            budget::message_total(dialect, &refs, SizeUnit::Chars);
                        sent = match msg {
                            Value::Array(_) => Value::Array(budgeted),
                            _ => budgeted.into_iter().next().unwrap_or(sent),
                        };
                    }
                } else {
                    conversation.extend(items.iter().cloned());
                    summary.turns += 1;
                }
                let r = call!(
                    "pair/append",
                    json!({"sessionId": sid, "format": opts.format, "message": sent})
                );
                if let Some(f) = r.get("flushed") {
                    count_flush(&mut summary, f);
                }
                let was_pending = !pending.is_empty();
                pending = r["pending"]
                    .as_array()
                    .map(|ids| {
                        ids.iter()
                            .filter_map(|i| i.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                if was_pending && pending.is_empty() && r["status"] == "committed" {
                    summary.pairs_committed += 1;
                }
            }
        }
        on_step();
    }
    if !pending.is_empty() {
        let f = call!(
            "pair/flush",
            json!({"sessionId": sid, "reason": "recording ended"})
        );
        count_flush(&mut summary, &f);
    }
    server.stop().await?;

    latencies.sort_unstable();
    summary.calls = latencies.len();
    summary.latency_p50_ms = percentile(&latencies, 50);
    summary.latency_p99_ms = percentile(&latencies, 99);
    Ok(summary)
}

fn count_flush(summary: &mut Summary, f: &Value) {
    let n = |k: &str| f[k].as_array().map_or(0, |a| a.len());
    if n("discarded") > 0 {
        summary.pairs_discarded += 1;
    }
    if n("synthesized") > 0 {
        summary.pairs_synthesized += 1;
    }
}

fn count_apply(dialect: &dyn Dialect, summary: &mut Summary, r: &Value, sent: &[Value]) {
    let persisted = r["persisted"].as_array().cloned().unwrap_or_default();
    summary.results_persisted += persisted.len();
    for p in &persisted {
        if let Some(path) = p["path"].as_str() {
            summary.bytes_persisted += std::fs::metadata(path).map_or(0, |m| m.len());
        }
    }
    let fresh: HashSet<&str> = r["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|rec| rec["toolUseId"].as_str())
        .collect();
    let out = r["messages"].as_array().cloned().unwrap_or_default();
    for (before, after) in sent.iter().zip(&out) {
        for (i, id) in format::results(dialect, after) {
            let changed = dialect.result_value(before, i) != dialect.result_value(after, i);
            if changed && !fresh.contains(&*id) {
                summary.decisions_reapplied += 1;
            }
        }
    }
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) * p).div_ceil(100);
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// A fresh data directory for a replay, `<tmp>/toolwire-replay-<n>`,
/// removed when dropped (unless kept with [`tempfile::TempDir::keep`]).
pub fn fresh_data_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("toolwire-replay-")
        .tempdir()
}

/// What each line of the summary means, printed under it: the term as
/// the summary shows it, then its meaning (one line of text per entry).
pub const LEGEND: &[(&str, &[&str])] = &[
    (
        "messages",
        &["the recording's messages; a turn is one assistant message"],
    ),
    ("tool results", &["tool_result blocks in the user messages"]),
    (
        "chars received",
        &["their text as recorded: what the model gets without toolwire"],
    ),
    (
        "chars sent",
        &["their text after budget/apply, previews in place of saved results"],
    ),
    (
        "results persisted",
        &["results saved to disk once and replaced by a preview"],
    ),
    (
        "decisions reapplied",
        &[
            "results decided on an earlier turn and sent again exactly as then",
            "(the same bytes, so the provider's prompt cache keeps hitting)",
        ],
    ),
    (
        "pairs",
        &[
            "committed: tool calls written with all their results; discarded:",
            "interrupted calls dropped unwritten; synthesized: interrupted calls",
            "closed with an error result",
        ],
    ),
    (
        "latency per call",
        &["the time each budget/apply, pair/append and pair/flush took"],
    ),
];

fn legend() -> String {
    let mut out = String::from("  what the figures mean:\n");
    for (term, lines) in LEGEND {
        for (i, line) in lines.iter().enumerate() {
            let term = if i == 0 { *term } else { "" };
            out.push_str(&format!("  {term:<18} {line}\n"));
        }
    }
    out
}

/// The human-readable summary, with its legend. `kept`: whether the data
/// directory stays after the replay.
pub fn render(summary: &Summary, kept: bool) -> String {
    let ratio = if summary.chars_received > 0 {
        summary.chars_sent as f64 / summary.chars_received as f64 * 100.0
    } else {
        100.0
    };
    let place = if kept {
        format!("into {}", summary.data_dir)
    } else {
        "in a temporary directory".to_owned()
    };
    let kept = if kept {
        format!(
            "transcript: {}/sessions/{}.jsonl\n",
            summary.data_dir, summary.session_id
        )
    } else {
        "the data directory was temporary and is removed: --keep or --data-dir DIR keeps it\n"
            .to_owned()
    };
    format!(
        "replayed session {sid} {place}\n\
         \n  messages           {messages} ({turns} assistant turns, {resumes} resume(s))\n  \
         tool results       {results}\n  \
         chars received     {recv}\n  \
         chars sent         {sent} ({ratio:.1}% of received)\n  \
         results persisted  {np} ({bytes} bytes on disk)\n  \
         decisions reapplied {re}\n  \
         pairs              {pc} committed, {pd} discarded, {ps} synthesized\n  \
         latency per call   p50 {p50:.2} ms, p99 {p99:.2} ms over {calls} calls\n\
         \n{legend}\n{kept}",
        legend = legend(),
        sid = summary.session_id,
        messages = summary.messages,
        turns = summary.turns,
        resumes = summary.resumes,
        results = summary.tool_results,
        recv = summary.chars_received,
        sent = summary.chars_sent,
        np = summary.results_persisted,
        bytes = summary.bytes_persisted,
        re = summary.decisions_reapplied,
        pc = summary.pairs_committed,
        pd = summary.pairs_discarded,
        ps = summary.pairs_synthesized,
        p50 = summary.latency_p50_ms,
        p99 = summary.latency_p99_ms,
        calls = summary.calls,
    )
}

/// Longest line a recording may have: one message, and a whole request
/// is at most `proxy.maxRequestBytes` (32 MiB by default).
pub const MAX_RECORDING_LINE: usize = 64 << 20;

/// Largest file that is one JSON document spread over many lines (a Gemini
/// CLI session file is pretty-printed): such a file has no line structure
/// to check as it comes, so the whole of it is what is bounded.
pub const MAX_RECORDING_DOCUMENT: usize = 256 << 20;

/// Read a recording from a file (gzip when it ends in `.gz`).
///
/// Read line by line, each line checked as it comes: a file that is not a
/// recording (a gzip bomb inflating to a GiB of anything) is refused at
/// its first line that does not open a JSON object, or that runs past
/// [`MAX_RECORDING_LINE`], having held at most that much. A file whose
/// first line does not close the object it opens is one pretty-printed
/// document (another agent's session file): its later lines are not
/// objects of their own, and it is refused once it passes
/// [`MAX_RECORDING_DOCUMENT`].
pub fn read_recording(path: &Path) -> Result<String, String> {
    use std::io::BufReader;
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| at(&e))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let gz = flate2::read::GzDecoder::new(BufReader::new(file));
        read_lines(BufReader::new(gz)).map_err(|e| at(&e))
    } else {
        read_lines(BufReader::new(file)).map_err(|e| at(&e))
    }
}

fn read_lines(mut reader: impl std::io::BufRead) -> Result<String, String> {
    use std::io::{BufRead, Read};
    let mut text = String::new();
    let mut line = Vec::new();
    // Set by the first line: JSON Lines, or one document over many lines.
    let mut document = false;
    for line_no in 1.. {
        // What the line starts with is known from the first bytes.
        let head = reader.fill_buf().map_err(|e| e.to_string())?;
        if head.is_empty() {
            break;
        }
        if !document
            && let Some(&first) = head
                .iter()
                .take_while(|&&b| b != b'\n')
                .find(|b| !b.is_ascii_whitespace())
            && first != b'{'
        {
            return Err(format!(
                "line {line_no}: not JSON (a recording's lines are JSON objects)"
            ));
        }
        line.clear();
        (&mut reader)
            .take(MAX_RECORDING_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| e.to_string())?;
        if line.len() > MAX_RECORDING_LINE {
            return Err(format!(
                "line {line_no}: longer than {} MiB, not a recording",
                MAX_RECORDING_LINE >> 20
            ));
        }
        if line_no == 1 {
            document = !line.trim_ascii_end().ends_with(b"}");
        }
        if document && text.len() + line.len() > MAX_RECORDING_DOCUMENT {
            return Err(format!(
                "larger than {} MiB as one JSON document, not a recording",
                MAX_RECORDING_DOCUMENT >> 20
            ));
        }
        let text_line =
            std::str::from_utf8(&line).map_err(|e| format!("line {line_no}: not UTF-8: {e}"))?;
        text.push_str(text_line);
    }
    Ok(text)
}
