//! Engine counters: decisions per id and reason, bytes, active tunnels and
//! the ring of recent denials, shared by all core threads and read by the
//! control link. A would-be denial let through in report mode is counted
//! and recorded apart from the denials (`enforced: false`). Denial logging
//! (would-be denials too) is rate-limited per source; counters are always
//! exact. The counters of an id that is no longer registered are dropped
//! once they have not moved for [`DEPARTED_KEPT`], and the stillest first
//! beyond [`DEPARTED_FLOOR`] or the registry's size, whichever is larger,
//! so they never outgrow the registry however fast sandboxes come and go.

use crackbox_policy::reason::{Layer, Reason};
use crackbox_policy::wire::{DecisionCount, Denial, StatsReport, TunnelCount};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Denials kept for `/v1/denials`.
const DENIAL_RING: usize = 1000;
/// Longest host kept in a denial record.
const MAX_HOST_RECORDED: usize = 255;
/// Sources tracked for log rate limiting within one second before the
/// table is reset (a flood from more sources than this logs more).
const LOG_TABLE_LIMIT: usize = 10_000;
/// How long the counters of an id that is not registered are still
/// reported after they last moved: long enough for every scraper to read a
/// departed sandbox's last counts.
pub(crate) const DEPARTED_KEPT: Duration = Duration::from_secs(300);
/// Departed ids whose counters are kept at most, when the registry holds
/// fewer ids than this (else as many as it holds).
const DEPARTED_FLOOR: usize = 1024;

pub(crate) use crackbox_policy::Direction;

/// The front end that opened a tunnel: the `front_end` label of
/// `crackbox_tunnels_opened_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrontEnd {
    /// An HTTP `CONNECT` on the forward listener.
    Connect,
    /// A redirected or steered TLS connection, by its SNI.
    Transparent,
    /// A SOCKS5 `CONNECT`.
    Socks5,
}

impl FrontEnd {
    const ALL: [FrontEnd; 3] = [FrontEnd::Connect, FrontEnd::Transparent, FrontEnd::Socks5];

    /// The label value.
    fn as_str(self) -> &'static str {
        match self {
            FrontEnd::Connect => "connect",
            FrontEnd::Transparent => "transparent",
            FrontEnd::Socks5 => "socks5",
        }
    }
}

/// Decision counts keyed by registration id, outcome (`None` = allowed) and
/// whether the outcome was enforced (false: a would-be denial let through).
type DecisionCounts = FxHashMap<(Arc<str>, Option<Reason>, bool), u64>;

/// One recent denial as the data path records it: no formatting, and no
/// allocation once the ring is full (the host buffer is reused);
/// [`Stats::report`] turns it into a wire [`Denial`].
struct RecentDenial {
    time_ms: u64,
    source: IpAddr,
    id: Arc<str>,
    host: String,
    port: u16,
    reason: Reason,
    layer: Layer,
    enforced: bool,
}

impl RecentDenial {
    fn to_wire(&self) -> Denial {
        Denial {
            time_ms: self.time_ms,
            ip: self.source.to_string(),
            id: self.id.to_string(),
            host: self.host.to_string(),
            port: self.port,
            reason: self.reason,
            enforced: self.enforced,
            layer: Some(self.layer),
        }
    }
}

