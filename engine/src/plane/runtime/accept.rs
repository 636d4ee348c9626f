//! Accept loops: admission, a wait for a registration in flight (`hold`),
//! then hand-off to the plane's connection handler; a tunnel it opens runs
//! on as a task of its own. A forward CONNECT denied on what arrived with
//! its connection is answered in the loop itself, on the bare socket,
//! without a task (`forward::deny_at_once`). Connections are taken one per readiness (see
//! `ready_accept`).
//!
//! Accept errors never kill a listener: on fd exhaustion (EMFILE/ENFILE)
//! the loop logs, pauses briefly and goes on; existing tunnels keep running.

use super::{ready_accept, Plane};
use crate::plane::front::forward::{self, AtOnce, Origin, Served};
use crate::plane::front::socks;
use crate::plane::front::transparent::{self, Intercepted};
use crate::plane::services::admission::Ticket;
use crate::plane::services::conn::Conn;
use crate::plane::services::duplex;
use crate::plane::services::handoff::Handoff;
use crate::plane::services::hold;
use crate::plane::services::worker::Worker;
use crate::protocol::responses;
use crackbox_policy::canonical_ip;
use crackbox_policy::reason::{Layer, Reason};
use monoio::net::TcpListener;
use socket2::Socket;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Pause after an accept failure caused by resource exhaustion.
const EXHAUSTED_PAUSE: Duration = Duration::from_millis(100);
/// Pause after any other accept failure.
const ERROR_PAUSE: Duration = Duration::from_millis(5);
/// At most one accept-failure warning per this interval.
const WARN_EVERY: Duration = Duration::from_secs(5);

/// Accepts connections forever, one task per connection.
pub(crate) async fn accept_loop(listener: TcpListener, worker: Rc<Worker>, plane: Plane) {
    let mut last_warning: Option<Instant> = None;
    loop {
        match ready_accept::next(&listener).await {
            Ok((socket, peer)) => {
                if let Err(err) = take(&worker, socket, canonical_ip(peer.ip()), plane) {
                    tracing::warn!(?plane, error = %err, "could not take an accepted connection");
                }
            }
            Err(err) => {
                let exhausted = matches!(
                    err.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                );
                if last_warning.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    tracing::warn!(?plane, error = %err, exhausted, "accept failed; existing connections keep running");
                    last_warning = Some(Instant::now());
                }
                monoio::time::sleep(if exhausted { EXHAUSTED_PAUSE } else { ERROR_PAUSE }).await;
            }
        }
    }
}

/// Admits a new connection and serves it as a task of its own; a forward
/// CONNECT that came with its connection and is denied is answered here,
/// on the bare socket (see `forward::deny_at_once`).
fn take(worker: &Rc<Worker>, socket: Socket, source: IpAddr, plane: Plane) -> io::Result<()> {
    let Ok(ticket) = worker.gate.admit(source) else {
        let conn = Conn::accepted(socket)?;
        monoio::spawn(refuse_over_limit(Rc::clone(worker), conn, source, plane));
        return Ok(());
    };
    // Before anything of the connection is read or tracked: a source the
    // label watcher is about to register waits for it (in its task).
    let held = hold::needed(worker, source);
    let (conn, read) = match plane {
        Plane::Forward if !held => match forward::deny_at_once(worker, socket, source)? {
            AtOnce::Ended => return Ok(()),
            AtOnce::Answering { client, rest } => {
                monoio::spawn(finish_answer(client, rest, ticket));
                return Ok(());
            }
            AtOnce::Serve { client, read } => (client, read),
        },
        _ => (Conn::accepted(socket)?, Vec::new()),
    };
    let accepted = Accepted {
        conn,
        source,
        ticket,
        held,
        read,
    };
    monoio::spawn(serve_connection(Rc::clone(worker), accepted, plane));
    Ok(())
}

/// A connection admitted, with what was read of it.
struct Accepted {
    conn: Conn,
    source: IpAddr,
    ticket: Ticket,
    /// It must wait for its source's registration first.
    held: bool,
    /// Its first bytes, read in the accept loop.
    read: Vec<u8>,
}

