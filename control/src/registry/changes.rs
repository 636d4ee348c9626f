//! How one requested [`Change`] applies to the registry's contents. Pure:
//! the committer calls it for each request of a group, in order, on the
//! group's working copy.
//!
//! A request is checked whole before it touches anything, so a refused one
//! ([`Refusal`]) leaves the copy as it was and the rest of the group goes
//! on. A registration may name only policies that exist (at that point of
//! the group); a policy that registrations name is removed only with
//! `force`, which takes the name out of each of them (they keep their own
//! entries), all in the same group.

use super::{is_watchers, Change, Outcome, Refusal};
use crate::store::Contents;
use crackbox_policy::grant;
use crackbox_policy::{PolicyChange, PolicyName, PolicySpec, RegistrationSpec, SourceChange};
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

/// What a group changed, in order: what the journal and the engine get.
#[derive(Debug, Default)]
pub(super) struct Made {
    /// Policy changes, applied before the source changes.
    pub policies: Vec<PolicyChange>,
    /// Source changes.
    pub sources: Vec<SourceChange>,
    /// Whether the group reserved more request ids (stored, not published:
    /// the engine learns of them on connect).
    pub ask_ids: bool,
}

impl Made {
    /// True when the group changed nothing.
    pub fn is_empty(&self) -> bool {
        !self.changes_registry() && !self.ask_ids
    }

    /// True when the group changed registrations or policies (a new
    /// generation).
    pub fn changes_registry(&self) -> bool {
        !self.policies.is_empty() || !self.sources.is_empty()
    }
}

/// Applies `change` to `contents`, appending what it changes to `made`;
/// `revision` is the last policy revision handed out. The outcome's
/// generation is left for the committer to fill in.
pub(super) fn apply(
    contents: &mut Contents,
    change: &Change,
    made: &mut Made,
    revision: &mut u64,
) -> Result<Outcome, Refusal> {
    let mut outcome = Outcome::default();
    match change {
        Change::Edit { register, unregister } => {
            check_references(contents, register)?;
            for (ip, spec) in register {
                put(contents, made, *ip, spec);
            }
            for ip in unregister {
                if contents.entries.remove(ip).is_some() {
                    made.sources.push(SourceChange::Remove(*ip));
                    outcome.removed += 1;
                }
            }
            outcome.registered = register.len();
        }
        Change::Replace(wanted) => {
            check_references(contents, wanted)?;
            let keep: HashSet<_> = wanted.iter().map(|(ip, _)| *ip).collect();
            let gone: Vec<_> = contents
                .entries
                .iter()
                .filter(|(ip, spec)| !keep.contains(*ip) && !is_watchers(spec))
                .map(|(ip, _)| *ip)
                .collect();
            for ip in &gone {
                contents.entries.remove(ip);
                made.sources.push(SourceChange::Remove(*ip));
            }
            for (ip, spec) in wanted {
                put(contents, made, *ip, spec);
            }
            (outcome.registered, outcome.removed) = (wanted.len(), gone.len());
        }
        Change::PutPolicy { policy, expect } => {
            let stored = contents.policies.get(&policy.name);
            let actual = stored.map_or(0, |stored| stored.revision);
            if let Some(expected) = *expect {
                if expected != actual {
                    return Err(Refusal::StaleRevision {
                        name: policy.name.clone(),
                        expected,
                        actual,
                    });
                }
            }
            outcome.policy = Some(match stored {
                Some(stored) if stored.same_content(policy) => Arc::clone(stored),
                _ => {
                    *revision += 1;
                    let policy = PolicySpec {
                        revision: *revision,
                        ..policy.clone()
                    };
                    store_policy(contents, made, policy)
                }
            });
        }
        Change::AllowInPolicy { name, entry } => {
            let widened = contents
                .policies
                .get(name)
                .and_then(|stored| Some((stored.allowlist.with_entry(entry.clone())?, stored)));
            outcome.policy = match widened {
                Some((allowlist, stored)) if allowlist == stored.allowlist => Some(Arc::clone(stored)),
                Some((allowlist, stored)) => {
                    *revision += 1;
                    let policy = PolicySpec {
                        allowlist,
                        revision: *revision,
                        ..stored.as_ref().clone()
                    };
                    Some(store_policy(contents, made, policy))
                }
                None => None,
            };
        }
        Change::Allow { ip, id, entry, expires } => {
            let stored = contents.entries.get(ip).filter(|stored| stored.id == *id).cloned();
            match stored.map(|stored| grant::granted(&stored, entry, *expires)) {
                Some(Ok(Some(spec))) => {
                    put(contents, made, *ip, &spec);
                    outcome.registered = 1;
                }
                // On the list another way, or the same grant: nothing to change.
                Some(Ok(None)) => outcome.registered = 1,
                Some(Err(grant::ListFull)) | None => {}
            }
        }
        Change::Ungrant { ip, entry, due_by } => {
            let due = |stored: &RegistrationSpec| {
                let expires = stored.origins.get(entry).and_then(|origin| origin.expires());
                due_by.is_none_or(|by| expires.is_some_and(|at| at <= by))
            };
            let narrowed = contents
                .entries
                .get(ip)
                .filter(|stored| due(stored))
                .and_then(|stored| grant::without(stored, entry));
            if let Some(spec) = narrowed {
                put(contents, made, *ip, &spec);
                outcome.registered = 1;
            }
        }
        Change::SyncPolicies {
            policies,
            removed,
            kept,
            complete,
        } => {
            let mut gone = removed.clone();
            if *complete {
                let listed: HashSet<&PolicyName> = policies.iter().map(|policy| &policy.name).chain(kept).collect();
                gone.extend(contents.policies.keys().filter(|name| !listed.contains(name)).cloned());
            }
            for policy in policies {
                *revision = (*revision).max(policy.revision);
                if contents
                    .policies
                    .get(&policy.name)
                    .is_none_or(|stored| **stored != *policy)
                {
                    store_policy(contents, made, policy.clone());
                }
            }
            for name in gone {
                if contents.policies.remove(&name).is_some() {
                    made.policies.push(PolicyChange::Remove(name.clone()));
                    let users = users(contents, &name);
                    let released = release(contents, made, &name, &users);
                    outcome.released += released;
                    outcome.detached.push((name, released));
                }
            }
        }
        Change::RemovePolicy { name, force } => {
            if !contents.policies.contains_key(name) {
                return Err(Refusal::NoSuchPolicy(name.clone()));
            }
            let users = users(contents, name);
            if !users.is_empty() && !force {
                return Err(Refusal::PolicyInUse {
                    name: name.clone(),
                    users: users.len(),
                });
            }
            contents.policies.remove(name);
            made.policies.push(PolicyChange::Remove(name.clone()));
            outcome.released = release(contents, made, name, &users);
        }
        Change::ReserveAskIds { through } => {
            if *through > contents.ask_ids_through {
                contents.ask_ids_through = *through;
                made.ask_ids = true;
            }
        }
    }
    Ok(outcome)
}

