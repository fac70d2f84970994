//! An agent's session converted as a stream ([`super::reread`]): the first
//! pass of each agent's module, and `import --from <agent>` writing the
//! transcript as the second pass reads.
//!
//! A Gemini CLI session in the legacy single-JSON form is one document,
//! not lines: it is streamed a message at a time by
//! [`super::gemini_cli::legacy`], or converted whole when that module
//! leaves it to the whole-file conversion (a document it does not take).

use std::fs::File;
use std::io::{self, BufReader, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::reread::{SessionFile, Sink};
use super::{Agent, Conversion, Format, ImportError, Report};
use crate::transcript::Lines;

/// What the first pass over an agent's session kept for the second.
pub enum Plan {
    ClaudeCode(super::claude_code::Plan),
    Codex(super::codex::Plan),
    GeminiCli(super::gemini_cli::Plan),
    GeminiLegacy(super::gemini_cli::legacy::Plan),
    OpenClaw(super::openclaw::Plan),
}

/// The first pass over `agent`'s session file (a JSON Lines file: for
/// Gemini CLI, its log, not the legacy single JSON record: see
/// [`legacy_plan`]).
pub fn plan(agent: Agent, file: SessionFile) -> io::Result<Plan> {
    Ok(match agent {
        Agent::ClaudeCode => Plan::ClaudeCode(super::claude_code::plan(file)?),
        Agent::Codex => Plan::Codex(super::codex::plan(file)?),
        Agent::GeminiCli => Plan::GeminiCli(super::gemini_cli::plan(file)?),
        Agent::OpenClaw => Plan::OpenClaw(super::openclaw::plan(file)?),
    })
}

/// The first pass over a file whose first line is no JSON: a legacy Gemini
/// CLI record this module streams, or `None` for the whole-file
/// conversion to judge.
pub fn legacy_plan(file: SessionFile) -> io::Result<Option<Plan>> {
    if !super::gemini_cli::legacy::is_legacy(file)? {
        return Ok(None);
    }
    Ok(super::gemini_cli::legacy::plan(file)?.map(Plan::GeminiLegacy))
}

impl Plan {
    /// The second pass: each converted message to `emit`, in order; what
    /// was read and left out. Can be run again.
    pub fn emit(
        &self,
        file: SessionFile,
        emit: &mut dyn FnMut(Value) -> io::Result<()>,
    ) -> io::Result<Report> {
        let report = match self {
            Plan::ClaudeCode(plan) => plan.report(),
            Plan::Codex(plan) => plan.report(),
            Plan::GeminiCli(plan) => plan.report(),
            Plan::GeminiLegacy(plan) => plan.report(),
            Plan::OpenClaw(plan) => plan.report(),
        };
        let mut sink = Sink::new(report, emit);
        match self {
            Plan::ClaudeCode(plan) => plan.emit(file, &mut sink)?,
            Plan::Codex(plan) => plan.emit(file, &mut sink)?,
            Plan::GeminiCli(plan) => plan.emit(file, &mut sink)?,
            Plan::GeminiLegacy(plan) => plan.emit(file, &mut sink)?,
            Plan::OpenClaw(plan) => plan.emit(file, &mut sink)?,
        }
        sink.finish()
    }
}

/// `agent`'s session file, its first pass done, ready to write.
pub struct AgentFile {
    path: PathBuf,
    file: File,
    plan: Plan,
    pub format: Format,
    /// Messages written so far.
    pub messages: usize,
    /// What was read and left out (whole once written).
    pub report: Report,
}

/// What [`open`] found: a file to convert as a stream, or one only the
/// whole file tells (a legacy Gemini CLI record), converted whole.
pub enum Opened {
    Stream(AgentFile),
    Whole(Conversion),
}

/// Open the file at `path`, which must be a session file of `agent` (as
/// [`super::convert_file`] requires), and make its first pass. Another
/// agent's file, or a toolwire transcript, is an error saying what it is.
pub fn open(agent: Agent, path: &Path) -> Result<Opened, ImportError> {
    let io = |source| ImportError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let plan = match super::detect_stream(BufReader::new(&file)).map_err(io)? {
        Some(found) => {
            super::agent_of(agent, path, found)?;
            plan(agent, SessionFile { bytes: &file }).map_err(io)?
        }
        // Only the whole file tells what it is: a legacy Gemini CLI record
        // streamed, anything else converted whole.
        None => match agent {
            Agent::GeminiCli => match legacy_plan(SessionFile { bytes: &file }).map_err(io)? {
                Some(plan) => plan,
                None => return super::convert_file(agent, path).map(Opened::Whole),
            },
            _ => return super::convert_file(agent, path).map(Opened::Whole),
        },
    };
    Ok(Opened::Stream(AgentFile {
        path: path.to_owned(),
        file,
        plan,
        format: agent.format(),
        messages: 0,
        report: Report::default(),
    }))
}

impl AgentFile {
    /// Write the transcript to `out` as [`Conversion::write_transcript`]
    /// writes it, a message at a time. A read error names the file.
    pub fn write_transcript(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if let Some(session) = super::session_line(self.format)? {
            out.write_all(&session)?;
        }
        let mut lines = Lines::default();
        let mut messages = 0;
        // Read errors are told from the output's by where they arise.
        let mut write_error = None;
        let read = self
            .plan
            .emit(SessionFile { bytes: &self.file }, &mut |message| {
                lines.bytes.clear();
                lines.push_message(&message);
                messages += 1;
                out.write_all(&lines.bytes).map_err(|err| {
                    let stop = io::Error::new(err.kind(), "writing stopped");
                    write_error = Some(err);
                    stop
                })
            });
        self.messages = messages;
        match (read, write_error) {
            (_, Some(err)) => Err(err),
            (Ok(report), None) => {
                self.report = report;
                Ok(())
            }
            (Err(err), None) => Err(io::Error::new(
                err.kind(),
                format!("{}: {err}", self.path.display()),
            )),
        }
    }
}
