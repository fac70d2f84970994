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
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::{BoxFuture, join_all};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Reply, RequestCx, SessionMethod};
use crate::artifact::ArtifactKind;
use crate::budget::ToolPolicy;
use crate::budget::{self, Chosen, PlanContext, clearing};
use crate::config::Effective;
use crate::error::Result;
use crate::format::{self, Dialect, Digest};
use crate::protocol::{
    BudgetApply, BudgetApplyParams, BudgetApplyResult, Message, PersistFailure, Persisted,
    RECORD_KIND, ReplacementRecord, SeenLine, SessionId,
};
use crate::retention;
use crate::session::{Registry, Runs, Session};
use crate::state::{Id, Replacement};

impl SessionMethod for BudgetApply {
    fn session_id(params: &BudgetApplyParams) -> &SessionId {
        &params.session_id
    }

    /// The messages are moved out of the parsed request as they are: a
    /// conversation of tens of MB is not decoded into a second tree of
    /// values (which costs time, and memory left in pieces between the
    /// state's long-lived entries). Every message is any JSON value to
    /// serde (checked by its dialect later), so the other params decode
    /// exactly as before, with the same errors.
    fn params(mut value: Value) -> Result<BudgetApplyParams> {
        let messages = match value.get_mut("messages") {
            Some(Value::Array(items)) => std::mem::take(items),
            _ => return super::params(value),
        };
        let mut params: BudgetApplyParams = super::params(value)?;
        params.messages = messages.into_iter().map(Message).collect();
        Ok(params)
    }

