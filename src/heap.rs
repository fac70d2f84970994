//! A heap of its own for what sessions keep.
//!
//! A session's state lives as long as the session: every decided id and
//! every packed preview. Requests allocate far more, and briefly: each
//! `budget/apply` parses its conversation into values, renders previews
//! and frees it all when it replies. In one shared heap the state's small
//! entries land among a request's values, and once those are freed the
//! pages stay, each held by the few entries of the state on it. A session
//! built by a hundred `budget/apply` requests then held about 9 MB more
//! than the same session read back from its transcript, of which a trim
//! returned 1-2 MB (docs/design.md, "What sessions keep has a heap of its own").
//!
//! [`Heap`] is the process's global allocator. It serves every allocation
//! from the system allocator (glibc's malloc), except those a thread makes
//! inside [`apart`]: these come from a second allocator (`dlmalloc`) whose
//! memory is one reserved range of address space that nothing else uses,
//! so the state's entries sit together, apart from any request. A block is
//! given back to whichever allocator its address belongs to, so it may be
//! freed, from any thread, in or out of [`apart`].
//!
//! Only the allocation of an entry the state keeps goes inside [`apart`]
//! (an id, a replacement), never the work that computes it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Address space reserved for the separate heap: reserved, not used; pages
/// are committed as it grows and given back as it shrinks. Far more than
/// any server's sessions hold (100,000 ids and 10,000 previews take 12 MB).
const RESERVE: usize = 16 << 30;

/// Blocks larger than this always come from the system allocator, which
/// maps the large ones whole; the state's entries are far smaller.
const LARGEST: usize = 16 << 10;

/// The alignment dlmalloc gives every block (two words).
const ALIGN: usize = 2 * std::mem::size_of::<usize>();

thread_local! {
    static APART: Cell<bool> = const { Cell::new(false) };
    /// Inside [`transient`]: [`apart`] has no effect.
    static TRANSIENT: Cell<bool> = const { Cell::new(false) };
    /// The separate heap while this thread holds its lock ([`held`]).
    static HELD: Cell<*mut dlmalloc::Dlmalloc<Region>> = const { Cell::new(std::ptr::null_mut()) };
}

/// Run `f` with this thread's allocations served from the separate heap.
///
/// Meant for the allocation of an entry the state keeps, not for the work
/// that computes it: what is allocated here and freed soon after leaves
/// holes among the entries. Nests; has no effect unless [`Heap`] is the
/// global allocator.
pub fn apart<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = APART.try_with(|apart| apart.set(self.0));
        }
    }
    if is_transient() {
        return f();
    }
    let was = APART.try_with(|apart| apart.replace(true)).unwrap_or(false);
    let _restore = Restore(was);
    f()
}

/// Run `f` with [`apart`] turned off on this thread: for a state built
/// only to be read and dropped (a decisions checkpoint being brought up to
/// date reads one whole). Its entries in the separate heap would sit among
/// the ones sessions keep, and once freed leave holes there that no trim
/// can give back (a session built by `budget/apply` held 22 MB in that
/// heap where its state needs 12). A thread `f` starts to help it runs
/// its part inside `transient` too ([`is_transient`]). Nests.
pub fn transient<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = TRANSIENT.try_with(|t| t.set(self.0));
            let _ = APART.try_with(|apart| apart.set(self.1));
        }
    }
    let was = TRANSIENT.try_with(|t| t.replace(true)).unwrap_or(false);
    let apart = APART
        .try_with(|apart| apart.replace(false))
        .unwrap_or(false);
    let _restore = Restore(was, apart);
    f()
}

/// Whether this thread is inside [`transient`]: a thread it starts to
/// help runs its work in [`transient_if`] with this.
pub fn is_transient() -> bool {
    TRANSIENT.try_with(Cell::get).unwrap_or(false)
}

/// Run `f` inside [`transient`] when `transient` is set (the starting
/// thread's [`is_transient`]), else as it is.
pub fn transient_if<T>(transient: bool, f: impl FnOnce() -> T) -> T {
    if transient { self::transient(f) } else { f() }
}

