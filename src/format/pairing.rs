//! Turns and pairs, the same for every provider (PROTOCOL.md 10.2).
//!
//! - Consecutive messages of one side are one turn (providers join them).
//! - A result answers the nearest call with its id in the assistant turn
//!   directly before its own turn; a second result for that call is a
//!   duplicate, a result with no such call an orphan.
//! - Two calls with one id in different turns are two calls.
//! - In the answering turn, results come before any other content: a result
//!   after text is not "immediately after" its call.
//! - A call outside an assistant message, or a result outside a user
//!   message, is in the wrong role.

use std::collections::HashMap;

use super::{Dialect, ItemKind, Side};
use serde_json::Value;

/// What is wrong with one call or result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// A call with no result in the next turn.
    Unanswered,
    /// A result that answers no call of the turn before it.
    Orphan,
    /// A second result for one call.
    Duplicate,
    /// A call in a user message or a result in an assistant message.
    WrongRole,
    /// A result that answers its call but comes after other content of its
    /// turn (the provider reads its call as unanswered).
    Late,
    /// A call id outside the provider's pattern (PROTOCOL.md 11.2).
    InvalidCallId,
    /// A result's id outside the provider's pattern.
    InvalidResultId,
    /// A call id an earlier call of the request already has.
    ReusedCallId,
}

impl Fault {
    /// The stable name used in `transcript/check` violations.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::Unanswered => "missingResult",
            Fault::Orphan => "unexpectedResult",
            Fault::Duplicate => "duplicateResult",
            Fault::WrongRole => "wrongRole",
            Fault::Late => "resultAfterContent",
            Fault::InvalidCallId | Fault::InvalidResultId => "invalidToolUseId",
            Fault::ReusedCallId => "duplicateToolUseId",
        }
    }
}

/// One turn: its side and its messages (indexes into the conversation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    pub side: Side,
    pub messages: Vec<usize>,
}

/// The verdict on one call or result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolVerdict {
    pub message: usize,
    /// Item index within the message.
    pub index: usize,
    pub kind: ItemKind,
    pub id: String,
    pub name: String,
    pub fault: Option<Fault>,
    /// For a result that answers a call: the call's verdict index.
    pub answers: Option<usize>,
}

/// How a conversation's calls and results pair.
#[derive(Debug, Default)]
pub struct Pairing {
    pub turns: Vec<Turn>,
    /// Every call and result, in conversation order.
    pub verdicts: Vec<ToolVerdict>,
}

impl Pairing {
    pub fn is_valid(&self) -> bool {
        self.verdicts.iter().all(|v| v.fault.is_none())
    }

    pub fn faults(&self) -> impl Iterator<Item = &ToolVerdict> {
        self.verdicts.iter().filter(|v| v.fault.is_some())
    }
}

/// Pair the calls and results of `messages` (in order), from the newest
/// server-side compaction on (PROTOCOL.md 11.2): the provider drops what
/// came before it, so nothing there is a call to answer, and a result
/// after it whose call stands before it is an orphan.
pub fn pair<'m>(dialect: &dyn Dialect, messages: impl IntoIterator<Item = &'m Value>) -> Pairing {
    let messages: Vec<&Value> = messages.into_iter().collect();
    let cut = super::compaction_cut(dialect, messages.iter().copied());
    let mut pairing = Pairing::default();
    // Per turn, the verdict indexes of its calls (assistant turns).
    let mut turn_calls: Vec<usize> = Vec::new();
    let mut prev_calls = TurnCalls::default();
    let mut seen_content = false;
    let start = cut.map_or(0, |(m, _)| m);
    for (m, message) in messages.into_iter().enumerate().skip(start) {
        let Some(side) = dialect.side(message) else {
            continue;
        };
        let new_turn = pairing.turns.last().is_none_or(|t| t.side != side);
        if new_turn {
            close_turn(&mut pairing, &mut turn_calls, &mut prev_calls);
            pairing.turns.push(Turn {
                side,
                messages: Vec::new(),
            });
            seen_content = false;
        }
        if let Some(turn) = pairing.turns.last_mut() {
            turn.messages.push(m);
        }
        for item in dialect.items(message) {
            if super::before_cut(cut, m, item.index) {
                continue;
            }
            let mut verdict = ToolVerdict {
                message: m,
                index: item.index,
                kind: item.kind,
                id: item.id.into_owned(),
                name: item.name.into_owned(),
                fault: None,
                answers: None,
            };
            match item.kind {
                ItemKind::Other => {
                    seen_content = true;
                    continue;
                }
                _ if item.misplaced => verdict.fault = Some(Fault::WrongRole),
                ItemKind::Call => turn_calls.push(pairing.verdicts.len()),
                ItemKind::Result => {
                    // The nearest call with this id in the turn before;
                    // without ids, the first of that name still open.
                    let call = match prev_calls.by_id.get_mut(&verdict.id) {
                        None => None,
                        Some(same) if item.positional => {
                            // Answers are only ever added, so the first
                            // open call only moves forward.
                            while same.first_open < same.calls.len()
                                && pairing.verdicts[same.calls[same.first_open]]
                                    .answers
                                    .is_some()
                            {
                                same.first_open += 1;
                            }
                            same.calls
                                .get(same.first_open)
                                .or(same.calls.first())
                                .copied()
                        }
                        Some(same) => same.calls.last().copied(),
                    };
                    match call {
                        None => verdict.fault = Some(Fault::Orphan),
                        Some(c) if pairing.verdicts[c].answers.is_some() => {
                            verdict.fault = Some(Fault::Duplicate)
                        }
                        Some(c) => {
                            let me = pairing.verdicts.len();
                            pairing.verdicts[c].answers = Some(me);
                            verdict.answers = Some(c);
                            if seen_content {
                                verdict.fault = Some(Fault::Late);
                            }
                        }
                    }
                }
            }
            pairing.verdicts.push(verdict);
        }
    }
    close_turn(&mut pairing, &mut turn_calls, &mut prev_calls);
    // Whatever the last assistant turn asked is still unanswered.
    close_turn(&mut pairing, &mut turn_calls, &mut prev_calls);
    pairing
}

