//! Writing a changed conversation back into the request body it came from,
//! changing only the bytes of what changed.
//!
//! Providers cache prompts by byte prefix, so every byte the agent sent
//! that toolwire did not mean to change must reach the provider as sent:
//! whitespace, key order, number spellings, string escapes. The body is
//! never re-serialized; each changed value's span in the original text is
//! replaced by the compact JSON of its new value. Where an object keeps its
//! keys or an array its length, only the children that differ are
//! replaced, so a replaced tool result changes the bytes of that result's
//! content and nothing else. This module knows no provider field names: it
//! compares two JSON trees.
//!
//! The body is parsed once. Spans are found afterwards by a flat scan of
//! text already known to be valid JSON ([`Spans`]), which skips strings by
//! searching for their closing quote rather than reading them; only the
//! values on the path to a change are scanned, and a changed element of
//! the conversation is compared with its new value as its text is read
//! ([`diff_raw`]), not parsed again.

use std::ops::Range;

use serde_json::Value;

/// A body that is not one JSON object, or whose conversation field is not
/// an array.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

/// The request body, parsed once, with the span of its conversation.
pub struct Body<'a> {
    text: &'a str,
    /// The whole body as a value (keys in order); the conversation is
    /// missing from it once taken ([`Body::take_conversation`]).
    pub value: Value,
    /// The span of the conversation member's value in `text`, when present.
    conversation: Option<Range<usize>>,
}

impl<'a> Body<'a> {
    /// Parse `text` and locate the value of the top-level `key`.
    pub fn parse(text: &'a str, key: &str) -> Result<Body<'a>, BodyError> {
        // Nesting as deep as the JSON-RPC face accepts (a tool input the
        // model nested hundreds of levels is still a conversation to
        // budget), large bodies' long strings kept from serde_json.
        let value: Value = crate::json::request_from_slice(text.as_bytes()).map_err(malformed)?;
        if !value.is_object() {
            return Err(BodyError("the request body is not a JSON object".into()));
        }
        // Valid JSON from here on: the scan cannot go astray.
        let whole = trimmed(text);
        let members = Spans(text).members(whole).ok_or_else(unscannable)?;
        // A repeated key: JSON parsers keep the last one, and so do we.
        let conversation = members
            .into_iter()
            .rev()
            .find(|(k, _)| key_is(&text[k.clone()], key))
            .map(|(_, v)| v);
        Ok(Body {
            text,
            value,
            conversation,
        })
    }

    /// The conversation array, if the body has one.
    pub fn conversation(&self, key: &str) -> Option<&Vec<Value>> {
        self.value.get(key).and_then(Value::as_array)
    }

    /// The conversation array moved out of the parsed body (no copy), if
    /// the body has one.
    pub fn take_conversation(&mut self, key: &str) -> Option<Vec<Value>> {
        match self.value.get_mut(key) {
            Some(Value::Array(items)) => Some(std::mem::take(items)),
            _ => None,
        }
    }

    /// The conversation as sent, read again from the body's text (for the
    /// rare paths that need it after [`Body::take_conversation`]).
    pub fn original_conversation(&self) -> Result<Vec<Value>, BodyError> {
        let range = self.conversation_span()?;
        crate::json::request_from_slice(self.text[range].as_bytes())
            .map_err(malformed)
            .and_then(|value| match value {
                Value::Array(items) => Ok(items),
                _ => Err(no_conversation()),
            })
    }

    fn conversation_span(&self) -> Result<Range<usize>, BodyError> {
        self.conversation.clone().ok_or_else(no_conversation)
    }

    /// The body with the conversation replaced by `new`, every unchanged
    /// byte as it was. `old` is the conversation as parsed from this body.
    pub fn with_conversation(&self, old: &[Value], new: &[Value]) -> Result<String, BodyError> {
        let range = self.conversation_span()?;
        let mut edits = Vec::new();
        diff_array(self.text, range, old, new, &mut edits)?;
        Ok(apply(self.text, edits))
    }

    /// The body with the conversation replaced by `new`, which has the
    /// conversation's length and differs from it only in the elements
    /// `changed` marks: only those are read again and compared, every other
    /// byte is as it was. `None` when nothing changed (the body as sent).
    pub fn with_changes(
        &self,
        new: &[Value],
        changed: &[bool],
    ) -> Result<Option<String>, BodyError> {
        if !changed.iter().any(|&c| c) {
            return Ok(None);
        }
        let range = self.conversation_span()?;
        let spans = Spans(self.text);
        let items = spans.elements(range).ok_or_else(unscannable)?;
        if items.len() != new.len() || changed.len() != new.len() {
            return Err(BodyError("the conversation changed under the proxy".into()));
        }
        let mut edits = Vec::new();
        for ((item, n), _) in items.into_iter().zip(new).zip(changed).filter(|(_, c)| **c) {
            diff_raw(self.text, item, n, &mut edits)?;
        }
        Ok(Some(apply(self.text, edits)))
    }
}

/// Replacements of byte ranges of `text`, in order, never overlapping.
type Edits = Vec<(Range<usize>, String)>;

fn apply(text: &str, mut edits: Edits) -> String {
    edits.sort_by_key(|(r, _)| r.start);
    // Its exact size: budgeting mostly shrinks a body, and a buffer of the
    // body's size would be one the allocator maps afresh (and the kernel
    // zeroes page by page) for every large request.
    let size = edits.iter().fold(text.len(), |size, (range, new)| {
        size - range.len() + new.len()
    });
    let mut out = String::with_capacity(size);
    let mut at = 0;
    for (range, new) in edits {
        out.push_str(&text[at..range.start]);
        out.push_str(&new);
        at = range.end;
    }
    out.push_str(&text[at..]);
    out
}

fn diff(
    text: &str,
    range: Range<usize>,
    old: &Value,
    new: &Value,
    edits: &mut Edits,
) -> Result<(), BodyError> {
    if old == new {
        return Ok(());
    }
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if o.keys().eq(n.keys()) => {
            let members = Spans(text).members(range.clone()).ok_or_else(unscannable)?;
            // Duplicate keys would make spans and values disagree.
            if members.len() != o.len() {
                edits.push((range, compact(new)?));
                return Ok(());
            }
            for ((_, span), (o, n)) in members.into_iter().zip(o.values().zip(n.values())) {
                diff(text, span, o, n, edits)?;
            }
            Ok(())
        }
        (Value::Array(o), Value::Array(n)) => diff_array(text, range, o, n, edits),
        _ => {
            edits.push((range, compact(new)?));
            Ok(())
        }
    }
}

