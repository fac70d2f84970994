//! Parsing JSON that nests deeper than `serde_json`'s default limit.
//!
//! `serde_json` refuses anything nested more than 128 levels, because its
//! parser recurses once per level and a deep enough input would overflow
//! the stack. Tool inputs are the model's own JSON and may legitimately nest
//! far deeper, so toolwire accepts up to [`MAX_DEPTH`] levels:
//!
//! - the common case (≤ 128 levels) takes the ordinary parser unchanged;
//! - a deeper input is measured by a flat byte scan (no recursion) and, if
//!   within [`MAX_DEPTH`], parsed again with the limit lifted and the
//!   parser's stack grown on the heap as needed (`serde_stacker`), so the
//!   depth no thread's stack size decides whether parsing succeeds;
//! - anything deeper is refused without being parsed, and [`request_id`]
//!   still finds the request's `id` so the refusal answers the right
//!   request.
//!
//! Everything downstream that walks a parsed value (serializing it into a
//! transcript line or a reply, cloning, dropping) recurses too; the depth
//! bound keeps that within the threads' stacks (see `crate::process` for
//! their size).
//!
//! Beside it: `strings`, JSON strings scanned (and unescaped) 64 bytes
//! at a time, [`lifted`], a large request parsed with its long strings
//! kept away from serde_json, to the same value or the same error, and
//! [`write`], a value written as serde_json writes it, without serde.

pub mod by_name;
pub mod lifted;
pub(crate) mod strings;
pub mod write;

use serde::Deserialize;
use serde_json::Value;

/// Deepest nesting of arrays and objects accepted in one message, request
/// envelope included. A tool input nested 1,000 levels sits about eight
/// levels down in a `budget/apply` request.
pub const MAX_DEPTH: usize = 1_100;

/// Why a body could not be parsed.
#[derive(Debug)]
pub enum ParseError {
    /// Not JSON, or not the expected shape.
    Syntax(serde_json::Error),
    /// Valid as far as read, but nested deeper than [`MAX_DEPTH`].
    TooDeep { depth: usize },
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Syntax(err) => err.fmt(f),
            ParseError::TooDeep { depth } => write!(
                f,
                "JSON nested {depth} levels deep; at most {MAX_DEPTH} levels are accepted"
            ),
        }
    }
}

/// Parse `bytes` as `T`, accepting nesting up to [`MAX_DEPTH`].
pub fn from_slice<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ParseError> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(err) if is_recursion_limit(&err) => {
            let depth = nesting_depth(bytes);
            if depth > MAX_DEPTH {
                return Err(ParseError::TooDeep { depth });
            }
            let mut de = serde_json::Deserializer::from_slice(bytes);
            de.disable_recursion_limit();
            let value = T::deserialize(serde_stacker::Deserializer::new(&mut de))
                .map_err(ParseError::Syntax)?;
            de.end().map_err(ParseError::Syntax)?;
            Ok(value)
        }
        Err(err) => Err(ParseError::Syntax(err)),
    }
}

/// A request's body as a value: [`from_slice`], with a large body's long
/// strings unescaped here rather than by serde_json ([`lifted`]); the same
/// value, or the same error, either way.
pub fn request_from_slice(bytes: &[u8]) -> Result<Value, ParseError> {
    if bytes.len() >= lifted::LARGE {
        lifted::from_slice(bytes)
    } else {
        from_slice(bytes)
    }
}

/// A request's body as a value ([`request_from_slice`]), or how a body
/// that is none is answered: valid JSON too deep to hold is refused as
/// an invalid request with the id it carries, anything else that is no
/// JSON is a parse error answered with id `null`.
pub fn request_or_refusal(bytes: &[u8]) -> Result<Value, Box<(Value, crate::error::Error)>> {
    use crate::error::Error;
    match request_from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(err @ ParseError::TooDeep { .. }) => Err(Box::new((
            request_id(bytes),
            Error::InvalidRequest(err.to_string()),
        ))),
        Err(err) => Err(Box::new((Value::Null, Error::Parse(err.to_string())))),
    }
}

fn is_recursion_limit(err: &serde_json::Error) -> bool {
    err.is_syntax() && err.to_string().starts_with("recursion limit exceeded")
}

