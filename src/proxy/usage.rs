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
///
/// A gzip response is inflated into the reader through `flate2`'s writer,
/// which inflates at most its 32 KiB buffer before handing the output on:
/// what is kept is bounded by [`MAX_KEPT`] however far a small chunk
/// inflates (a 1 MiB bomb of 1 GiB costs no more memory than a plain 16 MiB
/// body), and once the limit is passed nothing more is inflated.
pub struct UsageReader {
    decoder: Decoder,
}

enum Decoder {
    Plain(Reading),
    Gzip(Box<flate2::write::GzDecoder<Reading>>),
}

/// The decoded bytes, read as they come.
struct Reading {
    provider: Provider,
    sse: bool,
    /// An SSE stream's partial line, or a JSON body so far.
    buf: Vec<u8>,
    /// How much of an SSE stream's partial line is known to hold no
    /// newline (so a long line is searched once, not once a chunk).
    scanned: usize,
    usage: Option<Usage>,
    /// Past [`MAX_KEPT`], or not readable: nothing more is looked at.
    overflow: bool,
}

impl UsageReader {
    /// `content_type` and `content_encoding` are the response's headers.
    /// An encoding other than gzip or identity is not read (usage unknown).
    pub fn new(provider: Provider, content_type: &str, content_encoding: &str) -> Self {
        let gzip = content_encoding.eq_ignore_ascii_case("gzip");
        let readable = gzip || content_encoding.is_empty() || content_encoding == "identity";
        let reading = Reading {
            provider,
            sse: content_type.starts_with("text/event-stream"),
            buf: Vec::new(),
            scanned: 0,
            usage: None,
            overflow: !readable,
        };
        UsageReader {
            decoder: if gzip {
                Decoder::Gzip(Box::new(flate2::write::GzDecoder::new(reading)))
            } else {
                Decoder::Plain(reading)
            },
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        match &mut self.decoder {
            Decoder::Plain(reading) => reading.take(chunk),
            Decoder::Gzip(gz) => {
                if gz.get_ref().overflow {
                    return;
                }
                // An error is bad gzip or the reader's limit: either way
                // the usage is unknown, and inflating stops here.
                if gz.write_all(chunk).is_err() {
                    gz.get_mut().stop();
                }
            }
        }
    }

    /// The usage, once the response has ended.
    pub fn finish(self) -> Option<Usage> {
        match self.decoder {
            Decoder::Plain(mut reading) => reading.finish(),
            Decoder::Gzip(mut gz) => {
                if !gz.get_ref().overflow && gz.try_finish().is_err() {
                    gz.get_mut().stop();
                }
                gz.get_mut().finish()
            }
        }
    }
}

/// Whether an event's data can hold usage: every provider names it under
/// a key starting `usage` (`usage`, `usageMetadata`), unless the key is
/// spelled with a `\u` escape. Most events of a stream are text deltas:
/// they are not parsed at all. The searchers are built once:
/// `memmem::find` builds one on every call, two per event of every
/// streamed answer.
fn may_hold_usage(data: &[u8]) -> bool {
    static FINDERS: std::sync::LazyLock<[memchr::memmem::Finder<'static>; 2]> =
        std::sync::LazyLock::new(|| {
            [
                memchr::memmem::Finder::new(b"usage"),
                memchr::memmem::Finder::new(b"\\u"),
            ]
        });
    FINDERS.iter().any(|f| f.find(data).is_some())
}

impl Reading {
    fn stop(&mut self) {
        self.overflow = true;
        self.buf = Vec::new();
    }

    fn take(&mut self, bytes: &[u8]) {
        if self.overflow {
            return;
        }
        self.buf.extend_from_slice(bytes);
        if self.sse {
            // Read every complete line; keep the partial one.
            let mut start = 0;
            let mut from = self.scanned;
            while let Some(nl) = self.buf[from..].iter().position(|&b| b == b'\n') {
                let line = &self.buf[start..from + nl];
                if let Some(data) = line.strip_prefix(b"data:")
                    && may_hold_usage(data)
                    && let Ok(value) = crate::json::from_slice::<Value>(data.trim_ascii())
                    && let Some(found) = Usage::find(self.provider, &value)
                {
                    self.usage.get_or_insert_default().merge(found);
                }
                start = from + nl + 1;
                from = start;
            }
            self.buf.drain(..start);
            self.scanned = self.buf.len();
        }
        if self.buf.len() > MAX_KEPT {
            self.stop();
        }
    }

    fn finish(&mut self) -> Option<Usage> {
        if self.overflow {
            // A stream's usage read before the limit still counts.
            return if self.sse { self.usage } else { None };
        }
        if !self.sse {
            let value: Value = crate::json::from_slice(&self.buf).ok()?;
            return Usage::find(self.provider, &value);
        }
        if !self.buf.is_empty() {
            self.take(b"\n");
        }
        self.usage
    }
}

impl Write for Reading {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.take(bytes);
        if self.overflow {
            // Tells the inflater to stop: no more output is wanted.
            return Err(std::io::Error::other("usage reader: past its limit"));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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

    /// Events without usage are skipped unread; usage under a key spelled
    /// with escapes is still found.
    #[test]
    fn only_events_that_can_hold_usage_are_read() {
        assert!(!may_hold_usage(
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The "}}"#
        ));
        let mut r = UsageReader::new(Provider::Anthropic, "text/event-stream", "");
        r.feed(b"data: {\"type\":\"message_delta\",\"\\u0075sage\":{\"output_tokens\":42}}\n\n");
        r.feed(b"data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"usage\"}}\n\n");
        assert_eq!(r.finish().map(|u| u.output), Some(42));
    }

    /// #32 item 9: a gzip bomb (128 KiB inflating to 128 MiB here; the
    /// reported one was 1 MiB to 1 GiB) is inflated only until the
    /// reader's limit, whether fed whole or in chunks, as JSON or as an
    /// event stream; what it keeps never passes the limit.
    #[test]
    fn a_gzip_bomb_is_inflated_only_to_the_limit() {
        let bomb = gzip_of_zeros(128 << 20);
        for content_type in ["application/json", "text/event-stream"] {
            for chunk in [bomb.len(), 4 << 10] {
                let mut r = UsageReader::new(Provider::Anthropic, content_type, "gzip");
                let mut fed = 0;
                for part in bomb.chunks(chunk) {
                    r.feed(part);
                    fed += part.len();
                    let Decoder::Gzip(gz) = &r.decoder else {
                        unreachable!()
                    };
                    assert!(gz.get_ref().buf.capacity() <= 2 * MAX_KEPT);
                    if gz.get_ref().overflow {
                        break;
                    }
                }
                let Decoder::Gzip(gz) = &r.decoder else {
                    unreachable!()
                };
                assert!(
                    gz.get_ref().overflow,
                    "{content_type}: stopped at the limit"
                );
                if chunk < bomb.len() {
                    assert!(
                        fed < bomb.len() / 2,
                        "{content_type}: {fed} of {}",
                        bomb.len()
                    );
                }
                assert_eq!(r.finish(), None);
            }
        }
        // A stream's usage before the limit still counts.
        let mut plain = b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n".to_vec();
        plain.extend(std::iter::repeat_n(b'x', 20 << 20));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let mut r = UsageReader::new(Provider::Anthropic, "text/event-stream", "gzip");
        r.feed(&gz.finish().unwrap());
        assert_eq!(r.finish().map(|u| u.input), Some(5));
    }

    fn gzip_of_zeros(len: usize) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..len >> 20 {
            gz.write_all(&zeros).unwrap();
        }
        gz.finish().unwrap()
    }

    #[test]
    fn gzip_usage_is_read_as_it_inflates() {
        let body = br#"{"usage":{"prompt_tokens":100,"completion_tokens":7}}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(body).unwrap();
        let bytes = gz.finish().unwrap();
        let mut r = UsageReader::new(Provider::OpenAi, "application/json", "gzip");
        for part in bytes.chunks(3) {
            r.feed(part);
        }
        assert_eq!(r.finish().map(|u| u.output), Some(7));
    }

    #[test]
    fn openai_totals_become_uncached_input() {
        let mut r = UsageReader::new(Provider::OpenAi, "application/json", "");
        r.feed(br#"{"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":60}}}"#);
        assert_eq!(r.finish().unwrap().input, 40);
    }
}
