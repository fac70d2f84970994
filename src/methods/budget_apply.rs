//! `budget/apply`: keep every user message's tool results within budget.
//!
//! Per user turn, in order: reapply stored replacements byte for byte,
//! leave frozen results alone, choose fresh results to persist (everything
//! over `maxResultChars`, then the largest until the turn fits, each only if
//! its replacement is smaller), persist them concurrently, then commit every
//! fresh result of the turn in one step. The whole request journals its
//! decisions (a `replacement` line per replaced result, one `seen` line for
//! those sent whole, each with the digest of its original) and then
//! publishes them at once, so no reader sees a result decided without its
//! preview, a failed journal write leaves nothing decided, and a restart
//! resumes with exactly what the client was sent.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures_util::future::{BoxFuture, join_all};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Reply, RequestCx, SessionMethod};
use crate::artifact::ArtifactKind;
use crate::budget::{self, Chosen, PlanContext};
use crate::config::{self, Effective, ToolPolicy};
use crate::error::Result;
use crate::format::{self, Dialect, Digest};
use crate::protocol::{
    BudgetApply, BudgetApplyParams, BudgetApplyResult, Message, PersistFailure, Persisted,
    RECORD_KIND, ReplacementRecord, SeenLine, SessionId,
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
    let format = session.format_for(params.format, config.format).await?;
    let dialect = format.dialect();
    for (i, m) in params.messages.iter().enumerate() {
        dialect.validate(&m.0, &format!("messages[{i}]"), false)?;
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
    let pending = loaded
        .guard
        .pending()
        .into_iter()
        .flat_map(|p| &p.assistant);
    for msg in params.messages.iter().map(|m| &m.0).chain(pending) {
        for (id, name) in format::calls(dialect, msg) {
            names.insert_mut(Arc::from(&*id), Arc::from(&*name));
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
        dialect,
        limits,
        unit,
        artifact_dir: &artifact_dir,
        is_exempt: &is_exempt,
        policy: &policy,
    };

    let mut messages: Vec<Value> = params.messages.into_iter().map(|m| m.0).collect();
    let units = budget::units(dialect, &messages);
    let mut state = loaded.state.clone();
    let mut records = Vec::new();
    let mut seen = SeenLine {
        tool_use_ids: Vec::new(),
        digests: Vec::new(),
    };
    let mut persisted = Vec::new();
    let mut failures = Vec::new();
    let mut decided: Vec<Arc<str>> = Vec::new();
    // From the first artifact written (or reused) until the replacements
    // are journaled, gc keeps off this session (see `retention`).
    let mut hold = None;
    for unit_messages in &units {
        let refs: Vec<&Value> = unit_messages.iter().map(|&i| &messages[i]).collect();
        let plan = budget::plan_message(&refs, &state, &pcx);
        if plan.fresh.is_empty() {
            continue;
        }
        if hold.is_none() && !plan.chosen.is_empty() {
            // A directory that cannot be held cannot be written either:
            // the persists fail and are reported, as for any disk refusal.
            hold = hold_session(&artifact_dir).await;
        }
        let outcomes = persist_all(dialect, &store, &refs, &plan.chosen, fsync).await;
        let mut replaced: HashMap<(Arc<str>, Digest), Arc<Replacement>> = HashMap::new();
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
                        digest: chosen.digest.hex(),
                    });
                    replaced.insert(
                        (chosen.tool_use_id.clone(), chosen.digest),
                        Arc::new(Replacement::new(&chosen.replacement)),
                    );
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
        // Every fresh eligible result of the unit is decided in one step;
        // the ones that were persisted get their replacement, the others are
        // journaled as sent whole.
        for (id, digest) in &plan.fresh {
            decided.push(id.clone());
            if !replaced.contains_key(&(id.clone(), *digest)) {
                seen.tool_use_ids.push(id.to_string());
                seen.digests.push(digest.hex().unwrap_or_default());
            }
        }
        state.commit_decisions(plan.fresh.into_iter().map(|(id, digest)| {
            let replacement = replaced.get(&(id.clone(), digest)).cloned();
            (id, digest, replacement)
        }));
    }

    // Past this point the decisions take effect: a cancellation is honoured
    // only before it (artifacts already written are simply reused later).
    if cancel.is_cancelled() {
        return Err(crate::error::Error::Cancelled);
    }
    session.load().await?.format.get_or_insert(format);
    if !records.is_empty() || !seen.tool_use_ids.is_empty() {
        // Journaled before the reply, so a restart at any moment resumes
        // with exactly the decisions the client was sent (PROTOCOL.md 10.1),
        // whether or not it ever appends the messages.
        let mut lines = Lines::default();
        for record in &records {
            lines.push_record(record);
        }
        if !seen.tool_use_ids.is_empty() {
            lines.push_seen(&seen);
        }
        session.write(lines, fsync, true).await?;
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
    for unit_messages in &units {
        for &i in unit_messages {
            budget::render_message(&mut messages[i], &loaded.state, &pcx);
        }
        let refs: Vec<&Value> = unit_messages.iter().map(|&i| &messages[i]).collect();
        if budget::message_total(dialect, &refs, unit) > limits.max_message_chars {
            over_limit.extend(unit_messages.iter().copied());
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
    dialect: &dyn Dialect,
    store: &Arc<dyn crate::artifact::ArtifactStore>,
    unit: &[&Value],
    chosen: &[Chosen],
    fsync: bool,
) -> Vec<std::result::Result<bool, String>> {
    let tasks = chosen.iter().map(|c| {
        let store = store.clone();
        let path = c.path.clone();
        let content = dialect
            .result_value(unit[c.message], c.block)
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
