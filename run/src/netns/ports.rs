//! The netns proxy's ports: free ones on the host end of the veth, so it
//! never collides with a listener of this host (a daemon on its defaults,
//! one with `--dns-listen :53 --steer 0.0.0.0`, a web server on `*:80`,
//! another run's proxy). The host end is this run's own address, so only a
//! listener on every address could hold a port there, and a port found free
//! by binding there is one no listener holds. The jail still finds DNS on
//! 53 and the steered listeners on 80 and 443 of the host end: a DNAT in
//! the jail's own netfilter table (gone with the namespace) sends them on
//! to the ports the proxy got.

use super::host_tools::{strings, tool};
use crate::error::RunError;
use crate::jail_proxy::ProxyPorts;
use crackbox_wire::engine_config::SteeredPorts;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};

/// How often a port free for TCP but not for UDP is passed over for DNS.
const DNS_TRIES: usize = 20;

/// Free ports on `host_end` for every listener of the proxy, each different.
pub fn free(host_end: Ipv4Addr) -> io::Result<ProxyPorts> {
    // Every socket is held until all are picked, so no two get one port.
    let mut held = Vec::new();
    let mut tcp = || -> io::Result<u16> {
        let listener = TcpListener::bind(SocketAddr::from((host_end, 0)))?;
        let port = listener.local_addr()?.port();
        held.push(listener);
        Ok(port)
    };
    let (forward, socks, admin, http, https) = (tcp()?, tcp()?, tcp()?, tcp()?, tcp()?);
    let mut dns = None;
    for _ in 0..DNS_TRIES {
        let port = tcp()?;
        if let Ok(udp) = UdpSocket::bind(SocketAddr::from((host_end, port))) {
            dns = Some(port);
            drop(udp);
            break;
        }
    }
    let dns = dns.ok_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no port free for both TCP and UDP"))?;
    Ok(ProxyPorts {
        forward,
        socks,
        admin,
        dns,
        steered: SteeredPorts { http, https },
    })
}

/// In namespace `namespace`: what the jail sends to port 53, 80 or 443 of
/// `host_end` goes to the proxy's DNS filter and steered listeners.
pub async fn redirect(namespace: &str, host_end: Ipv4Addr, ports: &ProxyPorts) -> Result<(), RunError> {
    let host = host_end.to_string();
    let rules = [
        ("udp", 53, ports.dns),
        ("tcp", 53, ports.dns),
        ("tcp", 80, ports.steered.http),
        ("tcp", 443, ports.steered.https),
    ];
    for (protocol, shown, real) in rules {
        let to = format!("{host}:{real}");
        let shown = shown.to_string();
        let rule = [
            "netns",
            "exec",
            namespace,
            "iptables",
            "-w",
            "-t",
            "nat",
            "-A",
            "OUTPUT",
            "-d",
            &host,
            "-p",
            protocol,
            "--dport",
            &shown,
            "-j",
            "DNAT",
            "--to-destination",
            &to,
        ];
        tool("ip", &strings(&rule)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_are_free_and_all_different() {
        let ports = free(Ipv4Addr::LOCALHOST).unwrap();
        let mut all = vec![ports.forward, ports.socks, ports.admin, ports.dns];
        all.extend(ports.steered.both());
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "{ports:?}");
        for port in all {
            TcpListener::bind(("127.0.0.1", port)).expect("still free");
        }
        UdpSocket::bind(("127.0.0.1", ports.dns)).expect("DNS free for UDP too");
    }
}
