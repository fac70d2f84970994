//! A minimal sequential JSON-RPC client for toolwire's framing, used by the
//! `replay` and `bench` commands to drive a `toolwire serve` child the way
//! a harness would.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::transport::codec::{Frame, LspCodec};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{method} failed ({code}): {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
        data: Value,
    },
    #[error("talking to the server: {0}")]
    Io(#[from] std::io::Error),
    #[error("the server closed the connection")]
    Closed,
    #[error("the server sent something unreadable: {0}")]
    Protocol(String),
}

pub struct RpcClient<R, W> {
    reader: FramedRead<R, LspCodec>,
    writer: FramedWrite<W, LspCodec>,
    next_id: i64,
}

impl<R, W> RpcClient<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    pub fn new(reader: R, writer: W) -> Self {
        RpcClient {
            reader: FramedRead::new(reader, LspCodec::default()),
            writer: FramedWrite::new(writer, LspCodec::default()),
            next_id: 1,
        }
    }

    async fn send(&mut self, value: &Value) -> Result<(), ClientError> {
        let body = serde_json::to_vec(value).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.writer.send(Bytes::from(body)).await?;
        Ok(())
    }

    pub async fn notify(&mut self, method: &str, params: Value) -> Result<(), ClientError> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await
    }

    /// Send a request and wait for its answer, skipping notifications.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let frame = self.reader.next().await.ok_or(ClientError::Closed)??;
            let Frame::Body(body) = frame else {
                return Err(ClientError::Protocol("malformed frame".into()));
            };
            let mut msg: Value =
                crate::json::from_slice(&body).map_err(|e| ClientError::Protocol(e.to_string()))?;
            if msg.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(err) = msg.get_mut("error") {
                return Err(ClientError::Rpc {
                    method: method.to_owned(),
                    code: err["code"].as_i64().unwrap_or_default(),
                    message: err["message"].as_str().unwrap_or_default().to_owned(),
                    data: err["data"].take(),
                });
            }
            return Ok(msg
                .get_mut("result")
                .map(Value::take)
                .unwrap_or(Value::Null));
        }
    }
}
