//! Host normalisation shared by allowlist entries and lookups.
//!
//! Normalising means: lower-case, one trailing dot removed, brackets removed
//! from IPv6 literals, IPv4-mapped IPv6 turned into IPv4. A name must then be
//! ASCII, 1–253 bytes, with labels of 1–63 `[a-z0-9_-]` that neither start nor
//! end with `-`, and a last label that is not all digits (so `127.1` or
//! `2130706433`, which some resolvers read as addresses, are never names).
//!
//! Lookups run this on every decision, so names are lowered, validated and
//! split into labels in one pass into a stack buffer: never allocate here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest host name accepted, in bytes, without the trailing dot.
pub const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;
/// Most labels a valid name has: one-byte labels and a dot between each.
const MAX_LABELS: usize = MAX_NAME_LEN.div_ceil(2);

/// Each byte lowered when it may appear in a name, 0 when it may not.
const NAME_BYTE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < table.len() {
        let c = (b as u8).to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_' || c == b'.' {
            table[b] = c;
        }
        b += 1;
    }
    table
};

/// A normalised host: a validated lower-case name or a canonical address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostKind {
    /// A DNS name, lower-case, without a trailing dot.
    Name(String),
    /// An IP literal; IPv4-mapped IPv6 is stored as IPv4.
    Ip(IpAddr),
}

/// A normalised host borrowed from a caller-provided buffer (no allocation).
#[derive(Debug, Clone, Copy)]
pub(crate) enum HostRef<'a> {
    Name(&'a NameBuf),
    Ip(IpAddr),
}

/// A validated lower-case name on the stack, with where each label starts.
#[derive(Debug)]
pub(crate) struct NameBuf {
    bytes: [u8; MAX_NAME_LEN],
    len: usize,
    /// Offset of each label; offsets are below [`MAX_NAME_LEN`], so fit a byte.
    starts: [u8; MAX_LABELS],
    labels: usize,
}

impl NameBuf {
    /// An empty buffer for [`normalise_into`] to fill.
    pub(crate) fn new() -> Self {
        NameBuf {
            bytes: [0; MAX_NAME_LEN],
            len: 0,
            starts: [0; MAX_LABELS],
            labels: 0,
        }
    }

    /// How many labels the name has.
    pub(crate) fn labels(&self) -> usize {
        self.labels
    }

    /// The name from label `first` on: 0 is the whole name, 1 its parent.
    pub(crate) fn suffix(&self, first: usize) -> &[u8] {
        &self.bytes[usize::from(self.starts[first])..self.len]
    }
}

/// What one pass over a would-be name found.
enum Scan {
    /// A valid name, now in the buffer.
    Name,
    /// Valid labels but the last is all digits: an IPv4 literal or nothing.
    Numeric,
    /// Not a name.
    Invalid,
}

/// Normalises `host`, or returns `None` when it is not a valid host.
pub fn normalise_host(host: &str) -> Option<HostKind> {
    with_normalised_host(host, |view| {
        Some(match view? {
            HostView::Name(name) => HostKind::Name(name.to_owned()),
            HostView::Ip(ip) => HostKind::Ip(ip),
        })
    })
}

/// A normalised host as [`with_normalised_host`] lends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostView<'a> {
    /// A DNS name, lower-case, without a trailing dot.
    Name(&'a str),
    /// An IP literal; IPv4-mapped IPv6 is given as IPv4.
    Ip(IpAddr),
}

/// Normalises `host` as [`normalise_host`] does, but on the stack: `use_it`
/// gets the result (`None` when `host` is not a valid host), nothing is
/// allocated.
pub fn with_normalised_host<R>(host: &str, use_it: impl FnOnce(Option<HostView<'_>>) -> R) -> R {
    let mut buf = NameBuf::new();
    let view = normalise_into(host, &mut buf).and_then(|normalised| match normalised {
        // The buffer holds only the ASCII bytes the scan let through.
        HostRef::Name(name) => std::str::from_utf8(name.suffix(0)).ok().map(HostView::Name),
        HostRef::Ip(ip) => Some(HostView::Ip(ip)),
    });
    use_it(view)
}

/// Whether [`normalise_host`] accepts `host`, without allocating.
pub fn is_valid_host(host: &str) -> bool {
    normalise_into(host, &mut NameBuf::new()).is_some()
}

/// Normalises `host` into `buf`; the hot-path form used by `match_host`.
pub(crate) fn normalise_into<'a>(host: &str, buf: &'a mut NameBuf) -> Option<HostRef<'a>> {
    if let Some(inner) = host.strip_prefix('[') {
        return parse_ipv6(inner.strip_suffix(']')?);
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    match scan_name(host.as_bytes(), buf) {
        Scan::Name => Some(HostRef::Name(buf)),
        // A name never ends in an all-digit label: an IPv4 literal or nothing.
        Scan::Numeric => host.parse::<Ipv4Addr>().ok().map(|ip| HostRef::Ip(IpAddr::V4(ip))),
        Scan::Invalid if host.contains(':') => parse_ipv6(host),
        Scan::Invalid => None,
    }
}

fn parse_ipv6(text: &str) -> Option<HostRef<'static>> {
    text.parse::<Ipv6Addr>()
        .ok()
        .map(|ip| HostRef::Ip(canonical(IpAddr::V6(ip))))
}

/// Lowers `host` into `buf`, validating bytes and labels on the way.
fn scan_name(host: &[u8], buf: &mut NameBuf) -> Scan {
    if host.is_empty() || host.len() > MAX_NAME_LEN {
        return Scan::Invalid;
    }
    let mut start = 0;
    let mut labels = 0;
    for (i, (&b, out)) in host.iter().zip(buf.bytes.iter_mut()).enumerate() {
        let c = NAME_BYTE[usize::from(b)];
        *out = c;
        if c == b'.' {
            if !valid_label(&host[start..i]) {
                return Scan::Invalid;
            }
            // Labels are non-empty, so at most MAX_LABELS of them fit.
            buf.starts[labels] = start as u8;
            labels += 1;
            start = i + 1;
        } else if c == 0 {
            return Scan::Invalid;
        }
    }
    let last = &host[start..];
    if !valid_label(last) {
        return Scan::Invalid;
    }
    buf.starts[labels] = start as u8;
    buf.labels = labels + 1;
    buf.len = host.len();
    if last.iter().all(u8::is_ascii_digit) {
        Scan::Numeric
    } else {
        Scan::Name
    }
}

/// Length and hyphen rules; the bytes themselves were checked already.
fn valid_label(label: &[u8]) -> bool {
    matches!((label.first(), label.last()), (Some(&first), Some(&last))
        if label.len() <= MAX_LABEL_LEN && first != b'-' && last != b'-')
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
        let most_labels = format!("{}a", "a.".repeat(126));
        let most_labels_dot = format!("{most_labels}.");
        let too_many_labels = format!("a.{most_labels}");
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
            ("FE80::1", ip("fe80::1")),
            ("1.2.3.4..", None),
            ("01.2.3.4", None),
            ("1.2.3.a", name("1.2.3.a")),
            ("a.123", None),
            (&most_labels, name(&most_labels)),
            (&most_labels_dot, name(&most_labels)),
            (&too_many_labels, None),
        ];
        for (input, want) in cases {
            assert_eq!(normalise_host(input), want, "input {input:?}");
        }
    }
}
