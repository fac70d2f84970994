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

use std::ops::Range;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// A body that is not one JSON object, or whose conversation field is not
/// an array.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

/// The request body, parsed once, with the raw text of its conversation.
pub struct Body<'a> {
    text: &'a str,
    /// The whole body as a value (keys in order).
    pub value: Value,
    /// The span of the conversation array in `text`, when present.
    conversation: Option<Range<usize>>,
}

impl<'a> Body<'a> {
    /// Parse `text` and locate the array under the top-level `key`.
    pub fn parse(text: &'a str, key: &str) -> Result<Body<'a>, BodyError> {
        // Nesting as deep as the JSON-RPC face accepts (a tool input the
        // model nested hundreds of levels is still a conversation to
        // budget), large bodies' long strings kept from serde_json.
        let value: Value = crate::json::request_from_slice(text.as_bytes()).map_err(malformed)?;
        if !value.is_object() {
            return Err(BodyError("the request body is not a JSON object".into()));
        }
        let entries: Entries = crate::json::from_slice(text.as_bytes()).map_err(malformed)?;
        // A repeated key: JSON parsers keep the last one, and so do we.
        let conversation = entries
            .0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, raw)| span(text, raw));
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

    /// The body with the conversation replaced by `new`, every unchanged
    /// byte as it was. `old` is the conversation as parsed from this body.
    pub fn with_conversation(&self, old: &[Value], new: &[Value]) -> Result<String, BodyError> {
        let Some(range) = self.conversation.clone() else {
            return Err(BodyError(
                "the request has no conversation to change".into(),
            ));
        };
        let mut edits = Vec::new();
        diff_array(self.text, range, old, new, &mut edits)?;
        Ok(apply(self.text, edits))
    }
}

/// Replacements of byte ranges of `text`, in order, never overlapping.
type Edits = Vec<(Range<usize>, String)>;

fn apply(text: &str, mut edits: Edits) -> String {
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(text.len());
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
    let raw = &text[range.clone()];
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if o.keys().eq(n.keys()) => {
            let entries: Entries = crate::json::from_slice(raw.as_bytes()).map_err(malformed)?;
            // Duplicate keys would make spans and values disagree.
            if entries.0.len() != o.len() {
                edits.push((range, compact(new)?));
                return Ok(());
            }
            for ((_, raw), (o, n)) in entries.0.iter().zip(o.values().zip(n.values())) {
                diff(text, span(text, raw), o, n, edits)?;
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

fn diff_array(
    text: &str,
    range: Range<usize>,
    old: &[Value],
    new: &[Value],
    edits: &mut Edits,
) -> Result<(), BodyError> {
    let items: Vec<&RawValue> =
        crate::json::from_slice(text[range.clone()].as_bytes()).map_err(malformed)?;
    if items.len() != old.len() {
        return Err(BodyError("the conversation changed under the proxy".into()));
    }
    if old.len() == new.len() {
        for ((raw, o), n) in items.iter().zip(old).zip(new) {
            diff(text, span(text, raw), o, n, edits)?;
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
                out.push_str(items[j].get());
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

/// Where `raw` (borrowed from `text`) lies in `text`.
fn span(text: &str, raw: &RawValue) -> Range<usize> {
    let start = raw.get().as_ptr() as usize - text.as_ptr() as usize;
    start..start + raw.get().len()
}

/// An object's members in order, each value as its raw text.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
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
}
