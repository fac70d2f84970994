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
//!
//! Reading resumes at the next place a frame can begin: the end of the
//! broken unit (its header block, or the line of unframed JSON), or the
//! next `Content-Length` inside it, whichever comes first. A client that
//! sends a bad frame and, in the same write, a good one (`Content-Length:
//! -1`, a body with no newline, then a valid frame) gets both answered;
//! taking the whole unit as garbage swallowed the valid frame's header
//! and left its request unanswered for ever. Blank lines before a header
//! are skipped: they are no frame, and a header block starting with one
//! was refused whole.

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
        // Blank lines between frames are nothing.
        let blank = src
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(src.len());
        src.advance(blank);
        // No header starts with `{` or `[`: this is JSON sent without
        // framing (a client speaking newline-delimited JSON-RPC, or a person
        // typing a request). Say so and skip to the end of its line, or to
        // a frame that follows it on the same line, instead of waiting for
        // a blank line that never comes.
        if starts_as_json(src) {
            let newline = src.iter().position(|&b| b == b'\n').map(|n| n + 1);
            let line_end = newline.unwrap_or(src.len());
            if let Some(cut) = next_frame_start(&src[..line_end]).or(newline) {
                src.advance(cut);
                return Ok(Some(Frame::Malformed(unframed())));
            }
        }
        let Some(end) = find(src, b"\r\n\r\n") else {
            if src.len() > MAX_HEADER {
                // No header terminator in sight: drop what we have, up to
                // a frame that may begin in it, else all but a tail that
                // may be the start of one.
                let cut = next_frame_start(src)
                    .unwrap_or(src.len().saturating_sub(CONTENT_LENGTH.len() - 1));
                src.advance(cut);
                return Ok(Some(Frame::Malformed("header block too long".into())));
            }
            return Ok(None);
        };
        let header = &src[..end];
        let length = match parse_length(header) {
            Ok(length) => length,
            Err(reason) => {
                // A frame may begin inside the broken block (garbage with
                // no line break before a valid header): read on from it.
                let cut = next_frame_start(header).unwrap_or(end + 4);
                src.advance(cut);
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

    /// At the end of the input, bytes that are no whole frame (bare JSON
    /// with no newline, a header with no blank line, a body cut short) are
    /// one last malformed frame, answered like any other, rather than an
    /// I/O error that only says "bytes remaining on stream".
    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Self::Error> {
        if let Some(frame) = self.decode(src)? {
            return Ok(Some(frame));
        }
        if src.iter().all(u8::is_ascii_whitespace) {
            src.clear();
            return Ok(None);
        }
        let reason = if starts_as_json(src) {
            unframed()
        } else {
            format!(
                "the input ended inside a frame ({} bytes that are not a whole frame); toolwire serve expects {FRAMING}",
                src.len()
            )
        };
        src.clear();
        Ok(Some(Frame::Malformed(reason)))
    }
}

/// How a frame is made, for the errors about input that is not one.
const FRAMING: &str = "LSP framing: each message is `Content-Length: N`, a blank line (`\\r\\n\\r\\n`), then N bytes of JSON (docs/protocol.md, \"Transport\")";

/// Whether the input starts as a JSON object or array would, which no
/// header line can.
fn starts_as_json(src: &[u8]) -> bool {
    src.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| matches!(b, b'{' | b'['))
}

/// Why JSON that arrives without a header is refused.
fn unframed() -> String {
    format!("unframed JSON: toolwire serve expects {FRAMING}")
}

/// The header name every frame carries, as a frame's start is searched for.
const CONTENT_LENGTH: &[u8] = b"content-length";

