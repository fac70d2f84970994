//! One process per workspace: the shared daemon and its stdio forwarder.
//!
//! `toolwire serve --shared` connects the client's stdio to the workspace's
//! daemon over a unix socket, starting the daemon (detached, in its own
//! session) when none is running. Every client of the workspace then shares
//! one server: the same sessions, the same locks, the same state.
//!
//! - The socket lives in a per-user directory (`$XDG_RUNTIME_DIR/toolwire`,
//!   else `<tmp>/toolwire-<uid>`), which must be a real directory owned by
//!   the user with mode 0700; the socket itself is 0600 and peers of another
//!   uid are refused.
//! - Its name carries a hash of the canonical workspace path and the
//!   version, so different workspaces and versions never meet; a handshake
//!   (`toolwire/<version>` → `ok`) checks the version again.
//! - The daemon holds `<name>.lock` for its whole life: of two racing
//!   starters one becomes the daemon and the other exits, and a stale socket
//!   is only ever replaced by the lock holder. The lock file also records
//!   the daemon's pid.
//! - With no client for `--idle-timeout` seconds the daemon removes its
//!   socket (still holding the lock) and exits.
//! - The daemon's stderr (its log, filtered by the starter's `RUST_LOG`) is
//!   `<name>.log` beside the socket (0600, started afresh by each daemon),
//!   so an editor can show it; clients compute the name as below.
//!
//! A forwarder's client ending (EOF, crash) ends that client's connection
//! only: its pending pairs are flushed, other clients are untouched.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::server::{self, Server};
use crate::session::Storage;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a workspace's daemon listens.
#[derive(Debug, Clone)]
pub struct Paths {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub lock: PathBuf,
    /// The daemon's stderr.
    pub log: PathBuf,
}

fn uid() -> u32 {
    // SAFETY: geteuid cannot fail and has no side effects.
    unsafe { libc::geteuid() }
}

/// The per-user directory daemon sockets live in.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(run) if !run.is_empty() => PathBuf::from(run).join("toolwire"),
        _ => std::env::temp_dir().join(format!("toolwire-{}", uid())),
    }
}

/// The socket and lock paths for `workspace`, creating and verifying the
/// private per-user directory.
pub fn paths(workspace: &Path) -> io::Result<Paths> {
    paths_in(runtime_dir(), workspace)
}

/// [`paths`] under a given runtime directory.
pub fn paths_in(dir: PathBuf, workspace: &Path) -> io::Result<Paths> {
    ensure_private_dir(&dir)?;
    let canonical = fs::canonicalize(workspace)?;
    let digest = Sha256::digest(canonical.as_os_str().as_encoded_bytes());
    let key: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let stem = format!("{key}-{VERSION}");
    Ok(Paths {
        socket: dir.join(format!("{stem}.sock")),
        lock: dir.join(format!("{stem}.lock")),
        log: dir.join(format!("{stem}.log")),
        dir,
    })
}

/// Create `dir` with mode 0700 if missing; refuse it unless it is a real
/// directory (not a link) owned by us and closed to everyone else.
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(err),
    }
    let meta = fs::symlink_metadata(dir)?;
    let problem = if !meta.file_type().is_dir() {
        Some("is not a directory (a link?)")
    } else if meta.uid() != uid() {
        Some("is owned by another user")
    } else if meta.mode() & 0o077 != 0 {
        Some("is open to other users (mode must be 0700)")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} {problem}; refusing to use it for the daemon socket",
                dir.display()
            ),
        )),
        None => Ok(()),
    }
}

// ----------------------------------------------------------------- daemon --

