//! The processes a netns run starts (its proxy and its command) die with
//! `run`, however it ends: even a SIGKILL of `run` leaves neither serving
//! nor running (docs/run.md). Called between fork and exec, so only
//! async-signal-safe system calls. The signal follows the death of the
//! *thread* that forked: both are spawned from the thread the lifecycle
//! runs on, the main thread (`block_on`), which lives as long as `run`.

/// Asks for SIGKILL when the parent `parent` (`run`) dies, then checks it
/// had not died already. Must come after any change of user or group id,
/// which clears the request.
pub fn die_with(parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: plain system calls without pointers.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            return Err(std::io::Error::other("crackbox run exited before the process started"));
        }
    }
    Ok(())
}
