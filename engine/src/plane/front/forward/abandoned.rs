//! A client that went away while its request waits for the upstream's
//! response head.
//!
//! An upstream that accepts and never answers would otherwise hold the
//! client's connection slot and the upstream socket until the response
//! timeout (the tunnel idle timeout, an hour by default), long after the
//! client gave up. Once the request is sent whole, the exchange watches the
//! client too: at its EOF (or reset) it waits [`GRACE`] more for the head
//! to start, since a client may only have half-closed and still read its
//! answer (an upstream that answers within it is relayed as usual), then
//! ends the exchange, closing both sides (docs/configuration.md,
//! `--tunnel-idle-timeout`).

use crate::plane::services::conn::{Conn, Peeked};
use crate::plane::services::deadline;
use std::time::Duration;

/// How long after the client's EOF the upstream may still start its
/// response.
pub(super) const GRACE: Duration = Duration::from_secs(2);

/// How long an exchange waits for the response before it watches the
/// client at all: a timer costs no system call, a watch on the client
/// does (one to arm it, one to cancel it), and nearly every response
/// starts well within this.
const WATCH_AFTER: Duration = Duration::from_secs(1);

/// Returns [`GRACE`] after the client closed its connection (or it
/// failed), which is watched for only from [`WATCH_AFTER`] on; never
/// while it sends bytes instead (a pipelined request, left unread for the
/// next exchange).
pub(super) async fn client_gone(client: &Conn) {
    deadline::sleep(WATCH_AFTER).await;
    // Boxed: only an exchange that waits this long pays for the watch's
    // state; every other one holds no more than the timer.
    Box::pin(closed(client)).await;
}

/// Returns [`GRACE`] after the client closed its connection (or it failed).
async fn closed(client: &Conn) {
    loop {
        if client.readable().await.is_err() {
            break;
        }
        match client.peek() {
            Peeked::Closed => break,
            Peeked::Data => std::future::pending::<()>().await,
            // Woken with nothing to read: wait again.
            Peeked::Nothing => {}
        }
    }
    deadline::sleep(GRACE).await;
}
