//! The pair guard: an assistant message's tool calls reach the transcript
//! only together with all their results.
//!
//! Providers reject a conversation for good (HTTP 400) once it holds a
//! `tool_use` without its `tool_result` or the reverse. The guard buffers a
//! tool-using assistant message and the results that answer it, and hands
//! back the whole pair as one commit when nothing is pending. Anything that
//! interrupts the pair (abort, failover, rate limit, a new turn) resolves it
//! first: dropped unwritten (`discard`) or closed with error results
//! (`synthetic`).
//!
//! The guard is pure: [`PairGuard::append`] and [`PairGuard::flush`] only
//! plan. The caller writes the planned lines and applies the transition
//! after the write succeeded, so a failed write changes nothing.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::Value;
use serde_json::value::RawValue;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Lines;
use crate::error::{Error, Result};
use crate::format::{self, Dialect, ItemKind, Side, View};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AppendStatus {
    /// Held back until every pending tool call has its result.
    Buffered,
    /// Written to the transcript.
    Committed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlushResult {
    pub mode: AbortMode,
    /// Ids of calls dropped unwritten.
    pub discarded: Vec<String>,
    /// Ids closed with a synthetic error result.
    pub synthesized: Vec<String>,
    pub written: usize,
}

/// What an interrupted tool pair becomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AbortMode {
    /// The buffered pair is dropped unwritten.
    #[default]
    Discard,
    /// The pair is committed with an `is_error` result for each unanswered call.
    Synthetic,
}

/// Identifies the client connection that buffered a pair.
pub type Owner = u64;

/// A message the guard holds: parsed, or (an Anthropic message that
/// `pair/append` read straight from its request, already checked) the
/// text it came in, which is byte for byte what serde_json writes of its
/// value ([`format::is_compact_json`]). The text is written as it is, and
/// what the guard reads of it is kept beside it: a small message costs no
/// tree of values to build and to free.
#[derive(Debug, Clone)]
pub enum Msg {
    Value(Value),
    Text {
        text: Box<RawValue>,
        /// What the guard reads of it, read once.
        view: View<'static>,
    },
}

impl Msg {
    /// `text` as a message, when [`format::anthropic::text_view`] reads it;
    /// else the text back. `text` must be compact JSON.
    pub fn anthropic_text(text: Box<RawValue>) -> std::result::Result<Msg, Box<RawValue>> {
        match format::anthropic::text_view(text.get()).map(View::into_owned) {
            Some(view) => Ok(Msg::Text { text, view }),
            None => Err(text),
        }
    }

    pub fn side(&self, dialect: &dyn Dialect) -> Option<Side> {
        match self {
            Msg::Value(value) => dialect.side(value),
            Msg::Text { view, .. } => view.side,
        }
    }

    /// What the guard reads of the message.
    pub fn view(&self, dialect: &dyn Dialect) -> Cow<'_, View<'_>> {
        match self {
            Msg::Value(value) => Cow::Owned(View::of(dialect, value)),
            Msg::Text { view, .. } => Cow::Borrowed(view),
        }
    }

    /// The message as a value (parsed again from its text).
    pub fn value(&self) -> Option<Cow<'_, Value>> {
        match self {
            Msg::Value(value) => Some(Cow::Borrowed(value)),
            Msg::Text { text, .. } => crate::json::from_slice(text.get().as_bytes())
                .ok()
                .map(Cow::Owned),
        }
    }
}

impl Serialize for Msg {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Msg::Value(value) => value.serialize(s),
            Msg::Text { text, .. } => text.serialize(s),
        }
    }
}

/// Read back (a shared store's pending pair) as a value.
impl<'de> Deserialize<'de> for Msg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Value::deserialize(d).map(Msg::Value)
    }
}

