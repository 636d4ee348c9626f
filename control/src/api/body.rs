//! Strict JSON request bodies: unknown fields, wrong types, missing fields
//! and trailing bytes are 400 with a message naming the field.

use super::ApiError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// `POST /v1/unregister` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnregisterBody {
    /// The source address to remove.
    pub ip: String,
}

/// Decodes a whole body as `T`; a body over the limit is the extractor's 413.
pub fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))?;
    let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." || inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("invalid JSON body: {inner}"))
        } else {
            ApiError::bad_request(format!("{path}: {inner}"))
        }
    })?;
    deserializer
        .end()
        .map_err(|err| ApiError::bad_request(format!("invalid JSON body: {err}")))?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crackbox_engine::policy::RegistrationSpec;

    fn parse_spec(text: &str) -> Result<RegistrationSpec, String> {
        parse::<RegistrationSpec>(Ok(Bytes::from(text.to_string()))).map_err(|e| e.message)
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (r#"{"id":"a","allowlist":[]}"#, "`ip`"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":"github.com"}"#, "allowlist"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":["a.test",1]}"#, "allowlist[1]"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":[null]}"#, "allowlist[0]"),
            (r#"{"ip":"10.0.0.1","id":"a","allowlist":[],"extra":1}"#, "`extra`"),
            (r#"{"ip":10,"id":"a","allowlist":[]}"#, "ip"),
            (r#"{"ip":"10.0.0.1","id":null,"allowlist":[]}"#, "id"),
            (r#"{"ip":"10.0.0.1","ip":"10.0.0.2","id":"a","allowlist":[]}"#, "`ip`"),
        ];
        for (text, field) in cases {
            let err = parse_spec(text).unwrap_err();
            assert!(err.contains(field), "{text}: {err:?} should name {field}");
        }
    }

    #[test]
    fn syntax_errors_and_trailing_bytes_are_rejected() {
        for text in [
            "",
            "{",
            "[]",
            "null",
            r#"{"ip":"10.0.0.1","id":"a","allowlist":[]} x"#,
            "{}{}",
        ] {
            assert!(parse_spec(text).is_err(), "{text:?}");
        }
        let ok = parse_spec(" {\"ip\":\"10.0.0.1\",\"id\":\"a\",\"allowlist\":[]}\n").unwrap();
        assert_eq!(ok.ip, "10.0.0.1");
    }
}