    /// A conversation of many values runs on a thread of its own, which
    /// ends with it and takes the small blocks it freed last out of the
    /// allocator's per-thread cache (see `session::on_own_thread`).
    fn runs(params: &BudgetApplyParams) -> Runs {
        if holds_at_least(&params.messages, OWN_THREAD_VALUES) {
            Runs::OwnThread
        } else {
            Runs::OnWorker
        }
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

/// How many JSON values a request's messages hold, at least, for its
/// budgeting to run on a thread of its own. Starting and joining a thread
/// with the runtime's stack took 75-130 µs (load 3.5-5); the memory
/// bench's requests, about 10,000 values each, take about 19 ms of the
/// server's CPU: about 2 µs a value, so a thread costs 1-2% of a request
/// of this size, which frees thousands of small blocks.
const OWN_THREAD_VALUES: usize = 4096;

/// Whether `messages` hold at least `least` JSON values (arrays, objects
/// and their members each count one), walked only that far.
fn holds_at_least(messages: &[Message], least: usize) -> bool {
    let mut met = messages.len();
    // Values met whose members are not counted yet.
    let mut stack: Vec<&Value> = messages.iter().take(least).map(|m| &m.0).collect();
    while let Some(value) = stack.pop() {
        if met >= least {
            return true;
        }
        match value {
            Value::Array(items) => {
                met += items.len();
                stack.extend(items.iter().take(least));
            }
            Value::Object(map) => {
                met += map.len();
                stack.extend(map.values().take(least));
            }
            _ => {}
        }
    }
    met >= least
}

/// Budget on the session's queue, for a face without a JSON-RPC request
/// (the MCP front, the HTTP proxy): ordered with the session's other work,
/// sharing its state, journal and artifacts; never cancelled.
pub async fn apply_queued(
    registry: &Registry,
    config: Arc<Effective>,
    params: BudgetApplyParams,
) -> Result<BudgetApplyResult> {
    Ok(apply_queued_tracked(registry, config, params).await?.result)
}

/// [`apply_queued`], saying which messages it changed.
pub async fn apply_queued_tracked(
    registry: &Registry,
    config: Arc<Effective>,
    params: BudgetApplyParams,
) -> Result<Applied> {
    let slot = registry.slot(&config.data_dir, &params.session_id);
    slot.run(move |session| {
        Box::pin(
            async move { apply_tracked(session, &config, &CancellationToken::new(), params).await },
        )
    })
    .await
}

/// What budgeting gave back, and which of its messages it changed: a face
/// that writes the conversation back into the bytes it came in (the HTTP
/// proxy) reads only those again, and leaves every other one as sent.
pub struct Applied {
    pub result: BudgetApplyResult,
    /// Per message of `result.messages`: whether a replacement was put
    /// into it. A message marked `false` is exactly the one given.
    pub changed: Vec<bool>,
}

/// When budgeting failed (the store cannot be reached): `params.messages`
/// with every decision the session already holds in memory put back, byte
/// for byte, and everything else as sent; nothing is decided, persisted or
/// journaled. `None` when this process holds nothing of the session. The
/// proxy forwards this instead of the request as sent, so results it
/// replaced on earlier turns keep their previews and the provider's cache
/// holds (PROTOCOL.md 11.1: degrade without forgetting).
pub async fn reapply_known_queued(
    registry: &Registry,
    config: Arc<Effective>,
    params: BudgetApplyParams,
) -> Result<Option<Vec<Message>>> {
    let slot = registry.slot(&config.data_dir, &params.session_id);
    slot.run(move |session| {
        Box::pin(async move {
            let Some(loaded) = session.loaded_mut() else {
                return Ok(None);
            };
            let state = loaded.state.clone();
            let format = loaded
                .format
                .or(params.format)
                .or(config.format)
                .unwrap_or_default();
            let dialect = format.dialect();
            let limits = config.limits.with(params.limits.as_ref());
            let artifact_dir = session.key().artifact_dir();
            // Only what is decided is rendered: which results would be
            // chosen fresh does not matter here.
            let is_exempt = |_: &str| false;
            let policy =
                |_: &str| ToolPolicy::resolve(&config.tools, None, &limits, config.preview_mode);
            let pcx = PlanContext {
                dialect,
                limits,
                unit: config.size_unit,
                artifact_dir: &artifact_dir,
                is_exempt: &is_exempt,
                policy: &policy,
                link_session: None,
            };
            let mut messages: Vec<Value> = params.messages.into_iter().map(|m| m.0).collect();
            for unit_messages in budget::units(dialect, &messages) {
                let plan = {
                    let refs: Vec<&Value> = unit_messages.iter().map(|&i| &messages[i]).collect();
                    budget::plan_message(&refs, &state, &pcx)
                };
                let mut digests: Vec<Vec<(usize, Digest)>> = vec![Vec::new(); unit_messages.len()];
                for &(m, block, digest) in &plan.digests {
                    digests[m].push((block, digest));
                }
                for (m, &i) in unit_messages.iter().enumerate() {
                    budget::render_message_known(&mut messages[i], &state, &pcx, &digests[m]);
                }
            }
            Ok(Some(messages.into_iter().map(Message).collect()))
        })
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
    Ok(apply_tracked(session, config, cancel, params).await?.result)
}

/// [`apply`], saying which messages it changed.
async fn apply_tracked(
    session: &mut Session,
    config: &Effective,
    cancel: &CancellationToken,
    params: BudgetApplyParams,
) -> Result<Applied> {
    let format = session.format_for(params.format, config.format).await?;
    let dialect = format.dialect();
    for (i, m) in params.messages.iter().enumerate() {
        dialect.validate(&m.0, &format!("messages[{i}]"), false)?;
    }
    let limits = config.limits.with(params.limits.as_ref());
    let unit = config.size_unit;
    let fsync = config.fsync();
    let artifact_dir = session.key().artifact_dir();
    // Where saved outputs go: under the data directory, or (configured)
    // to object storage, where previews name the object's URL.
    let (store, location): (Arc<dyn crate::artifact::ArtifactStore>, _) =
        match &config.storage.objects {
            None => (session.storage().artifacts.clone(), artifact_dir.clone()),
            Some(objects) => {
                let objects = crate::artifact::objects::ObjectArtifacts::open(objects)?;
                let url = objects.session_url(session.key().id.as_str());
                (objects, std::path::PathBuf::from(url))
            }
        };
    let on_disk = config.storage.objects.is_none();
    let loaded = session.load().await?;

    // Tool names from this request, the pending pair and the transcript.
    let exempt: HashSet<&str> = config.exempt_tools.iter().map(String::as_str).collect();
    let mut names = loaded.tool_names.clone();
    for msg in &params.messages {
        for (id, name) in format::calls(dialect, &msg.0) {
            names.insert_mut(Id::from(&*id), Arc::from(&*name));
        }
    }
    for msg in loaded
        .guard
        .pending()
        .into_iter()
        .flat_map(|p| &p.assistant)
    {
        for (id, name) in msg.view(dialect).calls() {
            names.insert_mut(Id::from(id), Arc::from(name));
        }
    }
    // Per-tool settings: the request's over the connection's, key by key.
    let tools = budget::merge_tools(&config.tools, params.tools.as_ref());
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
        artifact_dir: &location,
        is_exempt: &is_exempt,
        policy: &policy,
        link_session: params.link_session.as_deref(),
    };

    let mut messages: Vec<Value> = params.messages.into_iter().map(|m| m.0).collect();
    let units = budget::units(dialect, &messages);
    // The newest server-side compaction (PROTOCOL.md 11.2): the model never
    // sees what stands before it, so nothing there is decided or saved;
    // decisions already made there are still put back, byte for byte.
    let cut = format::compaction_cut(dialect, messages.iter()).map(|(m, _)| m);
    let mut state = loaded.state.clone();
    let mut records = Vec::new();
    let mut seen = SeenLine {
        tool_use_ids: Vec::new(),
        digests: Vec::new(),
    };
    let mut persisted = Vec::new();
    let mut failures = Vec::new();
    let mut decided: Vec<Id> = Vec::new();
    // From the first artifact written (or reused) until the replacements
    // are journaled, gc keeps off this session (see `retention`).
    let mut hold = None;
    // Per message, `(block, digest)` of its eligible results, for rendering.
    let mut digests: Vec<Vec<(usize, Digest)>> = vec![Vec::new(); messages.len()];
    // Messages whose results were saved (and replaced) in this request.
    let mut rewritten = vec![false; messages.len()];
    for unit_messages in &units {
        let refs: Vec<&Value> = unit_messages.iter().map(|&i| &messages[i]).collect();
        let mut plan = budget::plan_message(&refs, &state, &pcx);
        if cut.is_some_and(|c| unit_messages.iter().all(|&m| m < c)) {
            plan.fresh.clear();
            plan.chosen.clear();
        }
        for &(m, block, digest) in &plan.digests {
            digests[unit_messages[m]].push((block, digest));
        }
        bind_inherited(&mut state, plan.bind, &mut records, &mut seen);
        if plan.fresh.is_empty() {
            continue;
        }
        if hold.is_none() && !plan.chosen.is_empty() {
            hold = Some(Hold::take(session, on_disk, &artifact_dir).await?);
        }
        drop(refs);
        if !plan.chosen.is_empty() {
            unit_messages.iter().for_each(|&i| rewritten[i] = true);
        }
        let outcomes = persist_all(
            dialect,
            &store,
            &mut messages,
            unit_messages,
            &plan.chosen,
            fsync,
        )
        .await?;
        let mut replaced: HashMap<(Id, Digest), Replacement> = HashMap::new();
        for (chosen, outcome) in plan.chosen.iter().zip(outcomes) {
            match outcome {
                Ok(reused) => {
                    tracing::info!(
                        path = %chosen.path.display(),
                        size = chosen.original_size,
                        reused,
                        "persisted tool result"
                    );
                    saved(chosen, reused, false, &mut persisted, &mut records);
                    replaced.insert(
                        (chosen.tool_use_id.clone(), chosen.digest),
                        Replacement::new(&chosen.replacement),
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

    // Clearing old results (PROTOCOL.md 11.3), once this request's fresh
    // results are decided: a batch of them replaced in one apply.
    let clearing = config.clearing.with(params.clearing.as_ref());
    let idle = clearing::touch(
        &session.key().transcript_path().to_string_lossy(),
        clearing::now_secs(),
    );
    let ccx = clearing::ClearContext {
        dialect,
        clearing,
        unit,
        is_exempt: &is_exempt,
        idle,
        prices: budget::pricing::resolve(
            budget::pricing::Provider::of(format),
            &config.pricing,
            params.pricing.as_ref(),
        ),
    };
    let clearing::Plan {
        chosen: to_clear,
        report: mut clearing_report,
    } = {
        // The digests taken above, of results still as they were then.
        let known: Vec<Vec<(usize, Digest)>> = (digests.iter().zip(&rewritten))
            .map(|(d, &rewritten)| if rewritten { Vec::new() } else { d.clone() })
            .collect();
        clearing::plan_known(&messages, &state, &ccx, &known)
    };
    let mut cleared = Vec::new();
    if !to_clear.is_empty() {
        if hold.is_none() {
            hold = Some(Hold::take(session, on_disk, &artifact_dir).await?);
        }
        let refs: Vec<&Value> = to_clear.iter().map(|c| &messages[c.message]).collect();
        let chosen: Vec<Chosen> = to_clear
            .iter()
            .enumerate()
            .map(|(i, c)| cleared_choice(&state, dialect, &pcx, &clearing, refs[i], i, c))
            .collect();
        drop(refs);
        let at: Vec<usize> = to_clear.iter().map(|c| c.message).collect();
        let outcomes = persist_all(dialect, &store, &mut messages, &at, &chosen, fsync).await?;
        let mut clear = Vec::new();
        for (chosen, outcome) in chosen.into_iter().zip(outcomes) {
            match outcome {
                Ok(reused) => {
                    saved(&chosen, reused, true, &mut persisted, &mut records);
                    cleared.push(chosen.tool_use_id.to_string());
                    clear.push((
                        chosen.tool_use_id,
                        chosen.digest,
                        Replacement::new(&chosen.replacement),
                    ));
                }
                // Not cleared this time: still sent whole, and a later
                // apply tries again.
                Err(message) => {
                    tracing::warn!(path = %chosen.path.display(), %message, "could not persist an old tool result; not cleared");
                    failures.push(PersistFailure {
                        tool_use_id: chosen.tool_use_id.to_string(),
                        message,
                    });
                }
            }
        }
        tracing::info!(cleared = clear.len(), decision = ?clearing_report.decision, rent = clearing_report.rent_chars, cost = clearing_report.cost_chars, "cleared old tool results");
        if clear.is_empty() {
            // Every save failed: nothing was cleared after all.
            clearing_report.decision = clearing::Decision::Waiting;
        }
        state.clear(clear);
    }

    // Past this point the decisions take effect: a cancellation is honoured
    // only before it (artifacts already written are simply reused later).
    if cancel.is_cancelled() {
        return Err(crate::error::Error::Cancelled);
    }
    session.load().await?.format.get_or_insert(format);
    // Journaled before the reply, so a restart at any moment resumes with
    // exactly the decisions the client was sent (PROTOCOL.md 10.1), whether
    // or not it ever appends the messages.
    let raced = if !records.is_empty() || !seen.tool_use_ids.is_empty() {
        session.journal(&records, &seen, fsync).await?
    } else {
        false
    };
    // Journaled: gc now sees what the artifacts are for.
    if let Some(Hold::Outputs(Some(hold))) = hold {
        hold.release().await;
    }
    let loaded = session.load().await?;
    loaded.exists = true;
    // Names only matter until an id's fate is decided.
    for id in &decided {
        loaded.tool_names.remove_mut(&**id);
    }
    if raced {
        // On a shared store the state read back holds the winner of each
        // decision: report what was sent, which may be another replica's.
        winners(&loaded.state, &mut records, &mut persisted);
    } else {
        loaded.state = state;
    }
    session.publish();
    let loaded = session.load().await?;

    let mut over_limit = Vec::new();
    // Rendering is the only change budgeting makes to a message.
    let mut changed = vec![false; messages.len()];
    for unit_messages in &units {
        for &i in unit_messages {
            changed[i] |=
                budget::render_message_known(&mut messages[i], &loaded.state, &pcx, &digests[i])
                    > 0;
        }
        let refs: Vec<&Value> = unit_messages.iter().map(|&i| &messages[i]).collect();
        if budget::message_total(dialect, &refs, unit) > limits.max_message_chars {
            over_limit.extend(unit_messages.iter().copied());
        }
    }
    let result = BudgetApplyResult {
        messages: messages.into_iter().map(Message).collect(),
        records,
        persisted,
        failures,
        over_limit,
        cleared,
        clearing: Some(clearing_report),
    };
    Ok(Applied { result, changed })
}

/// Bind decisions that came without their original (an inherited
/// replacement, a record written before digests) to the originals this
/// request met for them, and journal each binding with its digest: the
/// decision is put back now, and from now on only on that original
/// (PROTOCOL.md 11.1), after a restart too.
fn bind_inherited(
    state: &mut crate::state::ReplacementState,
    bind: Vec<(Id, Digest)>,
    records: &mut Vec<ReplacementRecord>,
    seen: &mut SeenLine,
) {
    use crate::state::Fate;
    for (id, digest) in &bind {
        match state.fate(id, *digest) {
            Fate::Replaced(r) => records.push(ReplacementRecord {
                kind: RECORD_KIND.to_owned(),
                tool_use_id: id.to_string(),
                replacement: r.text(),
                digest: digest.hex(),
                cleared: false,
            }),
            Fate::Frozen => {
                seen.tool_use_ids.push(id.to_string());
                seen.digests.push(digest.hex().unwrap_or_default());
            }
            Fate::Fresh => {}
        }
    }
    state.commit_decisions(bind.into_iter().map(|(id, digest)| (id, digest, None)));
}

/// Make `records` say what the state holds: a decision another replica
/// won first keeps the winner's replacement (or, when the winner sent the
/// result whole, no record and no persisted entry).
fn winners(
    state: &crate::state::ReplacementState,
    records: &mut Vec<ReplacementRecord>,
    persisted: &mut Vec<Persisted>,
) {
    use crate::state::Fate;
    let mut whole = HashSet::new();
    records.retain_mut(|record| {
        let digest = record
            .digest
            .as_deref()
            .and_then(Digest::parse)
            .unwrap_or(Digest::ANY);
        match state.fate(&record.tool_use_id, digest) {
            Fate::Replaced(winner) => {
                record.replacement = winner.text();
                true
            }
            Fate::Frozen | Fate::Fresh => {
                whole.insert(record.tool_use_id.clone());
                false
            }
        }
    });
    persisted.retain(|p| !whole.contains(&p.tool_use_id));
}

/// Artifact writes one request runs at once. Durable writes overlap well
/// (the disk groups concurrent syncs), but every blocking task is a
/// thread: one request persisting 100,000 results must neither take the
/// whole blocking pool (512 threads) nor stall other sessions' I/O queued
/// behind it.
const WRITERS_PER_REQUEST: usize = 4;

/// Artifact writers of the whole process: requests of many sessions
/// together stay within this many threads, served in arrival order.
static WRITERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);

/// One artifact to write: where, and its bytes (or why there are none).
struct Job {
    path: std::path::PathBuf,
    bytes: std::result::Result<Payload, String>,
}

/// The bytes of one artifact.
enum Payload {
    /// A result's text, moved out of its message for the write (at
    /// `from`: the message's index and the path to the string in it) and
    /// moved back afterwards: a result of tens of megabytes is not copied
    /// to be saved.
    Moved {
        text: String,
        from: (usize, Vec<Step>),
    },
    /// Bytes made for the artifact (JSON content, or text that could not
    /// be moved).
    Made(Vec<u8>),
}

impl Payload {
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Moved { text, .. } => text.as_bytes(),
            Payload::Made(bytes) => bytes,
        }
    }
}

/// Persist every chosen result, a few at a time; `Ok(reused)` or the
/// failure, in the order of `chosen`; or an error for the whole request
/// when the object store could not be reached (then nothing is decided:
/// see [`crate::artifact::objects`]). The chosen results are in
/// `messages`, `chosen[i].message` naming `messages[at[chosen[i].message]]`;
/// every message is as it was when this returns.
async fn persist_all(
    dialect: &dyn Dialect,
    store: &Arc<dyn crate::artifact::ArtifactStore>,
    messages: &mut [Value],
    at: &[usize],
    chosen: &[Chosen],
    fsync: bool,
) -> Result<Vec<std::result::Result<bool, String>>> {
    let mut jobs = Vec::with_capacity(chosen.len());
    for c in chosen {
        let Some(&m) = at.get(c.message) else {
            jobs.push(Job {
                path: c.path.clone(),
                bytes: Err("the result to save was not found".to_owned()),
            });
            continue;
        };
        let content = dialect.result_value(&messages[m], c.block);
        let bytes = match (content, c.kind) {
            (Some(text @ Value::String(_)), ArtifactKind::Text) => {
                let moved = path_to(&messages[m], text).and_then(|path| {
                    let text = value_at(&mut messages[m], &path)?.take();
                    match text {
                        Value::String(text) => Some(Payload::Moved {
                            text,
                            from: (m, path),
                        }),
                        _ => None,
                    }
                });
                match moved {
                    Some(moved) => Ok(moved),
                    None => match dialect.result_value(&messages[m], c.block) {
                        Some(Value::String(s)) => Ok(Payload::Made(s.as_bytes().to_vec())),
                        _ => Err("the result to save was not found".to_owned()),
                    },
                }
            }
            // Saved without cache markers: one saved output
            // whichever turn's markers the original came with.
            (content, _) => serde_json::to_vec(&format::without_cache_markers(
                content.unwrap_or(&Value::Null),
            ))
            .map(Payload::Made)
            .map_err(|e| e.to_string()),
        };
        jobs.push(Job {
            path: c.path.clone(),
            bytes,
        });
    }
    let jobs = Arc::new(jobs);
    let outcomes = write_jobs(store, &jobs, fsync).await;
    // Every writer has ended (their tasks were awaited, each dropping its
    // handle on the jobs), so the moved texts come back without a copy.
    let jobs = Arc::try_unwrap(jobs).unwrap_or_else(|shared| {
        shared
            .iter()
            .map(|job| Job {
                path: job.path.clone(),
                bytes: match &job.bytes {
                    Ok(Payload::Moved { text, from }) => Ok(Payload::Moved {
                        text: text.clone(),
                        from: from.clone(),
                    }),
                    _ => Err(String::new()),
                },
            })
            .collect()
    });
    for job in jobs {
        if let Ok(Payload::Moved {
            text,
            from: (m, path),
        }) = job.bytes
            && let Some(slot) = messages.get_mut(m).and_then(|msg| value_at(msg, &path))
        {
            *slot = Value::String(text);
        }
    }
    outcomes
}

/// One step from a JSON value to a value inside it.
#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// The path from `root` to `target`, a value inside it (found by its
/// address: a dialect says where a result is by shared reference only).
fn path_to(root: &Value, target: &Value) -> Option<Vec<Step>> {
    if std::ptr::eq(root, target) {
        return Some(Vec::new());
    }
    let (step, rest) = match root {
        Value::Object(map) => map.iter().find_map(|(key, value)| {
            path_to(value, target).map(|rest| (Step::Key(key.clone()), rest))
        })?,
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, value)| path_to(value, target).map(|rest| (Step::Index(i), rest)))?,
        _ => return None,
    };
    let mut path = vec![step];
    path.extend(rest);
    Some(path)
}

/// The value at `path` in `root`, to change.
fn value_at<'a>(root: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(root, |value, step| match step {
        Step::Key(key) => value.get_mut(key.as_str()),
        Step::Index(i) => value.get_mut(*i),
    })
}

