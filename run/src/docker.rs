//! The docker backends of `crackbox run` (via bollard, never the docker
//! CLI), and here the Docker objects they create, as pure specs.
//!
//! Layout of one run `R` (all objects named `crackbox-R-*` and labelled
//! `io.crackbox.run=R` and `io.crackbox.id=<--id>`):
//! - `crackbox-R`: an `internal` bridge with `inhibit_ipv4`, so the bridge
//!   has no address and the host is unreachable from it; `.2` is the proxy,
//!   `.3` the workload. No gateway answers, so nothing is routed anywhere.
//! - `crackbox-R-egress` (or `--egress-network`): the proxy's way out. The
//!   admin API listens on the proxy's address there only, which `run`
//!   reaches from the host and the workload cannot reach at all.
//! - `crackbox-R-proxy`: `crackbox proxy serve` with a random admin secret
//!   (`per_run`).
//! - `crackbox-R-workload`: the command, on the internal network only, with
//!   the proxy variables. Steered (the default; docs/run.md), its
//!   resolv.conf is bind-mounted from a file of the run's own and names the
//!   proxy's DNS filter only (so Docker's embedded resolver is never asked),
//!   and the proxy's steered listeners take ports 80 and 443; otherwise its
//!   resolver (127.0.0.1) answers nothing.
//!
//! With `--daemon NAME` (`on_daemon`) there is no proxy or egress network
//! of the run's own: the workload joins a jail of NAME's pool (`pool`), a
//! network like `crackbox-R` kept with NAME connected as `.2` and a holder
//! container at `.3` whose network namespace the workload shares.

mod attach;
mod calls;
mod daemon_config;
mod image;
mod on_daemon;
mod per_run;
mod pool;
mod workload;

pub use on_daemon::OnDaemon;
pub use per_run::PerRunProxy;

use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig, NetworkCreateRequest,
    NetworkingConfig,
};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Label carrying the run id on every object a run creates.
pub const RUN_LABEL: &str = "io.crackbox.run";
/// Label carrying the registration id (`--id`) on every object a run creates.
pub const ID_LABEL: &str = "io.crackbox.id";
/// Label carrying the daemon's name on every object of its pool of jails.
pub const POOL_LABEL: &str = "io.crackbox.pool";
/// The bridge option that leaves the host without an address on a network.
const INHIBIT_IPV4: &str = "com.docker.network.bridge.inhibit_ipv4";

/// The labels of every object of run `run_id` registered as `id`.
pub fn labels(run_id: &str, id: &str) -> HashMap<String, String> {
    HashMap::from([
        (RUN_LABEL.to_string(), run_id.to_string()),
        (ID_LABEL.to_string(), id.to_string()),
    ])
}

