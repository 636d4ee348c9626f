//! The DNS filter of the real `crackbox` binary, queried from a workload
//! namespace, forwarding to a resolver in the upstream namespace (see
//! `transparent_lab` for the topology). Root only.

use crackbox_test_support::netns_lab::{can_run, in_ns, Lab, ADMIN, REAL, WORKLOAD};
use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The workload's record in `/v1/usage`.
fn usage(lab: &Lab) -> serde_json::Value {
    let path = format!("/v1/usage?ip={WORKLOAD}");
    let (status, body) = in_ns(&lab.proxy_ns, move || {
        crackbox_test_support::http(ADMIN.parse().unwrap(), "GET", &path, None, &[])
    });
    assert_eq!(status, 200, "{body}");
    let records: serde_json::Value = serde_json::from_str(&body).unwrap();
    records[0].clone()
}

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
    assert!(
        crackbox_test_support::wait_until(Duration::from_secs(5), || lab.seen.dns_stopped.load(Ordering::SeqCst)),
        "the upstream resolver did not stop"
    );
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

/// README, "Usage and bandwidth caps": `denials` in `/v1/usage` counts the
/// DNS filter's denials too, by reason; an allowed name or a refused record
/// type adds none, and no query moves bytes or opens a tunnel.
#[test]
fn dns_filter_denials_are_counted_in_usage() {
    if !can_run() {
        return;
    }
    let lab = Lab::start();
    let before = usage(&lab);
    assert_eq!(before["ip"], WORKLOAD.to_string());
    let not_allowed = |record: &serde_json::Value| record["denials"]["not-allowed"].as_u64().unwrap_or(0);

    for (name, kind) in [
        ("denied.test.", RecordType::A),
        ("denied.test.", RecordType::AAAA),
        ("elsewhere.example.test.", RecordType::A),
    ] {
        let reply = lab.dns_query(name, kind);
        assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain, "{name} {kind}");
    }
    let allowed = lab.dns_query("allowed.test.", RecordType::A);
    assert_eq!(allowed.metadata.response_code, ResponseCode::NoError);
    let refused = lab.dns_query("allowed.test.", RecordType::TXT);
    assert_eq!(refused.metadata.response_code, ResponseCode::Refused);

    let after = usage(&lab);
    assert_eq!(not_allowed(&after) - not_allowed(&before), 3, "{before} -> {after}");
    assert_eq!(after["denials"].as_object().map(|d| d.len()), Some(1), "{after}");
    for field in ["bytes_up", "bytes_down", "tunnels", "requests"] {
        assert_eq!(after[field], before[field], "{field}: {before} -> {after}");
    }
}
