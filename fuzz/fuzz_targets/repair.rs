//! `transcript/repair` on any bytes: never panics, and its output is a
//! fixed point (repairing it again changes nothing).
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolwire::format::Format;
use toolwire::transcript::repair::repair_bytes;

fuzz_target!(|data: &[u8]| {
    let (out, _report, changed) = repair_bytes(Format::Anthropic, data);
    if !changed {
        assert_eq!(out, data);
    }
    let (again, report, changed_again) = repair_bytes(Format::Anthropic, &out);
    assert!(
        !changed_again,
        "a repaired transcript needed repair again: {report:?}"
    );
    assert_eq!(again, out);
});
