//! The published schemas: a JSON Schema (draft 2020-12) for every method's
//! params and result, the transcript line, the replacement record, the
//! configuration and the error `data`, plus an OpenRPC 1.3 document for the
//! whole API. All are generated from the Rust types through the method
//! table, so they cannot drift from what the server accepts and answers.
//!
//! Params and configuration are described as they are *read* (optional
//! fields with defaults are not required); results as they are *written*
//! (a field always present is required). `toolwire schema --out schema`
//! regenerates the checked-in files; `--check` reports drift.

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use crate::config::Config;
use crate::error::code;
use crate::methods::{self, Exec, MethodVisitor};
use crate::protocol::{ErrorData, Method, ReplacementRecord, TranscriptLine};

fn reader() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
}

fn writer() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
}

fn root<T: JsonSchema>(generator: SchemaGenerator) -> Value {
    generator.into_root_schema_for::<T>().to_value()
}

/// File stem of a method's schemas: `budget/apply` → `budget.apply`.
pub fn stem(method: &str) -> String {
    method.replace('/', ".")
}

struct Files(BTreeMap<String, Value>);

impl MethodVisitor for Files {
    fn visit<M: Method>(&mut self, _: Exec) {
        let stem = stem(M::NAME);
        self.0
            .insert(format!("{stem}.params.json"), root::<M::Params>(reader()));
        self.0
            .insert(format!("{stem}.result.json"), root::<M::Result>(writer()));
    }
}

/// Every schema file, by name, as pretty JSON ending in a newline.
pub fn generate() -> BTreeMap<String, String> {
    let mut files = Files(BTreeMap::new());
    methods::visit_all(&mut files);
    let mut files = files.0;
    files.insert(
        "transcript-line.json".into(),
        root::<TranscriptLine>(reader()),
    );
    files.insert(
        "replacement-record.json".into(),
        root::<ReplacementRecord>(reader()),
    );
    files.insert("config.json".into(), root::<Config>(reader()));
    files.insert("error-data.json".into(), root::<ErrorData>(writer()));
    files.insert("openrpc.json".into(), openrpc());
    files.insert(BUNDLE.into(), bundle());
    files
        .into_iter()
        .map(|(name, value)| {
            let text = serde_json::to_string_pretty(&value).unwrap_or_default() + "\n";
            (name, text)
        })
        .collect()
}

/// An I/O error that names the path it is about.
fn at(path: &Path) -> impl FnOnce(std::io::Error) -> std::io::Error + '_ {
    move |err| std::io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

/// `dir` must be a directory (or, when `create`, be creatable as one).
fn directory(dir: &Path, create: bool) -> std::io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!("{} is not a directory", dir.display()),
        )),
        Err(err) if create && err.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(at(dir))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(std::io::Error::new(
            err.kind(),
            format!("{}: no such directory", dir.display()),
        )),
        Err(err) => Err(at(dir)(err)),
    }
}

/// Write every schema file into `dir`, creating it when missing. Errors
/// name the path they are about.
pub fn write(dir: &Path) -> std::io::Result<usize> {
    directory(dir, true)?;
    let files = generate();
    for (name, text) in &files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(at(&path))?;
    }
    Ok(files.len())
}

/// Compare the directory `dir` with what the code generates; the
/// differences, if any. An error when `dir` is not a directory.
pub fn check(dir: &Path) -> std::io::Result<Vec<String>> {
    directory(dir, false)?;
    let mut problems = Vec::new();
    let files = generate();
    for (name, text) in &files {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(on_disk) if &on_disk == text => {}
            Ok(on_disk) => problems.push(format!(
                "{name}: differs{}",
                first_difference(&on_disk, text)
            )),
            Err(_) => problems.push(format!("{name}: missing")),
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") && !files.contains_key(&name) {
                problems.push(format!("{name}: no longer generated"));
            }
        }
    }
    Ok(problems)
}

fn first_difference(old: &str, new: &str) -> String {
    for (n, (a, b)) in old.lines().zip(new.lines()).enumerate() {
        if a != b {
            return format!(" at line {}:\n  - {a}\n  + {b}", n + 1);
        }
    }
    format!(
        " in length ({} vs {} lines)",
        old.lines().count(),
        new.lines().count()
    )
}

