//! The admin API's register and unregister bodies, decoded and validated as
//! the control plane does (`crackbox_fuzz::admin` calls the same decoder).
//!
//! Input: a request body. Checks: nothing panics; a registration that is
//! accepted serialises to a form (as `/v1/state` and the state file carry
//! it) that decodes to the same registration and serialises to the same
//! bytes; an unregister address is canonical after one parse.

#![no_main]

use crackbox_fuzz::admin;
use crackbox_policy::{parse_source_ip, MAX_ENTRIES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(stored) = admin::register(data) {
        assert_eq!(
            parse_source_ip(&stored.ip.to_string()),
            Ok(stored.ip),
            "ip is canonical"
        );
        assert!(stored.allowlist.entries().len() <= MAX_ENTRIES);
        let json = serde_json::to_vec(&stored).expect("a spec serialises");
        let again = admin::register(&json).unwrap_or_else(|e| panic!("stored form is refused: {e}"));
        assert_eq!(again, stored, "stored form changes on a round trip");
        assert_eq!(
            serde_json::to_vec(&again).expect("a spec serialises"),
            json,
            "its JSON is stable"
        );
    }
    if let Ok(ip) = admin::unregister(data) {
        assert_eq!(
            parse_source_ip(&ip.to_string()),
            Ok(ip),
            "canonical address does not parse back"
        );
    }
});
