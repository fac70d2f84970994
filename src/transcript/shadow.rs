//! The head of an Anthropic transcript line whose tool output is long, read
//! without running the output through serde_json.
//!
//! serde_json checks a string byte by byte and stops at every escape, and
//! log output has an escaped newline every line: that scan was most of
//! what reading a transcript cost. Here each string of the line is scanned
//! 64 bytes at a time instead, and the long ones are left out of a
//! *shadow* of the line: the same bytes, with each long string emptied
//! (`"…"` becomes `""`). serde_json parses the shadow as it would the line,
//! and what it finds is mapped back onto the line.
//!
//! The two parses agree, whatever the line:
//!
//! - Outside strings, a quote always opens one, so the scan finds the
//!   strings serde_json would, for as far as the line is valid JSON; and
//!   an emptied string is still a string in the same place.
//! - An emptied string is one the scan found valid for every use serde_json
//!   could make of it: no raw control character, only escapes JSON knows,
//!   no `\u` escape of a surrogate, valid UTF-8. Anything else, and the
//!   line is left to the ordinary parse.
//! - What state is built from (call ids, tool names, each result's raw
//!   content) is taken from the line itself. A call id or tool name that
//!   was itself a long string sends the line to the ordinary parse, as does
//!   every line that is not a message (records and `seen` lines are short
//!   and rare).
//!
//! `tests::the_shadow_reads_every_line_as_the_ordinary_parse_does` and the
//! `transcript` fuzz target hold the two to the same answers.

use std::borrow::Cow;
use std::cell::RefCell;

use crate::format::{Digest, Original, Skim, SkimResult, anthropic};

use super::reader::Head;

/// Strings at least this long are emptied in the shadow; shorter ones are
/// not worth the bookkeeping.
const LONG: usize = 128;

/// A string emptied in the shadow.
#[derive(Debug, Clone, Copy)]
struct Hole {
    /// Where its closing quote sits in the shadow.
    at: usize,
    /// How many bytes of the line it and the holes before it stood for.
    shift: usize,
    /// Every escape in it is the one serde_json writes.
    compact: bool,
}

thread_local! {
    /// Each thread's shadow and holes, reused from line to line.
    static SHADOW: RefCell<(Vec<u8>, Vec<Hole>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The head of `line` (an Anthropic transcript line), or `None` when the
/// ordinary parse should read it: it has no long string, is no message,
/// or has a long string the shadow cannot stand in for.
pub fn head(line: &[u8]) -> Option<Head<'_>> {
    SHADOW.with(|cell| {
        let mut cell = cell.try_borrow_mut().ok()?;
        let (shadow, holes) = &mut *cell;
        shadow.clear();
        holes.clear();
        if !make_shadow(line, shadow, holes) {
            return None;
        }
        let head = super::reader::parse_head_plain(crate::format::Format::Anthropic, shadow)?;
        let Head::Message(skim) = head else {
            return None;
        };
        Rebase {
            line,
            shadow,
            holes,
        }
        .skim(skim)
        .map(Head::Message)
    })
}

/// Fill `shadow` with `line`, its long strings emptied; `false` when there
/// is none, or one that must go to the ordinary parse.
fn make_shadow(line: &[u8], shadow: &mut Vec<u8>, holes: &mut Vec<Hole>) -> bool {
    let mut copied = 0;
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'"', &line[at..]) {
        let open = at + i;
        let Some(string) = scan_string(line, open + 1) else {
            return false;
        };
        let body = &line[open + 1..string.end];
        if body.len() >= LONG {
            if string.surrogate || (!string.ascii && std::str::from_utf8(body).is_err()) {
                return false;
            }
            shadow.extend_from_slice(&line[copied..=open]);
            let before = holes.last().map_or(0, |h| h.shift);
            holes.push(Hole {
                at: shadow.len(),
                shift: before + body.len(),
                compact: string.compact,
            });
            copied = string.end;
        }
        at = string.end + 1;
    }
    if holes.is_empty() {
        return false;
    }
    shadow.extend_from_slice(&line[copied..]);
    true
}

/// Maps what the shadow's parse borrowed back onto the line.
struct Rebase<'l, 's> {
    line: &'l [u8],
    shadow: &'s [u8],
    holes: &'s [Hole],
}

