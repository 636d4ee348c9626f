//! The docker backend of `crackbox run`, via bollard (never the docker CLI).
//!
//! Layout of one run `R` (all objects named `crackbox-R-*` and labelled
//! `io.crackbox.run=R` and `io.crackbox.id=<--id>`):
//! - `crackbox-R`: an `internal` bridge with `inhibit_ipv4`, so the bridge
//!   has no address and the host is unreachable from it; `.2` is the proxy,
//!   `.3` the workload. No gateway answers, so nothing is routed anywhere.
//! - `crackbox-R-egress` (or `--egress-network`): the proxy's way out. The
//!   admin API listens on the proxy's address there only, which `run`
//!   reaches from the host and the workload cannot reach at all.
//! - `crackbox-R-proxy`: `crackbox proxy serve` with a random admin secret.
//! - `crackbox-R-workload`: the command, on the internal network only, with
//!   the proxy variables. Steered (the default, DESIGN 2.5), its
//!   resolv.conf is bind-mounted from a file of the run's own and names the
//!   proxy's DNS filter only (so Docker's embedded resolver is never asked),
//!   and the proxy's steered listeners take ports 80 and 443; otherwise its
//!   resolver (127.0.0.1) answers nothing.
//!
//! With `--daemon NAME` (`docker/on_daemon.rs`) there is no proxy or egress
//! network of the run's own: the long-lived crackbox container NAME is
//! connected to `crackbox-R` as `.2` and the workload registered through
//! NAME's admin API; teardown unregisters it and disconnects NAME.
//!
//! Every object is recorded before it is created, so teardown removes it on
//! every exit path, including a signal in the middle of set-up.

mod on_daemon;

use super::admin::{healthy, jail_client, register};
use super::env::proxy_env;
use super::error::{docker_message, docker_status, one_line, JailError};
use super::stdio::{self, RawMode};
use super::subnet::{self, Ipv4Net};
use super::summary;
use super::token;
use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig, NetworkConnectRequest,
    NetworkCreateRequest, NetworkingConfig,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, CreateImageOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, ResizeContainerTTYOptionsBuilder, WaitContainerOptionsBuilder,
};
use bollard::Docker;
use crackbox_client::Client as AdminClient;
use futures_util::future::join_all;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};

/// Port of the proxy's forward listener inside the jail.
const PROXY_PORT: u16 = 3128;
/// Port of the proxy's admin API on the egress network.
const ADMIN_PORT: u16 = 3129;
/// Label carrying the run id on every object a run creates.
const RUN_LABEL: &str = "io.crackbox.run";
/// Label carrying the registration id (`--id`) on every object a run creates.
const ID_LABEL: &str = "io.crackbox.id";
/// Subnets for per-run networks come from here (the netns backend uses the lower half).
const POOL: &str = "10.213.128.0/17";
/// Size of each per-run network: network, gateway, proxy, workload and spare.
const NET_PREFIX: u8 = 29;
/// How long the proxy may take to answer `/health`.
const PROXY_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How many denials the exit summary reads.
const DENIALS_LIMIT: usize = 1000;

/// Everything one docker-backend run needs, decided before any object exists.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Random id naming every object of this run.
    pub run_id: String,
    /// Registration id (shown in denials and metrics).
    pub id: String,
    /// Normalised allowlist entries.
    pub allow: Vec<String>,
    /// Workload image.
    pub image: String,
    /// crackbox image for the proxy.
    pub proxy_image: String,
    /// Existing network for the proxy's egress instead of a per-run one.
    pub egress_network: Option<String>,
    /// Whether the proxy may dial private addresses (tests, private upstreams).
    pub allow_private: bool,
    /// Extra `NAME=value` variables for the proxy container.
    pub proxy_env: Vec<String>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Whether to attach a TTY.
    pub tty: bool,
    /// Whether to skip the exit summary.
    pub quiet: bool,
    /// Long-lived crackbox container to run behind instead of a per-run proxy.
    pub daemon: Option<String>,
    /// Steered interception (with `daemon`, only when the daemon steers
    /// every jail it joins).
    pub steer: bool,
}

/// Connects to the engine named by `DOCKER_HOST` (or the local socket) and
/// agrees on an API version it speaks.
pub async fn connect() -> Result<Docker, JailError> {
    let docker = Docker::connect_with_defaults()
        .map_err(|e| JailError::DockerUnreachable(one_line(&e.to_string())))?
        .with_timeout(Duration::from_secs(60));
    docker
        .negotiate_version()
        .await
        .map_err(|e| JailError::DockerUnreachable(one_line(&docker_message(&e))))
}