/// A bridge network on `subnet` with `gateway`; an `internal` one also gets
/// `inhibit_ipv4`, so the host has no address on it.
pub fn network_spec(
    name: &str,
    subnet: &str,
    gateway: Ipv4Addr,
    internal: bool,
    labels: HashMap<String, String>,
) -> NetworkCreateRequest {
    let options = match internal {
        true => HashMap::from([(INHIBIT_IPV4.to_string(), "true".to_string())]),
        false => HashMap::new(),
    };
    NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".into()),
        internal: Some(internal),
        ipam: Some(Ipam {
            config: Some(vec![IpamConfig {
                subnet: Some(subnet.to_string()),
                gateway: Some(gateway.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        options: Some(options),
        labels: Some(labels),
        ..Default::default()
    }
}

/// What the proxy container runs and where it starts.
pub struct ProxySpec<'a> {
    /// The crackbox image.
    pub image: &'a str,
    /// Its arguments (`proxy serve ...`).
    pub command: Vec<String>,
    /// Its environment (`NAME`, value).
    pub env: Vec<(String, String)>,
    /// The egress network and its address there (the jail network is connected later).
    pub egress: (&'a str, Ipv4Addr),
}

/// The proxy container: read-only, no capability, no privilege gain, and
/// allowed to bind 53, 80 and 443 in its own network namespace.
pub fn proxy_spec(spec: ProxySpec<'_>, labels: HashMap<String, String>) -> ContainerCreateBody {
    let (network, address) = spec.egress;
    ContainerCreateBody {
        image: Some(spec.image.to_string()),
        cmd: Some(spec.command),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_string()),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([
                ("/tmp".to_string(), "rw,nosuid,nodev,size=16m,mode=1777".to_string()),
                ("/run".to_string(), "rw,nosuid,nodev,size=1m,mode=1777".to_string()),
            ])),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            sysctls: Some(HashMap::from([(
                "net.ipv4.ip_unprivileged_port_start".to_string(),
                "0".to_string(),
            )])),
            ..Default::default()
        }),
        networking_config: Some(endpoint(network, address)),
        ..Default::default()
    }
}

/// Where a workload container's network comes from.
#[derive(Debug, Clone, Copy)]
pub enum Place<'a> {
    /// An endpoint of its own on a network, at an address.
    On(&'a str, Ipv4Addr),
    /// The network namespace of a running holder container (a pooled jail).
    Joined(&'a str),
}

/// What the workload container runs and where.
pub struct WorkloadSpec<'a> {
    /// The workload image.
    pub image: &'a str,
    /// The command and its arguments.
    pub command: &'a [String],
    /// Its environment (`NAME`, value).
    pub env: Vec<(String, String)>,
    /// Whether it gets a TTY.
    pub tty: bool,
    /// Where its network comes from.
    pub place: Place<'a>,
    /// Files of the run's own mounted read-only over the image's, as (host
    /// file, path in the container): steered, a resolv.conf naming only the
    /// proxy; joined, also hosts and hostname (the holder's would outlive
    /// the run).
    pub etc: &'a [(PathBuf, &'static str)],
}

/// The workload container: the jail network only, stdin/stdout/stderr
/// attachable, no raw sockets, and a resolver that is crackbox's or none.
pub fn workload_spec(spec: WorkloadSpec<'_>, labels: HashMap<String, String>) -> ContainerCreateBody {
    // A resolv.conf of the run's own is bind-mounted read-only over the one
    // Docker would write, which would send every name to Docker's embedded
    // resolver first.
    let binds: Vec<String> = spec
        .etc
        .iter()
        .map(|(file, path)| format!("{}:{path}:ro", file.display()))
        .collect();
    let resolver = match spec.etc.iter().any(|(_, path)| *path == RESOLV_CONF) {
        true => HostConfig {
            binds: Some(binds),
            ..Default::default()
        },
        // Nothing listens there: no name ever reaches Docker's embedded
        // resolver or the host's upstream DNS.
        false => HostConfig {
            dns: Some(vec!["127.0.0.1".into()]),
            dns_options: Some(vec!["timeout:1".into(), "attempts:1".into()]),
            binds: Some(binds),
            ..Default::default()
        },
    };
    let (network_mode, networking_config) = match spec.place {
        Place::On(network, address) => (network.to_string(), Some(endpoint(network, address))),
        Place::Joined(holder) => (format!("container:{holder}"), None),
    };
    ContainerCreateBody {
        image: Some(spec.image.to_string()),
        cmd: Some(spec.command.to_vec()),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        tty: Some(spec.tty),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some(network_mode),
            // Raw sockets would let the workload hand-craft frames to the
            // proxy's other addresses (the admin API's among them): a
            // host accepts packets for any of its addresses on any link.
            cap_drop: Some(vec!["NET_RAW".into()]),
            ..resolver
        }),
        networking_config,
        ..Default::default()
    }
}

/// Where the workload finds its resolver.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// A pooled jail's holder: `crackbox hold` on `network` at `address`,
/// read-only, with no capability; it only keeps the network namespace alive.
pub fn holder_spec(
    image: &str,
    network: &str,
    address: Ipv4Addr,
    labels: HashMap<String, String>,
) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(vec!["hold".into()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_string()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            ..Default::default()
        }),
        networking_config: Some(endpoint(network, address)),
        ..Default::default()
    }
}

