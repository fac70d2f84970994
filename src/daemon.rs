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
//! - The daemon logs to `<name>.log` beside the socket (0600; its tracing
//!   output, filtered by the starter's `RUST_LOG`, default `toolwire=info`,
//!   capped with one older generation kept as `<name>.log.1`, and its
//!   stderr), so an editor can show it; clients compute the name as below.
//!
//! A forwarder's client ending (EOF, crash) ends that client's connection
//! only: its pending pairs are flushed, other clients are untouched.
//!
//! A forwarder whose stdin and stdout are pipes or sockets hands them to
//! the daemon (`SCM_RIGHTS`) instead of copying bytes: a round trip then
//! costs what `serve` costs, where forwarding added two reads and two
//! writes through a third process. The forwarder waits for the daemon to
//! close the socket, so its exit still means the server is done.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::{UnixListener, UnixStream};

use crate::transport::stdio;

use crate::server::{self, Server};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a workspace's daemon listens.
#[derive(Debug, Clone)]
pub struct Paths {
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub lock: PathBuf,
    /// The daemon's log: its tracing output (`RUST_LOG`, default
    /// `toolwire=info`), capped at [`crate::logfile::DEFAULT_CAP`] bytes
    /// with one older generation kept as `<log>.1`, and its stderr.
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
    let canonical = fs::canonicalize(workspace).map_err(|err| naming(workspace, err))?;
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

/// `err` with the path it concerns in its message.
fn naming(path: &Path, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

/// Create `dir` with mode 0700 if missing; refuse it unless it is a real
/// directory (not a link) owned by us and closed to everyone else.
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(naming(dir, err)),
    }
    let meta = fs::symlink_metadata(dir).map_err(|err| naming(dir, err))?;
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
    check_paths(&paths)?;
    let lock_error = |err| naming(&paths.lock, err);
    let mut lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&paths.lock)
        .map_err(lock_error)?;
    // Another daemon holds the lock: while its socket answers it serves
    // the workspace and this one is not needed. With its socket gone it is
    // exiting for idleness (or still starting): wait for whichever comes
    // first, its socket or its lock, so the client that started this one
    // is served by one of the two.
    loop {
        match lock.try_lock() {
            Ok(()) => break,
            Err(fs::TryLockError::WouldBlock) => {}
            Err(fs::TryLockError::Error(err)) => return Err(lock_error(err)),
        }
        if std::os::unix::net::UnixStream::connect(&paths.socket).is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lock.set_len(0).map_err(lock_error)?;
    writeln!(lock, "{}", std::process::id()).map_err(lock_error)?;
    // SIGINT or SIGTERM stops the daemon as the idle timeout does: socket
    // removed, sessions closed, the commit log checkpointed and removed.
    // Installed as soon as this process is the daemon, before it listens.
    let mut stop = crate::process::Terminated::install();

    // The store is the workspace's, as for `serve`; a shared store that
    // cannot be reached stops the daemon here, before it listens, and the
    // forwarder that started it says why.
    let storage = crate::session::open_workspace(workspace)
        .await
        .map_err(|err| io::Error::other(err.to_string()))?;
    // Only the lock holder may replace what is at the socket path.
    let socket_error = |err| naming(&paths.socket, err);
    match fs::symlink_metadata(&paths.socket) {
        Ok(_) => fs::remove_file(&paths.socket).map_err(socket_error)?,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(socket_error(err)),
    }
    let mut listener = listen(&paths.socket)?;
    tracing::info!(socket = %paths.socket.display(), "daemon listening");

    let server = Server::new(storage);
    tokio::spawn(scheduled_gc(server.clone(), workspace.to_path_buf()));
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
        let serve = |stream: UnixStream| {
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == uid() => {}
                _ => {
                    tracing::warn!("refused a peer of another user");
                    return;
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
        };
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                serve(stream);
            }
            _ = ended.notified() => continue,
            _ = idle_wait => {
                idle_exit_hook().await;
                // A client connecting from now on finds no socket and
                // starts a fresh daemon (which waits for this one's lock);
                // one that connected before is in the listener's backlog
                // and is served here, never reset by the exit (PROTOCOL.md
                // 11.1).
                let _ = fs::remove_file(&paths.socket);
                let waiting = drain_backlog(&listener);
                if waiting.is_empty() {
                    tracing::info!("idle; daemon exiting");
                    break;
                }
                tracing::info!(clients = waiting.len(), "a client connected as the daemon went idle; staying");
                listener = listen(&paths.socket)?;
                for stream in waiting {
                    serve(stream);
                }
            }
            () = stop.recv() => {
                tracing::info!("asked to stop; daemon exiting");
                break;
            }
        }
    }
    let _ = fs::remove_file(&paths.socket);
    server.registry.close_all().await;
    let _ = tokio::task::spawn_blocking(crate::transcript::wal::close_all).await;
    drop(lock);
    Ok(())
}

