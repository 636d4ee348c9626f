//! The TOML config file: its schema (unknown keys are errors) and where it is looked up.

use super::policy_table::PolicyTable;
use super::register::RegisterTable;
use super::ConfigError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The whole config file; every section and key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// `[proxy]`: listeners and threads.
    pub proxy: ProxySection,
    /// `[admin]`: the admin API secret, the console, the listener's names.
    pub admin: AdminSection,
    /// `[state]`: the registry state file.
    pub state: StateSection,
    /// `[policy]`: policy switches.
    pub policy: PolicySection,
    /// `[limits]`: resource limits.
    pub limits: LimitsSection,
    /// `[docker]`: the Docker label watcher.
    pub docker: DockerSection,
    /// `[fleet]`: the etcd cluster the policies live in.
    pub fleet: FleetSection,
    /// `[[register]]`: registrations made at start, as `--register` makes them.
    pub register: Vec<RegisterTable>,
    /// `[[policies]]`: named policies stored at start (`[policy]` is the
    /// daemon-wide switches' section).
    pub policies: Vec<PolicyTable>,
}

/// `[proxy]` keys.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxySection {
    /// Forward proxy listener.
    pub listen: Option<String>,
    /// Admin API listener.
    pub admin_listen: Option<String>,
    /// Transparent listener; "" disables.
    pub transparent_listen: Option<String>,
    /// SOCKS5 listener; "" or absent disables.
    pub socks_listen: Option<String>,
    /// DNS filter listener; "" or absent disables.
    pub dns_listen: Option<String>,
    /// DNS filter upstream resolver.
    pub dns_upstream: Option<String>,
    /// Steered interception addresses (ports 80 and 443 of each).
    pub steer: Option<Vec<String>>,
    /// Engine core threads.
    pub threads: Option<usize>,
    /// The engine's io driver: `auto`, `io_uring` or `epoll`.
    pub io_driver: Option<String>,
    /// Unix socket between control and engine.
    pub control_socket: Option<PathBuf>,
}

/// `[admin]` keys.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminSection {
    /// Bearer secret required for mutations.
    pub secret: Option<String>,
    /// Whether the admin listener serves the console.
    pub console: Option<bool>,
    /// Names the admin listener answers to besides its address and localhost.
    pub names: Option<Vec<String>>,
}

/// `[state]` keys.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateSection {
    /// State file path.
    pub path: Option<PathBuf>,
}

/// `[policy]` keys.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicySection {
    /// Let allowed names resolve to private addresses.
    pub allow_private_destinations: Option<bool>,
}

/// `[docker]` keys.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerSection {
    /// Register containers by their `io.crackbox.*` labels.
    pub enabled: Option<bool>,
    /// Networks to watch when crackbox runs on the host (not in a container).
    pub networks: Option<Vec<String>>,
    /// How long, in milliseconds, a new connection or DNS query from an
    /// unregistered address inside a watched network waits for its
    /// registration; 0 never waits.
    pub registration_hold_ms: Option<u64>,
}

/// `[fleet]` keys (docs/fleet.md).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetSection {
    /// etcd client URLs.
    pub etcd: Option<Vec<String>>,
    /// Key prefix.
    pub prefix: Option<String>,
    /// This node's name.
    pub node: Option<String>,
    /// etcd user.
    pub user: Option<String>,
    /// etcd password.
    pub password: Option<String>,
    /// CA certificate (PEM) for etcd's.
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM).
    pub cert: Option<PathBuf>,
    /// Client key (PEM).
    pub key: Option<PathBuf>,
    /// Seconds the lease of this node's pending requests lasts.
    pub lease_ttl: Option<u64>,
}

/// `[limits]` keys, as in `crackbox_wire::engine_config::Limits`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    /// Concurrent connections per source.
    pub max_connections_per_source: Option<usize>,
    /// Concurrent connections in total.
    pub max_connections_total: Option<usize>,
    /// Idle tunnel timeout in seconds; 0 never.
    pub tunnel_idle_timeout: Option<u64>,
    /// Denials logged per second per source.
    pub denial_logs_per_second: Option<u32>,
    /// Seconds a connection held in ask mode waits for a decision.
    pub ask_timeout: Option<u64>,
}

/// Where a config file is looked for when `--config` is not given, in order.
pub fn search_path(env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    match env("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(xdg) => paths.push(Path::new(&xdg).join("crackbox/crackbox.toml")),
        None => {
            if let Some(home) = env("HOME").filter(|v| !v.is_empty()) {
                paths.push(Path::new(&home).join(".config/crackbox/crackbox.toml"));
            }
        }
    }
    if let Some(home) = env("HOME").filter(|v| !v.is_empty()) {
        paths.push(Path::new(&home).join(".crackboxrc"));
    }
    paths.push(PathBuf::from("/etc/crackbox.toml"));
    paths
}

/// Loads `explicit` (which must exist) or the first existing file of the
/// search path; no file at all is an empty config.
pub(super) fn load(
    explicit: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(PathBuf, FileConfig)>, ConfigError> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => match search_path(env).into_iter().find(|p| p.exists()) {
            Some(path) => path,
            None => return Ok(None),
        },
    };
    let text = std::fs::read_to_string(&path).map_err(|cause| ConfigError::Read {
        path: path.clone(),
        cause,
    })?;
    let config = parse(&text).map_err(|message| ConfigError::Parse {
        path: path.clone(),
        message,
    })?;
    Ok(Some((path, config)))
}

