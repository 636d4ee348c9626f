//! Forward mode: HTTP absolute-form requests and CONNECT tunnels, and the
//! origin-form requests of redirected or steered port-80 connections.
//!
//! Every request on a keep-alive connection is decided anew. Request and
//! response bodies are streamed (never buffered whole) with their framing
//! kept as received; hop-by-hop fields are dropped; redirects are passed to
//! the client, never followed. An upstream connection is reused only for
//! the same host and port and the same registration: on the same client
//! connection, or, once that ends, from the thread's pool of idle upstream
//! connections (`services::upstream_pool`), never for another source. Each
//! request and tunnel is counted to the account of the registration that
//! allowed it, and its bytes held to that registration's cap.
//!
//! Here: the entry points and a connection's state, and crackbox's own
//! answers. By job:
//! - `at_once`: a CONNECT denied on the head that came with its
//!   connection, answered right after accept on the bare socket;
//! - `session`: one client connection, request after request (the
//!   keep-alive loop), and what each head asks for: a request to forward, a
//!   CONNECT tunnel, or an answer;
//! - `head`: reading a request head, bounded in size and time, and the
//!   request as it goes upstream;
//! - `exchange`: one request upstream and its response back, on a new or a
//!   reused upstream connection;
//! - `response`: the upstream's response head(s), rewritten for the client;
//! - `abandoned`: a client that goes away while its request waits for the
//!   response;
//! - `body`: one framed body relay for both directions.

mod abandoned;
mod at_once;
mod body;
mod exchange;
mod head;
mod held;
mod response;
mod session;

pub(crate) use at_once::{deny_at_once, AtOnce};
pub(crate) use held::{resume_held, HeldConnect};
use session::Opened;

use crate::plane::services::conn::Conn;
use crate::plane::services::decision::{park, Client, IdleUpstream, Unreached};
use crate::plane::services::handoff::Handoff;
use crate::plane::services::pipes::{Pooled, Pools};
use crate::plane::services::resolve::DialError;
use crate::plane::services::revocation::LiveEntry;
use crate::plane::services::worker::Worker;
use crate::protocol::responses;
use crackbox_policy::is_valid_host;
use crackbox_policy::reason::Reason;
use std::future::Future;
use std::net::IpAddr;
use std::rc::Rc;

/// Bytes read from a socket at a time while reading heads and chunked bodies.
const READ_CHUNK: usize = 16 * 1024;

/// What a client connection is handed back to `runtime` as.
pub(crate) enum Served {
    /// A CONNECT tunnel, open, to run.
    Tunnel(Handoff),
    /// A CONNECT held for a decision (ask mode), to wait as a task of its
    /// own ([`resume_held`]).
    Held(HeldConnect),
}

/// Serves one client connection of the forward listener to the end, or
/// until it is a CONNECT tunnel, handed back open to run, or a CONNECT held
/// for a decision; `read`: what [`deny_at_once`] read of it. The session,
/// built first and moved into the future, is the connection's only copy in
/// the task (see `plane`, on task size).
pub(crate) fn serve<'w>(
    worker: &'w Rc<Worker>,
    client: Conn,
    source: IpAddr,
    read: Vec<u8>,
) -> impl Future<Output = Option<Served>> + 'w {
    let mut session = Session::new(worker, client, source, None, read);
    async move {
        let opened = session.run().await;
        session.park_kept();
        Some(session.hand_off(opened?))
    }
}

/// Where an origin-form connection (transparent or steered port 80) goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    /// The port every request is decided (and dialled) on.
    pub(crate) port: u16,
    /// Steered: a request without `Host` is answered as denied, not closed.
    pub(crate) steered: bool,
}

/// Serves a transparently redirected or steered port-80 connection:
/// origin-form requests, each decided by its `Host` (without port); it
/// never opens a CONNECT tunnel.
pub(crate) fn serve_origin<'w>(
    worker: &'w Rc<Worker>,
    client: Conn,
    source: IpAddr,
    origin: Origin,
) -> impl Future<Output = Option<Served>> + 'w {
    let mut session = Session::new(worker, client, source, Some(origin), Vec::new());
    async move {
        let opened = session.run().await;
        session.park_kept();
        Some(session.hand_off(opened?))
    }
}

