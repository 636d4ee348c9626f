//! The docker backend with a proxy of the run's own: the jail network and
//! an egress network (or `--egress-network`), the proxy container on both
//! (its image built from this executable when missing, `image`), and the
//! workload on the jail network only. Only these steps live here; the
//! lifecycle registers, summarises and tears down.

use super::calls::{host, DockerRun};
use super::workload::{self, Placed};
use super::{image, ipv4_endpoint, proxy_spec, Place, ProxySpec};
use crate::admin::{jail_client, wait_healthy};
use crate::error::{docker_message, RunError};
use crate::jail_proxy::{self, JailProxy, Listeners, ProxyPorts};
use crate::journal::Journal;
use crate::lifecycle::{Backend, Jail};
use crate::plan::Plan;
use crate::steps::timed;
use crate::subnet::{self, Ipv4Net};
use crate::token;
use bollard::models::NetworkConnectRequest;
use crackbox_client::Client;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// How long the proxy may take to answer `/health`.
const PROXY_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A docker run behind a proxy container of its own.
pub struct PerRunProxy {
    run: DockerRun,
    plan: Plan,
    image: String,
    proxy_image: Option<String>,
    egress_network: Option<String>,
    proxy: JailProxy,
}

/// The jail network and where the proxy sits on it and on its way out.
struct Networks {
    internal: String,
    egress: String,
    proxy_internal: Ipv4Addr,
    workload: Ipv4Addr,
}

impl PerRunProxy {
    /// Connects to Docker for `plan`'s run.
    pub async fn connect(
        plan: &Plan,
        image: String,
        proxy_image: Option<String>,
        egress_network: Option<String>,
        proxy: JailProxy,
    ) -> Result<Self, RunError> {
        Ok(PerRunProxy {
            run: timed("docker connect", DockerRun::connect(plan)).await?,
            plan: plan.clone(),
            image,
            proxy_image,
            egress_network,
            proxy,
        })
    }

    /// Starts the proxy on the egress and jail networks and waits until its
    /// admin API is healthy. On a shared egress network the proxy takes a
    /// random free address there, and another one if it loses a race.
    async fn start_proxy(
        &self,
        journal: &Journal,
        image: &str,
        nets: &Networks,
        own_egress: Option<Ipv4Net>,
    ) -> Result<Client, RunError> {
        let secret = token::random_hex(32).map_err(|e| RunError::io("reading /dev/urandom", e))?;
        let name = self.run.name("proxy");
        let mut attempts = 0;
        let egress_ip = loop {
            journal.checkpoint()?;
            attempts += 1;
            let egress_ip = match own_egress {
                Some(subnet) => host(&subnet, 2)?,
                None => self.free_address(&nets.egress).await?,
            };
            self.create_proxy(journal, &name, image, nets, egress_ip, &secret)
                .await?;
            match self.run.docker.start_container(&name, None).await {
                Ok(()) => break egress_ip,
                Err(e) if attempts < 5 && docker_message(&e).contains("already in use") => {
                    super::calls::remove_container(self.run.docker.clone(), name.clone())
                        .await
                        .map_err(|detail| RunError::Docker {
                            step: "retrying the proxy",
                            detail,
                        })?;
                }
                // Docker's inspect shows an auto-allocated subnet like a configured
                // one; only the refusal to start tells them apart.
                Err(e) if own_egress.is_none() && docker_message(&e).contains("user configured subnets") => {
                    return Err(RunError::EgressNetworkWithoutSubnet(nets.egress.clone()));
                }
                Err(e) => return Err(RunError::docker("starting the proxy", e)),
            }
        };
        let admin = jail_client(SocketAddr::from((egress_ip, ProxyPorts::STANDARD.admin)), secret);
        let exited = async || self.proxy_exited(&name).await;
        if !wait_healthy(&admin, journal, PROXY_START_TIMEOUT, exited).await? {
            return Err(RunError::ProxyNotReady(format!(
                "no healthy answer within {PROXY_START_TIMEOUT:?}: {}",
                self.run.last_log_line(&name).await
            )));
        }
        Ok(admin)
    }

