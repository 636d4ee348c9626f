//! Immutable registry snapshots (source address -> registration, name ->
//! policy) and the source and policy changes that derive one from the last.
//!
//! The engine builds one from the full list of [`RegistrationSpec`]s once per
//! control connection, and derives each next one from the last by a delta of
//! [`SourceChange`]s. The map is persistent (a hash trie sharing all but the
//! changed paths), so a delta costs what it changes and never copies the
//! registry; nothing mutates a snapshot once built. The registrations arrive
//! validated (decoded from the wire), so building a snapshot cannot fail.
//!
//! Each named policy is held once, shared; a registration names it and the
//! decision looks it up ([`Snapshot::effective`]). Changing a policy costs
//! one map insert plus one pass over the registrations to find those that
//! name it (their caps may change, and revocation re-decides their
//! connections), never a copy of its entries into theirs.
//!
//! Each registration in force carries an [`Attachment`] of the user's type
//! (the engine's: its usage account and cap). A snapshot derived from
//! another hands a source's attachment on when the source is registered
//! again under the same id, and makes a new one from it under another id;
//! a new cap is set on it once the snapshot is complete, so connections
//! already open are held to it. A removed source's attachment is dropped.

use super::attachment::Attachment;
use super::bandwidth::Bandwidth;
use super::effective::Effective;
use super::named::{PolicyChange, PolicyName, PolicySpec};
use super::registration::{source_ip_text, RegistrationSpec};
use super::source::canonical_ip;
use imbl::shared_ptr::DefaultSharedPtr;
use rustc_hash::{FxBuildHasher, FxHashSet};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::ops::Deref;
use std::sync::Arc;

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
/// [`RegistrationSpec`]) and what is attached to it (the engine's account
/// its traffic is counted to).
#[derive(Debug)]
pub struct Registered<A = ()> {
    registration: RegistrationSpec,
    /// The attachment (the engine's usage and cap), shared with the
    /// connections it allowed.
    pub account: Arc<A>,
}

/// The same registration, with the same attachment.
impl<A: PartialEq> PartialEq for Registered<A> {
    fn eq(&self, other: &Registered<A>) -> bool {
        self.registration == other.registration && self.account == other.account
    }
}

impl<A: Eq> Eq for Registered<A> {}

impl<A> Deref for Registered<A> {
    type Target = RegistrationSpec;

    fn deref(&self) -> &RegistrationSpec {
        &self.registration
    }
}

/// Registrations by canonical source address, as a persistent hash trie.
type BySource<A> = imbl::GenericHashMap<IpAddr, Arc<Registered<A>>, FxBuildHasher, DefaultSharedPtr>;

/// Named policies by name, each held once.
type ByName = imbl::GenericHashMap<PolicyName, Arc<PolicySpec>, FxBuildHasher, DefaultSharedPtr>;

/// An immutable view of the whole registry at one generation, each
/// registration with its attachment `A`.
#[derive(Debug)]
pub struct Snapshot<A = ()> {
    generation: Generation,
    by_source: BySource<A>,
    policies: ByName,
    /// Counter slots of each attachment: the engine's core threads.
    threads: usize,
}

impl<A> Default for Snapshot<A> {
    fn default() -> Self {
        Snapshot {
            generation: 0,
            by_source: BySource::default(),
            policies: ByName::default(),
            threads: 0,
        }
    }
}

/// A snapshot derived by [`Snapshot::apply_delta`], with the sources whose
/// decisions may differ from the last one's.
#[derive(Debug)]
pub struct Applied<A = ()> {
    /// The new snapshot.
    pub snapshot: Snapshot<A>,
    /// The sources the changes put or removed, and those that name a
    /// policy they changed (canonical; an address may come twice).
    pub touched: Vec<IpAddr>,
}

/// Attachments whose cap a new snapshot changes, set once it is complete.
type NewCaps<A> = Vec<(Arc<A>, Option<Bandwidth>)>;

/// Queues `cap` for `account` when it is held to another now.
fn cap_change<A: Attachment>(account: &Arc<A>, cap: Option<Bandwidth>, caps: &mut NewCaps<A>) {
    if !account.holds_cap(cap) {
        caps.push((Arc::clone(account), cap));
    }
}

impl<A: Attachment> Snapshot<A> {
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

    /// Builds a snapshot holding `specs` (and no policies).
    pub fn build(generation: Generation, specs: &[RegistrationSpec]) -> Self {
        Snapshot::empty().rebuild(generation, &[], specs)
    }

    /// The snapshot at `generation` holding exactly `policies` and `specs`,
    /// handing on the accounts of sources this one has under the same id
    /// (O(registry)).
    pub fn rebuild(&self, generation: Generation, policies: &[PolicySpec], specs: &[RegistrationSpec]) -> Self {
        let policies: ByName = policies
            .iter()
            .map(|policy| (policy.name.clone(), Arc::new(policy.clone())))
            .collect();
        let mut by_source = BySource::default();
        let mut caps = NewCaps::<A>::new();
        for spec in specs {
            let ip = canonical_ip(spec.ip);
            let registered = self.registered(self.by_source.get(&ip), spec.clone(), &policies, &mut caps);
            by_source.insert(ip, registered);
        }
        self.derived(generation, by_source, policies, caps)
    }

