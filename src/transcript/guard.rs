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

use serde_json::{Value, json};

use super::Lines;
use crate::config::AbortMode;
use crate::error::{Error, Result};
use crate::message;
use crate::protocol::{AppendStatus, FlushResult};

/// Identifies the client connection that buffered a pair.
pub type Owner = u64;

#[derive(Debug, Clone)]
pub struct Pending {
    pub owner: Owner,
    pub assistant: Value,
    /// User messages that answered some of the calls so far.
    pub answers: Vec<Value>,
    /// Every call id of the assistant message, in order.
    pub ids: Vec<String>,
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

/// Block types that carry their own result inside the assistant turn.
fn is_pending_call(block: &Value) -> bool {
    message::block_type(block) == Some("tool_use")
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
            Transition::Answer { message, answered } => {
                if let Some(p) = self.pending.as_mut() {
                    p.outstanding.retain(|id| !answered.contains(id));
                    p.answers.push(message);
                }
            }
        }
    }

    /// Plan the append of `msg` (already validated as a message).
    pub fn append(&self, msg: Value, owner: Owner, abort: AbortMode, path: &str) -> Result<Step> {
        let role = message::role(&msg).unwrap_or_default();
        let calls: Vec<String> = if role == "assistant" {
            message::blocks(&msg)
                .iter()
                .filter(|b| is_pending_call(b))
                .map(|b| {
                    b.get("id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        } else {
            Vec::new()
        };
        let results: Vec<&str> = if role == "user" {
            message::tool_results(&msg).map(|(_, id)| id).collect()
        } else {
            Vec::new()
        };

        let mut unique = HashSet::new();
        if let Some(dup) = calls.iter().find(|id| !unique.insert(id.as_str())) {
            return Err(Error::invalid_params(
                format!("{path}.content"),
                format!("two tool_use blocks share the id {dup:?}"),
            ));
        }

        if !results.is_empty() {
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
            lines.push_message(&pending.assistant);
            for answer in &pending.answers {
                lines.push_message(answer);
            }
            lines.push_message(&msg);
            return Ok(Step {
                lines,
                transition: Transition::Clear,
                status: AppendStatus::Committed,
                flushed: None,
            });
        }

        // Anything else first resolves a pending pair.
        let (mut lines, flushed) = match &self.pending {
            Some(_) => {
                let (lines, result) = self.flush(abort, "interrupted by a new message");
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
                assistant: msg,
                answers: Vec::new(),
                ids: calls.clone(),
                outstanding: calls,
            })),
            status: AppendStatus::Buffered,
            flushed,
        })
    }

    /// Plan resolving the pending pair; the transition is always `Clear`.
    pub fn flush(&self, mode: AbortMode, reason: &str) -> (Lines, FlushResult) {
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
            AbortMode::Discard => result.discarded = pending.ids.clone(),
            AbortMode::Synthetic => {
                lines.push_message(&pending.assistant);
                for answer in &pending.answers {
                    lines.push_message(answer);
                }
                lines.push_message(&synthetic_results(&pending.outstanding, reason));
                result.synthesized = pending.outstanding.clone();
                result.written = lines.count;
            }
        }
        (lines, result)
    }
}

/// A user message closing `ids` with error results that name the reason.
pub fn synthetic_results(ids: &[String], reason: &str) -> Value {
    let reason = if reason.trim().is_empty() {
        "interrupted"
    } else {
        reason
    };
    let text = format!("Tool call did not complete: {reason}. No result was produced.");
    let content: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({
                "type": "tool_result",
                "tool_use_id": id,
                "is_error": true,
                "content": text,
            })
        })
        .collect();
    json!({ "role": "user", "content": content })
}