impl<'l> Rebase<'l, '_> {
    /// Where shadow offset `at` lies in the line: later by every hole
    /// before it. (A search, not a walk: a line may hold many holes and
    /// many results.)
    fn to_line(&self, at: usize) -> usize {
        match self.holes.partition_point(|h| h.at < at) {
            0 => at,
            n => at + self.holes[n - 1].shift,
        }
    }

    /// The offset of `s` (borrowed from the shadow) in the shadow.
    fn offset_of(&self, s: &[u8]) -> Option<usize> {
        let at = (s.as_ptr() as usize).checked_sub(self.shadow.as_ptr() as usize)?;
        (at + s.len() <= self.shadow.len()).then_some(at)
    }

    /// The same text, borrowed from the line; `None` when it may have been
    /// a long string (emptied in the shadow).
    fn text(&self, s: Cow<'_, str>) -> Option<Cow<'l, str>> {
        match s {
            // An empty text may be an emptied long one.
            s if s.is_empty() => None,
            Cow::Owned(s) => Some(Cow::Owned(s)),
            Cow::Borrowed(s) => {
                let from = self.to_line(self.offset_of(s.as_bytes())?);
                let text = std::str::from_utf8(self.line.get(from..from + s.len())?).ok()?;
                Some(Cow::Borrowed(text))
            }
        }
    }

    /// A result's raw content, from the line, with its digest when the
    /// scan already knows it to be compact (one long string).
    ///
    /// The line's bytes need no UTF-8 check: the shadow's were checked by
    /// its parse, the emptied strings' by their scan.
    fn content(&self, raw: &[u8]) -> Option<(&'l [u8], Option<Digest>)> {
        let start = self.offset_of(raw)?;
        let (from, to) = (self.to_line(start), self.to_line(start + raw.len()));
        let text = self.line.get(from..to)?;
        let hole = self.holes.partition_point(|h| h.at < start + 1);
        let one_string = raw.len() == 2
            && self
                .holes
                .get(hole)
                .is_some_and(|h| h.at == start + 1 && h.compact);
        let digest = one_string.then(|| Digest::of_json_bytes(text));
        Some((text, digest))
    }

    fn skim(&self, skim: Skim<'_>) -> Option<Skim<'l>> {
        let mut calls = Vec::with_capacity(skim.calls.len());
        for (id, name) in skim.calls {
            calls.push((self.text(id)?, self.text(name)?));
        }
        let mut results = Vec::with_capacity(skim.results.len());
        for result in skim.results {
            let id = self.text(result.id)?;
            // The shadow's content of a long string is `""`: whether it is
            // a preview is asked of the line's.
            let (original, digest) = match result.original {
                Some(Original::Raw(raw)) => {
                    let (raw, digest) = self.content(raw)?;
                    match anthropic::is_replacement_json(raw) {
                        true => (None, None),
                        false => (Some(Original::Raw(raw)), digest),
                    }
                }
                Some(Original::Value(_)) => return None,
                None => {
                    // Only a preview: one that is short stays as it was.
                    (None, None)
                }
            };
            results.push(SkimResult {
                id,
                original,
                digest,
            });
        }
        Some(Skim {
            side: skim.side,
            calls,
            results,
        })
    }
}

/// What a scan of one JSON string found.
#[derive(Debug)]
struct Scanned {
    /// Index of the closing quote.
    end: usize,
    /// Every escape is one serde_json writes.
    compact: bool,
    /// No byte above 0x7f (else the caller checks the UTF-8).
    ascii: bool,
    /// A `\u` escape of a surrogate (serde_json judges those by use).
    surrogate: bool,
}

/// Scan the string whose body starts at `start` (after its opening quote);
/// `None` when it is not a valid JSON string: a raw control character, an
/// escape JSON does not have, or no closing quote.
///
/// 64 bytes are looked at together, as simdjson does: a bit for each
/// quote, backslash, control character and byte above 0x7f, and from the
/// backslashes a bit for each escaped byte, so that only the escapes
/// themselves are visited one by one. A string with a `\u` escape in it is
/// scanned again by [`scan_from`], which reads those.
fn scan_string(s: &[u8], start: usize) -> Option<Scanned> {
    let mut scanned = Scanned {
        end: 0,
        compact: true,
        ascii: true,
        surrogate: false,
    };
    let mut at = start;
    // Whether the block's first byte is escaped (by the last of the block
    // before).
    let mut carried = 0;
    while let Some(block) = s.get(at..at + 64) {
        let [quote, backslash, control, high] = masks64(block);
        let escaped = find_escaped(backslash, &mut carried);
        let ends = quote & !escaped;
        // The bytes before the closing quote (all of them without one).
        let inside = match ends {
            0 => u64::MAX,
            ends => (ends & ends.wrapping_neg()) - 1,
        };
        if control & inside != 0 {
            return None;
        }
        scanned.ascii &= high & inside == 0;
        let mut escapes = escaped & inside;
        let mut class = 0;
        while escapes != 0 {
            class |= ESCAPE_CLASS[block[escapes.trailing_zeros() as usize] as usize];
            escapes &= escapes - 1;
        }
        if class & (INVALID | UNICODE) != 0 {
            return scan_from(s, start, scanned);
        }
        scanned.compact &= class & NOT_COMPACT == 0;
        if ends != 0 {
            scanned.end = at + ends.trailing_zeros() as usize;
            return Some(scanned);
        }
        at += 64;
    }
    // The rest, shorter than a block; an escape the last block began is
    // read whole from its backslash.
    scan_from(s, at - carried as usize, scanned)
}

/// What the byte after a backslash makes of the escape.
const INVALID: u8 = 1;
const NOT_COMPACT: u8 = 2;
const UNICODE: u8 = 4;
static ESCAPE_CLASS: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    let valid = *b"\"\\bfnrt";
    while i < valid.len() {
        table[valid[i] as usize] = 0;
        i += 1;
    }
    table[b'/' as usize] = NOT_COMPACT;
    table[b'u' as usize] = UNICODE;
    table
};