/// Run `f` with the separate heap's lock held by this thread, so the
/// allocations and frees it makes there ([`apart`] inside it) do not each
/// take the lock: for a burst of them, such as a shard of a state read
/// back from a checkpoint (taking and releasing the lock was a tenth of
/// that reading). Other threads wait for the heap until `f` returns: keep
/// `f` short. Nests.
pub fn held<T>(f: impl FnOnce() -> T) -> T {
    if !HELD
        .try_with(Cell::get)
        .unwrap_or(std::ptr::null_mut())
        .is_null()
    {
        return f();
    }
    let mut guard = separate();
    /// Forgets the heap before the guard unlocks it, also on a panic.
    struct Forget;
    impl Drop for Forget {
        fn drop(&mut self) {
            let _ = HELD.try_with(|held| held.set(std::ptr::null_mut()));
        }
    }
    if HELD.try_with(|held| held.set(&mut *guard)).is_err() {
        return f();
    }
    let _forget = Forget;
    f()
}

/// Run `f` on the separate heap: the one this thread holds, or under its
/// lock.
fn with_separate<R>(f: impl FnOnce(&mut dlmalloc::Dlmalloc<Region>) -> R) -> R {
    let held = HELD.try_with(Cell::get).unwrap_or(std::ptr::null_mut());
    if held.is_null() {
        return f(&mut separate());
    }
    // SAFETY: `held` points into the guard [`held`] keeps locked for as
    // long as it is set, on this thread only; the guard is not touched
    // meanwhile and this is the only reference made from it at a time
    // (dlmalloc does not allocate through the global allocator).
    f(unsafe { &mut *held })
}

#[inline(always)]
fn is_apart() -> bool {
    APART.try_with(Cell::get).unwrap_or(false)
}

/// The global allocator: the system's, and the separate heap inside
/// [`apart`].
pub struct Heap;

// SAFETY: every block is allocated by exactly one of the two allocators and
// given back to the one whose address range holds it; the separate heap is
// only used under its lock.
unsafe impl GlobalAlloc for Heap {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(ptr) = apart_alloc(layout, false) {
            return ptr;
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if let Some(ptr) = apart_alloc(layout, true) {
            return ptr;
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if REGION.holds(ptr) {
            // SAFETY: the block came from the separate heap (its address is
            // in the range only that heap uses) and is live.
            unsafe { separate_free(ptr) }
        } else {
            // SAFETY: the block came from the system allocator.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !REGION.holds(ptr) {
            // SAFETY: the block came from the system allocator.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if new_size <= LARGEST {
            // SAFETY: a live block of the separate heap, whose alignment
            // (at most `ALIGN`, see `apart_alloc`) c_realloc keeps.
            let moved = with_separate(|heap| unsafe { heap.c_realloc(ptr, new_size) });
            if !moved.is_null() {
                return moved;
            }
        }
        // Grown past what the separate heap keeps (or out of room there):
        // the system allocator takes it over.
        // SAFETY: `new_size` is non-zero and, rounded up to the alignment,
        // fits an isize (the caller's guarantees for realloc).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as above.
        let new = unsafe { System.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                with_separate(|heap| heap.c_free(ptr));
            }
        }
        new
    }
}

/// A block from the separate heap, when this thread is inside [`apart`] and
/// the block is small enough to keep there. The test is inlined into
/// every allocation and the allocation from the separate heap is not:
/// with both in one function, each of a small request's hundred or so
/// allocations went through a call that saved and restored five registers
/// for the rare path, about 30 instructions before glibc's malloc (3% of
/// the server's instructions per pair over stdio).
#[inline(always)]
fn apart_alloc(layout: Layout, zeroed: bool) -> Option<*mut u8> {
    if layout.size() > LARGEST || layout.align() > ALIGN || !is_apart() {
        return None;
    }
    separate_alloc(layout, zeroed)
}

/// The separate heap's part of [`apart_alloc`].
#[inline(never)]
fn separate_alloc(layout: Layout, zeroed: bool) -> Option<*mut u8> {
    // SAFETY: dlmalloc's malloc has no precondition beyond its lock, held.
    let ptr = with_separate(|heap| unsafe {
        if zeroed {
            heap.calloc(layout.size(), ALIGN)
        } else {
            heap.c_malloc(layout.size())
        }
    });
    (!ptr.is_null()).then_some(ptr)
}

/// Free a block of the separate heap; out of line, as [`separate_alloc`].
///
/// # Safety
///
/// `ptr` is a live block of the separate heap.
#[inline(never)]
unsafe fn separate_free(ptr: *mut u8) {
    // SAFETY: the caller's guarantee.
    with_separate(|heap| unsafe { heap.c_free(ptr) })
}

