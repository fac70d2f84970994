//! Transcripts of other agents (PROTOCOL.md section 10.5): telling what a
//! file is by its content, and converting another agent's session file into
//! a toolwire transcript.
//!
//! # Entry points
//!
//! - [`detect`] (bytes) and [`detect_file`] (a path) look at the first lines
//!   of a file and say what it holds as a [`Content`]: a toolwire transcript
//!   of some [`Format`], a bare list of messages, or the session file of one
//!   of the four agents toolwire imports ([`Agent`]). A file in none of
//!   these is a [`DetectError`] that names its first line's `type` (or says
//!   it is not JSON): callers never treat it as "nothing to do".
//! - [`convert`] turns an agent's session file into a [`Conversion`]: the
//!   provider-shaped messages the agent would send on its next request, in
//!   the matching format, with a [`Report`] of what was left out.
//!   [`Conversion::write_transcript`] writes them as transcript lines.
//! - [`transcript_bytes`] does both for callers that take any file
//!   (`replay`, `repair`, `check`, `state/reconstruct`): a toolwire
//!   transcript or message list comes back as it is, an agent's session
//!   file comes back converted.
//!
//! ```text
//! Claude Code  <uuid>.jsonl           -> anthropic         (claude_code.rs)
//! Codex        rollout-*.jsonl        -> openai-responses  (codex.rs)
//! Gemini CLI   session-*.jsonl|.json  -> gemini            (gemini_cli.rs)
//! OpenClaw/pi  <session>.jsonl        -> anthropic         (openclaw.rs)
//! ```
//!
//! # What a conversion keeps
//!
//! Each converter rebuilds the conversation the way its agent does when it
//! resumes the session (each file says which code and version it follows):
//! only the current line of a branching history, only what follows the last
//! compaction (plus the summary the agent put in its place), nothing of side
//! chains, progress events, UI metadata or token counts. Messages and
//! content blocks that the agent stores in the provider's own shape are
//! copied verbatim, unknown fields included; where the agent uses its own
//! shape (OpenClaw/pi, Gemini CLI's tool-call records), the fields with a
//! provider counterpart are renamed and every other field is kept beside
//! them. Nothing is invented to make the transcript valid: a call left
//! without its result stays unanswered, for `repair` and `check` to report.
//!
//! A transcript in a format other than `anthropic` starts with the line
//! `{"type":"session","format":"<format>"}`; an `anthropic` one has no
//! such line, so today's readers take it as it is.

pub mod claude_code;
pub mod codex;
pub mod gemini_cli;
pub mod messages;
pub mod openclaw;
pub mod reread;
pub mod streamed;

use std::fmt;
use std::io::{self, Write};
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::transcript::Lines;

pub use crate::format::Format;

/// An agent whose session files toolwire converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    ClaudeCode,
    Codex,
    GeminiCli,
    /// OpenClaw and pi (`pi-coding-agent`) share one session format.
    OpenClaw,
}

impl Agent {
    pub const ALL: [Agent; 4] = [
        Agent::ClaudeCode,
        Agent::Codex,
        Agent::GeminiCli,
        Agent::OpenClaw,
    ];

