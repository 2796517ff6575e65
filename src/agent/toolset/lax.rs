//! Numbers and booleans read as pydantic's lax mode reads them (the SDK validates the reference's
//! arguments with pydantic): an integer may come as a float with no fraction or as a numeric string,
//! and any size (kept here at the nearest `i64`); a boolean as `0`/`1` or as `"true"`, `"no"`, ...

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// An integer argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaxInt(pub i64);

/// A boolean argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaxBool(pub bool);

impl JsonSchema for LaxInt {
    fn schema_name() -> Cow<'static, str> {
        "integer".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer"})
    }
}

impl JsonSchema for LaxBool {
    fn schema_name() -> Cow<'static, str> {
        "boolean".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "boolean"})
    }
}

/// Python's big integers, kept at the nearest `i64`: past that no line, byte or millisecond count
/// differs.
fn saturating(value: f64) -> i64 {
    if value >= i64::MAX as f64 {
        i64::MAX
    } else if value <= i64::MIN as f64 {
        i64::MIN
    } else {
        value as i64
    }
}

struct IntVisitor;

impl Visitor<'_> for IntVisitor {
    type Value = LaxInt;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an integer")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<LaxInt, E> {
        Ok(LaxInt(i64::from(value)))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<LaxInt, E> {
        Ok(LaxInt(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<LaxInt, E> {
        Ok(LaxInt(i64::try_from(value).unwrap_or(i64::MAX)))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<LaxInt, E> {
        if value.is_finite() && value.fract() == 0.0 {
            Ok(LaxInt(saturating(value)))
        } else {
            Err(E::custom(
                "a number with a fractional part is not an integer",
            ))
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<LaxInt, E> {
        let text = text.trim();
        if let Ok(value) = text.parse::<i64>() {
            return Ok(LaxInt(value));
        }
        // Digits past 64 bits: still an integer to Python.
        let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
        if !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return Ok(LaxInt(if text.starts_with('-') {
                i64::MIN
            } else {
                i64::MAX
            }));
        }
        Err(E::custom("a string that is not an integer"))
    }
}

impl<'de> Deserialize<'de> for LaxInt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LaxInt, D::Error> {
        deserializer.deserialize_any(IntVisitor)
    }
}

struct BoolVisitor;

impl Visitor<'_> for BoolVisitor {
    type Value = LaxBool;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a boolean")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<LaxBool, E> {
        Ok(LaxBool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<LaxBool, E> {
        match value {
            0 => Ok(LaxBool(false)),
            1 => Ok(LaxBool(true)),
            _ => Err(E::custom("only 0 and 1 are booleans")),
        }
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<LaxBool, E> {
        self.visit_i64(i64::try_from(value).unwrap_or(i64::MAX))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<LaxBool, E> {
        if value == 0.0 {
            Ok(LaxBool(false))
        } else if value == 1.0 {
            Ok(LaxBool(true))
        } else {
            Err(E::custom("only 0 and 1 are booleans"))
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<LaxBool, E> {
        match text.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Ok(LaxBool(false)),
            "1" | "on" | "t" | "true" | "y" | "yes" => Ok(LaxBool(true)),
            _ => Err(E::custom("a string that is not a boolean")),
        }
    }
}

impl<'de> Deserialize<'de> for LaxBool {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LaxBool, D::Error> {
        deserializer.deserialize_any(BoolVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn int(value: serde_json::Value) -> Option<i64> {
        serde_json::from_value::<LaxInt>(value)
            .ok()
            .map(|lax| lax.0)
    }

    #[test]
    fn integers_read_as_pydantic_reads_them() {
        assert_eq!(int(json!(5)), Some(5));
        assert_eq!(int(json!(5.0)), Some(5));
        assert_eq!(int(json!("5")), Some(5));
        assert_eq!(int(json!(1e20)), Some(i64::MAX));
        assert_eq!(int(json!("-100000000000000000000")), Some(i64::MIN));
        assert_eq!(int(json!(5.5)), None);
        assert_eq!(int(json!("five")), None);
        assert_eq!(int(json!(true)), Some(1));
    }

    #[test]
    fn booleans_read_as_pydantic_reads_them() {
        let boolean = |value| {
            serde_json::from_value::<LaxBool>(value)
                .ok()
                .map(|lax| lax.0)
        };
        assert_eq!(boolean(json!("yes")), Some(true));
        assert_eq!(boolean(json!(0)), Some(false));
        assert_eq!(boolean(json!(2)), None);
        assert_eq!(boolean(json!("maybe")), None);
    }
}
