//! `pair/append`: write a message to the session transcript, holding tool
//! calls back until all their results are in (see `transcript::guard`).

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Reply, RequestCx, SessionMethod};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::format::{self, Format};
use crate::protocol::{PairAppend, PairAppendParams, PairAppendResult, SessionId};
use crate::session::Session;
use crate::store::SessionStore;

/// How many times a step is planned again when other replicas keep moving
/// the pending pair first (each refusal means one of them committed).
pub(crate) const MAX_ATTEMPTS: u32 = 64;

/// The error when [`MAX_ATTEMPTS`] plans were all overtaken.
pub(crate) fn pair_kept_moving(session_id: &SessionId) -> Error {
    Error::Storage {
        message: format!(
            "the pending pair of session {session_id} kept changing on other replicas; nothing was written, try again"
        ),
        path: None,
    }
}

impl SessionMethod for PairAppend {
    fn session_id(params: &PairAppendParams) -> &SessionId {
        &params.session_id
    }

    /// Straight from the text: params that decode this way are the ones
    /// the value would give (the message is a value either way); any that
    /// do not (a duplicate member, an error to word) take the value's way.
    ///
    /// The text is checked to be UTF-8 at once, then parsed as a `str`:
    /// parsed from bytes, serde_json checks each string on its own, which
    /// cost three times as much for a small message's many short strings.
    fn params_from_text(text: &[u8]) -> Option<PairAppendParams> {
        serde_json::from_str(std::str::from_utf8(text).ok()?).ok()
    }

    /// The message's values are made and freed on the session's task.
    const DECODED_BY_SESSION: bool = true;

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: PairAppendParams,
    ) -> BoxFuture<'a, Result<Reply<PairAppendResult>>> {
        Box::pin(async move {
            let format = session.format_for(params.format, cx.config.format).await?;
            let dialect = format.dialect();
            let group = match params.message.0 {
                // One model response or one batch of outputs.
                Value::Array(items) if format == Format::OpenaiResponses && !items.is_empty() => {
                    items
                }
                Value::Array(_) => {
                    return Err(Error::invalid_params(
                        "message",
                        match format {
                            Format::OpenaiResponses => "an array of input items must not be empty",
                            _ => {
                                "a message must be an object (arrays of items are for openai-responses)"
                            }
                        },
                    ));
                }
                msg => vec![msg],
            };
            // Tool blocks in the wrong role would be orphans in the
            // transcript: refused (PROTOCOL.md 10.2).
            for (i, msg) in group.iter().enumerate() {
                let path = if group.len() == 1 {
                    std::borrow::Cow::Borrowed("message")
                } else {
                    std::borrow::Cow::Owned(format!("message[{i}]"))
                };
                dialect.validate(msg, &path, true)?;
            }
            let names: Vec<(crate::state::Id, Arc<str>)> = group
                .iter()
                .flat_map(|msg| format::calls(dialect, msg))
                .map(|(id, name)| (crate::state::keep_id(&id), Arc::from(&*name)))
                .collect();
            // On a shared store another replica may move the pending pair
            // between this plan and its commit: then the commit is refused
            // and the step planned again from what that replica did.
            let races = session.storage().store().shared_by_replicas();
            let mut group = Some(group);
            let mut attempts = 0;
            let (status, flushed, written) = loop {
                attempts += 1;
                if attempts > MAX_ATTEMPTS {
                    return Err(pair_kept_moving(&params.session_id));
                }
                let plan = match races {
                    true => group.clone(),
                    false => group.take(),
                }
                .ok_or_else(|| Error::Internal("pair/append planned twice".into()))?;
                let loaded = session.load().await?;
                let step = loaded.guard.append(
                    dialect,
                    plan,
                    cx.conn.id,
                    cx.config.abort_mode,
                    "message",
                )?;
                loaded.format.get_or_insert(format);
                cx.check_cancelled()?;
                {
                    // The session's own slot, not a registry lookup (a lock,
                    // a key built and hashed) on every append; and the key
                    // cloned only the first time.
                    let slot = session
                        .own_slot()
                        .unwrap_or_else(|| cx.slot(&params.session_id));
                    let mut touched = cx.conn.touched.lock().unwrap_or_else(|p| p.into_inner());
                    if !touched.contains_key(&slot.key) {
                        touched.insert(slot.key.clone(), slot);
                    }
                }
                let written = step.lines.count;
                // Boxed apart: inline, the commit's state made this
                // handler's future 1,176 bytes, past the largest block
                // glibc keeps in its per-thread cache (1,032), so every
                // request's future took malloc's slow path, and that
                // consolidated the small free blocks each time. Now two
                // blocks of a few hundred bytes, both from the cache.
                let commit = session.commit_pair(step.lines, step.transition, cx.config.fsync());
                if Box::pin(commit).await? {
                    break (step.status, step.flushed, written);
                }
            };
            let loaded = session.load().await?;
            loaded.exists = true;
            for (id, name) in names {
                loaded.tool_names.insert_mut(id, name);
            }
            let pending = loaded.guard.pending_ids();
            let owned = loaded
                .guard
                .pending()
                .is_some_and(|p| p.owner == cx.conn.id);
            session.publish();
            if !owned {
                // Nothing of this connection's left to flush here: a
                // connection writing to a million sessions keeps none.
                let mut touched = cx.conn.touched.lock().unwrap_or_else(|p| p.into_inner());
                touched.remove(session.key());
            }
            Ok(Reply::Now(PairAppendResult {
                status,
                pending,
                written,
                flushed,
            }))
        })
    }
}
