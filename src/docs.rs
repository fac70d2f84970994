//! `docs/protocol.md` documents everything the code has: every method of
//! the method table, every error of the error enum, every configuration key
//! of the config schema and every transcript line type. The lists come from
//! the code, so a method, code, key or line type added later fails here
//! until it is documented.

use std::collections::BTreeSet;

use serde_json::Value;
use strum::IntoEnumIterator;

use crate::error::Error;
use crate::methods::{self, Exec, MethodVisitor};
use crate::protocol::Method;

const DOC: &str = include_str!("../docs/protocol.md");

struct Names(Vec<&'static str>);

impl MethodVisitor for Names {
    fn visit<M: Method>(&mut self, _: Exec) {
        self.0.push(M::NAME);
    }
}

fn method_names() -> Vec<&'static str> {
    let mut names = Names(Vec::new());
    methods::visit_all(&mut names);
    names.0
}

/// A generated schema file, parsed.
fn schema_file(name: &str) -> Value {
    let files = crate::schema::generate();
    let text = files.get(name).map(String::as_str).unwrap_or("null");
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// `schema` with `$ref`s into `root`'s `$defs` followed.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| root["$defs"].get(name))
            .map_or(schema, |def| resolve(root, def)),
        None => schema,
    }
}

/// The schema and its `anyOf`/`oneOf`/`allOf` branches, resolved.
fn branches<'a>(root: &'a Value, schema: &'a Value) -> Vec<&'a Value> {
    let schema = resolve(root, schema);
    let mut out = vec![schema];
    for key in ["anyOf", "oneOf", "allOf"] {
        for branch in schema[key].as_array().into_iter().flatten() {
            out.extend(branches(root, branch));
        }
    }
    out
}

/// Every key of an object schema, nested keys as dotted paths.
fn keys(root: &Value, schema: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    for branch in branches(root, schema) {
        for (name, sub) in branch["properties"].as_object().into_iter().flatten() {
            let path = format!("{prefix}{name}");
            keys(root, sub, &format!("{path}."), out);
            out.insert(path);
        }
    }
}

fn config_keys() -> BTreeSet<String> {
    let root = schema_file("config.json");
    let mut out = BTreeSet::new();
    keys(&root, &root, "", &mut out);
    out
}

fn transcript_line_types() -> BTreeSet<String> {
    let root = schema_file("transcript-line.json");
    branches(&root, &root)
        .into_iter()
        .filter_map(|b| b["properties"]["type"]["const"].as_str())
        .map(str::to_owned)
        .collect()
}

/// Lines of the doc that start a table row with `first` as its first cell.
fn has_row(first: &str) -> bool {
    DOC.lines()
        .any(|line| line.starts_with(&format!("| {first} |")))
}

#[test]
fn every_method_has_its_own_section() {
    let names = method_names();
    assert!(names.contains(&"budget/apply"), "{names:?}");
    let missing: Vec<_> = names
        .iter()
        .filter(|name| !DOC.lines().any(|l| l == format!("### `{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md has no section `### `METHOD`` (params, result, errors) for: {missing:?}"
    );
    // And no section for a method the server does not answer.
    let stale: Vec<_> = DOC
        .lines()
        .filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`'))
        .filter(|name| name.contains('/') || *name == "initialize" || *name == "shutdown")
        .filter(|name| !names.contains(name))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/protocol.md documents methods the server does not have: {stale:?}"
    );
}

/// Fail unless every row key (`| KEY |` starting a table row) is in the doc.
fn assert_rows(table: &str, row: &str, keys: impl IntoIterator<Item = String>) {
    let missing: Vec<String> = keys.into_iter().filter(|key| !has_row(key)).collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md's {table} table has no row `{row}` for: {missing:?}"
    );
}

#[test]
fn every_error_code_and_kind_is_in_the_error_table() {
    let errors: Vec<(i64, &str)> = Error::iter().map(|e| (e.code(), e.kind())).collect();
    assert!(errors.len() >= 12, "{errors:?}");
    let rows = errors
        .iter()
        .map(|(code, kind)| format!("{code} | `{kind}`"));
    assert_rows("error", "| CODE | `KIND` | when |", rows);
}

#[test]
fn every_configuration_key_is_in_the_configuration_table() {
    let keys = config_keys();
    assert!(keys.contains("limits.previewChars"), "{keys:?}");
    let rows = keys.iter().map(|key| format!("`{key}`"));
    assert_rows(
        "configuration",
        "| `KEY` | type | default | meaning |",
        rows,
    );
}

#[test]
fn every_transcript_line_type_is_in_the_transcript_table() {
    let types = transcript_line_types();
    assert!(types.contains("message"), "{types:?}");
    let rows = types.iter().map(|t| format!("`{t}`"));
    assert_rows("transcript", "| `TYPE` | line | written by |", rows);
}

#[test]
fn the_documented_capabilities_list_every_custom_method() {
    let listed: Vec<&str> = methods::CUSTOM_METHODS.to_vec();
    let quoted: Vec<String> = listed.iter().map(|m| format!("\"{m}\"")).collect();
    let missing: Vec<_> = quoted
        .iter()
        .filter(|q| !DOC.contains(q.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md's `initialize` result example misses: {missing:?}"
    );
}