/// Listen at `socket` (a path no one else may replace: the caller holds
/// the lock), for this user only.
fn listen(socket: &Path) -> io::Result<UnixListener> {
    let socket_error = |err| naming(socket, err);
    let listener = UnixListener::bind(socket).map_err(socket_error)?;
    fs::set_permissions(socket, fs::Permissions::from_mode(0o600)).map_err(socket_error)?;
    Ok(listener)
}

/// The connections waiting in `listener`'s backlog, taken without waiting.
/// Asked of the kernel directly rather than through the runtime's record
/// of readiness, which may not have seen the last connection yet: once the
/// socket's path is gone no connection can join the backlog, so what this
/// returns is every client that connected before.
fn drain_backlog(listener: &UnixListener) -> Vec<UnixStream> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut waiting = Vec::new();
    loop {
        // SAFETY: accepting on a listening socket we own; a descriptor
        // returned is new and owned by the stream made from it.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Empty (EAGAIN) or broken: either way nothing more waits.
            return waiting;
        }
        // SAFETY: `fd` was just returned by accept4 and is owned by no one.
        let std_stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
        match UnixStream::from_std(std_stream) {
            Ok(stream) => waiting.push(stream),
            Err(err) => tracing::warn!(%err, "could not take a waiting client"),
        }
    }
}

/// Test hook (`TOOLWIRE_TEST_IDLE_EXIT_HOOK=<path>`): when the daemon has
/// decided to exit for idleness, it creates `<path>.reached` and waits
/// until `<path>` exists, so a test can connect at exactly that moment.
async fn idle_exit_hook() {
    let Some(path) = std::env::var_os("TOOLWIRE_TEST_IDLE_EXIT_HOOK") else {
        return;
    };
    let path = PathBuf::from(path);
    let mut reached = path.clone().into_os_string();
    reached.push(".reached");
    let _ = fs::write(&reached, b"");
    while !path.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The scheduled run, when due: through the server's store, so a daemon on
/// the shared store collects the fleet's sessions (under the same locks as
/// `toolwire gc`) and one on files its data directory.
async fn gc_if_due(
    server: &Server,
    config: &crate::config::Effective,
) -> crate::error::Result<Option<crate::retention::GcReport>> {
    use crate::store::{Collect, SessionStore};
    let store = server.registry.storage().store();
    let due = {
        let config = config.clone();
        let shared = store.shared_by_replicas();
        tokio::task::spawn_blocking(move || {
            crate::retention::due(&config.retention, &config.data_dir, shared)
        })
        .await
        .map_err(|err| crate::error::Error::Internal(format!("gc task failed: {err}")))??
    };
    if !due {
        return Ok(None);
    }
    let open = server.registry.open_sessions(&config.data_dir);
    let gc = Collect::of(
        &config.data_dir,
        config.storage.objects.as_ref(),
        &config.retention,
        open,
        false,
        Box::new(|_| {}),
    )?;
    store.collect(gc).await.map(Some)
}

/// Retention on a schedule (`retention.auto`, `retention.intervalHours`),
/// over the workspace's configured store. The configuration is
/// read again at every check, so editing `toolwire.toml` takes effect
/// without a restart; the last run's time is kept in the data directory,
/// so a daemon that comes and goes still collects once an interval.
async fn scheduled_gc(server: Arc<Server>, workspace: PathBuf) {
    loop {
        let config = match crate::config::load(&workspace, None) {
            Ok(config) => config,
            Err(err) => {
                tracing::warn!(%err, "scheduled gc: bad configuration; retrying in an hour");
                tokio::time::sleep(Duration::from_secs(3600)).await;
                continue;
            }
        };
        let check = config.retention.interval().min(Duration::from_secs(600));
        let outcome = gc_if_due(&server, &config).await;
        match outcome {
            Ok(Some(report)) => tracing::info!(
                sessions = report.sessions_removed.len(),
                files = report.artifacts_removed.len(),
                bytes = report.bytes_freed,
                kept = report.kept,
                "scheduled gc"
            ),
            Ok(None) => {}
            Err(err) => tracing::warn!(%err, "scheduled gc failed"),
        }
        tokio::time::sleep(check).await;
    }
}

async fn serve_peer(server: Arc<Server>, stream: UnixStream) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut hello = String::new();
    (&mut read).take(128).read_line(&mut hello).await?;
    let hello = hello.trim_end();
    let plain = format!("toolwire/{VERSION}");
    if hello == plain {
        write.write_all(b"ok\n").await?;
        server::serve_connection(server, read, write).await;
        return Ok(());
    }
    if hello != format!("{plain}{HAND_OVER}") {
        write
            .write_all(format!("error: this daemon is toolwire/{VERSION}\n").as_bytes())
            .await?;
        return Ok(());
    }
    // The forwarder sends its descriptors only once it reads `fds`, so
    // nothing of the message carrying them can be in `read`'s buffer.
    write.write_all(b"fds\n").await?;
    let stream = read.into_inner().reunite(write).map_err(io::Error::other)?;
    let fds = receive_fds(&stream).await?;
    let handed = match fds.as_slice() {
        [input, output] => stdio::NonBlocking::reader(input.as_fd())
            .zip(stdio::NonBlocking::writer(output.as_fd())),
        _ => None,
    };
    // Our copies of the received descriptors: what we serve is a private
    // description (a pipe) or a duplicate (a socket), made above.
    drop(fds);
    let (read, mut write) = stream.into_split();
    let Some((input, output)) = handed else {
        // Not usable here: forward bytes over the socket as before.
        write.write_all(b"ok\n").await?;
        server::serve_connection(server, BufReader::new(read), write).await;
        return Ok(());
    };
    write.write_all(b"ok fds\n").await?;
    server::serve_connection(server, input, output).await;
    // Only now, with the client's pipes closed on our side (the connection
    // dropped them), does the forwarder learn it may exit: its exit is then
    // the client's sign that the server is done.
    drop((read, write));
    Ok(())
}

