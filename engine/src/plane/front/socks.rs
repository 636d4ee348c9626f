//! The SOCKS5 front end (RFC 1928 `CONNECT`): the handshake on the wire,
//! then the same decision and the same zero-copy tunnel as an HTTP
//! `CONNECT` (handed back open, as `forward` hands back its own).
//!
//! Owns only the wire format: reading the handshake (parsed by
//! `protocol::socks5`) within [`HANDSHAKE_TIMEOUT`], and mapping what
//! `decision` says to a reply code. The target is decided by
//! [`reach_tracked`] exactly as a `CONNECT` line naming it would be (names
//! resolved by crackbox, address types matching only IP-literal entries),
//! so caps, fairness, revocation, idle timeout, denial records and
//! counters are the same. Never decides, resolves or copies bytes itself.

use crate::plane::services::conn::Conn;
use crate::plane::services::deadline;
use crate::plane::services::decision::{reach_tracked, Client, Unreached};
use crate::plane::services::handoff::Handoff;
use crate::plane::services::resolve::DialError;
use crate::plane::services::stats::{Direction, FrontEnd};
use crate::plane::services::worker::Worker;
use crate::protocol::socks5::{Handshake, Progress, Refusal, Reply};
use crackbox_policy::is_valid_host;
use std::future::Future;
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;

/// The whole handshake must be in within this long: the forward plane's
/// request-head timeout.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read at a time during the handshake (no message is longer than
/// 513 bytes).
const READ_SIZE: usize = 1024;

/// A complete `CONNECT` request: where to, the bytes the client sent
/// after it, and the answers not sent yet.
struct Request {
    host: String,
    port: u16,
    early: Vec<u8>,
    outbox: Outbox,
}

/// How a handshake ended without a request to serve.
enum Ended {
    /// Send these answers, the last one refusing, and close.
    Refused(Outbox),
    /// Close without a word (malformed, gone, or too slow).
    Closed,
}

/// Answers held back until the handshake must wait for the client: one
/// that sent its greeting and request together gets every answer and the
/// reply in one segment, the messages of an HTTP `CONNECT`.
#[derive(Default)]
struct Outbox {
    bytes: [u8; Outbox::CAPACITY],
    len: usize,
}

impl Outbox {
    /// A method and an authentication answer (2 bytes each) and a reply (10).
    const CAPACITY: usize = 14;

    /// Appends `bytes` (the handshake never holds more than [`Self::CAPACITY`]).
    fn push(&mut self, bytes: &[u8]) {
        let end = (self.len + bytes.len()).min(Self::CAPACITY);
        self.bytes[self.len..end].copy_from_slice(&bytes[..end - self.len]);
        self.len = end;
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Sends what is held, if anything.
    async fn flush(&mut self, client: &Conn) -> std::io::Result<()> {
        if self.len > 0 {
            client.write_all(self.as_slice()).await?;
            self.len = 0;
        }
        Ok(())
    }

    /// Sends what is held and `refusal` as the connection's last bytes.
    async fn refuse(mut self, client: &Conn, refusal: Refusal) {
        self.push(&refusal.bytes());
        let _ = client.write_last(self.as_slice()).await;
    }
}

/// Serves one SOCKS5 client until its tunnel is open, handed back to run
/// (not an `async fn`: see `plane`, on task size).
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
pub(crate) fn serve<'w>(
    worker: &'w Rc<Worker>,
    client: Conn,
    source: IpAddr,
) -> impl Future<Output = Option<Handoff>> + 'w {
    async move {
        // Boxed: the handshake's buffer and timer are needed only until the
        // request is in.
        let request = match Box::pin(handshake(&client, source)).await {
            Ok(request) => request,
            Err(Ended::Refused(outbox)) => {
                let _ = client.write_last(outbox.as_slice()).await;
                return None;
            }
            Err(Ended::Closed) => return None,
        };
        let Request {
            host,
            port,
            early,
            mut outbox,
        } = request;
        if !is_valid_host(&host) {
            tracing::debug!(%source, host = %host.escape_debug(), "socks5: invalid host name");
            outbox.refuse(&client, Refusal::Reply(Reply::GeneralFailure)).await;
            return None;
        }
        let asker = Client {
            source,
            conn: &client,
            front_end: "socks5",
        };
        let (upstream, live, sandbox) = match reach_tracked(worker, asker, &host, port).await {
            Ok(reached) => reached,
            Err(why) => {
                outbox.refuse(&client, Refusal::Reply(reply_for(why))).await;
                return None;
            }
        };
        drop(host);
        if live.signal().is_fired() {
            outbox.refuse(&client, Refusal::Reply(Reply::NotAllowed)).await;
            return None;
        }
        // Counted before the client hears success, so a client that reads
        // the usage after its reply finds its tunnel there.
        sandbox.account.add_tunnel(worker.thread);
        worker.stats.count_tunnel(FrontEnd::Socks5);
        let active = worker.stats.open_tunnel();
        outbox.push(&Reply::Succeeded.bytes());
        if outbox.flush(&client).await.is_err() {
            return None;
        }
        // Bytes sent early by the client go on first, and their buffer goes:
        // an idle tunnel holds none.
        if worker
            .meter(&sandbox.account)
            .send(&upstream, &early, Direction::Up)
            .await
            .is_err()
        {
            return None;
        }
        drop(early);
        Some(Handoff {
            client,
            upstream,
            live,
            sandbox,
            active,
        })
    }
}

