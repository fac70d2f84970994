//! Every toolwire method declared once: its name, its params and its result.
//!
//! These types are the wire contract (PROTOCOL.md sections 2, 5 and 6).
//! The router, the `initialize` capabilities, the JSON Schemas and the
//! OpenRPC document are all derived from them, so they cannot drift apart.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::artifact::ArtifactKind;
pub use crate::artifact::read::ReadResult;
use crate::budget::{LimitsOverride, PreviewMode, Tools};
use crate::error::code;
use crate::format::Format;
use crate::json::by_name;
pub use crate::retention::GcReport;
pub use crate::transcript::check::{TranscriptCheckResult, Violation};
use crate::transcript::guard::AbortMode;
pub use crate::transcript::guard::{AppendStatus, FlushResult};
pub use crate::transcript::repair::{RenamedId, TranscriptRepairResult};
pub use crate::transcript::{RECORD_KIND, ReplacementRecord, SeenLine, SessionId};

/// A request method: its name, params and result.
pub trait Method {
    const NAME: &'static str;
    /// One line for the OpenRPC document.
    const SUMMARY: &'static str;
    /// Application error codes this method may answer, besides the generic ones.
    const ERRORS: &'static [i64];
    type Params: serde::de::DeserializeOwned + JsonSchema + Send + 'static;
    type Result: Serialize + JsonSchema + Send + 'static;
}

macro_rules! method {
    ($ty:ident, $name:literal, $params:ty, $result:ty, [$($err:expr),*], $summary:literal) => {
        #[doc = $summary]
        pub enum $ty {}
        impl Method for $ty {
            const NAME: &'static str = $name;
            const SUMMARY: &'static str = $summary;
            const ERRORS: &'static [i64] = &[$($err),*];
            type Params = $params;
            type Result = $result;
        }
    };
}

method!(
    Initialize,
    "initialize",
    InitializeParams,
    InitializeResult,
    [code::STORAGE],
    "Start the connection: workspace root, client info and configuration."
);
method!(
    Shutdown,
    "shutdown",
    Option<Value>,
    Value,
    [],
    "Flush this client's pending pairs and prepare to exit."
);
method!(
    BudgetApply,
    "budget/apply",
    BudgetApplyParams,
    BudgetApplyResult,
    [code::STORAGE, code::TRANSCRIPT_LOCKED, code::CANCELLED],
    "Keep each user message's tool results within the size budget, persisting the largest fresh ones."
);
method!(
    StateFork,
    "state/fork",
    StateForkParams,
    StateForkResult,
    [
        code::SESSION_NOT_FOUND,
        code::SESSION_EXISTS,
        code::STORAGE,
        code::TRANSCRIPT_LOCKED,
        code::CANCELLED
    ],
    "Start a new session from a snapshot of another's replacement state."
);
method!(
    StateReconstruct,
    "state/reconstruct",
    StateReconstructParams,
    StateReconstructResult,
    [code::STORAGE, code::TRANSCRIPT_LOCKED, code::CANCELLED],
    "Rebuild a session's replacement state from messages, records and a transcript."
);
method!(
    StateGet,
    "state/get",
    StateGetParams,
    StateGetResult,
    [code::STORAGE, code::TRANSCRIPT_LOCKED],
    "Read a session's replacement state and pending tool calls."
);
method!(
    PairAppend,
    "pair/append",
    PairAppendParams,
    PairAppendResult,
    [
        code::UNKNOWN_TOOL_RESULT,
        code::STORAGE,
        code::TRANSCRIPT_LOCKED,
        code::CANCELLED
    ],
    "Append a message to the session transcript; tool calls are committed only with all their results."
);
method!(
    PairFlush,
    "pair/flush",
    PairFlushParams,
    FlushResult,
    [code::STORAGE, code::TRANSCRIPT_LOCKED, code::CANCELLED],
    "Resolve the pending tool pair: discard it or close it with synthetic error results."
);
method!(
    TranscriptRepair,
    "transcript/repair",
    TranscriptRepairParams,
    TranscriptRepairResult,
    [code::STORAGE, code::TRANSCRIPT_LOCKED, code::CANCELLED],
    "Rewrite a transcript so that every tool call is directly followed by all its results."
);

method!(
    ArtifactRead,
    "artifact/read",
    ArtifactReadParams,
    ReadResult,
    [code::ARTIFACT_NOT_FOUND, code::STORAGE, code::CANCELLED],
    "Read a saved output back: a range of lines, or the lines matching a regular expression with context."
);

