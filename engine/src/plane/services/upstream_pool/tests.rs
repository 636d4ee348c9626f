//! The pool's bookkeeping with stand-in connections that record their
//! close: who may take what, the bounds, expiry, and which entries a new
//! snapshot still allows.

use super::*;
use crate::plane::services::sandboxes::Sandboxes;
use crackbox_policy::{RegistrationSpec, SourceChange};
use rustc_hash::FxHashSet;
use std::rc::Rc;

/// A stand-in connection: its number, recorded in `closed` when dropped.
struct Fake(u32, Rc<RefCell<Vec<u32>>>);

impl Drop for Fake {
    fn drop(&mut self) {
        self.1.borrow_mut().push(self.0);
    }
}

struct Bench {
    pool: UpstreamPool<Fake>,
    closed: Rc<RefCell<Vec<u32>>>,
    snapshot: Snapshot,
    sandboxes: Sandboxes,
    start: Instant,
}

const A: &str = "127.1.0.1";
const B: &str = "127.1.0.2";

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn spec(source: &str, id: &str, hosts: &[&str]) -> RegistrationSpec {
    RegistrationSpec::parse(source, id, hosts).unwrap()
}

impl Bench {
    fn new() -> Bench {
        let specs = [spec(A, "a", &["a.test", "b.test"]), spec(B, "b", &["a.test"])];
        Bench {
            pool: UpstreamPool::default(),
            closed: Rc::default(),
            snapshot: Snapshot::build(1, &specs),
            sandboxes: Sandboxes::default(),
            start: Instant::now(),
        }
    }

    /// The thread's handle on `source`'s registration in the snapshot.
    fn sandbox(&self, source: &str) -> Rc<Sandbox> {
        let registered = self.snapshot.lookup(ip(source)).unwrap();
        self.sandboxes.handle(registered.id.shared(), &registered.account)
    }