/// The escaped bytes of a block: those after an odd run of backslashes.
/// `carried` says whether the block's first byte is escaped, and is set
/// for the next block. (simdjson's `find_escaped_branchless`.)
fn find_escaped(backslash: u64, carried: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    // A backslash that is itself escaped starts nothing.
    let backslash = backslash & !*carried;
    let follows = (backslash << 1) | *carried;
    // Runs starting on an odd bit, added to themselves, carry out of the
    // run into the byte after it; those on an even bit are found by the
    // flip below.
    let odd_starts = backslash & !EVEN & !follows;
    let (sum, overflow) = odd_starts.overflowing_add(backslash);
    *carried = overflow as u64;
    let invert = sum << 1;
    (EVEN ^ invert) & follows
}

/// [`scan_string`] sixteen bytes at a time, from `at` on, escapes read one
/// by one (`\u` ones included); `scanned` holds what came before.
fn scan_from(s: &[u8], mut at: usize, mut scanned: Scanned) -> Option<Scanned> {
    loop {
        let (mut mask, high, whole) = match s.get(at..at + 16) {
            Some(chunk) => {
                let [quote, backslash, control, high] = specials(chunk);
                (quote | backslash | control, high, true)
            }
            None => {
                let [quote, backslash, control, high] = specials_bytes(s.get(at..)?);
                (quote | backslash | control, high, false)
            }
        };
        // Bytes after the closing quote count too: at worst the caller
        // checks UTF-8 it did not need to.
        scanned.ascii &= high == 0;
        loop {
            if mask == 0 {
                if !whole {
                    return None;
                }
                at += 16;
                break;
            }
            let special = at + mask.trailing_zeros() as usize;
            match s[special] {
                b'"' => {
                    scanned.end = special;
                    return Some(scanned);
                }
                b'\\' => {
                    let next = special + escape(s, special, &mut scanned)?;
                    if next >= at + 16 {
                        at = next;
                        break;
                    }
                    // Whatever the escape covered is no special byte.
                    mask &= u32::MAX << (next - at);
                }
                _ => return None,
            }
        }
    }
}