/// The suffix of a forwarder's handshake offering its stdin and stdout.
const HAND_OVER: &str = " fds";

/// Receive the descriptors a forwarder sends (SCM_RIGHTS), with the one
/// byte that carries them.
async fn receive_fds(stream: &UnixStream) -> io::Result<Vec<OwnedFd>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    loop {
        stream.readable().await?;
        let received = stream.try_io(Interest::READABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut byte = [0u8; 1];
            let msg = rustix::net::recvmsg(
                stream,
                &mut [io::IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
            )?;
            if msg.bytes == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let fds: Vec<OwnedFd> = control
                .drain()
                .filter_map(|m| match m {
                    RecvAncillaryMessage::ScmRights(fds) => Some(fds),
                    _ => None,
                })
                .flatten()
                .collect();
            Ok(fds)
        });
        match received {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// Send this process's stdin and stdout to the daemon (SCM_RIGHTS).
async fn send_stdio(stream: &UnixStream) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let (stdin, stdout) = (io::stdin(), io::stdout());
    let fds = [stdin.as_fd(), stdout.as_fd()];
    loop {
        stream.writable().await?;
        let sent = stream.try_io(Interest::WRITABLE, || {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
                return Err(io::Error::other("no room for two descriptors"));
            }
            Ok(rustix::net::sendmsg(
                stream,
                &[io::IoSlice::new(b"F")],
                &mut control,
                SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
            )?)
        });
        match sent {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(err),
            Ok(_) => return Ok(()),
        }
    }
}

/// Read one handshake line (at most 256 bytes) from a socket the peer
/// sends nothing else on before we answer, so nothing is read past it.
async fn read_answer(stream: &mut UnixStream) -> io::Result<String> {
    let (read, _) = stream.split();
    let mut read = BufReader::new(read);
    let mut answer = String::new();
    (&mut read).take(256).read_line(&mut answer).await?;
    if !read.buffer().is_empty() {
        return Err(io::Error::other("the daemon sent more than its handshake"));
    }
    Ok(answer.trim_end().to_owned())
}

// -------------------------------------------------------------- forwarder --

/// Refuse what no daemon could ever use, naming it, rather than letting a
/// forwarder wait for a daemon that cannot start: a directory where the
/// socket or the lock file goes.
fn check_paths(paths: &Paths) -> io::Result<()> {
    for (path, what) in [
        (&paths.socket, "socket"),
        (&paths.lock, "lock file"),
        (&paths.log, "log"),
    ] {
        if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_dir()) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} is a directory, where the daemon's {what} goes; remove it",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Bytes a forwarder moves per read: a whole small frame, or a big one in
/// few system calls.
const FORWARD_BUFFER: usize = 64 * 1024;

