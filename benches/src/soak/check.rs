//! Enforcement checks: the daemon against the ledger. The registry
//! (`GET /v1/state`, the watcher's `docker:` entries aside) must hold
//! exactly the acknowledged soak sources with their allowlists, and probes
//! through the proxy must find every live source allowed (its echo tunnel
//! and its variant's target) and refused what its allowlist no longer holds,
//! every unregistered source refused as `unregistered`, and the DNS filter
//! agreeing. Run while the churn is paused, so the ledger is exact.

use super::dns::{self, Expect, Transport};
use super::ledger::{self, source_id, source_ip, variant_target, Live, DENIED_HOST, DNS_ALLOWED, VARIANTS};
use super::listing::{self, Registered};
use super::probe;
use super::rng::Rng;
use super::setup::Setup;
use super::tally::keep_first;
use std::collections::BTreeMap;

/// Threads the probes are spread over.
const PROBE_THREADS: usize = 4;
/// Unregistered sources probed per check: the most recently removed, and
/// older ones at random.
const RECENT_UNREGISTERED: usize = 200;
const OLDER_UNREGISTERED: usize = 100;
/// Sources per check whose DNS answers are checked too.
const DNS_CHECKS: usize = 20;

/// The outcome of one check.
#[derive(Debug, Clone, Default)]
pub struct Check {
    /// When it ran, seconds into the load.
    pub at_s: f64,
    /// Live sources probed.
    pub live: usize,
    /// Unregistered sources probed.
    pub unregistered: usize,
    /// Probes that found something else than the ledger says.
    pub probe_mismatches: u64,
    /// Registry entries that differ from the ledger.
    pub registry_mismatches: u64,
    /// The first mismatches, as text.
    pub first: Vec<String>,
}

impl Check {
    fn note(&mut self, what: String) {
        keep_first(&mut self.first, what);
    }
}

/// The whole check: registry, then probes of every live source and a
/// sample of unregistered ones.
pub fn run(setup: &Setup, rng: &mut Rng) -> Check {
    let (live, unregistered) = {
        let ledger = ledger::lock(&setup.ledger);
        let live: Vec<(u64, Live)> = ledger.live().collect();
        (
            live,
            ledger.unregistered_sample(rng, RECENT_UNREGISTERED, OLDER_UNREGISTERED),
        )
    };
    let mut check = Check {
        at_s: setup.elapsed_s(),
        ..Check::default()
    };
    registry(setup, &live, &mut check);
    probe_sources(setup, &live, &unregistered, &mut check);
    check
}

/// Compares `GET /v1/state` with `live`.
fn registry(setup: &Setup, live: &[(u64, Live)], check: &mut Check) {
    let entries = match listing::registered(setup) {
        Ok(entries) => entries,
        Err(err) => {
            check.registry_mismatches += 1;
            return check.note(err);
        }
    };
    let mut held: BTreeMap<String, Registered> = entries
        .into_iter()
        .filter(|entry| !entry.id.starts_with("docker:"))
        .map(|entry| (entry.ip.clone(), entry))
        .collect();
    for &(n, Live { variant, .. }) in live {
        let ip = source_ip(n).to_string();
        let want = ledger::allowlist(variant, setup.site.steered_upstream);
        match held.remove(&ip) {
            None => {
                check.registry_mismatches += 1;
                check.note(format!("{ip}: acknowledged but not in /v1/state"));
            }
            Some(entry) if entry.id != source_id(n) || entry.allowlist != want => {
                check.registry_mismatches += 1;
                check.note(format!(
                    "{ip}: /v1/state holds {} {:?}, acknowledged {} {want:?}",
                    entry.id,
                    entry.allowlist,
                    source_id(n)
                ));
            }
            Some(_) => {}
        }
    }
    for ip in held.keys() {
        check.registry_mismatches += 1;
        check.note(format!("{ip}: in /v1/state but never acknowledged (or removed)"));
    }
}

/// Probes `live` sources (allowed, their variant enforced) and
/// `unregistered` ones (refused), spread over a few threads.
pub fn probe_sources(setup: &Setup, live: &[(u64, Live)], unregistered: &[u64], check: &mut Check) {
    check.live += live.len();
    check.unregistered += unregistered.len();
    // DNS answers are checked for the first few of each kind.
    let mut jobs: Vec<(Job, bool)> = live
        .iter()
        .enumerate()
        .map(|(i, &(n, l))| (Job::Live(n, l), i < DNS_CHECKS))
        .collect();
    jobs.extend(
        unregistered
            .iter()
            .enumerate()
            .map(|(i, &n)| (Job::Unregistered(n), i < DNS_CHECKS)),
    );
    let chunk = jobs.len().div_ceil(PROBE_THREADS).max(1);
    let results: Vec<Vec<String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .filter_map(|(job, with_dns)| job.probe(setup, *with_dns).err())
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| vec!["a probe thread panicked".into()]))
            .collect()
    });
    for mismatch in results.into_iter().flatten() {
        check.probe_mismatches += 1;
        check.note(mismatch);
    }
}

/// One source to probe.
#[derive(Debug, Clone, Copy)]
enum Job {
    Live(u64, Live),
    Unregistered(u64),
}

impl Job {
    fn probe(&self, setup: &Setup, with_dns: bool) -> Result<(), String> {
        match *self {
            Job::Live(n, live) => {
                let ip = source_ip(n);
                probe::echo(setup, ip, n)?;
                probe::allowed_unreachable(setup, ip, &variant_target(live.variant))?;
                let other = live.previous.unwrap_or((live.variant + 1) % VARIANTS);
                probe::refused(setup, ip, &variant_target(other), 403, "not-allowed")?;
                if with_dns {
                    let steered = Expect::Steered(setup.site.steer);
                    dns::ask(setup.site.dns, ip, DNS_ALLOWED, Transport::Udp, setup.timeout, steered)?;
                    dns::ask(
                        setup.site.dns,
                        ip,
                        DENIED_HOST,
                        Transport::Udp,
                        setup.timeout,
                        Expect::NxDomain,
                    )?;
                }
                Ok(())
            }
            Job::Unregistered(n) => {
                let ip = source_ip(n);
                probe::refused(setup, ip, &setup.echo.to_string(), 403, "unregistered")?;
                if with_dns {
                    dns::ask(
                        setup.site.dns,
                        ip,
                        DNS_ALLOWED,
                        Transport::Udp,
                        setup.timeout,
                        Expect::Refused,
                    )?;
                }
                Ok(())
            }
        }
    }
}
