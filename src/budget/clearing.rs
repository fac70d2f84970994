//! Clearing old results (PROTOCOL.md 11.3): which results that were sent
//! whole stop being sent, and when.
//!
//! Budgeting caps a result when it is fresh; what makes a long session
//! expensive is every old result being sent again on every later turn. A
//! prefix cache makes the old part cheap (a read costs a tenth of a write
//! at Anthropic), but not free, and any rewrite of an old message breaks
//! the cache from that message on: the whole tail is written again. So
//! clearing is done in batches: nothing changes until the old results
//! still sent whole add up to `triggerChars`, then all of them are replaced
//! in one apply, and the cache is broken once per batch instead of once
//! per result. `cold` waits for the provider's cache to have expired
//! anyway (the session idle for `coldAfterSeconds`), when the rewrite costs
//! nothing extra, with `batch` behaviour kept at four times the trigger so
//! a session that never pauses still gets cleared.
//!
//! [`plan`] is pure: it reads the messages, the replacement state and the
//! apply time it is given (no clock, no I/O), and says which results to
//! clear. The caller persists them, journals the decisions and renders.

use std::collections::HashMap;
use std::sync::Mutex;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::format::OPEN_TAG;
use crate::format::SizeUnit;
use crate::format::size::format_size;
use crate::format::{self, Dialect, Digest, Side};
use crate::state::{Fate, Id, ReplacementState};

use super::pricing::PriceSource;
pub use super::pricing::Prices;

/// When old results are cleared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ClearingMode {
    /// Never.
    Off,
    /// As soon as the old results sent whole reach `triggerChars`.
    Batch,
    /// Only when the provider's cache has gone cold (the session idle for
    /// `coldAfterSeconds`), or at four times `triggerChars`.
    Cold,
    /// When it pays under the provider's prices (PROTOCOL.md 12.1): the
    /// cache reads a batch has run up since it became clearable reach what
    /// clearing it now costs extra, or at once when the cache has expired.
    #[default]
    Auto,
}

/// `clearing` in the configuration (file, `initializationOptions`). The
/// defaults are the ones measured in docs/clearing.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Clearing {
    pub mode: ClearingMode,
    /// Results of this many most recent assistant tool turns are never
    /// cleared.
    pub keep_recent: u64,
    /// Results smaller than this (in `sizeUnit`) are never cleared.
    pub min_chars: u64,
    /// `batch` and `cold`: the old results still sent whole must add up to
    /// this before a batch is cleared.
    pub trigger_chars: u64,
    /// `cold`: how long a session must have been idle for its provider
    /// cache to count as expired.
    pub cold_after_seconds: u64,
    /// Size of the preview a cleared result keeps.
    pub preview_chars: u64,
}

impl Default for Clearing {
    fn default() -> Self {
        Clearing {
            mode: ClearingMode::Auto,
            keep_recent: 3,
            min_chars: 1_000,
            trigger_chars: 40_000,
            cold_after_seconds: 300,
            preview_chars: 200,
        }
    }
}

/// Per-request overrides of [`Clearing`], key by key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClearingOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ClearingMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_recent: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_chars: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_chars: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_after_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_chars: Option<u64>,
}

impl Clearing {
    pub fn with(self, over: Option<&ClearingOverride>) -> Clearing {
        let Some(o) = over else { return self };
        Clearing {
            mode: o.mode.unwrap_or(self.mode),
            keep_recent: o.keep_recent.unwrap_or(self.keep_recent),
            min_chars: o.min_chars.unwrap_or(self.min_chars),
            trigger_chars: o.trigger_chars.unwrap_or(self.trigger_chars),
            cold_after_seconds: o.cold_after_seconds.unwrap_or(self.cold_after_seconds),
            preview_chars: o.preview_chars.unwrap_or(self.preview_chars),
        }
    }

    /// `batch` and `cold`: whether a batch whose old results total `total`
    /// is cleared in an apply made `idle` seconds after the session's
    /// previous one (`None`: not known, as after a restart).
    pub fn fires(&self, total: u64, idle: Option<u64>) -> bool {
        let trigger = self.trigger_chars.max(1);
        match self.mode {
            ClearingMode::Off | ClearingMode::Auto => false,
            ClearingMode::Batch => total >= trigger,
            ClearingMode::Cold => {
                let cold = idle.is_some_and(|s| s > self.cold_after_seconds);
                (cold && total >= trigger) || total >= trigger.saturating_mul(4)
            }
        }
    }
}

