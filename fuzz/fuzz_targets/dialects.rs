//! The four conversation formats (the `format` layer's dialects) on any
//! messages: the bytes are JSON lines, each a message. For every format,
//! pairing, `check`, the skim the transcript reader takes and the
//! proxy's in-memory repair never panic, on repaired messages too, and
//! repair is a fixed point: what it repaired it leaves alone. And a
//! compact Anthropic message that `pair/append` reads from its text reads
//! as its value does: taken only if the checks accept it, with the same
//! side, items and compaction.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolwire::format::{self, Format, View};
use toolwire::transcript::check::check_messages;
use toolwire::transcript::repair::repair_messages;

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let messages: Vec<Value> = lines
        .iter()
        .filter_map(|line| toolwire::json::from_slice::<Value>(line).ok())
        .collect();
    for line in &lines {
        let Ok(text) = std::str::from_utf8(line) else {
            continue;
        };
        // What `pair/append` hands the text reader: one JSON value, compact.
        if serde_json::from_str::<&serde_json::value::RawValue>(text).is_err()
            || !format::is_compact_json(line)
        {
            continue;
        }
        if let Some(view) = format::anthropic::text_view(text) {
            let value: Value = serde_json::from_str(text).expect("compact JSON reads as a value");
            let anthropic = Format::Anthropic.dialect();
            if let Err(err) = anthropic.validate(&value, "message", true) {
                panic!("the text reader took a message the checks refuse ({err}): {text}");
            }
            assert_eq!(view, View::of(anthropic, &value), "{text}");
        }
    }
    for format in Format::ALL {
        let dialect = format.dialect();
        for line in &lines {
            let _ = dialect.skim(line);
        }
        let _ = format::pair(dialect, &messages);
        let _ = check_messages(dialect, &messages);
        let Some((repaired, _report)) = repair_messages(format, &messages) else {
            continue;
        };
        let _ = check_messages(dialect, &repaired);
        if let Some((again, report)) = repair_messages(format, &repaired) {
            panic!(
                "{format}: repair is not a fixed point: {report:?}\n{}\n-> {}",
                Value::Array(repaired),
                Value::Array(again)
            );
        }
    }
});
