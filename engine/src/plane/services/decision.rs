//! The per-connection (and per-request) policy decision, counted.
//!
//! Asks the policy's one decision function against the snapshot and the
//! label watcher's list in force, and records the outcome in the counters
//! (and a registered source's denials in its usage account). A would-be
//! denial of report mode is dialled like an allowed name (the destination
//! guard judging it in full) and counted apart once the guard let it
//! through. A name an ask-mode source's list does not cover is first judged
//! by the destination guard (resolved on the resolver pool: a name none of
//! whose addresses may be dialled is refused at once, never asked about),
//! then held (see `ask`) until the one decision settles it (an answer, a
//! new snapshot, the timeout) or the client goes away, and then dialled or
//! refused as that verdict says. Every denial is counted with the layer
//! that decided it. Used by every TCP front end (the DNS filter asks the
//! same function on its own threads).
//!
//! The decision borrows the registration from the snapshot; what lets a
//! connection through comes back as this thread's handle on it (see
//! `sandboxes`), so deciding and holding a connection clone nothing the
//! other core threads share.

use crate::plane::services::ask::Asking;
use crate::plane::services::conn::{Conn, Peeked};
use crate::plane::services::resolve::may_dial;
use crate::plane::services::revocation::{LetThrough, LiveEntry};
use crate::plane::services::sandboxes::Sandbox;
use crate::plane::services::upstream_pool::{self, still_allowed, Place};
use crate::plane::services::worker::Worker;
use crate::usage::attached::VerdictRef;
use crate::usage::Account;
use crackbox_policy::guard::Verdict as GuardVerdict;
use crackbox_policy::reason::{Layer, Reason};
use crackbox_policy::{MatchedBy, Port};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

/// What the policy says about one destination (its settled verdict), the
/// registration it names held as this thread's handle.
pub(crate) enum Ruling {
    /// Allowed, matched by name or IP literal; `answered` when by an
    /// answer to a pending request rather than by the list.
    Allow {
        matched: MatchedBy,
        sandbox: Rc<Sandbox>,
        answered: bool,
    },
    /// Denied (counted already).
    Deny { reason: Reason },
    /// Let through in report mode: a would-be denial for `reason`.
    Report { reason: Reason, sandbox: Rc<Sandbox> },
    /// To ask about (uncounted).
    Ask { sandbox: Rc<Sandbox> },
}

/// Who asks: the source, its client connection (watched while held, so a
/// client that goes away leaves its pending request) and the front end.
#[derive(Clone, Copy)]
pub(crate) struct Client<'a> {
    pub(crate) source: IpAddr,
    pub(crate) conn: &'a Conn,
    /// The front end's name in pending requests.
    pub(crate) front_end: &'static str,
}

/// Decides whether `source` may reach `host:port` with the one policy
/// decision ([`crackbox_policy::decide()`]); counts denials. An allowed or reported
/// decision is counted once the destination guard has passed the dialled
/// address (it may still deny as private-address). By now any registration
/// hold is over (it runs right after accept), so a source still awaiting
/// its registration is `unregistered`. A name to ask about comes back as
/// [`Ruling::Ask`], uncounted: [`decide_held`] holds it.
pub(crate) fn decide(worker: &Worker, source: IpAddr, host: &str, port: u16) -> Ruling {
    worker.with_policy(|snapshot, watch| {
        let verdict = crackbox_policy::decide_ref(snapshot, watch, source, host, Port::Number(port)).settled();
        rule(worker, source, host, port, verdict)
    })
}

/// `verdict` as this thread's ruling; a denial is counted, with the layer
/// that decided it.
fn rule(worker: &Worker, source: IpAddr, host: &str, port: u16, verdict: VerdictRef<'_>) -> Ruling {
    let sandboxes = &worker.sandboxes;
    match verdict {
        VerdictRef::Allow {
            matched,
            layer,
            id,
            account,
        } => Ruling::Allow {
            matched,
            sandbox: sandboxes.handle(id, account),
            answered: layer == Layer::Answer,
        },
        VerdictRef::Report { reason, id, account } => Ruling::Report {
            reason,
            sandbox: sandboxes.handle(id, account),
        },
        VerdictRef::Ask { id, account } => Ruling::Ask {
            sandbox: sandboxes.handle(id, account),
        },
        VerdictRef::Deny {
            reason,
            layer,
            id,
            account,
        } => {
            count_denial(worker, source, (host, port), (reason, layer), id, account.map(|a| &**a));
            Ruling::Deny { reason }
        }
    }
}

