//! The upstream's side of an exchange: its response head(s) read (within
//! the tunnel idle timeout of the request), interim ones passed on, the
//! final one rewritten for the client and sent with the body bytes read
//! with it, then the body relayed.

use super::body;
use super::head::Prepared;
use super::READ_CHUNK;
use crate::plane::services::conn::Conn;
use crate::plane::services::deadline;
use crate::plane::services::pipes::{Pooled, Pools};
use crate::plane::services::stats::Direction;
use crate::plane::services::tunnel::{CloseSignal, Plumbing};
use crate::protocol::http_head::{self, ConnectionField, FieldSlots, Framing, MAX_HEAD};
use std::cell::Cell;
use std::time::Duration;

/// What happened to one request/response exchange.
pub(super) enum Exchange {
    /// Complete; whether each side may carry another exchange.
    Done {
        client_reusable: bool,
        upstream_reusable: bool,
    },
    /// 101 Switching Protocols: the connection is now a tunnel.
    Upgraded,
}

/// Why an exchange failed.
pub(super) enum ExchangeError {
    /// The upstream closed before sending a single byte (a stale reused
    /// connection; safe to retry a bodiless request once).
    NoResponse,
    /// The upstream's response head was unusable; the client gets a 502.
    BadResponse,
    /// The request body's chunked framing was malformed before the client
    /// got any response bytes; the client gets a 400.
    MalformedBody,
    /// Failed after the client got part of a response; just close.
    Broken,
}

/// Reads the upstream's response head(s) and streams the response to the
/// client; gives up on a head not started within `wait`.
pub(super) async fn relay_response(
    plumbing: Plumbing<'_>,
    wait: Duration,
    client: &Conn,
    upstream: &Conn,
    request: &Prepared<'_>,
    activity: &CloseSignal,
    responded: &Cell<bool>,
) -> Result<Exchange, ExchangeError> {
    let mut inbox = Pooled::new(plumbing.pools);
    let mut received = false;
    loop {
        let mut scanned = 0;
        let end = loop {
            if let Some(end) = http_head::head_end(&inbox, scanned) {
                break end;
            }
            if inbox.len() >= MAX_HEAD {
                return Err(ExchangeError::BadResponse);
            }
            scanned = inbox.len();
            // The request has only just gone out, so its response cannot be
            // there yet: wait for it instead of trying a read that finds nothing.
            let just_sent = !received;
            let read = async {
                if just_sent {
                    upstream.readable().await?;
                }
                upstream.read_into(&mut inbox, READ_CHUNK).await
            };
            match deadline::within(wait, read).await {
                Ok(Ok(0)) | Ok(Err(_)) if !received => return Err(ExchangeError::NoResponse),
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Err(ExchangeError::BadResponse),
                Ok(Ok(_)) => received = true,
            }
        };
        let (
            Answered {
                interim,
                upgraded,
                client_close,
                framing,
                upstream_keep_alive,
                buffered,
            },
            mut out,
        ) = rewrite_head(&inbox, end, request, plumbing.pools)?;
        inbox.drain(..end);
        responded.set(true);
        activity.touch();
        // A 101's tunnel bytes read with its head go out with it too.
        if upgraded {
            out.append(&mut inbox);
        }
        out.extend_from_slice(&inbox[..buffered]);
        inbox.drain(..buffered);
        plumbing
            .meter
            .send(client, &out, Direction::Down)
            .await
            .map_err(|_| ExchangeError::Broken)?;
        drop(out);
        if interim {
            continue;
        }
        if upgraded {
            return Ok(Exchange::Upgraded);
        }
        let framing = match framing {
            Framing::Length(length) => Framing::Length(length - buffered as u64),
            other => other,
        };
        body::relay(
            plumbing,
            upstream,
            client,
            &mut inbox,
            framing,
            Direction::Down,
            activity,
        )
        .await
        .map_err(|_| ExchangeError::Broken)?;
        return Ok(Exchange::Done {
            client_reusable: !client_close,
            upstream_reusable: upstream_keep_alive && inbox.is_empty(),
        });
    }
}

/// What an exchange goes on with once the upstream's head is sent on.
struct Answered {
    /// A 1xx other than 101: another head follows.
    interim: bool,
    /// 101 to a request that asked for an upgrade: the connection becomes a
    /// tunnel.
    upgraded: bool,
    /// The client's connection closes after this response.
    client_close: bool,
    /// How the response body is delimited.
    framing: Framing,
    /// The upstream connection may carry another exchange.
    upstream_keep_alive: bool,
    /// Body bytes read with the head, sent on with it.
    buffered: usize,
}

/// Parses the response head at the start of `inbox` (`end` bytes) and
/// writes it, rewritten for the client, into a pooled buffer sized for it
/// and the body bytes read with it. Not async: the head's field slots
/// (4 KiB) live on the thread's stack, never in the connection's task.
fn rewrite_head<'p>(
    inbox: &[u8],
    end: usize,
    request: &Prepared<'_>,
    pools: &'p Pools,
) -> Result<(Answered, Pooled<'p>), ExchangeError> {
    let mut slots = FieldSlots::new();
    let head =
        http_head::parse_response(&inbox[..end], &mut slots, request.method).map_err(|_| ExchangeError::BadResponse)?;
    let interim = (100..200).contains(&head.status) && head.status != 101;
    // A switch the client did not ask for (RFC 9110 15.2.2) would make its
    // next, undecided requests tunnel bytes to this upstream.
    if head.status == 101 && !request.upgrade {
        return Err(ExchangeError::BadResponse);
    }
    let upgraded = head.status == 101;
    let client_close = !request.keep_alive || head.framing == Framing::UntilClose;
    let framing = head.framing;
    // Body bytes already read go out with the head in one write.
    let buffered = match framing {
        Framing::Length(length) if !interim && !upgraded => length.min((inbox.len() - end) as u64) as usize,
        _ => 0,
    };
    let mut out = Pooled::new(pools);
    out.reserve(end + 64 + buffered);
    let connection = if interim || upgraded {
        ConnectionField::Omitted
    } else if client_close {
        ConnectionField::Close
    } else if request.http10 {
        ConnectionField::KeepAlive
    } else {
        ConnectionField::Omitted
    };
    http_head::write_client_response(&head, connection, &mut out);
    let answered = Answered {
        interim,
        upgraded,
        client_close,
        framing,
        // Reused only after an HTTP/1.1 response that keeps the connection:
        // an HTTP/1.0 keep-alive is the older, looser convention.
        upstream_keep_alive: head.keep_alive && head.minor_version == 1,
        buffered,
    };
    Ok((answered, out))
}
