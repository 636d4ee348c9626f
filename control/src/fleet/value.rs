//! A named policy as an etcd value: the `PUT /v1/policies/NAME` body
//! (`{"allow":[...],"deny":[...],"mode":...,"bandwidth":...}`) without its
//! name, which is the key's, or its revision, which is etcd's
//! `mod_revision`. Decoded strictly, like a body: a value that is not one
//! is refused whole, and the node keeps the version it had. Pure.

use crackbox_policy::{PolicyName, PolicySpec};
use crackbox_wire::admin::{decode, PolicyBody};

/// The value stored for `policy`.
pub fn encode(policy: &PolicySpec) -> Vec<u8> {
    let mut body = PolicyBody::of(policy, None);
    body.name = None;
    serde_json::to_vec(&body).expect("a policy always serialises")
}

/// The policy `name` a value stored at `revision` holds; the error says
/// what is wrong with it.
pub fn decode_policy(name: PolicyName, value: &[u8], revision: i64) -> Result<PolicySpec, String> {
    let body: PolicyBody = decode(value).map_err(|err| err.0)?;
    let (mut policy, _) = body.into_policy(name).map_err(|err| err.0)?;
    policy.revision = u64::try_from(revision).map_err(|_| format!("revision {revision} is negative"))?;
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::{Allowlist, Mode};

    #[test]
    fn values_round_trip_and_bad_ones_are_refused() {
        let name = PolicyName::parse("python").unwrap();
        let policy = PolicySpec {
            mode: Some(Mode::Ask),
            ..PolicySpec::new(name.clone(), Allowlist::parse(&["pypi.org"]).unwrap())
        };
        let value = encode(&policy);
        assert_eq!(value, br#"{"allow":["pypi.org"],"mode":"ask"}"#);
        let read = decode_policy(name.clone(), &value, 7).unwrap();
        assert_eq!((read.revision, read.same_content(&policy)), (7, true));
        for bad in [
            &b"not json"[..],
            br#"{"allow":["*"]}"#,
            br#"{"allow":[],"extra":1}"#,
            br#"{"name":"other"}"#,
        ] {
            assert!(
                decode_policy(name.clone(), bad, 7).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
