//! Saved outputs as MCP sees them: `toolwire://` links, `resources/read`
//! and the `read_saved_output` tool.
//!
//! A link names the front's session and the result's id:
//!
//! ```text
//! toolwire://saved-output/<sessionId>/<toolUseId>
//! toolwire://saved-output/<sessionId>/<toolUseId>?offset=0&limit=2000&grep=RE&context=2
//! ```
//!
//! `resources/read` of the bare link returns the saved artifact whole,
//! exactly as stored (the text for a text result, `text/plain`; the content
//! array for a result of several items, `application/json`). With a query
//! it returns one page, as `artifact/read` pages. `read_saved_output`
//! pages the same way and is what a model calls; both are answered by the
//! core's artifact reader, never by a second one. Only what the reader
//! [`Saved::resolve`]s is readable: the stdio front's own session, or a
//! session of the HTTP caller's tenant (`http`); any other link is "not
//! found", never "forbidden", so it tells nothing of what exists.

use serde_json::{Value, json};

use super::Scope;
use crate::artifact::ArtifactKind;
use crate::artifact::read::{self as artifact_read, ReadRequest, ReadResult};
use crate::config::Effective;
use crate::error::{Error, Result};
use crate::protocol::SessionId;
use crate::session::Registry;

/// Who reads saved outputs through links: where the configuration and the
/// sessions are, and which session a link's session segment is on the
/// stores, if the reader may read it at all.
pub(super) trait Saved: Send + Sync {
    fn config(&self) -> &Effective;
    fn registry(&self) -> &Registry;
    /// The store's session for a link's session segment; `None` for one
    /// the reader may not read (answered as not found).
    fn resolve(&self, named: &str) -> Option<SessionId>;
}

/// A stdio front reads its own session and nothing else.
impl<T: Scope + ?Sized> Saved for T {
    fn config(&self) -> &Effective {
        Scope::config(self)
    }

    fn registry(&self) -> &Registry {
        Scope::registry(self)
    }

    fn resolve(&self, named: &str) -> Option<SessionId> {
        (named == self.session().as_str()).then(|| self.session().clone())
    }
}

/// The tool the front adds to `tools/list` (the one previews name).
pub const READ_TOOL: &str = crate::budget::preview::READ_TOOL;

/// Every link of ours starts with this.
pub const URI_PREFIX: &str = crate::budget::preview::LINK_PREFIX;

/// The first protocol revision with `structuredContent` and `outputSchema`.
const STRUCTURED_SINCE: &str = "2025-06-18";
/// The first revision whose results carry `resultType`.
const RESULT_TYPE_SINCE: &str = "2026-07-28";

pub(super) fn uri(session: &SessionId, tool_use_id: &str) -> String {
    crate::budget::preview::link(session.as_str(), tool_use_id)
}

/// Whether `version` (a negotiated revision, absent when none was seen) is
/// at least `since`. Unknown, non-dated revisions count as newer.
pub(super) fn at_least(version: Option<&str>, since: &str) -> bool {
    match version {
        Some(v) if is_dated(v) => v >= since,
        _ => true,
    }
}

/// Date-shaped revisions (`YYYY-MM-DD`) compare as strings.
pub(super) fn is_dated(version: &str) -> bool {
    version.len() == 10
        && version.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
}

/// How a model reads a saved output back, for the link's description.
pub(super) fn how_to_read(front: &dyn Scope) -> String {
    if front.read_tool_active() {
        format!("read it in pages with the {READ_TOOL} tool")
    } else {
        "read it with resources/read".to_owned()
    }
}

/// A result the front makes itself, as the request's revision expects it.
pub(super) fn complete(mut result: Value, version: Option<&str>) -> Value {
    if version.is_some_and(|v| is_dated(v) && v >= RESULT_TYPE_SINCE)
        && let Some(obj) = result.as_object_mut()
    {
        obj.insert("resultType".into(), json!("complete"));
    }
    result
}

/// [`complete`], with caching hints when `method` is one whose modern
/// results carry them. The front's own answers are fresh for no time and
/// for this caller only: a saved output may be removed by gc, and the
/// front's empty lists stand in for a server that may change.
pub(super) fn complete_for(method: &str, result: Value, version: Option<&str>) -> Value {
    let mut result = complete(result, version);
    if super::era::CACHEABLE.contains(&method)
        && let Some(obj) = result.as_object_mut()
        && obj.contains_key("resultType")
    {
        super::era::add_cache_hints(obj);
    }
    result
}

