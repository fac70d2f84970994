//! An agent's session file converted as a stream (issue 52's memory goal):
//! read twice rather than held parsed (about 17 times its size).
//!
//! The first pass reads every line once and keeps only the small structure
//! the conversion needs from the whole file (each line's offset, the
//! 128-bit keys of the ids that link lines, a few flags); the agent's
//! module works out from it which lines make which messages. The second
//! pass reads those lines again by offset, one at a time, and hands each
//! message on as soon as it is whole, so what is held is that structure
//! and one line (or one message), never the file.
//!
//! Both passes read the same bytes by position ([`ReadAt`]): a file, a
//! toolwire fork read through its parent's bytes, or bytes in memory (the
//! whole-file [`super::convert`], which replays and tests use). A line the
//! second pass finds changed (an agent rewrote the file between the
//! passes) is an error naming the file; lines appended after the first
//! pass are not read, as a file read once would not have had them.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;

use serde_json::{Map, Value};

use super::Report;
use crate::transcript::fork::Logical;

/// Bytes read by position, without a shared offset.
pub trait ReadAt {
    /// Read into `buf` from offset `at`: how many bytes, 0 at the end.
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, at)
    }
}

impl ReadAt for Logical {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        Logical::read_at(self, buf, at)
    }
}

impl ReadAt for &[u8] {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        let rest = usize::try_from(at)
            .ok()
            .and_then(|at| self.get(at..))
            .unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}

/// A [`ReadAt`] read in order from an offset.
pub struct ReadingFrom<'a> {
    bytes: &'a dyn ReadAt,
    at: u64,
}

impl Read for ReadingFrom<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.bytes.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// An agent's session file. Its errors do not name it: the caller does.
#[derive(Clone, Copy)]
pub struct SessionFile<'a> {
    pub bytes: &'a dyn ReadAt,
}

impl<'a> SessionFile<'a> {
    /// A reader of the file from offset `at` on.
    pub fn reader_from(&self, at: u64) -> BufReader<ReadingFrom<'a>> {
        BufReader::with_capacity(
            1 << 16,
            ReadingFrom {
                bytes: self.bytes,
                at,
            },
        )
    }

    /// The first pass: `each` with the offset and the object of every
    /// non-blank line that is a JSON object, counted in `report` as the
    /// whole-file conversion counts its lines (`lines`, `unreadable`).
    pub fn each_object(
        &self,
        report: &mut Report,
        mut each: impl FnMut(u64, Map<String, Value>, &mut Report),
    ) -> io::Result<()> {
        let mut reader = self.reader_from(0);
        let mut line = Vec::new();
        let mut at = 0;
        loop {
            line.clear();
            let read = reader.read_until(b'\n', &mut line)?;
            if read == 0 {
                return Ok(());
            }
            if let Some(object) = super::raw_line(&line).and_then(|l| super::json_line(l, report)) {
                each(at, object, report);
            }
            at += read as u64;
        }
    }

    /// A reader of lines again by offset, for the second pass.
    pub fn lines(&self) -> Lines<'a> {
        Lines {
            file: *self,
            reader: None,
            line: Vec::new(),
            parsed: None,
        }
    }
}

/// The second pass: lines read again by the offsets the first pass kept.
/// Reads on from where the last line ended when the next one follows it,
/// and keeps the last line parsed (several messages can come out of one
/// line: a compaction's history).
pub struct Lines<'a> {
    file: SessionFile<'a>,
    /// The reader and the offset it is at.
    reader: Option<(BufReader<ReadingFrom<'a>>, u64)>,
    line: Vec<u8>,
    parsed: Option<(u64, Map<String, Value>)>,
}

impl Lines<'_> {
    /// The object of the line at offset `at`, as the first pass read it.
    pub fn object_at(&mut self, at: u64) -> io::Result<&Map<String, Value>> {
        if self.parsed.as_ref().is_none_or(|(held, _)| *held != at) {
            self.parsed = None;
            let object = self.read_object(at)?;
            self.parsed = Some((at, object));
        }
        match &self.parsed {
            Some((_, object)) => Ok(object),
            None => Err(self.changed(at)),
        }
    }

    fn read_object(&mut self, at: u64) -> io::Result<Map<String, Value>> {
        let (reader, pos) = match &mut self.reader {
            Some((reader, pos)) if *pos == at => (reader, pos),
            slot => {
                let reader = self.file.reader_from(at);
                let (reader, pos) = slot.insert((reader, at));
                (reader, pos)
            }
        };
        self.line.clear();
        let read = reader.read_until(b'\n', &mut self.line)?;
        *pos += read as u64;
        let object = super::raw_line(&self.line)
            .and_then(|line| crate::json::from_slice::<Value>(line).ok());
        match object {
            Some(Value::Object(object)) => Ok(object),
            _ => Err(self.changed(at)),
        }
    }

    /// The error for a line that is not what the first pass read.
    pub fn changed(&self, at: u64) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the file changed while it was read (its line at byte {at} is not what it was)"
            ),
        )
    }
}

/// Where converted messages go, one at a time: the last one is held back
/// until the next, since a converter may still add to it (a run of tool
/// results is one message), and handed on then.
pub struct Sink<'e> {
    held: Option<Value>,
    emit: &'e mut dyn FnMut(Value) -> io::Result<()>,
    /// Messages handed on (or held).
    pub messages: usize,
    pub report: Report,
}

impl<'e> Sink<'e> {
    pub fn new(report: Report, emit: &'e mut dyn FnMut(Value) -> io::Result<()>) -> Self {
        Sink {
            held: None,
            emit,
            messages: 0,
            report,
        }
    }

    /// Add the next message; the one before it is whole now.
    pub fn push(&mut self, message: Value) -> io::Result<()> {
        self.messages += 1;
        match self.held.replace(message) {
            Some(whole) => (self.emit)(whole),
            None => Ok(()),
        }
    }

    /// The last message added, still open to change.
    pub fn last_mut(&mut self) -> Option<&mut Value> {
        self.held.as_mut()
    }

    /// Hand on the last message; what was read and left out.
    pub fn finish(mut self) -> io::Result<Report> {
        if let Some(last) = self.held.take() {
            (self.emit)(last)?;
        }
        Ok(self.report)
    }
}

/// The key of an id that links lines (a uuid, a parent's id): 128 bits of
/// it, as the id rules key call ids (two ids taken for one is a chance of
/// about 2^-90 in a file of millions of lines).
pub type Key = crate::format::ids::IdKey;

/// The key of `obj[key]` when it is a string.
pub fn key_of(obj: &Map<String, Value>, key: &str) -> Option<Key> {
    super::str_of(obj, key).map(crate::format::ids::id_key)
}
