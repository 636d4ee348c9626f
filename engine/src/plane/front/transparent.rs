//! Transparent mode (docs/daemon.md, "Transparent mode"): connections redirected here by iptables
//! `REDIRECT`, decided by the name the client itself sends; and steered
//! interception (docs/architecture.md, "Steered interception"), the same plane for connections a steered DNS
//! answer sent to crackbox's own address, where the listener's port says
//! HTTP or TLS.
//!
//! The original destination comes from conntrack (`SO_ORIGINAL_DST` /
//! `IP6T_SO_ORIGINAL_DST`) and only its port is trusted: port 443 is decided
//! by the SNI of the ClientHello, port 80 by the `Host` of every request
//! (served like forward mode: `runtime` hands those connections to forward's
//! origin-form session, so neither front end imports the other). On allow,
//! the engine dials the name it checked, through the resolver and the
//! destination guard, never the original IP on the client's word. Everything else is closed without a
//! byte sent: other ports, no SNI, not TLS, no Host, and connections whose
//! original destination is crackbox itself. A steered port-80 request
//! without a Host gets the 403 of a denied one instead.

use crate::plane::services::conn::Conn;
use crate::plane::services::deadline::until;
use crate::plane::services::decision::{decide, reach_tracked, Client, Unreached};
use crate::plane::services::handoff::Handoff;
use crate::plane::services::stats::{Direction, FrontEnd};
use crate::plane::services::worker::Worker;
use crate::protocol::tls_peek::{peek_sni, Peek, MAX_PEEK_LEN};
use crackbox_policy::guard::Verdict;
use crackbox_policy::{with_normalised_host, HostView};
use nix::sys::socket::{getsockopt, sockopt};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::BorrowedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The ClientHello must be complete within this long of the connection.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
const HTTPS_PORT: u16 = 443;
const HTTP_PORT: u16 = 80;

/// What an intercepted connection (redirected or steered) carries, told by
/// its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intercepted {
    /// TLS to this port: served here by its SNI ([`serve_tls`]).
    Tls(u16),
    /// Plain HTTP to this port: every request decided by its `Host`, as
    /// forward mode serves origin-form requests.
    Http(u16),
}

/// Where a redirected connection was going; `None` (logged) when it must
/// close: not redirected, aimed at crackbox itself, or another port.
pub(crate) fn route_redirected(worker: &Worker, client: &Conn, source: IpAddr) -> Option<Intercepted> {
    let original = match original_destination(client) {
        Ok(original) => original,
        Err(error) => {
            tracing::debug!(%source, %error, "transparent: no original destination (not redirected?), closed");
            return None;
        }
    };
    let is_local = |ip: IpAddr| worker.shared.local_addresses.contains(ip);
    if worker.shared.guard.judge(original, true, is_local) == Verdict::OwnListener {
        tracing::debug!(%source, %original, "transparent: original destination is crackbox itself, closed");
        return None;
    }
    route_port(source, original.port())
}

/// Port 443 is TLS (decided by SNI), port 80 HTTP (by every request's
/// `Host`); `None` (logged) for any other port.
pub(crate) fn route_port(source: IpAddr, port: u16) -> Option<Intercepted> {
    match port {
        HTTPS_PORT => Some(Intercepted::Tls(port)),
        HTTP_PORT => Some(Intercepted::Http(port)),
        port => {
            tracing::debug!(%source, port, "transparent: only ports 80 and 443 are served, closed");
            None
        }
    }
}

