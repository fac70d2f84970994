//! MCP over Streamable HTTP, as `toolwire proxy` serves it at `/mcp`
//! (PROTOCOL.md 12.3): a model whose agent runs elsewhere than the proxy
//! reads the saved outputs of its tenant through `read_saved_output` and
//! `resources/read`, where a disk path in a preview would name nothing it
//! can open.
//!
//! The proxy has no MCP server behind it, so this answers every request
//! itself, from the same saved-output code as the stdio front ([`saved`]);
//! a POSTed JSON-RPC message is answered with one `application/json`
//! body (the transport's non-streaming answer), a notification or response
//! with nothing. Both revisions: a legacy client's `initialize` settles its
//! version (later requests say it again in `MCP-Protocol-Version`), a
//! modern client's requests declare it in `_meta` and `server/discover`
//! describes the server. It keeps no MCP session between requests: every
//! request is read with the caller's tenant, which the proxy found from
//! the request's token.

use serde_json::{Value, json};

use super::era::{self, Era};
use super::saved::{self, Saved};
use crate::config::Effective;
use crate::error::Error;
use crate::protocol::SessionId;
use crate::session::Registry;

/// The request header a legacy client names its revision in, after
/// `initialize`.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// Who asks: the proxy's configuration and sessions, and how a session id
/// a link names becomes the caller's own on the stores (`None` for an id
/// that cannot be the caller's).
pub struct Reader<'a> {
    pub config: &'a Effective,
    pub registry: &'a Registry,
    pub scope: &'a (dyn Fn(SessionId) -> Option<SessionId> + Send + Sync),
}

impl Saved for Reader<'_> {
    fn config(&self) -> &Effective {
        self.config
    }

    fn registry(&self) -> &Registry {
        self.registry
    }

    fn resolve(&self, named: &str) -> Option<SessionId> {
        (self.scope)(SessionId::try_from(named.to_owned()).ok()?)
    }
}

/// What to send back for one POSTed body: `Some(json)` for a request (or
/// a batch with requests), `None` when nothing was asked (202 Accepted).
pub async fn answer(
    reader: &Reader<'_>,
    body: &[u8],
    header_version: Option<&str>,
) -> Option<Value> {
    let message: Value = match serde_json::from_slice(body) {
        Ok(message) => message,
        Err(err) => {
            return Some(crate::transport::response(
                &Value::Null,
                Err(Error::Parse(format!("the body is not JSON: {err}"))),
            ));
        }
    };
    match message {
        // A batch (2025-03-26 allowed them): each part answered in turn.
        Value::Array(parts) => {
            let mut answers = Vec::new();
            for part in parts {
                if let Some(answer) = one(reader, part, header_version).await {
                    answers.push(answer);
                }
            }
            (!answers.is_empty()).then_some(Value::Array(answers))
        }
        message => one(reader, message, header_version).await,
    }
}

/// One message: a request answered, anything else taken in silence.
async fn one(reader: &Reader<'_>, message: Value, header_version: Option<&str>) -> Option<Value> {
    let Value::Object(obj) = message else {
        return Some(crate::transport::response(
            &Value::Null,
            Err(Error::InvalidRequest(
                "a JSON-RPC message is an object".into(),
            )),
        ));
    };
    let (Some(id), Some(method)) = (obj.get("id"), obj.get("method").and_then(Value::as_str))
    else {
        // Notifications (`notifications/initialized`, cancellations) and
        // responses: nothing here waits on them.
        return None;
    };
    let params = obj.get("params");
    let declared = era::declared_version(params)
        .map(str::to_owned)
        .or_else(|| header_version.map(str::to_owned));
    let version = declared.as_deref();
    let modern = era::is_modern(params);
    let result = match method {
        "initialize" => {
            let asked = params
                .and_then(|p| p.get("protocolVersion"))
                .and_then(Value::as_str);
            let version = asked
                .filter(|v| era::LEGACY_VERSIONS.contains(v))
                .unwrap_or(era::LEGACY);
            Ok(json!({
                "protocolVersion": version,
                "capabilities": capabilities(),
                "serverInfo": era::own_info(),
                "instructions": instructions(),
            }))
        }
        "server/discover" => {
            let described = json!({
                "capabilities": capabilities(),
                "serverInfo": era::own_info(),
                "instructions": instructions(),
            });
            Ok(described
                .as_object()
                .map(era::discover_result)
                .unwrap_or_default())
        }
        _ if !modern && era_of(version) == Era::Modern && method != "ping" => {
            // A modern revision named only in the header: the request must
            // say it in `_meta` too.
            Err(Error::InvalidRequest(format!(
                "{method}: a {} request declares its version in _meta",
                era::MODERN
            )))
        }
        "ping" => Ok(saved::complete(json!({}), version)),
        "tools/list" => Ok(saved::complete_for(
            method,
            json!({"tools": [saved::tool_definition(version)]}),
            version,
        )),
        "tools/call" => {
            let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
            if name == Some(saved::READ_TOOL) {
                let arguments = params
                    .and_then(|p| p.get("arguments"))
                    .cloned()
                    .unwrap_or(Value::Null);
                Ok(saved::call_read_tool(reader, arguments, version).await)
            } else {
                Err(Error::invalid_params(
                    "name",
                    format!(
                        "unknown tool {name:?}: this server has {}",
                        saved::READ_TOOL
                    ),
                ))
            }
        }
        "resources/read" => match params.and_then(|p| p.get("uri")).and_then(Value::as_str) {
            Some(uri) => saved::read_resource(reader, uri, version).await,
            None => Err(Error::invalid_params("uri", "missing")),
        },
        // Saved outputs are not listed: a model finds each through the
        // link its preview ends with, and a list of every output of a
        // tenant would grow without bound.
        "resources/list" => Ok(saved::complete_for(
            method,
            json!({"resources": []}),
            version,
        )),
        "resources/templates/list" => Ok(saved::complete_for(
            method,
            json!({"resourceTemplates": [{
                "uriTemplate": format!("{}{{session}}/{{id}}", saved::URI_PREFIX),
                "name": "saved-output",
                "description": "A tool output toolwire saved whole: the session and tool call id its preview names",
            }]}),
            version,
        )),
        other => Err(Error::MethodNotFound(other.to_owned())),
    };
    let mut response = crate::transport::response(id, result);
    if era_of(version) == Era::Modern
        && let Some(code) = response.pointer_mut("/error/code")
        && code.as_i64() == Some(era::LEGACY_RESOURCE_NOT_FOUND)
    {
        *code = json!(era::MODERN_RESOURCE_NOT_FOUND);
    }
    Some(response)
}

/// The era a request's revision belongs to; none named is legacy (a
/// client that has not said otherwise speaks what `initialize` settled).
fn era_of(version: Option<&str>) -> Era {
    match version {
        Some(v) if !era::LEGACY_VERSIONS.contains(&v) => Era::Modern,
        _ => Era::Legacy,
    }
}

fn capabilities() -> Value {
    json!({"tools": {}, "resources": {}})
}

fn instructions() -> String {
    format!(
        "toolwire keeps tool outputs that were too large to show whole; a preview names one by its {}... link. Read it with the {} tool.",
        saved::URI_PREFIX,
        saved::READ_TOOL
    )
}
