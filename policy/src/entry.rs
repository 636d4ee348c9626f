//! Allowlist entries: parsing, validation and their normalised form.
//!
//! Entries are parsed once into [`AllowEntry`] (never re-read as strings on
//! a lookup). Accepted forms: `example.com` (apex and subdomains),
//! `*.example.com` (subdomains only), either with `:port`, and IP literals
//! `203.0.113.7`, `[2001:db8::1]`, optionally with `:port`. Never CIDRs.

use super::host::{normalise_host, HostKind};
use std::fmt;
use std::net::IpAddr;

/// Why `*` alone is refused, and what to write instead.
const BARE_STAR: &str = "a bare * would match every host: name the hosts (example.com also covers its \
                         subdomains), use a preset such as @pypi (crackbox presets lists them), or find them with \
                         crackbox run --learn";

/// Why `0.0.0.0` and `::` are refused: they are no destination, and Linux
/// connects a dial to them to this host itself.
const UNSPECIFIED: &str = "0.0.0.0 and :: are no destination: a connection to them reaches this host itself, \
                           not every address (an entry never means \"any\"); name the hosts or addresses";

/// Most entries one registration may carry.
pub const MAX_ENTRIES: usize = 1000;

/// What an entry matches, before any port restriction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The name itself and every subdomain of it.
    Domain(String),
    /// Subdomains of the name only, not the name itself (`*.name`).
    Subdomains(String),
    /// Exactly this address, given literally by the client.
    Ip(IpAddr),
}

/// One validated, normalised allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowEntry {
    /// What the entry matches.
    pub target: Target,
    /// The only port allowed, or any port when `None`.
    pub port: Option<u16>,
}

/// An allowlist entry that failed validation; names the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid allowlist entry {entry:?}: {problem}")]
pub struct EntryError {
    /// The entry as given (truncated to 100 characters).
    pub entry: String,
    /// What is wrong with it.
    pub problem: String,
}

impl EntryError {
    fn new(raw: &str, problem: String) -> Self {
        EntryError {
            entry: raw.chars().take(100).collect(),
            problem,
        }
    }
}

impl AllowEntry {
    /// Parses and normalises one entry.
    pub fn parse(raw: &str) -> Result<Self, EntryError> {
        let fail = |problem: &str| EntryError::new(raw, problem.to_owned());
        if let Some(problem) = url_problem(raw) {
            return Err(EntryError::new(raw, problem));
        }
        if raw.is_empty() {
            return Err(fail("empty entry"));
        }
        if !raw.is_ascii() {
            return Err(fail("not ASCII (write international names in punycode, xn--...)"));
        }
        if raw == "*" {
            return Err(fail(BARE_STAR));
        }
        let (host, port) = split_port(raw).map_err(fail)?;
        let port = port.map(parse_port).transpose().map_err(fail)?;
        let target = if let Some(rest) = host.strip_prefix("*.") {
            match normalise_host(rest) {
                Some(HostKind::Name(name)) => Target::Subdomains(name),
                Some(HostKind::Ip(_)) => return Err(fail("a wildcard cannot apply to an IP address")),
                None => return Err(fail("not a valid host name after *.")),
            }
        } else {
            match normalise_host(host) {
                Some(HostKind::Name(name)) => Target::Domain(name),
                Some(HostKind::Ip(ip)) if unspecified(ip) => return Err(fail(UNSPECIFIED)),
                Some(HostKind::Ip(ip)) => Target::Ip(ip),
                None if host.contains('/') => return Err(fail("CIDR ranges are not supported")),
                None => return Err(fail("not a valid host name or IP address")),
            }
        };
        Ok(AllowEntry { target, port })
    }
}

/// Whether `ip` is an unspecified address, IPv4-mapped or not.
fn unspecified(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_unspecified(),
        IpAddr::V6(v6) => v6.is_unspecified() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_unspecified()),
    }
}

/// An entry written as a URL (`https://pypi.org/simple`) or with a path
/// (`pypi.org/simple`): the problem, naming the host it probably meant.
fn url_problem(raw: &str) -> Option<String> {
    let (kind, rest) = match raw.split_once("://") {
        Some((_, rest)) => ("a URL", rest),
        None if raw.contains('/') && !raw.contains(['[', ':']) && !raw.starts_with(|c: char| c.is_ascii_digit()) => {
            ("a path", raw)
        }
        None => return None,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let meant = match AllowEntry::parse(host) {
        Ok(entry) => entry.to_string(),
        Err(_) => return Some(format!("a host name, not {kind}")),
    };
    Some(format!("a host name, not {kind}: did you mean {meant}?"))
}

/// Splits `host[:port]`; a bare IPv6 literal (several colons) has no port.
fn split_port(raw: &str) -> Result<(&str, Option<&str>), &'static str> {
    if raw.starts_with('[') {
        let close = raw.find(']').ok_or("unclosed [")?;
        let (host, rest) = raw.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => rest
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or("unexpected text after ]"),
        };
    }
    match raw.matches(':').count() {
        0 => Ok((raw, None)),
        1 => raw.split_once(':').map(|(h, p)| (h, Some(p))).ok_or("bad port"),
        _ => Ok((raw, None)),
    }
}

