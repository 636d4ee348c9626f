//! Message bodies, in either direction (a request's client -> upstream, a
//! response's upstream -> client), streamed with their framing kept as
//! received: one relay for both.
//!
//! Bytes read with the head go first; a `Content-Length` body or one that
//! runs until close is then spliced (`tunnel::pump`), a chunked one copied
//! through the inbox as its framing is checked. Every byte takes the
//! connection's meter, spliced or copied.

use super::READ_CHUNK;
use crate::plane::services::conn::Conn;
use crate::plane::services::stats::Direction;
use crate::plane::services::tunnel::{self, CloseSignal, Plumbing, Start};
use crate::protocol::chunked::ChunkedBody;
use crate::protocol::http_head::Framing;
use std::io;

/// Why relaying a body stopped.
pub(super) enum BodyError {
    /// Malformed chunked framing.
    Malformed,
    /// A peer went away or a socket failed.
    Io,
}

impl From<io::Error> for BodyError {
    fn from(_: io::Error) -> Self {
        BodyError::Io
    }
}

/// Relays a body framed as `framing` from `src` to `dst`: first what
/// `inbox` holds of it, then the rest from `src`. A `Length` counts the
/// bytes still to relay, those in `inbox` included; bytes past the body's
/// end stay in `inbox`.
pub(super) async fn relay(
    plumbing: Plumbing<'_>,
    src: &Conn,
    dst: &Conn,
    inbox: &mut Vec<u8>,
    framing: Framing,
    direction: Direction,
    activity: &CloseSignal,
) -> Result<(), BodyError> {
    let meter = plumbing.meter;
    match framing {
        Framing::Empty => Ok(()),
        Framing::Length(length) => {
            let buffered = length.min(inbox.len() as u64) as usize;
            meter.send(dst, &inbox[..buffered], direction).await?;
            inbox.drain(..buffered);
            let rest = length - buffered as u64;
            if rest > 0 && tunnel::pump(&plumbing, src, dst, Some(rest), direction, activity, Start::Now).await? < rest
            {
                return Err(BodyError::Io);
            }
            Ok(())
        }
        Framing::UntilClose => {
            meter.send(dst, inbox, direction).await?;
            inbox.clear();
            tunnel::pump(&plumbing, src, dst, None, direction, activity, Start::Now).await?;
            Ok(())
        }
        Framing::Chunked => {
            let mut chunked = ChunkedBody::new();
            loop {
                if !inbox.is_empty() {
                    let used = chunked.feed(inbox).map_err(|_| BodyError::Malformed)?;
                    meter.send(dst, &inbox[..used], direction).await?;
                    inbox.drain(..used);
                    activity.touch();
                }
                if chunked.is_done() {
                    return Ok(());
                }
                if src.read_into(inbox, READ_CHUNK).await? == 0 {
                    return Err(BodyError::Io);
                }
            }
        }
    }
}
