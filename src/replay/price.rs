//! `toolwire replay --price`: what a recorded session costs in input, sent
//! raw, through toolwire's budget, and with clearing (PROTOCOL.md 11.3).
//!
//! The model is a prefix cache, the way the providers price one: every
//! model request (the conversation up to each assistant message) is the
//! concatenation of its messages as compact JSON, and it reuses the longest
//! byte prefix it shares with the request before it. Reused bytes are read
//! from the cache, the rest is input written (Anthropic: read 0.1×, write
//! 1.25× the input price; OpenAI and Gemini: cached 0.25×, the rest 1×).
//! Prices are in bytes at the uncached input price, so ratios between the
//! ways are what matters; the system prompt and tool definitions are not
//! in recordings and are left out (they would add the same cached prefix to
//! every way).
//!
//! The budget and clearing are simulated in process with the planners
//! `budget/apply` runs ([`budget::plan_message`], [`clearing::plan`]): the
//! same decisions and the same previews, without writing the saved
//! outputs. Every replaced result's original is saved by `budget/apply`,
//! so toolwire's ways keep every byte recoverable; the floor (every result
//! a fixed stub from its first turn, nothing saved) is the cheapest any
//! result trimming can be, and keeps nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::Step;
use crate::budget::clearing::{self, Clearing, ClearingMode};
use crate::budget::pricing::{self, Prices, PricingConfig};
use crate::budget::{self, PlanContext};
use crate::budget::{Limits, PreviewMode, ToolPolicy, Tools};
use crate::format::SizeUnit;
use crate::format::{self, Format, Side};
use crate::state::{Id, Replacement, ReplacementState};

pub use crate::budget::pricing::Provider;

/// What the simulated toolwire runs with.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub limits: Limits,
    pub unit: SizeUnit,
    pub preview_mode: PreviewMode,
    pub tools: Tools,
    pub exempt_tools: Vec<String>,
    /// The clearing way compared with `auto` (its mode: `batch` unless
    /// asked otherwise); `auto` runs with the same other settings.
    pub clearing: Clearing,
    /// `[pricing]`: the cache prices, also those the session is priced at.
    pub pricing: PricingConfig,
}

/// One way of sending the session, priced.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Way {
    pub name: String,
    /// Σ over requests of cached bytes × read rate + the rest × write rate.
    pub priced: f64,
    /// `priced` over the raw way's.
    pub vs_raw: f64,
    /// Request bytes over all requests.
    pub input_bytes: u64,
    /// Of those, the bytes read from the cache.
    pub cached_bytes: u64,
    pub cache_hit_rate: f64,
    /// Share of the tool output's bytes whose full text is still sent or
    /// saved where it can be read back.
    pub recoverable: f64,
    /// Requests whose prefix broke before the previous request's end.
    pub cache_breaks: u64,
    /// Results clearing replaced, and in how many batches.
    pub cleared_results: u64,
    pub clearing_batches: u64,
    /// (raw − this) / (raw − floor): the share of the avoidable cost this
    /// way saves; 1 when nothing is avoidable.
    pub captured: f64,
}

/// The session priced every way.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pricing {
    pub provider: Provider,
    /// The prices every way is priced at, and `auto` weighs with.
    pub prices: Prices,
    pub requests: u64,
    pub tool_results: u64,
    pub tool_output_bytes: u64,
    pub raw: Way,
    pub budget: Way,
    /// Clearing in the mode compared (`batch` by default).
    pub batch: Way,
    /// Clearing in `auto` mode, the default.
    pub auto: Way,
    pub floor: Way,
}

/// The fixed stub the floor sends for every result.
const STUB: &str = "[output cleared]";

/// Where the simulated saved outputs are said to be (only the length of
/// the path matters, in the previews).
const ARTIFACT_DIR: &str = "/home/user/project/.toolwire/sessions/replay/tool-results";

/// How a way renders a message about to be sent, and whether it rewrote
/// earlier ones.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Raw,
    Budget,
    Clearing(ClearingMode),
    Floor,
}

