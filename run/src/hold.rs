//! `crackbox hold` (hidden): the process of a `run --daemon` pool holder
//! container. It only keeps the container, and with it the jail network
//! namespace that workloads join, alive until SIGTERM or SIGINT (or the
//! SIGKILL of `docker rm -f`). It opens no socket and touches no file.

/// Waits for SIGTERM or SIGINT; returns the exit code (0).
pub fn hold() -> i32 {
    // SAFETY: a signal set on the stack, initialised by sigemptyset before
    // use; blocking the two signals first makes sigwait the only way they
    // are taken (PID 1 in a container ignores them otherwise).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let mut taken = 0;
        libc::sigwait(&set, &mut taken);
    }
    0
}
