//! A Claude Code line read in one pass over its bytes, for the lines in
//! the shape Claude Code writes (nearly all of them).
//!
//! The other ways to read a line each walk its bytes several times: the
//! search for its newline, the scan of its long strings, the copy into a
//! shadow, the checks of the shadow and serde_json's parse of it. Here one
//! walk validates the line as JSON, finds where it ends and takes only
//! the few fields a record is made of; long strings are scanned 64 bytes
//! at a time (`crate::json::strings`), short ones are looked at directly.
//!
//! It answers only when it is sure to give the record the other ways give:
//! the line is valid JSON to its end (so the value parse takes it too),
//! nested no deeper than [`MAX_NESTING`], with every key and every text it
//! keeps free of escapes, every number plain enough to be finite, no `\u`
//! escape of a surrogate, no field it reads written twice or of another
//! type than Claude Code writes. Anything else (rare) is left to
//! `parse_line`, which reads it as before: the caller then finds the
//! line's end by itself. `tests::the_scan_reads_lines_as_the_parse_does`
//! and the `transcript` fuzz target hold the two to the same records.

use super::{Blocks, Content, Event, Events, Msg, Rec, Role, Text, result_digest};
use crate::format::{Digest, anthropic};
use crate::json::strings::{plain_within_64, scan_string};

/// Deeper lines are left to the parse (Claude Code's are a few levels
/// deep; `crate::json::MAX_DEPTH` is far more).
const MAX_NESTING: usize = 64;

/// Strings from this length on are digested without a second look at
/// their form (the shadow's threshold).
const LONG: usize = 128;

/// The line at the start of `region` (which starts with `{`) as a record,
/// and where it ends (its newline, or the region's end); `None` when the
/// scan cannot vouch for it.
pub(super) fn line(region: &[u8]) -> Option<(Rec, usize)> {
    let mut p = Scan {
        s: region,
        at: 0,
        depth: 0,
    };
    let mut seen = Seen::default();
    let mut kind = None;
    let mut uuid = None;
    let mut parent = None;
    let mut side_chain = None;
    let mut api_error = None;
    let mut message = None;
    p.object(|p, key| {
        match key {
            b"type" => {
                seen.once(0)?;
                kind = p.text()?;
            }
            b"uuid" => {
                seen.once(1)?;
                uuid = Some(p.text()?);
            }
            b"parentUuid" => {
                seen.once(2)?;
                parent = p.text()?;
            }
            b"isSidechain" => {
                seen.once(3)?;
                side_chain = p.flag()?;
            }
            b"isApiErrorMessage" => {
                seen.once(4)?;
                api_error = p.flag()?;
            }
            b"message" => {
                seen.once(5)?;
                message = p.message()?;
            }
            _ => p.value()?,
        }
        Some(())
    })?;
    p.space();
    let end = match p.s.get(p.at) {
        None => p.s.len(),
        Some(b'\n') => p.at,
        Some(_) => return None,
    };
    let is_message = matches!(kind, Some("user" | "assistant"));
    let rec = Rec {
        has_uuid: uuid.is_some(),
        uuid: uuid.flatten().map(Text::from),
        parent: parent.map(Text::from),
        side_chain: side_chain == Some(true),
        api_error: api_error == Some(true),
        message: message.filter(|_| is_message),
        len: end,
        uuid_hash: 0,
        parent_hash: 0,
    };
    Some((rec, end))
}

/// Which of the fields read were met, so one written twice is refused
/// (the parse refuses it too).
#[derive(Default)]
struct Seen(u8);

impl Seen {
    fn once(&mut self, field: u8) -> Option<()> {
        let bit = 1 << field;
        (self.0 & bit == 0).then(|| self.0 |= bit)
    }
}

/// A string as the scan found it.
struct Str<'a> {
    /// Its body, between the quotes (valid UTF-8).
    body: &'a [u8],
    /// No backslash in it: the body is its text.
    plain: bool,
    /// Every escape in it is one serde_json writes.
    compact: bool,
}

impl<'a> Str<'a> {
    /// Its text, when it is the body itself.
    fn text(&self) -> Option<&'a str> {
        // SAFETY: `Scan::string` makes a plain `Str` only of a body it
        // found to be ASCII or valid UTF-8. (Checking again cost a UTF-8
        // validation per kept text, most of a million per large file.)
        self.plain
            .then(|| unsafe { std::str::from_utf8_unchecked(self.body) })
    }
}

struct Scan<'a> {
    s: &'a [u8],
    at: usize,
    depth: usize,
}

