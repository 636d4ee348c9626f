//! The signals that stop a run: SIGINT, SIGTERM and SIGHUP, caught from
//! before the first object exists until teardown is over (so teardown always
//! completes), each turned into the shell's exit code `128 + signal`.
//!
//! Each caught signal also says whether the kernel sent it (a terminal's
//! Ctrl-C or hang-up, which reaches the whole foreground process group)
//! or a process did (`kill`): a backend whose workload shares `run`'s
//! process group passes on only the latter, so the workload never gets one
//! signal twice (docs/run.md, the netns backend).

use crate::error::RunError;
use signal_hook_registry::SigId;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Per caught signal (SIGINT, SIGTERM, SIGHUP): whether its last delivery
/// came from the kernel, set in the signal handler itself.
static FROM_KERNEL: [AtomicBool; 3] = [AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(false)];

/// The signals caught, in the order of [`FROM_KERNEL`].
const CAUGHT: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// One signal that reached `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caught {
    /// The signal number.
    pub signal: libc::c_int,
    /// Whether the kernel sent it (to the whole foreground process group of
    /// a terminal) rather than a process.
    pub from_kernel: bool,
}

impl Caught {
    /// The shell-style exit code for a run this signal stopped.
    pub fn code(self) -> i32 {
        128 + self.signal
    }
}

/// The run's signal handlers.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    origins: Vec<SigId>,
}

impl Signals {
    /// Installs the handlers (from here on these signals no longer kill crackbox).
    pub fn catch() -> Result<Self, RunError> {
        let catch = |kind| signal(kind).map_err(|e| RunError::io("installing signal handlers", e));
        let mut signals = Signals {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
            hangup: catch(SignalKind::hangup())?,
            origins: Vec::new(),
        };
        for (slot, signal) in CAUGHT.into_iter().enumerate() {
            // SAFETY: the action only stores to an atomic, which is
            // async-signal-safe; SIGINT, SIGTERM and SIGHUP are not forbidden.
            let id = unsafe {
                signal_hook_registry::register_sigaction(signal, move |info: &libc::siginfo_t| {
                    FROM_KERNEL[slot].store(info.si_code == libc::SI_KERNEL, Ordering::SeqCst);
                })
            }
            .map_err(|e| RunError::io("installing signal handlers", e))?;
            signals.origins.push(id);
        }
        Ok(signals)
    }

    /// Waits for the next signal.
    pub async fn next(&mut self) -> Caught {
        let signal = tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        };
        let slot = CAUGHT.iter().position(|caught| *caught == signal).unwrap_or_default();
        Caught {
            signal,
            from_kernel: FROM_KERNEL[slot].load(Ordering::SeqCst),
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.origins.drain(..) {
            signal_hook_registry::unregister(id);
        }
    }
}
