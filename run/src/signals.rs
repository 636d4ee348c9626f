//! The signals that stop a run: SIGINT, SIGTERM and SIGHUP, caught from
//! before the first object exists until teardown is over (so teardown always
//! completes), each turned into the shell's exit code `128 + signal`.

use crate::error::RunError;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The run's signal handlers.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Installs the handlers (from here on these signals no longer kill crackbox).
    pub fn catch() -> Result<Self, RunError> {
        let catch = |kind| signal(kind).map_err(|e| RunError::io("installing signal handlers", e));
        Ok(Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
        })
    }

    /// Waits for the next signal; returns the shell-style exit code.
    pub async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => 128 + libc::SIGINT,
            _ = self.terminate.recv() => 128 + libc::SIGTERM,
            _ = self.hangup.recv() => 128 + libc::SIGHUP,
        }
    }
}
