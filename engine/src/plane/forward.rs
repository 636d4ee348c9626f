//! Forward mode: HTTP absolute-form requests and CONNECT tunnels.
//!
//! Every request on a keep-alive connection is decided anew. Request and
//! response bodies are streamed (never buffered whole) with their framing
//! kept as received; hop-by-hop fields are dropped; redirects are passed to
//! the client, never followed. An upstream connection is reused only for
//! the same host and port on the same client connection. Each request and
//! tunnel is counted to the account of the registration that allowed it,
//! and its bytes held to that registration's cap.

use crate::plane::conn::Conn;
use crate::plane::decision::{decide, reach, reach_tracked, reuse, Client, Decision, Unreached};
use crate::plane::resolve::DialError;
use crate::plane::revocation::LiveEntry;
use crate::plane::stats::{Direction, FrontEnd};
use crate::plane::throttle;
use crate::plane::tunnel::{self, CloseSignal, Plumbing, Start};
use crate::plane::worker::Worker;
use crate::protocol::chunked::ChunkedBody;
use crate::protocol::http_head::{self, Framing, HeadError, Target, MAX_HEAD};
use crate::protocol::responses;
use crackbox_policy::is_valid_host;
use crackbox_policy::reason::Reason;
use crackbox_policy::usage::Account;
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Bytes read from a socket at a time while reading heads and chunked bodies.
const READ_CHUNK: usize = 16 * 1024;
/// The first read of a request head: enough for almost every head, small
/// enough that many connections opening at once do not bloat the heap.
const FIRST_READ: usize = 1024;
/// A request head must arrive within this long of its first byte.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle keep-alive connection is closed after this long.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
/// Without a tunnel idle timeout, still give up on a silent upstream after this.
const RESPONSE_TIMEOUT_FALLBACK: Duration = Duration::from_secs(3600);

/// Serves one client connection of the forward listener to the end. The
/// session, built first and moved into the future, is the connection's only
/// copy in the task (see `plane`, on task size).
pub(crate) fn serve<'w>(worker: &'w Rc<Worker>, client: Conn, source: IpAddr) -> impl Future<Output = ()> + 'w {
    let mut session = Session::new(worker, client, source, None);
    async move { session.run().await }
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
/// origin-form requests, each decided by its `Host` (without port).
pub(crate) fn serve_origin<'w>(
    worker: &'w Rc<Worker>,
    client: Conn,
    source: IpAddr,
    origin: Origin,
) -> impl Future<Output = ()> + 'w {
    let mut session = Session::new(worker, client, source, Some(origin));
    async move { session.run().await }
}

/// A request ready to send upstream; owns everything it needs.
struct Prepared {
    method: String,
    host: String,
    port: u16,
    upstream_head: Vec<u8>,
    framing: Framing,
    keep_alive: bool,
}

impl Prepared {
    /// The request to send `host:port`, rewritten for the upstream.
    fn new(head: &http_head::RequestHead<'_>, host: &str, port: u16) -> Self {
        let mut upstream_head = Vec::with_capacity(head.head_len + 32);
        http_head::write_upstream_request(head, &mut upstream_head);
        Prepared {
            method: head.method.to_owned(),
            host: host.to_owned(),
            port,
            upstream_head,
            framing: head.framing,
            keep_alive: head.keep_alive,
        }
    }
}

/// An upstream connection kept for the next request to the same place.
struct Upstream {
    host: String,
    port: u16,
    conn: Conn,
}

/// What happened to one request/response exchange.
enum Exchange {
    /// Complete; whether each side may carry another exchange.
    Done {
        client_reusable: bool,
        upstream_reusable: bool,
    },
    /// 101 Switching Protocols: the connection is now a tunnel.
    Upgraded,
}

/// Why an exchange failed.
enum ExchangeError {
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

/// Why streaming a request body stopped.
enum BodyError {
    /// Malformed chunked framing.
    Malformed,
    /// The client went away or a socket failed.
    Io,
}

impl From<io::Error> for BodyError {
    fn from(_: io::Error) -> Self {
        BodyError::Io
    }
}

/// What the head reader found.
enum HeadRead {
    /// A complete head of this many bytes is at the start of the inbox.
    Complete(usize),
    /// The client went away or idled out: close quietly.
    Closed,
    /// Answer this status and close.
    Refuse(u16, &'static str),
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

/// The answer to a request head that could not be parsed.
fn head_refusal(err: HeadError) -> Vec<u8> {
    let message = match err {
        HeadError::TooLarge => "request head larger than 64 KiB",
        HeadError::TooManyHeaders => "more than 128 header fields",
        HeadError::Malformed(why) => why,
    };
    responses::error(err.status(), message)
}

struct Session<'w> {
    worker: &'w Rc<Worker>,
    client: Conn,
    source: IpAddr,
    /// Bytes read from the client and not yet consumed.
    inbox: Vec<u8>,
    upstream: Option<Upstream>,
    live: Option<LiveEntry>,
    /// Transparent or steered port 80: requests are origin-form.
    origin: Option<Origin>,
}

impl<'w> Session<'w> {
    fn new(worker: &'w Rc<Worker>, client: Conn, source: IpAddr, origin: Option<Origin>) -> Self {
        Session {
            worker,
            client,
            source,
            inbox: Vec::new(),
            upstream: None,
            live: None,
            origin,
        }
    }