/// A fixed IPv4 address on a network.
pub fn ipv4_endpoint(addr: Ipv4Addr) -> EndpointSettings {
    EndpointSettings {
        ipam_config: Some(EndpointIpamConfig {
            ipv4_address: Some(addr.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn endpoint(network: &str, addr: Ipv4Addr) -> NetworkingConfig {
    NetworkingConfig {
        endpoints_config: Some(HashMap::from([(network.to_string(), ipv4_endpoint(addr))])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled() -> HashMap<String, String> {
        labels("r1", "agent")
    }

    #[test]
    fn only_internal_networks_leave_the_host_without_an_address() {
        for internal in [true, false] {
            let spec = network_spec(
                "n",
                "10.213.128.8/29",
                Ipv4Addr::new(10, 213, 128, 9),
                internal,
                labelled(),
            );
            let options = spec.options.unwrap();
            assert_eq!(options.contains_key(INHIBIT_IPV4), internal, "{internal}");
            assert_eq!(spec.internal, Some(internal));
            let ipam = &spec.ipam.unwrap().config.unwrap()[0];
            assert_eq!(ipam.subnet.as_deref(), Some("10.213.128.8/29"));
            assert_eq!(ipam.gateway.as_deref(), Some("10.213.128.9"));
            assert_eq!(spec.labels.unwrap().get(RUN_LABEL).map(String::as_str), Some("r1"));
        }
    }

    #[test]
    fn the_proxy_has_no_capability_and_the_workload_no_raw_sockets() {
        let proxy = proxy_spec(
            ProxySpec {
                image: "crackbox:x",
                command: vec!["proxy".into(), "serve".into()],
                env: vec![("CRACKBOX_ADMIN_SECRET".into(), "s".into())],
                egress: ("egress", Ipv4Addr::new(10, 0, 0, 2)),
            },
            labelled(),
        );
        let host = proxy.host_config.unwrap();
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(proxy.env, Some(vec!["CRACKBOX_ADMIN_SECRET=s".to_string()]));
        let command = ["sh".to_string()];
        let resolv = [(PathBuf::from("/tmp/r/resolv.conf"), RESOLV_CONF)];
        let on = Place::On("jail", Ipv4Addr::new(10, 0, 1, 3));
        /// Where, the files mounted, then the network mode and whether Docker's resolver option is set.
        type Case<'a> = (Place<'a>, &'a [(PathBuf, &'static str)], &'a str, bool);
        let cases: &[Case] = &[
            (on, &[], "jail", true),
            (on, &resolv, "jail", false),
            (Place::Joined("holder"), &resolv, "container:holder", false),
        ];
        for (place, etc, mode, dns) in cases {
            let workload = workload_spec(
                WorkloadSpec {
                    image: "busybox",
                    command: &command,
                    env: Vec::new(),
                    tty: false,
                    place: *place,
                    etc,
                },
                labelled(),
            );
            let host = workload.host_config.unwrap();
            assert_eq!(host.cap_drop, Some(vec!["NET_RAW".to_string()]));
            assert_eq!(host.network_mode.as_deref(), Some(*mode));
            assert_eq!(host.dns.is_some(), *dns, "{mode}");
            assert_eq!(workload.networking_config.is_some(), matches!(place, Place::On(..)));
            let want: Vec<String> = etc.iter().map(|(f, p)| format!("{}:{p}:ro", f.display())).collect();
            assert_eq!(host.binds, Some(want), "{mode}");
        }
        let holder = holder_spec("crackbox:x", "jail", Ipv4Addr::new(10, 0, 1, 3), labelled());
        assert_eq!(holder.cmd, Some(vec!["hold".to_string()]));
        assert_eq!(holder.host_config.unwrap().cap_drop, Some(vec!["ALL".to_string()]));
    }
}
