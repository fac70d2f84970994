//! The generated clients, used for real against the built binary: the
//! TypeScript types compile under `tsc --strict` and a vscode-jsonrpc client
//! drives the server; the Python models back a typed harness client tested
//! with pytest. Both fail when their generated files are stale.
//!
//! Needs the pinned packages `editors/install.sh` installs (README's test
//! command runs it first).

use std::path::{Path, PathBuf};
use std::process::Command;

fn editors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("editors")
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (run editors/install.sh first)"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn typescript_client_compiles_strictly_and_drives_the_binary() {
    let dir = editors().join("vscode");
    assert!(
        dir.join("node_modules").is_dir(),
        "editors/vscode/node_modules is missing: run editors/install.sh"
    );
    run(
        Command::new("node")
            .arg("scripts/gen-protocol.mjs")
            .arg("--check")
            .current_dir(&dir),
        "protocol.ts freshness",
    );
    run(
        Command::new("node")
            .args(["node_modules/typescript/bin/tsc", "-p", "."])
            .current_dir(&dir),
        "tsc --strict",
    );
    run(
        Command::new("node")
            .arg("out/smoke.js")
            .arg(env!("CARGO_BIN_EXE_toolwire"))
            .current_dir(&dir),
        "node client smoke test",
    );
}

#[test]
fn python_client_models_are_fresh_and_its_tests_pass() {
    let dir = editors().join("python");
    let python = dir.join(".venv/bin/python");
    assert!(
        python.exists(),
        "editors/python/.venv is missing: run editors/install.sh"
    );
    run(
        Command::new(&python)
            .arg("generate.py")
            .arg("--check")
            .current_dir(&dir),
        "models.py freshness",
    );
    run(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .env("TOOLWIRE_BIN", env!("CARGO_BIN_EXE_toolwire"))
            .current_dir(&dir),
        "pytest",
    );
}
