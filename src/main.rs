//! The `toolwire` command line: one subcommand a file under `cli/`.

mod cli;

/// What sessions keep is allocated apart from requests (see `heap`).
#[global_allocator]
static HEAP: toolwire::heap::Heap = toolwire::heap::Heap;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "toolwire",
    version,
    about = "Keeps coding agents' tool traffic valid and within budget"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve one client over stdin/stdout (JSON-RPC 2.0, LSP framing).
    Serve(cli::serve::Args),
    /// The shared per-workspace daemon (started by `serve --shared`).
    #[command(hide = true)]
    Daemon(cli::serve::DaemonArgs),
    /// Replay a recorded agent session through a real `toolwire serve`
    /// (the bundled demo session when no PATH is given) and summarize what
    /// toolwire did.
    Replay(cli::replay::Args),
    /// Write the JSON Schemas and the OpenRPC document (or check them).
    Schema(cli::schema::Args),
    /// Rewrite a transcript so every tool call is followed by all its results.
    Repair(cli::repair::Args),
    /// Convert another agent's session file (Claude Code, Codex, Gemini
    /// CLI, OpenClaw/pi) into a toolwire transcript.
    Import(cli::import::Args),
    /// Print a saved tool output, a range of its lines, or the lines
    /// matching a pattern.
    Show(cli::show::Args),
    /// Print a shell completion script, e.g. `toolwire completions bash
    /// > ~/.local/share/bash-completion/completions/toolwire`.
    Completions(cli::completions::Args),
    /// Print the manual page (roff), or write every page into a directory.
    Man(cli::man::Args),
    /// Remove expired sessions, unreferenced artifacts and temporary
    /// leftovers by the workspace's retention settings.
    Gc(cli::gc::Args),
    /// Front an MCP server (stdio): large tool results are saved once and
    /// replaced by a preview and a link the client can page through.
    Mcp(cli::mcp::Args),
    /// An HTTP proxy in front of the model providers that budgets and
    /// pair-guards every request (for agents that only take a base URL).
    Proxy(cli::proxy::Args),
    /// Create or upgrade the shared store's schema (storage.backend =
    /// "postgres"); idempotent, safe for replicas to run at once.
    Migrate(cli::migrate::Args),
    /// What the proxy did per session: requests, chars, cache hit rate.
    Stats(cli::stats::Args),
    /// Run an agent through the workspace's proxy (started if none runs),
    /// pointed at it the way that agent reads its endpoint.
    Run(cli::run::Args),
    /// Say whether the provider would accept a transcript's tool calls and
    /// results (exit 1 when not).
    Check(cli::check::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = |default: &str| {
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
    };
    // The daemon has no terminal: it logs to a capped file beside its socket.
    match cli::serve::daemon_log(&cli.command) {
        Some(log) => tracing_subscriber::fmt()
            .with_writer(std::sync::Mutex::new(log))
            .with_ansi(false)
            .with_env_filter(filter("toolwire=info"))
            .init(),
        None => tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(colour_logs())
            .with_env_filter(filter("toolwire=warn"))
            .init(),
    }
    match cli.command {
        Command::Serve(args) => cli::serve::run(args),
        Command::Daemon(args) => cli::serve::run_daemon(args),
        Command::Replay(args) => cli::replay::run(args),
        Command::Schema(args) => cli::schema::run(args),
        Command::Repair(args) => cli::repair::run(args),
        Command::Show(args) => cli::show::run(args),
        Command::Import(args) => cli::import::run(args),
        Command::Completions(args) => cli::completions::run(args, Cli::command()),
        Command::Man(args) => cli::man::run(args, Cli::command()),
        Command::Gc(args) => cli::gc::run(args),
        Command::Mcp(args) => cli::mcp::run(args),
        Command::Proxy(args) => cli::proxy::run(args),
        Command::Migrate(args) => cli::migrate::run(args),
        Command::Stats(args) => cli::stats::run(args),
        Command::Run(args) => cli::run::run(args),
        Command::Check(args) => cli::check::run(args),
    }
}

/// Colour in logs only on a terminal, and never with `NO_COLOR` set
/// (<https://no-color.org>): a log file or a harness reading stderr gets
/// plain text.
fn colour_logs() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
