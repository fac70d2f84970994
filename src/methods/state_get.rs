//! `state/get`: a session's replacement state and pending calls.
//!
//! Reads the last published snapshot without queueing behind the session's
//! work; a snapshot only ever shows completed decisions. A session not yet
//! loaded is loaded (in queue order) first; one that does not exist answers
//! an empty state.

use futures_util::future::BoxFuture;

use super::{ConcurrentMethod, RequestCx};
use crate::error::Result;
use crate::protocol::{StateGet, StateGetParams, StateGetResult};
use crate::session::Published;

impl ConcurrentMethod for StateGet {
    fn run(cx: RequestCx, params: StateGetParams) -> BoxFuture<'static, Result<StateGetResult>> {
        Box::pin(async move {
            let slot = cx.slot(&params.session_id);
            let published = match slot.published() {
                Some(p) => p,
                None => {
                    slot.run(|session| {
                        Box::pin(async move {
                            session.load().await?;
                            Ok(())
                        })
                    })
                    .await?;
                    slot.published().unwrap_or_default()
                }
            };
            Ok(describe(&published))
        })
    }
}

fn describe(p: &Published) -> StateGetResult {
    let mut result = StateGetResult {
        pending: p.pending.clone(),
        ..StateGetResult::default()
    };
    for (id, replacement) in p.state.iter() {
        result.seen_ids.push(id.to_string());
        if let Some(r) = replacement {
            result.replacements.insert(id.to_string(), r.text());
        }
    }
    result.seen_ids.sort_unstable();
    result
}
