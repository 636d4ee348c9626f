//! The one policy decision every front end asks: may this source reach
//! this host, on this port (forward, transparent, steered, revocation) or on
//! any port (the DNS filter, which sees names, never ports)?
//!
//! Pure: a snapshot and the label watcher's [`Watch`] in, a [`Decision`]
//! out. It never waits, counts or logs; the front ends do that with what it
//! returns, so they all agree on who is registered, which entry matched and
//! why a denial happened. A front end owns only its wire format.
//!
//! A registration in report mode ([`Mode::Report`]) gets
//! [`Verdict::Report`] where its allowlist would deny: only the allowlist is
//! ever reported, so unregistered sources and invalid labels are denied in
//! any mode, and the destination guard still judges what a front end dials.
//! A registration in ask mode ([`Mode::Ask`]) gets [`Verdict::Ask`] there
//! instead: the front end holds the connection until someone decides (see
//! the engine's `ask`). Only `not-allowed` is ever asked about.
//! A deny entry that covers the destination refuses it in every mode
//! (`denied-entry`), however an allow entry covers it too: it is never
//! reported as let through and never asked about. Every verdict names the
//! [`Layer`] that decided it. A held connection is decided again by the
//! same function, with its answer as one more input (`held`).
//!
//! A registration that names policies is decided with theirs too
//! (`effective`): its entries plus every policy's, a deny entry of any of
//! them winning, and its own mode when it has one, else the policies'.

use super::allowlist::{Lookup, MatchedBy};
use super::host::is_valid_host;
use super::mode::Mode;
use super::reason::{Layer, Reason};
use super::snapshot::{Registered, Snapshot};
use super::source::canonical_ip;
use super::watch::Watch;
use std::net::IpAddr;
use std::sync::Arc;

/// The destination port a decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// This TCP port: an entry with a port matches only it.
    Number(u16),
    /// Any port: a name the DNS filter is asked about is allowed when an
    /// entry for it allows some port.
    Any,
}

/// What the policy says about one destination for one source.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision<A = ()> {
    /// Decided now: allowed or denied.
    Made(Verdict<A>),
    /// Unregistered, but inside a subnet the Docker label watcher answers
    /// for: its registration may be in flight, so a new connection or query
    /// may wait for it (the registration hold) and be decided again then.
    AwaitRegistration,
}

impl<A> Decision<A> {
    /// The verdict once no more waiting is possible: a source still
    /// awaiting its registration is denied as `unregistered`.
    pub fn settled(self) -> Verdict<A> {
        match self {
            Decision::Made(verdict) => verdict,
            Decision::AwaitRegistration => Verdict::Deny {
                reason: Reason::Unregistered,
                layer: Layer::Registration,
                id: None,
                account: None,
            },
        }
    }
}

/// Allowed, denied, or let through in report mode: a variant of its own, so
/// no front end can mistake a would-be denial for a plain allow or deny.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<A = ()> {
    /// Allowed; how it matched decides what the destination guard accepts.
    Allow {
        /// Name or IP-literal match.
        matched: MatchedBy,
        /// What let it through: an allow entry, or (a held connection) an
        /// answer.
        layer: Layer,
        /// The source's registration id.
        id: Arc<str>,
        /// The registration's usage account and cap, which the connection
        /// counts to and is held to.
        account: Arc<A>,
    },
    /// Denied.
    Deny {
        /// Why: `not-allowed`, `denied-entry`, `unregistered` or
        /// `invalid-label` (and, for a held connection, `ask-timeout`).
        reason: Reason,
        /// What refused it.
        layer: Layer,
        /// The registration id, or the container of an `invalid-label`
        /// source; `None` for an unregistered source.
        id: Option<Arc<str>>,
        /// The registration's usage account, which counts the denial;
        /// `None` for a source with no registration.
        account: Option<Arc<A>>,
    },
    /// Not on the allowlist of a registration in report mode: let through
    /// and recorded as a would-be denial (`"enforced": false`). A front end
    /// dials it as a name match, so the destination guard applies in full
    /// (an IP literal too: a private one is refused unless the operator
    /// allows private destinations).
    Report {
        /// The reason it would have been denied: `not-allowed`.
        reason: Reason,
        /// The source's registration id.
        id: Arc<str>,
        /// The registration's usage account, which counts the connection
        /// and the would-be denial.
        account: Arc<A>,
    },
    /// Not on the allowlist of a registration in ask mode: held until
    /// someone decides (allowed once or always, or denied) or the ask
    /// timeout passes. A connection let through is dialled as a name
    /// match, so the destination guard applies in full. The DNS filter
    /// answers the name, so that the connection that follows can ask.
    Ask {
        /// The source's registration id.
        id: Arc<str>,
        /// The registration's usage account.
        account: Arc<A>,
    },
}

