//! Request bodies for the admin API: the limit-checked bytes decoded by the
//! engine crate's strict JSON decoder (shared with the fuzz targets).

use super::ApiError;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use serde::de::DeserializeOwned;

pub use crackbox_engine::admin_body::UnregisterBody;

/// Decodes a whole body as `T`; a body over the limit is the extractor's 413.
pub fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))?;
    crackbox_engine::admin_body::decode(&bytes).map_err(|err| ApiError::bad_request(err.0))
}
