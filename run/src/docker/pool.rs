//! The pool of jails a `--daemon NAME` run takes its jail from, so that a
//! run creates only its workload container.
//!
//! A pooled jail `crackbox-pool-H` is an `internal` network with
//! `inhibit_ipv4` (as every jail network), NAME connected at `.2`, and a
//! holder container `crackbox-pool-H-holder` at `.3` (`crackbox hold`, from
//! `run`'s own image, no capability) that only keeps the network namespace
//! alive. The workload joins that namespace (`--network container:`), which
//! Docker starts faster than a container with an endpoint of its own, so
//! it is `.3`; the source the run registers.
//!
//! Who keeps the pool: Docker itself. NAME is a crackbox container with no
//! access to the Docker API (giving it the socket would hand the process
//! that faces every workload root on the host), and `run` is a short-lived
//! process, so neither can hold it in memory. The jails are Docker objects
//! labelled `io.crackbox.pool=NAME`, and the only lock is Docker's own: a
//! run claims jail `H` by creating its workload container under the name
//! `crackbox-pool-H-workload`, which the engine gives one run only (a second
//! create of the name is refused with 409, and that run tries another
//! jail). The claim lasts as long as that container exists.
//!
//! Order at teardown (the lifecycle's journal): the registration of `.3` is
//! undone first, then the workload container is removed (releasing the
//! claim); so the registration a run removes is always its own, and the
//! next run of the jail registers `.3` anew. A jail is reused only once the
//! earlier workload's container, every process and socket of it, is gone;
//! the namespace it shared keeps nothing a workload can change (no
//! `NET_ADMIN`; its /etc files are the run's own, mounted read-only).
//!
//! What is never lost: when no jail is free a run makes one and adds it to
//! the pool (while the pool has fewer than [`KEEP`] jails, a bound runs that
//! start together may each pass by one; beyond it a run makes a jail of its
//! own, labelled as the run's and not the pool's, removed at its teardown). A crashed run leaves at
//! most its claim (and its registration, which the next run of the jail
//! replaces): a claim whose container stopped more than [`GRACE`] ago, or
//! was created and never started that long ago, is removed by the next run
//! that finds no free jail, and so is an unclaimed jail whose holder is not
//! running (or missing) that long after it was made.
//! Nothing here removes a running workload. `docker rm -f` of the holders
//! and `docker network rm` of the networks labelled `io.crackbox.pool=NAME`
//! empties the pool of a daemon that is gone.

use super::calls::{disconnect, host, remove_container, remove_network, DockerRun};
use super::{holder_spec, image, ipv4_endpoint, POOL_LABEL};
use crate::error::{docker_message, docker_status, RunError};
use crate::journal::{Journal, Kind};
use crate::steps::timed;
use crate::subnet::Ipv4Net;
use crate::token;
use bollard::models::{ContainerCreateBody, ContainerSummaryStateEnum, NetworkConnectRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, ListNetworksOptionsBuilder,
};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The pool size from which a run makes a jail of its own instead of a
/// pooled one (runs that survey the pool at once may each add one).
pub const KEEP: usize = 32;
/// How long a stopped (or never started) claim stays before another run
/// may take it back: far beyond the time between a run's workload stopping
/// and its teardown unregistering it.
pub const GRACE: Duration = Duration::from_secs(60);
/// Label with the Unix time a pooled jail's network was created (its age
/// while it has no running holder yet).
const CREATED_LABEL: &str = "io.crackbox.pool.created";
/// How many times a run goes back to the pool after losing every race.
const ROUNDS: usize = 4;

/// One pooled jail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jail {
    /// The network (`crackbox-pool-H`).
    pub network: String,
    /// Its subnet: the daemon is `.2`, the holder (and so the workload) `.3`.
    pub subnet: Ipv4Net,
}

impl Jail {
    /// The holder container's name.
    pub fn holder(&self) -> String {
        format!("{}-holder", self.network)
    }

    /// The name of the workload container that claims the jail.
    pub fn claim(&self) -> String {
        format!("{}-workload", self.network)
    }
}

