//! The Docker label watcher (`proxy serve --docker`): containers labelled
//! `io.crackbox.allow` are registered under their addresses on the networks
//! in scope, and unregistered when they stop or leave.
//!
//! Each session connects to Docker (`DOCKER_HOST` or the default socket,
//! API version negotiated), subscribes to container and network events
//! first, then reconciles: lists the running labelled containers and makes
//! the watcher's registrations match them. Every later burst of events is
//! followed by one more reconciliation (and more, a tenth of a second
//! apart, while a network arrival is not listed yet), and a lost connection by a new
//! session (so a Docker restart is reconciled too). Registrations the
//! watcher did not make are never touched. The engine is told which subnets
//! the watcher answers for, so a container's first connection waits for its
//! registration instead of being denied. A label may name a policy only
//! the registry holds, so when the registry's set of policies changes the
//! watcher reconciles again too.

mod arrivals;
mod departures;
mod labels;
mod plan;
mod registrations;
mod scope;

pub use labels::{ALLOW_LABEL, ID_LABEL, ID_PREFIX};

use crate::publisher::EngineLink;
use crate::registry::Registry;
use arrivals::Arrivals;
use bollard::models::{EventMessage, EventMessageTypeEnum};
use bollard::query_parameters::{EventsOptionsBuilder, ListContainersOptionsBuilder};
use bollard::Docker;
use crackbox_config::DockerWatch;
use crackbox_policy::PolicyName;
use crackbox_wire::link::WatchList;
use departures::{Departures, Event};
use futures_util::{FutureExt, StreamExt};
use plan::Seen;
use scope::Source;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one Docker API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The event stream is long-lived: only a dead connection ends it.
const STREAM_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Why the watcher cannot start at all.
#[derive(Debug, thiserror::Error)]
#[error(
    "--docker: crackbox is not running in a Docker container, so name the networks to watch \
     with --docker-network NET (or [docker] networks)"
)]
pub struct NoScope;

/// The running watcher's state.
pub struct Watcher {
    source: Source,
    registry: Arc<Registry>,
    link: Arc<EngineLink>,
    /// `(container id, problem)` already warned about.
    warned: HashSet<(String, String)>,
    /// Departures the events announced before the container list shows them.
    departures: Departures,
    /// Arrivals the events announced before the container list shows them.
    arrivals: Arrivals,
    /// Whether the last listing missed an arrival: list again soon.
    awaiting: bool,
    /// The names of the registry's policies at the last reconciliation.
    policy_names: BTreeSet<PolicyName>,
}

impl Watcher {
    /// A watcher for `settings`; fails when there is nothing to watch.
    pub fn new(settings: &DockerWatch, registry: Arc<Registry>, link: Arc<EngineLink>) -> Result<Self, NoScope> {
        let source = if settings.networks.is_empty() {
            Source::OwnContainer(scope::own_container_id().ok_or(NoScope)?)
        } else {
            Source::Named(settings.networks.clone())
        };
        Ok(Watcher {
            source,
            registry,
            link,
            warned: HashSet::new(),
            departures: Departures::default(),
            arrivals: Arrivals::default(),
            awaiting: false,
            policy_names: BTreeSet::new(),
        })
    }