/// A pending pair; serialized as JSON where a shared store keeps it
/// (`toolwire_pending_pairs`), so any replica can carry it on.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    pub owner: Owner,
    /// The assistant turn: consecutive assistant messages are one turn, so
    /// a message that follows a tool-using one before any result joins it.
    pub assistant: Vec<Msg>,
    /// User messages that answered some of the calls so far.
    pub answers: Vec<Msg>,
    /// Every call of the turn, `(id, tool name)`, in order.
    pub calls: Vec<(String, String)>,
    /// Call ids still waiting, in order.
    pub outstanding: Vec<String>,
}

#[derive(Debug, Default, Clone)]
pub struct PairGuard {
    pending: Option<Pending>,
}

/// How the guard changes once the planned lines are written.
#[derive(Debug)]
pub enum Transition {
    Keep,
    Clear,
    Buffer(Box<Pending>),
    /// Another assistant message of the pending turn.
    Extend {
        messages: Vec<Msg>,
        calls: Vec<(String, String)>,
    },
    Answer {
        messages: Vec<Msg>,
        answered: Vec<String>,
    },
}

/// What one step writes and how the guard moves on.
#[derive(Debug)]
pub struct Step {
    pub lines: Lines,
    pub transition: Transition,
    pub status: AppendStatus,
    pub flushed: Option<FlushResult>,
}

impl PairGuard {
    /// A guard holding `pending` (a pair read back from a shared store).
    pub fn holding(pending: Option<Pending>) -> Self {
        PairGuard { pending }
    }

    pub fn pending(&self) -> Option<&Pending> {
        self.pending.as_ref()
    }

    pub fn pending_ids(&self) -> Vec<String> {
        self.pending
            .as_ref()
            .map(|p| p.outstanding.clone())
            .unwrap_or_default()
    }

    pub fn apply(&mut self, transition: Transition) {
        match transition {
            Transition::Keep => {}
            Transition::Clear => self.pending = None,
            Transition::Buffer(p) => self.pending = Some(*p),
            Transition::Extend { messages, calls } => {
                if let Some(p) = self.pending.as_mut() {
                    p.outstanding.extend(calls.iter().map(|(id, _)| id.clone()));
                    p.calls.extend(calls);
                    p.assistant.extend(messages);
                }
            }
            Transition::Answer { messages, answered } => {
                if let Some(p) = self.pending.as_mut() {
                    // One outstanding entry per answer, the first of its id:
                    // ids answered by position may occur more than once.
                    let mut left = counts(answered.iter().map(String::as_str));
                    p.outstanding.retain(|o| !take_one(&mut left, o));
                    p.answers.extend(messages);
                }
            }
        }
    }

