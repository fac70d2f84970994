//! LSP base-protocol framing as a `tokio_util` codec:
//!
//! ```text
//! Content-Length: 52\r\n
//! Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n   (optional, ignored)
//! \r\n
//! {"jsonrpc":"2.0","id":1,"method":"state/get",...}
//! ```
//!
//! A broken header block does not end the stream: it decodes as
//! [`Frame::Malformed`] (answered with a parse error) and reading resumes
//! after it, so one bad frame never takes the server down.

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// One decoded unit of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete body.
    Body(Bytes),
    /// Something that is not a valid frame, with the reason.
    Malformed(String),
}

#[derive(Debug)]
pub struct LspCodec {
    max_body: usize,
    /// Bytes of an oversized body still to skip.
    skipping: usize,
}

/// Largest header block accepted before the stream is judged garbage.
const MAX_HEADER: usize = 8 * 1024;

impl LspCodec {
    pub fn new(max_body: usize) -> Self {
        LspCodec {
            max_body,
            skipping: 0,
        }
    }
}

/// Largest frame body accepted: tool results of tens of megabytes travel
/// inside one frame, and a transcript line is never longer than the frame
/// that brought its message.
pub const MAX_FRAME: usize = 1 << 30;

impl Default for LspCodec {
    fn default() -> Self {
        LspCodec::new(MAX_FRAME)
    }
}

impl Decoder for LspCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        if self.skipping > 0 {
            let n = self.skipping.min(src.len());
            src.advance(n);
            self.skipping -= n;
            if self.skipping > 0 {
                return Ok(None);
            }
        }
        let Some(end) = find(src, b"\r\n\r\n") else {
            if src.len() > MAX_HEADER {
                // No header terminator in sight: drop what we have.
                src.clear();
                return Ok(Some(Frame::Malformed("header block too long".into())));
            }
            return Ok(None);
        };
        let header = &src[..end];
        let length = match parse_length(header) {
            Ok(length) => length,
            Err(reason) => {
                src.advance(end + 4);
                return Ok(Some(Frame::Malformed(reason)));
            }
        };
        if length > self.max_body {
            src.advance(end + 4);
            self.skipping = length;
            let n = self.skipping.min(src.len());
            src.advance(n);
            self.skipping -= n;
            return Ok(Some(Frame::Malformed(format!(
                "frame of {length} bytes exceeds the limit of {} bytes",
                self.max_body
            ))));
        }
        let total = end + 4 + length;
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(end + 4);
        Ok(Some(Frame::Body(src.split_to(length).freeze())))
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse_length(header: &[u8]) -> Result<usize, String> {
    let text = std::str::from_utf8(header).map_err(|_| "header is not UTF-8".to_owned())?;
    let mut length = None;
    for line in text.split("\r\n") {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("malformed header line {line:?}"));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let n = value
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("bad Content-Length {:?}", value.trim()))?;
            length = Some(n);
        }
    }
    length.ok_or_else(|| "missing Content-Length header".to_owned())
}

impl Encoder<Bytes> for LspCodec {
    type Error = std::io::Error;

    fn encode(&mut self, body: Bytes, dst: &mut BytesMut) -> Result<(), Self::Error> {
        let header = format!("Content-Length: {}\r\n\r\n", body.len());
        dst.reserve(header.len() + body.len());
        dst.extend_from_slice(header.as_bytes());
        dst.extend_from_slice(&body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Vec<Frame> {
        let mut codec = LspCodec::new(64);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            out.push(frame);
        }
        out
    }

    #[test]
    fn decodes_frames_and_recovers_from_bad_ones() {
        let frames = decode_all(
            b"Content-Length: 2\r\nContent-Type: x\r\n\r\n{}garbage\r\n\r\nContent-Length: 99999\r\n\r\nContent-Length: 3\r\n\r\n[1]",
        );
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0], Frame::Body(Bytes::from_static(b"{}")));
        assert!(matches!(frames[1], Frame::Malformed(_)));
        // The oversized frame swallows what follows as its body.
        assert!(matches!(frames[2], Frame::Malformed(_)));
    }

    #[test]
    fn waits_for_the_whole_body() {
        let mut codec = LspCodec::default();
        let mut buf = BytesMut::from(&b"Content-Length: 4\r\n\r\n{}"[..]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"  ");
        assert_eq!(
            codec.decode(&mut buf).unwrap(),
            Some(Frame::Body(Bytes::from_static(b"{}  ")))
        );
    }
}
