//! The body of `POST /v1/pending/{id}` (ask mode's decision), decoded as
//! the control plane decodes it.
//!
//! Input: a request body. Checks: nothing panics; a body is accepted
//! exactly when it is a JSON object whose only field is `decision` with the
//! value `once`, `always` or `deny` (a reference check on
//! `serde_json::Value`); an accepted decision written out again decodes to
//! itself.

#![no_main]

use crackbox_policy::admin_body::decode;
use crackbox_policy::ask::{Answer, DecideBody};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = decode::<DecideBody>(data);
    let reference = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|value| {
            let object = value.as_object()?;
            let word = match (object.len(), object.get("decision")?) {
                (1, serde_json::Value::String(word)) => word.clone(),
                _ => return None,
            };
            Answer::ALL.into_iter().find(|answer| answer.as_str() == word)
        });
    // serde_json's Value keeps the last of duplicate keys where the strict
    // decoder refuses them: only an accepted body must match the reference.
    match &decoded {
        Ok(body) => assert_eq!(Some(body.decision), reference, "accepted a body the reference refuses"),
        Err(_) if reference.is_some() => {
            let text = String::from_utf8_lossy(data);
            assert!(
                text.matches("\"decision\"").count() > 1 || text.contains('\\'),
                "refused a valid decision: {text}"
            );
        }
        Err(_) => {}
    }
    if let Ok(body) = decoded {
        let json = serde_json::to_vec(&body).expect("a decision serialises");
        assert_eq!(json, format!("{{\"decision\":\"{}\"}}", body.decision).into_bytes());
        assert_eq!(
            decode::<DecideBody>(&json).map(|b| b.decision).ok(),
            Some(body.decision)
        );
    }
});
