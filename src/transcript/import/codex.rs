//! Codex rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) into
//! `openai-responses` input items.
//!
//! Format followed: `RolloutLine` of openai/codex
//! `codex-rs/protocol/src/protocol.rs` (`{"timestamp", "type", "payload"}`,
//! `type` one of `session_meta`, `response_item`, `compacted`,
//! `turn_context`, `event_msg`), with `ResponseItem` of
//! `codex-rs/protocol/src/models.rs` as the `response_item` payload
//! (`message`, `reasoning`, `function_call`, `function_call_output`,
//! `custom_tool_call`, `custom_tool_call_output`, `local_shell_call`,
//! `web_search_call`, `compaction`, `ghost_snapshot`, …), as Codex
//! CLI 0.4x and later write them. History is rebuilt as Codex's
//! `reconstruct_history_from_rollout` does:
//!
//! - each `response_item` payload is one input item, kept verbatim
//!   (reasoning items with their `encrypted_content` included), except
//!   `ghost_snapshot`, which Codex keeps for undo and never sends;
//! - `compacted` with `replacement_history` replaces everything before it
//!   with that history; without it (older local compaction) the history
//!   becomes the user's own messages followed by the summary as a user
//!   message, as Codex's `build_compacted_history` does (without its token
//!   cap on the kept user messages);
//! - an `event_msg` `thread_rolled_back` drops the last `num_turns` user
//!   turns; every other event, `session_meta` and `turn_context` carry no
//!   model input.

use std::io;

use serde_json::{Map, Value, json};

use super::reread::{SessionFile, Sink};
use super::{Conversion, Report, str_of};

/// The whole-file conversion (replays, tests): [`plan`] and [`Plan::emit`]
/// over bytes in memory.
pub fn convert(input: &[u8]) -> Conversion {
    super::converted(super::Agent::Codex, input)
}

/// An input item of the rebuilt history, as the first pass keeps it: where
/// it is, and whether a user turn starts there (what compactions and
/// rollbacks go by).
#[derive(Clone, Copy)]
struct Item {
    /// The offset of the line that holds it.
    at: u64,
    what: What,
    user_turn: bool,
}

#[derive(Clone, Copy)]
enum What {
    /// A `response_item` line's payload.
    Payload,
    /// Item `n` of a `compacted` line's `replacement_history`.
    History(usize),
    /// The summary message an older `compacted` line's `message` makes.
    Summary,
}

/// The history the rollout ends with, as items of its lines.
pub struct Plan {
    items: Vec<Item>,
    report: Report,
}

/// The first pass: the history replayed with items kept as offsets.
pub fn plan(file: SessionFile) -> io::Result<Plan> {
    let mut report = Report::default();
    let mut items: Vec<Item> = Vec::new();
    file.each_object(&mut report, |at, line, report| {
        let payload = line.get("payload");
        match (str_of(&line, "type"), payload) {
            (Some("response_item"), Some(item @ Value::Object(_))) => {
                if item.get("type").and_then(Value::as_str) == Some("ghost_snapshot") {
                    report.skipped += 1;
                } else {
                    items.push(Item {
                        at,
                        what: What::Payload,
                        user_turn: is_user_turn_start(item),
                    });
                }
            }
            (Some("compacted"), Some(Value::Object(compacted))) => {
                report.compactions += 1;
                let before = items.len();
                let kept;
                (items, kept) = compacted_history(at, compacted, std::mem::take(&mut items));
                report.left_out += before - kept;
            }
            (Some("event_msg"), Some(Value::Object(event)))
                if str_of(event, "type") == Some("thread_rolled_back") =>
            {
                let turns = event.get("num_turns").and_then(Value::as_u64).unwrap_or(0);
                let before = items.len();
                roll_back(&mut items, turns);
                report.left_out += before - items.len();
            }
            _ => report.skipped += 1,
        }
    })?;
    Ok(Plan { items, report })
}

impl Plan {
    pub fn report(&self) -> Report {
        self.report.clone()
    }

