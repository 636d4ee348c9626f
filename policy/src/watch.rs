//! Sources the control plane's Docker label watcher answers for: subnets of
//! the networks it watches, and labelled containers whose labels are
//! invalid.
//!
//! A new connection from an unregistered source inside a watched subnet may
//! belong to a container whose start the watcher is still processing, so
//! the data planes hold it briefly for its registration instead of denying
//! it at once (no first-request race); a source listed as invalid is denied
//! at once as `invalid-label`. Pure and immutable: control sends a whole new
//! list on every change and the engine swaps it in (its `WatchCell`).

use super::source::{canonical_ip, parse_source_ip};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

/// One IPv4 or IPv6 subnet, written `ADDR/PREFIX` (in JSON too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    base: IpAddr,
    prefix: u8,
}

/// Text that is no `ADDR/PREFIX` subnet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a subnet (ADDR/PREFIX, a prefix of at most 32 bits for IPv4 and 128 for IPv6)")]
pub struct SubnetError {
    /// The rejected text (truncated to 100 characters).
    pub input: String,
}

impl FromStr for Subnet {
    type Err = SubnetError;

    /// Parses `ADDR/PREFIX` (an IPv4-mapped IPv6 address is its IPv4 one).
    fn from_str(text: &str) -> Result<Subnet, SubnetError> {
        let fail = || SubnetError {
            input: text.chars().take(100).collect(),
        };
        let (addr, prefix) = text.split_once('/').ok_or_else(fail)?;
        let base = parse_source_ip(addr).map_err(|_| fail())?;
        let prefix: u8 = prefix.parse().map_err(|_| fail())?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Subnet { base, prefix }).ok_or_else(fail)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

impl Serialize for Subnet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Subnet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Subnet {
    /// Whether `ip` lies inside the subnet.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, ip) {
            (IpAddr::V4(base), IpAddr::V4(ip)) => same_prefix(
                u128::from(u32::from(base)) << 96,
                u128::from(u32::from(ip)) << 96,
                self.prefix,
            ),
            (IpAddr::V6(base), IpAddr::V6(ip)) => same_prefix(u128::from(base), u128::from(ip), self.prefix),
            _ => false,
        }
    }
}

fn same_prefix(a: u128, b: u128, prefix: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    a & mask == b & mask
}

/// The watcher's list as the data planes consult it.
#[derive(Debug, Default)]
pub struct Watch {
    subnets: Vec<Subnet>,
    invalid: FxHashMap<IpAddr, Arc<str>>,
}

impl Watch {
    /// The list of these subnets and `(address, container id)` pairs, each
    /// parsed where it entered (the wire's watch list).
    pub fn new(
        subnets: impl IntoIterator<Item = Subnet>,
        invalid: impl IntoIterator<Item = (IpAddr, Arc<str>)>,
    ) -> Watch {
        Watch {
            subnets: subnets.into_iter().collect(),
            invalid: invalid.into_iter().map(|(ip, id)| (canonical_ip(ip), id)).collect(),
        }
    }

    /// Whether an unregistered `source` may be waiting for its registration.
    pub fn holds(&self, source: IpAddr) -> bool {
        !self.invalid.contains_key(&source) && self.subnets.iter().any(|s| s.contains(source))
    }

    /// The container name of a source whose labels are invalid.
    pub fn invalid(&self, source: IpAddr) -> Option<&Arc<str>> {
        self.invalid.get(&source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_contain_their_addresses_only() {
        let cases = [
            ("10.1.2.0/24", "10.1.2.77", true),
            ("10.1.2.0/24", "10.1.3.1", false),
            ("10.1.2.8/29", "10.1.2.15", true),
            ("10.1.2.8/29", "10.1.2.16", false),
            ("0.0.0.0/0", "192.0.2.1", true),
            ("10.1.2.3/32", "10.1.2.3", true),
            ("10.1.2.0/24", "::ffff:10.1.2.5", true),
            ("fd00:1::/64", "fd00:1::99", true),
            ("fd00:1::/64", "fd00:2::1", false),
            ("fd00:1::/64", "10.1.2.3", false),
        ];
        for (text, ip, inside) in cases {
            let subnet: Subnet = text.parse().unwrap();
            assert_eq!(subnet.contains(parse_source_ip(ip).unwrap()), inside, "{subnet:?} {ip}");
            assert_eq!(subnet.to_string(), text);
        }
        for bad in ["10.0.0.0", "10.0.0.0/33", "x/8", "fd00::/129", "10.0.0.0/-1", ""] {
            let err = bad.parse::<Subnet>().unwrap_err();
            assert!(err.to_string().contains("is not a subnet"), "{bad}: {err}");
        }
        let json: Vec<Subnet> = serde_json::from_str(r#"["10.5.0.0/16","fd00:1::/64"]"#).unwrap();
        assert_eq!(
            serde_json::to_string(&json).unwrap(),
            r#"["10.5.0.0/16","fd00:1::/64"]"#
        );
        let err = serde_json::from_str::<Vec<Subnet>>(r#"["10.5.0.0/16","junk"]"#).unwrap_err();
        assert!(err.to_string().contains(r#""junk" is not a subnet"#), "{err}");
    }

    #[test]
    fn invalid_sources_are_not_held_but_named() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let watch = Watch::new(
            ["10.5.0.0/16".parse().unwrap()],
            [(ip("::ffff:10.5.0.9"), "agent-7".into())],
        );
        assert!(watch.holds(ip("10.5.0.8")));
        assert!(!watch.holds(ip("10.6.0.8")));
        assert!(!watch.holds(ip("10.5.0.9")));
        assert_eq!(watch.invalid(ip("10.5.0.9")).map(|s| &**s), Some("agent-7"));
        assert_eq!(watch.invalid(ip("10.5.0.8")), None);
    }
}