/// Hand the memory both heaps hold free back to the system: glibc's, all
/// of it (`malloc_trim`, which without the state in its heap has only a
/// runtime's and requests' leftovers to walk), and the separate heap's top.
/// Blocks for as long as that takes: call it off any request's path.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages back to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
    // SAFETY: trimming only returns free pages, under the lock.
    unsafe {
        with_separate(|heap| heap.trim(0));
    }
}

/// [`release_free_memory`] on a blocking thread of the current runtime,
/// unless a release is already running (one covers every caller of the
/// moment).
pub fn release_in_background() {
    static RUNNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    /// Clears `RUNNING` when the release is done, or dropped unrun (the
    /// runtime shutting down).
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING.store(false, Ordering::Release);
        }
    }
    if RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    let running = Running;
    tokio::task::spawn_blocking(move || {
        release_free_memory();
        tracing::debug!("handed the memory freed by large work back to the system");
        drop(running);
    });
}

/// Large work under way in a front that has no connection of its own to
/// watch for a pause (the HTTP proxy, the MCP front): a request body or a
/// tool result that carries a conversation. Once the last such work has
/// ended and none has begun for [`QUIET`], what it freed is handed back to
/// the system ([`release_in_background`]), as a `serve` connection does
/// when its client pauses.
#[must_use = "the work counts as under way until this is dropped"]
pub struct LargeWork(());

/// How long the process goes without large work before a release.
pub const QUIET: std::time::Duration = std::time::Duration::from_secs(1);

static LARGE: Quiet = Quiet::new();

#[cfg(test)]
thread_local! {
    /// Large work begun and ended on this thread: what a test's own work
    /// moved, whatever other tests do meanwhile on theirs.
    static MOVES_HERE: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// How many times large work has begun and ended on this thread.
#[cfg(test)]
pub(crate) fn large_work_moves_here() -> (usize, usize) {
    MOVES_HERE.with(Cell::get)
}

impl LargeWork {
    /// Count large work as under way until the value is dropped.
    pub fn begin() -> LargeWork {
        #[cfg(test)]
        MOVES_HERE.with(|m| m.set((m.get().0 + 1, m.get().1)));
        LARGE.begin();
        LargeWork(())
    }
}

impl Drop for LargeWork {
    fn drop(&mut self) {
        #[cfg(test)]
        MOVES_HERE.with(|m| m.set((m.get().0, m.get().1 + 1)));
        LARGE.end(release_in_background);
    }
}

/// Counts work under way and, when the count falls to zero, calls `then`
/// after [`QUIET`] unless work has begun (or ended) since.
struct Quiet {
    active: AtomicUsize,
    /// Moves on every begin and end: a wait that sees it moved is stale,
    /// and the wait of the latest end decides.
    epoch: AtomicUsize,
}

impl Quiet {
    const fn new() -> Quiet {
        Quiet {
            active: AtomicUsize::new(0),
            epoch: AtomicUsize::new(0),
        }
    }

    fn begin(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn end(&'static self, then: fn()) {
        let seen = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        if self.active.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // Outside a runtime (a thread of its own) there is nothing to wait
        // on; the next large work's end will wait instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            tokio::time::sleep(QUIET).await;
            if self.active.load(Ordering::Acquire) == 0
                && self.epoch.load(Ordering::Acquire) == seen
            {
                then();
            }
        });
    }
}

static SEPARATE: Mutex<dlmalloc::Dlmalloc<Region>> =
    Mutex::new(dlmalloc::Dlmalloc::new_with_allocator(Region));

fn separate() -> std::sync::MutexGuard<'static, dlmalloc::Dlmalloc<Region>> {
    // Nothing panics while holding the lock; a poisoned lock still guards
    // a consistent heap.
    SEPARATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where the separate heap gets its memory: one range of address space,
/// reserved on first use, handed out from its start and taken back from its
/// end.
struct Region;

static REGION: RegionState = RegionState {
    base: AtomicUsize::new(0),
    used: AtomicUsize::new(0),
    failed: std::sync::atomic::AtomicBool::new(false),
};

struct RegionState {
    /// Start of the reserved range (0 until reserved).
    base: AtomicUsize,
    /// Bytes committed from the start; changed only under the heap's lock.
    used: AtomicUsize,
    /// The reservation was refused.
    failed: std::sync::atomic::AtomicBool,
}

