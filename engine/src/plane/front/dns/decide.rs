//! What the DNS filter does with one query packet, and the replies crackbox
//! builds itself.
//!
//! No I/O here: a packet, its source, the snapshot and the label watcher's
//! list in, an [`Action`] out. Who may ask about which name is the policy's
//! one decision ([`crackbox_policy::decide()`] on any port), as for every other front
//! end; this module owns only the DNS side: unregistered and invalid-label
//! sources are REFUSED, denied names get NXDOMAIN and never reach the
//! upstream resolver, a name a report-mode source's list would deny is
//! answered as if allowed and recorded as a would-be denial, one an ask-mode
//! source's list does not cover is answered (the connection that follows
//! asks), and a source awaiting its registration is held. A TCP connection
//! from an unregistered or invalid-label source is refused before it asks.

use super::{DenialHook, DnsDenial};
use crate::usage::attached::{Decision, Snapshot, Standing, Verdict};
use crate::usage::Account;
use crackbox_policy::decide::standing;
use crackbox_policy::reason::{Layer, Reason};
use crackbox_policy::watch::Watch;
use crackbox_policy::Port;
use hickory_proto::op::{Edns, Header, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, RecordType};
use hickory_proto::serialize::binary::BinDecodable;
use std::net::IpAddr;
use std::sync::Arc;

/// UDP payload size crackbox advertises in its own EDNS replies (the DNS
/// flag day 2020 recommendation, no IP fragmentation).
pub(crate) const OWN_EDNS_PAYLOAD: u16 = 1232;

/// What to do with one received packet.
#[derive(Debug)]
pub(crate) enum Action {
    /// Not a query (QR=1) or not even a DNS header: never answer it.
    Drop,
    /// Answer with this locally built message.
    Reply(Message),
    /// An allowed question: ask the upstream resolver.
    Forward(Message),
    /// From an unregistered source inside a watched subnet whose
    /// registration may be in flight: decide again once it is registered or
    /// the registration hold is over.
    Hold,
}

/// Whether a query may still wait for its source's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Not yet held: a source awaiting its registration gets [`Action::Hold`].
    Allowed,
    /// Held already (or holding is off): such a source is `unregistered`.
    Over,
}

/// Decides a packet received from `source`.
pub(crate) fn decide(
    packet: &[u8],
    source: IpAddr,
    policy: (&Snapshot, &Watch),
    hold: Hold,
    on_denial: Option<&DenialHook>,
) -> Action {
    let Ok(header) = packet
        .get(..12)
        .map_or(Err(()), |h| Header::from_bytes(h).map_err(drop))
    else {
        return Action::Drop;
    };
    if header.metadata.message_type == MessageType::Response {
        return Action::Drop;
    }
    let Ok(request) = Message::from_vec(packet) else {
        return Action::Reply(error_reply(&header_only(&header), ResponseCode::FormErr));
    };
    // Recorded as asked, with its trailing dot: what tells a DNS question
    // from a connection to port 53 in the denials (docs/daemon.md).
    let name = request.queries.first().map(|q| q.name().to_ascii()).unwrap_or_default();
    let (snapshot, watch) = policy;
    let verdict = match crackbox_policy::decide(snapshot, watch, source, &name, Port::Any) {
        Decision::AwaitRegistration if hold == Hold::Allowed => return Action::Hold,
        decision => decision.settled(),
    };
    // Sources that are not registered are refused whatever they ask.
    if let Verdict::Deny { reason, layer, id, .. } = &verdict {
        if *reason != Reason::NotAllowed {
            record(on_denial, source, id.as_ref(), &name, (*reason, *layer), true);
            return Action::Reply(error_reply(&request, ResponseCode::Refused));
        }
    }
    if request.metadata.op_code != OpCode::Query {
        return Action::Reply(error_reply(&request, ResponseCode::Refused));
    }
    let [query] = request.queries.as_slice() else {
        return Action::Reply(error_reply(&request, ResponseCode::FormErr));
    };
    if query.query_class() != DNSClass::IN || !forwarded_type(query.query_type()) {
        return Action::Reply(error_reply(&request, ResponseCode::Refused));
    }
    match &verdict {
        Verdict::Deny {
            reason,
            layer,
            id,
            account,
        } => {
            if let Some(account) = account {
                account.add_denial(Account::OFF_CORE, *reason);
            }
            record(on_denial, source, id.as_ref(), &name, (*reason, *layer), true);
            Action::Reply(error_reply(&request, ResponseCode::NXDomain))
        }
        Verdict::Report { reason, id, account } => {
            account.add_reported(Account::OFF_CORE, *reason);
            record(on_denial, source, Some(id), &name, (*reason, Layer::Mode), false);
            Action::Forward(request)
        }
        // Answered, so that the connection that follows can ask.
        Verdict::Allow { .. } | Verdict::Ask { .. } => Action::Forward(request),
    }
}

/// Whether a TCP connection from `source` is closed before it asks
/// anything, so that it never takes a connection slot: its source is
/// unregistered or its container's labels are invalid (one awaiting its
/// registration is let in, its queries held). A refusal is recorded as a
/// denial with no name.
pub(crate) fn refuses_connection(source: IpAddr, policy: (&Snapshot, &Watch), on_denial: Option<&DenialHook>) -> bool {
    let (snapshot, watch) = policy;
    let (reason, id) = match standing(snapshot, watch, source) {
        Standing::Registered(_) | Standing::AwaitingRegistration => return false,
        Standing::InvalidLabel(id) => (Reason::InvalidLabel, Some(id)),
        Standing::Unregistered => (Reason::Unregistered, None),
    };
    record(on_denial, source, id, "", (reason, Layer::Registration), true);
    true
}

/// The record types a workload needs to reach an allowed name.
fn forwarded_type(kind: RecordType) -> bool {
    matches!(
        kind,
        RecordType::A | RecordType::AAAA | RecordType::CNAME | RecordType::HTTPS | RecordType::SVCB
    )
}

/// A reply to `request` carrying only its question and `code`.
pub(crate) fn error_reply(request: &Message, code: ResponseCode) -> Message {
    let mut reply = Message::error_msg(request.metadata.id, request.metadata.op_code, code);
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.add_queries(request.queries.iter().cloned());
    if request.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(OWN_EDNS_PAYLOAD);
        reply.set_edns(edns);
    }
    reply
}

/// A message with just the header fields of an unparseable query.
fn header_only(header: &Header) -> Message {
    let mut message = Message::new(header.metadata.id, MessageType::Query, header.metadata.op_code);
    message.metadata.recursion_desired = header.metadata.recursion_desired;
    message
}

/// Reports a denied query, or (not `enforced`) a would-be denial answered
/// as if allowed.
fn record(
    on_denial: Option<&DenialHook>,
    source: IpAddr,
    id: Option<&Arc<str>>,
    name: &str,
    (reason, layer): (Reason, Layer),
    enforced: bool,
) {
    if let Some(hook) = on_denial {
        hook(&DnsDenial {
            source,
            id,
            name,
            reason,
            layer,
            enforced,
        });
    }
    tracing::debug!(%source, id = id.map(|id| &**id), name, reason = reason.as_str(), enforced, "dns query denied");
}

#[cfg(test)]
mod tests;