/// The calls of the assistant turn that the current turn answers, found by
/// id in one lookup (a turn may hold 100,000 calls).
#[derive(Default)]
struct TurnCalls {
    all: Vec<usize>,
    by_id: HashMap<String, SameId>,
}

/// The calls of one turn that share an id, in order.
#[derive(Default)]
struct SameId {
    calls: Vec<usize>,
    /// Where to look for the first call still unanswered.
    first_open: usize,
}

/// Move on from a turn: the calls of the turn before it that got no result
/// are unanswered; its own calls become the ones the next turn answers.
fn close_turn(pairing: &mut Pairing, turn_calls: &mut Vec<usize>, prev_calls: &mut TurnCalls) {
    for &c in &prev_calls.all {
        let v = &mut pairing.verdicts[c];
        if v.answers.is_none() {
            v.fault = Some(Fault::Unanswered);
        }
    }
    let all = std::mem::take(turn_calls);
    let mut by_id: HashMap<String, SameId> = HashMap::with_capacity(all.len());
    for &c in &all {
        let id = &pairing.verdicts[c].id;
        match by_id.get_mut(id) {
            Some(same) => same.calls.push(c),
            None => {
                by_id.insert(
                    id.clone(),
                    SameId {
                        calls: vec![c],
                        first_open: 0,
                    },
                );
            }
        }
    }
    *prev_calls = TurnCalls { all, by_id };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::anthropic::Anthropic;
    use serde_json::json;

    fn call(id: &str) -> Value {
        json!({"type":"tool_use","id":id,"name":"t","input":{}})
    }
    fn result(id: &str) -> Value {
        json!({"type":"tool_result","tool_use_id":id,"content":"ok"})
    }
    fn faults(messages: &[Value]) -> Vec<(usize, String, Option<Fault>)> {
        pair(&Anthropic, messages)
            .verdicts
            .into_iter()
            .map(|v| (v.message, v.id, v.fault))
            .collect()
    }

    #[test]
    fn results_over_consecutive_user_messages_answer_one_turn() {
        let m = [
            json!({"role":"assistant","content":[call("a"), call("b")]}),
            json!({"role":"user","content":[result("a")]}),
            json!({"role":"user","content":[result("b")]}),
        ];
        assert!(pair(&Anthropic, &m).is_valid());
        assert_eq!(pair(&Anthropic, &m).turns.len(), 2);
    }

    #[test]
    fn a_call_answered_only_after_another_turn_is_unanswered_and_its_result_an_orphan() {
        let m = [
            json!({"role":"assistant","content":[call("a")]}),
            json!({"role":"user","content":"go on"}),
            json!({"role":"assistant","content":"ok"}),
            json!({"role":"user","content":[result("a")]}),
        ];
        assert_eq!(
            faults(&m),
            vec![
                (0, "a".into(), Some(Fault::Unanswered)),
                (3, "a".into(), Some(Fault::Orphan)),
            ]
        );
    }

    #[test]
    fn reused_ids_across_turns_are_two_calls_and_a_second_result_is_a_duplicate() {
        let m = [
            json!({"role":"assistant","content":[call("x")]}),
            json!({"role":"user","content":[result("x")]}),
            json!({"role":"assistant","content":[call("x")]}),
            json!({"role":"user","content":[result("x"), result("x")]}),
        ];
        let f = faults(&m);
        assert_eq!(f[3].2, None);
        assert_eq!(f[4].2, Some(Fault::Duplicate));
    }

    #[test]
    fn wrong_roles_and_late_results_are_faults() {
        let m = [
            json!({"role":"assistant","content":[call("a"), result("z")]}),
            json!({"role":"user","content":[{"type":"text","text":"hi"}, result("a"), call("q")]}),
        ];
        let f = faults(&m);
        assert_eq!(f[1].2, Some(Fault::WrongRole));
        assert_eq!(f[2].2, Some(Fault::Late));
        assert_eq!(f[3].2, Some(Fault::WrongRole));
    }
}