/// A container of the pool as the survey saw it.
#[derive(Debug, Clone)]
struct Seen {
    running: bool,
    created: i64,
}

/// What the pool of one daemon holds: its jails, and its containers by name.
pub struct Survey {
    jails: Vec<(Jail, i64)>,
    containers: HashMap<String, Seen>,
}

/// The pool of the daemon container `daemon` (its name).
pub struct Pool<'a> {
    run: &'a DockerRun,
    daemon: &'a str,
}

impl<'a> Pool<'a> {
    /// The pool of `daemon`, as `run` sees it.
    pub fn new(run: &'a DockerRun, daemon: &'a str) -> Self {
        Pool { run, daemon }
    }

    fn filter(&self) -> HashMap<&'static str, Vec<String>> {
        HashMap::from([("label", vec![format!("{POOL_LABEL}={}", self.daemon)])])
    }

    /// Lists the pool's networks and containers (two calls, made together).
    pub async fn survey(&self) -> Result<Survey, RunError> {
        let filter = self.filter();
        let networks = ListNetworksOptionsBuilder::default().filters(&filter).build();
        let containers = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filter)
            .build();
        let (networks, containers) = tokio::join!(
            self.run.docker.list_networks(Some(networks)),
            self.run.docker.list_containers(Some(containers))
        );
        let networks = networks.map_err(|e| RunError::docker("listing the daemon's pool", e))?;
        let containers = containers.map_err(|e| RunError::docker("listing the daemon's pool", e))?;
        let jails = networks
            .into_iter()
            .filter_map(|n| {
                let subnet = n
                    .ipam?
                    .config?
                    .iter()
                    .find_map(|c| Ipv4Net::parse(c.subnet.as_deref()?))?;
                let created = n
                    .labels
                    .and_then(|l| l.get(CREATED_LABEL).and_then(|t| t.parse().ok()))
                    .unwrap_or(0);
                Some((
                    Jail {
                        network: n.name?,
                        subnet,
                    },
                    created,
                ))
            })
            .collect();
        let containers = containers
            .into_iter()
            .flat_map(|c| {
                let seen = Seen {
                    running: c.state == Some(ContainerSummaryStateEnum::RUNNING),
                    created: c.created.unwrap_or(0),
                };
                c.names
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |n| (n.trim_start_matches('/').to_string(), seen.clone()))
            })
            .collect();
        Ok(Survey { jails, containers })
    }

    /// Claims a jail for the workload whose container `body` gives for a
    /// jail, creating the container (recorded in `journal`, removed at
    /// teardown after everything recorded later). `connected` are the
    /// daemon's networks and its address on each. Returns the jail and
    /// the workload container's name.
    pub async fn claim(
        &self,
        journal: &Journal,
        mut survey: Survey,
        connected: &HashMap<String, Option<Ipv4Addr>>,
        body: impl Fn(&Jail) -> Result<ContainerCreateBody, RunError>,
    ) -> Result<(Jail, String), RunError> {
        for round in 0..ROUNDS {
            if round > 0 {
                survey = self.survey().await?;
            }
            let start = token::random_u32().map_err(|e| RunError::io("reading /dev/urandom", e))? as usize;
            let mut free: Vec<&Jail> = survey.free().collect();
            let len = free.len().max(1);
            free.rotate_left(start % len);
            for jail in free {
                if let Some(claimed) = self.try_claim(journal, jail, connected, &body).await? {
                    return Ok(claimed);
                }
            }
            if round + 1 < ROUNDS && self.reclaim(&survey).await {
                continue;
            }
            let transient = survey.jails.len() >= KEEP;
            let jail = timed("jail create", self.create(journal, transient)).await?;
            let mut here = connected.clone();
            here.insert(jail.network.clone(), Some(host(&jail.subnet, 2)?));
            if let Some(claimed) = self.try_claim(journal, &jail, &here, &body).await? {
                return Ok(claimed);
            }
        }
        Err(RunError::Docker {
            step: "claiming a jail of the daemon's pool",
            detail: format!("every jail was taken by another run, {ROUNDS} times over"),
        })
    }

    /// Creates the workload as `jail`'s claim; `None` when another run has
    /// it (or the jail cannot serve: the daemon sits elsewhere on it).
    async fn try_claim(
        &self,
        journal: &Journal,
        jail: &Jail,
        connected: &HashMap<String, Option<Ipv4Addr>>,
        body: &impl Fn(&Jail) -> Result<ContainerCreateBody, RunError>,
    ) -> Result<Option<(Jail, String)>, RunError> {
        journal.checkpoint()?;
        let proxy = host(&jail.subnet, 2)?;
        match connected.get(&jail.network) {
            Some(Some(at)) if *at == proxy => {}
            Some(_) => return Ok(None),
            // A daemon recreated under the same name: connect it again.
            None => {
                if self.connect_daemon(&jail.network, proxy).await.is_err() {
                    return Ok(None);
                }
            }
        }
        let name = jail.claim();
        let mut spec = body(jail)?;
        spec.labels
            .get_or_insert_with(HashMap::new)
            .insert(POOL_LABEL.into(), self.daemon.into());
        let entry = journal.record(
            Kind::Holder,
            timed(
                "container remove",
                remove_container(self.run.docker.clone(), name.clone()),
            ),
        )?;
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        match timed(
            "container create",
            self.run.docker.create_container(Some(options), spec),
        )
        .await
        {
            Ok(_) => Ok(Some((jail.clone(), name))),
            Err(e) if docker_status(&e) == Some(409) => {
                journal.forget(entry);
                Ok(None)
            }
            Err(e) => Err(RunError::docker("creating the workload", e)),
        }
    }

    /// Removes stale claims and broken jails (see the module comment);
    /// whether any was removed.
    async fn reclaim(&self, survey: &Survey) -> bool {
        let mut removed = false;
        let now = unix_now();
        for (jail, created) in &survey.jails {
            let claim = jail.claim();
            if let Some(seen) = survey.containers.get(&claim) {
                if seen.running || !self.stopped_long_ago(&claim, seen, now).await {
                    continue;
                }
                tracing::debug!(claim, "reclaiming a stale claim");
                removed |= remove_container(self.run.docker.clone(), claim).await.is_ok();
                continue;
            }
            let holder = survey.containers.get(&jail.holder());
            let broken = match holder {
                Some(seen) => !seen.running && now - seen.created > GRACE.as_secs() as i64,
                None => now - created > GRACE.as_secs() as i64,
            };
            if broken {
                tracing::debug!(jail = jail.network, "removing a broken jail");
                removed |= self.remove(jail).await.is_ok();
            }
        }
        removed
    }

    /// Whether the stopped claim `name` stopped (or, never started, was
    /// created) more than [`GRACE`] before `now`.
    async fn stopped_long_ago(&self, name: &str, seen: &Seen, now: i64) -> bool {
        let Ok(inspect) = self.run.docker.inspect_container(name, None).await else {
            return false;
        };
        let finished = inspect
            .state
            .and_then(|s| s.finished_at)
            .and_then(|t| unix_seconds(&t))
            .filter(|t| *t > 0);
        now - finished.unwrap_or(seen.created) > GRACE.as_secs() as i64
    }

    /// Makes a jail: its network, the daemon on it, its holder running.
    /// A pooled one is kept after the run; a transient one (the pool is
    /// full) is labelled as the run's own and removed at its teardown.
    async fn create(&self, journal: &Journal, transient: bool) -> Result<Jail, RunError> {
        let network = format!(
            "crackbox-pool-{}",
            token::random_hex(4).map_err(|e| RunError::io("reading /dev/urandom", e))?
        );
        let labels = match transient {
            true => self.run.labels(),
            false => HashMap::from([
                (POOL_LABEL.to_string(), self.daemon.to_string()),
                (CREATED_LABEL.to_string(), unix_now().to_string()),
            ]),
        };
        let (created, holder_image) = tokio::join!(
            self.run
                .create_labelled_network(journal, &network, true, labels.clone()),
            image::ensure_proxy_image(&self.run.docker, None, false)
        );
        let (subnet, network_entry) = created?;
        let holder_image = holder_image?;
        let jail = Jail { network, subnet };
        let docker = self.run.docker.clone();
        let disconnect_entry = journal.record(
            Kind::Leaf,
            disconnect(docker.clone(), self.daemon.to_string(), jail.network.clone()),
        )?;
        let holder = jail.holder();
        let holder_entry = journal.record(Kind::Leaf, remove_container(docker.clone(), holder.clone()))?;
        let proxy = host(&subnet, 2)?;
        let holder_body = holder_spec(&holder_image, &jail.network, host(&subnet, 3)?, labels);
        let options = CreateContainerOptionsBuilder::default().name(&holder).build();
        let (connected, started) = tokio::join!(self.connect_daemon(&jail.network, proxy), async {
            docker.create_container(Some(options), holder_body).await?;
            docker.start_container(&holder, None).await
        });
        connected?;
        started.map_err(|e| RunError::docker("starting a jail's holder", e))?;
        if !transient {
            for entry in [network_entry, disconnect_entry, holder_entry] {
                journal.forget(entry);
            }
        }
        Ok(jail)
    }

    async fn connect_daemon(&self, network: &str, address: Ipv4Addr) -> Result<(), RunError> {
        let connect = NetworkConnectRequest {
            container: self.daemon.to_string(),
            endpoint_config: Some(ipv4_endpoint(address)),
        };
        match self.run.docker.connect_network(network, connect).await {
            Ok(()) => Ok(()),
            Err(e) if docker_message(&e).contains("already exists") => Ok(()),
            Err(e) => Err(RunError::docker("connecting the daemon to a jail network", e)),
        }
    }

    /// Removes a jail: its holder, the daemon's connection, its network.
    async fn remove(&self, jail: &Jail) -> Result<(), String> {
        let docker = self.run.docker.clone();
        remove_container(docker.clone(), jail.holder()).await?;
        disconnect(docker.clone(), self.daemon.to_string(), jail.network.clone()).await?;
        remove_network(docker, jail.network.clone()).await
    }
}