/// The length of the escape at `at` (a backslash), noting in `scanned`
/// what it says; `None` when JSON has no such escape.
fn escape(s: &[u8], at: usize, scanned: &mut Scanned) -> Option<usize> {
    let class = ESCAPE_CLASS[*s.get(at + 1)? as usize];
    if class & INVALID != 0 {
        return None;
    }
    scanned.compact &= class & NOT_COMPACT == 0;
    if class & UNICODE == 0 {
        return Some(2);
    }
    let hex = s.get(at + 2..at + 6)?;
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    scanned.surrogate |= hex[0].eq_ignore_ascii_case(&b'd')
        && matches!(hex[1].to_ascii_lowercase(), b'8'..=b'9' | b'a'..=b'f');
    scanned.compact &= crate::format::escape_len(s, at).is_some();
    Some(6)
}

/// For 64 bytes: quotes, backslashes, control characters and bytes above
/// 0x7f, a bit each.
fn masks64(block: &[u8]) -> [u64; 4] {
    let mut masks = [0u64; 4];
    for (i, chunk) in block.chunks_exact(16).take(4).enumerate() {
        for (mask, part) in masks.iter_mut().zip(specials(chunk)) {
            *mask |= u64::from(part) << (16 * i);
        }
    }
    masks
}

/// For up to 16 bytes: quotes, backslashes, control characters and bytes
/// above 0x7f, a bit each.
fn specials_bytes(chunk: &[u8]) -> [u32; 4] {
    let mut masks = [0; 4];
    for (i, &b) in chunk.iter().take(16).enumerate() {
        for (mask, hit) in masks
            .iter_mut()
            .zip([b == b'"', b == b'\\', b < 0x20, b > 0x7f])
        {
            *mask |= u32::from(hit) << i;
        }
    }
    masks
}

/// [`specials_bytes`] of exactly 16 bytes.
#[cfg(not(target_arch = "x86_64"))]
fn specials(chunk: &[u8]) -> [u32; 4] {
    specials_bytes(chunk)
}