/// Counters since the engine started.
#[derive(Default)]
pub struct Stats {
    decisions: Mutex<DecisionCounts>,
    denials: Mutex<VecDeque<RecentDenial>>,
    /// Denials recorded since start (the newest one's number), moved under
    /// the lock of `denials`, so the two are read consistently.
    denials_recorded: AtomicU64,
    /// The id counted for unregistered sources (empty), shared so a denial
    /// allocates none.
    no_id: Arc<str>,
    /// Denials logged per source in the current second (the second, and
    /// the count of each source denied in it).
    log_budget: Mutex<(u64, FxHashMap<IpAddr, u32>)>,
    /// Ids with counters but no registration: since when their counters
    /// stood at this total.
    departed: Mutex<FxHashMap<Arc<str>, (Instant, u64)>>,
    active: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    /// Tunnels opened, indexed as [`FrontEnd::ALL`].
    tunnels_opened: [AtomicU64; 3],
    generation: AtomicU64,
    denial_logs_per_second: u32,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The longest prefix of `text` of at most `max` bytes that ends on a char boundary.
fn truncated(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Gives `table` room for as many entries again as it holds. A hash table
/// whose removed entries have used up its free slots is rebuilt in place
/// when it is at most half full but doubled when fuller, so a table of
/// steady size under churn would double at some moment long after start (the
/// decision counts of a soak's ~2,600 series: one 264 KiB step). With this
/// room kept after each round of removals it grows only while its entries
/// do.
fn keep_half_free<K: Eq + Hash, V>(table: &mut FxHashMap<K, V>) {
    table.reserve(table.len());
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Stats {
    /// Counters that log at most `denial_logs_per_second` denials per source.
    pub fn new(denial_logs_per_second: u32) -> Self {
        Stats {
            denial_logs_per_second,
            ..Stats::default()
        }
    }

    /// Counts one allowed connection or request.
    pub fn record_allowed(&self, id: &Arc<str>) {
        *lock(&self.decisions).entry((Arc::clone(id), None, true)).or_insert(0) += 1;
    }

    /// Counts, remembers and (rate-limited) logs one denial, with the
    /// layer that decided it.
    pub fn record_denied(
        &self,
        source: IpAddr,
        id: Option<&Arc<str>>,
        host: &str,
        port: u16,
        reason: Reason,
        layer: Layer,
    ) {
        self.record(source, id, host, port, (reason, layer), true);
    }

    /// Counts, remembers and (rate-limited) logs one would-be denial let
    /// through in report mode (the mode's doing), apart from the denials.
    pub fn record_reported(&self, source: IpAddr, id: &Arc<str>, host: &str, port: u16, reason: Reason) {
        self.record(source, Some(id), host, port, (reason, Layer::Mode), false);
    }

    fn record(
        &self,
        source: IpAddr,
        id: Option<&Arc<str>>,
        host: &str,
        port: u16,
        (reason, layer): (Reason, Layer),
        enforced: bool,
    ) {
        let id = Arc::clone(id.unwrap_or(&self.no_id));
        *lock(&self.decisions)
            .entry((Arc::clone(&id), Some(reason), enforced))
            .or_insert(0) += 1;
        let host = truncated(host, MAX_HOST_RECORDED);
        let time_ms = now_ms();
        if self.may_log(source, time_ms / 1000) {
            let remedy = reason.remedy();
            let host = host.escape_debug();
            if enforced {
                tracing::info!(%source, id = %id, %host, port, %reason, %layer, remedy, "denied");
            } else {
                tracing::info!(%source, id = %id, %host, port, %reason, %layer, remedy, "let through, not enforced (report mode)");
            }
        }
        let mut ring = lock(&self.denials);
        // A full ring's oldest record gives its host buffer to the newest.
        let mut recorded = match ring.len() {
            DENIAL_RING => ring.pop_front().map(|oldest| oldest.host).unwrap_or_default(),
            _ => String::new(),
        };
        recorded.clear();
        recorded.push_str(host);
        ring.push_back(RecentDenial {
            time_ms,
            source,
            id,
            host: recorded,
            port,
            reason,
            layer,
            enforced,
        });
        self.denials_recorded.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a denial of `source` in `second` may be logged. Only the
    /// current second's counts matter, so the table starts empty with each
    /// new second: it holds the sources denied in one second, not every
    /// source ever denied.
    fn may_log(&self, source: IpAddr, second: u64) -> bool {
        let mut budget = lock(&self.log_budget);
        let (current, counts) = &mut *budget;
        if *current != second || counts.len() >= LOG_TABLE_LIMIT {
            *current = second;
            counts.clear();
        }
        let count = counts.entry(source).or_insert(0);
        *count += 1;
        *count <= self.denial_logs_per_second
    }

    /// Adds bytes moved in one direction.
    pub(crate) fn add_bytes(&self, direction: Direction, n: u64) {
        let counter = match direction {
            Direction::Up => &self.bytes_up,
            Direction::Down => &self.bytes_down,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one tunnel opened by `front_end`.
    pub(crate) fn count_tunnel(&self, front_end: FrontEnd) {
        self.tunnels_opened[front_end as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a tunnel or forwarded connection as open until the guard drops.
    pub fn open_tunnel(self: &Arc<Self>) -> ActiveTunnel {
        self.active.fetch_add(1, Ordering::Relaxed);
        ActiveTunnel(Arc::clone(self))
    }

    /// Records the snapshot generation now enforced.
    pub fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::Relaxed);
    }

    /// Drops the counters of every id that is not in `registered` (the ids
    /// of the registry in force) and whose counters have not moved for
    /// [`DEPARTED_KEPT`] as of `now`, and beyond the larger of
    /// [`DEPARTED_FLOOR`] and the registry's size, those that stood still
    /// longest. The unregistered sources' counters (id `""`) are always
    /// kept. Called after each report, so a report shows an id's last
    /// counts before they go.
    pub fn forget_departed<'a>(&self, registered: impl IntoIterator<Item = &'a str>, now: Instant) {
        let registered: FxHashSet<&str> = registered.into_iter().collect();
        let mut decisions = lock(&self.decisions);
        let mut totals: FxHashMap<Arc<str>, u64> = FxHashMap::default();
        for ((id, _, _), count) in decisions.iter() {
            if !id.is_empty() && !registered.contains(&**id) {
                *totals.entry(Arc::clone(id)).or_insert(0) += count;
            }
        }
        let mut departed = lock(&self.departed);
        departed.retain(|id, _| totals.contains_key(id));
        for (id, total) in totals {
            match departed.get_mut(&id) {
                Some(seen) if seen.1 == total => {}
                Some(seen) => *seen = (now, total),
                None => {
                    departed.insert(id, (now, total));
                }
            }
        }
        let mut by_stillness: Vec<(Instant, Arc<str>)> = departed
            .iter()
            .map(|(id, (since, _))| (*since, Arc::clone(id)))
            .collect();
        by_stillness.sort_unstable();
        let over = by_stillness.len().saturating_sub(registered.len().max(DEPARTED_FLOOR));
        let gone: FxHashSet<Arc<str>> = by_stillness
            .into_iter()
            .enumerate()
            .filter(|(rank, (since, _))| *rank < over || now.saturating_duration_since(*since) >= DEPARTED_KEPT)
            .map(|(_, (_, id))| id)
            .collect();
        if !gone.is_empty() {
            decisions.retain(|(id, _, _), _| !gone.contains(id));
            departed.retain(|id, _| !gone.contains(id));
        }
        keep_half_free(&mut decisions);
        keep_half_free(&mut departed);
    }

    /// Everything, for the control plane.
    pub fn report(&self) -> StatsReport {
        let decisions = lock(&self.decisions)
            .iter()
            .map(|((id, reason, enforced), count)| DecisionCount {
                id: id.to_string(),
                reason: *reason,
                enforced: *enforced,
                count: *count,
            })
            .collect();
        StatsReport {
            decisions,
            active_tunnels: self.active.load(Ordering::Relaxed),
            bytes_up: self.bytes_up.load(Ordering::Relaxed),
            bytes_down: self.bytes_down.load(Ordering::Relaxed),
            denials: lock(&self.denials).iter().map(RecentDenial::to_wire).collect(),
            generation: self.generation.load(Ordering::Relaxed),
            tunnels_opened: FrontEnd::ALL
                .iter()
                .map(|&front_end| TunnelCount {
                    front_end: front_end.as_str().to_owned(),
                    count: self.tunnels_opened[front_end as usize].load(Ordering::Relaxed),
                })
                .collect(),
        }
    }
}

impl Stats {
    /// The number of the newest denial and the denials after the
    /// `after`-th still in the ring, oldest first (the console's feed); the
    /// decision counts are not touched.
    pub fn denials_after(&self, after: u64) -> (u64, Vec<Denial>) {
        let ring = lock(&self.denials);
        let recorded = self.denials_recorded.load(Ordering::Relaxed);
        let newer = usize::try_from(recorded.saturating_sub(after)).unwrap_or(usize::MAX);
        let skip = ring.len().saturating_sub(newer);
        (recorded, ring.iter().skip(skip).map(RecentDenial::to_wire).collect())
    }

    /// Tunnels and forwarded connections open now.
    pub fn active_tunnels(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }
}

/// Keeps one tunnel counted as active while alive.
pub struct ActiveTunnel(Arc<Stats>);

impl Drop for ActiveTunnel {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_ring() {
        let stats = Arc::new(Stats::new(1));
        let id: Arc<str> = Arc::from("agent");
        stats.record_allowed(&id);
        stats.record_allowed(&id);
        for i in 0..(DENIAL_RING + 5) {
            stats.record_denied(
                "127.0.0.2".parse().unwrap(),
                Some(&id),
                &format!("h{i}.test"),
                443,
                Reason::NotAllowed,
                Layer::Entry,
            );
        }
        stats.record_denied(
            "127.0.0.3".parse().unwrap(),
            None,
            "x.test",
            80,
            Reason::Unregistered,
            Layer::Registration,
        );
        stats.record_reported("127.0.0.4".parse().unwrap(), &id, "new.test", 443, Reason::NotAllowed);
        let tunnel = stats.open_tunnel();
        stats.count_tunnel(FrontEnd::Socks5);
        stats.count_tunnel(FrontEnd::Socks5);
        stats.count_tunnel(FrontEnd::Connect);
        let report = stats.report();
        let opened: Vec<(&str, u64)> = report
            .tunnels_opened
            .iter()
            .map(|t| (t.front_end.as_str(), t.count))
            .collect();
        assert_eq!(opened, [("connect", 1), ("transparent", 0), ("socks5", 2)]);
        drop(tunnel);
        assert_eq!(report.active_tunnels, 1);
        assert_eq!(stats.report().active_tunnels, 0);
        assert_eq!(report.denials.len(), DENIAL_RING);
        let last = report.denials.last().unwrap();
        assert_eq!(
            (last.reason, last.enforced, last.host.as_str()),
            (Reason::NotAllowed, false, "new.test")
        );
        assert_eq!(last.layer, Some(Layer::Mode));
        let before = &report.denials[report.denials.len() - 2];
        assert_eq!(
            (before.reason, before.enforced, before.layer),
            (Reason::Unregistered, true, Some(Layer::Registration))
        );
        assert_eq!(report.denials[0].host, "h7.test");
        let count = |id: &str, reason, enforced| {
            report
                .decisions
                .iter()
                .find(|d| d.id == id && d.reason == reason && d.enforced == enforced)
                .map_or(0, |d| d.count)
        };
        assert_eq!(count("agent", None, true), 2);
        assert_eq!(count("agent", Some(Reason::NotAllowed), true), DENIAL_RING as u64 + 5);
        assert_eq!(
            count("agent", Some(Reason::NotAllowed), false),
            1,
            "apart from the denials"
        );
        assert_eq!(count("", Some(Reason::Unregistered), true), 1);
    }

    #[test]
    fn the_feed_gets_only_the_denials_after_the_ones_it_saw() {
        let stats = Stats::new(0);
        let deny = |host: &str| {
            stats.record_denied(
                "127.0.0.2".parse().unwrap(),
                None,
                host,
                443,
                Reason::NotAllowed,
                Layer::Entry,
            )
        };
        assert_eq!(stats.denials_after(0), (0, vec![]));
        deny("a.test");
        deny("b.test");
        let hosts = |(n, denials): (u64, Vec<Denial>)| (n, denials.into_iter().map(|d| d.host).collect::<Vec<_>>());
        assert_eq!(
            hosts(stats.denials_after(0)),
            (2, vec!["a.test".into(), "b.test".into()])
        );
        assert_eq!(hosts(stats.denials_after(1)), (2, vec!["b.test".into()]));
        assert_eq!(hosts(stats.denials_after(2)), (2, vec![]));
        for i in 0..DENIAL_RING + 3 {
            deny(&format!("h{i}.test"));
        }
        let (recorded, denials) = stats.denials_after(1);
        assert_eq!(recorded, DENIAL_RING as u64 + 5);
        assert_eq!(denials.len(), DENIAL_RING, "what left the ring is gone");
        assert_eq!(denials[0].host, "h3.test");
    }

    #[test]
    fn recorded_hosts_are_cut_at_255_bytes_on_a_char_boundary() {
        let stats = Stats::new(0);
        let long = format!("{}é{}", "a".repeat(254), "b".repeat(10));
        stats.record_denied(
            "127.0.0.2".parse().unwrap(),
            None,
            &long,
            443,
            Reason::NotAllowed,
            Layer::Entry,
        );
        let report = stats.report();
        assert_eq!(report.denials[0].host, "a".repeat(254));
        assert_eq!(report.denials[0].ip, "127.0.0.2");
        assert_eq!(report.denials[0].id, "");
        assert_eq!(truncated("ok.test", 255), "ok.test");
    }

    #[test]
    fn counters_of_departed_ids_go_once_they_stood_still_long_enough() {
        let stats = Stats::new(0);
        let (live, gone, back, still_denied): (Arc<str>, Arc<str>, Arc<str>, Arc<str>) =
            ("live".into(), "gone".into(), "back".into(), "docker:bad-labels".into());
        let source: IpAddr = "127.0.0.2".parse().unwrap();
        for id in [&live, &gone, &back] {
            stats.record_allowed(id);
        }
        stats.record_denied(source, None, "x.test", 80, Reason::Unregistered, Layer::Registration);
        let t0 = Instant::now();
        let minutes = |m: u64| t0 + Duration::from_secs(60 * m);
        let ids = |stats: &Stats| {
            let mut ids: Vec<String> = stats.report().decisions.into_iter().map(|d| d.id).collect();
            ids.sort();
            ids.dedup();
            ids
        };
        // (minute, registered ids, whether the unregistered `docker:bad-labels`
        // is denied again before the report, ids still reported after it)
        type Step<'a> = (u64, &'a [&'a str], bool, &'a [&'a str]);
        let steps: [Step; 6] = [
            (0, &["live"], false, &["", "back", "gone", "live"]),
            (2, &["live"], true, &["", "back", "docker:bad-labels", "gone", "live"]),
            (
                4,
                &["live", "back"],
                false,
                &["", "back", "docker:bad-labels", "gone", "live"],
            ),
            (5, &["live"], true, &["", "back", "docker:bad-labels", "live"]),
            (9, &["live"], false, &["", "back", "docker:bad-labels", "live"]),
            (10, &["live"], false, &["", "live"]),
        ];
        for (minute, registered, denied_again, after) in steps {
            if denied_again {
                stats.record_denied(
                    source,
                    Some(&still_denied),
                    "x.test",
                    443,
                    Reason::InvalidLabel,
                    Layer::Registration,
                );
            }
            stats.forget_departed(registered.iter().copied(), minutes(minute));
            assert_eq!(ids(&stats), after, "minute {minute}");
        }
    }

    #[test]
    fn departed_ids_beyond_the_floor_go_stillest_first() {
        let stats = Stats::new(0);
        let t0 = Instant::now();
        let name = |n: usize| format!("gone-{n:05}");
        for n in 0..DEPARTED_FLOOR {
            stats.record_allowed(&Arc::from(name(n)));
        }
        stats.forget_departed(["live"], t0);
        for n in DEPARTED_FLOOR..DEPARTED_FLOOR + 6 {
            stats.record_allowed(&Arc::from(name(n)));
        }
        stats.forget_departed(["live"], t0 + Duration::from_secs(60));
        let mut ids: Vec<String> = stats.report().decisions.into_iter().map(|d| d.id).collect();
        ids.sort();
        assert_eq!(ids.len(), DEPARTED_FLOOR);
        assert!(ids.iter().any(|id| *id == name(DEPARTED_FLOOR + 5)), "the newest stay");
        let first_batch_kept = ids.iter().filter(|id| **id < name(DEPARTED_FLOOR)).count();
        assert_eq!(first_batch_kept, DEPARTED_FLOOR - 6);
    }

    #[test]
    fn counters_of_a_steady_registry_under_churn_never_grow() {
        let stats = Stats::new(0);
        let t0 = Instant::now();
        let (live, turnover) = (2_000, 100);
        let id = |n: usize| -> Arc<str> { Arc::from(format!("sandbox-{n}")) };
        let mut capacities = Vec::new();
        for round in 0..300 {
            let first = round * turnover;
            for n in first..first + live {
                stats.record_allowed(&id(n));
            }
            let registered: Vec<String> = (first..first + live).map(|n| id(n).to_string()).collect();
            let now = t0 + DEPARTED_KEPT * round as u32;
            stats.forget_departed(registered.iter().map(String::as_str), now);
            capacities.push(lock(&stats.decisions).capacity());
        }
        let entries = lock(&stats.decisions).len();
        assert_eq!(entries, live + turnover, "the live ids and the last ones to depart");
        // Without the room kept, removed entries eat the free slots for
        // about 120 rounds, and then the table doubles.
        let grown = capacities.iter().position(|c| *c > capacities[0]);
        assert_eq!(grown, None, "the table grew under churn, from {}", capacities[0]);
    }

    #[test]
    fn log_budget_is_per_source_per_second() {
        let stats = Stats::new(2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        assert!(stats.may_log(a, 10) && stats.may_log(a, 10));
        assert!(!stats.may_log(a, 10));
        assert!(stats.may_log(b, 10));
        assert!(stats.may_log(a, 11));
        // Only the current second's sources are held, however many were
        // denied before (the table used to keep every source up to 10,000).
        for i in 0..5000u32 {
            stats.may_log(
                IpAddr::V4(std::net::Ipv4Addr::from(0x7f01_0000 + i)),
                20 + u64::from(i / 100),
            );
        }
        assert_eq!(lock(&stats.log_budget).1.len(), 100);
        assert!(stats.may_log(a, 100));
        assert_eq!(lock(&stats.log_budget).1.len(), 1);
    }
}