/// Counts one denial of `source` in the counters and, for a registered
/// source, in its account.
fn count_denial(
    worker: &Worker,
    source: IpAddr,
    (host, port): (&str, u16),
    (reason, layer): (Reason, Layer),
    id: Option<&Arc<str>>,
    account: Option<&Account>,
) {
    worker.stats.record_denied(source, id, host, port, reason, layer);
    if let Some(account) = account {
        account.add_denial(worker.thread, reason);
    }
}

/// [`decide`], holding a name to ask about until the one decision settles
/// it: never [`Ruling::Ask`]. The destination guard is never asked about:
/// a destination none of whose addresses may be dialled is refused at once
/// (`private-address`). A client that goes away while held gets a denial
/// nobody hears (not counted: nothing was refused).
pub(crate) async fn decide_held(worker: &Worker, client: Client<'_>, host: &str, port: u16) -> Ruling {
    match decide(worker, client.source, host, port) {
        // Boxed: only a connection held for a decision pays for its state
        // (a resolution with its timer, the wait), not every connection's
        // task (see `plane`, on task size).
        Ruling::Ask { sandbox } => Box::pin(hold(worker, client, host, port, sandbox)).await,
        decided => decided,
    }
}

/// [`decide_held`] for a name to ask about: what [`decide`] answered
/// [`Ruling::Ask`] for.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
pub(crate) fn hold<'a>(
    worker: &'a Worker,
    client: Client<'a>,
    host: &'a str,
    port: u16,
    sandbox: Rc<Sandbox>,
) -> impl Future<Output = Ruling> + 'a {
    async move {
        let refused = |reason, layer| {
            let (id, account) = (Some(&sandbox.id), Some(&*sandbox.account));
            count_denial(worker, client.source, (host, port), (reason, layer), id, account);
            Ruling::Deny { reason }
        };
        // Boxed: the resolution (with its timer) is over before the wait.
        if !Box::pin(may_dial(&worker.dialer(client.source), host, port)).await {
            return refused(Reason::PrivateAddress, Layer::Guard);
        }
        let asking = Asking {
            source: client.source,
            sandbox: &sandbox.id,
            host,
            port,
            front_end: client.front_end,
        };
        match worker.shared.asks.hold(asking) {
            Ok(held) => {
                monoio::select! {
                    verdict = held => rule(worker, client.source, host, port, verdict.as_ref()),
                    () = gone(client.conn) => Ruling::Deny { reason: Reason::NotAllowed },
                }
            }
            Err(Reason::AskLimit) => refused(Reason::AskLimit, Layer::Limit),
            Err(reason) => refused(reason, Layer::Entry),
        }
    }
}

/// Returns once the client closed its connection (or it failed); never
/// when it sends bytes instead (they stay unread for the front end).
async fn gone(client: &Conn) {
    loop {
        if client.readable().await.is_err() {
            return;
        }
        match client.peek() {
            Peeked::Closed => return,
            Peeked::Data => std::future::pending::<()>().await,
            // Woken with nothing to read: wait again.
            Peeked::Nothing => {}
        }
    }
}

/// A decision that lets the connection through: allowed, or reported.
struct Passed {
    /// How the name matched; a reported one is judged as a name.
    matched: MatchedBy,
    /// The reason a reported one would have been denied; `None` when allowed.
    reported: Option<Reason>,
    sandbox: Rc<Sandbox>,
}

impl Passed {
    /// The ruling's passage, or the denial's reason.
    fn of(ruling: Ruling) -> Result<Passed, Reason> {
        match ruling {
            Ruling::Allow { matched, sandbox, .. } => Ok(Passed {
                matched,
                reported: None,
                sandbox,
            }),
            Ruling::Report { reason, sandbox } => Ok(Passed {
                matched: MatchedBy::Name,
                reported: Some(reason),
                sandbox,
            }),
            Ruling::Deny { reason } => Err(reason),
            // Only `decide_held`'s rulings pass here, never one to ask about.
            Ruling::Ask { .. } => Err(Reason::NotAllowed),
        }
    }

    /// Counts the connection or request as allowed, or as a would-be
    /// denial in the counters, the denials ring and the usage account.
    fn count(&self, worker: &Worker, source: IpAddr, host: &str, port: u16) {
        match self.reported {
            None => worker.stats.record_allowed(&self.sandbox.id),
            Some(reason) => {
                worker
                    .stats
                    .record_reported(source, &self.sandbox.id, host, port, reason);
                self.sandbox.account.add_reported(worker.thread, reason);
            }
        }
    }
}

