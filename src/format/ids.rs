//! Provider rules on tool call ids (PROTOCOL.md 11.2).
//!
//! Anthropic refuses a request whose `tool_use` ids do not match
//! `^[a-zA-Z0-9_-]+$` or are not unique within the request. Both happen in
//! the field: providers behind OpenAI-compatible gateways mint ids such as
//! `functions.eval:301` (Kimi) and reuse them across turns, and a session
//! moved to Claude from one of them is then refused on every turn.
//!
//! The mapping here is a pure function of the conversation, so that every
//! later turn of a growing conversation maps its earlier calls the same
//! way (the provider's prefix cache, and toolwire's decisions, which
//! follow the mapped id, see the same bytes):
//!
//! - each character outside the pattern becomes `_`;
//! - a call whose (mapped) id an earlier, different call already holds gets
//!   `_dup1`, `_dup2`, … (the first of them still free), on its id and on
//!   its result's;
//! - a pair repeated exactly (same id, name, input and result) is kept once:
//!   the repetition is dropped.
//!
//! A call's results are those of the user turn right after its own with its
//! id; when one turn holds several calls of one id, they take those results
//! in order. Results that answer no call are left as they are (repair drops
//! them; renaming one could make it answer a call it never answered).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Dialect, Fault, ItemKind, Pairing, Side, pair};

/// Whether `id` matches `^[a-zA-Z0-9_-]+$`.
pub fn is_valid(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `id` with each character outside the pattern turned into `_`.
pub fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One item of the conversation: `(message, item index)`.
pub type At = (usize, usize);

/// What the id rules change in a conversation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IdPlan {
    /// Items to give a new id, in conversation order.
    pub renames: Vec<Rename>,
    /// Items of repeated pairs to drop: `(item, kind, id)`.
    pub repeats: Vec<(At, ItemKind, String)>,
}

impl IdPlan {
    pub fn is_empty(&self) -> bool {
        self.renames.is_empty() && self.repeats.is_empty()
    }
}

/// One item given a new id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rename {
    pub at: At,
    pub kind: ItemKind,
    pub from: String,
    pub to: String,
}

/// A call as the mapping sees it.
struct Call {
    at: At,
    id: String,
    results: Vec<At>,
}

/// The calls of every assistant turn, in order, each with the results the
/// next user turn gives it (see the module documentation).
fn calls_with_results(pairing: &Pairing, messages: &[&Value]) -> Vec<Call> {
    let mut turn_of = vec![usize::MAX; messages.len()];
    for (t, turn) in pairing.turns.iter().enumerate() {
        for &m in &turn.messages {
            turn_of[m] = t;
        }
    }
    let mut calls: Vec<Call> = Vec::new();
    // Per assistant turn: its calls' positions in `calls`, by id.
    let mut open: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut open_turn = usize::MAX;
    let mut taken: HashMap<&str, usize> = HashMap::new();
    for v in &pairing.verdicts {
        if v.fault == Some(Fault::WrongRole) {
            continue;
        }
        let turn = turn_of[v.message];
        let id = v.id.as_str();
        match v.kind {
            ItemKind::Call => {
                if turn != open_turn {
                    open.clear();
                    taken.clear();
                    open_turn = turn;
                }
                open.entry(id).or_default().push(calls.len());
                calls.push(Call {
                    at: (v.message, v.index),
                    id: id.to_owned(),
                    results: Vec::new(),
                });
            }
            ItemKind::Result => {
                let answers_open =
                    turn == open_turn.wrapping_add(1) && pairing.turns[turn].side == Side::User;
                let Some(same) = open.get(id).filter(|_| answers_open) else {
                    continue;
                };
                let k = taken.entry(id).or_default();
                let call = same[(*k).min(same.len() - 1)];
                *k += 1;
                calls[call].results.push((v.message, v.index));
            }
            ItemKind::Other => {}
        }
    }
    calls
}

