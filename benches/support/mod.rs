//! What the bench targets share: the conversations they send, where they
//! work, and which of their parts a run asked for. Each target uses part
//! of it.
#![allow(dead_code)]

use serde_json::{Value, json};

/// One call and its Anthropic result.
pub fn pair(id: &str, body: &str) -> [Value; 2] {
    [
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "make"}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": body}]}),
    ]
}

/// One call and its result in `format`.
pub fn pair_in(format: &str, id: &str, body: &str) -> [Value; 2] {
    match format {
        "openai-chat" => [
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"make\"}"}}]}),
            json!({"role": "tool", "tool_call_id": id, "content": body}),
        ],
        "openai-responses" => [
            json!({"type": "function_call", "call_id": id, "name": "Bash", "arguments": "{\"command\":\"make\"}"}),
            json!({"type": "function_call_output", "call_id": id, "output": body}),
        ],
        "gemini" => [
            json!({"role": "model", "parts": [{"functionCall": {"id": id, "name": "Bash", "args": {"command": "make"}}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"id": id, "name": "Bash", "response": {"output": body}}}]}),
        ],
        _ => pair(id, body),
    }
}

/// The directory a bench works in: a fresh temporary directory under
/// `TOOLWIRE_BENCH_DIR` when set (to measure another disk), else under the
/// system's temporary directory; removed when dropped.
pub fn bench_root() -> tempfile::TempDir {
    tempfile::tempdir_in(
        std::env::var("TOOLWIRE_BENCH_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    )
    .unwrap()
}

/// The parts named on the command line (`cargo bench --bench X -- a b`;
/// flags such as `--large` are not parts): a part runs when none is named
/// or when it is one of them.
pub struct Parts(Vec<String>);

impl Parts {
    pub fn from_args() -> Parts {
        Parts(
            std::env::args()
                .skip(1)
                .filter(|a| !a.starts_with("--"))
                .collect(),
        )
    }

    pub fn want(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|o| o == name)
    }
}

/// The directory the bench binaries were built into (they run as
/// `<target>/<profile>/deps/<name>-<hash>`): results and reports go next to
/// the build, wherever `CARGO_TARGET_DIR` put it, not into a `target/` of
/// the source tree that may not exist.
pub fn target_dir() -> std::path::PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// (VmRSS, VmHWM) of a process, in MB (MiB), from `/proc/PID/status`.
pub fn memory_of(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub mod results;
// Every target compiles this module; not every one records rows.
#[allow(unused_imports)]
pub use results::{Noted, Row, begin, record, x};