    async fn run(&mut self) {
        let mut first = true;
        loop {
            // Most heads are there in full on the first read: the waits
            // (boxed: see `plane`, on task size) are entered only when not.
            if !first && self.inbox.is_empty() && !Box::pin(self.await_next_request()).await {
                return;
            }
            first = false;
            let mut scanned = 0;
            let read = match self.read_head_now(&mut scanned) {
                Some(read) => read,
                None => Box::pin(self.wait_for_head(scanned)).await,
            };
            let head_len = match read {
                HeadRead::Complete(len) => len,
                HeadRead::Closed => return,
                HeadRead::Refuse(status, message) => return self.reply(&responses::error(status, message)).await,
            };
            // Decided before any await, so an idle tunnel's task does not
            // keep the parsed head.
            match self.next_step(head_len) {
                Step::Tunnel(host, port) => return self.tunnel(host, port).await,
                Step::Reply(response) => return self.reply(&response).await,
                Step::Unnamed => return self.refuse_unnamed().await,
                // Boxed: the HTTP exchange state is large and would otherwise be
                // paid for by every connection, idle CONNECT tunnels included.
                Step::Forward(prepared) => {
                    if !Box::pin(self.forward(prepared)).await {
                        return;
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
                let (Some(origin), Some(host)) = (
                    self.origin,
                    head.host_field.and_then(crate::protocol::http_head::host_without_port),
                ) else {
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

    /// Reads what has arrived until the inbox holds a complete head; `None`
    /// when more must be waited for. `scanned`: inbox bytes already
    /// searched for the head's end.
    fn read_head_now(&mut self, scanned: &mut usize) -> Option<HeadRead> {
        loop {
            if let Some(end) = http_head::head_end(&self.inbox, *scanned) {
                return Some(HeadRead::Complete(end));
            }
            if self.inbox.len() >= MAX_HEAD {
                return Some(HeadRead::Refuse(431, "request head larger than 64 KiB"));
            }
            *scanned = self.inbox.len();
            let want = self.head_read_size();
            match self.client.try_read_into(&mut self.inbox, want) {
                Ok(Some(n)) if n > 0 => {}
                Ok(None) => return None,
                Ok(Some(_)) | Err(_) => return Some(HeadRead::Closed),
            }
        }
    }

    /// Waits for the rest of a head that [`Session::read_head_now`] could
    /// not complete, within [`HEAD_TIMEOUT`] of the first wait.
    async fn wait_for_head(&mut self, mut scanned: usize) -> HeadRead {
        let deadline = Instant::now() + HEAD_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let want = self.head_read_size();
            match monoio::time::timeout(left, self.client.read_into(&mut self.inbox, want)).await {
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

    /// An origin-form request without `Host`: closed when redirected;
    /// steered, denied as a name that is on no allowlist (counted).
    async fn refuse_unnamed(&self) {
        let Some(Origin { port, steered: true }) = self.origin else {
            return;
        };
        if let Decision::Deny { reason, .. } = decide(self.worker, self.source, "", port) {
            self.reply(&responses::denial(reason, "", port)).await;
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
        let response = match why {
            Unreached::Denied(reason) => responses::denial(reason, host, port),
            Unreached::Failed(DialError::Dns) => responses::error(502, &format!("could not resolve {host}")),
            Unreached::Failed(DialError::Timeout) => {
                responses::error(504, &format!("timed out connecting to {host}:{port}"))
            }
            Unreached::Failed(DialError::Private | DialError::Unreachable) => {
                responses::error(502, &format!("could not connect to {host}:{port}"))
            }
        };
        self.reply(&response).await;
    }

    fn refuse_invalid_host(host: &str) -> bool {
        !is_valid_host(host)
    }

    /// CONNECT: decide, dial, answer 200, replay early bytes, then tunnel.
    async fn tunnel(&mut self, host: String, port: u16) {
        if Self::refuse_invalid_host(&host) {
            return self.reply(&responses::error(400, "invalid host in CONNECT")).await;
        }
        let (upstream, live, account) = match reach_tracked(self.worker, self.asker("connect"), &host, port).await {
            Ok(reached) => reached,
            Err(why) => return self.reply_unreachable(&host, port, why).await,
        };
        if live.signal().is_fired() {
            return self.reply(&responses::denial(Reason::Revoked, &host, port)).await;
        }
        // Counted before the client hears 200, so a client that reads the
        // usage after its reply finds its tunnel there.
        account.add_tunnel(self.worker.thread);
        self.worker.stats.count_tunnel(FrontEnd::Connect);
        let _active = self.worker.stats.open_tunnel();
        if self
            .client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        // The head buffer goes (bytes sent early by the client go on first):
        // an idle tunnel holds no buffer, not even an empty one's capacity.
        let early = std::mem::take(&mut self.inbox);
        if !early.is_empty() {
            if upstream.write_all(&early).await.is_err() {
                return;
            }
            self.worker.plumbing(&account).charged(Direction::Up, early.len());
        }
        drop(early);
        tunnel::run(self.worker.plumbing(&account), &self.client, &upstream, live.signal()).await;
    }

    /// One absolute-form request; returns whether the client connection
    /// may carry another request.
    async fn forward(&mut self, request: Prepared) -> bool {
        if Self::refuse_invalid_host(&request.host) {
            self.reply(&responses::error(400, "invalid host in URL")).await;
            return false;
        }
        // In the live set before the decision, so a snapshot that arrives
        // while the dial is in flight still revokes this request.
        match &self.live {
            Some(live) => live.retarget(&request.host, request.port),
            None => {
                self.live = Some(LiveEntry::register(
                    &self.worker.live,
                    self.source,
                    &request.host,
                    request.port,
                ))
            }
        }
        let reused = self
            .upstream
            .take()
            .filter(|u| u.port == request.port && u.host == request.host);
        let (conn, account, was_reused) = match reused {
            Some(upstream) => match reuse(
                self.worker,
                self.asker(self.requests_front_end()),
                &request.host,
                request.port,
            )
            .await
            {
                Ok(account) => (upstream.conn, account, true),
                Err(reason) => {
                    self.reply(&responses::denial(reason, &request.host, request.port))
                        .await;
                    return false;
                }
            },
            None => match reach(
                self.worker,
                self.asker(self.requests_front_end()),
                &request.host,
                request.port,
            )
            .await
            {
                Ok((conn, account)) => (conn, account, false),
                Err(why) => {
                    self.reply_unreachable(&request.host, request.port, why).await;
                    return false;
                }
            },
        };
        if self.live.as_ref().is_some_and(|live| live.signal().is_fired()) {
            self.reply(&responses::denial(Reason::Revoked, &request.host, request.port))
                .await;
            return false;
        }
        account.add_request(self.worker.thread);
        let (mut conn, mut account) = (conn, account);
        let mut outcome = self.exchange_watched(&conn, &request, &account).await;
        if was_reused && matches!(outcome, Err(ExchangeError::NoResponse)) && request.framing == Framing::Empty {
            (conn, account) = match reach(
                self.worker,
                self.asker(self.requests_front_end()),
                &request.host,
                request.port,
            )
            .await
            {
                Ok(reached) => reached,
                Err(why) => {
                    self.reply_unreachable(&request.host, request.port, why).await;
                    return false;
                }
            };
            outcome = self.exchange_watched(&conn, &request, &account).await;
        }
        match outcome {
            Ok(Exchange::Done {
                client_reusable,
                upstream_reusable,
            }) => {
                if upstream_reusable && client_reusable {
                    self.upstream = Some(Upstream {
                        host: request.host,
                        port: request.port,
                        conn,
                    });
                }
                client_reusable
            }
            Ok(Exchange::Upgraded) => {
                let early = std::mem::take(&mut self.inbox);
                let sent = conn.write_all(&early).await.is_ok();
                drop(early);
                if sent {
                    let signal = self.live.as_ref().map(LiveEntry::revocation).unwrap_or_default();
                    tunnel::run(self.worker.plumbing(&account), &self.client, &conn, &signal).await;
                }
                false
            }
            Err(ExchangeError::NoResponse | ExchangeError::BadResponse) => {
                self.reply(&responses::error(502, "the upstream server sent no valid response"))
                    .await;
                false
            }
            Err(ExchangeError::MalformedBody) => {
                self.reply(&responses::error(400, "malformed chunked request body"))
                    .await;
                false
            }
            Err(ExchangeError::Broken) => false,
        }
    }

    /// [`Session::exchange`], cut short if the connection is revoked.
    async fn exchange_watched(
        &mut self,
        upstream: &Conn,
        request: &Prepared,
        account: &Account,
    ) -> Result<Exchange, ExchangeError> {
        let signal = self.live.as_ref().map(LiveEntry::revocation);
        let _active = self.worker.stats.open_tunnel();
        let exchange = self.exchange(upstream, request, account);
        match signal {
            None => exchange.await,
            Some(signal) => {
                monoio::select! {
                    outcome = exchange => outcome,
                    _ = signal.wait() => Err(ExchangeError::Broken),
                }
            }
        }
    }

    /// Sends the request (head + streamed body) and relays the response,
    /// concurrently, so `Expect: 100-continue` and early responses work.
    async fn exchange(
        &mut self,
        upstream: &Conn,
        request: &Prepared,
        account: &Account,
    ) -> Result<Exchange, ExchangeError> {
        if upstream.write_all(&request.upstream_head).await.is_err() {
            return Err(ExchangeError::NoResponse);
        }
        let worker: &Worker = self.worker;
        let plumbing = worker.plumbing(account);
        plumbing.charged(Direction::Up, request.upstream_head.len());
        let wait = worker.limits.tunnel_idle_timeout.unwrap_or(RESPONSE_TIMEOUT_FALLBACK);
        let client = &self.client;
        let fallback = CloseSignal::default();
        let activity = self.live.as_ref().map_or(&fallback, LiveEntry::signal);
        activity.touch();
        let responded = Cell::new(false);
        let body = pin!(send_body(
            plumbing,
            client,
            upstream,
            &mut self.inbox,
            request.framing,
            activity
        ));
        let response = pin!(relay_response(
            plumbing, wait, client, upstream, request, activity, &responded
        ));
        let (mut body, mut response) = (body, response);
        let mut body_result: Option<Result<(), BodyError>> = None;
        let outcome = std::future::poll_fn(|cx| {
            if body_result.is_none() {
                if let Poll::Ready(result) = body.as_mut().poll(cx) {
                    body_result = Some(result);
                }
            }
            match body_result {
                Some(Err(BodyError::Malformed)) if !responded.get() => Poll::Ready(Err(ExchangeError::MalformedBody)),
                Some(Err(_)) => Poll::Ready(Err(ExchangeError::Broken)),
                _ => response.as_mut().poll(cx),
            }
        })
        .await;
        let body_complete = matches!(body_result, Some(Ok(())));
        match outcome {
            Ok(Exchange::Done {
                client_reusable,
                upstream_reusable,
            }) => Ok(Exchange::Done {
                client_reusable: client_reusable && body_complete,
                upstream_reusable: upstream_reusable && body_complete,
            }),
            other => other,
        }
    }
}

/// Streams the request body from the client (inbox first) to the upstream.
async fn send_body(
    plumbing: Plumbing<'_>,
    client: &Conn,
    upstream: &Conn,
    inbox: &mut Vec<u8>,
    framing: Framing,
    activity: &CloseSignal,
) -> Result<(), BodyError> {
    match framing {
        Framing::Empty | Framing::UntilClose => Ok(()),
        Framing::Length(length) => {
            let buffered = (length.min(inbox.len() as u64)) as usize;
            upstream.write_all(&inbox[..buffered]).await?;
            inbox.drain(..buffered);
            plumbing.charged(Direction::Up, buffered);
            let rest = length - buffered as u64;
            if rest > 0
                && tunnel::pump(
                    &plumbing,
                    client,
                    upstream,
                    Some(rest),
                    Direction::Up,
                    activity,
                    Start::Now,
                )
                .await?
                    < rest
            {
                return Err(BodyError::Io);
            }
            Ok(())
        }
        Framing::Chunked => {
            let mut chunked = ChunkedBody::new();
            loop {
                if !inbox.is_empty() {
                    let used = chunked.feed(inbox).map_err(|_| BodyError::Malformed)?;
                    upstream.write_all(&inbox[..used]).await?;
                    inbox.drain(..used);
                    plumbing.charged(Direction::Up, used);
                    activity.touch();
                }
                if chunked.is_done() {
                    return Ok(());
                }
                throttle::clearance(plumbing.account.limiter(), Direction::Up).await;
                if client.read_into(inbox, READ_CHUNK).await? == 0 {
                    return Err(BodyError::Io);
                }
            }
        }
    }
}

/// Reads the upstream's response head(s) and streams the response to the
/// client; gives up on a head not started within `wait`.
async fn relay_response(
    plumbing: Plumbing<'_>,
    wait: Duration,
    client: &Conn,
    upstream: &Conn,
    request: &Prepared,
    activity: &CloseSignal,
    responded: &Cell<bool>,
) -> Result<Exchange, ExchangeError> {
    let mut inbox = Vec::new();
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
            match monoio::time::timeout(wait, read).await {
                Ok(Ok(0)) | Ok(Err(_)) if !received => return Err(ExchangeError::NoResponse),
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Err(ExchangeError::BadResponse),
                Ok(Ok(_)) => received = true,
            }
        };
        let head = http_head::parse_response(&inbox[..end], &request.method).map_err(|_| ExchangeError::BadResponse)?;
        let interim = (100..200).contains(&head.status) && head.status != 101;
        let upgraded = head.status == 101;
        let client_close = !request.keep_alive || head.framing == Framing::UntilClose;
        let framing = head.framing;
        let upstream_keep_alive = head.keep_alive;
        // Body bytes already read go out with the head in one write.
        let buffered = match framing {
            Framing::Length(length) if !interim && !upgraded => length.min((inbox.len() - end) as u64) as usize,
            _ => 0,
        };
        let mut out = Vec::with_capacity(end + 64 + buffered);
        http_head::write_client_response(&head, client_close && !interim && !upgraded, &mut out);
        drop(head);
        inbox.drain(..end);
        responded.set(true);
        activity.touch();
        if interim {
            client.write_all(&out).await.map_err(|_| ExchangeError::Broken)?;
            continue;
        }
        if upgraded {
            out.append(&mut inbox);
            client.write_all(&out).await.map_err(|_| ExchangeError::Broken)?;
            plumbing.charged(Direction::Down, out.len());
            return Ok(Exchange::Upgraded);
        }
        let framing = match framing {
            Framing::Length(length) => {
                out.extend_from_slice(&inbox[..buffered]);
                inbox.drain(..buffered);
                Framing::Length(length - buffered as u64)
            }
            other => other,
        };
        client.write_all(&out).await.map_err(|_| ExchangeError::Broken)?;
        plumbing.charged(Direction::Down, out.len());
        relay_body(plumbing, client, upstream, &mut inbox, framing, activity).await?;
        return Ok(Exchange::Done {
            client_reusable: !client_close,
            upstream_reusable: upstream_keep_alive && inbox.is_empty(),
        });
    }
}

/// Streams the rest of a response body after its head was sent; a
/// `Length` is what remains to be read from the upstream.
async fn relay_body(
    plumbing: Plumbing<'_>,
    client: &Conn,
    upstream: &Conn,
    inbox: &mut Vec<u8>,
    framing: Framing,
    activity: &CloseSignal,
) -> Result<(), ExchangeError> {
    let broken = |_| ExchangeError::Broken;
    match framing {
        Framing::Empty | Framing::Length(0) => Ok(()),
        Framing::Length(rest) => {
            let moved = tunnel::pump(
                &plumbing,
                upstream,
                client,
                Some(rest),
                Direction::Down,
                activity,
                Start::Now,
            )
            .await;
            match moved {
                Ok(n) if n == rest => Ok(()),
                _ => Err(ExchangeError::Broken),
            }
        }
        Framing::UntilClose => {
            client.write_all(inbox).await.map_err(broken)?;
            plumbing.charged(Direction::Down, inbox.len());
            inbox.clear();
            tunnel::pump(&plumbing, upstream, client, None, Direction::Down, activity, Start::Now)
                .await
                .map_err(broken)?;
            Ok(())
        }
        Framing::Chunked => {
            let mut chunked = ChunkedBody::new();
            loop {
                if !inbox.is_empty() {
                    let used = chunked.feed(inbox).map_err(|_| ExchangeError::Broken)?;
                    client.write_all(&inbox[..used]).await.map_err(broken)?;
                    inbox.drain(..used);
                    plumbing.charged(Direction::Down, used);
                    activity.touch();
                }
                if chunked.is_done() {
                    return Ok(());
                }
                throttle::clearance(plumbing.account.limiter(), Direction::Down).await;
                match upstream.read_into(inbox, READ_CHUNK).await {
                    Ok(0) | Err(_) => return Err(ExchangeError::Broken),
                    Ok(_) => {}
                }
            }
        }
    }
}
