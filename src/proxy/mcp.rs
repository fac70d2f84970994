//! `/mcp`: MCP over Streamable HTTP on the proxy (PROTOCOL.md 12.3), so a
//! model on another machine reads back the saved outputs its previews
//! name. Behind the same tokens as every other route (`/t/<token>/mcp` or
//! `x-toolwire-token`); what it reads is the caller's tenant's alone, a
//! link of any other session being "not found" (`mcp::http`).
//!
//! POST carries one JSON-RPC message (or a batch) and is answered with one
//! `application/json` body, or 202 when it asked nothing. GET (a stream
//! of server messages) and DELETE (ending an MCP session) are 405: this
//! server sends nothing unasked and keeps no MCP session.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::auth::Caller;
use super::upstream::ProxyBody;
use crate::mcp::http::{self as mcp_http, Reader};
use crate::protocol::SessionId;

/// The path, after any `/t/<token>` prefix.
pub const PATH: &str = "/mcp";

/// The largest request body: a JSON-RPC request of this server names a
/// link and a page, never a conversation.
const MAX_BODY: usize = 1 << 20;

impl super::Proxy {
    pub(super) async fn mcp(&self, req: Request<Incoming>, caller: &Caller) -> Response<ProxyBody> {
        if req.method() != Method::POST {
            let mut response = super::answer(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain; charset=utf-8",
                format!(
                    "toolwire proxy: {} {PATH} is not served: POST JSON-RPC messages\n",
                    req.method()
                ),
            );
            response
                .headers_mut()
                .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
            return response;
        }
        if let Some(origin) = req.headers().get(http::header::ORIGIN)
            && *caller == Caller::Anyone
            && !loopback_origin(origin.as_bytes())
        {
            // MCP's transport asks servers to check Origin: without tokens,
            // a web page the user opens could otherwise reach a loopback
            // proxy through DNS rebinding and read the saved outputs.
            return plain(
                StatusCode::FORBIDDEN,
                "toolwire proxy: /mcp without tenants' tokens answers no request from a web page of another origin".to_owned(),
            );
        }
        let header_version = req
            .headers()
            .get(mcp_http::VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let timeout =
            super::seconds(self.config.proxy.body_timeout_seconds).unwrap_or(Duration::MAX);
        let body =
            match tokio::time::timeout(timeout, Limited::new(req.into_body(), MAX_BODY).collect())
                .await
            {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(err)) if err.is::<http_body_util::LengthLimitError>() => {
                    return plain(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("toolwire proxy: an {PATH} request is at most {MAX_BODY} bytes"),
                    );
                }
                Ok(Err(err)) => {
                    return plain(
                        StatusCode::BAD_REQUEST,
                        format!("toolwire proxy: reading the request body failed: {err}"),
                    );
                }
                Err(_) => {
                    return plain(
                        StatusCode::REQUEST_TIMEOUT,
                        "toolwire proxy: the request body did not arrive in time".to_owned(),
                    );
                }
            };
        let scope = |id: SessionId| caller.scoped(id).ok();
        let reader = Reader {
            config: &self.config,
            registry: &self.registry,
            scope: &scope,
        };
        match mcp_http::answer(&reader, &body, header_version.as_deref()).await {
            Some(message) => super::answer(StatusCode::OK, "application/json", message.to_string()),
            None => {
                let mut response = super::answer(StatusCode::ACCEPTED, "text/plain", String::new());
                response.headers_mut().remove(http::header::CONTENT_TYPE);
                response
            }
        }
    }
}

/// Whether an `Origin` names a loopback host (`localhost`, 127.0.0.0/8,
/// `[::1]`), on any scheme and port.
fn loopback_origin(origin: &[u8]) -> bool {
    let Ok(url) = std::str::from_utf8(origin).map(url::Url::parse) else {
        return false;
    };
    match url.ok().and_then(|u| u.host().map(|h| h.to_owned())) {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

fn plain(status: StatusCode, message: String) -> Response<ProxyBody> {
    tracing::info!(status = status.as_u16(), message, "answering an /mcp error");
    super::answer(status, "text/plain; charset=utf-8", message)
}

#[cfg(test)]
mod tests {
    use super::loopback_origin;

    #[test]
    fn only_loopback_origins_are_loopback() {
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            assert!(loopback_origin(origin.as_bytes()), "{origin}");
        }
        for origin in [
            "https://evil.example",
            "null",
            "http://127.0.0.1.evil.example",
            "",
            "\u{ff}",
        ] {
            assert!(!loopback_origin(origin.as_bytes()), "{origin}");
        }
    }
}