/// [`diff`] against the old value's text instead of its parsed value. A
/// changed element is mostly the long result budgeting replaced: reading
/// it into a value again only to find that it differs from its preview
/// cost about as much as parsing it the first time, on every request that
/// puts back a preview. Objects whose keys are the new value's, in order,
/// and arrays of its length are followed member by member; a string is
/// compared as it is read, up to its first difference; anything else (a
/// key order that differs, a number, a `\u` escape before a difference) is
/// read into a value and compared as [`diff`] does, so the edits are the
/// ones [`diff`] makes of the parsed element.
fn diff_raw(
    text: &str,
    range: Range<usize>,
    new: &Value,
    edits: &mut Edits,
) -> Result<(), BodyError> {
    let spans = Spans(text);
    match (text.as_bytes().get(range.start), new) {
        (Some(b'{'), Value::Object(n)) => {
            let members = spans.members(range.clone()).ok_or_else(unscannable)?;
            // The new keys are distinct: matching them one for one, the
            // text has no repeated key either.
            let same_keys = members.len() == n.len()
                && members
                    .iter()
                    .zip(n.keys())
                    .all(|((key, _), name)| key_is(&text[key.clone()], name));
            if same_keys {
                for ((_, span), value) in members.into_iter().zip(n.values()) {
                    diff_raw(text, span, value, edits)?;
                }
                return Ok(());
            }
        }
        (Some(b'['), Value::Array(n)) => {
            let items = spans.elements(range.clone()).ok_or_else(unscannable)?;
            if items.len() == n.len() {
                for (span, value) in items.into_iter().zip(n) {
                    diff_raw(text, span, value, edits)?;
                }
                return Ok(());
            }
        }
        (Some(b'"'), Value::String(n)) => {
            if let Some(same) = string_is(&text[range.clone()], n) {
                if !same {
                    edits.push((range, compact(new)?));
                }
                return Ok(());
            }
        }
        _ => {}
    }
    // Long strings read as the body's were.
    let old: Value =
        crate::json::lifted::from_slice(text[range.clone()].as_bytes()).map_err(malformed)?;
    diff(text, range, &old, new, edits)
}

/// Whether the JSON string `raw` (quotes included, valid JSON) spells `s`,
/// read only up to their first difference; `None` when a `\u` escape comes
/// first (left to a parser, with its surrogate pairs).
fn string_is(raw: &str, s: &str) -> Option<bool> {
    let raw = raw.as_bytes();
    let inner = raw.get(1..raw.len().checked_sub(1)?)?;
    let s = s.as_bytes();
    let (mut i, mut j) = (0, 0);
    while i < inner.len() {
        let (byte, step) = match inner[i] {
            b'\\' => {
                let escaped = match *inner.get(i + 1)? {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    _ => return None,
                };
                (escaped, 2)
            }
            byte => (byte, 1),
        };
        if s.get(j) != Some(&byte) {
            return Some(false);
        }
        i += step;
        j += 1;
    }
    Some(j == s.len())
}

