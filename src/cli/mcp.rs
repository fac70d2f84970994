//! `toolwire mcp [--session ID] [--config FILE] -- COMMAND ARGS...`: an MCP
//! server on stdio in front of the MCP server COMMAND starts, whose large
//! `tools/call` results are saved once and replaced by a preview and a link.

use super::ForCli;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use toolwire::mcp;
use toolwire::protocol::SessionId;

use super::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// The toolwire session the saved outputs belong to (default: one per
    /// server command line, stable across runs).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// The configuration file (default: `toolwire.toml` in the current
    /// directory, when present). Limits, `tools.<name>` and preview modes
    /// apply as everywhere; the current directory is the workspace.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Do not add the `read_saved_output` tool to `tools/list` (links stay
    /// readable with `resources/read`).
    #[arg(long)]
    no_read_tool: bool,
    /// Seconds to wait for the server's answer to a handshake (its
    /// `initialize`, or the `server/discover` probe made for a 2026-07-28
    /// client) before telling the client it did not answer.
    #[arg(long, value_name = "SECONDS", default_value_t = mcp::HANDSHAKE_TIMEOUT.as_secs_f64())]
    handshake_timeout: f64,
    /// The MCP server to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> ExitCode {
    match front(args) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("toolwire mcp: {message}");
            ExitCode::FAILURE
        }
    }
}

fn front(args: Args) -> Result<i32, String> {
    let workspace =
        std::env::current_dir().map_err(|err| format!("no current directory: {err}"))?;
    let config = match &args.config {
        Some(file) => toolwire::config::load_with_file(&workspace, file, true, None),
        None => toolwire::config::load(&workspace, None),
    }
    .map_err(|err| err.for_cli())?;
    toolwire::private::prepare(&config.data_dir);
    if config.storage.objects.is_some() {
        toolwire::egress::configure(&config.egress())?;
    }
    let session = match args.session {
        Some(id) => SessionId::try_from(id)?,
        None => mcp::default_session(&args.command).map_err(|err| err.to_string())?,
    };
    let options = mcp::Options {
        session,
        config,
        read_tool: !args.no_read_tool,
        command: args.command,
        handshake_timeout: std::time::Duration::try_from_secs_f64(args.handshake_timeout)
            .map_err(|_| "--handshake-timeout: expected a number of seconds, 0 or more")?,
    };
    let rt = runtime().map_err(|err| err.to_string())?;
    // SIGINT or SIGTERM ends the client's input: the front then stops as
    // when its client goes (the server's input closed, the log removed).
    let code = rt
        .block_on(async {
            let stdin = toolwire::process::UntilTerminated::new(tokio::io::stdin());
            mcp::run(options, stdin, tokio::io::stdout()).await
        })
        .map_err(|err| err.to_string());
    // The read of stdin in progress runs on a blocking thread that only
    // returns when the client writes or closes it: waiting for it would
    // keep the front (and its stdout) alive after its server has gone, or
    // after a signal stopped it.
    rt.shutdown_background();
    code
}
