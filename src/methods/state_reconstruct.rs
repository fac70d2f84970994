//! `state/reconstruct`: rebuild a session's replacement state from what a
//! client or a transcript file says was sent, replacing what it had.
//!
//! `seenIds` = every tool_use_id of a tool_result in the messages and the
//! transcript; each gets its record's replacement, else its inherited one,
//! else none. The transcript is streamed line by line, torn or unparsable
//! lines are skipped and counted, and `$/progress` is reported when the
//! client passed a `workDoneToken`.

use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::json;

use super::{Reply, RequestCx, SessionMethod};
use crate::error::{Error, Result};
use crate::message;
use crate::protocol::{
    RECORD_KIND, SessionId, StateReconstruct, StateReconstructParams, StateReconstructResult,
};
use crate::state::{Replacement, ReplacementState};
use crate::transcript::reader::{self, Entry};

impl SessionMethod for StateReconstruct {
    fn session_id(params: &StateReconstructParams) -> &SessionId {
        &params.session_id
    }

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: StateReconstructParams,
    ) -> BoxFuture<'a, Result<Reply<StateReconstructResult>>> {
        Box::pin(async move { reconstruct(session, cx, params).await.map(Reply::Now) })
    }
}

use crate::session::Session;

#[derive(Default)]
struct Gathered {
    seen: Vec<Arc<str>>,
    names: Vec<(Arc<str>, Arc<str>)>,
    records: HashMap<Arc<str>, Arc<Replacement>>,
    messages_read: usize,
    records_read: usize,
    skipped: usize,
}

impl Gathered {
    fn message(&mut self, msg: &serde_json::Value) {
        self.messages_read += 1;
        for (_, id) in message::tool_results(msg) {
            self.seen.push(id.into());
        }
        for (id, name) in message::tool_uses(msg) {
            self.names.push((id.into(), name.into()));
        }
    }

    fn record(&mut self, id: String, replacement: String) {
        self.records_read += 1;
        self.records
            .entry(id.into())
            .or_insert_with(|| Arc::new(Replacement::new(&replacement)));
    }
}

async fn reconstruct(
    session: &mut Session,
    cx: &RequestCx,
    params: StateReconstructParams,
) -> Result<StateReconstructResult> {
    let mut gathered = Gathered::default();
    for (i, m) in params.messages.iter().flatten().enumerate() {
        message::validate(&m.0, &format!("messages[{i}]"))?;
        gathered.message(&m.0);
    }
    for record in params.records.into_iter().flatten() {
        if record.kind == RECORD_KIND {
            gathered.record(record.tool_use_id, record.replacement);
        }
    }
    if let Some(path) = params.transcript {
        let path = resolve(&cx.config.workspace, &path);
        let token = params.work_done_token.clone();
        let progress_cx = cx.clone();
        gathered = tokio::task::spawn_blocking(move || {
            read_transcript(&path, gathered, |done, total| {
                let percentage = (done * 100).checked_div(total).unwrap_or(100);
                progress_cx.progress(
                    token.as_ref(),
                    json!({"kind": "report", "percentage": percentage}),
                );
            })
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
        cx.progress(params.work_done_token.as_ref(), json!({"kind": "end"}));
    }

    let inherited = params.inherited_replacements.unwrap_or_default();
    let mut state = ReplacementState::default();
    state.commit_decisions(gathered.seen.iter().map(|id| {
        let replacement = gathered
            .records
            .get(id)
            .cloned()
            .or_else(|| inherited.get(&**id).map(|r| Arc::new(Replacement::new(r))));
        (id.clone(), replacement)
    }));

    cx.check_cancelled()?;
    let loaded = session.load().await?;
    loaded.exists = true;
    loaded.state = state;
    for (id, name) in gathered.names {
        if !loaded.state.is_decided(&id) {
            loaded.tool_names.insert_mut(id, name);
        }
    }
    let result = StateReconstructResult {
        seen_count: loaded.state.seen_count(),
        replacement_count: loaded.state.replacement_count(),
        messages_read: gathered.messages_read,
        records_read: gathered.records_read,
        skipped_lines: gathered.skipped,
    };
    session.publish();
    Ok(result)
}

fn resolve(workspace: &std::path::Path, path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    if path.is_absolute() {
        path
    } else {
        workspace.join(path)
    }
}

/// Stream a transcript into `gathered`, calling `progress(bytes, total)`
/// every few megabytes.
fn read_transcript(
    path: &std::path::Path,
    mut gathered: Gathered,
    progress: impl Fn(u64, u64),
) -> Result<Gathered> {
    let file = std::fs::File::open(path).map_err(|err| Error::storage(path, &err))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    const STEP: u64 = 8 << 20;
    let mut next_report = STEP;
    let (_, torn) = reader::read_lines(
        BufReader::with_capacity(1 << 20, file.take(u64::MAX)),
        |span, entry| {
            match entry {
                Some(Entry::Message(m)) => gathered.message(&m),
                Some(Entry::Record(r)) => gathered.record(r.tool_use_id, r.replacement),
                Some(Entry::Ignored) => {}
                None => gathered.skipped += 1,
            }
            if span.offset + span.len >= next_report {
                next_report += STEP;
                progress(span.offset + span.len, total);
            }
        },
    )
    .map_err(|err| Error::storage(path, &err))?;
    if torn {
        gathered.skipped += 1;
    }
    Ok(gathered)
}
