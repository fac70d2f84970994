//! The front's two outgoing streams, with backpressure.
//!
//! Lines forwarded from one peer to the other wait for room: at most
//! [`QUEUED`] bytes of them are queued for a writer at a time. When the
//! client stops reading its stdout, the writer to it blocks, the queue
//! fills, the task reading the server's stdout waits, the pipe from the
//! server fills and the server's own writes block: a server writing faster
//! than its client reads slows to the client's pace instead of growing the
//! front's memory (the other direction likewise). Replies the front makes
//! itself never wait (they are bounded by the requests that asked for
//! them), so no handler can deadlock on a full queue.
//!
//! The front's memory in flight is then bounded by [`QUEUED`], plus the
//! line being written (one copy in the writer's buffer), plus the line being
//! read from each side (the reader's buffer) and, for a `tools/call` result
//! being budgeted, its parsed value.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::SinkExt;
use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::codec::FramedWrite;

use crate::transport::BUFFER_KEPT;
use crate::transport::lines::LineCodec;

/// Most bytes of forwarded lines queued for one writer.
pub const QUEUED: usize = 8 << 20;

/// The sending side of one writer task. Cloning is cheap.
#[derive(Clone)]
pub(super) struct Pipe {
    tx: mpsc::UnboundedSender<(Bytes, Option<OwnedSemaphorePermit>)>,
    room: Arc<Semaphore>,
}

impl Pipe {
    /// Start the writer task for `writer`; it ends when every clone is
    /// dropped (after writing what is queued) or the writer fails.
    pub(super) fn spawn<W>(writer: W) -> (Pipe, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Bytes, Option<OwnedSemaphorePermit>)>();
        let task = tokio::spawn(async move {
            let mut framed = FramedWrite::new(writer, LineCodec::default());
            while let Some((line, permit)) = rx.recv().await {
                let sent = if line.len() > BUFFER_KEPT {
                    // A large line is written from its own bytes: copied
                    // into the codec's buffer first, it would be held twice
                    // (and leave a buffer of its size behind).
                    write_whole(&mut framed, &line).await
                } else {
                    framed.send(line).await
                };
                if sent.is_err() {
                    return;
                }
                // The room comes back once the line has left the process.
                drop(permit);
            }
        });
        let room = Arc::new(Semaphore::new(QUEUED));
        (Pipe { tx, room }, task)
    }

    /// Queue a line forwarded from the other peer, waiting for room first.
    /// A line larger than the whole queue waits until the queue is empty.
    pub(super) async fn forward(&self, line: Bytes) {
        let want = u32::try_from(line.len().clamp(1, QUEUED)).unwrap_or(u32::MAX);
        let Ok(permit) = self.room.clone().acquire_many_owned(want).await else {
            return;
        };
        let _ = self.tx.send((line, Some(permit)));
    }

    /// Queue a line of the front's own, without waiting.
    pub(super) fn send_raw(&self, line: Bytes) {
        let _ = self.tx.send((line, None));
    }

    pub(super) fn send_value(&self, value: &Value) {
        match serde_json::to_vec(value) {
            Ok(body) => self.send_raw(Bytes::from(body)),
            Err(err) => tracing::error!(%err, "could not encode an outgoing message"),
        }
    }
}

/// Write `line` and its newline past the codec, once what the codec holds
/// has gone out (so lines keep their order).
async fn write_whole<W>(framed: &mut FramedWrite<W, LineCodec>, line: &[u8]) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    framed.flush().await?;
    let writer = framed.get_mut();
    writer.write_all(line).await?;
    writer.write_all(b"\n").await?;
    writer.flush().await
}
