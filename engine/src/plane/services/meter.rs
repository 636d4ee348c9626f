//! The one path every relayed byte takes, on every front end, in tunnels
//! and in HTTP bodies alike: its tokens are reserved from its source's
//! bandwidth cap (the data plane's side of `crate::limiter`)
//! before it moves, and once moved it is counted in the engine's totals and
//! in the account of the registration the connection works for.
//!
//! Spliced bytes take [`Meter::reserve`], then [`Meter::settle`] with what
//! the splice moved (or its two halves, when the tokens go back before the
//! bytes have reached their destination); bytes already in a buffer (heads, bytes read with
//! them, chunked bodies, early tunnel bytes) take [`Meter::send`], which
//! does the same around each write. So a cap is never exceeded, whatever
//! carries the bytes.
//!
//! A wait is a deadline of the thread's (`deadline`), never a spin. A source
//! without a cap pays one relaxed load per reservation and never awaits
//! anything.

use crate::limiter::Grant;
use crate::plane::services::conn::Conn;
use crate::plane::services::deadline;
use crate::plane::services::stats::{Direction, ThreadStats};
use crate::usage::Account;
use std::io;
use std::time::Duration;

/// Where one connection's bytes are counted and capped.
#[derive(Clone, Copy)]
pub(crate) struct Meter<'a> {
    stats: &'a ThreadStats,
    /// This core thread's slot in every account.
    thread: usize,
    /// The registration the connection works for: its usage and its cap.
    account: &'a Account,
}

impl<'a> Meter<'a> {
    /// Counts to `stats` and to `account` (in slot `thread`), capped by the
    /// account's limiter.
    pub(crate) fn new(stats: &'a ThreadStats, thread: usize, account: &'a Account) -> Self {
        Meter { stats, thread, account }
    }

    /// Waits until the tokens of some of `want` bytes going `direction` are
    /// reserved; returns how many (all of `want` without a cap). Settle
    /// every reservation with [`Meter::settle`].
    pub(crate) async fn reserve(&self, direction: Direction, want: usize) -> usize {
        let limiter = self.account.limiter();
        loop {
            match limiter.reserve(direction, want) {
                Grant::Unlimited => return want,
                Grant::Bytes { bytes, wait } => {
                    pause(wait).await;
                    return bytes;
                }
                Grant::Retry { wait } => pause(wait).await,
            }
        }
    }

    /// [`Meter::reserve`] without waiting: the cap's grant, whose wait is
    /// the caller's to do (see `duplex`).
    pub(crate) fn grant(&self, direction: Direction, want: usize) -> Grant {
        self.account.limiter().reserve(direction, want)
    }

    /// After `moved` of `reserved` bytes moved: gives back the tokens of
    /// the rest and counts what moved.
    pub(crate) fn settle(&self, direction: Direction, reserved: usize, moved: usize) {
        self.give_back(direction, reserved - moved);
        if moved > 0 {
            self.count(direction, moved);
        }
    }

    /// Gives back the tokens of `unused` reserved bytes that did not move
    /// (as soon as that is known, so other connections may use them).
    pub(crate) fn give_back(&self, direction: Direction, unused: usize) {
        self.account.limiter().refund(direction, unused);
    }

    /// Counts `moved` bytes whose tokens were reserved.
    pub(crate) fn count(&self, direction: Direction, moved: usize) {
        self.stats.add_bytes(direction, moved as u64);
        self.account.add_bytes(self.thread, direction, moved as u64);
    }

    /// Writes all of `bytes` to `dst`, each part once its tokens are
    /// reserved (all at once without a cap), and counts them.
    pub(crate) async fn send(&self, dst: &Conn, bytes: &[u8], direction: Direction) -> io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            let reserved = self.reserve(direction, rest.len()).await;
            let written = dst.write_all(&rest[..reserved]).await;
            self.settle(direction, reserved, if written.is_ok() { reserved } else { 0 });
            written?;
            rest = &rest[reserved..];
        }
        Ok(())
    }
}

async fn pause(wait: Duration) {
    if !wait.is_zero() {
        deadline::sleep(wait).await;
    }
}