impl Survey {
    /// The jails whose holder runs and that no workload claims.
    fn free(&self) -> impl Iterator<Item = &Jail> {
        self.jails.iter().map(|(jail, _)| jail).filter(|jail| {
            self.containers.get(&jail.holder()).is_some_and(|h| h.running)
                && !self.containers.contains_key(&jail.claim())
        })
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Seconds since the epoch of a Docker timestamp (`2026-12-02T14:50:01.5Z`,
/// always UTC); `None` when it is not one.
fn unix_seconds(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let time = time.strip_suffix('Z')?;
    let whole = time.split('.').next()?;
    let mut hms = whole.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3_600 + mm * 60 + ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_timestamps_read_as_unix_seconds() {
        let cases = [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("0001-01-01T00:00:00Z", Some(-62_135_596_800)),
            ("2026-12-02T14:50:01.123456789Z", Some(1_796_223_001)),
            ("2024-02-29T23:59:59Z", Some(1_709_251_199)),
            ("2026-12-02 14:50:01Z", None),
            ("2026-13-02T14:50:01Z", None),
            ("2026-12-02T14:50:01+01:00", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(unix_seconds(text), want, "{text}");
        }
    }

    #[test]
    fn free_jails_have_a_running_holder_and_no_claim() {
        let jail = |n: u8| Jail {
            network: format!("crackbox-pool-{n}"),
            subnet: Ipv4Net::parse(&format!("10.213.128.{}/29", n * 8)).unwrap(),
        };
        let seen = |running| Seen { running, created: 0 };
        let survey = Survey {
            jails: (1..=4).map(|n| (jail(n), 0)).collect(),
            containers: HashMap::from([
                (jail(1).holder(), seen(true)),
                (jail(2).holder(), seen(true)),
                (jail(2).claim(), seen(false)),
                (jail(3).holder(), seen(false)),
            ]),
        };
        assert_eq!(survey.free().cloned().collect::<Vec<_>>(), vec![jail(1)]);
    }
}
