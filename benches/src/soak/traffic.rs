//! Traffic from live soak sources, each operation on a leased source and
//! checked end to end: keep-alive GETs through the forward proxy, new
//! CONNECT tunnels with an echo, bulk transfers, denials, DNS questions and
//! steered GETs (worker threads), and long-lived idle tunnels that are
//! proven with an echo when opened and again before they are closed.

use super::dns::{self, Expect, Transport};
use super::ledger::{Lease, DENIED_HOST, DNS_ALLOWED};
use super::outage::Mark;
use super::probe;
use super::rng::Rng;
use super::setup::Setup;
use crate::modes::{echo_transfer, ping};
use crate::pattern;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The kinds of operation and their weights in the mix.
const MIX: [(&str, u64); 6] = [
    ("keep-alive GETs", 3),
    ("CONNECT + echo", 3),
    ("bulk transfer", 1),
    ("denied CONNECT", 2),
    ("DNS question", 2),
    ("steered GETs", 2),
];

/// Kind name of the idle tunnels in the counts.
const IDLE: &str = "idle tunnel";

/// Kind name of DNS questions sent again over UDP (no answer within a third
/// of the timeout): counted, not failed, as a resolver would retry.
const UDP_RESENT: &str = "DNS question sent again (UDP)";

/// Bytes each way of one bulk transfer, at most.
const BULK_MAX: u64 = 8 << 20;

/// Idle tunnels opened per second at most.
const IDLE_OPEN_RATE: usize = 20;

/// Shared by the workers: one bulk transfer at a time, and its pattern.
pub struct Bulk {
    busy: AtomicBool,
    block: Vec<u8>,
}

impl Default for Bulk {
    fn default() -> Self {
        Bulk {
            busy: AtomicBool::new(false),
            block: pattern::block(),
        }
    }
}

/// One traffic thread: random operations from the mix until the deadline.
pub fn worker(setup: &Setup, bulk: &Bulk, index: u64) {
    let mut rng = Rng::from_clock(index + 100);
    let total: u64 = MIX.iter().map(|(_, w)| w).sum();
    let mut seq = 0u64;
    while setup.running() {
        let mut roll = rng.below(total);
        let kind = MIX
            .iter()
            .find(|(_, w)| {
                let hit = roll < *w;
                roll = roll.saturating_sub(*w);
                hit
            })
            .map_or(MIX[0].0, |(k, _)| k);
        seq += 1;
        let Some(lease) = Lease::take(&setup.ledger, &mut rng) else {
            setup.nap(Duration::from_millis(100));
            continue;
        };
        let mark = setup.outages.mark();
        let tag = format!("w{index}-{seq}");
        let outcome = match kind {
            "keep-alive GETs" => probe::forward_gets(setup, lease.ip(), &tag, rng.between(5, 20)),
            "CONNECT + echo" => probe::echo(setup, lease.ip(), seq).map(drop),
            "bulk transfer" => bulk_transfer(setup, bulk, &lease, &mut rng),
            "denied CONNECT" => probe::refused(setup, lease.ip(), &format!("{DENIED_HOST}:443"), 403, "not-allowed"),
            "DNS question" => dns_question(setup, &lease, &mut rng),
            _ => probe::steered_gets(setup, lease.ip(), &tag, rng.between(1, 5)),
        };
        drop(lease);
        setup.tallies.record(kind, outcome, setup.outages.excuses(mark));
        setup.nap(setup.pace.pause);
    }
}

fn bulk_transfer(setup: &Setup, bulk: &Bulk, lease: &Lease, rng: &mut Rng) -> Result<(), String> {
    if bulk.busy.swap(true, Ordering::AcqRel) {
        // Another bulk transfer runs: a plain echo instead.
        return probe::echo(setup, lease.ip(), 0).map(drop);
    }
    let bytes = rng.between(1 << 20, BULK_MAX);
    let result = probe::tunnel(setup, lease.ip(), setup.echo).and_then(|stream| {
        echo_transfer(stream, bytes, &bulk.block).map_err(|e| format!("bulk of {bytes} bytes: {e}"))
    });
    bulk.busy.store(false, Ordering::Release);
    result
}

fn dns_question(setup: &Setup, lease: &Lease, rng: &mut Rng) -> Result<(), String> {
    let transport = match rng.chance(0.2) {
        true => Transport::Tcp,
        false => Transport::Udp,
    };
    let (name, expect) = match rng.chance(0.5) {
        true => (DNS_ALLOWED, Expect::Steered(setup.site.steer)),
        false => (DENIED_HOST, Expect::NxDomain),
    };
    let retries = dns::ask(setup.site.dns, lease.ip(), name, transport, setup.timeout, expect)?;
    for _ in 0..retries {
        setup.tallies.record(UDP_RESENT, Ok(()), false);
    }
    Ok(())
}

/// An idle tunnel being held.
struct Held {
    stream: TcpStream,
    lease: Lease,
    mark: Mark,
    until: Instant,
}

/// Holds `pace.idle_tunnels` tunnels open, each for a random time up to
/// `pace.idle_hold`, replacing those that end; all are closed at the deadline.
pub fn idle_tunnels(setup: &Setup) {
    let mut rng = Rng::from_clock(7);
    let mut held: Vec<Held> = Vec::new();
    let hold = setup.pace.idle_hold.as_millis() as u64;
    let mut kills = 0;
    while setup.running() {
        let now = Instant::now();
        // After an engine restart every held tunnel is proven (or dropped) at
        // once, so the dead ones are replaced now, not when their time is up.
        let restarted = setup.outages.kills() != kills && setup.outages.recovered();
        if restarted {
            kills = setup.outages.kills();
        }
        let (done, kept): (Vec<Held>, Vec<Held>) = held.into_iter().partition(|h| restarted || h.until <= now);
        held = kept;
        for mut tunnel in done {
            if tunnel.until > now && ping(&mut tunnel.stream, tunnel.lease.number).is_ok() {
                held.push(tunnel);
            } else {
                close(setup, tunnel);
            }
        }
        for _ in 0..IDLE_OPEN_RATE.min(setup.pace.idle_tunnels.saturating_sub(held.len())) {
            let Some(lease) = Lease::take(&setup.ledger, &mut rng) else {
                break;
            };
            let mark = setup.outages.mark();
            match probe::echo(setup, lease.ip(), lease.number) {
                Ok(stream) => held.push(Held {
                    stream,
                    lease,
                    mark,
                    until: now + Duration::from_millis(rng.between(hold / 4, hold)),
                }),
                Err(err) => setup.tallies.record(IDLE, Err(err), setup.outages.excuses(mark)),
            }
        }
        setup.nap(Duration::from_secs(1));
    }
    for tunnel in held {
        close(setup, tunnel);
    }
}

/// Proves a held tunnel still carries bytes, then closes it.
fn close(setup: &Setup, mut tunnel: Held) {
    let outcome = ping(&mut tunnel.stream, tunnel.lease.number)
        .map_err(|e| format!("idle tunnel from {}: {e}", tunnel.lease.ip()));
    setup.tallies.record(IDLE, outcome, setup.outages.excuses(tunnel.mark));
}
