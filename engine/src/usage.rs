//! Usage per registration: the bytes its connections moved each way, the
//! tunnels and requests they opened, the denials they got and (in report
//! mode) the would-be denials let through, plus the [`Limiter`] that holds
//! it to its cap.
//!
//! An [`Account`] lives as long as the registration: the snapshot that
//! registers a source makes one, later snapshots hand it on while the source
//! stays registered under the same id, and one that removes the source or
//! gives it a new id drops it. Counting takes no lock and shares no cache
//! line between core threads: every core thread adds to its own
//! cache-line-sized slot with relaxed atomics (no two threads write one
//! line, so the line never moves between cores), and a read sums the slots.
//! Denials and would-be denials by reason, rare by comparison, are counted
//! in a block of their own per slot, made the first time the slot counts
//! one. The threads that are not core threads (the DNS filter) share one
//! more slot, [`Account::OFF_CORE`].
//!
//! The account is the engine's [`Attachment`] to each registration of a
//! snapshot (`crackbox_policy::attachment`): the snapshot hands it on under
//! the same id, and makes a new one on the old one's limiter under another.

use crate::limiter::Limiter;
use crackbox_policy::reason::Reason;
use crackbox_policy::Direction;
use crackbox_policy::{Attachment, Bandwidth};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// One core thread's counters, alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Slot {
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    tunnels: AtomicU64,
    requests: AtomicU64,
    /// Denials and would-be denials, once this slot counted one.
    outcomes: OnceLock<Box<Outcomes>>,
}

/// One slot's denials and would-be denials, by reason.
#[derive(Debug, Default)]
struct Outcomes {
    denials: [AtomicU64; Reason::ALL.len()],
    /// Would-be denials let through in report mode, by the reason they
    /// would have had.
    reported: [AtomicU64; Reason::ALL.len()],
}

/// What one registration has used, and the cap it is held to.
#[derive(Debug)]
pub struct Account {
    /// One slot per core thread, then [`Account::OFF_CORE`]'s.
    slots: Box<[Slot]>,
    limiter: Arc<Limiter>,
    since_ms: u64,
}

/// Accounts are equal only when they are the same account: each is the one
/// record of one registration's traffic.
impl PartialEq for Account {
    fn eq(&self, other: &Account) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Account {}

/// An account's counters summed at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes moved client -> upstream.
    pub bytes_up: u64,
    /// Bytes moved upstream -> client.
    pub bytes_down: u64,
    /// Tunnels opened (CONNECT, and transparent or steered TLS).
    pub tunnels: u64,
    /// HTTP requests forwarded.
    pub requests: u64,
    /// Denials by reason; reasons never seen are left out.
    pub denials: Vec<(Reason, u64)>,
    /// Would-be denials let through in report mode, by reason; reasons
    /// never seen are left out.
    pub reported: Vec<(Reason, u64)>,
    /// When counting began (ms since the Unix epoch).
    pub since_ms: u64,
}

impl Account {
    /// The thread index of every thread that is not a core thread (the DNS
    /// filter's): they share the last slot.
    pub const OFF_CORE: usize = usize::MAX;

