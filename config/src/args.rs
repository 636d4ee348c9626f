//! The command-line flags shared by `proxy serve`, `proxy control` and `proxy engine`.
//!
//! The field docs are clap's `--help` text, where `[proxy] listen` names a
//! config file key (section and key), not a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

use clap::builder::{OsStringValueParser, TypedValueParser};
use std::path::PathBuf;

/// Options shared by `proxy serve`, `proxy control` and `proxy engine`.
///
/// Flags override the environment, which overrides the config file, which
/// overrides the defaults; every setting of the engine can be given all
/// three ways.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ProxyArgs {
    /// TOML config file (must exist). Without it the first existing of
    /// $XDG_CONFIG_HOME/crackbox/crackbox.toml, ~/.crackboxrc, /etc/crackbox.toml is read.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Forward proxy listener [env CRACKBOX_PROXY_ADDR, [proxy] listen; default 0.0.0.0:3128].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Admin API listener; without a secret `:PORT` means 127.0.0.1:PORT [env CRACKBOX_ADMIN_ADDR,
    /// [proxy] admin_listen; default 127.0.0.1:3129].
    #[arg(long = "admin", visible_alias = "admin-listen", value_name = "ADDR")]
    pub admin_listen: Option<String>,

    /// Serve the operator console on the admin listener (GET /): on or off [env
    /// CRACKBOX_CONSOLE, [admin] console; default on].
    #[arg(long, value_name = "on|off", value_parser = crate::args::on_off)]
    pub console: Option<bool>,

    /// A name the admin listener answers to besides its address and localhost (a
    /// request for any other Host is refused, against DNS rebinding); repeatable
    /// [env CRACKBOX_ADMIN_NAMES (comma-separated), [admin] names].
    #[arg(long = "admin-name", value_name = "NAME")]
    pub admin_names: Vec<String>,

    /// Transparent listener, "" disables [env CRACKBOX_TRANSPARENT_ADDR, [proxy]
    /// transparent_listen; default 0.0.0.0:3127].
    #[arg(long = "transparent", visible_alias = "transparent-listen", value_name = "ADDR")]
    pub transparent_listen: Option<String>,

    /// SOCKS5 listener (RFC 1928 CONNECT, decided like an HTTP CONNECT) [env
    /// CRACKBOX_SOCKS_ADDR, [proxy] socks_listen; default off].
    #[arg(long = "socks", visible_alias = "socks-listen", value_name = "ADDR")]
    pub socks_listen: Option<String>,

    /// DNS filter listener, UDP and TCP [env CRACKBOX_DNS_LISTEN, [proxy] dns_listen; default off].
    #[arg(long, visible_alias = "dns", value_name = "ADDR")]
    pub dns_listen: Option<String>,

    /// Upstream resolver for the DNS filter [env CRACKBOX_DNS_UPSTREAM, [proxy] dns_upstream;
    /// default: first nameserver in /etc/resolv.conf].
    #[arg(long, value_name = "ADDR")]
    pub dns_upstream: Option<String>,

    /// Steered interception: listen on ports 80 and 443 of IP, and with the DNS
    /// filter answer allowed names with IP (no upstream asked); 0.0.0.0 (or ::)
    /// listens on every address and answers each client with the address it
    /// asked on (one crackbox on many jail networks). Repeatable: one IPv4 and
    /// one IPv6 address [env CRACKBOX_STEER (comma-separated), [proxy] steer; default off].
    #[arg(long = "steer", value_name = "IP")]
    pub steer: Vec<String>,

    /// The ports the steered listeners bind for 80 and 443, for a DNAT in front of them
    /// that keeps 80 and 443 in the clients' view (`crackbox run --backend netns`)
    /// [default 80,443].
    #[arg(long, value_name = "HTTP,HTTPS", hide = true)]
    pub steered_ports: Option<String>,

    /// Engine core threads, 1 to 1024 [env CRACKBOX_THREADS, [proxy] threads; default: available cores].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Engine io driver: io_uring, epoll, or auto (io_uring with an epoll fallback)
    /// [env CRACKBOX_IO_DRIVER, [proxy] io_driver; default auto].
    #[arg(long, value_name = "DRIVER")]
    pub io_driver: Option<String>,

    /// State file for the registry, "" for none [env CRACKBOX_STATE_PATH, [state] path;
    /// default: none, the registry lives in memory only].
    #[arg(long, value_name = "PATH", value_parser = OsStringValueParser::new().map(PathBuf::from))]
    pub state: Option<PathBuf>,

    /// Let allowed names resolve to private and loopback addresses
    /// [env CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1, [policy] allow_private_destinations].
    #[arg(long)]
    pub allow_private_destinations: bool,

    /// Register a source at start: IP=ID:host1,host2 (nothing after the colon = deny all;
    /// @presets expand, see `crackbox presets`), then options after ';' as key=value:
    /// bandwidth=10MiB/s (KiB/s, MiB/s or GiB/s; each direction), mode=report (let through
    /// and record what the list would deny) or mode=ask (hold it until decided through
    /// /v1/pending), deny=host1,host2 (never let through, whatever allows them),
    /// policies=NAME,NAME (named policies it takes too), allow-file=PATH (entries one per
    /// line; repeatable). Repeatable; replaces a state-file entry for the same IP.
    #[arg(
        long = "register",
        value_name = "IP=ID:HOSTS[;bandwidth=RATE][;mode=MODE][;deny=HOSTS][;policies=NAME,NAME][;allow-file=PATH]"
    )]
    pub register: Vec<String>,

    /// Register Docker containers by their io.crackbox.allow / io.crackbox.id labels
    /// (Docker from DOCKER_HOST or the default socket) [[docker] enabled].
    #[arg(long)]
    pub docker: bool,

    /// A network whose containers are watched (implies --docker; repeatable); without it,
    /// crackbox in a container watches the networks of its own container [[docker] networks].
    #[arg(long = "docker-network", value_name = "NET")]
    pub docker_networks: Vec<String>,

    /// Keep the named policies in etcd, shared by every node of a fleet: etcd's client URLs,
    /// comma-separated or repeated (docs/fleet.md) [env CRACKBOX_FLEET_ETCD, [fleet] etcd;
    /// default: no fleet, the policies are this host's].
    #[arg(long = "fleet-etcd", value_name = "URL", value_delimiter = ',')]
    pub fleet_etcd: Vec<String>,

    /// The prefix of every etcd key crackbox uses [env CRACKBOX_FLEET_PREFIX, [fleet] prefix;
    /// default /crackbox/].
    #[arg(long, value_name = "PREFIX")]
    pub fleet_prefix: Option<String>,

    /// This node's name in the fleet [env CRACKBOX_FLEET_NODE, [fleet] node; default: the host name].
    #[arg(long, value_name = "NAME")]
    pub fleet_node: Option<String>,

    /// etcd user; its password from CRACKBOX_FLEET_PASSWORD or [fleet] password
    /// [env CRACKBOX_FLEET_USER, [fleet] user; default: none].
    #[arg(long, value_name = "USER")]
    pub fleet_user: Option<String>,

    /// CA certificate (PEM) that etcd's is checked against [env CRACKBOX_FLEET_CA, [fleet] ca].
    #[arg(long, value_name = "PATH")]
    pub fleet_ca: Option<PathBuf>,

    /// Client certificate (PEM) for etcd, with --fleet-key [env CRACKBOX_FLEET_CERT, [fleet] cert].
    #[arg(long, value_name = "PATH")]
    pub fleet_cert: Option<PathBuf>,

    /// Client key (PEM) for etcd [env CRACKBOX_FLEET_KEY, [fleet] key].
    #[arg(long, value_name = "PATH")]
    pub fleet_key: Option<PathBuf>,

    /// Seconds the lease of this node's pending requests in etcd lasts, 2 to 3600: a node that
    /// dies takes them out of the fleet's inbox within it [env CRACKBOX_FLEET_LEASE_TTL,
    /// [fleet] lease_ttl; default 10].
    #[arg(long, value_name = "SECS")]
    pub fleet_lease_ttl: Option<u64>,

    /// Unix socket between control and engine [env CRACKBOX_CONTROL_SOCKET, [proxy]
    /// control_socket; default: a private temporary path for `serve`,
    /// /run/crackbox/control.sock for `control` and `engine`].
    #[arg(long, value_name = "PATH")]
    pub control_socket: Option<PathBuf>,

    /// Concurrent connections one source may hold [env CRACKBOX_MAX_CONNECTIONS_PER_SOURCE,
    /// [limits] max_connections_per_source; default 1024].
    #[arg(long, value_name = "N")]
    pub max_connections_per_source: Option<usize>,

    /// Concurrent client connections in total [env CRACKBOX_MAX_CONNECTIONS_TOTAL,
    /// [limits] max_connections_total; default 16000].
    #[arg(long, value_name = "N")]
    pub max_connections_total: Option<usize>,

    /// Close a tunnel idle this long, 0 never [env CRACKBOX_TUNNEL_IDLE_TIMEOUT,
    /// [limits] tunnel_idle_timeout; default 3600].
    #[arg(long, value_name = "SECS")]
    pub tunnel_idle_timeout: Option<u64>,

    /// Denials logged per second per source; counters stay exact
    /// [env CRACKBOX_DENIAL_LOGS_PER_SECOND, [limits] denial_logs_per_second; default 5].
    #[arg(long, value_name = "N")]
    pub denial_logs_per_second: Option<u32>,

    /// How long a connection held in ask mode waits for a decision before it is refused,
    /// 1 to 3600 [env CRACKBOX_ASK_TIMEOUT, [limits] ask_timeout; default 30].
    #[arg(long, value_name = "SECS")]
    pub ask_timeout: Option<u64>,

    /// With --docker: how long a new connection or DNS query from an unregistered address
    /// in a watched network waits for its registration, 0 never, at most 10000
    /// [env CRACKBOX_REGISTRATION_HOLD_MS, [docker] registration_hold_ms; default 1500].
    #[arg(long, value_name = "MS")]
    pub registration_hold_ms: Option<u64>,
}

