//! Per-tool settings (`tools.<name>.maxResultChars`, `.previewMode`) and
//! the `headTail` preview mode, end to end through `budget/apply`.

mod common;

use common::*;
use serde_json::{Value, json};

fn calls(items: &[(&str, &str)]) -> Value {
    let blocks: Vec<Value> = items
        .iter()
        .map(|(id, name)| json!({"type": "tool_use", "id": id, "name": name, "input": {}}))
        .collect();
    json!({"role": "assistant", "content": blocks})
}

/// `n` numbered lines, `line 0001` … (10 chars each).
fn log(n: usize) -> String {
    (1..=n).map(|i| format!("line {i:04}\n")).collect()
}

fn content(r: &Value, block: usize) -> String {
    r["messages"][1]["content"][block]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn each_tool_gets_its_own_limit_and_preview_mode() {
    let dir = tempfile::tempdir().unwrap();
    // TOML has no null: "never" spells it. Tool names are kept as written.
    std::fs::write(
        dir.path().join("toolwire.toml"),
        "[limits]\nmax_result_chars = 1000\npreview_chars = 200\n[tools.run_tests]\nmax_result_chars = \"never\"\n",
    )
    .unwrap();
    let (mut c, _task) = connect(new_server());
    c.initialize(
        dir.path(),
        json!({"tools": {"Bash": {"previewMode": "headTail"}, "Grep": {"maxResultChars": 100}, "Read": {"maxResultChars": null}}}),
    )
    .await;
    let big = log(300); // 3000 chars: over the general limit
    let small = log(50); // 500 chars: under it
    let r = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [
                calls(&[("t_bash", "Bash"), ("t_read", "Read"), ("t_grep", "Grep"), ("t_other", "Other"), ("t_tests", "run_tests")]),
                results(&[("t_bash", &big), ("t_read", &big), ("t_grep", &small), ("t_other", &small), ("t_tests", &big)]),
            ]}),
        )
        .await;
    let persisted: Vec<&str> = r["persisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["toolUseId"].as_str().unwrap())
        .collect();
    assert_eq!(persisted, ["t_bash", "t_grep"], "{r}");

    // Bash: head and tail with what was left out between them.
    let bash = content(&r, 0);
    let path = dir
        .path()
        .join(".toolwire/sessions/s/tool-results/t_bash.txt");
    let head: String = (1..=10).map(|i| format!("line {i:04}\n")).collect();
    let tail: String = (292..=300).map(|i| format!("line {i:04}\n")).collect();
    assert_eq!(
        bash,
        format!(
            "<persisted-output>\nOutput too large (2.9KB). Full output saved to: {}\n\n\
             Preview (first 100 bytes and last 100 bytes):\n{}\n... 2.7KB omitted ...\n{tail}\n</persisted-output>",
            path.display(),
            head.trim_end_matches('\n'),
        )
    );
    // Grep (own limit 100): the head preview. Read and run_tests: never.
    assert!(content(&r, 2).contains("Preview (first 200 bytes):\nline 0001\n"));
    assert_eq!(content(&r, 1), big);
    assert_eq!(content(&r, 3), small);
    assert_eq!(content(&r, 4), big);
}

#[tokio::test]
async fn a_changed_mode_changes_only_fresh_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _task) = connect(new_server());
    c.initialize(
        dir.path(),
        json!({"limits": {"maxResultChars": 1000, "previewChars": 200}}),
    )
    .await;
    let big = log(300);
    let first = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "messages": [
                calls(&[("t_a", "Bash")]), results(&[("t_a", &big)]),
            ]}),
        )
        .await;
    let a = content(&first, 0);
    assert!(a.contains("Preview (first 200 bytes):\n"), "{a}");

    // The request asks for headTail, and Bash's own setting says `never`:
    // the decided result keeps its head preview, a fresh one gets headTail.
    let second = c
        .call(
            "budget/apply",
            json!({"sessionId": "s", "previewMode": "headTail", "messages": [
                calls(&[("t_a", "Bash"), ("t_b", "Bash"), ("t_c", "Keep")]),
                results(&[("t_a", &big), ("t_b", &big), ("t_c", &big)]),
            ], "tools": {"Keep": {"maxResultChars": null}}}),
        )
        .await;
    assert_eq!(content(&second, 0), a);
    assert!(
        content(&second, 1).contains("Preview (first 100 bytes and last 100 bytes):\n"),
        "{second}"
    );
    assert_eq!(content(&second, 2), big);

    // Bad per-request settings are invalid params naming the field.
    let e = c
        .fails(
            "budget/apply",
            json!({"sessionId": "s", "messages": [], "tools": {"Bash": {"previewMode": "tail"}}}),
            -32602,
        )
        .await;
    assert_eq!(e["data"]["path"], json!("tools.Bash.previewMode"));
}
