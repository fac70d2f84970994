//! `state/fork`: a new session starting from a snapshot of another.
//!
//! The snapshot is taken in the source's queue (after every change received
//! before the fork) and costs O(1): the replacement state is a persistent
//! map shared with the source until either side changes. The target is then
//! set up in its own queue, so a fork never holds the source's queue while
//! it writes its transcript, and two sessions forking onto each other
//! cannot wait on one another. The fork shares the parent's committed
//! transcript instead of copying it ([`crate::store::SessionStore::fork`]).

use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;

use super::{Reply, RequestCx, SessionMethod};
use crate::error::{Error, Result};
use crate::protocol::{SessionId, StateFork, StateForkParams, StateForkResult};
use crate::session::Session;
use crate::store::ForkSource;

impl SessionMethod for StateFork {
    fn session_id(params: &StateForkParams) -> &SessionId {
        &params.session_id
    }

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: StateForkParams,
    ) -> BoxFuture<'a, Result<Reply<StateForkResult>>> {
        Box::pin(async move {
            let source_id = params.session_id.clone();
            let loaded = session.load().await?;
            if !loaded.exists {
                return Err(Error::SessionNotFound {
                    session_id: source_id.to_string(),
                });
            }
            let state = loaded.state.clone();
            let tool_names = loaded.tool_names.clone();
            let format = loaded.format;
            // The committed transcript as of now: its path and length.
            let transcript = match (&loaded.transcript, params.copy_transcript.unwrap_or(true)) {
                (Some(t), true) => {
                    let t = t.lock().unwrap_or_else(|p| p.into_inner());
                    Some((t.path().to_path_buf(), t.len()))
                }
                _ => None,
            };
            let target_id = match params.new_session_id {
                Some(id) => id,
                None => fresh_id()?,
            };
            let target = cx.slot(&target_id);
            let source = ForkSource {
                parent: source_id,
                transcript,
                state,
                tool_names,
                format,
                // A fork with a copy of a journaled source's transcript
                // loads back from that copy as it starts; any other lives
                // in memory.
                journaled: loaded.journaled,
            };
            let later = async move {
                target
                    .run(move |target_session| {
                        Box::pin(async move {
                            if target_session.load().await?.exists {
                                return Err(Error::SessionExists {
                                    session_id: target_session.key().id.to_string(),
                                });
                            }
                            let session_id = target_session.key().id.clone();
                            let loaded = target_session.fork_from(source).await?;
                            Ok(StateForkResult {
                                session_id,
                                seen_count: loaded.state.seen_count(),
                                replacement_count: loaded.state.replacement_count(),
                            })
                        })
                    })
                    .await
            };
            Ok(Reply::Later(Box::pin(later)))
        })
    }
}

/// A new session id nobody has used: time, process and a counter, hashed.
fn fresh_id() -> Result<SessionId> {
    use sha2::{Digest, Sha256};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seed = format!(
        "{nanos}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let digest = Sha256::digest(seed.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    SessionId::try_from(format!("fork-{hex}")).map_err(Error::Internal)
}