/// One result chosen for clearing.
#[derive(Debug, Clone, PartialEq)]
pub struct ToClear {
    /// Index of its message in the messages planned.
    pub message: usize,
    /// Its item index in that message.
    pub block: usize,
    pub tool_use_id: Id,
    pub digest: Digest,
    /// The original's size, in the unit planned with.
    pub size: u64,
}

/// What one apply decided about clearing, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Decision {
    /// A batch was cleared: it pays (`auto`), or reached the trigger
    /// (`batch`, `cold`).
    Cleared,
    /// `auto`: the session was idle past the cache's lifetime, so the
    /// rewrite costs nothing extra: every old result was cleared.
    Expired,
    /// There are old results to clear, but clearing them does not pay yet
    /// (or, in `batch` and `cold`, they are under the trigger).
    Waiting,
    /// Nothing to clear (or clearing is off).
    None,
}

/// `clearing` in `budget/apply`'s result (PROTOCOL.md 12.1).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub mode: ClearingMode,
    pub decision: Decision,
    /// The cache reads the batch weighed has run up since its results
    /// became clearable, in chars at the input price.
    pub rent_chars: u64,
    /// What clearing that batch now costs beyond not clearing it, in chars
    /// at the input price (0 when clearing already saves on this request).
    pub cost_chars: u64,
    /// The prices weighed, and where they came from.
    pub pricing: Prices,
}

/// What [`plan`] decided: the results to clear now, and why.
#[derive(Debug, Clone)]
pub struct Plan {
    pub chosen: Vec<ToClear>,
    pub report: Report,
}

/// What [`plan`] needs besides the messages and the state.
pub struct ClearContext<'a> {
    pub dialect: &'a dyn Dialect,
    pub clearing: Clearing,
    pub unit: SizeUnit,
    /// Whether the tool that produced `tool_use_id` is exempt.
    pub is_exempt: &'a (dyn Fn(&str) -> bool + Sync),
    /// Seconds since the session's previous apply (`None`: not known).
    pub idle: Option<u64>,
    /// The provider's cache prices for this request.
    pub prices: Prices,
}

/// The results of `messages` to clear now, in order, and why.
///
/// An old result stands after the newest compaction and before the
/// `keepRecent` most recent assistant messages that call tools; it is
/// eligible when it is all text, of a tool that is not exempt, not a
/// preview already, at least `minChars`, and was sent whole before (its
/// fate frozen: a result still fresh is the budget's to decide first).
/// `batch` and `cold` clear every eligible result once they add up to the
/// trigger; `auto` weighs batches by what they cost and earn (see
/// [`weigh`]).
pub fn plan(messages: &[Value], state: &ReplacementState, cx: &ClearContext) -> Plan {
    plan_memo(messages, state, cx, &mut Memo::default())
}

/// [`plan`], given digests of results already taken: per message, `(block,
/// digest)` of results as they stand in `messages` (`budget/apply` has
/// them from deciding fresh results, and each is as long to take again as
/// the result is). One of another kind than the id's decisions use is
/// taken again.
pub fn plan_known(
    messages: &[Value],
    state: &ReplacementState,
    cx: &ClearContext,
    known: &[Vec<(usize, Digest)>],
) -> Plan {
    let mut memo = Memo::default();
    for (m, digests) in known.iter().enumerate() {
        memo.known
            .extend(digests.iter().map(|&(block, digest)| ((m, block), digest)));
    }
    plan_memo(messages, state, cx, &mut memo)
}

/// What [`plan_memo`] keeps between calls over the same, growing,
/// messages (a simulation), so each result and message is measured once.
#[derive(Default)]
pub struct Memo {
    /// Sizes and digests of results, by (message, block).
    results: HashMap<(usize, usize), (u64, Digest)>,
    /// Each message's weight (see [`weight`]), by index.
    weights: Vec<Option<u64>>,
    /// Digests of results taken before planning, by (message, block).
    known: HashMap<(usize, usize), Digest>,
}

impl Memo {
    fn result(
        &mut self,
        dialect: &dyn Dialect,
        state: &ReplacementState,
        unit: SizeUnit,
        (message, block): (&Value, usize),
        at: (usize, usize),
        id: &str,
    ) -> (u64, Digest) {
        *self.results.entry(at).or_insert_with(|| {
            let kind = state.digest_kind(id);
            let digest = match self.known.get(&at) {
                Some(&digest) if digest.kind() == Some(kind) => digest,
                _ => super::original_digest(dialect, message, block, kind),
            };
            (dialect.result_content(message, block).size(unit), digest)
        })
    }

