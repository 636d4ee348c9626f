//! Nothing shared between core threads per connection: across a thousand
//! tunnels, a thousand denials and a thousand keep-alive requests (and a
//! hundred requests on connections of their own) the engine's core threads
//! take no lock another core thread takes (`crackbox_engine::lock_census`,
//! docs/architecture.md, "Locks and shared atomics"), and allocate no block
//! per connection that glibc's malloc serves under the arena's lock rather
//! than from the thread's own cache (the process has one arena, shared by
//! all threads).
//! Both counts count at all: the first connections of a source lease its
//! connection slots from the shared pool, and the first denials grow the
//! thread's ring of them, and that shows. Runs in a process of its own (this
//! file's one test), so no other engine counts.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use support::{read_head, read_to_end, reg, Echo, Engine};

const SOURCE: &str = "127.0.0.2";
const EACH: usize = 1000;
/// How many recent denials each core thread keeps (`DENIAL_RING` in
/// engine/src/plane/services/stats/recent.rs).
const DENIAL_RING: usize = 1000;
/// Denials enough to fill every thread's ring, however the kernel spreads
/// the connections over the threads' listeners.
const RING_FILL: usize = 3 * DENIAL_RING;

/// The largest block glibc's per-thread cache holds (glibc 2.36: 64 bins of
/// 16 bytes from 24).
const THREAD_CACHE_MAX: usize = 1032;

fn taken() -> u64 {
    crackbox_engine::lock_census().iter().map(|(_, taken)| taken).sum()
}

#[global_allocator]
static ALLOCATOR: CountingBeyondCache = CountingBeyondCache;

/// Blocks the engine's core threads allocated beyond the thread cache.
static BEYOND_CACHE: AtomicU64 = AtomicU64::new(0);
/// The size and alignment of the last of them.
static LAST_BEYOND: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// The system allocator, counting in [`BEYOND_CACHE`] each block a core
/// thread allocates that the thread cache cannot serve: over
/// [`THREAD_CACHE_MAX`] bytes, or aligned to more than malloc's 16 bytes
/// (or to more than its size), which Rust asks of `posix_memalign`.
struct CountingBeyondCache;

impl CountingBeyondCache {
    fn note(layout: Layout) {
        let beyond = layout.size() > THREAD_CACHE_MAX || layout.align() > 16 || layout.align() > layout.size();
        if beyond && on_core_thread() {
            BEYOND_CACHE.fetch_add(1, Ordering::Relaxed);
            LAST_BEYOND[0].store(layout.size() as u64, Ordering::Relaxed);
            LAST_BEYOND[1].store(layout.align() as u64, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is passed to `System` unchanged; counting allocates
// nothing.
unsafe impl GlobalAlloc for CountingBeyondCache {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::note(layout);
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::note(layout);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Ok(grown) = Layout::from_size_align(new_size, layout.align()) {
            Self::note(grown);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Whether this thread is one of the engine's core threads (by its name,
/// read without allocating).
fn on_core_thread() -> bool {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes the name, at most 16 bytes with its NUL.
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    name.starts_with(b"crackbox-core-")
}

#[test]
fn core_threads_take_no_shared_lock_per_connection() {
    let echo = Echo::start();
    let http = support::Upstream::start(|request| {
        let line = request.head.lines().next().unwrap_or("").to_owned();
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{line}", line.len()).into_bytes()
    });
    let engine = Engine::start(vec![reg(SOURCE, "census", &["localhost"])], true);
    let tunnel = |n: usize| {
        let mut client = support::open_tunnel(engine.addr, SOURCE, &format!("localhost:{}", echo.addr.port()));
        let text = format!("echo {n}");
        client.write_all(text.as_bytes()).unwrap();
        let mut back = vec![0u8; text.len()];
        client.read_exact(&mut back).unwrap();
        assert_eq!(back, text.as_bytes());
    };
    let denial = |n: usize| {
        let mut client = engine.client(SOURCE);
        write!(client, "CONNECT denied{n}.test:443 HTTP/1.1\r\n\r\n").unwrap();
        let response = read_to_end(&mut client);
        assert!(response.starts_with("HTTP/1.1 403 "), "{response}");
    };
    let get = |client: &mut std::net::TcpStream, n: usize, close: bool| {
        let connection = if close { "Connection: close\r\n" } else { "" };
        write!(
            client,
            "GET http://localhost:{}/{n} HTTP/1.1\r\nHost: localhost\r\n{connection}\r\n",
            http.port()
        )
        .unwrap();
        let head = read_head(client);
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        let line = format!("GET /{n} HTTP/1.1");
        let mut body = vec![0u8; line.len()];
        client.read_exact(&mut body).unwrap();
        assert_eq!(body, line.as_bytes());
    };
    let mut kept = engine.client(SOURCE);
    let before = taken();
    let beyond_before = BEYOND_CACHE.load(Ordering::Relaxed);
    for n in 0..50 {
        tunnel(n);
        denial(n);
        get(&mut kept, n, false);
        get(&mut engine.client(SOURCE), n, true);
    }
    let warmed = taken();
    assert!(
        warmed > before,
        "the first connections lease from the shared pool: {:?}",
        crackbox_engine::lock_census()
    );
    // Fill each thread's ring of recent denials, which then stays as large.
    for n in 0..RING_FILL {
        denial(n);
    }
    let beyond_warmed = BEYOND_CACHE.load(Ordering::Relaxed);
    assert!(
        beyond_warmed > beyond_before,
        "growing the denial rings takes blocks beyond the thread cache"
    );
    for n in 0..EACH {
        tunnel(n);
        denial(n);
        get(&mut kept, n, false);
        if n % 10 == 0 {
            get(&mut engine.client(SOURCE), n, true);
        }
    }
    assert_eq!(
        taken(),
        warmed,
        "locks shared between core threads taken per connection: {:?}",
        crackbox_engine::lock_census()
    );
    // A pooled byte vector still grows the first time it serves a larger
    // purpose than before (a response's buffer after a head's): once per
    // vector, not per connection.
    let operations = 3 * EACH + EACH / 10;
    let beyond = BEYOND_CACHE.load(Ordering::Relaxed) - beyond_warmed;
    assert!(
        beyond <= (operations / 100) as u64,
        "{beyond} blocks allocated under the arena's lock in {operations} connections and requests (the last: {} bytes aligned to {})",
        LAST_BEYOND[0].load(Ordering::Relaxed),
        LAST_BEYOND[1].load(Ordering::Relaxed)
    );
    let stats = engine.stats();
    let allowed: u64 = stats
        .decisions
        .iter()
        .filter(|d| d.reason.is_none())
        .map(|d| d.count)
        .sum();
    let denied: u64 = stats
        .decisions
        .iter()
        .filter(|d| d.reason.is_some())
        .map(|d| d.count)
        .sum();
    assert_eq!(
        allowed,
        2 * 50 + 50 + 2 * EACH as u64 + EACH as u64 / 10,
        "counted on both threads, merged"
    );
    assert_eq!(denied, 50 + (RING_FILL + EACH) as u64);
}
