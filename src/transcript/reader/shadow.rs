//! The head of an Anthropic transcript line whose tool output is long, read
//! without running the output through serde_json.
//!
//! serde_json checks a string byte by byte and stops at every escape, and
//! log output has an escaped newline every line: that scan was most of
//! what reading a transcript cost. Here each string of the line is scanned
//! 64 bytes at a time instead (`crate::json::strings`), and the long ones
//! are left out of a *shadow* of the line: the same bytes, with each long
//! string emptied (`"…"` becomes `""`). serde_json parses the shadow as
//! it would the line, and what it finds is mapped back onto the line.
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
use crate::json::strings::scan_string;

use super::Head;

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
    with(line, |shadow, rebase| {
        let head = super::parse_head_plain(crate::format::Format::Anthropic, shadow)?;
        let Head::Message(skim) = head else {
            return None;
        };
        rebase.skim(skim).map(Head::Message)
    })
}

/// `f` of `line`'s shadow and the map from it back onto the line; `None`
/// when the line has no long string or one the shadow cannot stand in for
/// (then the caller reads the line itself). The shadow's bytes are checked
/// by nothing here but the scan of the long strings: the caller's parse of
/// the shadow checks the rest.
pub(super) fn with<'l, R>(
    line: &'l [u8],
    f: impl FnOnce(&[u8], &Rebase<'l, '_>) -> Option<R>,
) -> Option<R> {
    SHADOW.with(|cell| {
        let mut cell = cell.try_borrow_mut().ok()?;
        let (shadow, holes) = &mut *cell;
        shadow.clear();
        holes.clear();
        if !make_shadow(line, shadow, holes) {
            return None;
        }
        let rebase = Rebase {
            line,
            shadow,
            holes,
        };
        f(shadow, &rebase)
    })
}

/// Fill `shadow` with `line`, its long strings emptied; `false` when there
/// is none, or one that must go to the ordinary parse.
fn make_shadow(line: &[u8], shadow: &mut Vec<u8>, holes: &mut Vec<Hole>) -> bool {
    let mut copied = 0;
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'"', &line[at..]) {
        let open = at + i;
        // Most strings (keys, ids, short values) hold no backslash: their
        // end is the first quote after them. Such a string is shorter than
        // `LONG` and stays in the shadow, where the parse checks it.
        let near = &line[open + 1..line.len().min(open + LONG)];
        if let Some(j) = memchr::memchr2(b'"', b'\\', near)
            && near[j] == b'"'
        {
            let end = open + 1 + j;
            at = end + 1;
            continue;
        }
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
pub(super) struct Rebase<'l, 's> {
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
    pub(super) fn content(&self, raw: &[u8]) -> Option<(&'l [u8], Option<Digest>)> {
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
                Some(Original::Value(_) | Original::Digested(_)) => return None,
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
        crate::json::strings::repeated_past(text, LONG)
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
}
