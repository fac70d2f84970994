//! `import --from messages` of a file of bare provider messages, converted
//! one line at a time: a message is read, wrapped in its transcript line
//! and written before the next is read, so converting a file takes memory
//! for its largest line, not for the file (the file converted whole took
//! about 17 times its size).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{Conversion, Format, ImportError, Report};
use crate::transcript::Lines;

/// A file of bare messages, its format known, ready to convert.
pub struct MessagesFile {
    path: PathBuf,
    file: File,
    pub format: Format,
    /// Messages written so far.
    pub messages: usize,
    /// What was read and left out so far.
    pub report: Report,
}

/// What [`open`] found: a file to convert as a stream, or, when only the
/// whole file tells what it is (its first lines start like a legacy Gemini
/// CLI record), the file converted whole.
pub enum Opened {
    Stream(MessagesFile),
    Whole(Conversion),
}

/// Open the file at `path`, which must be a list of bare provider messages
/// (as [`super::convert_messages_file`] requires): the format read from the
/// messages' shape unless `format` is given. A transcript or an agent's
/// session is an error saying what it is.
pub fn open(path: &Path, format: Option<Format>) -> Result<Opened, ImportError> {
    let io = |source| ImportError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let Some(found) = super::detect_stream(BufReader::new(&file)).map_err(io)? else {
        return super::convert_messages_file(path, format).map(Opened::Whole);
    };
    let found = super::messages_format(path, found)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    Ok(Opened::Stream(MessagesFile {
        path: path.to_owned(),
        file,
        format: format.unwrap_or(found),
        messages: 0,
        report: Report::default(),
    }))
}

impl MessagesFile {
    /// Write the transcript to `out` as [`Conversion::write_transcript`]
    /// writes it, reading one line at a time. A read error names the file.
    pub fn write_transcript(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if let Some(session) = super::session_line(self.format)? {
            out.write_all(&session)?;
        }
        let mut reader = BufReader::with_capacity(1 << 16, &self.file);
        let mut line = Vec::new();
        let mut lines = Lines::default();
        loop {
            line.clear();
            let read = reader.read_until(b'\n', &mut line).map_err(|err| {
                io::Error::new(err.kind(), format!("{}: {err}", self.path.display()))
            })?;
            if read == 0 {
                return Ok(());
            }
            let Some(body) = super::raw_line(&line) else {
                continue;
            };
            let Some(message) = super::message_of_line(body, &mut self.report) else {
                continue;
            };
            lines.bytes.clear();
            lines.push_message(&message);
            out.write_all(&lines.bytes)?;
            self.messages += 1;
        }
    }
}