method!(
    StorageGc,
    "storage/gc",
    StorageGcParams,
    GcReport,
    [code::STORAGE],
    "Remove expired sessions, unreferenced artifacts and temporary leftovers by the retention rules."
);

method!(
    TranscriptCheck,
    "transcript/check",
    TranscriptCheckParams,
    TranscriptCheckResult,
    [code::STORAGE, code::TRANSCRIPT_LOCKED, code::CANCELLED],
    "Say, changing nothing, whether the provider would accept a conversation's tool calls and results."
);

// ---------------------------------------------------------------- shared --

/// A message in the shape of the session's provider format (PROTOCOL.md
/// 10.3): an Anthropic message, an OpenAI Chat message, one OpenAI
/// Responses input item, or one Gemini content. Every field, block, part
/// and item the server does not know is kept exactly as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Message(pub Value);

/// Open objects: the schemas name what toolwire reads and let everything
/// else through, because unknown fields round-trip.
fn object(required: &[&str], properties: Value) -> Value {
    json!({
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": true
    })
}

fn message_variants() -> Vec<Value> {
    let typed = object(&["type"], json!({ "type": { "type": "string" } }));
    let mut anthropic = object(
        &["role", "content"],
        json!({
            "role": { "type": "string", "enum": ["user", "assistant", "system"] },
            "content": { "anyOf": [ { "type": "string" }, { "type": "array", "items": typed } ] }
        }),
    );
    anthropic["title"] = json!("AnthropicMessage");
    anthropic["description"] = json!(
        "format `anthropic`: a Messages API message; calls are `tool_use` blocks, results `tool_result` blocks; a `system` message (Claude Code 2.1 sends them among its messages) belongs to no turn."
    );
    let mut chat = object(
        &["role"],
        json!({
            "role": { "type": "string", "enum": ["system", "developer", "user", "assistant", "tool", "function"] },
            "content": { "anyOf": [ { "type": "string" }, { "type": "null" }, { "type": "array", "items": typed } ] },
            "tool_calls": { "type": "array", "items": object(&["id"], json!({
                "id": { "type": "string", "minLength": 1 },
                "type": { "type": "string" },
                "function": object(&[], json!({ "name": { "type": "string" }, "arguments": { "type": "string" } }))
            })) },
            "tool_call_id": { "type": "string", "minLength": 1 }
        }),
    );
    chat["title"] = json!("OpenaiChatMessage");
    chat["description"] = json!(
        "format `openai-chat`: a Chat Completions message; calls are `tool_calls` entries, results `tool` messages."
    );
    let mut responses = object(
        &[],
        json!({
            "type": { "type": "string", "description": "`message` (or absent, with a `role`), `function_call`, `function_call_output`, `custom_tool_call`, `custom_tool_call_output`, `local_shell_call`, `reasoning`, ..." },
            "role": { "type": "string" },
            "call_id": { "type": "string", "minLength": 1 },
            "name": { "type": "string" },
            "output": { "anyOf": [ { "type": "string" }, { "type": "array", "items": typed }, { "type": "object" } ] }
        }),
    );
    responses["title"] = json!("OpenaiResponsesItem");
    responses["description"] = json!("format `openai-responses`: one input item.");
    responses["anyOf"] = json!([ { "required": ["type"] }, { "required": ["role"] } ]);
    let mut gemini = object(
        &["parts"],
        json!({
            "role": { "type": "string", "enum": ["user", "model", "function"] },
            "parts": { "type": "array", "items": object(&[], json!({
                "functionCall": object(&["name"], json!({ "name": { "type": "string" }, "id": { "type": "string" }, "args": { "type": "object" } })),
                "functionResponse": object(&["name"], json!({ "name": { "type": "string" }, "id": { "type": "string" }, "response": { "type": "object" } })),
                "thoughtSignature": { "type": "string" }
            })) }
        }),
    );
    gemini["title"] = json!("GeminiContent");
    gemini["description"] = json!(
        "format `gemini`: one content; calls are `functionCall` parts of a `model` content, results `functionResponse` parts of a `user` content."
    );
    vec![anthropic, chat, responses, gemini]
}

impl JsonSchema for Message {
    fn schema_name() -> Cow<'static, str> {
        "Message".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // `anyOf`, not `oneOf`: one value can be a valid message of several
        // formats (`{"role":"user","content":"hi"}`); the request's or the
        // session's `format` says which it is.
        let variants = message_variants();
        json_schema!({
            "description": "A message in the session's provider format (PROTOCOL.md 10.3), one variant per format; unknown fields, blocks, parts and items round-trip unchanged.",
            "anyOf": variants
        })
    }
}

