//! The replacement string put in place of a persisted result.
//!
//! Its shape is the one models already meet in the most used coding agent, so
//! they know to open the file. It is a pure function of the original text,
//! the artifact path, the preview size and the unit: the same inputs give the
//! same bytes on every turn, retry, resume and fork, which is what keeps
//! provider prompt caches hitting.

use super::PreviewMode;
use crate::format::size::format_size;
use crate::format::{OPEN_TAG, SizeUnit};

/// Every saved output's link starts with this (PROTOCOL.md 12.3).
pub const LINK_PREFIX: &str = "toolwire://saved-output/";

/// The tool an MCP front reads a link with.
pub const READ_TOOL: &str = "read_saved_output";

/// The link of the output of `tool_use_id` in session `session` (the id
/// its reader knows the session by).
pub fn link(session: &str, tool_use_id: &str) -> String {
    format!("{LINK_PREFIX}{session}/{tool_use_id}")
}

/// Where a preview says its output is: the saved file's path, and its
/// link when the model reads saved outputs through MCP.
pub struct Saved<'a> {
    pub path: &'a str,
    pub link: Option<&'a str>,
}

impl Saved<'_> {
    /// The preview's first line(s). The path stays on the first line, ahead
    /// of the link, so [`preview_target`] finds the file whichever it is.
    fn first(&self, original_size: u64) -> String {
        let mut first = format!(
            "Output too large ({}). Full output saved to: {}",
            format_size(original_size),
            self.path
        );
        if let Some(link) = self.link {
            first.push_str(&format!(
                "\nRead it with the {READ_TOOL} tool (MCP server toolwire): uri {link}"
            ));
        }
        first
    }
}

/// Build the replacement for an original of `original_size` units whose text
/// (for previewing) is `text`, saved as `saved` says, in preview `mode`.
pub fn replacement(
    text: &str,
    original_size: u64,
    saved: &Saved<'_>,
    preview_size: u64,
    unit: SizeUnit,
    mode: PreviewMode,
) -> String {
    match mode {
        PreviewMode::Head => head(text, original_size, saved, preview_size, unit),
        PreviewMode::HeadTail => head_tail(text, original_size, saved, preview_size, unit),
    }
}

/// `head`: PROTOCOL.md section 4's preview, unchanged (a link line added
/// when there is one).
fn head(
    text: &str,
    original_size: u64,
    saved: &Saved<'_>,
    preview_size: u64,
    unit: SizeUnit,
) -> String {
    head_under(&saved.first(original_size), text, preview_size, unit)
}

/// The `head` preview of `text` under its first line `first`.
pub fn head_under(first: &str, text: &str, preview_size: u64, unit: SizeUnit) -> String {
    let (preview, has_more) = cut_preview(text, preview_size, unit);
    let more = if has_more { "...\n" } else { "" };
    format!(
        "{OPEN_TAG}\n{first}\n\nPreview (first {}):\n{preview}\n{more}</persisted-output>",
        format_size(preview_size),
    )
}

/// The first `limit` units of `text`, cut back to just before the last
/// newline when that newline lies past the middle; never splits a character.
/// Returns the preview and whether it is shorter than `text`.
pub fn cut_preview(text: &str, limit: u64, unit: SizeUnit) -> (&str, bool) {
    let mut units = 0u64;
    let mut end = text.len();
    let mut last_newline: Option<(usize, u64)> = None;
    for (idx, ch) in text.char_indices() {
        let w = unit.char_len(ch);
        if units + w > limit {
            end = idx;
            break;
        }
        if ch == '\n' {
            last_newline = Some((idx, units));
        }
        units += w;
    }
    if end == text.len() {
        return (text, false);
    }
    match last_newline {
        Some((idx, at)) if at * 2 > limit => (&text[..idx], true),
        _ => (&text[..end], true),
    }
}

/// `headTail`: the first and the last part of the original, the preview
/// budget split between them (the head gets the odd unit), with a line
/// saying how much was left out:
///
/// ```text
/// <persisted-output>
/// Output too large (<size>). Full output saved to: <path>
///
/// Preview (first <head budget> and last <tail budget>):
/// <head>
/// ... <omitted> omitted ...
/// <tail>
/// </persisted-output>
/// ```
///
/// The head is cut as [`cut_preview`] cuts; the tail by the mirror rule
/// ([`cut_tail`]). `<omitted>` is the size of what lies between them, in
/// the size unit, formatted as `<size>`. An original that fits the whole
/// budget gets exactly the `head` preview (nothing is left out).
fn head_tail(
    text: &str,
    original_size: u64,
    saved: &Saved<'_>,
    preview_size: u64,
    unit: SizeUnit,
) -> String {
    let (head_size, tail_size) = split_budget(preview_size);
    let (first, cut) = cut_preview(text, head_size, unit);
    if !cut || unit.len(text) <= preview_size {
        return head(text, original_size, saved, preview_size, unit);
    }
    let last = cut_tail(text, tail_size, unit);
    let omitted = unit.len(&text[first.len()..text.len() - last.len()]);
    format!(
        "{OPEN_TAG}\n{}\n\nPreview (first {} and last {}):\n{first}\n... {} omitted ...\n{last}\n</persisted-output>",
        saved.first(original_size),
        format_size(head_size),
        format_size(tail_size),
        format_size(omitted),
    )
}

