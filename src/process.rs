//! Process-wide setup every long-running toolwire command does first:
//! resource limits, signals and the async runtime.

use std::io;

/// Stack of every runtime thread. Messages may nest up to
/// [`crate::json::MAX_DEPTH`] levels, and serializing, cloning or dropping
/// such a value recurses once per level; 32 MiB leaves a wide margin even
/// in debug builds (measured: a 1,000-level tool input needs under 16 MiB
/// unoptimized). The memory is reserved, not used, until touched.
pub const THREAD_STACK: usize = 32 << 20;

/// How long an idle blocking thread waits for work before it ends. Each
/// thread keeps small freed blocks in a cache of its own (glibc's tcache)
/// until it ends, and they pin the pages of the work it did (an artifact
/// written, a checkpoint brought up to date) against any trim. With
/// tokio's 10 s, a 100k-id session built by `budget/apply` left the server
/// at 36.7-38.9 MB; with half a second, 34.2-34.3 MB, since the release a
/// second after the client's pause (`server`) then finds those threads
/// ended. The release after a burst of evictions waits for the burst's
/// threads to end too (see `session`). The price: blocking work that comes
/// more than half a second after the last starts its threads anew (a
/// thread start each, the stack only reserved; not measured).
pub const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_millis(500);

/// The multi-threaded runtime of every async command but the JSON-RPC
/// server (the proxy, the MCP front, `gc`, ...), with a worker for each
/// core.
pub fn runtime() -> io::Result<tokio::runtime::Runtime> {
    builder().build()
}

/// The runtime of the JSON-RPC server (`serve`, its shared daemon), with
/// [`server_workers`] workers.
pub fn server_runtime() -> io::Result<tokio::runtime::Runtime> {
    let mut builder = builder();
    // An operator's `TOKIO_WORKER_THREADS` is tokio's to read, and wins.
    if std::env::var_os(WORKERS_ENV).is_none() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        builder.worker_threads(server_workers(cores));
    }
    let runtime = builder.build()?;
    tracing::debug!(
        workers = runtime.metrics().num_workers(),
        "the server's runtime started"
    );
    Ok(runtime)
}

/// The variable tokio reads for its number of workers.
const WORKERS_ENV: &str = "TOKIO_WORKER_THREADS";

/// How many runtime workers the JSON-RPC server runs on `cores` cores:
/// half of them, at least one.
///
/// The server's requests are mostly small (a pair's message, a `state/get`)
/// and each hops between tasks: the connection's reader, the session's
/// task, the writer. With a worker for every core, an idle worker is woken
/// to take some of those tasks over, and the hops cross threads (a wakeup
/// through the kernel each). On two cores, with one worker instead of two,
/// the server's CPU per small pair over stdio fell from about 13 to about
/// 10 µs (9.8-10.2 in five runs of `cargo bench --bench storage --
/// stdio`, durability `none`), while a session's `state/get` stayed as
/// quick with another session persisting 100,000 results (p99 4.2 ms
/// against 3.8 ms). Most of its long work
/// runs off the workers anyway: transcripts are loaded, reconstructed,
/// checked and repaired and saved outputs written on the blocking pool,
/// and the commit log syncs on threads of its own. The other half of the
/// cores is left to those threads and to the agents on the same machine.
/// What stays on a worker is a request's own parse and plan (20-35 ms
/// for a 20 MB `budget/apply`), which another session's request may now
/// wait behind on two cores. Measured on two cores only; docs/benchmarks.md
/// has the figures.
pub fn server_workers(cores: usize) -> usize {
    (cores / 2).max(1)
}

fn builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .thread_stack_size(THREAD_STACK)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE);
    builder
}

/// What [`prepare`] changed, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    /// The soft limit on open files now in force.
    pub open_files: u64,
}

/// Raise the soft limit on open files to the hard limit, and ignore
/// `SIGXFSZ`.
///
/// - A shared server holds a transcript open per active session plus the
///   artifacts being written; the usual soft limit of 1,024 is a default
///   for interactive shells, not a budget chosen for a daemon.
/// - With a file-size limit (`ulimit -f`), a write past it raises
///   `SIGXFSZ`, whose default action ends the process. Ignored, the write
///   fails with `EFBIG` instead, which becomes a `storage` error (a
///   transcript commit, rolled back) or a `failures` entry (an artifact).
pub fn prepare() -> Prepared {
    ignore_sigxfsz();
    tune_allocator();
    Prepared {
        open_files: raise_open_files(),
    }
}

/// Keep glibc's malloc from holding on to memory a long-lived server has
/// freed. By default it raises its mmap threshold to the largest block
/// freed so far (up to 32 MiB), so after one large reply every later large
/// buffer comes from the heap and stays there; it also keeps up to eight
/// arenas per core, each holding its own free memory. A fixed threshold
/// sends every block of 128 KiB or more (request and reply frames, a
/// transcript's read buffer, big vectors) to mmap, returned whole on free;
/// two arenas are plenty for a runtime of a few threads.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any
    // thread of ours starts.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

