//! Immutable registry snapshots (source address -> registration) and the
//! source changes that derive one from the last.
//!
//! The engine builds one from the full list of [`RegistrationSpec`]s once per
//! control connection, and derives each next one from the last by a delta of
//! [`SourceChange`]s. The map is persistent (a hash trie sharing all but the
//! changed paths), so a delta costs what it changes and never copies the
//! registry; nothing mutates a snapshot once built. The registrations arrive
//! validated (decoded from the wire), so building a snapshot cannot fail.
//!
//! Each registration in force carries its [`Account`] (usage and cap). A
//! snapshot derived from another hands a source's account on when the
//! source is registered again under the same id, and its [`Limiter`] on
//! under any id; a new cap is set on that limiter, so connections already
//! open are held to it. A removed source's account is dropped.

use super::bandwidth::Bandwidth;
use super::limiter::Limiter;
use super::registration::{source_ip_text, RegistrationSpec};
use super::source::canonical_ip;
use super::usage::Account;
use imbl::shared_ptr::DefaultSharedPtr;
use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;

/// Monotonic snapshot number; the engine acks the generation it enforces.
pub type Generation = u64;

/// Inserts, replaces or removes the registration of one source address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceChange {
    /// Inserts this registration, replacing any earlier one for its address.
    Put(RegistrationSpec),
    /// Removes the registration of this source address (a no-op when absent).
    Remove(#[serde(with = "source_ip_text")] IpAddr),
}

impl SourceChange {
    /// The source address this change touches.
    pub fn ip(&self) -> IpAddr {
        match self {
            SourceChange::Put(spec) => spec.ip,
            SourceChange::Remove(ip) => *ip,
        }
    }
}

/// A registration in force: what it allows (it dereferences to its
/// [`RegistrationSpec`]) and the account its traffic is counted to.
#[derive(Debug)]
pub struct Registered {
    registration: RegistrationSpec,
    /// Usage and cap, shared with the connections it allowed.
    pub account: Arc<Account>,
}

/// The same registration, counting to the same account.
impl PartialEq for Registered {
    fn eq(&self, other: &Registered) -> bool {
        self.registration == other.registration && self.account == other.account
    }
}

impl Eq for Registered {}

impl Deref for Registered {
    type Target = RegistrationSpec;

    fn deref(&self) -> &RegistrationSpec {
        &self.registration
    }
}

/// Registrations by canonical source address, as a persistent hash trie.
type BySource = imbl::GenericHashMap<IpAddr, Arc<Registered>, FxBuildHasher, DefaultSharedPtr>;

/// An immutable view of the whole registry at one generation.
#[derive(Debug, Default)]
pub struct Snapshot {
    generation: Generation,
    by_source: BySource,
    /// Counter slots of each account: the engine's core threads.
    threads: usize,
}

/// Limiters whose cap a new snapshot changes, set once it is complete.
type NewCaps = Vec<(Arc<Limiter>, Option<Bandwidth>)>;

impl Snapshot {
    /// The deny-all snapshot the engine starts with (generation 0).
    pub fn empty() -> Self {
        Snapshot::default()
    }

    /// The deny-all snapshot of an engine with `threads` core threads: the
    /// snapshots derived from it count usage in one slot per thread.
    pub fn empty_for(threads: usize) -> Self {
        Snapshot {
            threads,
            ..Snapshot::default()
        }
    }

    /// Builds a snapshot holding `specs`.
    pub fn build(generation: Generation, specs: &[RegistrationSpec]) -> Self {
        Snapshot::empty().rebuild(generation, specs)
    }

    /// The snapshot at `generation` holding exactly `specs`, handing on the
    /// accounts of sources this one has under the same id (O(registry)).
    pub fn rebuild(&self, generation: Generation, specs: &[RegistrationSpec]) -> Self {
        let mut by_source = BySource::default();
        let mut caps = NewCaps::new();
        for spec in specs {
            let ip = canonical_ip(spec.ip);
            let registered = self.registered(self.by_source.get(&ip), spec.clone(), &mut caps);
            by_source.insert(ip, registered);
        }
        self.derived(generation, by_source, caps)
    }

    /// The snapshot at `generation` that `changes` (applied in order) make
    /// of this one, in O(changes).
    pub fn apply(&self, generation: Generation, changes: &[SourceChange]) -> Self {
        let mut by_source = self.by_source.clone();
        let mut caps = NewCaps::new();
        for change in changes {
            let ip = canonical_ip(change.ip());
            match change {
                SourceChange::Put(spec) => {
                    let registered = self.registered(by_source.get(&ip), spec.clone(), &mut caps);
                    by_source.insert(ip, registered);
                }
                SourceChange::Remove(_) => {
                    by_source.remove(&ip);
                }
            }
        }
        self.derived(generation, by_source, caps)
    }

    /// `registration` in force, with the account of `earlier` (the source's
    /// registration before this change) when the id is the same, else a new
    /// one on `earlier`'s limiter; the cap to set goes to `caps`.
    fn registered(
        &self,
        earlier: Option<&Arc<Registered>>,
        registration: RegistrationSpec,
        caps: &mut NewCaps,
    ) -> Arc<Registered> {
        let account = match earlier {
            Some(earlier) if earlier.id == registration.id => Arc::clone(&earlier.account),
            Some(earlier) => Arc::new(Account::new(self.threads, Arc::clone(earlier.account.limiter()))),
            None => Arc::new(Account::new(
                self.threads,
                Arc::new(Limiter::new(registration.bandwidth)),
            )),
        };
        if account.limiter().rate() != registration.bandwidth.map(Bandwidth::bytes_per_second) {
            caps.push((Arc::clone(account.limiter()), registration.bandwidth));
        }
        Arc::new(Registered { registration, account })
    }

    /// The next snapshot, once every change is valid: only now are new caps set.
    fn derived(&self, generation: Generation, by_source: BySource, caps: NewCaps) -> Self {
        let now = Instant::now();
        for (limiter, cap) in caps {
            limiter.set_rate(cap, now);
        }
        Snapshot {
            generation,
            by_source,
            threads: self.threads,
        }
    }

    /// The generation this snapshot was published as.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The registration of a (canonical) source address, if any.
    pub fn lookup(&self, source: IpAddr) -> Option<&Registered> {
        self.by_source.get(&canonical_ip(source)).map(AsRef::as_ref)
    }

    /// Every registration in force, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (IpAddr, &Registered)> {
        self.by_source.iter().map(|(ip, registered)| (*ip, registered.as_ref()))
    }

    /// Number of registered sources.
    pub fn len(&self) -> usize {
        self.by_source.len()
    }

    /// True when no source is registered.
    pub fn is_empty(&self) -> bool {
        self.by_source.is_empty()
    }

    /// The id of every registration (an id registered for several sources
    /// comes once per source).
    pub fn ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.by_source.values().map(|registration| &*registration.id)
    }
}

#[cfg(test)]
mod tests;
