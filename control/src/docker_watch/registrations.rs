//! The watcher's narrow view of the registry: the registrations it owns
//! (ids with [`ID_PREFIX`]), the addresses others own, and changes. The
//! only file here that knows the registry's API.

use super::labels::ID_PREFIX;
use crate::registry::Registry;
use crate::store::StoreError;
use crackbox_engine::policy::{parse_source_ip, RegistrationSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// Registrations by owner, as the registry holds them now.
#[derive(Debug, Default)]
pub struct Holdings {
    /// Registrations the watcher made.
    pub owned: BTreeMap<IpAddr, RegistrationSpec>,
    /// Addresses registered through the admin API or `--register`: never touched.
    pub others: BTreeSet<IpAddr>,
}

/// What the registry holds now, split by owner.
pub fn holdings(registry: &Registry) -> Holdings {
    let mut holdings = Holdings::default();
    for spec in registry.current().registrations.iter() {
        let Ok(ip) = parse_source_ip(&spec.ip) else { continue };
        if spec.id.starts_with(ID_PREFIX) {
            holdings.owned.insert(ip, spec.clone());
        } else {
            holdings.others.insert(ip);
        }
    }
    holdings
}

/// Registers and unregisters (each spec normalised, keyed by its address).
pub async fn apply(
    registry: &Registry,
    register: Vec<(IpAddr, RegistrationSpec)>,
    unregister: Vec<IpAddr>,
) -> Result<(), StoreError> {
    for ip in unregister {
        registry.unregister(ip).await?;
    }
    for (ip, spec) in register {
        registry.register(ip, spec).await?;
    }
    Ok(())
}
