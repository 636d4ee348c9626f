//! An engine answer shared by the readers that asked together, written as
//! JSON once for all of them (docs/architecture.md, "Admin reads under load").

use axum::body::Bytes;
use serde::Serialize;
use std::ops::Deref;
use std::sync::OnceLock;

/// One answer and, once a reader asked for it, its JSON.
#[derive(Debug)]
pub struct SharedAnswer<T> {
    value: T,
    json: OnceLock<Bytes>,
}

impl<T> SharedAnswer<T> {
    /// `value`, not written yet.
    pub fn new(value: T) -> Self {
        SharedAnswer {
            value,
            json: OnceLock::new(),
        }
    }
}

impl<T: Serialize> SharedAnswer<T> {
    /// The answer as JSON, written by the first reader that asks.
    pub fn json(&self) -> Result<Bytes, serde_json::Error> {
        if let Some(json) = self.json.get() {
            return Ok(json.clone());
        }
        let json = Bytes::from(serde_json::to_vec(&self.value)?);
        Ok(self.json.get_or_init(|| json).clone())
    }
}

impl<T> Deref for SharedAnswer<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_is_written_once_and_the_value_stays_readable() {
        let answer = SharedAnswer::new(vec![1u8, 2]);
        let first = answer.json().unwrap();
        assert_eq!(&first[..], b"[1,2]");
        assert_eq!(first.as_ptr(), answer.json().unwrap().as_ptr(), "the same bytes");
        assert_eq!(answer.len(), 2);
    }
}