    /// The second pass: each item of the history, in order.
    pub fn emit(&self, file: SessionFile, out: &mut Sink) -> io::Result<()> {
        let mut lines = file.lines();
        for item in &self.items {
            let line = lines.object_at(item.at)?;
            let payload = line.get("payload");
            let value = match item.what {
                What::Payload => payload.cloned(),
                What::History(n) => payload
                    .and_then(|p| p.get("replacement_history"))
                    .and_then(|h| h.get(n))
                    .cloned(),
                What::Summary => payload.and_then(Value::as_object).map(summary),
            };
            match value {
                Some(value) => out.push(value)?,
                None => return Err(lines.changed(item.at)),
            }
        }
        Ok(())
    }
}

/// The history after the compaction on the line at `at`, and how many of
/// the items before it it kept.
fn compacted_history(
    at: u64,
    compacted: &Map<String, Value>,
    items: Vec<Item>,
) -> (Vec<Item>, usize) {
    if let Some(Value::Array(history)) = compacted.get("replacement_history") {
        let history = history
            .iter()
            .enumerate()
            .filter(|(_, item)| item.get("type").and_then(Value::as_str) != Some("ghost_snapshot"))
            .map(|(n, item)| Item {
                at,
                what: What::History(n),
                user_turn: is_user_turn_start(item),
            })
            .collect();
        return (history, 0);
    }
    let mut kept: Vec<Item> = items.into_iter().filter(|item| item.user_turn).collect();
    let count = kept.len();
    kept.push(Item {
        at,
        what: What::Summary,
        user_turn: is_user_turn_start(&summary(compacted)),
    });
    (kept, count)
}

/// The user message an older compaction leaves its summary in.
fn summary(compacted: &Map<String, Value>) -> Value {
    let summary = str_of(compacted, "message").unwrap_or_default();
    json!({
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": summary}],
    })
}

/// A message the user typed (not the context Codex injects as user
/// messages: environment, instructions, AGENTS.md).
fn is_user_turn_start(item: &Value) -> bool {
    if item.get("type").and_then(Value::as_str) != Some("message")
        || item.get("role").and_then(Value::as_str) != Some("user")
    {
        return false;
    }
    let first_text = item
        .get("content")
        .and_then(Value::as_array)
        .and_then(|parts| parts.first())
        .and_then(|part| part.get("text"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    const CONTEXT: [&str; 4] = [
        "<environment_context>",
        "<user_instructions>",
        "# AGENTS.md instructions",
        "<user_shell_command>",
    ];
    !CONTEXT.iter().any(|tag| first_text.starts_with(tag))
}

/// Drop the last `turns` user turns (each from a message the user typed to
/// the item before the next one).
fn roll_back(items: &mut Vec<Item>, turns: u64) {
    let mut left = turns;
    let mut cut = items.len();
    while left > 0 {
        match items[..cut].iter().rposition(|item| item.user_turn) {
            Some(start) => {
                cut = start;
                left -= 1;
            }
            None => break,
        }
    }
    items.truncate(cut);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: &str, payload: Value) -> String {
        json!({"timestamp": "2026-01-01T00:00:00.000Z", "type": kind, "payload": payload})
            .to_string()
    }

    fn user(text: &str) -> Value {
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    }

    #[test]
    fn older_compaction_keeps_the_users_messages_then_the_summary() {
        let input = [
            line("response_item", user("<environment_context>cwd</environment_context>")),
            line("response_item", user("fix the bug")),
            line(
                "response_item",
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}),
            ),
            line("compacted", json!({"message": "We fixed the bug."})),
            line("response_item", user("thanks")),
        ]
        .join("\n");
        let out = convert(input.as_bytes());
        assert_eq!(
            out.messages,
            [
                user("fix the bug"),
                user("We fixed the bug."),
                user("thanks")
            ]
        );
        assert_eq!(out.report.compactions, 1);
        assert_eq!(out.report.left_out, 2);
    }

    #[test]
    fn a_rollback_drops_whole_user_turns() {
        let answer = |t: &str| json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]});
        let input = [
            line("response_item", user("one")),
            line("response_item", answer("1")),
            line("response_item", user("two")),
            line("response_item", answer("2")),
            line("response_item", user("three")),
            line("response_item", answer("3")),
            line(
                "event_msg",
                json!({"type": "thread_rolled_back", "num_turns": 2}),
            ),
        ]
        .join("\n");
        let out = convert(input.as_bytes());
        assert_eq!(out.messages, [user("one"), answer("1")]);
        assert_eq!(out.report.left_out, 4);
    }
}