/// Where the next frame may begin in `garbage`, which starts a broken
/// unit: the first `Content-Length` (in any case) after its first byte.
/// A frame's other headers may come before it; only this one is certain.
fn next_frame_start(garbage: &[u8]) -> Option<usize> {
    garbage
        .get(1..)?
        .windows(CONTENT_LENGTH.len())
        .position(|w| w.eq_ignore_ascii_case(CONTENT_LENGTH))
        .map(|at| at + 1)
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
        // The length's digits are written on the stack: a frame is often a
        // small reply, and a string per frame was an allocation per reply
        // (and `write!` cost more than the copy).
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(body.len()).as_bytes();
        const START: &[u8] = b"Content-Length: ";
        const END: &[u8] = b"\r\n\r\n";
        dst.reserve(START.len() + digits.len() + END.len() + body.len());
        dst.extend_from_slice(START);
        dst.extend_from_slice(digits);
        dst.extend_from_slice(END);
        dst.extend_from_slice(&body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_its_length_header_and_its_body() {
        for len in [0, 1, 9, 10, 99, 100, 12_345, 1 << 20] {
            let body = Bytes::from(vec![b'x'; len]);
            let mut out = BytesMut::new();
            LspCodec::default().encode(body.clone(), &mut out).unwrap();
            let mut expected = format!("Content-Length: {len}\r\n\r\n").into_bytes();
            expected.extend_from_slice(&body);
            assert_eq!(&out[..], &expected[..], "{len}");
        }
    }

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
    fn bare_json_is_named_unframed_and_a_frame_after_it_still_decodes() {
        let frames = decode_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\nContent-Length: 2\r\n\r\n{}",
        );
        assert_eq!(frames.len(), 2, "{frames:?}");
        match &frames[0] {
            Frame::Malformed(reason) => {
                assert!(reason.starts_with("unframed JSON"), "{reason}");
                assert!(reason.contains("Content-Length: N"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(frames[1], Frame::Body(Bytes::from_static(b"{}")));
    }

    /// Garbage followed at once by a frame, with no line break between
    /// them: the frame still decodes, whatever the garbage was.
    #[test]
    fn a_frame_right_after_garbage_decodes() {
        for garbage in [
            &b"Content-Length: -1\r\n\r\n{\"x\":1}"[..],
            b"{\"x\":1}",
            b"[1,",
            b"Nonsense",
            b"X: y\r\nBad",
            b"\r\n",
            b"\r\n\r\n",
            b"Content-Length: many\r\n\r\n",
            b"content-LENGTH",
        ] {
            let mut input = garbage.to_vec();
            input.extend_from_slice(b"Content-Length: 2\r\n\r\n{}");
            let frames = decode_all(&input);
            assert_eq!(
                frames.last(),
                Some(&Frame::Body(Bytes::from_static(b"{}"))),
                "{:?}: {frames:?}",
                String::from_utf8_lossy(garbage)
            );
            assert!(frames.len() <= 3, "{frames:?}");
        }
        // A header block too long to be one: what follows it still decodes.
        let mut codec = LspCodec::new(64);
        let mut buf = BytesMut::from(&[b'x'; MAX_HEADER + 100][..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Ok(Some(Frame::Malformed(_)))
        ));
        buf.extend_from_slice(b"Content-Le");
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"ngth: 2\r\n\r\n{}");
        let mut frames = Vec::new();
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            frames.push(frame);
        }
        assert_eq!(frames.last(), Some(&Frame::Body(Bytes::from_static(b"{}"))));
    }

    #[test]
    fn what_is_left_at_the_end_of_input_is_one_malformed_frame() {
        let mut codec = LspCodec::default();
        // Bare JSON with no newline: only the end of input shows it.
        let mut buf = BytesMut::from(&b"[1,2]"[..]);
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        match codec.decode_eof(&mut buf).unwrap() {
            Some(Frame::Malformed(reason)) => assert!(reason.starts_with("unframed JSON")),
            other => panic!("{other:?}"),
        }
        assert_eq!(codec.decode_eof(&mut buf).unwrap(), None);
        // A body cut short.
        let mut buf = BytesMut::from(&b"Content-Length: 9\r\n\r\n{}"[..]);
        match codec.decode_eof(&mut buf).unwrap() {
            Some(Frame::Malformed(reason)) => {
                assert!(reason.contains("ended inside a frame"), "{reason}");
                assert!(reason.contains("Content-Length: N"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Trailing blank lines are nothing.
        let mut buf = BytesMut::from(&b"\r\n"[..]);
        assert_eq!(codec.decode_eof(&mut buf).unwrap(), None);
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
