//! The per-connection (and per-request) policy decision, counted.
//!
//! Loads the snapshot once, looks up the source, applies `match_host`, and
//! records the outcome in the counters (and a registered source's denials in
//! its usage account). Used by every data plane.

use crate::plane::conn::Conn;
use crate::plane::revocation::LiveEntry;
use crate::plane::worker::Worker;
use crate::policy::reason::Reason;
use crate::policy::usage::Account;
use crate::policy::MatchedBy;
use std::net::IpAddr;
use std::sync::Arc;

/// What the policy says about one destination.
pub(crate) enum Decision {
    /// Allowed; how it matched decides what the destination guard accepts.
    Allow {
        /// Name or IP-literal match.
        matched: MatchedBy,
        /// The registration id, for counters.
        id: Arc<str>,
        /// The registration's usage and cap.
        account: Arc<Account>,
    },
    /// Denied, with the reason and the id when the source is registered.
    Deny {
        /// Why.
        reason: Reason,
        /// The registration id, if any.
        id: Option<Arc<str>>,
    },
}

/// Decides whether `source` may reach `host:port`; counts denials. An
/// allowed decision is counted by the caller once the destination guard
/// has passed the dialled address (it may still deny as private-address).
pub(crate) fn decide(worker: &Worker, source: IpAddr, host: &str, port: u16) -> Decision {
    let decision = worker.with_snapshot(|snapshot| match snapshot.lookup(source) {
        None => unregistered(worker, source),
        Some(registration) => match registration.allowlist.matching(host, port) {
            Some(matched) => Decision::Allow {
                matched,
                id: Arc::clone(&registration.id),
                account: Arc::clone(&registration.account),
            },
            None => {
                registration.account.add_denial(Reason::NotAllowed);
                Decision::Deny {
                    reason: Reason::NotAllowed,
                    id: Some(Arc::clone(&registration.id)),
                }
            }
        },
    });
    if let Decision::Deny { reason, id } = &decision {
        worker.stats.record_denied(source, id.as_ref(), host, port, *reason);
    }
    decision
}

/// The denial of an unregistered source: `invalid-label` for a container
/// the label watcher refused, else `unregistered`.
fn unregistered(worker: &Worker, source: IpAddr) -> Decision {
    match worker.shared.watched.load().invalid(source) {
        Some(id) => Decision::Deny {
            reason: Reason::InvalidLabel,
            id: Some(Arc::clone(id)),
        },
        None => Decision::Deny {
            reason: Reason::Unregistered,
            id: None,
        },
    }
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