/// One client connection's state: the task's only copy of it.
struct Session<'w> {
    worker: &'w Rc<Worker>,
    client: Conn,
    source: IpAddr,
    /// Bytes read from the client and not yet consumed.
    inbox: Pooled<'w>,
    /// The upstream connection kept from the last request.
    upstream: Option<IdleUpstream>,
    live: Option<LiveEntry>,
    /// Transparent or steered port 80: requests are origin-form.
    origin: Option<Origin>,
}

impl<'w> Session<'w> {
    /// A session of `client`, of which `read` was read already.
    fn new(worker: &'w Rc<Worker>, client: Conn, source: IpAddr, origin: Option<Origin>, read: Vec<u8>) -> Self {
        Session {
            worker,
            client,
            source,
            inbox: Pooled::holding(&worker.pools, read),
            upstream: None,
            live: None,
            origin,
        }
    }

    /// Who asks, for the decision.
    fn asker(&self, front_end: &'static str) -> Client<'_> {
        Client {
            source: self.source,
            conn: &self.client,
            front_end,
        }
    }

    /// The front end requests on this connection come through.
    fn requests_front_end(&self) -> &'static str {
        match self.origin {
            None => "forward",
            Some(Origin { steered: false, .. }) => "transparent",
            Some(Origin { steered: true, .. }) => "steered",
        }
    }

    /// Sends crackbox's own response; the connection closes right after.
    async fn reply(&self, response: &[u8]) {
        let _ = self.client.write_last(response).await;
    }

    /// Answers a failed decision or dial; the connection closes afterwards.
    async fn reply_unreachable(&self, host: &str, port: u16, why: Unreached) {
        reply_unreachable(&self.client, host, port, why).await;
    }

    /// Parks an upstream connection left reusable in the thread's pool,
    /// unless this connection was revoked.
    fn park(&self, idle: IdleUpstream) {
        if !self.live.as_ref().is_some_and(|live| live.signal().is_fired()) {
            park(self.worker, self.source, idle);
        }
    }

    /// Parks the upstream connection kept from the last request, as the
    /// client connection ends (or becomes a tunnel).
    fn park_kept(&mut self) {
        if let Some(idle) = self.upstream.take() {
            self.park(idle);
        }
    }

    /// The CONNECT tunnel this session opened, or the CONNECT it holds,
    /// with its client connection.
    fn hand_off(mut self, opened: Opened) -> Served {
        match opened {
            Opened::Tunnel {
                upstream,
                live,
                sandbox,
                active,
            } => Served::Tunnel(Handoff {
                client: self.client,
                upstream,
                live,
                sandbox,
                active,
            }),
            Opened::Held { host, port, sandbox } => Served::Held(HeldConnect {
                client: self.client,
                source: self.source,
                host: host.into_boxed_str(),
                port,
                sandbox,
                early: match self.inbox.is_empty() {
                    true => Box::default(),
                    false => self.inbox.take().into_boxed_slice(),
                },
            }),
        }
    }

    fn refuse_invalid_host(host: &str) -> bool {
        !is_valid_host(host)
    }
}

/// The answer to a denied request for `host:port`, in a vector of the
/// thread's pool.
fn denial<'p>(pools: &'p Pools, reason: Reason, host: &str, port: u16) -> Pooled<'p> {
    let mut response = Pooled::new(pools);
    responses::write_denial(&mut response, reason, host, port);
    response
}

/// Answers a failed decision or dial on `client`; the connection closes
/// afterwards.
async fn reply_unreachable(client: &Conn, host: &str, port: u16, why: Unreached) {
    let response = match why {
        Unreached::Denied(reason) => responses::denial(reason, host, port),
        Unreached::Failed(DialError::Dns) => responses::error(502, &format!("could not resolve {host}")),
        Unreached::Failed(DialError::LookupsBusy) => responses::error(
            503,
            &format!("could not resolve {host}: this source's name lookups are all in flight"),
        ),
        Unreached::Failed(DialError::Timeout) => {
            responses::error(504, &format!("timed out connecting to {host}:{port}"))
        }
        Unreached::Failed(DialError::Private | DialError::Unreachable) => {
            responses::error(502, &format!("could not connect to {host}:{port}"))
        }
    };
    let _ = client.write_last(&response).await;
}
