//! Accept loops: admission, a wait for a registration in flight (`hold`),
//! then hand-off to the plane's connection handler.
//!
//! Accept errors never kill a listener: on fd exhaustion (EMFILE/ENFILE)
//! the loop logs, pauses briefly and goes on; existing tunnels keep running.

use super::Plane;
use crate::plane::conn::Conn;
use crate::plane::forward::{self, Origin};
use crate::plane::transparent::{self, Intercepted};
use crate::plane::worker::Worker;
use crate::policy::canonical_ip;
use crate::policy::reason::Reason;
use crate::protocol::responses;
use monoio::net::{TcpListener, TcpStream};
use std::net::{IpAddr, SocketAddr};
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
        match listener.accept().await {
            Ok((stream, peer)) => {
                monoio::spawn(serve_connection(Rc::clone(&worker), stream, peer, plane));
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

async fn serve_connection(worker: Rc<Worker>, stream: TcpStream, peer: SocketAddr, plane: Plane) {
    let source = canonical_ip(peer.ip());
    let mut conn = Conn::accepted(stream, worker.nonblocking_sockets);
    let ticket = match worker.shared.admission.admit(source) {
        Ok(ticket) => ticket,
        Err(_) => {
            worker
                .stats
                .record_denied(source, None, "", 0, Reason::TooManyConnections);
            if plane.answers_http() {
                let _ = conn
                    .write_last(&responses::denial(Reason::TooManyConnections, "", 0))
                    .await;
            }
            return;
        }
    };
    // Before anything of the connection is read or tracked: a source the
    // label watcher is about to register waits for it here.
    crate::plane::hold::until_registered(&worker, source).await;
    conn.take_turns_of(worker.turns.of(source));
    match plane {
        Plane::Forward => forward::serve(&worker, conn, source).await,
        Plane::Transparent => {
            let route = transparent::route_redirected(&worker, &conn, source);
            serve_intercepted(&worker, conn, source, route, false).await;
        }
        Plane::Steered(port) => {
            let route = transparent::route_port(source, port);
            serve_intercepted(&worker, conn, source, route, true).await;
        }
    }
    drop(ticket);
}

/// A redirected or steered connection: TLS by its SNI, HTTP by forward's
/// origin-form session; `None` closes it.
async fn serve_intercepted(worker: &Rc<Worker>, conn: Conn, source: IpAddr, route: Option<Intercepted>, steered: bool) {
    match route {
        // Boxed so forward connections do not pay for transparent-mode state.
        Some(Intercepted::Tls(port)) => Box::pin(transparent::serve_tls(worker, conn, source, port)).await,
        Some(Intercepted::Http(port)) => forward::serve_origin(worker, conn, source, Origin { port, steered }).await,
        None => {}
    }
}
