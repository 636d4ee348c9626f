//! Picking a free IPv4 subnet for a jail from a private pool, avoiding every
//! subnet already in use (Docker's networks, the host's routes).
//!
//! Pure except for [`host_routes`], which reads `/proc/net/route`. Two runs
//! racing for the same subnet are resolved by the caller retrying when the
//! create fails; picking from a random starting point keeps that rare.

use std::fmt;
use std::net::Ipv4Addr;

/// An IPv4 network `addr/prefix` with the host bits of `addr` cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    addr: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Net {
    /// The network containing `addr` with `prefix` bits; `None` for a prefix over 32.
    pub fn new(addr: Ipv4Addr, prefix: u8) -> Option<Self> {
        let mask = mask(prefix)?;
        Some(Ipv4Net {
            addr: Ipv4Addr::from(u32::from(addr) & mask),
            prefix,
        })
    }

    /// Parses `a.b.c.d/n`; anything else (IPv6, garbage) is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let (addr, prefix) = text.split_once('/')?;
        Ipv4Net::new(addr.parse().ok()?, prefix.parse().ok()?)
    }

    /// The `n`-th address of the network (0 is the network address itself).
    pub fn host(&self, n: u32) -> Option<Ipv4Addr> {
        (u64::from(n) < self.size()).then(|| Ipv4Addr::from(u32::from(self.addr) + n))
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `addr` lies in this network.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        mask(self.prefix).is_some_and(|m| u32::from(addr) & m == u32::from(self.addr))
    }

    /// Whether the two networks share any address.
    pub fn overlaps(&self, other: &Ipv4Net) -> bool {
        self.contains(other.addr) || other.contains(self.addr)
    }

    fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask(prefix: u8) -> Option<u32> {
    match prefix {
        0 => Some(0),
        1..=32 => Some(u32::MAX << (32 - u32::from(prefix))),
        _ => None,
    }
}

/// The first `/prefix` block of `pool` (scanning from block `start`, wrapping)
/// that overlaps nothing in `taken`.
pub fn pick(pool: Ipv4Net, prefix: u8, taken: &[Ipv4Net], start: u32) -> Option<Ipv4Net> {
    if prefix < pool.prefix || prefix > 30 {
        return None;
    }
    let blocks = 1u32 << (prefix - pool.prefix);
    let block_size = 1u32 << (32 - u32::from(prefix));
    (0..blocks)
        .map(|i| (start.wrapping_add(i)) % blocks)
        .filter_map(|i| Ipv4Net::new(Ipv4Addr::from(u32::from(pool.addr) + i * block_size), prefix))
        .find(|candidate| !taken.iter().any(|t| t.overlaps(candidate)))
}

/// A host address of `net` (not the network or broadcast address) outside
/// `used`, scanning from a random `start`.
pub fn free_host(net: Ipv4Net, used: &[Ipv4Addr], start: u32) -> Option<Ipv4Addr> {
    let hosts = u32::try_from(net.size().saturating_sub(2)).ok()?;
    (0..hosts)
        .filter_map(|i| net.host(1 + start.wrapping_add(i) % hosts))
        .find(|addr| !used.contains(addr))
}

/// The host's IPv4 routes other than default routes, from `/proc/net/route`
/// (empty when it cannot be read, e.g. off Linux).
pub fn host_routes() -> Vec<Ipv4Net> {
    std::fs::read_to_string("/proc/net/route")
        .map(|text| parse_proc_routes(&text))
        .unwrap_or_default()
}

/// Parses the kernel's route table text; columns 2 and 8 are destination and
/// mask, printed as the hex of the in-memory (network-order) word.
fn parse_proc_routes(text: &str) -> Vec<Ipv4Net> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let dest = u32::from_str_radix(cols.get(1)?, 16).ok()?;
            let mask = u32::from_str_radix(cols.get(7)?, 16).ok()?;
            let prefix = u8::try_from(mask.count_ones()).ok()?;
            (prefix > 0).then(|| Ipv4Net::new(Ipv4Addr::from(dest.to_ne_bytes()), prefix))?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Ipv4Net {
        Ipv4Net::parse(text).unwrap()
    }

    #[test]
    fn parse_normalises_and_rejects_garbage() {
        assert_eq!(net("10.213.200.5/29").to_string(), "10.213.200.0/29");
        for bad in ["10.0.0.0", "10.0.0.0/33", "fd00::/64", "x/8", ""] {
            assert_eq!(Ipv4Net::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn overlap_table() {
        let cases = [
            ("10.213.128.0/29", "10.213.128.0/29", true),
            ("10.213.128.0/29", "10.213.128.8/29", false),
            ("10.0.0.0/8", "10.213.128.8/29", true),
            ("10.213.128.8/29", "10.0.0.0/8", true),
            ("172.17.0.0/16", "10.213.128.0/17", false),
        ];
        for (a, b, want) in cases {
            assert_eq!(net(a).overlaps(&net(b)), want, "{a} {b}");
        }
    }

    #[test]
    fn hosts_are_numbered_from_the_network_address() {
        let n = net("10.213.128.8/29");
        assert_eq!(n.host(0), Some(Ipv4Addr::new(10, 213, 128, 8)));
        assert_eq!(n.host(2), Some(Ipv4Addr::new(10, 213, 128, 10)));
        assert_eq!(n.host(8), None);
    }

    #[test]
    fn pick_skips_taken_blocks_and_wraps() {
        let pool = net("10.213.128.0/28");
        let taken = [net("10.213.128.0/29")];
        assert_eq!(pick(pool, 29, &taken, 0), Some(net("10.213.128.8/29")));
        assert_eq!(pick(pool, 29, &taken, 1), Some(net("10.213.128.8/29")));
        assert_eq!(
            pick(pool, 29, &[net("10.213.128.8/29")], 1),
            Some(net("10.213.128.0/29"))
        );
        assert_eq!(pick(pool, 29, &[net("10.0.0.0/8")], 0), None);
        assert_eq!(pick(pool, 31, &[], 0), None);
        assert_eq!(pick(pool, 27, &[], 0), None);
    }

    #[test]
    fn free_host_skips_used_network_and_broadcast_addresses() {
        let n = net("10.213.1.0/29");
        let a = |last: u8| Ipv4Addr::new(10, 213, 1, last);
        assert_eq!(free_host(n, &[a(1)], 0), Some(a(2)));
        assert_eq!(free_host(n, &[a(1)], 5), Some(a(6)));
        assert_eq!(free_host(n, &[a(6)], 5), Some(a(1)));
        assert_eq!(free_host(n, &[a(1), a(2), a(3), a(4), a(5), a(6)], 3), None);
        assert_eq!(free_host(net("10.213.1.0/31"), &[], 0), None);
    }

    #[test]
    fn proc_routes_skip_the_default_route() {
        let text = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\
                    eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                    eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                    docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        if cfg!(target_endian = "little") {
            assert_eq!(parse_proc_routes(text), vec![net("192.0.2.0/24"), net("172.17.0.0/16")]);
        }
    }
}
