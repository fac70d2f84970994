//! `pair/append`: write a message to the session transcript, holding tool
//! calls back until all their results are in (see `transcript::guard`).

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Reply, RequestCx, SessionMethod};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::format::{self, Format};
use crate::protocol::{AppendMessage, PairAppend, PairAppendParams, PairAppendResult, SessionId};
use crate::session::Session;
use crate::store::SessionStore;
use crate::transcript::guard::Msg;

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
    /// the value would give; any that do not (a duplicate member, an error
    /// to word) take the value's way.
    ///
    /// The text is checked to be UTF-8 at once, then parsed as a `str`:
    /// parsed from bytes, serde_json checks each string on its own, which
    /// cost three times as much for a small message's many short strings.
    ///
    /// A message spelled as compact JSON stays text
    /// ([`AppendMessage::Text`]): its value would be written back as the
    /// same bytes, so the transcript can take the text itself. Nesting is
    /// kept under serde_json's limit, so the value's reading, where the
    /// handler needs it, cannot fail.
    fn params_from_text(text: &[u8]) -> Option<PairAppendParams> {
        /// Deep enough for any message, well under serde_json's 128.
        const TEXT_DEPTH: usize = 100;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Params<'a> {
            session_id: SessionId,
            #[serde(borrow)]
            message: &'a RawValue,
            #[serde(default)]
            format: Option<Format>,
        }
        let text = std::str::from_utf8(text).ok()?;
        if let Ok(params) = serde_json::from_str::<Params>(text) {
            let message = params.message.get().as_bytes();
            if format::is_compact_json_within(message, TEXT_DEPTH) {
                return Some(PairAppendParams {
                    session_id: params.session_id,
                    message: AppendMessage::Text(params.message.to_owned()),
                    format: params.format,
                });
            }
        }
        serde_json::from_str(text).ok()
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
            let group = match params.message {
                // An Anthropic message the text reader takes is checked:
                // it is held as its text, with no values built.
                AppendMessage::Text(text) if format == Format::Anthropic => {
                    match Msg::anthropic_text(text) {
                        Ok(msg) => vec![msg],
                        Err(text) => checked(format, parse(&text)?)?,
                    }
                }
                AppendMessage::Text(text) => checked(format, parse(&text)?)?,
                AppendMessage::Value(value) => checked(format, value)?,
            };
            append(session, cx, params.session_id, format, group).await
        })
    }
}

/// Plan, commit and answer the append of `group` (checked).
async fn append(
    session: &mut Session,
    cx: &RequestCx,
    session_id: SessionId,
    format: Format,
    group: Vec<Msg>,
) -> Result<Reply<PairAppendResult>> {
    let dialect = format.dialect();
    let mut names: Vec<(crate::state::Id, Arc<str>)> = Vec::new();
    for msg in &group {
        for (id, name) in msg.view(dialect).calls() {
            names.push((crate::state::keep_id(id), Arc::from(name)));
        }
    }
    // On a shared store another replica may move the pending pair
    // between this plan and its commit: then the commit is refused
    // and the step planned again from what that replica did.
    let races = session.storage().store().shared_by_replicas();
    let mut group = Some(group);
    let mut attempts = 0;
    let (status, flushed, written) = loop {
        attempts += 1;
        if attempts > MAX_ATTEMPTS {
            return Err(pair_kept_moving(&session_id));
        }
        let plan = match races {
            true => group.clone(),
            false => group.take(),
        }
        .ok_or_else(|| Error::Internal("pair/append planned twice".into()))?;
        let loaded = session.load().await?;
        let step =
            loaded
                .guard
                .append(dialect, plan, cx.conn.id, cx.config.abort_mode, "message")?;
        loaded.format.get_or_insert(format);
        cx.check_cancelled()?;
        {
            // The session's own slot, not a registry lookup (a lock,
            // a key built and hashed) on every append; and the key
            // cloned only the first time.
            let slot = session.own_slot().unwrap_or_else(|| cx.slot(&session_id));
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
}

/// The value of a message kept as text: it is compact JSON within
/// serde_json's nesting limit, so this does not fail.
fn parse(text: &RawValue) -> Result<Value> {
    crate::json::from_slice(text.get().as_bytes()).map_err(|err| Error::Parse(err.to_string()))
}

/// The messages of `message`, each checked: one message, or (format
/// `openai-responses`) the items of one model response or one batch of
/// outputs.
fn checked(format: Format, message: Value) -> Result<Vec<Msg>> {
    let group = match message {
        Value::Array(items) if format == Format::OpenaiResponses && !items.is_empty() => items,
        Value::Array(_) => {
            return Err(Error::invalid_params(
                "message",
                match format {
                    Format::OpenaiResponses => "an array of input items must not be empty",
                    _ => "a message must be an object (arrays of items are for openai-responses)",
                },
            ));
        }
        msg => vec![msg],
    };
    // Tool blocks in the wrong role would be orphans in the transcript:
    // refused (PROTOCOL.md 10.2).
    let dialect = format.dialect();
    for (i, msg) in group.iter().enumerate() {
        let path = if group.len() == 1 {
            std::borrow::Cow::Borrowed("message")
        } else {
            std::borrow::Cow::Owned(format!("message[{i}]"))
        };
        dialect.validate(msg, &path, true)?;
    }
    Ok(group.into_iter().map(Msg::Value).collect())
}
