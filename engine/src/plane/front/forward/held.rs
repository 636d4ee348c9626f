//! A CONNECT held for a decision (ask mode), waiting as a task of its own:
//! the session's task has ended, and what waits is only the client
//! connection, the destination, the registration and any bytes the client
//! sent early, so a held connection costs no more than an idle tunnel (see
//! `plane`, on task size). Once the one decision settles it, it is dialled,
//! answered and handed on like any CONNECT, or refused.

use super::reply_unreachable;
use super::session::establish;
use crate::plane::services::conn::Conn;
use crate::plane::services::decision::{hold, reach_ruled, Client, Ruling};
use crate::plane::services::handoff::Handoff;
use crate::plane::services::revocation::LiveEntry;
use crate::plane::services::sandboxes::Sandbox;
use crate::plane::services::stats::ActiveTunnel;
use crate::plane::services::worker::Worker;
use std::future::Future;
use std::net::IpAddr;
use std::rc::Rc;

/// A CONNECT to ask about, taken out of its session.
pub(crate) struct HeldConnect {
    pub(super) client: Conn,
    pub(super) source: IpAddr,
    pub(super) host: Box<str>,
    pub(super) port: u16,
    pub(super) sandbox: Rc<Sandbox>,
    /// Bytes the client sent after its CONNECT head.
    pub(super) early: Box<[u8]>,
}

/// Holds `held` until its decision, then opens its tunnel (handed to
/// `run`) or refuses it. Not an `async fn`, and the fields are used where
/// they are rather than moved out first: see `plane`, on task size.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice")]
pub(crate) fn resume_held(
    worker: Rc<Worker>,
    held: HeldConnect,
    run: impl FnOnce(Handoff),
) -> impl Future<Output = ()> {
    async move {
        let asker = Client {
            source: held.source,
            conn: &held.client,
            front_end: "connect",
        };
        let sandbox = Rc::clone(&held.sandbox);
        let ruling = hold(&worker, asker, &held.host, held.port, sandbox).await;
        // Boxed: the wait is what a held connection is, so the dial and the
        // answer that follow do not enlarge it.
        if let Some((upstream, live, sandbox, active)) = Box::pin(open(&worker, asker, &held, ruling)).await {
            run(Handoff {
                client: held.client,
                upstream,
                live,
                sandbox,
                active,
            });
        }
    }
}

/// The tunnel of a held CONNECT once decided: dialled and answered, or refused.
async fn open(
    worker: &Worker,
    asker: Client<'_>,
    held: &HeldConnect,
    ruling: Ruling,
) -> Option<(Conn, LiveEntry, Rc<Sandbox>, ActiveTunnel)> {
    let (upstream, live, sandbox) = match reach_ruled(worker, asker, &held.host, held.port, ruling).await {
        Ok(reached) => reached,
        Err(why) => {
            reply_unreachable(&held.client, &held.host, held.port, why).await;
            return None;
        }
    };
    let place = (&*held.host, held.port);
    let active = establish(worker, &held.client, place, (&upstream, &live, &sandbox), &held.early).await?;
    Some((upstream, live, sandbox, active))
}
