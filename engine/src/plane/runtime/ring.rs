//! How a core thread's io_uring ring is set up.
//!
//! The data plane waits for readiness with one-shot `PollAdd`s and does its
//! own non-blocking syscalls, so what the ring costs is mostly how
//! completions get back to the thread. With the kernel's default setup each
//! completion's task work interrupts the thread (a signal-style
//! notification, an IPI when it is running); with `COOP_TASKRUN` that work
//! waits until the thread enters the ring anyway, which monoio does on every
//! park and submit. That alone brought io_uring to (and, on a quiet
//! machine, below) epoll's cost per new tunnel and per keep-alive request,
//! which made it the default (benches/README.md). `DEFER_TASKRUN`
//! measured the same, but it runs completions only when the thread waits in
//! the ring, which a monoio loop with tasks always ready may put off;
//! `COOP_TASKRUN` has no such catch.

use monoio::time::TimeDriver;
use monoio::{IoUringDriver, Runtime};
use std::io;

/// A monoio runtime on io_uring and the name of the ring setup it got.
pub(super) type UringRuntime = (Runtime<TimeDriver<IoUringDriver>>, &'static str);

/// A runtime with a cooperative task-run ring, or with the kernel's default
/// ring where that setup is refused (kernels before 5.19).
pub(super) fn uring_runtime() -> io::Result<UringRuntime> {
    let mut cooperative = io_uring::IoUring::builder();
    cooperative.setup_coop_taskrun().setup_taskrun_flag();
    match build(cooperative) {
        Ok(runtime) => Ok((runtime, "coop-taskrun")),
        Err(err) => {
            tracing::info!(error = %err, "cooperative io_uring task run refused; default ring setup");
            Ok((build(io_uring::IoUring::builder())?, "default"))
        }
    }
}

fn build(ring: io_uring::Builder) -> io::Result<Runtime<TimeDriver<IoUringDriver>>> {
    monoio::RuntimeBuilder::<IoUringDriver>::new()
        .uring_builder(ring)
        .enable_timer()
        .build()
}
