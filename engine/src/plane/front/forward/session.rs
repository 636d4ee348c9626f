//! One client connection of the forward plane, request after request: the
//! keep-alive loop, what each head asks for (a request to forward, a
//! CONNECT tunnel, or an answer), and CONNECT tunnels.
//!
//! Holds no buffer while idle: between requests it waits for readability
//! with an empty inbox, and a CONNECT tunnel keeps neither the head nor
//! its buffer.

use super::head::{head_refusal, HeadRead, Prepared};
use super::{denial, Origin, Session};
use crate::plane::services::conn::Conn;
use crate::plane::services::deadline;
use crate::plane::services::decision::{decide, reach_ruled, Ruling};
use crate::plane::services::pipes::Pooled;
use crate::plane::services::revocation::LiveEntry;
use crate::plane::services::sandboxes::Sandbox;
use crate::plane::services::stats::{ActiveTunnel, Direction, FrontEnd};
use crate::plane::services::worker::Worker;
use crate::protocol::http_head::{self, FieldSlots, Target};
use crate::protocol::responses;
use crackbox_policy::reason::Reason;
use std::rc::Rc;
use std::time::Duration;

/// An idle keep-alive connection is closed after this long.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);

/// What a CONNECT became: all of it but the client connection, which the
/// session owns.
pub(super) enum Opened {
    /// A tunnel, open.
    Tunnel {
        upstream: Conn,
        live: LiveEntry,
        sandbox: Rc<Sandbox>,
        active: ActiveTunnel,
    },
    /// A CONNECT to ask about (ask mode), to be held as a task of its own.
    Held {
        host: String,
        port: u16,
        sandbox: Rc<Sandbox>,
    },
}