/// Runs the plan's command in a fresh jail; returns its exit code, or
/// `128 + signal` when crackbox was interrupted. Tears the jail down on
/// every path.
pub async fn run(plan: Plan) -> Result<i32, JailError> {
    let mut signals = Signals::new()?;
    let docker = connect().await?;
    let jail = Jail::new(docker, plan);
    // A signal during set-up stops it at the next step boundary rather than
    // dropping it mid-request: an object whose create call is in flight is
    // then known and removed, never left behind.
    let setup = jail.setup();
    tokio::pin!(setup);
    let mut interrupted = None;
    let prepared = loop {
        tokio::select! {
            prepared = &mut setup => break prepared,
            code = signals.next(), if interrupted.is_none() => {
                interrupted = Some(code);
                jail.interrupted.store(true, Ordering::SeqCst);
            }
        }
    };
    let outcome = match (interrupted, prepared) {
        (Some(code), _) => Ok(code),
        (None, Err(err)) => Err(err),
        // Attach, start and wait create nothing, so dropping them is safe.
        (None, Ok(workload)) => tokio::select! {
            outcome = jail.run_workload(&workload) => outcome,
            code = signals.next() => Ok(code),
        },
    };
    tracing::debug!("workload done");
    if !jail.plan.quiet {
        jail.print_blocked().await;
    }
    jail.teardown().await;
    tracing::debug!("jail removed");
    outcome
}

/// SIGINT, SIGTERM and SIGHUP, caught from before the first object exists
/// until teardown is over (later ones are ignored so teardown completes).
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, JailError> {
        let catch = |kind| signal(kind).map_err(|e| JailError::io("installing signal handlers", e));
        Ok(Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
        })
    }

    /// Waits for one of the signals; returns the shell-style exit code.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => 128 + libc::SIGINT,
            _ = self.terminate.recv() => 128 + libc::SIGTERM,
            _ = self.hangup.recv() => 128 + libc::SIGHUP,
        }
    }
}

/// One run's Docker objects and what is known about them.
struct Jail {
    docker: Docker,
    plan: Plan,
    /// Networks this run created (or is creating), removed at teardown.
    networks: Mutex<Vec<String>>,
    /// Containers this run created (or is creating), removed at teardown.
    containers: Mutex<Vec<String>>,
    /// The proxy's admin API, once the proxy is up.
    admin: OnceLock<AdminClient>,
    /// Set by a signal during set-up; checked between steps.
    interrupted: AtomicBool,
    /// The workload's address, once chosen (the exit summary reads its denials).
    workload_ip: OnceLock<Ipv4Addr>,
    /// What this run changed on a shared daemon, undone at teardown.
    lease: Mutex<on_daemon::Lease>,
    /// Holds the workload's resolv.conf when steered; removed on drop.
    resolver_dir: OnceLock<tempfile::TempDir>,
    /// Whether the shared daemon (`--daemon`) steers the jails it joins.
    daemon_steers: OnceLock<bool>,
}

/// Addresses of the proxy and workload inside one jail.
struct Addresses {
    internal_net: String,
    egress_net: String,
    proxy_internal: Ipv4Addr,
    workload: Ipv4Addr,
}

impl Jail {
    fn new(docker: Docker, plan: Plan) -> Self {
        Jail {
            docker,
            plan,
            networks: Mutex::new(Vec::new()),
            containers: Mutex::new(Vec::new()),
            admin: OnceLock::new(),
            interrupted: AtomicBool::new(false),
            workload_ip: OnceLock::new(),
            lease: Mutex::new(on_daemon::Lease::default()),
            resolver_dir: OnceLock::new(),
            daemon_steers: OnceLock::new(),
        }
    }

    /// Whether this run steers: no `--no-steer`, and a per-run proxy or a
    /// daemon that steers every jail.
    fn steered(&self) -> bool {
        self.plan.steer && (self.plan.daemon.is_none() || self.daemon_steers.get() == Some(&true))
    }

    /// Fails once a signal arrived, so set-up stops between two steps.
    fn checkpoint(&self) -> Result<(), JailError> {
        if self.interrupted.load(Ordering::SeqCst) {
            Err(JailError::Interrupted)
        } else {
            Ok(())
        }
    }

