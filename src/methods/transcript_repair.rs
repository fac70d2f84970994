//! `transcript/repair`: rewrite a transcript file so that it satisfies the
//! pair invariant (see `transcript::repair`). Touches no session; refuses a
//! transcript that a live writer holds locked.

use futures_util::future::BoxFuture;
use serde_json::json;

use super::{ConcurrentMethod, RequestCx};
use crate::error::{Error, Result};
use crate::protocol::{TranscriptRepair, TranscriptRepairParams, TranscriptRepairResult};
use crate::transcript::repair;

impl ConcurrentMethod for TranscriptRepair {
    fn run(
        cx: RequestCx,
        params: TranscriptRepairParams,
    ) -> BoxFuture<'static, Result<TranscriptRepairResult>> {
        Box::pin(async move {
            let path = cx.config.workspace_path(&params.path);
            let token = params.work_done_token.as_ref();
            cx.progress(
                token,
                json!({"kind": "begin", "title": "Repairing transcript"}),
            );
            cx.check_cancelled()?;
            let dry_run = params.dry_run.unwrap_or(false);
            let format = params.format;
            let result =
                tokio::task::spawn_blocking(move || repair::repair_file(&path, format, dry_run))
                    .await
                    .map_err(|e| Error::Internal(e.to_string()))?;
            cx.progress(token, json!({"kind": "end"}));
            result
        })
    }
}
