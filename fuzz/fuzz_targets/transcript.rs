//! The streaming transcript reader: any bytes read as a transcript, lines
//! bounded as configured, without panicking; what it reports stays inside
//! the input, and cutting a trailing open call is always possible.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolwire::format::Format;
use toolwire::transcript::reader::{ReadLimits, SessionImage, parse_line, read_lines};

fuzz_target!(|data: &[u8]| {
    let mut image = SessionImage::default();
    let limits = ReadLimits { max_line: 512 };
    let (complete, torn) = read_lines(
        Format::Anthropic,
        data,
        limits,
        || false,
        |span, head| {
            assert!(span.offset + span.len <= data.len() as u64);
            image.add(span, head);
        },
    )
    .expect("reading memory never fails");
    assert!(complete <= data.len() as u64);
    assert_eq!(torn, (complete as usize) < data.len());
    if let Some(at) = image.open_call_at() {
        assert!(at < complete);
    }
    image.cut_open_call();
    assert!(image.open_call_at().is_none());
    for line in data.split(|&b| b == b'\n') {
        let _ = parse_line(line);
    }
});
