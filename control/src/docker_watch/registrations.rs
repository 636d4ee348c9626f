//! The watcher's narrow view of the registry: the registrations it owns
//! (ids with [`WATCHER_ID_PREFIX`](crate::registry::WATCHER_ID_PREFIX)),
//! the addresses others own, and changes. The only file here that knows the
//! registry's API.

use crate::registry::{is_watchers, ApplyError, Change, Registry};
use crackbox_policy::{PolicyName, RegistrationSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Registrations by owner, as the registry holds them now, and the names
/// of the policies it holds.
#[derive(Debug, Default)]
pub struct Holdings {
    /// Registrations the watcher made.
    pub owned: BTreeMap<IpAddr, RegistrationSpec>,
    /// Addresses registered through the admin API or `--register`: never touched.
    pub others: BTreeSet<IpAddr>,
    /// The named policies a label may name.
    pub policies: BTreeSet<PolicyName>,
}

/// What the registry holds now, split by owner.
pub fn holdings(registry: &Registry) -> Holdings {
    let current = registry.current();
    let mut holdings = Holdings {
        policies: current.policies.keys().cloned().collect(),
        ..Holdings::default()
    };
    for (&ip, spec) in current.entries.iter() {
        if is_watchers(spec) {
            holdings.owned.insert(ip, spec.as_ref().clone());
        } else {
            holdings.others.insert(ip);
        }
    }
    holdings
}

/// Registers and unregisters (each spec normalised, keyed by its address)
/// as one change; an address in both is registered.
pub async fn apply(
    registry: &Registry,
    register: Vec<(IpAddr, RegistrationSpec)>,
    mut unregister: Vec<IpAddr>,
) -> Result<(), ApplyError> {
    let registered: BTreeSet<IpAddr> = register.iter().map(|(ip, _)| *ip).collect();
    unregister.retain(|ip| !registered.contains(ip));
    registry.apply(Change::Edit { register, unregister }).await?;
    Ok(())
}
