//! `pair/append`: write a message to the session transcript, holding tool
//! calls back until all their results are in (see `transcript::guard`).

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Reply, RequestCx, SessionMethod};
use crate::error::Result;
use crate::format::{self, Format};
use crate::protocol::{PairAppend, PairAppendParams, PairAppendResult, SessionId};
use crate::session::Session;

impl SessionMethod for PairAppend {
    fn session_id(params: &PairAppendParams) -> &SessionId {
        &params.session_id
    }

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: PairAppendParams,
    ) -> BoxFuture<'a, Result<Reply<PairAppendResult>>> {
        Box::pin(async move {
            let dialect = Format::Anthropic.dialect();
            let msg = params.message.0;
            // Tool blocks in the wrong role would be orphans in the
            // transcript: refused (PROTOCOL.md 10.2).
            dialect.validate(&msg, "message", true)?;
            let names: Vec<(Arc<str>, Arc<str>)> = format::calls(dialect, &msg)
                .into_iter()
                .map(|(id, name)| (Arc::from(&*id), Arc::from(&*name)))
                .collect();
            let loaded = session.load().await?;
            let step =
                loaded
                    .guard
                    .append(dialect, msg, cx.conn.id, cx.config.abort_mode, "message")?;
            cx.check_cancelled()?;
            {
                let slot = cx.slot(&params.session_id);
                let mut touched = cx.conn.touched.lock().unwrap_or_else(|p| p.into_inner());
                touched.insert(slot.key.clone(), slot);
            }
            let written = step.lines.count;
            session.write(step.lines, cx.config.fsync(), true).await?;
            let loaded = session.load().await?;
            loaded.exists = true;
            for (id, name) in names {
                loaded.tool_names.insert_mut(id, name);
            }
            loaded.guard.apply(step.transition);
            let pending = loaded.guard.pending_ids();
            session.publish();
            Ok(Reply::Now(PairAppendResult {
                status: step.status,
                pending,
                written,
                flushed: step.flushed,
            }))
        })
    }
}
