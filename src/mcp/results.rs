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
use crate::format::{Dialect, ResultContent, anthropic::Anthropic};
use crate::protocol::{BudgetApplyParams, BudgetApplyResult, Message};

/// Where a server declares, on a tool in `tools/list`, the largest result
/// it means the tool to return whole; honoured as the tool's
/// `maxResultChars` unless `tools.<name>` in the configuration sets one.
pub(super) const MAX_RESULT_SIZE_META: &str = "anthropic/maxResultSizeChars";

/// The first protocol revision with `resource_link` content.
const RESOURCE_LINK_SINCE: &str = "2025-06-18";

/// Budget `result` (a `tools/call` result from `tool`, under protocol
/// revision `version`) in place. Returns whether it was replaced.
pub(super) async fn budget(
    front: &dyn Scope,
    tool: &str,
    version: Option<&str>,
    result: &mut Map<String, Value>,
) -> bool {
    let Some(Value::Array(items)) = result.get("content") else {
        return false;
    };
    let content = tool_result_content(items);
    if ResultContent::of_value(Some(&content)).has_non_text() {
        // Not eligible anywhere (contract step 1): skip the round trip.
        return false;
    }
    let id = result_id(tool, &content);
    let outcome = match apply(front, tool, &id, content.clone()).await {
        Ok(outcome) => outcome,
        Err(err) => {
            tracing::warn!(%err, tool, "could not budget a tool result; passed on whole");
            return false;
        }
    };
    for failure in &outcome.failures {
        tracing::warn!(tool, message = %failure.message, "could not save a tool result; passed on whole");
    }
    let rendered = outcome
        .messages
        .get(1)
        .and_then(|m| Anthropic.result_value(&m.0, 0));
    let Some(Value::String(preview)) = rendered.filter(|r| **r != content) else {
        return false;
    };
    let (kind, size) = match &content {
        Value::String(text) => (ArtifactKind::Text, text.len()),
        // The bytes the artifact store was given.
        other => (
            ArtifactKind::Json,
            serde_json::to_vec(other).map_or(0, |v| v.len()),
        ),
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
    true
}

/// A tool result's content in the contract's terms: the text itself for a
/// single plain text item, else the content array as it came.
fn tool_result_content(items: &[Value]) -> Value {
    if let [Value::Object(item)] = items
        && item.len() == 2
        && item.get("type").and_then(Value::as_str) == Some("text")
        && let Some(Value::String(text)) = item.get("text")
    {
        return Value::String(text.clone());
    }
    Value::Array(items.to_vec())
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
            hash.update(other.to_string().as_bytes());
        }
    }
    let hex: String = hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("mcp-{hex}")
}

async fn apply(
    front: &dyn Scope,
    tool: &str,
    id: &str,
    content: Value,
) -> Result<BudgetApplyResult> {
    let params = BudgetApplyParams {
        link_session: None,
        session_id: front.session().clone(),
        messages: vec![
            Message(json!({
                "role": "assistant",
                "content": [{"type": "tool_use", "id": id, "name": tool, "input": {}}],
            })),
            Message(json!({
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": id, "content": content}],
            })),
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
    crate::methods::budget_apply_queued(front.registry(), front.config().clone(), params).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_plain_text_item_is_the_text_itself() {
        let items = vec![json!({"type": "text", "text": "abc"})];
        assert_eq!(tool_result_content(&items), json!("abc"));
        let annotated =
            vec![json!({"type": "text", "text": "abc", "annotations": {"priority": 1}})];
        assert_eq!(
            tool_result_content(&annotated),
            Value::Array(annotated.clone())
        );
        let two = vec![
            json!({"type": "text", "text": "a"}),
            json!({"type": "text", "text": "b"}),
        ];
        assert_eq!(tool_result_content(&two), Value::Array(two.clone()));
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
