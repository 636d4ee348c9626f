//! `run --daemon NAME`: the jail's proxy is the long-lived crackbox container
//! NAME, shared by many runs, instead of one started per run.
//!
//! Per run: NAME is checked (a running `crackbox proxy serve` whose admin API
//! answers), connected to the run's internal network as `.2`, and the
//! workload's `.3` is registered through NAME's admin API. When NAME steers
//! every jail (see `daemon_config`), the workload's resolver is NAME's `.2`.
//! Each of these changes is recorded in the run's [`Lease`] before it is
//! made, and teardown undoes what the lease holds on every exit path; NAME
//! itself is never stopped, restarted or reconfigured.

use super::{host, ipv4_endpoint, Jail};
use crate::jail::admin::{failed, healthy, jail_client};
use crate::jail::daemon_config;
use crate::jail::error::{docker_message, docker_status, JailError};
use bollard::models::{NetworkConnectRequest, NetworkDisconnectRequest};
use crackbox_client::{Client as AdminClient, RegistrationSpec};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::MutexGuard;
use std::time::Duration;

/// How long the daemon's admin API may take to answer `/health`.
const DAEMON_HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// What a run changed on the shared daemon, for teardown to undo.
#[derive(Debug, Default)]
pub(super) struct Lease {
    /// The daemon container, once it is known to be a usable crackbox.
    daemon: Option<String>,
    /// The jail network the daemon is (or is being) connected to.
    network: Option<String>,
    /// The workload address registered (or being registered) with it.
    registered: Option<Ipv4Addr>,
}

impl Jail {
    /// Set-up on a shared daemon: the internal network, the daemon on it,
    /// the workload created and registered; returns the workload's name.
    pub(super) async fn setup_on_daemon(&self, daemon: &str) -> Result<String, JailError> {
        let (found, image) = tokio::join!(self.find_daemon(daemon), self.check_workload_image());
        let (admin, proxy_port) = found?;
        image?;
        self.checkpoint()?;
        let network = self.name("");
        let subnet = self.create_network(&network, true).await?;
        let (proxy, workload) = (host(&subnet, 2)?, host(&subnet, 3)?);
        let (connected, created) = tokio::join!(
            self.connect_daemon(daemon, &network, proxy),
            self.create_workload(&network, SocketAddr::from((proxy, proxy_port)), workload)
        );
        connected?;
        let name = created?;
        self.checkpoint()?;
        // Recorded first: a registration that timed out may still be kept.
        self.lease().registered = Some(workload);
        let spec = RegistrationSpec::new(workload.to_string(), &self.plan.id, &self.plan.allow);
        if let Err(e) = admin.register(&spec).await {
            if e.refused() {
                self.lease().registered = None;
            }
            return Err(failed("registering the workload with the daemon", &e));
        }
        tracing::debug!(%workload, daemon, "workload registered with the daemon");
        Ok(name)
    }

    /// Checks that `daemon` is a running crackbox whose admin API answers;
    /// returns a client for that API and the forward listener's port.
    async fn find_daemon(&self, daemon: &str) -> Result<(AdminClient, u16), JailError> {
        let refused = |problem: String| JailError::Daemon {
            name: daemon.to_string(),
            problem,
        };
        let inspect = match self.docker.inspect_container(daemon, None).await {
            Ok(inspect) => inspect,
            Err(e) if docker_status(&e) == Some(404) => return Err(refused("no such container".into())),
            Err(e) => return Err(JailError::docker("inspecting the daemon", e)),
        };
        if !inspect.state.and_then(|s| s.running).unwrap_or(false) {
            return Err(refused("the container is not running".into()));
        }
        let env = inspect.config.and_then(|c| c.env).unwrap_or_default();
        let endpoints = daemon_config::endpoints(&inspect.args.unwrap_or_default(), &env).map_err(refused)?;
        let secret = std::env::var("CRACKBOX_ADMIN_SECRET")
            .ok()
            .filter(|s| !s.is_empty())
            .or(endpoints.secret)
            .ok_or_else(|| refused("set CRACKBOX_ADMIN_SECRET to its admin secret".into()))?;
        let admin = jail_client(endpoints.admin, secret);
        if !self.answers_health(&admin).await {
            return Err(refused(format!(
                "its admin API at {} does not answer /health with 200 (unreachable from this host, or its engine is down)",
                endpoints.admin
            )));
        }
        let _ = self.admin.set(admin.clone());
        let _ = self.daemon_steers.set(endpoints.steers);
        self.lease().daemon = Some(daemon.to_string());
        Ok((admin, endpoints.proxy_port))
    }

    /// Whether `/health` answers 200 within [`DAEMON_HEALTH_TIMEOUT`]
    /// (probes repeat: a loaded daemon may miss one).
    async fn answers_health(&self, admin: &AdminClient) -> bool {
        let deadline = tokio::time::Instant::now() + DAEMON_HEALTH_TIMEOUT;
        loop {
            if healthy(admin).await {
                return true;
            }
            if tokio::time::Instant::now() >= deadline || self.checkpoint().is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn connect_daemon(&self, daemon: &str, network: &str, address: Ipv4Addr) -> Result<(), JailError> {
        self.checkpoint()?;
        self.lease().network = Some(network.to_string());
        let connect = NetworkConnectRequest {
            container: daemon.to_string(),
            endpoint_config: Some(ipv4_endpoint(address)),
        };
        self.docker
            .connect_network(network, connect)
            .await
            .map_err(|e| JailError::docker("connecting the daemon to the jail network", e))
    }

    /// Unregisters the workload and disconnects the daemon, as far as the
    /// lease says set-up got; failures are reported, never fatal.
    pub(super) async fn leave_daemon(&self) {
        let lease = std::mem::take(&mut *self.lease());
        let Some(daemon) = lease.daemon else { return };
        let unregister = async {
            let (Some(ip), Some(admin)) = (lease.registered, self.admin.get()) else {
                return;
            };
            if let Err(e) = admin.unregister(&ip.to_string()).await {
                eprintln!("crackbox: teardown: cannot unregister {ip} from {daemon}: {e}");
            }
        };
        let disconnect = async {
            let Some(network) = &lease.network else { return };
            let request = NetworkDisconnectRequest {
                container: daemon.clone(),
                force: Some(true),
            };
            match self.docker.disconnect_network(network, request).await {
                Ok(()) => {}
                // The connect never happened (a signal or a failure first).
                Err(e) if docker_status(&e) == Some(404) || docker_message(&e).contains("not connected") => {}
                Err(e) => eprintln!(
                    "crackbox: teardown: cannot disconnect {daemon} from {network}: {}",
                    docker_message(&e)
                ),
            }
        };
        tokio::join!(unregister, disconnect);
    }

    fn lease(&self) -> MutexGuard<'_, Lease> {
        self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }
}