/// `read_saved_output` as `tools/list` shows it.
pub(super) fn tool_definition(version: Option<&str>) -> Value {
    let mut tool = json!({
        "name": READ_TOOL,
        "title": "Read saved output",
        "description": "Read a tool output that was too large to show whole. Its preview ends with a resource link (toolwire://saved-output/...): pass that uri. Returns lines offset..offset+limit (0-based, default 2000 lines), exactly as saved; call again with offset = endLine while truncated is true. With grep (a regular expression), returns only the matching lines, numbered from 1 like grep -n, with context lines around each.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "uri": {"type": "string", "description": "The saved output's link (toolwire://saved-output/...)"},
                "offset": {"type": "integer", "minimum": 0, "description": "First line to read (0-based); with grep, where the search starts"},
                "limit": {"type": "integer", "minimum": 1, "description": "Lines to read (default 2000); with grep, matching lines to show"},
                "grep": {"type": "string", "description": "A regular expression: show only the matching lines"},
                "context": {"type": "integer", "minimum": 0, "maximum": 100, "description": "With grep: lines shown before and after each match"}
            },
            "required": ["uri"],
            "additionalProperties": false
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
    });
    if at_least(version, STRUCTURED_SINCE)
        && let Some(obj) = tool.as_object_mut()
    {
        obj.insert(
            "outputSchema".into(),
            json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "startLine": {"type": "integer"},
                    "endLine": {"type": "integer"},
                    "totalLines": {"type": "integer"},
                    "totalChars": {"type": "integer"},
                    "truncated": {"type": "boolean"}
                },
                "required": ["text", "startLine", "endLine", "totalLines", "totalChars", "truncated"]
            }),
        );
    }
    tool
}

/// What to read of a saved output.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Page {
    pub offset: Option<u64>,
    pub limit: Option<u64>,
    pub grep: Option<String>,
    pub context: Option<u64>,
}

/// A link taken apart: the store's session, the result's id, and a page
/// when it has a query.
fn parse_uri(front: &dyn Saved, raw: &str) -> Result<(SessionId, String, Option<Page>)> {
    let bad = |why: &str| Error::invalid_params("uri", format!("{why}: {raw:?}"));
    let url = url::Url::parse(raw).map_err(|_| bad("not a URI"))?;
    if url.scheme() != "toolwire" || url.host_str() != Some("saved-output") {
        return Err(bad("not a toolwire saved-output link"));
    }
    let mut parts = url.path().trim_start_matches('/').split('/');
    let (Some(session), Some(id), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("expected toolwire://saved-output/<session>/<id>"));
    };
    // The id as `link` encoded it (a reused id's other original is
    // `<id>%23<digest>`).
    let id = crate::budget::preview::link_id(id).ok_or_else(|| bad("the id is not UTF-8"))?;
    let Some(session) = front.resolve(session).filter(|_| !id.is_empty()) else {
        return Err(Error::ResourceNotFound {
            uri: raw.to_owned(),
        });
    };
    if url.query().is_none() {
        return Ok((session, id, None));
    }
    let mut page = Page::default();
    for (key, value) in url.query_pairs() {
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| Error::invalid_params(format!("uri?{key}"), "expected a whole number"))
        };
        match &*key {
            "offset" => page.offset = Some(number()?),
            "limit" => page.limit = Some(number()?),
            "context" => page.context = Some(number()?),
            "grep" => page.grep = Some(value.into_owned()),
            other => {
                return Err(Error::invalid_params(
                    format!("uri?{other}"),
                    "unknown parameter (offset, limit, grep, context)",
                ));
            }
        }
    }
    Ok((session, id, Some(page)))
}

/// `resources/read` of one of our links.
pub(super) async fn read_resource(
    front: &dyn Saved,
    uri: &str,
    version: Option<&str>,
) -> Result<Value> {
    let (session, id, page) = parse_uri(front, uri)?;
    let not_found = |err: Error| match err {
        Error::ArtifactNotFound { .. } => Error::ResourceNotFound {
            uri: uri.to_owned(),
        },
        other => other,
    };
    let content = match page {
        None => {
            let (bytes, kind) = read_whole(front, &session, &id).await.map_err(not_found)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| Error::Internal(format!("saved output {id} is not UTF-8")))?;
            json!({"uri": uri, "mimeType": mime_type(kind), "text": text})
        }
        Some(page) => {
            let read = read_page(front, &session, &id, page)
                .await
                .map_err(not_found)?;
            json!({"uri": uri, "mimeType": "text/plain", "text": read.text})
        }
    };
    Ok(complete_for(
        "resources/read",
        json!({ "contents": [content] }),
        version,
    ))
}

