//! The body of `POST /v1/pending/{id}` (ask mode's decision), decoded as
//! the control plane decodes it.
//!
//! Input: a request body. Checks: nothing panics; a body is accepted
//! exactly when it is a JSON object whose fields are `decision` with the
//! value `once`, `always` or `deny` and, optionally, `for` with a period
//! `Period::parse` takes (a reference check on `serde_json::Value`); an
//! accepted decision written out again decodes to itself.

#![no_main]

use crackbox_wire::admin::decode;
use crackbox_wire::ask::{Answer, DecideBody};
use crackbox_policy::grant::Period;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = decode::<DecideBody>(data);
    let reference = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|value| {
            let object = value.as_object()?;
            let period = match object.get("for") {
                None => None,
                Some(serde_json::Value::String(text)) => Some(Period::parse(text).ok()?),
                Some(_) => return None,
            };
            let word = match (object.len() - usize::from(period.is_some()), object.get("decision")?) {
                (1, serde_json::Value::String(word)) => word.clone(),
                _ => return None,
            };
            Answer::ALL.into_iter().find(|answer| answer.as_str() == word).map(|answer| (answer, period))
        });
    // serde_json's Value keeps the last of duplicate keys where the strict
    // decoder refuses them: only an accepted body must match the reference.
    match &decoded {
        Ok(body) => assert_eq!(Some((body.decision, body.period)), reference, "accepted a body the reference refuses"),
        Err(_) if reference.is_some() => {
            let text = String::from_utf8_lossy(data);
            assert!(
                text.matches("\"decision\"").count() > 1 || text.matches("\"for\"").count() > 1 || text.contains('\\'),
                "refused a valid decision: {text}"
            );
        }
        Err(_) => {}
    }
    if let Ok(body) = decoded {
        let json = serde_json::to_vec(&body).expect("a decision serialises");
        let written = match body.period {
            Some(period) => format!("{{\"decision\":\"{}\",\"for\":\"{period}\"}}", body.decision),
            None => format!("{{\"decision\":\"{}\"}}", body.decision),
        };
        assert_eq!(json, written.into_bytes());
        assert_eq!(
            decode::<DecideBody>(&json).map(|b| (b.decision, b.period)).ok(),
            Some((body.decision, body.period))
        );
    }
});
