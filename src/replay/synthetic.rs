//! Synthetic sessions for load and benchmarks: `replay --synthetic N --seed S`.
//!
//! Tool-result sizes follow what coding agents see: most are small, a fifth
//! are tens of kilobytes, and a heavy tail reaches several megabytes. The
//! same `(turns, seed)` always yields the same session.

use serde_json::{Value, json};

use super::Step;

/// A result size drawn from a heavy-tailed mix.
pub fn result_size(rng: &mut fastrand::Rng) -> usize {
    match rng.u32(0..100) {
        0..70 => rng.usize(50..4_000),
        70..90 => rng.usize(4_000..40_000),
        90..98 => rng.usize(40_000..300_000),
        _ => rng.usize(300_000..4_000_000),
    }
}

/// Text of about `size` characters that reads like tool output.
pub fn tool_output(rng: &mut fastrand::Rng, size: usize) -> String {
    const FILES: [&str; 6] = [
        "src/codec.rs",
        "src/server.rs",
        "src/session.rs",
        "tests/e2e.rs",
        "src/budget/planner.rs",
        "Cargo.toml",
    ];
    const WORDS: [&str; 10] = [
        "let", "match", "frame", "session", "commit", "error", "Result", "async", "await", "state",
    ];
    let mut out = String::with_capacity(size + 100);
    let mut line = 1;
    while out.len() < size {
        let file = FILES[rng.usize(..FILES.len())];
        out.push_str(file);
        out.push(':');
        out.push_str(&line.to_string());
        out.push_str(": ");
        for _ in 0..rng.usize(3..10) {
            out.push_str(WORDS[rng.usize(..WORDS.len())]);
            out.push(' ');
        }
        out.push('\n');
        line += rng.usize(1..20);
    }
    out.truncate(size);
    out
}

/// A session of `turns` assistant turns.
pub fn generate(turns: usize, seed: u64) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut steps = vec![Step::Message(
        json!({"role": "user", "content": "Please work through the failing tests."}),
    )];
    for turn in 0..turns {
        let calls = match rng.u32(0..10) {
            0..6 => 1,
            6..9 => 2,
            _ => 3,
        };
        let ids: Vec<String> = (0..calls)
            .map(|c| format!("toolu_{seed:x}_{turn}_{c}"))
            .collect();
        let uses: Vec<Value> = ids
            .iter()
            .map(|id| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "cargo test"}}))
            .collect();
        let mut content = vec![json!({"type": "text", "text": format!("Step {turn}.")})];
        content.extend(uses);
        steps.push(Step::Message(
            json!({"role": "assistant", "content": content}),
        ));
        if turn % 25 == 24 {
            steps.push(Step::Interrupt("user pressed escape".into()));
            steps.push(Step::Message(
                json!({"role": "user", "content": "Stop that; try another way."}),
            ));
            continue;
        }
        let results: Vec<Value> = ids
            .iter()
            .map(|id| {
                let size = result_size(&mut rng);
                json!({"type": "tool_result", "tool_use_id": id, "content": tool_output(&mut rng, size)})
            })
            .collect();
        steps.push(Step::Message(json!({"role": "user", "content": results})));
    }
    steps
}
