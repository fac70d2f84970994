//! The process's stdin and stdout as async streams, on epoll when they can be.
//!
//! `tokio::io::stdin()/stdout()` run every read, write and flush on the
//! blocking pool (a thread hop and futex handshakes each), and std's
//! line-buffered stdout writes a frame as two `write(2)`s (up to the header's
//! last newline, then the body at the flush). When stdin or stdout is a pipe
//! or a socket it is instead read and written without blocking, driven by
//! the runtime's epoll ([`AsyncFd`]): one `read(2)` brings whatever the
//! client sent, one `write(2)` sends whatever frames are queued.
//!
//! Non-blocking, but without ever setting `O_NONBLOCK` on the descriptor we
//! inherited: that flag belongs to the open file description, which the
//! parent (and anything else it gave the same stdin or stdout to) shares,
//! and a shell or harness whose stdin suddenly answers `EAGAIN` breaks —
//! including after we exit, or are killed before any restore could run.
//!
//! - A **socket** is used through a duplicate of its descriptor with
//!   `recv`/`send` and `MSG_DONTWAIT`, which make that one call
//!   non-blocking and leave the description's flags alone.
//! - A **pipe** (or FIFO) has no per-call flag, so it is opened again
//!   through `/proc/self/fd/N`: for a pipe that makes a new open file
//!   description of the same pipe, private to us, which may be
//!   non-blocking. (The new read end adds a reader and the new write end a
//!   writer, exactly as long as we hold them, which is while we serve.)
//! - Anything else — a regular file, a terminal, `/dev/null`, a pipe that
//!   cannot be reopened (no `/proc`, another owner) — keeps tokio's
//!   blocking-pool stdio. epoll refuses regular files, and reading a
//!   terminal is not worth a flag its shell would see.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A pipe or socket end served without blocking (see the module docs).
#[derive(Debug)]
pub struct NonBlocking {
    fd: AsyncFd<OwnedFd>,
    /// `recv`/`send` with `MSG_DONTWAIT` (a socket) or plain `read`/`write`
    /// (a private non-blocking description of a pipe).
    socket: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

impl NonBlocking {
    /// `fd` on epoll when it is a pipe or a socket that can be used without
    /// touching its shared flags; `None` means: keep the blocking path.
    /// Must be called on a tokio runtime.
    fn open(fd: RawFd, direction: Direction) -> Option<NonBlocking> {
        let stat = fstat(fd)?;
        let kind = stat.st_mode & libc::S_IFMT;
        let (owned, socket) = if kind == libc::S_IFSOCK {
            // SAFETY: fcntl(F_DUPFD_CLOEXEC) only creates a new descriptor.
            let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if dup < 0 {
                return None;
            }
            // SAFETY: `dup` is a fresh descriptor that nothing else owns.
            (unsafe { OwnedFd::from_raw_fd(dup) }, true)
        } else if kind == libc::S_IFIFO {
            let owned = reopen_pipe(fd, &stat, direction)?;
            widen_pipe(owned.as_raw_fd());
            (owned, false)
        } else {
            return None;
        };
        let interest = match direction {
            Direction::Read => Interest::READABLE,
            Direction::Write => Interest::WRITABLE,
        };
        // SAFETY: the `OwnedFd` is ours alone, stays open until the
        // `AsyncFd` drops it, and always returns the same descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(owned, interest) }.ok()?;
        Some(NonBlocking { fd, socket })
    }

