//! The replacement string put in place of a persisted result.
//!
//! Its shape is the one models already meet in the most used coding agent, so
//! they know to open the file. It is a pure function of the original text,
//! the artifact path, the preview size and the unit: the same inputs give the
//! same bytes on every turn, retry, resume and fork, which is what keeps
//! provider prompt caches hitting.

use super::PreviewMode;
use super::names::{ArtifactKind, file_name};
use crate::format::size::format_size;
use crate::format::{OPEN_TAG, SizeUnit};

/// Every saved output's link starts with this (PROTOCOL.md 12.3).
pub const LINK_PREFIX: &str = "toolwire://saved-output/";

/// The tool an MCP front reads a link with.
pub const READ_TOOL: &str = "read_saved_output";

/// What a link's id segment holds as it is: RFC 3986's unreserved
/// characters (session ids hold nothing else).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The link of the output saved as `tool_use_id` (a result's id, or
/// `<id>#<digest>` for a reused id's other original) in session `session`
/// (the id its reader knows the session by); the id percent-encoded
/// beyond the unreserved characters, as a URI's path segment is.
pub fn link(session: &str, tool_use_id: &str) -> String {
    format!(
        "{LINK_PREFIX}{session}/{}",
        percent_encoding::utf8_percent_encode(tool_use_id, SEGMENT)
    )
}

/// A link's id segment as the id it encodes (see [`link`]); `None` when it
/// decodes to no UTF-8.
pub fn link_id(segment: &str) -> Option<String> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()
        .map(|id| id.into_owned())
}

/// Where a preview says its output is: the saved file's path, or its link
/// when the model reads saved outputs through MCP (`previews = "mcp"`).
pub struct Saved<'a> {
    pub path: &'a str,
    pub link: Option<&'a str>,
}

/// Names the saved output by its path (PROTOCOL.md section 4).
const PATH_MARK: &str = "Full output saved to: ";

/// Names it by its link instead (PROTOCOL.md 12.3).
const LINK_MARK: &str = "Full output saved as ";

impl Saved<'_> {
    /// The words of a preview's first line that say where the output is:
    /// the path, or, with a link, the link and the tool that reads it and
    /// no path at all (a model elsewhere cannot open the proxy's disk). The
    /// link ends at the first space, so [`preview_names`] finds it.
    pub fn named(&self) -> String {
        match self.link {
            None => format!("{PATH_MARK}{}", self.path),
            Some(link) => format!(
                "{LINK_MARK}{link} - read it with the {READ_TOOL} tool (MCP server toolwire)."
            ),
        }
    }

    /// The preview's first line.
    fn first(&self, original_size: u64) -> String {
        format!(
            "Output too large ({}). {}",
            format_size(original_size),
            self.named()
        )
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

/// `head`: PROTOCOL.md section 4's preview (with the link in place of the
/// path when there is one).
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

/// What a preview says its saved output is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// A path, `…/sessions/<session>/tool-results/<name>`: the session's
    /// directory and the file's name.
    File { session: String, name: String },
    /// A link, `toolwire://saved-output/<session>/<toolUseId>`: the session
    /// as its reader knows it (a tenant's without the tenant's prefix) and
    /// the result's id.
    Link {
        session: String,
        tool_use_id: String,
    },
}

/// What `replacement` (a preview, or a cleared result's text) names as its
/// saved output, if it names one.
pub fn preview_names(replacement: &str) -> Option<Named> {
    // The first line says where the output is; the preview under it is
    // the tool's own text, which may spell either mark (a link preview of
    // a log that quotes a path preview): the earlier mark is the header's.
    let path_at = replacement.find(PATH_MARK);
    let link_at = replacement.find(LINK_MARK);
    if let Some(at) = path_at.filter(|p| link_at.is_none_or(|l| *p < l)) {
        let rest = &replacement[at + PATH_MARK.len()..];
        let path = std::path::Path::new(&rest[..rest.find('\n').unwrap_or(rest.len())]);
        let name = path.file_name()?.to_str()?;
        let results = path.parent()?;
        if results.file_name()? != "tool-results" {
            return None;
        }
        let session = results.parent()?.file_name()?.to_str()?;
        return Some(Named::File {
            session: session.to_owned(),
            name: name.to_owned(),
        });
    }
    let at = link_at? + LINK_MARK.len();
    let rest = replacement[at..].strip_prefix(LINK_PREFIX)?;
    let link = &rest[..rest.find([' ', '\n']).unwrap_or(rest.len())];
    // Session ids hold no `/`; the id is the rest.
    let (session, segment) = link.split_once('/')?;
    let tool_use_id = link_id(segment)?;
    (!session.is_empty() && !tool_use_id.is_empty()).then(|| Named::Link {
        session: session.to_owned(),
        tool_use_id,
    })
}