    /// Runs sessions forever, reconnecting with backoff.
    pub async fn run(mut self) {
        tracing::info!(scope = ?self.source, "Docker label watcher started");
        let mut backoff = FIRST_BACKOFF;
        loop {
            let mut reconciled = false;
            if let Err(err) = self.session(&mut reconciled).await {
                tracing::warn!(error = %err, "Docker label watcher: connection lost or failed; registrations kept, reconnecting");
            }
            if reconciled {
                backoff = FIRST_BACKOFF;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn session(&mut self, reconciled: &mut bool) -> Result<(), String> {
        let docker = Docker::connect_with_defaults()
            .map_err(|e| e.to_string())?
            .negotiate_version()
            .await
            .map_err(|e| e.to_string())?;
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string(), "network".to_string()]),
            (
                "event".to_string(),
                ["start", "die", "destroy", "connect", "disconnect"]
                    .map(String::from)
                    .to_vec(),
            ),
        ]);
        let options = EventsOptionsBuilder::default().filters(&filters).build();
        let mut events = docker.clone().with_timeout(STREAM_TIMEOUT).events(Some(options));
        let docker = docker.with_timeout(CALL_TIMEOUT);
        // Departures heard on an earlier connection say nothing of a fresh
        // listing: a container that died as dockerd stopped may be running
        // again by now (a restart policy), with no event this session saw.
        self.departures = Departures::default();
        self.arrivals = Arrivals::default();
        self.reconcile(&docker).await?;
        *reconciled = true;
        let mut generations = self.registry.subscribe();
        loop {
            tokio::select! {
                first = events.next() => {
                    self.take(first)?;
                    // One reconciliation for a whole burst (e.g. many containers starting).
                    while let Some(next) = events.next().now_or_never() {
                        self.take(next)?;
                    }
                }
                changed = generations.changed() => {
                    changed.map_err(|_| "the registry stopped".to_string())?;
                    if self.registry.current().policies.keys().eq(self.policy_names.iter()) {
                        continue;
                    }
                }
                () = tokio::time::sleep(arrivals::RECHECK), if self.awaiting => {}
            }
            self.reconcile(&docker).await?;
        }
    }

    /// Notes one item of the event stream; an error when the stream failed or ended.
    fn take(&mut self, item: Option<Result<EventMessage, bollard::errors::Error>>) -> Result<(), String> {
        let event = match item {
            None => return Err("the Docker event stream ended".into()),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(event)) => event,
        };
        let actor = event.actor.unwrap_or_default();
        let id = actor.id.unwrap_or_default();
        let attributes = actor.attributes.unwrap_or_default();
        let container = attributes.get("container").map(String::as_str).unwrap_or_default();
        let action = event.action.unwrap_or_default();
        tracing::debug!(%action, %id, "Docker event");
        let noted = match (event.typ, action.as_str()) {
            (Some(EventMessageTypeEnum::CONTAINER), "start") => Some(Event::Started(&id)),
            (Some(EventMessageTypeEnum::CONTAINER), "die" | "destroy") => Some(Event::Exited(&id)),
            (Some(EventMessageTypeEnum::NETWORK), "connect") => Some(Event::Connected(container, &id)),
            (Some(EventMessageTypeEnum::NETWORK), "disconnect") => Some(Event::Disconnected(container, &id)),
            _ => None,
        };
        if let Some(noted) = noted {
            self.departures.note(noted);
            self.arrivals.note(noted, Instant::now());
        }
        Ok(())
    }

    /// Makes the watcher's registrations match the running labelled containers.
    async fn reconcile(&mut self, docker: &Docker) -> Result<(), String> {
        let scope = scope::resolve(docker, &self.source).await?;
        let filters = HashMap::from([
            ("label".to_string(), vec![ALLOW_LABEL.to_string()]),
            ("status".to_string(), vec!["running".to_string(), "paused".to_string()]),
        ]);
        let options = ListContainersOptionsBuilder::default().filters(&filters).build();
        let containers = docker
            .list_containers(Some(options))
            .await
            .map_err(|e| format!("listing containers: {e}"))?;
        let mut seen: Vec<Seen> = containers.into_iter().map(seen).collect();
        self.awaiting = self.arrivals.settle(&seen, Instant::now());
        self.departures.apply(&mut seen);
        let holdings = registrations::holdings(&self.registry);
        let plan = plan::plan(&seen, &scope, &holdings);
        self.policy_names = holdings.policies;
        self.warn_once(&seen, &plan);
        self.link.set_watch_list(WatchList {
            subnets: scope.subnets.clone(),
            invalid: plan.invalid.clone(),
        });
        let (registered, removed) = (plan.register.len(), plan.unregister.len());
        registrations::apply(&self.registry, plan.register, plan.unregister)
            .await
            .map_err(|e| format!("the registry refused a change: {e}"))?;
        if registered + removed > 0 {
            tracing::info!(registered, removed, containers = seen.len(), "Docker labels reconciled");
        }
        Ok(())
    }

    /// One warning per container and problem (and per address conflict).
    fn warn_once(&mut self, seen: &[Seen], plan: &plan::Plan) {
        let present: HashSet<&str> = seen.iter().map(|c| c.id.as_str()).collect();
        self.warned.retain(|(id, _)| present.contains(id.as_str()));
        for (id, name, problem) in &plan.problems {
            if self.warned.insert((id.clone(), problem.clone())) {
                tracing::warn!(container = %name, %problem, "invalid crackbox labels, container not registered");
            }
        }
        for (name, ip) in &plan.conflicts {
            let id = seen
                .iter()
                .find(|c| &c.name == name)
                .map(|c| c.id.clone())
                .unwrap_or_default();
            if self.warned.insert((id, ip.to_string())) {
                tracing::warn!(container = %name, %ip, "address already registered through the admin API; label ignored");
            }
        }
    }
}

/// A listed container as the planner takes it.
fn seen(container: bollard::models::ContainerSummary) -> Seen {
    let networks = container.network_settings.and_then(|n| n.networks).unwrap_or_default();
    let addresses = networks
        .values()
        .flat_map(|endpoint| {
            let network = endpoint.network_id.clone().unwrap_or_default();
            [endpoint.ip_address.as_deref(), endpoint.global_ipv6_address.as_deref()]
                .into_iter()
                .flatten()
                .filter_map(|addr| addr.parse().ok())
                .map(move |ip| (network.clone(), ip))
        })
        .collect();
    Seen {
        id: container.id.unwrap_or_default(),
        name: container
            .names
            .and_then(|names| names.into_iter().next())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_default(),
        labels: container.labels.unwrap_or_default(),
        addresses,
    }
}