/// A port in its one written form: decimal digits from 1 to 65535, no sign
/// and no leading zero (`080` is refused rather than read as 80).
fn parse_port(port: &str) -> Result<u16, &'static str> {
    const PROBLEM: &str = "port must be a number from 1 to 65535, without a sign or a leading zero";
    if port.is_empty() || port.len() > 5 || port.starts_with('0') || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PROBLEM);
    }
    port.parse::<u16>().map_err(|_| PROBLEM)
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Domain(name) => f.write_str(name)?,
            Target::Subdomains(name) => write!(f, "*.{name}")?,
            Target::Ip(IpAddr::V4(v4)) => write!(f, "{v4}")?,
            Target::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_forms() {
        let cases = [
            ("GitHub.com", "github.com"),
            ("github.com.", "github.com"),
            ("*.Example.com", "*.example.com"),
            ("example.com:443", "example.com:443"),
            ("*.example.com:8443", "*.example.com:8443"),
            ("203.0.113.7", "203.0.113.7"),
            ("203.0.113.7:443", "203.0.113.7:443"),
            ("[2001:db8::1]", "[2001:db8::1]"),
            ("[2001:DB8:0::1]:443", "[2001:db8::1]:443"),
            ("2001:db8::1", "[2001:db8::1]"),
            ("[::ffff:192.0.2.1]", "192.0.2.1"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("_dmarc.example.com", "_dmarc.example.com"),
        ];
        for (input, want) in cases {
            let entry = AllowEntry::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(entry.to_string(), want, "input {input:?}");
        }
    }

    #[test]
    fn rejected_entries() {
        let long = format!("{}.com", "a".repeat(64));
        let rejected = [
            "",
            "*",
            "*.",
            "**.example.com",
            "a*.example.com",
            "*.*.example.com",
            "example.com..",
            "bücher.example",
            "exa mple.com",
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:https",
            "example.com:+80",
            "example.com:080",
            "example.com:00",
            "*.example.com:0443",
            "[2001:db8::1]:08080",
            "203.0.113.7:00080",
            "10.0.0.0/8",
            "*.10.0.0.1",
            "[::1",
            "[::1]x",
            "-bad.example",
            "bad-.example",
            "999.1.1.1",
            "127.1",
            &long,
            "[fe80::1%25eth0]",
            "http://example.com",
            "example.com/path",
        ];
        for input in rejected {
            let err = AllowEntry::parse(input).expect_err(input);
            assert_eq!(err.entry, input, "error names the entry");
        }
    }

    #[test]
    fn a_url_is_refused_with_the_host_it_meant() {
        let cases = [
            (
                "https://pypi.org/simple",
                "a host name, not a URL: did you mean pypi.org?",
            ),
            ("https://PyPI.org", "a host name, not a URL: did you mean pypi.org?"),
            (
                "http://user@example.com:8080/x?y#z",
                "a host name, not a URL: did you mean example.com:8080?",
            ),
            (
                "git://[2001:db8::1]/r",
                "a host name, not a URL: did you mean [2001:db8::1]?",
            ),
            ("pypi.org/simple", "a host name, not a path: did you mean pypi.org?"),
            ("https://", "a host name, not a URL"),
            ("https:///x", "a host name, not a URL"),
        ];
        for (input, want) in cases {
            let err = AllowEntry::parse(input).expect_err(input);
            assert_eq!(err.problem, want, "{input}");
            assert_eq!(err.entry, input);
        }
        let cidr = AllowEntry::parse("10.0.0.0/8").unwrap_err();
        assert_eq!(cidr.problem, "CIDR ranges are not supported");
        for unspecified in ["0.0.0.0", "0.0.0.0:80", "[::]", "::", "[::ffff:0.0.0.0]:443"] {
            let err = AllowEntry::parse(unspecified).expect_err(unspecified);
            assert_eq!(err.problem, UNSPECIFIED, "{unspecified}");
        }
    }

    #[test]
    fn error_message_names_entry_and_problem() {
        let err = AllowEntry::parse("*").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid allowlist entry \"*\": a bare * would match every host: name the hosts (example.com also \
             covers its subdomains), use a preset such as @pypi (crackbox presets lists them), or find them \
             with crackbox run --learn"
        );
        let zero = AllowEntry::parse("pypi.org:0443").unwrap_err();
        assert_eq!(
            zero.to_string(),
            "invalid allowlist entry \"pypi.org:0443\": port must be a number from 1 to 65535, without a sign \
             or a leading zero"
        );
    }
}
