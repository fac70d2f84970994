//! The LiteLLM guardrail (`toolwire_client.litellm`, PROTOCOL.md 12.4) in
//! a real LiteLLM proxy: editors/python/tests/test_litellm.py, run with the
//! pinned venv of tests/setup.d/45-litellm.sh against the built binary.
//! The test starts LiteLLM with the `config.yaml` of docs/litellm.md, a
//! scripted provider and `toolwire proxy`, all on loopback, and drives them
//! with the official Anthropic and OpenAI SDKs; two more LiteLLM replicas
//! share one PostgreSQL store.

use std::path::Path;
use std::process::Command;

mod common;

#[test]
fn litellm_guardrail_budgets_like_the_proxy_and_fails_open() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("tests/litellm/.venv/bin/python");
    assert!(
        python.exists(),
        "tests/litellm/.venv is missing: run tests/setup.d/45-litellm.sh"
    );
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("litellm");
    // The PostgreSQL store two LiteLLM replicas share (tests/common/pg.rs:
    // a throwaway cluster, migrated).
    let (pg_url, _store) = common::pg::migrated_database();
    // pytest's --basetemp is emptied by pytest itself before the run.
    let out = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-rs",
            "--durations=8",
            "-p",
            "no:cacheprovider",
        ])
        .args(["-W", "ignore::DeprecationWarning", "--basetemp"])
        .arg(&scratch)
        .arg(root.join("editors/python/tests/test_litellm.py"))
        .env("TOOLWIRE_BIN", env!("CARGO_BIN_EXE_toolwire"))
        .env("PYTHONPATH", root.join("editors/python"))
        .env("TOOLWIRE_PG_URL", &pg_url)
        .current_dir(root)
        .output()
        .expect("running pytest in tests/litellm/.venv");
    // What ran, skipped and took longest (shown with --nocapture).
    println!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "test_litellm.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
