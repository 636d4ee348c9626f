//! The admin API's register and unregister bodies, parsed and validated as
//! the control plane does (`crackbox_fuzz::admin` calls the same decoder).
//!
//! Input: a request body. Checks: nothing panics; a registration that is
//! accepted is stored in a normalised form that is itself accepted and
//! stored unchanged (normalising is idempotent), also after a JSON round
//! trip as `/v1/state` and the state file carry it; an unregister address is
//! canonical after one parse.

#![no_main]

use crackbox_policy::{parse_source_ip, MAX_ENTRIES};
use crackbox_fuzz::admin;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((ip, stored)) = admin::register(data) {
        assert_eq!(stored.ip, ip.to_string());
        assert!(stored.allowlist.len() <= MAX_ENTRIES);
        assert_eq!(
            stored.normalised().as_ref(),
            Ok(&stored),
            "normalising is not idempotent"
        );
        let json = serde_json::to_vec(&stored).expect("a spec serialises");
        let (ip_again, again) = admin::register(&json).unwrap_or_else(|e| panic!("stored form is refused: {e}"));
        assert_eq!((ip_again, &again), (ip, &stored), "stored form changes on a round trip");
        let original = admin::parse_registration(data).expect("parsed once already");
        assert_eq!(original.id, stored.id, "id is stored as given");
    }
    if let Ok(ip) = admin::unregister(data) {
        assert_eq!(
            parse_source_ip(&ip.to_string()),
            Ok(ip),
            "canonical address does not parse back"
        );
    }
});
