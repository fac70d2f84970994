//! JSON-RPC 2.0 over LSP framing: the wire values and the outgoing queue.
//!
//! The transport knows nothing of toolwire's methods. A connection has one
//! reader (which decodes frames and hands messages to the server without
//! waiting on any handler) and one writer task draining an [`Outbox`].

pub mod codec;
pub mod envelope;
pub mod lines;
pub mod stdio;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::codec::FramedWrite;

use crate::error::Error;

/// The sending side of a connection's writer task. Cloning is cheap;
/// sending never waits.
#[derive(Clone, Debug)]
pub struct Outbox(mpsc::UnboundedSender<Out>);

/// What the writer task is handed.
#[derive(Debug)]
enum Out {
    /// One message's encoded body.
    Body(Bytes),
    /// The connection has paused: free the write buffer.
    Release,
}

impl Outbox {
    pub fn send_value(&self, value: &Value) {
        match serde_json::to_vec(value) {
            Ok(body) => {
                // The writer is gone only when the client is: nothing to do.
                let _ = self.0.send(Out::Body(Bytes::from(body)));
            }
            Err(err) => tracing::error!(%err, "could not encode an outgoing message"),
        }
    }

    /// Queue bytes already encoded as one message (a line forwarded as is).
    pub fn send_raw(&self, body: Bytes) {
        let _ = self.0.send(Out::Body(body));
    }

    /// Have the writer free its buffer once what is queued is written (the
    /// client has paused; the next reply allocates afresh).
    pub fn release_buffer(&self) {
        let _ = self.0.send(Out::Release);
    }

    pub fn notify(&self, method: &str, params: Value) {
        self.send_value(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }
}

/// The largest write buffer a connection keeps between frames, and the
/// largest read buffer it keeps once its client pauses ([`BUFFER_IDLE`]).
pub const BUFFER_KEPT: usize = 1 << 20;

/// How long a connection keeps a read buffer larger than [`BUFFER_KEPT`]
/// after the frame that needed it, for the next one. A client sending
/// large requests back to back (a replay, a batch of sessions, a retry)
/// then reads each into memory already mapped: a fresh 20 MB buffer per
/// request costs about 5,000 page faults, a quarter of a reapply-only
/// `budget/apply` of that size (`cargo bench --bench throughput --
/// reapply`). An agent between turns waits far longer than this, and its
/// connection does not hold the memory meanwhile.
pub const BUFFER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// A request frame larger than this (one that carries a conversation, not
/// a null request) has the server hand the memory it freed back to the
/// system once its connection has paused for [`BUFFER_IDLE`] with nothing
/// in flight (see `heap::release_in_background`). The proxy and the MCP
/// front count a body or a tool result over this size as large work
/// (`heap::LargeWork`).
pub const RELEASE_AFTER: usize = 64 << 10;

/// Start the writer task for `writer`; it ends when every [`Outbox`] clone
/// is dropped, after flushing.
pub fn spawn_writer<W>(writer: W) -> (Outbox, tokio::task::JoinHandle<()>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    spawn_writer_with(writer, codec::LspCodec::default())
}

/// [`spawn_writer`] with another framing (MCP's newline-delimited lines).
pub fn spawn_writer_with<W, C>(writer: W, codec: C) -> (Outbox, tokio::task::JoinHandle<()>)
where
    W: AsyncWrite + Unpin + Send + 'static,
    C: tokio_util::codec::Encoder<Bytes> + Send + 'static,
{
    use futures_util::SinkExt;
    let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
    let task = tokio::spawn(async move {
        let mut framed = FramedWrite::new(writer, codec);
        while let Some(first) = rx.recv().await {
            // Let every task that is ready run first: replies that come
            // ready together (each session answering the pairs one read
            // brought) then leave in one write, not one write each, which
            // costs both processes a syscall and a wakeup per reply.
            tokio::task::yield_now().await;
            // Write everything queued, then flush once.
            let (mut large, mut release) = (false, false);
            // A reply the size of a conversation or more (a `state/get` of
            // a large session) is large work, as a request carrying one
            // is: what encoding it freed goes back to the system once the
            // process has had none for a moment (`heap::LargeWork`). A
            // request's size alone would miss it.
            let mut work = None;
            let mut next = Some(first);
            while let Some(out) = next.take().or_else(|| rx.try_recv().ok()) {
                match out {
                    Out::Body(body) => {
                        if body.len() > RELEASE_AFTER && work.is_none() {
                            work = Some(crate::heap::LargeWork::begin());
                        }
                        large |= body.len() > BUFFER_KEPT;
                        if framed.feed(body).await.is_err() {
                            return;
                        }
                    }
                    Out::Release => release = true,
                }
            }
            if framed.flush().await.is_err() {
                return;
            }
            // One large reply would otherwise keep a buffer of its size
            // (resident, since it was written to) for the connection's
            // life; a paused connection keeps none.
            if large || release {
                *framed.write_buffer_mut() = bytes::BytesMut::new();
            }
            drop(work);
        }
    });
    (Outbox(tx), task)
}

/// A response frame's body for a result already encoded: the result's
/// bytes are copied once, into the frame, never parsed again.
pub fn response_bytes(id: &Value, result: Result<Box<RawValue>, Error>) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Success<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a RawValue,
    }
    if let (Ok(raw), Value::Number(n)) = (&result, id) {
        // A number id (what nearly every client sends) is written as it was
        // read (`arbitrary_precision`), so the body is put together as
        // serde_json would write it, in a vector of exactly its size: that
        // becomes the frame's `Bytes` without an allocation of its own.
        let parts = [
            r#"{"jsonrpc":"2.0","id":"#,
            n.as_str(),
            r#","result":"#,
            raw.get(),
            "}",
        ];
        let mut body = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            body.extend_from_slice(part.as_bytes());
        }
        return body;
    }
    let encoded = match &result {
        Ok(raw) => serde_json::to_vec(&Success {
            jsonrpc: "2.0",
            id,
            result: raw,
        }),
        Err(err) => serde_json::to_vec(&response(id, Err(err.clone()))),
    };
    // Plain strings and values: serializing them cannot fail.
    encoded.unwrap_or_default()
}

