//! The pure planner under criterion: planning a user message against the
//! replacement state, with no I/O.
//!
//!     cargo bench --bench planner

use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use toolwire::budget::planner::{Candidate, choose};
use toolwire::budget::{PlanContext, plan_message};
use toolwire::config::{Limits, PreviewMode, SizeUnit, ToolPolicy};
use toolwire::format::Digest;
use toolwire::state::{Id, Replacement, ReplacementState};

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
criterion_main!(benches);
