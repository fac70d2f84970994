//! Budgeting a conversation: what each tool_result becomes in the message
//! that is about to be sent.
//!
//! [`plan_message`] is pure: it reads one message, the replacement state and
//! the limits, and says which results to reapply, which to persist (with the
//! exact replacement each will get) and which to freeze. The session applies
//! the plan: it persists, commits the decisions, then renders the message.

pub mod clearing;
pub mod names;
pub mod planner;
pub mod preview;
pub mod pricing;
pub mod settings;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::format::SizeUnit;
use crate::format::{self, Dialect, Digest, DigestKind, ResultContent};
use crate::state::{Fate, Id, ReplacementState};
use names::ArtifactKind;
use planner::Candidate;
pub use settings::{
    Limits, LimitsOverride, PreviewMode, ToolPolicy, ToolSettings, Tools, merge_tools,
};

/// What budgeting needs to know besides the messages and the state.
pub struct PlanContext<'a> {
    pub dialect: &'a dyn Dialect,
    pub limits: Limits,
    pub unit: SizeUnit,
    /// Directory the session's artifacts go to (absolute).
    pub artifact_dir: &'a Path,
    /// Whether the tool that produced `tool_use_id` is exempt.
    pub is_exempt: &'a (dyn Fn(&str) -> bool + Sync),
    /// The size limit and preview mode for the result of `tool_use_id`
    /// (its tool's own settings, else the general ones).
    pub policy: &'a (dyn Fn(&str) -> ToolPolicy + Sync),
    /// The session id fresh previews' `toolwire://` links name, when they
    /// name one (`budget/apply`'s `linkSession`).
    pub link_session: Option<&'a str>,
}

/// A fresh result chosen for persistence.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// Index of its message in the unit planned.
    pub message: usize,
    /// Its item index in that message.
    pub block: usize,
    pub tool_use_id: Id,
    pub digest: Digest,
    pub kind: ArtifactKind,
    pub path: std::path::PathBuf,
    pub original_size: u64,
    pub replacement: Arc<str>,
}

/// What to do with one budget unit (one user turn).
#[derive(Debug, Default)]
pub struct MessagePlan {
    /// Fresh eligible originals, in order: all become decided at the commit.
    pub fresh: Vec<(Id, Digest)>,
    pub chosen: Vec<Chosen>,
    /// `(message, block, digest)` of every eligible result of the unit, so
    /// rendering does not digest the originals a second time.
    pub digests: Vec<(usize, usize, Digest)>,
    /// Originals met for ids whose decision came without one (inherited,
    /// or journaled before digests): the decision is put back on them and
    /// is to be bound to them (PROTOCOL.md 11.1), one per id.
    pub bind: Vec<(Id, Digest)>,
}

/// The budget units of a conversation, as the indexes of their messages
/// (PROTOCOL.md 10.3: "the budget's message"): each user message that
/// holds results, or, for dialects that budget runs, each run of them.
pub fn units(dialect: &dyn Dialect, messages: &[Value]) -> Vec<Vec<usize>> {
    if !dialect.budget_runs() {
        return messages
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                dialect.side(m) == Some(format::Side::User)
                    && !format::results(dialect, m).is_empty()
            })
            .map(|(i, _)| vec![i])
            .collect();
    }
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut run: Vec<usize> = Vec::new();
    let mut last_side = None;
    for (i, m) in messages.iter().enumerate() {
        let side = dialect.side(m);
        if side.is_none() {
            continue;
        }
        if side != last_side && !run.is_empty() {
            units.push(std::mem::take(&mut run));
        }
        last_side = side;
        if side == Some(format::Side::User) && !format::results(dialect, m).is_empty() {
            run.push(i);
        }
    }
    if !run.is_empty() {
        units.push(run);
    }
    units
}

/// One result of a unit, as the planner reads it.
struct Row<'m> {
    message: usize,
    block: usize,
    id: Id,
    digest: Digest,
    content: ResultContent<'m>,
}