    /// The snapshot at `generation` that `changes` (applied in order) make
    /// of this one, in O(changes).
    pub fn apply(&self, generation: Generation, changes: &[SourceChange]) -> Self {
        self.apply_delta(generation, &[], changes).snapshot
    }

    /// The snapshot at `generation` that `policies` and then `changes`
    /// (each applied in order) make of this one: O(changes) for the
    /// sources, and for a changed policy one pass over the registrations
    /// to find those naming it.
    pub fn apply_delta(
        &self,
        generation: Generation,
        policies: &[PolicyChange],
        changes: &[SourceChange],
    ) -> Applied<A> {
        let mut by_name = self.policies.clone();
        let mut changed = FxHashSet::default();
        for change in policies {
            match change {
                PolicyChange::Put(policy) => by_name.insert(policy.name.clone(), Arc::new(policy.clone())),
                PolicyChange::Remove(name) => by_name.remove(name),
            };
            changed.insert(change.name().clone());
        }
        let mut by_source = self.by_source.clone();
        let mut caps = NewCaps::<A>::new();
        let mut touched = Vec::with_capacity(changes.len());
        if !changed.is_empty() {
            for (ip, registered) in self.by_source.iter() {
                if registered.policies.iter().any(|name| changed.contains(name)) {
                    touched.push(*ip);
                    let cap = Effective::new(registered, |name: &PolicyName| by_name.get(name).map(AsRef::as_ref));
                    cap_change(&registered.account, cap.bandwidth(), &mut caps);
                }
            }
        }
        for change in changes {
            let ip = canonical_ip(change.ip());
            touched.push(ip);
            match change {
                SourceChange::Put(spec) => {
                    let registered = self.registered(by_source.get(&ip), spec.clone(), &by_name, &mut caps);
                    by_source.insert(ip, registered);
                }
                SourceChange::Remove(_) => {
                    by_source.remove(&ip);
                }
            }
        }
        Applied {
            snapshot: self.derived(generation, by_source, by_name, caps),
            touched,
        }
    }

    /// `registration` in force, with the attachment of `earlier` (the
    /// source's registration before this change) when the id is the same,
    /// else a new one made from `earlier`'s; the cap to set (its own, else its
    /// policies') goes to `caps`.
    fn registered(
        &self,
        earlier: Option<&Arc<Registered<A>>>,
        registration: RegistrationSpec,
        policies: &ByName,
        caps: &mut NewCaps<A>,
    ) -> Arc<Registered<A>> {
        let cap = Effective::new(&registration, |name: &PolicyName| policies.get(name).map(AsRef::as_ref)).bandwidth();
        let account = match earlier {
            Some(earlier) if earlier.id == registration.id => Arc::clone(&earlier.account),
            Some(earlier) => Arc::new(A::attach(self.threads, Some(&earlier.account), cap)),
            None => Arc::new(A::attach(self.threads, None, cap)),
        };
        cap_change(&account, cap, caps);
        Arc::new(Registered { registration, account })
    }

    /// The next snapshot, once every change is valid: only now are new caps set.
    fn derived(&self, generation: Generation, by_source: BySource<A>, policies: ByName, caps: NewCaps<A>) -> Self {
        for (account, cap) in caps {
            account.set_cap(cap);
        }
        Snapshot {
            generation,
            by_source,
            policies,
            threads: self.threads,
        }
    }
}

impl<A> Snapshot<A> {
    /// The policy called `name`, if any.
    pub fn policy(&self, name: &PolicyName) -> Option<&PolicySpec> {
        self.policies.get(name).map(AsRef::as_ref)
    }

    /// Every policy in force, in no particular order.
    pub fn policies(&self) -> impl Iterator<Item = &PolicySpec> {
        self.policies.values().map(AsRef::as_ref)
    }

    /// `registration` with the policies in force: what it may reach, its
    /// mode and its cap.
    pub fn effective<'a>(
        &'a self,
        registration: &'a RegistrationSpec,
    ) -> Effective<'a, impl Fn(&PolicyName) -> Option<&'a PolicySpec> + Copy + 'a> {
        let policies = &self.policies;
        Effective::new(registration, move |name: &PolicyName| {
            policies.get(name).map(AsRef::as_ref)
        })
    }

    /// The generation this snapshot was published as.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The registration of a (canonical) source address, if any.
    pub fn lookup(&self, source: IpAddr) -> Option<&Registered<A>> {
        self.by_source.get(&canonical_ip(source)).map(AsRef::as_ref)
    }

    /// Every registration in force, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (IpAddr, &Registered<A>)> {
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
