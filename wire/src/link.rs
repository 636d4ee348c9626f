//! The control <-> engine protocol over a Unix socket.
//!
//! Each frame is a 4-byte big-endian length followed by that many bytes of
//! JSON. Both sides open with [`Message::Hello`] carrying [`PROTOCOL`]; a
//! peer speaking another version is refused. Control then tells the engine
//! which request ids of ask mode may have been handed out already
//! ([`Message::AskIds`]), so ids never repeat across engine restarts, and
//! sends a full [`Message::Snapshot`] once, and after that a [`Message::Delta`] per change
//! (the source changes from one generation to the next); the engine answers
//! each with [`Message::Ack`], and a delta whose base is not the generation it
//! holds with [`Message::Resync`], which control answers with a full
//! snapshot. Both carry the named policies too: every policy in a snapshot,
//! and in a delta the policies that change (put or removed), so changing one
//! policy is one small frame however many registrations name it. Control polls counters with [`Message::StatsRequest`] and
//! usage per registration with [`Message::UsageRequest`]. In ask mode the
//! engine tells control of each request it starts holding
//! ([`Message::Asked`], again for each still pending after a reconnect) and
//! of each that ends ([`Message::Settled`]); control lists them with
//! [`Message::PendingQuery`] and answers one with [`Message::Decide`].
//! The console's event feed polls the engine's live figures and the denials
//! recorded since it last asked with [`Message::FeedRequest`].
//! Each question control asks ([`Query`]) and the engine's [`Reply`] travel
//! as a pair of messages matched by a request number; both sides handle
//! the pairs through these two types, never one by one.
//! Every field is parsed into its type as the frame is decoded (addresses,
//! subnets, entries); a frame with a bad one is refused, naming the value
//! and what it should be.
//! Pure code: it is fuzzed as it runs.

mod feed;

pub use feed::FeedReport;

use crate::ask::{Answer, DecidedRequest, PendingId, PendingRequest};
use crackbox_policy::reason::{Layer, Reason};
use crackbox_policy::watch::Subnet;
use crackbox_policy::{Generation, PolicyChange, PolicySpec, RegistrationSpec, SourceChange};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::IpAddr;

/// The protocol version both sides must speak (9: the request ids already
/// handed out, so a restarted engine never hands one out again; 8: the
/// console's feed request; 7: named policies in snapshots and deltas; 6: a held request
/// settles through the one decision, `always` once stored; denials and
/// settled requests name the layer that decided).
pub const PROTOCOL: u32 = 9;

/// Largest frame accepted (a very large registry still fits).
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// Which side of the link a hello comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The tokio control plane.
    Control,
    /// The monoio data plane.
    Engine,
}