/// Plan one unit (its messages, in order) against `state`. An original
/// appearing twice is decided once, at its first occurrence.
pub fn plan_message(unit: &[&Value], state: &ReplacementState, cx: &PlanContext) -> MessagePlan {
    let mut rows: Vec<Row> = Vec::new();
    let mut candidates = Vec::new();
    let mut fresh_here: HashSet<(Id, Digest)> = HashSet::new();
    let mut bind: Vec<(Id, Digest)> = Vec::new();
    for (m, msg) in unit.iter().enumerate() {
        for (block, id) in format::results(cx.dialect, msg) {
            let content = cx.dialect.result_content(msg, block);
            let eligible = is_eligible(&content, &id, cx);
            let digest = if eligible {
                original_digest(cx.dialect, msg, block, state.digest_kind(&id))
            } else {
                Digest::ANY
            };
            let id = Id::from(&*id);
            if eligible
                && digest != Digest::ANY
                && state.is_unbound(&id)
                && !bind.iter().any(|(b, _)| *b == id)
            {
                bind.push((crate::state::keep_id(&id), digest));
            }
            // A reapplied result is sent as its replacement: the original's
            // size (a count over all its text) is only taken for the others.
            let candidate = match state.fate(&id, digest) {
                Fate::Replaced(r) if eligible => Candidate {
                    size: r.size(cx.unit),
                    fresh: false,
                },
                Fate::Fresh if eligible => Candidate {
                    size: content.size(cx.unit),
                    fresh: fresh_here.insert((id.clone(), digest)),
                },
                _ => Candidate {
                    size: content.size(cx.unit),
                    fresh: false,
                },
            };
            rows.push(Row {
                message: m,
                block,
                id,
                digest,
                content,
            });
            candidates.push(candidate);
        }
    }

    let mut plan = MessagePlan {
        fresh: rows
            .iter()
            .zip(&candidates)
            .filter(|(_, c)| c.fresh)
            // The ids the state will keep: allocated with what it keeps.
            .map(|(r, _)| (crate::state::keep_id(&r.id), r.digest))
            .collect(),
        chosen: Vec::new(),
        digests: rows
            .iter()
            .filter(|r| r.digest != Digest::ANY)
            .map(|r| (r.message, r.block, r.digest))
            .collect(),
        bind,
    };
    // Whether an earlier row of the unit carries the same id with another
    // original, for every row in one pass: (first digest, more than one).
    let mut originals: HashMap<&str, (Digest, bool)> = HashMap::new();
    let other_original_before: Vec<bool> = rows
        .iter()
        .map(|r| match originals.get_mut(&*r.id) {
            None => {
                originals.insert(&r.id, (r.digest, false));
                false
            }
            Some((first, many)) => {
                let before = *many || *first != r.digest;
                *many |= *first != r.digest;
                before
            }
        })
        .collect();
    let mut built: Vec<Option<Chosen>> = vec![None; rows.len()];
    let policies: Vec<ToolPolicy> = rows.iter().map(|r| (cx.policy)(&r.id)).collect();
    let chosen = planner::choose(
        &candidates,
        |i| policies[i].max_result_chars.unwrap_or(u64::MAX),
        cx.limits.max_message_chars,
        |i| {
            let row = &rows[i];
            let kind = if row.content.is_text() {
                ArtifactKind::Text
            } else {
                ArtifactKind::Json
            };
            // A second original under one id (a provider reusing call ids)
            // gets an artifact of its own.
            let reused = state.is_decided(&row.id) || other_original_before[i];
            let saved_as = if reused {
                format!("{}#{}", row.id, row.digest.hex().unwrap_or_default())
            } else {
                row.id.to_string()
            };
            let path = cx.artifact_dir.join(names::file_name(&saved_as, kind));
            // The link names what the file is named from, so a reused id's
            // other original is read, and kept by gc, as its own.
            let link = cx
                .link_session
                .map(|session| preview::link(session, &saved_as));
            let text = preview::replacement(
                &row.content.preview_text(),
                candidates[i].size,
                &preview::Saved {
                    path: &path.to_string_lossy(),
                    link: link.as_deref(),
                },
                cx.limits.preview_chars,
                cx.unit,
                policies[i].preview_mode,
            );
            let size = cx.unit.len(&text);
            built[i] = Some(Chosen {
                message: row.message,
                block: row.block,
                tool_use_id: row.id.clone(),
                digest: row.digest,
                kind,
                path,
                original_size: candidates[i].size,
                replacement: Arc::from(text),
            });
            size
        },
    );
    plan.chosen = chosen
        .into_iter()
        .filter_map(|(i, _)| built[i].take())
        .collect();
    plan
}

