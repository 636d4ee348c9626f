//! The admin API's body parsing, as `control/src/api/body.rs` and
//! `routes.rs` do it (strict serde_json with field paths in errors, no
//! trailing bytes, then the engine's validation). The control crate keeps
//! that function private and pulls in tokio/axum/bollard, so the fuzz crate
//! mirrors it here; keep the two in step.

use crackbox_engine::policy::{parse_source_ip, RegistrationSpec};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::net::IpAddr;

/// `POST /v1/unregister` body, as control declares it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnregisterBody {
    /// The source address to remove.
    pub ip: String,
}

/// Decodes a whole body as `T`; the error is the message a client would see.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if path == "." || inner.is_syntax() || inner.is_eof() {
            format!("invalid JSON body: {inner}")
        } else {
            format!("{path}: {inner}")
        }
    })?;
    deserializer.end().map_err(|err| format!("invalid JSON body: {err}"))?;
    Ok(value)
}

/// `POST /v1/register`: the stored (normalised) registration, or the 400 message.
pub fn register(bytes: &[u8]) -> Result<(IpAddr, RegistrationSpec), String> {
    let spec: RegistrationSpec = parse(bytes)?;
    let (ip, registration) = spec.compile().map_err(|err| err.to_string())?;
    Ok((ip, RegistrationSpec::from_registration(ip, &registration)))
}

/// `POST /v1/unregister`: the address to remove, or the 400 message.
pub fn unregister(bytes: &[u8]) -> Result<IpAddr, String> {
    let body: UnregisterBody = parse(bytes)?;
    parse_source_ip(&body.ip).map_err(|err| format!("ip: {err}"))
}
