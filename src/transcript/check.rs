//! `transcript/check`: whether the provider would accept a conversation as
//! far as pairing goes, read through the same pairing as repair and the
//! guard (PROTOCOL.md 10.4). Changes nothing.

use std::path::Path;

use serde_json::Value;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::repair;
use crate::error::Result;
use crate::format::{self, Dialect, Fault, Format};

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
    let pairing = format::pair(dialect, messages.iter().copied());
    let mut violations: Vec<Violation> = Vec::new();
    // The provider's id rules, in its words (PROTOCOL.md 11.2).
    for ((m, index), fault, id) in format::ids::faults(dialect, &messages) {
        let ids = vec![id];
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
        let Some(first) = missing.first() else {
            continue;
        };
        let ids: Vec<String> = missing.iter().map(|v| v.id.clone()).collect();
        violations.push(Violation {
            index: first.message,
            kind: Fault::Unanswered.kind().to_owned(),
            provider_error: dialect.provider_error(
                Fault::Unanswered,
                first.message,
                first.index,
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
        violations.push(Violation {
            index,
            kind: fault.kind().to_owned(),
            provider_error: dialect.provider_error(fault, index, at, &ids),
            ids,
        });
    }
    violations.sort_by_key(|v| v.index);
    TranscriptCheckResult {
        ok: violations.is_empty(),
        violations,
    }
}

/// Check a transcript file (a regular file of a known format).
/// Read in `format`, else in the format its lines say.
pub fn check_file(format: Option<Format>, path: &Path) -> Result<TranscriptCheckResult> {
    super::wal::recover_beside(path).map_err(|err| crate::error::Error::storage(path, &err))?;
    let (_file, input, _) = repair::read_regular_shared(path)?;
    let (content, input) = repair::transcript_of(path, input)?;
    let parsed = repair::parse(&input);
    if !parsed.recognized && !input.is_empty() {
        return Err(repair::unrecognized(path, &parsed));
    }
    let dialect = format
        .or(content.map(|c| c.format()))
        .unwrap_or_default()
        .dialect();
    Ok(check_messages(dialect, parsed.messages()))
}