/// What a complete request head asks for.
enum Step<'p> {
    /// Forward this request upstream.
    Forward(Prepared<'p>),
    /// Open a CONNECT tunnel to this host and port, as the decision says
    /// (never a denial).
    Tunnel(String, u16, Ruling),
    /// Answer this and close.
    Reply(Vec<u8>),
    /// Answer this denial (written in a vector of the thread's pool) and close.
    Denied(Pooled<'p>),
    /// An origin-form request without `Host`.
    Unnamed,
}

impl<'w> Session<'w> {
    /// Serves requests until the connection closes or becomes a CONNECT
    /// tunnel, which is handed back open.
    pub(super) async fn run(&mut self) -> Option<Opened> {
        let mut first = true;
        loop {
            // Most heads are there in full on the first read: the waits
            // (boxed: see `plane`, on task size) are entered only when not.
            if !first && self.inbox.is_empty() && !Box::pin(self.await_next_request()).await {
                return None;
            }
            first = false;
            let mut scanned = 0;
            let read = match self.read_head_now(&mut scanned) {
                Some(read) => read,
                None => Box::pin(self.wait_for_head(scanned)).await,
            };
            let head_len = match read {
                HeadRead::Complete(len) => len,
                HeadRead::Closed => return None,
                HeadRead::Refuse(status, message) => {
                    self.reply(&responses::error(status, message)).await;
                    return None;
                }
            };
            // Decided before any await, so an idle tunnel's task does not
            // keep the parsed head.
            match self.next_step(head_len) {
                // Boxed: see `plane`, on the blocks a connection allocates.
                Step::Tunnel(host, port, ruling) => return Box::pin(self.tunnel(host, port, ruling)).await,
                Step::Reply(response) => {
                    self.reply(&response).await;
                    return None;
                }
                Step::Denied(response) => {
                    self.reply(&response).await;
                    return None;
                }
                Step::Unnamed => {
                    self.refuse_unnamed().await;
                    return None;
                }
                // Boxed: the HTTP exchange state is large and would otherwise be
                // paid for by every connection, idle CONNECT tunnels included.
                Step::Forward(prepared) => {
                    if !Box::pin(self.forward(prepared)).await {
                        return None;
                    }
                }
            }
        }
    }

    /// What the complete head at the start of the inbox asks for; a request
    /// to forward or tunnel is taken out of the inbox.
    fn next_step(&mut self, head_len: usize) -> Step<'w> {
        let mut slots = FieldSlots::new();
        let head = match http_head::parse_request(&self.inbox[..head_len], &mut slots) {
            Ok(head) => head,
            Err(err) => return Step::Reply(head_refusal(err)),
        };
        let step = match head.target {
            Target::Origin { .. } if self.origin.is_some() => {
                let (Some(origin), Some(field)) = (self.origin, head.host_field.filter(|f| !f.trim_ascii().is_empty()))
                else {
                    return Step::Unnamed;
                };
                let Some(host) = http_head::host_without_port(field) else {
                    return Step::Reply(responses::error(400, "invalid Host header"));
                };
                Step::Forward(Prepared::new(&head, host, origin.port, &self.worker.pools))
            }
            _ if self.origin.is_some() => return Step::Reply(responses::error(400, "only origin-form requests here")),
            Target::Origin { .. } => {
                let message = "crackbox is a forward proxy: request absolute http:// URLs or use CONNECT";
                return Step::Reply(responses::error(400, message));
            }
            // Decided while the head is still in the inbox: a denial is
            // answered from it, and only a name let through is copied out.
            Target::Connect { host, .. } if Self::refuse_invalid_host(host) => {
                return Step::Reply(responses::error(400, "invalid host in CONNECT"));
            }
            Target::Connect { host, port } => match decide(self.worker, self.source, host, port) {
                Ruling::Deny { reason } => return Step::Denied(denial(&self.worker.pools, reason, host, port)),
                ruling => Step::Tunnel(host.to_owned(), port, ruling),
            },
            Target::Absolute { host, port, .. } => Step::Forward(Prepared::new(&head, host, port, &self.worker.pools)),
        };
        self.inbox.drain(..head_len);
        step
    }

    /// Waits, holding no buffer, for the next request on an idle keep-alive
    /// connection: whether it is readable within the idle timeout. A
    /// revocation of the last destination closes it (docs/architecture.md, "Data path of a connection": revocation).
    async fn await_next_request(&mut self) -> bool {
        self.inbox.release();
        let revoked = self.live.as_ref().map(LiveEntry::revocation).unwrap_or_default();
        let readable = deadline::within(KEEPALIVE_IDLE, self.client.readable());
        monoio::select! {
            ready = readable => matches!(ready, Ok(Ok(()))),
            _ = revoked.wait() => false,
        }
    }

    /// An origin-form request without `Host`: denied as a name that is on
    /// no allowlist (counted); steered, the denial is answered, redirected,
    /// the connection is closed without a word, as TLS without SNI is.
    async fn refuse_unnamed(&self) {
        let Some(Origin { port, steered }) = self.origin else {
            return;
        };
        if let (Ruling::Deny { reason }, true) = (decide(self.worker, self.source, "", port), steered) {
            self.reply(&responses::denial(reason, "", port)).await;
        }
    }

    /// CONNECT as decided (`ruling`): dial, answer 200, replay early bytes;
    /// the tunnel, once open, is handed back to run. A name to ask about is
    /// handed back to be held (see `held`), not held here: the session's
    /// task ends.
    async fn tunnel(&mut self, host: String, port: u16, ruling: Ruling) -> Option<Opened> {
        let ruling = match ruling {
            Ruling::Ask { sandbox } => return Some(Opened::Held { host, port, sandbox }),
            ruling => ruling,
        };
        let reached = reach_ruled(self.worker, self.asker("connect"), &host, port, ruling).await;
        let (upstream, live, sandbox) = match reached {
            Ok(reached) => reached,
            Err(why) => {
                self.reply_unreachable(&host, port, why).await;
                return None;
            }
        };
        // Bytes sent early by the client go on first; the head buffer goes
        // back to the pool with the session: an idle tunnel holds none.
        let active = establish(
            self.worker,
            &self.client,
            (&host, port),
            (&upstream, &live, &sandbox),
            &self.inbox,
        )
        .await?;
        Some(Opened::Tunnel {
            upstream,
            live,
            sandbox,
            active,
        })
    }
}

/// A CONNECT whose upstream is connected: refused if it was revoked
/// meanwhile; else counted, answered 200 and the client's `early` bytes
/// sent on. The tunnel's count as active, once it is open.
pub(super) async fn establish(
    worker: &Worker,
    client: &Conn,
    (host, port): (&str, u16),
    (upstream, live, sandbox): (&Conn, &LiveEntry, &Sandbox),
    early: &[u8],
) -> Option<ActiveTunnel> {
    if live.signal().is_fired() {
        let _ = client.write_last(&responses::denial(Reason::Revoked, host, port)).await;
        return None;
    }
    // Counted before the client hears 200, so a client that reads the
    // usage after its reply finds its tunnel there.
    sandbox.account.add_tunnel(worker.thread);
    worker.stats.count_tunnel(FrontEnd::Connect);
    let active = worker.stats.open_tunnel();
    if client
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return None;
    }
    if worker
        .meter(&sandbox.account)
        .send(upstream, early, Direction::Up)
        .await
        .is_err()
    {
        return None;
    }
    Some(active)
}
