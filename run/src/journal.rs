//! The undo journal of one run: every object a backend creates (a network,
//! a container, a namespace, a firewall rule, a process, a registration on
//! a shared daemon) is recorded here, with how to undo it, *before* it is
//! created (or, for a step that either completes or fails whole, such as an
//! iptables rule, right after it succeeded, so that only what was made is
//! undone), and the lifecycle undoes the whole journal in reverse on every
//! exit path. Undoing something that was never created must be harmless.
//!
//! The journal is also where a signal stops set-up: once the lifecycle
//! [`interrupts`](Journal::interrupt) it, recording (and every
//! [`checkpoint`](Journal::checkpoint)) fails with `Interrupted`, so set-up
//! stops between two steps and never leaves an object the journal misses.
//! Never creates anything itself.

use crate::error::RunError;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// How an undo step orders against its neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Undone concurrently with the neighbouring leaves (containers,
    /// registrations, connections: none depends on another).
    Leaf,
    /// Holds what was recorded after it (a network its endpoints, a
    /// namespace its links): undone alone, after all of them.
    Holder,
}

/// An undo step: `Err` carries a one-line reason, printed at teardown.
type Undo = Pin<Box<dyn Future<Output = Result<(), String>>>>;

/// One recorded object; [`Journal::forget`] takes it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry(usize);

/// What a run has created, in order.
#[derive(Default)]
pub struct Journal {
    steps: Mutex<Vec<Option<(Kind, Undo)>>>,
    interrupted: AtomicBool,
}

impl Journal {
    /// Records `undo` for an object about to be created (or just created: a
    /// process whose id is known only once it runs, a step that completes or
    /// fails whole). The entry is kept
    /// either way; `Err(Interrupted)` says set-up must stop now.
    pub fn record(
        &self,
        kind: Kind,
        undo: impl Future<Output = Result<(), String>> + 'static,
    ) -> Result<Entry, RunError> {
        let entry = {
            let mut steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
            steps.push(Some((kind, Box::pin(undo))));
            Entry(steps.len() - 1)
        };
        self.checkpoint().map(|()| entry)
    }

    /// Drops a recorded step whose object turned out not to exist (a
    /// registration the daemon refused: undoing it could remove someone else's).
    pub fn forget(&self, entry: Entry) {
        if let Some(slot) = self.steps.lock().unwrap_or_else(|p| p.into_inner()).get_mut(entry.0) {
            *slot = None;
        }
    }

    /// Fails once a signal arrived, so set-up stops between two steps.
    pub fn checkpoint(&self) -> Result<(), RunError> {
        if self.interrupted.load(Ordering::SeqCst) {
            Err(RunError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// A signal arrived: set-up stops at its next record or checkpoint.
    pub fn interrupt(&self) {
        self.interrupted.store(true, Ordering::SeqCst);
    }

    /// Undoes every step in reverse order of recording: neighbouring leaves
    /// together, each holder alone after everything recorded after it.
    /// Failures are printed (one line each) and never stop the rest.
    pub async fn undo(&self) {
        let steps: Vec<(Kind, Undo)> = self
            .steps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .flatten()
            .collect();
        let mut leaves = Vec::new();
        for (kind, undo) in steps.into_iter().rev() {
            match kind {
                Kind::Leaf => leaves.push(undo),
                Kind::Holder => {
                    report(futures_util::future::join_all(leaves.drain(..)).await);
                    report(vec![undo.await]);
                }
            }
        }
        report(futures_util::future::join_all(leaves).await);
    }
}

fn report(outcomes: Vec<Result<(), String>>) {
    for failure in outcomes.into_iter().filter_map(Result::err) {
        eprintln!("crackbox: teardown: {failure}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use std::time::Duration;

    /// Records `name` in `log` when undone, after `delay_ms`.
    fn step(log: &Rc<Mutex<Vec<String>>>, name: &str, delay_ms: u64) -> impl Future<Output = Result<(), String>> {
        let (log, name) = (Rc::clone(log), name.to_string());
        async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            log.lock().unwrap().push(name);
            Ok(())
        }
    }

    #[tokio::test]
    async fn undo_runs_in_reverse_with_leaves_together_and_holders_alone() {
        /// Steps recorded (name, kind, how long its undo takes in ms), then the order undone.
        type Case<'a> = (&'a [(&'a str, Kind, u64)], &'a [&'a str]);
        let cases: &[Case] = &[
            (&[], &[]),
            (
                &[("net", Kind::Holder, 0), ("a", Kind::Leaf, 30), ("b", Kind::Leaf, 10)],
                &["b", "a", "net"],
            ),
            (
                &[
                    ("ns", Kind::Holder, 0),
                    ("veth", Kind::Holder, 0),
                    ("rule", Kind::Holder, 0),
                ],
                &["rule", "veth", "ns"],
            ),
            (
                &[
                    ("internal", Kind::Holder, 0),
                    ("egress", Kind::Holder, 0),
                    ("proxy", Kind::Leaf, 5),
                    ("workload", Kind::Leaf, 1),
                    ("registration", Kind::Leaf, 0),
                ],
                &["registration", "workload", "proxy", "egress", "internal"],
            ),
        ];
        for (recorded, want) in cases {
            let log = Rc::new(Mutex::new(Vec::new()));
            let journal = Journal::default();
            for (name, kind, delay) in recorded.iter() {
                journal.record(*kind, step(&log, name, *delay)).unwrap();
            }
            journal.undo().await;
            assert_eq!(*log.lock().unwrap(), *want, "{recorded:?}");
        }
    }

    #[tokio::test]
    async fn an_interrupted_journal_keeps_the_entry_and_refuses_to_go_on() {
        let log = Rc::new(Mutex::new(Vec::new()));
        let journal = Journal::default();
        let first = journal.record(Kind::Leaf, step(&log, "first", 0)).unwrap();
        journal.record(Kind::Leaf, step(&log, "forgotten", 0)).unwrap();
        journal.forget(Entry(first.0 + 1));
        journal.interrupt();
        assert!(matches!(journal.checkpoint(), Err(RunError::Interrupted)));
        let late = journal.record(Kind::Leaf, step(&log, "late", 0));
        assert!(matches!(late, Err(RunError::Interrupted)));
        journal.undo().await;
        assert_eq!(*log.lock().unwrap(), vec!["late".to_string(), "first".to_string()]);
    }
}