    /// An account with one slot per core thread (at least one) and one for
    /// the others, held to `limiter` (which a re-registration under a new
    /// id passes on).
    pub fn new(threads: usize, limiter: Arc<Limiter>) -> Self {
        Account {
            slots: (0..threads.max(1) + 1).map(|_| Slot::default()).collect(),
            limiter,
            since_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// The slot of core thread `thread`; the last one, shared, for an index
    /// beyond the core threads the account was made for ([`Account::OFF_CORE`]).
    fn slot(&self, thread: usize) -> &Slot {
        self.slots.get(thread).unwrap_or(&self.slots[self.slots.len() - 1])
    }

    /// The denials and would-be denials of `thread`'s slot, made on first use.
    fn outcomes(&self, thread: usize) -> &Outcomes {
        self.slot(thread).outcomes.get_or_init(Box::default)
    }

    /// Counts `n` bytes moved `direction` by core thread `thread`.
    pub fn add_bytes(&self, thread: usize, direction: Direction, n: u64) {
        let slot = self.slot(thread);
        let counter = match direction {
            Direction::Up => &slot.bytes_up,
            Direction::Down => &slot.bytes_down,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a tunnel opened by core thread `thread`.
    pub fn add_tunnel(&self, thread: usize) {
        self.slot(thread).tunnels.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request forwarded by core thread `thread`.
    pub fn add_request(&self, thread: usize) {
        self.slot(thread).requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one denial by thread `thread`.
    pub fn add_denial(&self, thread: usize, reason: Reason) {
        self.outcomes(thread).denials[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one would-be denial let through in report mode by thread `thread`.
    pub fn add_reported(&self, thread: usize, reason: Reason) {
        self.outcomes(thread).reported[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The cap this account's connections are held to.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The counters summed over every thread's slot.
    pub fn usage(&self) -> Usage {
        let sum = |field: fn(&Slot) -> &AtomicU64| {
            self.slots
                .iter()
                .map(|slot| field(slot).load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        let by_reason = |field: fn(&Outcomes) -> &[AtomicU64; Reason::ALL.len()]| {
            let outcomes: Vec<&Outcomes> = self
                .slots
                .iter()
                .filter_map(|slot| slot.outcomes.get())
                .map(|b| &**b)
                .collect();
            Reason::ALL
                .iter()
                .enumerate()
                .map(|(index, reason)| {
                    let count = outcomes
                        .iter()
                        .map(|o| field(o)[index].load(Ordering::Relaxed))
                        .fold(0u64, u64::wrapping_add);
                    (*reason, count)
                })
                .filter(|(_, count)| *count > 0)
                .collect()
        };
        Usage {
            bytes_up: sum(|s| &s.bytes_up),
            bytes_down: sum(|s| &s.bytes_down),
            tunnels: sum(|s| &s.tunnels),
            requests: sum(|s| &s.requests),
            denials: by_reason(|o| &o.denials),
            reported: by_reason(|o| &o.reported),
            since_ms: self.since_ms,
        }
    }
}

/// A new registration gets a new account and limiter; one registered again
/// under another id a new account on the old limiter (its debt stays), so a
/// re-registration cannot reset its cap's bucket.
impl Attachment for Account {
    fn attach(slots: usize, earlier: Option<&Account>, cap: Option<Bandwidth>) -> Account {
        let limiter = match earlier {
            Some(earlier) => Arc::clone(earlier.limiter()),
            None => Arc::new(Limiter::new(cap)),
        };
        Account::new(slots, limiter)
    }

    fn holds_cap(&self, cap: Option<Bandwidth>) -> bool {
        self.limiter.rate() == cap.map(Bandwidth::bytes_per_second)
    }

    fn set_cap(&self, cap: Option<Bandwidth>) {
        self.limiter.set_rate(cap, std::time::Instant::now());
    }
}

/// The model's types with the engine's [`Account`] attached to each
/// registration: what the engine's front ends and services name.
pub mod attached {
    use super::Account;

    /// A snapshot whose registrations carry their accounts.
    pub type Snapshot = crackbox_policy::Snapshot<Account>;
    /// A registration in force with its account.
    pub type Registered = crackbox_policy::Registered<Account>;
    /// A derived snapshot and the sources it touched.
    pub type Applied = crackbox_policy::Applied<Account>;
    /// A decision naming the account.
    pub type Decision = crackbox_policy::Decision<Account>;
    /// A verdict naming the account.
    pub type Verdict = crackbox_policy::Verdict<Account>;
    /// A decision borrowing from the snapshot.
    pub type DecisionRef<'a> = crackbox_policy::DecisionRef<'a, Account>;
    /// A verdict borrowing from the snapshot.
    pub type VerdictRef<'a> = crackbox_policy::VerdictRef<'a, Account>;
    /// Where a source stands, borrowing its registration.
    pub type Standing<'a> = crackbox_policy::decide::Standing<'a, Account>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_counts_in_its_own_slot_and_a_read_sums_them() {
        let account = Arc::new(Account::new(2, Arc::default()));
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        std::thread::scope(|scope| {
            for thread in 0..2 {
                let account = &account;
                scope.spawn(move || {
                    for _ in 0..1000 {
                        account.add_bytes(thread, Direction::Up, 3);
                        account.add_bytes(thread, Direction::Down, 5);
                    }
                    account.add_tunnel(thread);
                    account.add_request(thread);
                    account.add_request(thread);
                });
            }
        });
        account.add_denial(0, Reason::NotAllowed);
        account.add_denial(1, Reason::Revoked);
        account.add_denial(Account::OFF_CORE, Reason::NotAllowed);
        account.add_reported(1, Reason::NotAllowed);
        account.add_bytes(Account::OFF_CORE, Direction::Up, 1);
        let usage = account.usage();
        assert_eq!(usage.reported, vec![(Reason::NotAllowed, 1)], "apart from the denials");
        assert_eq!((usage.bytes_up, usage.bytes_down), (6001, 10_000));
        assert_eq!((usage.tunnels, usage.requests), (2, 4));
        assert_eq!(usage.denials, vec![(Reason::NotAllowed, 2), (Reason::Revoked, 1)]);
        assert!(usage.since_ms > 0);
    }

    #[test]
    fn a_snapshot_hands_the_limiter_on_to_a_new_id_and_sets_its_cap() {
        use crackbox_policy::{RegistrationSpec, Snapshot, SourceChange};
        let spec = |id: &str, cap: &str| {
            RegistrationSpec::parse("10.0.0.2", id, &["a.test"])
                .unwrap()
                .with_bandwidth(Bandwidth::parse(cap).ok())
        };
        let first = Snapshot::<Account>::empty_for(2).apply(1, &[SourceChange::Put(spec("a", "1MiB/s"))]);
        let next = first.apply(2, &[SourceChange::Put(spec("b", "2MiB/s"))]);
        let account =
            |snapshot: &Snapshot<Account>| Arc::clone(&snapshot.lookup("10.0.0.2".parse().unwrap()).unwrap().account);
        let (before, after) = (account(&first), account(&next));
        assert!(!Arc::ptr_eq(&before, &after), "a new id counts anew");
        assert!(Arc::ptr_eq(before.limiter(), after.limiter()), "but keeps the bucket");
        assert_eq!(after.limiter().rate(), Some(2 << 20), "set to the new cap");
        assert_eq!(after.slots.len(), 3, "a slot per core thread and one more");
    }
}