impl RegionState {
    #[inline(always)]
    fn holds(&self, ptr: *mut u8) -> bool {
        let base = self.base.load(Ordering::Acquire);
        let addr = ptr as usize;
        base != 0 && addr >= base && addr - base < RESERVE
    }

    /// The reserved range, reserving it first if need be (under the lock).
    /// `None` if it cannot be reserved (a low `ulimit -v`): then every
    /// block comes from the system allocator, and no reservation is tried
    /// again.
    fn base(&self) -> Option<usize> {
        let base = self.base.load(Ordering::Acquire);
        if base != 0 {
            return Some(base);
        }
        if self.failed.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: a new private anonymous mapping that nothing else uses;
        // PROT_NONE and MAP_NORESERVE reserve address space only.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RESERVE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            self.failed.store(true, Ordering::Relaxed);
            return None;
        }
        self.base.store(ptr as usize, Ordering::Release);
        Some(ptr as usize)
    }

    /// Drop the pages of `[start, end)` of the range (which must be its
    /// committed end) and uncommit them.
    fn shrink_to(&self, base: usize, start: usize, end: usize) -> bool {
        if end != base + self.used.load(Ordering::Relaxed) || start > end {
            return false;
        }
        if start == end {
            return true;
        }
        // SAFETY: `[start, end)` lies in our reservation and holds no live
        // block (dlmalloc gives back only free memory); mapping it afresh
        // as PROT_NONE drops its pages and their commit charge.
        let ptr = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                end - start,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return false;
        }
        self.used.store(start - base, Ordering::Relaxed);
        true
    }
}