impl<'a> Scan<'a> {
    /// Skip JSON's whitespace but the newline, which ends the line.
    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\r') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not taken.
    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.s.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.s.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// The string at the cursor (its opening quote).
    fn string(&mut self) -> Option<Str<'a>> {
        let start = self.at + 1;
        if self.s.len() >= start + 64 {
            if let Some((end, ascii)) = plain_within_64(self.s, start) {
                let body = &self.s[start..end];
                if !ascii && std::str::from_utf8(body).is_err() {
                    return None;
                }
                self.at = end + 1;
                return Some(Str {
                    body,
                    plain: true,
                    compact: true,
                });
            }
            return self.scanned(start);
        }
        // Near the line's end: fewer than 64 bytes to look at together.
        let near = self.s.get(start..)?;
        if let Some(j) = memchr::memchr2(b'"', b'\\', near)
            && near[j] == b'"'
        {
            let body = &near[..j];
            // One look at each byte for the usual case (printable ASCII).
            if !body.iter().all(|&b| (0x20..0x80).contains(&b))
                && (body.iter().any(|&b| b < 0x20) || std::str::from_utf8(body).is_err())
            {
                return None;
            }
            self.at = start + j + 1;
            return Some(Str {
                body,
                plain: true,
                compact: true,
            });
        }
        self.scanned(start)
    }

    /// The string whose body starts at `start`, scanned 64 bytes at a time.
    fn scanned(&mut self, start: usize) -> Option<Str<'a>> {
        let scanned = scan_string(self.s, start)?;
        let body = &self.s[start..scanned.end];
        if scanned.surrogate || (!scanned.ascii && std::str::from_utf8(body).is_err()) {
            return None;
        }
        self.at = scanned.end + 1;
        Some(Str {
            body,
            plain: false,
            compact: scanned.compact,
        })
    }

    /// A number the value parse reads as a finite one: no exponent, and
    /// few enough digits.
    fn number(&mut self) -> Option<()> {
        let s = self.s;
        let mut i = self.at;
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        let digits = |mut i: usize| {
            while s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let int = i;
        i = match s.get(i)? {
            b'0' => i + 1,
            b'1'..=b'9' => digits(i),
            _ => return None,
        };
        if i - int > 18 {
            return None;
        }
        if s.get(i) == Some(&b'.') {
            let frac = i + 1;
            i = digits(frac);
            if i == frac || i - frac > 17 {
                return None;
            }
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            return None;
        }
        self.at = i;
        Some(())
    }

    /// Skip one value (checked as the parse checks it).
    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|p, _| p.value()),
            b'[' => self.array(Scan::value),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// The value's raw bytes, and the string it is if it is one.
    fn raw(&mut self) -> Option<(&'a [u8], Option<Str<'a>>)> {
        let start = match self.peek()? {
            b'"' => {
                let start = self.at;
                let string = self.string()?;
                return Some((&self.s[start..self.at], Some(string)));
            }
            _ => self.at,
        };
        self.value()?;
        Some((&self.s[start..self.at], None))
    }

    /// The object at the cursor: `field` reads each value, given its key
    /// (one without escapes).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return None;
        }
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                if self.peek()? != b'"' {
                    return None;
                }
                let key = self.string()?;
                if !key.plain {
                    return None;
                }
                self.expect(b':')?;
                field(self, key.body)?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// The array at the cursor: `item` reads each element.
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return None;
        }
        if self.peek()? == b']' {
            self.at += 1;
        } else {
            loop {
                item(self)?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b']' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// A text field: a string without escapes, or null (`Some(None)`).
    fn text(&mut self) -> Option<Option<&'a str>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            b'"' => self.string()?.text().map(Some),
            _ => None,
        }
    }

    /// A flag: true, false or null.
    fn flag(&mut self) -> Option<Option<bool>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            b't' => self.literal(b"true").map(|()| Some(true)),
            b'f' => self.literal(b"false").map(|()| Some(false)),
            _ => None,
        }
    }

    /// `message`: null (`Some(None)`) or an object.
    fn message(&mut self) -> Option<Option<Msg>> {
        if self.peek()? == b'n' {
            return self.literal(b"null").map(|()| None);
        }
        let mut seen = Seen::default();
        let mut role = None;
        let mut id = None;
        let mut content = Content::Absent;
        self.object(|p, key| {
            match key {
                b"role" => {
                    seen.once(0)?;
                    role = p.text()?;
                }
                b"id" => {
                    seen.once(1)?;
                    id = p.text()?;
                }
                b"content" => {
                    seen.once(2)?;
                    content = p.content()?;
                }
                _ => p.value()?,
            }
            Some(())
        })?;
        Some(Some(Msg {
            role: role.map(Role::of),
            id: id.map(Text::from),
            id_hash: 0,
            content,
        }))
    }

    /// A message's `content`: a string, null or an array of blocks.
    fn content(&mut self) -> Option<Content> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| Content::Null),
            b'"' => self.string().map(|_| Content::Text),
            b'[' => {
                let mut events = Events::None;
                self.array(|p| {
                    events.extend(p.block()?);
                    Some(())
                })?;
                Some(Content::Blocks(Blocks {
                    events,
                    valid: true,
                }))
            }
            _ => None,
        }
    }

    /// One block of a content array (an object), as what it means.
    fn block(&mut self) -> Option<Option<Event>> {
        let mut seen = Seen::default();
        let mut kind = None;
        let mut id = None;
        let mut tool_use_id = None;
        let mut name = None;
        let mut content = None;
        self.object(|p, key| {
            match key {
                b"type" => {
                    seen.once(0)?;
                    kind = p.text()?;
                }
                b"id" => {
                    seen.once(1)?;
                    id = p.text()?;
                }
                b"tool_use_id" => {
                    seen.once(2)?;
                    tool_use_id = p.text()?;
                }
                b"name" => {
                    seen.once(3)?;
                    name = p.text()?;
                }
                b"content" => {
                    seen.once(4)?;
                    content = Some(p.raw()?);
                }
                _ => p.value()?,
            }
            Some(())
        })?;
        // What `Event::of` makes of the block's head.
        Some(match kind {
            Some("tool_use") => Some(Event::Call(
                Text::from(id.unwrap_or_default()),
                Text::from(name.unwrap_or_default()),
            )),
            Some("compaction") => Some(Event::Compaction),
            Some("tool_result") => Some(Event::Result(
                Text::from(tool_use_id.unwrap_or_default()),
                digest(content),
            )),
            _ => None,
        })
    }
}

