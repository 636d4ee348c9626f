//! The `heap-trim` thread: hands the allocator's free pages back to the
//! kernel once a minute.
//!
//! glibc's malloc keeps one arena per thread that allocates (the core
//! threads, the DNS and resolver threads) and returns a freed page to the
//! kernel only when it sits at the top of its arena. Under churn, freed
//! pages in the middle of an arena stay in the process for good, so its
//! private memory creeps up for hours after its live heap has levelled off
//! (docs/operations.md, "Memory over weeks"). `malloc_trim(0)` releases the
//! whole free pages of every arena. It runs here, never on a core thread;
//! a core thread that allocates meanwhile waits on its arena's lock for the
//! trim of that arena (well under a millisecond for the engine's few MiB).

#[cfg(target_env = "gnu")]
use std::time::{Duration, Instant};

/// How often the free pages go back.
#[cfg(target_env = "gnu")]
const EVERY: Duration = Duration::from_secs(60);

/// Starts the thread.
#[cfg(target_env = "gnu")]
pub(crate) fn spawn() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("crackbox-heap-trim".into())
        .spawn(|| loop {
            std::thread::sleep(EVERY);
            let started = Instant::now();
            // SAFETY: malloc_trim takes each arena's own lock; any thread
            // may call it at any time.
            let released = unsafe { libc::malloc_trim(0) } == 1;
            tracing::debug!(released, took_us = started.elapsed().as_micros() as u64, "heap trimmed");
        })?;
    Ok(())
}

/// Other allocators than glibc's return memory their own way: no thread.
#[cfg(not(target_env = "gnu"))]
pub(crate) fn spawn() -> std::io::Result<()> {
    Ok(())
}
