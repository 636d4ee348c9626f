//! Structs decoded from JSON objects only.
//!
//! serde's derive also accepts a struct as a sequence of its field values,
//! so `["10.0.0.2","x",["pypi.org"]]` would decode as a registration. A type
//! declared with `#[serde(remote = "Self")]` and [`object_only!`](crate::object_only) decodes from
//! a map and nothing else (an array, string or `null` is "invalid type: ...,
//! expected a JSON object"), while keeping the derived field handling:
//! unknown and duplicate fields, and the paths `serde_path_to_error` reports.

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
