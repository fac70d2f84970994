//! OpenAI Chat Completions: `{role, content, tool_calls?, tool_call_id?}`.
//! A call is an entry of an assistant message's `tool_calls` (`id`,
//! `function.name`); a result is a whole `{role: "tool", tool_call_id,
//! content}` message, its text the `content` string or its `text` parts.
//!
//! Item indexes of an assistant message: 0 is its content (text,
//! refusal, audio), `1 + i` is `tool_calls[i]`. Every other message is one
//! item. `system` and `developer` messages count on the user side: the API
//! wants the tool messages directly after the assistant message that asked
//! for them, so anything else there is an interruption.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::anthropic::other;
use super::{Dialect, Fault, Format, Item, ItemKind, ResultContent, Side, Skim};
use crate::error::{Error, Result};

pub struct OpenaiChat;

const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

fn role(message: &Value) -> &str {
    message
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn tool_calls(message: &Value) -> &[Value] {
    match message.get("tool_calls") {
        Some(Value::Array(calls)) => calls,
        _ => &[],
    }
}

/// Whether an assistant message says anything besides its calls.
fn has_content(message: &Value) -> bool {
    ["content", "refusal", "audio"]
        .iter()
        .any(|k| match message.get(*k) {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        })
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Dialect for OpenaiChat {
    fn format(&self) -> Format {
        Format::OpenaiChat
    }

    fn validate(&self, message: &Value, path: &str, strict_roles: bool) -> Result<()> {
        let Some(obj) = message.as_object() else {
            return Err(Error::invalid_params(path, "a message must be an object"));
        };
        let role = obj.get("role").and_then(Value::as_str).unwrap_or_default();
        if !ROLES.contains(&role) {
            return Err(Error::invalid_params(
                format!("{path}.role"),
                format!("role must be one of {}", ROLES.join(", ")),
            ));
        }
        if role == "tool" {
            match obj.get("tool_call_id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => {}
                _ => {
                    return Err(Error::invalid_params(
                        format!("{path}.tool_call_id"),
                        "a tool message needs a non-empty string `tool_call_id`",
                    ));
                }
            }
        }
        match obj.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                if strict_roles && role != "assistant" {
                    return Err(Error::invalid_params(
                        format!("{path}.tool_calls"),
                        format!("tool_calls belong in an assistant message, not a {role} message"),
                    ));
                }
                for (i, call) in calls.iter().enumerate() {
                    match call.get("id").and_then(Value::as_str) {
                        Some(id) if !id.is_empty() => {}
                        _ => {
                            return Err(Error::invalid_params(
                                format!("{path}.tool_calls[{i}].id"),
                                "a tool call needs a non-empty string `id`",
                            ));
                        }
                    }
                }
            }
            Some(_) => {
                return Err(Error::invalid_params(
                    format!("{path}.tool_calls"),
                    "tool_calls must be an array",
                ));
            }
        }
        Ok(())
    }

    fn side(&self, message: &Value) -> Option<Side> {
        match role(message) {
            "assistant" => Some(Side::Assistant),
            "" => None,
            _ => Some(Side::User),
        }
    }

    fn items<'a>(&self, message: &'a Value) -> Vec<Item<'a>> {
        let r = role(message);
        if r == "tool" {
            return vec![Item {
                kind: ItemKind::Result,
                index: 0,
                id: Cow::Borrowed(str_at(message, &["tool_call_id"])),
                name: Cow::Borrowed(""),
                misplaced: false,
                positional: false,
            }];
        }
        let mut items = Vec::new();
        if r != "assistant" || has_content(message) {
            items.push(other(0));
        }
        for (i, call) in tool_calls(message).iter().enumerate() {
            items.push(Item {
                kind: ItemKind::Call,
                index: i + 1,
                id: Cow::Borrowed(str_at(call, &["id"])),
                name: Cow::Borrowed(str_at(call, &["function", "name"])),
                misplaced: r != "assistant",
                positional: false,
            });
        }
        items
    }

    fn result_content<'a>(&self, message: &'a Value, _index: usize) -> ResultContent<'a> {
        ResultContent::of_value(message.get("content"))
    }

    fn result_value<'a>(&self, message: &'a Value, _index: usize) -> Option<&'a Value> {
        message.get("content")
    }

    fn put_replacement(&self, message: &mut Value, _index: usize, text: &str) {
        super::put_text_keeping_marker(message, "content", text);
    }

    fn error_results(&self, calls: &[(String, String)], _turn: &[Value], text: &str) -> Vec<Value> {
        calls
            .iter()
            .map(|(id, _)| json!({"role": "tool", "tool_call_id": id, "content": text}))
            .collect()
    }

    fn without_items(&self, message: &Value, drop: &[usize]) -> Option<Value> {
        let assistant = role(message) == "assistant";
        if !assistant && drop.contains(&0) {
            return None;
        }
        let mut out: Map<String, Value> = message.as_object()?.clone();
        // `items` reports `tool_calls` on any role (misplaced outside an
        // assistant message), so the calls it names are dropped from any
        // role too: otherwise repair would report a drop it never made and
        // never reach its fixed point.
        if assistant && drop.contains(&0) {
            for k in ["content", "refusal", "audio"] {
                if out.contains_key(k) {
                    out.insert(k.into(), Value::Null);
                }
            }
        }
        if let Some(Value::Array(calls)) = out.get_mut("tool_calls") {
            let mut i = 0;
            calls.retain(|_| {
                i += 1;
                drop.binary_search(&i).is_err()
            });
            // The API refuses an empty `tool_calls`; no calls is no key.
            if calls.is_empty() {
                out.remove("tool_calls");
            }
        }
        let out = Value::Object(out);
        if !assistant {
            return Some(out);
        }
        (has_content(&out) || !tool_calls(&out).is_empty()).then_some(out)
    }

    fn only_items(&self, message: &Value, take: &[usize]) -> Vec<Value> {
        super::whole_message(message, take)
    }

    fn budget_runs(&self) -> bool {
        true
    }

    fn skim<'a>(&self, message: &'a [u8]) -> Option<Skim<'a>> {
        super::skim_value(self, message)
    }

    fn provider_error(
        &self,
        fault: Fault,
        message: usize,
        _index: usize,
        ids: &[String],
    ) -> String {
        let ids = ids.join(", ");
        match fault {
            Fault::Unanswered | Fault::Late => format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
            ),
            Fault::Orphan | Fault::Duplicate => format!(
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (messages.[{message}].role, tool_call_id {ids})"
            ),
            Fault::WrongRole => format!(
                "Additional properties are not allowed ('tool_calls' was unexpected) - 'messages.{message}' ({ids})"
            ),
            // Its provider documents no id rule: never reported.
            Fault::InvalidCallId | Fault::InvalidResultId | Fault::ReusedCallId => {
                format!("{}: {ids}", fault.kind())
            }
        }
    }
}