/// Forward this process's stdio to the workspace daemon, starting it if
/// needed. Returns when the daemon ends the connection, which it does
/// after answering everything the client sent (when stdin ends, every
/// reply still on its way is delivered before the forwarder exits).
pub async fn forward(workspace: &Path, idle: Duration) -> io::Result<()> {
    let paths = paths(workspace)?;
    check_paths(&paths)?;
    let mut stream = connect_or_start(&paths, workspace, idle).await?;
    let plain = format!("toolwire/{VERSION}\n");
    // When stdin and stdout are pipes or sockets, hand them to the daemon,
    // which then reads and writes the client directly: a round trip costs
    // what `serve` costs, not two more hops through this process.
    if stdio::pollable(io::stdin().as_fd()) && stdio::pollable(io::stdout().as_fd()) {
        stream
            .write_all(format!("toolwire/{VERSION}{HAND_OVER}\n").as_bytes())
            .await?;
        match read_answer(&mut stream).await?.as_str() {
            "fds" => {
                send_stdio(&stream).await?;
                match read_answer(&mut stream).await?.as_str() {
                    "ok fds" => {
                        // Stay until the daemon is done with the client's
                        // pipes: it closes the socket then.
                        let mut rest = Vec::new();
                        stream.read_to_end(&mut rest).await?;
                        return Ok(());
                    }
                    "ok" => return forward_bytes(stream).await,
                    other => return Err(refused(other)),
                }
            }
            // A daemon that does not take descriptors (another build of
            // this version): forward bytes over a new connection.
            _ => stream = connect_or_start(&paths, workspace, idle).await?,
        }
    }
    stream.write_all(plain.as_bytes()).await?;
    match read_answer(&mut stream).await?.as_str() {
        "ok" => forward_bytes(stream).await,
        other => Err(refused(other)),
    }
}

fn refused(answer: &str) -> io::Error {
    io::Error::other(format!("daemon refused the handshake: {answer}"))
}

/// Copy this process's stdin to the daemon and its answers to stdout.
async fn forward_bytes(stream: UnixStream) -> io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::with_capacity(FORWARD_BUFFER, read);
    // stdio on epoll when it is a pipe or a socket (see
    // `transport::stdio`): a forwarded frame then costs one read and one
    // write each way, with no blocking-pool hop.
    let upstream = async move {
        let mut stdin = BufReader::with_capacity(FORWARD_BUFFER, crate::transport::stdio::stdin());
        let copied = tokio::io::copy_buf(&mut stdin, &mut write).await;
        // The client is gone: tell the daemon, which flushes its pairs.
        let _ = write.shutdown().await;
        copied
    };
    let downstream = async move {
        let mut stdout = crate::transport::stdio::stdout();
        let copied = tokio::io::copy_buf(&mut read, &mut stdout).await;
        let _ = stdout.flush().await;
        copied
    };
    // Only the daemon closing the connection ends the forwarder: after
    // `exit`, or after the client's EOF once it has answered everything
    // (stdin may still be open in the first case).
    let upstream = tokio::spawn(upstream);
    let done = downstream.await;
    upstream.abort();
    done.map(|_| ())
}

async fn connect_or_start(
    paths: &Paths,
    workspace: &Path,
    idle: Duration,
) -> io::Result<UnixStream> {
    if let Ok(stream) = UnixStream::connect(&paths.socket).await {
        return Ok(stream);
    }
    let mut daemon = Some(spawn_daemon(paths, workspace, idle)?);
    let mut last = None;
    for _ in 0..500 {
        match UnixStream::connect(&paths.socket).await {
            Ok(stream) => return Ok(stream),
            Err(err) => last = Some(err),
        }
        // A daemon that failed to start says so at once (and in its log);
        // one that exits cleanly found another daemon starting: keep trying.
        if let Some(child) = daemon.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            daemon = None;
            if !status.success() {
                return Err(io::Error::other(format!(
                    "the daemon could not start ({status}); see {}",
                    paths.log.display()
                )));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(last.unwrap_or_else(|| io::Error::other("the daemon did not start")))
}

/// Start `toolwire daemon` detached: its own session, no stdio of ours;
/// its stderr goes to the log file beside the socket.
fn spawn_daemon(
    paths: &Paths,
    workspace: &Path,
    idle: Duration,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    // Never through a link planted in the (private) directory.
    // Appended to, never truncated: a racing starter must not erase the
    // log of a daemon already running (the daemon caps its size itself).
    let log = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&paths.log)
        .map_err(|err| naming(&paths.log, err))?;
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
    command.spawn()
}

/// The daemon's pid, as its lock file records it.
pub fn daemon_pid(paths: &Paths) -> Option<u32> {
    fs::read_to_string(&paths.lock).ok()?.trim().parse().ok()
}
