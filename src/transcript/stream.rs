//! Reading a transcript file as a stream for `check` and `repair`: its
//! lines one at a time (a list of bare messages wrapped as it is read), cut
//! into runs of whole turns that can be judged alone, so that what a
//! command holds is a run of turns, not the file parsed (about 17 times its
//! size).
//!
//! A run ends before an assistant message that follows a user message:
//! there the pairing carries nothing over (a user turn has no calls for the
//! next turn to answer), so a run judged alone gets the verdicts it gets in
//! the whole conversation. What does reach across runs is carried by the
//! caller: the call ids met so far (the provider's id rules) and where the
//! newest compaction is, which a first, cheap pass finds.

use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use super::fork::Logical;
use super::import::{self, Content};
use super::reader::{Entry, parse_line};
use crate::error::{Error, Result};
use crate::format::{Dialect, Side};

/// One line of a transcript being checked or repaired.
#[derive(Clone)]
pub(crate) enum Line {
    /// Copied unchanged (records, unknown kinds).
    Raw(Vec<u8>),
    /// A message; `raw` holds its original bytes while it is unchanged.
    Message { value: Value, raw: Option<Vec<u8>> },
}

/// [`super::repair::parse`] one line at a time, for a file read as a stream: what it
/// learns of the whole (torn lines, whether any line is toolwire's, the
/// first line's type) gathered as it goes.
#[derive(Default)]
pub(crate) struct LineParser {
    pub torn_lines: usize,
    pub recognized: bool,
    pub first_type: Option<String>,
    seen_first: bool,
    kept: usize,
}

impl LineParser {
    /// The next line (without its newline; `complete` when one followed
    /// it): the line to keep, or `None` for a torn or unparsable one.
    pub fn push(&mut self, line: &[u8], complete: bool) -> Option<Line> {
        let entry = parse_line(line);
        if !self.seen_first {
            self.seen_first = true;
            self.first_type = crate::json::from_slice::<Value>(line)
                .ok()
                .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned));
        }
        let kept = match (complete, entry) {
            (true, Some(Entry::Message(m))) => {
                self.recognized = true;
                Line::Message {
                    value: m,
                    raw: Some(line.to_vec()),
                }
            }
            (true, Some(Entry::Ignored)) => {
                // The line naming a transcript's format is toolwire's own.
                self.recognized |= self.kept == 0 && self.first_type.as_deref() == Some("session");
                Line::Raw(line.to_vec())
            }
            (true, Some(_)) => {
                self.recognized = true;
                Line::Raw(line.to_vec())
            }
            (_, entry) => {
                self.recognized |= matches!(entry, Some(Entry::Message(_)));
                self.torn_lines += 1;
                return None;
            }
        };
        self.kept += 1;
        Some(kept)
    }
}

/// How many bytes of lines a run gathers before it may end: enough that
/// judging a run costs little beside reading it, small beside the memory
/// goal.
const RUN_BYTES: usize = if cfg!(test) { 1 } else { 256 << 10 };

/// The transcript lines of a file: the file's own, or those of the
/// transcript its content converts to.
pub(crate) struct Source<'a> {
    path: &'a Path,
    logical: &'a Logical,
    /// What the file holds (`None` when it is empty).
    pub content: Option<Content>,
    /// A file only the whole of which tells what it is (a legacy Gemini
    /// CLI record), converted whole.
    converted: Option<Vec<u8>>,
    /// An agent's session: its first pass, for the second to convert it as
    /// it is read ([`import::streamed`]).
    agent: Option<import::streamed::Plan>,
}

