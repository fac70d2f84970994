//! The four conversation formats (the `format` layer's dialects) on any
//! messages: the bytes are JSON lines, each a message. For every format,
//! pairing, `check`, the skim the transcript reader takes and the
//! proxy's in-memory repair never panic, on repaired messages too, and
//! repair is a fixed point: what it repaired it leaves alone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolwire::format::{self, Format};
use toolwire::transcript::check::check_messages;
use toolwire::transcript::repair::repair_messages;

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let messages: Vec<Value> = lines
        .iter()
        .filter_map(|line| toolwire::json::from_slice::<Value>(line).ok())
        .collect();
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
