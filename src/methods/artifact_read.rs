//! `artifact/read`: a page of a saved output, or the lines matching a
//! pattern. Reads saved outputs only (no session state; on the shared store
//! the session's commits, to find an output a fork inherited), so it runs
//! beside the session's work, the reading on a blocking thread; the core is
//! [`crate::artifact::read::read_artifact`].

use futures_util::future::BoxFuture;

use super::{ConcurrentMethod, RequestCx};
use crate::artifact::read;
use crate::error::{Error, Result};
use crate::protocol::{ArtifactRead, ArtifactReadParams, ReadResult};

impl ConcurrentMethod for ArtifactRead {
    fn run(cx: RequestCx, params: ArtifactReadParams) -> BoxFuture<'static, Result<ReadResult>> {
        Box::pin(async move {
            let data_dir = cx.config.data_dir.clone();
            let objects = cx.config.storage.objects.clone();
            let unit = cx.config.size_unit;
            let cancel = cx.cancel.clone();
            // On the shared store a fork's inherited outputs are found
            // through its commits, there being no transcript file.
            let inherited = match cx.registry.storage().shared.clone() {
                Some(shared) => {
                    crate::store::shared_target(&*shared, &params.session_id, &params.tool_use_id)
                        .await?
                }
                None => None,
            };
            tokio::task::spawn_blocking(move || {
                read::read_artifact_until(
                    &data_dir,
                    objects.as_ref(),
                    &params.session_id,
                    &params.tool_use_id,
                    inherited,
                    &params.request(),
                    unit,
                    &|| cancel.is_cancelled(),
                )
            })
            .await
            .map_err(|err| Error::Internal(format!("artifact/read task failed: {err}")))?
        })
    }
}
