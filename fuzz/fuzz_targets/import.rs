//! Other agents' session files (the provider formats toolwire reads today):
//! any bytes are told apart by content and converted as each agent's file,
//! without panicking; every transcript a conversion writes is whole lines,
//! each a `session` line or `{"type":"message","message":{…}}`.
//!
//! (Not `transcript::reader::parse_line`: until the `format` layer lands it
//! reads Anthropic messages only, and an OpenAI Responses item such as a
//! `compaction` has no `role`.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolwire::transcript::import::{Agent, convert, detect};

fuzz_target!(|data: &[u8]| {
    let _ = detect(data);
    for agent in Agent::ALL {
        let Ok(conversion) = convert(agent, data) else {
            continue;
        };
        let mut out = Vec::new();
        conversion
            .write_transcript(&mut out)
            .expect("writing to memory never fails");
        assert!(out.is_empty() || out.ends_with(b"\n"));
        for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let value: Value = toolwire::json::from_slice(line)
                .unwrap_or_else(|e| panic!("{agent:?} wrote a line that is not JSON ({e})"));
            let whole = match value["type"].as_str() {
                Some("session") => value["format"].is_string(),
                Some("message") => value["message"].is_object(),
                _ => false,
            };
            assert!(whole, "{agent:?} wrote {value}");
        }
    }
});
