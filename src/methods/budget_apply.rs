//! `budget/apply`: keep every user message's tool results within budget.
//!
//! Per user message, in order: reapply stored replacements byte for byte,
//! leave frozen results alone, choose fresh results to persist (everything
//! over `maxResultChars`, then the largest until the message fits), persist
//! them concurrently, then commit every fresh id of the message in one step.
//! The whole request publishes its decisions at once, after its records are
//! journaled, so no reader sees an id decided without its preview and a
//! failed journal write leaves nothing decided.

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::future::{BoxFuture, join_all};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Reply, RequestCx, SessionMethod};
use crate::artifact::ArtifactKind;
use crate::budget::{self, Chosen, PlanContext};
use crate::config::{self, Effective, ToolPolicy};
use crate::error::Result;
use crate::message;
use crate::protocol::{
    BudgetApply, BudgetApplyParams, BudgetApplyResult, Message, PersistFailure, Persisted,
    RECORD_KIND, ReplacementRecord, SessionId,
};
use crate::retention;
use crate::session::{Registry, Session};
use crate::state::Replacement;
use crate::transcript::Lines;

impl SessionMethod for BudgetApply {
    fn session_id(params: &BudgetApplyParams) -> &SessionId {
        &params.session_id
    }

    fn run<'a>(
        session: &'a mut Session,
        cx: &'a RequestCx,
        params: BudgetApplyParams,
    ) -> BoxFuture<'a, Result<Reply<BudgetApplyResult>>> {
        Box::pin(async move {
            apply(session, &cx.config, &cx.cancel, params)
                .await
                .map(Reply::Now)
        })
    }
}

/// Budget on the session's queue, for a face without a JSON-RPC request
/// (the MCP front, the HTTP proxy): ordered with the session's other work,
/// sharing its state, journal and artifacts; never cancelled.
pub async fn apply_queued(
    registry: &Registry,
    config: Arc<Effective>,
    params: BudgetApplyParams,
) -> Result<BudgetApplyResult> {
    let slot = registry.slot(&config.data_dir, &params.session_id);
    slot.run(move |session| {
        Box::pin(async move { apply(session, &config, &CancellationToken::new(), params).await })
    })
    .await
}