/// A way being simulated: what each message is sent as now, and the cost
/// so far.
struct Sim {
    kind: Kind,
    sent: Vec<Arc<str>>,
    /// The messages of the previous request, as they were sent.
    previous: Vec<Arc<str>>,
    state: ReplacementState,
    way: Way,
    memo: clearing::Memo,
}

impl Sim {
    fn new(kind: Kind, name: &str) -> Sim {
        Sim {
            kind,
            sent: Vec::new(),
            previous: Vec::new(),
            state: ReplacementState::default(),
            way: Way {
                name: name.to_owned(),
                ..Way::default()
            },
            memo: clearing::Memo::default(),
        }
    }

    /// Price one request: the messages sent so far.
    fn request(&mut self, rates: (f64, f64)) {
        let total: u64 = self.sent.iter().map(|m| m.len() as u64 + 1).sum();
        let mut prefix = 0u64;
        let mut whole = true;
        for (i, old) in self.previous.iter().enumerate() {
            match self.sent.get(i) {
                Some(new) if Arc::ptr_eq(old, new) || old == new => prefix += old.len() as u64 + 1,
                Some(new) => {
                    prefix += common_prefix(old.as_bytes(), new.as_bytes()) as u64;
                    whole = false;
                    break;
                }
                None => {
                    whole = false;
                    break;
                }
            }
        }
        if !whole {
            self.way.cache_breaks += 1;
        }
        let prefix = prefix.min(total);
        self.way.input_bytes += total;
        self.way.cached_bytes += prefix;
        self.way.priced += prefix as f64 * rates.0 + (total - prefix) as f64 * rates.1;
        self.previous = self.sent.clone();
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn json(message: &Value) -> Arc<str> {
    Arc::from(serde_json::to_string(message).unwrap_or_default())
}

/// Price `steps` (a recording in `format`) for `provider`.
pub fn price(steps: &[Step], format: Format, provider: Provider, settings: &Settings) -> Pricing {
    let dialect = format.dialect();
    let prices = pricing::resolve(provider, &settings.pricing, None);
    let rates = (prices.cache_read, prices.cache_write);
    let unit = settings.unit;
    let dir = PathBuf::from(ARTIFACT_DIR);
    let mut names: HashMap<String, String> = HashMap::new();
    let mut originals: Vec<Value> = Vec::new();
    let compared = match settings.clearing.mode {
        ClearingMode::Auto => ClearingMode::Batch,
        mode => mode,
    };
    let compared_name = match compared {
        ClearingMode::Off => "clearing off",
        ClearingMode::Batch => "batch",
        ClearingMode::Cold => "cold",
        ClearingMode::Auto => "auto",
    };
    let mut sims = [
        Sim::new(Kind::Raw, "raw"),
        Sim::new(Kind::Budget, "budget"),
        Sim::new(Kind::Clearing(compared), compared_name),
        Sim::new(Kind::Clearing(ClearingMode::Auto), "auto"),
        Sim::new(Kind::Floor, "floor"),
    ];
    let mut requests = 0u64;
    let mut tool_results = 0u64;
    let mut tool_output_bytes = 0u64;

    for step in steps {
        let Step::Message(msg) = step else { continue };
        let items: Vec<Value> = match msg {
            Value::Array(items) => items.clone(),
            one => vec![one.clone()],
        };
        // A model request goes out before each model response.
        if items
            .iter()
            .any(|m| dialect.side(m) == Some(Side::Assistant))
            && !originals.is_empty()
        {
            requests += 1;
            for sim in &mut sims {
                sim.request(rates);
            }
        }
        for item in items {
            for (id, name) in format::calls(dialect, &item) {
                names.insert(id.into_owned(), name.into_owned());
            }
            for (i, _) in format::results(dialect, &item) {
                tool_results += 1;
                tool_output_bytes += dialect.result_content(&item, i).size(SizeUnit::Bytes);
            }
            originals.push(item);
        }
        // Messages appended: each way renders them, and clearing may
        // rewrite earlier ones.
        let policy = |id: &str| {
            let name = names.get(id).map(String::as_str);
            ToolPolicy::resolve(
                &settings.tools,
                name,
                &settings.limits,
                settings.preview_mode,
            )
        };
        let is_exempt = |id: &str| {
            names
                .get(id)
                .is_some_and(|n| settings.exempt_tools.iter().any(|e| e == n))
                || policy(id).max_result_chars.is_none()
        };
        let pcx = PlanContext {
            dialect,
            limits: settings.limits,
            unit,
            artifact_dir: &dir,
            is_exempt: &is_exempt,
            policy: &policy,
            link_session: None,
        };
        for sim in &mut sims {
            advance(sim, &originals, &pcx, settings, prices);
        }
    }

    let [mut raw, mut budget, mut batch, mut auto, mut floor] = sims;
    let raw_price = raw.way.priced;
    let floor_price = floor.way.priced;
    let finish = |sim: &mut Sim, recoverable: f64| {
        let way = &mut sim.way;
        way.vs_raw = if raw_price > 0.0 {
            way.priced / raw_price
        } else {
            1.0
        };
        way.cache_hit_rate = if way.input_bytes > 0 {
            way.cached_bytes as f64 / way.input_bytes as f64
        } else {
            0.0
        };
        way.recoverable = recoverable;
        let avoidable = raw_price - floor_price;
        way.captured = if avoidable > 0.0 {
            (raw_price - way.priced) / avoidable
        } else {
            1.0
        };
    };
    finish(&mut raw, 1.0);
    // Every result toolwire replaced has its original saved; the rest are
    // sent whole.
    finish(&mut budget, 1.0);
    finish(&mut batch, 1.0);
    finish(&mut auto, 1.0);
    finish(&mut floor, 0.0);
    Pricing {
        provider,
        prices,
        requests,
        tool_results,
        tool_output_bytes,
        raw: raw.way,
        budget: budget.way,
        batch: batch.way,
        auto: auto.way,
        floor: floor.way,
    }
}

/// Bring `sim` up to date with `originals` (messages were appended).
fn advance(
    sim: &mut Sim,
    originals: &[Value],
    pcx: &PlanContext,
    settings: &Settings,
    prices: Prices,
) {
    let dialect = pcx.dialect;
    let first_new = sim.sent.len();
    for message in &originals[first_new..] {
        let mut out = message.clone();
        match sim.kind {
            Kind::Raw => {}
            Kind::Floor => {
                for (i, _) in format::results(dialect, message) {
                    dialect.put_replacement(&mut out, i, STUB);
                }
            }
            Kind::Budget | Kind::Clearing(_) => {
                if dialect.side(message) == Some(Side::User)
                    && !format::results(dialect, message).is_empty()
                {
                    budget::decide(&[message], &mut sim.state, pcx);
                    budget::render_message(&mut out, &sim.state, pcx);
                }
            }
        }
        sim.sent.push(json(&out));
    }
    let Kind::Clearing(mode) = sim.kind else {
        return;
    };
    if first_new == originals.len() {
        return;
    }
    let ccx = clearing::ClearContext {
        dialect,
        clearing: Clearing {
            mode,
            ..settings.clearing
        },
        unit: pcx.unit,
        is_exempt: pcx.is_exempt,
        // Recordings carry no reliable times: `cold` clears at 4× only,
        // `auto` never finds the cache expired.
        idle: None,
        prices,
    };
    let to_clear = clearing::plan_memo(originals, &sim.state, &ccx, &mut sim.memo).chosen;
    if to_clear.is_empty() {
        return;
    }
    let mut touched: Vec<usize> = Vec::new();
    let clear: Vec<(Id, format::Digest, Replacement)> = to_clear
        .iter()
        .map(|c| {
            let content = dialect.result_content(&originals[c.message], c.block);
            let kind = if content.is_text() {
                crate::artifact::ArtifactKind::Text
            } else {
                crate::artifact::ArtifactKind::Json
            };
            let name = clearing::artifact_name(&sim.state, &c.tool_use_id, c.digest, kind);
            let path = format!("{ARTIFACT_DIR}/{name}");
            let text = clearing::preview(
                &content.preview_text(),
                c.size,
                &crate::budget::preview::Saved {
                    path: &path,
                    link: None,
                },
                settings.clearing.preview_chars,
                pcx.unit,
            );
            if touched.last() != Some(&c.message) {
                touched.push(c.message);
            }
            (c.tool_use_id.clone(), c.digest, Replacement::new(&text))
        })
        .collect();
    sim.way.cleared_results += sim.state.clear(clear) as u64;
    sim.way.clearing_batches += 1;
    for i in touched {
        let mut out = originals[i].clone();
        budget::render_message(&mut out, &sim.state, pcx);
        sim.sent[i] = json(&out);
    }
}

/// Megabytes with one decimal.
fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1_000_000.0)
}