    fn weight(&mut self, i: usize, message: &Value) -> u64 {
        if self.weights.len() <= i {
            self.weights.resize(i + 1, None);
        }
        *self.weights[i].get_or_insert_with(|| weight(message))
    }
}

/// An eligible old result, as [`weigh`] sees it.
struct Candidate {
    clear: ToClear,
    /// Chars a request stops sending once it is cleared.
    saving: f64,
    /// Earlier requests that sent it whole while it was already old.
    rented: u64,
}

/// Chars a cleared result's preview takes beyond `previewChars`: the
/// persisted-output tags and the line naming the saved output.
const PREVIEW_OVERHEAD: u64 = 300;

/// [`plan`] with a [`Memo`] kept between calls over the same, growing,
/// messages.
pub fn plan_memo(
    messages: &[Value],
    state: &ReplacementState,
    cx: &ClearContext,
    memo: &mut Memo,
) -> Plan {
    let mut out = Plan {
        chosen: Vec::new(),
        report: Report {
            mode: cx.clearing.mode,
            decision: Decision::None,
            rent_chars: 0,
            cost_chars: 0,
            pricing: cx.prices,
        },
    };
    if cx.clearing.mode == ClearingMode::Off {
        return out;
    }
    let dialect = cx.dialect;
    // What stands before the newest compaction is never sent (PROTOCOL.md
    // 11.2): nothing there is cleared.
    let cut = format::compaction_cut(dialect, messages.iter());
    let start = cut.map_or(0, |(m, _)| m);
    let sides: Vec<Option<Side>> = messages.iter().map(|m| dialect.side(m)).collect();
    // Where the kept turns begin: the keepRecent-th newest assistant
    // message with tool calls (with fewer of them, nothing is old).
    let keep = usize::try_from(cx.clearing.keep_recent).unwrap_or(usize::MAX);
    let calling: Vec<usize> = (start..messages.len())
        .filter(|&i| {
            sides[i] == Some(Side::Assistant) && !format::calls(dialect, &messages[i]).is_empty()
        })
        .collect();
    let kept_from = match keep {
        0 => messages.len(),
        k if calling.len() >= k => calling[calling.len() - k],
        _ => return out,
    };
    // Each model reply starts a run of assistant messages (a Responses
    // turn is several items): one run, one request answered.
    let replies: Vec<usize> = (start..messages.len())
        .filter(|&j| {
            sides[j] == Some(Side::Assistant) && (j == 0 || sides[j - 1] != Some(Side::Assistant))
        })
        .collect();
    let mut candidates = Vec::new();
    let mut total = 0u64;
    for (i, message) in messages.iter().enumerate().take(kept_from).skip(start) {
        if sides[i] != Some(Side::User) {
            continue;
        }
        for (block, id) in format::results(dialect, message) {
            if format::before_cut(cut, i, block) {
                continue;
            }
            let content = dialect.result_content(message, block);
            if content.has_non_text()
                || (cx.is_exempt)(&id)
                || content.first_text().starts_with(OPEN_TAG)
            {
                continue;
            }
            let (size, digest) =
                memo.result(dialect, state, cx.unit, (message, block), (i, block), &id);
            if size < cx.clearing.min_chars || state.fate(&id, digest) != Fate::Frozen {
                continue;
            }
            total += size;
            // It became old when the keepRecent-th calling turn after it
            // was sent; every reply since answered a request that read it.
            let first_after = calling.partition_point(|&c| c <= i);
            let old_at = match keep {
                0 => i,
                k => calling
                    .get(first_after + k - 1)
                    .copied()
                    .unwrap_or(messages.len()),
            };
            let rented = (replies.len() - replies.partition_point(|&j| j <= old_at)) as u64;
            let preview = cx.clearing.preview_chars + PREVIEW_OVERHEAD;
            candidates.push(Candidate {
                clear: ToClear {
                    message: i,
                    block,
                    tool_use_id: Id::from(&*id),
                    digest,
                    size,
                },
                saving: size.saturating_sub(preview) as f64,
                rented,
            });
        }
    }
    if candidates.is_empty() {
        return out;
    }
    // The previous request ended where the newest reply begins: what the
    // cache holds, and what a clearing rewrites from its first result on.
    let cached_end = replies.last().copied().unwrap_or(messages.len());
    let sent = |memo: &mut Memo, i: usize| sent_weight(messages, state, cx, memo, i, &sides);
    let weighed = weigh(&candidates, cached_end, cx.prices, |i| sent(memo, i));
    let (first, decision) = match cx.clearing.mode {
        ClearingMode::Auto => {
            let expired = cx.idle.is_some_and(|s| s > cx.prices.cache_seconds);
            match weighed.paying {
                _ if expired => (Some(0), Decision::Expired),
                Some(p) => (Some(p), Decision::Cleared),
                None => (None, Decision::Waiting),
            }
        }
        _ if cx.clearing.fires(total, cx.idle) => (Some(0), Decision::Cleared),
        _ => (None, Decision::Waiting),
    };
    let shown = first.unwrap_or(0);
    out.report.decision = decision;
    out.report.rent_chars = weighed.rent[shown].round() as u64;
    out.report.cost_chars = weighed.cost[shown].max(0.0).round() as u64;
    if let Some(p) = first {
        out.chosen = candidates.into_iter().skip(p).map(|c| c.clear).collect();
    }
    out
}