/// The reply for a target that was not connected to: any denial is "not
/// allowed by ruleset"; a private address is a denial too.
fn reply_for(why: Unreached) -> Reply {
    match why {
        Unreached::Denied(_) | Unreached::Failed(DialError::Private) => Reply::NotAllowed,
        Unreached::Failed(DialError::Dns) => Reply::HostUnreachable,
        Unreached::Failed(DialError::LookupsBusy) => Reply::GeneralFailure,
        Unreached::Failed(DialError::Unreachable) => Reply::ConnectionRefused,
        Unreached::Failed(DialError::Timeout) => Reply::TimedOut,
    }
}

/// Reads the handshake, answering each message, until the request is in;
/// all within [`HANDSHAKE_TIMEOUT`].
async fn handshake(client: &Conn, source: IpAddr) -> Result<Request, Ended> {
    match deadline::within(HANDSHAKE_TIMEOUT, negotiate(client, source)).await {
        Ok(ended) => ended,
        Err(_) => {
            tracing::debug!(%source, "socks5: handshake not complete within 10 s, closed");
            Err(Ended::Closed)
        }
    }
}

async fn negotiate(client: &Conn, source: IpAddr) -> Result<Request, Ended> {
    let mut handshake = Handshake::default();
    let mut inbox = Vec::new();
    let mut outbox = Outbox::default();
    // The greeting may be there on accept; every later message follows an
    // answer or a read that took all there was, so it is waited for first.
    let mut fresh = true;
    loop {
        match handshake.advance(&inbox) {
            Progress::NeedMore => {
                outbox.flush(client).await.map_err(|_| Ended::Closed)?;
                if !fresh {
                    client.readable().await.map_err(|_| Ended::Closed)?;
                }
                fresh = false;
                match client.read_into(&mut inbox, READ_SIZE).await {
                    Ok(n) if n > 0 => {}
                    _ => return Err(Ended::Closed),
                }
            }
            Progress::Answer { answer, used } => {
                inbox.drain(..used);
                outbox.push(&answer);
                fresh = false;
            }
            Progress::Connect { host, port, used } => {
                return Ok(Request {
                    host: host.to_connect_host(),
                    port,
                    early: inbox.split_off(used),
                    outbox,
                })
            }
            Progress::Refuse { answer } => {
                outbox.push(&answer.bytes());
                return Err(Ended::Refused(outbox));
            }
            Progress::Malformed(why) => {
                tracing::debug!(%source, why, "socks5: malformed handshake, closed");
                return Err(Ended::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_policy::reason::Reason;

    #[test]
    fn each_way_of_not_reaching_a_target_has_its_reply_code() {
        let cases = [
            (Unreached::Denied(Reason::NotAllowed), 0x02),
            (Unreached::Denied(Reason::Unregistered), 0x02),
            (Unreached::Denied(Reason::PrivateAddress), 0x02),
            (Unreached::Denied(Reason::Revoked), 0x02),
            (Unreached::Denied(Reason::InvalidLabel), 0x02),
            (Unreached::Failed(DialError::Private), 0x02),
            (Unreached::Failed(DialError::Dns), 0x04),
            (Unreached::Failed(DialError::LookupsBusy), 0x01),
            (Unreached::Failed(DialError::Unreachable), 0x05),
            (Unreached::Failed(DialError::Timeout), 0x06),
        ];
        for (why, code) in cases {
            assert_eq!(reply_for(why).code(), code);
        }
    }
}
