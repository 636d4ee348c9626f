//! Registrations as the admin API takes them: valid, and never under the
//! id prefix the Docker label watcher owns (a registration made by hand
//! with such an id would be taken for the watcher's and removed by it).

use crate::registry::WATCHER_ID_PREFIX;
use crackbox_policy::{Registration, RegistrationSpec};
use std::net::IpAddr;

/// Validates and compiles `spec`; the error is the 400's text.
pub fn compile(spec: &RegistrationSpec) -> Result<(IpAddr, Registration), String> {
    if spec.id.starts_with(WATCHER_ID_PREFIX) {
        return Err(format!(
            "id: the prefix {WATCHER_ID_PREFIX} is reserved for registrations made from Docker labels"
        ));
    }
    spec.compile().map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchers_prefix_is_refused_and_other_ids_pass() {
        let own = RegistrationSpec::new("10.0.0.2", "docker:agent", ["pypi.org"]);
        assert_eq!(
            compile(&own).unwrap_err(),
            "id: the prefix docker: is reserved for registrations made from Docker labels"
        );
        let close = RegistrationSpec::new("10.0.0.2", "docker-agent", ["pypi.org"]);
        assert!(compile(&close).is_ok());
        let bad = RegistrationSpec::new("10.0.0.2.9", "agent", ["pypi.org"]);
        assert!(compile(&bad).unwrap_err().starts_with("ip"), "{:?}", compile(&bad));
    }
}
