//! Payloads that hold a NaN or an infinite number. JSON has no such numbers,
//! and serde_json writes them as `null` without an error: the job would be
//! stored with `null` where the number was, and then fail to decode (an `f64`)
//! or run on other data (an `Option<f64>` read back as `None`). The enqueue
//! refuses such a payload instead (`Error::NonFiniteNumber`).
//!
//! The check walks the payload with a serializer that writes nothing and fails
//! at the first non-finite float. It runs only when the JSON text holds `null`,
//! so payloads without one pay a substring search and nothing more.

use serde::ser::{self, Serialize, Serializer};

/// Whether `value` serialises a NaN or an infinite `f32` or `f64` anywhere.
pub(crate) fn holds_non_finite<T: Serialize + ?Sized>(value: &T) -> bool {
    value.serialize(Walk).is_err()
}

/// Stops the walk: a non-finite float was found (or the value failed to
/// serialise, which the real serialisation reports on its own).
#[derive(Debug)]
pub(crate) struct Found;

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a non-finite number")
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Found
    }
}

/// A serializer that writes nothing and fails at a non-finite float.
struct Walk;

type Done = Result<(), Found>;

fn float(finite: bool) -> Done {
    if finite {
        Ok(())
    } else {
        Err(Found)
    }
}

/// Scalars that cannot hold a float.
macro_rules! fine {
    ($($name:ident: $ty:ty),* $(,)?) => {
        $(fn $name(self, _: $ty) -> Done { Ok(()) })*
    };
}

impl Serializer for Walk {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Walk;
    type SerializeTuple = Walk;
    type SerializeTupleStruct = Walk;
    type SerializeTupleVariant = Walk;
    type SerializeMap = Walk;
    type SerializeStruct = Walk;
    type SerializeStructVariant = Walk;

    fine!(
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_i128: i128, serialize_u8: u8, serialize_u16: u16,
        serialize_u32: u32, serialize_u64: u64, serialize_u128: u128, serialize_char: char,
        serialize_str: &str, serialize_bytes: &[u8], serialize_unit_struct: &'static str,
    );

    fn serialize_f32(self, v: f32) -> Done {
        float(v.is_finite())
    }
    fn serialize_f64(self, v: f64) -> Done {
        float(v.is_finite())
    }
    fn serialize_none(self) -> Done {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Done {
        v.serialize(Walk)
    }
    fn serialize_unit(self) -> Done {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Done {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Done {
        v.serialize(Walk)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Done {
        v.serialize(Walk)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Walk, Found> {
        Ok(Walk)
    }
    fn serialize_tuple(self, _: usize) -> Result<Walk, Found> {
        Ok(Walk)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Walk, Found> {
        Ok(Walk)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Walk, Found> {
        Ok(Walk)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Walk, Found> {
        Ok(Walk)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Walk, Found> {
        Ok(Walk)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Walk, Found> {
        Ok(Walk)
    }
}

/// The element methods of the compound serializers: each walks its value.
macro_rules! walks {
    ($($trait:ident :: $method:ident ($($name:ident: $ty:ty),*)),* $(,)?) => {
        $(impl ser::$trait for Walk {
            type Ok = ();
            type Error = Found;
            fn $method<T: Serialize + ?Sized>(&mut self, $($name: $ty,)* v: &T) -> Done {
                $(let _ = $name;)*
                v.serialize(Walk)
            }
            fn end(self) -> Done {
                Ok(())
            }
        })*
    };
}

walks!(
    SerializeSeq::serialize_element(),
    SerializeTuple::serialize_element(),
    SerializeTupleStruct::serialize_field(),
    SerializeTupleVariant::serialize_field(),
    SerializeStruct::serialize_field(key: &'static str),
    SerializeStructVariant::serialize_field(key: &'static str),
);

impl ser::SerializeMap for Walk {
    type Ok = ();
    type Error = Found;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Done {
        k.serialize(Walk)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Done {
        v.serialize(Walk)
    }
    fn end(self) -> Done {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    struct Reading {
        station: String,
        value: f64,
        previous: Option<f32>,
        history: Vec<(u32, f64)>,
        tags: BTreeMap<String, f64>,
    }

    fn reading() -> Reading {
        Reading {
            station: "null".into(),
            value: 1.5,
            previous: None,
            history: vec![(1, 2.0)],
            tags: BTreeMap::from([("t".into(), 0.0)]),
        }
    }

    #[test]
    fn finds_a_non_finite_float_wherever_it_is() {
        assert!(!holds_non_finite(&reading()));
        let cases: [fn(&mut Reading); 5] = [
            |r| r.value = f64::NAN,
            |r| r.previous = Some(f32::INFINITY),
            |r| r.history.push((2, f64::NEG_INFINITY)),
            |r| {
                r.tags.insert("u".into(), f64::NAN);
            },
            |r| r.value = -f64::INFINITY,
        ];
        for (i, spoil) in cases.into_iter().enumerate() {
            let mut r = reading();
            spoil(&mut r);
            assert!(holds_non_finite(&r), "case {i}");
        }
    }
}