    async fn create_proxy(
        &self,
        journal: &Journal,
        name: &str,
        image: &str,
        nets: &Networks,
        egress_ip: Ipv4Addr,
        secret: &str,
    ) -> Result<(), RunError> {
        // Its own network namespace: the usual ports, which nothing else holds there.
        let at = Listeners {
            jail_side: nets.proxy_internal.into(),
            admin_side: egress_ip.into(),
            steer: self.plan.steer,
            ports: ProxyPorts::STANDARD,
        };
        let spec = ProxySpec {
            image,
            command: self.proxy.command(at),
            env: self.proxy.env(secret),
            egress: (&nets.egress, egress_ip),
        };
        let body = proxy_spec(spec, self.run.labels());
        self.run
            .create_container(journal, name, body, "creating the proxy")
            .await?;
        let connect = NetworkConnectRequest {
            container: name.to_string(),
            endpoint_config: Some(ipv4_endpoint(nets.proxy_internal)),
        };
        self.run
            .docker
            .connect_network(&nets.internal, connect)
            .await
            .map_err(|e| RunError::docker("connecting the proxy to the jail network", e))
    }

    /// Why the proxy container stopped, if it did.
    async fn proxy_exited(&self, name: &str) -> Option<RunError> {
        let state = match self.run.docker.inspect_container(name, None).await {
            Ok(inspect) => inspect.state,
            Err(e) => return Some(RunError::docker("inspecting the proxy", e)),
        };
        if state.as_ref().and_then(|s| s.running).unwrap_or(false) {
            return None;
        }
        let code = state.and_then(|s| s.exit_code).unwrap_or(-1);
        Some(RunError::ProxyNotReady(format!(
            "the proxy container exited with code {code}: {}",
            self.run.last_log_line(name).await
        )))
    }

    /// A random address of `network`'s IPv4 subnet that no endpoint uses.
    async fn free_address(&self, network: &str) -> Result<Ipv4Addr, RunError> {
        let inspect = self
            .run
            .docker
            .inspect_network(network, None)
            .await
            .map_err(|e| RunError::docker("inspecting the egress network", e))?;
        let config = inspect
            .ipam
            .and_then(|ipam| ipam.config)
            .unwrap_or_default()
            .into_iter()
            .find_map(|c| Some((Ipv4Net::parse(c.subnet.as_deref()?)?, c.gateway)));
        let Some((subnet, gateway)) = config else {
            return Err(RunError::EgressNetworkWithoutSubnet(network.to_owned()));
        };
        let mut used: Vec<Ipv4Addr> = inspect
            .containers
            .unwrap_or_default()
            .values()
            .filter_map(|c| c.ipv4_address.as_deref()?.split('/').next()?.parse().ok())
            .collect();
        used.extend(gateway.and_then(|g| g.parse::<Ipv4Addr>().ok()));
        let start = token::random_u32().map_err(|e| RunError::io("reading /dev/urandom", e))?;
        subnet::free_host(subnet, &used, start).ok_or_else(|| RunError::NoFreeSubnet(format!("network {network}")))
    }
}

impl Backend for PerRunProxy {
    type Workload = String;

    async fn set_up(&self, journal: &Journal) -> Result<(Jail, String), RunError> {
        let (proxy_image, workload_image) = tokio::join!(
            image::ensure_proxy_image(&self.run.docker, self.proxy_image.as_deref(), true),
            self.run.ensure_workload_image(&self.image)
        );
        let proxy_image = proxy_image?;
        workload_image?;
        journal.checkpoint()?;
        let internal = self.run.name("");
        let (subnet, egress, own_egress) = match &self.egress_network {
            Some(name) => (
                self.run.create_network(journal, &internal, true).await?,
                name.clone(),
                None,
            ),
            None => {
                let name = self.run.name("egress");
                let (subnet, egress) = tokio::join!(
                    self.run.create_network(journal, &internal, true),
                    self.run.create_network(journal, &name, false)
                );
                (subnet?, name, Some(egress?))
            }
        };
        tracing::debug!(%subnet, "jail networks created");
        let nets = Networks {
            internal,
            egress,
            proxy_internal: host(&subnet, 2)?,
            workload: host(&subnet, 3)?,
        };
        let placed = Placed {
            place: Place::On(&nets.internal, nets.workload),
            proxy: jail_proxy::endpoints(nets.proxy_internal.into(), ProxyPorts::STANDARD),
            steered: self.plan.steer,
        };
        // The workload is created while the proxy starts; it starts only
        // once its address is registered.
        let (admin, workload) = tokio::join!(
            self.start_proxy(journal, &proxy_image, &nets, own_egress),
            workload::create(&self.run, journal, &self.plan, &self.image, placed)
        );
        let jail = Jail {
            admin: admin?,
            source: nets.workload.into(),
            shared: false,
        };
        Ok((jail, workload?))
    }

    async fn run_workload(&self, name: String) -> Result<i32, RunError> {
        workload::run(&self.run, &name, self.plan.tty).await
    }
}
