//! The LSP frame codec: any byte stream, arriving in chunks of any size,
//! decodes without panicking into bodies within the limit or malformed
//! frames; and any body encodes and decodes back unchanged.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::{Decoder, Encoder};
use toolwire::transport::codec::{Frame, LspCodec};

const LIMIT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    // The first byte chooses how the stream is split into reads.
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let mut codec = LspCodec::new(LIMIT);
    let mut buf = BytesMut::new();
    for chunk in stream.chunks(usize::from(step).max(1)) {
        buf.extend_from_slice(chunk);
        while let Some(frame) = codec.decode(&mut buf).expect("decoding never fails") {
            if let Frame::Body(body) = frame {
                assert!(body.len() <= LIMIT);
            }
        }
    }

    let mut codec = LspCodec::new(usize::MAX);
    let mut wire = BytesMut::new();
    codec
        .encode(Bytes::copy_from_slice(stream), &mut wire)
        .expect("encoding never fails");
    let decoded = codec.decode(&mut wire).expect("decoding never fails");
    assert_eq!(decoded, Some(Frame::Body(Bytes::copy_from_slice(stream))));
    assert!(wire.is_empty());
});
