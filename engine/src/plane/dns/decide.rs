//! The DNS policy decision for one query packet, and the replies crackbox
//! builds itself.
//!
//! No I/O here: a packet, its source and a snapshot in, a [`Verdict`] out.
//! Denied names are answered locally and never reach the upstream resolver.

use super::{DenialHook, DnsDenial};
use crate::policy::reason::Reason;
use crate::policy::Snapshot;
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
pub(crate) enum Verdict {
    /// Not a query (QR=1) or not even a DNS header: never answer it.
    Drop,
    /// Answer with this locally built message.
    Reply(Message),
    /// An allowed question: ask the upstream resolver.
    Forward(Message),
}

/// Decides a packet received from `source`.
pub(crate) fn decide(packet: &[u8], source: IpAddr, snapshot: &Snapshot, on_denial: Option<&DenialHook>) -> Verdict {
    let Ok(header) = packet
        .get(..12)
        .map_or(Err(()), |h| Header::from_bytes(h).map_err(drop))
    else {
        return Verdict::Drop;
    };
    if header.metadata.message_type == MessageType::Response {
        return Verdict::Drop;
    }
    let Ok(request) = Message::from_vec(packet) else {
        return Verdict::Reply(error_reply(&header_only(&header), ResponseCode::FormErr));
    };
    let Some(registration) = snapshot.lookup(source) else {
        deny(on_denial, source, None, &request, Reason::Unregistered);
        return Verdict::Reply(error_reply(&request, ResponseCode::Refused));
    };
    if request.metadata.op_code != OpCode::Query {
        return Verdict::Reply(error_reply(&request, ResponseCode::Refused));
    }
    let [query] = request.queries.as_slice() else {
        return Verdict::Reply(error_reply(&request, ResponseCode::FormErr));
    };
    if query.query_class() != DNSClass::IN || !forwarded_type(query.query_type()) {
        return Verdict::Reply(error_reply(&request, ResponseCode::Refused));
    }
    let name = query.name().to_ascii();
    if registration.allowlist.matching_any_port(&name).is_none() {
        registration.account.add_denial(Reason::NotAllowed);
        deny(on_denial, source, Some(&registration.id), &request, Reason::NotAllowed);
        return Verdict::Reply(error_reply(&request, ResponseCode::NXDomain));
    }
    Verdict::Forward(request)
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

fn deny(on_denial: Option<&DenialHook>, source: IpAddr, id: Option<&Arc<str>>, request: &Message, reason: Reason) {
    let name = request.queries.first().map(|q| q.name().to_ascii()).unwrap_or_default();
    if let Some(hook) = on_denial {
        hook(&DnsDenial {
            source,
            id,
            name: &name,
            reason,
        });
    }
    tracing::debug!(%source, id = id.map(|id| &**id), name, reason = reason.as_str(), "dns query denied");
}

#[cfg(test)]
mod tests;
