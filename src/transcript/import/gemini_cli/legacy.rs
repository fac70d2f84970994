//! The legacy Gemini CLI session, one JSON document `{sessionId, …,
//! messages: [...]}`, converted as a stream: parsed from a reader with
//! serde's `DeserializeSeed`, each element of `messages` a value of its
//! own, turned into contents and let go before the next is read.
//!
//! Two passes, so that what the whole-file conversion refuses is refused
//! before anything is written, and with the same words: the first parses
//! the whole document (every value as a `serde_json::Value`, as the
//! whole-file parse does, so the same documents pass) and finds its last
//! `messages` key (a repeated key's last value wins, as in a parsed
//! object); the second converts that key's messages. A document the first
//! pass does not take (not JSON, trailing bytes, nested deeper than
//! serde_json's default 128 levels, which the whole-file parse takes
//! through its deep-nesting path) is left to the whole-file conversion,
//! whose answer or error is then the one given.

use std::fmt;
use std::io::{self, BufReader, Read};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::Contents;
use crate::transcript::import::Report;
use crate::transcript::import::reread::{SessionFile, Sink};

/// How much of the file's head [`is_legacy`] reads: the legacy record's
/// first lines (`{`, then its short metadata keys).
const HEAD: u64 = 64 << 10;

/// Whether the file starts like the legacy record, as
/// [`super::looks_like_legacy_record`] reads the whole of it.
pub fn is_legacy(file: SessionFile) -> io::Result<bool> {
    let mut head = Vec::new();
    file.reader_from(0).take(HEAD).read_to_end(&mut head)?;
    Ok(super::looks_like_legacy_record(&head))
}

/// What the first pass found.
pub struct Plan {
    /// How many `messages` keys the record has: the last one counts.
    keys: usize,
    report: Report,
}

/// The first pass; `None` when the document is for the whole-file
/// conversion to judge.
pub fn plan(file: SessionFile) -> io::Result<Option<Plan>> {
    let mut walk = Walk {
        keys: 0,
        last: None,
        each: &mut |_, _| Ok(()),
        failed: None,
    };
    match walk.run(file) {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        Err(err) => return Err(err),
    }
    // Counted as the whole-file conversion counts: the record, then each
    // message; the record itself carries none.
    let report = Report {
        lines: walk.last.unwrap_or(0) + 1,
        skipped: 1,
        ..Report::default()
    };
    Ok(Some(Plan {
        keys: walk.keys,
        report,
    }))
}

impl Plan {
    pub fn report(&self) -> Report {
        self.report.clone()
    }

    /// The second pass: the messages of the last `messages` key, turned
    /// into contents as they are read.
    pub fn emit(&self, file: SessionFile, out: &mut Sink) -> io::Result<()> {
        let mut contents = Contents::default();
        let last = self.keys.checked_sub(1);
        let mut each = |n: usize, message: Value| {
            if Some(n) == last {
                contents.record(message, out)
            } else {
                Ok(())
            }
        };
        let mut walk = Walk {
            keys: 0,
            last: None,
            each: &mut each,
            failed: None,
        };
        if walk.run(file)? && walk.keys == self.keys {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the file changed while it was read",
            ))
        }
    }
}

/// One pass over the record: `each` gets every element of every
/// `messages` array with the number of its key.
struct Walk<'w> {
    /// `messages` keys met so far.
    keys: usize,
    /// How many elements the last `messages` met has, when it is an array.
    last: Option<usize>,
    each: &'w mut dyn FnMut(usize, Value) -> io::Result<()>,
    /// `each`'s error, which stopped the parse.
    failed: Option<io::Error>,
}

impl Walk<'_> {
    /// Parse the file: `false` when it is no document this pass takes.
    fn run(&mut self, file: SessionFile) -> io::Result<bool> {
        let reader = BufReader::with_capacity(1 << 16, file.reader_from(0));
        let mut de = serde_json::Deserializer::from_reader(reader);
        let parsed = (&mut *self).deserialize(&mut de).and_then(|()| de.end());
        if let Some(err) = self.failed.take() {
            return Err(err);
        }
        match parsed {
            Ok(()) => Ok(true),
            Err(err) if err.is_io() => Err(err.into()),
            Err(_) => Ok(false),
        }
    }
}

impl<'de> DeserializeSeed<'de> for &mut Walk<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Gemini CLI session record")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "messages" {
                let n = self.keys;
                self.keys += 1;
                self.last = None;
                map.next_value_seed(Messages { walk: self, n })?;
            } else {
                map.next_value::<Value>()?;
            }
        }
        Ok(())
    }
}

/// The value of the `n`th `messages` key.
struct Messages<'a, 'w> {
    walk: &'a mut Walk<'w>,
    n: usize,
}

impl<'de> DeserializeSeed<'de> for Messages<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Messages<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut count = 0;
        while let Some(message) = seq.next_element::<Value>()? {
            count += 1;
            if let Err(err) = (self.walk.each)(self.n, message) {
                self.walk.failed = Some(err);
                return Err(de::Error::custom("stopped"));
            }
        }
        self.walk.last = Some(count);
        Ok(())
    }

    // Any other value is no list of messages: parsed, and none taken.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<String, Value>()?.is_some() {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}