/// The upstream connection an HTTP request goes out on.
pub(crate) struct Reached {
    pub(crate) conn: Conn,
    /// The registration that allowed the request.
    pub(crate) sandbox: Rc<Sandbox>,
    /// Kept from an earlier request rather than dialled now: it may have
    /// closed unanswered.
    pub(crate) reused: bool,
    /// The address dialled, when known without asking the socket.
    pub(crate) dialled: Option<SocketAddr>,
}

/// An upstream connection its last exchange left reusable (a complete,
/// framed response of an HTTP/1.1 keep-alive upstream, nothing unread),
/// with the registration and the destination it served.
pub(crate) struct IdleUpstream {
    pub(crate) conn: Conn,
    pub(crate) sandbox: Rc<Sandbox>,
    /// The address dialled, when known without asking the socket.
    pub(crate) dialled: Option<SocketAddr>,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// When its last exchange ended.
    pub(crate) since: Instant,
}

/// [`reach`] for an HTTP request, which may go out on an idle upstream
/// connection whose upstream has neither closed nor sent anything since its
/// last response: `kept` (the client connection's own, from its last
/// request; parked when this one goes elsewhere), else one of this thread's
/// pool whose dialled address the destination guard still passes. Either serves only the
/// registration that allowed this request, and only to the same
/// `host:port`; otherwise the request is dialled anew. Decided (and
/// counted) anew every time.
pub(crate) async fn reach_reusing(
    worker: &Worker,
    client: Client<'_>,
    host: &str,
    port: u16,
    kept: Option<IdleUpstream>,
    live: &LiveEntry,
) -> Result<Reached, Unreached> {
    let kept = match kept {
        Some(idle) if idle.port == port && idle.host == host => Some(idle),
        Some(elsewhere) => {
            park(worker, client.source, elsewhere);
            None
        }
        None => None,
    };
    let passed = pass_tracked(worker, client, (host, port), live).await?;
    let literal = passed.matched == MatchedBy::IpLiteral;
    let usable = |place: &Place, conn: &Conn| {
        let is_local = |ip: IpAddr| worker.shared.local_addresses.contains(ip);
        conn.peek() == Peeked::Nothing
            && worker.shared.guard.judge(place.dialled, literal, is_local) == GuardVerdict::Dial
    };
    // The client's own kept connection is checked as a pooled one is: bytes
    // the upstream sent after its last response would be read as the answer
    // to this request.
    let reused = kept
        .filter(|idle| Rc::ptr_eq(&idle.sandbox, &passed.sandbox) && idle.conn.peek() == Peeked::Nothing)
        .map(|idle| (idle.conn, idle.dialled))
        .or_else(|| {
            let (conn, dialled) = worker
                .upstreams
                .take(client.source, &passed.sandbox, host, port, usable)?;
            Some((conn, Some(dialled)))
        });
    if let Some((conn, dialled)) = reused {
        passed.count(worker, client.source, host, port);
        return Ok(Reached {
            conn,
            sandbox: passed.sandbox,
            reused: true,
            dialled,
        });
    }
    let (conn, dialled, sandbox) = connect(worker, client.source, host, port, passed).await?;
    Ok(Reached {
        conn,
        sandbox,
        reused: false,
        dialled: Some(dialled),
    })
}

/// Parks `idle` in this thread's pool for the next request of the same
/// registration of `source` to the same place; closes it instead when the
/// policy in force no longer lets it through, or it is idle past the
/// pool's timeout already.
pub(crate) fn park(worker: &Worker, source: IpAddr, idle: IdleUpstream) {
    if idle.since.elapsed() >= upstream_pool::IDLE_TIMEOUT {
        return;
    }
    let Some(dialled) = idle.dialled.or_else(|| idle.conn.peer_addr().ok()) else {
        return;
    };
    let place = Place {
        sandbox: idle.sandbox,
        host: idle.host,
        port: idle.port,
        dialled,
    };
    if worker.with_policy(|snapshot, watch| still_allowed(snapshot, watch, source, &place)) {
        worker.upstreams.park(source, place, idle.conn, idle.since);
    }
}

/// Why a destination was not connected to.
pub(crate) enum Unreached {
    /// Denied by policy or by the destination guard.
    Denied(Reason),
    /// Allowed, but the destination could not be reached.
    Failed(crate::plane::services::resolve::DialError),
}