/// `on` or `off` (also `1`/`0`, `true`/`false`, `yes`/`no`).
pub fn on_off(value: &str) -> Result<bool, String> {
    match value.trim() {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        other => Err(format!("{other:?} is neither on nor off")),
    }
}

/// Whether a flag was given, told from the parsed flags.
type Given = fn(&ProxyArgs) -> bool;

/// The control plane's flags (long names) with how to tell each was given:
/// `proxy engine` does not use them, so it hides them from its help and
/// warns that it ignores them (docs/daemon.md, "Processes").
const CONTROL_PLANE_FLAGS: [(&str, Given); 14] = [
    ("console", |p| p.console.is_some()),
    ("admin-name", |p| !p.admin_names.is_empty()),
    ("state", |p| p.state.is_some()),
    ("register", |p| !p.register.is_empty()),
    ("docker", |p| p.docker),
    ("docker-network", |p| !p.docker_networks.is_empty()),
    ("fleet-etcd", |p| !p.fleet_etcd.is_empty()),
    ("fleet-prefix", |p| p.fleet_prefix.is_some()),
    ("fleet-node", |p| p.fleet_node.is_some()),
    ("fleet-user", |p| p.fleet_user.is_some()),
    ("fleet-ca", |p| p.fleet_ca.is_some()),
    ("fleet-cert", |p| p.fleet_cert.is_some()),
    ("fleet-key", |p| p.fleet_key.is_some()),
    ("fleet-lease-ttl", |p| p.fleet_lease_ttl.is_some()),
];

/// Whether `long` (without its dashes) is a flag of the control plane
/// alone, which `proxy engine` ignores.
pub fn is_control_plane_flag(long: &str) -> bool {
    CONTROL_PLANE_FLAGS.iter().any(|(flag, _)| *flag == long)
}

/// `proxy engine`: the shared flags, or the settings `proxy serve` resolved
/// for its engine child.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EngineArgs {
    /// The settings, resolved as for every daemon.
    #[command(flatten)]
    pub proxy: ProxyArgs,

    /// Read the resolved settings from stdin, one JSON document (how `proxy serve`
    /// starts its engine); no other flag may be given.
    #[arg(long, hide = true, exclusive = true)]
    pub settings_stdin: bool,
}

impl EngineArgs {
    /// The control plane's flags given (`--register`, `--docker`, ...),
    /// which `proxy engine` does not use.
    pub fn control_plane_flags(&self) -> Vec<&'static str> {
        CONTROL_PLANE_FLAGS
            .iter()
            .filter(|(_, given)| given(&self.proxy))
            .map(|(flag, _)| *flag)
            .collect()
    }
}