/// A `headTail` preview budget as (head, tail): the head gets the odd unit.
pub fn split_budget(preview_size: u64) -> (u64, u64) {
    let tail = preview_size / 2;
    (preview_size - tail, tail)
}

/// The last `limit` units of `text`, cut forward to just after the first
/// newline in them when more than half of them follows it (the mirror of
/// [`cut_preview`]'s rule); never splits a character.
pub fn cut_tail(text: &str, limit: u64, unit: SizeUnit) -> &str {
    let mut units = 0u64;
    let mut start = text.len();
    let mut first_newline: Option<(usize, u64)> = None;
    for (idx, ch) in text.char_indices().rev() {
        let w = unit.char_len(ch);
        if units + w > limit {
            break;
        }
        if ch == '\n' {
            // Units after this newline, within the window.
            first_newline = Some((idx, units));
        }
        units += w;
        start = idx;
    }
    match first_newline {
        Some((idx, after)) if after * 2 > limit => &text[idx + 1..],
        _ => &text[start..],
    }
}

/// The `(session, artifact name)` a preview's path names:
/// `…/sessions/<session>/tool-results/<name>`.
pub fn preview_target(replacement: &str) -> Option<(String, String)> {
    const MARK: &str = "Full output saved to: ";
    let start = replacement.find(MARK)? + MARK.len();
    let rest = &replacement[start..];
    let path = std::path::Path::new(&rest[..rest.find('\n').unwrap_or(rest.len())]);
    let name = path.file_name()?.to_str()?;
    let results = path.parent()?;
    if results.file_name()? != "tool-results" {
        return None;
    }
    let session = results.parent()?.file_name()?.to_str()?;
    Some((session.to_owned(), name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Saved at `/p`, with no link.
    const AT_P: Saved<'static> = Saved {
        path: "/p",
        link: None,
    };

    #[test]
    fn previews_name_their_session_and_artifact() {
        let r = "<persisted-output>\nOutput too large (2KB). Full output saved to: /w/.toolwire/sessions/s-1/tool-results/toolu_1.txt\n\nPreview";
        assert_eq!(
            preview_target(r),
            Some(("s-1".into(), "toolu_1.txt".into()))
        );
        assert_eq!(preview_target("no path here"), None);
        assert_eq!(preview_target("Full output saved to: /etc/passwd\n"), None);
    }

    #[test]
    fn whole_original_when_it_fits() {
        let r = replacement(
            "short",
            5,
            &Saved {
                path: "/d/x.txt",
                link: None,
            },
            2000,
            SizeUnit::Chars,
            PreviewMode::Head,
        );
        assert_eq!(
            r,
            "<persisted-output>\nOutput too large (5 bytes). Full output saved to: /d/x.txt\n\nPreview (first 2KB):\nshort\n</persisted-output>"
        );
    }

    #[test]
    fn cut_at_newline_past_middle_else_at_limit() {
        assert_eq!(
            cut_preview("aaaa\nbbbbbbbb", 10, SizeUnit::Chars),
            ("aaaa\nbbbbb", true)
        );
        assert_eq!(
            cut_preview("aaaaaaa\nbbbbbbbb", 10, SizeUnit::Chars),
            ("aaaaaaa", true)
        );
        // Exactly at the middle is not past it.
        assert_eq!(
            cut_preview("aaaaa\nbbbbbbbb", 10, SizeUnit::Chars),
            ("aaaaa\nbbbb", true)
        );
        let r = replacement(
            "aaaaaaa\nbbbbbbbb",
            16,
            &AT_P,
            10,
            SizeUnit::Chars,
            PreviewMode::Head,
        );
        assert!(
            r.ends_with("Preview (first 10 bytes):\naaaaaaa\n...\n</persisted-output>"),
            "{r}"
        );
    }

    #[test]
    fn never_splits_a_character() {
        let s = "\u{1F600}\u{1F600}\u{1F600}";
        assert_eq!(cut_preview(s, 3, SizeUnit::Utf16), ("\u{1F600}", true));
        assert_eq!(cut_preview(s, 5, SizeUnit::Bytes), ("\u{1F600}", true));
        assert_eq!(
            cut_preview(s, 2, SizeUnit::Chars),
            ("\u{1F600}\u{1F600}", true)
        );
    }

    #[test]
    fn head_tail_exact_bytes() {
        // 30 lines of "line NN\n" (8 chars each, 240 in all), budget 40:
        // head 20 cut back to just before its last newline (15), tail 20 cut forward
        // past its first newline (16).
        let text: String = (1..=30).map(|i| format!("line {i:02}\n")).collect();
        let r = replacement(
            &text,
            240,
            &Saved {
                path: "/d/t.txt",
                link: None,
            },
            40,
            SizeUnit::Chars,
            PreviewMode::HeadTail,
        );
        assert_eq!(
            r,
            "<persisted-output>\nOutput too large (240 bytes). Full output saved to: /d/t.txt\n\n\
             Preview (first 20 bytes and last 20 bytes):\nline 01\nline 02\n... 209 bytes omitted ...\n\
             line 29\nline 30\n\n</persisted-output>"
        );
        // No newline to cut at: exact unit counts, whole characters.
        let text = "\u{1F600}".repeat(20);
        let r = replacement(&text, 20, &AT_P, 7, SizeUnit::Utf16, PreviewMode::HeadTail);
        assert!(
            r.ends_with("Preview (first 4 bytes and last 3 bytes):\n\u{1F600}\u{1F600}\n... 34 bytes omitted ...\n\u{1F600}\n</persisted-output>"),
            "{r}"
        );
        // A newline exactly at the middle of the tail is not cut at.
        assert_eq!(
            cut_tail("xxxxxxxxxxaaaa\nbbbbb", 10, SizeUnit::Chars),
            "aaaa\nbbbbb"
        );
        assert_eq!(
            cut_tail("xxxxxxxxxxaaa\nbbbbbb", 10, SizeUnit::Chars),
            "bbbbbb"
        );
        assert_eq!(
            cut_tail("xxxxxxxxxxaaaaaaa\nbb", 10, SizeUnit::Chars),
            "aaaaaaa\nbb"
        );
        // What fits is shown whole, exactly as in head mode.
        for text in ["short", "just\nten!"] {
            assert_eq!(
                replacement(text, 10, &AT_P, 10, SizeUnit::Chars, PreviewMode::HeadTail),
                replacement(text, 10, &AT_P, 10, SizeUnit::Chars, PreviewMode::Head)
            );
        }
    }

    fn unit() -> impl proptest::strategy::Strategy<Value = SizeUnit> {
        proptest::prop_oneof![
            proptest::strategy::Just(SizeUnit::Chars),
            proptest::strategy::Just(SizeUnit::Utf16),
            proptest::strategy::Just(SizeUnit::Bytes),
        ]
    }

    proptest::proptest! {
        /// The head is a true prefix and the tail a true suffix of the
        /// original, within their budgets, disjoint, and the preview is a
        /// pure function of its inputs.
        #[test]
        fn head_tail_is_prefix_and_suffix_within_budget(
            text in "(\\PC{0,12}\n?){0,24}",
            budget in 0u64..120,
            unit in unit(),
        ) {
            let (h, t) = split_budget(budget);
            proptest::prop_assert_eq!(h + t, budget);
            let (first, _) = cut_preview(&text, h, unit);
            let last = cut_tail(&text, t, unit);
            proptest::prop_assert!(text.starts_with(first));
            proptest::prop_assert!(text.ends_with(last));
            proptest::prop_assert!(unit.len(first) <= h && unit.len(last) <= t);
            let size = unit.len(&text);
            let r = replacement(&text, size, &AT_P, budget, unit, PreviewMode::HeadTail);
            proptest::prop_assert_eq!(&r, &replacement(&text, size, &AT_P, budget, unit, PreviewMode::HeadTail));
            if size <= budget {
                proptest::prop_assert_eq!(r, replacement(&text, size, &AT_P, budget, unit, PreviewMode::Head));
            } else {
                proptest::prop_assert!(first.len() + last.len() <= text.len());
                let omitted = size - unit.len(first) - unit.len(last);
                let expected = format!(
                    "Preview (first {} and last {}):\n{first}\n... {} omitted ...\n{last}\n</persisted-output>",
                    format_size(h), format_size(t), format_size(omitted)
                );
                proptest::prop_assert!(r.ends_with(&expected), "{} !~ {}", r, expected);
            }
        }
    }

    #[test]
    fn a_link_goes_on_the_line_after_the_path() {
        let saved = Saved {
            path: "/d/sessions/t.s/tool-results/t1.txt",
            link: Some("toolwire://saved-output/s/t1"),
        };
        let r = replacement("abc\ndef", 7, &saved, 3, SizeUnit::Chars, PreviewMode::Head);
        assert!(
            r.starts_with("<persisted-output>\nOutput too large (7 bytes). Full output saved to: /d/sessions/t.s/tool-results/t1.txt\nRead it with the read_saved_output tool (MCP server toolwire): uri toolwire://saved-output/s/t1\n\nPreview"),
            "{r}"
        );
        assert_eq!(
            preview_target(&r),
            Some(("t.s".to_owned(), "t1.txt".to_owned()))
        );
    }
}