/// [`specials_bytes`] of exactly 16 bytes, in a few SSE2 instructions
/// (SSE2 is part of every x86-64 processor).
#[cfg(target_arch = "x86_64")]
fn specials(chunk: &[u8]) -> [u32; 4] {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_set1_epi8,
    };
    if chunk.len() < 16 {
        return specials_bytes(chunk);
    }
    // SAFETY: SSE2 is in the x86-64 baseline this is compiled for, and the
    // load reads the first 16 bytes of `chunk` (checked above), unaligned.
    let masks = unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
        [
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8))),
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8))),
            // A byte at most 0x1f is its own minimum with 0x1f.
            _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v)),
            _mm_movemask_epi8(v),
        ]
    };
    masks.map(|m| m as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::reader::parse_head_plain;

    fn plain(line: &[u8]) -> String {
        format!(
            "{:?}",
            parse_head_plain(crate::format::Format::Anthropic, line)
        )
    }

    /// What the shadow reads, with the digests the reader would add.
    fn shadowed(line: &[u8]) -> Option<String> {
        head(line).map(|head| match head {
            Head::Message(mut skim) => {
                for r in &mut skim.results {
                    // The digest the shadow knows must be the one the
                    // ordinary path computes; compared, then dropped.
                    if let (Some(d), Some(o)) = (r.digest.take(), &r.original) {
                        assert_eq!(
                            d,
                            o.digest(Digest::NEW),
                            "{}",
                            String::from_utf8_lossy(line)
                        );
                    }
                }
                format!("{:?}", Some(Head::Message(skim)))
            }
            other => format!("{:?}", Some(other)),
        })
    }

    fn long(text: &str) -> String {
        text.repeat(LONG / text.len().max(1) + 2)
    }

    #[test]
    fn the_shadow_reads_every_line_as_the_ordinary_parse_does() {
        let log = long("src/a.rs:1: error \\\"x\\\" \\n");
        let cases: Vec<String> = vec![
            // The usual: a call, and its long result.
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":"{log}"}}]}}}}"#
            ),
            format!(
                r#"{{"type":"message","message":{{"role":"assistant","content":[{{"type":"text","text":"{log}"}},{{"type":"tool_use","id":"t1","name":"Bash","input":{{"command":"{log}"}}}}]}}}}"#
            ),
            // Blocks of text, two results, escapes serde_json does not write.
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"a","content":[{{"type":"text","text":"{log}"}}]}},{{"type":"tool_result","tool_use_id":"b","content":"{}"}}]}}}}"#,
                long("\\u00e9\\/ é")
            ),
            // A preview stays a preview however long it is.
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"p","content":"<persisted-output>{log}"}}]}}}}"#
            ),
            // Long ids and names go to the ordinary parse, with the same answer.
            format!(
                r#"{{"type":"message","message":{{"role":"assistant","content":[{{"type":"tool_use","id":"{0}","name":"{0}","input":{{}}}}]}}}}"#,
                long("id")
            ),
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{0}","content":"x"}}]}}}}"#,
                long("i\\td")
            ),
            // A long role or type: no side, no block.
            format!(
                r#"{{"type":"message","message":{{"role":"{0}","content":[{{"type":"{0}","id":"x"}}]}}}}"#,
                long("user")
            ),
            // Not messages.
            format!(
                r#"{{"type":"replacement","record":{{"kind":"tool-result","toolUseId":"a","replacement":"{log}"}}}}"#
            ),
            format!(r#"{{"type":"{log}"}}"#),
            // Invalid in a long string: a raw control character, a bad or
            // short escape, a surrogate, broken UTF-8, no closing quote.
            format!(
                "{{\"type\":\"message\",\"message\":{{\"role\":\"user\",\"content\":\"{log}\u{1}\"}}}}"
            ),
            format!(r#"{{"type":"message","message":{{"role":"user","content":"{log}\x"}}}}"#),
            format!(r#"{{"type":"message","message":{{"role":"user","content":"{log}\u12"}}}}"#),
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"s","content":"{log}\ud800"}}]}}}}"#
            ),
            format!(r#"{{"type":"message","message":{{"role":"user","content":"{log}"#),
            // Invalid around long strings.
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":["{log}" "{log}"]}}}}"#
            ),
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"a","content":"{log}"}}]}}}} x"#
            ),
            format!(
                r#"{{"type":"message","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"a","content":"{log}","content":"{log}"}}]}}}}"#
            ),
            // Long keys.
            format!(
                r#"{{"type":"message","{log}":1,"message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"a","content":{{"{log}":"{log}","{log}x":[]}}}}]}}}}"#
            ),
        ];
        // Many results in one line, long and short, some with escapes
        // serde_json does not write: every one mapped back to its place.
        let blocks: Vec<String> = (0..300)
            .map(|i| {
                let content = match i % 3 {
                    0 => log.clone(),
                    1 => format!("short {i}"),
                    _ => long("\\u00e9 x"),
                };
                format!(r#"{{"type":"tool_result","tool_use_id":"id{i}","content":"{content}"}}"#)
            })
            .collect();
        let mut cases = cases;
        cases.push(format!(
            r#"{{"type":"message","message":{{"role":"user","content":[{}]}}}}"#,
            blocks.join(",")
        ));
        let mut shadowed_lines = 0;
        for line in &cases {
            let line = line.as_bytes();
            if let Some(fast) = shadowed(line) {
                shadowed_lines += 1;
                assert_eq!(fast, plain(line), "{}", String::from_utf8_lossy(line));
            }
            // The reader's answer is the ordinary one, shadow or not.
            assert_eq!(
                format!(
                    "{:?}",
                    crate::transcript::reader::parse_head(crate::format::Format::Anthropic, line)
                        .map(|h| match h {
                            Head::Message(mut skim) => {
                                skim.results.iter_mut().for_each(|r| r.digest = None);
                                Head::Message(skim)
                            }
                            other => other,
                        })
                ),
                plain(line)
            );
        }
        // Most of these are read through the shadow, not all handed back.
        assert!(shadowed_lines >= 5, "{shadowed_lines}");
        assert!(cases.last().and_then(|l| shadowed(l.as_bytes())).is_some());
        // Broken UTF-8 in a long string.
        let mut bytes = cases[0].clone().into_bytes();
        let at = bytes.len() - 10;
        bytes[at] = 0xff;
        assert_eq!(shadowed(&bytes), None);
        assert_eq!(plain(&bytes), "None");
    }

    /// A string read a byte at a time: what the scanners must agree with.
    fn reference(s: &[u8]) -> Option<(usize, bool, bool)> {
        let mut i = 0;
        let (mut compact, mut surrogate) = (true, false);
        loop {
            match *s.get(i)? {
                b'"' => return Some((i, compact, surrogate)),
                b'\\' => match *s.get(i + 1)? {
                    b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'/' => {
                        compact = false;
                        i += 2;
                    }
                    b'u' => {
                        let hex = std::str::from_utf8(s.get(i + 2..i + 6)?).ok()?;
                        let code = u16::from_str_radix(hex, 16).ok()?;
                        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                            return None;
                        }
                        surrogate |= (0xd800..0xe000).contains(&code);
                        compact &= crate::format::escape_len(s, i).is_some();
                        i += 6;
                    }
                    _ => return None,
                },
                b if b < 0x20 => return None,
                _ => i += 1,
            }
        }
    }

    #[test]
    fn the_block_scanner_agrees_with_a_byte_at_a_time() {
        let pieces: [&[u8]; 12] = [
            b"a",
            b"\\",
            b"\"",
            b"n",
            b"u",
            b"0",
            b"d8",
            b"/",
            "\u{e9}".as_bytes(),
            b"\x01",
            b"    ",
            b"\\\\",
        ];
        let mut rng = fastrand::Rng::with_seed(11);
        for round in 0..200_000 {
            let mut s = Vec::new();
            let len = rng.usize(0..if round % 10 == 0 { 400 } else { 140 });
            while s.len() < len {
                // Mostly plain text, as tool output is.
                let piece = if rng.u8(..) < 200 {
                    &b"abcdefgh"[..]
                } else {
                    pieces[rng.usize(..pieces.len())]
                };
                s.extend_from_slice(piece);
            }
            if rng.bool() {
                s.push(b'"');
                s.extend_from_slice(b"tail\\\"");
            }
            let want = reference(&s);
            let got = scan_string(&s, 0);
            assert_eq!(
                got.as_ref().map(|r| (r.end, r.compact, r.surrogate)),
                want,
                "{:?}",
                String::from_utf8_lossy(&s)
            );
            if let (Some(got), Some((end, ..))) = (got, want)
                && !s[..end].is_ascii()
            {
                assert!(!got.ascii, "{:?}", String::from_utf8_lossy(&s));
            }
        }
    }

    #[test]
    fn strings_are_scanned_as_json_reads_them() {
        let scan = |s: &str| scan_string(s.as_bytes(), 0).map(|r| (r.end, r.compact, r.ascii));
        let pad = "a".repeat(40);
        assert_eq!(scan("\""), Some((0, true, true)));
        assert_eq!(scan(&format!("{pad}\"")), Some((40, true, true)));
        assert_eq!(
            scan(&format!("{pad}\\\"{pad}\\n\"")),
            Some((84, true, true))
        );
        assert_eq!(scan(&format!("{pad}é\"")), Some((42, true, false)));
        assert_eq!(scan(&format!("{pad}\\/\"")), Some((42, false, true)));
        assert_eq!(
            scan(&format!("{pad}\\u001f\\u00e9\"")),
            Some((52, false, true))
        );
        assert_eq!(scan(&format!("{pad}\\u001f\"")), Some((46, true, true)));
        assert_eq!(scan(&format!("{pad}\\\\\"")), Some((42, true, true)));
        assert_eq!(scan(&format!("{pad}\u{7f}\"")), Some((41, true, true)));
        for bad in ["\u{1f}\"", "\\x\"", "\\u12\"", "\\u12g4\"", "abc", "\\"] {
            assert_eq!(scan(&format!("{pad}{bad}")), None, "{bad:?}");
            assert_eq!(scan(bad), None, "{bad:?}");
        }
        let surrogate = scan_string(format!("{pad}\\uDbff\"").as_bytes(), 0);
        assert!(surrogate.is_some_and(|s| s.surrogate));
        // Every position of the special byte within a vector and after it.
        for n in 0..40 {
            let s = format!("{}\"", "b".repeat(n));
            assert_eq!(scan(&s), Some((n, true, true)), "{n}");
        }
    }
}
