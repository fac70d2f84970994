//! The one error type of toolwire and its mapping to JSON-RPC.
//!
//! Every error carries a stable `kind` in `data`, so clients branch on that
//! string rather than on message text (PROTOCOL.md section 7). Codes are
//! chosen here and nowhere else.

use serde_json::{Value, json};

/// JSON-RPC error codes used by toolwire.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const NOT_INITIALIZED: i64 = -32002;
    pub const CANCELLED: i64 = -32800;
    pub const UNKNOWN_TOOL_RESULT: i64 = -32010;
    pub const SESSION_EXISTS: i64 = -32011;
    pub const SESSION_NOT_FOUND: i64 = -32012;
    pub const TRANSCRIPT_LOCKED: i64 = -32013;
    pub const STORAGE: i64 = -32014;
    pub const ARTIFACT_NOT_FOUND: i64 = -32015;
    /// MCP's "resource not found" (the MCP face only; the same number as
    /// LSP's not-initialized, which the MCP face never sends).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

// Tests walk every variant (`Error::iter()`) to check that each code and
// kind is documented in docs/protocol.md.
#[derive(Debug, Clone, thiserror::Error)]
#[cfg_attr(test, derive(strum::EnumIter))]
pub enum Error {
    #[error("parse error: {0}")]
    Parse(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("unknown method `{0}`")]
    MethodNotFound(String),
    /// `path` names the offending field, e.g. `messages[3].content`.
    #[error("invalid params at `{path}`: {message}")]
    InvalidParams { path: String, message: String },
    /// A request before a successful `initialize`. When `initialize` was
    /// sent and refused, the refusal is repeated: a client that ignored its
    /// answer (Neovim queues requests while initializing) would otherwise
    /// tell its user to send `initialize`, which it did.
    #[error("server not initialized: {}", match initialize_failed {
        Some(why) => format!("`initialize` failed: {why}"),
        None => "send `initialize` first".to_owned(),
    })]
    NotInitialized { initialize_failed: Option<String> },
    #[error("request cancelled")]
    Cancelled,
    #[error("tool_result `{tool_use_id}` answers no pending tool_use")]
    UnknownToolResult { tool_use_id: String },
    #[error("session `{session_id}` already exists")]
    SessionExists { session_id: String },
    #[error("session `{session_id}` does not exist")]
    SessionNotFound { session_id: String },
    #[error("transcript {path} is locked by another process")]
    TranscriptLocked { path: String },
    #[error("storage error: {message}")]
    Storage {
        message: String,
        path: Option<String>,
    },
    #[error("session `{session_id}` has no saved output for tool_use_id `{tool_use_id}`")]
    ArtifactNotFound {
        session_id: String,
        tool_use_id: String,
    },
    #[error("internal error: {0}")]
    Internal(String),
    /// The MCP server behind `toolwire mcp` ended before answering.
    #[error("{0}")]
    ServerExited(String),
    /// `resources/read` of a `toolwire://` link with nothing behind it.
    #[error("resource not found: {uri}")]
    ResourceNotFound { uri: String },
}

impl Error {
    pub fn invalid_params(path: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidParams {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A disk-level failure, with the file it concerned.
    pub fn storage(path: &std::path::Path, err: &std::io::Error) -> Self {
        Error::Storage {
            message: format!("{}: {err}", path.display()),
            path: Some(path.display().to_string()),
        }
    }

    pub fn code(&self) -> i64 {
        match self {
            Error::Parse(_) => code::PARSE_ERROR,
            Error::InvalidRequest(_) => code::INVALID_REQUEST,
            Error::MethodNotFound(_) => code::METHOD_NOT_FOUND,
            Error::InvalidParams { .. } => code::INVALID_PARAMS,
            Error::NotInitialized { .. } => code::NOT_INITIALIZED,
            Error::Cancelled => code::CANCELLED,
            Error::UnknownToolResult { .. } => code::UNKNOWN_TOOL_RESULT,
            Error::SessionExists { .. } => code::SESSION_EXISTS,
            Error::SessionNotFound { .. } => code::SESSION_NOT_FOUND,
            Error::TranscriptLocked { .. } => code::TRANSCRIPT_LOCKED,
            Error::Storage { .. } => code::STORAGE,
            Error::ArtifactNotFound { .. } => code::ARTIFACT_NOT_FOUND,
            Error::Internal(_) | Error::ServerExited(_) => code::INTERNAL,
            Error::ResourceNotFound { .. } => code::RESOURCE_NOT_FOUND,
        }
    }

    /// The stable machine-readable name of the error.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Parse(_) => "parseError",
            Error::InvalidRequest(_) => "invalidRequest",
            Error::MethodNotFound(_) => "methodNotFound",
            Error::InvalidParams { .. } => "invalidParams",
            Error::NotInitialized { .. } => "notInitialized",
            Error::Cancelled => "cancelled",
            Error::UnknownToolResult { .. } => "unknownToolResult",
            Error::SessionExists { .. } => "sessionExists",
            Error::SessionNotFound { .. } => "sessionNotFound",
            Error::TranscriptLocked { .. } => "transcriptLocked",
            Error::Storage { .. } => "storage",
            Error::ArtifactNotFound { .. } => "artifactNotFound",
            Error::Internal(_) => "internal",
            Error::ServerExited(_) => "serverExited",
            Error::ResourceNotFound { .. } => "resourceNotFound",
        }
    }

    /// The `data` member of the JSON-RPC error object.
    pub fn data(&self) -> Value {
        let mut data = json!({ "kind": self.kind() });
        let extra = match self {
            Error::InvalidParams { path, .. } => Some(("path", json!(path))),
            Error::MethodNotFound(method) => Some(("method", json!(method))),
            Error::UnknownToolResult { tool_use_id } => Some(("toolUseId", json!(tool_use_id))),
            Error::SessionExists { session_id } | Error::SessionNotFound { session_id } => {
                Some(("sessionId", json!(session_id)))
            }
            Error::TranscriptLocked { path } => Some(("path", json!(path))),
            Error::ResourceNotFound { uri } => Some(("uri", json!(uri))),
            Error::Storage {
                path: Some(path), ..
            } => Some(("path", json!(path))),
            _ => None,
        };
        if let (Some((key, value)), Some(map)) = (extra, data.as_object_mut()) {
            map.insert(key.to_owned(), value);
        }
        if let (
            Error::ArtifactNotFound {
                session_id,
                tool_use_id,
            },
            Some(map),
        ) = (self, data.as_object_mut())
        {
            map.insert("sessionId".to_owned(), json!(session_id));
            map.insert("toolUseId".to_owned(), json!(tool_use_id));
        }
        data
    }

    /// The whole JSON-RPC error object.
    pub fn to_rpc(&self) -> Value {
        json!({ "code": self.code(), "message": self.to_string(), "data": self.data() })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Deserialize `T` from a JSON value, naming the offending field on failure.
pub fn from_value<T: serde::de::DeserializeOwned>(value: Value, root: &str) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.path().to_string();
        let path = match (root.is_empty(), inner.as_str()) {
            (true, ".") => "params".to_owned(),
            (true, p) => p.to_owned(),
            (false, ".") => root.to_owned(),
            (false, p) if p.starts_with('[') => format!("{root}{p}"),
            (false, p) => format!("{root}.{p}"),
        };
        Error::invalid_params(path, err.into_inner().to_string())
    })
}
