//! The published schemas never drift from the code.

use std::path::Path;

#[test]
fn checked_in_schemas_match_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
    let problems = toolwire::schema::check(&dir).unwrap();
    assert!(
        problems.is_empty(),
        "schema/ is stale; regenerate with `cargo run -- schema --out schema`:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_check_command_fails_on_drift_and_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    toolwire::schema::write(dir.path()).unwrap();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_toolwire"))
            .args(["schema", "--check"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    assert!(run().status.success());
    std::fs::write(dir.path().join("state.get.result.json"), "{}\n").unwrap();
    std::fs::write(dir.path().join("stale.json"), "{}\n").unwrap();
    let out = run();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("state.get.result.json: differs"), "{err}");
    assert!(err.contains("stale.json: no longer generated"), "{err}");
    assert!(err.contains("toolwire schema --out"), "{err}");
}

#[test]
fn the_openrpc_document_lists_every_method_with_resolvable_refs() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/openrpc.json"))
            .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(doc["openrpc"].as_str().unwrap().starts_with("1."));
    let names: Vec<&str> = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for m in [
        "initialize",
        "shutdown",
        "budget/apply",
        "state/fork",
        "state/reconstruct",
        "state/get",
        "pair/append",
        "pair/flush",
        "transcript/repair",
    ] {
        assert!(names.contains(&m), "{m}");
    }
    let pair = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "pair/append")
        .unwrap();
    assert!(
        pair["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["code"] == -32010)
    );
    // Every $ref points at a component that exists.
    for r in text.match_indices("#/components/schemas/") {
        let rest = &text[r.0 + 21..];
        let name = &rest[..rest.find('"').unwrap()];
        assert!(
            doc["components"]["schemas"].get(name).is_some(),
            "dangling ref {name}"
        );
    }
    assert!(
        !text.contains("#/$defs/"),
        "refs must point into components"
    );
}
