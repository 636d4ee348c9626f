//! One reconciliation, decided: from the labelled containers Docker reports
//! and the networks in scope, which registrations to add, replace and
//! remove, and which containers' labels are refused. Pure.

use super::labels::{self, Labelled, POLICY_LABEL};
use super::registrations::Holdings;
use crackbox_policy::watch::Subnet;
use crackbox_policy::{Origin, RegistrationSpec};
use crackbox_wire::link::InvalidSource;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// A running container as the watcher sees it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Docker's container id.
    pub id: String,
    /// Its name (without the leading `/`).
    pub name: String,
    /// Its labels.
    pub labels: HashMap<String, String>,
    /// Its addresses, each with the id of the network it is on.
    pub addresses: Vec<(String, IpAddr)>,
}

#[cfg(test)]
impl Seen {
    /// A container `id` at 10.0.0.2 on each of `networks`, for the
    /// watcher's tests.
    pub fn on(id: &str, networks: &[&str]) -> Seen {
        Seen {
            id: id.into(),
            addresses: networks
                .iter()
                .map(|n| (n.to_string(), "10.0.0.2".parse().unwrap()))
                .collect(),
            ..Seen::default()
        }
    }
}

/// The networks the watcher answers for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Network ids.
    pub networks: BTreeSet<String>,
    /// Their subnets.
    pub subnets: Vec<Subnet>,
}

/// What one reconciliation does.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Registrations to add or replace.
    pub register: Vec<(IpAddr, RegistrationSpec)>,
    /// Watcher-made registrations whose container is gone or left.
    pub unregister: Vec<IpAddr>,
    /// Addresses of containers with invalid labels.
    pub invalid: Vec<InvalidSource>,
    /// `(container id, container name, problem)` for each refused label set.
    pub problems: Vec<(String, String, String)>,
    /// `(container name, address)` already registered through the admin API.
    pub conflicts: Vec<(String, IpAddr)>,
}

/// Decides the changes that make the watcher's registrations match `seen`.
pub fn plan(seen: &[Seen], scope: &Scope, holdings: &Holdings) -> Plan {
    let mut plan = Plan::default();
    let mut wanted: BTreeMap<IpAddr, RegistrationSpec> = BTreeMap::new();
    for container in seen {
        let Some(labelled) = labels::read(&container.name, &container.labels) else {
            continue;
        };
        let addresses = container
            .addresses
            .iter()
            .filter(|(network, _)| scope.networks.contains(network))
            .map(|(_, ip)| *ip);
        match known_policies(labelled, holdings) {
            Labelled::Valid {
                id,
                allowlist,
                bandwidth,
                mode,
                policies,
            } => {
                for ip in addresses {
                    if holdings.others.contains(&ip) {
                        plan.conflicts.push((container.name.clone(), ip));
                        continue;
                    }
                    let mut spec = RegistrationSpec::new(ip, id.clone(), allowlist.clone())
                        .with_bandwidth(bandwidth)
                        .with_origin(Origin::Label);
                    spec.mode = mode;
                    spec.policies = policies.clone();
                    wanted.insert(ip, spec);
                }
            }
            Labelled::Invalid { id, problem } => {
                plan.invalid
                    .extend(addresses.map(|ip| InvalidSource { ip, id: id.clone() }));
                plan.problems
                    .push((container.id.clone(), container.name.clone(), problem));
            }
        }
    }
    plan.unregister = holdings
        .owned
        .keys()
        .filter(|ip| !wanted.contains_key(ip))
        .copied()
        .collect();
    plan.register = wanted
        .into_iter()
        .filter(|(ip, spec)| holdings.owned.get(ip) != Some(spec))
        .collect();
    plan
}

/// `labelled`, or invalid when it names a policy the registry lacks.
fn known_policies(labelled: Labelled, holdings: &Holdings) -> Labelled {
    let Labelled::Valid { id, policies, .. } = &labelled else {
        return labelled;
    };
    match policies.iter().find(|name| !holdings.policies.contains(*name)) {
        Some(missing) => Labelled::Invalid {
            id: id.to_string(),
            problem: format!("{POLICY_LABEL}: no policy named {missing:?}"),
        },
        None => labelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker_watch::labels::{ALLOW_LABEL, ID_LABEL};
    use crackbox_policy::PolicyName;

    fn seen(name: &str, labels: &[(&str, &str)], addresses: &[(&str, &str)]) -> Seen {
        Seen {
            id: format!("id-{name}"),
            name: name.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            addresses: addresses
                .iter()
                .map(|(n, ip)| (n.to_string(), ip.parse().unwrap()))
                .collect(),
        }
    }

    fn spec(ip: &str, id: &str, allow: &[&str]) -> RegistrationSpec {
        RegistrationSpec::parse(ip, id, allow)
            .unwrap()
            .with_origin(Origin::Label)
    }

    #[test]
    fn registers_labelled_addresses_in_scope_and_removes_only_its_own_stale_ones() {
        let scope = Scope {
            networks: ["net-a".to_string(), "net-b".to_string()].into(),
            subnets: vec![],
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let holdings = Holdings {
            owned: [
                (ip("10.0.0.5"), spec("10.0.0.5", "docker:gone", &["x.test"])),
                (ip("10.0.0.2"), spec("10.0.0.2", "docker:web", &["a.test"])),
            ]
            .into(),
            others: [ip("10.0.0.9")].into(),
            policies: [PolicyName::parse("python").unwrap()].into(),
        };
        let containers = [
            seen(
                "web",
                &[(ALLOW_LABEL, "a.test")],
                &[("net-a", "10.0.0.2"), ("other", "10.9.0.2")],
            ),
            seen(
                "db",
                &[(ALLOW_LABEL, "b.test"), (ID_LABEL, "store")],
                &[("net-b", "10.1.0.3")],
            ),
            seen("plain", &[], &[("net-a", "10.0.0.4")]),
            seen("bad", &[(ALLOW_LABEL, "ok.test,no way")], &[("net-a", "10.0.0.6")]),
            seen("clash", &[(ALLOW_LABEL, "c.test")], &[("net-a", "10.0.0.9")]),
            seen(
                "named",
                &[(ALLOW_LABEL, ""), (POLICY_LABEL, "python")],
                &[("net-a", "10.0.0.7")],
            ),
            seen(
                "unknown",
                &[(ALLOW_LABEL, ""), (POLICY_LABEL, "python,missing")],
                &[("net-a", "10.0.0.8")],
            ),
        ];
        let plan = plan(&containers, &scope, &holdings);
        let named = spec("10.0.0.7", "docker:named", &[])
            .with_policies(&["python"])
            .unwrap();
        assert_eq!(
            plan.register,
            vec![
                (ip("10.0.0.7"), named),
                (ip("10.1.0.3"), spec("10.1.0.3", "docker:store", &["b.test"]))
            ]
        );
        assert_eq!(plan.unregister, vec![ip("10.0.0.5")]);
        assert_eq!(
            plan.invalid,
            vec![
                InvalidSource {
                    ip: ip("10.0.0.6"),
                    id: "docker:bad".into()
                },
                InvalidSource {
                    ip: ip("10.0.0.8"),
                    id: "docker:unknown".into()
                }
            ]
        );
        assert_eq!(plan.problems.len(), 2);
        assert!(plan.problems[0].2.contains("\"no way\""), "{:?}", plan.problems);
        assert_eq!(plan.problems[1].2, "io.crackbox.policy: no policy named \"missing\"");
        assert_eq!(plan.conflicts, vec![("clash".to_string(), ip("10.0.0.9"))]);
    }
}