/// The table a user reads in ten seconds.
pub fn render(p: &Pricing, what: &str) -> String {
    let (read, write) = (p.prices.cache_read, p.prices.cache_write);
    let mut out = format!(
        "{what}: {} requests, {} tool results ({} of tool output), priced for {:?}\n\n",
        p.requests,
        p.tool_results,
        mb(p.tool_output_bytes as f64),
        p.provider
    );
    out.push_str(
        "                     priced input    vs raw   cache hit   recoverable   captured\n",
    );
    for way in [&p.raw, &p.budget, &p.batch, &p.auto, &p.floor] {
        let name = match way.name.as_str() {
            "floor" => "floor (all stubbed)",
            "auto" => "auto (default)",
            name => name,
        };
        out.push_str(&format!(
            "  {name:<19} {:>12}   {:>5.2}×   {:>7.1}%   {:>9.0}%   {:>7.0}%\n",
            mb(way.priced),
            way.vs_raw,
            way.cache_hit_rate * 100.0,
            way.recoverable * 100.0,
            way.captured * 100.0,
        ));
    }
    out.push_str(&format!(
        "\n{}: {} results in {} batch(es); auto: {} results in {} batch(es).\n\
         priced input: request bytes at the input price, cache reads at {read}×, the rest at {write}×;\n\
         recoverable: tool output still sent whole or saved where it can be read back;\n\
         captured: the share of the avoidable cost (raw − floor) each way saves.\n",
        p.batch.name,
        p.batch.cleared_results,
        p.batch.clearing_batches,
        p.auto.cleared_results,
        p.auto.clearing_batches,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::clearing::ClearingMode;
    use serde_json::json;

    /// Three turns, every figure computed by hand.
    ///
    /// user "go" (U0), assistant call t1 (A1), user result t1 (R1),
    /// assistant call t2 (A2), user result t2 (R2), assistant "done" (A3):
    /// three requests, [U0], [U0 A1 R1], [U0 A1 R1 A2 R2]. Each message
    /// costs its compact JSON plus one separator byte.
    #[test]
    fn three_turns_priced_by_hand() {
        let u0 = json!({"role": "user", "content": "go"});
        let a1 = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]});
        let r1 = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a".repeat(100)}]});
        let a2 = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "Read", "input": {}}]});
        let r2 = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "b".repeat(100)}]});
        let a3 = json!({"role": "assistant", "content": "done"});
        let len = |v: &Value| serde_json::to_string(v).unwrap().len() as f64 + 1.0;
        let (u0n, a1n, r1n, a2n, r2n) = (len(&u0), len(&a1), len(&r1), len(&a2), len(&r2));
        // Sizes as the JSON spells them, counted by hand: 30 + 1, 87 + 1,
        // and 82 around the 100-char result + 1.
        assert_eq!(u0n, 31.0);
        assert_eq!(a1n, 88.0);
        assert_eq!(r1n, 183.0);
        let steps: Vec<Step> = [u0, a1, r1.clone(), a2, r2.clone(), a3]
            .into_iter()
            .map(Step::Message)
            .collect();

        // Raw, Anthropic: request 1 writes U0; request 2 reads U0 and
        // writes A1 R1; request 3 reads U0 A1 R1 and writes A2 R2.
        let p = price(
            &steps,
            Format::Anthropic,
            Provider::Anthropic,
            &Settings::default(),
        );
        assert_eq!(p.requests, 3);
        assert_eq!(p.tool_results, 2);
        assert_eq!(p.tool_output_bytes, 200);
        let raw = 1.25 * u0n
            + (0.1 * u0n + 1.25 * (a1n + r1n))
            + (0.1 * (u0n + a1n + r1n) + 1.25 * (a2n + r2n));
        assert!(
            (p.raw.priced - raw).abs() < 1e-9,
            "{} vs {raw}",
            p.raw.priced
        );
        let input = u0n + (u0n + a1n + r1n) + (u0n + a1n + r1n + a2n + r2n);
        assert_eq!(p.raw.input_bytes as f64, input);
        assert_eq!(p.raw.cached_bytes as f64, u0n + (u0n + a1n + r1n));
        assert_eq!(p.raw.cache_breaks, 0);
        // Nothing is over the budget's limits: the budget is raw.
        assert_eq!(p.budget.priced, p.raw.priced);

        // The floor: every result the 16-byte stub from its first turn,
        // 100 - 16 = 84 bytes fewer per result message.
        let (f1, f2) = (r1n - 84.0, r2n - 84.0);
        let floor = 1.25 * u0n
            + (0.1 * u0n + 1.25 * (a1n + f1))
            + (0.1 * (u0n + a1n + f1) + 1.25 * (a2n + f2));
        assert!((p.floor.priced - floor).abs() < 1e-9);

        let o = price(
            &steps,
            Format::Anthropic,
            Provider::Openai,
            &Settings::default(),
        );
        // OpenAI, no model named: cached 0.1, the rest 1.
        let openai = u0n + (0.1 * u0n + a1n + r1n) + (0.1 * (u0n + a1n + r1n) + a2n + r2n);
        assert!((o.raw.priced - openai).abs() < 1e-9);

        // Clearing with keepRecent 1, minChars 50, trigger 100: after R2,
        // t1 (100 chars) stands before the newest calling turn and is
        // cleared; request 3 breaks the cache inside R1.
        let settings = Settings {
            clearing: Clearing {
                mode: ClearingMode::Batch,
                keep_recent: 1,
                min_chars: 50,
                trigger_chars: 100,
                cold_after_seconds: 300,
                preview_chars: 10,
            },
            ..Settings::default()
        };
        let c = price(&steps, Format::Anthropic, Provider::Anthropic, &settings);
        assert_eq!(c.batch.cleared_results, 1);
        assert_eq!(c.batch.clearing_batches, 1);
        assert_eq!(c.batch.cache_breaks, 1);
        // Saved under its id, as any saved output.
        let path = format!("{ARTIFACT_DIR}/t1.txt");
        let saved = crate::budget::preview::Saved {
            path: &path,
            link: None,
        };
        let preview = clearing::preview(&"a".repeat(100), 100, &saved, 10, SizeUnit::Chars);
        let mut r1c = r1.clone();
        r1c["content"][0]["content"] = Value::String(preview);
        let r1cn = len(&r1c);
        // The bytes R1 and its cleared form share: up to the result text.
        let shared = common_prefix(
            serde_json::to_string(&r1).unwrap().as_bytes(),
            serde_json::to_string(&r1c).unwrap().as_bytes(),
        ) as f64;
        let third = u0n + a1n + r1cn + a2n + r2n;
        let cleared = 1.25 * u0n
            + (0.1 * u0n + 1.25 * (a1n + r1n))
            + (0.1 * (u0n + a1n + shared) + 1.25 * (third - u0n - a1n - shared));
        assert!(
            (c.batch.priced - cleared).abs() < 1e-9,
            "{} vs {cleared}",
            c.batch.priced
        );
        assert_eq!(c.batch.recoverable, 1.0);
        let captured = (p.raw.priced - cleared) / (p.raw.priced - floor);
        assert!((c.batch.captured - captured).abs() < 1e-9);
        // Three requests never pay back a rewrite: auto clears nothing.
        assert_eq!(c.auto.cleared_results, 0);
        assert_eq!(c.auto.priced, c.budget.priced);
    }
}