/// Plan one unit and commit its decisions as if every persist succeeded:
/// what `budget/apply` decides, without writing the saved outputs (for
/// simulations such as `replay --price`).
pub fn decide(unit: &[&Value], state: &mut ReplacementState, cx: &PlanContext) {
    let plan = plan_message(unit, state, cx);
    let replaced: HashMap<(Id, Digest), crate::state::Replacement> = plan
        .chosen
        .iter()
        .map(|c| {
            (
                (c.tool_use_id.clone(), c.digest),
                crate::state::Replacement::new(&c.replacement),
            )
        })
        .collect();
    state.commit_decisions(plan.fresh.into_iter().map(|(id, digest)| {
        let r = replaced.get(&(id.clone(), digest)).cloned();
        (id, digest, r)
    }));
}

/// The digest of a result's original content, in `kind` (the one its id's
/// decisions use, [`ReplacementState::digest_kind`]).
pub fn original_digest(
    dialect: &dyn Dialect,
    message: &Value,
    index: usize,
    kind: DigestKind,
) -> Digest {
    Digest::of_value_as(
        kind,
        dialect.result_value(message, index).unwrap_or(&Value::Null),
    )
}

/// Step 1 of the contract: results with non-text content, of exempt tools,
/// or already holding a persisted-output preview are left as they are.
fn is_eligible(content: &ResultContent, id: &str, cx: &PlanContext) -> bool {
    !content.has_non_text()
        && !(cx.is_exempt)(id)
        && !content.first_text().starts_with(format::OPEN_TAG)
}

/// Put every stored replacement into the message, in place of the eligible
/// results whose original it was decided on. Returns how many results were
/// replaced.
pub fn render_message(message: &mut Value, state: &ReplacementState, cx: &PlanContext) -> usize {
    render_message_known(message, state, cx, &[])
}

/// [`render_message`] given the digests already known of some results
/// (`(block, digest)`, as [`MessagePlan::digests`] has them).
pub fn render_message_known(
    message: &mut Value,
    state: &ReplacementState,
    cx: &PlanContext,
    known: &[(usize, Digest)],
) -> usize {
    let mut put: Vec<(usize, String)> = Vec::new();
    let mut known = known.iter().peekable();
    for (index, id) in format::results(cx.dialect, message) {
        let content = cx.dialect.result_content(message, index);
        if !is_eligible(&content, &id, cx) {
            continue;
        }
        // `known` is in block order, as the results are.
        while known.next_if(|(block, _)| *block < index).is_some() {}
        let digest = match known.next_if(|(block, _)| *block == index) {
            Some((_, digest)) => *digest,
            None => original_digest(cx.dialect, message, index, state.digest_kind(&id)),
        };
        if let Fate::Replaced(replacement) = state.fate(&id, digest) {
            put.push((index, replacement.text()));
        }
    }
    for (index, text) in &put {
        cx.dialect.put_replacement(message, *index, text);
    }
    put.len()
}