/// What makes an item the same as another: its digest without its id
/// (and, as every digest, without cache markers).
fn essence(dialect: &dyn Dialect, messages: &[&Value], at: At) -> Option<super::Digest> {
    let mut value = dialect.item_value(messages[at.0], at.1)?.clone();
    if let Some(obj) = value.as_object_mut() {
        obj.shift_remove("id");
        obj.shift_remove("tool_use_id");
    }
    Some(super::Digest::of_value(&value))
}

/// What makes a pair the same as another of its id: the call and its one
/// result; `None` for a call without exactly one result.
fn pair_key(dialect: &dyn Dialect, messages: &[&Value], call: &Call) -> Option<[super::Digest; 2]> {
    match call.results[..] {
        [result] => Some([
            essence(dialect, messages, call.at)?,
            essence(dialect, messages, result)?,
        ]),
        _ => None,
    }
}

/// Who holds a mapped id.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// A call before the newest compaction (no call of the mapping: never
    /// a pair to compare with).
    BeforeCut,
    /// A call the mapping kept.
    Call,
}

/// An id as the maps below hold it: its 128-bit hash, so that a transcript
/// of 200,000 calls read as a stream holds 16 bytes a call, not the ids
/// (two different ids taken for one is a chance of about 2^-90 in such a
/// transcript).
pub type IdKey = u128;

/// The key of `id`.
pub fn id_key(id: &str) -> IdKey {
    xxhash_rust::xxh3::xxh3_128(id.as_bytes())
}

/// What the id rules change in `messages`; empty for a dialect whose
/// provider documents no rule, and for a conversation that keeps them.
pub fn plan(dialect: &dyn Dialect, messages: &[&Value]) -> IdPlan {
    Planner::default().plan(dialect, messages)
}

/// [`plan`], given the pairing of `messages` (which the caller needs too).
pub fn plan_paired(dialect: &dyn Dialect, messages: &[&Value], pairing: &Pairing) -> IdPlan {
    Planner::default().plan_paired(dialect, messages, pairing)
}

/// [`plan`] of a conversation read a run of whole turns at a time (a
/// transcript file read as a stream; the pairing carries nothing across
/// the runs, see `transcript::stream`): what the mapping learns of one run
/// is kept for the next.
#[derive(Default)]
pub struct Planner {
    /// Mapped id → what holds it. Calls before the newest compaction are
    /// never rewritten, and the provider may still read their ids: a call
    /// after it keeps clear of them too.
    holder: HashMap<IdKey, Holder>,
    /// The pairs of the calls kept, each with its original id (as
    /// [`pair_seen`] keys them). Made only for ids met more than once
    /// (`looked_up`), unless `every_call`.
    kept: HashSet<IdKey>,
    /// The original ids whose earlier pairs are in `kept`.
    looked_up: HashSet<IdKey>,
    /// Whether `kept` gets every call's pair: a later run cannot look back
    /// at an earlier one's calls, as one whole conversation can.
    every_call: bool,
}

