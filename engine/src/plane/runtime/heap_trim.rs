//! The `heap-trim` thread: hands the allocator's free pages back to the
//! kernel once a minute.
//!
//! glibc's malloc returns a freed page to the kernel only when it sits at
//! the top of the heap (the `crackbox` binary keeps one arena for all
//! threads: `settle_malloc` in cli/src/main.rs). Under churn, freed pages
//! in the middle of the heap stay in the process, so its private memory
//! would creep for hours after its live heap has levelled off
//! (docs/operations.md, "Memory over weeks"). `malloc_trim(0)` releases
//! every whole free page. It runs here, never on a core thread; a core
//! thread that allocates meanwhile waits on the arena's lock for the trim
//! (well under a millisecond for the engine's few MiB).

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
