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
use super::repair::Line;
use crate::error::{Error, Result};
use crate::format::{Dialect, Side};

/// How many bytes of lines a run gathers before it may end: enough that
/// judging a run costs little beside reading it, small beside the memory
/// goal.
const RUN_BYTES: usize = 1 << 20;

/// The transcript lines of a file: the file's own, or those of the
/// transcript its content converts to.
pub(crate) struct Source<'a> {
    path: &'a Path,
    logical: &'a Logical,
    /// What the file holds (`None` when it is empty).
    pub content: Option<Content>,
    /// An agent's session, converted whole (its conversion needs the
    /// whole file).
    converted: Option<Vec<u8>>,
}

impl<'a> Source<'a> {
    /// Tell what the file holds, as [`super::repair::transcript_of`] does.
    pub fn open(path: &'a Path, logical: &'a Logical) -> Result<Source<'a>> {
        let mut source = Source {
            path,
            logical,
            content: None,
            converted: None,
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
                // Only the whole file tells what it is: read it whole.
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut source.reader()?, &mut bytes)
                    .map_err(|err| Error::storage(path, &err))?;
                let (content, bytes) = import::as_transcript(path, bytes)?;
                source.converted = Some(bytes);
                content
            }
        };
        if let (Content::Agent(_), None) = (content, &source.converted) {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut source.reader()?, &mut bytes)
                .map_err(|err| Error::storage(path, &err))?;
            source.converted = Some(import::as_transcript(path, bytes)?.1);
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

    /// The line number (counting every line [`Source::each_line`] gives)
    /// of the newest message holding a compaction: the provider reads
    /// from there on. Only lines that can name one are parsed (the word,
    /// or a `\u` escape that could spell it).
    pub fn compaction_line(&self, dialect: &dyn Dialect) -> Result<Option<usize>> {
        let mut newest = None;
        let mut n = 0;
        self.each_line(|line, complete| {
            let at = n;
            n += 1;
            let may_name = memchr::memmem::find(line, b"compaction").is_some()
                || memchr::memmem::find(line, b"\\u").is_some();
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
pub(crate) struct Runs<'d> {
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
    pub fn new(dialect: &'d dyn Dialect) -> Self {
        Runs {
            dialect,
            run: Run::default(),
            bytes: 0,
            last_side: None,
            messages: 0,
        }
    }

    /// Add line number `at`; the run it ends, when it starts a new one.
    pub fn push(&mut self, line: Line, at: usize) -> Option<Run> {
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
    pub fn finish(self) -> Run {
        self.run
    }
}
