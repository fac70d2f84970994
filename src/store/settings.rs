//! `[storage]`: which backend holds sessions, and where saved outputs go.
//! Configuration reads it; this layer builds the backend it names.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::artifact::objects::ObjectsConfig;

/// `[storage]` in `toolwire.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StorageConfig {
    /// `local` (transcripts as files under the data directory, one process
    /// per workspace) or `postgres` (shared by every replica).
    pub backend: Backend,
    /// `[storage.postgres]`, for `backend = "postgres"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresConfig>,
    /// Saved outputs on object storage (S3, GCS, Azure, or a local
    /// directory through the same interface) instead of under `dataDir`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<ObjectsConfig>,
}

impl StorageConfig {
    pub fn is_default(&self) -> bool {
        *self == StorageConfig::default()
    }
}

/// `storage.backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Backend {
    #[default]
    Local,
    Postgres,
}

/// `[storage.postgres]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostgresConfig {
    /// Connection URL, e.g. `postgresql://toolwire@db.internal:5432/toolwire`
    /// (or a `key=value` connection string).
    pub url: String,
    /// Connections this process keeps at most (default 16).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

fn default_max_connections() -> usize {
    16
}
