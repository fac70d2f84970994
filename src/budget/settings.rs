//! The budget's settings: size limits, per-tool policies and how previews
//! are cut. Configuration (`crate::config`) reads them from `toolwire.toml`
//! and `initialize`; the planner takes them as plain values.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Size limits, all counted in `sizeUnit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Limits {
    /// A single fresh tool result larger than this is persisted.
    pub max_result_chars: u64,
    /// Aggregate tool_result size allowed in one outbound user message.
    pub max_message_chars: u64,
    /// Size of the preview kept in place of a persisted result.
    pub preview_chars: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_result_chars: 50_000,
            max_message_chars: 200_000,
            preview_chars: 2_000,
        }
    }
}

/// Per-request overrides of [`Limits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitsOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_chars: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_message_chars: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_chars: Option<u64>,
}

impl Limits {
    pub fn with(self, over: Option<&LimitsOverride>) -> Limits {
        let Some(over) = over else { return self };
        Limits {
            max_result_chars: over.max_result_chars.unwrap_or(self.max_result_chars),
            max_message_chars: over.max_message_chars.unwrap_or(self.max_message_chars),
            preview_chars: over.preview_chars.unwrap_or(self.preview_chars),
        }
    }
}

/// How the preview of a persisted result is cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PreviewMode {
    /// The first `previewChars` of the original (PROTOCOL.md section 4).
    #[default]
    Head,
    /// The first and the last part of the original, with a line saying how
    /// much was left out between them (build logs fail at their end).
    HeadTail,
}

/// Settings of one tool (`tools.<name>`), overriding the general ones for
/// its results.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSettings {
    /// Persist this tool's results above this size; `null` (in TOML, which
    /// has no null: `"never"`) never persists them, as `exemptTools`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "max_or_never"
    )]
    #[schemars(with = "Option<MaxOrNever>")]
    pub max_result_chars: Option<Option<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_mode: Option<PreviewMode>,
}

/// A tool's `maxResultChars`: a number, or `null` / `"never"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
enum MaxOrNever {
    Chars(u64),
    Never(Never),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
enum Never {
    Never,
}

/// Present-but-null is `Some(None)`: never persist; absent is `None`.
fn max_or_never<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Ok(Some(match Option::<MaxOrNever>::deserialize(d)? {
        Some(MaxOrNever::Chars(n)) => Some(n),
        Some(MaxOrNever::Never(_)) | None => None,
    }))
}

/// Per-tool settings by tool name.
pub type Tools = BTreeMap<String, ToolSettings>;

/// Overlay `top` onto `base`, tool by tool and key by key.
pub fn merge_tools(base: &Tools, top: Option<&Tools>) -> Tools {
    let mut out = base.clone();
    for (name, settings) in top.into_iter().flatten() {
        let slot = out.entry(name.clone()).or_default();
        if settings.max_result_chars.is_some() {
            slot.max_result_chars = settings.max_result_chars;
        }
        if settings.preview_mode.is_some() {
            slot.preview_mode = settings.preview_mode;
        }
    }
    out
}

/// How one tool's fresh results are budgeted: its own settings where it
/// has them, else the general ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolPolicy {
    /// `None`: never persisted.
    pub max_result_chars: Option<u64>,
    pub preview_mode: PreviewMode,
}

impl ToolPolicy {
    pub fn resolve(
        tools: &Tools,
        name: Option<&str>,
        limits: &Limits,
        preview_mode: PreviewMode,
    ) -> ToolPolicy {
        let own = name.and_then(|n| tools.get(n));
        ToolPolicy {
            max_result_chars: own
                .and_then(|t| t.max_result_chars)
                .unwrap_or(Some(limits.max_result_chars)),
            preview_mode: own.and_then(|t| t.preview_mode).unwrap_or(preview_mode),
        }
    }
}
