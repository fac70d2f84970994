//! Budgeting a conversation: what each tool_result becomes in the message
//! that is about to be sent.
//!
//! [`plan_message`] is pure: it reads one message, the replacement state and
//! the limits, and says which results to reapply, which to persist (with the
//! exact replacement each will get) and which to freeze. The session applies
//! the plan: it persists, commits the decisions, then renders the message.

pub mod planner;
pub mod preview;
pub mod size;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::artifact::{self, ArtifactKind};
use crate::config::{Limits, SizeUnit, ToolPolicy};
use crate::message::{self, ResultContent};
use crate::state::{Fate, ReplacementState};
use planner::Candidate;

/// What budgeting needs to know besides the message and the state.
pub struct PlanContext<'a> {
    pub limits: Limits,
    pub unit: SizeUnit,
    /// Directory the session's artifacts go to (absolute).
    pub artifact_dir: &'a Path,
    /// Whether the tool that produced `tool_use_id` is exempt.
    pub is_exempt: &'a (dyn Fn(&str) -> bool + Sync),
    /// The size limit and preview mode for the result of `tool_use_id`
    /// (its tool's own settings, else the general ones).
    pub policy: &'a (dyn Fn(&str) -> ToolPolicy + Sync),
}

/// A fresh result chosen for persistence.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub block: usize,
    pub tool_use_id: Arc<str>,
    pub kind: ArtifactKind,
    pub path: std::path::PathBuf,
    pub original_size: u64,
    pub replacement: Arc<str>,
}

/// What to do with one user message.
#[derive(Debug, Default)]
pub struct MessagePlan {
    /// Fresh eligible ids, in order: all become seen at the commit.
    pub fresh: Vec<Arc<str>>,
    pub chosen: Vec<Chosen>,
}

/// Plan one message against `state`. An id appearing twice in the message
/// is decided once, at its first occurrence.
pub fn plan_message(message: &Value, state: &ReplacementState, cx: &PlanContext) -> MessagePlan {
    let blocks = message::blocks(message);
    let mut rows = Vec::new();
    let mut candidates = Vec::new();
    let mut fresh_here: HashSet<&str> = HashSet::new();
    for (block, id) in message::tool_results(message) {
        let content = ResultContent::of(&blocks[block]);
        let size = content.size(cx.unit);
        let eligible = is_eligible(&content, id, cx);
        let candidate = match state.fate(id) {
            _ if !eligible => Candidate { size, fresh: false },
            Fate::Replaced(r) => Candidate {
                size: r.size(cx.unit),
                fresh: false,
            },
            Fate::Frozen => Candidate { size, fresh: false },
            Fate::Fresh => Candidate {
                size,
                fresh: fresh_here.insert(id),
            },
        };
        rows.push((block, id, content));
        candidates.push(candidate);
    }

    let mut plan = MessagePlan {
        fresh: rows
            .iter()
            .zip(&candidates)
            .filter(|(_, c)| c.fresh)
            .map(|((_, id, _), _)| Arc::from(*id))
            .collect(),
        chosen: Vec::new(),
    };
    let mut built: Vec<Option<Chosen>> = vec![None; rows.len()];
    let policies: Vec<ToolPolicy> = rows.iter().map(|(_, id, _)| (cx.policy)(id)).collect();
    let chosen = planner::choose(
        &candidates,
        |i| policies[i].max_result_chars.unwrap_or(u64::MAX),
        cx.limits.max_message_chars,
        |i| {
            let (block, id, content) = &rows[i];
            let kind = match content {
                ResultContent::Text(_) => ArtifactKind::Text,
                _ => ArtifactKind::Json,
            };
            let path = cx.artifact_dir.join(artifact::file_name(id, kind));
            let text = preview::replacement(
                &content.preview_text(),
                candidates[i].size,
                &path.to_string_lossy(),
                cx.limits.preview_chars,
                cx.unit,
                policies[i].preview_mode,
            );
            let size = cx.unit.len(&text);
            built[i] = Some(Chosen {
                block: *block,
                tool_use_id: Arc::from(*id),
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

/// Step 1 of the contract: results with non-text content, of exempt tools,
/// or already holding a persisted-output preview are left as they are.
fn is_eligible(content: &ResultContent, id: &str, cx: &PlanContext) -> bool {
    !content.has_non_text()
        && !(cx.is_exempt)(id)
        && !content.first_text().starts_with(preview::OPEN_TAG)
}

/// Put every stored replacement into the message, in place of the eligible
/// results it decided. Returns how many blocks were replaced.
pub fn render_message(message: &mut Value, state: &ReplacementState, cx: &PlanContext) -> usize {
    let mut replaced = 0;
    let Some(Value::Array(blocks)) = message.get_mut("content") else {
        return 0;
    };
    for block in blocks.iter_mut() {
        if message::block_type(block) != Some("tool_result") {
            continue;
        }
        let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
            continue;
        };
        let Fate::Replaced(replacement) = state.fate(id) else {
            continue;
        };
        let content = ResultContent::of(block);
        if !is_eligible(&content, id, cx) {
            continue;
        }
        if let Some(obj) = block.as_object_mut() {
            obj.insert("content".into(), Value::String(replacement.text()));
            replaced += 1;
        }
    }
    replaced
}

/// The tool_result total of a message, in `unit`.
pub fn message_total(message: &Value, unit: SizeUnit) -> u64 {
    let blocks = message::blocks(message);
    message::tool_results(message)
        .map(|(i, _)| ResultContent::of(&blocks[i]).size(unit))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PreviewMode;
    use crate::state::Replacement;
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::HashMap;

    /// One simulated apply: plan, pretend every persist succeeds, commit,
    /// render. Returns the rendered message.
    fn apply(msg: &Value, state: &mut ReplacementState, cx: &PlanContext) -> Value {
        let plan = plan_message(msg, state, cx);
        let replaced: HashMap<Arc<str>, Arc<Replacement>> = plan
            .chosen
            .iter()
            .map(|c| {
                (
                    c.tool_use_id.clone(),
                    Arc::new(Replacement::new(&c.replacement)),
                )
            })
            .collect();
        state.commit_decisions(plan.fresh.into_iter().map(|id| {
            let r = replaced.get(&id).cloned();
            (id, r)
        }));
        let mut out = msg.clone();
        render_message(&mut out, state, cx);
        out
    }

    proptest! {
        /// Turn after turn, with ids recurring in later messages: once an id
        /// has been sent, it is sent the same way forever, and a message
        /// ends within budget unless only decided content remains.
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
                    limits: Limits { max_result_chars: max_result, max_message_chars: max_message, preview_chars: 60 },
                    unit: SizeUnit::Chars,
                    artifact_dir: &dir,
                    is_exempt: &never,
                    policy: &policy,
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
