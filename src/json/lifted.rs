//! A large request parsed with its long strings lifted out of serde_json's
//! way.
//!
//! A `budget/apply` request is mostly tool output: tens of MB in a few
//! hundred strings, each with an escaped newline every line, and serde_json
//! reads those a byte at a time. Here every string of the body is scanned
//! 64 bytes at a time (`super::strings`) instead, and a copy of the body
//! is made in which each long string stands replaced by a short marker,
//! `"\u0000<n>"`. serde_json parses that copy into the request's value, and
//! each marker is then swapped for its string, unescaped here from the
//! body.
//!
//! The value is the one serde_json would build from the body:
//!
//! - Outside strings a quote always opens one, so the scan finds the
//!   strings serde_json would; a marker is a string in the same place, so
//!   the structure is unchanged, duplicate keys included.
//! - Only a string the scan found valid for every use is lifted (no raw
//!   control character, only escapes JSON has, no `\u` escape of a
//!   surrogate, which serde_json judges by what follows), and keys never
//!   are.
//! - No string of the body may hold a NUL (`\u0000`), the one character a
//!   marker starts with: a body that has one is parsed the ordinary way.
//! - Whatever goes wrong (an invalid string, a copy serde_json refuses,
//!   broken UTF-8 in a lifted string, checked as it is lifted because a
//!   later duplicate key may drop it unseen) sends the body to the
//!   ordinary parse, whose answer, error or value, is the one given.
//!
//! `tests::lifted_strings_parse_as_serde_json_does` and the `params` fuzz
//! target hold the two to the same answers.

use std::io::Write;

use serde_json::Value;

use super::ParseError;
use super::strings::{Text, scan_string_into, unescape};

/// Bodies shorter than this take the ordinary parse: lifting pays for its
/// second copy only where there is much to lift.
pub const LARGE: usize = 64 * 1024;

/// Strings at least this long are lifted.
const LONG: usize = 256;

/// Texts at least this long are taken out of the scan's buffer instead of
/// copied out of it.
const HUGE: usize = 1 << 20;

/// Texts in a buffer of at most this capacity are taken out of it too,
/// and the scan goes on in a new buffer as large: half the size
/// from which glibc maps a block on its own in `serve`
/// (`process::tune_allocator`; the proxy maps only from 8 MiB), so the
/// buffers come from the heap's reused memory.
const TAKEN: usize = 64 << 10;

/// How far into a body its long strings must already make up a quarter of
/// it for lifting to go on.
const PROBE: usize = 256 * 1024;

/// The first character of every marker; no string of a lifted body has it.
const MARK: char = '\0';

/// Parse `body` as [`super::from_slice`] would, long strings kept away from
/// serde_json (see the module's notes). Used for bodies of [`LARGE`] or
/// more; any body gets the same answer.
pub fn from_slice(body: &[u8]) -> Result<Value, ParseError> {
    lifted(body).map_or_else(|| super::from_slice(body), Ok)
}

/// The value, or `None` when the body must take the ordinary parse.
fn lifted(body: &[u8]) -> Option<Value> {
    let (copy, mut strings) = lift(body)?;
    if strings.is_empty() {
        return None;
    }
    let mut value: Value = super::from_slice(&copy).ok()?;
    drop(copy);
    let mut put = Put {
        body,
        strings: &mut strings,
    };
    put.value(&mut value).then_some(value)
}

/// A string lifted out of the body.
struct Lifted {
    /// Where it lies in the body, without its quotes.
    raw: std::ops::Range<usize>,
    /// Its text, when its scan wrote it whole.
    text: Option<Vec<u8>>,
    /// Put back already (a marker met twice is no marker of ours).
    put: bool,
}

