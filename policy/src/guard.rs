//! The destination guard: which resolved addresses may be dialled.
//!
//! Applied to the exact address about to be dialled (no second resolution,
//! so no DNS-rebinding window). Private, loopback and similar addresses are
//! refused unless the operator opted in or the client named that very IP
//! literal; crackbox's own listeners are refused always.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What the guard says about one candidate address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// May be dialled.
    Dial,
    /// A private, loopback, link-local, multicast or similar address.
    Private,
    /// One of crackbox's own listening sockets.
    OwnListener,
}

/// The guard's configuration, shared by all threads.
#[derive(Debug, Clone)]
pub struct DestinationGuard {
    allow_private: bool,
    own_listeners: Vec<SocketAddr>,
}

impl DestinationGuard {
    /// A guard refusing `own_listeners` always and private addresses unless
    /// `allow_private`.
    pub fn new(allow_private: bool, own_listeners: Vec<SocketAddr>) -> Self {
        DestinationGuard {
            allow_private,
            own_listeners,
        }
    }

    /// Judges `addr`. `literal` is true when the allowlist entry that matched
    /// is this very IP literal; `is_local` says whether an address belongs to
    /// this host (for listeners bound to a wildcard address).
    pub fn judge(&self, addr: SocketAddr, literal: bool, is_local: impl Fn(IpAddr) -> bool) -> Verdict {
        let ip = canonical(addr.ip());
        // Linux connects a dial to the unspecified address (`0.0.0.0`, `::`)
        // to this host, so it reaches whatever listens on that port here,
        // whichever address the listener is bound to.
        let own = self.own_listeners.iter().any(|listener| {
            listener.port() == addr.port()
                && (ip.is_unspecified()
                    || canonical(listener.ip()) == ip
                    || (listener.ip().is_unspecified() && (ip.is_loopback() || is_local(ip))))
        });
        if own {
            Verdict::OwnListener
        } else if !literal && !self.allow_private && is_private(ip) {
            Verdict::Private
        } else {
            Verdict::Dial
        }
    }

    /// True when some listener is bound to a wildcard address, so judging
    /// needs the host's local addresses.
    pub fn needs_local_addresses(&self) -> bool {
        self.own_listeners.iter().any(|l| l.ip().is_unspecified())
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    crate::canonical_ip(ip)
}

/// Addresses no allowed name may resolve to (without the opt-in).
pub fn is_private(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => is_private_v6(v6),
    }
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_private() // RFC 1918
        || ip.is_link_local() // RFC 3927, 169.254/16
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0 // RFC 1122 "this network"
        || (a == 100 && (64..128).contains(&b)) // RFC 6598 CGNAT, 100.64/10
        || a >= 240 // RFC 1112 reserved
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // RFC 4193 unique local, fc00::/7
        || (first & 0xffc0) == 0xfe80 // RFC 4291 link-local, fe80::/10
        || (first & 0xffc0) == 0xfec0 // RFC 3879 deprecated site-local, fec0::/10
        || ip.to_ipv4().is_some_and(|v4| ip.segments()[..6] == [0; 6] && is_private_v4(v4))
    // IPv4-compatible
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_local(_: IpAddr) -> bool {
        false
    }

    #[test]
    fn private_table() {
        let private = [
            "127.0.0.1",
            "127.9.9.9",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "0.1.2.3",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
        ];
        let public = [
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "203.0.113.7",
            "2001:db8::1",
            "2606:4700::1111",
        ];
        for ip in private {
            assert!(is_private(ip.parse().unwrap()), "{ip} should be private");
        }
        for ip in public {
            assert!(!is_private(ip.parse().unwrap()), "{ip} should be public");
        }
    }

    #[test]
    fn guard_verdicts() {
        let admin: SocketAddr = "127.0.0.1:3129".parse().unwrap();
        let proxy: SocketAddr = "0.0.0.0:3128".parse().unwrap();
        let strict = DestinationGuard::new(false, vec![admin, proxy]);
        let open = DestinationGuard::new(true, vec![admin, proxy]);
        let host_ip: IpAddr = "198.51.100.5".parse().unwrap();
        let is_host = |ip: IpAddr| ip == host_ip;
        let cases = [
            (&strict, "127.0.0.1:8080", false, Verdict::Private),
            (&strict, "127.0.0.1:8080", true, Verdict::Dial),
            (&open, "127.0.0.1:8080", false, Verdict::Dial),
            (&open, "127.0.0.1:3129", false, Verdict::OwnListener),
            (&open, "127.0.0.1:3129", true, Verdict::OwnListener),
            (&open, "127.0.0.2:3128", false, Verdict::OwnListener),
            (&open, "[::ffff:127.0.0.1]:3128", false, Verdict::OwnListener),
            (&open, "198.51.100.5:3128", false, Verdict::OwnListener),
            (&open, "198.51.100.6:3128", false, Verdict::Dial),
            (&strict, "203.0.113.9:443", false, Verdict::Dial),
            // A dial to the unspecified address reaches this host: a listener
            // bound to one loopback address is reached through it too.
            (&open, "0.0.0.0:3129", false, Verdict::OwnListener),
            (&strict, "0.0.0.0:3129", true, Verdict::OwnListener),
            (&open, "[::]:3129", false, Verdict::OwnListener),
            (&open, "[::ffff:0.0.0.0]:3129", true, Verdict::OwnListener),
            (&open, "0.0.0.0:8080", false, Verdict::Dial),
            (&strict, "0.0.0.0:8080", false, Verdict::Private),
        ];
        for (guard, addr, literal, want) in cases {
            assert_eq!(
                guard.judge(addr.parse().unwrap(), literal, is_host),
                want,
                "{addr} literal={literal}"
            );
        }
        assert_eq!(
            strict.judge("127.0.0.1:3129".parse().unwrap(), true, no_local),
            Verdict::OwnListener
        );
    }
}
