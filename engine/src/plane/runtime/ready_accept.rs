//! Accepting a connection only once the listener is known to hold one.
//!
//! An `accept` that finds the queue empty is not cheap on Linux: the kernel
//! allocates the new socket, its inode and its file before it looks at the
//! queue, then frees them all: 1.7 µs on the benchmark machine, against
//! 0.24 µs for a zero-timeout `poll` of the listener
//! (benches/benches/socket_calls.rs). A loop that accepts until `EAGAIN`,
//! and the io_uring `ACCEPT` op (which tries once at submission, finds
//! nothing and arms a poll), pay that for every wake-up when connections
//! arrive one at a time, which is how a sandbox host sees them. So the
//! accept loop waits for readiness first (a `PollAdd` on io_uring, which
//! completes at once if a connection is queued; epoll readiness confirmed
//! by a zero-timeout `poll` otherwise) and accepts exactly one connection
//! per readiness.
//!
//! Looking before waiting (a zero-timeout `poll` after each connection, to
//! take a queued one without the `PollAdd` and the ring's round trip) was
//! measured and saves nothing: under the denial benchmark (benches/README.md)
//! the engine uses under half its core, and its queue is empty after nearly
//! every connection. With the looks backing off after each miss there were
//! 5,223 looks and 93,062 ring waits over 94,431 connections, and the CPU
//! per denial and per tunnel paired 1.00 against this loop
//! (benches/results/2026-12-07-1500-looking-before-accepting.md).

use crate::plane::services::socket_calls;
use monoio::net::TcpListener;
use socket2::Socket;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// The next connection on `listener` (non-blocking, close-on-exec) and its
/// peer address; the listener must be non-blocking.
pub(super) async fn next(listener: &TcpListener) -> io::Result<(Socket, SocketAddr)> {
    loop {
        listener.readable(false).await?;
        match socket_calls::accept4(listener.as_raw_fd(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) {
            Ok((socket, peer)) => {
                let peer = peer
                    .as_socket()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "peer is not an IP address"))?;
                return Ok((socket, peer));
            }
            // Nothing after all, a signal, or a peer that gave up before
            // it was accepted: wait again.
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(err) => return Err(err),
        }
    }
}
