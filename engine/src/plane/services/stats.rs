//! Engine counters: decisions per id and reason, bytes, active tunnels and
//! the ring of recent denials, kept per core thread and merged when read
//! (docs/architecture.md, "Locks and shared atomics"). A would-be denial let
//! through in report mode is counted and recorded apart from the denials
//! (`enforced: false`). Denial logging (would-be denials too) is
//! rate-limited per source; counters are always exact. The counters of an
//! id that is no longer registered are dropped once they have not moved
//! for [`DEPARTED_KEPT`], and the stillest first beyond [`DEPARTED_FLOOR`]
//! or the registry's size, whichever is larger, so they never outgrow the
//! registry however fast sandboxes come and go.
//!
//! Each core thread writes only its own [`Ledger`]: its counters (relaxed
//! atomics on its own cache lines) and its book (decision counts, its ring
//! of recent denials in `recent`, its log budget) behind a lock only it and
//! the reader take. The threads that are not core threads (the DNS filter)
//! share one more ledger. A read ([`Stats::report`], on the control link's thread)
//! moves the books' decision counts into the merged table, copies the
//! denials recorded since the last read into the merged ring, and sums the
//! counters. A thread's handle ([`ThreadStats`]) is an `Rc`, so opening a
//! tunnel counts it without touching a reference count other threads share.

mod recent;

use super::locks::{SharedLock, ThreadLock};
use crackbox_policy::reason::{Layer, Reason};
use crackbox_wire::link::{DecisionCount, Denial, StatsReport, TunnelCount};
use recent::{Denied, RecentDenials, DENIAL_RING};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use std::hash::Hash;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// One id's decision counts: by outcome (`None` = allowed) and whether the
/// outcome was enforced (false: a would-be denial let through).
type IdCounts = Vec<(Option<Reason>, bool, u64)>;

/// Decision counts keyed by registration id.
type DecisionCounts = FxHashMap<Arc<str>, IdCounts>;

/// Adds `n` to `id`'s count of `outcome` in `table`; the id is cloned only
/// when the table does not hold it yet.
fn add_count(table: &mut DecisionCounts, id: &Arc<str>, outcome: (Option<Reason>, bool), n: u64) {
    let counts = match table.get_mut(&**id) {
        Some(counts) => counts,
        None => table.entry(Arc::clone(id)).or_default(),
    };
    match counts
        .iter_mut()
        .find(|(reason, enforced, _)| (*reason, *enforced) == outcome)
    {
        Some((_, _, count)) => *count += n,
        None => counts.push((outcome.0, outcome.1, n)),
    }
}

/// What a ledger's lock guards.
#[derive(Default)]
struct Book {
    /// Decision counts since the last read.
    decisions: DecisionCounts,
    /// This thread's most recent denials.
    denials: RecentDenials,
    /// Denials logged per source in the current second (the second, and
    /// the count of each source denied in it).
    log_budget: (u64, FxHashMap<IpAddr, u32>),
}

/// One thread's counters and book, alone on its cache lines.
#[repr(align(64))]
struct Ledger {
    book: ThreadLock<Book>,
    active: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    /// Tunnels opened, indexed as [`FrontEnd::ALL`].
    tunnels_opened: [AtomicU64; 3],
    /// The snapshot generation this core thread last re-decided its live
    /// connections against (revocation's look, every 200 ms).
    revoked_through: AtomicU64,
}

/// What reads have merged: the decision counts so far, the recent
/// denials, and the departed ids.
#[derive(Default)]
struct Merged {
    decisions: DecisionCounts,
    denials: VecDeque<Denial>,
    /// The last denial taken from each ledger (its `seq` + 1).
    seen: Vec<u64>,
    /// Denials merged since start: the number of the newest in `denials`.
    recorded: u64,
    /// Ids with counters but no registration: since when their counters
    /// stood at this total.
    departed: FxHashMap<Arc<str>, (Instant, u64)>,
}

