//! Gemini `generateContent`: a conversation of contents `{role, parts}`.
//! A call is a `functionCall {name, args, id?}` part of a `model` content;
//! a result a `functionResponse {name, response, id?}` part of a `user`
//! content (older clients say `function`). Its text is `response.output`
//! when that is a string, else the compact JSON of `response`; a preview
//! makes `response` `{"output": <preview>}`.
//!
//! A response answers the call with its `id`; parts without one (models
//! and clients that leave ids out) answer in order, by name: their item id
//! is the tool name and they are marked positional.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::anthropic::other;
use super::{Dialect, Fault, Format, Item, ItemKind, ResultContent, Side, Skim};
use crate::error::{Error, Result};

pub struct Gemini;

fn parts(message: &Value) -> &[Value] {
    match message.get("parts") {
        Some(Value::Array(parts)) => parts,
        _ => &[],
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(v, |v, k| v.get(*k))
        .and_then(Value::as_str)
}

/// The tool part of a part: `(is_call, body)`.
fn tool_part(part: &Value) -> Option<(bool, &Value)> {
    if let Some(call) = part.get("functionCall") {
        Some((true, call))
    } else {
        part.get("functionResponse").map(|r| (false, r))
    }
}

impl Dialect for Gemini {
    fn format(&self) -> Format {
        Format::Gemini
    }

    fn validate(&self, message: &Value, path: &str, strict_roles: bool) -> Result<()> {
        let Some(obj) = message.as_object() else {
            return Err(Error::invalid_params(path, "a content must be an object"));
        };
        let role = match obj.get("role") {
            None => "user",
            Some(Value::String(r)) if matches!(r.as_str(), "user" | "model" | "function") => r,
            Some(_) => {
                return Err(Error::invalid_params(
                    format!("{path}.role"),
                    "role must be \"user\" or \"model\"",
                ));
            }
        };
        let Some(Value::Array(parts)) = obj.get("parts") else {
            return Err(Error::invalid_params(
                format!("{path}.parts"),
                "a content needs an array of parts",
            ));
        };
        for (i, part) in parts.iter().enumerate() {
            let at = format!("{path}.parts[{i}]");
            if !part.is_object() {
                return Err(Error::invalid_params(at, "a part must be an object"));
            }
            let Some((is_call, body)) = tool_part(part) else {
                continue;
            };
            let (field, belongs) = if is_call {
                ("functionCall", "model")
            } else {
                ("functionResponse", "user")
            };
            if str_at(body, &["name"]).is_none_or(str::is_empty) {
                return Err(Error::invalid_params(
                    format!("{at}.{field}.name"),
                    format!("a {field} needs a non-empty string `name`"),
                ));
            }
            if let Some(id) = body.get("id")
                && id.as_str().is_none_or(str::is_empty)
            {
                return Err(Error::invalid_params(
                    format!("{at}.{field}.id"),
                    format!("a {field} `id` must be a non-empty string"),
                ));
            }
            let role_ok = if is_call {
                role == "model"
            } else {
                role != "model"
            };
            if strict_roles && !role_ok {
                return Err(Error::invalid_params(
                    format!("{at}.{field}"),
                    format!("a {field} part belongs in a {belongs} content, not a {role} content"),
                ));
            }
        }
        Ok(())
    }

    fn side(&self, message: &Value) -> Option<Side> {
        match message.get("role").and_then(Value::as_str) {
            Some("model") => Some(Side::Assistant),
            _ => Some(Side::User),
        }
    }

    fn items<'a>(&self, message: &'a Value) -> Vec<Item<'a>> {
        let side = self.side(message);
        parts(message)
            .iter()
            .enumerate()
            .map(|(index, part)| match tool_part(part) {
                Some((is_call, body)) => {
                    let name = str_at(body, &["name"]).unwrap_or_default();
                    let id = str_at(body, &["id"]);
                    Item {
                        kind: if is_call {
                            ItemKind::Call
                        } else {
                            ItemKind::Result
                        },
                        index,
                        id: Cow::Borrowed(id.unwrap_or(name)),
                        name: Cow::Borrowed(name),
                        misplaced: (side == Some(Side::Assistant)) != is_call,
                        positional: id.is_none(),
                    }
                }
                None => other(index),
            })
            .collect()
    }

    fn result_content<'a>(&self, message: &'a Value, index: usize) -> ResultContent<'a> {
        match response(message, index) {
            Some(r) => match r.get("output") {
                Some(Value::String(s)) => ResultContent::Text(s),
                _ => ResultContent::Json(r),
            },
            None => ResultContent::Other,
        }
    }

    fn result_value<'a>(&self, message: &'a Value, index: usize) -> Option<&'a Value> {
        let r = response(message, index)?;
        match r.get("output") {
            Some(out @ Value::String(_)) => Some(out),
            _ => Some(r),
        }
    }

    fn put_replacement(&self, message: &mut Value, index: usize, text: &str) {
        if let Some(body) = message
            .get_mut("parts")
            .and_then(Value::as_array_mut)
            .and_then(|p| p.get_mut(index))
            .and_then(|p| p.get_mut("functionResponse"))
            .and_then(Value::as_object_mut)
        {
            body.insert("response".into(), json!({ "output": text }));
        }
    }

    fn error_results(&self, calls: &[(String, String)], turn: &[Value], text: &str) -> Vec<Value> {
        // A call without an id is answered without one, by name.
        // Calls that carry an id, as (id, name), gathered in one pass.
        let called: std::collections::HashSet<(&str, &str)> = turn
            .iter()
            .flat_map(parts)
            .filter_map(|p| {
                let c = p.get("functionCall")?;
                Some((str_at(c, &["id"])?, str_at(c, &["name"])?))
            })
            .collect();
        let with_id = |id: &str, name: &str| id != name || called.contains(&(id, name));
        let parts: Vec<Value> = calls
            .iter()
            .map(|(id, name)| {
                let mut body = Map::new();
                if with_id(id, name) {
                    body.insert("id".into(), json!(id));
                }
                body.insert("name".into(), json!(name));
                body.insert("response".into(), json!({ "error": text }));
                json!({ "functionResponse": body })
            })
            .collect();
        if parts.is_empty() {
            return Vec::new();
        }
        vec![json!({ "role": "user", "parts": parts })]
    }

    fn without_items(&self, message: &Value, drop: &[usize]) -> Option<Value> {
        let mut out = message.clone();
        if let Some(Value::Array(parts)) = out.get_mut("parts") {
            let mut i = 0;
            parts.retain(|_| {
                let keep = drop.binary_search(&i).is_err();
                i += 1;
                keep
            });
            if parts.is_empty() {
                return None;
            }
        }
        Some(out)
    }

    fn only_items(&self, message: &Value, take: &[usize]) -> Vec<Value> {
        let picked: Vec<Value> = parts(message)
            .iter()
            .enumerate()
            .filter(|(i, _)| take.binary_search(i).is_ok())
            .map(|(_, p)| p.clone())
            .collect();
        if picked.is_empty() {
            return Vec::new();
        }
        let mut out = message.clone();
        if let Some(obj) = out.as_object_mut() {
            obj.insert("parts".into(), Value::Array(picked));
        }
        vec![out]
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
            Fault::Unanswered | Fault::Orphan | Fault::Duplicate => format!(
                "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn. (contents[{message}]: {ids})"
            ),
            Fault::Late => format!(
                "Please ensure that function response turn comes immediately after a function call turn. (contents[{message}]: {ids})"
            ),
            Fault::WrongRole => format!(
                "Please ensure that function call turn comes immediately after a user turn or after a function response turn. (contents[{message}]: {ids})"
            ),
            // Its provider documents no id rule: never reported.
            Fault::InvalidCallId | Fault::InvalidResultId | Fault::ReusedCallId => {
                format!("{}: {ids}", fault.kind())
            }
        }
    }
}

fn response(message: &Value, index: usize) -> Option<&Value> {
    parts(message)
        .get(index)?
        .get("functionResponse")?
        .get("response")
}
