//! One client connection of the forward plane, request after request: the
//! keep-alive loop, what each head asks for (a request to forward, a
//! CONNECT tunnel, or an answer), and CONNECT tunnels.
//!
//! Holds no buffer while idle: between requests it waits for readability
//! with an empty inbox, and a CONNECT tunnel keeps neither the head nor
//! its buffer.

use super::head::{head_refusal, HeadRead, Prepared};
use super::{Origin, Session};
use crate::plane::services::conn::Conn;
use crate::plane::services::decision::{decide, reach_tracked};
use crate::plane::services::revocation::LiveEntry;
use crate::plane::services::stats::{ActiveTunnel, Direction, FrontEnd};
use crate::protocol::http_head::{self, Target};
use crate::protocol::responses;
use crackbox_policy::reason::Reason;
use crackbox_policy::usage::Account;
use crackbox_policy::Verdict;
use std::sync::Arc;
use std::time::Duration;

/// An idle keep-alive connection is closed after this long.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);

/// A CONNECT tunnel the session opened: all of it but the client
/// connection, which the session owns.
pub(super) struct Opened {
    pub(super) upstream: Conn,
    pub(super) live: LiveEntry,
    pub(super) account: Arc<Account>,
    pub(super) active: ActiveTunnel,
}

/// What a complete request head asks for.
enum Step {
    /// Forward this request upstream.
    Forward(Prepared),
    /// Open a CONNECT tunnel to this host and port.
    Tunnel(String, u16),
    /// Answer this and close.
    Reply(Vec<u8>),
    /// An origin-form request without `Host`.
    Unnamed,
}

impl Session<'_> {
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
                Step::Tunnel(host, port) => return self.tunnel(host, port).await,
                Step::Reply(response) => {
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
    fn next_step(&mut self, head_len: usize) -> Step {
        let head = match http_head::parse_request(&self.inbox[..head_len]) {
            Ok(head) => head,
            Err(err) => return Step::Reply(head_refusal(err)),
        };
        let step = match head.target {
            Target::Origin { .. } if self.origin.is_some() => {
                let (Some(origin), Some(host)) = (self.origin, head.host_field.and_then(http_head::host_without_port))
                else {
                    return Step::Unnamed;
                };
                Step::Forward(Prepared::new(&head, host, origin.port))
            }
            _ if self.origin.is_some() => return Step::Reply(responses::error(400, "only origin-form requests here")),
            Target::Origin { .. } => {
                let message = "crackbox is a forward proxy: request absolute http:// URLs or use CONNECT";
                return Step::Reply(responses::error(400, message));
            }
            Target::Connect { host, port } => Step::Tunnel(host.to_owned(), port),
            Target::Absolute { host, port, .. } => Step::Forward(Prepared::new(&head, host, port)),
        };
        self.inbox.drain(..head_len);
        step
    }

    /// Waits, holding no buffer, for the next request on an idle keep-alive
    /// connection: whether it is readable within the idle timeout. A
    /// revocation of the last destination closes it (docs/architecture.md, "Data path of a connection": revocation).
    async fn await_next_request(&mut self) -> bool {
        self.inbox = Vec::new();
        let revoked = self.live.as_ref().map(LiveEntry::revocation).unwrap_or_default();
        let readable = monoio::time::timeout(KEEPALIVE_IDLE, self.client.readable());
        monoio::select! {
            ready = readable => matches!(ready, Ok(Ok(()))),
            _ = revoked.wait() => false,
        }
    }

    /// An origin-form request without `Host`: closed when redirected;
    /// steered, denied as a name that is on no allowlist (counted).
    async fn refuse_unnamed(&self) {
        let Some(Origin { port, steered: true }) = self.origin else {
            return;
        };
        if let Verdict::Deny { reason, .. } = decide(self.worker, self.source, "", port) {
            self.reply(&responses::denial(reason, "", port)).await;
        }
    }

    /// CONNECT: decide, dial, answer 200, replay early bytes; the tunnel,
    /// once open, is handed back to run.
    async fn tunnel(&mut self, host: String, port: u16) -> Option<Opened> {
        if Self::refuse_invalid_host(&host) {
            self.reply(&responses::error(400, "invalid host in CONNECT")).await;
            return None;
        }
        let (upstream, live, account) = match reach_tracked(self.worker, self.asker("connect"), &host, port).await {
            Ok(reached) => reached,
            Err(why) => {
                self.reply_unreachable(&host, port, why).await;
                return None;
            }
        };
        if live.signal().is_fired() {
            self.reply(&responses::denial(Reason::Revoked, &host, port)).await;
            return None;
        }
        // Counted before the client hears 200, so a client that reads the
        // usage after its reply finds its tunnel there.
        account.add_tunnel(self.worker.thread);
        self.worker.stats.count_tunnel(FrontEnd::Connect);
        let active = self.worker.stats.open_tunnel();
        if self
            .client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_err()
        {
            return None;
        }
        // The head buffer goes (bytes sent early by the client go on first):
        // an idle tunnel holds no buffer, not even an empty one's capacity.
        let early = std::mem::take(&mut self.inbox);
        if self
            .worker
            .meter(&account)
            .send(&upstream, &early, Direction::Up)
            .await
            .is_err()
        {
            return None;
        }
        Some(Opened {
            upstream,
            live,
            account,
            active,
        })
    }
}
