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
    Serve {
        /// Forward to the workspace's shared daemon (started if needed)
        /// instead of serving in this process.
        #[arg(long)]
        shared: bool,
        /// With --shared: seconds the daemon stays up with no client.
        #[arg(long, default_value_t = 600, value_name = "SECS")]
        idle_timeout: u64,
        /// With --shared: the workspace (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// The shared per-workspace daemon (started by `serve --shared`).
    #[command(hide = true)]
    Daemon {
        #[arg(long)]
        workspace: PathBuf,
        #[arg(long, default_value_t = 600, value_name = "SECS")]
        idle_timeout: u64,
    },
    /// Replay a recorded agent session through a real `toolwire serve`
    /// (the bundled demo session when no PATH is given) and summarize what
    /// toolwire did.
    Replay(ReplayArgs),
    /// Write the JSON Schemas and the OpenRPC document (or check them).
    Schema {
        /// Directory to write into.
        #[arg(long, value_name = "DIR", required_unless_present = "check")]
        out: Option<PathBuf>,
        /// Exit non-zero, showing the difference, when DIR is stale.
        #[arg(long, value_name = "DIR", conflicts_with = "out")]
        check: Option<PathBuf>,
    },
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
        Command::Serve { shared: false, .. } => serve(),
        Command::Serve {
            shared: true,
            idle_timeout,
            workspace,
        } => shared(workspace, idle_timeout, false),
        Command::Daemon {
            workspace,
            idle_timeout,
        } => shared(Some(workspace), idle_timeout, true),
        Command::Repair { path, dry_run } => repair(&path, dry_run),
        Command::Schema { out, check } => schema(out, check),
        Command::Replay(args) => replay(args),
    }
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// JSON Lines of messages (or toolwire transcript lines); `.gz` is fine.
    path: Option<PathBuf>,
    /// Where the transcript and artifacts go (default: a fresh directory).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Generate and replay a synthetic session of N turns instead.
    #[arg(long, value_name = "N", conflicts_with = "path")]
    synthetic: Option<usize>,
    /// Seed for `--synthetic`.
    #[arg(long, default_value_t = 1, requires = "synthetic")]
    seed: u64,
    /// Session id to replay into.
    #[arg(long, default_value = "replay")]
    session: String,
    /// Earlier messages sent along with each `budget/apply`.
    #[arg(long, default_value_t = 8)]
    tail: usize,
}

#[allow(clippy::print_stdout)]
fn replay(args: ReplayArgs) -> ExitCode {
    use toolwire::replay;
    let fail = |msg: String| {
        eprintln!("toolwire replay: {msg}");
        ExitCode::FAILURE
    };
    let steps = match (&args.path, args.synthetic) {
        (_, Some(turns)) => replay::synthetic::generate(turns, args.seed),
        (Some(path), None) => {
            match replay::read_recording(path).and_then(|t| replay::parse_recording(&t)) {
                Ok(steps) => steps,
                Err(err) => return fail(err),
            }
        }
        (None, None) => match replay::bundled_recording().and_then(|t| replay::parse_recording(&t))
        {
            Ok(steps) => steps,
            Err(err) => return fail(err),
        },
    };
    let data_dir = match args.data_dir {
        Some(dir) => match std::fs::create_dir_all(&dir).and_then(|()| std::path::absolute(&dir)) {
            Ok(dir) => dir,
            Err(err) => return fail(format!("{}: {err}", dir.display())),
        },
        None => match replay::fresh_data_dir() {
            Ok(dir) => dir,
            Err(err) => return fail(format!("creating a data directory: {err}")),
        },
    };
    let server = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => return fail(format!("locating the toolwire executable: {err}")),
    };
    let options = replay::Options {
        server,
        data_dir,
        session_id: args.session,
        tail: args.tail,
    };
    let bar = indicatif::ProgressBar::new(steps.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(err) => return fail(format!("cannot start the runtime: {err}")),
    };
    let outcome = rt.block_on(replay::run(&steps, &options, || bar.inc(1)));
    bar.finish_and_clear();
    match outcome {
        Ok(summary) if args.json => match serde_json::to_string_pretty(&summary) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(err) => fail(err.to_string()),
        },
        Ok(summary) => {
            print!("{}", replay::render(&summary));
            ExitCode::SUCCESS
        }
        Err(err) => fail(err.to_string()),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// `serve --shared` (the forwarder) or `daemon`.
fn shared(workspace: Option<PathBuf>, idle_timeout: u64, daemon: bool) -> ExitCode {
    let workspace = match workspace.map_or_else(std::env::current_dir, Ok) {
        Ok(dir) => dir,
        Err(err) => {
            eprintln!("toolwire: no workspace directory: {err}");
            return ExitCode::FAILURE;
        }
    };
    let idle = std::time::Duration::from_secs(idle_timeout);
    let outcome = runtime().and_then(|rt| {
        let outcome = rt.block_on(async {
            if daemon {
                toolwire::daemon::run_daemon(&workspace, idle).await
            } else {
                toolwire::daemon::forward(&workspace, idle).await
            }
        });
        rt.shutdown_background();
        outcome
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolwire: {err}");
            ExitCode::FAILURE
        }
    }
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
fn schema(out: Option<PathBuf>, check: Option<PathBuf>) -> ExitCode {
    if let Some(dir) = check {
        let problems = toolwire::schema::check(&dir);
        if problems.is_empty() {
            println!("{}: up to date", dir.display());
            return ExitCode::SUCCESS;
        }
        for p in &problems {
            eprintln!("{p}");
        }
        eprintln!(
            "{} is stale: run `toolwire schema --out {}`",
            dir.display(),
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    let Some(dir) = out else {
        return ExitCode::FAILURE;
    };
    match toolwire::schema::write(&dir) {
        Ok(n) => {
            println!("wrote {n} files to {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("toolwire schema: {}: {err}", dir.display());
            ExitCode::FAILURE
        }
    }
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