/// `pair/append`'s message: one [`Message`], or (format `openai-responses`)
/// an array of input items: one model response or one batch of outputs.
///
/// Read from a value, it is that value. Read from a request's text
/// (`PairAppend::params_from_text`), a message whose text is compact JSON
/// is kept as that text: the handler reads what it needs of it without
/// building its values, and the transcript gets the text as it came.
#[derive(Debug, Clone)]
pub enum AppendMessage {
    Value(Value),
    /// Compact JSON ([`crate::format::is_compact_json`]) that
    /// `serde_json` reads as a value within its default nesting limit.
    Text(Box<serde_json::value::RawValue>),
}

impl Serialize for AppendMessage {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            AppendMessage::Value(value) => value.serialize(s),
            AppendMessage::Text(text) => text.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for AppendMessage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Value::deserialize(d).map(AppendMessage::Value)
    }
}

impl JsonSchema for AppendMessage {
    fn schema_name() -> Cow<'static, str> {
        "AppendMessage".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let one = generator.subschema_for::<Message>();
        let items = message_variants().swap_remove(2);
        json_schema!({
            "description": "One message, or in `openai-responses` one input item or an array of them.",
            "anyOf": [ one, { "type": "array", "minItems": 1, "items": items } ]
        })
    }
}

/// An LSP progress token (`workDoneToken`): `$/progress` notifications for
/// long work carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ProgressToken {
    Number(i64),
    String(String),
}

// ------------------------------------------------------------- lifecycle --

