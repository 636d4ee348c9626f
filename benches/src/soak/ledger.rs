//! What the admin API acknowledged: which soak sources are registered, with
//! which allowlist variant, and which were removed. The churn writes it
//! only after an answer; the checks compare the daemon against it; traffic
//! leases live sources from it, and a leased source is never removed.
//!
//! Sources are numbered and never reused: number `n` is one address in
//! 127.1.1.1 upwards, so every number handed out that is not live must be
//! refused as unregistered. Pure bookkeeping, no I/O.

use super::rng::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Allowlist variants a source cycles through when replaced.
pub const VARIANTS: u8 = 4;

/// Removed sources remembered for probing (older ones are sampled by number).
const RECENT_REMOVALS: usize = 4096;

/// Addresses per second octet: third and fourth octets run 1..=254.
const PER_BLOCK: u64 = 254 * 254;

/// The address of source number `n`: 127.(1 + n / 254²).(1..=254).(1..=254),
/// never a .0 or .255 octet.
pub fn source_ip(n: u64) -> IpAddr {
    let block = 1 + n / PER_BLOCK;
    let rest = n % PER_BLOCK;
    let octet = |v: u64| u8::try_from(v).unwrap_or(u8::MAX);
    IpAddr::V4(Ipv4Addr::new(
        127,
        octet(block),
        octet(1 + rest / 254),
        octet(1 + rest % 254),
    ))
}

/// The registration id of source number `n` (one per sandbox, as an
/// orchestrator would give).
pub fn source_id(n: u64) -> String {
    format!("soak-{n}")
}

/// A loopback `address:port` that only allowlist variant `v` allows and
/// nothing listens on: allowed it is a 502 (refused upstream), otherwise a
/// 403 `not-allowed`, and nothing is resolved either way.
pub fn variant_target(v: u8) -> String {
    format!("127.0.0.{}:9", 20 + v)
}

/// The allowlist of variant `v`: the upstreams on 127.0.0.1 and `steered`
/// (IP literals: never resolved), the name the DNS checks ask for, and the
/// variant's own entry.
pub fn allowlist(v: u8, steered: Ipv4Addr) -> Vec<String> {
    vec![
        "127.0.0.1".into(),
        steered.to_string(),
        DNS_ALLOWED.into(),
        variant_target(v),
    ]
}

/// A name every variant allows (DNS checks ask for it; it is never resolved:
/// a steering DNS filter answers with its own address).
pub const DNS_ALLOWED: &str = "dns-ok.test";

/// A name and port no variant allows.
pub const DENIED_HOST: &str = "denied.test";

/// The admin API body of source `n` with variant `v`.
pub fn entry(n: u64, v: u8, steered: Ipv4Addr) -> Value {
    json!({"ip": source_ip(n).to_string(), "id": source_id(n), "allowlist": allowlist(v, steered)})
}

/// A registered source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Live {
    /// Its allowlist variant.
    pub variant: u8,
    /// The variant it had before its last replacement, if it was replaced.
    pub previous: Option<u8>,
    leases: u32,
}

/// The acknowledged registry of soak sources.
#[derive(Debug, Default)]
pub struct Ledger {
    next: u64,
    live: BTreeMap<u64, Live>,
    recent: VecDeque<u64>,
}

impl Ledger {
    /// `count` numbers never used before.
    pub fn fresh(&mut self, count: usize) -> Vec<u64> {
        let first = self.next;
        self.next += count as u64;
        (first..self.next).collect()
    }

    /// Records that `n` is registered with variant `v` (new or replaced;
    /// leases are kept).
    pub fn registered(&mut self, n: u64, v: u8) {
        let entry = self.live.entry(n).or_insert(Live {
            variant: v,
            previous: None,
            leases: 0,
        });
        if entry.variant != v {
            entry.previous = Some(entry.variant);
            entry.variant = v;
        }
    }

    /// Takes up to `count` random unleased sources out of the live set (to be
    /// unregistered); give them back with [`Ledger::restore`] if that fails.
    pub fn take_unleased(&mut self, rng: &mut Rng, count: usize) -> Vec<(u64, Live)> {
        let mut candidates: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, live)| live.leases == 0)
            .map(|(&n, _)| n)
            .collect();
        let mut taken = Vec::new();
        while taken.len() < count && !candidates.is_empty() {
            let i = rng.below(candidates.len() as u64) as usize;
            let n = candidates.swap_remove(i);
            if let Some(live) = self.live.remove(&n) {
                taken.push((n, live));
            }
        }
        taken
    }

    /// Puts sources taken by [`Ledger::take_unleased`] back.
    pub fn restore(&mut self, taken: Vec<(u64, Live)>) {
        self.live.extend(taken);
    }

    /// Records that `numbers` were unregistered.
    pub fn removed(&mut self, numbers: impl IntoIterator<Item = u64>) {
        for n in numbers {
            if self.recent.len() == RECENT_REMOVALS {
                self.recent.pop_front();
            }
            self.recent.push_back(n);
        }
    }

    /// A random live source.
    pub fn pick(&self, rng: &mut Rng) -> Option<(u64, Live)> {
        let i = rng.below(self.live.len() as u64) as usize;
        self.live.iter().nth(i).map(|(&n, &live)| (n, live))
    }

    /// Leases a random live source: it stays registered until released.
    pub fn lease(&mut self, rng: &mut Rng) -> Option<u64> {
        let (n, _) = self.pick(rng)?;
        self.live.get_mut(&n)?.leases += 1;
        Some(n)
    }

    /// Ends one lease of `n`.
    pub fn release(&mut self, n: u64) {
        if let Some(live) = self.live.get_mut(&n) {
            live.leases = live.leases.saturating_sub(1);
        }
    }

    /// Every live source.
    pub fn live(&self) -> impl Iterator<Item = (u64, Live)> + '_ {
        self.live.iter().map(|(&n, &live)| (n, live))
    }

    /// How many sources are live.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Unregistered sources to probe: the `recent` most recently removed and
    /// `older` random numbers issued earlier that are not live (removed long
    /// ago, or never acknowledged).
    pub fn unregistered_sample(&self, rng: &mut Rng, recent: usize, older: usize) -> Vec<u64> {
        let mut sample: Vec<u64> = self
            .recent
            .iter()
            .rev()
            .filter(|n| !self.live.contains_key(n))
            .take(recent)
            .copied()
            .collect();
        for _ in 0..older * 4 {
            if sample.len() >= recent + older || self.next == 0 {
                break;
            }
            let n = rng.below(self.next);
            if !self.live.contains_key(&n) && !sample.contains(&n) {
                sample.push(n);
            }
        }
        sample
    }
}