    fn name(&self, suffix: &str) -> String {
        if suffix.is_empty() {
            format!("crackbox-{}", self.plan.run_id)
        } else {
            format!("crackbox-{}-{suffix}", self.plan.run_id)
        }
    }

    fn labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (RUN_LABEL.to_string(), self.plan.run_id.clone()),
            (ID_LABEL.to_string(), self.plan.id.clone()),
        ])
    }

    /// Creates everything and registers the workload; returns the
    /// workload container's name. Concurrent steps are joined, never
    /// dropped half-way, so every object created is known to teardown.
    async fn setup(&self) -> Result<String, JailError> {
        if let Some(daemon) = &self.plan.daemon {
            return self.setup_on_daemon(daemon).await;
        }
        let (proxy_image, workload_image) = tokio::join!(self.check_proxy_image(), self.check_workload_image());
        proxy_image?;
        workload_image?;
        self.checkpoint()?;
        let internal_net = self.name("");
        let (internal, egress_net, own_egress) = match &self.plan.egress_network {
            Some(name) => (self.create_network(&internal_net, true).await?, name.clone(), None),
            None => {
                let name = self.name("egress");
                let (internal, egress) = tokio::join!(
                    self.create_network(&internal_net, true),
                    self.create_network(&name, false)
                );
                (internal?, name, Some(egress?))
            }
        };
        tracing::debug!(%internal, "jail networks created");
        let addresses = Addresses {
            internal_net,
            egress_net,
            proxy_internal: host(&internal, 2)?,
            workload: host(&internal, 3)?,
        };
        // The workload is created while the proxy starts; it starts only
        // once its address is registered.
        let (admin, workload) = tokio::join!(
            self.start_proxy(&addresses, own_egress),
            self.create_workload(
                &addresses.internal_net,
                SocketAddr::from((addresses.proxy_internal, PROXY_PORT)),
                addresses.workload
            )
        );
        let (admin, workload) = (admin?, workload?);
        tracing::debug!("proxy healthy, workload created");
        self.checkpoint()?;
        register(
            &admin,
            addresses.workload.into(),
            &self.plan.id,
            &self.plan.allow,
            "registering the workload",
        )
        .await?;
        tracing::debug!(workload = %addresses.workload, "workload registered");
        Ok(workload)
    }

    /// Fails early, with the fix in the message, when the proxy image is missing.
    async fn check_proxy_image(&self) -> Result<(), JailError> {
        match self.docker.inspect_image(&self.plan.proxy_image).await {
            Ok(_) => Ok(()),
            Err(e) if docker_status(&e) == Some(404) => {
                Err(JailError::ProxyImageMissing(self.plan.proxy_image.clone()))
            }
            Err(e) => Err(JailError::docker("inspecting the proxy image", e)),
        }
    }

    /// Pulls the workload image when it is not present.
    async fn check_workload_image(&self) -> Result<(), JailError> {
        match self.docker.inspect_image(&self.plan.image).await {
            Ok(_) => Ok(()),
            Err(e) if docker_status(&e) == Some(404) => self.pull_workload_image().await,
            Err(e) => Err(JailError::docker("inspecting the workload image", e)),
        }
    }

    async fn pull_workload_image(&self) -> Result<(), JailError> {
        eprintln!("crackbox: pulling {}", self.plan.image);
        let options = CreateImageOptionsBuilder::default()
            .from_image(&self.plan.image)
            .build();
        let mut progress = self.docker.create_image(Some(options), None, None);
        while let Some(step) = progress.next().await {
            if let Err(e) = step {
                return Err(JailError::WorkloadImageMissing {
                    image: self.plan.image.clone(),
                    detail: one_line(&docker_message(&e)),
                });
            }
        }
        Ok(())
    }

    /// Creates a bridge network on a free subnet; `internal` ones also get
    /// `inhibit_ipv4` so the host has no address on them. Retries when
    /// another run took the subnet between the check and the create.
    async fn create_network(&self, name: &str, internal: bool) -> Result<Ipv4Net, JailError> {
        let pool = Ipv4Net::parse(POOL).ok_or_else(|| JailError::NoFreeSubnet(POOL.into()))?;
        self.networks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.to_string());
        let mut last_error = None;
        for _ in 0..16 {
            self.checkpoint()?;
            let taken = self.taken_subnets().await?;
            let start = token::random_u32().map_err(|e| JailError::io("reading /dev/urandom", e))?;
            let subnet =
                subnet::pick(pool, NET_PREFIX, &taken, start).ok_or_else(|| JailError::NoFreeSubnet(POOL.into()))?;
            let mut options = HashMap::new();
            if internal {
                options.insert("com.docker.network.bridge.inhibit_ipv4".to_string(), "true".to_string());
            }
            let request = NetworkCreateRequest {
                name: name.to_string(),
                driver: Some("bridge".into()),
                internal: Some(internal),
                ipam: Some(Ipam {
                    config: Some(vec![IpamConfig {
                        subnet: Some(subnet.to_string()),
                        gateway: Some(host(&subnet, 1)?.to_string()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                options: Some(options),
                labels: Some(self.labels()),
                ..Default::default()
            };
            match self.docker.create_network(request).await {
                Ok(_) => return Ok(subnet),
                Err(e) if docker_message(&e).contains("overlap") => last_error = Some(e),
                Err(e) => return Err(JailError::docker("creating a network", e)),
            }
        }
        Err(last_error.map_or_else(
            || JailError::NoFreeSubnet(POOL.into()),
            |e| JailError::docker("creating a network", e),
        ))
    }

    /// Subnets Docker's networks use plus the host's routes.
    async fn taken_subnets(&self) -> Result<Vec<Ipv4Net>, JailError> {
        let networks = self
            .docker
            .list_networks(None)
            .await
            .map_err(|e| JailError::docker("listing networks", e))?;
        let mut taken: Vec<Ipv4Net> = networks
            .iter()
            .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
            .flatten()
            .filter_map(|c| Ipv4Net::parse(c.subnet.as_deref()?))
            .collect();
        taken.extend(subnet::host_routes());
        Ok(taken)
    }

    /// Starts the proxy on the egress and internal networks and waits until
    /// its admin API is healthy. On a shared egress network the proxy takes
    /// a random free address there, and another one if it loses a race.
    async fn start_proxy(&self, addresses: &Addresses, own_egress: Option<Ipv4Net>) -> Result<AdminClient, JailError> {
        let secret = token::random_hex(32).map_err(|e| JailError::io("reading /dev/urandom", e))?;
        let name = self.name("proxy");
        self.containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.clone());
        let mut attempts = 0;
        let egress_ip = loop {
            self.checkpoint()?;
            attempts += 1;
            let egress_ip = match own_egress {
                Some(subnet) => host(&subnet, 2)?,
                None => self.free_address(&addresses.egress_net).await?,
            };
            self.create_proxy(&name, addresses, egress_ip, &secret).await?;
            match self.docker.start_container(&name, None).await {
                Ok(()) => break egress_ip,
                Err(e) if attempts < 5 && docker_message(&e).contains("already in use") => {
                    self.remove_container(&name).await;
                }
                // Docker's inspect shows an auto-allocated subnet like a configured
                // one; only the refusal to start tells them apart.
                Err(e) if own_egress.is_none() && docker_message(&e).contains("user configured subnets") => {
                    return Err(JailError::EgressNetworkWithoutSubnet(addresses.egress_net.clone()));
                }
                Err(e) => return Err(JailError::docker("starting the proxy", e)),
            }
        };
        let admin = jail_client(SocketAddr::from((egress_ip, ADMIN_PORT)), secret);
        let _ = self.admin.set(admin.clone());
        self.wait_healthy(&name, &admin).await?;
        Ok(admin)
    }

    async fn create_proxy(
        &self,
        name: &str,
        addresses: &Addresses,
        egress_ip: Ipv4Addr,
        secret: &str,
    ) -> Result<(), JailError> {
        // No state file: a jail's registry lives and dies with the run.
        let mut env = vec![format!("CRACKBOX_ADMIN_SECRET={secret}")];
        if self.plan.allow_private {
            env.push("CRACKBOX_ALLOW_PRIVATE_DESTINATIONS=1".to_string());
        }
        env.extend(self.plan.proxy_env.iter().cloned());
        let mut cmd: Vec<String> = vec![
            "proxy".into(),
            "serve".into(),
            "--listen".into(),
            format!("{}:{PROXY_PORT}", addresses.proxy_internal),
            "--admin".into(),
            format!("{egress_ip}:{ADMIN_PORT}"),
            "--transparent".into(),
            String::new(),
        ];
        if self.steered() {
            let at = addresses.proxy_internal;
            cmd.extend([
                "--dns-listen".into(),
                format!("{at}:53"),
                "--steer".into(),
                at.to_string(),
            ]);
        }
        let config = ContainerCreateBody {
            image: Some(self.plan.proxy_image.clone()),
            cmd: Some(cmd),
            env: Some(env),
            labels: Some(self.labels()),
            host_config: Some(HostConfig {
                network_mode: Some(addresses.egress_net.clone()),
                readonly_rootfs: Some(true),
                tmpfs: Some(HashMap::from([
                    ("/tmp".to_string(), "rw,nosuid,nodev,size=16m,mode=1777".to_string()),
                    ("/run".to_string(), "rw,nosuid,nodev,size=1m,mode=1777".to_string()),
                ])),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                // Ports 53, 80 and 443 in its own network namespace, with no
                // capability at all.
                sysctls: Some(HashMap::from([(
                    "net.ipv4.ip_unprivileged_port_start".to_string(),
                    "0".to_string(),
                )])),
                ..Default::default()
            }),
            networking_config: Some(endpoint(&addresses.egress_net, egress_ip)),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        self.docker
            .create_container(Some(options), config)
            .await
            .map_err(|e| JailError::docker("creating the proxy", e))?;
        let connect = NetworkConnectRequest {
            container: name.to_string(),
            endpoint_config: Some(ipv4_endpoint(addresses.proxy_internal)),
        };
        self.docker
            .connect_network(&addresses.internal_net, connect)
            .await
            .map_err(|e| JailError::docker("connecting the proxy to the jail network", e))
    }

    /// A random address of `network`'s IPv4 subnet that no endpoint uses.
    async fn free_address(&self, network: &str) -> Result<Ipv4Addr, JailError> {
        let inspect = self
            .docker
            .inspect_network(network, None)
            .await
            .map_err(|e| JailError::docker("inspecting the egress network", e))?;
        let config = inspect
            .ipam
            .and_then(|ipam| ipam.config)
            .unwrap_or_default()
            .into_iter()
            .find_map(|c| Some((Ipv4Net::parse(c.subnet.as_deref()?)?, c.gateway)));
        let Some((subnet, gateway)) = config else {
            return Err(JailError::EgressNetworkWithoutSubnet(network.to_owned()));
        };
        let mut used: Vec<Ipv4Addr> = inspect
            .containers
            .unwrap_or_default()
            .values()
            .filter_map(|c| c.ipv4_address.as_deref()?.split('/').next()?.parse().ok())
            .collect();
        used.extend(gateway.and_then(|g| g.parse::<Ipv4Addr>().ok()));
        let start = token::random_u32().map_err(|e| JailError::io("reading /dev/urandom", e))?;
        subnet::free_host(subnet, &used, start).ok_or_else(|| JailError::NoFreeSubnet(format!("network {network}")))
    }

    /// Polls `/health` until it answers 200; fails fast if the proxy exits.
    async fn wait_healthy(&self, name: &str, admin: &AdminClient) -> Result<(), JailError> {
        let deadline = tokio::time::Instant::now() + PROXY_START_TIMEOUT;
        loop {
            self.checkpoint()?;
            if healthy(admin).await {
                return Ok(());
            }
            let state = self
                .docker
                .inspect_container(name, None)
                .await
                .map_err(|e| JailError::docker("inspecting the proxy", e))?
                .state;
            if !state.as_ref().and_then(|s| s.running).unwrap_or(false) {
                let code = state.and_then(|s| s.exit_code).unwrap_or(-1);
                return Err(JailError::ProxyNotReady(format!(
                    "the proxy container exited with code {code}: {}",
                    self.last_log_line(name).await
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(JailError::ProxyNotReady(format!(
                    "no healthy answer within {PROXY_START_TIMEOUT:?}: {}",
                    self.last_log_line(name).await
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn last_log_line(&self, name: &str) -> String {
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail("5")
            .build();
        let mut logs = self.docker.logs(name, Some(options));
        let mut last = String::from("(no output)");
        while let Some(Ok(line)) = logs.next().await {
            let text = one_line(&line.to_string());
            if !text.is_empty() {
                last = text;
            }
        }
        last
    }

    /// Creates (not starts) the workload at `address` on `network`, its
    /// proxy variables pointing at `proxy`.
    async fn create_workload(&self, network: &str, proxy: SocketAddr, address: Ipv4Addr) -> Result<String, JailError> {
        self.checkpoint()?;
        let name = self.name("workload");
        self.containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.clone());
        let _ = self.workload_ip.set(address);
        let env = proxy_env(&proxy.to_string())
            .into_iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        let resolver = match proxy.ip() {
            std::net::IpAddr::V4(at) if self.steered() => self.steered_resolver(at)?,
            // Nothing listens there: no name ever reaches Docker's
            // embedded resolver or the host's upstream DNS.
            _ => HostConfig {
                dns: Some(vec!["127.0.0.1".into()]),
                dns_options: Some(vec!["timeout:1".into(), "attempts:1".into()]),
                ..Default::default()
            },
        };
        let config = ContainerCreateBody {
            image: Some(self.plan.image.clone()),
            cmd: Some(self.plan.command.clone()),
            env: Some(env),
            tty: Some(self.plan.tty),
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            labels: Some(self.labels()),
            host_config: Some(HostConfig {
                network_mode: Some(network.to_string()),
                // Raw sockets would let the workload hand-craft frames to the
                // proxy's other addresses (the admin API's among them): a
                // host accepts packets for any of its addresses on any link.
                cap_drop: Some(vec!["NET_RAW".into()]),
                ..resolver
            }),
            networking_config: Some(endpoint(network, address)),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        self.docker
            .create_container(Some(options), config)
            .await
            .map_err(|e| JailError::docker("creating the workload", e))?;
        Ok(name)
    }

    /// The workload's resolver when steered: a resolv.conf of the run's own
    /// naming only the proxy's DNS filter at `at`, bind-mounted read-only
    /// over the one Docker would write (which would send every name to
    /// Docker's embedded resolver first).
    fn steered_resolver(&self, at: Ipv4Addr) -> Result<HostConfig, JailError> {
        let dir = tempfile::Builder::new()
            .prefix("crackbox-run-")
            .tempdir()
            .map_err(|e| JailError::io("creating the workload's resolv.conf", e))?;
        let file = dir.path().join("resolv.conf");
        let readable = std::os::unix::fs::PermissionsExt::from_mode(0o644);
        std::fs::write(&file, super::env::resolv_conf(at))
            .and_then(|()| std::fs::set_permissions(&file, readable))
            .map_err(|e| JailError::io("writing the workload's resolv.conf", e))?;
        let bind = format!("{}:/etc/resolv.conf:ro", file.display());
        let _ = self.resolver_dir.set(dir);
        Ok(HostConfig {
            binds: Some(vec![bind]),
            ..Default::default()
        })
    }

    /// Attaches, starts and waits for the workload; returns its exit code.
    async fn run_workload(&self, name: &str) -> Result<i32, JailError> {
        let options = AttachContainerOptionsBuilder::default()
            .stream(true)
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .build();
        let attached = self
            .docker
            .attach_container(name, Some(options))
            .await
            .map_err(|e| JailError::docker("attaching to the workload", e))?;
        let _raw = if self.plan.tty {
            Some(RawMode::enable().map_err(|e| JailError::io("putting the terminal in raw mode", e))?)
        } else {
            None
        };
        let output = tokio::spawn(pump_output(attached.output));
        let input = tokio::spawn(pump_input(attached.input));
        self.docker.start_container(name, None).await.map_err(start_error)?;
        let resize = self
            .plan
            .tty
            .then(|| tokio::spawn(follow_terminal_size(self.docker.clone(), name.to_string())));
        tracing::debug!("workload started");
        let code = self.wait_exit(name).await;
        // The attach stream ends when the container does; a short grace keeps
        // its last output without hanging on a stream that never closes.
        let _ = tokio::time::timeout(Duration::from_secs(2), output).await;
        input.abort();
        if let Some(resize) = resize {
            resize.abort();
        }
        code
    }

    async fn wait_exit(&self, name: &str) -> Result<i32, JailError> {
        let options = WaitContainerOptionsBuilder::default().condition("not-running").build();
        let mut wait = self.docker.wait_container(name, Some(options));
        match wait.next().await {
            Some(Ok(response)) => Ok(exit_code(response.status_code)),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(exit_code(code)),
            Some(Err(e)) => Err(JailError::docker("waiting for the workload", e)),
            None => Err(JailError::Docker {
                step: "waiting for the workload",
                detail: "the engine closed the wait without an exit code".into(),
            }),
        }
    }

    /// Prints the hosts the workload was denied, if the proxy got far enough
    /// to have any (a shared daemon also holds other sandboxes' denials).
    async fn print_blocked(&self) {
        let (Some(admin), Some(workload)) = (self.admin.get(), self.workload_ip.get()) else {
            return;
        };
        match admin.denials(DENIALS_LIMIT).await {
            Ok(mut denials) => {
                let workload = workload.to_string();
                denials.retain(|denial| denial.ip == workload);
                if let Some(line) = summary::blocked_line(&denials) {
                    eprintln!("{line}");
                }
            }
            Err(e) => tracing::debug!("cannot read denials: {e}"),
        }
    }

    /// Removes every container this run created and undoes what it changed
    /// on a shared daemon, then removes every network it created.
    async fn teardown(&self) {
        let containers: Vec<String> = self
            .containers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        tokio::join!(
            join_all(containers.iter().map(|name| self.remove_container(name))),
            self.leave_daemon()
        );
        let networks: Vec<String> = self
            .networks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        join_all(networks.iter().map(|name| self.remove_network(name))).await;
    }

    async fn remove_container(&self, name: &str) {
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.docker.remove_container(name, Some(options)).await {
            Ok(()) => {}
            Err(e) if docker_status(&e) == Some(404) => {}
            Err(e) => eprintln!(
                "crackbox: teardown: cannot remove container {name}: {}",
                one_line(&docker_message(&e))
            ),
        }
    }

    async fn remove_network(&self, name: &str) {
        for attempt in 1..=5 {
            match self.docker.remove_network(name).await {
                Ok(()) => return,
                Err(e) if docker_status(&e) == Some(404) => return,
                Err(e) if attempt == 5 => {
                    eprintln!(
                        "crackbox: teardown: cannot remove network {name}: {}",
                        one_line(&docker_message(&e))
                    );
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200 * attempt)).await,
            }
        }
    }
}

/// The `n`-th address of a subnet this module chose (always large enough).
fn host(subnet: &Ipv4Net, n: u32) -> Result<Ipv4Addr, JailError> {
    subnet
        .host(n)
        .ok_or_else(|| JailError::NoFreeSubnet(format!("{subnet} is too small")))
}

fn ipv4_endpoint(addr: Ipv4Addr) -> EndpointSettings {
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

/// A failed workload start: the command missing or not executable is the
/// user's 127/126 (as with `docker run`), anything else crackbox's 125.
fn start_error(err: bollard::errors::Error) -> JailError {
    let detail = one_line(&docker_message(&err));
    let not_found = ["executable file not found", "no such file or directory"];
    if not_found.iter().any(|s| detail.contains(s)) {
        JailError::CommandNotRunnable { code: 127, detail }
    } else if detail.contains("permission denied") {
        JailError::CommandNotRunnable { code: 126, detail }
    } else {
        JailError::Docker {
            step: "starting the workload",
            detail,
        }
    }
}

/// A container status code as a process exit code (0–255 as the shell sees it).
fn exit_code(code: i64) -> i32 {
    i32::try_from(code.rem_euclid(256)).unwrap_or(125)
}

/// Copies the workload's output to crackbox's stdout and stderr.
async fn pump_output(
    mut output: std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
) {
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(Ok(chunk)) = output.next().await {
        let written = match chunk {
            LogOutput::StdErr { message } => stderr.write_all(&message).await.and(stderr.flush().await),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                stdout.write_all(&message).await.and(stdout.flush().await)
            }
            LogOutput::StdIn { .. } => Ok(()),
        };
        if written.is_err() {
            break;
        }
    }
}

/// Copies crackbox's stdin to the workload; closes the workload's stdin at
/// end of input.
async fn pump_input(mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>) {
    let mut chunks = stdio::stdin_chunks();
    while let Some(chunk) = chunks.recv().await {
        if input.write_all(&chunk).await.is_err() || input.flush().await.is_err() {
            return;
        }
    }
    let _ = input.shutdown().await;
}

/// Keeps the workload's TTY the size of crackbox's terminal.
async fn follow_terminal_size(docker: Docker, name: String) {
    let Ok(mut winch) = signal(SignalKind::window_change()) else {
        return;
    };
    loop {
        if let Some((rows, cols)) = stdio::terminal_size() {
            let options = ResizeContainerTTYOptionsBuilder::default()
                .h(i32::from(rows))
                .w(i32::from(cols))
                .build();
            let _ = docker.resize_container_tty(&name, options).await;
        }
        if winch.recv().await.is_none() {
            return;
        }
    }
}
