//! The engine's locks, and the census that shows no lock shared between
//! core threads is taken per connection (docs/architecture.md, "Locks and
//! shared atomics").
//!
//! Every lock the data plane's services hold is one of two kinds:
//! - [`SharedLock`]: one lock every core thread (and other engine threads)
//!   may take. A core thread takes it only off the data path: when a
//!   thread's admission leases run out as its connections grow, or in its
//!   once-a-second sweep; never for a connection it has served before.
//! - [`ThreadLock`]: one per core thread (`PerThread`), taken by that
//!   thread on the data path and by readers that merge all of them (the
//!   control link answering a scrape), never by another core thread.
//!
//! The census counts, per lock, every time a core thread takes a shared
//! lock (but for its once-a-second sweep, which no connection waits on) or
//! another core thread's lock. Taking a lock on another thread
//! costs one thread-local read more, and a counted one a shared increment
//! (rare by design). `engine/tests/shared_nothing.rs` asserts the census
//! stands still across a thousand tunnels, denials and requests.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

thread_local! {
    /// This thread's core thread index, on core threads only.
    static CORE_THREAD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Census counts by lock name, changed only when a core thread takes a
/// lock shared with others (not counted itself: it is the census).
static CENSUS: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());

/// Marks the calling thread as core thread `index` for the census.
pub(crate) fn enter_core_thread(index: usize) {
    CORE_THREAD.with(|core| core.set(Some(index)));
}

/// How often core threads took each lock shared between threads, by name,
/// since the engine started (every engine of the process counts here).
pub fn census() -> Vec<(&'static str, u64)> {
    CENSUS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
}

fn count(name: &'static str) {
    let mut census = CENSUS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match census.iter_mut().find(|(counted, _)| *counted == name) {
        Some((_, taken)) => *taken += 1,
        None => census.push((name, 1)),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A mutex shared by every core thread: counted whenever one takes it.
#[derive(Debug)]
pub(crate) struct SharedLock<T> {
    name: &'static str,
    inner: Mutex<T>,
}

impl<T> SharedLock<T> {
    /// A lock named `name` in the census.
    pub(crate) fn new(name: &'static str, value: T) -> Self {
        SharedLock {
            name,
            inner: Mutex::new(value),
        }
    }

    /// Takes it (a poisoned lock is taken all the same: its data stays
    /// consistent between calls).
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        if CORE_THREAD.with(Cell::get).is_some() {
            count(self.name);
        }
        lock(&self.inner)
    }

    /// Takes it for a core thread's once-a-second sweep, which runs on a
    /// timer of its own, never for a connection: not counted.
    pub(crate) fn lock_for_sweep(&self) -> MutexGuard<'_, T> {
        lock(&self.inner)
    }
}

/// One core thread's mutex: counted when another core thread takes it.
pub(crate) struct ThreadLock<T> {
    name: &'static str,
    owner: usize,
    inner: Mutex<T>,
}

impl<T> ThreadLock<T> {
    /// The lock named `name` of core thread `owner`.
    pub(crate) fn new(name: &'static str, owner: usize, value: T) -> Self {
        ThreadLock {
            name,
            owner,
            inner: Mutex::new(value),
        }
    }

    /// Takes it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        if CORE_THREAD.with(Cell::get).is_some_and(|core| core != self.owner) {
            count(self.name);
        }
        lock(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The files whose std locks no core thread takes for a connection it
    /// allows or denies, and why (docs/architecture.md, "Locks and shared
    /// atomics", lists each lock).
    const OFF_THE_DATA_PATH: &[(&str, &str)] = &[
        ("plane/front/dns/", "the DNS filter's own threads"),
        (
            "plane/runtime/control_link.rs",
            "the control link's thread (and the ask thread's writes)",
        ),
        (
            "plane/services/ask/",
            "connections held for a decision in ask mode, and the ask thread",
        ),
        ("plane/services/resolve/pool.rs", "the resolver pool's threads"),
        ("plane/services/locks.rs", "the census itself"),
    ];

    fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }

    #[test]
    fn every_other_lock_of_the_engine_is_a_shared_or_a_thread_lock() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&root, &mut files);
        let mut raw = Vec::new();
        for file in files {
            let name = file.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            if OFF_THE_DATA_PATH.iter().any(|(prefix, _)| name.starts_with(prefix)) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for (line, code) in text.lines().enumerate() {
                let code = code.split("//").next().unwrap_or("");
                if ["Mutex", "RwLock", "Condvar"].iter().any(|lock| code.contains(lock)) {
                    raw.push(format!("{name}:{}: {}", line + 1, code.trim()));
                }
            }
        }
        assert!(
            raw.is_empty(),
            "a std lock outside SharedLock/ThreadLock (use one, and list it in docs/architecture.md): {raw:#?}"
        );
    }

    #[test]
    fn core_threads_taking_shared_or_foreign_locks_are_counted() {
        let shared = SharedLock::new("test-shared", 0u32);
        let mine = ThreadLock::new("test-own", 3, 0u32);
        let theirs = ThreadLock::new("test-foreign", 4, 0u32);
        let taken = |name: &str| census().iter().find(|(n, _)| *n == name).map_or(0, |(_, t)| *t);
        std::thread::spawn(move || {
            // Not a core thread: nothing is counted.
            *shared.lock() += 1;
            *theirs.lock() += 1;
            assert_eq!((taken("test-shared"), taken("test-foreign")), (0, 0));
            enter_core_thread(3);
            *mine.lock() += 1;
            *shared.lock() += 1;
            *theirs.lock() += 1;
            *theirs.lock() += 1;
            assert_eq!(
                (taken("test-own"), taken("test-shared"), taken("test-foreign")),
                (0, 1, 2)
            );
        })
        .join()
        .unwrap();
    }
}