/// Write `jobs` on the blocking pool, a few at a time; their outcomes in
/// order (see [`persist_all`]).
async fn write_jobs(
    store: &Arc<dyn crate::artifact::ArtifactStore>,
    jobs: &Arc<Vec<Job>>,
    fsync: bool,
) -> Result<Vec<std::result::Result<bool, String>>> {
    let next = Arc::new(AtomicUsize::new(0));
    // The first "store unreachable": it stops every writer and fails the
    // request.
    let down: Arc<std::sync::Mutex<Option<crate::error::Error>>> = Arc::default();
    let workers = (0..jobs.len().min(WRITERS_PER_REQUEST)).map(|_| {
        let (jobs, next, store) = (jobs.clone(), next.clone(), store.clone());
        let down = down.clone();
        async move {
            // The semaphore is never closed: a permit always comes.
            let _permit = WRITERS.acquire().await.ok();
            tokio::task::spawn_blocking(move || {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else {
                        return done;
                    };
                    let down = |err: &std::io::Error| {
                        let mut down = down.lock().unwrap_or_else(|p| p.into_inner());
                        down.get_or_insert_with(|| crate::error::Error::storage(&job.path, err));
                    };
                    let outcome = match &job.bytes {
                        Ok(bytes) => match store.write_once(&job.path, bytes.bytes(), fsync) {
                            Ok(written) => Ok(written.reused),
                            Err(err) if crate::artifact::objects::is_unavailable(&err) => {
                                down(&err);
                                return done;
                            }
                            Err(err) => Err(err.to_string()),
                        },
                        Err(e) => Err(e.clone()),
                    };
                    done.push((i, outcome));
                }
            })
            .await
        }
    });
    // A writer that died takes the outcomes of its jobs with it: those
    // stay failures, and their results are sent whole.
    let mut outcomes: Vec<std::result::Result<bool, String>> = (0..jobs.len())
        .map(|_| Err("persist task failed".to_owned()))
        .collect();
    for joined in join_all(workers).await {
        match joined {
            Ok(done) => {
                for (i, outcome) in done {
                    outcomes[i] = outcome;
                }
            }
            Err(e) => tracing::warn!(%e, "an artifact writer failed"),
        }
    }
    let down = down.lock().unwrap_or_else(|p| p.into_inner()).take();
    match down {
        Some(err) => Err(err),
        None => Ok(outcomes),
    }
}