    fn place(&self, source: &str, host: &str, port: u16) -> Place {
        Place {
            sandbox: self.sandbox(source),
            host: host.to_owned(),
            port,
            dialled: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// Parks connection `n` of `source` to `host:port`, idle since `at` s.
    fn park(&self, n: u32, source: &str, host: &str, port: u16, at: u64) {
        let conn = Fake(n, Rc::clone(&self.closed));
        let since = self.start + Duration::from_secs(at);
        self.pool.park(ip(source), self.place(source, host, port), conn, since);
    }

    /// The number of the connection `source` takes for `host:port`.
    fn take(&self, source: &str, host: &str, port: u16) -> Option<u32> {
        let taken = self
            .pool
            .take(ip(source), &self.sandbox(source), host, port, |_, _| true);
        taken.map(|(conn, _)| {
            let n = conn.0;
            std::mem::forget(conn);
            n
        })
    }

    fn closed(&self) -> Vec<u32> {
        self.closed.borrow().clone()
    }
}

#[test]
fn only_the_same_source_registration_host_and_port_take_an_entry() {
    let bench = Bench::new();
    bench.park(1, A, "a.test", 80, 0);
    let cases = [
        (B, "a.test", 80, "another source"),
        (A, "b.test", 80, "another host"),
        (A, "a.test", 8080, "another port"),
    ];
    for (source, host, port, what) in cases {
        assert_eq!(bench.take(source, host, port), None, "{what}");
    }
    assert_eq!(bench.take(A, "a.test", 80), Some(1));
    assert_eq!(bench.take(A, "a.test", 80), None, "taken once");
    assert_eq!(bench.pool.total.get(), 0);
}

#[test]
fn a_new_registration_of_the_source_never_takes_an_entry_of_the_old() {
    let mut bench = Bench::new();
    bench.park(1, A, "a.test", 80, 0);
    let changed = [SourceChange::Put(spec(A, "a-again", &["a.test"]))];
    bench.snapshot = bench.snapshot.apply(2, &changed);
    assert_eq!(bench.take(A, "a.test", 80), None);
}

#[test]
fn the_newest_entry_goes_first_and_refused_ones_are_closed() {
    let bench = Bench::new();
    for n in 1..=3 {
        bench.park(n, A, "a.test", 80, u64::from(n));
    }
    let sandbox = bench.sandbox(A);
    let taken = bench.pool.take(ip(A), &sandbox, "a.test", 80, |_, conn| conn.0 != 3);
    assert_eq!(
        taken.as_ref().map(|(conn, dialled)| (conn.0, dialled.port())),
        Some((2, 80))
    );
    assert_eq!(bench.closed(), [3], "refused on the way");
    assert_eq!(bench.pool.total.get(), 1);
}

#[test]
fn a_source_at_its_bound_makes_room_with_its_own_oldest() {
    let bench = Bench::new();
    bench.park(100, B, "a.test", 80, 0);
    for n in 0..PER_SOURCE as u32 + 2 {
        bench.park(n, A, "a.test", 80, u64::from(n) + 1);
    }
    assert_eq!(bench.closed(), [0, 1]);
    assert_eq!(bench.pool.total.get(), PER_SOURCE + 1);
    assert_eq!(
        bench.take(B, "a.test", 80),
        Some(100),
        "the other source keeps its entry"
    );
}

#[test]
fn a_full_thread_makes_room_with_its_oldest_entry() {
    let bench = Bench::new();
    // Sources of their own (never taken from here), each at its bound.
    let sources = (PER_THREAD / PER_SOURCE) as u32;
    for n in 0..sources * PER_SOURCE as u32 {
        let source = ip(&format!("127.2.0.{}", n % sources));
        let conn = Fake(n, Rc::clone(&bench.closed));
        let since = bench.start + Duration::from_secs(u64::from(n) + 10);
        bench.pool.park(source, bench.place(A, "a.test", 80), conn, since);
    }
    assert_eq!(bench.pool.total.get(), PER_THREAD);
    assert!(bench.closed().is_empty());
    bench.park(9999, B, "a.test", 80, 5_000);
    assert_eq!(bench.closed(), [0], "the thread's oldest");
    assert_eq!(bench.pool.total.get(), PER_THREAD);
    assert_eq!(bench.take(B, "a.test", 80), Some(9999));
}

#[test]
fn a_pool_the_descriptors_leave_less_room_keeps_less() {
    let mut bench = Bench::new();
    bench.pool = UpstreamPool::with_capacity(2);
    bench.park(1, A, "a.test", 80, 0);
    bench.park(2, B, "a.test", 80, 1);
    bench.park(3, A, "b.test", 80, 2);
    assert_eq!(bench.closed(), [1], "the oldest makes room at the capacity");
    assert_eq!(bench.pool.total.get(), 2);

    bench.pool = UpstreamPool::with_capacity(0);
    bench.closed.borrow_mut().clear();
    bench.park(4, A, "a.test", 80, 3);
    assert_eq!(bench.closed(), [4], "a pool of no room closes what it is handed");
    assert_eq!(bench.take(A, "a.test", 80), None);
}

#[test]
fn entries_idle_too_long_or_no_longer_alive_expire() {
    let bench = Bench::new();
    bench.park(1, A, "a.test", 80, 0);
    bench.park(2, A, "a.test", 80, 10);
    bench.park(3, B, "a.test", 80, 10);
    let now = bench.start + IDLE_TIMEOUT + Duration::from_secs(1);
    assert_eq!(bench.pool.expire(now, |conn| conn.0 != 3), 2);
    assert_eq!(bench.closed(), [1, 3]);
    assert_eq!(bench.take(A, "a.test", 80), Some(2));
    assert_eq!(bench.pool.total.get(), 0);
}

#[test]
fn retain_looks_only_at_the_touched_sources() {
    let bench = Bench::new();
    bench.park(1, A, "a.test", 80, 0);
    bench.park(2, B, "a.test", 80, 0);
    let touched = Touched::Sources(FxHashSet::from_iter([ip(A)]));
    assert_eq!(bench.pool.retain(&touched, |_, _| false), 1);
    assert_eq!(bench.closed(), [1]);
    assert_eq!(bench.pool.retain(&Touched::All, |_, _| false), 1);
    assert_eq!(bench.closed(), [1, 2]);
    assert_eq!(bench.pool.total.get(), 0);
}

#[test]
fn still_allowed_table() {
    let bench = Bench::new();
    let watch = Watch::default();
    let place = bench.place(A, "b.test", 80);
    let cases: [(&str, Vec<SourceChange>, bool); 5] = [
        ("nothing changed", vec![], true),
        (
            "the same id registered again",
            vec![SourceChange::Put(spec(A, "a", &["b.test"]))],
            true,
        ),
        (
            "the host removed",
            vec![SourceChange::Put(spec(A, "a", &["a.test"]))],
            false,
        ),
        (
            "registered again under another id",
            vec![SourceChange::Put(spec(A, "other", &["a.test", "b.test"]))],
            false,
        ),
        ("unregistered", vec![SourceChange::Remove(ip(A))], false),
    ];
    for (what, changes, allowed) in cases {
        let snapshot = bench.snapshot.apply(2, &changes);
        assert_eq!(still_allowed(&snapshot, &watch, ip(A), &place), allowed, "{what}");
    }
    assert!(!still_allowed(&bench.snapshot, &watch, ip(B), &place), "another source");
}
