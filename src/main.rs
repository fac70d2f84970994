//! The `toolwire` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use toolwire::server::{self, Server};
use toolwire::session::Storage;

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
enum Command {
    /// Serve one client over stdin/stdout (JSON-RPC 2.0, LSP framing).
    Serve,
    /// Rewrite a transcript so every tool call is followed by all its results.
    Repair {
        path: PathBuf,
        /// Report what would change without writing.
        #[arg(long)]
        dry_run: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("toolwire=warn")),
        )
        .init();
    match cli.command {
        Command::Serve => serve(),
        Command::Repair { path, dry_run } => repair(&path, dry_run),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

fn serve() -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("toolwire: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let end = rt.block_on(async {
        let server = Server::new(Storage::default());
        let end =
            server::serve_connection(server.clone(), tokio::io::stdin(), tokio::io::stdout()).await;
        server.registry.close_all().await;
        end
    });
    // Session workers may still be idle in the background; the client is
    // gone and every pair it left has been flushed, so stop here.
    rt.shutdown_background();
    ExitCode::from(end.exit_code() as u8)
}

#[allow(clippy::print_stdout)]
fn repair(path: &std::path::Path, dry_run: bool) -> ExitCode {
    match toolwire::transcript::repair::repair_file(path, dry_run) {
        Ok(report) => {
            let verb = if dry_run { "would keep" } else { "kept" };
            println!("{}: {verb} {} lines", path.display(), report.kept);
            for id in &report.dropped_tool_uses {
                println!("  dropped tool_use {id} (results missing)");
            }
            for id in &report.dropped_tool_results {
                println!("  dropped tool_result {id} (orphan, duplicate or partial)");
            }
            if report.torn_lines > 0 {
                println!("  dropped {} torn or unparsable lines", report.torn_lines);
            }
            if !dry_run && report != Default::default() {
                println!(
                    "  original kept as {}",
                    toolwire::transcript::repair::bak_path(path).display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("toolwire repair: {err}");
            ExitCode::FAILURE
        }
    }
}
