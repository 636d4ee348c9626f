//! A tunnel a front end has opened (decided, dialled, answered, early bytes
//! sent on), handed to `runtime`, which runs it as a task of its own.
//!
//! An idle tunnel's memory is mostly its task (see `plane`, on task size),
//! and the task that opened it also holds the front end's state: the
//! session, the handshake's waits, the connection's own wrappers. Handed
//! over, the tunnel's task holds only this and the two pumps.

use crate::plane::services::conn::Conn;
use crate::plane::services::revocation::LiveEntry;
use crate::plane::services::sandboxes::Sandbox;
use crate::plane::services::stats::ActiveTunnel;
use std::rc::Rc;

/// An open tunnel, ready to run.
pub(crate) struct Handoff {
    pub(crate) client: Conn,
    pub(crate) upstream: Conn,
    /// Keeps it in the live set: revoked, or idle past the limit, it closes.
    pub(crate) live: LiveEntry,
    /// The registration its bytes count to, and are capped by.
    pub(crate) sandbox: Rc<Sandbox>,
    /// Counts it as active while it lives.
    #[expect(dead_code, reason = "held for its drop, which uncounts the tunnel")]
    pub(crate) active: ActiveTunnel,
}
