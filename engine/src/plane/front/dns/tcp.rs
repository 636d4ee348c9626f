//! TCP serving: one accept thread and a thread per connection, each
//! answering length-prefixed queries one after another. A connection from
//! an unregistered source is closed at once, and every other takes one of
//! the listener's slots (see `slots`: a connection waiting for its next
//! query may be closed to give its slot to a newcomer) or is closed at
//! once too. A new connection has [`FIRST_QUERY_TIMEOUT`] to send its
//! first complete query, an answered one [`IDLE_TIMEOUT`] for each next
//! one. A query whose source awaits its registration waits in the hold
//! (see `hold`), its connection's thread blocked meanwhile (only its own
//! connection waits).

use super::decide::{refuses_connection, Hold};
use super::slots::{Slot, Slots};
use super::upstream::{read_framed, write_framed};
use super::{Answer, Filter};
use crackbox_policy::canonical_ip;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a new connection may take to send its first complete query.
const FIRST_QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an answered connection may take to send its next complete
/// query (and the bound on writing an answer).
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts the accept thread on `listener`, serving as many connections as
/// `slots` gives out.
pub(super) fn serve(listener: TcpListener, filter: Arc<Filter>, slots: Slots) -> io::Result<()> {
    std::thread::Builder::new()
        .name("crackbox-dns-tcp".into())
        .spawn(move || accept(&listener, &filter, &slots))?;
    Ok(())
}

fn accept(listener: &TcpListener, filter: &Arc<Filter>, slots: &Slots) {
    loop {
        let (stream, source) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "dns tcp accept failed");
                continue;
            }
        };
        // Dropping the stream closes a connection given no slot.
        let Some(slot) = admit(filter, slots, &stream, source) else {
            continue;
        };
        let filter = Arc::clone(filter);
        let spawned = std::thread::Builder::new()
            .name("crackbox-dns-conn".into())
            .spawn(move || {
                if let Err(error) = converse(stream, source, &filter, &slot) {
                    tracing::debug!(%error, %source, "dns tcp connection ended");
                }
                drop(slot);
            });
        if let Err(error) = spawned {
            tracing::debug!(%error, %source, "dns tcp connection thread not started");
        }
    }
}

/// The slot a connection from `source` is served in; `None` when it is to
/// be closed at once.
fn admit(filter: &Filter, slots: &Slots, stream: &TcpStream, source: SocketAddr) -> Option<Slot> {
    let ip = canonical_ip(source.ip());
    let (snapshot, watch) = (filter.registry.load(), filter.watched.load());
    if refuses_connection(ip, (&snapshot, &watch), filter.on_denial.as_ref()) {
        return None;
    }
    drop((snapshot, watch));
    let closer = stream
        .try_clone()
        .inspect_err(|error| tracing::debug!(%error, %source, "dns tcp connection closed"))
        .ok()?;
    slots
        .take(ip, closer)
        .inspect_err(|error| tracing::debug!(%error, %source, "dns tcp connection closed"))
        .ok()
}

/// Answers the queries of one connection, one after another; `slot` is
/// the connection's, which it may give up while it waits for a query.
fn converse(mut stream: TcpStream, source: SocketAddr, filter: &Filter, slot: &Slot) -> io::Result<()> {
    let arrived = stream.local_addr()?.ip();
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let mut wait = FIRST_QUERY_TIMEOUT;
    loop {
        let mut next = Until {
            stream: &stream,
            deadline: Instant::now() + wait,
        };
        let Some(packet) = read_framed(&mut next)? else {
            return Ok(());
        };
        if !slot.answering() {
            return Ok(());
        }
        let mut answer = filter.answer(&packet, source, arrived, true, Hold::Allowed);
        if let Answer::AfterHold = answer {
            if !wait_for_registration(filter, source) {
                return Ok(());
            }
            answer = filter.answer(&packet, source, arrived, true, Hold::Over);
        }
        match answer {
            Answer::Reply(reply) => write_framed(&mut stream, &reply)?,
            Answer::Silence | Answer::AfterHold => return Ok(()),
        }
        slot.waiting();
        wait = IDLE_TIMEOUT;
    }
}

/// Reads from a stream until a deadline, however slowly the bytes come.
struct Until<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for Until<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        stream.read(buf)
    }
}

/// Blocks until `source` needs no more waiting; false when the hold has no
/// room for it (the connection is then closed, and the client asks again).
fn wait_for_registration(filter: &Filter, source: SocketAddr) -> bool {
    let Some(held) = &filter.held else {
        return true;
    };
    let (released, wait) = std::sync::mpsc::channel();
    if held
        .hold(source.ip(), move || {
            let _ = released.send(());
        })
        .is_err()
    {
        tracing::debug!(%source, "dns hold full, tcp connection closed");
        return false;
    }
    wait.recv().is_ok()
}