impl<A> Verdict<A> {
    /// The same verdict, borrowing what it names.
    pub fn as_ref(&self) -> VerdictRef<'_, A> {
        match self {
            Verdict::Allow {
                matched,
                layer,
                id,
                account,
            } => VerdictRef::Allow {
                matched: *matched,
                layer: *layer,
                id,
                account,
            },
            Verdict::Deny {
                reason,
                layer,
                id,
                account,
            } => VerdictRef::Deny {
                reason: *reason,
                layer: *layer,
                id: id.as_ref(),
                account: account.as_ref(),
            },
            Verdict::Report { reason, id, account } => VerdictRef::Report {
                reason: *reason,
                id,
                account,
            },
            Verdict::Ask { id, account } => VerdictRef::Ask { id, account },
        }
    }

    /// The layer that decided: report mode and a held connection still
    /// waiting are the mode's doing.
    pub fn layer(&self) -> Layer {
        match self {
            Verdict::Allow { layer, .. } | Verdict::Deny { layer, .. } => *layer,
            Verdict::Report { .. } | Verdict::Ask { .. } => Layer::Mode,
        }
    }
}

/// Where a source stands, before any destination is looked at: the first
/// half of [`decide`], on its own for what is decided per source (the
/// registration hold, which starts before any host is known).
#[derive(Debug, PartialEq, Eq)]
pub enum Standing<'a, A = ()> {
    /// The source has this registration.
    Registered(&'a Registered<A>),
    /// A Docker container the label watcher refused for invalid labels,
    /// with its id.
    InvalidLabel(&'a Arc<str>),
    /// Unregistered inside a watched subnet: see [`Decision::AwaitRegistration`].
    AwaitingRegistration,
    /// Unregistered.
    Unregistered,
}

/// Where `source` stands in `snapshot` and the watcher's `watch`.
pub fn standing<'a, A>(snapshot: &'a Snapshot<A>, watch: &'a Watch, source: IpAddr) -> Standing<'a, A> {
    let source = canonical_ip(source);
    if let Some(registration) = snapshot.lookup(source) {
        return Standing::Registered(registration);
    }
    if let Some(id) = watch.invalid(source) {
        return Standing::InvalidLabel(id);
    }
    if watch.holds(source) {
        return Standing::AwaitingRegistration;
    }
    Standing::Unregistered
}

/// Decides whether `source` may reach `host` on `port`.
pub fn decide<A>(snapshot: &Snapshot<A>, watch: &Watch, source: IpAddr, host: &str, port: Port) -> Decision<A> {
    decide_ref(snapshot, watch, source, host, port).to_owned()
}

/// [`Decision`] borrowing the registration it names from the snapshot it
/// was decided on: deciding clones nothing, so a data plane deciding on
/// many threads at once never touches the reference counts of a
/// registration's id and account, which every thread shares.
#[derive(Debug, PartialEq, Eq)]
pub enum DecisionRef<'a, A = ()> {
    /// Decided now.
    Made(VerdictRef<'a, A>),
    /// See [`Decision::AwaitRegistration`].
    AwaitRegistration,
}

/// [`Verdict`] borrowing the registration's id and account.
#[derive(Debug, PartialEq, Eq)]
pub enum VerdictRef<'a, A = ()> {
    /// See [`Verdict::Allow`].
    Allow {
        /// Name or IP-literal match.
        matched: MatchedBy,
        /// What let it through.
        layer: Layer,
        /// The source's registration id.
        id: &'a Arc<str>,
        /// The registration's usage account and cap.
        account: &'a Arc<A>,
    },
    /// See [`Verdict::Deny`].
    Deny {
        /// Why.
        reason: Reason,
        /// What refused it.
        layer: Layer,
        /// The registration id, or the container of an `invalid-label` source.
        id: Option<&'a Arc<str>>,
        /// The registration's usage account.
        account: Option<&'a Arc<A>>,
    },
    /// See [`Verdict::Report`].
    Report {
        /// The reason it would have been denied.
        reason: Reason,
        /// The source's registration id.
        id: &'a Arc<str>,
        /// The registration's usage account.
        account: &'a Arc<A>,
    },
    /// See [`Verdict::Ask`].
    Ask {
        /// The source's registration id.
        id: &'a Arc<str>,
        /// The registration's usage account.
        account: &'a Arc<A>,
    },
}

