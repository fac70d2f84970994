//! `transcript/check`: say whether the provider would accept a
//! conversation's pairing (see `transcript::check`). Touches no session and
//! takes no lock.

use futures_util::future::BoxFuture;

use super::{ConcurrentMethod, RequestCx};
use crate::error::{Error, Result};
use crate::protocol::{TranscriptCheck, TranscriptCheckParams, TranscriptCheckResult};
use crate::transcript::check;

impl ConcurrentMethod for TranscriptCheck {
    fn run(
        cx: RequestCx,
        params: TranscriptCheckParams,
    ) -> BoxFuture<'static, Result<TranscriptCheckResult>> {
        Box::pin(async move {
            let dialect = params
                .format
                .or(cx.config.format)
                .unwrap_or_default()
                .dialect();
            match (params.path, params.messages) {
                (Some(_), Some(_)) => Err(Error::invalid_params(
                    "messages",
                    "give either `path` or `messages`, not both",
                )),
                (None, None) => Err(Error::invalid_params(
                    "path",
                    "give `path` (a transcript file) or `messages`",
                )),
                (None, Some(messages)) => {
                    for (i, m) in messages.iter().enumerate() {
                        dialect.validate(&m.0, &format!("messages[{i}]"), false)?;
                    }
                    Ok(check::check_messages(
                        dialect,
                        messages.iter().map(|m| &m.0),
                    ))
                }
                (Some(path), None) => {
                    let path = cx.config.workspace_path(&path);
                    cx.check_cancelled()?;
                    let format = params.format;
                    tokio::task::spawn_blocking(move || check::check_file(format, &path))
                        .await
                        .map_err(|e| Error::Internal(e.to_string()))?
                }
            }
        })
    }
}
