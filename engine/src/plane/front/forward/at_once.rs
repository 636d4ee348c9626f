//! A denied CONNECT answered right after accept, without a task of its own.
//!
//! Most CONNECTs arrive with their connection: the head is there to read
//! the moment the connection is accepted. A denial is the cheapest thing
//! crackbox does, and a task (made, scheduled, polled, freed) was the
//! largest part of its cost, so a CONNECT that is denied is answered and
//! closed in the accept loop (docs/architecture.md, "Data path of a
//! connection"). Everything else, and a head that has not fully arrived,
//! goes on as a task of its own with what was read: the same session,
//! reading on from those bytes, and deciding it again.

use super::head::HeadRead;
use super::Session;
use crate::plane::services::conn::Conn;
use crate::plane::services::decision::{decide, Ruling};
use crate::plane::services::worker::Worker;
use crate::protocol::http_head::{self, FieldSlots, Target};
use std::net::IpAddr;
use std::rc::Rc;

/// What a new forward connection became in the accept loop.
pub(crate) enum AtOnce {
    /// A denied CONNECT, answered in full; the connection is closed.
    Answered,
    /// A denied CONNECT whose answer the socket did not take whole: the
    /// rest is to be written, then the connection closed.
    Answering { client: Conn, rest: Vec<u8> },
    /// Anything else, to serve as a task, reading on from what was read.
    Serve { client: Conn, read: Vec<u8> },
}

/// Answers `client`'s CONNECT at once if what has arrived is a whole head
/// of one that is denied; else hands the connection back with what was
/// read of it.
pub(crate) fn deny_at_once(worker: &Rc<Worker>, client: Conn, source: IpAddr) -> AtOnce {
    let mut session = Session::new(worker, client, source, None, Vec::new());
    let mut scanned = 0;
    let head_len = match session.read_head_now(&mut scanned) {
        Some(HeadRead::Complete(head_len)) if session.inbox.starts_with(b"CONNECT ") => head_len,
        _ => return session.unsettled(),
    };
    let mut slots = FieldSlots::new();
    let denial = match http_head::parse_request(&session.inbox[..head_len], &mut slots) {
        Ok(http_head::RequestHead {
            target: Target::Connect { host, port },
            ..
        }) if !Session::refuse_invalid_host(host) => match decide(worker, source, host, port) {
            Ruling::Deny { reason } => Some(session.denial(reason, host, port)),
            _ => None,
        },
        _ => None,
    };
    let Some(denial) = denial else {
        return session.unsettled();
    };
    match session.client.try_write_last(&denial) {
        Ok(sent) if sent < denial.len() => AtOnce::Answering {
            rest: denial[sent..].to_vec(),
            client: session.client,
        },
        // Answered, or the client is gone: either way the connection ends.
        _ => AtOnce::Answered,
    }
}

impl Session<'_> {
    /// The connection handed back with what was read of it.
    fn unsettled(self) -> AtOnce {
        let Session { client, mut inbox, .. } = self;
        AtOnce::Serve {
            client,
            read: inbox.take(),
        }
    }
}