impl<'a> Source<'a> {
    /// Tell what the file holds: a toolwire transcript, read as it is; a
    /// list of bare messages, wrapped as it is read; another agent's
    /// session, converted as it is read (its first pass made here). A file
    /// in none of the known formats is an error naming its first line's
    /// type.
    pub fn open(path: &'a Path, logical: &'a Logical) -> Result<Source<'a>> {
        let mut source = Source {
            path,
            logical,
            content: None,
            converted: None,
            agent: None,
        };
        let mut head = source.reader()?;
        if head
            .fill_buf()
            .map_err(|err| Error::storage(path, &err))?
            .is_empty()
        {
            return Ok(source);
        }
        let detected = import::detect_stream(head).map_err(|err| Error::storage(path, &err))?;
        let content = match detected {
            Some(found) => found.map_err(|source| import::ImportError::Detect {
                path: path.display().to_string(),
                source,
            })?,
            None => {
                // A legacy Gemini CLI record, streamed a message at a time.
                let file = import::reread::SessionFile { bytes: logical };
                let legacy = import::streamed::legacy_plan(file)
                    .map_err(|err| Error::storage(path, &err))?;
                if let Some(plan) = legacy {
                    source.agent = Some(plan);
                    source.content = Some(Content::Agent(import::Agent::GeminiCli));
                    return Ok(source);
                }
                // Only the whole file tells what it is: read it whole.
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut source.reader()?, &mut bytes)
                    .map_err(|err| Error::storage(path, &err))?;
                let (content, bytes) = import::as_transcript(path, bytes)?;
                source.converted = Some(bytes);
                content
            }
        };
        if let (Content::Agent(agent), None) = (content, &source.converted) {
            let file = import::reread::SessionFile { bytes: logical };
            source.agent = Some(
                import::streamed::plan(agent, file).map_err(|err| Error::storage(path, &err))?,
            );
        }
        source.content = Some(content);
        Ok(source)
    }

    fn reader(&self) -> Result<BufReader<super::fork::Reader>> {
        self.logical
            .reader()
            .map(|reader| BufReader::with_capacity(1 << 16, reader))
            .map_err(|err| Error::storage(self.path, &err))
    }

    /// Call `each` with every transcript line (without its newline) and
    /// whether a newline ended it.
    pub fn each_line(&self, mut each: impl FnMut(&[u8], bool) -> Result<()>) -> Result<()> {
        if let Some(bytes) = &self.converted {
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                match memchr::memchr(b'\n', rest) {
                    Some(i) => {
                        each(&rest[..i], true)?;
                        rest = &rest[i + 1..];
                    }
                    None => {
                        each(rest, false)?;
                        rest = &[];
                    }
                }
            }
            return Ok(());
        }
        let Some(content) = self.content else {
            return Ok(());
        };
        let storage = |err: io::Error| Error::storage(self.path, &err);
        if let Some(plan) = &self.agent {
            return self.each_converted(plan, content.format(), each);
        }
        let mut reader = self.reader()?;
        let mut line = Vec::new();
        let messages = match content {
            Content::Messages { format } => {
                if let Some(session) = import::session_line(format).map_err(storage)? {
                    each(&session[..session.len() - 1], true)?;
                }
                true
            }
            _ => false,
        };
        let mut report = import::Report::default();
        let mut wrapped = super::Lines::default();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(storage)? == 0 {
                return Ok(());
            }
            if !messages {
                match line.strip_suffix(b"\n") {
                    Some(body) => each(body, true)?,
                    None => each(&line, false)?,
                }
                continue;
            }
            // A bare message, wrapped in its transcript line as
            // `import::as_transcript` wraps it.
            let Some(message) =
                import::raw_line(&line).and_then(|body| import::message_of_line(body, &mut report))
            else {
                continue;
            };
            wrapped.bytes.clear();
            wrapped.push_message(&message);
            let bytes = &wrapped.bytes;
            each(&bytes[..bytes.len() - 1], true)?;
        }
    }

    /// [`Source::each_line`] of an agent's session: the lines of the
    /// transcript it converts to, as [`import::Conversion::write_transcript`]
    /// writes them, a message at a time.
    fn each_converted(
        &self,
        plan: &import::streamed::Plan,
        format: crate::format::Format,
        mut each: impl FnMut(&[u8], bool) -> Result<()>,
    ) -> Result<()> {
        let storage = |err: io::Error| Error::storage(self.path, &err);
        if let Some(session) = import::session_line(format).map_err(storage)? {
            each(&session[..session.len() - 1], true)?;
        }
        let mut wrapped = super::Lines::default();
        // `each`'s own error, kept while the conversion stops.
        let mut failed = None;
        let file = import::reread::SessionFile {
            bytes: self.logical,
        };
        let read = plan.emit(file, &mut |message| {
            wrapped.bytes.clear();
            wrapped.push_message(&message);
            let bytes = &wrapped.bytes;
            each(&bytes[..bytes.len() - 1], true).map_err(|err| {
                failed = Some(err);
                io::Error::other("stopped")
            })
        });
        match (failed, read) {
            (Some(err), _) => Err(err),
            (None, read) => read.map(drop).map_err(storage),
        }
    }

    /// Call `each` with every run of the transcript's lines in order (and
    /// whether it is the last); returns what the lines told of the whole
    /// (torn lines, whether any is toolwire's) and how many were read.
    pub fn each_run(
        &self,
        dialect: &dyn Dialect,
        mut each: impl FnMut(Run, bool) -> Result<()>,
    ) -> Result<(LineParser, usize)> {
        let mut parser = LineParser::default();
        let mut runs = Runs::new(dialect);
        let mut lines = 0;
        self.each_line(|line, complete| {
            let at = lines;
            lines += 1;
            match parser
                .push(line, complete)
                .and_then(|line| runs.push(line, at))
            {
                Some(run) => each(run, false),
                None => Ok(()),
            }
        })?;
        each(runs.finish(), true)?;
        Ok((parser, lines))
    }

    /// The line number (counting every line [`Source::each_line`] gives)
    /// of the newest message holding a compaction: the provider reads
    /// from there on. Only lines that can name one are parsed (the word,
    /// or an escape that could spell one of its letters).
    pub fn compaction_line(&self, dialect: &dyn Dialect) -> Result<Option<usize>> {
        let mut newest = None;
        let mut n = 0;
        self.each_line(|line, complete| {
            let at = n;
            n += 1;
            // "compaction" spelled out, or with a letter of it escaped
            // (`\u0061`–`\u0074`); not the escapes of control characters
            // that tool output is full of.
            let may_name = memchr::memmem::find(line, b"compaction").is_some()
                || memchr::memmem::find(line, b"\\u006").is_some()
                || memchr::memmem::find(line, b"\\u007").is_some();
            if complete
                && may_name
                && let Some(Entry::Message(message)) = parse_line(line)
                && dialect.compaction_index(&message).is_some()
            {
                newest = Some(at);
            }
            Ok(())
        })?;
        Ok(newest)
    }
}