    fn read_once(&self, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
        let fd = self.fd.get_ref().as_raw_fd();
        // SAFETY: the kernel writes at most `unfilled.len()` bytes into
        // memory we own; only what it reports written is marked filled.
        unsafe {
            let unfilled = buf.unfilled_mut();
            let ptr = unfilled.as_mut_ptr().cast::<libc::c_void>();
            let n = if self.socket {
                libc::recv(fd, ptr, unfilled.len(), libc::MSG_DONTWAIT)
            } else {
                libc::read(fd, ptr, unfilled.len())
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            buf.assume_init(n);
            buf.advance(n);
            Ok(n)
        }
    }

    fn write_once(&self, bytes: &[u8]) -> io::Result<usize> {
        let fd = self.fd.get_ref().as_raw_fd();
        let ptr = bytes.as_ptr().cast::<libc::c_void>();
        // SAFETY: the kernel only reads `bytes.len()` bytes of `bytes`.
        let n = unsafe {
            if self.socket {
                libc::send(
                    fd,
                    ptr,
                    bytes.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            } else {
                libc::write(fd, ptr, bytes.len())
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

fn fstat(fd: RawFd) -> Option<libc::stat> {
    // SAFETY: fstat only writes the struct we pass; all-zero is a valid stat.
    unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        (libc::fstat(fd, &mut stat) == 0).then_some(stat)
    }
}

/// What [`widen_pipe`] asks for: the default limit of an unprivileged
/// process (`/proc/sys/fs/pipe-max-size`).
const PIPE_SIZE: libc::c_int = 1 << 20;

/// Let the pipe hold up to a mebibyte instead of the kernel's default 64
/// KiB. A 20 MB request then crosses it in about 20 reads instead of 320,
/// each of which wakes the reader and the writer in turn. The size belongs
/// to the pipe, not to one end: the client's writes block less, nothing
/// else changes. Refused (the user's pipes already hold their share of
/// memory, `pipe-user-pages-soft`), the pipe simply keeps its size.
fn widen_pipe(fd: RawFd) {
    // SAFETY: F_GETPIPE_SZ and F_SETPIPE_SZ only read and set the pipe's
    // capacity; a refusal changes nothing.
    unsafe {
        if libc::fcntl(fd, libc::F_GETPIPE_SZ) < PIPE_SIZE {
            libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_SIZE);
        }
    }
}

/// A new, private, non-blocking open file description of the pipe `fd`
/// is, checked to be that same pipe.
fn reopen_pipe(fd: RawFd, stat: &libc::stat, direction: Direction) -> Option<OwnedFd> {
    let access = match direction {
        Direction::Read => libc::O_RDONLY,
        Direction::Write => libc::O_WRONLY,
    };
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).ok()?;
    // SAFETY: a plain open(2) of a NUL-terminated path.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            access | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if raw < 0 {
        return None;
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
    let again = fstat(raw)?;
    (again.st_dev == stat.st_dev && again.st_ino == stat.st_ino).then_some(owned)
}

impl AsyncRead for NonBlocking {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.fd.poll_read_ready(cx))?;
            let wanted = buf.remaining();
            match guard.try_io(|_| this.read_once(buf)) {
                Ok(Ok(n)) => {
                    // A short read drained the pipe or socket: wait for the
                    // next edge instead of paying a read that says EAGAIN
                    // (what tokio's own sockets do).
                    if n > 0 && n < wanted {
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for NonBlocking {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.fd.poll_write_ready(cx))?;
            match guard.try_io(|_| this.write_once(bytes)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    /// Every write went straight to the kernel: nothing is buffered here.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// The descriptor is ours alone and closes when dropped; the shared
    /// stdout it stands for is never shut down for the other holders.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// This process's stdin: on epoll (a pipe or socket) or tokio's.
impl NonBlocking {
    /// The read side of a descriptor another process handed over (the
    /// shared daemon serving a forwarder's client directly): opened as
    /// [`stdin`] opens fd 0, so `fd` itself may be closed afterwards.
    pub fn reader(fd: BorrowedFd<'_>) -> Option<NonBlocking> {
        NonBlocking::open(fd.as_raw_fd(), Direction::Read)
    }

    /// The write side of a handed-over descriptor (see [`Self::reader`]).
    pub fn writer(fd: BorrowedFd<'_>) -> Option<NonBlocking> {
        NonBlocking::open(fd.as_raw_fd(), Direction::Write)
    }
}

/// Whether `fd` is a pipe or a socket: what [`NonBlocking`] can serve.
pub fn pollable(fd: BorrowedFd<'_>) -> bool {
    fstat(fd.as_raw_fd()).is_some_and(|stat| {
        let kind = stat.st_mode & libc::S_IFMT;
        kind == libc::S_IFIFO || kind == libc::S_IFSOCK
    })
}

#[derive(Debug)]
pub enum Stdin {
    Epoll(NonBlocking),
    Blocking(tokio::io::Stdin),
}

/// This process's stdout: on epoll (a pipe or socket) or tokio's.
#[derive(Debug)]
pub enum Stdout {
    Epoll(NonBlocking),
    Blocking(tokio::io::Stdout),
}

/// This process's stdin, on epoll when it is a pipe or a socket. Must be
/// called on a tokio runtime.
pub fn stdin() -> Stdin {
    match NonBlocking::open(libc::STDIN_FILENO, Direction::Read) {
        Some(fd) => Stdin::Epoll(fd),
        None => Stdin::Blocking(tokio::io::stdin()),
    }
}

/// This process's stdout, on epoll when it is a pipe or a socket. Must be
/// called on a tokio runtime.
pub fn stdout() -> Stdout {
    match NonBlocking::open(libc::STDOUT_FILENO, Direction::Write) {
        Some(fd) => Stdout::Epoll(fd),
        None => Stdout::Blocking(tokio::io::stdout()),
    }
}

impl Stdin {
    /// Whether reads go through epoll rather than the blocking pool.
    pub fn is_epoll(&self) -> bool {
        matches!(self, Stdin::Epoll(_))
    }
}

impl Stdout {
    /// Whether writes go through epoll rather than the blocking pool.
    pub fn is_epoll(&self) -> bool {
        matches!(self, Stdout::Epoll(_))
    }
}

impl AsyncRead for Stdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stdin::Epoll(fd) => Pin::new(fd).poll_read(cx, buf),
            Stdin::Blocking(std) => Pin::new(std).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stdout::Epoll(fd) => Pin::new(fd).poll_write(cx, bytes),
            Stdout::Blocking(std) => Pin::new(std).poll_write(cx, bytes),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stdout::Epoll(fd) => Pin::new(fd).poll_flush(cx),
            Stdout::Blocking(std) => Pin::new(std).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stdout::Epoll(fd) => Pin::new(fd).poll_shutdown(cx),
            Stdout::Blocking(std) => Pin::new(std).poll_shutdown(cx),
        }
    }
}
