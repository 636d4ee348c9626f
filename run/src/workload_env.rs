//! The environment a jailed workload gets, built here only (both backends
//! take it as it is): every proxy variable common clients read, pointing
//! at the jail's proxy, and no bypass list; and, steered, a resolv.conf
//! naming the proxy's DNS filter only. A docker workload gets nothing else
//! from crackbox's environment; a netns command inherits the caller's.

use std::net::{Ipv4Addr, SocketAddr};

/// A resolv.conf whose only resolver is crackbox's DNS filter at `nameserver`.
pub fn resolv_conf(nameserver: Ipv4Addr) -> String {
    format!("# crackbox: names are resolved by crackbox only\nnameserver {nameserver}\noptions timeout:2 attempts:2\n")
}

/// The proxy variables common clients read (curl, Python, Node, Go, ...).
const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The variables of a workload whose proxy listens at `proxy`.
pub fn variables(proxy: SocketAddr) -> Vec<(String, String)> {
    let url = format!("http://{proxy}");
    let mut vars: Vec<(String, String)> = PROXY_VARIABLES
        .iter()
        .map(|name| (name.to_string(), url.clone()))
        .collect();
    // An empty bypass list: an inherited NO_PROXY=* would otherwise send
    // clients straight at a network that does not route anywhere.
    vars.push(("NO_PROXY".into(), String::new()));
    vars.push(("no_proxy".into(), String::new()));
    // Node >= 22.14 only honours the proxy variables when told to.
    vars.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_proxy_variable_points_at_the_proxy_and_no_proxy_is_empty() {
        let vars = variables(SocketAddr::from(([10, 213, 128, 2], 3128)));
        let get = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        for name in PROXY_VARIABLES {
            assert_eq!(get(name), Some("http://10.213.128.2:3128"), "{name}");
        }
        assert_eq!(get("NO_PROXY"), Some(""));
        assert_eq!(get("no_proxy"), Some(""));
        assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
    }

    #[test]
    fn resolver_is_crackbox_only() {
        let text = resolv_conf(Ipv4Addr::new(10, 213, 0, 1));
        let nameservers: Vec<&str> = text.lines().filter(|l| l.starts_with("nameserver")).collect();
        assert_eq!(nameservers, vec!["nameserver 10.213.0.1"]);
        assert!(!text.contains("search"), "{text}");
    }
}
