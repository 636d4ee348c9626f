//! The data path's socket syscalls, made through glibc's `syscall(2)`
//! rather than its named wrappers.
//!
//! `accept4`, `recv`, `send`, `connect`, `close` and `splice` are POSIX
//! cancellation points. Once a process has a second thread, glibc's wrapper
//! of each switches the calling thread to asynchronous cancellation before
//! the call and back after it: two more function calls and two atomic
//! compare-and-swaps on the thread's cancellation word. The engine always
//! has other threads (the control link, the resolvers) and never cancels
//! one, so that bookkeeping buys nothing. It costs 26-40 ns a call
//! (benches/benches/socket_calls.rs), and a denied CONNECT makes four such
//! calls, a new tunnel about eleven (docs/architecture.md, "Data path of a
//! connection"). `syscall(2)` is not a cancellation point; each function
//! here takes its wrapper's arguments and returns what it would (-1 with
//! `errno` set on failure).
//!
//! `syscall(2)` reads each argument as a whole register, so every integer
//! argument narrower than that is widened to a `c_long` first.

use libc::{c_int, c_long, c_void};
use socket2::{SockAddr, Socket};
use std::io;
use std::os::fd::{FromRawFd, RawFd};

/// `recv(2)` (as `recvfrom` without an address, which every Linux
/// architecture has).
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
pub unsafe fn recv(fd: RawFd, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    let no_address = std::ptr::null_mut::<c_void>();
    // SAFETY: the caller vouches for `buf`; no address is asked for.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            c_long::from(fd),
            buf,
            len,
            c_long::from(flags),
            no_address,
            no_address,
        ) as isize
    }
}

/// `send(2)` (as `sendto` without an address).
///
/// # Safety
/// `buf` must be valid for reads of `len` bytes.
pub unsafe fn send(fd: RawFd, buf: *const c_void, len: usize, flags: c_int) -> isize {
    let no_address = std::ptr::null::<c_void>();
    // SAFETY: the caller vouches for `buf`; no address is given.
    unsafe {
        libc::syscall(
            libc::SYS_sendto,
            c_long::from(fd),
            buf,
            len,
            c_long::from(flags),
            no_address,
            0 as c_long,
        ) as isize
    }
}

/// `splice(2)` between `from` and `to`, neither at an offset.
pub fn splice(from: RawFd, to: RawFd, len: usize, flags: libc::c_uint) -> isize {
    let no_offset = std::ptr::null_mut::<libc::loff_t>();
    // SAFETY: no memory of this process is read or written but the fds'.
    unsafe {
        libc::syscall(
            libc::SYS_splice,
            c_long::from(from),
            no_offset,
            c_long::from(to),
            no_offset,
            len,
            c_long::from(flags),
        ) as isize
    }
}

/// `close(2)` of `fd`. Its result is not looked at, as `std`'s own drops
/// do not: the fd is gone either way.
///
/// # Safety
/// The caller must own `fd` and give it up: nothing may use the number
/// afterwards, as it may already name another file.
pub unsafe fn close(fd: RawFd) {
    // SAFETY: the caller gives `fd` up; no memory of this process is touched.
    unsafe { libc::syscall(libc::SYS_close, c_long::from(fd)) };
}

/// `connect(2)` of `socket` to `addr`.
pub fn connect(socket: RawFd, addr: &SockAddr) -> io::Result<()> {
    // SAFETY: `addr` is a valid address of its length for the call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_connect,
            c_long::from(socket),
            addr.as_ptr(),
            c_long::from(addr.len()),
        )
    };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `accept4(2)` of the next connection queued on `listener`, with `flags`
/// (`SOCK_NONBLOCK`, `SOCK_CLOEXEC`), and its peer's address.
pub fn accept4(listener: RawFd, flags: c_int) -> io::Result<(Socket, SockAddr)> {
    // SAFETY: socket2 hands a zeroed address storage and its length, both
    // valid for the call, and reads the address only on success.
    let (fd, peer) = unsafe {
        SockAddr::try_init(|storage, len| {
            let fd = libc::syscall(
                libc::SYS_accept4,
                c_long::from(listener),
                storage,
                len,
                c_long::from(flags),
            );
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd as RawFd)
            }
        })
    }?;
    // SAFETY: `fd` was just accepted and nothing else owns it.
    Ok((unsafe { Socket::from_raw_fd(fd) }, peer))
}

#[cfg(test)]
mod tests;