/// The mode of the config file at `path` when it sets a non-empty
/// `[admin] secret` and group or others may read it (mode & 0o044).
pub(super) fn readable_secret(path: &Path, config: &FileConfig) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    config.admin.secret.as_ref().filter(|secret| !secret.is_empty())?;
    let mode = std::fs::metadata(path).ok()?.mode() & 0o7777;
    (mode & 0o044 != 0).then_some(mode)
}

/// Parses config text; the error is one line naming the offending key by
/// its line (see `crate::parse_error`, which never quotes a credential).
pub(super) fn parse(text: &str) -> Result<FileConfig, String> {
    toml::from_str(text).map_err(|err: toml::de::Error| {
        crate::parse_error::describe(text, err.span().map(|span| span.start), err.message())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let cases = [
            ("[proxy]\nlisten = \"0.0.0.0:1\"\nlistne = \"x\"\n", "listne", "line 3"),
            ("[proxi]\nlisten = \"x\"\n", "proxi", "line 1"),
            ("[limits]\nmax_tunnels = 3\n", "max_tunnels", "line 2"),
            ("top = 1\n", "top", "line 1"),
        ];
        for (text, key, line) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(key), "{err:?} should name {key}");
            assert!(err.starts_with(line), "{err:?} should start with {line}");
        }
    }

    #[test]
    fn wrong_types_and_repeated_keys_quote_their_line() {
        let long = format!("[proxy]\nthreads = \"{}\"\n", "a".repeat(200));
        let cases = [
            (
                "[proxy]\nthreads = \"four\"\n",
                "line 2 (threads = \"four\"): invalid type: string \"four\", expected usize",
            ),
            (
                "[proxy]\nthreads = 2\nthreads = 3\n",
                "line 3 (threads = 3): duplicate key",
            ),
            (
                "[proxy]\nlisten = \"\u{1b}[2J\" x\n",
                "line 2 (listen = \"\\u{1b}[2J\" x): ",
            ),
            (&long, "line 2 (threads = \"aaaa"),
        ];
        for (text, want) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        }
        assert!(parse(&long).unwrap_err().contains("aaa...): "));
    }

    #[test]
    fn wrong_types_are_errors() {
        assert!(parse("[proxy]\nthreads = \"four\"\n").is_err());
        assert!(parse("[policy]\nallow_private_destinations = 1\n").is_err());
        assert!(parse("[proxy]\nlisten = [\n").is_err());
    }

    #[test]
    fn every_documented_key_parses() {
        let text = r#"
            [proxy]
            listen = "0.0.0.0:3128"
            admin_listen = "127.0.0.1:3129"
            transparent_listen = ""
            socks_listen = "127.0.0.1:1080"
            dns_listen = "127.0.0.1:5353"
            dns_upstream = "127.0.0.1:53"
            steer = ["10.213.0.1", "fd00::1"]
            threads = 2
            io_driver = "epoll"
            control_socket = "/run/crackbox/control.sock"
            [admin]
            secret = "s"
            [state]
            path = "/var/lib/crackbox/state.json"
            [policy]
            allow_private_destinations = true
            [limits]
            max_connections_per_source = 10
            max_connections_total = 100
            tunnel_idle_timeout = 0
            denial_logs_per_second = 1
            [docker]
            enabled = true
            networks = ["agents"]
            registration_hold_ms = 500
            [[register]]
            ip = "10.0.0.2"
            id = "agent"
            allow = ["@pypi", "github.com"]
            allow_file = "agent.allow"
            mode = "report"
            bandwidth = "10MiB/s"
            [[register]]
            ip = "10.0.0.3"
            id = "deny-all"
        "#;
        let config = parse(text).unwrap();
        assert_eq!(config.proxy.transparent_listen.as_deref(), Some(""));
        assert_eq!(config.proxy.threads, Some(2));
        assert_eq!(config.proxy.socks_listen.as_deref(), Some("127.0.0.1:1080"));
        assert_eq!(config.proxy.steer.map(|s| s.len()), Some(2));
        assert_eq!(config.limits.tunnel_idle_timeout, Some(0));
        assert_eq!(config.policy.allow_private_destinations, Some(true));
        assert_eq!(config.proxy.io_driver.as_deref(), Some("epoll"));
        assert_eq!(config.docker.registration_hold_ms, Some(500));
        let [agent, deny_all] = &config.register[..] else {
            panic!("{:?}", config.register);
        };
        assert_eq!(
            (agent.allow.len(), agent.mode.as_deref(), agent.bandwidth.as_deref()),
            (2, Some("report"), Some("10MiB/s"))
        );
        assert_eq!(agent.allow_file.as_deref(), Some(Path::new("agent.allow")));
        assert!(deny_all.allow.is_empty() && deny_all.allow_file.is_none() && deny_all.mode.is_none());
        let err = parse("[[register]]\nip = \"10.0.0.2\"\nid = \"a\"\nallowlist = []\n").unwrap_err();
        assert!(err.starts_with("line 4") && err.contains("allowlist"), "{err}");
        let err = parse("[[register]]\nid = \"a\"\n").unwrap_err();
        assert!(err.contains("ip"), "{err}");
    }

    #[test]
    fn search_order_prefers_xdg_then_rc_then_etc() {
        let env = |name: &str| match name {
            "XDG_CONFIG_HOME" => Some("/x".to_string()),
            "HOME" => Some("/h".to_string()),
            _ => None,
        };
        let paths = search_path(&env);
        let want = ["/x/crackbox/crackbox.toml", "/h/.crackboxrc", "/etc/crackbox.toml"];
        assert_eq!(paths, want.map(PathBuf::from));
    }
}