/// Rent and cost of each batch [`plan_memo`] can clear: batch `p` is every
/// candidate from the `p`-th on (clearing later ones rewrites less, and
/// saves less).
struct Weighed {
    rent: Vec<f64>,
    cost: Vec<f64>,
    /// The batch that saves most among those that pay: the earliest.
    paying: Option<usize>,
}

/// The rent-or-buy rule. Clearing batch `p` now rewrites everything the
/// cache holds from its first result on (`C`, now without the batch's
/// `S` saved chars) at the write price instead of reading it, and from
/// then on every request reads `S` fewer chars:
///
/// - cost now: `write × (C − S) − read × C`;
/// - rent: `read × Σ saving × rented`, what the batch's results have cost
///   in reads since each became old.
///
/// A batch pays once its rent reaches its cost: deciding so never pays
/// more than twice what the best choice in hindsight would have (the
/// ski-rental bound), whatever the session does next.
fn weigh(
    candidates: &[Candidate],
    cached_end: usize,
    prices: Prices,
    mut sent: impl FnMut(usize) -> u64,
) -> Weighed {
    let (read, write) = (prices.cache_read, prices.cache_write);
    let n = candidates.len();
    // C for each candidate's message: the sent chars from it to the end
    // of the cached prefix, summed from the end.
    let first_message = candidates[0].clear.message;
    let mut from = vec![0f64; cached_end.saturating_sub(first_message) + 1];
    for i in (first_message..cached_end).rev() {
        from[i - first_message] = from[i - first_message + 1] + sent(i) as f64;
    }
    // Unless the prices were set by hand, a batch must also pay at the
    // dearest cache documented, Anthropic's (read 0.1, write 1.25): a
    // conversation a gateway fails over to another provider, or priced at
    // another provider's rates, is then never made dearer either.
    let guard = match prices.source {
        PriceSource::Configured | PriceSource::Request => None,
        PriceSource::Model | PriceSource::Default => Some(super::pricing::GUARD),
    };
    let (mut rent, mut cost) = (vec![0f64; n], vec![0f64; n]);
    let mut guarded = vec![true; n];
    let (mut saved, mut rented) = (0f64, 0f64);
    for p in (0..n).rev() {
        let c = &candidates[p];
        saved += c.saving;
        rented += c.saving * c.rented as f64;
        let rewritten = from
            .get(c.clear.message - first_message)
            .copied()
            .unwrap_or(0.0);
        let weigh_at = |read: f64, write: f64| {
            (
                read * rented,
                write * (rewritten - saved).max(0.0) - read * rewritten,
            )
        };
        (rent[p], cost[p]) = weigh_at(read, write);
        if let Some((read, write)) = guard {
            let (rent, cost) = weigh_at(read, write);
            guarded[p] = rent >= cost;
        }
    }
    let paying = (0..n).find(|&p| {
        rent[p] >= cost[p] && guarded[p] && candidates[p..].iter().any(|c| c.saving > 0.0)
    });
    Weighed { rent, cost, paying }
}

