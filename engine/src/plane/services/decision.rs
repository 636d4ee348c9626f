//! The per-connection (and per-request) policy decision, counted.
//!
//! Asks the policy's one decision function against the snapshot and the
//! label watcher's list in force, and records the outcome in the counters
//! (and a registered source's denials in its usage account). A would-be
//! denial of report mode is dialled like an allowed name (the destination
//! guard judging it in full) and counted apart once the guard let it
//! through. Used by every TCP front end (the DNS filter asks the same
//! function on its own threads).

use crate::plane::services::conn::Conn;
use crate::plane::services::revocation::LiveEntry;
use crate::plane::services::worker::Worker;
use crackbox_policy::reason::Reason;
use crackbox_policy::usage::Account;
use crackbox_policy::{MatchedBy, Port};
use std::net::IpAddr;
use std::sync::Arc;

/// What the policy says about one destination, once any registration hold
/// is over (the policy's settled [`Verdict`](crackbox_policy::Verdict)).
pub(crate) use crackbox_policy::Verdict as Decision;

/// Decides whether `source` may reach `host:port` with the one policy
/// decision ([`crackbox_policy::decide()`]); counts denials. An allowed or reported
/// decision is counted once the destination guard has passed the dialled
/// address (it may still deny as private-address). By now any registration
/// hold is over (it runs right after accept), so a source still awaiting
/// its registration is `unregistered`.
pub(crate) fn decide(worker: &Worker, source: IpAddr, host: &str, port: u16) -> Decision {
    let decision = worker.with_policy(|snapshot, watch| {
        crackbox_policy::decide(snapshot, watch, source, host, Port::Number(port)).settled()
    });
    if let Decision::Deny { reason, id, account } = &decision {
        worker.stats.record_denied(source, id.as_ref(), host, port, *reason);
        if let Some(account) = account {
            account.add_denial(*reason);
        }
    }
    decision
}

/// A decision that lets the connection through: allowed, or reported.
struct Passed {
    /// How the name matched; a reported one is judged as a name.
    matched: MatchedBy,
    /// The reason a reported one would have been denied; `None` when allowed.
    reported: Option<Reason>,
    id: Arc<str>,
    account: Arc<Account>,
}

impl Passed {
    /// The decision's passage, or the denial's reason.
    fn of(decision: Decision) -> Result<Passed, Reason> {
        match decision {
            Decision::Allow { matched, id, account } => Ok(Passed {
                matched,
                reported: None,
                id,
                account,
            }),
            Decision::Report { reason, id, account } => Ok(Passed {
                matched: MatchedBy::Name,
                reported: Some(reason),
                id,
                account,
            }),
            Decision::Deny { reason, .. } => Err(reason),
        }
    }

    /// Counts the connection or request as allowed, or as a would-be
    /// denial in the counters, the denials ring and the usage account.
    fn count(&self, worker: &Worker, source: IpAddr, host: &str, port: u16) {
        match self.reported {
            None => worker.stats.record_allowed(&self.id),
            Some(reason) => {
                worker.stats.record_reported(source, &self.id, host, port, reason);
                self.account.add_reported(reason);
            }
        }
    }
}

/// Decides on a request to `host:port` sent on an upstream connection that
/// was dialled (through the destination guard) for that very destination;
/// counts the outcome. The account the request counts to, or the denial.
pub(crate) fn reuse(worker: &Worker, source: IpAddr, host: &str, port: u16) -> Result<Arc<Account>, Reason> {
    let passed = Passed::of(decide(worker, source, host, port))?;
    passed.count(worker, source, host, port);
    Ok(passed.account)
}

/// Why a destination was not connected to.
pub(crate) enum Unreached {
    /// Denied by policy or by the destination guard.
    Denied(Reason),
    /// Allowed, but the destination could not be reached.
    Failed(crate::plane::services::resolve::DialError),
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
    let passed = Passed::of(decide(worker, source, host, port)).map_err(Unreached::Denied)?;
    connect(worker, source, host, port, passed).await
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
    let passed = Passed::of(decide(worker, source, host, port)).map_err(Unreached::Denied)?;
    let live = LiveEntry::register(&worker.live, source, host, port);
    let (conn, account) = connect(worker, source, host, port, passed).await?;
    Ok((conn, live, account))
}

/// Resolves, guards and connects a `host:port` the decision let through;
/// counts the outcome.
async fn connect(
    worker: &Worker,
    source: IpAddr,
    host: &str,
    port: u16,
    passed: Passed,
) -> Result<(Conn, Arc<Account>), Unreached> {
    // Boxed: dialling state is large and only needed until connected.
    match Box::pin(crate::plane::services::resolve::dial(
        &worker.dialer(),
        host,
        port,
        passed.matched,
    ))
    .await
    {
        Ok(mut conn) => {
            passed.count(worker, source, host, port);
            conn.take_turns_of(worker.turns.of(source));
            Ok((conn, passed.account))
        }
        Err(crate::plane::services::resolve::DialError::Private) => {
            worker
                .stats
                .record_denied(source, Some(&passed.id), host, port, Reason::PrivateAddress);
            passed.account.add_denial(Reason::PrivateAddress);
            Err(Unreached::Denied(Reason::PrivateAddress))
        }
        Err(err) => {
            passed.count(worker, source, host, port);
            Err(Unreached::Failed(err))
        }
    }
}
