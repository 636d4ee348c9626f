//! What a registration and the named policies it references make
//! together (docs/policy.md, "Named policies"): its own entries plus every
//! policy's, a deny entry from any of them winning; its own mode and cap
//! when it gives them, else the strictest a policy gives (mode: `enforce`
//! over `ask` over `report`; cap: the smallest), else enforce and no cap.
//!
//! Worked out when asked, from the policies in force, so a policy changed
//! once applies to every registration that names it without touching
//! them. A name with no policy behind it contributes nothing. Pure.

use super::allowlist::{lookup_all, Lookup};
use super::bandwidth::Bandwidth;
use super::mode::Mode;
use super::named::{PolicyName, PolicySpec};
use super::registration::RegistrationSpec;

/// A registration seen with the policies it names.
#[derive(Clone, Copy)]
pub struct Effective<'a, F> {
    spec: &'a RegistrationSpec,
    find: F,
}

impl<'a, F> Effective<'a, F>
where
    F: Fn(&PolicyName) -> Option<&'a PolicySpec> + Copy + 'a,
{
    /// `spec` with the policies `find` looks up by name.
    pub fn new(spec: &'a RegistrationSpec, find: F) -> Self {
        Effective { spec, find }
    }

    /// The policies it names that exist, in the order named.
    pub fn policies(&self) -> impl Iterator<Item = &'a PolicySpec> + 'a {
        let find = self.find;
        self.spec.policies.iter().filter_map(find)
    }

    /// What its own lists and its policies' say of `host` on `port`
    /// (`None`: any port, for the DNS filter).
    pub fn lookup(&self, host: &str, port: Option<u16>) -> Lookup {
        if self.spec.policies.is_empty() {
            return match port {
                Some(port) => self.spec.allowlist.lookup(host, port),
                None => self.spec.allowlist.lookup_any_port(host),
            };
        }
        let lists = std::iter::once(&self.spec.allowlist).chain(self.policies().map(|policy| &policy.allowlist));
        lookup_all(lists, host, port)
    }

    /// Its own mode, else the strictest of its policies', else enforce.
    pub fn mode(&self) -> Mode {
        match self.spec.mode {
            Some(mode) => mode,
            None => self
                .policies()
                .filter_map(|policy| policy.mode)
                .fold(None, strictest)
                .unwrap_or_default(),
        }
    }

    /// Its own cap, else the smallest of its policies', else none.
    pub fn bandwidth(&self) -> Option<Bandwidth> {
        self.spec
            .bandwidth
            .or_else(|| self.policies().filter_map(|policy| policy.bandwidth).min())
    }
}

/// The stricter of a mode found so far and the next one.
fn strictest(found: Option<Mode>, next: Mode) -> Option<Mode> {
    let rank = |mode: Mode| match mode {
        Mode::Report => 0,
        Mode::Ask => 1,
        Mode::Enforce => 2,
    };
    Some(match found {
        Some(found) if rank(found) >= rank(next) => found,
        _ => next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Allowlist, MatchedBy};

    fn policy(name: &str, allow: &[&str], deny: &[&str], mode: Option<Mode>, cap: Option<u64>) -> PolicySpec {
        PolicySpec {
            mode,
            bandwidth: cap.map(|cap| Bandwidth::new(cap).unwrap()),
            ..PolicySpec::new(
                PolicyName::parse(name).unwrap(),
                Allowlist::with_deny(
                    Allowlist::parse(allow).unwrap().entries().to_vec(),
                    Allowlist::parse(deny).unwrap().entries().to_vec(),
                ),
            )
        }
    }

    #[test]
    fn own_entries_plus_every_policys_with_deny_winning() {
        let policies = [
            policy("python", &["pypi.org"], &["evil.pypi.org"], None, None),
            policy("no-gist", &[], &["gist.github.com"], None, None),
        ];
        let find = |name: &PolicyName| policies.iter().find(|p| p.name == *name);
        let spec = RegistrationSpec::parse("10.0.0.2", "a", &["github.com", "evil.pypi.org"])
            .unwrap()
            .with_policies(&["python", "no-gist", "missing"])
            .unwrap();
        let effective = Effective::new(&spec, find);
        let allowed = Lookup::Allowed(MatchedBy::Name);
        let cases = [
            ("github.com", Some(443), allowed),
            ("pypi.org", Some(443), allowed),
            ("files.pypi.org", None, allowed),
            ("gist.github.com", Some(443), Lookup::Denied),
            ("evil.pypi.org", Some(443), Lookup::Denied),
            ("other.test", Some(443), Lookup::Unlisted),
        ];
        for (host, port, want) in cases {
            assert_eq!(effective.lookup(host, port), want, "{host}");
        }
        assert_eq!(effective.policies().count(), 2, "a missing policy contributes nothing");
    }

    #[test]
    fn own_mode_and_cap_win_else_the_strictest_policys() {
        let policies = [
            policy("report", &[], &[], Some(Mode::Report), Some(4096)),
            policy("ask", &[], &[], Some(Mode::Ask), Some(2048)),
            policy("plain", &[], &[], None, None),
        ];
        let spec = |names: &[&str]| {
            RegistrationSpec::parse("10.0.0.2", "a", &Vec::<String>::new())
                .unwrap()
                .with_policies(names)
                .unwrap()
        };
        fn mode_and_cap(spec: &RegistrationSpec, policies: &[PolicySpec]) -> (Mode, Option<u64>) {
            let effective = Effective::new(spec, |name: &PolicyName| policies.iter().find(|p| p.name == *name));
            (effective.mode(), effective.bandwidth().map(Bandwidth::bytes_per_second))
        }
        let of = |spec: &RegistrationSpec| mode_and_cap(spec, &policies);
        assert_eq!(of(&spec(&[])), (Mode::Enforce, None));
        assert_eq!(of(&spec(&["plain"])), (Mode::Enforce, None));
        assert_eq!(of(&spec(&["report"])), (Mode::Report, Some(4096)));
        assert_eq!(of(&spec(&["report", "ask"])), (Mode::Ask, Some(2048)));
        let own = spec(&["report", "ask"])
            .with_mode(Mode::Enforce)
            .with_bandwidth(Some(Bandwidth::new(8192).unwrap()));
        assert_eq!(of(&own), (Mode::Enforce, Some(8192)));
    }
}