fn diff_array(
    text: &str,
    range: Range<usize>,
    old: &[Value],
    new: &[Value],
    edits: &mut Edits,
) -> Result<(), BodyError> {
    let items = Spans(text)
        .elements(range.clone())
        .ok_or_else(unscannable)?;
    if items.len() != old.len() {
        return Err(BodyError("the conversation changed under the proxy".into()));
    }
    if old.len() == new.len() {
        for ((span, o), n) in items.into_iter().zip(old).zip(new) {
            diff(text, span, o, n, edits)?;
        }
        return Ok(());
    }
    // Elements were dropped or added (a repair): keep the raw text of every
    // element found unchanged, in order, and write the others anew.
    let mut out = String::from("[");
    let mut next = 0;
    for (i, n) in new.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match (next..old.len()).find(|&j| old[j] == *n) {
            Some(j) => {
                out.push_str(&text[items[j].clone()]);
                next = j + 1;
            }
            None => out.push_str(&compact(n)?),
        }
    }
    out.push(']');
    edits.push((range, out));
    Ok(())
}

fn compact(value: &Value) -> Result<String, BodyError> {
    serde_json::to_string(value).map_err(|err| BodyError(format!("encoding the request: {err}")))
}

fn malformed(err: crate::json::ParseError) -> BodyError {
    BodyError(format!("the request body is not valid JSON: {err}"))
}

fn unscannable() -> BodyError {
    BodyError("the request body could not be scanned".into())
}

fn no_conversation() -> BodyError {
    BodyError("the request has no conversation to change".into())
}

/// `text` without the whitespace JSON allows around a value.
fn trimmed(text: &str) -> Range<usize> {
    let start = text.len() - text.trim_start_matches(is_space).len();
    let end = text.trim_end_matches(is_space).len();
    start..end.max(start)
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Whether the raw key `raw` (quotes included) names `key`, escapes read.
fn key_is(raw: &str, key: &str) -> bool {
    let inner = raw.get(1..raw.len().saturating_sub(1)).unwrap_or("");
    if !inner.contains('\\') {
        return inner == key;
    }
    serde_json::from_str::<String>(raw).is_ok_and(|k| k == key)
}

/// Spans of the members of objects and the elements of arrays in a text
/// that is valid JSON (parsed already). Never recurses (nesting depth does
/// not matter) and never panics: a text it cannot follow gives `None`.
struct Spans<'a>(&'a str);