pub(super) fn mime_type(kind: ArtifactKind) -> &'static str {
    match kind {
        ArtifactKind::Text => "text/plain",
        ArtifactKind::Json => "application/json",
    }
}

/// A call of `read_saved_output`. Whatever goes wrong is a tool error the
/// model can read (`isError`), as MCP asks of tool failures.
pub(super) async fn call_read_tool(
    front: &dyn Saved,
    arguments: Value,
    version: Option<&str>,
) -> Value {
    let outcome = async {
        let args: ReadToolArgs = crate::error::from_value(arguments, "arguments")?;
        let (session, id, from_uri) = parse_uri(front, &args.uri)?;
        let page = Page {
            offset: args.offset.or(from_uri.as_ref().and_then(|p| p.offset)),
            limit: args.limit.or(from_uri.as_ref().and_then(|p| p.limit)),
            grep: args.grep.or(from_uri.as_ref().and_then(|p| p.grep.clone())),
            context: args.context.or(from_uri.and_then(|p| p.context)),
        };
        // Not found as `resources/read` says it: the link, never the
        // store's (a tenant's scoped) session id.
        read_page(front, &session, &id, page)
            .await
            .map_err(|err| match err {
                Error::ArtifactNotFound { .. } => Error::ResourceNotFound { uri: args.uri },
                other => other,
            })
    }
    .await;
    let result = match outcome {
        Ok(read) => {
            let mut content = vec![json!({"type": "text", "text": read.text})];
            if read.truncated {
                content.push(json!({
                    "type": "text",
                    "text": format!(
                        "[lines {}-{} of {}; more follows: call again with offset {}]",
                        read.start_line, read.end_line, read.total_lines, read.end_line
                    ),
                }));
            }
            let mut result = json!({ "content": content });
            if at_least(version, STRUCTURED_SINCE)
                && let (Some(obj), Ok(structured)) =
                    (result.as_object_mut(), serde_json::to_value(&read))
            {
                obj.insert("structuredContent".into(), structured);
            }
            result
        }
        Err(err) => json!({
            "content": [{"type": "text", "text": err.to_string()}],
            "isError": true,
        }),
    };
    complete(result, version)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadToolArgs {
    uri: String,
    offset: Option<u64>,
    limit: Option<u64>,
    grep: Option<String>,
    context: Option<u64>,
}

// ------------------------------------ through the core's artifact reader --

async fn read_page(
    front: &dyn Saved,
    session: &SessionId,
    id: &str,
    page: Page,
) -> Result<ReadResult> {
    if page.limit == Some(0) {
        // A page of no lines would end where it starts, and "more follows
        // at the same offset" would send a model round in circles.
        return Err(Error::invalid_params(
            "limit",
            "must be at least 1 (the number of lines to read; omit it for 2000)",
        ));
    }
    let request = ReadRequest {
        offset: page.offset.unwrap_or(0),
        limit: page.limit,
        grep: page.grep,
        context: page.context.unwrap_or(0),
    };
    let (data_dir, objects, session, unit, id) = (
        front.config().data_dir.clone(),
        front.config().storage.objects.clone(),
        session.clone(),
        front.config().size_unit,
        id.to_owned(),
    );
    let inherited = inherited(front, &session, &id).await?;
    tokio::task::spawn_blocking(move || {
        artifact_read::read_artifact_until(
            &data_dir,
            objects.as_ref(),
            &session,
            &id,
            inherited,
            &request,
            unit,
            &|| false,
        )
    })
    .await
    .map_err(|err| Error::Internal(format!("reading a saved output: {err}")))?
}

/// The artifact exactly as stored, found and opened by the core.
async fn read_whole(
    front: &dyn Saved,
    session: &SessionId,
    id: &str,
) -> Result<(Vec<u8>, ArtifactKind)> {
    let (data_dir, objects, session, id) = (
        front.config().data_dir.clone(),
        front.config().storage.objects.clone(),
        session.clone(),
        id.to_owned(),
    );
    let inherited = inherited(front, &session, &id).await?;
    tokio::task::spawn_blocking(move || {
        artifact_read::read_whole(&data_dir, objects.as_ref(), &session, &id, inherited)
    })
    .await
    .map_err(|err| Error::Internal(format!("reading a saved output: {err}")))?
}

/// Where the shared store's journal says the output was saved (an output a
/// fork inherited); `None` on transcript files, which the reader reads.
async fn inherited(
    front: &dyn Saved,
    session: &SessionId,
    id: &str,
) -> Result<Option<Vec<(String, String)>>> {
    match front.registry().storage().shared.clone() {
        Some(shared) => crate::store::shared_target(&*shared, session, id).await,
        None => Ok(None),
    }
}
