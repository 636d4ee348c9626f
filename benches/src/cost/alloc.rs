//! A global allocator that counts what the engine's threads allocate.
//!
//! Only threads whose name starts with `crackbox-` (the engine's core
//! threads, resolver pool, control link, ...) count; the process's main
//! thread (named after the binary) and every thread of the bench itself do
//! not. A thread is classified once, at its first allocation, by its name
//! as the kernel holds it (`PR_GET_NAME`: no allocation, one syscall per
//! thread). Realloc counts as one allocation of the new size and a free of
//! the old one. Install it with `#[global_allocator]` in a binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The counting allocator: the system allocator plus counters.
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_USABLE: AtomicI64 = AtomicI64::new(0);

const UNKNOWN: u8 = 0;
const COUNTED: u8 = 1;
const IGNORED: u8 = 2;

thread_local! {
    static CLASS: Cell<u8> = const { Cell::new(UNKNOWN) };
}

/// What the engine's threads have allocated so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Allocations (and reallocations) made.
    pub allocations: u64,
    /// Bytes asked for by them.
    pub bytes: u64,
    /// Bytes asked for and not freed yet (frees by any thread of memory a
    /// counted thread allocated are not told apart: this is the engine's
    /// live heap as long as the bench's threads free only their own).
    pub live_bytes: i64,
    /// The same in `malloc_usable_size` terms (what the chunks hold).
    pub live_usable: i64,
}

impl Totals {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            allocations: self.allocations - earlier.allocations,
            bytes: self.bytes - earlier.bytes,
            live_bytes: self.live_bytes - earlier.live_bytes,
            live_usable: self.live_usable - earlier.live_usable,
        }
    }
}

/// The counters now.
pub fn totals() -> Totals {
    Totals {
        allocations: ALLOCATIONS.load(Ordering::Relaxed),
        bytes: BYTES.load(Ordering::Relaxed),
        live_bytes: LIVE_BYTES.load(Ordering::Relaxed),
        live_usable: LIVE_USABLE.load(Ordering::Relaxed),
    }
}

fn counted() -> bool {
    CLASS
        .try_with(|class| match class.get() {
            COUNTED => true,
            IGNORED => false,
            _ => {
                let yes = engine_thread();
                class.set(if yes { COUNTED } else { IGNORED });
                yes
            }
        })
        .unwrap_or(false)
}

/// Whether this thread is one of the engine's: named `crackbox-*` and not
/// the process's main thread.
fn engine_thread() -> bool {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into `name`.
    if unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: plain syscalls without arguments.
    let main = unsafe { libc::syscall(libc::SYS_gettid) } == i64::from(unsafe { libc::getpid() });
    !main && name.starts_with(b"crackbox-")
}

fn usable(ptr: *mut u8) -> i64 {
    // SAFETY: `ptr` came from the system allocator and is live.
    unsafe { libc::malloc_usable_size(ptr.cast()) as i64 }
}

fn on_alloc(ptr: *mut u8, size: usize) {
    if ptr.is_null() || !counted() {
        return;
    }
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
    LIVE_BYTES.fetch_add(size as i64, Ordering::Relaxed);
    LIVE_USABLE.fetch_add(usable(ptr), Ordering::Relaxed);
}

fn on_free(ptr: *mut u8, size: usize) {
    if !counted() {
        return;
    }
    LIVE_BYTES.fetch_sub(size as i64, Ordering::Relaxed);
    LIVE_USABLE.fetch_sub(usable(ptr), Ordering::Relaxed);
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        on_alloc(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        on_alloc(ptr, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_free(ptr, layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_free(ptr, layout.size());
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        on_alloc(
            if new.is_null() { ptr } else { new },
            if new.is_null() { layout.size() } else { new_size },
        );
        new
    }
}