/// The mmap threshold of `toolwire proxy`: blocks under it come from the
/// heap. Each proxied request reads its whole body into one buffer (and
/// a conversation is parsed); at the servers' 128 KiB every such buffer
/// of a conversation-sized body was a fresh mapping, faulted in page by
/// page and unmapped after: about 60 page faults a request for a 200 KB
/// body passed through, 3 with this threshold, and 0.15-0.19 ms less
/// added at first byte (docs/benchmarks.md, the proxy notes). From the
/// heap the next request reuses what the last one freed. What a burst
/// leaves goes back once the proxy has had no large work for a second
/// (`heap::LargeWork`): after 16 clients for 3 s and a 2 s pause the
/// proxy held 22.0 MB against 21.8 before. Bodies of 8 MiB or more are
/// still mapped on their own.
pub const PROXY_MMAP_THRESHOLD: usize = 8 << 20;

/// [`tune_allocator`] for `toolwire proxy` (see [`PROXY_MMAP_THRESHOLD`]).
pub fn tune_allocator_for_proxy() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters (under its own lock).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, PROXY_MMAP_THRESHOLD as i32);
    }
}

fn ignore_sigxfsz() {
    // SAFETY: installing SIG_IGN for one signal has no other effect; it is
    // done before any thread of ours starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit; the limit in force.
pub fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        // An unlimited hard limit still stops at the kernel's `nr_open`.
        let ceiling = limit.rlim_max.min(nr_open());
        if limit.rlim_cur < ceiling {
            let raised = libc::rlimit {
                rlim_cur: ceiling,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// The most descriptors the kernel lets a process have (Linux's default
/// when it cannot be read).
fn nr_open() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(1 << 20)
}

/// The soft limit on open files in force.
pub fn open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    limit.rlim_cur
}

/// The process being asked to stop: SIGINT (Ctrl-C) or SIGTERM (what
/// `kill`, service managers and container runtimes send). The long-running
/// commands (`serve`, `mcp`, `proxy`, the daemon) then end as they do when
/// their client goes: pending pairs flushed by the abort mode, the commit
/// log checkpointed and removed. Once the handlers are installed the two
/// signals no longer end the process by themselves; one that does not stop
/// is ended with SIGKILL, which replay on the next start covers.
pub struct Terminated {
    /// `None` when the handlers could not be installed: the signals then
    /// keep their default action, and the next start replays the log.
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Terminated {
    /// Install the handlers now, so a signal that comes before the first
    /// wait is not missed. Must run inside the runtime.
    pub fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(interrupt), Ok(terminate)) => Some((interrupt, terminate)),
            _ => None,
        };
        Terminated { signals }
    }

    /// Resolves at the first SIGINT or SIGTERM.
    pub async fn recv(&mut self) {
        match &mut self.signals {
            Some((interrupt, terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
            None => std::future::pending().await,
        }
    }

    fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match &mut self.signals {
            Some((interrupt, terminate)) => {
                if interrupt.poll_recv(cx).is_ready() || terminate.poll_recv(cx).is_ready() {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            }
            None => std::task::Poll::Pending,
        }
    }
}

/// A reader that reaches end of input when the process is asked to stop
/// ([`Terminated`]): a connection read through it ends as if its client had
/// closed its side, through the one path that already cleans up.
pub struct UntilTerminated<R> {
    inner: R,
    stop: Terminated,
    stopped: bool,
}

impl<R> UntilTerminated<R> {
    /// `inner`, read until a stop signal; the handlers are installed now.
    pub fn new(inner: R) -> Self {
        UntilTerminated {
            inner,
            stop: Terminated::install(),
            stopped: false,
        }
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for UntilTerminated<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        if !self.stopped && self.stop.poll_recv(cx).is_ready() {
            self.stopped = true;
        }
        if self.stopped {
            // End of input, for good.
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

/// Drop `value` on a thread of its own: a large structure's tens of
/// thousands of small allocations take milliseconds to free, which a
/// request need not wait for. When no thread can be started, it is dropped
/// (freed) right here.
pub fn drop_apart<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("toolwire-free".into())
        .spawn(move || drop(value));
}

#[cfg(test)]
mod tests {
    use super::server_workers;

    #[test]
    fn the_server_takes_half_the_cores_and_at_least_one() {
        assert_eq!(server_workers(0), 1);
        assert_eq!(server_workers(1), 1);
        assert_eq!(server_workers(2), 1);
        assert_eq!(server_workers(3), 1);
        assert_eq!(server_workers(8), 4);
        assert_eq!(server_workers(64), 32);
    }
}