    /// Plan the append of `group`: one message, or the items of one model
    /// response or one batch of outputs (the Responses API), appended as
    /// one (already validated, roles included).
    pub fn append(
        &self,
        dialect: &dyn Dialect,
        group: Vec<Msg>,
        owner: Owner,
        abort: AbortMode,
        path: &str,
    ) -> Result<Step> {
        let views: Vec<Cow<View>> = group.iter().map(|m| m.view(dialect)).collect();
        let mut side = None;
        for (i, v) in views.iter().enumerate() {
            match (side, v.side) {
                (_, None) => {}
                (None, s) => side = s,
                (Some(a), Some(b)) if a != b => {
                    return Err(Error::invalid_params(
                        format!("{path}[{i}]"),
                        "one append holds the items of one side: a model response, or a batch of results",
                    ));
                }
                _ => {}
            }
        }
        // Items of messages that belong to no turn (a developer message)
        // are neither content nor tool items of the pair.
        // A response with a server-side compaction: the provider drops what
        // stands before it (PROTOCOL.md 11.2), so calls there wait for no
        // result.
        let cut = format::last_compaction(views.iter().map(|v| v.compaction));
        let items: Vec<(usize, &format::Item)> = views
            .iter()
            .enumerate()
            .filter(|(_, v)| v.side.is_some())
            .flat_map(|(m, v)| v.items.iter().map(move |i| (m, i)))
            .filter(|(m, i)| !format::before_cut(cut, *m, i.index))
            .collect();
        let item_path = |m: usize, index: usize| {
            if group.len() == 1 {
                format!("{path}.content[{index}]")
            } else {
                format!("{path}[{m}]")
            }
        };
        let call_items = || {
            items
                .iter()
                .map(|(_, i)| i)
                .filter(|i| i.kind == ItemKind::Call && !i.misplaced)
        };
        let results: Vec<&str> = items
            .iter()
            .filter(|(_, i)| i.kind == ItemKind::Result && !i.misplaced)
            .map(|(_, i)| &*i.id)
            .collect();

        // A table of ids only when two calls could share one: a pair's
        // message holds one call, and the table cost an allocation.
        let mut unique = HashSet::new();
        if call_items().nth(1).is_some()
            && let Some(dup) = call_items()
                .filter(|i| !i.positional)
                .find(|i| !unique.insert(&*i.id))
        {
            return Err(Error::invalid_params(
                format!("{path}.content"),
                format!("two tool calls share the id {:?}", &*dup.id),
            ));
        }
        // Built here, not narrowed from a wider list: collecting in place
        // into smaller elements shrank the allocation (a `realloc`).
        let calls: Vec<(String, String)> = call_items()
            .map(|i| (i.id.to_string(), i.name.to_string()))
            .collect();

        if !results.is_empty() {
            // Results come first in their turn: after other content the
            // provider reads their calls as unanswered.
            if let Some(late) = items.iter().position(|(_, i)| i.kind == ItemKind::Other)
                && let Some((m, result)) = items[late..]
                    .iter()
                    .find(|(_, i)| i.kind == ItemKind::Result)
            {
                return Err(Error::invalid_params(
                    item_path(*m, result.index),
                    "tool results must come before any other content of the message",
                ));
            }
            let Some(pending) = &self.pending else {
                return Err(Error::UnknownToolResult {
                    tool_use_id: results[0].to_owned(),
                });
            };
            // Ids answered by position may recur: as many results as calls
            // of that name.
            let mut open = counts(pending.outstanding.iter().map(String::as_str));
            let mut answered: Vec<String> = Vec::with_capacity(results.len());
            for id in &results {
                if !take_one(&mut open, id) {
                    return Err(Error::UnknownToolResult {
                        tool_use_id: (*id).to_owned(),
                    });
                }
                answered.push((*id).to_owned());
            }
            let remaining = pending.outstanding.len() - answered.len();
            if remaining > 0 {
                return Ok(Step {
                    lines: Lines::default(),
                    transition: Transition::Answer {
                        messages: group,
                        answered,
                    },
                    status: AppendStatus::Buffered,
                    flushed: None,
                });
            }
            let mut lines = Lines::default();
            for m in pending
                .assistant
                .iter()
                .chain(&pending.answers)
                .chain(&group)
            {
                lines.push_msg(m);
            }
            return Ok(Step {
                lines,
                transition: Transition::Clear,
                status: AppendStatus::Committed,
                flushed: None,
            });
        }

        if let Some(pending) = &self.pending {
            // Items the provider accepts between a call and its result
            // (no side) join the pair where they stand.
            if side.is_none() {
                let transition = if pending.answers.is_empty() {
                    Transition::Extend {
                        messages: group,
                        calls: Vec::new(),
                    }
                } else {
                    Transition::Answer {
                        messages: group,
                        answered: Vec::new(),
                    }
                };
                return Ok(Step {
                    lines: Lines::default(),
                    transition,
                    status: AppendStatus::Buffered,
                    flushed: None,
                });
            }
            // An assistant message before any result joins the pending turn
            // (unless it compacts it away, below).
            if side == Some(Side::Assistant) && pending.answers.is_empty() && cut.is_none() {
                let called: HashSet<&str> = pending.calls.iter().map(|(p, _)| p.as_str()).collect();
                let positional: HashSet<&str> = items
                    .iter()
                    .filter(|(_, i)| i.positional)
                    .map(|(_, i)| &*i.id)
                    .collect();
                if let Some((dup, _)) = calls.iter().find(|(id, _)| {
                    called.contains(id.as_str()) && !positional.contains(id.as_str())
                }) {
                    return Err(Error::invalid_params(
                        format!("{path}.content"),
                        format!("the tool call id {dup:?} is already used in this assistant turn"),
                    ));
                }
                return Ok(Step {
                    lines: Lines::default(),
                    transition: Transition::Extend {
                        messages: group,
                        calls,
                    },
                    status: AppendStatus::Buffered,
                    flushed: None,
                });
            }
        }

        // Anything else first resolves a pending pair. A response that
        // compacts the conversation leaves the pair before its compaction,
        // where the provider no longer reads it: kept as it stands, as
        // repair keeps what stands before a compaction.
        let (mut lines, flushed) = match &self.pending {
            Some(pending) if cut.is_some() && side == Some(Side::Assistant) => {
                let mut lines = Lines::default();
                for m in pending.assistant.iter().chain(&pending.answers) {
                    lines.push_msg(m);
                }
                (lines, None)
            }
            Some(_) => {
                let (lines, result) = self.flush(dialect, abort, "interrupted by a new message");
                (lines, Some(result))
            }
            None => (Lines::default(), None),
        };
        if calls.is_empty() {
            for m in &group {
                lines.push_msg(m);
            }
            return Ok(Step {
                lines,
                transition: Transition::Clear,
                status: AppendStatus::Committed,
                flushed,
            });
        }
        Ok(Step {
            lines,
            transition: Transition::Buffer(Box::new(Pending {
                owner,
                assistant: group,
                answers: Vec::new(),
                outstanding: calls.iter().map(|(id, _)| id.clone()).collect(),
                calls,
            })),
            status: AppendStatus::Buffered,
            flushed,
        })
    }

