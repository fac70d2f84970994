//! The envelope of a request as nearly every client writes it, read by its
//! bytes.
//!
//! ```text
//! {"jsonrpc":"2.0","id":7,"method":"pair/append","params":{...}}
//! ```
//!
//! A request of a small pair is a few hundred bytes, and reading its
//! envelope through serde (a struct of three borrowed members, a value for
//! the id, the params kept as text) cost about a fifth of what the server
//! spends on it over stdio. With the members in this order, compact, and
//! an integer id, the envelope is fixed text around the method's name, the
//! id's digits and the params: only the params are parsed, and only to
//! check that they are one JSON value. What does not match is left to the
//! serde reading, which answers it as it always has.

use serde_json::Value;
use serde_json::value::RawValue;

/// The envelope of a request with its params kept as text, as serde reads
/// it: exactly these four members, in any order and spacing.
#[derive(serde::Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    jsonrpc: &'a str,
    id: Value,
    method: &'a str,
    #[serde(borrow)]
    params: &'a RawValue,
}

/// A request of version 2.0 whose envelope has exactly its four members,
/// with its params as text: read by its bytes when it is spelled as
/// [`plain_request`] takes it, else through serde; `None` when it is no
/// such request (a batch, a notification, a duplicate or extra member,
/// not JSON).
pub fn read(body: &[u8]) -> Option<PlainRequest<'_>> {
    plain_request(body).or_else(|| {
        let envelope: Envelope = serde_json::from_slice(body).ok()?;
        (envelope.jsonrpc == "2.0").then_some(PlainRequest {
            id: envelope.id,
            method: envelope.method,
            params: envelope.params,
        })
    })
}

/// A request read by [`read`].
#[derive(Debug)]
pub struct PlainRequest<'a> {
    pub id: Value,
    pub method: &'a str,
    pub params: &'a RawValue,
}

/// `body` as a request `{"jsonrpc":"2.0","id":N,"method":"M","params":P}`:
/// members in that order with nothing between them, `N` a non-negative
/// integer as JSON spells it, `M` without escapes, `P` one JSON value
/// (with any whitespace around it) and the closing brace the body's last
/// byte. Such a body is valid JSON whose four members are exactly these,
/// so the serde reading of it gives the same id, method and params; `None`
/// for anything else.
///
/// One difference: `P` is checked at the top of a parse, where serde_json
/// counts one level less nesting than inside the envelope. Params nested
/// exactly to serde_json's limit, which the serde reading refuses and
/// hands to the ordinary path, are taken here; each method decodes its
/// params from this text or, failing that, from a value of it parsed
/// without that limit, which is what the ordinary path does too.
pub fn plain_request(body: &[u8]) -> Option<PlainRequest<'_>> {
    let envelope = plain_envelope(body)?;
    let params: &RawValue = serde_json::from_slice(&body[envelope.params]).ok()?;
    Some(PlainRequest {
        id: Value::from(envelope.id),
        method: envelope.method,
        params,
    })
}

/// The envelope [`plain_request`] reads, with `P` not yet checked: the
/// body is that request exactly when `P` is one JSON value. A reader that
/// parses `P` anyway (`pair/append`'s session task decodes it into the
/// message) checks it there, rather than walking the same bytes twice.
#[derive(Debug)]
pub struct PlainEnvelope<'a> {
    pub id: u64,
    pub method: &'a str,
    /// Where `P` stands in the body.
    pub params: std::ops::Range<usize>,
}

/// The envelope of [`plain_request`], `P` unchecked; `None` when the body
/// is not spelled that way around it.
pub fn plain_envelope(body: &[u8]) -> Option<PlainEnvelope<'_>> {
    let rest = body.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    // No leading zero (not JSON), and few enough digits for a u64.
    if digits == 0 || digits > 20 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    let (id, rest) = rest.split_at(digits);
    let id: u64 = std::str::from_utf8(id).ok()?.parse().ok()?;
    let rest = rest.strip_prefix(br#","method":""#)?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    let (method, rest) = rest.split_at(end);
    // A control character is no JSON inside a string: serde refuses it.
    if method.iter().any(|&b| b < 0x20) {
        return None;
    }
    let method = std::str::from_utf8(method).ok()?;
    let rest = rest.strip_prefix(br#"","params":"#)?;
    let params = rest.strip_suffix(b"}")?;
    let start = body.len() - rest.len();
    Some(PlainEnvelope {
        id,
        method,
        params: start..start + params.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_request_reads_as_serde_reads_it() {
        let bodies = [
            r#"{"jsonrpc":"2.0","id":7,"method":"pair/append","params":{"sessionId":"s","message":{"role":"user","content":"hi"}}}"#,
            r#"{"jsonrpc":"2.0","id":0,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m","params":{"a":[1,2.50,1e400]}}"#,
            r#"{"jsonrpc":"2.0","id":12,"method":"state/get","params": {"sessionId":"s"} }"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"m","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"m","params":null}"#,
        ];
        for body in bodies {
            let ours = plain_request(body.as_bytes()).expect(body);
            let theirs: Envelope = serde_json::from_str(body).unwrap();
            assert_eq!(theirs.jsonrpc, "2.0");
            assert_eq!(ours.id, theirs.id, "{body}");
            assert_eq!(ours.id.to_string(), theirs.id.to_string(), "{body}");
            assert_eq!(ours.method, theirs.method, "{body}");
            assert_eq!(ours.params.get(), theirs.params.get(), "{body}");
        }
    }

    #[test]
    fn anything_else_is_left_to_the_serde_reading() {
        let bodies = [
            // Another order, spacing, id or escape.
            r#"{"id":1,"jsonrpc":"2.0","method":"m","params":{}}"#,
            r#"{"jsonrpc": "2.0","id":1,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":"1","method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":-1,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":01,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1.0,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1e2,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":184467440737095516150,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"p\u0061ir/append","params":{}}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\n\",\"params\":{}}",
            // No params, or more members after them.
            r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{},"id":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{},"x":{}}"#,
            // Not JSON, or not all of it.
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{} "#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":"#,
            "",
        ];
        for body in bodies {
            assert!(plain_request(body.as_bytes()).is_none(), "{body}");
        }
        // What serde reads of those it may.
        assert_eq!(
            read(br#"{"id":1,"jsonrpc":"2.0","method":"m","params":{}}"#).map(|r| r.method),
            Some("m")
        );
        assert!(read(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{},"x":{}}"#).is_none());
        assert!(read(br#"{"jsonrpc":"1.0","id":1,"method":"m","params":{}}"#).is_none());
    }
}
