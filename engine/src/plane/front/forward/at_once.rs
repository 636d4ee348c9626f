//! A denied CONNECT answered right after accept, before the connection is
//! anything but a socket.
//!
//! Most CONNECTs arrive with their connection: the head is there to read
//! the moment the connection is accepted. A denial is the cheapest thing
//! crackbox does, and a task (made, scheduled, polled, freed) and the
//! socket's registration with the io driver (on epoll, two `epoll_ctl`s)
//! were most of what it added to the syscalls' own cost. So a CONNECT whose
//! whole head is in the first read and that is denied is answered and
//! closed in the accept loop, on the bare socket, as the C relay of
//! benches/compare.sh does (docs/architecture.md, "Data path of a
//! connection"). Everything else becomes a [`Conn`] and goes on as a task
//! of its own with what was read: the same session, reading on from those
//! bytes, and deciding it again.

use super::denial;
use super::head::FIRST_READ;
use crate::plane::services::conn::{receive_into, send_last_now, Conn};
use crate::plane::services::decision::{decide, Ruling};
use crate::plane::services::pipes::Pooled;
use crate::plane::services::socket_calls;
use crate::plane::services::worker::Worker;
use crate::protocol::http_head::{self, FieldSlots, Target};
use crackbox_policy::is_valid_host;
use socket2::Socket;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::rc::Rc;

/// What a new forward connection became in the accept loop.
pub(crate) enum AtOnce {
    /// Nothing is left to do: a denied CONNECT was answered in full, or
    /// the client had gone; the socket is closed.
    Ended,
    /// A denied CONNECT whose answer the socket did not take whole: the
    /// rest is to be written, then the connection closed.
    Answering { client: Conn, rest: Vec<u8> },
    /// Anything else, to serve as a task, reading on from what was read.
    Serve { client: Conn, read: Vec<u8> },
}

/// Answers the CONNECT on `socket`, just accepted, at once if its first
/// read holds the whole head of one that is denied; else makes it a
/// [`Conn`], handed back with what was read of it.
pub(crate) fn deny_at_once(worker: &Rc<Worker>, socket: Socket, source: IpAddr) -> io::Result<AtOnce> {
    let mut read = Pooled::new(&worker.pools);
    match receive_into(socket.as_raw_fd(), &mut read, FIRST_READ) {
        Ok(Some(0)) | Err(_) => return Ok(ended(socket)),
        Ok(_) => {}
    }
    let Some(answer) = denial_of(worker, source, &read) else {
        return Ok(AtOnce::Serve {
            client: Conn::accepted(socket)?,
            read: read.take(),
        });
    };
    match send_last_now(socket.as_raw_fd(), &answer) {
        Ok(sent) if sent < answer.len() => Ok(AtOnce::Answering {
            client: Conn::accepted(socket)?,
            rest: answer[sent..].to_vec(),
        }),
        // Answered, or the client is gone: either way the connection ends.
        _ => Ok(ended(socket)),
    }
}

/// Closes `socket`, whose connection ended, with one plain `close(2)`
/// rather than by its drop (see `socket_calls`).
fn ended(socket: Socket) -> AtOnce {
    // SAFETY: the socket's only owner gives its fd up.
    unsafe { socket_calls::close(socket.into_raw_fd()) };
    AtOnce::Ended
}

/// The answer to `read` if it is the whole head of a CONNECT that is
/// denied (the denial counted), else `None`, nothing counted.
fn denial_of<'w>(worker: &'w Worker, source: IpAddr, read: &[u8]) -> Option<Pooled<'w>> {
    if !read.starts_with(b"CONNECT ") {
        return None;
    }
    let head_len = http_head::head_end(read, 0)?;
    let mut slots = FieldSlots::new();
    let Ok(http_head::RequestHead {
        target: Target::Connect { host, port },
        ..
    }) = http_head::parse_request(&read[..head_len], &mut slots)
    else {
        return None;
    };
    if !is_valid_host(host) {
        return None;
    }
    match decide(worker, source, host, port) {
        Ruling::Deny { reason } => Some(denial(&worker.pools, reason, host, port)),
        _ => None,
    }
}
