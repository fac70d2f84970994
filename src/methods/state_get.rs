//! `state/get`: a session's replacement state and pending calls.
//!
//! Reads the last published snapshot without queueing behind the session's
//! work; a snapshot only ever shows completed decisions. A session not yet
//! loaded is loaded (in queue order) first; one that does not exist answers
//! an empty state and is
//! not created.
//!
//! The reply of a large session is tens of MB (100,000 ids and 10,000
//! previews of 2 KB: 24 MB). It is serialized straight from the snapshot,
//! one preview decompressed at a time, so the server never holds it as
//! strings and values as well: built that way, one `state/get` left the
//! server 50 MB larger (docs/design.md, "Memory: glibc's malloc, tuned").

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::ser::{SerializeMap, SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::{ConcurrentRawMethod, RequestCx, encode};
use crate::error::Result;
use crate::protocol::{StateGet, StateGetParams, StateGetResult};
use crate::session::Published;
use crate::state::Replacement;

impl ConcurrentRawMethod for StateGet {
    fn run(cx: RequestCx, params: StateGetParams) -> BoxFuture<'static, Result<Box<RawValue>>> {
        Box::pin(async move {
            // A session that neither this process holds nor the disk knows
            // does not exist: answer empty without making a slot (and a
            // worker) for it, so probing ids costs no memory (10.1).
            let data_dir = &cx.config.data_dir;
            if cx.registry.storage().shared.is_some() {
                // Shared store: another replica may have committed since
                // the snapshot; read it in queue order.
                let published = cx
                    .slot(&params.session_id)
                    .run(|session| {
                        Box::pin(async move {
                            session.load().await?;
                            Ok(session.snapshot())
                        })
                    })
                    .await?;
                return encode_snapshot(published).await;
            }
            let slot = match cx.registry.existing(data_dir, &params.session_id) {
                Some(slot) => slot,
                None if session_on_disk(data_dir, &params.session_id) => {
                    cx.slot(&params.session_id)
                }
                None => return encode(StateGetResult::default()),
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
            encode_snapshot(published).await
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

/// Snapshots at most this large (ids, with each replacement counted as
/// [`PREVIEW_WEIGHT`] ids for its decompression) are encoded on the
/// request's own task: a hop to the blocking pool and back costs more than
/// the encoding (two thread wakeups, most of a null round trip's overhead
/// over an echo server, `cargo bench --bench latency`). Larger ones stay
/// off the runtime workers so they never stall other sessions' requests.
const INLINE_WORK: usize = 512;
const PREVIEW_WEIGHT: usize = 32;

/// Serialize the reply off the async workers (tens of MB take a while),
/// unless it is small enough to encode inline (above).
async fn encode_snapshot(published: Arc<Published>) -> Result<Box<RawValue>> {
    let state = &published.state;
    if state.seen_count() + PREVIEW_WEIGHT * state.replacement_count() + published.pending.len()
        <= INLINE_WORK
    {
        return encode(Reply::of(&published));
    }
    tokio::task::spawn_blocking(move || encode(Reply::of(&published)))
        .await
        .map_err(|e| crate::error::Error::Internal(e.to_string()))?
}

/// The reply, in the shape of [`StateGetResult`] (ids sorted, replacements
/// by id), written from the snapshot as it is serialized.
struct Reply<'a> {
    decided: Vec<(&'a crate::state::Id, Option<&'a Replacement>)>,
    pending: &'a [String],
}

impl<'a> Reply<'a> {
    fn of(p: &'a Published) -> Self {
        let mut decided: Vec<_> = p.state.iter().collect();
        decided.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Reply {
            decided,
            pending: &p.pending,
        }
    }
}

impl Serialize for Reply<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        struct SeenIds<'r, 'a>(&'r Reply<'a>);
        impl Serialize for SeenIds<'_, '_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.decided.len()))?;
                for (id, _) in &self.0.decided {
                    seq.serialize_element(&***id)?;
                }
                seq.end()
            }
        }
        struct Replacements<'r, 'a>(&'r Reply<'a>);
        impl Serialize for Replacements<'_, '_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(None)?;
                for (id, replacement) in &self.0.decided {
                    if let Some(r) = replacement {
                        map.serialize_entry(&***id, &r.text())?;
                    }
                }
                map.end()
            }
        }
        let mut reply = s.serialize_struct("StateGetResult", 3)?;
        reply.serialize_field("seenIds", &SeenIds(self))?;
        reply.serialize_field("replacements", &Replacements(self))?;
        reply.serialize_field("pending", self.pending)?;
        reply.end()
    }
}
