//! The environment a jailed workload gets, built here only (both backends
//! take it as it is): the proxy variables common clients read, pointing
//! at the jail's proxy, and no bypass list; and, steered, a resolv.conf
//! naming the proxy's DNS filter only. A docker workload gets nothing else
//! from crackbox's environment; a netns command inherits the caller's but
//! for its `CRACKBOX_*` variables ([`crackbox_variables`]: the host daemon's
//! admin secret is one; docs/run.md, "Flags and behaviour").
//!
//! Which variables, as measured with real clients (docs/run.md, "SOCKS5 and raw
//! TCP"): `HTTP_PROXY` and `HTTPS_PROXY` (and lower case) name the HTTP
//! proxy, which every client that reads a proxy variable speaks; `ALL_PROXY`
//! names the SOCKS5 listener (`socks5h://`, so crackbox resolves), for what
//! reads only that. Never `ALL_PROXY` alone: pip and requests then fail.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};

/// A resolv.conf whose only resolver is crackbox's DNS filter at `nameserver`.
pub fn resolv_conf(nameserver: Ipv4Addr) -> String {
    format!("# crackbox: names are resolved by crackbox only\nnameserver {nameserver}\noptions timeout:2 attempts:2\n")
}

/// A resolv.conf naming a resolver where nothing listens (`--no-steer`, or
/// a daemon that does not steer): no name is ever resolved in the jail.
pub const NO_RESOLVER: &str =
    "# crackbox: names are resolved by crackbox only\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n";

/// The hosts file of a jail: loopback names only.
pub const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";

/// The HTTP proxy variables common clients read (curl, Python, Node, Go, ...).
const HTTP_PROXY_VARIABLES: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];
/// The variables that name a proxy for every other protocol (here: SOCKS5).
const ALL_PROXY_VARIABLES: [&str; 2] = ["ALL_PROXY", "all_proxy"];

/// Where the workload's proxy listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// The HTTP proxy (forward and `CONNECT`).
    pub forward: SocketAddr,
    /// The SOCKS5 listener, when the proxy has one.
    pub socks: Option<SocketAddr>,
}

/// The names of this process's `CRACKBOX_*` variables: crackbox's own
/// settings and credentials (`CRACKBOX_ADMIN_SECRET`), which neither a
/// netns command nor the run's proxy inherits.
pub fn crackbox_variables() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| is_crackbox_variable(name))
        .collect()
}

/// Whether `name` is one of crackbox's own variables (`CRACKBOX_*`).
fn is_crackbox_variable(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b"CRACKBOX_")
}

/// The variables of a workload whose proxy listens at `at`.
pub fn variables(at: Endpoints) -> Vec<(String, String)> {
    let http = format!("http://{}", at.forward);
    let mut vars: Vec<(String, String)> = HTTP_PROXY_VARIABLES
        .iter()
        .map(|name| (name.to_string(), http.clone()))
        .collect();
    if let Some(socks) = at.socks {
        let url = format!("socks5h://{socks}");
        vars.extend(ALL_PROXY_VARIABLES.iter().map(|name| (name.to_string(), url.clone())));
    }
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
    fn http_variables_name_the_http_proxy_all_proxy_the_socks_listener_if_any() {
        let forward = SocketAddr::from(([10, 213, 128, 2], 3128));
        let socks = SocketAddr::from(([10, 213, 128, 2], 1080));
        for socks in [Some(socks), None] {
            let vars = variables(Endpoints { forward, socks });
            let get = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
            for name in HTTP_PROXY_VARIABLES {
                assert_eq!(get(name), Some("http://10.213.128.2:3128"), "{name}");
            }
            for name in ALL_PROXY_VARIABLES {
                let want = socks.map(|_| "socks5h://10.213.128.2:1080");
                assert_eq!(get(name), want, "{name}");
            }
            assert_eq!(get("NO_PROXY"), Some(""));
            assert_eq!(get("no_proxy"), Some(""));
            assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
            let names: std::collections::HashSet<&str> = vars.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names.len(), vars.len(), "each variable once");
        }
    }

    #[test]
    fn crackbox_variables_are_those_named_crackbox_underscore() {
        let name = |text: &str| is_crackbox_variable(std::ffi::OsStr::new(text));
        assert!(name("CRACKBOX_ADMIN_SECRET") && name("CRACKBOX_LOG") && name("CRACKBOX_"));
        assert!(!name("KEEP_ME") && !name("crackbox_x") && !name("XCRACKBOX_A") && !name("CRACKBOX"));
    }

    #[test]
    fn resolver_is_crackbox_only() {
        let text = resolv_conf(Ipv4Addr::new(10, 213, 0, 1));
        let nameservers: Vec<&str> = text.lines().filter(|l| l.starts_with("nameserver")).collect();
        assert_eq!(nameservers, vec!["nameserver 10.213.0.1"]);
        assert!(!text.contains("search"), "{text}");
    }
}
