//! Newline-delimited JSON-RPC, as MCP's stdio transport frames it:
//!
//! ```text
//! {"jsonrpc":"2.0","id":1,"method":"tools/list"}\n
//! ```
//!
//! A message is one line; it holds no raw newline (JSON escapes them). The
//! decoder hands each line over as it arrived, without its `\n`, so a front
//! that forwards it unchanged forwards the exact bytes; the encoder adds the
//! `\n` back. Empty lines are skipped. A line longer than the limit decodes
//! as [`Frame::Malformed`] and is skipped up to its end, so one oversized
//! message never ends the stream.

use bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::codec::Frame;

#[derive(Debug)]
pub struct LineCodec {
    max_line: usize,
    /// How far the current partial line has been searched for `\n`, so a
    /// 40 MB line arriving in 8 KB reads is scanned once, not 5,000 times.
    searched: usize,
    /// Inside an oversized line: drop bytes up to its end.
    skipping: bool,
}

impl LineCodec {
    pub fn new(max_line: usize) -> Self {
        LineCodec {
            max_line,
            searched: 0,
            skipping: false,
        }
    }
}

impl Default for LineCodec {
    fn default() -> Self {
        // The same ceiling as an LSP frame: tool results of tens of
        // megabytes travel inside one message.
        LineCodec::new(1 << 30)
    }
}

impl Decoder for LineCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        loop {
            let found = src[self.searched..].iter().position(|&b| b == b'\n');
            let Some(at) = found.map(|i| i + self.searched) else {
                if self.skipping {
                    src.clear();
                    self.searched = 0;
                } else if src.len() > self.max_line {
                    self.skipping = true;
                    src.clear();
                    self.searched = 0;
                    return Ok(Some(Frame::Malformed(format!(
                        "a message line is longer than {} bytes",
                        self.max_line
                    ))));
                } else {
                    self.searched = src.len();
                }
                return Ok(None);
            };
            self.searched = 0;
            let line = src.split_to(at + 1).freeze();
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            let body = line.slice(..at);
            if body.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(Frame::Body(body)));
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        // A last message without its newline still counts.
        self.searched = 0;
        if std::mem::take(&mut self.skipping) || src.iter().all(u8::is_ascii_whitespace) {
            src.clear();
            return Ok(None);
        }
        let body = src.split_to(src.len()).freeze();
        Ok(Some(Frame::Body(body)))
    }
}

impl Encoder<Bytes> for LineCodec {
    type Error = std::io::Error;

    fn encode(&mut self, line: Bytes, dst: &mut BytesMut) -> Result<(), Self::Error> {
        dst.reserve(line.len() + 1);
        dst.extend_from_slice(&line);
        dst.extend_from_slice(b"\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut LineCodec, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(frame) = codec.decode(&mut buf).unwrap() {
                out.push(frame);
            }
        }
        while let Some(frame) = codec.decode_eof(&mut buf).unwrap() {
            out.push(frame);
        }
        out
    }

    fn body(s: &str) -> Frame {
        Frame::Body(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn lines_come_out_exactly_across_chunk_boundaries() {
        let mut codec = LineCodec::default();
        let frames = decode_all(
            &mut codec,
            &[b"{\"a\":1}\n{\"b\"", b":2}\r\n\n  \n{\"c\":", b"3}"],
        );
        assert_eq!(
            frames,
            vec![body("{\"a\":1}"), body("{\"b\":2}\r"), body("{\"c\":3}")]
        );
    }

    #[test]
    fn an_oversized_line_is_reported_once_and_skipped() {
        let mut codec = LineCodec::new(8);
        let frames = decode_all(
            &mut codec,
            &[b"{\"x\":\"0123", b"456789\"}", b"tail\n{\"ok\":1}\n"],
        );
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert!(matches!(frames[0], Frame::Malformed(_)));
        assert_eq!(frames[1], body("{\"ok\":1}"));
    }
}