/// Lines gathered into runs of whole turns.
struct Runs<'d> {
    dialect: &'d dyn Dialect,
    run: Run,
    bytes: usize,
    last_side: Option<Side>,
    messages: usize,
}

/// Lines that can be judged alone.
#[derive(Default)]
pub(crate) struct Run {
    pub lines: Vec<Line>,
    /// The conversation's number of the run's first message.
    pub first_message: usize,
    /// The line number of the run's last line.
    pub last_line: usize,
}

impl Run {
    /// The run's messages, in order.
    pub fn messages(&self) -> Vec<&Value> {
        self.lines
            .iter()
            .filter_map(|line| match line {
                Line::Message { value, .. } => Some(value),
                Line::Raw(_) => None,
            })
            .collect()
    }
}

impl<'d> Runs<'d> {
    fn new(dialect: &'d dyn Dialect) -> Self {
        Runs {
            dialect,
            run: Run::default(),
            bytes: 0,
            last_side: None,
            messages: 0,
        }
    }

    /// Add line number `at`; the run it ends, when it starts a new one.
    fn push(&mut self, line: Line, at: usize) -> Option<Run> {
        let mut ended = None;
        if let Line::Message { value, raw } = &line {
            let side = self.dialect.side(value);
            if side == Some(Side::Assistant)
                && self.last_side == Some(Side::User)
                && self.bytes >= RUN_BYTES
            {
                ended = Some(std::mem::replace(
                    &mut self.run,
                    Run {
                        first_message: self.messages,
                        ..Run::default()
                    },
                ));
                self.bytes = 0;
            }
            if side.is_some() {
                self.last_side = side;
            }
            self.bytes += raw.as_ref().map_or(0, Vec::len);
            self.messages += 1;
        } else if let Line::Raw(raw) = &line {
            self.bytes += raw.len();
        }
        self.run.lines.push(line);
        self.run.last_line = at;
        ended
    }

    /// The last run.
    fn finish(self) -> Run {
        self.run
    }
}
