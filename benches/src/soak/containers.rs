//! Labelled containers started and removed in bursts on the soak's Docker
//! network: each burst's containers must show up in the registry under
//! their addresses (id `docker:<io.crackbox.id>`) and be gone again once
//! removed, each within a time limit. Runs the `docker` command line.

use super::listing;
use super::setup::Setup;
use super::tally::keep_first;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the watcher may take to register or unregister a burst.
const SETTLE_LIMIT: Duration = Duration::from_secs(20);
/// How long a burst's containers run once registered.
const HOLD: Duration = Duration::from_secs(5);

/// What the bursts did and found.
#[derive(Debug, Default, Clone)]
pub struct DockerReport {
    /// Bursts run.
    pub bursts: u64,
    /// Containers started.
    pub containers: u64,
    /// Containers not registered, or not unregistered, in time (or that
    /// Docker failed to start or remove).
    pub mismatches: u64,
    /// The first mismatches.
    pub first: Vec<String>,
    /// Slowest burst from `docker run` done to all registered, seconds.
    pub slowest_register_s: f64,
    /// Slowest burst from `docker rm` done to all unregistered, seconds.
    pub slowest_unregister_s: f64,
}

impl DockerReport {
    fn mismatch(&mut self, what: String) {
        self.mismatches += 1;
        keep_first(&mut self.first, what);
    }
}

/// Runs bursts every `pace.burst_every` (the first after half of it) until
/// the deadline.
pub fn run(setup: &Setup) -> DockerReport {
    let mut report = DockerReport::default();
    let mut next = Instant::now() + setup.pace.burst_every / 2;
    while setup.sleep_until(next) {
        burst(setup, report.bursts, &mut report);
        report.bursts += 1;
        next = Instant::now() + setup.pace.burst_every;
    }
    report
}

/// Removes every container carrying the soak's run label.
pub fn remove_all(run_label: &str) {
    let listed = docker(&["ps", "-aq", "--filter", &format!("label={run_label}")]);
    let ids: Vec<&str> = listed.as_deref().unwrap_or_default().split_whitespace().collect();
    if !ids.is_empty() {
        let mut args = vec!["rm", "-f"];
        args.extend(ids);
        let _ = docker(&args);
    }
}

fn burst(setup: &Setup, index: u64, report: &mut DockerReport) {
    let prefix = setup.site.run_label.rsplit('=').next().unwrap_or("soak").to_string();
    let boxes: Vec<(String, String)> = (0..setup.pace.burst)
        .map(|i| (format!("{prefix}-{index}-{i}"), format!("soak-box-{index}-{i}")))
        .collect();
    let started: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = boxes
            .iter()
            .map(|(name, id)| scope.spawn(move || start(setup, name, id)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("docker run thread panicked".into())))
            .collect()
    });
    report.containers += boxes.len() as u64;
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for ((name, id), outcome) in boxes.iter().zip(started) {
        let address = outcome.and_then(|()| address(setup, name));
        match address {
            Ok(ip) => {
                expected.insert(ip, format!("docker:{id}"));
            }
            Err(err) => report.mismatch(format!("container {name}: {err}")),
        }
    }
    let registered_at = Instant::now();
    match settle(setup, |state| expected.iter().all(|(ip, id)| state.get(ip) == Some(id))) {
        Ok(()) => report.slowest_register_s = report.slowest_register_s.max(registered_at.elapsed().as_secs_f64()),
        Err(state) => {
            let missing = expected.iter().filter(|(ip, id)| state.get(*ip) != Some(*id)).count();
            report.mismatch(format!(
                "{missing} of {} labelled containers not registered within {SETTLE_LIMIT:?}",
                expected.len()
            ));
        }
    }
    setup.nap(HOLD);
    let mut args = vec!["rm", "-f"];
    args.extend(boxes.iter().map(|(name, _)| name.as_str()));
    if let Err(err) = docker(&args) {
        report.mismatch(format!("docker rm: {err}"));
    }
    let removed_at = Instant::now();
    match settle(setup, |state| expected.keys().all(|ip| !state.contains_key(ip))) {
        Ok(()) => report.slowest_unregister_s = report.slowest_unregister_s.max(removed_at.elapsed().as_secs_f64()),
        Err(state) => {
            let left = expected.keys().filter(|ip| state.contains_key(*ip)).count();
            report.mismatch(format!(
                "{left} removed containers still registered after {SETTLE_LIMIT:?}"
            ));
        }
    }
}

/// Polls the registry's `docker:` entries (ip -> id) until `done` holds;
/// the last state seen when it never does.
fn settle(setup: &Setup, done: impl Fn(&BTreeMap<String, String>) -> bool) -> Result<(), BTreeMap<String, String>> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let state = docker_entries(setup);
        if done(&state) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(state);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn docker_entries(setup: &Setup) -> BTreeMap<String, String> {
    listing::registered(setup)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.id.starts_with("docker:"))
        .map(|e| (e.ip, e.id))
        .collect()
}

fn start(setup: &Setup, name: &str, id: &str) -> Result<(), String> {
    let allow = "io.crackbox.allow=127.0.0.1".to_string();
    let id_label = format!("io.crackbox.id={id}");
    docker(&[
        "run",
        "-d",
        "--name",
        name,
        "--network",
        &setup.site.network,
        "--label",
        &allow,
        "--label",
        &id_label,
        "--label",
        &setup.site.run_label,
        &setup.site.image,
        "sleep",
        "600",
    ])
    .map(drop)
}

fn address(setup: &Setup, name: &str) -> Result<String, String> {
    let template = format!(
        "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
        setup.site.network
    );
    let ip = docker(&["inspect", "-f", &template, name])?;
    match ip.trim() {
        "" => Err(format!("no address on {}", setup.site.network)),
        ip => Ok(ip.to_string()),
    }
}

/// Runs `docker args...`; its stdout, or an error with its stderr.
fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("docker: {e}"))?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(format!(
            "docker {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}
