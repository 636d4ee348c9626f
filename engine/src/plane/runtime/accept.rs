//! Accept loops: admission, then hand-off to the plane's connection handler.
//!
//! Accept errors never kill a listener: on fd exhaustion (EMFILE/ENFILE)
//! the loop logs, pauses briefly and goes on; existing tunnels keep running.

use super::Plane;
use crate::plane::conn::Conn;
use crate::plane::worker::Worker;
use crate::policy::canonical_ip;
use crate::policy::reason::Reason;
use crate::protocol::responses;
use monoio::net::{TcpListener, TcpStream};
use std::net::SocketAddr;
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
    let Ok(mut conn) = Conn::accepted(stream, worker.nonblocking_sockets) else {
        return;
    };
    let ticket = match worker.shared.admission.admit(source) {
        Ok(ticket) => ticket,
        Err(_) => {
            worker
                .stats
                .record_denied(source, None, "", 0, Reason::TooManyConnections);
            if plane.answers_http() {
                let _ = conn
                    .write_all(&responses::denial(Reason::TooManyConnections, "", 0))
                    .await;
            }
            return;
        }
    };
    conn.take_turns_of(worker.turns.of(source));
    match plane {
        Plane::Forward => crate::plane::forward::serve(&worker, conn, source).await,
        // Boxed so forward connections do not pay for transparent-mode state.
        Plane::Transparent => Box::pin(crate::plane::transparent::serve(&worker, conn, source)).await,
        Plane::Steered(port) => Box::pin(crate::plane::transparent::serve_steered(&worker, conn, source, port)).await,
    }
    drop(ticket);
}