/// What keeps gc off a session's saved outputs from the first one written
/// (or reused) until the decisions are journaled: the lock of its directory
/// under the data directory, or its hold in the shared store's database
/// for outputs in a bucket. Dropped on any early return.
enum Hold {
    Dir {
        _held: Option<retention::SessionHold>,
    },
    Outputs(Option<Box<crate::store::postgres::OutputsHold>>),
}

impl Hold {
    async fn take(
        session: &Session,
        on_disk: bool,
        artifact_dir: &std::path::Path,
    ) -> Result<Hold> {
        Ok(if on_disk {
            // A directory that cannot be held cannot be written either:
            // the persists fail and are reported, as for any disk refusal.
            Hold::Dir {
                _held: hold_session(artifact_dir).await,
            }
        } else {
            // In a bucket, on the shared store: held in the database,
            // which every replica's gc consults.
            match &session.storage().shared {
                Some(shared) => Hold::Outputs(
                    shared
                        .hold_outputs(session.key().id.as_str())
                        .await?
                        .map(Box::new),
                ),
                None => Hold::Dir { _held: None },
            }
        })
    }
}

/// Report a result saved and replaced: its saved output, and the record
/// to journal.
fn saved(
    chosen: &Chosen,
    reused: bool,
    cleared: bool,
    persisted: &mut Vec<Persisted>,
    records: &mut Vec<ReplacementRecord>,
) {
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
        cleared,
    });
}