/// Chars message `i` is sent as: its weight, less what the results the
/// state already replaces no longer send.
fn sent_weight(
    messages: &[Value],
    state: &ReplacementState,
    cx: &ClearContext,
    memo: &mut Memo,
    i: usize,
    sides: &[Option<Side>],
) -> u64 {
    let message = &messages[i];
    let mut w = memo.weight(i, message);
    if sides[i] != Some(Side::User) {
        return w;
    }
    for (block, id) in format::results(cx.dialect, message) {
        // Only a result of at least minChars can have been replaced by a
        // clearing; a budget replacement is far larger still.
        if !state.is_decided(&id)
            || cx
                .dialect
                .result_content(message, block)
                .size(SizeUnit::Bytes)
                < cx.clearing.min_chars
        {
            continue;
        }
        let (size, digest) = memo.result(
            cx.dialect,
            state,
            cx.unit,
            (message, block),
            (i, block),
            &id,
        );
        if let Fate::Replaced(r) = state.fate(&id, digest) {
            w = w.saturating_sub(size.saturating_sub(r.size(cx.unit)));
        }
    }
    w
}

/// About how many chars `value` takes as compact JSON: its strings and
/// keys by length, a few chars for each other value and its punctuation.
/// Counted without writing it out, by an explicit walk (values may be
/// nested deeper than the stack allows recursion).
pub fn weight(value: &Value) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::String(s) => s.len() as u64 + 2,
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len() as u64
            }
            Value::Object(map) => {
                stack.extend(map.values());
                2 + map.keys().map(|k| k.len() as u64 + 4).sum::<u64>()
            }
            Value::Number(_) => 4,
            Value::Bool(_) | Value::Null => 4,
        };
    }
    total
}

/// The preview a cleared result is sent as: the persisted-output shape
/// models already know (PROTOCOL.md section 4), saying the output was
/// cleared and where the whole of it can be read: its path, or its link
/// and the tool that reads it, as a persisted result's preview says it.
pub fn preview(
    text: &str,
    original_size: u64,
    saved: &super::preview::Saved<'_>,
    preview_size: u64,
    unit: SizeUnit,
) -> String {
    let first = format!(
        "Old output cleared to save context ({}). {}",
        format_size(original_size),
        saved.named()
    );
    super::preview::head_under(&first, text, preview_size, unit)
}

/// The saved output's file name of a cleared result: its id's, as for any
/// saved output, unless the id was reused for another original, whose
/// output may hold that name; then named by id and original together.
pub fn artifact_name(
    state: &ReplacementState,
    id: &str,
    digest: Digest,
    kind: super::names::ArtifactKind,
) -> String {
    super::names::file_name(&saved_as(state, id, digest), kind)
}

/// What the saved output of a cleared result is named from (and its link
/// names): its id, or id and original together for a reused id's other
/// original (see [`artifact_name`]).
pub fn saved_as(state: &ReplacementState, id: &str, digest: Digest) -> String {
    if state.first_binds(id, digest) {
        id.to_owned()
    } else {
        format!("{id}#{}", digest.hex().unwrap_or_default())
    }
}

/// Environment variable naming a file that holds the current time in
/// seconds since the epoch: a test hook to drive `cold` mode's clock
/// without waiting. Unset in production.
pub const CLOCK_FILE_ENV: &str = "TOOLWIRE_CLOCK_FILE";

