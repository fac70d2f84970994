//! `transcript/check`: whether the provider would accept a conversation as
//! far as pairing goes, read through the same pairing as repair and the
//! guard (PROTOCOL.md 10.4). Changes nothing.

use std::path::Path;

use serde_json::Value;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::repair;
use super::stream::Source;
use crate::error::Result;
use crate::format::{self, Dialect, Fault, Format};
use std::collections::HashSet;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptCheckResult {
    pub ok: bool,
    pub violations: Vec<Violation>,
}

/// One fault the provider would refuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// Index of the message the fault is in (0-based, counting messages
    /// only), as the provider numbers `messages.N`.
    pub index: usize,
    /// `missingResult`, `unexpectedResult`, `duplicateResult`,
    /// `resultAfterContent` or `wrongRole`.
    pub kind: String,
    pub ids: Vec<String>,
    /// What the provider answers for this fault (HTTP 400).
    pub provider_error: String,
}

/// Check messages in order.
pub fn check_messages<'m>(
    dialect: &dyn Dialect,
    messages: impl IntoIterator<Item = &'m Value>,
) -> TranscriptCheckResult {
    let messages: Vec<&Value> = messages.into_iter().collect();
    let violations = check_run(dialect, &messages, 0, &mut HashSet::new());
    TranscriptCheckResult {
        ok: violations.is_empty(),
        violations,
    }
}

/// The violations of `messages`, sorted, numbered from `first` on: the
/// whole conversation, or a run of whole turns of it (after which the
/// pairing carries nothing over, see [`super::stream`]) whose earlier
/// messages' call ids are in `seen`.
fn check_run(
    dialect: &dyn Dialect,
    messages: &[&Value],
    first: usize,
    seen: &mut HashSet<format::ids::IdKey>,
) -> Vec<Violation> {
    let pairing = format::pair(dialect, messages.iter().copied());
    let mut violations: Vec<Violation> = Vec::new();
    // The provider's id rules, in its words (PROTOCOL.md 11.2).
    for ((m, index), fault, id) in format::ids::faults_after(dialect, messages, seen) {
        let ids = vec![id];
        let m = first + m;
        violations.push(Violation {
            index: m,
            kind: fault.kind().to_owned(),
            provider_error: dialect.provider_error(fault, m, index, &ids),
            ids,
        });
    }
    // Unanswered calls are one fault per assistant turn, as the provider
    // reports them: all the turn's ids at the turn's first faulty message.
    // Verdicts come in conversation order and turns are runs of messages,
    // so a turn's unanswered calls are one run of them: grouped in one
    // pass (a transcript may hold 200,000 turns).
    let mut turn_of = vec![usize::MAX; messages.len()];
    for (t, turn) in pairing.turns.iter().enumerate() {
        for &m in &turn.messages {
            turn_of[m] = t;
        }
    }
    let unanswered: Vec<&format::ToolVerdict> = pairing
        .verdicts
        .iter()
        .filter(|v| v.fault == Some(Fault::Unanswered))
        .collect();
    for missing in unanswered.chunk_by(|a, b| turn_of[a.message] == turn_of[b.message]) {
        let Some(missing_first) = missing.first() else {
            continue;
        };
        let ids: Vec<String> = missing.iter().map(|v| v.id.clone()).collect();
        let at = first + missing_first.message;
        violations.push(Violation {
            index: at,
            kind: Fault::Unanswered.kind().to_owned(),
            provider_error: dialect.provider_error(
                Fault::Unanswered,
                at,
                missing_first.index,
                &ids,
            ),
            ids,
        });
    }
    for v in pairing.faults() {
        let fault = match v.fault {
            Some(Fault::Unanswered) | None => continue,
            Some(f) => f,
        };
        let ids = vec![v.id.clone()];
        // A late result makes the provider miss it after its call: named at
        // the call's message.
        let (index, at) = match (fault, v.answers) {
            (Fault::Late, Some(call)) => {
                (pairing.verdicts[call].message, pairing.verdicts[call].index)
            }
            _ => (v.message, v.index),
        };
        let index = first + index;
        violations.push(Violation {
            index,
            kind: fault.kind().to_owned(),
            provider_error: dialect.provider_error(fault, index, at, &ids),
            ids,
        });
    }
    violations.sort_by_key(|v| v.index);
    violations
}

/// Check a transcript file (a regular file of a known format).
/// Read in `format`, else in the format its lines say.
///
/// Read as a stream, a run of whole turns at a time ([`super::stream`]):
/// what is held is a run, the call ids met so far and the violations, not
/// the file. The answer is the one [`check_messages`] gives on the whole
/// conversation.
pub fn check_file(format: Option<Format>, path: &Path) -> Result<TranscriptCheckResult> {
    super::wal::recover_beside(path).map_err(|err| crate::error::Error::storage(path, &err))?;
    let (_file, logical, _) = repair::open_regular(path, false)?;
    let source = Source::open(path, &logical)?;
    let dialect = format
        .or(source.content.map(|c| c.format()))
        .unwrap_or_default()
        .dialect();
    let cut = source.compaction_line(dialect)?;
    let mut seen = HashSet::new();
    let mut violations = Vec::new();
    let (parser, lines) = source.each_run(dialect, |run, _| {
        let messages = run.messages();
        if cut.is_some_and(|cut| run.last_line < cut) {
            // Before the newest compaction nothing is judged; its call
            // ids still bind what comes after.
            if dialect.checks_ids() {
                seen.extend(
                    format::ids::call_ids(dialect, &messages).map(|id| format::ids::id_key(&id)),
                );
            }
            return Ok(());
        }
        violations.extend(check_run(dialect, &messages, run.first_message, &mut seen));
        Ok(())
    })?;
    if !parser.recognized && lines > 0 {
        return Err(repair::unrecognized(path, parser.first_type.as_deref()));
    }
    Ok(TranscriptCheckResult {
        ok: violations.is_empty(),
        violations,
    })
}
