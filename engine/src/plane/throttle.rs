//! Waiting for a capped source's tokens: the data plane's side of
//! `policy::limiter`.
//!
//! A wait is a timer, never a spin, and is boxed: monoio's `Sleep` is large
//! and most connections never wait (see `plane`, on task size). A source
//! without a cap pays one relaxed load per call and never awaits anything.

use crackbox_policy::limiter::{Grant, Limiter};
use crackbox_policy::Direction;
use std::time::Duration;

/// Waits until the tokens of some of `want` bytes going `direction` are
/// reserved; returns how many (all of `want` without a cap). Give back what
/// is not moved with [`Limiter::refund`].
pub(crate) async fn allowance(limiter: &Limiter, direction: Direction, want: usize) -> usize {
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

/// Waits while the bucket of `direction` is in debt, before a copy whose
/// bytes are charged once moved.
pub(crate) async fn clearance(limiter: &Limiter, direction: Direction) {
    while let Some(wait) = limiter.debt(direction) {
        pause(wait).await;
    }
}

async fn pause(wait: Duration) {
    if !wait.is_zero() {
        Box::pin(monoio::time::sleep(wait)).await;
    }
}
