//! Registry keys: client source addresses in canonical form.

use std::net::IpAddr;

/// A registry key that is not a plain IP address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not an IP address (give a bare IPv4 or IPv6 address, no port, no brackets)")]
pub struct SourceIpError {
    /// The rejected input (truncated to 100 characters).
    pub input: String,
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
}