// SAFETY: `Region` hands out disjoint, page-aligned, zeroed parts of its
// reservation and takes back only the end of what it handed out.
unsafe impl dlmalloc::Allocator for Region {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let failed = (std::ptr::null_mut(), 0, 0);
        let Some(base) = REGION.base() else {
            return failed;
        };
        let used = REGION.used.load(Ordering::Relaxed);
        let size = size.next_multiple_of(self.page_size());
        if size > RESERVE - used {
            return failed;
        }
        let start = (base + used) as *mut libc::c_void;
        // SAFETY: `[start, start + size)` is in our reservation and not yet
        // handed out.
        if unsafe { libc::mprotect(start, size, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            return failed;
        }
        // dlmalloc writes into what it asked for at once (a resume fills
        // tens of these steps in a row): faulting the step's pages in with
        // one call costs less than taking a fault on each. A hint: where
        // it fails (a kernel before 5.14) the pages fault in as they are
        // touched.
        // SAFETY: `[start, start + size)` was just made readable and
        // writable and holds nothing yet.
        unsafe { libc::madvise(start, size, libc::MADV_POPULATE_WRITE) };
        REGION.used.store(used + size, Ordering::Relaxed);
        (start.cast(), size, 0)
    }

    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        std::ptr::null_mut()
    }

    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        let Some(base) = REGION.base() else {
            return false;
        };
        let start = ptr as usize;
        REGION.shrink_to(base, start + newsize, start + oldsize)
    }

    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        self.free_part(ptr, size, 0)
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    /// The system's page size (4 KiB on x86-64, up to 64 KiB on some
    /// ARM kernels): `mprotect` and the shrinking `mmap` need page-aligned
    /// ranges.
    fn page_size(&self) -> usize {
        // SAFETY: sysconf only reads a system parameter.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .unwrap_or(4096)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    /// The tests share the process's one separate heap: a block another
    /// test holds above the freed ones would keep its top from shrinking.
    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[test]
    fn blocks_made_apart_come_from_the_separate_range() {
        let _serial = one_at_a_time();
        let heap = Heap;
        unsafe {
            let outside = heap.alloc(layout(48));
            let inside = apart(|| heap.alloc(layout(48)));
            let large = apart(|| heap.alloc(layout(LARGEST + 1)));
            assert!(!REGION.holds(outside));
            assert!(REGION.holds(inside));
            assert!(!REGION.holds(large), "large blocks stay with the system");
            // Written and freed from outside `apart`, each by its owner.
            inside.write_bytes(7, 48);
            heap.dealloc(inside, layout(48));
            heap.dealloc(outside, layout(48));
            heap.dealloc(large, layout(LARGEST + 1));
        }
    }

    #[test]
    fn transient_turns_apart_off_and_restores() {
        apart(|| {
            transient(|| {
                assert!(!is_apart() && is_transient());
                apart(|| assert!(!is_apart(), "apart has no effect inside transient"));
            });
            assert!(is_apart() && !is_transient());
        });
        let _serial = one_at_a_time();
        let heap = Heap;
        unsafe {
            let block = transient(|| apart(|| heap.alloc(layout(48))));
            assert!(!REGION.holds(block));
            heap.dealloc(block, layout(48));
        }
    }

    #[test]
    fn apart_nests_and_restores() {
        assert!(!is_apart());
        apart(|| {
            apart(|| assert!(is_apart()));
            assert!(is_apart());
        });
        assert!(!is_apart());
        let caught = std::panic::catch_unwind(|| apart(|| panic!("inside")));
        assert!(caught.is_err());
        assert!(!is_apart(), "a panic inside still restores the flag");
    }

    #[test]
    fn realloc_keeps_the_bytes_and_moves_large_blocks_out() {
        let _serial = one_at_a_time();
        let heap = Heap;
        unsafe {
            let ptr = apart(|| heap.alloc(layout(32)));
            assert!(REGION.holds(ptr));
            for i in 0..32 {
                ptr.add(i).write(i as u8);
            }
            // Grown within the separate heap's sizes: stays apart.
            let grown = heap.realloc(ptr, layout(32), 1000);
            assert!(REGION.holds(grown));
            // Grown past them: the system allocator takes it over.
            let moved = heap.realloc(grown, layout(1000), LARGEST * 2);
            assert!(!REGION.holds(moved));
            for i in 0..32 {
                assert_eq!(moved.add(i).read(), i as u8);
            }
            heap.dealloc(moved, layout(LARGEST * 2));
            let zeroed = apart(|| heap.alloc_zeroed(layout(256)));
            assert!(REGION.holds(zeroed));
            assert!((0..256).all(|i| zeroed.add(i).read() == 0));
            heap.dealloc(zeroed, layout(256));
        }
    }

    static QUIET_CALLS: AtomicUsize = AtomicUsize::new(0);

    fn count_quiet_call() {
        QUIET_CALLS.fetch_add(1, Ordering::SeqCst);
    }

    /// Lets spawned waits run at the current (paused) time.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_waits_for_the_last_large_work_and_a_quiet_second() {
        static WORK: Quiet = Quiet::new();
        let calls = || QUIET_CALLS.load(Ordering::SeqCst);
        let step = QUIET / 4;

        // Two pieces of work overlap: the first one's end releases nothing.
        WORK.begin();
        WORK.begin();
        WORK.end(count_quiet_call);
        tokio::time::sleep(QUIET * 2).await;
        settle().await;
        assert_eq!(calls(), 0, "work is still under way");

        // The last one ends; new work begins and ends within the quiet
        // second, so that wait is stale and the last end's wait decides.
        WORK.end(count_quiet_call);
        tokio::time::sleep(step * 2).await;
        WORK.begin();
        tokio::time::sleep(step).await;
        WORK.end(count_quiet_call);
        tokio::time::sleep(step * 2).await;
        settle().await;
        assert_eq!(calls(), 0, "work came within a second of the first end");
        tokio::time::sleep(step * 3).await;
        settle().await;
        assert_eq!(calls(), 1, "one release a quiet second after the last end");

        // Nothing more happens until work comes again.
        tokio::time::sleep(QUIET * 5).await;
        settle().await;
        assert_eq!(calls(), 1);
    }

    #[test]
    fn large_work_ended_outside_a_runtime_schedules_nothing() {
        static WORK: Quiet = Quiet::new();
        WORK.begin();
        WORK.end(|| panic!("no runtime to wait on"));
        assert_eq!(WORK.active.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_separate_heap_gives_its_top_back() {
        let _serial = one_at_a_time();
        let heap = Heap;
        unsafe {
            // Enough blocks to grow the heap well past its trim threshold.
            let blocks: Vec<*mut u8> =
                apart(|| (0..2000).map(|_| heap.alloc(layout(4096))).collect());
            assert!(blocks.iter().all(|&b| REGION.holds(b)));
            let grown = REGION.used.load(Ordering::Relaxed);
            for &b in blocks.iter().rev() {
                heap.dealloc(b, layout(4096));
            }
            release_free_memory();
            let after = REGION.used.load(Ordering::Relaxed);
            assert!(after < grown, "{after} of {grown} bytes still committed");
        }
    }
}