/// `body` with its long strings replaced by markers, and those strings;
/// `None` when the body has an invalid string or a NUL in one, or when
/// long strings are under a quarter of its first [`PROBE`] bytes (of its
/// first quarter, if shorter).
///
/// Every string's text is written by its scan into one buffer, and a long
/// string's is copied out of it: the long strings are unescaped in the
/// same pass that finds them.
fn lift(body: &[u8]) -> Option<(Vec<u8>, Vec<Lifted>)> {
    let mut copy = Vec::new();
    let mut strings = Vec::new();
    let mut text = Text {
        bytes: Vec::new(),
        whole: true,
    };
    let mut copied = 0;
    let mut at = 0;
    // Bytes of the body in long strings, and where they are counted.
    let mut long_bytes = 0;
    let probe = PROBE.min(body.len() / 4);
    while let Some(i) = memchr::memchr(b'"', &body[at..]) {
        let open = at + i;
        text.bytes.clear();
        text.whole = true;
        let string = scan_string_into(body, open + 1, &mut text)?;
        if string.nul {
            return None;
        }
        let end = string.end;
        let (from, to) = (at, end + 1);
        at = to;
        let long = end - (open + 1) >= LONG && !string.surrogate && !is_key(&body[at..]);
        if long {
            long_bytes += to - open;
        }
        if from < probe && to >= probe && long_bytes * 4 < to {
            // Mostly short strings so far (a pair of many small calls):
            // the scan would be spent for little, on top of serde_json's.
            return None;
        }
        if !long {
            continue;
        }
        // serde_json refuses broken UTF-8 in any string, also one that a
        // later duplicate key drops (so its marker is never met): checked
        // here, for every string lifted.
        if !string.ascii && std::str::from_utf8(&body[open + 1..end]).is_err() {
            return None;
        }
        if copy.is_empty() {
            copy.reserve(body.len() / 8);
        }
        copy.extend_from_slice(&body[copied..=open]);
        copy.extend_from_slice(b"\\u0000");
        // Written in place (a Vec never fails a write).
        let _ = write!(copy, "{}", strings.len());
        let bytes = if text.bytes.len() >= HUGE {
            // Taken rather than copied, so a string of hundreds of MB is
            // not held twice; cut to its size (a block this large is
            // mapped on its own, and shrinking it moves nothing).
            let mut bytes = std::mem::take(&mut text.bytes);
            bytes.shrink_to_fit();
            bytes
        } else if text.bytes.capacity() <= TAKEN {
            // Taken too, cut to its size in place (glibc splits the block),
            // and the next string written into a buffer as large: no copy.
            let capacity = text.bytes.capacity();
            let mut bytes = std::mem::replace(&mut text.bytes, Vec::with_capacity(capacity));
            bytes.shrink_to_fit();
            bytes
        } else {
            // A copy of its own size: a new buffer this large for every
            // string would be one the allocator maps (and the kernel
            // faults in) afresh each time, which costs more than the copy.
            text.bytes.clone()
        };
        strings.push(Lifted {
            raw: open + 1..end,
            text: text.whole.then_some(bytes),
            put: false,
        });
        copied = end;
    }
    copy.extend_from_slice(&body[copied..]);
    Some((copy, strings))
}

/// Whether the string just closed is an object's key: a colon follows.
fn is_key(after: &[u8]) -> bool {
    after
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|&b| b == b':')
}

/// Puts each lifted string back where its marker is (a duplicate key may
/// have dropped some).
struct Put<'a> {
    body: &'a [u8],
    strings: &'a mut [Lifted],
}

