//! The bandwidth cap of one source: a token bucket per direction that every
//! connection of the source, on every core thread, draws from.
//!
//! One atomic per direction holds the bucket as a generic cell rate
//! algorithm (GCRA) state: the *theoretical arrival time*, the moment the
//! bucket would be full again if nothing more were taken. Taking `n` bytes
//! pushes it `n / rate` seconds later; bytes may go as long as it stays
//! within [`BURST`] of now. A caller reserves tokens before it moves bytes
//! ([`Limiter::reserve`]), moves at most that many, and gives back what it
//! did not use ([`Limiter::refund`]); bytes that arrived unasked (a response
//! head) are charged after the fact ([`Limiter::charge`]). Lock-free (a
//! compare-and-swap per reservation), exact across threads, and free for a
//! source without a cap: [`Limiter::reserve`] then reads one relaxed atomic
//! and nothing else. Pure: each public call reads the clock once and hands
//! the instant to a function of it (`reserve_at`, `charge_at`, `debt_at`),
//! which the tests drive with a clock of their own; the data plane does the
//! waiting.

use crackbox_policy::Bandwidth;
use crackbox_policy::Direction;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How far the bucket may run ahead of now: a source idle for this long
/// may send this much of its rate at once.
pub const BURST: Duration = Duration::from_millis(100);
/// The most one reservation takes: 1/40 s (25 ms) at the rate (at least
/// [`MIN_CHUNK`] bytes), so connections sharing a bucket take turns often.
const CHUNKS_PER_SECOND: u64 = 40;
/// The smallest reservation worth a syscall.
const MIN_CHUNK: u64 = 1024;
/// A reservation is never booked further ahead than this: later ones wait
/// unbooked and ask again, so a new rate applies to them at once.
const HORIZON: Duration = Duration::from_millis(100);
const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// What [`Limiter::reserve`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// No cap: move what you like.
    Unlimited,
    /// Move at most `bytes` once `wait` has passed (zero: now); give back
    /// what is not moved with [`Limiter::refund`].
    Bytes {
        /// Tokens reserved.
        bytes: usize,
        /// How long to wait before moving them.
        wait: Duration,
    },
    /// The bucket is booked too far ahead: nothing reserved, ask again
    /// after `wait`.
    Retry {
        /// How long to wait before asking again.
        wait: Duration,
    },
}

/// One source's cap and its two buckets.
#[derive(Debug)]
pub struct Limiter {
    /// Bytes per second; 0: no cap.
    rate: AtomicU64,
    /// Theoretical arrival times in ns since `epoch`, per direction.
    up: AtomicU64,
    down: AtomicU64,
    epoch: Instant,
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new(None)
    }
}

impl Limiter {
    /// A limiter holding to `cap` (`None`: no cap).
    pub fn new(cap: Option<Bandwidth>) -> Self {
        Limiter {
            rate: AtomicU64::new(cap.map_or(0, Bandwidth::bytes_per_second)),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// The cap in force, in bytes per second.
    pub fn rate(&self) -> Option<u64> {
        Some(self.rate.load(Ordering::Relaxed)).filter(|&rate| rate > 0)
    }

    /// Holds to `cap` from now on, for connections already open too. Bytes
    /// already owed at the old rate are owed for the time they take at the
    /// new one, so a raised cap is felt at once.
    pub fn set_rate(&self, cap: Option<Bandwidth>, now: Instant) {
        let new = cap.map_or(0, Bandwidth::bytes_per_second);
        let old = self.rate.swap(new, Ordering::Relaxed);
        if old == 0 || new == 0 || old == new {
            return;
        }
        let now = self.nanos(now);
        for lane in [&self.up, &self.down] {
            let _ = lane.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
                let owed = u128::from(tat.saturating_sub(now));
                (owed > 0).then(|| now + (owed * u128::from(old) / u128::from(new)) as u64)
            });
        }
    }

    /// Reserves tokens for up to `want` bytes going `direction` (see
    /// [`Grant`]); reads the clock only when a cap is set.
    pub fn reserve(&self, direction: Direction, want: usize) -> Grant {
        match self.rate.load(Ordering::Relaxed) {
            0 => Grant::Unlimited,
            rate => self.reserve_at(direction, want, Instant::now(), rate),
        }
    }