/// The `(session, artifact name)` a preview's path names:
/// `…/sessions/<session>/tool-results/<name>`. `None` for a link (which
/// names no file by itself: see [`preview_targets`]).
pub fn preview_target(replacement: &str) -> Option<(String, String)> {
    match preview_names(replacement)? {
        Named::File { session, name } => Some((session, name)),
        Named::Link { .. } => None,
    }
}

/// The `(session, artifact name)`s a preview journaled in session `own`
/// (its id on the store) may name, the likeliest first: the one its path
/// names, or for a link the files its id is saved under in the sessions
/// its link's session may be on the store.
///
/// A link names the session as its reader knows it: a tenant's session
/// `<tenant>.<id>` as `<id>` (`proxy::auth`; a tenant's name is 1-64 of
/// `[A-Za-z0-9_-]`, no `.`). A preview is journaled in the session that
/// decided it or in a fork of it, which is the same tenant's: so the link
/// is `own` itself, or the session of `own`'s tenant it names. Never one
/// of another tenant: a link of a session with a tenant's prefix resolves
/// only within that prefix.
pub fn preview_targets(replacement: &str, own: &str) -> Vec<(String, String)> {
    match preview_names(replacement) {
        None => Vec::new(),
        Some(Named::File { session, name }) => vec![(session, name)],
        Some(Named::Link {
            session,
            tool_use_id,
        }) => {
            let names =
                [ArtifactKind::Text, ArtifactKind::Json].map(|k| file_name(&tool_use_id, k));
            link_sessions(own, &session)
                .into_iter()
                .flat_map(|s| names.iter().map(move |n| (s.clone(), n.clone())))
                .collect()
        }
    }
}

