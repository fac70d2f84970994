//! The MCP face: `toolwire mcp -- COMMAND ARGS...` speaks MCP on stdio to
//! a client and runs COMMAND as the MCP server behind it.
//!
//! MCP's stdio transport is newline-delimited JSON-RPC. Every line passes
//! through byte for byte, in both directions, except:
//!
//! - a `tools/call` result whose text is over the limits: it goes through
//!   the same core as `budget/apply` (one session of the registry, the same
//!   planner, artifact store, preview and replacement state) and comes back
//!   as the preview text plus a `resource_link` to the saved output
//!   ([`results`]);
//! - `initialize` (and `server/discover`): a `resources` capability is added
//!   when the server has none, since the links must be readable;
//! - `tools/list`: the `read_saved_output` tool is appended to the last page
//!   (unless turned off, or the server has a tool of that name);
//! - `resources/read` of a link of ours and calls of `read_saved_output` are
//!   answered here ([`saved`]), as are `resources/list` and
//!   `resources/templates/list` when the server has no resources.
//!
//! Everything else, including methods, fields and protocol versions this
//! front does not know, is forwarded untouched. When the server exits,
//! every request still waiting for it is answered with an error, then the
//! front exits too (the client sees its server end).

mod era;
mod front;
pub mod http;
mod pipe;
mod results;
mod saved;

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::FramedRead;

use crate::config::Effective;
use crate::error::{Error, Result};
use crate::protocol::SessionId;
use crate::session::{Registry, session_idle};
use crate::transport::codec::Frame;
use crate::transport::lines::LineCodec;
use pipe::Pipe;

/// What tool results (`results`) and saved outputs (`saved`) need of the
/// front that calls them: its session, configuration and sessions, and what
/// it has learnt of the server it stands in front of.
trait Scope: Send + Sync {
    fn session(&self) -> &SessionId;
    fn config(&self) -> &Arc<Effective>;
    fn registry(&self) -> &Arc<Registry>;
    /// Whether `read_saved_output` is ours to list and answer.
    fn read_tool_active(&self) -> bool;
    /// The server's own `maxResultSizeChars` for `tool`, unless the
    /// configuration's `tools.<name>.maxResultChars` says otherwise.
    fn declared_max(&self, tool: &str) -> Option<u64>;
}

pub use era::{LEGACY, MODERN};
pub use pipe::QUEUED;
pub use saved::{READ_TOOL, URI_PREFIX};

/// How a front is set up.
pub struct Options {
    /// The toolwire session whose artifacts and decisions the results join.
    pub session: SessionId,
    pub config: Effective,
    /// List and answer `read_saved_output`.
    pub read_tool: bool,
    /// The MCP server's command line (program first).
    pub command: Vec<OsString>,
    /// How long the front waits for the server's answer to a handshake
    /// (`initialize`, `server/discover`) before telling the client.
    pub handshake_timeout: Duration,
}

/// [`Options::handshake_timeout`] unless given: long enough for a server
/// started through a package runner that fetches it first.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// The session a front uses when none is given: one per server command
/// line, stable across runs, so a restarted front finds its saved outputs.
pub fn default_session(command: &[OsString]) -> Result<SessionId> {
    let mut hash = Sha256::new();
    for arg in command {
        hash.update(arg.as_encoded_bytes());
        hash.update([0]);
    }
    let digest: String = hash.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let program = command
        .first()
        .map(|p| {
            std::path::Path::new(p)
                .file_name()
                .unwrap_or(p)
                .to_string_lossy()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .take(40)
                .collect::<String>()
        })
        .unwrap_or_default();
    let id = if program.is_empty() || program.starts_with('.') {
        format!("mcp-{digest}")
    } else {
        format!("mcp-{program}-{digest}")
    };
    SessionId::try_from(id).map_err(|err| Error::invalid_params("session", err.to_string()))
}

/// How long the server gets to exit on its own once the client has gone
/// (MCP's stdio shutdown: close its stdin, wait, then kill).
const SERVER_EXIT_GRACE: Duration = Duration::from_secs(5);

/// Run a front until the client or the server ends. Returns the process
/// exit code: 0 when the client ended the session, 1 when the server died
/// under it.
pub async fn run<R, W>(options: Options, client_in: R, client_out: W) -> Result<i32>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Some((program, args)) = options.command.split_first() else {
        return Err(Error::invalid_params(
            "command",
            "no MCP server command given",
        ));
    };
    // The same store `serve` and `proxy` open from this configuration: with
    // `storage.backend = "postgres"`, the front's decisions and the saved
    // outputs it links are the fleet's, and a fork's inherited outputs are
    // found through its parent's rows. Opened before the server starts, so
    // a store that cannot be reached fails the front without starting it.
    let storage = crate::store::open(&options.config.storage).await?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| {
            Error::Internal(format!(
                "cannot start the MCP server `{}`: {err}",
                program.to_string_lossy()
            ))
        })?;
    let (Some(server_in), Some(server_out)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Error::Internal("the MCP server's pipes are missing".into()));
    };

    let registry = Arc::new(Registry::new(storage, session_idle()));
    let (to_client, client_writer) = Pipe::spawn(client_out);
    let (to_server, server_writer) = Pipe::spawn(server_in);
    let front = Arc::new(front::Front::new(
        options.session,
        Arc::new(options.config),
        options.read_tool,
        options.handshake_timeout,
        registry.clone(),
        to_client,
        to_server,
    ));

    let mut server_task = tokio::spawn({
        let front = front.clone();
        async move {
            let mut lines = FramedRead::new(server_out, LineCodec::default());
            while let Some(frame) = lines.next().await {
                match frame {
                    Ok(Frame::Body(line)) => front.on_server_line(line).await,
                    Ok(Frame::Malformed(reason)) => {
                        tracing::warn!(%reason, "dropped a message from the MCP server")
                    }
                    Err(err) => {
                        tracing::warn!(%err, "reading from the MCP server failed");
                        break;
                    }
                }
            }
            front.server_gone();
        }
    });

    let mut client_lines = FramedRead::new(client_in, LineCodec::default());
    let server_ended = loop {
        tokio::select! {
            frame = client_lines.next() => match frame {
                Some(Ok(Frame::Body(line))) => front.on_client_line(line).await,
                Some(Ok(Frame::Malformed(reason))) => front.reply_parse_error(&reason),
                Some(Err(err)) => {
                    tracing::warn!(%err, "reading from the MCP client failed");
                    break false;
                }
                None => break false,
            },
            _ = &mut server_task => break true,
        }
    };

    let code = if server_ended {
        // The server closed its output: it has exited or is about to.
        let status = match tokio::time::timeout(SERVER_EXIT_GRACE, child.wait()).await {
            Ok(Ok(status)) => status.to_string(),
            _ => {
                let _ = child.start_kill();
                "closed its output".to_owned()
            }
        };
        tracing::warn!(%status, "the MCP server ended");
        front.fail_pending(&status);
        1
    } else {
        // The client has gone: close the server's input and let it exit.
        front.close_server_input();
        let _ = server_writer.await;
        if tokio::time::timeout(SERVER_EXIT_GRACE, child.wait())
            .await
            .is_err()
        {
            tracing::warn!("the MCP server did not exit after its input closed; killing it");
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        if tokio::time::timeout(SERVER_EXIT_GRACE, &mut server_task)
            .await
            .is_err()
        {
            server_task.abort();
        }
        0
    };
    front.client_gone();
    drop(front);
    registry.close_all().await;
    let _ = tokio::task::spawn_blocking(crate::transcript::wal::close_all).await;
    let _ = client_writer.await;
    Ok(code)
}
