//! Params are taken by name only (PROTOCOL.md describes every method's
//! params as an object). `serde`'s derived structs also accept a JSON array
//! as the fields in declaration order, which would let `limits: [10]` set
//! `maxResultChars` silently; fields holding a struct use these instead, so
//! an array there is refused with `-32602` naming the field.

use serde::de::{Deserialize, Deserializer, Visitor};

/// A struct read only from a JSON object.
pub struct Named<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Named<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(MapOnly(d)).map(Named)
    }
}

/// For `#[serde(deserialize_with)]` on a struct field.
pub fn one<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Named::<T>::deserialize(d).map(|n| n.0)
}

/// For an optional struct field.
pub fn option<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<Named<T>>::deserialize(d).map(|o| o.map(|n| n.0))
}

/// For an optional list of structs.
pub fn option_vec<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    let list = Option::<Vec<Named<T>>>::deserialize(d)?;
    Ok(list.map(|l| l.into_iter().map(|n| n.0).collect()))
}

/// Hands a struct's visitor a map, never a sequence.
struct MapOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}