/// The saved output and preview of a result being cleared.
fn cleared_choice(
    state: &crate::state::ReplacementState,
    dialect: &dyn Dialect,
    pcx: &PlanContext,
    clearing: &clearing::Clearing,
    message: &Value,
    index: usize,
    c: &clearing::ToClear,
) -> Chosen {
    let content = dialect.result_content(message, c.block);
    let kind = if content.is_text() {
        ArtifactKind::Text
    } else {
        ArtifactKind::Json
    };
    let saved_as = clearing::saved_as(state, &c.tool_use_id, c.digest);
    let path = pcx
        .artifact_dir
        .join(budget::names::file_name(&saved_as, kind));
    // A cleared result names its output as a fresh preview would, link
    // and all: its text is decided now, once.
    let link = pcx
        .link_session
        .map(|session| budget::preview::link(session, &saved_as));
    let replacement = clearing::preview(
        &content.preview_text(),
        c.size,
        &budget::preview::Saved {
            path: &path.to_string_lossy(),
            link: link.as_deref(),
        },
        clearing.preview_chars,
        pcx.unit,
    );
    Chosen {
        message: index,
        block: c.block,
        tool_use_id: c.tool_use_id.clone(),
        digest: c.digest,
        kind,
        path,
        original_size: c.size,
        replacement: Arc::from(replacement),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Values are counted as far as needed: arrays, objects and each of
    /// their members count one.
    #[test]
    fn values_are_counted_up_to_the_least_asked() {
        let messages = |value: Value| vec![Message(value)];
        // The object, its 2 members (one of them the array) and the
        // array's 3 items: 6 values.
        let six = messages(json!({"role": "user", "content": [1, "two", {}]}));
        assert!(holds_at_least(&six, 6));
        assert!(!holds_at_least(&six, 7));
        assert!(!holds_at_least(&[], 1));
        let wide = messages(json!([(0..100_000).collect::<Vec<_>>()]));
        assert!(holds_at_least(&wide, 100_002));
        assert!(!holds_at_least(&wide, 100_003));
    }

    /// Taking the messages out of the parsed request decodes exactly what
    /// the generic decoding does, and refuses exactly what it refuses.
    #[test]
    fn messages_taken_as_they_are_decode_like_the_generic_params() {
        let same = [
            json!({"sessionId": "s", "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a\u{1}\"é😀\\n"}]},
                5, "text", null, [1, 2.50, 1e3]
            ], "format": "anthropic"}),
            json!({"sessionId": "s", "messages": []}),
        ];
        for value in same {
            let ours = <BudgetApply as SessionMethod>::params(value.clone()).ok();
            let generic: Option<BudgetApplyParams> = super::super::params(value).ok();
            let ours = ours.map(|p| serde_json::to_string(&p).unwrap_or_default());
            let generic = generic.map(|p| serde_json::to_string(&p).unwrap_or_default());
            assert!(ours.is_some());
            assert_eq!(ours, generic);
        }
        let refused = [
            json!({"sessionId": "s", "messages": 5}),
            json!({"sessionId": "s"}),
            json!({"sessionId": "s", "messages": [], "extra": 1}),
            json!({"sessionId": "../x", "messages": [{"role": "user"}]}),
            json!({"messages": [{"role": "user"}]}),
            json!([1]),
            Value::Null,
        ];
        for value in refused {
            let ours = <BudgetApply as SessionMethod>::params(value.clone()).err();
            let generic = super::super::params::<BudgetApplyParams>(value).err();
            assert!(ours.is_some());
            assert_eq!(ours.map(|e| e.to_string()), generic.map(|e| e.to_string()));
        }
    }
}
