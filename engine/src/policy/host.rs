//! Host normalisation shared by allowlist entries and lookups.
//!
//! Normalising means: lower-case, one trailing dot removed, brackets removed
//! from IPv6 literals, IPv4-mapped IPv6 turned into IPv4. A name must then be
//! ASCII, 1–253 bytes, with labels of 1–63 `[a-z0-9_-]` that neither start nor
//! end with `-`, and a last label that is not all digits (so `127.1` or
//! `2130706433`, which some resolvers read as addresses, are never names).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest host name accepted, in bytes, without the trailing dot.
pub const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

/// A normalised host: a validated lower-case name or a canonical address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostKind {
    /// A DNS name, lower-case, without a trailing dot.
    Name(String),
    /// An IP literal; IPv4-mapped IPv6 is stored as IPv4.
    Ip(IpAddr),
}

/// A normalised host borrowed from a caller-provided buffer (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostRef<'a> {
    Name(&'a str),
    Ip(IpAddr),
}

/// Normalises `host`, or returns `None` when it is not a valid host.
pub fn normalise_host(host: &str) -> Option<HostKind> {
    let mut buf = [0u8; MAX_NAME_LEN];
    Some(match normalise_into(host, &mut buf)? {
        HostRef::Name(name) => HostKind::Name(name.to_owned()),
        HostRef::Ip(ip) => HostKind::Ip(ip),
    })
}

/// Normalises `host` into `buf`; the hot-path form used by `match_host`.
pub(crate) fn normalise_into<'a>(host: &str, buf: &'a mut [u8; MAX_NAME_LEN]) -> Option<HostRef<'a>> {
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']')?;
        return inner
            .parse::<Ipv6Addr>()
            .ok()
            .map(|ip| HostRef::Ip(canonical(IpAddr::V6(ip))));
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Some(HostRef::Ip(IpAddr::V4(ip)));
    }
    if host.contains(':') {
        return host
            .parse::<Ipv6Addr>()
            .ok()
            .map(|ip| HostRef::Ip(canonical(IpAddr::V6(ip))));
    }
    let bytes = host.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_NAME_LEN {
        return None;
    }
    let out = &mut buf[..bytes.len()];
    for (dst, &src) in out.iter_mut().zip(bytes) {
        *dst = src.to_ascii_lowercase();
    }
    if !valid_name(out) {
        return None;
    }
    // Only ASCII bytes passed validation, so this cannot fail.
    std::str::from_utf8(out).ok().map(HostRef::Name)
}

fn valid_name(name: &[u8]) -> bool {
    let mut last_all_digits = false;
    for label in name.split(|&b| b == b'.') {
        if label.is_empty() || label.len() > MAX_LABEL_LEN {
            return false;
        }
        if label[0] == b'-' || label[label.len() - 1] == b'-' {
            return false;
        }
        if !label
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return false;
        }
        last_all_digits = label.iter().all(u8::is_ascii_digit);
    }
    !last_all_digits
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Option<HostKind> {
        Some(HostKind::Name(s.to_owned()))
    }

    fn ip(s: &str) -> Option<HostKind> {
        Some(HostKind::Ip(s.parse().unwrap()))
    }

    #[test]
    fn normalisation_table() {
        let long_label = "a".repeat(63);
        let too_long_label = "a".repeat(64);
        let name_253 = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(61));
        let name_254 = format!("{name_253}c");
        let cases: Vec<(&str, Option<HostKind>)> = vec![
            ("GitHub.COM", name("github.com")),
            ("github.com.", name("github.com")),
            ("github.com..", None),
            (".github.com", None),
            ("", None),
            (".", None),
            ("under_score.example", name("under_score.example")),
            ("-lead.example", None),
            ("trail-.example", None),
            ("mid-dle.example", name("mid-dle.example")),
            ("xn--bcher-kva.example", name("xn--bcher-kva.example")),
            ("bücher.example", None),
            ("sp ace.example", None),
            ("per%cent.example", None),
            ("back\\slash.example", None),
            ("*.example.com", None),
            (&long_label, name(&long_label)),
            (&too_long_label, None),
            (&name_253, name(&name_253)),
            (&name_254, None),
            ("127.1", None),
            ("2130706433", None),
            ("0x7f.0.0.1", None),
            ("999.1.1.1", None),
            ("1.2.3.4", ip("1.2.3.4")),
            ("1.2.3.4.", ip("1.2.3.4")),
            ("[::1]", ip("::1")),
            ("[0:0::1]", ip("::1")),
            ("::1", ip("::1")),
            ("[::ffff:10.0.0.1]", ip("10.0.0.1")),
            ("[fe80::1%eth0]", None),
            ("[::1", None),
            ("host:80", None),
        ];
        for (input, want) in cases {
            assert_eq!(normalise_host(input), want, "input {input:?}");
        }
    }
}