    fn reserve_at(&self, direction: Direction, want: usize, now: Instant, rate: u64) -> Grant {
        let now = self.nanos(now);
        let burst = nanos(BURST);
        let horizon = nanos(HORIZON);
        let chunk = rate / CHUNKS_PER_SECOND;
        let most = (want as u64).min(chunk.max(MIN_CHUNK)).max(1);
        let lane = self.lane(direction);
        let mut tat = lane.load(Ordering::Relaxed);
        loop {
            let base = tat.max(now);
            // What the bucket holds now goes at once, though less than a
            // chunk: a source far under a low cap (a 14-byte line a tenth
            // of a second under 1 KiB/s) never waits for a chunk's worth.
            let held = u128::from((now + burst).saturating_sub(base)) * u128::from(rate) / u128::from(NANOS_PER_SECOND);
            let bytes = match u64::try_from(held) {
                Ok(held) if held > 0 && held < most => held,
                _ => most,
            };
            let cost = cost(bytes, rate, Rounding::Up);
            let ready = (base + cost).saturating_sub(burst);
            if base > now && ready > now + horizon {
                return Grant::Retry {
                    wait: Duration::from_nanos(ready - now - horizon),
                };
            }
            match lane.compare_exchange_weak(tat, base + cost, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    return Grant::Bytes {
                        bytes: bytes as usize,
                        wait: Duration::from_nanos(ready.saturating_sub(now)),
                    }
                }
                Err(actual) => tat = actual,
            }
        }
    }

    /// Gives back the tokens of `bytes` reserved and not moved.
    pub fn refund(&self, direction: Direction, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return;
        }
        let cost = cost(bytes as u64, rate, Rounding::Down);
        let _ = self
            .lane(direction)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| {
                Some(tat.saturating_sub(cost))
            });
    }

    /// Takes the tokens of `bytes` that moved without a reservation (they
    /// may put the bucket in debt: the next reservation waits it out).
    pub fn charge(&self, direction: Direction, bytes: usize) {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 || bytes == 0 {
            return;
        }
        self.charge_at(direction, bytes, Instant::now(), rate);
    }

    fn charge_at(&self, direction: Direction, bytes: usize, now: Instant, rate: u64) {
        let now = self.nanos(now);
        let cost = cost(bytes as u64, rate, Rounding::Up);
        let _ = self
            .lane(direction)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tat| Some(tat.max(now) + cost));
    }

    /// How long until the bucket of `direction` has tokens again, when it
    /// is in debt (for copies that charge what they moved afterwards).
    pub fn debt(&self, direction: Direction) -> Option<Duration> {
        if self.rate.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.debt_at(direction, Instant::now())
    }

    fn debt_at(&self, direction: Direction, now: Instant) -> Option<Duration> {
        let now = self.nanos(now);
        let ready = self
            .lane(direction)
            .load(Ordering::Relaxed)
            .saturating_sub(nanos(BURST));
        (ready > now).then(|| Duration::from_nanos(ready - now))
    }

    fn lane(&self, direction: Direction) -> &AtomicU64 {
        match direction {
            Direction::Up => &self.up,
            Direction::Down => &self.down,
        }
    }

    /// Nanoseconds since this limiter was made.
    fn nanos(&self, at: Instant) -> u64 {
        nanos(at.saturating_duration_since(self.epoch))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Clone, Copy)]
enum Rounding {
    Up,
    Down,
}

