//! The authoritative registry: source address -> registration, at a generation.
//!
//! Mutations are serialised, persisted before they take effect (a failed
//! write changes nothing) and then published as a new generation for the
//! engine link. Readers get the published snapshot and never wait for a write.

use crate::store::{Store, StoreError};
use crackbox_engine::policy::{parse_source_ip, Generation, RegistrationSpec};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::{watch, Mutex};

/// One published generation of the registry, entries sorted by address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Monotonic generation, 1 at control start.
    pub generation: Generation,
    /// Every registration, normalised, sorted by source address.
    pub registrations: Arc<Vec<RegistrationSpec>>,
}

/// The registry of one control plane.
#[derive(Debug)]
pub struct Registry {
    entries: Mutex<BTreeMap<IpAddr, RegistrationSpec>>,
    store: Option<Store>,
    published: watch::Sender<Arc<Published>>,
}

impl Registry {
    /// Starts from the state file (if any) with `seeds` replacing entries for
    /// the same address; publishes generation 1.
    pub fn load(store: Option<Store>, seeds: Vec<RegistrationSpec>) -> Self {
        let saved = store.as_ref().map(Store::load).unwrap_or_default();
        let mut entries = BTreeMap::new();
        for spec in saved.into_iter().chain(seeds) {
            match parse_source_ip(&spec.ip) {
                Ok(ip) => {
                    entries.insert(ip, spec);
                }
                Err(err) => tracing::warn!(error = %err, "skipping a registration with a bad address"),
            }
        }
        let published = watch::Sender::new(Arc::new(publish(1, &entries)));
        Registry {
            entries: Mutex::new(entries),
            store,
            published,
        }
    }

    /// The generation in force now.
    pub fn current(&self) -> Arc<Published> {
        self.published.borrow().clone()
    }

    /// A receiver that sees every new generation (intermediate ones may be skipped).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Published>> {
        self.published.subscribe()
    }

    /// Adds or replaces the registration of `ip` with `spec` (already
    /// normalised); returns the generation that carries it.
    pub async fn register(&self, ip: IpAddr, spec: RegistrationSpec) -> Result<Generation, StoreError> {
        self.mutate(|entries| {
            let changed = entries.get(&ip) != Some(&spec);
            entries.insert(ip, spec);
            changed
        })
        .await
    }

    /// Removes the registration of `ip`; returns whether one existed and the
    /// generation without it.
    pub async fn unregister(&self, ip: IpAddr) -> Result<(bool, Generation), StoreError> {
        let mut removed = false;
        let generation = self
            .mutate(|entries| {
                removed = entries.remove(&ip).is_some();
                removed
            })
            .await?;
        Ok((removed, generation))
    }

    /// Applies `change` to a copy; when it changed anything, persists the copy
    /// and only then makes it the registry and publishes a new generation.
    async fn mutate(
        &self,
        change: impl FnOnce(&mut BTreeMap<IpAddr, RegistrationSpec>) -> bool,
    ) -> Result<Generation, StoreError> {
        let mut entries = self.entries.lock().await;
        let mut next = entries.clone();
        if !change(&mut next) {
            return Ok(self.current().generation);
        }
        if let Some(store) = &self.store {
            let store = store.clone();
            let list: Vec<RegistrationSpec> = next.values().cloned().collect();
            tokio::task::spawn_blocking(move || store.save(&list))
                .await
                .map_err(|err| StoreError {
                    path: self.store.as_ref().map(|s| s.path().to_path_buf()).unwrap_or_default(),
                    source: std::io::Error::other(err.to_string()),
                })??;
        }
        let generation = self.current().generation + 1;
        *entries = next;
        self.published.send_replace(Arc::new(publish(generation, &entries)));
        Ok(generation)
    }
}

fn publish(generation: Generation, entries: &BTreeMap<IpAddr, RegistrationSpec>) -> Published {
    Published {
        generation,
        registrations: Arc::new(entries.values().cloned().collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ip: &str, allowlist: &[&str]) -> RegistrationSpec {
        RegistrationSpec {
            ip: ip.into(),
            id: "t".into(),
            allowlist: allowlist.iter().map(|s| s.to_string()).collect(),
        }
    }

    impl Registry {
        async fn put(&self, spec: RegistrationSpec) -> Result<Generation, StoreError> {
            self.register(spec.ip.parse().unwrap(), spec).await
        }
    }

    #[tokio::test]
    async fn mutations_bump_the_generation_only_when_something_changed() {
        let registry = Registry::load(None, vec![spec("10.0.0.9", &[])]);
        assert_eq!(registry.current().generation, 1);
        assert_eq!(registry.put(spec("10.0.0.2", &["a.test"])).await.unwrap(), 2);
        assert_eq!(registry.put(spec("10.0.0.2", &["a.test"])).await.unwrap(), 2);
        assert_eq!(registry.put(spec("10.0.0.2", &["b.test"])).await.unwrap(), 3);
        assert_eq!(
            registry.unregister("10.0.0.7".parse().unwrap()).await.unwrap(),
            (false, 3)
        );
        assert_eq!(
            registry.unregister("10.0.0.9".parse().unwrap()).await.unwrap(),
            (true, 4)
        );
        let current = registry.current();
        assert_eq!(*current.registrations, vec![spec("10.0.0.2", &["b.test"])]);
    }

    #[tokio::test]
    async fn published_entries_are_sorted_by_address() {
        let registry = Registry::load(None, vec![]);
        for ip in ["10.0.0.10", "::1", "10.0.0.9", "9.0.0.1"] {
            registry.put(spec(ip, &[])).await.unwrap();
        }
        let ips: Vec<_> = registry.current().registrations.iter().map(|s| s.ip.clone()).collect();
        assert_eq!(ips, ["9.0.0.1", "10.0.0.9", "10.0.0.10", "::1"]);
    }

    #[tokio::test]
    async fn state_file_is_loaded_written_and_seeds_override_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        Store::new(path.clone())
            .save(&[spec("10.0.0.1", &["old.test"]), spec("10.0.0.2", &["kept.test"])])
            .unwrap();
        let registry = Registry::load(Some(Store::new(path.clone())), vec![spec("10.0.0.1", &["seed.test"])]);
        let loaded = registry.current();
        assert_eq!(loaded.registrations[0].allowlist, ["seed.test"]);
        assert_eq!(loaded.registrations[1].allowlist, ["kept.test"]);
        registry.put(spec("10.0.0.3", &[])).await.unwrap();
        let reloaded = Store::new(path).load();
        assert_eq!(reloaded.len(), 3);
    }

    #[tokio::test]
    async fn failed_write_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let registry = Registry::load(Some(Store::new(sub.join("state.json"))), vec![]);
        registry.put(spec("10.0.0.1", &[])).await.unwrap();
        std::fs::remove_dir_all(&sub).unwrap();
        std::fs::write(&sub, b"now a file").unwrap();
        assert!(registry.put(spec("10.0.0.2", &[])).await.is_err());
        assert!(registry.unregister("10.0.0.1".parse().unwrap()).await.is_err());
        let current = registry.current();
        assert_eq!(current.generation, 2);
        assert_eq!(*current.registrations, vec![spec("10.0.0.1", &[])]);
    }
}
