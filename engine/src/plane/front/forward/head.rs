//! Request heads: reading one (most arrive whole with the first read, taken
//! without waiting; the rest are awaited within [`HEAD_TIMEOUT`], and none
//! may exceed `MAX_HEAD`), and the request as it goes upstream
//! ([`Prepared`]). Parsing and rewriting are `protocol::http_head`'s.

use super::Session;
use super::READ_CHUNK;
use crate::plane::services::deadline::until;
use crate::plane::services::pipes::{Pooled, Pools};
use crate::protocol::http_head::{self, Framing, HeadError, MAX_HEAD};
use crate::protocol::responses;
use std::time::{Duration, Instant};

/// The first read of a request head: enough for almost every head, small
/// enough that many connections opening at once do not bloat the heap.
pub(super) const FIRST_READ: usize = 1024;
/// A request head must arrive within this long of its first byte.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A request ready to send upstream; owns everything it needs (its head
/// rewritten in a vector of the thread's pool).
pub(super) struct Prepared<'p> {
    /// `HEAD` for a HEAD request (whose response has no body), else empty:
    /// all the response's parsing needs of the method.
    pub(super) method: &'static str,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) upstream_head: Pooled<'p>,
    pub(super) framing: Framing,
    pub(super) keep_alive: bool,
    /// The client asked for a protocol upgrade: only then may a 101 turn
    /// the connection into a tunnel.
    pub(super) upgrade: bool,
    /// An HTTP/1.0 client, which keeps its connection only when told so.
    pub(super) http10: bool,
}

impl<'p> Prepared<'p> {
    /// The request to send `host:port`, rewritten for the upstream.
    pub(super) fn new(head: &http_head::RequestHead<'_>, host: &str, port: u16, pools: &'p Pools) -> Self {
        let mut upstream_head = Pooled::new(pools);
        upstream_head.reserve(head.head_len + 32);
        http_head::write_upstream_request(head, &mut upstream_head);
        Prepared {
            method: if head.method == "HEAD" { "HEAD" } else { "" },
            host: host.to_owned(),
            port,
            upstream_head,
            framing: head.framing,
            keep_alive: head.keep_alive,
            upgrade: head.upgrade,
            http10: head.minor_version == 0,
        }
    }
}

/// What the head reader found.
pub(super) enum HeadRead {
    /// A complete head of this many bytes is at the start of the inbox.
    Complete(usize),
    /// The client went away or idled out: close quietly.
    Closed,
    /// Answer this status and close.
    Refuse(u16, &'static str),
}

/// The answer to a request head that could not be parsed.
pub(super) fn head_refusal(err: HeadError) -> Vec<u8> {
    let message = match err {
        HeadError::TooLarge => "request head larger than 64 KiB",
        HeadError::TooManyHeaders => "more than 128 header fields",
        HeadError::Malformed(why) => why,
    };
    responses::error(err.status(), message)
}

impl Session<'_> {
    /// Reads what has arrived until the inbox holds a complete head; `None`
    /// when more must be waited for. `scanned`: inbox bytes already
    /// searched for the head's end.
    pub(super) fn read_head_now(&mut self, scanned: &mut usize) -> Option<HeadRead> {
        loop {
            if let Some(end) = http_head::head_end(&self.inbox, *scanned) {
                return Some(HeadRead::Complete(end));
            }
            if self.inbox.len() >= MAX_HEAD {
                return Some(HeadRead::Refuse(431, "request head larger than 64 KiB"));
            }
            *scanned = self.inbox.len();
            let want = self.head_read_size();
            match self.client.try_read_into(self.inbox.fill(), want) {
                Ok(Some(n)) if n > 0 => {}
                Ok(None) => return None,
                Ok(Some(_)) | Err(_) => return Some(HeadRead::Closed),
            }
        }
    }

    /// Waits for the rest of a head that [`Session::read_head_now`] could
    /// not complete, within [`HEAD_TIMEOUT`] of the first wait.
    pub(super) async fn wait_for_head(&mut self, mut scanned: usize) -> HeadRead {
        let deadline = Instant::now() + HEAD_TIMEOUT;
        loop {
            let want = self.head_read_size();
            match until(deadline, self.client.read_into(self.inbox.fill(), want)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => return HeadRead::Closed,
                Err(_) if self.inbox.is_empty() => return HeadRead::Closed,
                Err(_) => return HeadRead::Refuse(408, "request head not received within 10 s"),
            }
            if let Some(read) = self.read_head_now(&mut scanned) {
                return read;
            }
        }
    }

    /// How much to read next: most heads fit in the first small read; grow
    /// only for big ones, never far past [`MAX_HEAD`].
    fn head_read_size(&self) -> usize {
        let chunk = if self.inbox.is_empty() { FIRST_READ } else { READ_CHUNK };
        chunk.min(MAX_HEAD + 4 - self.inbox.len())
    }
}
