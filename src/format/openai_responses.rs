//! OpenAI Responses: the conversation is a list of input items, one item
//! per transcript message. Calls are `function_call`, `custom_tool_call`,
//! `local_shell_call` and `computer_call` items (`call_id`); results are
//! their `*_output` items (`output`: a string or `input_text` parts). A
//! `local_shell_call` is answered by a `function_call_output`, as Codex
//! writes it.
//!
//! Sides: model output items (`reasoning`, assistant `message`, calls,
//! server-side tool items such as `web_search_call` or `mcp_call`, which
//! carry their own result) are the assistant's; user messages and outputs
//! are the user's. `system` and `developer` messages, item references and
//! unknown item types belong to no turn: the API accepts them between a
//! call and its output, so they never interrupt a pair.

use std::borrow::Cow;

use serde_json::{Value, json};

use super::anthropic::other;
use super::{Dialect, Fault, Format, Item, ItemKind, ResultContent, Side, Skim};
use crate::error::{Error, Result};

pub struct OpenaiResponses;

/// Call item types and the name a call without `name` goes by.
const CALLS: [&str; 4] = [
    "function_call",
    "custom_tool_call",
    "local_shell_call",
    "computer_call",
];
const OUTPUTS: [&str; 4] = [
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
    "computer_call_output",
];
/// Model output items that are not client calls.
const MODEL_ITEMS: [&str; 10] = [
    "reasoning",
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "tool_search_call",
    "compaction",
];

fn item_type(item: &Value) -> &str {
    match item.get("type").and_then(Value::as_str) {
        Some(t) => t,
        // An `EasyInputMessage` has a role and no type.
        None if item.get("role").is_some() => "message",
        None => "",
    }
}

fn str_field<'a>(item: &'a Value, field: &str) -> &'a str {
    item.get(field).and_then(Value::as_str).unwrap_or_default()
}

impl Dialect for OpenaiResponses {
    fn format(&self) -> Format {
        Format::OpenaiResponses
    }

    fn validate(&self, message: &Value, path: &str, _strict_roles: bool) -> Result<()> {
        if !message.is_object() {
            return Err(Error::invalid_params(
                path,
                "an input item must be an object",
            ));
        }
        let kind = item_type(message);
        if kind.is_empty() {
            return Err(Error::invalid_params(
                format!("{path}.type"),
                "an input item needs a string `type` (or a `role`, for a message)",
            ));
        }
        if kind == "message" && message.get("role").and_then(Value::as_str).is_none() {
            return Err(Error::invalid_params(
                format!("{path}.role"),
                "a message item needs a string `role`",
            ));
        }
        if CALLS.contains(&kind) || OUTPUTS.contains(&kind) {
            match message.get("call_id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => {}
                _ => {
                    return Err(Error::invalid_params(
                        format!("{path}.call_id"),
                        format!("a {kind} item needs a non-empty string `call_id`"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn compaction_index(&self, message: &Value) -> Option<usize> {
        (item_type(message) == "compaction").then_some(0)
    }

    fn side(&self, message: &Value) -> Option<Side> {
        let kind = item_type(message);
        if kind == "message" {
            return match str_field(message, "role") {
                "assistant" => Some(Side::Assistant),
                "user" => Some(Side::User),
                _ => None,
            };
        }
        if CALLS.contains(&kind) || MODEL_ITEMS.contains(&kind) {
            Some(Side::Assistant)
        } else if OUTPUTS.contains(&kind) {
            Some(Side::User)
        } else {
            None
        }
    }

    fn items<'a>(&self, message: &'a Value) -> Vec<Item<'a>> {
        let kind = item_type(message);
        let id = Cow::Borrowed(str_field(message, "call_id"));
        if CALLS.contains(&kind) {
            let name = match str_field(message, "name") {
                "" => kind.strip_suffix("_call").unwrap_or(kind),
                name => name,
            };
            return vec![Item {
                kind: ItemKind::Call,
                index: 0,
                id,
                name: Cow::Borrowed(name),
                misplaced: false,
                positional: false,
            }];
        }
        if OUTPUTS.contains(&kind) {
            return vec![Item {
                kind: ItemKind::Result,
                index: 0,
                id,
                name: Cow::Borrowed(""),
                misplaced: false,
                positional: false,
            }];
        }
        vec![other(0)]
    }

    fn result_content<'a>(&self, message: &'a Value, _index: usize) -> ResultContent<'a> {
        ResultContent::of_value(message.get("output"))
    }

    fn result_value<'a>(&self, message: &'a Value, _index: usize) -> Option<&'a Value> {
        message.get("output")
    }

    fn put_replacement(&self, message: &mut Value, _index: usize, text: &str) {
        super::set_text(message, "output", text);
    }

    fn error_results(&self, calls: &[(String, String)], turn: &[Value], text: &str) -> Vec<Value> {
        // The first call item of each id, found in one pass over the turn.
        let mut call_types: std::collections::HashMap<&str, &str> = Default::default();
        for m in turn {
            if CALLS.contains(&item_type(m)) {
                call_types
                    .entry(str_field(m, "call_id"))
                    .or_insert_with(|| item_type(m));
            }
        }
        calls
            .iter()
            .map(|(id, _)| {
                let output_type = match call_types.get(id.as_str()).copied() {
                    Some("custom_tool_call") => "custom_tool_call_output",
                    Some("computer_call") => "computer_call_output",
                    // Codex answers its `local_shell_call`s with
                    // `function_call_output`s.
                    _ => "function_call_output",
                };
                json!({"type": output_type, "call_id": id, "output": text})
            })
            .collect()
    }

    fn without_items(&self, message: &Value, drop: &[usize]) -> Option<Value> {
        (!drop.contains(&0)).then(|| message.clone())
    }

    fn only_items(&self, message: &Value, take: &[usize]) -> Vec<Value> {
        super::whole_message(message, take)
    }

    fn budget_runs(&self) -> bool {
        true
    }

    fn leads_calls(&self, message: &Value) -> bool {
        item_type(message) == "reasoning"
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
            Fault::Unanswered | Fault::Late => {
                format!("No tool output found for function call {ids}.")
            }
            Fault::Orphan | Fault::Duplicate => format!(
                "No tool call found for function call output with call_id {ids}. (input[{message}])"
            ),
            Fault::WrongRole => {
                format!("Invalid input[{message}]: a tool item in the wrong place ({ids}).")
            }
            // Its provider documents no id rule: never reported.
            Fault::InvalidCallId | Fault::InvalidResultId | Fault::ReusedCallId => {
                format!("{}: {ids}", fault.kind())
            }
        }
    }
}