/// Run the workspace daemon until it has had no client for `idle`. Returns
/// at once (successfully) when another daemon holds the lock.
pub async fn run_daemon(workspace: &Path, idle: Duration) -> io::Result<()> {
    let paths = paths(workspace)?;
    let mut lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&paths.lock)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Ok(()),
        Err(fs::TryLockError::Error(err)) => return Err(err),
    }
    lock.set_len(0)?;
    writeln!(lock, "{}", std::process::id())?;

    // Only the lock holder may replace what is at the socket path.
    match fs::symlink_metadata(&paths.socket) {
        Ok(meta) if meta.file_type().is_dir() => {
            return Err(io::Error::other(format!(
                "{} is a directory",
                paths.socket.display()
            )));
        }
        Ok(_) => fs::remove_file(&paths.socket)?,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let listener = UnixListener::bind(&paths.socket)?;
    fs::set_permissions(&paths.socket, fs::Permissions::from_mode(0o600))?;
    tracing::info!(socket = %paths.socket.display(), "daemon listening");

    let server = Server::new(Storage::default());
    let active = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(tokio::sync::Notify::new());
    loop {
        let idle_wait = async {
            if active.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(idle).await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                match stream.peer_cred() {
                    Ok(cred) if cred.uid() == uid() => {}
                    _ => {
                        tracing::warn!("refused a peer of another user");
                        continue;
                    }
                }
                active.fetch_add(1, Ordering::SeqCst);
                let (server, active, ended) = (server.clone(), active.clone(), ended.clone());
                tokio::spawn(async move {
                    if let Err(err) = serve_peer(server, stream).await {
                        tracing::warn!(%err, "client connection failed");
                    }
                    active.fetch_sub(1, Ordering::SeqCst);
                    ended.notify_one();
                });
            }
            _ = ended.notified() => continue,
            _ = idle_wait => break,
        }
    }
    tracing::info!("idle; daemon exiting");
    let _ = fs::remove_file(&paths.socket);
    server.registry.close_all().await;
    drop(lock);
    Ok(())
}

async fn serve_peer(server: Arc<Server>, stream: UnixStream) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut hello = String::new();
    (&mut read).take(128).read_line(&mut hello).await?;
    if hello.trim_end() != format!("toolwire/{VERSION}") {
        write
            .write_all(format!("error: this daemon is toolwire/{VERSION}\n").as_bytes())
            .await?;
        return Ok(());
    }
    write.write_all(b"ok\n").await?;
    server::serve_connection(server, read, write).await;
    Ok(())
}

// -------------------------------------------------------------- forwarder --

/// Forward this process's stdio to the workspace daemon, starting it if
/// needed. Returns when the daemon ends the connection.
pub async fn forward(workspace: &Path, idle: Duration) -> io::Result<()> {
    let paths = paths(workspace)?;
    let stream = connect_or_start(&paths, workspace, idle).await?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    write
        .write_all(format!("toolwire/{VERSION}\n").as_bytes())
        .await?;
    let mut answer = String::new();
    (&mut read).take(256).read_line(&mut answer).await?;
    if answer.trim_end() != "ok" {
        return Err(io::Error::other(format!(
            "daemon refused the handshake: {}",
            answer.trim_end()
        )));
    }
    let upstream = async move {
        let mut stdin = tokio::io::stdin();
        let copied = tokio::io::copy(&mut stdin, &mut write).await;
        // The client is gone: tell the daemon, which flushes its pairs.
        let _ = write.shutdown().await;
        copied
    };
    let downstream = async move {
        let mut stdout = tokio::io::stdout();
        let copied = tokio::io::copy(&mut read, &mut stdout).await;
        let _ = stdout.flush().await;
        copied
    };
    tokio::pin!(upstream);
    // The daemon closing the connection (after `exit`, or the client's
    // EOF) ends the forwarder; stdin may still be open.
    tokio::select! {
        done = downstream => done.map(|_| ()),
        _ = &mut upstream => Ok(()),
    }
}

async fn connect_or_start(
    paths: &Paths,
    workspace: &Path,
    idle: Duration,
) -> io::Result<UnixStream> {
    if let Ok(stream) = UnixStream::connect(&paths.socket).await {
        return Ok(stream);
    }
    spawn_daemon(paths, workspace, idle)?;
    let mut last = None;
    for _ in 0..500 {
        match UnixStream::connect(&paths.socket).await {
            Ok(stream) => return Ok(stream),
            Err(err) => last = Some(err),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(last.unwrap_or_else(|| io::Error::other("the daemon did not start")))
}

/// Start `toolwire daemon` detached: its own session, no stdio of ours;
/// its stderr goes to the log file beside the socket.
fn spawn_daemon(paths: &Paths, workspace: &Path, idle: Duration) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    // Never through a link planted in the (private) directory.
    let log = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&paths.log)?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("daemon")
        .arg("--workspace")
        .arg(workspace)
        .arg("--idle-timeout")
        .arg(idle.as_secs().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .current_dir(workspace);
    // SAFETY: setsid is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().map(drop)
}

/// The daemon's pid, as its lock file records it.
pub fn daemon_pid(paths: &Paths) -> Option<u32> {
    fs::read_to_string(&paths.lock).ok()?.trim().parse().ok()
}
