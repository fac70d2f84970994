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

#[cfg(test)]
mod tests {
    //! Reading a file as a stream must answer as reading it whole does:
    //! generated transcripts full of faults, judged a turn pair at a time
    //! (runs end at every boundary under test), against the conversation
    //! judged whole.
    use super::super::{check, repair};
    use crate::format::Format;
    use serde_json::{Value, json};

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    fn id(rng: &mut Rng) -> String {
        // A small pool: ids are reused across and within turns; some are
        // outside the provider's pattern.
        let n = rng.below(12);
        if rng.chance(10) {
            format!("functions.t:{n}")
        } else {
            format!("t{n}")
        }
    }

    fn anthropic_turns(rng: &mut Rng, out: &mut Vec<Value>) {
        let mut calls = Vec::new();
        let mut content = Vec::new();
        if rng.chance(5) {
            content.push(json!({"type": "compaction", "content": "summary"}));
        }
        if rng.chance(40) {
            content.push(json!({"type": "text", "text": "thinking"}));
        }
        for _ in 0..rng.below(4) {
            let id = id(rng);
            content.push(
                json!({"type": "tool_use", "id": id, "name": "t", "input": {"n": rng.below(3)}}),
            );
            calls.push(id);
        }
        out.push(json!({"role": "assistant", "content": content}));
        if rng.chance(10) {
            out.push(json!({"role": "assistant", "content": "more"}));
        }
        let mut results = Vec::new();
        if rng.chance(10) {
            results.push(json!({"type": "text", "text": "first"}));
        }
        for call in &calls {
            if rng.chance(80) {
                results.push(json!({"type": "tool_result", "tool_use_id": call, "content": format!("r{}", rng.below(2))}));
            }
            if rng.chance(5) {
                results
                    .push(json!({"type": "tool_result", "tool_use_id": call, "content": "again"}));
            }
        }
        if rng.chance(8) {
            results
                .push(json!({"type": "tool_result", "tool_use_id": id(rng), "content": "orphan"}));
        }
        if rng.chance(3) {
            results.push(json!({"type": "tool_use", "id": id(rng), "name": "t", "input": {}}));
        }
        if results.is_empty() || rng.chance(10) {
            out.push(json!({"role": "user", "content": "go on"}));
        }
        if !results.is_empty() {
            out.push(json!({"role": "user", "content": results}));
        }
    }

    fn chat_turns(rng: &mut Rng, out: &mut Vec<Value>) {
        let calls: Vec<String> = (0..rng.below(3)).map(|_| id(rng)).collect();
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "t", "arguments": "{}"}}))
            .collect();
        out.push(json!({"role": "assistant", "content": null, "tool_calls": tool_calls}));
        for call in &calls {
            if rng.chance(80) {
                out.push(json!({"role": "tool", "tool_call_id": call, "content": "ok"}));
            }
        }
        if rng.chance(30) {
            out.push(json!({"role": "user", "content": "next"}));
        }
    }

    /// A transcript file's bytes: messages with records and other lines
    /// between them, maybe a torn last line.
    fn transcript(rng: &mut Rng, format: Format) -> Vec<u8> {
        let mut messages = Vec::new();
        for _ in 0..rng.below(40) {
            match format {
                Format::OpenaiChat => chat_turns(rng, &mut messages),
                _ => anthropic_turns(rng, &mut messages),
            }
        }
        let mut bytes = Vec::new();
        if format != Format::Anthropic {
            bytes.extend_from_slice(
                format!(
                    "{{\"type\":\"session\",\"format\":\"{}\"}}\n",
                    format.name()
                )
                .as_bytes(),
            );
        }
        for m in messages {
            if rng.chance(5) {
                bytes.extend_from_slice(b"{\"type\":\"seen\",\"toolUseIds\":[\"t1\"]}\n");
            }
            if rng.chance(2) {
                bytes.extend_from_slice(b"not json\n");
            }
            let mut line = json!({"type": "message", "message": m}).to_string();
            if rng.chance(50) {
                // A compaction spelled with an escape is one too.
                line = line.replace("\"compaction\"", "\"\\u0063ompaction\"");
            }
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        if rng.chance(10) {
            bytes.extend_from_slice(b"{\"type\":\"message\",\"mess");
        }
        bytes
    }

    #[test]
    fn check_and_repair_of_a_file_read_as_a_stream_answer_as_the_whole_conversation() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut changed = 0;
        for case in 0..300 {
            let format = if case % 4 == 3 {
                Format::OpenaiChat
            } else {
                Format::Anthropic
            };
            let bytes = transcript(&mut rng, format);
            let path = dir.path().join(format!("t{case}.jsonl"));
            std::fs::write(&path, &bytes).unwrap();
            let what = String::from_utf8_lossy(&bytes).into_owned();

            let parsed = repair::parse(&bytes);
            let whole = check::check_messages(format.dialect(), parsed.messages());
            let streamed = check::check_file(None, &path).unwrap();
            assert_eq!(streamed, whole, "check of\n{what}");

            let (out, mut report, did) = repair::repair_bytes(format, &bytes);
            report.changed = did;
            let dry = repair::repair_file(&path, None, true).unwrap();
            assert_eq!(dry, report, "repair --dry-run of\n{what}");
            let done = repair::repair_file(&path, None, false).unwrap();
            assert_eq!(done, report, "repair of\n{what}");
            let now = std::fs::read(&path).unwrap();
            assert_eq!(
                now,
                if did { out } else { bytes },
                "repaired file of\n{what}"
            );
            changed += usize::from(did);
        }
        // The cases exercise repairs, not only valid files.
        assert!(changed > 100, "only {changed} of 300 cases changed");
    }
}