/// The store's sessions a link's session `named` may be, journaled in
/// session `own`, the likeliest first (see [`preview_targets`]).
pub fn link_sessions(own: &str, named: &str) -> Vec<String> {
    let prefix = own.split_once('.').and_then(|(tenant, _)| {
        let tenant_like = (1..=64).contains(&tenant.len())
            && tenant
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        tenant_like.then(|| &own[..=tenant.len()])
    });
    let prefixed = prefix.map(|p| format!("{p}{named}"));
    if own == named || prefixed.as_deref() == Some(own) {
        return vec![own.to_owned()];
    }
    let mut sessions: Vec<String> = prefixed.into_iter().collect();
    // Without tenants a session id may hold a `.` of its own: then the
    // link names the session as it is, kept within the same prefix.
    if prefix.is_none_or(|p| named.starts_with(p)) {
        sessions.push(named.to_owned());
    }
    sessions
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
    fn a_link_takes_the_place_of_the_path() {
        let saved = Saved {
            path: "/d/sessions/t.s/tool-results/t1.txt",
            link: Some("toolwire://saved-output/s/t1"),
        };
        let r = replacement("abc\ndef", 7, &saved, 3, SizeUnit::Chars, PreviewMode::Head);
        assert_eq!(
            r,
            "<persisted-output>\nOutput too large (7 bytes). Full output saved as toolwire://saved-output/s/t1 - read it with the read_saved_output tool (MCP server toolwire).\n\nPreview (first 3 bytes):\nabc\n...\n</persisted-output>"
        );
        assert!(!r.contains("/d/") && !r.contains("saved to:"), "{r}");
        assert_eq!(
            preview_names(&r),
            Some(Named::Link {
                session: "s".into(),
                tool_use_id: "t1".into()
            })
        );
        // No file by itself; the session that journals it says which.
        assert_eq!(preview_target(&r), None);
        assert_eq!(
            preview_targets(&r, "t.s"),
            vec![
                ("t.s".to_owned(), "t1.txt".to_owned()),
                ("t.s".to_owned(), "t1.json".to_owned())
            ]
        );
        let tail = replacement(
            "abc\ndef",
            7,
            &saved,
            4,
            SizeUnit::Chars,
            PreviewMode::HeadTail,
        );
        assert!(tail.starts_with("<persisted-output>\nOutput too large (7 bytes). Full output saved as toolwire://saved-output/s/t1 - read it"), "{tail}");
        assert_eq!(preview_names(&tail), preview_names(&r));
        // An id that is no plain token (a reused id's other original) is
        // percent-encoded in its link and saved under its digest's name.
        let reused = link("s", "t1#00ff");
        assert_eq!(reused, "toolwire://saved-output/s/t1%2300ff");
        let odd = replacement(
            "x",
            1,
            &Saved {
                path: "/p",
                link: Some(&reused),
            },
            9,
            SizeUnit::Chars,
            PreviewMode::Head,
        );
        assert_eq!(
            preview_names(&odd),
            Some(Named::Link {
                session: "s".into(),
                tool_use_id: "t1#00ff".into()
            })
        );
        assert_eq!(
            preview_targets(&odd, "s")[0],
            ("s".to_owned(), file_name("t1#00ff", ArtifactKind::Text))
        );
        assert_eq!(
            link("s", "toolu_01-A.b~"),
            "toolwire://saved-output/s/toolu_01-A.b~"
        );
    }

    #[test]
    fn a_link_resolves_within_its_tenant() {
        // The session's own, with or without a tenant's prefix.
        assert_eq!(link_sessions("alice.x", "x"), vec!["alice.x"]);
        assert_eq!(link_sessions("x", "x"), vec!["x"]);
        assert_eq!(link_sessions("a.b.x", "b.x"), vec!["a.b.x"]);
        // A fork's parent, of the same tenant.
        assert_eq!(link_sessions("alice.child", "parent"), vec!["alice.parent"]);
        assert_eq!(link_sessions("child", "parent"), vec!["parent"]);
        // Without tenants, dotted ids as they are, after the prefixed one.
        assert_eq!(
            link_sessions("a.child", "a.parent"),
            vec!["a.a.parent", "a.parent"]
        );
        // Never another tenant's session: bob's `x` is `bob.x` on the store.
        assert_eq!(link_sessions("alice.child", "bob.x"), vec!["alice.bob.x"]);
        assert!(!link_sessions("alice.child", "bob.x").contains(&"bob.x".to_owned()));
        // A link preview of output that quotes a path preview names its
        // link, not the quoted path; and the other way round.
        let saved = Saved {
            path: "/d/sessions/alice.s/tool-results/t1.txt",
            link: Some("toolwire://saved-output/s/t1"),
        };
        let quoting =
            "Output too large (1KB). Full output saved to: /d/sessions/bob.x/tool-results/t9.txt\n";
        let r = replacement(quoting, 99, &saved, 200, SizeUnit::Chars, PreviewMode::Head);
        assert_eq!(
            preview_targets(&r, "alice.s")[0],
            ("alice.s".to_owned(), "t1.txt".to_owned())
        );
        let quoting = "Full output saved as toolwire://saved-output/x/t9 - read it\n";
        let r = replacement(
            quoting,
            99,
            &Saved {
                link: None,
                ..saved
            },
            200,
            SizeUnit::Chars,
            PreviewMode::Head,
        );
        assert_eq!(
            preview_targets(&r, "alice.s"),
            vec![("alice.s".to_owned(), "t1.txt".to_owned())]
        );
        // Links that are no links.
        for bad in [
            "Full output saved as toolwire://saved-output/s",
            "Full output saved as toolwire://saved-output//t1 - read",
            "Full output saved as https://example.com/s/t1",
        ] {
            assert_eq!(preview_names(bad), None, "{bad}");
            assert!(preview_targets(bad, "s").is_empty(), "{bad}");
        }
    }

    #[test]
    fn a_path_preview_names_its_file_in_any_session() {
        let r = replacement(
            "abc",
            3,
            &Saved {
                path: "/w/sessions/p/tool-results/t1.json",
                link: None,
            },
            9,
            SizeUnit::Chars,
            PreviewMode::Head,
        );
        assert_eq!(
            preview_targets(&r, "child"),
            vec![("p".to_owned(), "t1.json".to_owned())]
        );
    }
}