/// Counters since the engine started.
pub struct Stats {
    /// One ledger per core thread, then the one of the other threads.
    ledgers: Box<[Ledger]>,
    merged: SharedLock<Merged>,
    /// The id counted for unregistered sources (empty).
    no_id: Arc<str>,
    generation: AtomicU64,
    /// Denials each ledger logs per source per second.
    logs_per_ledger: u32,
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

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Stats {
    /// Counters for `threads` core threads (and the other threads) that log
    /// at most `denial_logs_per_second` denials per source, shared among
    /// the ledgers (each logs at least one).
    pub fn new(threads: usize, denial_logs_per_second: u32) -> Self {
        let ledgers = threads.max(1) + 1;
        Stats {
            ledgers: (0..ledgers)
                .map(|owner| Ledger {
                    book: ThreadLock::new("stats ledger", owner, Book::default()),
                    active: AtomicU64::new(0),
                    bytes_up: AtomicU64::new(0),
                    bytes_down: AtomicU64::new(0),
                    tunnels_opened: Default::default(),
                    revoked_through: AtomicU64::new(0),
                })
                .collect(),
            merged: SharedLock::new("stats merged", Merged::default()),
            no_id: Arc::from(""),
            generation: AtomicU64::new(0),
            logs_per_ledger: denial_logs_per_second.div_ceil(ledgers as u32),
        }
    }

    /// The ledger index of the threads that are not core threads.
    pub(crate) fn off_core(&self) -> usize {
        self.ledgers.len() - 1
    }

    /// The ledger of thread `ledger` (the last one for any index beyond).
    fn ledger(&self, ledger: usize) -> &Ledger {
        self.ledgers
            .get(ledger)
            .unwrap_or(&self.ledgers[self.ledgers.len() - 1])
    }

    /// Counts one allowed connection or request on `ledger`.
    pub(crate) fn record_allowed(&self, ledger: usize, id: &Arc<str>) {
        add_count(&mut self.ledger(ledger).book.lock().decisions, id, (None, true), 1);
    }

    /// Counts, remembers and (rate-limited) logs one denial on `ledger`,
    /// with the layer that decided it.
    #[expect(clippy::too_many_arguments, reason = "one denial's fields, recorded as they come")]
    pub(crate) fn record_denied(
        &self,
        ledger: usize,
        source: IpAddr,
        id: Option<&Arc<str>>,
        host: &str,
        port: u16,
        reason: Reason,
        layer: Layer,
    ) {
        self.record(ledger, source, id, host, port, (reason, layer), true);
    }

    /// Counts, remembers and (rate-limited) logs one would-be denial let
    /// through in report mode (the mode's doing), apart from the denials.
    pub(crate) fn record_reported(
        &self,
        ledger: usize,
        source: IpAddr,
        id: &Arc<str>,
        host: &str,
        port: u16,
        reason: Reason,
    ) {
        self.record(ledger, source, Some(id), host, port, (reason, Layer::Mode), false);
    }

    #[expect(clippy::too_many_arguments, reason = "one denial's fields, recorded as they come")]
    fn record(
        &self,
        ledger: usize,
        source: IpAddr,
        id: Option<&Arc<str>>,
        host: &str,
        port: u16,
        (reason, layer): (Reason, Layer),
        enforced: bool,
    ) {
        let id = id.unwrap_or(&self.no_id);
        let host = truncated(host, MAX_HOST_RECORDED);
        let time_ns = now_ns();
        let mut book = self.ledger(ledger).book.lock();
        add_count(&mut book.decisions, id, (Some(reason), enforced), 1);
        if may_log(
            &mut book.log_budget,
            self.logs_per_ledger,
            source,
            time_ns / 1_000_000_000,
        ) {
            let remedy = reason.remedy();
            let host = host.escape_debug();
            // The id is the registrant's text (spaces, quotes, `=`): quoted,
            // it cannot pose as further fields of the line.
            if enforced {
                tracing::info!(%source, id = ?id, %host, port, %reason, %layer, remedy, "denied");
            } else {
                tracing::info!(%source, id = ?id, %host, port, %reason, %layer, remedy, "let through, not enforced (report mode)");
            }
        }
        book.denials.push(Denied {
            time_ns,
            source,
            id,
            host,
            port,
            reason,
            layer,
            enforced,
        });
    }

    /// Records the snapshot generation now enforced.
    pub fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::Relaxed);
    }

    /// Moves every ledger's decision counts into `merged` and copies the
    /// denials recorded since the last read into its ring; each book is
    /// locked once, briefly.
    fn merge(&self, merged: &mut Merged) {
        merged.seen.resize(self.ledgers.len(), 0);
        let mut fresh: Vec<(u64, Denial)> = Vec::new();
        for (index, ledger) in self.ledgers.iter().enumerate() {
            let mut book = ledger.book.lock();
            for (id, counts) in book.decisions.drain() {
                for (reason, enforced, count) in counts {
                    add_count(&mut merged.decisions, &id, (reason, enforced), count);
                }
            }
            let seen = merged.seen[index];
            fresh.extend(book.denials.since(seen));
            merged.seen[index] = book.denials.next_seq();
        }
        fresh.sort_by_key(|(time_ns, _)| *time_ns);
        merged.recorded += fresh.len() as u64;
        merged.denials.extend(fresh.into_iter().map(|(_, denial)| denial));
        let over = merged.denials.len().saturating_sub(DENIAL_RING);
        merged.denials.drain(..over);
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
        let mut merged = self.merged.lock();
        self.merge(&mut merged);
        let Merged {
            decisions, departed, ..
        } = &mut *merged;
        let mut totals: FxHashMap<Arc<str>, u64> = FxHashMap::default();
        for (id, counts) in decisions.iter() {
            if !id.is_empty() && !registered.contains(&**id) {
                totals.insert(Arc::clone(id), counts.iter().map(|(_, _, n)| n).sum());
            }
        }
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
            decisions.retain(|id, _| !gone.contains(id));
            departed.retain(|id, _| !gone.contains(id));
        }
        keep_half_free(decisions);
        keep_half_free(departed);
    }

    /// The number of the newest denial and the denials after the
    /// `after`-th still in the ring, oldest first (the console's feed); the
    /// decision counts are merged as by a report, their totals unchanged.
    pub fn denials_after(&self, after: u64) -> (u64, Vec<Denial>) {
        let mut merged = self.merged.lock();
        self.merge(&mut merged);
        let newer = usize::try_from(merged.recorded.saturating_sub(after)).unwrap_or(usize::MAX);
        let skip = merged.denials.len().saturating_sub(newer);
        (merged.recorded, merged.denials.iter().skip(skip).cloned().collect())
    }

    /// Tunnels and forwarded connections open now, summed over the threads.
    pub fn active_tunnels(&self) -> u64 {
        self.ledgers
            .iter()
            .map(|ledger| ledger.active.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    /// Everything, for the control plane.
    pub fn report(&self) -> StatsReport {
        let mut merged = self.merged.lock();
        self.merge(&mut merged);
        let decisions = merged
            .decisions
            .iter()
            .flat_map(|(id, counts)| {
                counts.iter().map(|(reason, enforced, count)| DecisionCount {
                    id: id.to_string(),
                    reason: *reason,
                    enforced: *enforced,
                    count: *count,
                })
            })
            .collect();
        let sum = |field: fn(&Ledger) -> &AtomicU64| {
            self.ledgers
                .iter()
                .map(|ledger| field(ledger).load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        StatsReport {
            decisions,
            active_tunnels: sum(|l| &l.active),
            bytes_up: sum(|l| &l.bytes_up),
            bytes_down: sum(|l| &l.bytes_down),
            denials: merged.denials.iter().cloned().collect(),
            generation: self.generation.load(Ordering::Relaxed),
            revocation_generation: self.ledgers[..self.off_core()]
                .iter()
                .map(|ledger| ledger.revoked_through.load(Ordering::Relaxed))
                .min()
                .unwrap_or(0),
            tunnels_opened: FrontEnd::ALL
                .iter()
                .map(|&front_end| TunnelCount {
                    front_end: front_end.as_str().to_owned(),
                    count: self
                        .ledgers
                        .iter()
                        .map(|ledger| ledger.tunnels_opened[front_end as usize].load(Ordering::Relaxed))
                        .sum(),
                })
                .collect(),
        }
    }
}

/// Whether a denial of `source` in `second` may be logged, `per_second`
/// a second. Only the current second's counts matter, so the table starts
/// empty with each new second: it holds the sources denied in one second,
/// not every source ever denied.
fn may_log(budget: &mut (u64, FxHashMap<IpAddr, u32>), per_second: u32, source: IpAddr, second: u64) -> bool {
    let (current, counts) = budget;
    if *current != second || counts.len() >= LOG_TABLE_LIMIT {
        *current = second;
        counts.clear();
    }
    let count = counts.entry(source).or_insert(0);
    *count += 1;
    *count <= per_second
}

/// One core thread's handle on the counters: what it records goes to its
/// own ledger.
pub(crate) struct ThreadStats {
    stats: Arc<Stats>,
    thread: usize,
}

impl ThreadStats {
    /// Core thread `thread`'s handle on `stats`.
    pub(crate) fn new(stats: Arc<Stats>, thread: usize) -> Rc<Self> {
        Rc::new(ThreadStats { stats, thread })
    }

    /// The core thread this handle counts for.
    pub(crate) fn thread(&self) -> usize {
        self.thread
    }

    fn ledger(&self) -> &Ledger {
        self.stats.ledger(self.thread)
    }

    /// Records that this thread's live connections are re-decided against
    /// snapshot `generation`.
    pub(crate) fn revoked_through(&self, generation: u64) {
        self.ledger().revoked_through.store(generation, Ordering::Relaxed);
    }

    /// Counts one allowed connection or request.
    pub(crate) fn record_allowed(&self, id: &Arc<str>) {
        self.stats.record_allowed(self.thread, id);
    }

    /// Counts, remembers and (rate-limited) logs one denial, with the
    /// layer that decided it.
    pub(crate) fn record_denied(
        &self,
        source: IpAddr,
        id: Option<&Arc<str>>,
        host: &str,
        port: u16,
        reason: Reason,
        layer: Layer,
    ) {
        self.stats
            .record_denied(self.thread, source, id, host, port, reason, layer);
    }

    /// Counts one would-be denial let through in report mode.
    pub(crate) fn record_reported(&self, source: IpAddr, id: &Arc<str>, host: &str, port: u16, reason: Reason) {
        self.stats.record_reported(self.thread, source, id, host, port, reason);
    }

    /// Adds bytes moved in one direction.
    pub(crate) fn add_bytes(&self, direction: Direction, n: u64) {
        let ledger = self.ledger();
        let counter = match direction {
            Direction::Up => &ledger.bytes_up,
            Direction::Down => &ledger.bytes_down,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one tunnel opened by `front_end`.
    pub(crate) fn count_tunnel(&self, front_end: FrontEnd) {
        self.ledger().tunnels_opened[front_end as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a tunnel or forwarded connection as open until the guard drops.
    pub(crate) fn open_tunnel(self: &Rc<Self>) -> ActiveTunnel {
        self.ledger().active.fetch_add(1, Ordering::Relaxed);
        ActiveTunnel(Rc::clone(self))
    }
}

/// Keeps one tunnel counted as active while alive.
pub(crate) struct ActiveTunnel(Rc<ThreadStats>);

impl Drop for ActiveTunnel {
    fn drop(&mut self) {
        self.0.ledger().active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