/// Refuses the first registration that names a policy `contents` lacks.
fn check_references(contents: &Contents, register: &[(IpAddr, RegistrationSpec)]) -> Result<(), Refusal> {
    for (ip, spec) in register {
        if let Some(name) = spec.policies.iter().find(|name| !contents.policies.contains_key(*name)) {
            return Err(Refusal::UnknownPolicy {
                ip: *ip,
                name: name.clone(),
            });
        }
    }
    Ok(())
}

fn put(contents: &mut Contents, made: &mut Made, ip: IpAddr, spec: &RegistrationSpec) {
    if contents.entries.get(&ip).is_none_or(|stored| stored.as_ref() != spec) {
        contents.entries.insert(ip, Arc::new(spec.clone()));
        made.sources.push(SourceChange::Put(spec.clone()));
    }
}

fn store_policy(contents: &mut Contents, made: &mut Made, policy: PolicySpec) -> Arc<PolicySpec> {
    let stored = Arc::new(policy.clone());
    contents.policies.insert(policy.name.clone(), Arc::clone(&stored));
    made.policies.push(PolicyChange::Put(policy));
    stored
}

/// The sources whose registrations name `name` (one pass over the registry).
pub(super) fn users(contents: &Contents, name: &PolicyName) -> Vec<IpAddr> {
    contents
        .entries
        .iter()
        .filter(|(_, spec)| spec.names(name))
        .map(|(ip, _)| *ip)
        .collect()
}

/// Takes `name` out of the registrations of `users`; returns how many.
fn release(contents: &mut Contents, made: &mut Made, name: &PolicyName, users: &[IpAddr]) -> usize {
    for ip in users {
        let Some(spec) = contents.entries.get(ip) else {
            continue;
        };
        let mut released = spec.as_ref().clone();
        released.policies.retain(|named| named != name);
        put(contents, made, *ip, &released);
    }
    users.len()
}
