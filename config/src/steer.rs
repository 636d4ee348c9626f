//! The steered-interception addresses (`--steer IP`, `[proxy] steer`):
//! where the engine listens on ports 80 and 443 for connections that a
//! steered DNS answer sent there (docs/architecture.md, "Steered interception"). The unspecified address
//! (`0.0.0.0`, `::`) listens on every address and steers each client to the
//! address its question arrived on.

use super::layers::Given;
use super::{ConfigError, Origin};
use crackbox_wire::engine_config::SteeredPorts;
use std::net::IpAddr;

/// `--steered-ports HTTP,HTTPS` (flag only): two different ports, neither 0.
pub(super) fn ports(given: Option<&str>) -> Result<SteeredPorts, ConfigError> {
    let Some(text) = given else {
        return Ok(SteeredPorts::default());
    };
    let given = Given {
        origin: Origin::Flag("--steered-ports"),
        value: text.to_string(),
    };
    given.check(|text| {
        let ports: Vec<u16> = text
            .split(',')
            .map(|port| port.trim().parse::<u16>().ok().filter(|port| *port != 0))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("{text:?}: give two ports, HTTP,HTTPS"))?;
        match ports[..] {
            [http, https] if http != https => Ok(SteeredPorts { http, https }),
            _ => Err(format!("{text:?}: give two different ports, HTTP,HTTPS")),
        }
    })
}

/// Checks the steering addresses given: at most one IPv4 and one IPv6
/// address (a DNS answer names one per family), each one a host could
/// listen on, or the unspecified address of its family.
pub(super) fn addresses(given: Given<Vec<String>>) -> Result<Vec<IpAddr>, ConfigError> {
    given.check(|values| {
        let mut addresses: Vec<IpAddr> = Vec::new();
        for value in values {
            let ip: IpAddr = value
                .parse()
                .map_err(|_| format!("{value:?} is not an IP address (ports 80 and 443 are implied)"))?;
            if ip.is_multicast() || ip == IpAddr::V4(std::net::Ipv4Addr::BROADCAST) {
                return Err(format!(
                    "{value:?}: give the address clients are steered to (or 0.0.0.0 / :: for the one each \
                     asked on), not a multicast or broadcast one"
                ));
            }
            if addresses.iter().any(|seen| seen.is_ipv4() == ip.is_ipv4()) {
                return Err(format!("{value:?}: at most one IPv4 and one IPv6 address"));
            }
            addresses.push(ip);
        }
        Ok(addresses)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Origin;

    fn check(values: &[&str]) -> Result<Vec<IpAddr>, String> {
        let given = Given {
            origin: Origin::Flag("--steer"),
            value: values.iter().map(|v| v.to_string()).collect(),
        };
        addresses(given).map_err(|e| e.to_string())
    }

    #[test]
    fn addresses_table() {
        let ok: &[(&[&str], &[&str])] = &[
            (&[], &[]),
            (&["10.213.0.1"], &["10.213.0.1"]),
            (&["10.213.0.1", "fd00::1"], &["10.213.0.1", "fd00::1"]),
            (&["127.0.0.5"], &["127.0.0.5"]),
            (&["0.0.0.0"], &["0.0.0.0"]),
            (&["0.0.0.0", "::"], &["0.0.0.0", "::"]),
        ];
        for (input, want) in ok {
            let want: Vec<IpAddr> = want.iter().map(|w| w.parse().unwrap()).collect();
            assert_eq!(check(input), Ok(want), "{input:?}");
        }
        let bad: &[&[&str]] = &[
            &["10.0.0.1:80"],
            &["host.test"],
            &[""],
            &["224.0.0.1"],
            &["ff02::1"],
            &["255.255.255.255"],
            &["0.0.0.0", "10.0.0.1"],
            &["10.0.0.1", "10.0.0.2"],
            &["fd00::1", "fd00::2"],
        ];
        for input in bad {
            let err = check(input).unwrap_err();
            assert!(err.starts_with("flag --steer: "), "{input:?}: {err}");
        }
    }

    #[test]
    fn steered_ports_are_two_different_ports() {
        assert_eq!(ports(None).unwrap(), SteeredPorts::default());
        assert_eq!(
            ports(Some("8080,8443")).unwrap(),
            SteeredPorts {
                http: 8080,
                https: 8443
            }
        );
        for bad in ["80", "80,80", "0,443", "80,443,8", "x,443", ""] {
            let err = ports(Some(bad)).unwrap_err().to_string();
            assert!(err.starts_with("flag --steered-ports: "), "{bad:?}: {err}");
        }
    }
}
