//! Other agents' session files (the provider formats toolwire reads today):
//! any bytes are told apart by content and converted as each agent's file,
//! without panicking; every transcript a conversion writes reads back as
//! whole, valid lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolwire::import::{Agent, convert, detect};
use toolwire::transcript::reader::parse_line;

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
            assert!(
                parse_line(line).is_some(),
                "{agent:?} wrote an unreadable line: {}",
                String::from_utf8_lossy(line)
            );
        }
    }
});