impl<'a, A> DecisionRef<'a, A> {
    /// As [`Decision::settled`].
    pub fn settled(self) -> VerdictRef<'a, A> {
        match self {
            DecisionRef::Made(verdict) => verdict,
            DecisionRef::AwaitRegistration => VerdictRef::Deny {
                reason: Reason::Unregistered,
                layer: Layer::Registration,
                id: None,
                account: None,
            },
        }
    }

    /// The same decision owning what it names.
    pub fn to_owned(self) -> Decision<A> {
        match self {
            DecisionRef::Made(verdict) => Decision::Made(verdict.to_owned()),
            DecisionRef::AwaitRegistration => Decision::AwaitRegistration,
        }
    }
}

impl<A> VerdictRef<'_, A> {
    /// The same verdict owning what it names.
    pub fn to_owned(self) -> Verdict<A> {
        match self {
            VerdictRef::Allow {
                matched,
                layer,
                id,
                account,
            } => Verdict::Allow {
                matched,
                layer,
                id: Arc::clone(id),
                account: Arc::clone(account),
            },
            VerdictRef::Deny {
                reason,
                layer,
                id,
                account,
            } => Verdict::Deny {
                reason,
                layer,
                id: id.map(Arc::clone),
                account: account.map(Arc::clone),
            },
            VerdictRef::Report { reason, id, account } => Verdict::Report {
                reason,
                id: Arc::clone(id),
                account: Arc::clone(account),
            },
            VerdictRef::Ask { id, account } => Verdict::Ask {
                id: Arc::clone(id),
                account: Arc::clone(account),
            },
        }
    }
}

/// [`decide`] without cloning: the verdict borrows from `snapshot` and `watch`.
pub fn decide_ref<'a, A>(
    snapshot: &'a Snapshot<A>,
    watch: &'a Watch,
    source: IpAddr,
    host: &str,
    port: Port,
) -> DecisionRef<'a, A> {
    let deny = |reason, layer, id: Option<&'a Arc<str>>, account: Option<&'a Arc<A>>| {
        DecisionRef::Made(VerdictRef::Deny {
            reason,
            layer,
            id,
            account,
        })
    };
    let registration = match standing(snapshot, watch, source) {
        Standing::Registered(registration) => registration,
        Standing::InvalidLabel(id) => return deny(Reason::InvalidLabel, Layer::Registration, Some(id), None),
        Standing::AwaitingRegistration => return DecisionRef::AwaitRegistration,
        Standing::Unregistered => return deny(Reason::Unregistered, Layer::Registration, None, None),
    };
    let effective = snapshot.effective(registration);
    let lookup = match port {
        Port::Number(port) => effective.lookup(host, Some(port)),
        Port::Any => effective.lookup(host, None),
    };
    let (id, account) = (registration.id.shared(), &registration.account);
    match lookup {
        Lookup::Allowed(matched) => DecisionRef::Made(VerdictRef::Allow {
            matched,
            layer: Layer::Entry,
            id,
            account,
        }),
        Lookup::Denied => deny(Reason::DeniedEntry, Layer::DenyEntry, Some(id), Some(account)),
        Lookup::Unlisted => unlisted(registration, effective.mode(), host),
    }
}

/// A host no entry covers, for a registration in `mode`.
fn unlisted<'a, A>(registration: &'a Registered<A>, mode: Mode, host: &str) -> DecisionRef<'a, A> {
    let (id, account) = (registration.id.shared(), &registration.account);
    match mode {
        // Report mode lets through what could be reached: never a host that
        // is no name or address at all (a request without `Host`).
        Mode::Report if is_valid_host(host) => DecisionRef::Made(VerdictRef::Report {
            reason: Reason::NotAllowed,
            id,
            account,
        }),
        Mode::Ask if is_valid_host(host) => DecisionRef::Made(VerdictRef::Ask { id, account }),
        _ => DecisionRef::Made(VerdictRef::Deny {
            reason: Reason::NotAllowed,
            layer: Layer::Entry,
            id: Some(id),
            account: Some(account),
        }),
    }
}

// Clone and Copy by hand: derived, they would ask the same of the
// attachment, which the verdicts hold behind an `Arc` or a reference.

impl<A> Clone for Decision<A> {
    fn clone(&self) -> Self {
        match self {
            Decision::Made(verdict) => Decision::Made(verdict.clone()),
            Decision::AwaitRegistration => Decision::AwaitRegistration,
        }
    }
}

impl<A> Clone for Verdict<A> {
    fn clone(&self) -> Self {
        self.as_ref().to_owned()
    }
}

impl<A> Clone for Standing<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for Standing<'_, A> {}

impl<A> Clone for DecisionRef<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for DecisionRef<'_, A> {}

impl<A> Clone for VerdictRef<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A> Copy for VerdictRef<'_, A> {}

#[cfg(test)]
mod tests;
