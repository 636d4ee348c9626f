//! The DNS filter of the real `crackbox` binary, queried from a workload
//! namespace, forwarding to a resolver in the upstream namespace (see
//! `transparent_lab` for the topology). Root only.

use crackbox_test_support::netns_lab::{can_run, Lab, REAL};
use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn addresses(reply: &Message) -> Vec<std::net::IpAddr> {
    reply
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.into()),
            _ => None,
        })
        .collect()
}

#[test]
fn dns_filter_decides_by_name_and_type() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    lab.seen.dns_asked.lock().unwrap().clear();
    let allowed = lab.dns_query("www.allowed.test.", RecordType::A);
    assert_eq!(allowed.metadata.response_code, ResponseCode::NoError);
    assert_eq!(addresses(&allowed), vec![std::net::IpAddr::V4(REAL)]);

    let denied = lab.dns_query("denied.test.", RecordType::A);
    assert_eq!(denied.metadata.response_code, ResponseCode::NXDomain);
    assert!(denied.answers.is_empty());

    let any = lab.dns_query("allowed.test.", RecordType::ANY);
    assert_eq!(any.metadata.response_code, ResponseCode::Refused);

    let txt = lab.dns_query("allowed.test.", RecordType::TXT);
    assert_eq!(txt.metadata.response_code, ResponseCode::Refused);

    assert_eq!(
        *lab.seen.dns_asked.lock().unwrap(),
        vec!["www.allowed.test."],
        "only the allowed name went upstream"
    );

    lab.seen.dns_down.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    let down = lab.dns_query("allowed.test.", RecordType::A);
    assert_eq!(down.metadata.response_code, ResponseCode::ServFail, "upstream down");
}

#[test]
fn dns_filter_never_answers_a_response_packet() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let mut spoofed = Message::response(4321, hickory_proto::op::OpCode::Query);
    spoofed.add_query(Query::query(Name::from_str("allowed.test.").unwrap(), RecordType::A));
    assert_eq!(spoofed.metadata.message_type, MessageType::Response);
    let reply = lab.dns_exchange(&spoofed.to_vec().unwrap(), Duration::from_secs(1));
    assert!(reply.is_none(), "crackbox answered a QR=1 packet");
    let normal = lab.dns_query("allowed.test.", RecordType::A);
    assert_eq!(
        normal.metadata.response_code,
        ResponseCode::NoError,
        "the filter is still serving"
    );
}
