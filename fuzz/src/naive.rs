//! The obviously-correct reference for `match_host`: the Policy section of docs/architecture.md read
//! literally, on strings, scanning every entry. Slow on purpose; it shares
//! no code with the engine's compiled allowlist.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A host as the reference understands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A valid lower-case DNS name without a trailing dot.
    Name(String),
    /// An IP literal, IPv4-mapped IPv6 as IPv4.
    Ip(IpAddr),
}

/// Normalises a host the way `match_host` does (docs/architecture.md, "Policy"): lower-case, one trailing dot
/// removed, brackets removed from IPv6; `None` when it is not a valid host.
pub fn host(raw: &str) -> Option<Host> {
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner.strip_suffix(']')?;
        return inner.parse::<Ipv6Addr>().ok().map(|ip| Host::Ip(unmap(IpAddr::V6(ip))));
    }
    let raw = raw.strip_suffix('.').unwrap_or(raw);
    if let Ok(ip) = raw.parse::<Ipv4Addr>() {
        return Some(Host::Ip(IpAddr::V4(ip)));
    }
    if raw.contains(':') {
        return raw.parse::<Ipv6Addr>().ok().map(|ip| Host::Ip(unmap(IpAddr::V6(ip))));
    }
    let name = raw.to_ascii_lowercase();
    valid_name(&name).then_some(Host::Name(name))
}

/// Entries (docs/architecture.md, "Policy"): ASCII, labels 1-63 of `[a-z0-9_-]` not starting or ending
/// with `-`, total at most 253; a last label of only digits would be read as
/// an address by some resolvers, so it is not a name.
fn valid_name(name: &str) -> bool {
    let labels: Vec<&str> = name.split('.').collect();
    let label_ok = |label: &&str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    };
    (1..=253).contains(&name.len())
        && labels.iter().all(label_ok)
        && !labels.last().is_some_and(|l| l.chars().all(|c| c.is_ascii_digit()))
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Which kind of entry allowed a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// A name or wildcard entry.
    Name,
    /// An IP-literal entry.
    Ip,
}

/// Decides `host` against normalised entries (as `AllowEntry`'s `Display`
/// writes them); `port` `None` means any port (the DNS filter's question).
pub fn decide(entries: &[String], raw_host: &str, port: Option<u16>) -> Option<Matched> {
    let host = host(raw_host)?;
    let mut found = None;
    for entry in entries {
        let (pattern, entry_port) = split_entry(entry);
        if let (Some(want), Some(port)) = (entry_port, port) {
            if want != port {
                continue;
            }
        }
        let hit = match (&host, pattern.strip_prefix('[')) {
            (Host::Ip(ip), Some(v6)) => v6.trim_end_matches(']').parse::<IpAddr>().ok() == Some(*ip),
            (Host::Ip(ip), None) => pattern.parse::<IpAddr>().ok() == Some(*ip),
            (Host::Name(_), Some(_)) => false,
            (Host::Name(name), None) => match pattern.strip_prefix("*.") {
                Some(base) => name.ends_with(&format!(".{base}")),
                None => name == pattern || name.ends_with(&format!(".{pattern}")),
            },
        };
        if hit {
            found = Some(match host {
                Host::Ip(_) => Matched::Ip,
                Host::Name(_) => Matched::Name,
            });
        }
    }
    found
}

/// Splits a normalised entry into pattern and port.
fn split_entry(entry: &str) -> (&str, Option<u16>) {
    let port_at = if entry.starts_with('[') {
        entry.find("]:").map(|i| i + 1)
    } else {
        entry.rfind(':')
    };
    match port_at {
        Some(i) => (&entry[..i], entry[i + 1..].parse().ok()),
        None => (entry, None),
    }
}