/// Refuses a connection over its source's or the thread's admission limit:
/// counted, and answered where the client speaks HTTP first.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
fn refuse_over_limit(worker: Rc<Worker>, conn: Conn, source: IpAddr, plane: Plane) -> impl Future<Output = ()> {
    async move {
        worker.with_policy(|snapshot, _| {
            let registration = snapshot.lookup(source);
            let id = registration.map(|registration| registration.id.shared());
            worker
                .stats
                .record_denied(source, id, "", 0, Reason::TooManyConnections, Layer::Limit);
            if let Some(registration) = registration {
                registration
                    .account
                    .add_denial(worker.thread, Reason::TooManyConnections);
            }
        });
        if plane.answers_http() {
            let _ = conn
                .write_last(&responses::denial(Reason::TooManyConnections, "", 0))
                .await;
        }
    }
}

/// Writes the rest of a denial the accept loop began; the connection closes
/// before its admission is given back.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
fn finish_answer(client: Conn, rest: Vec<u8>, ticket: Ticket) -> impl Future<Output = ()> {
    async move {
        let _ = client.write_last(&rest).await;
        drop(client);
        drop(ticket);
    }
}

/// One admitted connection, held until registered if it must be, then
/// served by its plane (not an `async fn`: see `plane`, on task size).
fn serve_connection(worker: Rc<Worker>, accepted: Accepted, plane: Plane) -> impl Future<Output = ()> {
    // Taken apart before the future is made, which keeps each part once.
    let Accepted {
        mut conn,
        source,
        ticket,
        held,
        read,
    } = accepted;
    async move {
        // Boxed: see `plane`, on task size.
        if held {
            Box::pin(hold::until_registered(&worker, source)).await;
        }
        conn.take_turns_of(worker.turns.of(source));
        let (route, steered) = match plane {
            Plane::Forward => (None, false),
            Plane::Socks => (None, false),
            Plane::Transparent => (transparent::route_redirected(&worker, &conn, source), false),
            Plane::Steered(port) => (transparent::route_port(source, port), true),
        };
        // A redirected or steered connection: TLS by its SNI, HTTP by forward's
        // origin-form session; no route closes it.
        let served = match (plane, route) {
            (Plane::Forward, _) => forward::serve(&worker, conn, source, read).await,
            // Boxed, as a tunnel's opening is in `forward`: see `plane`.
            (Plane::Socks, _) => Box::pin(socks::serve(&worker, conn, source)).await.map(Served::Tunnel),
            // Boxed so forward connections do not pay for transparent-mode state.
            (_, Some(Intercepted::Tls(port))) => {
                let front_end = if steered { "steered" } else { "transparent" };
                Box::pin(transparent::serve_tls(&worker, conn, source, port, front_end))
                    .await
                    .map(Served::Tunnel)
            }
            (_, Some(Intercepted::Http(port))) => {
                forward::serve_origin(&worker, conn, source, Origin { port, steered }).await
            }
            (_, None) => None,
        };
        match served {
            Some(Served::Tunnel(handoff)) => {
                monoio::spawn(run_tunnel(worker, handoff, ticket));
            }
            Some(Served::Held(held)) => {
                let held = forward::resume_held(Rc::clone(&worker), held, move |handoff| {
                    monoio::spawn(run_tunnel(worker, handoff, ticket));
                });
                monoio::spawn(held);
            }
            None => {}
        }
    }
}

/// Runs a tunnel a front end opened as a task of its own, which holds the
/// tunnel, its admission and its pumps and nothing of the front end's state
/// (see `handoff`). Not an `async fn`: see `plane`, on task size.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
fn run_tunnel(worker: Rc<Worker>, handoff: Handoff, ticket: Ticket) -> impl Future<Output = ()> {
    async move {
        let plumbing = worker.plumbing(&handoff.sandbox.account);
        duplex::run(plumbing, &handoff.client, &handoff.upstream, handoff.live.signal()).await;
        // The sockets close before the source's admission is given back.
        drop(handoff);
        drop(ticket);
    }
}
