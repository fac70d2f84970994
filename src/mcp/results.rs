//! Budgeting a `tools/call` result with the core that serves `budget/apply`.
//!
//! A result is handed to [`crate::methods::budget_apply`], on the front's
//! session, as the one-call conversation it is:
//!
//! ```text
//! {"role":"assistant","content":[{"type":"tool_use","id":ID,"name":TOOL,"input":{}}]}
//! {"role":"user","content":[{"type":"tool_result","tool_use_id":ID,"content":C}]}
//! ```
//!
//! where C is the text itself when the result is a single plain text item
//! (saved as `.txt`, byte for byte) and the MCP `content` array otherwise
//! (saved as `.json`). MCP's text items have the same shape as a tool
//! result's text blocks, so the contract's rules apply as written: sizes
//! count text only, a result holding anything but text (an image, audio, an
//! embedded resource, a link) is left whole, `exemptTools` and the limits
//! work by the MCP tool's name.
//!
//! The id is derived from the tool's name and the result itself, so the
//! same output always meets the same decision and yields the same preview,
//! byte for byte, in this run and after a restart (the artifact is then
//! found and reused).
//!
//! `structuredContent` is never changed and never counted: it is data for
//! programs, checked against the tool's `outputSchema` by clients (the
//! official SDKs reject a result whose structured content is missing or
//! does not match), and a preview could not stand in for it. Only `content`
//! — what the model is shown — is budgeted.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::Scope;
use super::saved;
use crate::artifact::{self, ArtifactKind};
use crate::error::Result;
use crate::format::ResultContent;
use crate::methods::Applied;
use crate::protocol::{BudgetApplyParams, Message};

/// Where a server declares, on a tool in `tools/list`, the largest result
/// it means the tool to return whole; honoured as the tool's
/// `maxResultChars` unless `tools.<name>` in the configuration sets one.
pub(super) const MAX_RESULT_SIZE_META: &str = "anthropic/maxResultSizeChars";

/// The first protocol revision with `resource_link` content.
const RESOURCE_LINK_SINCE: &str = "2025-06-18";

/// What budgeting a result did to it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Budgeted {
    /// Its content is now the preview and a link.
    Replaced,
    /// Left exactly as it came.
    Kept,
    /// Budgeting failed after its content was handed over, and the content
    /// went with it: the caller passes on the result as it came.
    Lost,
}

/// Budget `result` (a `tools/call` result from `tool`, under protocol
/// revision `version`) in place.
///
/// The content is moved into the budget core, not copied, and moved back
/// when it is kept: a result of tens of megabytes is held once, parsed,
/// beside the line it came in (its artifact is written from that one copy
/// too), so the front's peak stays near twice the result.
pub(super) async fn budget(
    front: &dyn Scope,
    tool: &str,
    version: Option<&str>,
    result: &mut Map<String, Value>,
) -> Budgeted {
    let Some(items @ Value::Array(_)) = result.get("content") else {
        return Budgeted::Kept;
    };
    // A single plain text item counts as its text, which holds no other
    // kind of content either way.
    if ResultContent::of_value(Some(items)).has_non_text() {
        // Not eligible anywhere (contract step 1): skip the round trip.
        return Budgeted::Kept;
    }
    let Some(content) = take_content(result) else {
        return Budgeted::Kept;
    };
    let id = result_id(tool, &content);
    let (kind, size) = match &content {
        Value::String(text) => (ArtifactKind::Text, text.len()),
        // The bytes the artifact store is given, counted without being
        // written out.
        other => (ArtifactKind::Json, written_len(other)),
    };
    let mut outcome = match apply(front, tool, &id, content).await {
        Ok(outcome) => outcome,
        Err(err) => {
            tracing::warn!(%err, tool, "could not budget a tool result; passed on whole");
            return Budgeted::Lost;
        }
    };
    for failure in &outcome.result.failures {
        tracing::warn!(tool, message = %failure.message, "could not save a tool result; passed on whole");
    }
    // The conversation's second message holds the result, rendered.
    let rendered = outcome
        .result
        .messages
        .get_mut(1)
        .and_then(|m| m.0.pointer_mut("/content/0/content"))
        .map(Value::take);
    let replaced = outcome.changed.get(1).copied().unwrap_or(false);
    let preview = match rendered {
        Some(Value::String(preview)) if replaced => preview,
        Some(content) if !replaced => {
            put_back(result, content);
            return Budgeted::Kept;
        }
        _ => return Budgeted::Lost,
    };
    let uri = saved::uri(front.session(), &id);
    let how = saved::how_to_read(front);
    let mut replaced = vec![json!({"type": "text", "text": preview})];
    if saved::at_least(version, RESOURCE_LINK_SINCE) {
        replaced.push(json!({
            "type": "resource_link",
            "uri": uri,
            "name": artifact::file_name(&id, kind),
            "title": format!("Full output of {tool}"),
            "description": format!("The whole result, saved by toolwire; {how}."),
            "mimeType": saved::mime_type(kind),
            "size": size,
        }));
    } else {
        // Before `resource_link` existed: name the link in text instead.
        replaced.push(json!({"type": "text", "text": format!("Saved output: {uri} ({how})")}));
    }
    result.insert("content".into(), Value::Array(replaced));
    Budgeted::Replaced
}