/// Deepest nesting of arrays and objects in `bytes`, outside strings; a
/// flat scan that never recurses and stops counting once past
/// [`MAX_DEPTH`]'s double (the exact figure no longer matters then).
pub fn nesting_depth(bytes: &[u8]) -> usize {
    let mut scan = Scanner::new(bytes);
    let mut max = 0;
    while let Some(token) = scan.next() {
        if let Token::Open(_) = token {
            max = max.max(scan.depth);
            if max > 2 * MAX_DEPTH {
                break;
            }
        }
    }
    max
}

/// The `id` member of a top-level JSON object, read without parsing the
/// rest (which may be too deep to parse): the id to answer a refused
/// request with. `Null` when there is none or it is not a valid JSON-RPC
/// id (a string, a number or null).
pub fn request_id(bytes: &[u8]) -> Value {
    let mut scan = Scanner::new(bytes);
    let mut expect_key = false;
    let mut key_is_id = false;
    let mut value_from = None;
    while let Some(token) = scan.next() {
        match token {
            Token::Open(b'{') if scan.depth == 1 => expect_key = true,
            Token::Open(_) if scan.depth == 1 => return Value::Null,
            Token::String(range) if scan.depth == 1 && expect_key => {
                key_is_id = &bytes[range] == b"\"id\"";
                expect_key = false;
            }
            Token::Colon if scan.depth == 1 && key_is_id => value_from = Some(scan.pos),
            Token::Comma | Token::Close if scan.depth <= 1 => {
                if let Some(from) = value_from {
                    let end = scan.pos - 1;
                    return match serde_json::from_slice(&bytes[from..end]) {
                        Ok(id @ (Value::String(_) | Value::Number(_))) => id,
                        _ => Value::Null,
                    };
                }
                expect_key = true;
            }
            _ => {}
        }
    }
    Value::Null
}

enum Token {
    Open(u8),
    Close,
    Comma,
    Colon,
    /// A string, quotes included.
    String(std::ops::Range<usize>),
}

/// The structural tokens of a JSON text, with the nesting depth after each.
struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> Scanner<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Scanner {
            bytes,
            pos: 0,
            depth: 0,
        }
    }

    fn next(&mut self) -> Option<Token> {
        while let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            match b {
                b'{' | b'[' => {
                    self.depth += 1;
                    return Some(Token::Open(b));
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    return Some(Token::Close);
                }
                b',' => return Some(Token::Comma),
                b':' => return Some(Token::Colon),
                b'"' => {
                    let start = self.pos - 1;
                    let mut escaped = false;
                    while let Some(&c) = self.bytes.get(self.pos) {
                        self.pos += 1;
                        match (escaped, c) {
                            (false, b'\\') => escaped = true,
                            (false, b'"') => break,
                            _ => escaped = false,
                        }
                    }
                    return Some(Token::String(start..self.pos));
                }
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn parses_deep_values_and_refuses_deeper_ones() {
        let ok: Value = from_slice(nested(MAX_DEPTH).as_bytes()).unwrap();
        let mut depth = 0;
        let mut v = &ok;
        while let Value::Array(items) = v {
            depth += 1;
            v = &items[0];
        }
        assert_eq!(depth, MAX_DEPTH);
        assert!(matches!(
            from_slice::<Value>(nested(MAX_DEPTH + 1).as_bytes()),
            Err(ParseError::TooDeep { depth }) if depth == MAX_DEPTH + 1
        ));
        // Brackets inside strings do not count.
        assert_eq!(nesting_depth(br#"{"a":"[[[{{\"[","b":[1]}"#), 2);
    }

    #[test]
    fn finds_the_id_of_a_request_too_deep_to_parse() {
        let deep = nested(5000);
        let body = format!(
            r#"{{"jsonrpc":"2.0","params":{{"x":{deep},"id":"inner"}},"id":42,"method":"m"}}"#
        );
        assert_eq!(request_id(body.as_bytes()), serde_json::json!(42));
        let body = format!(r#"{{"id":"a\"b","params":{deep}}}"#);
        assert_eq!(request_id(body.as_bytes()), serde_json::json!("a\"b"));
        for no_id in [
            format!(r#"{{"params":{deep}}}"#),
            format!(r#"{{"id":{deep}}}"#),
            format!(r#"[{{"id":1,"params":{deep}}}]"#),
        ] {
            assert_eq!(
                request_id(no_id.as_bytes()),
                Value::Null,
                "{}",
                &no_id[..20]
            );
        }
    }
}