/// One message on the control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// First frame from each side.
    Hello {
        /// Protocol version, [`PROTOCOL`].
        protocol: u32,
        /// Who is speaking.
        role: Role,
    },
    /// Request ids of ask mode up to `through` may have been handed out
    /// already, by this engine or one before it: new requests are numbered
    /// after it (control -> engine, sent before the first snapshot, so
    /// before any request can be held).
    AskIds {
        /// The highest id that may have been handed out.
        through: PendingId,
    },
    /// The whole registry at one generation (control -> engine).
    Snapshot {
        /// Monotonic generation number.
        generation: Generation,
        /// Every registration, normalised.
        registrations: Vec<RegistrationSpec>,
        /// Every named policy.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        policies: Vec<PolicySpec>,
    },
    /// The changes from `base` to `generation` (control -> engine); only
    /// applies to an engine that holds `base`.
    Delta {
        /// The generation the changes apply to.
        base: Generation,
        /// The generation they produce.
        generation: Generation,
        /// Source changes, applied in order after the policy changes.
        changes: Vec<SourceChange>,
        /// Policy changes, applied in order before the source changes.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        policies: Vec<PolicyChange>,
    },
    /// The engine could not apply a delta and asks for a full snapshot
    /// (engine -> control).
    Resync {
        /// The generation the engine holds.
        generation: Generation,
    },
    /// The engine enforces this generation now (engine -> control).
    Ack {
        /// The generation swapped in.
        generation: Generation,
    },
    /// What the Docker label watcher answers for (control -> engine), sent
    /// on connect when the watcher runs and after every change; no ack.
    Watch {
        /// The list, replacing the previous one whole.
        list: WatchList,
    },
    /// Ask the engine for its counters (control -> engine).
    StatsRequest {
        /// Echoed in the reply.
        request: u64,
    },
    /// Counters and recent denials (engine -> control).
    Stats {
        /// The request this answers.
        request: u64,
        /// The figures.
        report: StatsReport,
    },
    /// Ask the engine for usage per registration (control -> engine).
    UsageRequest {
        /// Echoed in the reply.
        request: u64,
        /// Which registrations.
        query: UsageQuery,
    },
    /// Usage of the registrations asked for, sorted by address (engine -> control).
    Usage {
        /// The request this answers.
        request: u64,
        /// One record per registration.
        sources: Vec<SourceUsage>,
    },
    /// A request started waiting for a decision (engine -> control; also
    /// sent for every request still pending when control connects).
    Asked {
        /// The request.
        pending: PendingRequest,
    },
    /// A pending request ended: decided, timed out or withdrawn
    /// (engine -> control).
    Settled {
        /// The request and how it ended.
        decided: DecidedRequest,
    },
    /// Ask the engine for its pending requests (control -> engine).
    PendingQuery {
        /// Echoed in the reply.
        request: u64,
    },
    /// The pending requests, oldest first (engine -> control).
    PendingList {
        /// The request this answers.
        request: u64,
        /// Every pending request.
        pending: Vec<PendingRequest>,
    },
    /// Decide a pending request (control -> engine).
    Decide {
        /// Echoed in the reply.
        request: u64,
        /// The pending request.
        id: PendingId,
        /// The answer.
        decision: Answer,
    },
    /// The outcome of a [`Message::Decide`] (engine -> control).
    DecideOutcome {
        /// The request this answers.
        request: u64,
        /// The request decided; `None` when it was unknown or decided already.
        decided: Option<DecidedRequest>,
    },
    /// Ask the engine for its live figures and the denials it recorded
    /// after the `denials_after`-th (control -> engine).
    FeedRequest {
        /// Echoed in the reply.
        request: u64,
        /// How many denials the asker has seen already (0: none).
        denials_after: u64,
    },
    /// The answer to a [`Message::FeedRequest`] (engine -> control).
    Feed {
        /// The request this answers.
        request: u64,
        /// The figures and the newer denials.
        report: FeedReport,
    },
}

mod exchange;
mod kind;

pub use exchange::{Query, Reply};

/// Which registrations' usage to report: all, or those matching every
/// field given. Also the query of `GET /v1/usage` (`?id=` / `?ip=`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Only the registration of this source address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// Only registrations with this id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// What one registration has used since it was registered (counters live
/// as long as the registration: registering the source again under the same
/// id keeps them, a new id or unregistering drops them). One record of
/// `GET /v1/usage`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceUsage {
    /// Client source address.
    pub ip: String,
    /// Registration id.
    pub id: String,
    /// Bytes moved client -> upstream (request heads as sent on, bodies, tunnel bytes).
    pub bytes_up: u64,
    /// Bytes moved upstream -> client (response heads, bodies, tunnel bytes).
    pub bytes_down: u64,
    /// Tunnels opened (CONNECT, transparent and steered TLS).
    pub tunnels: u64,
    /// HTTP requests forwarded (forward proxy, transparent and steered port 80).
    pub requests: u64,
    /// Denials by reason; reasons never seen are left out.
    pub denials: BTreeMap<Reason, u64>,
    /// Would-be denials let through in report mode, by the reason they
    /// would have had; left out when there were none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reported: BTreeMap<Reason, u64>,
    /// Client connections from the source's address open now.
    pub connections: u64,
    /// The bandwidth cap in force (bytes per second each way), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<u64>,
    /// When counting began: the registration (ms since the Unix epoch).
    pub since_ms: u64,
}

/// Sources the Docker label watcher answers for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchList {
    /// Subnets of the watched networks (`ADDR/PREFIX` in JSON): a new
    /// connection from an unregistered source there waits briefly for its
    /// registration.
    pub subnets: Vec<Subnet>,
    /// Labelled containers whose labels are invalid: denied as `invalid-label`.
    pub invalid: Vec<InvalidSource>,
}

/// One address of a container whose crackbox labels are invalid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvalidSource {
    /// The container's address, canonical.
    #[serde(with = "crackbox_policy::source_ip_text")]
    pub ip: IpAddr,
    /// The id the container would have had (shown in denials).
    pub id: String,
}

