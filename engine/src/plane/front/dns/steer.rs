//! Steered answers (docs/architecture.md, "Steered interception"): an allowed name resolves to crackbox's own
//! address on the jail network, where the steered listeners take the
//! connection and decide it by SNI or `Host`.
//!
//! Built locally; nothing here ever asks an upstream resolver. Only A and
//! AAAA get an address; the other forwarded types (CNAME, HTTPS, SVCB) and
//! a family crackbox has no address in get an empty NOERROR answer, so a
//! client never learns where an allowed name really is.
//!
//! The unspecified address (`0.0.0.0`, `::`) steers each client to the
//! address its question arrived on: one crackbox serving many jail
//! networks (`crackbox run --daemon`) has a different address on each.

use super::decide::error_reply;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Time to live of a steered answer: short, so a jail whose steering
/// address changes (or whose allowlist shrinks) does not keep it long.
pub(crate) const STEERED_TTL: u32 = 5;

/// The addresses allowed names resolve to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteerTo {
    /// Answer for A questions; none: empty NOERROR; unspecified: the
    /// address the question arrived on.
    pub v4: Option<Ipv4Addr>,
    /// Answer for AAAA questions, as `v4`.
    pub v6: Option<Ipv6Addr>,
}

impl SteerTo {
    /// The first IPv4 and the first IPv6 address of `addresses`.
    pub fn from_addresses(addresses: &[IpAddr]) -> Self {
        SteerTo {
            v4: addresses.iter().find_map(|ip| match ip {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            }),
            v6: addresses.iter().find_map(|ip| match ip {
                IpAddr::V6(v6) => Some(*v6),
                IpAddr::V4(_) => None,
            }),
        }
    }

    /// The answer to an allowed question (`request` holds exactly one) that
    /// arrived on the local address `arrived`.
    pub(crate) fn reply(&self, request: &Message, arrived: IpAddr) -> Message {
        let mut reply = error_reply(request, ResponseCode::NoError);
        reply.metadata.authoritative = true;
        let Some(query) = request.queries.first() else {
            return reply;
        };
        let steer: Option<IpAddr> = match query.query_type() {
            RecordType::A => self.v4.map(IpAddr::V4),
            RecordType::AAAA => self.v6.map(IpAddr::V6),
            _ => None,
        };
        let data = steer
            .and_then(|steer| answer_address(steer, arrived))
            .map(|ip| match ip {
                IpAddr::V4(v4) => RData::A(A(v4)),
                IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
            });
        if let Some(data) = data {
            reply.add_answer(Record::from_rdata(query.name().clone(), STEERED_TTL, data));
        }
        reply
    }
}

/// The address to answer with: `steer` itself, or when it is unspecified
/// the address the question arrived on, if that is of the same family.
fn answer_address(steer: IpAddr, arrived: IpAddr) -> Option<IpAddr> {
    if !steer.is_unspecified() {
        return Some(steer);
    }
    let arrived = crackbox_policy::canonical_ip(arrived);
    (arrived.is_ipv4() == steer.is_ipv4() && !arrived.is_unspecified()).then_some(arrived)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::str::FromStr;

    fn ask(steer: SteerTo, kind: RecordType) -> Vec<RData> {
        ask_on(steer, kind, "192.0.2.9".parse().unwrap())
    }

    fn ask_on(steer: SteerTo, kind: RecordType, arrived: IpAddr) -> Vec<RData> {
        let mut request = Message::query();
        request.add_query(Query::query(Name::from_str("Allowed.Test.").unwrap(), kind));
        let reply = steer.reply(&request, arrived);
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert_eq!(reply.metadata.id, request.metadata.id);
        assert_eq!(reply.queries, request.queries);
        for answer in &reply.answers {
            assert_eq!(&answer.name, request.queries[0].name());
            assert_eq!(answer.ttl, STEERED_TTL);
        }
        reply.answers.into_iter().map(|r| r.data).collect()
    }

    #[test]
    fn answers_by_type_and_family() {
        let v4 = Ipv4Addr::new(10, 213, 0, 1);
        let v6: Ipv6Addr = "fd00::1".parse().unwrap();
        let both = SteerTo {
            v4: Some(v4),
            v6: Some(v6),
        };
        let only_v4 = SteerTo { v4: Some(v4), v6: None };
        let cases = [
            (both, RecordType::A, vec![RData::A(A(v4))]),
            (both, RecordType::AAAA, vec![RData::AAAA(AAAA(v6))]),
            (only_v4, RecordType::A, vec![RData::A(A(v4))]),
            (only_v4, RecordType::AAAA, vec![]),
            (both, RecordType::CNAME, vec![]),
            (both, RecordType::HTTPS, vec![]),
            (both, RecordType::SVCB, vec![]),
        ];
        for (steer, kind, want) in cases {
            assert_eq!(ask(steer, kind), want, "{steer:?} {kind:?}");
        }
    }

    #[test]
    fn the_unspecified_address_steers_to_where_the_question_arrived() {
        let wildcard = SteerTo {
            v4: Some(Ipv4Addr::UNSPECIFIED),
            v6: None,
        };
        let jail = Ipv4Addr::new(10, 213, 128, 2);
        let other = Ipv4Addr::new(10, 213, 128, 34);
        assert_eq!(ask_on(wildcard, RecordType::A, jail.into()), vec![RData::A(A(jail))]);
        assert_eq!(ask_on(wildcard, RecordType::A, other.into()), vec![RData::A(A(other))]);
        let mapped: IpAddr = "::ffff:10.213.128.2".parse().unwrap();
        assert_eq!(ask_on(wildcard, RecordType::A, mapped), vec![RData::A(A(jail))]);
        assert_eq!(ask_on(wildcard, RecordType::AAAA, jail.into()), vec![]);
        let both = SteerTo {
            v4: Some(Ipv4Addr::UNSPECIFIED),
            v6: Some(Ipv6Addr::UNSPECIFIED),
        };
        let v6: Ipv6Addr = "fd00::2".parse().unwrap();
        assert_eq!(ask_on(both, RecordType::AAAA, v6.into()), vec![RData::AAAA(AAAA(v6))]);
        assert_eq!(ask_on(both, RecordType::A, v6.into()), vec![]);
        assert_eq!(ask_on(both, RecordType::A, Ipv4Addr::UNSPECIFIED.into()), vec![]);
    }

    #[test]
    fn first_address_of_each_family() {
        let addresses: Vec<IpAddr> = ["10.0.0.1", "fd00::1", "10.0.0.2"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let steer = SteerTo::from_addresses(&addresses);
        assert_eq!(steer.v4, Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(steer.v6, Some("fd00::1".parse().unwrap()));
        assert_eq!(SteerTo::from_addresses(&[]), SteerTo::default());
    }
}
