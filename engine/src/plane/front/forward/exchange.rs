//! One request upstream and its response back: the decision (anew for
//! every request), the upstream connection (the one kept from the last
//! request to the same host and port, one the thread's pool kept for the
//! same registration, or a new one; a bodiless request on a kept
//! connection that closed unanswered is retried once on a new one),
//! then the request and its response relayed at once, so `Expect:
//! 100-continue` and early responses work; once the request is sent whole,
//! a client that goes away before the response starts ends the exchange
//! (`abandoned`). A 101 turns the connection into a
//! tunnel. A connection the exchange left reusable is kept for the
//! client's next request, or parked in the pool when the client's
//! connection ends.

use super::abandoned::client_gone;
use super::body::{self, BodyError};
use super::head::Prepared;
use super::response::{relay_response, Exchange, ExchangeError};
use super::Session;
use crate::plane::services::conn::Conn;
use crate::plane::services::decision::{reach, reach_reusing, IdleUpstream, Reached};
use crate::plane::services::duplex;
use crate::plane::services::revocation::{LetThrough, LiveEntry};
use crate::plane::services::stats::Direction;
use crate::plane::services::tunnel::CloseSignal;
use crate::protocol::http_head::Framing;
use crate::protocol::responses;
use crate::usage::Account;
use crackbox_policy::reason::Reason;
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Without a tunnel idle timeout, still give up on a silent upstream after this.
const RESPONSE_TIMEOUT_FALLBACK: Duration = Duration::from_secs(3600);

impl<'w> Session<'w> {
    /// This connection's entry in the live set, pointed at `host:port` and
    /// not decided yet (made by its first request; the caller puts it back).
    /// In the set before the decision, so a snapshot that arrives while the
    /// dial is in flight still revokes the request; each request is decided
    /// anew and records what let it through.
    fn live_for(&mut self, host: &str, port: u16) -> LiveEntry {
        match self.live.take() {
            Some(live) => {
                live.retarget(host, port);
                live
            }
            None => LiveEntry::register(&self.worker.live, self.source, host, port, LetThrough::Undecided),
        }
    }

    /// One absolute-form request; returns whether the client connection
    /// may carry another request. (Not an `async fn`, which would hold the
    /// request twice: see `plane`, on task size.)
    #[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
    pub(super) fn forward<'s>(&'s mut self, request: Prepared<'s>) -> impl Future<Output = bool> + use<'s, 'w> {
        async move {
            if Self::refuse_invalid_host(&request.host) {
                self.reply(&responses::error(400, "invalid host in URL")).await;
                return false;
            }
            let kept = self.upstream.take();
            let live = self.live_for(&request.host, request.port);
            // Boxed, as the body's and the response's relays are below: each
            // block a request allocates stays within the thread's cache (see
            // `plane`, on the blocks a connection allocates).
            let reached = Box::pin(reach_reusing(
                self.worker,
                self.asker(self.requests_front_end()),
                &request.host,
                request.port,
                kept,
                &live,
            ))
            .await;
            self.live = Some(live);
            let Reached {
                mut conn,
                mut sandbox,
                reused,
                mut dialled,
            } = match reached {
                Ok(reached) => reached,
                Err(why) => {
                    self.reply_unreachable(&request.host, request.port, why).await;
                    return false;
                }
            };
            if self.live.as_ref().is_some_and(|live| live.signal().is_fired()) {
                self.reply(&responses::denial(Reason::Revoked, &request.host, request.port))
                    .await;
                return false;
            }
            sandbox.account.add_request(self.worker.thread);
            let mut outcome = self.exchange_watched(&conn, &request, &sandbox.account).await;
            if reused && matches!(outcome, Err(ExchangeError::NoResponse)) && request.framing == Framing::Empty {
                let live = self.live_for(&request.host, request.port);
                let reached = reach(
                    self.worker,
                    self.asker(self.requests_front_end()),
                    &request.host,
                    request.port,
                    &live,
                )
                .await;
                self.live = Some(live);
                Reached {
                    conn,
                    sandbox,
                    dialled,
                    ..
                } = match reached {
                    Ok(reached) => reached,
                    Err(why) => {
                        self.reply_unreachable(&request.host, request.port, why).await;
                        return false;
                    }
                };
                outcome = self.exchange_watched(&conn, &request, &sandbox.account).await;
            }
            match outcome {
                Ok(Exchange::Done {
                    client_reusable,
                    upstream_reusable,
                }) => {
                    if upstream_reusable {
                        let idle = IdleUpstream {
                            conn,
                            sandbox,
                            dialled,
                            host: request.host,
                            port: request.port,
                            since: Instant::now(),
                        };
                        // Kept for this client's next request, else for anyone
                        // of the same registration.
                        if client_reusable {
                            self.upstream = Some(idle);
                        } else {
                            self.park(idle);
                        }
                    }
                    client_reusable
                }
                Ok(Exchange::Upgraded) => {
                    let early = self.inbox.take();
                    let sent = self
                        .worker
                        .meter(&sandbox.account)
                        .send(&conn, &early, Direction::Up)
                        .await
                        .is_ok();
                    drop(early);
                    if sent {
                        let signal = self.live.as_ref().map(LiveEntry::revocation).unwrap_or_default();
                        duplex::run(self.worker.plumbing(&sandbox.account), &self.client, &conn, &signal).await;
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
    }

    /// [`Session::exchange`], cut short if the connection is revoked.
    async fn exchange_watched(
        &mut self,
        upstream: &Conn,
        request: &Prepared<'_>,
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
        request: &Prepared<'_>,
        account: &Account,
    ) -> Result<Exchange, ExchangeError> {
        let worker = self.worker;
        let plumbing = worker.plumbing(account);
        if plumbing
            .meter
            .send(upstream, &request.upstream_head, Direction::Up)
            .await
            .is_err()
        {
            return Err(ExchangeError::NoResponse);
        }
        let wait = worker.limits.tunnel_idle_timeout.unwrap_or(RESPONSE_TIMEOUT_FALLBACK);
        let client = &self.client;
        let fallback = CloseSignal::default();
        let activity = self.live.as_ref().map_or(&fallback, LiveEntry::signal);
        activity.touch();
        let responded = Cell::new(false);
        // Each boxed apart: see the reach in `forward`.
        let body = Box::pin(body::relay(
            plumbing,
            client,
            upstream,
            &mut self.inbox,
            request.framing,
            Direction::Up,
            activity,
        ));
        let response = Box::pin(relay_response(
            plumbing, wait, client, upstream, request, activity, &responded,
        ));
        let (mut body, mut response) = (body, response);
        // Watched only once the body relay no longer reads the client, and
        // until the response starts.
        let mut gone = pin!(client_gone(client));
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
                _ => match response.as_mut().poll(cx) {
                    Poll::Pending if body_result.is_some() && !responded.get() && gone.as_mut().poll(cx).is_ready() => {
                        Poll::Ready(Err(ExchangeError::Broken))
                    }
                    polled => polled,
                },
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
