//! The committer thread: the registry's only writer.
//!
//! It takes every request queued while it was busy as one group, applies the
//! group to a copy of the persistent map (O(change)), makes the group durable
//! with one store commit (one fsync for the whole group), and only then
//! publishes one new generation and answers every request of the group. A
//! failed write answers the whole group with the error and changes nothing.
//! Runs on its own thread because the store's I/O blocks.

use super::log::{Delta, Log};
use super::{is_report_only, warn_report_only, Change, Outcome, Published};
use crate::store::{Entries, Store, StoreError};
use crackbox_policy::grant;
use crackbox_policy::{Generation, RegistrationSpec, SourceChange};
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// Requests committed together at most.
const MAX_GROUP: usize = 1024;

/// One mutation and where its answer goes.
pub(super) struct Request {
    pub change: Change,
    pub reply: oneshot::Sender<Result<Outcome, StoreError>>,
}

/// Starts the committer thread at `published`; it stops when every sender is gone.
pub(super) fn spawn(
    store: Option<Store>,
    published: Arc<Published>,
    log: Arc<Mutex<Log>>,
    changed: watch::Sender<Generation>,
) -> mpsc::Sender<Request> {
    let (requests, incoming) = mpsc::channel();
    let committer = Committer {
        store,
        entries: published.entries.clone(),
        report_only: published.report_only,
        generation: published.generation,
        log,
        changed,
    };
    std::thread::Builder::new()
        .name("crackbox-registry".into())
        .spawn(move || committer.run(incoming))
        .expect("cannot start the registry committer thread");
    requests
}

struct Committer {
    store: Option<Store>,
    entries: Entries,
    /// How many of `entries` are in report mode.
    report_only: usize,
    generation: Generation,
    log: Arc<Mutex<Log>>,
    changed: watch::Sender<Generation>,
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
        let mut next = self.entries.clone();
        let mut changes = Vec::new();
        let counts: Vec<(usize, usize)> = group
            .iter()
            .map(|request| apply(&mut next, &request.change, &mut changes))
            .collect();
        if !changes.is_empty() {
            if let Some(store) = self.store.as_mut() {
                if let Err(err) = store.commit(&changes, &next) {
                    for request in group {
                        let _ = request.reply.send(Err(StoreError {
                            path: err.path.clone(),
                            source: std::io::Error::new(err.source.kind(), err.source.to_string()),
                        }));
                    }
                    return;
                }
            }
            self.publish(next, changes);
        }
        for (request, (registered, removed)) in group.into_iter().zip(counts) {
            let _ = request.reply.send(Ok(Outcome {
                generation: self.generation,
                registered,
                removed,
            }));
        }
    }

    fn publish(&mut self, entries: Entries, changes: Vec<SourceChange>) {
        let base = self.generation;
        self.generation += 1;
        let report_only = report_only_after(self.report_only, &self.entries, &entries, &changes);
        if self.report_only == 0 {
            warn_report_only(report_only);
        }
        self.report_only = report_only;
        self.entries = entries;
        let published = Arc::new(Published {
            generation: self.generation,
            entries: self.entries.clone(),
            report_only,
        });
        let delta = Delta {
            base,
            generation: self.generation,
            changes,
        };
        self.log.lock().expect("registry log lock").push(delta, published);
        self.changed.send_replace(self.generation);
    }
}

/// How many registrations are in report mode once `changes` took `before`
/// (with `count` of them) to `after`: only the sources they touch are
/// looked at, O(change).
fn report_only_after(count: usize, before: &Entries, after: &Entries, changes: &[SourceChange]) -> usize {
    let touched: HashSet<IpAddr> = changes.iter().map(SourceChange::ip).collect();
    let reporting = |entries: &Entries| {
        touched
            .iter()
            .filter(|&ip| entries.get(ip).is_some_and(|spec| is_report_only(spec)))
            .count()
    };
    count - reporting(before) + reporting(after)
}

/// Applies `change` to `entries`, appending the source changes it makes (none
/// for a registration equal to the stored one or a removal of an absent
/// source); returns how many it registered and removed.
pub(super) fn apply(entries: &mut Entries, change: &Change, changes: &mut Vec<SourceChange>) -> (usize, usize) {
    match change {
        Change::Edit { register, unregister } => {
            for (ip, spec) in register {
                put(entries, changes, *ip, spec);
            }
            let mut removed = 0;
            for ip in unregister {
                if entries.remove(ip).is_some() {
                    changes.push(SourceChange::Remove(*ip));
                    removed += 1;
                }
            }
            (register.len(), removed)
        }
        Change::Replace(wanted) => {
            let keep: HashSet<_> = wanted.iter().map(|(ip, _)| *ip).collect();
            let gone: Vec<_> = entries
                .iter()
                .filter(|(ip, spec)| !keep.contains(*ip) && !super::is_watchers(spec))
                .map(|(ip, _)| *ip)
                .collect();
            for ip in &gone {
                entries.remove(ip);
                changes.push(SourceChange::Remove(*ip));
            }
            for (ip, spec) in wanted {
                put(entries, changes, *ip, spec);
            }
            (wanted.len(), gone.len())
        }
        Change::Allow { ip, id, entry, expires } => {
            let Some(stored) = entries.get(ip).filter(|stored| stored.id == *id).cloned() else {
                return (0, 0);
            };
            match grant::granted(&stored, entry, *expires) {
                Ok(Some(spec)) => {
                    put(entries, changes, *ip, &spec);
                    (1, 0)
                }
                // On the list another way, or the same grant: nothing to change.
                Ok(None) => (1, 0),
                Err(grant::ListFull) => (0, 0),
            }
        }
        Change::Ungrant { ip, entry, due_by } => {
            let due = |stored: &RegistrationSpec| {
                let expires = stored.origins.get(entry).and_then(|origin| origin.expires());
                due_by.is_none_or(|by| expires.is_some_and(|at| at <= by))
            };
            let narrowed = entries
                .get(ip)
                .filter(|stored| due(stored))
                .and_then(|stored| grant::without(stored, entry));
            match narrowed {
                Some(spec) => {
                    put(entries, changes, *ip, &spec);
                    (1, 0)
                }
                None => (0, 0),
            }
        }
    }
}

fn put(entries: &mut Entries, changes: &mut Vec<SourceChange>, ip: IpAddr, spec: &RegistrationSpec) {
    if entries.get(&ip).is_none_or(|stored| stored.as_ref() != spec) {
        entries.insert(ip, Arc::new(spec.clone()));
        changes.push(SourceChange::Put(spec.clone()));
    }
}