/// Move a tool result's content out of `result`, in the contract's terms:
/// the text itself for a single plain text item, else the content array
/// as it came. [`put_back`] undoes it.
fn take_content(result: &mut Map<String, Value>) -> Option<Value> {
    let Some(Value::Array(items)) = result.get_mut("content") else {
        return None;
    };
    if let [Value::Object(item)] = items.as_mut_slice()
        && item.len() == 2
        && item.get("type").and_then(Value::as_str) == Some("text")
        && let Some(text @ Value::String(_)) = item.get_mut("text")
    {
        return Some(text.take());
    }
    result.get_mut("content").map(Value::take)
}

/// Put content [`take_content`] moved out back where it was.
fn put_back(result: &mut Map<String, Value>, content: Value) {
    if content.is_string()
        && let Some(text) = result
            .get_mut("content")
            .and_then(|c| c.pointer_mut("/0/text"))
    {
        *text = content;
    } else {
        result.insert("content".into(), content);
    }
}

/// How many bytes `serde_json::to_writer` writes for `value`.
fn written_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}

/// `mcp-` and 32 hex digits of SHA-256 over the tool name and the content:
/// a plain token, so the artifact is named by it.
fn result_id(tool: &str, content: &Value) -> String {
    let mut hash = Sha256::new();
    hash.update(tool.as_bytes());
    hash.update([0]);
    match content {
        Value::String(text) => {
            hash.update(b"t");
            hash.update(text.as_bytes());
        }
        other => {
            hash.update(b"j");
            // The compact JSON text, streamed into the hash unbuilt.
            struct Hashing<'a>(&'a mut Sha256);
            impl std::io::Write for Hashing<'_> {
                fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                    self.0.update(buf);
                    Ok(buf.len())
                }
                fn flush(&mut self) -> std::io::Result<()> {
                    Ok(())
                }
            }
            let _ = serde_json::to_writer(Hashing(&mut hash), other);
        }
    }
    let hex: String = hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("mcp-{hex}")
}

async fn apply(front: &dyn Scope, tool: &str, id: &str, content: Value) -> Result<Applied> {
    // The content is moved into place (`json!` would serialize a copy).
    let mut block = Map::new();
    block.insert("type".into(), "tool_result".into());
    block.insert("tool_use_id".into(), id.into());
    block.insert("content".into(), content);
    let mut user = Map::new();
    user.insert("role".into(), "user".into());
    user.insert("content".into(), Value::Array(vec![Value::Object(block)]));
    let params = BudgetApplyParams {
        link_session: None,
        session_id: front.session().clone(),
        messages: vec![
            Message(json!({
                "role": "assistant",
                "content": [{"type": "tool_use", "id": id, "name": tool, "input": {}}],
            })),
            Message(Value::Object(user)),
        ],
        limits: None,
        preview_mode: None,
        tools: front.declared_max(tool).map(|max| {
            let mut tools = crate::budget::Tools::new();
            tools.insert(
                tool.to_owned(),
                crate::budget::ToolSettings {
                    max_result_chars: Some(Some(max)),
                    preview_mode: None,
                },
            );
            tools
        }),
        // The front speaks Anthropic blocks whatever `format` new sessions get.
        format: Some(crate::format::Format::Anthropic),
        // Each call is applied alone, with no history to clear.
        clearing: None,
        pricing: None,
    };
    crate::methods::budget_apply_queued_tracked(front.registry(), front.config().clone(), params)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_plain_text_item_is_the_text_itself_and_goes_back_in_place() {
        let taken = |content: Value| {
            let mut result = Map::new();
            result.insert("content".into(), content.clone());
            result.insert("isError".into(), false.into());
            let took = take_content(&mut result);
            let mut back = result.clone();
            if let Some(took) = took.clone() {
                put_back(&mut back, took);
            }
            assert_eq!(back.get("content"), Some(&content), "put back as it was");
            took
        };
        let items = json!([{"type": "text", "text": "abc"}]);
        assert_eq!(taken(items), Some(json!("abc")));
        let annotated = json!([{"type": "text", "text": "abc", "annotations": {"priority": 1}}]);
        assert_eq!(taken(annotated.clone()), Some(annotated));
        let two = json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        assert_eq!(taken(two.clone()), Some(two));
        assert_eq!(taken(json!("not an array")), None);
    }

    #[test]
    fn the_written_length_is_what_serde_json_writes() {
        let value = json!([{"type": "text", "text": "a \"quoted\" \u{1F600}\n"}, 1.5e3]);
        assert_eq!(
            written_len(&value),
            serde_json::to_vec(&value).unwrap().len()
        );
    }

    #[test]
    fn ids_are_plain_tokens_that_tell_tools_and_shapes_apart() {
        let a = result_id("echo", &json!("x"));
        assert!(a.starts_with("mcp-") && a.len() == 36);
        assert_eq!(a, result_id("echo", &json!("x")));
        assert_ne!(a, result_id("other", &json!("x")));
        assert_ne!(a, result_id("echo", &json!(["x"])));
    }

    #[test]
    fn dated_versions_compare_and_others_count_as_newer() {
        assert!(!saved::at_least(Some("2025-03-26"), RESOURCE_LINK_SINCE));
        assert!(saved::at_least(Some("2025-11-25"), RESOURCE_LINK_SINCE));
        assert!(saved::at_least(Some("draft"), RESOURCE_LINK_SINCE));
        assert!(saved::at_least(None, RESOURCE_LINK_SINCE));
        assert!(!saved::is_dated("2025-3-26"));
    }
}