/// Decides on `host:port` for `source`, records on `live` what let it
/// through, then resolves, guards and connects; counts the outcome. Denied
/// names are never resolved. The connection comes with the registration
/// that allowed it.
pub(crate) async fn reach(
    worker: &Worker,
    client: Client<'_>,
    host: &str,
    port: u16,
    live: &LiveEntry,
) -> Result<Reached, Unreached> {
    let passed = pass_tracked(worker, client, (host, port), live).await?;
    let (conn, dialled, sandbox) = connect(worker, client.source, host, port, passed).await?;
    Ok(Reached {
        conn,
        sandbox,
        reused: false,
        dialled: Some(dialled),
    })
}

/// [`reach`] for a connection that then tunnels: once allowed it joins the
/// live set before anything awaits, so a snapshot that lands while the dial
/// is in flight still revokes it; its entry comes back with the connection.
/// A denied name never touches the live set.
pub(crate) async fn reach_tracked(
    worker: &Worker,
    client: Client<'_>,
    host: &str,
    port: u16,
) -> Result<(Conn, LiveEntry, Rc<Sandbox>), Unreached> {
    let ruling = decide_held(worker, client, host, port).await;
    reach_ruled(worker, client, host, port, ruling).await
}

/// [`reach_tracked`] once `ruling` (never [`Ruling::Ask`]) is known.
pub(crate) async fn reach_ruled(
    worker: &Worker,
    client: Client<'_>,
    host: &str,
    port: u16,
    ruling: Ruling,
) -> Result<(Conn, LiveEntry, Rc<Sandbox>), Unreached> {
    let by = let_through(worker, client.source, host, port, &ruling);
    let passed = Passed::of(ruling).map_err(Unreached::Denied)?;
    let live = LiveEntry::register(&worker.live, client.source, host, port, by);
    let (conn, _, sandbox) = connect(worker, client.source, host, port, passed).await?;
    Ok((conn, live, sandbox))
}

/// [`decide_held`] for a request tracked by `live`: what let it through is
/// recorded there before anything awaits the dial.
async fn pass_tracked(
    worker: &Worker,
    client: Client<'_>,
    (host, port): (&str, u16),
    live: &LiveEntry,
) -> Result<Passed, Unreached> {
    let ruling = decide_held(worker, client, host, port).await;
    live.let_through(let_through(worker, client.source, host, port, &ruling));
    Passed::of(ruling).map_err(Unreached::Denied)
}

/// What `ruling` let through by, for revocation: an answer the list does
/// not hold (`once`; an `always` is listed before it lets anything
/// through) stays when the policy would ask about it again; anything else
/// let through goes with the entry that let it. Decided again only for an
/// answered one.
fn let_through(worker: &Worker, source: IpAddr, host: &str, port: u16, ruling: &Ruling) -> LetThrough {
    let answered = matches!(ruling, Ruling::Allow { answered: true, .. })
        && !worker.with_policy(|snapshot, watch| {
            let listed = crackbox_policy::decide_ref(snapshot, watch, source, host, Port::Number(port));
            matches!(listed.settled(), VerdictRef::Allow { .. })
        });
    if answered {
        LetThrough::Answer
    } else {
        LetThrough::List
    }
}

/// Resolves, guards and connects a `host:port` the decision let through;
/// counts the outcome.
async fn connect(
    worker: &Worker,
    source: IpAddr,
    host: &str,
    port: u16,
    passed: Passed,
) -> Result<(Conn, SocketAddr, Rc<Sandbox>), Unreached> {
    // Boxed: dialling state is large and only needed until connected.
    match Box::pin(crate::plane::services::resolve::dial(
        &worker.dialer(source),
        host,
        port,
        passed.matched,
    ))
    .await
    {
        Ok((mut conn, dialled)) => {
            passed.count(worker, source, host, port);
            conn.take_turns_of(worker.turns.of(source));
            Ok((conn, dialled, passed.sandbox))
        }
        Err(crate::plane::services::resolve::DialError::Private) => {
            let (id, account) = (Some(&passed.sandbox.id), Some(&*passed.sandbox.account));
            count_denial(
                worker,
                source,
                (host, port),
                (Reason::PrivateAddress, Layer::Guard),
                id,
                account,
            );
            Err(Unreached::Denied(Reason::PrivateAddress))
        }
        Err(err) => {
            passed.count(worker, source, host, port);
            Err(Unreached::Failed(err))
        }
    }
}