/// Counters the engine keeps since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsReport {
    /// Decisions per registration id and outcome.
    pub decisions: Vec<DecisionCount>,
    /// Tunnels and forwarded connections open now.
    pub active_tunnels: u64,
    /// Bytes moved from clients to upstreams.
    pub bytes_up: u64,
    /// Bytes moved from upstreams to clients.
    pub bytes_down: u64,
    /// The most recent denials, oldest first (at most 1,000).
    pub denials: Vec<Denial>,
    /// The snapshot generation enforced now.
    pub generation: Generation,
    /// The generation every core thread has re-decided its live connections
    /// against (revocation's look follows a swap within 200 ms; 0 from an
    /// engine that predates it).
    #[serde(default)]
    pub revocation_generation: Generation,
    /// Tunnels opened since start, per front end that opened them (absent
    /// from an engine that predates the count).
    #[serde(default)]
    pub tunnels_opened: Vec<TunnelCount>,
}

/// How many tunnels one front end opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelCount {
    /// The front end: `connect` (HTTP CONNECT), `transparent` (redirected or
    /// steered TLS) or `socks5`.
    pub front_end: String,
    /// Tunnels it opened.
    pub count: u64,
}

/// How many decisions of one kind one registration got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionCount {
    /// Registration id; empty for unregistered sources.
    pub id: String,
    /// `None` for allowed, otherwise why it was denied (or, not enforced,
    /// would have been).
    pub reason: Option<Reason>,
    /// False for would-be denials let through in report mode.
    #[serde(default = "enforced")]
    pub enforced: bool,
    /// Number of decisions.
    pub count: u64,
}

/// One denied connection, request or DNS query; or, not enforced, one let
/// through in report mode that the allowlist would have denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Denial {
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Client source address.
    pub ip: String,
    /// Registration id, empty for unregistered sources.
    pub id: String,
    /// Requested host (as the client gave it, truncated to 255 bytes).
    pub host: String,
    /// Requested port.
    pub port: u16,
    /// Why it was denied (or, not enforced, would have been).
    pub reason: Reason,
    /// True for a denial; false for a would-be denial let through because
    /// the source is registered in report mode (a record from a daemon that
    /// predates report mode is a denial).
    #[serde(default = "enforced")]
    pub enforced: bool,
    /// The layer of the policy that decided (absent from a daemon that
    /// predates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<Layer>,
}

/// What a record without `enforced` was: a denial.
fn enforced() -> bool {
    true
}

/// A frame that could not be read or decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The length prefix exceeds [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    /// The payload is not a valid message (a bad address or subnet is
    /// named with what it should be).
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The socket failed or closed.
    #[error("control socket: {0}")]
    Io(#[from] io::Error),
}

/// Serialises `message` into one length-prefixed frame.
pub fn encode(message: &Message) -> Vec<u8> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message).expect("messages always serialise");
    let len = u32::try_from(frame.len() - 4).expect("frames stay under 4 GiB");
    frame[..4].copy_from_slice(&len.to_be_bytes());
    frame
}

/// Reads the payload length from a frame header, enforcing [`MAX_FRAME`].
pub fn frame_len(header: [u8; 4]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(WireError::TooLarge(len));
    }
    Ok(len)
}

/// Decodes one frame payload (without its length prefix).
pub fn decode_payload(payload: &[u8]) -> Result<Message, WireError> {
    Ok(serde_json::from_slice(payload)?)
}

/// Decodes the first complete frame in `buf`: the message and bytes used,
/// or `None` when more bytes are needed.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    let Some(header) = buf.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = frame_len(*header)?;
    match buf.get(4..4 + len) {
        Some(payload) => Ok(Some((decode_payload(payload)?, 4 + len))),
        None => Ok(None),
    }
}

/// Blocking read of one message (used off the core threads).
pub fn read_message(reader: &mut impl Read) -> Result<Message, WireError> {
    let mut header = [0u8; 4];
    reader.read_exact(&mut header)?;
    let mut payload = vec![0u8; frame_len(header)?];
    reader.read_exact(&mut payload)?;
    decode_payload(&payload)
}

/// Blocking write of one message (used off the core threads).
pub fn write_message(writer: &mut impl Write, message: &Message) -> Result<(), WireError> {
    writer.write_all(&encode(message))?;
    writer.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests;