    /// Plan resolving the pending pair; the transition is always `Clear`.
    pub fn flush(
        &self,
        dialect: &dyn Dialect,
        mode: AbortMode,
        reason: &str,
    ) -> (Lines, FlushResult) {
        let mut lines = Lines::default();
        let mut result = FlushResult {
            mode,
            discarded: Vec::new(),
            synthesized: Vec::new(),
            written: 0,
        };
        let Some(pending) = &self.pending else {
            return (lines, result);
        };
        match mode {
            AbortMode::Discard => {
                result.discarded = pending.calls.iter().map(|(id, _)| id.clone()).collect();
                // Items that were never part of the pair (a developer
                // message between call and result) are kept.
                for m in pending.assistant.iter().chain(&pending.answers) {
                    if m.side(dialect).is_none() {
                        lines.push_msg(m);
                    }
                }
                result.written = lines.count;
            }
            AbortMode::Synthetic => {
                for m in pending.assistant.iter().chain(&pending.answers) {
                    lines.push_msg(m);
                }
                // The calls still open: for ids answered by position, the
                // last ones of that name.
                let mut left = counts(pending.outstanding.iter().map(String::as_str));
                let mut open: Vec<(String, String)> = Vec::new();
                for call in pending.calls.iter().rev() {
                    if take_one(&mut left, &call.0) {
                        open.push(call.clone());
                    }
                }
                open.reverse();
                let text = format::interrupted_text(reason);
                // The turn as values (a dialect may look up its calls there).
                let turn: Vec<Value> = pending
                    .assistant
                    .iter()
                    .filter_map(|m| m.value().map(Cow::into_owned))
                    .collect();
                for m in dialect.error_results(&open, &turn, &text) {
                    lines.push_message(&m);
                }
                result.synthesized = pending.outstanding.clone();
                result.written = lines.count;
            }
        }
        (lines, result)
    }
}

/// How many times each id occurs: the open calls of a pair as a multiset,
/// so matching a turn's results costs one lookup each (a pair may hold
/// 100,000 calls).
fn counts<'a>(ids: impl Iterator<Item = &'a str>) -> HashMap<&'a str, usize> {
    let mut counts = HashMap::new();
    for id in ids {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

/// Take one occurrence of `id` out of `counts`; false when none is left.
fn take_one(counts: &mut HashMap<&str, usize>, id: &str) -> bool {
    match counts.get_mut(id) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}
