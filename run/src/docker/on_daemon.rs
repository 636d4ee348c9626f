//! The docker backend behind `--daemon NAME`: the jail's proxy is the
//! long-lived crackbox container NAME, shared by many runs, instead of one
//! started per run.
//!
//! Per run: NAME is checked (a running `crackbox proxy serve` whose admin API
//! answers), connected to the run's jail network as `.2`, and the workload
//! created as `.3`, told NAME's `.2` as its HTTP proxy and, when NAME has a
//! SOCKS5 listener, as its SOCKS5 proxy. When NAME steers every jail (see
//! `daemon_config`), the workload's resolver is NAME's `.2`. The connection is recorded in the
//! journal before it is made, so teardown disconnects NAME on every exit
//! path (the lifecycle unregisters the workload); NAME itself is never
//! stopped, restarted or reconfigured.

use super::calls::{host, DockerRun};
use super::daemon_config;
use super::ipv4_endpoint;
use super::workload::{self, Placed};
use crate::admin::{jail_client, wait_healthy};
use crate::error::{docker_message, docker_status, RunError};
use crate::journal::{Journal, Kind};
use crate::lifecycle::{Backend, Jail};
use crate::plan::Plan;
use crate::steps::timed;
use crate::workload_env::Endpoints;
use bollard::models::{NetworkConnectRequest, NetworkDisconnectRequest};
use bollard::Docker;
use crackbox_client::Client;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// How long the daemon's admin API may take to answer `/health`.
const DAEMON_HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// A docker run behind a shared crackbox daemon container.
pub struct OnDaemon {
    run: DockerRun,
    plan: Plan,
    image: String,
    daemon: String,
}

/// What `run` found out about the daemon.
struct Found {
    admin: Client,
    proxy_port: u16,
    socks_port: Option<u16>,
    steers: bool,
}

impl OnDaemon {
    /// Connects to Docker for `plan`'s run behind `daemon`.
    pub async fn connect(plan: &Plan, image: String, daemon: String) -> Result<Self, RunError> {
        Ok(OnDaemon {
            run: timed("docker connect", DockerRun::connect(plan)).await?,
            plan: plan.clone(),
            image,
            daemon,
        })
    }

    fn refused(&self, problem: String) -> RunError {
        RunError::Daemon {
            name: self.daemon.clone(),
            problem,
        }
    }

    /// Checks that the daemon is a running crackbox whose admin API answers.
    async fn find_daemon(&self, journal: &Journal) -> Result<Found, RunError> {
        let inspect = match self.run.docker.inspect_container(&self.daemon, None).await {
            Ok(inspect) => inspect,
            Err(e) if docker_status(&e) == Some(404) => return Err(self.refused("no such container".into())),
            Err(e) => return Err(RunError::docker("inspecting the daemon", e)),
        };
        if !inspect.state.and_then(|s| s.running).unwrap_or(false) {
            return Err(self.refused("the container is not running".into()));
        }
        let env = inspect.config.and_then(|c| c.env).unwrap_or_default();
        let endpoints =
            daemon_config::endpoints(&inspect.args.unwrap_or_default(), &env).map_err(|p| self.refused(p))?;
        let secret = std::env::var("CRACKBOX_ADMIN_SECRET")
            .ok()
            .filter(|s| !s.is_empty())
            .or(endpoints.secret)
            .ok_or_else(|| self.refused("set CRACKBOX_ADMIN_SECRET to its admin secret".into()))?;
        let admin = jail_client(endpoints.admin, secret);
        // Probes repeat: a loaded daemon may miss one.
        if !wait_healthy(&admin, journal, DAEMON_HEALTH_TIMEOUT, async || None).await? {
            return Err(self.refused(format!(
                "its admin API at {} does not answer /health with 200 (unreachable from this host, or its engine is down)",
                endpoints.admin
            )));
        }
        Ok(Found {
            admin,
            proxy_port: endpoints.proxy_port,
            socks_port: endpoints.socks_port,
            steers: endpoints.steers,
        })
    }

    async fn connect_daemon(&self, journal: &Journal, network: &str, address: Ipv4Addr) -> Result<(), RunError> {
        journal.record(
            Kind::Leaf,
            timed(
                "daemon disconnect",
                disconnect(self.run.docker.clone(), self.daemon.clone(), network.to_string()),
            ),
        )?;
        let connect = NetworkConnectRequest {
            container: self.daemon.clone(),
            endpoint_config: Some(ipv4_endpoint(address)),
        };
        self.run
            .docker
            .connect_network(network, connect)
            .await
            .map_err(|e| RunError::docker("connecting the daemon to the jail network", e))
    }
}

impl Backend for OnDaemon {
    type Workload = String;

    async fn set_up(&self, journal: &Journal) -> Result<(Jail, String), RunError> {
        let (found, image) = tokio::join!(
            timed("daemon check", self.find_daemon(journal)),
            timed("image check", self.run.ensure_workload_image(&self.image))
        );
        let found = found?;
        image?;
        journal.checkpoint()?;
        let network = self.run.name("");
        let subnet = timed("network create", self.run.create_network(journal, &network, true)).await?;
        let (proxy, address) = (host(&subnet, 2)?, host(&subnet, 3)?);
        let placed = Placed {
            network: &network,
            address,
            proxy: Endpoints {
                forward: SocketAddr::from((proxy, found.proxy_port)),
                socks: found.socks_port.map(|port| SocketAddr::from((proxy, port))),
            },
            steered: self.plan.steer && found.steers,
        };
        let (connected, created) = tokio::join!(
            timed("daemon connect", self.connect_daemon(journal, &network, proxy)),
            timed(
                "container create",
                workload::create(&self.run, journal, &self.plan, &self.image, placed)
            )
        );
        connected?;
        let jail = Jail {
            admin: found.admin,
            source: address.into(),
            shared: true,
        };
        Ok((jail, created?))
    }

    async fn run_workload(&self, name: String) -> Result<i32, RunError> {
        workload::run(&self.run, &name, self.plan.tty).await
    }
}

/// Disconnects the daemon from the jail network; a connect that never
/// happened (a signal or a failure first) is fine.
async fn disconnect(docker: Docker, daemon: String, network: String) -> Result<(), String> {
    let request = NetworkDisconnectRequest {
        container: daemon.clone(),
        force: Some(true),
    };
    match docker.disconnect_network(&network, request).await {
        Ok(()) => Ok(()),
        Err(e) if docker_status(&e) == Some(404) || docker_message(&e).contains("not connected") => Ok(()),
        Err(e) => Err(format!(
            "cannot disconnect {daemon} from {network}: {}",
            docker_message(&e)
        )),
    }
}
