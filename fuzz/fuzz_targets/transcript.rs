//! The streaming transcript reader: any bytes read as a transcript, lines
//! bounded as configured, without panicking; what it reports stays inside
//! the input, and cutting a trailing open call is always possible. Each
//! line's head is the same through the shadow as by serde_json alone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolwire::format::Format;
use toolwire::transcript::reader::{
    Head, ReadLimits, SessionImage, parse_head, parse_head_plain, parse_line, read_lines,
};

/// A head as text, without the digests only the shadow adds.
fn shown(head: Option<Head>) -> String {
    format!(
        "{:?}",
        head.map(|head| match head {
            Head::Message(mut skim) => {
                skim.results.iter_mut().for_each(|r| r.digest = None);
                Head::Message(skim)
            }
            other => other,
        })
    )
}

fuzz_target!(|data: &[u8]| {
    let mut image = SessionImage::default();
    let limits = ReadLimits {
        max_line: 512,
        window: 64,
    };
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
        assert_eq!(
            shown(parse_head(Format::Anthropic, line)),
            shown(parse_head_plain(Format::Anthropic, line))
        );
    }
});