/// Budget `params.messages` on `session` (the session's queue must be the
/// caller). The one implementation of budgeting: `budget/apply` and every
/// other face (the MCP front) call it through the session's queue.
pub async fn apply(
    session: &mut Session,
    config: &Effective,
    cancel: &CancellationToken,
    params: BudgetApplyParams,
) -> Result<BudgetApplyResult> {
    for (i, m) in params.messages.iter().enumerate() {
        message::validate(&m.0, &format!("messages[{i}]"))?;
    }
    let limits = config.limits.with(params.limits.as_ref());
    let unit = config.size_unit;
    let fsync = config.fsync();
    let artifact_dir = session.key().artifact_dir();
    let store = session.storage().artifacts.clone();
    let loaded = session.load().await?;

    // Tool names from this request, the pending pair and the transcript.
    let exempt: HashSet<&str> = config.exempt_tools.iter().map(String::as_str).collect();
    let mut names = loaded.tool_names.clone();
    let pending = loaded.guard.pending().map(|p| &p.assistant);
    for msg in params.messages.iter().map(|m| &m.0).chain(pending) {
        for (id, name) in message::tool_uses(msg) {
            names.insert_mut(Arc::from(id), Arc::from(name));
        }
    }
    // Per-tool settings: the request's over the connection's, key by key.
    let tools = config::merge_tools(&config.tools, params.tools.as_ref());
    let preview_mode = params.preview_mode.unwrap_or(config.preview_mode);
    let policy = |id: &str| {
        let name = names.get(id).map(|name| &**name);
        ToolPolicy::resolve(&tools, name, &limits, preview_mode)
    };
    let is_exempt = |id: &str| {
        (!exempt.is_empty() && names.get(id).is_some_and(|name| exempt.contains(&**name)))
            || policy(id).max_result_chars.is_none()
    };
    let pcx = PlanContext {
        limits,
        unit,
        artifact_dir: &artifact_dir,
        is_exempt: &is_exempt,
        policy: &policy,
    };

    let mut messages: Vec<Value> = params.messages.into_iter().map(|m| m.0).collect();
    let mut state = loaded.state.clone();
    let mut records = Vec::new();
    let mut persisted = Vec::new();
    let mut failures = Vec::new();
    let mut decided: Vec<Arc<str>> = Vec::new();
    // From the first artifact written (or reused) until the replacements
    // are journaled, gc keeps off this session (see `retention`).
    let mut hold = None;
    for msg in &messages {
        if message::role(msg) != Some("user") || !message::has_tool_results(msg) {
            continue;
        }
        let plan = budget::plan_message(msg, &state, &pcx);
        if plan.fresh.is_empty() {
            continue;
        }
        if hold.is_none() && !plan.chosen.is_empty() {
            // A directory that cannot be held cannot be written either:
            // the persists fail and are reported, as for any disk refusal.
            hold = hold_session(&artifact_dir).await;
        }
        let outcomes = persist_all(&store, msg, &plan.chosen, fsync).await;
        let mut replaced = Vec::new();
        for (chosen, outcome) in plan.chosen.iter().zip(outcomes) {
            match outcome {
                Ok(reused) => {
                    tracing::info!(
                        path = %chosen.path.display(),
                        size = chosen.original_size,
                        reused,
                        "persisted tool result"
                    );
                    persisted.push(Persisted {
                        tool_use_id: chosen.tool_use_id.to_string(),
                        path: chosen.path.display().to_string(),
                        original_chars: chosen.original_size,
                        content_type: chosen.kind,
                        reused,
                    });
                    records.push(ReplacementRecord {
                        kind: RECORD_KIND.to_owned(),
                        tool_use_id: chosen.tool_use_id.to_string(),
                        replacement: chosen.replacement.to_string(),
                    });
                    replaced.push((
                        chosen.tool_use_id.clone(),
                        Arc::new(Replacement::new(&chosen.replacement)),
                    ));
                }
                Err(message) => {
                    tracing::warn!(path = %chosen.path.display(), %message, "could not persist tool result; sent as is");
                    failures.push(PersistFailure {
                        tool_use_id: chosen.tool_use_id.to_string(),
                        message,
                    });
                }
            }
        }
        // Every fresh eligible result of the message is decided in one step;
        // the ones that were persisted get their replacement.
        decided.extend(plan.fresh.iter().cloned());
        state.commit_decisions(plan.fresh.into_iter().map(|id| {
            let replacement = replaced
                .iter()
                .find(|(r, _)| *r == id)
                .map(|(_, text)| text.clone());
            (id, replacement)
        }));
    }

    // Past this point the decisions take effect: a cancellation is honoured
    // only before it (artifacts already written are simply reused later).
    if cancel.is_cancelled() {
        return Err(crate::error::Error::Cancelled);
    }
    if !records.is_empty() {
        let mut lines = Lines::default();
        for record in &records {
            lines.push_record(record);
        }
        session.write(lines, fsync, false).await?;
    }
    // Journaled: gc now sees what the artifacts are for.
    drop(hold);
    let loaded = session.load().await?;
    loaded.exists = true;
    // Names only matter until an id's fate is decided.
    for id in &decided {
        loaded.tool_names.remove_mut(&**id);
    }
    loaded.state = state;
    session.publish();
    let loaded = session.load().await?;

    let mut over_limit = Vec::new();
    for (i, msg) in messages.iter_mut().enumerate() {
        if message::role(msg) != Some("user") || !message::has_tool_results(msg) {
            continue;
        }
        budget::render_message(msg, &loaded.state, &pcx);
        if budget::message_total(msg, unit) > limits.max_message_chars {
            over_limit.push(i);
        }
    }
    Ok(BudgetApplyResult {
        messages: messages.into_iter().map(Message).collect(),
        records,
        persisted,
        failures,
        over_limit,
    })
}

/// Persist every chosen result concurrently; `Ok(reused)` or the failure.
async fn persist_all(
    store: &Arc<dyn crate::artifact::ArtifactStore>,
    msg: &Value,
    chosen: &[Chosen],
    fsync: bool,
) -> Vec<std::result::Result<bool, String>> {
    let blocks = message::blocks(msg);
    let tasks = chosen.iter().map(|c| {
        let store = store.clone();
        let path = c.path.clone();
        let content = blocks[c.block]
            .get("content")
            .cloned()
            .unwrap_or(Value::Null);
        let kind = c.kind;
        tokio::task::spawn_blocking(move || {
            let bytes = match (&content, kind) {
                (Value::String(s), ArtifactKind::Text) => s.as_bytes().to_vec(),
                _ => serde_json::to_vec(&content).map_err(|e| e.to_string())?,
            };
            store
                .write_once(&path, &bytes, fsync)
                .map(|w| w.reused)
                .map_err(|e| e.to_string())
        })
    });
    join_all(tasks)
        .await
        .into_iter()
        .map(|joined| {
            joined
                .map_err(|e| format!("persist task failed: {e}"))
                .and_then(|r| r)
        })
        .collect()
}

async fn hold_session(artifact_dir: &std::path::Path) -> Option<retention::SessionHold> {
    let dir = artifact_dir.to_path_buf();
    let held = tokio::task::spawn_blocking(move || retention::hold_session(&dir)).await;
    match held {
        Ok(Ok(hold)) => Some(hold),
        Ok(Err(err)) => {
            tracing::warn!(dir = %artifact_dir.display(), %err, "cannot hold the session directory");
            None
        }
        Err(err) => {
            tracing::warn!(%err, "holding the session directory failed");
            None
        }
    }
}
