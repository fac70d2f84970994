//! Which provider endpoint a request is for, and what that decides: the
//! upstream it goes to, the format its conversation is in, and the shape of
//! the errors the proxy itself answers.

use serde_json::{Value, json};

use crate::config::Upstreams;
use crate::format::Format;

/// The endpoints the proxy serves (PROTOCOL.md 10.7). Anything else is 404:
/// the proxy never forwards a path it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/messages`
    AnthropicMessages,
    /// `POST /v1/chat/completions`
    OpenAiChat,
    /// `POST /v1/responses`
    OpenAiResponses,
    /// `POST /v1beta/models/{model}:generateContent` or
    /// `:streamGenerateContent`
    Gemini { stream: bool },
}

/// Who answers a route, for the upstream URL and the error shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Anthropic,
    OpenAi,
    Gemini,
}

/// A request path as the proxy routes and forwards it: dot segments
/// (`.` and `..`, also spelled `%2e`) resolved as RFC 3986 5.2.4 resolves
/// them, so the path that decides the route is the path that leaves, and
/// no `..` is left for the upstream (or a gateway in front of it) to climb
/// out of the configured base path with. `None` for a path no provider
/// endpoint has and an upstream might read as another one: an encoded
/// slash or backslash (`%2f`, `%5c`), a backslash, or a NUL.
pub fn normalize_path(raw: &str) -> Option<String> {
    let lower = raw.to_ascii_lowercase();
    if raw.contains('\\') || ["%2f", "%5c", "%00"].iter().any(|e| lower.contains(e)) {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    let mut segments = raw.split('/').skip(1).peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match dot_segment(segment) {
            Some(dots) => {
                if dots == 2 {
                    out.pop();
                }
                // `/a/..` and `/a/.` end in a directory: `/`, kept.
                if last {
                    out.push("");
                }
            }
            None => out.push(segment),
        }
    }
    Some(format!("/{}", out.join("/")))
}

/// 1 for `.`, 2 for `..`, in any mix of literal and `%2e` dots.
fn dot_segment(segment: &str) -> Option<usize> {
    let mut rest = segment;
    let mut dots = 0;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            rest = r;
        } else if rest
            .as_bytes()
            .get(..3)
            .is_some_and(|b| b.eq_ignore_ascii_case(b"%2e"))
        {
            rest = &rest[3..];
        } else {
            return None;
        }
        dots += 1;
    }
    (1..=2).contains(&dots).then_some(dots)
}

impl Route {
    /// The route of a request path (without its query), if it is one.
    pub fn of(path: &str) -> Option<Route> {
        match path {
            "/v1/messages" => return Some(Route::AnthropicMessages),
            "/v1/chat/completions" => return Some(Route::OpenAiChat),
            "/v1/responses" => return Some(Route::OpenAiResponses),
            _ => {}
        }
        // `/v1beta/models/{model}:{method}`, also `/v1/…` (the stable API).
        let rest = path
            .strip_prefix("/v1beta/models/")
            .or_else(|| path.strip_prefix("/v1/models/"))?;
        let (model, method) = rest.rsplit_once(':')?;
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if model.is_empty() || !model.chars().all(plain) {
            return None;
        }
        match method {
            "generateContent" => Some(Route::Gemini { stream: false }),
            "streamGenerateContent" => Some(Route::Gemini { stream: true }),
            _ => None,
        }
    }

    pub fn provider(self) -> Provider {
        match self {
            Route::AnthropicMessages => Provider::Anthropic,
            Route::OpenAiChat | Route::OpenAiResponses => Provider::OpenAi,
            Route::Gemini { .. } => Provider::Gemini,
        }
    }

    /// The conversation format (PROTOCOL.md 10.3) of the route's requests.
    pub fn format(self) -> Format {
        match self {
            Route::AnthropicMessages => Format::Anthropic,
            Route::OpenAiChat => Format::OpenaiChat,
            Route::OpenAiResponses => Format::OpenaiResponses,
            Route::Gemini { .. } => Format::Gemini,
        }
    }

    /// The top-level field of the request body that holds the conversation.
    pub fn conversation_key(self) -> &'static str {
        match self {
            Route::AnthropicMessages | Route::OpenAiChat => "messages",
            Route::OpenAiResponses => "input",
            Route::Gemini { .. } => "contents",
        }
    }
}

impl Provider {
    pub fn upstream(self, upstreams: &Upstreams) -> &str {
        match self {
            Provider::Anthropic => &upstreams.anthropic,
            Provider::OpenAi => &upstreams.openai,
            Provider::Gemini => &upstreams.gemini,
        }
    }

    /// An error body the provider's own SDKs parse: the proxy's errors
    /// (bad gateway, body too large, bad JSON) reach the agent the same
    /// way the provider's would.
    pub fn error_body(self, status: u16, message: &str) -> Value {
        match self {
            Provider::Anthropic => json!({
                "type": "error",
                "error": {"type": anthropic_error_type(status), "message": message},
            }),
            Provider::OpenAi => json!({
                "error": {
                    "message": message,
                    "type": if status >= 500 { "server_error" } else { "invalid_request_error" },
                    "param": null,
                    "code": null,
                },
            }),
            Provider::Gemini => json!({
                "error": {"code": status, "message": message, "status": gemini_status(status)},
            }),
        }
    }
}

fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        404 => "not_found_error",
        413 => "request_too_large",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

fn gemini_status(status: u16) -> &'static str {
    match status {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        404 => "NOT_FOUND",
        502 | 503 => "UNAVAILABLE",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_exactly_the_provider_endpoints() {
        assert_eq!(Route::of("/v1/messages"), Some(Route::AnthropicMessages));
        assert_eq!(Route::of("/v1/responses"), Some(Route::OpenAiResponses));
        assert_eq!(
            Route::of("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(Route::Gemini { stream: true })
        );
        assert_eq!(Route::of("/v1/messages/count_tokens"), None);
        assert_eq!(Route::of("/v1beta/models/../x:generateContent"), None);
        assert_eq!(Route::of("/v1beta/models/m:embedContent"), None);
        assert_eq!(Route::of("/"), None);
    }

    #[test]
    fn dot_segments_are_resolved_before_routing() {
        let n = |p: &str| normalize_path(p);
        assert_eq!(n("/v1/messages").as_deref(), Some("/v1/messages"));
        assert_eq!(
            n("/v1/messages/../../etc/passwd").as_deref(),
            Some("/etc/passwd")
        );
        assert_eq!(
            n("/v1/messages/%2e%2e/%2E%2e/etc/passwd").as_deref(),
            Some("/etc/passwd")
        );
        assert_eq!(n("/v1beta/../x").as_deref(), Some("/x"));
        assert_eq!(
            n("/v1beta/.%2e/v1/messages").as_deref(),
            Some("/v1/messages")
        );
        assert_eq!(n("/../../..").as_deref(), Some("/"));
        assert_eq!(n("/v1/./messages/.").as_deref(), Some("/v1/messages/"));
        assert_eq!(n("/v1/messages/...").as_deref(), Some("/v1/messages/..."));
        assert_eq!(n("/v1//messages").as_deref(), Some("/v1//messages"));
        assert_eq!(n("/v1/messages/..%2f..%2fx"), None);
        assert_eq!(n("/v1/messages/..%5Cx"), None);
        assert_eq!(n("/v1/messages/..\\x"), None);
        // Found by the proxy_request fuzz target: no char boundary at 3.
        assert_eq!(n("/v0\u{460}hat").as_deref(), Some("/v0\u{460}hat"));
    }
}
