//! `pair/flush`: resolve the buffered pair now, as the harness does from its
//! single exit path on abort, failover and rate limit. Also what happens to
//! a client's pairs when its connection ends or it shuts down.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Reply, RequestCx, SessionMethod};
use crate::error::Result;
use crate::protocol::{FlushResult, PairFlush, PairFlushParams, SessionId};
use crate::session::{Session, Slot};
use crate::transcript::guard::AbortMode;
use crate::transcript::guard::Transition;

impl SessionMethod for PairFlush {
    fn session_id(params: &PairFlushParams) -> &SessionId {
        &params.session_id
    }

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: PairFlushParams,
    ) -> BoxFuture<'a, Result<Reply<FlushResult>>> {
        Box::pin(async move {
            let mode = params.mode.unwrap_or(cx.config.abort_mode);
            let reason = params.reason.as_deref().unwrap_or("flushed by the client");
            cx.check_cancelled()?;
            let result = flush(session, mode, reason, cx.config.fsync(), None).await?;
            // Nothing is pending now: nothing to flush when the client leaves.
            let mut touched = cx.conn.touched.lock().unwrap_or_else(|p| p.into_inner());
            touched.remove(session.key());
            Ok(Reply::Now(result))
        })
    }
}

/// Resolve the pending pair (only if `owner` buffered it, when given).
async fn flush(
    session: &mut Session,
    mode: AbortMode,
    reason: &str,
    fsync: bool,
    owner: Option<u64>,
) -> Result<FlushResult> {
    for _ in 0..super::pair_append::MAX_ATTEMPTS {
        // A local pending pair lives only in memory: a session that is not
        // loaded has none, and flushing for a departed client must not
        // open one. A shared store holds it, and reading opens nothing.
        let loaded = match owner {
            Some(_) => match session.load_held().await? {
                Some(loaded) => loaded,
                None => return Ok(empty(mode)),
            },
            None => session.load().await?,
        };
        let owned = match (loaded.guard.pending(), owner) {
            (None, _) => false,
            (Some(p), Some(owner)) => p.owner == owner,
            (Some(_), None) => true,
        };
        if !owned {
            return Ok(empty(mode));
        }
        let dialect = loaded.format.unwrap_or_default().dialect();
        let (lines, result) = loaded.guard.flush(dialect, mode, reason);
        // Refused when another replica moved the pair first: look again.
        if session.commit_pair(lines, Transition::Clear, fsync).await? {
            session.publish();
            return Ok(result);
        }
    }
    Err(super::pair_append::pair_kept_moving(&session.key().id))
}

fn empty(mode: AbortMode) -> FlushResult {
    FlushResult {
        mode,
        discarded: Vec::new(),
        synthesized: Vec::new(),
        written: 0,
    }
}

/// Flush every pair connection `owner` left pending in `slots`, waiting
/// until each is resolved.
pub async fn flush_for_connection(
    slots: Vec<Arc<Slot>>,
    owner: u64,
    mode: AbortMode,
    fsync: bool,
    reason: &'static str,
) {
    for slot in slots {
        let outcome = slot
            .run(move |session| Box::pin(flush(session, mode, reason, fsync, Some(owner))))
            .await;
        match outcome {
            Ok(result) if !result.discarded.is_empty() || !result.synthesized.is_empty() => {
                tracing::info!(session = %slot.key.id, ?result, reason, "flushed a pending pair");
            }
            Ok(_) => {}
            Err(err) => {
                tracing::error!(session = %slot.key.id, %err, "could not flush a pending pair")
            }
        }
    }
}
