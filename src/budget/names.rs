//! What a saved output is called: `<toolUseId>.txt` or `.json`, or `h.` and
//! the SHA-256 of an id that is not a plain token. The planner names the
//! file when it decides (the preview shows the path); the artifact layer
//! writes it under that name, and retention tells such names from anything
//! else in the directory.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ArtifactKind {
    /// String content, saved as `.txt`.
    Text,
    /// Block-array content, saved as `.json` (the array itself).
    Json,
}

impl ArtifactKind {
    pub fn extension(self) -> &'static str {
        match self {
            ArtifactKind::Text => "txt",
            ArtifactKind::Json => "json",
        }
    }
}

const MAX_PLAIN_ID: usize = 128;

/// The file name for a tool_use_id's artifact.
pub fn file_name(tool_use_id: &str, kind: ArtifactKind) -> String {
    let plain = !tool_use_id.is_empty()
        && tool_use_id.len() <= MAX_PLAIN_ID
        && tool_use_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        format!("{tool_use_id}.{}", kind.extension())
    } else {
        let digest = Sha256::digest(tool_use_id.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("h.{hex}.{}", kind.extension())
    }
}

/// Whether `name` is an artifact's file name as [`file_name`] makes them;
/// false for temporary leftovers (`crate::artifact::TEMP_PREFIX`) and
/// anything else found in the directory.
pub fn is_artifact_name(name: &str) -> bool {
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    if ext != ArtifactKind::Text.extension() && ext != ArtifactKind::Json.extension() {
        return false;
    }
    let plain = |s: &str| {
        !s.is_empty()
            && s.len() <= MAX_PLAIN_ID
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    match stem.strip_prefix("h.") {
        Some(hex) => hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        None => plain(stem),
    }
}
