//! The LSP frame codec: any byte stream, arriving in chunks of any size,
//! decodes without panicking into bodies within the limit or malformed
//! frames; any body encodes and decodes back unchanged; and a valid frame
//! sent right after garbage (with or without a line break or blank line
//! between them) is still decoded, so its request is answered.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::{Decoder, Encoder};
use toolwire::transport::codec::{Frame, LspCodec};

const LIMIT: usize = 4096;

/// Header blocks that name a length that is none: the garbage a broken
/// client sends most, and the one that swallowed the next frame.
const BAD_HEADERS: [&[u8]; 5] = [
    b"",
    b"Content-Length: -1\r\n\r\n",
    b"content-length: 1e3\r\n\r\n",
    b"Content-Length: 99999999999999999999999\r\n\r\n",
    b"Content-Type: x\r\nContent-Length:\r\n\r\n",
];

/// What may stand between the garbage and the frame.
const SEPARATORS: [&[u8]; 4] = [b"", b"\n", b"\r\n", b"\r\n\r\n"];

/// Decode `stream` fed in reads of `step` bytes; every frame, in order.
fn decode_in_reads(stream: &[u8], step: usize) -> (Vec<Frame>, BytesMut) {
    let mut codec = LspCodec::new(LIMIT);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in stream.chunks(step.max(1)) {
        buf.extend_from_slice(chunk);
        while let Some(frame) = codec.decode(&mut buf).expect("decoding never fails") {
            if let Frame::Body(body) = &frame {
                assert!(body.len() <= LIMIT);
            }
            frames.push(frame);
        }
    }
    (frames, buf)
}

/// `garbage` with every `Content-Length` (in any case) broken: garbage
/// that names a length is a frame whose body may be the next frame, which
/// no reader can tell apart.
fn without_lengths(garbage: &[u8]) -> Vec<u8> {
    const NAME: &[u8] = b"content-length";
    let mut out = garbage.to_vec();
    let mut at = 0;
    while let Some(found) = out[at..]
        .windows(NAME.len())
        .position(|w| w.eq_ignore_ascii_case(NAME))
    {
        // `_` is in no occurrence, so none is made by the change.
        out[at + found + 7] = b'_';
        at += found + 1;
    }
    out
}

/// Garbage (a bad header block, then arbitrary bytes that name no
/// length), a separator, then a valid frame: the frame is the last thing
/// decoded, and nothing is left over.
fn frame_after_garbage(data: &[u8]) {
    let [step, shape, cut_hi, cut_lo, rest @ ..] = data else {
        return;
    };
    let cut = usize::from(u16::from_be_bytes([*cut_hi, *cut_lo])).min(rest.len());
    let (garbage, body) = rest.split_at(cut);
    let body = &body[..body.len().min(LIMIT)];
    let mut stream = BAD_HEADERS[usize::from(shape % 5)].to_vec();
    stream.extend_from_slice(&without_lengths(garbage));
    stream.extend_from_slice(SEPARATORS[usize::from((shape / 5) % 4)]);
    stream.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    stream.extend_from_slice(body);
    let (frames, left) = decode_in_reads(&stream, usize::from(*step));
    assert_eq!(
        frames.last(),
        Some(&Frame::Body(Bytes::copy_from_slice(body))),
        "the frame after the garbage was not decoded: {frames:?}"
    );
    assert!(left.is_empty(), "{left:?} left over");
}

fuzz_target!(|data: &[u8]| {
    frame_after_garbage(data);
    // The first byte chooses how the stream is split into reads.
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    decode_in_reads(stream, usize::from(step));

    let mut codec = LspCodec::new(usize::MAX);
    let mut wire = BytesMut::new();
    codec
        .encode(Bytes::copy_from_slice(stream), &mut wire)
        .expect("encoding never fails");
    let decoded = codec.decode(&mut wire).expect("decoding never fails");
    assert_eq!(decoded, Some(Frame::Body(Bytes::copy_from_slice(stream))));
    assert!(wire.is_empty());
});