/// The result total of a unit, in `unit`.
pub fn message_total(dialect: &dyn Dialect, messages: &[&Value], unit: SizeUnit) -> u64 {
    messages
        .iter()
        .flat_map(|m| {
            format::results(dialect, m)
                .into_iter()
                .map(move |(i, _)| dialect.result_content(m, i).size(unit))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::PreviewMode;
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::HashMap;

    /// One simulated apply: plan, pretend every persist succeeds, commit,
    /// render. Returns the rendered message.
    fn apply(msg: &Value, state: &mut ReplacementState, cx: &PlanContext) -> Value {
        decide(&[msg], state, cx);
        let mut out = msg.clone();
        render_message(&mut out, state, cx);
        out
    }

    /// Results whose fate is fixed (sent whole before, or of an exempt
    /// tool) still count toward the turn's budget: the fresh result beside
    /// them is persisted because of them.
    #[test]
    fn frozen_and_exempt_results_count_toward_the_turn() {
        let dir = std::path::PathBuf::from("/data/sessions/s/tool-results");
        let exempt = |id: &str| id == "ex";
        let policy = |_: &str| ToolPolicy {
            max_result_chars: None,
            preview_mode: PreviewMode::Head,
        };
        let cx = PlanContext {
            dialect: &crate::format::anthropic::Anthropic,
            limits: Limits {
                max_result_chars: 100_000,
                max_message_chars: 2500,
                preview_chars: 60,
            },
            unit: SizeUnit::Chars,
            artifact_dir: &dir,
            is_exempt: &exempt,
            policy: &policy,
            link_session: None,
        };
        let result = |id: &str, len: usize| json!({"type": "tool_result", "tool_use_id": id, "content": "x".repeat(len)});
        let turn = |blocks: Vec<Value>| json!({"role": "user", "content": blocks});
        let chosen = |msg: &Value, state: &ReplacementState| -> Vec<String> {
            plan_message(&[msg], state, &cx)
                .chosen
                .iter()
                .map(|c| c.tool_use_id.to_string())
                .collect()
        };
        let mut state = ReplacementState::default();
        // Within budget alone: sent whole, and so frozen.
        let first = turn(vec![result("frozen", 1000)]);
        assert!(chosen(&first, &state).is_empty());
        apply(&first, &mut state, &cx);
        // 1000 frozen + 2000 fresh is over 2500: the fresh one goes.
        let second = turn(vec![result("frozen", 1000), result("fresh", 2000)]);
        assert_eq!(chosen(&second, &state), ["fresh"]);
        // The same with an exempt result in place of the frozen one.
        let third = turn(vec![result("ex", 1000), result("other", 2000)]);
        assert_eq!(chosen(&third, &state), ["other"]);
        // Either alone fits.
        let alone = turn(vec![result("other", 2000)]);
        assert!(chosen(&alone, &state).is_empty());
    }

    proptest! {
        /// Turn after turn, with ids recurring in later messages: once an id
        /// has been sent, it is sent the same way forever, and applying a
        /// message again changes nothing. (What counts toward a turn's
        /// budget: `frozen_and_exempt_results_count_toward_the_turn`.)
        #[test]
        fn a_seen_result_is_sent_identically_forever(
            turns in prop::collection::vec(prop::collection::vec(0usize..12, 1..6), 1..8),
            sizes in prop::collection::vec(0usize..3000, 12),
            max_result in 100u64..2500,
            max_message in 500u64..6000,
            head_tail in prop::collection::vec(any::<bool>(), 8),
            odd_limit in 0u64..4000,
        ) {
            let dir = std::path::PathBuf::from("/data/sessions/s/tool-results");
            let never = |_: &str| false;
            let mut state = ReplacementState::default();
            let mut sent: HashMap<String, Value> = HashMap::new();
            for (turn_no, turn) in turns.into_iter().enumerate() {
                // The preview mode changes between turns, and odd ids have
                // a limit of their own (as a tool's own `maxResultChars`).
                let mode = if head_tail[turn_no] { PreviewMode::HeadTail } else { PreviewMode::Head };
                let policy = |id: &str| ToolPolicy {
                    max_result_chars: Some(if id.ends_with(['1', '3', '5', '7', '9']) { odd_limit } else { max_result }),
                    preview_mode: mode,
                };
                let cx = PlanContext {
                    dialect: &crate::format::anthropic::Anthropic,
                    limits: Limits { max_result_chars: max_result, max_message_chars: max_message, preview_chars: 60 },
                    unit: SizeUnit::Chars,
                    artifact_dir: &dir,
                    is_exempt: &never,
                    policy: &policy,
                    link_session: None,
                };
                // A tool_use_id always carries the same original.
                let blocks: Vec<Value> = turn.iter().map(|id| json!({
                    "type": "tool_result", "tool_use_id": format!("t{id}"), "content": "x".repeat(sizes[*id]),
                })).collect();
                let msg = json!({"role": "user", "content": blocks});
                let before: std::collections::HashSet<String> = state.iter().map(|(k, _)| k.to_string()).collect();
                let out = apply(&msg, &mut state, &cx);
                for (i, block) in out["content"].as_array().unwrap().iter().enumerate() {
                    let id = format!("t{}", turn[i]);
                    if before.contains(&id)
                        && let Some(prev) = sent.get(&id)
                    {
                        prop_assert_eq!(prev, &block["content"]);
                    }
                    sent.entry(id).or_insert_with(|| block["content"].clone());
                }
                // Applying the same message again changes nothing.
                let again = apply(&msg, &mut state, &cx);
                prop_assert_eq!(&again, &out);
            }
        }
    }
}
