//! The docker backend behind `--daemon NAME`: the jail's proxy is the
//! long-lived crackbox container NAME, shared by many runs, instead of one
//! started per run.
//!
//! Per run: NAME is checked (a running `crackbox proxy serve` whose admin API
//! answers), a jail of NAME's pool claimed (`pool`: a network NAME is
//! connected to as `.2`, kept between runs) and the workload created in it
//! as `.3`, told NAME's `.2` as its HTTP proxy and, when NAME has a SOCKS5
//! listener, as its SOCKS5 proxy. When NAME steers every jail (see
//! `daemon_config`), the workload's resolver is NAME's `.2`. The claim is
//! recorded in the journal before it is made, so on every exit path
//! teardown unregisters the workload and then removes its container, which
//! returns the jail to the pool; NAME itself is never stopped, restarted
//! or reconfigured.

use super::calls::{host, DockerRun};
use super::daemon_config;
use super::pool::Pool;
use super::workload::{self, Placed};
use super::Place;
use crate::admin::{jail_client, wait_healthy};
use crate::error::{docker_status, RunError};
use crate::journal::Journal;
use crate::lifecycle::{Backend, Jail};
use crate::plan::Plan;
use crate::steps::timed;
use crate::workload_env::Endpoints;
use crackbox_client::Client;
use std::collections::HashMap;
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
    /// The networks it is on, with its address on each.
    networks: HashMap<String, Option<Ipv4Addr>>,
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
        let networks = inspect
            .network_settings
            .and_then(|s| s.networks)
            .unwrap_or_default()
            .into_iter()
            .map(|(name, endpoint)| (name, endpoint.ip_address.and_then(|ip| ip.parse().ok())))
            .collect();
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
            networks,
        })
    }
}

impl Backend for OnDaemon {
    type Workload = String;

    async fn set_up(&self, journal: &Journal) -> Result<(Jail, String), RunError> {
        let pool = Pool::new(&self.run, &self.daemon);
        let (found, image, survey) = tokio::join!(
            timed("daemon check", self.find_daemon(journal)),
            timed("image check", self.run.ensure_workload_image(&self.image)),
            timed("pool survey", pool.survey())
        );
        let (found, survey) = (found?, survey?);
        image?;
        journal.checkpoint()?;
        let body = |jail: &super::pool::Jail| {
            let proxy = host(&jail.subnet, 2)?;
            let holder = jail.holder();
            let placed = Placed {
                place: Place::Joined(&holder),
                proxy: Endpoints {
                    forward: SocketAddr::from((proxy, found.proxy_port)),
                    socks: found.socks_port.map(|port| SocketAddr::from((proxy, port))),
                },
                steered: self.plan.steer && found.steers,
            };
            workload::body(&self.run, journal, &self.plan, &self.image, placed)
        };
        let (jail, workload) = timed("jail claim", pool.claim(journal, survey, &found.networks, body)).await?;
        tracing::debug!(jail = jail.network, "jail claimed");
        let jail = Jail {
            admin: found.admin,
            source: host(&jail.subnet, 3)?.into(),
            shared: true,
        };
        Ok((jail, workload))
    }

    async fn run_workload(&self, name: String) -> Result<i32, RunError> {
        workload::run(&self.run, &name, self.plan.tty).await
    }
}
