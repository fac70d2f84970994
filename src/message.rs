//! Read-only views over messages kept as raw JSON.
//!
//! Messages are never deserialized into typed structs: whatever fields and
//! blocks toolwire does not know must go back out exactly as they came in,
//! so the server works on `serde_json::Value` and only looks at the few
//! fields the contract names.

use std::borrow::Cow;

use serde_json::Value;

use crate::config::SizeUnit;
use crate::error::{Error, Result};

pub fn role(message: &Value) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

/// The content blocks of a message; empty for plain-string content.
pub fn blocks(message: &Value) -> &[Value] {
    match message.get("content") {
        Some(Value::Array(blocks)) => blocks,
        _ => &[],
    }
}

pub fn block_type(block: &Value) -> Option<&str> {
    block.get("type").and_then(Value::as_str)
}

/// `(tool_use_id, name)` of every `tool_use` block.
pub fn tool_uses(message: &Value) -> impl Iterator<Item = (&str, &str)> {
    blocks(message)
        .iter()
        .filter(|b| block_type(b) == Some("tool_use"))
        .map(|b| {
            (
                b.get("id").and_then(Value::as_str).unwrap_or_default(),
                b.get("name").and_then(Value::as_str).unwrap_or_default(),
            )
        })
}

/// `(block index, tool_use_id)` of every `tool_result` block.
pub fn tool_results(message: &Value) -> impl Iterator<Item = (usize, &str)> {
    blocks(message)
        .iter()
        .enumerate()
        .filter(|(_, b)| block_type(b) == Some("tool_result"))
        .map(|(i, b)| {
            (
                i,
                b.get("tool_use_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            )
        })
}

pub fn has_tool_results(message: &Value) -> bool {
    tool_results(message).next().is_some()
}

/// A tool_result's `content`, in the two shapes the contract knows.
pub enum ResultContent<'a> {
    Text(&'a str),
    Blocks(&'a [Value]),
    /// Missing or of another shape: counts as empty text, never persisted.
    Other,
}

impl<'a> ResultContent<'a> {
    pub fn of(block: &'a Value) -> Self {
        match block.get("content") {
            Some(Value::String(s)) => ResultContent::Text(s),
            Some(Value::Array(b)) => ResultContent::Blocks(b),
            _ => ResultContent::Other,
        }
    }

    fn texts(&self) -> impl Iterator<Item = &'a str> {
        let blocks: &'a [Value] = match self {
            ResultContent::Blocks(b) => b,
            _ => &[],
        };
        blocks
            .iter()
            .filter(|b| block_type(b) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
    }

    /// Size in `unit`: the string, or the sum over `text` blocks.
    pub fn size(&self, unit: SizeUnit) -> u64 {
        match self {
            ResultContent::Text(s) => unit.len(s),
            ResultContent::Blocks(_) => self.texts().map(|t| unit.len(t)).sum(),
            ResultContent::Other => 0,
        }
    }

    /// Whether the content holds anything but text (images, documents…).
    pub fn has_non_text(&self) -> bool {
        match self {
            ResultContent::Blocks(b) => b.iter().any(|b| block_type(b) != Some("text")),
            ResultContent::Text(_) => false,
            ResultContent::Other => true,
        }
    }

    /// The text a preview is cut from: text blocks are joined by newlines.
    pub fn preview_text(&self) -> Cow<'a, str> {
        match self {
            ResultContent::Text(s) => Cow::Borrowed(s),
            ResultContent::Blocks(_) => Cow::Owned(self.texts().collect::<Vec<_>>().join("\n")),
            ResultContent::Other => Cow::Borrowed(""),
        }
    }

    pub fn first_text(&self) -> &'a str {
        match self {
            ResultContent::Text(s) => s,
            ResultContent::Blocks(_) => self.texts().next().unwrap_or_default(),
            ResultContent::Other => "",
        }
    }
}

/// Check the parts of a message the contract relies on, naming the first
/// offending field. Everything else is left for the provider to judge.
pub fn validate(message: &Value, path: &str) -> Result<()> {
    let Some(obj) = message.as_object() else {
        return Err(Error::invalid_params(path, "a message must be an object"));
    };
    match obj.get("role").and_then(Value::as_str) {
        Some("user" | "assistant") => {}
        _ => {
            return Err(Error::invalid_params(
                format!("{path}.role"),
                "role must be \"user\" or \"assistant\"",
            ));
        }
    }
    let blocks = match obj.get("content") {
        Some(Value::String(_)) => return Ok(()),
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(Error::invalid_params(
                format!("{path}.content"),
                "content must be a string or an array of blocks",
            ));
        }
    };
    for (i, block) in blocks.iter().enumerate() {
        let at = format!("{path}.content[{i}]");
        let Some(kind) = block_type(block) else {
            return Err(Error::invalid_params(
                format!("{at}.type"),
                "a content block must be an object with a string `type`",
            ));
        };
        let id_field = match kind {
            "tool_use" => "id",
            "tool_result" => "tool_use_id",
            _ => continue,
        };
        match block.get(id_field).and_then(Value::as_str) {
            Some(id) if !id.is_empty() => {}
            _ => {
                return Err(Error::invalid_params(
                    format!("{at}.{id_field}"),
                    format!("a {kind} block needs a non-empty string `{id_field}`"),
                ));
            }
        }
    }
    Ok(())
}