/// The time `bytes` take at `rate` bytes per second, in ns: one 64-bit
/// division for anything a splice moves, 128 bits only past 18 GB.
fn cost(bytes: u64, rate: u64, rounding: Rounding) -> u64 {
    match (bytes.checked_mul(NANOS_PER_SECOND), rounding) {
        (Some(scaled), Rounding::Up) => scaled.div_ceil(rate),
        (Some(scaled), Rounding::Down) => scaled / rate,
        (None, _) => {
            let scaled = u128::from(bytes) * u128::from(NANOS_PER_SECOND);
            let ns = match rounding {
                Rounding::Up => scaled.div_ceil(u128::from(rate)),
                Rounding::Down => scaled / u128::from(rate),
            };
            u64::try_from(ns).unwrap_or(u64::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn capped(rate: u64) -> Limiter {
        Limiter::new(Some(Bandwidth::new(rate).unwrap()))
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn no_cap_grants_everything() {
        let limiter = Limiter::new(None);
        assert_eq!(limiter.reserve(Direction::Up, 1 << 20), Grant::Unlimited);
        assert_eq!(limiter.rate(), None);
        limiter.refund(Direction::Up, 10);
        limiter.charge(Direction::Down, 10);
        assert_eq!(limiter.up.load(Ordering::Relaxed), 0);
        assert_eq!(limiter.down.load(Ordering::Relaxed), 0);
    }

    /// Under a cap far below a chunk's worth a second, what the bucket
    /// holds goes at once: a few bytes at a time never wait; once the
    /// bucket is empty a chunk (1 KiB) is a second away, as before.
    #[test]
    fn what_the_bucket_holds_goes_at_once_under_a_low_cap() {
        let limiter = capped(1024);
        let t0 = limiter.epoch + Duration::from_secs(1);
        for step in 0..10 {
            let now = t0 + ms(100) * step;
            match limiter.reserve_at(Direction::Up, 64 << 10, now, 1024) {
                Grant::Bytes { bytes, wait } => {
                    assert_eq!(wait, Duration::ZERO, "step {step}");
                    assert!((14..=102).contains(&bytes), "step {step}: {bytes}");
                    limiter.refund(Direction::Up, bytes - 14);
                }
                other => panic!("step {step}: {other:?}"),
            }
        }
        let later = t0 + Duration::from_secs(5);
        let Grant::Bytes { bytes: 102, wait } = limiter.reserve_at(Direction::Up, 64 << 10, later, 1024) else {
            panic!("a full burst, 100 ms at 1 KiB/s");
        };
        assert_eq!(wait, Duration::ZERO);
        match limiter.reserve_at(Direction::Up, 64 << 10, later, 1024) {
            Grant::Retry { wait } => assert!(wait > ms(890), "{wait:?}"),
            other => panic!("{other:?}"),
        }
    }

    /// Reservations of 1 MiB each at 10 MiB/s from a fresh bucket: chunks of
    /// 25 ms (256 KiB), the first four within the 100 ms burst, the next
    /// ones 25 ms apart, until the horizon turns them away.
    #[test]
    fn reservations_follow_the_rate_and_stop_at_the_horizon() {
        let limiter = capped(10 * MIB);
        let t0 = limiter.epoch + Duration::from_secs(1);
        let chunk = (10 * MIB / 40) as usize;
        let grant = |wait| Grant::Bytes { bytes: chunk, wait };
        let want = MIB as usize;
        let table = [
            grant(ms(0)),
            grant(ms(0)),
            grant(ms(0)),
            grant(ms(0)),
            grant(ms(25)),
            grant(ms(50)),
            grant(ms(75)),
            grant(ms(100)),
            Grant::Retry { wait: ms(25) },
        ];
        for (step, want_grant) in table.into_iter().enumerate() {
            let got = limiter.reserve_at(Direction::Down, want, t0, 10 * MIB);
            assert_eq!(got, want_grant, "reservation {step}");
        }
        // The other direction has its own bucket.
        assert_eq!(limiter.reserve_at(Direction::Up, want, t0, 10 * MIB), grant(ms(0)));
        // 200 ms later the booked time is behind us: a full burst again.
        let later = t0 + ms(400);
        assert_eq!(
            limiter.reserve_at(Direction::Down, 1000, later, 10 * MIB),
            Grant::Bytes {
                bytes: 1000,
                wait: ms(0)
            }
        );
    }

    #[test]
    fn refunds_and_charges_move_the_bucket_by_what_moved() {
        let limiter = capped(MIB);
        let t0 = limiter.epoch + Duration::from_secs(1);
        let Grant::Bytes { bytes, wait } = limiter.reserve_at(Direction::Up, 100_000, t0, MIB) else {
            panic!("a fresh bucket grants at once");
        };
        assert_eq!((bytes, wait), ((MIB / 40) as usize, Duration::ZERO));
        let before = limiter.up.load(Ordering::Relaxed);
        limiter.refund(Direction::Up, bytes);
        let after = limiter.up.load(Ordering::Relaxed);
        assert_eq!(before - after, cost(bytes as u64, MIB, Rounding::Down));
        // A refund of everything reserved leaves the bucket where it was,
        // but for rounding: a full burst is still free at t0.
        assert_eq!(limiter.debt_at(Direction::Up, t0), None);
        // A charge of a second's worth puts the bucket in debt: 1 s less
        // the 100 ms burst, then the next reservation is turned away until
        // the debt is within the horizon.
        limiter.charge_at(Direction::Up, MIB as usize, t0, MIB);
        let near = |got: Duration, want: Duration| got.abs_diff(want) <= Duration::from_micros(1);
        let debt = limiter.debt_at(Direction::Up, t0).expect("in debt");
        assert!(near(debt, ms(900)), "{debt:?}");
        let kib = Duration::from_nanos(cost(1024, MIB, Rounding::Up));
        match limiter.reserve_at(Direction::Up, 1024, t0, MIB) {
            Grant::Retry { wait } => assert!(near(wait, ms(800) + kib), "{wait:?}"),
            other => panic!("{other:?}"),
        }
        // Once that wait has passed the same reservation is booked, to go
        // when its bytes fit in the burst again.
        let later = t0 + ms(801);
        assert!(near(limiter.debt_at(Direction::Up, later).unwrap(), ms(99)));
        match limiter.reserve_at(Direction::Up, 1024, later, MIB) {
            Grant::Bytes { bytes: 1024, wait } => assert!(near(wait, ms(99) + kib), "{wait:?}"),
            other => panic!("{other:?}"),
        }
    }

    /// Three connections sharing a 1 MiB/s bucket for ten seconds of a
    /// clock the test moves, each asking for 64 KiB, waiting what it is told
    /// and sometimes moving less than granted: by any moment, what moved is
    /// at most the rate times the time elapsed plus the burst, and the
    /// bucket does not sit idle while they ask (at least 95% of the rate).
    #[test]
    fn shared_bytes_never_exceed_the_rate_plus_the_burst() {
        let limiter = capped(MIB);
        let t0 = limiter.epoch + Duration::from_secs(1);
        // Per connection: when it asks next.
        let mut next = [t0; 3];
        let mut moved = Vec::new();
        let end = t0 + Duration::from_secs(10);
        let mut step = 0u64;
        while let Some((conn, &now)) = next.iter().enumerate().min_by_key(|(_, at)| **at) {
            if now >= end {
                break;
            }
            step += 1;
            match limiter.reserve_at(Direction::Down, 64 << 10, now, MIB) {
                Grant::Bytes { bytes, wait } => {
                    // Every seventh grant moves only half and gives the rest back.
                    let used = if step.is_multiple_of(7) { bytes / 2 } else { bytes };
                    limiter.refund(Direction::Down, bytes - used);
                    moved.push((now + wait, used as u64));
                    next[conn] = now + wait;
                }
                Grant::Retry { wait } => next[conn] = now + wait,
                Grant::Unlimited => panic!("capped"),
            }
        }
        moved.sort();
        let mut total = 0;
        for (at, bytes) in &moved {
            total += bytes;
            let allowed = (at.duration_since(t0) + BURST).as_secs_f64() * MIB as f64;
            assert!(
                total as f64 <= allowed + 1.0,
                "{total} bytes by {:?}",
                at.duration_since(t0)
            );
        }
        assert!(total as f64 >= 9.5 * MIB as f64, "{total}");
    }

    #[test]
    fn a_new_rate_applies_to_what_is_owed() {
        let limiter = capped(MIB);
        let t0 = limiter.epoch + Duration::from_secs(1);
        for _ in 0..8 {
            limiter.reserve_at(Direction::Down, 1 << 16, t0, MIB);
        }
        let owed = |l: &Limiter| l.down.load(Ordering::Relaxed) - l.nanos(t0);
        let before = owed(&limiter);
        limiter.set_rate(Some(Bandwidth::new(10 * MIB).unwrap()), t0);
        assert_eq!(limiter.rate(), Some(10 * MIB));
        let after = owed(&limiter);
        assert!(
            after * 10 <= before + 10 && after * 10 >= before - 10,
            "{before} -> {after}"
        );
        limiter.set_rate(None, t0);
        assert_eq!(limiter.reserve(Direction::Down, 5), Grant::Unlimited);
    }

    #[test]
    fn costs_round_as_asked() {
        assert_eq!(cost(1, 3, Rounding::Up), 333_333_334);
        assert_eq!(cost(1, 3, Rounding::Down), 333_333_333);
        assert_eq!(cost(MIB, MIB, Rounding::Up), 1_000_000_000);
        assert_eq!(cost(u64::MAX, 1024, Rounding::Up), u64::MAX);
        assert_eq!(cost(40_000_000_000, 1 << 40, Rounding::Down), 36_379_788);
        assert_eq!(cost(40_000_000_000, 1 << 40, Rounding::Up), 36_379_789);
    }
}
