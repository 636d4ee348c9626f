//! Where the deny entry that refused a destination came from, for the
//! exit summary (docs/run.md): the run's own `--deny`, or one of the named
//! policies it takes. The records of `/v1/denials` say only that a deny
//! entry refused; the run knows its own entries and, for a proxy of its
//! own, its policies' definitions, and tells them apart by looking the
//! destination up in each.

use crate::plan::Plan;
use crackbox_policy::{Allowlist, Lookup, PolicyName, PolicySpec};

/// Whose deny entry refused a destination.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DenyOrigin {
    /// The run's `--deny`.
    Run,
    /// The deny list of this named policy.
    Policy(PolicyName),
    /// Not known (a shared daemon's policies, several of them named).
    Unknown,
}

/// The deny entries a run knows of: its own and its policies'.
#[derive(Debug, Clone, Default)]
pub struct DenyLists {
    /// The run's own list (its deny entries are `--deny`'s).
    own: Allowlist,
    /// The definitions of its policies, when the run stored them itself.
    policies: Vec<PolicySpec>,
    /// The policies it names (`--policy`).
    named: Vec<PolicyName>,
}

impl DenyLists {
    /// The deny entries of `plan`.
    pub fn of(plan: &Plan) -> Self {
        DenyLists {
            own: plan.allow.clone(),
            policies: plan.definitions.clone(),
            named: plan.policies.clone(),
        }
    }

    /// Whose deny entry covers `host` on `port` (any port when `None`, a
    /// DNS question's): the run's own first, then a policy's whose
    /// definition is known, then the one policy the run names, if only one.
    pub fn origin(&self, host: &str, port: Option<u16>) -> DenyOrigin {
        let denies = |list: &Allowlist| {
            let lookup = match port {
                Some(port) => list.lookup(host, port),
                None => list.lookup_any_port(host),
            };
            lookup == Lookup::Denied
        };
        if denies(&self.own) {
            return DenyOrigin::Run;
        }
        if let Some(policy) = self.policies.iter().find(|policy| denies(&policy.allowlist)) {
            return DenyOrigin::Policy(policy.name.clone());
        }
        match (self.policies.is_empty(), self.named.as_slice()) {
            (true, [only]) => DenyOrigin::Policy(only.clone()),
            _ => DenyOrigin::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(allow: &[&str], deny: &[&str]) -> Allowlist {
        let entries = |raw: &[&str]| crackbox_policy::entries_from_config(raw).unwrap();
        Allowlist::with_deny(entries(allow), entries(deny))
    }

    fn name(text: &str) -> PolicyName {
        PolicyName::parse(text).unwrap()
    }

    #[test]
    fn a_deny_entry_is_the_runs_a_known_policys_or_the_one_named_policys() {
        let local = PolicySpec::new(name("local"), list(&["*.localhost"], &["bad.localhost"]));
        let lists = DenyLists {
            own: list(&["github.com"], &["gist.github.com"]),
            policies: vec![local],
            named: vec![name("local")],
        };
        assert_eq!(lists.origin("gist.github.com", Some(443)), DenyOrigin::Run);
        assert_eq!(
            lists.origin("bad.localhost", Some(41800)),
            DenyOrigin::Policy(name("local"))
        );
        assert_eq!(lists.origin("bad.localhost", None), DenyOrigin::Policy(name("local")));
        assert_eq!(lists.origin("elsewhere.test", Some(443)), DenyOrigin::Unknown);

        let on_a_daemon = |named: &[&str]| DenyLists {
            own: list(&["github.com"], &[]),
            policies: Vec::new(),
            named: named.iter().map(|n| name(n)).collect(),
        };
        assert_eq!(
            on_a_daemon(&["base"]).origin("x.test", Some(443)),
            DenyOrigin::Policy(name("base"))
        );
        assert_eq!(
            on_a_daemon(&["a", "b"]).origin("x.test", Some(443)),
            DenyOrigin::Unknown
        );
        assert_eq!(on_a_daemon(&[]).origin("x.test", Some(443)), DenyOrigin::Unknown);
    }
}
