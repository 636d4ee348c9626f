//! The DNS filter's default upstream: the first `nameserver` line of
//! /etc/resolv.conf, which the settings resolution reads (the engine gets
//! the address in its settings and reads no file).

use std::net::{IpAddr, SocketAddr};

const DNS_PORT: u16 = 53;

/// The first nameserver of resolv.conf text, on port 53; IPv6 zone suffixes (`fe80::1%eth0`) are not
/// usable as a socket address and are skipped.
pub(crate) fn first_nameserver(text: &str) -> Option<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next()? == "nameserver").then_some(words.next()?)
        })
        .find_map(|addr| addr.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, DNS_PORT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_usable_nameserver() {
        let cases: &[(&str, Option<&str>)] = &[
            ("nameserver 127.0.0.53\noptions edns0\n", Some("127.0.0.53:53")),
            ("# nameserver 10.0.0.1\nsearch lan\nnameserver ::1\n", Some("[::1]:53")),
            ("nameserver fe80::1%eth0\nnameserver 127.0.0.2\n", Some("127.0.0.2:53")),
            (
                "nameserver\tnot-an-ip\n  nameserver   127.0.0.3  \n",
                Some("127.0.0.3:53"),
            ),
            ("search example\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(first_nameserver(text), want.map(|w| w.parse().unwrap()), "{text:?}");
        }
    }
}