/// The ledger shared by the churn, the checks and the traffic.
pub type Shared = Arc<Mutex<Ledger>>;

/// Locks the shared ledger (a panicked holder does not poison it for the rest).
pub fn lock(ledger: &Shared) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A live source held for one piece of traffic; released on drop.
pub struct Lease {
    ledger: Shared,
    /// The source's number.
    pub number: u64,
}

impl Lease {
    /// Leases a random live source, if there is one.
    pub fn take(ledger: &Shared, rng: &mut Rng) -> Option<Lease> {
        let number = lock(ledger).lease(rng)?;
        Some(Lease {
            ledger: Arc::clone(ledger),
            number,
        })
    }

    /// The source address.
    pub fn ip(&self) -> IpAddr {
        source_ip(self.number)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        lock(&self.ledger).release(self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_numbers_map_to_distinct_loopback_addresses_without_0_or_255() {
        let cases: &[(u64, &str)] = &[
            (0, "127.1.1.1"),
            (1, "127.1.1.2"),
            (253, "127.1.1.254"),
            (254, "127.1.2.1"),
            (PER_BLOCK - 1, "127.1.254.254"),
            (PER_BLOCK, "127.2.1.1"),
        ];
        for &(n, ip) in cases {
            assert_eq!(source_ip(n).to_string(), ip, "{n}");
        }
        let mut seen = std::collections::HashSet::new();
        for n in (0..3 * PER_BLOCK).step_by(97) {
            let ip = source_ip(n);
            assert!(ip.is_loopback() && seen.insert(ip), "{n} {ip}");
            let IpAddr::V4(v4) = ip else { panic!() };
            assert!(!v4.octets().contains(&0) && !v4.octets().contains(&255), "{ip}");
        }
    }

    #[test]
    fn variants_differ_only_in_their_own_target() {
        let up = Ipv4Addr::new(127, 9, 9, 9);
        for v in 0..VARIANTS {
            let list = allowlist(v, up);
            assert!(list.contains(&variant_target(v)));
            for w in (0..VARIANTS).filter(|&w| w != v) {
                assert!(!list.contains(&variant_target(w)));
            }
            assert!(list.iter().all(|e| !e.starts_with(DENIED_HOST)));
        }
        assert_eq!(entry(3, 1, up)["id"], "soak-3");
    }

    #[test]
    fn leased_sources_are_never_taken_for_removal() {
        let mut ledger = Ledger::default();
        let mut rng = Rng::new(1);
        for n in ledger.fresh(10) {
            ledger.registered(n, 0);
        }
        let leased: Vec<u64> = (0..30).filter_map(|_| ledger.lease(&mut rng)).collect();
        let taken = ledger.take_unleased(&mut rng, 10);
        assert!(taken.iter().all(|(n, _)| !leased.contains(n)), "{taken:?} {leased:?}");
        assert_eq!(ledger.len() + taken.len(), 10);
        ledger.restore(taken);
        assert_eq!(ledger.len(), 10);
        for n in leased {
            ledger.release(n);
        }
        assert_eq!(ledger.take_unleased(&mut rng, 10).len(), 10, "all released");
    }

    #[test]
    fn replacements_remember_the_previous_variant() {
        let mut ledger = Ledger::default();
        ledger.registered(0, 1);
        ledger.registered(0, 1);
        assert_eq!(ledger.live().next().unwrap().1.previous, None);
        ledger.registered(0, 3);
        let live = ledger.live().next().unwrap().1;
        assert_eq!((live.variant, live.previous), (3, Some(1)));
    }

    #[test]
    fn the_unregistered_sample_holds_no_live_source() {
        let mut ledger = Ledger::default();
        let mut rng = Rng::new(5);
        for n in ledger.fresh(100) {
            ledger.registered(n, 0);
        }
        let gone = ledger.take_unleased(&mut rng, 60);
        ledger.removed(gone.iter().map(|(n, _)| *n));
        let last = gone.last().unwrap().0;
        let sample = ledger.unregistered_sample(&mut rng, 10, 20);
        assert_eq!(sample[0], last, "most recent first");
        assert!(sample.len() >= 10 && sample.len() <= 30, "{}", sample.len());
        let live: Vec<u64> = ledger.live().map(|(n, _)| n).collect();
        assert!(sample.iter().all(|n| !live.contains(n)));
    }
}
