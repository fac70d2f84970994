//! What a connection is doing, for the idle timeout.
//!
//! hyper closes an HTTP/1.1 connection whose request head is late
//! (`proxy.headerTimeoutSeconds`) and the proxy bounds a request body's
//! arrival itself (`proxy.bodyTimeoutSeconds`); neither sees a connection
//! that simply sits there, which an HTTP/2 connection may do forever. A
//! connection is idle when no request is in progress on it (a response
//! still streaming counts as in progress, however long the provider
//! thinks) and no byte has moved either way: after
//! `proxy.idleTimeoutSeconds` of that it is shut down gracefully.
//!
//! Time is tokio's, so tests can pause it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::upstream::ProxyBody;

/// One connection's requests in progress and last movement.
pub struct Activity {
    start: Instant,
    /// Milliseconds after `start` of the last byte read or written, or of
    /// the last request begun or finished.
    last: AtomicU64,
    in_progress: AtomicUsize,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
            in_progress: AtomicUsize::new(0),
        }
    }
}

impl Activity {
    fn touch(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    /// A request begins; it is in progress until the [`Busy`] is dropped.
    pub fn begin(self: &Arc<Self>) -> Busy {
        self.in_progress.fetch_add(1, Ordering::Relaxed);
        self.touch();
        Busy(self.clone())
    }

    /// When the connection will have been idle for `idle`, if nothing
    /// happens until then.
    pub fn idle_deadline(&self, idle: Duration) -> Instant {
        let after = Duration::from_millis(self.last.load(Ordering::Relaxed)).saturating_add(idle);
        // No timeout (`Duration::MAX`): a year from now, again and again.
        self.start
            .checked_add(after)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 86_400))
    }

    /// Whether the connection has been idle for `idle` now.
    pub fn idle_for(&self, idle: Duration) -> bool {
        self.in_progress.load(Ordering::Relaxed) == 0 && self.idle_deadline(idle) <= Instant::now()
    }
}

/// A request in progress.
pub struct Busy(Arc<Activity>);

impl Busy {
    /// The response body, carrying the request's progress with it: the
    /// request ends when the body is sent or dropped.
    pub fn hold(self, body: ProxyBody) -> ProxyBody {
        body.map_frame(move |frame| {
            let _in_progress = &self;
            frame
        })
        .boxed_unsync()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A connection's stream, noting each byte that moves.
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Watched { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On tokio's paused clock: idle only once nothing is in progress and
    /// the full spell has passed since the last movement.
    #[tokio::test(start_paused = true)]
    async fn idle_means_nothing_in_progress_for_the_whole_spell() {
        let idle = Duration::from_secs(120);
        let activity = Arc::new(Activity::default());
        tokio::time::advance(Duration::from_secs(119)).await;
        assert!(!activity.idle_for(idle));
        let busy = activity.begin();
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(!activity.idle_for(idle), "a request is in progress");
        drop(busy);
        tokio::time::advance(Duration::from_secs(119)).await;
        assert!(!activity.idle_for(idle), "the spell restarts when it ends");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(activity.idle_for(idle));
        activity.touch();
        assert!(!activity.idle_for(idle), "a byte moved");
    }
}
