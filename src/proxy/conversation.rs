//! The conversation of a request: its session, and the budgeting and
//! repair it gets before going upstream.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::route::Route;
use crate::budget::pricing::{CacheTtl, PricingParams};
use crate::protocol::SessionId;

/// The header naming a request's session.
pub const SESSION_HEADER: &str = "x-toolwire-session";

/// The session of a request without an `x-toolwire-session` header,
/// derived from what stays the same across the turns of one conversation:
///
/// `px-` followed by the first 32 hex digits of the SHA-256 of
/// `<format> NUL <first user element>`, where `<format>` is the route's
/// format name (`anthropic`, `openai-chat`, `openai-responses`, `gemini`)
/// and `<first user element>` is the compact JSON (keys in the order sent)
/// of the first element of the conversation array (`messages`, `input` or
/// `contents`) whose `role` is `"user"` (else its first element; a string
/// `input` is taken whole), with every `cache_control` member removed
/// (agents move their cache breakpoints from turn to turn). The system
/// prompt is left out on purpose: it is shared by every conversation of an
/// agent, and the first user message is not.
pub fn derive_session(route: Route, body: &Value) -> Option<SessionId> {
    let conversation = body.get(route.conversation_key())?;
    let first = match conversation {
        Value::Array(items) => items
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .or(items.first())?,
        Value::String(_) => conversation,
        _ => return None,
    };
    let mut first = first.clone();
    strip_cache_control(&mut first);
    let mut hash = Sha256::new();
    hash.update(route.format().name().as_bytes());
    hash.update([0]);
    hash.update(serde_json::to_vec(&first).ok()?);
    let hex: String = hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    SessionId::try_from(format!("px-{hex}")).ok()
}

/// The `budget/apply` params the proxy sends a conversation with, on every
/// route and over HTTP or a WebSocket alike: the configuration's limits,
/// tools and clearing, the route's format and the request's prices, and
/// the session id fresh previews link to when they link (`previews =
/// "mcp"`).
pub fn apply_params(
    session: &SessionId,
    messages: Vec<Value>,
    format: crate::format::Format,
    pricing: &PricingParams,
    link_session: Option<&str>,
) -> crate::protocol::BudgetApplyParams {
    crate::protocol::BudgetApplyParams {
        session_id: session.clone(),
        messages: messages.into_iter().map(crate::protocol::Message).collect(),
        limits: None,
        tools: None,
        preview_mode: None,
        format: Some(format),
        clearing: None,
        pricing: Some(pricing.clone()),
        link_session: link_session.map(str::to_owned),
    }
}

/// What a request says about the prices it is sent at (PROTOCOL.md 12.1):
/// its model (the body's `model`, or for Gemini the path's
/// `models/{model}:…`), and the cache lifetime it asked for: an Anthropic
/// `cache_control` with `ttl: "1h"` anywhere in it, or OpenAI's
/// `prompt_cache_retention: "24h"`. The body's text is searched rather than
/// walked: the conversation has already been moved out of the value.
pub fn pricing(route: Route, body: &Value, text: &str, path: &str) -> PricingParams {
    let model = match route {
        Route::Gemini { .. } => path
            .rsplit_once("/models/")
            .and_then(|(_, rest)| rest.split_once(':'))
            .map(|(model, _)| model.to_owned()),
        _ => body.get("model").and_then(Value::as_str).map(str::to_owned),
    };
    let cache_ttl = match route.format() {
        crate::format::Format::Anthropic if member_is(text, "ttl", "1h") => Some(CacheTtl::OneHour),
        crate::format::Format::OpenaiChat | crate::format::Format::OpenaiResponses
            if body.get("prompt_cache_retention").and_then(Value::as_str) == Some("24h") =>
        {
            Some(CacheTtl::OneDay)
        }
        _ => None,
    };
    PricingParams {
        model,
        cache_ttl,
        ..PricingParams::default()
    }
}

/// Whether `text` (JSON) has a member `"name": "value"`, white space
/// around the colon allowed.
fn member_is(text: &str, name: &str, value: &str) -> bool {
    let key = format!("\"{name}\"");
    let bytes = text.as_bytes();
    memchr::memmem::find_iter(bytes, key.as_bytes()).any(|at| {
        let rest = text[at + key.len()..].trim_start();
        rest.strip_prefix(':').is_some_and(|rest| {
            rest.trim_start()
                .strip_prefix('"')
                .and_then(|rest| rest.strip_prefix(value))
                .is_some_and(|rest| rest.starts_with('"'))
        })
    })
}

fn strip_cache_control(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.shift_remove("cache_control");
            map.values_mut().for_each(strip_cache_control);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_conversation_keeps_its_session_across_turns() {
        let first = json!({"system": "s", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix it", "cache_control": {"type": "ephemeral"}}]}
        ]});
        let later = json!({"system": "s", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "go on"}
        ]});
        let other = json!({"messages": [{"role": "user", "content": "something else"}]});
        let a = derive_session(Route::AnthropicMessages, &first).unwrap();
        assert_eq!(
            Some(a.clone()),
            derive_session(Route::AnthropicMessages, &later)
        );
        assert_ne!(
            Some(a.clone()),
            derive_session(Route::AnthropicMessages, &other)
        );
        assert!(a.as_str().starts_with("px-") && a.as_str().len() == 35);
    }
}
