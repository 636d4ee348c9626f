//! The committer thread: the registry's only writer.
//!
//! It takes every request queued while it was busy as one group, applies the
//! group to a copy of the persistent maps (O(change); a refused request
//! leaves the copy alone and gets its refusal), makes the group durable
//! with one store commit (one fsync for the whole group), and only then
//! publishes one new generation and answers every request of the group (a
//! group that only reserved request ids publishes none). A failed write
//! answers the whole group with the error and changes nothing, except for a
//! group of expiries only: an expired grant leaves what is enforced even
//! when its removal cannot be stored (it fails closed; the file's copy is
//! dropped at the next start, being expired, or by the next write, which
//! rewrites the whole file).
//! Runs on its own thread because the store's I/O blocks.

use super::changes::{self, Made};
use super::log::{Delta, Log};
use super::{report_only_count, warn_report_only, ApplyError, Change, Outcome, Published};
use crate::store::{Contents, Store, StoreError};
use crackbox_policy::{Generation, SourceChange};
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// Requests committed together at most.
const MAX_GROUP: usize = 1024;

/// One mutation and where its answer goes.
pub(super) struct Request {
    pub change: Change,
    pub reply: oneshot::Sender<Result<Outcome, ApplyError>>,
}

/// What the committer shares with the registry's readers.
pub(super) struct Shared {
    /// The generations published and the deltas between them.
    pub log: Arc<Mutex<Log>>,
    /// Told of each new generation.
    pub changed: watch::Sender<Generation>,
    /// The request ids reserved, once stored.
    pub ask_ids_through: watch::Sender<u64>,
}

/// Starts the committer thread at `published`, whose policies' revisions
/// go up to `revision`; it stops when every sender is gone.
pub(super) fn spawn(
    store: Option<Store>,
    published: Arc<Published>,
    revision: u64,
    shared: Shared,
) -> mpsc::Sender<Request> {
    let (requests, incoming) = mpsc::channel();
    let contents = Contents {
        ask_ids_through: *shared.ask_ids_through.borrow(),
        ..published.contents()
    };
    let committer = Committer {
        store,
        contents,
        report_only: published.report_only,
        generation: published.generation,
        revision,
        shared,
    };
    std::thread::Builder::new()
        .name("crackbox-registry".into())
        .spawn(move || committer.run(incoming))
        .expect("cannot start the registry committer thread");
    requests
}

struct Committer {
    store: Option<Store>,
    contents: Contents,
    /// How many registrations are in report mode.
    report_only: usize,
    generation: Generation,
    /// The last policy revision handed out.
    revision: u64,
    shared: Shared,
}

impl Committer {
    fn run(mut self, incoming: mpsc::Receiver<Request>) {
        while let Ok(first) = incoming.recv() {
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match incoming.try_recv() {
                    Ok(request) => group.push(request),
                    Err(_) => break,
                }
            }
            self.commit(group);
        }
    }

    fn commit(&mut self, group: Vec<Request>) {
        let mut next = self.contents.clone();
        let mut made = Made::default();
        let mut revision = self.revision;
        let results: Vec<_> = group
            .iter()
            .map(|request| changes::apply(&mut next, &request.change, &mut made, &mut revision))
            .collect();
        if !made.is_empty() {
            if let Some(store) = self.store.as_mut() {
                if let Err(err) = store.commit(&made.policies, &made.sources, &next) {
                    if !group.iter().all(|request| request.change.is_expiry()) {
                        refuse(group, &err);
                        return;
                    }
                    tracing::error!(error = %err, "cannot store the removal of expired grants: they are out of force all the same, and the state file drops them at its next write or start");
                }
            }
            self.revision = revision;
            self.shared
                .ask_ids_through
                .send_if_modified(|through| std::mem::replace(through, next.ask_ids_through) != next.ask_ids_through);
            if made.changes_registry() {
                self.publish(next, made);
            } else {
                self.contents = next;
            }
        }
        for (request, result) in group.into_iter().zip(results) {
            let answer = result
                .map(|outcome| Outcome {
                    generation: self.generation,
                    ..outcome
                })
                .map_err(ApplyError::Refused);
            let _ = request.reply.send(answer);
        }
    }

    fn publish(&mut self, contents: Contents, made: Made) {
        let base = self.generation;
        self.generation += 1;
        let report_only = report_only_after(self.report_only, &self.contents, &contents, &made);
        if self.report_only == 0 {
            warn_report_only(report_only);
        }
        self.report_only = report_only;
        self.contents = contents;
        let published = Arc::new(Published {
            generation: self.generation,
            entries: self.contents.entries.clone(),
            policies: self.contents.policies.clone(),
            report_only,
        });
        let delta = Delta {
            base,
            generation: self.generation,
            changes: made.sources,
            policies: made.policies,
        };
        self.shared
            .log
            .lock()
            .expect("registry log lock")
            .push(delta, published);
        self.shared.changed.send_replace(self.generation);
    }
}

/// Answers every request of `group` with the store's failure `err`.
fn refuse(group: Vec<Request>, err: &StoreError) {
    for request in group {
        let _ = request.reply.send(Err(ApplyError::Store(StoreError {
            path: err.path.clone(),
            source: std::io::Error::new(err.source.kind(), err.source.to_string()),
        })));
    }
}

/// How many registrations are in report mode once `made` took `before`
/// (with `count` of them) to `after`: only the sources it touches are
/// looked at, O(change), unless it changed a policy's mode (then all).
fn report_only_after(count: usize, before: &Contents, after: &Contents, made: &Made) -> usize {
    let mode_changed = made.policies.iter().any(|change| {
        let mode = |contents: &Contents| contents.policies.get(change.name()).and_then(|policy| policy.mode);
        mode(before) != mode(after)
    });
    if mode_changed {
        return report_only_count(after);
    }
    let touched: HashSet<IpAddr> = made.sources.iter().map(SourceChange::ip).collect();
    let reporting = |contents: &Contents| {
        touched
            .iter()
            .filter(|&ip| {
                contents
                    .entries
                    .get(ip)
                    .is_some_and(|spec| super::is_report_only(spec, &contents.policies))
            })
            .count()
    };
    count - reporting(before) + reporting(after)
}
