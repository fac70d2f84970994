//! The demo and synthetic sessions in every provider format: an Anthropic
//! recording rewritten message by message into OpenAI Chat, OpenAI
//! Responses or Gemini shapes (`replay --format F`). Deterministic: the
//! same recording always yields the same session, so the bundled demo is
//! one session per format without a file per format.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::Step;
use crate::format::Format;

/// `steps` (Anthropic messages) in `format`. A Responses model response or
/// batch of outputs becomes one step holding an array of items.
pub fn steps_to(format: Format, steps: Vec<Step>) -> Vec<Step> {
    if format == Format::Anthropic {
        return steps;
    }
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        match step {
            Step::Message(m) => {
                for converted in message_to(format, &m, &mut names) {
                    out.push(Step::Message(converted));
                }
            }
            other => out.push(other),
        }
    }
    out
}

fn blocks(m: &Value) -> Vec<Value> {
    match m.get("content") {
        Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
        Some(Value::Array(b)) => b.clone(),
        _ => Vec::new(),
    }
}

fn kind(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn str_of<'a>(b: &'a Value, k: &str) -> &'a str {
    b.get(k).and_then(Value::as_str).unwrap_or_default()
}

/// A tool result's content as one text, or `None` when it holds more than
/// text (an image): then it goes as it is.
fn result_text(content: Option<&Value>) -> Option<String> {
    match content {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(parts)) if parts.iter().all(|p| kind(p) == "text") => Some(
            parts
                .iter()
                .map(|p| str_of(p, "text"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        None => Some(String::new()),
        _ => None,
    }
}

fn message_to(format: Format, m: &Value, names: &mut HashMap<String, String>) -> Vec<Value> {
    let assistant = m.get("role").and_then(Value::as_str) == Some("assistant");
    let blocks = blocks(m);
    let text: Vec<&str> = blocks
        .iter()
        .filter(|b| kind(b) == "text")
        .map(|b| str_of(b, "text"))
        .collect();
    let text = text.join("\n");
    if assistant {
        let calls: Vec<&Value> = blocks.iter().filter(|b| kind(b) == "tool_use").collect();
        for c in &calls {
            names.insert(str_of(c, "id").to_owned(), str_of(c, "name").to_owned());
        }
        return assistant_to(format, &text, &calls);
    }
    let results: Vec<&Value> = blocks.iter().filter(|b| kind(b) == "tool_result").collect();
    let mut out = Vec::new();
    let name = |r: &Value| {
        names
            .get(str_of(r, "tool_use_id"))
            .cloned()
            .unwrap_or_default()
    };
    match format {
        Format::OpenaiChat => {
            for r in &results {
                let content = match result_text(r.get("content")) {
                    Some(t) => json!(t),
                    None => r.get("content").cloned().unwrap_or(Value::Null),
                };
                out.push(json!({"role": "tool", "tool_call_id": str_of(r, "tool_use_id"), "content": content}));
            }
            if !text.is_empty() || results.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
        }
        Format::OpenaiResponses => {
            let outputs: Vec<Value> = results
                .iter()
                .map(|r| {
                    let output = match result_text(r.get("content")) {
                        Some(t) => json!(t),
                        None => r.get("content").cloned().unwrap_or(Value::Null),
                    };
                    json!({"type": "function_call_output", "call_id": str_of(r, "tool_use_id"), "output": output})
                })
                .collect();
            match outputs.len() {
                0 => {}
                1 => out.extend(outputs),
                _ => out.push(Value::Array(outputs)),
            }
            if !text.is_empty() || results.is_empty() {
                out.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}));
            }
        }
        Format::Gemini => {
            let mut parts: Vec<Value> = results
                .iter()
                .map(|r| {
                    let response = match (result_text(r.get("content")), r.get("is_error")) {
                        (Some(t), Some(Value::Bool(true))) => json!({"error": t}),
                        (Some(t), _) => json!({"output": t}),
                        (None, _) => json!({"content": r.get("content")}),
                    };
                    json!({"functionResponse": {"id": str_of(r, "tool_use_id"), "name": name(r), "response": response}})
                })
                .collect();
            if !text.is_empty() || parts.is_empty() {
                parts.push(json!({"text": text}));
            }
            out.push(json!({"role": "user", "parts": parts}));
        }
        Format::Anthropic => out.push(m.clone()),
    }
    out
}

fn assistant_to(format: Format, text: &str, calls: &[&Value]) -> Vec<Value> {
    let input = |c: &Value| c.get("input").cloned().unwrap_or_else(|| json!({}));
    match format {
        Format::OpenaiChat => {
            let mut m = Map::new();
            m.insert("role".into(), json!("assistant"));
            m.insert(
                "content".into(),
                if text.is_empty() {
                    Value::Null
                } else {
                    json!(text)
                },
            );
            if !calls.is_empty() {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|c| json!({"id": str_of(c, "id"), "type": "function", "function": {"name": str_of(c, "name"), "arguments": input(c).to_string()}}))
                    .collect();
                m.insert("tool_calls".into(), Value::Array(calls));
            }
            vec![Value::Object(m)]
        }
        Format::OpenaiResponses => {
            let mut items = Vec::new();
            if !text.is_empty() {
                items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]}));
            }
            for c in calls {
                items.push(json!({"type": "function_call", "call_id": str_of(c, "id"), "name": str_of(c, "name"), "arguments": input(c).to_string()}));
            }
            match items.len() {
                0 => Vec::new(),
                1 => items,
                _ => vec![Value::Array(items)],
            }
        }
        Format::Gemini => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"text": text}));
            }
            for c in calls {
                parts.push(json!({"functionCall": {"id": str_of(c, "id"), "name": str_of(c, "name"), "args": input(c)}}));
            }
            vec![json!({"role": "model", "parts": parts})]
        }
        Format::Anthropic => Vec::new(),
    }
}