pub fn response(id: &Value, result: Result<Value, Error>) -> Value {
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(err) => json!({"jsonrpc": "2.0", "id": id, "error": err.to_rpc()}),
    }
}

/// One incoming JSON-RPC message.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// A response to a server request (toolwire sends none): ignored.
    Response,
    /// Not a valid message; `id` is echoed when it could be read.
    Invalid {
        id: Value,
        error: Error,
    },
}

impl Incoming {
    pub fn classify(value: Value) -> Incoming {
        let Value::Object(mut obj) = value else {
            return Incoming::Invalid {
                id: Value::Null,
                error: Error::InvalidRequest("a message must be a JSON object".into()),
            };
        };
        let id = obj.remove("id");
        let id_ok = matches!(
            id,
            None | Some(Value::String(_) | Value::Number(_) | Value::Null)
        );
        let echo = if id_ok {
            id.clone().unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Incoming::Invalid {
                id: echo,
                error: Error::InvalidRequest("`jsonrpc` must be \"2.0\"".into()),
            };
        }
        if !id_ok {
            return Incoming::Invalid {
                id: Value::Null,
                error: Error::InvalidRequest("`id` must be a string, a number or null".into()),
            };
        }
        let method = match obj.remove("method") {
            Some(Value::String(m)) => m,
            Some(_) => {
                return Incoming::Invalid {
                    id: echo,
                    error: Error::InvalidRequest("`method` must be a string".into()),
                };
            }
            None if obj.contains_key("result") || obj.contains_key("error") => {
                return Incoming::Response;
            }
            None => {
                return Incoming::Invalid {
                    id: echo,
                    error: Error::InvalidRequest("missing `method`".into()),
                };
            }
        };
        let params = obj.remove("params").unwrap_or(Value::Null);
        if !matches!(params, Value::Object(_) | Value::Array(_) | Value::Null) {
            return Incoming::Invalid {
                id: echo,
                error: Error::InvalidRequest("`params` must be an object or an array".into()),
            };
        }
        match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply of a conversation's size is large work, whose end schedules
    /// the release of what encoding it freed (a state/get's request is
    /// small: only the reply can tell); a small one is not.
    #[tokio::test]
    async fn a_large_reply_is_counted_as_large_work() {
        use crate::heap::large_work_moves_here;
        // The test's runtime has one thread: the writer's task runs on it,
        // so what it counts is this test's alone.
        let write = |len: usize| async move {
            let (outbox, writer) = spawn_writer(tokio::io::sink());
            outbox.send_raw(Bytes::from(vec![b' '; len]));
            drop(outbox);
            writer.await.unwrap();
        };
        let before = large_work_moves_here();
        write(RELEASE_AFTER).await;
        assert_eq!(large_work_moves_here(), before);
        write(RELEASE_AFTER + 1).await;
        assert_eq!(large_work_moves_here(), (before.0 + 1, before.1 + 1));
    }

    #[test]
    fn a_reply_to_a_number_id_is_what_serde_json_writes() {
        #[derive(serde::Serialize)]
        struct Success<'a> {
            jsonrpc: &'static str,
            id: &'a Value,
            result: &'a RawValue,
        }
        let ids = [
            "0",
            "7",
            "-12",
            "18446744073709551616",
            "1.50",
            "1e400",
            "\"s\"",
        ];
        let results = [
            "null",
            "{\"status\":\"buffered\",\"pending\":[\"t\"]}",
            "[1,2]",
        ];
        for id in ids {
            let id: Value = serde_json::from_str(id).unwrap();
            for result in results {
                let raw = RawValue::from_string(result.to_owned()).unwrap();
                let expected = serde_json::to_vec(&Success {
                    jsonrpc: "2.0",
                    id: &id,
                    result: &raw,
                })
                .unwrap();
                let body = response_bytes(&id, Ok(raw));
                assert_eq!(
                    String::from_utf8_lossy(&body),
                    String::from_utf8_lossy(&expected)
                );
                if id.is_number() {
                    assert_eq!(body.len(), body.capacity(), "sized exactly for {id}");
                }
            }
        }
    }

    #[tokio::test]
    async fn the_writer_keeps_writing_after_freeing_its_buffer() {
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let (outbox, task) = spawn_writer(ours);
        outbox.send_raw(Bytes::from_static(b"{\"a\":1}"));
        outbox.release_buffer();
        outbox.send_raw(Bytes::from(vec![b'x'; BUFFER_KEPT / 8]));
        outbox.release_buffer();
        outbox.send_raw(Bytes::from_static(b"{\"b\":2}"));
        drop(outbox);
        let mut written = Vec::new();
        let (read, ended) = tokio::join!(
            tokio::io::AsyncReadExt::read_to_end(&mut theirs, &mut written),
            task
        );
        read.unwrap();
        ended.unwrap();
        let big = format!(
            "Content-Length: {}\r\n\r\n{}",
            BUFFER_KEPT / 8,
            "x".repeat(BUFFER_KEPT / 8)
        );
        let expected = format!(
            "Content-Length: 7\r\n\r\n{{\"a\":1}}{big}Content-Length: 7\r\n\r\n{{\"b\":2}}"
        );
        assert_eq!(String::from_utf8(written).unwrap(), expected);
    }
}
