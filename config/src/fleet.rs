//! The fleet settings (docs/fleet.md): the etcd cluster the policies live
//! in (`--fleet-etcd URL[,URL...]`), the key prefix, this node's name, and
//! etcd's user and TLS options, each resolved like every setting (flag >
//! env > `[fleet]` in the config file). Without endpoints there is no
//! fleet: policies are this host's own.

use super::file::FleetSection;
use super::layers::{list, number, text, within, Key, Sources};
use super::{ConfigError, Origin, ProxyArgs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The key prefix when none is given.
pub const DEFAULT_FLEET_PREFIX: &str = "/crackbox/";
/// The pending requests' lease when none is given.
const DEFAULT_LEASE_TTL_SECS: u64 = 10;

const ETCD: Key = Key {
    flag: "--fleet-etcd",
    env: "CRACKBOX_FLEET_ETCD",
    file: "fleet.etcd",
};
const PREFIX: Key = Key {
    flag: "--fleet-prefix",
    env: "CRACKBOX_FLEET_PREFIX",
    file: "fleet.prefix",
};
const NODE: Key = Key {
    flag: "--fleet-node",
    env: "CRACKBOX_FLEET_NODE",
    file: "fleet.node",
};
const USER: Key = Key {
    flag: "--fleet-user",
    env: "CRACKBOX_FLEET_USER",
    file: "fleet.user",
};
const PASSWORD: Key = Key {
    flag: "",
    env: "CRACKBOX_FLEET_PASSWORD",
    file: "fleet.password",
};
const CA: Key = Key {
    flag: "--fleet-ca",
    env: "CRACKBOX_FLEET_CA",
    file: "fleet.ca",
};
const CERT: Key = Key {
    flag: "--fleet-cert",
    env: "CRACKBOX_FLEET_CERT",
    file: "fleet.cert",
};
const KEY: Key = Key {
    flag: "--fleet-key",
    env: "CRACKBOX_FLEET_KEY",
    file: "fleet.key",
};
const LEASE: Key = Key {
    flag: "--fleet-lease-ttl",
    env: "CRACKBOX_FLEET_LEASE_TTL",
    file: "fleet.lease_ttl",
};

/// How this node reaches the fleet's etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    /// etcd client URLs (`http://HOST:PORT` or `https://HOST:PORT`).
    pub endpoints: Vec<String>,
    /// Every key crackbox reads or writes starts with it (ends with `/`).
    pub prefix: String,
    /// This node's name in the fleet (its pending requests' keys).
    pub node: String,
    /// etcd user and password, when etcd authenticates.
    pub user: Option<(String, String)>,
    /// A CA certificate (PEM) to check etcd's with; `https://` endpoints.
    pub ca: Option<PathBuf>,
    /// This node's client certificate and key (PEM), when etcd asks for one.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The lease this node's pending requests are published under.
    pub lease_ttl: Duration,
}

