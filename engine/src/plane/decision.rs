//! The per-connection (and per-request) policy decision, counted.
//!
//! Asks the policy's one decision function against the snapshot and the
//! label watcher's list in force, and records the outcome in the counters
//! (and a registered source's denials in its usage account). Used by every
//! TCP front end (the DNS filter asks the same function on its own threads).

use crate::plane::conn::Conn;
use crate::plane::revocation::LiveEntry;
use crate::plane::worker::Worker;
use crate::policy::reason::Reason;
use crate::policy::usage::Account;
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
    if let Decision::Deny { reason, id, account } = &decision {
        worker.stats.record_denied(source, id.as_ref(), host, port, *reason);
        if let Some(account) = account {
            account.add_denial(*reason);
        }
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
/// counts the outcome. Denied names are never resolved. The connection comes
/// with the account of the registration that allowed it.
pub(crate) async fn reach(
    worker: &Worker,
    source: IpAddr,
    host: &str,
    port: u16,
) -> Result<(Conn, Arc<Account>), Unreached> {
    match decide(worker, source, host, port) {
        Decision::Allow { matched, id, account } => connect(worker, source, host, port, matched, id, account).await,
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
) -> Result<(Conn, LiveEntry, Arc<Account>), Unreached> {
    let (matched, id, account) = match decide(worker, source, host, port) {
        Decision::Allow { matched, id, account } => (matched, id, account),
        Decision::Deny { reason, .. } => return Err(Unreached::Denied(reason)),
    };
    let live = LiveEntry::register(&worker.live, source, host, port);
    let (conn, account) = connect(worker, source, host, port, matched, id, account).await?;
    Ok((conn, live, account))
}

/// Resolves, guards and connects an allowed `host:port` (`matched`, `id`
/// and `account` from its [`Decision::Allow`]); counts the outcome.
async fn connect(
    worker: &Worker,
    source: IpAddr,
    host: &str,
    port: u16,
    matched: MatchedBy,
    id: Arc<str>,
    account: Arc<Account>,
) -> Result<(Conn, Arc<Account>), Unreached> {
    // Boxed: dialling state is large and only needed until connected.
    match Box::pin(crate::plane::resolve::dial(&worker.dialer(), host, port, matched)).await {
        Ok(mut conn) => {
            worker.stats.record_allowed(&id);
            conn.take_turns_of(worker.turns.of(source));
            Ok((conn, account))
        }
        Err(crate::plane::resolve::DialError::Private) => {
            worker
                .stats
                .record_denied(source, Some(&id), host, port, Reason::PrivateAddress);
            account.add_denial(Reason::PrivateAddress);
            Err(Unreached::Denied(Reason::PrivateAddress))
        }
        Err(err) => {
            worker.stats.record_allowed(&id);
            Err(Unreached::Failed(err))
        }
    }
}
