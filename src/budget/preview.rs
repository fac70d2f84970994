//! The replacement string put in place of a persisted result.
//!
//! Its shape is the one models already meet in the most used coding agent, so
//! they know to open the file. It is a pure function of the original text,
//! the artifact path, the preview size and the unit: the same inputs give the
//! same bytes on every turn, retry, resume and fork, which is what keeps
//! provider prompt caches hitting.

use crate::budget::size::format_size;
use crate::config::SizeUnit;

/// Opening tag; text starting with it is never persisted again.
pub const OPEN_TAG: &str = "<persisted-output>";

/// Build the replacement for an original of `original_size` units whose text
/// (for previewing) is `text`, saved at `path`.
pub fn replacement(
    text: &str,
    original_size: u64,
    path: &str,
    preview_size: u64,
    unit: SizeUnit,
) -> String {
    let (preview, has_more) = cut_preview(text, preview_size, unit);
    let more = if has_more { "...\n" } else { "" };
    format!(
        "{OPEN_TAG}\nOutput too large ({}). Full output saved to: {path}\n\nPreview (first {}):\n{preview}\n{more}</persisted-output>",
        format_size(original_size),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_original_when_it_fits() {
        let r = replacement("short", 5, "/d/x.txt", 2000, SizeUnit::Chars);
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
        let r = replacement("aaaaaaa\nbbbbbbbb", 16, "/p", 10, SizeUnit::Chars);
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
}
