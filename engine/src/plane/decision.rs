//! The per-connection (and per-request) policy decision, counted.
//!
//! Asks the policy's one decision function against the snapshot and the
//! label watcher's list in force, and records the outcome in the counters.
//! Used by every TCP front end (the DNS filter asks the same function on its
//! own threads).

use crate::plane::conn::Conn;
use crate::plane::revocation::LiveEntry;
use crate::plane::worker::Worker;
use crate::policy::reason::Reason;
use crate::policy::{self, MatchedBy, Port};
use std::net::IpAddr;
use std::sync::Arc;

/// What the policy says about one destination, once any registration hold
/// is over (the policy's settled [`Verdict`](crate::policy::Verdict)).
pub(crate) use crate::policy::Verdict as Decision;

/// Decides whether `source` may reach `host:port` with the one policy
/// decision ([`policy::decide()`]); counts denials. An allowed decision is
/// counted by the caller once the destination guard has passed the dialled
/// address (it may still deny as private-address). By now any registration
/// hold is over (it runs right after accept), so a source still awaiting
/// its registration is `unregistered`.
pub(crate) fn decide(worker: &Worker, source: IpAddr, host: &str, port: u16) -> Decision {
    let decision = worker
        .with_policy(|snapshot, watch| policy::decide(snapshot, watch, source, host, Port::Number(port)).settled());
    if let Decision::Deny { reason, id } = &decision {
        worker.stats.record_denied(source, id.as_ref(), host, port, *reason);
    }
    decision
}

/// Why a destination was not connected to.
pub(crate) enum Unreached {
    /// Denied by policy or by the destination guard.
    Denied(Reason),
    /// Allowed, but the destination could not be reached.
    Failed(crate::plane::resolve::DialError),
}

/// Decides on `host:port` for `source`, then resolves, guards and connects;
/// counts the outcome. Denied names are never resolved.
pub(crate) async fn reach(worker: &Worker, source: IpAddr, host: &str, port: u16) -> Result<Conn, Unreached> {
    match decide(worker, source, host, port) {
        Decision::Allow { matched, id } => connect(worker, source, host, port, matched, id).await,
        Decision::Deny { reason, .. } => Err(Unreached::Denied(reason)),
    }
}

/// [`reach`] for a connection that then tunnels: once allowed it joins the
/// live set before anything awaits, so a snapshot that lands while the dial
/// is in flight still revokes it; its entry comes back with the connection.
/// A denied name never touches the live set.
pub(crate) async fn reach_tracked(
    worker: &Worker,
    source: IpAddr,
    host: &str,
    port: u16,
) -> Result<(Conn, LiveEntry), Unreached> {
    let (matched, id) = match decide(worker, source, host, port) {
        Decision::Allow { matched, id } => (matched, id),
        Decision::Deny { reason, .. } => return Err(Unreached::Denied(reason)),
    };
    let live = LiveEntry::register(&worker.live, source, host, port);
    let conn = connect(worker, source, host, port, matched, id).await?;
    Ok((conn, live))
}

/// Resolves, guards and connects an allowed `host:port` (`matched` and `id`
/// from its [`Decision::Allow`]); counts the outcome.
async fn connect(
    worker: &Worker,
    source: IpAddr,
    host: &str,
    port: u16,
    matched: MatchedBy,
    id: Arc<str>,
) -> Result<Conn, Unreached> {
    // Boxed: dialling state is large and only needed until connected.
    match Box::pin(crate::plane::resolve::dial(&worker.dialer(), host, port, matched)).await {
        Ok(mut conn) => {
            worker.stats.record_allowed(&id);
            conn.take_turns_of(worker.turns.of(source));
            Ok(conn)
        }
        Err(crate::plane::resolve::DialError::Private) => {
            worker
                .stats
                .record_denied(source, Some(&id), host, port, Reason::PrivateAddress);
            Err(Unreached::Denied(Reason::PrivateAddress))
        }
        Err(err) => {
            worker.stats.record_allowed(&id);
            Err(Unreached::Failed(err))
        }
    }
}
