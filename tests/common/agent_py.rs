//! tests/proxy/agent.py, the official provider SDKs' agent loop, run
//! against a `toolwire proxy`. Include it with `#[path =
//! "common/agent_py.rs"] mod agent_py;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The venv's Python, with the SDKs tests/setup.d/40-proxy.sh installs.
pub fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxy/.venv/bin/python");
    assert!(
        python.exists(),
        "the provider SDKs are not installed: run ./tests/setup.sh (or bash tests/setup.d/40-proxy.sh)"
    );
    python
}

/// `agent.py ARGS`, which reaches the proxy directly whatever the
/// environment's proxy variables say; what it printed, as JSON.
pub async fn run(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxy/agent.py");
    let out = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new(python())
            .arg(script)
            .args(args)
            .env("NO_PROXY", "*")
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("ALL_PROXY")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("agent.py took too long")
    .unwrap();
    assert!(
        out.status.success(),
        "agent.py {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
