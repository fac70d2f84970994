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

use std::collections::HashSet;

use serde_json::Value;

use super::Lines;
use crate::config::AbortMode;
use crate::error::{Error, Result};
use crate::format::{self, Dialect, ItemKind, Side};
use crate::protocol::{AppendStatus, FlushResult};

/// Identifies the client connection that buffered a pair.
pub type Owner = u64;

#[derive(Debug, Clone)]
pub struct Pending {
    pub owner: Owner,
    /// The assistant turn: consecutive assistant messages are one turn, so
    /// a message that follows a tool-using one before any result joins it.
    pub assistant: Vec<Value>,
    /// User messages that answered some of the calls so far.
    pub answers: Vec<Value>,
    /// Every call of the turn, `(id, tool name)`, in order.
    pub calls: Vec<(String, String)>,
    /// Call ids still waiting, in order.
    pub outstanding: Vec<String>,
}

#[derive(Debug, Default)]
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
        message: Value,
        calls: Vec<(String, String)>,
    },
    Answer {
        message: Value,
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
            Transition::Extend { message, calls } => {
                if let Some(p) = self.pending.as_mut() {
                    p.outstanding.extend(calls.iter().map(|(id, _)| id.clone()));
                    p.calls.extend(calls);
                    p.assistant.push(message);
                }
            }
            Transition::Answer { message, answered } => {
                if let Some(p) = self.pending.as_mut() {
                    p.outstanding.retain(|id| !answered.contains(id));
                    p.answers.push(message);
                }
            }
        }
    }

    /// Plan the append of `msg` (already validated, roles included).
    pub fn append(
        &self,
        dialect: &dyn Dialect,
        msg: Value,
        owner: Owner,
        abort: AbortMode,
        path: &str,
    ) -> Result<Step> {
        let side = dialect.side(&msg);
        let items = dialect.items(&msg);
        let calls: Vec<(String, String)> = items
            .iter()
            .filter(|i| i.kind == ItemKind::Call && !i.misplaced)
            .map(|i| (i.id.to_string(), i.name.to_string()))
            .collect();
        let results: Vec<&str> = items
            .iter()
            .filter(|i| i.kind == ItemKind::Result && !i.misplaced)
            .map(|i| &*i.id)
            .collect();

        let mut unique = HashSet::new();
        if let Some((dup, _)) = calls.iter().find(|(id, _)| !unique.insert(id.as_str())) {
            return Err(Error::invalid_params(
                format!("{path}.content"),
                format!("two tool_use blocks share the id {dup:?}"),
            ));
        }

        if !results.is_empty() {
            // Results come first in their turn: after other content the
            // provider reads their calls as unanswered.
            if let Some(late) = items.iter().position(|i| i.kind == ItemKind::Other)
                && let Some(result) = items[late..].iter().find(|i| i.kind == ItemKind::Result)
            {
                return Err(Error::invalid_params(
                    format!("{path}.content[{}]", result.index),
                    "tool results must come before any other content of the message",
                ));
            }
            let Some(pending) = &self.pending else {
                return Err(Error::UnknownToolResult {
                    tool_use_id: results[0].to_owned(),
                });
            };
            let mut answered: Vec<String> = Vec::new();
            for id in &results {
                if !pending.outstanding.iter().any(|o| o == id) || answered.iter().any(|a| a == id)
                {
                    return Err(Error::UnknownToolResult {
                        tool_use_id: (*id).to_owned(),
                    });
                }
                answered.push((*id).to_owned());
            }
            let remaining = pending
                .outstanding
                .iter()
                .filter(|o| !answered.contains(o))
                .count();
            if remaining > 0 {
                return Ok(Step {
                    lines: Lines::default(),
                    transition: Transition::Answer {
                        message: msg,
                        answered,
                    },
                    status: AppendStatus::Buffered,
                    flushed: None,
                });
            }
            let mut lines = Lines::default();
            for m in pending.assistant.iter().chain(&pending.answers) {
                lines.push_message(m);
            }
            lines.push_message(&msg);
            return Ok(Step {
                lines,
                transition: Transition::Clear,
                status: AppendStatus::Committed,
                flushed: None,
            });
        }

        // An assistant message before any result joins the pending turn.
        if let Some(pending) = &self.pending
            && side == Some(Side::Assistant)
            && pending.answers.is_empty()
        {
            if let Some((dup, _)) = calls
                .iter()
                .find(|(id, _)| pending.calls.iter().any(|(p, _)| p == id))
            {
                return Err(Error::invalid_params(
                    format!("{path}.content"),
                    format!("the tool_use id {dup:?} is already used in this assistant turn"),
                ));
            }
            return Ok(Step {
                lines: Lines::default(),
                transition: Transition::Extend {
                    message: msg,
                    calls,
                },
                status: AppendStatus::Buffered,
                flushed: None,
            });
        }

        // Anything else first resolves a pending pair.
        let (mut lines, flushed) = match &self.pending {
            Some(_) => {
                let (lines, result) = self.flush(dialect, abort, "interrupted by a new message");
                (lines, Some(result))
            }
            None => (Lines::default(), None),
        };
        if calls.is_empty() {
            lines.push_message(&msg);
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
                assistant: vec![msg],
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
                result.discarded = pending.calls.iter().map(|(id, _)| id.clone()).collect()
            }
            AbortMode::Synthetic => {
                for m in pending.assistant.iter().chain(&pending.answers) {
                    lines.push_message(m);
                }
                let open: Vec<(String, String)> = pending
                    .calls
                    .iter()
                    .filter(|(id, _)| pending.outstanding.contains(id))
                    .cloned()
                    .collect();
                for m in dialect.error_results(&open, &format::interrupted_text(reason)) {
                    lines.push_message(&m);
                }
                result.synthesized = pending.outstanding.clone();
                result.written = lines.count;
            }
        }
        (lines, result)
    }
}
