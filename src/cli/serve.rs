//! `toolwire serve` (in process, or `--shared` through the workspace's
//! daemon) and the hidden `daemon` command that `--shared` starts.

use std::path::PathBuf;
use std::process::ExitCode;

use toolwire::server::{self, Server};
use toolwire::session::Storage;
use toolwire::transport::stdio;

#[derive(clap::Args)]
pub struct Args {
    /// Forward to the workspace's shared daemon (started if needed)
    /// instead of serving in this process. The daemon's socket, lock and
    /// log live in $XDG_RUNTIME_DIR/toolwire (else /tmp/toolwire-<uid>) as
    /// <hash>-<version>.{sock,lock,log}; the log (RUST_LOG, default
    /// toolwire=info) is capped at 4 MiB, one older generation kept as
    /// .log.1.
    #[arg(long)]
    shared: bool,
    /// With --shared: seconds the daemon stays up with no client.
    #[arg(long, default_value_t = 600, value_name = "SECS", requires = "shared")]
    idle_timeout: u64,
    /// With --shared: the workspace directory (default: the current one).
    #[arg(long, value_name = "DIR", requires = "shared", value_parser = super::existing_dir)]
    workspace: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct DaemonArgs {
    #[arg(long, value_parser = super::existing_dir)]
    workspace: PathBuf,
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    idle_timeout: u64,
}

pub fn run(args: Args) -> ExitCode {
    if args.shared {
        shared(args.workspace, args.idle_timeout, false)
    } else {
        serve()
    }
}

/// The log file of the daemon `command` is, if it is one: the daemon has
/// no terminal, so `RUST_LOG` would otherwise do nothing there.
pub fn daemon_log(command: &crate::Command) -> Option<toolwire::logfile::LogFile> {
    let crate::Command::Daemon(args) = command else {
        return None;
    };
    let paths = toolwire::daemon::paths(&args.workspace).ok()?;
    toolwire::logfile::LogFile::open(&paths.log, toolwire::logfile::DEFAULT_CAP).ok()
}

pub fn run_daemon(args: DaemonArgs) -> ExitCode {
    // Nobody reads the daemon's stderr: a panic goes to its log.
    std::panic::set_hook(Box::new(|info| tracing::error!(%info, "panic")));
    shared(Some(args.workspace), args.idle_timeout, true)
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
    if daemon {
        let prepared = toolwire::process::prepare();
        tracing::info!(open_files = prepared.open_files, "daemon starting");
    }
    let outcome = toolwire::process::server_runtime().and_then(|rt| {
        // On a runtime worker, not this thread (see `serve`).
        let task = rt.spawn(async move {
            if daemon {
                toolwire::daemon::run_daemon(&workspace, idle).await
            } else {
                toolwire::daemon::forward(&workspace, idle).await
            }
        });
        let outcome = rt
            .block_on(task)
            .unwrap_or_else(|err| Err(std::io::Error::other(format!("the task failed: {err}"))));
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
    let prepared = toolwire::process::prepare();
    tracing::debug!(open_files = prepared.open_files, "process prepared");
    let rt = match toolwire::process::server_runtime() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("toolwire: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let end = rt.block_on(async {
        // The store is the process's, from the workspace's toolwire.toml.
        let storage = match std::env::current_dir() {
            Ok(dir) => toolwire::session::open_workspace(&dir).await,
            Err(_) => Ok(Storage::default()),
        };
        let storage = match storage {
            Ok(storage) => storage,
            Err(err) => return Err(err.to_string()),
        };
        let server = Server::new(storage);
        // On a runtime worker (sized for deep messages), not this thread:
        // the reader, its handlers and the writer then share the workers
        // instead of hopping to and from the thread that blocks here.
        // SIGINT or SIGTERM ends the input, so the process stops as when
        // its client goes: pairs flushed, the commit log removed.
        let connection = tokio::spawn(server::serve_connection(
            server.clone(),
            toolwire::process::UntilTerminated::new(stdio::stdin()),
            stdio::stdout(),
        ));
        let end = connection.await;
        server.registry.close_all().await;
        let _ = tokio::task::spawn_blocking(toolwire::transcript::wal::close_all).await;
        Ok(end)
    });
    let end = match end {
        Ok(end) => end,
        Err(err) => {
            eprintln!("toolwire: {err}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(end) = end else {
        eprintln!("toolwire: the connection task failed");
        return ExitCode::FAILURE;
    };
    // Session workers may still be idle in the background; the client is
    // gone and every pair it left has been flushed, so stop here.
    rt.shutdown_background();
    ExitCode::from(end.exit_code() as u8)
}
