//! A recording pass-through between an agent and `toolwire proxy`: it
//! keeps every request body exactly as the agent sent it (the originals
//! the proxy's saved outputs must equal) and forwards the request, its
//! answer streamed back as it arrives. When the proxy cannot be reached
//! (killed, not yet restarted) it retries the connection for a while, as
//! an agent's own retries would; an answer cut off mid-way is a 502, which
//! the agents retry.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};

use crate::fake_provider::serve;

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// One request as the agent sent it.
#[derive(Debug, Clone)]
pub struct Sent {
    pub method: String,
    pub path: String,
    pub body: Bytes,
    /// The status the agent got (502 when the proxy could not answer).
    pub status: u16,
}

#[derive(Clone)]
pub struct Tap {
    pub addr: SocketAddr,
    sent: Arc<Mutex<Vec<Sent>>>,
}

/// How long the tap keeps trying to reach a proxy that is down.
const RECONNECT_FOR: Duration = Duration::from_secs(60);

impl Tap {
    /// Start on a loopback port, forwarding to `target` (a base URL).
    pub async fn start(target: String) -> Tap {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let shared = sent.clone();
        let addr = serve(move |req| {
            let (sent, client, target) = (shared.clone(), client.clone(), target.clone());
            async move { forward(sent, client, &target, req).await }
        })
        .await;
        Tap { addr, sent }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

fn bad_gateway(why: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(why))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

async fn forward(
    sent: Arc<Mutex<Vec<Sent>>>,
    client: reqwest::Client,
    target: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let record = |status: u16| {
        sent.lock().unwrap().push(Sent {
            method: parts.method.to_string(),
            path: path.clone(),
            body: body.clone(),
            status,
        })
    };
    let url = format!("{target}{path}");
    let deadline = tokio::time::Instant::now() + RECONNECT_FOR;
    let answer = loop {
        let mut request = client
            .request(parts.method.clone(), &url)
            .body(body.clone());
        for (name, value) in &parts.headers {
            if name != "host" && name != "content-length" {
                request = request.header(name, value);
            }
        }
        match request.send().await {
            Ok(answer) => break answer,
            Err(e) if e.is_connect() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                record(502);
                return bad_gateway(format!("tap: {e}"));
            }
        }
    };
    record(answer.status().as_u16());
    let mut r = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" && name != "connection" {
            r = r.header(name.as_str(), value.as_bytes());
        }
    }
    let stream = answer
        .bytes_stream()
        .map_ok(Frame::data)
        .map_err(std::io::Error::other);
    r.body(StreamBody::new(stream).boxed_unsync())
        .unwrap_or_else(|e| bad_gateway(format!("tap: {e}")))
}
