//! `storage/gc`: retention by the rules of [`crate::retention`], over the
//! connection's data directory. Sessions this server has open are held;
//! the work runs on a blocking thread, reporting `$/progress` when asked.

use futures_util::future::BoxFuture;
use serde_json::json;

use super::{ConcurrentMethod, RequestCx};
use crate::error::Result;
use crate::protocol::{GcReport, StorageGc, StorageGcParams};
use crate::store::{Collect, SessionStore};

impl ConcurrentMethod for StorageGc {
    fn run(cx: RequestCx, params: StorageGcParams) -> BoxFuture<'static, Result<GcReport>> {
        Box::pin(async move {
            let token = params.work_done_token.clone();
            cx.progress(
                token.as_ref(),
                json!({"kind": "begin", "title": "Collecting saved outputs", "percentage": 0}),
            );
            let report = run(&cx, params.dry_run.unwrap_or(false), token.clone()).await;
            cx.progress(token.as_ref(), json!({"kind": "end"}));
            report
        })
    }
}

/// One run over `cx`'s data directory (also the daemon's scheduled run).
async fn run(
    cx: &RequestCx,
    dry_run: bool,
    token: Option<crate::protocol::ProgressToken>,
) -> Result<GcReport> {
    let progress_cx = cx.clone();
    let gc = Collect::of(
        &cx.config.data_dir,
        cx.config.storage.objects.as_ref(),
        &cx.config.retention,
        cx.registry.open_sessions(&cx.config.data_dir),
        dry_run,
        Box::new(move |p| {
            let percentage = (p.done * 100).checked_div(p.total).unwrap_or(100);
            progress_cx.progress(
                token.as_ref(),
                json!({"kind": "report", "message": p.phase, "percentage": percentage}),
            );
        }),
    )?;
    cx.registry.storage().store().collect(gc).await
}