/// The fleet `args` and `file` ask for, looked up in `sources`; `None`
/// without endpoints. `hostname` names the node when nothing else does.
pub(crate) fn resolve(
    sources: &mut Sources<'_>,
    args: &ProxyArgs,
    file: &FleetSection,
    hostname: &dyn Fn() -> Option<String>,
) -> Result<Option<Fleet>, ConfigError> {
    let endpoints = sources.pick(ETCD, non_empty(&args.fleet_etcd), file.etcd.clone(), list)?;
    let Some(endpoints) = endpoints else {
        return refuse_fleet_flags(args).map(|()| None);
    };
    let endpoints = endpoints.check(|endpoints| match endpoints.iter().find(|url| !valid_endpoint(url)) {
        Some(bad) => Err(format!(
            "{bad:?} is not an etcd URL (want http://HOST:PORT or https://HOST:PORT)"
        )),
        None if endpoints.is_empty() => Err("no etcd endpoint".into()),
        None => Ok(endpoints),
    })?;
    let prefix = sources.pick(PREFIX, args.fleet_prefix.clone(), file.prefix.clone(), text)?;
    let prefix = match prefix {
        Some(given) => given.check(|prefix| match prefix.is_empty() {
            true => Err("must not be empty".into()),
            false if prefix.ends_with('/') => Ok(prefix),
            false => Ok(format!("{prefix}/")),
        })?,
        None => DEFAULT_FLEET_PREFIX.to_string(),
    };
    let node = sources.pick(NODE, args.fleet_node.clone(), file.node.clone(), text)?;
    let node = match node {
        Some(given) => given.check(|node| check_node(&node).map(|()| node))?,
        None => hostname()
            .filter(|name| check_node(name).is_ok())
            .ok_or(ConfigError::Invalid {
                origin: Origin::Flag(NODE.flag),
                message: "the host name is no usable node name: give --fleet-node NAME".into(),
            })?,
    };
    let user = sources.pick(USER, args.fleet_user.clone(), file.user.clone(), text)?;
    let password = sources.pick(PASSWORD, None, file.password.clone(), text)?;
    let user = match (user, password) {
        (Some(user), Some(password)) => Some((user.value, password.value)),
        (None, None) => None,
        (Some(given), None) => {
            return Err(ConfigError::Invalid {
                origin: given.origin,
                message: "an etcd user needs CRACKBOX_FLEET_PASSWORD (or [fleet] password)".into(),
            })
        }
        (None, Some(given)) => {
            return Err(ConfigError::Invalid {
                origin: given.origin,
                message: "an etcd password needs --fleet-user".into(),
            })
        }
    };
    // A certificate or key that cannot be read is refused at start, not
    // found missing at the first connection to etcd (which is retried).
    let path = |key, flag: &Option<PathBuf>, file: &Option<PathBuf>, sources: &mut Sources<'_>| {
        let Some(given) = sources.pick(key, flag.clone(), file.clone(), |value| Ok(PathBuf::from(value)))? else {
            return Ok(None);
        };
        match std::fs::File::open(&given.value) {
            Ok(_) => Ok(Some(given.value)),
            Err(err) => Err(ConfigError::Invalid {
                origin: given.origin,
                message: format!("cannot read {}: {err}", given.value.display()),
            }),
        }
    };
    let ca = path(CA, &args.fleet_ca, &file.ca, sources)?;
    let cert = path(CERT, &args.fleet_cert, &file.cert, sources)?;
    let key = path(KEY, &args.fleet_key, &file.key, sources)?;
    let identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(ConfigError::Invalid {
                origin: Origin::Flag(CERT.flag),
                message: "a client certificate needs its key: give both --fleet-cert and --fleet-key".into(),
            })
        }
    };
    let lease = sources.pick(LEASE, args.fleet_lease_ttl, file.lease_ttl, number)?;
    let lease_ttl = match lease {
        Some(given) => Duration::from_secs(given.check(within(2..=3600))?),
        None => Duration::from_secs(DEFAULT_LEASE_TTL_SECS),
    };
    Ok(Some(Fleet {
        endpoints: endpoints
            .into_iter()
            .map(|url| url.trim_end_matches('/').to_string())
            .collect(),
        prefix,
        node,
        user,
        ca,
        identity,
        lease_ttl,
    }))
}

/// Refuses a `--fleet-*` flag given without etcd endpoints: it would do
/// nothing, and the daemon would not be the fleet node its command line
/// asks for. The same settings from the environment or the config file are
/// let be: a deployment may set them for every node, fleet or not
/// (deploy/kubernetes/crackbox.yaml sets `CRACKBOX_FLEET_NODE` always).
fn refuse_fleet_flags(args: &ProxyArgs) -> Result<(), ConfigError> {
    let given = [
        (PREFIX, args.fleet_prefix.is_some()),
        (NODE, args.fleet_node.is_some()),
        (USER, args.fleet_user.is_some()),
        (CA, args.fleet_ca.is_some()),
        (CERT, args.fleet_cert.is_some()),
        (KEY, args.fleet_key.is_some()),
        (LEASE, args.fleet_lease_ttl.is_some()),
    ];
    match given.into_iter().find(|(_, given)| *given) {
        Some((key, _)) => Err(ConfigError::Invalid {
            origin: Origin::Flag(key.flag),
            message: format!(
                "there is no fleet without --fleet-etcd ({}, [fleet] etcd): give the etcd URLs too",
                ETCD.env
            ),
        }),
        None => Ok(()),
    }
}

/// `values`, or `None` when there are none (a repeatable flag not given).
fn non_empty(values: &[String]) -> Option<Vec<String>> {
    (!values.is_empty()).then(|| values.to_vec())
}

fn valid_endpoint(url: &str) -> bool {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    rest.and_then(|rest| rest.trim_end_matches('/').rsplit_once(':'))
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0))
}

/// A node name is one etcd key segment: 1 to 63 of `A-Za-z0-9._-`.
fn check_node(node: &str) -> Result<(), String> {
    let valid = !node.is_empty()
        && node.len() <= 63
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    match valid {
        true => Ok(()),
        false => Err(format!(
            "{node:?} is not a node name: 1 to 63 of A-Z, a-z, 0-9, '.', '_', '-'"
        )),
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`).
pub(crate) fn hostname() -> Option<String> {
    let name = std::fs::read_to_string(Path::new("/proc/sys/kernel/hostname")).ok()?;
    Some(name.trim().to_string()).filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_node_names_table() {
        for (url, valid) in [
            ("http://127.0.0.1:2379", true),
            ("https://etcd-0.etcd:2379/", true),
            ("http://[::1]:2379", true),
            ("127.0.0.1:2379", false),
            ("http://127.0.0.1", false),
            ("http://:2379", false),
            ("http://h:0", false),
        ] {
            assert_eq!(valid_endpoint(url), valid, "{url}");
        }
        for (node, valid) in [
            ("node-1", true),
            ("a.b_c", true),
            ("", false),
            ("a/b", false),
            ("a b", false),
        ] {
            assert_eq!(check_node(node).is_ok(), valid, "{node:?}");
        }
    }
}