// ----------------------------------------------------------------- bundle --

/// One file holding every type as a named definition, for code generators
/// (`json-schema-to-typescript`, `datamodel-code-generator`).
pub const BUNDLE: &str = "toolwire.schema.json";

/// `budget/apply` → `BudgetApply`.
pub fn type_name(method: &str) -> String {
    method
        .split(['/', '_', '.'])
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

struct Bundle {
    read: SchemaGenerator,
    write: SchemaGenerator,
    /// `(name, schema, written by the server)` of each method's params and result.
    roots: Vec<(String, Value, bool)>,
}

impl MethodVisitor for Bundle {
    fn visit<M: Method>(&mut self, _: Exec) {
        let base = type_name(M::NAME);
        let params = self.read.subschema_for::<M::Params>().to_value();
        self.roots.push((format!("{base}Params"), params, false));
        let result = self.write.subschema_for::<M::Result>().to_value();
        self.roots.push((format!("{base}Result"), result, true));
    }
}

fn bundle() -> Value {
    let mut b = Bundle {
        read: reader(),
        write: writer(),
        roots: Vec::new(),
    };
    methods::visit_all(&mut b);
    // Registered as named definitions by asking for them.
    b.read.subschema_for::<Config>();
    b.read.subschema_for::<TranscriptLine>();
    b.read.subschema_for::<ReplacementRecord>();
    b.write.subschema_for::<ErrorData>();
    let base = "#/$defs/";
    let (mut defs, renames) = merge_defs(
        b.read.take_definitions(true),
        b.write.take_definitions(true),
        base,
    );
    let none = Renames::new();
    for (name, mut schema, written) in b.roots {
        retarget(&mut schema, base, if written { &renames } else { &none });
        // A method type that is already a named definition needs no alias.
        if schema.get("$ref").and_then(Value::as_str) != Some(format!("{base}{name}").as_str()) {
            defs.insert(name, schema);
        }
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "toolwire",
        "description": "Every toolwire type as a named definition. `<Method>Params` are what a client sends (optional fields may be omitted); `<Method>Result` are what the server sends (fields it always writes are required). Where the two shapes of one type differ, the server's is `<Name>Output`.",
        "$defs": defs,
    })
}

// ---------------------------------------------------------------- OpenRPC --

struct OpenRpc {
    read: SchemaGenerator,
    write: SchemaGenerator,
    methods: Vec<Value>,
}

type Renames = std::collections::HashMap<String, String>;

/// Point every `#/$defs/X` in `value` at `<base><renamed X>`.
fn retarget(value: &mut Value, base: &str, renames: &Renames) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(r)) = map.get_mut("$ref")
                && let Some(name) = r.strip_prefix("#/$defs/")
            {
                let name = renames.get(name).map_or(name, String::as_str);
                *r = format!("{base}{name}");
            }
            map.values_mut().for_each(|v| retarget(v, base, renames));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| retarget(v, base, renames)),
        _ => {}
    }
}

/// Merge the definitions of what clients send (`read`) and what the server
/// writes (`write`) into one namespace under `base`. A written type keeps
/// its name unless a different read type has it, then it becomes
/// `<name>Output`. Returns the merged definitions and the renames to apply
/// to written schemas.
fn merge_defs(
    read: Map<String, Value>,
    write: Map<String, Value>,
    base: &str,
) -> (Map<String, Value>, Renames) {
    let renames: Renames = write
        .iter()
        .filter(|(name, schema)| read.get(*name).is_some_and(|r| r != *schema))
        .map(|(name, _)| (name.clone(), format!("{name}Output")))
        .collect();
    let none = Renames::new();
    let mut merged = Map::new();
    for (name, mut schema) in read {
        retarget(&mut schema, base, &none);
        merged.insert(name, schema);
    }
    for (name, mut schema) in write {
        retarget(&mut schema, base, &renames);
        let name = renames.get(&name).cloned().unwrap_or(name);
        merged.insert(name, schema);
    }
    (merged, renames)
}

