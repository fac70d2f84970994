//! The token usage a provider reports, read off the response as it streams
//! past (the response itself is never held back or changed).
//!
//! Each provider names the same four figures differently; they are brought
//! to one shape where `input` counts only the tokens neither read from nor
//! written to the cache, so the cache hit rate is
//! `cacheRead / (input + cacheRead + cacheCreation)` for every provider:
//!
//! | provider | input (total or not) | cache read | cache creation | output |
//! |---|---|---|---|---|
//! | Anthropic | `input_tokens` (uncached) | `cache_read_input_tokens` | `cache_creation_input_tokens` | `output_tokens` |
//! | OpenAI Chat | `prompt_tokens` (total) | `prompt_tokens_details.cached_tokens` | — | `completion_tokens` |
//! | OpenAI Responses | `input_tokens` (total) | `input_tokens_details.cached_tokens` | — | `output_tokens` |
//! | Gemini | `promptTokenCount` (total) | `cachedContentTokenCount` | — | `candidatesTokenCount` |

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::route::Provider;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
    pub output: u64,
}

impl Usage {
    /// Fold in a later report of the same response: streams report input
    /// figures first and output last (or cumulatively), so the largest
    /// figure seen is the response's.
    fn merge(&mut self, other: Usage) {
        self.input = self.input.max(other.input);
        self.cache_read = self.cache_read.max(other.cache_read);
        self.cache_creation = self.cache_creation.max(other.cache_creation);
        self.output = self.output.max(other.output);
    }

    /// The usage in one JSON value of a response (a whole body or one SSE
    /// event), if it carries any.
    pub fn find(provider: Provider, value: &Value) -> Option<Usage> {
        let n = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
        match provider {
            Provider::Anthropic => {
                let u = value
                    .get("usage")
                    .or_else(|| value.get("message").and_then(|m| m.get("usage")))?;
                Some(Usage {
                    input: n(u, "input_tokens"),
                    cache_read: n(u, "cache_read_input_tokens"),
                    cache_creation: n(u, "cache_creation_input_tokens"),
                    output: n(u, "output_tokens"),
                })
            }
            Provider::OpenAi => {
                let u = value
                    .get("usage")
                    .or_else(|| value.get("response").and_then(|r| r.get("usage")))
                    .filter(|u| u.is_object())?;
                let (total, details, output) = if u.get("prompt_tokens").is_some() {
                    (
                        "prompt_tokens",
                        "prompt_tokens_details",
                        "completion_tokens",
                    )
                } else {
                    ("input_tokens", "input_tokens_details", "output_tokens")
                };
                let cached = u.get(details).map_or(0, |d| n(d, "cached_tokens"));
                Some(Usage {
                    input: n(u, total).saturating_sub(cached),
                    cache_read: cached,
                    cache_creation: 0,
                    output: n(u, output),
                })
            }
            Provider::Gemini => {
                let u = value.get("usageMetadata")?;
                let cached = n(u, "cachedContentTokenCount");
                Some(Usage {
                    input: n(u, "promptTokenCount").saturating_sub(cached),
                    cache_read: cached,
                    cache_creation: 0,
                    output: n(u, "candidatesTokenCount"),
                })
            }
        }
    }
}

/// Responses larger than this are not kept for reading their usage (a
/// non-streamed body is read whole at its end); the response itself still
/// passes in full.
const MAX_KEPT: usize = 16 * 1024 * 1024;

/// Watches a response's bytes go by and works out its usage.
pub struct UsageReader {
    provider: Provider,
    sse: bool,
    /// Undecoded bytes: an SSE stream's partial line, or a JSON body so far.
    buf: Vec<u8>,
    gzip: Option<flate2::write::GzDecoder<Vec<u8>>>,
    usage: Option<Usage>,
    overflow: bool,
}

impl UsageReader {
    /// `content_type` and `content_encoding` are the response's headers.
    /// An encoding other than gzip or identity is not read (usage unknown).
    pub fn new(provider: Provider, content_type: &str, content_encoding: &str) -> Self {
        let gzip = content_encoding.eq_ignore_ascii_case("gzip");
        let readable = gzip || content_encoding.is_empty() || content_encoding == "identity";
        UsageReader {
            provider,
            sse: content_type.starts_with("text/event-stream"),
            buf: Vec::new(),
            gzip: gzip.then(|| flate2::write::GzDecoder::new(Vec::new())),
            usage: None,
            overflow: !readable,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if self.overflow {
            return;
        }
        match &mut self.gzip {
            Some(gz) => {
                if gz.write_all(chunk).is_err() {
                    self.overflow = true;
                    return;
                }
                let decoded = std::mem::take(gz.get_mut());
                self.take(&decoded);
            }
            None => self.take(chunk),
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        if self.sse {
            // Read every complete line; keep the partial one.
            let mut start = 0;
            while let Some(nl) = self.buf[start..].iter().position(|&b| b == b'\n') {
                let line = &self.buf[start..start + nl];
                if let Some(data) = line.strip_prefix(b"data:")
                    && let Ok(value) = serde_json::from_slice::<Value>(data.trim_ascii())
                    && let Some(found) = Usage::find(self.provider, &value)
                {
                    self.usage.get_or_insert_default().merge(found);
                }
                start += nl + 1;
            }
            self.buf.drain(..start);
        }
        if self.buf.len() > MAX_KEPT {
            self.overflow = true;
            self.buf = Vec::new();
        }
    }

    /// The usage, once the response has ended.
    pub fn finish(mut self) -> Option<Usage> {
        if let Some(gz) = self.gzip.take()
            && let Ok(rest) = gz.finish()
        {
            self.take(&rest);
        }
        if !self.sse && !self.overflow {
            let value: Value = serde_json::from_slice(&self.buf).ok()?;
            return Usage::find(self.provider, &value);
        }
        if self.sse && !self.buf.is_empty() {
            self.take(b"\n");
        }
        self.usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_stream_usage_comes_from_start_and_delta() {
        let mut r = UsageReader::new(Provider::Anthropic, "text/event-stream", "");
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":90,\"cache_creation_input_tokens\":3,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\n";
        for chunk in stream.as_bytes().chunks(7) {
            r.feed(chunk);
        }
        let u = r.finish().unwrap();
        assert_eq!(
            u,
            Usage {
                input: 5,
                cache_read: 90,
                cache_creation: 3,
                output: 42
            }
        );
    }

    #[test]
    fn openai_totals_become_uncached_input() {
        let mut r = UsageReader::new(Provider::OpenAi, "application/json", "");
        r.feed(br#"{"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":60}}}"#);
        assert_eq!(r.finish().unwrap().input, 40);
    }
}
