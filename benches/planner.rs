//! The pure planner under criterion: planning a user message against the
//! replacement state, with no I/O.
//!
//!     cargo bench --bench planner

use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use serde_json::{Value, json};
use toolwire::budget::planner::{Candidate, choose};
use toolwire::budget::{Limits, PreviewMode, ToolPolicy};
use toolwire::budget::{PlanContext, plan_message};
use toolwire::format::Digest;
use toolwire::format::SizeUnit;
use toolwire::state::{Id, Replacement, ReplacementState};

mod support;

fn message(results: usize, size: usize) -> Value {
    let mut rng = fastrand::Rng::with_seed(9);
    let blocks: Vec<Value> = (0..results)
        .map(|i| json!({"type": "tool_result", "tool_use_id": format!("toolu_{i:05}"), "content": toolwire::replay::synthetic::tool_output(&mut rng, size)}))
        .collect();
    json!({"role": "user", "content": blocks})
}

fn bench(c: &mut Criterion) {
    let dir = PathBuf::from("/data/sessions/s/tool-results");
    let never = |_: &str| false;
    let policy = |_: &str| ToolPolicy {
        max_result_chars: Some(Limits::default().max_result_chars),
        preview_mode: PreviewMode::Head,
    };
    let cx = PlanContext {
        dialect: &toolwire::format::anthropic::Anthropic,
        limits: Limits::default(),
        unit: SizeUnit::Chars,
        artifact_dir: &dir,
        is_exempt: &never,
        policy: &policy,
        link_session: None,
    };

    let mut group = c.benchmark_group("plan_message");
    for (results, size) in [(4, 80_000), (32, 10_000), (200, 1_000)] {
        let msg = message(results, size);
        let bytes = (results * size) as u64;
        group.throughput(Throughput::Bytes(bytes));
        let fresh = ReplacementState::default();
        group.bench_with_input(
            BenchmarkId::new("fresh", format!("{results}x{size}")),
            &msg,
            |b, msg| b.iter(|| plan_message(&[msg], &fresh, &cx)),
        );
        // Every result already decided: the reapply path.
        let mut decided = ReplacementState::default();
        let plan = plan_message(&[&msg], &fresh, &cx);
        decided.commit_decisions(plan.fresh.iter().map(|(id, digest)| {
            let r = plan
                .chosen
                .iter()
                .find(|c| &c.tool_use_id == id && c.digest == *digest)
                .map(|c| Replacement::new(&c.replacement));
            (id.clone(), *digest, r)
        }));
        group.bench_with_input(
            BenchmarkId::new("decided", format!("{results}x{size}")),
            &msg,
            |b, msg| b.iter(|| plan_message(&[msg], &decided, &cx)),
        );
    }
    group.finish();

    let candidates: Vec<Candidate> = (0..1000)
        .map(|i| Candidate {
            size: (i * 7919 % 100_000) as u64,
            fresh: i % 3 != 0,
        })
        .collect();
    c.bench_function("choose/1000 candidates", |b| {
        b.iter(|| choose(&candidates, |_| 50_000, 200_000, |_| 2_300))
    });

    // What one decision costs a session of 100,000 decided ids whose state
    // is published (every shard shared with readers): the shard it lands
    // in is copied, so this grows with the shards' size.
    let mut big = ReplacementState::default();
    big.commit_decisions((0..100_000).map(|i| {
        let id = Id::from(format!("toolu_01{i:022}"));
        let digest = Digest::of_value(&json!(i));
        let replacement = (i % 10 == 0).then(|| Replacement::new("preview"));
        (id, digest, replacement)
    }));
    let one = Id::from("toolu_01fresh");
    let digest = Digest::of_value(&json!("fresh"));
    c.bench_function("commit/one id onto 100k, snapshot shared", |b| {
        b.iter(|| {
            let mut state = big.clone();
            state.commit_decisions([(one.clone(), digest, None)]);
            state
        })
    });
}

criterion_group!(benches, bench);

/// `criterion_main!`, then each benchmark this process ran recorded as a
/// row: criterion keeps its figures in files of its own, not in ours.
fn main() {
    support::begin("planner");
    let started = std::time::SystemTime::now();
    benches();
    Criterion::default().configure_from_args().final_summary();
    record_rows(started);
}

/// Criterion's estimates (`<criterion home>/<id>/new/estimates.json`)
/// written by this process, as rows: the median time per iteration. Older
/// files are from runs that named other benchmarks.
fn record_rows(started: std::time::SystemTime) {
    let home = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::target_dir().join("criterion"));
    let mut found = Vec::new();
    let mut dirs = vec![home];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.ends_with("new/estimates.json")
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| m >= started)
            {
                found.push(path);
            }
        }
    }
    let read = |path: &std::path::Path| -> Option<Value> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    };
    let mut rows: Vec<(String, f64)> = found
        .iter()
        .filter_map(|estimates| {
            let id = read(&estimates.with_file_name("benchmark.json"))?["full_id"]
                .as_str()?
                .to_owned();
            let ns = read(estimates)?["median"]["point_estimate"].as_f64()?;
            Some((id, ns))
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    for (id, ns) in rows {
        support::record(support::Row {
            bench: "planner",
            figure: format!("`{id}` (criterion, median)"),
            toolwire: format!("{:.1} µs", ns / 1000.0),
            baseline: "—".into(),
            ratio: "—".into(),
            target: "report".into(),
            holds: None,
        });
    }
}