/// `initialize`'s params. Any other LSP field (`trace`, `locale`,
/// `rootPath`, `workDoneToken`, ...) is accepted and ignored.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The client's process id; not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_id: Option<i64>,
    /// The workspace root as a `file://` URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_uri: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "by_name::option_vec"
    )]
    #[schemars(with = "Option<Vec<WorkspaceFolder>>")]
    pub workspace_folders: Option<Vec<WorkspaceFolder>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "by_name::option"
    )]
    #[schemars(with = "Option<NameVersion>")]
    pub client_info: Option<NameVersion>,
    /// The client's LSP `ClientCapabilities`; accepted and not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
    /// A toolwire `Config` (see `config.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization_options: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceFolder {
    pub uri: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct NameVersion {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub server_info: NameVersion,
    pub capabilities: ServerCapabilities,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ServerCapabilities {
    pub experimental: Experimental,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Experimental {
    pub toolwire: ToolwireCapabilities,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolwireCapabilities {
    pub protocol_version: u32,
    /// Every custom method this server supports.
    pub methods: Vec<String>,
}

// ---------------------------------------------------------------- budget --

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetApplyParams {
    pub session_id: SessionId,
    /// The conversation, or its tail, about to be sent.
    pub messages: Vec<Message>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "by_name::option"
    )]
    #[schemars(with = "Option<LimitsOverride>")]
    pub limits: Option<LimitsOverride>,
    /// How this request's fresh previews are cut (decided ones keep theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_mode: Option<PreviewMode>,
    /// Per-tool settings for this request, over the configuration's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Tools>,
    /// The provider format of the messages (PROTOCOL.md 10.3); default: the
    /// configuration's `format`, else the session's, else `anthropic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// Clearing of old results for this request, over the configuration's
    /// (PROTOCOL.md 11.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clearing: Option<crate::budget::clearing::ClearingOverride>,
    /// What the request says about its provider's prices, for `auto`
    /// clearing (PROTOCOL.md 12.1); the provider is the format's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<crate::budget::pricing::PricingParams>,
    /// The session id this request's fresh previews name in their
    /// `toolwire://saved-output/<linkSession>/<toolUseId>` links, to be
    /// read with the `read_saved_output` tool of an MCP front (PROTOCOL.md
    /// 12.3); absent: previews name the saved output's path alone.
    /// Decided previews keep their text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_session: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetApplyResult {
    /// Same length and order as the input, replacements applied.
    pub messages: Vec<Message>,
    /// Newly made replacements only, for journaling.
    pub records: Vec<ReplacementRecord>,
    pub persisted: Vec<Persisted>,
    pub failures: Vec<PersistFailure>,
    /// Indexes of messages still above `maxMessageChars`.
    pub over_limit: Vec<usize>,
    /// Old results this apply cleared (PROTOCOL.md 11.3), in order; their
    /// records are in `records` too.
    #[serde(default)]
    pub cleared: Vec<String>,
    /// Why this apply cleared what it did, or nothing (PROTOCOL.md 12.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clearing: Option<crate::budget::clearing::Report>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Persisted {
    pub tool_use_id: String,
    /// Absolute path of the artifact.
    pub path: String,
    /// The original's size in the configured `sizeUnit`.
    pub original_chars: u64,
    /// `text` (saved as `.txt`) or `json` (a block array, saved as `.json`).
    pub content_type: ArtifactKind,
    /// An identical artifact was already on disk and was kept.
    pub reused: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistFailure {
    pub tool_use_id: String,
    pub message: String,
}

// ----------------------------------------------------------------- state --

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateForkParams {
    pub session_id: SessionId,
    /// A fresh id is chosen when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_session_id: Option<SessionId>,
    /// Copy the source's committed transcript (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_transcript: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateForkResult {
    /// The new session's id.
    pub session_id: SessionId,
    pub seen_count: usize,
    pub replacement_count: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateReconstructParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "by_name::option_vec"
    )]
    #[schemars(with = "Option<Vec<ReplacementRecord>>")]
    pub records: Option<Vec<ReplacementRecord>>,
    /// A parent's replacements, for a fork that did not copy its transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherited_replacements: Option<BTreeMap<String, String>>,
    /// Path of a transcript file to read as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    /// The provider format of the messages (PROTOCOL.md 10.3); default: the
    /// configuration's `format`, else the session's, else `anthropic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateReconstructResult {
    pub seen_count: usize,
    pub replacement_count: usize,
    pub messages_read: usize,
    pub records_read: usize,
    /// Torn or unparsable transcript lines that were skipped.
    pub skipped_lines: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateGetParams {
    pub session_id: SessionId,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateGetResult {
    pub seen_ids: Vec<String>,
    pub replacements: BTreeMap<String, String>,
    /// tool_use ids of the pair now buffered.
    pub pending: Vec<String>,
}

// ------------------------------------------------------------------ pair --

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PairAppendParams {
    pub session_id: SessionId,
    /// One message; in `openai-responses`, one input item or an array of
    /// them (one model response, or one batch of outputs).
    pub message: AppendMessage,
    /// The provider format of the messages (PROTOCOL.md 10.3); default: the
    /// configuration's `format`, else the session's, else `anthropic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PairAppendResult {
    pub status: AppendStatus,
    /// tool_use ids still waiting for their results.
    pub pending: Vec<String>,
    /// Transcript lines this call wrote, including any flush it caused.
    pub written: usize,
    /// Present when this message interrupted a pending pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flushed: Option<FlushResult>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PairFlushParams {
    pub session_id: SessionId,
    /// Default: the session's `abortMode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<AbortMode>,
    /// Named in synthetic error results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

// ------------------------------------------------------------ transcript --

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscriptRepairParams {
    pub path: String,
    /// The transcript's format; default: its `session` line, else what its
    /// content shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

// -------------------------------------------------------------- artifact --

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactReadParams {
    pub session_id: SessionId,
    /// The tool_use_id whose saved output to read (data, never a path).
    pub tool_use_id: String,
    /// First line to read (0-based); with `grep`, where the search starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Lines to read (default 2000); with `grep`, matching lines to show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// A regular expression (Rust `regex` syntax): show the matching lines,
    /// numbered, instead of a range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grep: Option<String>,
    /// With `grep`: lines shown before and after each match (at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
}

impl ArtifactReadParams {
    /// The core request these params describe.
    pub fn request(&self) -> crate::artifact::read::ReadRequest {
        crate::artifact::read::ReadRequest {
            offset: self.offset.unwrap_or(0),
            limit: self.limit,
            grep: self.grep.clone(),
            context: self.context.unwrap_or(0),
        }
    }
}

// --------------------------------------------------------------- storage --

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageGcParams {
    /// Only report what would be removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscriptCheckParams {
    /// A transcript file (relative paths are resolved against the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Messages to check instead of a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// Default `anthropic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
}

/// One line of a session transcript.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum TranscriptLine {
    Message {
        message: Message,
    },
    Replacement {
        record: ReplacementRecord,
    },
    Seen {
        #[serde(flatten)]
        seen: SeenLine,
    },
    /// The first line of a transcript in a format other than `anthropic`.
    Session {
        format: Format,
    },
    /// The first line of a fork's transcript (`state/fork` with
    /// `copyTranscript`): its parent's committed bytes, read before the
    /// lines that follow it.
    Fork {
        #[serde(flatten)]
        fork: crate::transcript::fork::ForkLine,
    },
}

/// The `data` member of every toolwire error.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorData {
    /// Stable machine-readable error kind, e.g. `unknownToolResult`.
    pub kind: String,
    /// For `invalidParams`: the offending field; for storage and lock errors: the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
}
