//! JSON text to a [`serde_json::Value`] with duplicate object keys refused at every depth.
//! RFC 8259 §4 leaves the meaning of repeated names to the implementation; `serde_json`
//! keeps the last one, so `{"op":"hello","op":"shutdown"}` would act on whichever a reader
//! happened to look at. The protocol refuses such a request instead.

use serde::de::{Deserialize, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses `text` like `serde_json::from_str::<Value>`, but an object with a key twice is an
/// error naming the key. The nesting limit is serde_json's own.
pub fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(text).map(|s| s.0)
}

struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("number {v} is not finite")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(A::Error::custom(format!("duplicate key `{k}`")));
            }
            let Strict(v) = map.next_value()?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::from_str;

    #[test]
    fn parses_like_serde_json_without_duplicates() {
        let text = r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}],"c":"d"}"#;
        assert_eq!(
            from_str(text).unwrap(),
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
    }

    #[test]
    fn a_repeated_key_is_an_error_at_any_depth() {
        let e = from_str(r#"{"op":"hello","op":"shutdown"}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate key `op`"), "{e}");
        let e = from_str(r#"{"a":{"b":1,"b":2}}"#).unwrap_err();
        assert!(e.to_string().contains("duplicate key `b`"), "{e}");
        assert!(from_str(r#"[{"a":1},{"a":2}]"#).is_ok());
    }
}