/// A result's digest, from its raw content (`None`: absent, read as
/// `null`), as `result_digest` makes it; a long string the scan found
/// compact is digested as it stands without checking its form again, as
/// the shadow does (from the same length on).
fn digest(content: Option<(&[u8], Option<Str>)>) -> Option<Digest> {
    match content {
        None => result_digest(b"null"),
        Some((raw, Some(string))) if string.body.len() >= LONG && string.compact => {
            (!anthropic::is_replacement_json(raw)).then(|| Digest::of_json_bytes(raw))
        }
        Some((raw, _)) => result_digest(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{hashed, parse_line};
    use super::*;

    /// What the scan makes of `line` (followed by a newline and more), as
    /// the parse's record would print; `None` when it leaves the line.
    fn scanned(line: &str) -> Option<String> {
        let region = format!("{line}\n{{\"type\":\"user\"}}\n");
        let (rec, end) = line_of(region.as_bytes())?;
        assert_eq!(end, line.len(), "{line}");
        Some(format!("{:?}", hashed(rec)))
    }

    fn line_of(region: &[u8]) -> Option<(Rec, usize)> {
        line(region)
    }

    fn parsed(line: &[u8]) -> String {
        let rec = parse_line(line);
        format!("{:?}", rec)
    }

    /// Every line the scan answers for gets the record the parse gives;
    /// the usual lines are all answered for.
    fn check(line: &str) -> bool {
        match scanned(line) {
            Some(scan) => {
                assert_eq!(format!("Some({scan})"), parsed(line.as_bytes()), "{line}");
                true
            }
            None => false,
        }
    }

    fn long(text: &str) -> String {
        crate::json::strings::repeated_past(text, LONG + 10)
    }

    fn usual() -> Vec<String> {
        let log = long("src/a.rs:1: error \\\"x\\\" \\n");
        vec![
            r#"{"type":"assistant","uuid":"u1","parentUuid":null,"isSidechain":false,"message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"make"}}],"id":"msg_1"}}"#.to_string(),
            format!(
                r#"{{"type":"user","uuid":"u2","parentUuid":"u1","isSidechain":false,"message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_1","content":"{log}"}}]}}}}"#
            ),
            format!(
                r#"{{"type":"user","uuid":"u3","parentUuid":"u2","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{{"type":"text","text":"{log}"}}],"is_error":true}},{{"type":"tool_result","tool_use_id":"s","content":"short"}}]}}}}"#
            ),
            format!(
                r#"{{"type":"user","uuid":"u4","parentUuid":"u3","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"p","content":"<persisted-output>{log}"}}]}}}}"#
            ),
            format!(
                r#"{{"type":"user","uuid":"u5","parentUuid":"u4","message":{{"role":"user","content":"{log}"}}}}"#
            ),
            r#"{"type":"assistant","uuid":"u6","parentUuid":"u5","isApiErrorMessage":true,"message":{"role":"assistant","id":"m","content":[{"type":"compaction"},{"type":"text","text":"héllo"}]},"n":[1,-2.5,0,true,false,null,{}],"cwd":"/x"}"#.to_string(),
            r#"{"type":"summary","summary":"x","leafUuid":"u6"}"#.to_string(),
            r#"  {"type":"user" , "uuid" : "u7" ,"message":{"role":"user","content":null}}  "#.trim_start().to_string(),
            r#"{"type":"user","uuid":"u8","message":{"content":[]},"isSidechain":true}"#.to_string(),
            format!(
                r#"{{"type":"user","uuid":"u9","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"e","content":"{}"}}]}}}}"#,
                long("\\u00e9\\/ é\\t")
            ),
        ]
    }

    #[test]
    fn the_scan_reads_lines_as_the_parse_does() {
        for line in usual() {
            assert!(check(&line), "the scan left a usual line: {line}");
        }
        // Lines the scan must leave or read exactly as the parse does.
        let log = long("x\\n");
        let odd = [
            r#"{"type":"user","type":"assistant","uuid":"a"}"#.to_string(),
            r#"{"type":"user","uuid":"a\u0062","message":{"role":"user"}}"#.to_string(),
            r#"{"typ\u0065":"user","uuid":"a"}"#.to_string(),
            r#"{"type":"user","uuid":1}"#.to_string(),
            r#"{"type":"user","isSidechain":"yes"}"#.to_string(),
            r#"{"type":"user","message":"text"}"#.to_string(),
            r#"{"type":"user","message":{"content":{"type":"text"}}}"#.to_string(),
            r#"{"type":"user","message":{"content":[1]}}"#.to_string(),
            r#"{"type":"user","message":{"content":7}}"#.to_string(),
            r#"{"type":"user","message":{"content":[{"type":"tool_use","id":"a","id":"b"}]}}"#.to_string(),
            r#"{"type":"user","n":1e400}"#.to_string(),
            r#"{"type":"user","n":123456789012345678901234567890}"#.to_string(),
            r#"{"type":"user","n":01}"#.to_string(),
            r#"{"type":"user","n":-}"#.to_string(),
            r#"{"type":"user","n":1.}"#.to_string(),
            r#"{"type":"user","n":[1,]}"#.to_string(),
            r#"{"type":"user",}"#.to_string(),
            r#"{"type":"user"} x"#.to_string(),
            r#"{"type":"user"}}"#.to_string(),
            r#"{"type":"user""#.to_string(),
            r#"{"type":"user","s":"\ud800"}"#.to_string(),
            format!(r#"{{"type":"user","s":"{log}\ud83d\ude00"}}"#),
            format!(r#"{{"type":"user","s":"{log}\x"}}"#),
            format!("{{\"type\":\"user\",\"s\":\"{log}\u{1}\"}}"),
            "{\"type\":\"user\",\"s\":\"a\tb\"}".to_string(),
            format!("{{\"type\":\"user\",\"d\":{}{}}}", "[".repeat(100), "]".repeat(100)),
            format!("{{\"type\":\"user\",\"d\":{}{}}}", "[".repeat(40), "]".repeat(40)),
            "{\"type\":\"user\"}\u{c}".to_string(),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":{"b":2, "a" : [ 1 ]}}]}}"#.to_string(),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}}"#.to_string(),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"a\/b"}]}}"#.to_string(),
            r#"{"type":"assistant","message":{"role":"assistant","id":null,"content":[{"type":"tool_use","id":null,"name":null}]}}"#.to_string(),
        ];
        for line in &odd {
            check(line);
        }
        // Broken UTF-8, in a short string and in a long one.
        for at in [20, 200] {
            let mut bytes = usual()[1].clone().into_bytes();
            bytes[at] = 0xff;
            let region = [&bytes[..], b"\n"].concat();
            assert!(line_of(&region).is_none());
        }
        // Every line mutated at random: whatever the scan answers for, it
        // answers as the parse does.
        let mut rng = fastrand::Rng::with_seed(39);
        let alphabet = b"{}[]\":,\\ntrufalse0123456789.-eE u\t\r\x01\xc3\xa9/";
        let mut answered = 0;
        for _ in 0..20_000 {
            let base = usual();
            let mut bytes = base[rng.usize(..base.len())].clone().into_bytes();
            for _ in 0..rng.usize(1..4) {
                let at = rng.usize(..bytes.len());
                match rng.u8(..3) {
                    0 => bytes[at] = alphabet[rng.usize(..alphabet.len())],
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, alphabet[rng.usize(..alphabet.len())]),
                }
            }
            let Some(line) = bytes.split(|&b| b == b'\n').next() else {
                continue;
            };
            if line.first() != Some(&b'{') {
                continue;
            }
            let region = [line, b"\n{}"].concat();
            if let Some((rec, end)) = line_of(&region) {
                answered += 1;
                assert_eq!(end, line.len(), "{}", String::from_utf8_lossy(line));
                assert_eq!(
                    format!("Some({:?})", hashed(rec)),
                    parsed(line),
                    "{}",
                    String::from_utf8_lossy(line)
                );
            }
        }
        assert!(answered > 1000, "{answered}");
    }
}
