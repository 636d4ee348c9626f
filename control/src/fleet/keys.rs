//! Where the fleet's data lives in etcd, under the configured prefix
//! (docs/fleet.md, "Keys"): `PREFIX/policies/NAME` holds one named policy,
//! `PREFIX/pending/NODE/ID` one request a node holds in ask mode (under the
//! node's lease), `PREFIX/decisions/NODE/ID` an answer for it given on
//! another node, `PREFIX/nodes/NODE` the name of a running node. Pure: builds keys and reads names back out of them.

use crackbox_policy::{PolicyName, PolicyNameError};
use crackbox_wire::ask::PendingId;

/// The keys of one fleet, by its prefix (ends with `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// The prefix every policy key starts with.
    pub fn policies(&self) -> String {
        format!("{}policies/", self.prefix)
    }

    /// The key of policy `name`.
    pub fn policy(&self, name: &PolicyName) -> String {
        format!("{}policies/{name}", self.prefix)
    }

    /// The policy name of a key under [`Keys::policies`]; `None` for a key
    /// elsewhere, an error for a segment that is no policy name.
    pub fn policy_name(&self, key: &[u8]) -> Option<Result<PolicyName, PolicyNameError>> {
        let key = std::str::from_utf8(key).ok()?;
        let name = key.strip_prefix(&self.policies())?;
        Some(PolicyName::parse(name))
    }
}

impl Keys {
    /// The prefix of every node's pending requests.
    pub fn pending(&self) -> String {
        format!("{}pending/", self.prefix)
    }

    /// The key of request `id` held by `node`.
    pub fn pending_request(&self, node: &str, id: PendingId) -> String {
        format!("{}pending/{node}/{id}", self.prefix)
    }

    /// The node and request id of a key under [`Keys::pending`].
    pub fn pending_of(&self, key: &[u8]) -> Option<(String, PendingId)> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(&self.pending())?;
        let (node, id) = rest.split_once('/')?;
        Some((node.to_string(), id.parse().ok()?))
    }

    /// The prefix of the answers for `node`.
    pub fn decisions(&self, node: &str) -> String {
        format!("{}decisions/{node}/", self.prefix)
    }

    /// The key of an answer for request `id` of `node`.
    pub fn decision(&self, node: &str, id: PendingId) -> String {
        format!("{}decisions/{node}/{id}", self.prefix)
    }

    /// The key a running node holds its name by, under its lease.
    pub fn node(&self, node: &str) -> String {
        format!("{}nodes/{node}", self.prefix)
    }

    /// The request id of a key under [`Keys::decisions`] of `node`.
    pub fn decision_of(&self, node: &str, key: &[u8]) -> Option<PendingId> {
        std::str::from_utf8(key)
            .ok()?
            .strip_prefix(&self.decisions(node))?
            .parse()
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_keys_round_trip_and_strangers_are_told_apart() {
        let keys = Keys::new("/crackbox/");
        let name = PolicyName::parse("python").unwrap();
        assert_eq!(keys.policy(&name), "/crackbox/policies/python");
        assert_eq!(keys.policy_name(b"/crackbox/policies/python"), Some(Ok(name)));
        assert!(matches!(keys.policy_name(b"/crackbox/policies/Bad Name"), Some(Err(_))));
        assert_eq!(keys.policy_name(b"/crackbox/pending/n/1"), None);
        assert_eq!(keys.policy_name(b"/other/policies/python"), None);
        assert_eq!(keys.policy_name(&[0xff, 0xfe]), None);
    }

    #[test]
    fn pending_and_decision_keys_round_trip() {
        let keys = Keys::new("/cb/");
        assert_eq!(keys.pending_request("n1", 7), "/cb/pending/n1/7");
        assert_eq!(keys.pending_of(b"/cb/pending/n1/7"), Some(("n1".into(), 7)));
        assert_eq!(keys.pending_of(b"/cb/pending/n1/x"), None);
        assert_eq!(keys.decision("n1", 7), "/cb/decisions/n1/7");
        assert_eq!(keys.decision_of("n1", b"/cb/decisions/n1/7"), Some(7));
        assert_eq!(keys.decision_of("n2", b"/cb/decisions/n1/7"), None);
        assert_eq!(keys.node("n1"), "/cb/nodes/n1");
    }
}
