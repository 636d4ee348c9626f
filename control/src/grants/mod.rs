//! Grants: the entries ask answers add to a registration (docs/ask.md,
//! "Grants for a while"). An `always` answer adds the name for good or,
//! with a period, until a time recorded beside it (`origins`, journaled
//! like any change, so it survives a restart); [`expiry`] takes it out
//! again at that time, and `DELETE /v1/grants/{ip}/{entry}` at once. Either
//! way it leaves like any change: the engine's revocation closes the
//! tunnels the narrowed registration no longer allows.

pub mod expiry;

use crackbox_policy::{entries_from_config, Allowlist, EntryOrigin, RegistrationSpec};
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// `spec` with `entry` granted until `expires` (`None`: for good): added
/// to its allowlist, or, already a grant, with its expiry set anew.
/// `Ok(None)` when the list has the entry another way (nothing to grant);
/// an error when the list cannot take one more entry.
pub fn granted(spec: &RegistrationSpec, entry: &str, expires: Option<u64>) -> Result<Option<RegistrationSpec>, String> {
    let origin = EntryOrigin::Ask { expires };
    let mut allow = spec.allowlist.texts();
    let listed = allow.iter().any(|text| text == entry);
    match spec.origins.get(entry) {
        Some(current) if listed && current.is_grant() => {
            if *current == origin {
                return Ok(None);
            }
        }
        _ if listed => return Ok(None),
        _ => allow.push(entry.to_owned()),
    }
    let allow = entries_from_config(&allow).map_err(|err| format!("allowlist: {err}"))?;
    let mut widened = spec.clone();
    widened.allowlist = Allowlist::with_deny(allow, spec.allowlist.denied().to_vec());
    widened.origins.set(entry.to_owned(), origin);
    Ok(Some(widened))
}

/// `spec` without the grant of `entry`; `None` when `entry` is no grant.
pub fn without(spec: &RegistrationSpec, entry: &str) -> Option<RegistrationSpec> {
    if !spec.origins.get(entry).is_some_and(EntryOrigin::is_grant) {
        return None;
    }
    let allow: Vec<_> = spec
        .allowlist
        .entries()
        .iter()
        .filter(|kept| kept.to_string() != entry)
        .cloned()
        .collect();
    let mut narrowed = spec.clone();
    narrowed.allowlist = Allowlist::with_deny(allow, spec.allowlist.denied().to_vec());
    narrowed.origins.remove(entry);
    Some(narrowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RegistrationSpec {
        RegistrationSpec::parse("10.0.0.2", "agent", &["@pypi", "a.test"]).unwrap()
    }

    #[test]
    fn a_grant_is_added_renewed_and_taken_out_again() {
        let grant = |expires| EntryOrigin::Ask { expires };
        assert_eq!(granted(&spec(), "a.test", Some(5)).unwrap(), None, "listed another way");
        assert_eq!(granted(&spec(), "pypi.org:443", None).unwrap(), None);
        let widened = granted(&spec(), "new.test", Some(5)).unwrap().unwrap();
        assert!(widened.allowlist.matching("new.test", 443).is_some());
        assert_eq!(widened.origins.get("new.test"), Some(&grant(Some(5))));
        assert_eq!(granted(&widened, "new.test", Some(5)).unwrap(), None, "nothing changes");
        let forever = granted(&widened, "new.test", None).unwrap().unwrap();
        assert_eq!(forever.origins.get("new.test"), Some(&grant(None)));
        assert_eq!(forever.allowlist.texts().iter().filter(|e| *e == "new.test").count(), 1);
        let narrowed = without(&forever, "new.test").unwrap();
        assert!(narrowed.allowlist.matching("new.test", 443).is_none());
        assert_eq!(narrowed, spec(), "back where it was");
        assert_eq!(without(&spec(), "a.test"), None, "not a grant");
        assert_eq!(without(&spec(), "pypi.org:443"), None, "a preset's entry is no grant");
    }
}
