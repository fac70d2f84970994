//! A value written as compact JSON, byte for byte what
//! `serde_json::to_writer` writes of it, without going through serde.
//!
//! A transcript line is its message's value serialized, and serializing
//! was about a tenth of a small pair's instructions over stdio: serde's
//! calls for every member and string, and serde_json's escape scan, which
//! looks up each byte of each string in a table. Here a string's bytes
//! are checked eight at a time, and a string with nothing to escape (the
//! keys, ids, names and most text) is copied in one piece.
//!
//! What serde_json writes, and so what this writes: `null`, `true`,
//! `false`; a number as its text (`arbitrary_precision` keeps the text
//! the parse normalized); a string in quotes with `"` and `\` escaped by
//! a backslash, `\b`, `\t`, `\n`, `\f`, `\r` for those control
//! characters and `\u00xx` (lowercase hex) for the other ones below
//! 0x20, every other byte as it is; arrays and objects with no space,
//! members in the map's order.

use serde_json::Value;

/// Append `value` to `out` as compact JSON.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => out.extend_from_slice(n.as_str().as_bytes()),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

/// Append `s` as a JSON string, escaped as serde_json escapes it.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut plain = first_to_escape(bytes);
    if plain == bytes.len() {
        // Nothing to escape (nearly every string): one piece.
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    out.extend_from_slice(&bytes[..plain]);
    loop {
        let byte = bytes[plain];
        escape(out, byte);
        plain += 1;
        let next = plain + first_to_escape(&bytes[plain..]);
        out.extend_from_slice(&bytes[plain..next]);
        if next == bytes.len() {
            break;
        }
        plain = next;
    }
    out.push(b'"');
}

/// Append the escape of `byte`, one [`first_to_escape`] stops at.
fn escape(out: &mut Vec<u8>, byte: u8) {
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        b'\t' => out.extend_from_slice(b"\\t"),
        b'\n' => out.extend_from_slice(b"\\n"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\r' => out.extend_from_slice(b"\\r"),
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        }
    }
}

/// How many bytes of `bytes` precede the first one JSON escapes (a quote,
/// a backslash, a control character); its length when there is none.
fn first_to_escape(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut at = 0;
    for word in bytes.chunks_exact(8) {
        let x = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
        // A byte is flagged when it is below 0x20, or zero once xored with
        // the quote or the backslash (the classic "has a zero byte" test:
        // exact on whether any byte is, which is all that is asked here).
        let zero = |v: u64| v.wrapping_sub(ONES) & !v;
        let flagged = (x.wrapping_sub(ONES * 0x20) & !x)
            | zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')));
        if flagged & HIGHS != 0 {
            break;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
        .unwrap_or(bytes.len() - at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ours(value: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_what_serde_json_writes() {
        let texts = [
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"make"}}]}"#,
            r#"{"a":[1,-0,1.50,1E5,1e-7,-2.5E+3,18446744073709551616,1e400],"b":null,"c":true,"d":false}"#,
            r#"{"s":"quote \" back \\ slash / and \u0000\u0001\b\t\n\u000b\f\r\u001f\u007f é ✓ 😀"}"#,
            r#"{"dup":1,"other":2,"dup":3}"#,
            r#"[[],{},"",[[{"":""}]]]"#,
            r#""tail needing escape at the end\"""#,
            r#""12345678\"12345678\\1234567\n""#,
        ];
        for text in texts {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                ours(&value),
                serde_json::to_string(&value).unwrap(),
                "{text}"
            );
        }
    }

    fn values() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC*".prop_map(Value::String),
            proptest::collection::vec(0u8..0x80, 0..40)
                .prop_map(|b| Value::String(String::from_utf8(b).unwrap())),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::vec(("[\\x00-\\x7f]{0,12}", inner), 0..8)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_value_is_written_as_serde_json_writes_it(value in values()) {
            prop_assert_eq!(ours(&value), serde_json::to_string(&value).unwrap());
        }
    }
}