/// The key of a call's pair (call and result, see [`pair_key`]) with its
/// original id.
fn pair_seen(own: IdKey, key: [super::Digest; 2]) -> IdKey {
    let mut bytes = [0u8; 16 + 2 * 9];
    bytes[..16].copy_from_slice(&own.to_le_bytes());
    for (i, digest) in key.iter().enumerate() {
        let (tag, value) = digest.to_bits();
        bytes[16 + i * 9] = tag;
        bytes[17 + i * 9..25 + i * 9].copy_from_slice(&value.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_128(&bytes)
}

impl Planner {
    /// A planner for runs of one conversation, in order.
    pub fn for_runs() -> Self {
        Planner {
            every_call: true,
            ..Planner::default()
        }
    }

    /// Messages wholly before the newest compaction: their call ids are
    /// taken.
    pub fn before_cut(&mut self, dialect: &dyn Dialect, messages: &[&Value]) {
        if dialect.checks_ids() {
            for id in call_ids(dialect, messages) {
                self.holder.insert(id_key(&id), Holder::BeforeCut);
            }
        }
    }

    /// The plan of `messages` (positions in them), after the runs before.
    pub fn plan(&mut self, dialect: &dyn Dialect, messages: &[&Value]) -> IdPlan {
        if !dialect.checks_ids() {
            return IdPlan::default();
        }
        let pairing = pair(dialect, messages.iter().copied());
        self.plan_paired(dialect, messages, &pairing)
    }

    /// [`Planner::plan`], given the pairing of `messages`.
    pub fn plan_paired(
        &mut self,
        dialect: &dyn Dialect,
        messages: &[&Value],
        pairing: &Pairing,
    ) -> IdPlan {
        let mut plan = IdPlan::default();
        if !dialect.checks_ids() {
            return plan;
        }
        let calls = calls_with_results(pairing, messages);
        for id in ids_before_cut(dialect, messages) {
            self.holder.insert(id_key(&id), Holder::BeforeCut);
        }
        let holder = &mut self.holder;
        for (c, call) in calls.iter().enumerate() {
            let base = sanitize(&call.id);
            let held = holder.get(&id_key(&base)).copied();
            let own = id_key(&call.id);
            let repeat = (held == Some(Holder::Call) || self.every_call) && {
                let key = pair_key(dialect, messages, call).map(|key| pair_seen(own, key));
                if !self.every_call && self.looked_up.insert(own) {
                    let earlier: Vec<IdKey> = calls[..c]
                        .iter()
                        .filter(|e| e.id == call.id && !plan.repeats.iter().any(|r| r.0 == e.at))
                        .filter_map(|e| pair_key(dialect, messages, e))
                        .map(|key| pair_seen(own, key))
                        .collect();
                    self.kept.extend(earlier);
                }
                let repeat =
                    held == Some(Holder::Call) && key.is_some_and(|key| self.kept.contains(&key));
                if !repeat && let Some(key) = key {
                    self.kept.insert(key);
                }
                repeat
            };
            let mapped = match held {
                None => base,
                Some(_) if repeat => {
                    plan.repeats
                        .push((call.at, ItemKind::Call, call.id.to_owned()));
                    plan.repeats.extend(
                        call.results
                            .iter()
                            .map(|&at| (at, ItemKind::Result, call.id.to_owned())),
                    );
                    continue;
                }
                Some(_) => (1..)
                    .map(|n| format!("{base}_dup{n}"))
                    .find(|id| !holder.contains_key(&id_key(id)))
                    .unwrap_or(base),
            };
            if mapped != call.id {
                let results = call.results.iter().map(|&at| (at, ItemKind::Result));
                for (at, kind) in std::iter::once((call.at, ItemKind::Call)).chain(results) {
                    plan.renames.push(Rename {
                        at,
                        kind,
                        from: call.id.clone(),
                        to: mapped.clone(),
                    });
                }
            }
            holder.insert(id_key(&mapped), Holder::Call);
        }
        plan.renames.sort_by_key(|r| r.at);
        plan
    }
}

/// The call ids of `messages` (all of them before the newest compaction
/// of a longer conversation), for [`faults_after`] of what follows.
pub fn call_ids<'m>(
    dialect: &'m dyn Dialect,
    messages: &'m [&Value],
) -> impl Iterator<Item = String> + 'm {
    messages.iter().flat_map(move |message| {
        dialect
            .items(message)
            .into_iter()
            .filter(|i| i.kind == ItemKind::Call)
            .map(|i| i.id.into_owned())
    })
}

/// The call ids before the newest compaction, in order.
fn ids_before_cut(dialect: &dyn Dialect, messages: &[&Value]) -> Vec<String> {
    let cut = super::compaction_cut(dialect, messages.iter().copied());
    let Some((last, _)) = cut else {
        return Vec::new();
    };
    messages[..=last]
        .iter()
        .enumerate()
        .flat_map(|(m, message)| {
            dialect
                .items(message)
                .into_iter()
                .filter(move |i| i.kind == ItemKind::Call && super::before_cut(cut, m, i.index))
                .map(|i| i.id.into_owned())
        })
        .collect()
}

/// The id faults of `messages`, as `(item, fault, id)`: each id outside
/// the pattern (calls and results), and each call whose id an earlier call
/// of the request already has. Empty when the provider documents no rule.
/// Judged from the newest compaction on (what is before it is never
/// rewritten, and the provider drops it), a call there reusing an id from
/// before it included.
pub fn faults(dialect: &dyn Dialect, messages: &[&Value]) -> Vec<(At, Fault, String)> {
    faults_after(dialect, messages, &mut HashSet::new())
}

