//! Structs decoded from JSON objects only.
//!
//! serde's derive also accepts a struct as a sequence of its field values,
//! so `["10.0.0.2","x",["pypi.org"]]` would decode as a registration. A type
//! declared with `#[serde(remote = "Self")]` and [`object_only!`](crate::object_only) decodes from
//! a map and nothing else (an array, string or `null` is "invalid type: ...,
//! expected a JSON object"), while keeping the derived field handling:
//! unknown and duplicate fields, and the paths `serde_path_to_error` reports.
//! [`decode`] reads a whole body so, with an error that names the field.

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// The derived field-by-field decoding of a struct (the inherent
/// `deserialize` that `#[serde(remote = "Self")]` generates).
pub trait FromFields<'de>: Sized {
    /// Decodes the struct from `deserializer`, which yields a map.
    fn from_fields<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error>;
}

/// Decodes `T` from a map only.
pub fn deserialize<'de, D: Deserializer<'de>, T: FromFields<'de>>(deserializer: D) -> Result<T, D::Error> {
    deserializer.deserialize_map(ObjectVisitor(PhantomData))
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: FromFields<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::from_fields(MapAccessDeserializer::new(map))
    }
}

/// Implements `Deserialize` for a struct declared with
/// `#[derive(Deserialize)] #[serde(remote = "Self")]` so that it decodes
/// from a JSON object only; `object_only!(Type, Serialize)` also implements
/// `Serialize` from the derived (remote) serializer.
#[macro_export]
macro_rules! object_only {
    ($type:ty) => {
        impl<'de> $crate::json_object::FromFields<'de> for $type {
            fn from_fields<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                // The inherent function `remote = "Self"` generates.
                <$type>::deserialize(deserializer)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $type {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $crate::json_object::deserialize(deserializer)
            }
        }
    };
    ($type:ty, Serialize) => {
        $crate::object_only!($type);

        impl ::serde::Serialize for $type {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                // The inherent function `remote = "Self"` generates.
                <$type>::serialize(self, serializer)
            }
        }
    };
}

/// A body that is not the expected JSON; the message is for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

/// Decodes a whole body as `T`.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let wrong = wrong_type(bytes, err.path());
        let inner = err.into_inner();
        if let (Some(kind), true) = (wrong, inner.is_syntax()) {
            BodyError(format!("{path}: invalid type: {kind}, expected a string"))
        } else if path == "." || inner.is_syntax() || inner.is_eof() {
            BodyError(format!("invalid JSON body: {inner}"))
        } else {
            BodyError(format!("{path}: {}", without_position(&inner)))
        }
    })?;
    deserializer
        .end()
        .map_err(|err| BodyError(format!("invalid JSON body: {err}")))?;
    Ok(value)
}

/// What stands at `path` in a body that is valid JSON: serde_json reports a
/// value of the wrong type for an enum (`"mode": null`) as a syntax error,
/// though the body parses; `None` when the body is not valid JSON (a real
/// syntax error) or the path names nothing.
fn wrong_type(bytes: &[u8], path: &serde_path_to_error::Path) -> Option<&'static str> {
    use serde_path_to_error::Segment;
    let mut value = &serde_json::from_slice::<serde_json::Value>(bytes).ok()?;
    for segment in path.iter() {
        value = match segment {
            Segment::Seq { index } => value.get(index)?,
            Segment::Map { key } => value.get(key)?,
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    Some(match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => return None,
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    })
}

/// A data error's message without serde_json's " at line L column C": the
/// path already says where, and the client's body is usually one line.
fn without_position(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let position = format!(" at line {} column {}", err.line(), err.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(remote = "Self", deny_unknown_fields)]
    struct Pair {
        a: u8,
        b: Vec<Pair>,
    }
    object_only!(Pair);

    #[test]
    fn only_objects_decode_at_every_depth() {
        let nested: Pair = serde_json::from_str(r#"{"a":1,"b":[{"a":2,"b":[]}]}"#).unwrap();
        assert_eq!(nested.b[0].a, 2);
        for text in [r#"[1,[]]"#, r#"{"a":1,"b":[[2,[]]]}"#, "null", "\"a\"", "1"] {
            let err = serde_json::from_str::<Pair>(text).unwrap_err().to_string();
            assert!(err.contains("expected a JSON object"), "{text}: {err}");
        }
        let unknown = serde_json::from_str::<Pair>(r#"{"a":1,"b":[],"c":0}"#).unwrap_err();
        assert!(unknown.to_string().contains("unknown field `c`"), "{unknown}");
    }
}
