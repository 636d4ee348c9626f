//! Registrations as the admin API takes them: never under the id prefix
//! the Docker label watcher owns (a registration made by hand with such an
//! id would be taken for the watcher's and removed by it). Everything else
//! about a registration was checked as its body was decoded.

use crate::registry::WATCHER_ID_PREFIX;
use crackbox_policy::RegistrationSpec;

/// Refuses an id under the watcher's prefix; the error is the 400's text.
pub fn check_id(spec: &RegistrationSpec) -> Result<(), String> {
    if spec.id.starts_with(WATCHER_ID_PREFIX) {
        return Err(format!(
            "id: the prefix {WATCHER_ID_PREFIX} is reserved for registrations made from Docker labels"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
