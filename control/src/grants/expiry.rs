//! Grants leave on time: an index of the grants that expire, kept up to
//! date from the registry's deltas in O(change) (never a scan of the
//! registry per change), and a task that sleeps until the first one is due
//! and then takes every due grant out in one change. After a restart the
//! index is built from the loaded registry, so a grant that expired while
//! control was down leaves at once.

use super::{now_ms, without};
use crate::registry::{Change, Registry, Update};
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

    /// The sources with a grant due at `now`.
    fn due_at(&self, now: u64) -> Vec<IpAddr> {
        let mut sources: Vec<IpAddr> = self
            .due
            .iter()
            .take_while(|(at, _, _)| *at <= now)
            .map(|(_, ip, _)| *ip)
            .collect();
        sources.dedup();
        sources
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

/// Takes the grants of `sources` due at `now` out of their registrations,
/// as one change.
async fn expire(registry: &Registry, sources: &[IpAddr], now: u64) -> Result<(), ()> {
    let current = registry.current();
    let mut narrowed = Vec::new();
    for spec in sources.iter().filter_map(|ip| current.entries.get(ip)) {
        let due: Vec<&str> = spec
            .origins
            .expiring()
            .filter(|(_, at)| *at <= now)
            .map(|(entry, _)| entry)
            .collect();
        let mut kept = spec.as_ref().clone();
        for entry in &due {
            kept = without(&kept, entry).unwrap_or(kept);
            tracing::info!(ip = %spec.ip, id = %spec.id, entry, "grant expired, entry removed");
        }
        if !due.is_empty() {
            narrowed.push((spec.ip, kept));
        }
    }
    if narrowed.is_empty() {
        return Ok(());
    }
    let change = Change::Edit {
        register: narrowed,
        unregister: vec![],
    };
    registry.apply(change).await.map(drop).map_err(|err| {
        tracing::error!(error = %err, "cannot store the removal of expired grants; trying again");
    })
}

#[cfg(test)]
mod tests;
