//! Accept loops: admission, a wait for a registration in flight (`hold`),
//! then hand-off to the plane's connection handler; a tunnel it opens runs
//! on as a task of its own. Connections are taken
//! one per readiness (see `ready_accept`).
//!
//! Accept errors never kill a listener: on fd exhaustion (EMFILE/ENFILE)
//! the loop logs, pauses briefly and goes on; existing tunnels keep running.

use super::{ready_accept, Plane};
use crate::plane::front::forward::{self, Origin, Served};
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
use std::future::Future;
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
            Ok((socket, peer)) => match Conn::accepted(socket) {
                Ok(conn) => {
                    let source = canonical_ip(peer.ip());
                    monoio::spawn(serve_connection(Rc::clone(&worker), conn, source, plane));
                }
                Err(err) => tracing::warn!(?plane, error = %err, "could not take an accepted connection"),
            },
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

/// One connection, admitted, held or refused, then served by its plane
/// (not an `async fn`: see `plane`, on task size).
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
fn serve_connection(worker: Rc<Worker>, mut conn: Conn, source: IpAddr, plane: Plane) -> impl Future<Output = ()> {
    async move {
        let ticket = match worker.gate.admit(source) {
            Ok(ticket) => ticket,
            Err(_) => {
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
                return;
            }
        };
        // Before anything of the connection is read or tracked: a source the
        // label watcher is about to register waits for it here (boxed: see
        // `plane`, on task size).
        if hold::needed(&worker, source) {
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
            (Plane::Forward, _) => forward::serve(&worker, conn, source).await,
            (Plane::Socks, _) => socks::serve(&worker, conn, source).await.map(Served::Tunnel),
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
