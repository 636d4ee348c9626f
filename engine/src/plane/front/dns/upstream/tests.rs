//! The query sent upstream: the client's question and what a resolver
//! needs, nothing else of the client's message.

use super::*;
use hickory_proto::op::Query;
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::str::FromStr;

fn client_query() -> Message {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.metadata.checking_disabled = true;
    message.add_query(Query::query(Name::from_str("allowed.test.").unwrap(), RecordType::A));
    message
}

#[test]
fn edns_options_and_extra_records_stay_behind() {
    let mut request = client_query();
    let mut edns = Edns::new();
    edns.set_max_payload(4000).set_version(0).set_dnssec_ok(true);
    edns.flags_mut().z = 0x1234;
    edns.options_mut()
        .insert(EdnsOption::Unknown(65001, b"SECRET!!".to_vec()));
    request.set_edns(edns);
    let smuggled = Record::from_rdata(
        Name::from_str("smuggled.test.").unwrap(),
        60,
        RData::A(A::new(1, 2, 3, 4)),
    );
    request.add_additional(smuggled.clone());
    request.add_answer(smuggled.clone());
    request.add_authority(smuggled);

    let (bytes, id) = fresh_query(&request).unwrap();
    assert!(!bytes.windows(8).any(|w| w == b"SECRET!!"));
    let sent = Message::from_vec(&bytes).unwrap();
    assert_eq!(sent.metadata.id, id);
    assert_eq!(sent.queries, request.queries);
    assert!(sent.metadata.recursion_desired && sent.metadata.checking_disabled);
    assert!(sent.answers.is_empty() && sent.authorities.is_empty() && sent.additionals.is_empty());
    let edns = sent.edns.expect("an OPT record");
    assert_eq!(edns.max_payload(), 4000);
    assert_eq!(edns.version(), 0);
    assert!(edns.flags().dnssec_ok);
    assert_eq!(edns.flags().z, 0, "reserved flag bits are not carried");
    assert!(edns.options().as_ref().is_empty(), "{:?}", edns.options());
}

#[test]
fn a_query_without_edns_gets_none() {
    let (bytes, _) = fresh_query(&client_query()).unwrap();
    let sent = Message::from_vec(&bytes).unwrap();
    assert!(sent.edns.is_none());
    assert!(!sent.metadata.authentic_data);
}

#[test]
fn the_edns_version_is_0_and_the_payload_size_stays_within_bounds() {
    for (asked, sent) in [(65535, 4096), (4000, 4000), (100, 512)] {
        let mut request = client_query();
        let mut edns = Edns::new();
        edns.set_max_payload(asked).set_version(7);
        request.set_edns(edns);
        let (bytes, _) = fresh_query(&request).unwrap();
        let edns = Message::from_vec(&bytes).unwrap().edns.expect("an OPT record");
        assert_eq!((edns.version(), edns.max_payload()), (0, sent), "asked {asked}");
    }
}