fn error_message(code: i64) -> &'static str {
    match code {
        code::PARSE_ERROR => "parseError: the frame is not valid JSON or not a valid frame",
        code::INVALID_REQUEST => {
            "invalidRequest: not a valid JSON-RPC request (or sent after shutdown)"
        }
        code::METHOD_NOT_FOUND => "methodNotFound",
        code::INVALID_PARAMS => "invalidParams: data.path names the offending field",
        code::NOT_INITIALIZED => "notInitialized: send initialize first",
        code::CANCELLED => "cancelled: $/cancelRequest arrived before the work committed",
        code::UNKNOWN_TOOL_RESULT => "unknownToolResult: a tool_result answers no pending tool_use",
        code::SESSION_EXISTS => "sessionExists: fork onto an existing session id",
        code::SESSION_NOT_FOUND => {
            "sessionNotFound: the method needs a session that does not exist"
        }
        code::TRANSCRIPT_LOCKED => "transcriptLocked: another process holds the transcript",
        code::STORAGE => "storage: the disk refused; nothing half-done remains",
        code::ARTIFACT_NOT_FOUND => {
            "artifactNotFound: the session has no saved output for that toolUseId"
        }
        _ => "internal error",
    }
}

impl MethodVisitor for OpenRpc {
    fn visit<M: Method>(&mut self, exec: Exec) {
        let params_schema = self.read.subschema_for::<M::Params>().to_value();
        // Params are sent by name: one content descriptor per field.
        let resolved = match params_schema.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let name = r.rsplit('/').next().unwrap_or_default();
                self.read
                    .definitions()
                    .get(name)
                    .cloned()
                    .unwrap_or(Value::Null)
            }
            None => params_schema.clone(),
        };
        let required: Vec<&str> = resolved["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let params: Vec<Value> = resolved["properties"]
            .as_object()
            .map(|props| {
                props
                    .iter()
                    .map(|(name, schema)| {
                        json!({"name": name, "required": required.contains(&name.as_str()), "schema": schema})
                    })
                    .collect()
            })
            .unwrap_or_default();
        let result = self.write.subschema_for::<M::Result>().to_value();
        let mut codes = vec![
            code::PARSE_ERROR,
            code::INVALID_REQUEST,
            code::INVALID_PARAMS,
        ];
        if exec != Exec::Lifecycle {
            codes.push(code::NOT_INITIALIZED);
        }
        codes.extend_from_slice(M::ERRORS);
        let errors: Vec<Value> = codes
            .iter()
            .map(|c| json!({"code": c, "message": error_message(*c)}))
            .collect();
        self.methods.push(json!({
            "name": M::NAME,
            "summary": M::SUMMARY,
            "paramStructure": "by-name",
            "params": params,
            "result": {"name": format!("{}Result", M::NAME.replace('/', "_")), "schema": result},
            "errors": errors,
            "x-execution": match exec { Exec::Lifecycle => "lifecycle", Exec::Session => "session-ordered", Exec::Concurrent => "concurrent" },
        }));
    }
}

fn openrpc() -> Value {
    let mut doc = OpenRpc {
        read: reader(),
        write: writer(),
        methods: Vec::new(),
    };
    methods::visit_all(&mut doc);
    let base = "#/components/schemas/";
    let (schemas, renames) = merge_defs(
        doc.read.take_definitions(true),
        doc.write.take_definitions(true),
        base,
    );
    let none = Renames::new();
    for method in &mut doc.methods {
        for param in method["params"].as_array_mut().into_iter().flatten() {
            retarget(&mut param["schema"], base, &none);
        }
        retarget(&mut method["result"]["schema"], base, &renames);
    }
    json!({
        "openrpc": "1.3.2",
        "info": {
            "title": "toolwire",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "JSON-RPC 2.0 over LSP base-protocol framing (Content-Length headers) on stdio. Lifecycle as in LSP: initialize, initialized, ..., shutdown, exit. Notifications: initialized, exit and $/cancelRequest from the client; $/progress from the server, only for a request that carries a workDoneToken. The full reference is docs/protocol.md. Errors carry data.kind (see error-data.json).",
        },
        "methods": doc.methods,
        "components": {"schemas": schemas},
    })
}