/// TLS: peek the SNI, decide, dial the name, replay; the tunnel, once
/// open, is handed back to run (not an `async fn`: see `plane`, on task
/// size). `front_end` names it in pending requests: `transparent` or
/// `steered`.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
pub(crate) fn serve_tls<'w>(
    worker: &'w Rc<Worker>,
    client: Conn,
    source: IpAddr,
    port: u16,
    front_end: &'static str,
) -> impl Future<Output = Option<Handoff>> + 'w {
    async move {
        // Boxed: its timer is needed only until the ClientHello is in.
        let (name, peeked) = match Box::pin(read_client_hello(&client, source)).await {
            Ok(hello) => hello,
            Err(Unread::Gone) => return None,
            Err(Unread::Unnamed) => {
                // Decided as a name no entry can match, so that the attempt
                // is a denial on record (docs/policy.md), not only a log line.
                decide(worker, source, "", port);
                return None;
            }
        };
        let asker = Client {
            source,
            conn: &client,
            front_end,
        };
        let (upstream, live, sandbox) = match reach_tracked(worker, asker, &name, port).await {
            Ok(reached) => reached,
            Err(Unreached::Denied(reason)) => {
                tracing::debug!(%source, name, reason = reason.as_str(), "transparent: denied, closed");
                return None;
            }
            Err(Unreached::Failed(error)) => {
                tracing::debug!(%source, name, ?error, "transparent: dial failed, closed");
                return None;
            }
        };
        if live.signal().is_fired() {
            return None;
        }
        if worker
            .meter(&sandbox.account)
            .send(&upstream, &peeked, Direction::Up)
            .await
            .is_err()
        {
            return None;
        }
        sandbox.account.add_tunnel(worker.thread);
        drop(peeked);
        worker.stats.count_tunnel(FrontEnd::Transparent);
        Some(Handoff {
            client,
            upstream,
            live,
            sandbox,
            active: worker.stats.open_tunnel(),
        })
    }
}

/// Why no ClientHello named a server.
enum Unread {
    /// The client closed or the connection failed first.
    Gone,
    /// The bytes name no usable server (no SNI, an IP literal, an invalid
    /// name, not TLS, over 16 KiB), or no complete ClientHello came in time.
    Unnamed,
}

/// Reads until the ClientHello is complete; returns the server name and
/// every byte read (to replay), or why the connection must close.
async fn read_client_hello(client: &Conn, source: IpAddr) -> Result<(String, Vec<u8>), Unread> {
    let deadline = Instant::now() + HELLO_TIMEOUT;
    let mut peeked = Vec::new();
    loop {
        match peek_sni(&peeked) {
            Peek::NeedMore => {}
            Peek::Sni(name) if names_a_server(&name) => return Ok((name, peeked)),
            Peek::Sni(_) => {
                tracing::debug!(%source, "transparent: the SNI is no host name, closed");
                return Err(Unread::Unnamed);
            }
            other => {
                tracing::debug!(%source, outcome = ?other, "transparent: no usable SNI, closed");
                return Err(Unread::Unnamed);
            }
        }
        let want = MAX_PEEK_LEN - peeked.len();
        match until(deadline, client.read_into(&mut peeked, want)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err(Unread::Gone),
            Ok(Ok(_)) => {}
            Err(_) => {
                tracing::debug!(%source, "transparent: ClientHello not complete within 10 s, closed");
                return Err(Unread::Unnamed);
            }
        }
    }
}

/// Whether an SNI is a host name: an IP literal (which RFC 6066 does not
/// allow there), an invalid name or one with control characters names no
/// server, and is recorded as a denial without a host (docs/policy.md).
fn names_a_server(sni: &str) -> bool {
    with_normalised_host(sni, |view| matches!(view, Some(HostView::Name(_))))
}

/// Where the client meant to go before iptables redirected it.
fn original_destination(client: &Conn) -> io::Result<SocketAddr> {
    // Safety: the fd stays open for the whole call; `client` owns it.
    let fd = unsafe { BorrowedFd::borrow_raw(client.fd()) };
    match getsockopt(&fd, sockopt::OriginalDst) {
        Ok(v4) => Ok(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)),
            u16::from_be(v4.sin_port),
        ))),
        Err(v4_error) => match getsockopt(&fd, sockopt::Ip6tOriginalDst) {
            Ok(v6) => Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(v6.sin6_addr.s6_addr),
                u16::from_be(v6.sin6_port),
                0,
                v6.sin6_scope_id,
            ))),
            Err(_) => Err(v4_error.into()),
        },
    }
}
