//! A message body as the server reads it: parsed at any depth (or refused,
//! with the id still found), parsed again with its long strings lifted (to
//! the same answer), classified, and its params decoded as every method's
//! params type in turn; a request the server reads by its bytes reads the
//! same as parsed, and `pair/append`'s params decoded unchecked are JSON;
//! a value is written as serde_json writes it. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolwire::methods::{Exec, MethodVisitor, SessionMethod, visit_all};
use toolwire::protocol::{Method, PairAppend};
use toolwire::transport::Incoming;

/// Decodes the params it holds as each method's params.
struct DecodeAll(Value);

impl MethodVisitor for DecodeAll {
    fn visit<M: Method>(&mut self, _exec: Exec) {
        let _ = toolwire::methods::params::<M::Params>(self.0.clone());
    }
}

fuzz_target!(|data: &[u8]| {
    // A request read by its bytes (the server's shortcut for the usual
    // spelling) is JSON with exactly the envelope the shortcut read.
    if let Some(plain) = toolwire::transport::envelope::plain_request(data) {
        let value: Value = toolwire::json::from_slice(data)
            .unwrap_or_else(|e| panic!("read by its bytes, yet no JSON: {e}"));
        let members = value.as_object().expect("an object");
        assert_eq!(members.len(), 4);
        assert_eq!(members["jsonrpc"], "2.0");
        assert_eq!(members["id"], plain.id);
        assert_eq!(members["method"], plain.method);
        let params: Value = toolwire::json::from_slice(plain.params.get().as_bytes())
            .unwrap_or_else(|e| panic!("params read by their bytes, yet no JSON: {e}"));
        assert_eq!(members["params"], params);
    }
    // Params the reader leaves unchecked (`pair/append`'s) and the
    // session's task decodes are JSON: the body is then a plain request.
    if let Some(envelope) = toolwire::transport::envelope::plain_envelope(data)
        && PairAppend::params_from_text(&data[envelope.params]).is_some()
    {
        assert!(
            toolwire::transport::envelope::plain_request(data).is_some(),
            "params decoded unchecked, yet no plain request"
        );
    }
    // Long strings lifted out of serde_json's way or not, the same answer.
    let lifted = toolwire::json::lifted::from_slice(data);
    let value: Value = match toolwire::json::from_slice(data) {
        Ok(value) => {
            assert_eq!(lifted.ok().as_ref(), Some(&value));
            value
        }
        Err(err) => {
            assert_eq!(lifted.err().map(|e| e.to_string()), Some(err.to_string()));
            let _ = toolwire::json::request_id(data);
            return;
        }
    };
    let mut written = Vec::new();
    toolwire::json::write::write_value(&mut written, &value);
    assert_eq!(
        written,
        serde_json::to_vec(&value).expect("a value serializes"),
        "written otherwise than serde_json writes it"
    );
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let _ = Incoming::classify(value.clone());
    visit_all(&mut DecodeAll(params));
    visit_all(&mut DecodeAll(value));
});
