//! `state/get`: a session's replacement state and pending calls.
//!
//! Reads the last published snapshot without queueing behind the session's
//! work; a snapshot only ever shows completed decisions. A session not yet
//! loaded is loaded (in queue order) first; one that does not exist answers
//! an empty state and is
//! not created.

use futures_util::future::BoxFuture;

use super::{ConcurrentMethod, RequestCx};
use crate::error::Result;
use crate::protocol::{StateGet, StateGetParams, StateGetResult};
use crate::session::Published;

impl ConcurrentMethod for StateGet {
    fn run(cx: RequestCx, params: StateGetParams) -> BoxFuture<'static, Result<StateGetResult>> {
        Box::pin(async move {
            // A session that neither this process holds nor the disk knows
            // does not exist: answer empty without making a slot (and a
            // worker) for it, so probing ids costs no memory (10.1).
            let data_dir = &cx.config.data_dir;
            if cx.server.registry.storage().shared.is_some() {
                // Shared store: another replica may have committed since
                // the snapshot; read it in queue order.
                let slot = cx.slot(&params.session_id);
                return slot
                    .run(|session| {
                        Box::pin(async move {
                            session.load().await?;
                            Ok(())
                        })
                    })
                    .await
                    .map(|()| describe(&slot.published().unwrap_or_default()));
            }
            let slot = match cx.server.registry.existing(data_dir, &params.session_id) {
                Some(slot) => slot,
                None if session_on_disk(data_dir, &params.session_id) => {
                    cx.slot(&params.session_id)
                }
                None => return Ok(StateGetResult::default()),
            };
            let published = match slot.published() {
                Some(p) => p,
                // Taken in the job: the slot may have been evicted since
                // (the job then ran in the session's new slot).
                None => {
                    slot.run(|session| {
                        Box::pin(async move {
                            session.load().await?;
                            Ok(session.snapshot())
                        })
                    })
                    .await?
                }
            };
            Ok(describe(&published))
        })
    }
}

/// Whether the data directory holds anything of the session: its
/// transcript or its folder of saved outputs.
fn session_on_disk(data_dir: &std::path::Path, id: &crate::protocol::SessionId) -> bool {
    let key = crate::session::SessionKey {
        data_dir: data_dir.to_path_buf(),
        id: id.clone(),
    };
    key.transcript_path().symlink_metadata().is_ok() || key.session_dir().symlink_metadata().is_ok()
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
