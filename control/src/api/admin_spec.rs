//! Registrations as the admin API takes them: never for a source no
//! connection comes from (docs/policy.md, "Registrations"), never under the
//! id prefix the Docker label watcher owns (a registration made by hand with
//! such an id would be taken for the watcher's and removed by it), and never
//! with a grant that has already expired (docs/admin-api.md, `origins`).
//! Everything else about a registration was checked as its body was decoded.

use crate::registry::WATCHER_ID_PREFIX;
use crackbox_policy::{grant, RegistrationSpec};

/// Refuses a source no connection comes from (`0.0.0.0`, multicast, the
/// limited broadcast); the error is the 400's text.
pub fn check_source(spec: &RegistrationSpec) -> Result<(), String> {
    crackbox_policy::check_source(spec.ip).map_err(|err| format!("ip: {err}"))
}

/// Refuses an id under the watcher's prefix; the error is the 400's text.
pub fn check_id(spec: &RegistrationSpec) -> Result<(), String> {
    if spec.id.starts_with(WATCHER_ID_PREFIX) {
        return Err(format!(
            "id: the prefix {WATCHER_ID_PREFIX} is reserved for registrations made from Docker labels"
        ));
    }
    Ok(())
}

/// Refuses a grant that expired by `now_ms` (ms since the Unix epoch): it
/// would let its name through until the expiry sweep took it out again.
pub fn check_grants(spec: &RegistrationSpec, now_ms: u64) -> Result<(), String> {
    match spec.origins.expiring().find(|(_, at)| *at <= now_ms) {
        Some((entry, at)) => Err(format!(
            "origins: the grant of {entry:?} expired at {at} (ms since the Unix epoch, now {now_ms}); \
             leave it out, or grant it anew with an expiry to come"
        )),
        None => Ok(()),
    }
}

/// `spec` without the grants that expired by `now_ms`: what a registry put
/// back from an older export (`PUT /v1/state`) holds today.
pub fn without_expired(spec: RegistrationSpec, now_ms: u64) -> RegistrationSpec {
    let expired: Vec<String> = spec
        .origins
        .expiring()
        .filter(|(_, at)| *at <= now_ms)
        .map(|(entry, _)| entry.to_owned())
        .collect();
    expired
        .iter()
        .fold(spec, |spec, entry| grant::without(&spec, entry).unwrap_or(spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::AllowEntry;

    #[test]
    fn a_source_no_connection_comes_from_is_refused_and_others_pass() {
        let local = RegistrationSpec::parse("127.0.0.1", "agent", &["pypi.org"]).unwrap();
        assert!(check_source(&local).is_ok());
        let nowhere = RegistrationSpec::new("::".parse().unwrap(), local.id.clone(), local.allowlist.clone());
        assert_eq!(
            check_source(&nowhere).unwrap_err(),
            "ip: :: is the unspecified address, which no connection comes from"
        );
    }

    #[test]
    fn the_watchers_prefix_is_refused_and_other_ids_pass() {
        let own = RegistrationSpec::parse("10.0.0.2", "docker:agent", &["pypi.org"]).unwrap();
        assert_eq!(
            check_id(&own).unwrap_err(),
            "id: the prefix docker: is reserved for registrations made from Docker labels"
        );
        let close = RegistrationSpec::parse("10.0.0.2", "docker-agent", &["pypi.org"]).unwrap();
        assert!(check_id(&close).is_ok());
    }

    fn granted(spec: &RegistrationSpec, entry: &str, expires: u64) -> RegistrationSpec {
        let entry = AllowEntry::parse(entry).unwrap();
        grant::granted(spec, &entry, Some(expires)).unwrap().unwrap()
    }

    #[test]
    fn an_expired_grant_is_refused_or_dropped_and_a_live_one_kept() {
        let listed = RegistrationSpec::parse("10.0.0.2", "agent", &["pypi.org"]).unwrap();
        let spec = granted(&granted(&listed, "old.test", 1_000), "new.test", 3_000);
        assert_eq!(
            check_grants(&spec, 2_000).unwrap_err(),
            "origins: the grant of \"old.test\" expired at 1000 (ms since the Unix epoch, now 2000); \
             leave it out, or grant it anew with an expiry to come"
        );
        assert!(check_grants(&spec, 999).is_ok());
        let today = without_expired(spec, 2_000);
        let entries: Vec<String> = today.allowlist.entries().iter().map(ToString::to_string).collect();
        assert_eq!(entries, ["pypi.org", "new.test"]);
        assert_eq!(today.origins.expiring().collect::<Vec<_>>(), [("new.test", 3_000)]);
    }
}
