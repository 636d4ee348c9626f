//! The steered-interception addresses (`--steer IP`, `[proxy] steer`):
//! where the engine listens on ports 80 and 443 for connections that a
//! steered DNS answer sent there (docs/architecture.md, "Steered interception"). The unspecified address
//! (`0.0.0.0`, `::`) listens on every address and steers each client to the
//! address its question arrived on.

use super::{ConfigError, Origin};
use std::net::IpAddr;
use std::path::PathBuf;

/// Resolves the steering addresses: the flags if any were given, otherwise
/// the config file's list. At most one IPv4 and one IPv6 address (a DNS
/// answer names one per family), each one a host could listen on, or the
/// unspecified address of its family.
pub(super) fn resolve(
    flags: &[String],
    file: Option<&[String]>,
    path: Option<&PathBuf>,
) -> Result<Vec<IpAddr>, ConfigError> {
    let (origin, values) = match (flags, file, path) {
        ([], Some(values), Some(path)) => (Origin::File(path.clone(), "proxy.steer"), values),
        (flags, _, _) => (Origin::Flag("--steer"), flags),
    };
    let invalid = |message: String| ConfigError::Invalid {
        origin: origin.clone(),
        message,
    };
    let mut addresses: Vec<IpAddr> = Vec::new();
    for value in values {
        let ip: IpAddr = value
            .parse()
            .map_err(|_| invalid(format!("{value:?} is not an IP address (ports 80 and 443 are implied)")))?;
        if ip.is_multicast() || ip == IpAddr::V4(std::net::Ipv4Addr::BROADCAST) {
            return Err(invalid(format!(
                "{value:?}: give the address clients are steered to (or 0.0.0.0 / :: for the one each asked on), \
                 not a multicast or broadcast one"
            )));
        }
        if addresses.iter().any(|seen| seen.is_ipv4() == ip.is_ipv4()) {
            return Err(invalid(format!("{value:?}: at most one IPv4 and one IPv6 address")));
        }
        addresses.push(ip);
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
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
            let got = resolve(&strings(input), None, None).unwrap();
            let want: Vec<IpAddr> = want.iter().map(|w| w.parse().unwrap()).collect();
            assert_eq!(got, want, "{input:?}");
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
            let err = resolve(&strings(input), None, None).unwrap_err().to_string();
            assert!(err.starts_with("flag --steer: "), "{input:?}: {err}");
        }
    }

    #[test]
    fn flags_win_over_the_file_and_errors_name_the_key() {
        let path = PathBuf::from("/etc/crackbox.toml");
        let file = strings(&["10.0.0.9"]);
        let from_flag = resolve(&strings(&["10.0.0.1"]), Some(&file), Some(&path)).unwrap();
        assert_eq!(from_flag, vec!["10.0.0.1".parse::<IpAddr>().unwrap()]);
        let from_file = resolve(&[], Some(&file), Some(&path)).unwrap();
        assert_eq!(from_file, vec!["10.0.0.9".parse::<IpAddr>().unwrap()]);
        let err = resolve(&[], Some(&strings(&["nope"])), Some(&path)).unwrap_err();
        assert!(
            err.to_string().starts_with("/etc/crackbox.toml: proxy.steer: "),
            "{err}"
        );
    }
}
