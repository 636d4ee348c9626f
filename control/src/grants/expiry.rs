//! Grants leave on time: an index of the grants that expire, kept up to
//! date from the registry's deltas in O(change) (never a scan of the
//! registry per change), and a task that sleeps until the first one is due
//! and then takes every due grant out. After a restart the
//! index is built from the loaded registry, so a grant that expired while
//! control was down leaves at once.

use super::now_ms;
use crate::registry::{Registry, Update};
use crate::store::Entries;
use crackbox_policy::{RegistrationSpec, SourceChange};
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How soon a removal that could not be stored is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The grants that expire, soonest first.
#[derive(Debug, Default)]
struct Index {
    due: BTreeSet<(u64, IpAddr, String)>,
    by_source: HashMap<IpAddr, Vec<(u64, String)>>,
}

impl Index {
    fn build(entries: &Entries) -> Self {
        let mut index = Index::default();
        for spec in entries.values() {
            index.put(spec);
        }
        index
    }

    fn put(&mut self, spec: &RegistrationSpec) {
        self.remove(spec.ip);
        let expiring: Vec<(u64, String)> = spec
            .origins
            .expiring()
            .map(|(entry, at)| (at, entry.to_owned()))
            .collect();
        for (at, entry) in &expiring {
            self.due.insert((*at, spec.ip, entry.clone()));
        }
        if !expiring.is_empty() {
            self.by_source.insert(spec.ip, expiring);
        }
    }

    fn remove(&mut self, ip: IpAddr) {
        for (at, entry) in self.by_source.remove(&ip).unwrap_or_default() {
            self.due.remove(&(at, ip, entry));
        }
    }

    fn apply(&mut self, change: &SourceChange) {
        match change {
            SourceChange::Put(spec) => self.put(spec),
            SourceChange::Remove(ip) => self.remove(*ip),
        }
    }

    fn next(&self) -> Option<u64> {
        self.due.first().map(|(at, _, _)| *at)
    }

    /// Forgets the grants due at `now` (taken out, or gone already).
    fn drop_due(&mut self, now: u64) {
        while let Some((at, ip, entry)) = self.due.first().cloned() {
            if at > now {
                break;
            }
            self.due.remove(&(at, ip, entry.clone()));
            if let Some(list) = self.by_source.get_mut(&ip) {
                list.retain(|kept| *kept != (at, entry.clone()));
            }
        }
    }

    /// The grants due at `now`.
    fn due_at(&self, now: u64) -> Vec<(IpAddr, String)> {
        self.due
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .map(|(_, ip, entry)| (*ip, entry.clone()))
            .collect()
    }
}

/// Takes out every grant as it expires, until the registry goes away.
pub async fn run(registry: Arc<Registry>) {
    let mut generations = registry.subscribe();
    let first = registry.current();
    let mut seen = first.generation;
    let mut index = Index::build(&first.entries);
    let mut retry_at: Option<u64> = None;
    loop {
        let next = match (index.next(), retry_at) {
            (Some(at), Some(retry)) => Some(at.max(retry)),
            (at, _) => at,
        };
        let wait = next.map(|at| Duration::from_millis(at.saturating_sub(now_ms())));
        tokio::select! {
            changed = generations.changed() => {
                if changed.is_err() {
                    return;
                }
                generations.borrow_and_update();
                match registry.since(seen) {
                    Update::Deltas(deltas) => {
                        for delta in deltas {
                            delta.changes.iter().for_each(|change| index.apply(change));
                            seen = delta.generation;
                        }
                    }
                    Update::Full(published) => {
                        index = Index::build(&published.entries);
                        seen = published.generation;
                    }
                }
            }
            () = sleep(wait) => {
                let now = now_ms();
                retry_at = match expire(&registry, &index.due_at(now), now).await {
                    Ok(()) => {
                        index.drop_due(now);
                        None
                    }
                    Err(()) => Some(now_ms() + RETRY.as_millis() as u64),
                };
            }
        }
    }
}

async fn sleep(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// Takes the grants `due` at `now` out of their registrations, each as a
/// change the registry applies to the registration in force (so one that
/// was renewed meanwhile stays).
async fn expire(registry: &Registry, due: &[(IpAddr, String)], now: u64) -> Result<(), ()> {
    for (ip, entry) in due {
        match registry.ungrant(*ip, entry.clone(), Some(now)).await {
            Ok(outcome) if outcome.registered > 0 => tracing::info!(%ip, entry, "grant expired, entry removed"),
            Ok(_) => {}
            Err(err) => {
                tracing::error!(error = %err, "cannot store the removal of an expired grant; trying again");
                return Err(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
