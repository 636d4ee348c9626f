//! Registry keys: client source addresses in canonical form.

use std::net::IpAddr;

/// A registry key that is not a plain IP address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not an IP address (give a bare IPv4 or IPv6 address, no port, no brackets)")]
pub struct SourceIpError {
    /// The rejected input (truncated to 100 characters).
    pub input: String,
}

/// A source address no connection can come from: registering it would
/// match nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ip} is {kind}, which no connection comes from")]
pub struct UnusableSource {
    /// The refused address, canonical.
    pub ip: IpAddr,
    /// What it is: `the unspecified address`, `a multicast address` or
    /// `the limited broadcast address`.
    pub kind: &'static str,
}

/// Refuses a source no connection can come from (docs/policy.md,
/// "Registrations"): the unspecified address (`0.0.0.0`, `::`), multicast
/// (`224.0.0.0/4`, `ff00::/8`) and the limited broadcast `255.255.255.255`.
/// Loopback, private and link-local sources are sources like any other.
pub fn check_source(ip: IpAddr) -> Result<(), UnusableSource> {
    let ip = canonical_ip(ip);
    let kind = match ip {
        _ if ip.is_unspecified() => "the unspecified address",
        _ if ip.is_multicast() => "a multicast address",
        IpAddr::V4(v4) if v4.is_broadcast() => "the limited broadcast address",
        _ => return Ok(()),
    };
    Err(UnusableSource { ip, kind })
}

/// The canonical form of a source address: IPv4-mapped IPv6 becomes IPv4.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Parses a registry key; rejects ports, brackets, zones and host names.
pub fn parse_source_ip(input: &str) -> Result<IpAddr, SourceIpError> {
    input.parse::<IpAddr>().map(canonical_ip).map_err(|_| SourceIpError {
        input: input.chars().take(100).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_key_table() {
        let cases = [
            ("10.0.0.2", Some("10.0.0.2")),
            ("::ffff:10.0.0.2", Some("10.0.0.2")),
            ("::FFFF:10.0.0.2", Some("10.0.0.2")),
            ("2001:DB8::1", Some("2001:db8::1")),
            ("0:0::1", Some("::1")),
            ("10.0.0.2:80", None),
            ("[::1]", None),
            ("localhost", None),
            ("10.0.0.999", None),
            ("fe80::1%eth0", None),
            (" 10.0.0.2", None),
            ("", None),
        ];
        for (input, want) in cases {
            let got = parse_source_ip(input).ok().map(|ip| ip.to_string());
            assert_eq!(got.as_deref(), want, "input {input:?}");
        }
    }

    #[test]
    fn only_addresses_no_connection_comes_from_are_unusable_sources() {
        let unusable = [
            ("0.0.0.0", "0.0.0.0 is the unspecified address"),
            ("::", ":: is the unspecified address"),
            ("::ffff:0.0.0.0", "0.0.0.0 is the unspecified address"),
            ("224.0.0.1", "224.0.0.1 is a multicast address"),
            ("239.255.255.250", "239.255.255.250 is a multicast address"),
            ("::ffff:224.0.0.251", "224.0.0.251 is a multicast address"),
            ("ff02::1", "ff02::1 is a multicast address"),
            ("ff0e::101", "ff0e::101 is a multicast address"),
            ("255.255.255.255", "255.255.255.255 is the limited broadcast address"),
        ];
        for (input, want) in unusable {
            let err = check_source(input.parse().unwrap()).unwrap_err();
            assert_eq!(err.to_string(), format!("{want}, which no connection comes from"));
        }
        let usable = [
            "127.0.0.1",
            "::1",
            "10.0.0.2",
            "172.16.0.3",
            "192.168.255.255",
            "169.254.1.1",
            "fd00::7",
            "fe80::1",
            "223.255.255.255",
            "240.0.0.1",
            "203.0.113.7",
            "2001:db8::1",
        ];
        for input in usable {
            assert_eq!(check_source(input.parse().unwrap()), Ok(()), "{input}");
        }
    }
}