impl Spans<'_> {
    /// `(key, value)` spans of the members of the object at `range`, in order.
    fn members(&self, range: Range<usize>) -> Option<Vec<(Range<usize>, Range<usize>)>> {
        let b = self.0.as_bytes();
        let mut at = self.open(range.clone(), b'{')?;
        let mut out = Vec::new();
        if b.get(at) == Some(&b'}') {
            return (at + 1 == range.end).then_some(out);
        }
        loop {
            let key_end = self.value_end(at)?;
            let key = at..key_end;
            at = self.skip_space(key_end);
            if b.get(at) != Some(&b':') {
                return None;
            }
            at = self.skip_space(at + 1);
            let end = self.value_end(at)?;
            out.push((key, at..end));
            at = self.skip_space(end);
            match b.get(at)? {
                b',' => at = self.skip_space(at + 1),
                b'}' => return (at + 1 == range.end).then_some(out),
                _ => return None,
            }
        }
    }

    /// Spans of the elements of the array at `range`, in order.
    fn elements(&self, range: Range<usize>) -> Option<Vec<Range<usize>>> {
        let b = self.0.as_bytes();
        let mut at = self.open(range.clone(), b'[')?;
        let mut out = Vec::new();
        if b.get(at) == Some(&b']') {
            return (at + 1 == range.end).then_some(out);
        }
        loop {
            let end = self.value_end(at)?;
            out.push(at..end);
            at = self.skip_space(end);
            match b.get(at)? {
                b',' => at = self.skip_space(at + 1),
                b']' => return (at + 1 == range.end).then_some(out),
                _ => return None,
            }
        }
    }

    /// Past the opening bracket of the value at `range` and its spaces.
    fn open(&self, range: Range<usize>, bracket: u8) -> Option<usize> {
        let b = self.0.as_bytes();
        (range.start < range.end && range.end <= b.len() && b[range.start] == bracket)
            .then(|| self.skip_space(range.start + 1))
    }

    fn skip_space(&self, mut at: usize) -> usize {
        let b = self.0.as_bytes();
        while b
            .get(at)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            at += 1;
        }
        at
    }

    /// Where the value starting at `at` ends.
    fn value_end(&self, at: usize) -> Option<usize> {
        let b = self.0.as_bytes();
        match b.get(at)? {
            b'"' => self.string_end(at),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut i = at;
                loop {
                    match b.get(i)? {
                        b'"' => {
                            i = self.string_end(i)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                return Some(i + 1);
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            _ => {
                let len = b[at..]
                    .iter()
                    .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(b.len() - at);
                (len > 0).then_some(at + len)
            }
        }
    }

    /// Past the closing quote of the string whose opening quote is at `at`.
    fn string_end(&self, at: usize) -> Option<usize> {
        let b = self.0.as_bytes();
        let mut i = at + 1;
        // Tool output escapes a newline every line but rarely holds a
        // quote: searching for quotes alone goes much further per step
        // than stopping at every backslash.
        loop {
            i += memchr::memchr(b'"', b.get(i..)?)?;
            // Escaped when an odd number of backslashes stand before it
            // (in valid JSON a backslash is an escape or escaped; the
            // string's opening quote ends the count).
            let backslashes = b[at + 1..i]
                .iter()
                .rev()
                .take_while(|&&c| c == b'\\')
                .count();
            if backslashes % 2 == 0 {
                return Some(i + 1);
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BODY: &str = r#"{ "model" : "m",
  "messages": [ {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"long\u0020text","x":1.50}]},
     {"content": "hi \/ there", "role": "assistant"} ],
  "stream":true }"#;

    #[test]
    fn only_the_changed_value_changes() {
        let body = Body::parse(BODY, "messages").unwrap();
        let old = body.conversation("messages").unwrap().clone();
        let mut new = old.clone();
        new[0]["content"][0]["content"] = json!("short");
        let out = body.with_conversation(&old, &new).unwrap();
        assert_eq!(out, BODY.replace(r#""long\u0020text""#, r#""short""#));
        // Nothing changed: the very same bytes.
        assert_eq!(body.with_conversation(&old, &old).unwrap(), BODY);
    }

    /// A conversation nested past serde_json's default 128 levels is read
    /// and written back like any other (#32 item 8).
    #[test]
    fn deep_nesting_is_spliced_like_any_other() {
        let deep = format!("{}{}", "[".repeat(1_000), "]".repeat(1_000));
        let text = format!(
            r#"{{"messages": [{{"role":"assistant","content":[{{"type":"tool_use","id":"a","input":{{"v":{deep}}}}}]}}, {{"role":"user","content":"long"}}], "x": {deep}}}"#
        );
        let body = Body::parse(&text, "messages").unwrap();
        let old = body.conversation("messages").unwrap().clone();
        let mut new = old.clone();
        new[1]["content"] = json!("short");
        let out = body.with_conversation(&old, &new).unwrap();
        assert_eq!(out, text.replace(r#""long""#, r#""short""#));
        let dropped = body.with_conversation(&old, &new[..1]).unwrap();
        assert!(dropped.starts_with(r#"{"messages": [{"role":"assistant""#));
        assert!(dropped.contains(&format!(r#"}}]}}], "x": {deep}}}"#)));
    }

    #[test]
    fn dropped_elements_keep_the_others_raw() {
        let body = Body::parse(BODY, "messages").unwrap();
        let old = body.conversation("messages").unwrap().clone();
        let new = vec![old[1].clone()];
        let out = body.with_conversation(&old, &new).unwrap();
        assert!(out.contains(r#""messages": [{"content": "hi \/ there", "role": "assistant"}],"#));
        assert!(out.ends_with("\n  \"stream\":true }"));
    }

    /// Budgeting marks the elements it changed: only they are read again,
    /// and the body is the one the whole comparison gives; nothing marked,
    /// the body as sent.
    #[test]
    fn marked_changes_splice_as_the_whole_comparison_does() {
        let mut body = Body::parse(BODY, "messages").unwrap();
        let old = body.conversation("messages").unwrap().clone();
        let mut new = body.take_conversation("messages").unwrap();
        assert_eq!(new, old);
        assert!(body.conversation("messages").unwrap().is_empty());
        assert_eq!(body.with_changes(&new, &[false, false]).unwrap(), None);
        new[0]["content"][0]["content"] = json!("short");
        let whole = body.with_conversation(&old, &new).unwrap();
        assert_eq!(
            body.with_changes(&new, &[true, false]).unwrap().as_deref(),
            Some(whole.as_str())
        );
        assert_eq!(
            body.with_changes(&new, &[true, true]).unwrap().as_deref(),
            Some(whole.as_str())
        );
        assert_eq!(body.original_conversation().unwrap(), old);
        assert!(body.with_changes(&new[..1], &[true]).is_err());
    }

    /// Comparing a changed element's text with its new value gives the
    /// edits parsing it again gives: through escapes (equal or not, `\u`
    /// ones too), numbers spelled another way, keys reordered or repeated,
    /// arrays grown, and a value of another type.
    #[test]
    fn text_compared_in_place_edits_what_parsing_edits() {
        let text = r#"{"messages": [{"role":"user","content":[{"type":"tool_result","tool_use_id":"a\/b","content":"line\none \"q\" \u00e9\ud83d\ude00 end","n":1.50,"k":[1,2],"d":{"x":1,"x":2}}]}]}"#;
        let mut body = Body::parse(text, "messages").unwrap();
        let old = body.original_conversation().unwrap();
        let _ = body.take_conversation("messages");
        let block = |f: &dyn Fn(&mut Value)| {
            let mut new = old.clone();
            f(&mut new[0]["content"][0]);
            new
        };
        let cases: Vec<Vec<Value>> = vec![
            old.clone(),
            block(&|b| b["content"] = json!("<persisted-output>short")),
            block(&|b| b["content"] = json!("line\none \"q\" \u{e9}\u{1f600} end")),
            block(&|b| b["content"] = json!("line\none \"q\" \u{e9}\u{1f600} enD")),
            block(&|b| b["content"] = json!("line\none \"q\"")),
            block(&|b| b["content"] = json!([{"type": "text", "text": "x"}])),
            block(&|b| b["tool_use_id"] = json!("a/b")),
            block(&|b| b["tool_use_id"] = json!("a/c")),
            block(&|b| b["n"] = json!(1.5)),
            block(&|b| b["n"] = json!(2)),
            block(&|b| b["k"] = json!([1, 2, 3])),
            block(&|b| b["k"] = json!([1, 3])),
            block(&|b| b["d"] = json!({"x": 2})),
            block(&|b| {
                let content = b["content"].clone();
                b.as_object_mut().unwrap().remove("content");
                b["content"] = content;
            }),
        ];
        for (i, new) in cases.iter().enumerate() {
            let whole = body.with_conversation(&old, new).unwrap();
            let marked = body.with_changes(new, &[true]).unwrap().unwrap();
            assert_eq!(marked, whole, "case {i}");
        }
    }

    /// The scan finds the spans serde_json finds, through escapes, brackets
    /// inside strings, numbers, literals and spaces, and the conversation
    /// under an escaped or repeated key (the last one, as parsers keep).
    #[test]
    fn the_scan_finds_what_serde_json_finds() {
        let text = r#" { "a\"]}" : [ 1 , -2.5e3,true,null , "x\\", "\u0022[{", {"k":"}"} ,[[]] ] ,
            "m\u0065ssages":[{"v":1}], "messages" : [ {"v" : "\"}{["} , [ ] ] } "#;
        let body = Body::parse(text, "messages").unwrap();
        let old = body.conversation("messages").unwrap().clone();
        assert_eq!(old, vec![json!({"v": "\"}{["}), json!([])]);
        let mut new = old.clone();
        new[0]["v"] = json!("y");
        let out = body.with_changes(&new, &[true, false]).unwrap().unwrap();
        assert_eq!(out, text.replace(r#""\"}{[""#, r#""y""#));
        let spans = Spans(text);
        let members = spans.members(trimmed(text)).unwrap();
        let keys: Vec<&str> = members.iter().map(|(k, _)| &text[k.clone()]).collect();
        assert_eq!(keys, [r#""a\"]}""#, r#""m\u0065ssages""#, r#""messages""#]);
        let first: Vec<&str> = spans
            .elements(members[0].1.clone())
            .unwrap()
            .into_iter()
            .map(|r| &text[r])
            .collect();
        let raw: Vec<&serde_json::value::RawValue> =
            serde_json::from_str(&text[members[0].1.clone()]).unwrap();
        assert_eq!(first, raw.iter().map(|r| r.get()).collect::<Vec<_>>());
        // A key spelled with escapes is the key it spells.
        let escaped = Body::parse(r#"{"m\u0065ssages": [1], "x": 2}"#, "messages").unwrap();
        assert_eq!(escaped.original_conversation().unwrap(), vec![json!(1)]);
    }
}
