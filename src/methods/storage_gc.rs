//! `storage/gc`: retention by the rules of [`crate::retention`], over the
//! connection's data directory. Sessions this server has open are held;
//! the work runs on a blocking thread, reporting `$/progress` when asked.

use futures_util::future::BoxFuture;
use serde_json::json;

use super::{ConcurrentMethod, RequestCx};
use crate::error::{Error, Result};
use crate::protocol::{GcReport, StorageGc, StorageGcParams};
use crate::retention;

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
    let data_dir = cx.config.data_dir.clone();
    let objects = match &cx.config.storage.objects {
        Some(objects) => Some(crate::artifact::objects::ObjectArtifacts::open(objects)?),
        None => None,
    };
    let policy = cx.config.retention.policy(std::time::SystemTime::now());
    if let Some(shared) = cx.server.registry.storage().shared.clone() {
        return shared.collect(&data_dir, objects, &policy, dry_run).await;
    }
    let open = cx.server.registry.open_sessions(&data_dir);
    let progress_cx = cx.clone();
    tokio::task::spawn_blocking(move || {
        retention::collect(
            &data_dir,
            objects.as_deref(),
            &policy,
            dry_run,
            &|id| open.contains(id),
            &mut |p| {
                let percentage = (p.done * 100).checked_div(p.total).unwrap_or(100);
                progress_cx.progress(
                    token.as_ref(),
                    json!({"kind": "report", "message": p.phase, "percentage": percentage}),
                );
            },
        )
    })
    .await
    .map_err(|err| Error::Internal(format!("gc task failed: {err}")))?
}
