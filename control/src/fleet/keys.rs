//! Where the fleet's data lives in etcd, under the configured prefix
//! (docs/fleet.md, "Keys"): `PREFIX/policies/NAME` holds one named policy.
//! Pure: builds keys and reads names back out of them.

use crackbox_policy::{PolicyName, PolicyNameError};

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
}
