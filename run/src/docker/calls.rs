//! One run's view of the Docker engine: the connection, the run's names and
//! labels, and the calls both docker backends make (images, networks on a
//! free subnet, containers, logs). Every object is recorded in the journal
//! before its create call, with its removal as the undo.

use super::{labels, network_spec};
use crate::error::{docker_message, docker_status, one_line, RunError};
use crate::journal::{Entry, Journal, Kind};
use crate::plan::Plan;
use crate::steps::timed;
use crate::subnet::{self, Ipv4Net};
use crate::token;
use bollard::models::{ContainerCreateBody, NetworkDisconnectRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Subnets for per-run networks come from here (the netns backend uses the lower half).
const POOL: &str = "10.213.128.0/17";
/// Size of each per-run network: network, gateway, proxy, workload and spare.
const NET_PREFIX: u8 = 29;

/// The Docker engine as one run uses it.
#[derive(Clone)]
pub struct DockerRun {
    /// The connection.
    pub docker: Docker,
    run_id: String,
    id: String,
}

impl DockerRun {
    /// Connects to the engine named by `DOCKER_HOST` (or the local socket)
    /// and agrees on an API version it speaks (Docker 20.10 speaks 1.41).
    pub async fn connect(plan: &Plan) -> Result<Self, RunError> {
        let docker = Docker::connect_with_defaults()
            .map_err(|e| RunError::DockerUnreachable(one_line(&e.to_string())))?
            .with_timeout(Duration::from_secs(60));
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| RunError::DockerUnreachable(one_line(&docker_message(&e))))?;
        Ok(DockerRun {
            docker,
            run_id: plan.run_id.clone(),
            id: plan.id.to_string(),
        })
    }

    /// `crackbox-R` for an empty suffix, else `crackbox-R-suffix`.
    pub fn name(&self, suffix: &str) -> String {
        match suffix {
            "" => format!("crackbox-{}", self.run_id),
            _ => format!("crackbox-{}-{suffix}", self.run_id),
        }
    }

    /// The labels every object of this run carries.
    pub fn labels(&self) -> HashMap<String, String> {
        labels(&self.run_id, &self.id)
    }

    /// Pulls the workload image when it is not present.
    pub async fn ensure_workload_image(&self, image: &str) -> Result<(), RunError> {
        match self.docker.inspect_image(image).await {
            Ok(_) => return Ok(()),
            Err(e) if docker_status(&e) == Some(404) => {}
            Err(e) => return Err(RunError::docker("inspecting the workload image", e)),
        }
        eprintln!("crackbox: pulling {image}");
        let options = CreateImageOptionsBuilder::default().from_image(image).build();
        let mut progress = self.docker.create_image(Some(options), None, None);
        while let Some(step) = progress.next().await {
            if let Err(e) = step {
                return Err(RunError::WorkloadImageMissing {
                    image: image.to_string(),
                    detail: one_line(&docker_message(&e)),
                });
            }
        }
        Ok(())
    }

    /// Creates the bridge network `name` of this run on a free subnet (see
    /// [`network_spec`]); retries when another run took the subnet between
    /// the check and the create.
    pub async fn create_network(&self, journal: &Journal, name: &str, internal: bool) -> Result<Ipv4Net, RunError> {
        self.create_labelled_network(journal, name, internal, self.labels())
            .await
            .map(|(subnet, _)| subnet)
    }

    /// [`DockerRun::create_network`] with `labels`; also returns its journal entry.
    pub async fn create_labelled_network(
        &self,
        journal: &Journal,
        name: &str,
        internal: bool,
        labels: HashMap<String, String>,
    ) -> Result<(Ipv4Net, Entry), RunError> {
        let pool = Ipv4Net::parse(POOL).ok_or_else(|| RunError::NoFreeSubnet(POOL.into()))?;
        let entry = journal.record(
            Kind::Holder,
            timed("network remove", remove_network(self.docker.clone(), name.to_string())),
        )?;
        let mut last_error = None;
        for _ in 0..16 {
            journal.checkpoint()?;
            let taken = self.taken_subnets().await?;
            let start = token::random_u32().map_err(|e| RunError::io("reading /dev/urandom", e))?;
            let subnet =
                subnet::pick(pool, NET_PREFIX, &taken, start).ok_or_else(|| RunError::NoFreeSubnet(POOL.into()))?;
            let spec = network_spec(name, &subnet.to_string(), host(&subnet, 1)?, internal, labels.clone());
            match self.docker.create_network(spec).await {
                Ok(_) => return Ok((subnet, entry)),
                Err(e) if docker_message(&e).contains("overlap") => last_error = Some(e),
                Err(e) => return Err(RunError::docker("creating a network", e)),
            }
        }
        Err(last_error.map_or_else(
            || RunError::NoFreeSubnet(POOL.into()),
            |e| RunError::docker("creating a network", e),
        ))
    }

    /// Subnets Docker's networks use plus the host's routes.
    async fn taken_subnets(&self) -> Result<Vec<Ipv4Net>, RunError> {
        let networks = self
            .docker
            .list_networks(None)
            .await
            .map_err(|e| RunError::docker("listing networks", e))?;
        let mut taken: Vec<Ipv4Net> = networks
            .iter()
            .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
            .flatten()
            .filter_map(|c| Ipv4Net::parse(c.subnet.as_deref()?))
            .collect();
        taken.extend(subnet::host_routes());
        Ok(taken)
    }

    /// Creates (not starts) the container `name`; `step` names it in errors.
    pub async fn create_container(
        &self,
        journal: &Journal,
        name: &str,
        body: ContainerCreateBody,
        step: &'static str,
    ) -> Result<(), RunError> {
        journal.record(
            Kind::Leaf,
            timed(
                "container remove",
                remove_container(self.docker.clone(), name.to_string()),
            ),
        )?;
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        self.docker
            .create_container(Some(options), body)
            .await
            .map(drop)
            .map_err(|e| RunError::docker(step, e))
    }

    /// The last non-empty line a container logged, for error messages.
    pub async fn last_log_line(&self, name: &str) -> String {
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
}

/// The `n`-th address of a subnet this module chose (always large enough).
pub fn host(subnet: &Ipv4Net, n: u32) -> Result<Ipv4Addr, RunError> {
    subnet
        .host(n)
        .ok_or_else(|| RunError::NoFreeSubnet(format!("{subnet} is too small")))
}

/// Removes a container, running or not; one that is already gone is fine,
/// and so is one whose removal the engine already has under way (after a
/// failed start it may): then this waits until it is gone.
pub async fn remove_container(docker: Docker, name: String) -> Result<(), String> {
    let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
    let failed =
        |e: &bollard::errors::Error| format!("cannot remove container {name}: {}", one_line(&docker_message(e)));
    match docker.remove_container(&name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if docker_status(&e) == Some(404) => Ok(()),
        Err(e) if docker_message(&e).contains("already in progress") => {
            for _ in 0..100 {
                match docker.inspect_container(&name, None).await {
                    Err(gone) if docker_status(&gone) == Some(404) => return Ok(()),
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            Err(failed(&e))
        }
        Err(e) => Err(failed(&e)),
    }
}

/// Disconnects the container `daemon` from `network`; one that is not
/// connected (a connect that never happened) is fine.
pub async fn disconnect(docker: Docker, daemon: String, network: String) -> Result<(), String> {
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

/// Removes a network, retrying while its endpoints go away. Docker 20.10
/// can keep a stale endpoint of a container already removed ("has active
/// endpoints"): those are force-disconnected before the next attempt.
pub async fn remove_network(docker: Docker, name: String) -> Result<(), String> {
    for attempt in 1..=5 {
        match docker.remove_network(&name).await {
            Ok(()) => return Ok(()),
            Err(e) if docker_status(&e) == Some(404) => return Ok(()),
            Err(e) if attempt == 5 => {
                return Err(format!(
                    "cannot remove network {name}: {}",
                    one_line(&docker_message(&e))
                ))
            }
            Err(e) => {
                if docker_message(&e).contains("active endpoints") {
                    disconnect_all(&docker, &name).await;
                }
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
        }
    }
    Ok(())
}

/// Force-disconnects every endpoint Docker still lists on `network`.
async fn disconnect_all(docker: &Docker, network: &str) {
    let Ok(inspect) = docker.inspect_network(network, None).await else {
        return;
    };
    for (id, endpoint) in inspect.containers.unwrap_or_default() {
        let request = NetworkDisconnectRequest {
            container: endpoint.name.unwrap_or(id),
            force: Some(true),
        };
        let _ = docker.disconnect_network(network, request).await;
    }
}