impl Put<'_> {
    /// `false` when a string cannot be put back: the ordinary parse
    /// decides then.
    fn value(&mut self, value: &mut Value) -> bool {
        match value {
            Value::String(s) if s.starts_with(MARK) => {
                let Some(n) = s[MARK.len_utf8()..].parse::<usize>().ok() else {
                    return false;
                };
                let Some(string) = self.strings.get_mut(n) else {
                    return false;
                };
                if std::mem::replace(&mut string.put, true) {
                    return false;
                }
                let text = match string.text.take() {
                    // Checked 32 bytes at a time (std's check was about
                    // 6% of the parse of a body of tool output).
                    Some(bytes) => simdutf8::basic::from_utf8(&bytes).is_ok().then(|| {
                        // SAFETY: just checked to be UTF-8.
                        unsafe { String::from_utf8_unchecked(bytes) }
                    }),
                    // Its scan gave up: unescaped apart.
                    None => unescape(&self.body[string.raw.clone()]),
                };
                match text {
                    Some(text) => {
                        *s = text;
                        true
                    }
                    None => false,
                }
            }
            Value::Array(items) => items.iter_mut().all(|v| self.value(v)),
            Value::Object(map) => map.values_mut().all(|v| self.value(v)),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both parses' answers: the value, or that there was an error.
    fn both(body: &[u8]) -> (Result<Value, String>, Result<Value, String>) {
        let ordinary = super::super::from_slice::<Value>(body).map_err(|e| e.to_string());
        let lifted = from_slice(body).map_err(|e| e.to_string());
        (lifted, ordinary)
    }

    fn long(text: &str) -> String {
        crate::json::strings::repeated_past(text, LONG)
    }

    #[test]
    fn lifted_strings_parse_as_serde_json_does() {
        let log = long("src/a.rs:1: error \\\"x\\\" \\n\\t");
        let cases: Vec<String> = vec![
            format!(r#"{{"a":"{log}","b":["{log}",1,"x",{{"c":"{log}"}}]}}"#),
            // Escapes of every kind, and characters beyond ASCII.
            format!(
                r#"["{}", "{}"]"#,
                long("\\u00e9\\/ é \\b\\f\\r"),
                long("€𝄞")
            ),
            // Long keys stay; a duplicate key drops its first value.
            format!(r#"{{"{log}":"{log}","k":"{log}","k":"{log}x"}}"#),
            // Surrogate escapes, paired and not, are serde_json's to judge.
            format!(r#"["{log}\ud83d\ude00","{log}\ud800"]"#),
            format!(r#"["{log}\ud800x"]"#),
            // A NUL anywhere: the ordinary parse.
            format!(r#"["{log}","\u0000"]"#),
            format!(r#"["{log}\u0000"]"#),
            // Something that looks like a marker but is not one.
            format!(r#"["{log}","\\u00000"]"#),
            // Invalid around or in long strings.
            format!(r#"["{log}" "{log}"]"#),
            format!(r#"["{log}"] x"#),
            format!("[\"{log}\u{1}\"]"),
            format!(r#"["{log}\x"]"#),
            format!(r#"["{log}\u12"]"#),
            format!(r#"["{log}"#),
            format!(r#"{{"{log}"}}"#),
            format!(r#"{{"a" : "{log}" }}"#),
            // No long string at all.
            r#"{"a":[1,2.50,-0,1e400,"x"]}"#.to_string(),
            // Strings long enough to be taken whole from the scan's buffer.
            format!(r#"["{0}","{1}","{0}"]"#, "ab\\n".repeat(400_000), long("é")),
            // Deeper than serde_json's own limit, within toolwire's, and
            // beyond it.
            format!("{}\"{log}\"{}", "[".repeat(500), "]".repeat(500)),
            format!(
                "{}\"{log}\"{}",
                "[".repeat(super::super::MAX_DEPTH + 1),
                "]".repeat(super::super::MAX_DEPTH + 1)
            ),
        ];
        let mut lifted = 0;
        for body in &cases {
            let body = body.as_bytes();
            let (fast, plain) = both(body);
            assert_eq!(
                fast.is_ok(),
                plain.is_ok(),
                "{}",
                String::from_utf8_lossy(body)
            );
            if let (Ok(fast), Ok(plain)) = (&fast, &plain) {
                assert_eq!(fast, plain, "{}", String::from_utf8_lossy(body));
                assert_eq!(
                    serde_json::to_string(fast).unwrap(),
                    serde_json::to_string(plain).unwrap()
                );
            }
            lifted += usize::from(self::lifted(body).is_some());
        }
        assert!(lifted >= 5, "{lifted}");
        // Broken UTF-8 in a long string, also in one a later duplicate key
        // drops (its marker is never met, but serde_json read it).
        let mut broken = cases[0].clone().into_bytes();
        broken[10] = 0xff;
        let mut dropped = format!(r#"{{"k":"{log}é","k":1}}"#).into_bytes();
        let at = dropped.len() - 10;
        dropped[at] = 0xff;
        for bytes in [broken, dropped] {
            let (fast, plain) = both(&bytes);
            assert!(fast.is_err() && plain.is_err(), "{fast:?}");
            assert_eq!(fast, plain);
        }
    }

    #[test]
    fn a_body_of_short_strings_is_left_to_serde_json() {
        let short: Vec<String> = (0..20_000).map(|i| format!("toolu_{i:07}")).collect();
        let body = serde_json::to_vec(&serde_json::json!({"ids": short})).unwrap();
        assert!(body.len() > PROBE);
        assert!(lifted(&body).is_none());
        let (fast, plain) = both(&body);
        assert_eq!(fast, plain);
        // Long strings past the probe, after short ones: lifted.
        let log = long("line\\n");
        let mut items: Vec<String> = (0..1_000).map(|i| format!(r#""id{i}""#)).collect();
        items.extend((0..2_000).map(|_| format!(r#""{log}""#)));
        let body = format!("[{}]", items.join(","));
        assert!(body.len() > PROBE);
        assert!(lifted(body.as_bytes()).is_some());
        let (fast, plain) = both(body.as_bytes());
        assert_eq!(fast, plain);
    }

    #[test]
    fn random_strings_are_put_back_as_they_were() {
        let pieces: [&str; 10] = [
            "\\n",
            "\\\"",
            "\\\\",
            "\\/",
            "\\u00e9",
            "\\u20ac",
            "é",
            "𝄞",
            "\\ud83d\\ude00",
            " ",
        ];
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..2_000 {
            let mut items = Vec::new();
            for _ in 0..rng.usize(1..6) {
                let mut s = String::new();
                for _ in 0..rng.usize(0..400) {
                    if rng.u8(..) < 200 {
                        s.push_str("abcdefg");
                    } else {
                        s.push_str(pieces[rng.usize(..pieces.len())]);
                    }
                }
                items.push(format!("\"{s}\""));
            }
            let body = format!(r#"{{"xs":[{}]}}"#, items.join(","));
            let (fast, plain) = both(body.as_bytes());
            assert_eq!(fast, plain, "{body}");
        }
    }
}