    /// The name `toolwire import --from` takes.
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::GeminiCli => "gemini-cli",
            Agent::OpenClaw => "openclaw",
        }
    }

    /// How people call it.
    pub fn title(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "Claude Code session",
            Agent::Codex => "Codex rollout",
            Agent::GeminiCli => "Gemini CLI session",
            Agent::OpenClaw => "OpenClaw/pi session",
        }
    }

    pub fn from_name(name: &str) -> Option<Agent> {
        Agent::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The format its sessions convert to.
    pub fn format(self) -> Format {
        match self {
            Agent::ClaudeCode | Agent::OpenClaw => Format::Anthropic,
            Agent::Codex => Format::OpenaiResponses,
            Agent::GeminiCli => Format::Gemini,
        }
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a file holds, as told by [`detect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// A toolwire transcript: `{"type":"message","message":M}` lines, maybe
    /// with records and markers. `declared` when its first line is
    /// `{"type":"session","format":…}`; otherwise the format was read from
    /// the messages' shape (`anthropic` when nothing tells).
    Transcript { format: Format, declared: bool },
    /// Bare provider messages, one a line (no `{"type":"message"}`
    /// wrapper), read by their shape (`anthropic` when nothing tells).
    Messages { format: Format },
    /// Another agent's session file: [`convert`] it.
    Agent(Agent),
}

impl Content {
    /// The provider format this file's messages are (or convert to).
    pub fn format(self) -> Format {
        match self {
            Content::Transcript { format, .. } | Content::Messages { format } => format,
            Content::Agent(agent) => agent.format(),
        }
    }
}

impl fmt::Display for Content {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Content::Transcript { format, .. } => write!(f, "a toolwire transcript ({format})"),
            Content::Messages { format } => write!(f, "a list of {format} messages"),
            Content::Agent(agent) => write!(f, "a {}", agent.title()),
        }
    }
}

/// Why a file is none of the known formats.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    #[error("the file is empty: it holds no transcript, message list or agent session")]
    Empty,
    #[error(
        "not a transcript, message list or agent session toolwire knows: its first line is not JSON ({0})"
    )]
    NotJson(String),
    #[error(
        "not a transcript, message list or agent session toolwire knows: its first line has type {0:?}"
    )]
    UnknownType(String),
    #[error(
        "not a transcript, message list or agent session toolwire knows: its first line is JSON without a \"type\" field ({0})"
    )]
    NoType(String),
    #[error(
        "the session line names the format {0:?}; known formats: anthropic, openai-chat, openai-responses, gemini"
    )]
    UnknownFormat(String),
}

/// An import that could not be done.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("{path}: {source}")]
    Detect { path: String, source: DetectError },
    #[error("{path}: this is {found}, not a {expected}")]
    WrongAgent {
        path: String,
        found: Content,
        expected: &'static str,
    },
    #[error("{0}")]
    Invalid(String),
}

impl From<ImportError> for crate::error::Error {
    /// A file a request names that cannot be read as a conversation is a
    /// bad parameter, not a server fault.
    fn from(err: ImportError) -> Self {
        match err {
            ImportError::Io { path, source } => crate::error::Error::Storage {
                message: format!("{path}: {source}"),
                path: Some(path),
            },
            other => crate::error::Error::invalid_params("path", other.to_string()),
        }
    }
}

/// How many lines of the head [`detect`] reads before it settles for the
/// default (`anthropic`) or gives up. Agents start their files with a few
/// metadata lines; 64 is far more than any of them writes.
const DETECT_LINES: usize = 64;
/// How many bytes of a file [`detect_file`] reads at most.
const DETECT_BYTES: u64 = 8 << 20;
/// How many bytes of a file [`detect_file`] looks at first.
const FIRST_LOOK: u64 = 64 << 10;

/// Say what `input` (a file's first bytes or all of it) holds.
///
/// Reads up to the first 64 non-empty lines: the first line that only one
/// kind of file can hold decides. A message whose shape fits several
/// formats (a plain text message) decides nothing; when nothing decides,
/// messages are `anthropic`. A file none of whose lines belongs to a known
/// kind is an error naming its first line's `type`, or saying that line is
/// not JSON.
pub fn detect(input: &[u8]) -> Result<Content, DetectError> {
    detect_in(input, true).unwrap_or(Err(DetectError::Empty))
}

/// [`detect`] of `input`, which holds whole lines only; when it is not
/// `whole` (a file's first lines, with more after them), `None` unless a
/// line it holds decides, or the lines it holds are all [`detect`] reads:
/// then more of the file is needed to say.
fn detect_in(input: &[u8], whole: bool) -> Option<Result<Content, DetectError>> {
    let mut read = 0;
    let mut first: Option<Result<Value, String>> = None;
    // What the lines read so far say, when no line has decided yet.
    let mut pending: Option<Content> = None;
    for line in raw_lines(input).take(DETECT_LINES) {
        read += 1;
        let parsed = crate::json::from_slice::<Value>(line).map_err(|e| e.to_string());
        if first.is_none() {
            if parsed.is_err() {
                if !whole {
                    // Judged by the whole head: read it.
                    return None;
                }
                if gemini_cli::looks_like_legacy_record(input) {
                    return Some(Ok(Content::Agent(Agent::GeminiCli)));
                }
            }
            first = Some(parsed.clone());
        }
        let Ok(value) = parsed else { continue };
        let verdict = match classify(&value) {
            Ok(verdict) => verdict,
            Err(err) => return Some(Err(err)),
        };
        match verdict {
            Verdict::Decided(content) => return Some(Ok(content)),
            Verdict::Transcript(Some(format)) => {
                return Some(Ok(Content::Transcript {
                    format,
                    declared: false,
                }));
            }
            Verdict::Transcript(None) => {
                pending.get_or_insert(Content::Transcript {
                    format: Format::Anthropic,
                    declared: false,
                });
            }
            Verdict::Messages(Some(format)) => {
                return Some(Ok(match pending {
                    Some(Content::Transcript { .. }) => Content::Transcript {
                        format,
                        declared: false,
                    },
                    _ => Content::Messages { format },
                }));
            }
            Verdict::Messages(None) => {
                pending.get_or_insert(Content::Messages {
                    format: Format::Anthropic,
                });
            }
            Verdict::Unknown => {}
        }
    }
    if !whole && read < DETECT_LINES {
        return None;
    }
    if let Some(content) = pending {
        return Some(Ok(content));
    }
    Some(match first {
        None => Err(DetectError::Empty),
        Some(Err(err)) => Err(DetectError::NotJson(err)),
        Some(Ok(value)) => Err(unknown(&value)),
    })
}

/// [`detect`] on the first 8 MiB of the file at `path`.
///
/// The first [`FIRST_LOOK`] bytes are read first: their whole lines nearly
/// always decide (an agent's first line says what wrote it), and a large
/// file's head is then not read for nothing.
pub fn detect_file(path: &Path) -> Result<Content, ImportError> {
    let look = read_head(path, FIRST_LOOK)?;
    let whole = (look.len() as u64) < FIRST_LOOK;
    let lines = match memchr::memrchr(b'\n', &look) {
        _ if whole => &look[..],
        Some(end) => &look[..=end],
        None => &[][..],
    };
    let found = match detect_in(lines, whole) {
        Some(found) => found,
        None => detect(&read_head(path, DETECT_BYTES)?),
    };
    found.map_err(|source| ImportError::Detect {
        path: path.display().to_string(),
        source,
    })
}

/// The first `n` bytes of the file at `path`.
fn read_head(path: &Path, n: u64) -> Result<Vec<u8>, ImportError> {
    let io = |source| ImportError::Io {
        path: path.display().to_string(),
        source,
    };
    // A toolwire fork transcript is read through its parent's bytes.
    crate::transcript::fork::read_head(path, n).map_err(io)
}

/// The transcript bytes of any file toolwire reads conversations from: the
/// file itself when it is a toolwire transcript or a list of messages, the
/// converted session when it is another agent's. With the [`Content`] it
/// was found to be.
pub fn transcript_bytes(path: &Path) -> Result<(Content, Vec<u8>), ImportError> {
    let bytes = crate::transcript::fork::read_all(path).map_err(|source| ImportError::Io {
        path: path.display().to_string(),
        source,
    })?;
    as_transcript(path, bytes)
}

/// [`transcript_bytes`] of a file already read (`path` names it in
/// errors): a transcript as it is, a list of bare messages wrapped in
/// transcript lines (a `session` line first unless `anthropic`), an
/// agent's session converted.
pub fn as_transcript(path: &Path, bytes: Vec<u8>) -> Result<(Content, Vec<u8>), ImportError> {
    let content = detect(&bytes).map_err(|source| ImportError::Detect {
        path: path.display().to_string(),
        source,
    })?;
    let conversion = match content {
        Content::Transcript { .. } => return Ok((content, bytes)),
        Content::Agent(agent) => convert(agent, &bytes)?,
        Content::Messages { format } => messages_conversion(format, &bytes),
    };
    let mut out = Vec::new();
    conversion
        .write_transcript(&mut out)
        .map_err(|source| ImportError::Io {
            path: path.display().to_string(),
            source,
        })?;
    Ok((content, out))
}

/// Convert `agent`'s session file (its bytes) into provider messages.
pub fn convert(agent: Agent, input: &[u8]) -> Result<Conversion, ImportError> {
    match agent {
        Agent::ClaudeCode => Ok(claude_code::convert(input)),
        Agent::Codex => Ok(codex::convert(input)),
        Agent::GeminiCli => gemini_cli::convert(input),
        Agent::OpenClaw => Ok(openclaw::convert(input)),
    }
}

/// `agent`'s JSON Lines session (its bytes) converted by the two passes a
/// file is streamed with ([`streamed::plan`], [`streamed::Plan::emit`]).
fn converted(agent: Agent, input: &[u8]) -> Conversion {
    let file = reread::SessionFile { bytes: &input };
    let mut messages = Vec::new();
    // Bytes in memory neither fail to read nor change between passes.
    let report = streamed::plan(agent, file)
        .and_then(|plan| {
            plan.emit(file, &mut |message| {
                messages.push(message);
                Ok(())
            })
        })
        .unwrap_or_default();
    Conversion {
        format: agent.format(),
        messages,
        report,
    }
}

/// Convert the file at `path`, which must be a session file of `agent`.
/// Another agent's file, or a toolwire transcript, is an error saying what
/// the file is instead.
pub fn convert_file(agent: Agent, path: &Path) -> Result<Conversion, ImportError> {
    let bytes = std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.display().to_string(),
        source,
    })?;
    agent_of(agent, path, detect(&bytes))?;
    convert(agent, &bytes)
}

/// That the file at `path`, which [`detect`] found to hold `found`, is a
/// session file of `agent`: an error saying what it is otherwise.
pub fn agent_of(
    agent: Agent,
    path: &Path,
    found: Result<Content, DetectError>,
) -> Result<(), ImportError> {
    match found {
        Ok(found) if found == Content::Agent(agent) => Ok(()),
        Ok(found) => Err(ImportError::WrongAgent {
            path: path.display().to_string(),
            found,
            expected: agent.title(),
        }),
        Err(source) => Err(ImportError::Detect {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// A file of bare provider messages (one JSON object a line, no transcript
/// wrapper) as a [`Conversion`]: every object line a message, in order;
/// lines that are not JSON objects are counted as unreadable and left out.
fn messages_conversion(format: Format, input: &[u8]) -> Conversion {
    let mut conversion = Conversion::new(format);
    conversion.messages = json_lines(input, &mut conversion.report)
        .into_iter()
        .map(Value::Object)
        .collect();
    conversion
}

/// Convert the file at `path`, which must be a list of bare provider
/// messages (`toolwire import --from messages`): the format is read from
/// the messages' shape, as [`detect`] reads it, unless `format` is given.
/// A transcript or an agent's session is an error saying what it is.
pub fn convert_messages_file(
    path: &Path,
    format: Option<Format>,
) -> Result<Conversion, ImportError> {
    let bytes = std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let found = messages_format(path, detect(&bytes))?;
    Ok(messages_conversion(format.unwrap_or(found), &bytes))
}

/// The format of the messages of the file at `path`, which [`detect`]
/// found to hold `found`: an error saying what it is unless it is a list
/// of bare messages.
pub fn messages_format(
    path: &Path,
    found: Result<Content, DetectError>,
) -> Result<Format, ImportError> {
    match found {
        Ok(Content::Messages { format }) => Ok(format),
        Ok(found) => Err(ImportError::WrongAgent {
            path: path.display().to_string(),
            found,
            expected: "list of messages",
        }),
        Err(source) => Err(ImportError::Detect {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// An agent's session, converted.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    pub format: Format,
    /// Provider-shaped messages (for `openai-responses`, input items).
    pub messages: Vec<Value>,
    pub report: Report,
}

impl Conversion {
    fn new(format: Format) -> Self {
        Conversion {
            format,
            messages: Vec::new(),
            report: Report::default(),
        }
    }

    /// Write the transcript: the session line (formats other than
    /// `anthropic`), then one `{"type":"message","message":M}` line a
    /// message.
    pub fn write_transcript(&self, out: &mut (impl Write + ?Sized)) -> io::Result<()> {
        let mut lines = Lines::default();
        if let Some(session) = session_line(self.format)? {
            out.write_all(&session)?;
        }
        for message in &self.messages {
            lines.push_message(message);
        }
        out.write_all(&lines.bytes)
    }
}

/// What a conversion read and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Non-empty lines of the file (records, for a JSON file).
    pub lines: usize,
    /// Lines that are not JSON (a torn last line, above all): skipped.
    pub unreadable: usize,
    /// Lines that carry no message (metadata, events, snapshots, settings).
    pub skipped: usize,
    /// Messages not on the current line of the conversation: abandoned
    /// branches, rewound or rolled-back turns, what a compaction replaced.
    pub left_out: usize,
    /// Claude Code side-chain (sub-agent) lines.
    pub side_chain: usize,
    /// Lines of one assistant message written apart, joined into it.
    pub joined: usize,
    /// Compactions met.
    pub compactions: usize,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} lines read", self.lines)?;
        let parts = [
            (self.joined, "assistant lines joined into their message"),
            (self.side_chain, "side-chain lines left out"),
            (self.left_out, "messages off the current line left out"),
            (self.compactions, "compactions"),
            (self.skipped, "lines without a message skipped"),
            (self.unreadable, "unreadable lines skipped"),
        ];
        for (n, what) in parts {
            if n > 0 {
                write!(f, ", {n} {what}")?;
            }
        }
        Ok(())
    }
}

/// The non-blank lines of `input`, without their line ends.
fn raw_lines(input: &[u8]) -> impl Iterator<Item = &[u8]> {
    input
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
}

/// Parse every non-blank line, counting them (and those that are not JSON
/// objects) in `report`.
fn json_lines(input: &[u8], report: &mut Report) -> Vec<Map<String, Value>> {
    raw_lines(input)
        .filter_map(|line| json_line(line, report))
        .collect()
}

/// One non-blank line of [`json_lines`], counted in `report`.
fn json_line(line: &[u8], report: &mut Report) -> Option<Map<String, Value>> {
    report.lines += 1;
    match crate::json::from_slice::<Value>(line) {
        Ok(Value::Object(obj)) => Some(obj),
        _ => {
            report.unreadable += 1;
            None
        }
    }
}

/// A line read from a stream without its line end (`\n`, then `\r`);
/// `None` when it is blank, as [`raw_lines`] skips it.
pub fn raw_line(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    (!line.iter().all(u8::is_ascii_whitespace)).then_some(line)
}

/// A line of a file of bare messages (its line end taken off by
/// [`raw_line`]) as the message it holds, counted in `report` as
/// [`messages_conversion`] counts it; `None` for a line that is no JSON
/// object.
pub fn message_of_line(line: &[u8], report: &mut Report) -> Option<Value> {
    json_line(line, report).map(Value::Object)
}

/// The session line a converted transcript starts with (`None` for
/// `anthropic`, which needs none), as [`Conversion::write_transcript`]
/// writes it.
pub fn session_line(format: Format) -> io::Result<Option<Vec<u8>>> {
    if format == Format::Anthropic {
        return Ok(None);
    }
    let mut session = serde_json::to_vec(&json!({
        "type": "session",
        "format": format.name(),
    }))
    .map_err(io::Error::other)?;
    session.push(b'\n');
    Ok(Some(session))
}

/// [`detect`] of a whole file, read as a stream: its first
/// [`DETECT_LINES`] non-blank lines are all `detect` reads, unless its
/// first line is not JSON and those lines start like a legacy Gemini CLI
/// record (which is judged by the whole file): then `None`, and the
/// caller reads it whole.
pub fn detect_stream(
    mut input: impl io::BufRead,
) -> io::Result<Option<Result<Content, DetectError>>> {
    let mut head = Vec::new();
    let mut line = Vec::new();
    let mut first_is_json = true;
    let mut n = 0;
    while n < DETECT_LINES {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let Some(body) = raw_line(&line) else {
            continue;
        };
        if n == 0 {
            first_is_json = crate::json::from_slice::<Value>(body).is_ok();
        }
        head.extend_from_slice(body);
        head.push(b'\n');
        n += 1;
    }
    // The legacy record is told by its first lines, which `head` holds.
    if !first_is_json && gemini_cli::looks_like_legacy_record(&head) {
        return Ok(None);
    }
    Ok(detect_in(&head, true))
}

fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

/// What one line says about the file.
enum Verdict {
    Decided(Content),
    /// A toolwire transcript line; `Some` when it shows the format.
    Transcript(Option<Format>),
    /// A bare message; `Some` when its shape shows the format.
    Messages(Option<Format>),
    Unknown,
}

fn classify(value: &Value) -> Result<Verdict, DetectError> {
    let Some(obj) = value.as_object() else {
        return Ok(Verdict::Unknown);
    };
    let has = |key: &str| obj.contains_key(key);
    let Some(kind) = str_of(obj, "type") else {
        if has("$rewindTo") || has("$set") || (has("sessionId") && has("projectHash")) {
            return Ok(Verdict::Decided(Content::Agent(Agent::GeminiCli)));
        }
        if has("role") {
            return Ok(Verdict::Messages(message_format(value)));
        }
        return Ok(Verdict::Unknown);
    };
    let agent = |a| Ok(Verdict::Decided(Content::Agent(a)));
    match kind {
        "session" => match obj.get("format") {
            Some(Value::String(name)) => match Format::from_name(name) {
                Some(format) => Ok(Verdict::Decided(Content::Transcript {
                    format,
                    declared: true,
                })),
                None => Err(DetectError::UnknownFormat(name.clone())),
            },
            _ if has("version") || has("cwd") || has("id") => agent(Agent::OpenClaw),
            _ => Ok(Verdict::Unknown),
        },
        "message" => match obj.get("message") {
            // pi/OpenClaw entries link to their parent; toolwire lines do not.
            Some(_) if has("parentId") => agent(Agent::OpenClaw),
            Some(m) if m.get("role").and_then(Value::as_str) == Some("toolResult") => {
                agent(Agent::OpenClaw)
            }
            Some(m) => Ok(Verdict::Transcript(message_format(m))),
            // A bare Responses `message` item.
            None if has("role") => Ok(Verdict::Messages(Some(Format::OpenaiResponses))),
            None => Ok(Verdict::Unknown),
        },
        "replacement" | "seen" | "interrupt" | "resume" => Ok(Verdict::Transcript(None)),
        "session_meta" | "response_item" | "compacted" | "turn_context" | "event_msg"
            if has("payload") =>
        {
            agent(Agent::Codex)
        }
        "user" | "assistant" | "system" | "progress" | "attachment"
            if has("uuid") || has("parentUuid") =>
        {
            agent(Agent::ClaudeCode)
        }
        "summary" if has("leafUuid") => agent(Agent::ClaudeCode),
        "file-history-snapshot" | "queue-operation" => agent(Agent::ClaudeCode),
        "user" | "gemini" | "info" | "error" | "warning" if has("id") && has("content") => {
            agent(Agent::GeminiCli)
        }
        "model_change"
        | "thinking_level_change"
        | "compaction"
        | "branch_summary"
        | "custom"
        | "custom_message"
        | "label"
        | "session_info"
            if has("parentId") =>
        {
            agent(Agent::OpenClaw)
        }
        "function_call"
        | "function_call_output"
        | "custom_tool_call"
        | "custom_tool_call_output"
        | "reasoning"
        | "local_shell_call"
        | "web_search_call"
        | "item_reference" => Ok(Verdict::Messages(Some(Format::OpenaiResponses))),
        _ => Ok(Verdict::Unknown),
    }
}

/// The format a message's shape shows, if only one fits it.
fn message_format(message: &Value) -> Option<Format> {
    let obj = message.as_object()?;
    if obj.contains_key("parts") {
        return Some(Format::Gemini);
    }
    match str_of(obj, "role") {
        Some("model") => return Some(Format::Gemini),
        Some("tool" | "function") => return Some(Format::OpenaiChat),
        _ => {}
    }
    // Responses items carry their own `type`; a `message` item is told from
    // an Anthropic message object (which may say `"type":"message"` too) by
    // its content parts below.
    if str_of(obj, "type").is_some_and(|t| t != "message") {
        return Some(Format::OpenaiResponses);
    }
    if obj.contains_key("tool_calls") || obj.contains_key("tool_call_id") {
        return Some(Format::OpenaiChat);
    }
    let blocks = obj.get("content")?.as_array()?;
    blocks
        .iter()
        .find_map(|block| match block.get("type").and_then(Value::as_str)? {
            "tool_use"
            | "tool_result"
            | "thinking"
            | "redacted_thinking"
            | "document"
            | "server_tool_use"
            | "web_search_tool_result" => Some(Format::Anthropic),
            "image" if block.get("source").is_some() => Some(Format::Anthropic),
            "image_url" | "input_audio" | "refusal" | "file" => Some(Format::OpenaiChat),
            "input_text" | "output_text" | "input_image" | "input_file" => {
                Some(Format::OpenaiResponses)
            }
            _ => None,
        })
}

fn unknown(first: &Value) -> DetectError {
    match first.get("type") {
        Some(Value::String(kind)) => DetectError::UnknownType(kind.clone()),
        Some(other) => DetectError::UnknownType(other.to_string()),
        None => match first.as_object() {
            Some(obj) => {
                let keys: Vec<&str> = obj.keys().take(6).map(String::as_str).collect();
                DetectError::NoType(format!("its keys: {}", keys.join(", ")))
            }
            None => DetectError::NoType(format!("it is a JSON {}", json_kind(first))),
        },
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Content as a list of blocks: a string becomes one text block (none when
/// empty), so messages can be joined.
fn content_blocks(content: Option<Value>) -> Vec<Value> {
    match content {
        Some(Value::Array(blocks)) => blocks,
        Some(Value::String(text)) if !text.is_empty() => {
            vec![json!({"type": "text", "text": text})]
        }
        Some(Value::String(_)) | None | Some(Value::Null) => Vec::new(),
        Some(other) => vec![other],
    }
}

/// Append `next`'s content to `message` (an Anthropic message), as
/// providers read two messages of one role in a row. The content keeps its
/// place among the message's fields.
fn append_content(message: &mut Value, next: Value) {
    let Some(obj) = message.as_object_mut() else {
        return;
    };
    let mut more = match next {
        Value::Object(mut next) => content_blocks(next.shift_remove("content")),
        _ => Vec::new(),
    };
    let slot = obj.entry("content").or_insert(Value::Null);
    let mut blocks = content_blocks(Some(std::mem::take(slot)));
    blocks.append(&mut more);
    *slot = Value::Array(blocks);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_messages_decide_nothing_and_default_to_anthropic() {
        let input = br#"{"role":"user","content":"hi"}
{"role":"assistant","content":"hello"}
"#;
        assert_eq!(
            detect(input),
            Ok(Content::Messages {
                format: Format::Anthropic
            })
        );
    }

    #[test]
    fn records_before_messages_still_make_a_transcript_of_the_messages_format() {
        let input = br#"{"type":"replacement","record":{}}
{"type":"message","message":{"role":"model","parts":[{"text":"x"}]}}
"#;
        assert_eq!(
            detect(input),
            Ok(Content::Transcript {
                format: Format::Gemini,
                declared: false
            })
        );
    }

    #[test]
    fn a_session_line_with_an_unknown_format_is_named() {
        let input = br#"{"type":"session","format":"cohere"}"#;
        assert_eq!(
            detect(input),
            Err(DetectError::UnknownFormat("cohere".into()))
        );
    }

    #[test]
    fn json_without_a_type_says_what_it_has() {
        let err = detect(b"[1,2]\n").unwrap_err();
        assert_eq!(err, DetectError::NoType("it is a JSON array".into()));
        let err = detect(b"{\"a\":1,\"b\":2}\n").unwrap_err();
        assert_eq!(err, DetectError::NoType("its keys: a, b".into()));
    }
}
