//! Grants that expire (docs/ask.md, "Grants for a while"): how long an
//! `always` answer holds (`{"decision": "always", "for": "30m"}`), and what
//! a grant does to a registration (added, renewed, taken out again). The
//! admin API's documents about grants are `crackbox_wire::ask`'s.

pub use crate::period::{Period, PeriodError, MAX_PERIOD, MIN_PERIOD};

use crate::allowlist::Allowlist;
use crate::entry::AllowEntry;
use crate::provenance::EntryOrigin;
use crate::registration::RegistrationSpec;

/// Why a grant could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the allowlist holds the most entries it may")]
pub struct ListFull;

/// `spec` with `entry` granted until `expires` (ms since the Unix epoch;
/// `None`: for good): added to its allowlist, or, a grant already, with its
/// expiry set anew. `Ok(None)` when nothing changes (the list has the
/// entry another way, or the same grant).
pub fn granted(
    spec: &RegistrationSpec,
    entry: &AllowEntry,
    expires: Option<u64>,
) -> Result<Option<RegistrationSpec>, ListFull> {
    let origin = EntryOrigin::Ask { expires };
    let text = entry.to_string();
    let listed = spec.allowlist.entries().contains(entry);
    match spec.origins.get(&text) {
        Some(current) if listed && current.is_grant() && *current == origin => return Ok(None),
        Some(current) if listed && current.is_grant() => {}
        _ if listed => return Ok(None),
        _ => {}
    }
    let mut widened = spec.clone();
    widened.allowlist = spec.allowlist.with_entry(entry.clone()).ok_or(ListFull)?;
    widened.origins.set(text, origin);
    Ok(Some(widened))
}

/// `spec` without the grant of `entry` (normalised text); `None` when
/// `entry` is no grant.
pub fn without(spec: &RegistrationSpec, entry: &str) -> Option<RegistrationSpec> {
    if !spec.origins.get(entry).is_some_and(EntryOrigin::is_grant) {
        return None;
    }
    let allow: Vec<AllowEntry> = spec
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

    fn entry(text: &str) -> AllowEntry {
        AllowEntry::parse(text).unwrap()
    }

    #[test]
    fn a_grant_is_added_renewed_and_taken_out_again() {
        let grant = |expires| EntryOrigin::Ask { expires };
        assert_eq!(
            granted(&spec(), &entry("a.test"), Some(5)).unwrap(),
            None,
            "listed another way"
        );
        assert_eq!(granted(&spec(), &entry("pypi.org:443"), None).unwrap(), None);
        let widened = granted(&spec(), &entry("new.test"), Some(5)).unwrap().unwrap();
        assert!(widened.allowlist.matching("new.test", 443).is_some());
        assert_eq!(widened.origins.get("new.test"), Some(&grant(Some(5))));
        assert_eq!(
            granted(&widened, &entry("new.test"), Some(5)).unwrap(),
            None,
            "nothing changes"
        );
        let forever = granted(&widened, &entry("new.test"), None).unwrap().unwrap();
        assert_eq!(forever.origins.get("new.test"), Some(&grant(None)));
        assert_eq!(forever.allowlist.texts().iter().filter(|e| *e == "new.test").count(), 1);
        let narrowed = without(&forever, "new.test").unwrap();
        assert!(narrowed.allowlist.matching("new.test", 443).is_none());
        assert_eq!(narrowed, spec(), "back where it was");
        assert_eq!(without(&spec(), "a.test"), None, "not a grant");
        assert_eq!(without(&spec(), "pypi.org:443"), None, "a preset's entry is no grant");
    }
}
