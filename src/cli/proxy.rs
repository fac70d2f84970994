//! `toolwire proxy`: the HTTP face in front of the model providers.

use super::ForCli;
use std::process::ExitCode;

use toolwire::proxy::Proxy;
use toolwire::session::{Registry, session_idle};

use super::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on (default: `[proxy] listen` in toolwire.toml,
    /// else 127.0.0.1:8787).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Allow listening on a non-loopback address (with `[proxy.auth]`
    /// tokens, which such an address requires).
    #[arg(long)]
    allow_remote: bool,
    /// Do not name this proxy in `<dataDir>/proxy.json` (a proxy
    /// `toolwire run` starts for one agent only).
    #[arg(long, hide = true)]
    unannounced: bool,
}

pub fn run(args: Args) -> ExitCode {
    let prepared = toolwire::process::prepare();
    toolwire::process::tune_allocator_for_proxy();
    tracing::debug!(open_files = prepared.open_files, "process prepared");
    let outcome = runtime()
        .map_err(|err| format!("cannot start the runtime: {err}"))
        .and_then(|rt| rt.block_on(serve(args)));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolwire proxy: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let workspace =
        std::env::current_dir().map_err(|err| format!("no workspace directory: {err}"))?;
    let config = toolwire::config::load(&workspace, None).map_err(|err| err.for_cli())?;
    let data_dir = config.data_dir.clone();
    toolwire::private::prepare(&config.data_dir);
    // Before the store opens: object storage reaches out the same way.
    toolwire::egress::configure(&config.egress())?;
    let listen = args.listen.unwrap_or_else(|| config.proxy.listen.clone());
    let addrs: Vec<_> = tokio::net::lookup_host(&listen)
        .await
        .map_err(|err| format!("--listen {listen}: {err}"))?
        .collect();
    let Some(addr) = addrs.first().copied() else {
        return Err(format!("--listen {listen}: no address"));
    };
    if !addr.ip().is_loopback() && !args.allow_remote {
        return Err(format!(
            "{addr} is not a loopback address; pass --allow-remote to listen on it"
        ));
    }
    // Checked before the store is opened: a refusal should cost nothing.
    let has_tenants = config
        .proxy
        .auth
        .as_ref()
        .is_some_and(|auth| !auth.tokens.is_empty());
    if !addr.ip().is_loopback() && !has_tenants {
        return Err(format!(
            "{addr} is not a loopback address: listening on it needs tenants' tokens in toolwire.toml ([proxy.auth] tokens = [{{ name = \"…\", sha256 = \"…\" }}], PROTOCOL.md 12.3)"
        ));
    }
    let storage = toolwire::store::open(&config.storage)
        .await
        .map_err(|err| err.to_string())?;
    let registry = Registry::new(storage, session_idle());
    let mut config = config;
    // Beyond loopback the agents are on other machines, where the proxy's
    // paths name nothing: previews name the saved output's link instead.
    config
        .proxy
        .previews
        .get_or_insert(if addr.ip().is_loopback() {
            toolwire::config::Previews::Path
        } else {
            toolwire::config::Previews::Mcp
        });
    let proxy = Proxy::new(registry, config)?;
    let listener = bind(addr).map_err(|err| format!("cannot listen on {addr}: {err}"))?;
    let local = listener.local_addr().map_err(|err| err.to_string())?;
    // SIGINT or SIGTERM: sessions closed, the commit log removed. Installed
    // before the line below, so a launcher may signal as soon as it reads it.
    let mut stop = toolwire::process::Terminated::install();
    let url = format!("http://{local}");
    // `toolwire run` finds the workspace's proxy here.
    let data_dir = (!args.unannounced).then(|| data_dir.clone());
    if let Some(dir) = &data_dir
        && let Err(err) = super::run::announce(dir, &url)
    {
        tracing::warn!(dir = %dir.display(), %err, "cannot write the proxy's address for `toolwire run`");
    }
    // The one line a launcher waits for (stderr: stdout stays clean).
    eprintln!("toolwire proxy listening on {url}");
    let outcome = tokio::select! {
        served = proxy.clone().serve(listener) => served.map_err(|err| format!("accepting connections: {err}")),
        () = stop.recv() => {
            proxy.registry().close_all().await;
            let _ = tokio::task::spawn_blocking(toolwire::transcript::wal::close_all).await;
            Ok(())
        }
    };
    if let Some(dir) = &data_dir {
        super::run::withdraw(dir);
    }
    outcome
}

/// Clients the kernel holds, handshake done, while the proxy is at its
/// connection cap (`Proxy::serve`); beyond them new clients' connection
/// attempts wait unanswered and are retried by their TCP stack.
const BACKLOG: u32 = 1024;

fn bind(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}