/// The time set by [`set_test_clock`] (0: none).
static TEST_CLOCK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A test hook: make [`now_secs`] say `secs` (`None`: the real clock
/// again), for tests that run the server in their own process.
pub fn set_test_clock(secs: Option<u64>) {
    TEST_CLOCK.store(secs.unwrap_or(0), std::sync::atomic::Ordering::SeqCst);
}

/// The apply time, in seconds since the epoch: the test clock when set,
/// else [`CLOCK_FILE_ENV`]'s file when set and readable, else the system
/// clock.
pub fn now_secs() -> u64 {
    let test = TEST_CLOCK.load(std::sync::atomic::Ordering::SeqCst);
    if test > 0 {
        return test;
    }
    if let Some(path) = std::env::var_os(CLOCK_FILE_ENV)
        && let Ok(text) = std::fs::read_to_string(path)
        && let Ok(secs) = text.trim().parse::<f64>()
    {
        return secs.max(0.0) as u64;
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// When each session of this process was last applied, kept apart from the
/// session itself because an idle session leaves memory at about the time
/// its cache goes cold, which is exactly when `cold` needs to know.
static LAST_APPLIED: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

/// Entries past which the oldest day-old ones are dropped.
const LAST_APPLIED_MAX: usize = 100_000;

/// Record an apply of `session` (a key unique in the process) at `now`
/// and return the seconds since its previous one, if known.
pub fn touch(session: &str, now: u64) -> Option<u64> {
    let mut guard = LAST_APPLIED.lock().unwrap_or_else(|p| p.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if map.len() >= LAST_APPLIED_MAX {
        map.retain(|_, at| now.saturating_sub(*at) < 86_400);
    }
    map.insert(session.to_owned(), now)
        .map(|before| now.saturating_sub(before))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str, name: &str) -> Value {
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": {}}]})
    }
    fn result(id: &str, len: usize) -> Value {
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "x".repeat(len)}]})
    }

    #[test]
    fn a_cleared_result_names_its_link_in_place_of_its_path() {
        use crate::budget::preview::{self, Named, Saved};
        let at = |link| Saved {
            path: "/w/sessions/alice.s/tool-results/t1.txt",
            link,
        };
        let path = preview(&"a".repeat(50), 50, &at(None), 10, SizeUnit::Chars);
        assert!(
            path.starts_with("<persisted-output>\nOld output cleared to save context (50 bytes). Full output saved to: /w/sessions/alice.s/tool-results/t1.txt\n\nPreview (first 10 bytes):\naaaaaaaaaa\n"),
            "{path}"
        );
        let linked = preview(
            &"a".repeat(50),
            50,
            &at(Some("toolwire://saved-output/s/t1")),
            10,
            SizeUnit::Chars,
        );
        assert!(
            linked.starts_with("<persisted-output>\nOld output cleared to save context (50 bytes). Full output saved as toolwire://saved-output/s/t1 - read it with the read_saved_output tool (MCP server toolwire).\n\nPreview (first 10 bytes):\n"),
            "{linked}"
        );
        assert!(!linked.contains("/w/"), "{linked}");
        assert_eq!(
            preview::preview_names(&linked),
            Some(Named::Link {
                session: "s".into(),
                tool_use_id: "t1".into()
            })
        );
        assert_eq!(
            preview::preview_targets(&linked, "alice.s")[0],
            ("alice.s".to_owned(), "t1.txt".to_owned())
        );
    }

    /// `n` turns of one call and its result of `len` chars, all sent whole.
    fn conversation(n: usize, len: usize) -> (Vec<Value>, ReplacementState) {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        let mut state = ReplacementState::default();
        for t in 0..n {
            let id = format!("t{t}");
            messages.push(call(&id, if t == 1 { "Exempt" } else { "Read" }));
            let r = result(&id, len);
            let digest = super::super::original_digest(
                &crate::format::anthropic::Anthropic,
                &r,
                0,
                state.digest_kind(&id),
            );
            state.commit_decisions([(crate::state::keep_id(&id), digest, None)]);
            messages.push(r);
        }
        (messages, state)
    }

    fn cx<'a>(
        clearing: Clearing,
        exempt: &'a (dyn Fn(&str) -> bool + Sync),
        idle: Option<u64>,
    ) -> ClearContext<'a> {
        ClearContext {
            dialect: &crate::format::anthropic::Anthropic,
            clearing,
            unit: SizeUnit::Chars,
            is_exempt: exempt,
            idle,
            prices: crate::budget::pricing::resolve(
                crate::budget::pricing::Provider::Anthropic,
                &Default::default(),
                None,
            ),
        }
    }

    fn ids(plan: &Plan) -> Vec<String> {
        plan.chosen
            .iter()
            .map(|c| c.tool_use_id.to_string())
            .collect()
    }

    const NONE_EXEMPT: &(dyn Fn(&str) -> bool + Sync) = &|_: &str| false;

    #[test]
    fn batch_clears_every_old_result_once_the_trigger_is_reached() {
        let clearing = Clearing {
            mode: ClearingMode::Batch,
            keep_recent: 2,
            min_chars: 100,
            trigger_chars: 3_000,
            ..Clearing::default()
        };
        // 4 turns of 1000: the 2 old ones total 2000, under the trigger.
        let (messages, state) = conversation(4, 1_000);
        assert!(
            plan(&messages, &state, &cx(clearing, NONE_EXEMPT, None))
                .chosen
                .is_empty()
        );
        // 5 turns: t0..t2 are old, 3000: all three go, never t3 or t4.
        let (messages, state) = conversation(5, 1_000);
        let chosen = plan(&messages, &state, &cx(clearing, NONE_EXEMPT, None));
        assert_eq!(ids(&chosen), ["t0", "t1", "t2"]);
        assert!(chosen.chosen.iter().all(|c| c.size == 1_000));
    }

    #[test]
    fn never_an_exempt_tool_a_small_result_or_one_already_replaced() {
        let clearing = Clearing {
            mode: ClearingMode::Batch,
            keep_recent: 1,
            min_chars: 500,
            trigger_chars: 1,
            ..Clearing::default()
        };
        let exempt = |id: &str| id == "t1";
        let (mut messages, mut state) = conversation(5, 1_000);
        // t2 small, t3 replaced by the budget when it was fresh.
        messages[6] = result("t2", 100);
        let mut state2 = ReplacementState::default();
        for (id, d, r) in state.decisions() {
            if &**id != "t3" {
                state2.commit_decisions([(id.clone(), d, r.cloned())]);
            }
        }
        let d3 = super::super::original_digest(
            &crate::format::anthropic::Anthropic,
            &messages[8],
            0,
            Digest::NEW,
        );
        state2.commit_decisions([(
            crate::state::keep_id("t3"),
            d3,
            Some(crate::state::Replacement::new("r")),
        )]);
        state = state2;
        let chosen = plan(&messages, &state, &cx(clearing, &exempt, None));
        assert_eq!(ids(&chosen), ["t0"]);
    }

    #[test]
    fn nothing_before_a_compaction() {
        let clearing = Clearing {
            mode: ClearingMode::Batch,
            keep_recent: 1,
            min_chars: 1,
            trigger_chars: 1,
            ..Clearing::default()
        };
        let (mut messages, state) = conversation(6, 1_000);
        // A compaction block in the assistant message calling t2.
        messages[5]["content"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"type": "compaction", "content": "summary"}));
        let chosen = plan(&messages, &state, &cx(clearing, NONE_EXEMPT, None));
        assert_eq!(ids(&chosen), ["t2", "t3", "t4"]);
    }

    #[test]
    fn cold_waits_for_the_idle_gap_or_four_triggers() {
        let clearing = Clearing {
            mode: ClearingMode::Cold,
            keep_recent: 1,
            min_chars: 1,
            trigger_chars: 2_000,
            cold_after_seconds: 300,
            ..Clearing::default()
        };
        let (messages, state) = conversation(4, 1_000);
        // 3000 old: over the trigger, under 4x.
        for idle in [None, Some(10), Some(300)] {
            assert!(
                plan(&messages, &state, &cx(clearing, NONE_EXEMPT, idle))
                    .chosen
                    .is_empty()
            );
        }
        assert_eq!(
            plan(&messages, &state, &cx(clearing, NONE_EXEMPT, Some(301)))
                .chosen
                .len(),
            3
        );
        // 8000 old: cleared warm too.
        let (messages, state) = conversation(9, 1_000);
        assert_eq!(
            plan(&messages, &state, &cx(clearing, NONE_EXEMPT, Some(1)))
                .chosen
                .len(),
            8
        );
        // Off: never.
        let off = Clearing {
            mode: ClearingMode::Off,
            ..clearing
        };
        assert!(
            plan(&messages, &state, &cx(off, NONE_EXEMPT, Some(10_000)))
                .chosen
                .is_empty()
        );
    }

    /// `n` turns of one `len`-char result each, then the decision `auto`
    /// makes at the last of them.
    fn auto_at(n: usize, len: usize, idle: Option<u64>) -> Plan {
        let clearing = Clearing {
            min_chars: 100,
            ..Clearing::default()
        };
        let (messages, state) = conversation(n, len);
        plan(&messages, &state, &cx(clearing, NONE_EXEMPT, idle))
    }

    #[test]
    fn auto_waits_until_the_reads_run_up_reach_the_cost_of_clearing() {
        assert_eq!(Clearing::default().mode, ClearingMode::Auto);
        // Four turns: t0 became old in this very request: no rent yet.
        let p = auto_at(4, 10_000, None);
        assert_eq!(p.report.decision, Decision::Waiting);
        assert_eq!(p.report.rent_chars, 0);
        assert!(p.report.cost_chars > 0);
        assert!(p.chosen.is_empty());
        // Rent grows with every request that reads the old results, and
        // the first apply where it reaches the cost clears: never before.
        let mut cleared_at = None;
        for n in 5..200 {
            let p = auto_at(n, 10_000, None);
            assert!(p.report.decision != Decision::Expired);
            if p.report.decision == Decision::Cleared {
                assert!(p.report.rent_chars >= p.report.cost_chars, "{:?}", p.report);
                assert!(!p.chosen.is_empty());
                cleared_at = Some(n);
                break;
            }
            assert_eq!(p.report.decision, Decision::Waiting);
            assert!(p.report.rent_chars < p.report.cost_chars, "{:?}", p.report);
        }
        let n = cleared_at.expect("clearing pays within 200 turns");
        // Anthropic, results of 10,000 chars (9,500 saved each), read at
        // 0.1 and rewritten at 1.25 with the three kept turns after them:
        // rent 950 × (n−4)(n−3)/2 passes a cost of about 24,000 − 260 n
        // at n = 11.
        assert_eq!(n, 11, "cleared at {n}");
    }

    #[test]
    fn auto_clears_every_old_result_once_the_cache_has_expired() {
        // Anthropic's 5-minute cache: idle 301 s is past it.
        let warm = auto_at(6, 10_000, Some(300));
        assert_eq!(warm.report.decision, Decision::Waiting);
        let p = auto_at(6, 10_000, Some(301));
        assert_eq!(p.report.decision, Decision::Expired);
        assert_eq!(ids(&p), ["t0", "t1", "t2"]);
        // Nothing old: nothing to decide, whatever the idle time.
        let p = auto_at(3, 10_000, Some(10_000));
        assert_eq!(p.report.decision, Decision::None);
    }

    #[test]
    fn a_cheaper_cache_write_clears_sooner() {
        let clearing = Clearing {
            min_chars: 100,
            ..Clearing::default()
        };
        let first_clear = |prices: Prices| {
            (2..200).find(|&n| {
                let (messages, state) = conversation(n, 10_000);
                let cx = ClearContext {
                    prices,
                    ..cx(clearing, NONE_EXEMPT, None)
                };
                plan(&messages, &state, &cx).report.decision == Decision::Cleared
            })
        };
        let anthropic = cx(clearing, NONE_EXEMPT, None).prices;
        let openai = crate::budget::pricing::resolve(
            crate::budget::pricing::Provider::Openai,
            &Default::default(),
            None,
        );
        // At the documented prices a batch must also pay at Anthropic's,
        // the dearest: OpenAI's traffic clears no sooner.
        assert_eq!(first_clear(openai), first_clear(anthropic));
        // Prices set by hand are taken as they are: a cheaper write clears
        // sooner.
        let by_hand = Prices {
            source: PriceSource::Configured,
            ..openai
        };
        let (a, o) = (first_clear(anthropic), first_clear(by_hand));
        assert!(a.is_some() && o.is_some());
        assert!(o < a, "openai {o:?}, anthropic {a:?}");
    }

    #[test]
    fn weight_is_close_to_the_compact_json_length() {
        let v = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x".repeat(5_000)}]});
        let exact = serde_json::to_string(&v).unwrap().len() as f64;
        let w = weight(&v) as f64;
        assert!((w - exact).abs() / exact < 0.05, "{w} vs {exact}");
        // Nesting deeper than recursion would survive is measured too.
        let mut deep = json!("leaf");
        for _ in 0..20_000 {
            deep = Value::Array(vec![deep]);
        }
        assert!(weight(&deep) > 20_000);
        // Dropping it recursively would overflow the stack: unwind by hand.
        let mut v = deep;
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn the_idle_time_is_measured_between_applies_of_one_session() {
        assert_eq!(touch("clearing-test-a", 1_000), None);
        assert_eq!(touch("clearing-test-b", 1_100), None);
        assert_eq!(touch("clearing-test-a", 1_400), Some(400));
        assert_eq!(touch("clearing-test-a", 1_400), Some(0));
    }

    #[test]
    fn overrides_apply_key_by_key() {
        let over = ClearingOverride {
            keep_recent: Some(7),
            mode: Some(ClearingMode::Off),
            ..ClearingOverride::default()
        };
        let c = Clearing::default().with(Some(&over));
        assert_eq!(c.keep_recent, 7);
        assert_eq!(c.mode, ClearingMode::Off);
        assert_eq!(c.min_chars, Clearing::default().min_chars);
    }
}