/// [`faults`] of messages that follow others (a transcript read a run of
/// turns at a time): `seen` holds the call ids of the messages before
/// them, and gets theirs.
pub fn faults_after(
    dialect: &dyn Dialect,
    messages: &[&Value],
    seen: &mut HashSet<IdKey>,
) -> Vec<(At, Fault, String)> {
    let mut out = Vec::new();
    if !dialect.checks_ids() {
        return out;
    }
    let cut = super::compaction_cut(dialect, messages.iter().copied());
    seen.extend(
        ids_before_cut(dialect, messages)
            .iter()
            .map(|id| id_key(id)),
    );
    for (m, message) in messages.iter().enumerate() {
        if cut.is_some_and(|(c, _)| m < c) {
            continue;
        }
        for item in dialect.items(message) {
            if super::before_cut(cut, m, item.index) {
                continue;
            }
            let (invalid, call) = match item.kind {
                ItemKind::Call => (Fault::InvalidCallId, true),
                ItemKind::Result => (Fault::InvalidResultId, false),
                ItemKind::Other => continue,
            };
            if !is_valid(&item.id) {
                out.push(((m, item.index), invalid, item.id.to_string()));
            }
            if call && !seen.insert(id_key(&item.id)) {
                out.push(((m, item.index), Fault::ReusedCallId, item.id.to_string()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::anthropic::Anthropic;
    use serde_json::json;

    fn call(id: &str, input: i64) -> Value {
        json!({"type": "tool_use", "id": id, "name": "eval", "input": {"n": input}})
    }
    fn result(id: &str, text: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": text})
    }
    fn a(blocks: Vec<Value>) -> Value {
        json!({"role": "assistant", "content": blocks})
    }
    fn u(blocks: Vec<Value>) -> Value {
        json!({"role": "user", "content": blocks})
    }

    #[test]
    fn kimi_ids_are_sanitized_and_reuses_numbered() {
        let m = [
            a(vec![call("functions.eval:0", 1)]),
            u(vec![result("functions.eval:0", "one")]),
            a(vec![call("functions.eval:0", 2)]),
            u(vec![result("functions.eval:0", "two")]),
            a(vec![call("functions.eval:0", 1)]),
            u(vec![result("functions.eval:0", "one")]),
        ];
        let refs: Vec<&Value> = m.iter().collect();
        let p = plan(&Anthropic, &refs);
        let renamed: Vec<(At, &str)> = p.renames.iter().map(|r| (r.at, r.to.as_str())).collect();
        assert_eq!(
            renamed,
            [
                ((0, 0), "functions_eval_0"),
                ((1, 0), "functions_eval_0"),
                ((2, 0), "functions_eval_0_dup1"),
                ((3, 0), "functions_eval_0_dup1"),
            ]
        );
        // The third pair repeats the first exactly: kept once.
        assert_eq!(
            p.repeats.iter().map(|(at, _, _)| *at).collect::<Vec<_>>(),
            [(4, 0), (5, 0)]
        );
        let f = faults(&Anthropic, &refs);
        assert_eq!(
            f.iter()
                .filter(|(_, f, _)| *f == Fault::ReusedCallId)
                .count(),
            2
        );
        assert_eq!(
            f.iter()
                .filter(|(_, f, _)| *f == Fault::InvalidCallId)
                .count(),
            3
        );
    }

    #[test]
    fn calls_of_one_id_in_one_turn_take_their_results_in_order() {
        let m = [
            a(vec![call("x", 1), call("x", 2)]),
            u(vec![result("x", "1"), result("x", "2")]),
        ];
        let refs: Vec<&Value> = m.iter().collect();
        let p = plan(&Anthropic, &refs);
        let renamed: Vec<(At, &str)> = p.renames.iter().map(|r| (r.at, r.to.as_str())).collect();
        assert_eq!(renamed, [((0, 1), "x_dup1"), ((1, 1), "x_dup1")]);
    }
}
