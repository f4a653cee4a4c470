//! The JSON header (serialize type 0): hand-written encoder, visitor-based lenient decoder.
//!
//! Encoding writes the keys in the order the Rust client prints them, every key always present:
//!
//! ```text
//! {"code":0,"language":"JAVA","version":475,"opaque":9,"flag":1,"remark":null,
//!  "extFields":{"queueId":"0"},"serializeTypeCurrentRPC":"JSON"}
//! ```
//!
//! Decoding tries the direct scanner of [`json_scan`] first, which reads the flat shapes every
//! client writes in one pass. Whatever it leaves (nested values, numbers as strings, bad JSON)
//! the serde visitor decodes, and its readings and errors are the reference: no `serde_json::Value` tree is built, the
//! `extFields` text lands directly in the [`ExtFields`] arena, and a typical SEND header costs
//! two allocations (arena and entry list, both sized up front) plus serde_json's scratch buffer
//! when a string contains escapes (the `\u0001` separators of `properties` do) and one for a
//! remark, which requests rarely carry.

use std::fmt;

use bytes::{BufMut, BytesMut};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::remoting::error::FrameError;
use crate::remoting::ext::ExtFields;
use crate::remoting::frame::MAX_HEADER_BYTES;
use crate::remoting::header_codec::json_ext::{push_raw_value, ExtFieldsSeed};
use crate::remoting::header_codec::json_scan;
use crate::remoting::header_codec::json_write::{write_i64, write_str};
use crate::remoting::header_codec::parts::{
    header_too_long, too_many_fields, HeaderParts, HeaderRef,
};
use crate::remoting::header_codec::types::{LanguageCode, SerializeType};

/// Appends the JSON header of `cmd` (always a complete object with all eight keys).
pub(crate) fn encode(cmd: &HeaderRef<'_>, dst: &mut BytesMut) {
    dst.put_slice(b"{\"code\":");
    write_i64(dst, i64::from(cmd.code));
    dst.put_slice(b",\"language\":\"");
    dst.put_slice(cmd.language.name().as_bytes());
    dst.put_slice(b"\",\"version\":");
    write_i64(dst, i64::from(cmd.version));
    dst.put_slice(b",\"opaque\":");
    write_i64(dst, i64::from(cmd.opaque));
    dst.put_slice(b",\"flag\":");
    write_i64(dst, i64::from(cmd.flag));
    dst.put_slice(b",\"remark\":");
    match cmd.remark {
        Some(remark) => write_str(dst, remark),
        None => dst.put_slice(b"null"),
    }
    dst.put_slice(b",\"extFields\":{");
    for (i, (key, value)) in cmd.ext_fields.iter().enumerate() {
        if i > 0 {
            dst.put_u8(b',');
        }
        write_str(dst, key);
        dst.put_u8(b':');
        write_str(dst, value);
    }
    dst.put_slice(b"},\"serializeTypeCurrentRPC\":\"");
    dst.put_slice(SerializeType::Json.name().as_bytes());
    dst.put_slice(b"\"}");
}

/// Parses a JSON header: the usual shapes with the direct scanner ([`json_scan`]), the rest
/// with the serde visitor below.
///
/// # Errors
///
/// [`FrameError::MalformedJsonHeader`] if the text is not a JSON object, lacks `code` or
/// `opaque`, or holds a value of an impossible type (such as an object for `code`).
///
/// A header longer than [`MAX_HEADER_BYTES`] is only scanned for `code`, `opaque` and `flag`
/// (linear, allocating nothing but serde_json's scratch for escaped keys) and comes back with
/// `refused` set, as does one with more than
/// [`MAX_EXT_FIELDS`](crate::remoting::MAX_EXT_FIELDS) fields.
pub(crate) fn decode(header: &[u8]) -> Result<HeaderParts, FrameError> {
    match json_scan::decode(header) {
        Some(parts) => Ok(parts),
        None => decode_with_serde(header),
    }
}

/// [`decode`] through the serde visitor alone: the reference the direct scanner
/// ([`json_scan`]) must agree with, and the decoder of every header it leaves alone.
pub(crate) fn decode_with_serde(header: &[u8]) -> Result<HeaderParts, FrameError> {
    let mut de = serde_json::Deserializer::from_slice(header);
    let skip = header.len() > MAX_HEADER_BYTES;
    let parts = HeaderSeed { text_capacity: if skip { 0 } else { header.len() }, skip }
        .deserialize(&mut de)
        .and_then(|parts| de.end().map(|()| parts))
        .map_err(|e| FrameError::MalformedJsonHeader(e.to_string()))?;
    Ok(HeaderParts {
        refused: if skip { Some(header_too_long(header.len())) } else { parts.refused },
        ..parts
    })
}

struct HeaderSeed {
    text_capacity: usize,
    /// Read only `code`, `opaque`, `flag`, `language` and `version`; skip everything else.
    skip: bool,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed {
    type Value = HeaderParts;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<HeaderParts, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed {
    type Value = HeaderParts;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a remoting command header object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeaderParts, A::Error> {
        let mut code = None;
        let mut opaque = None;
        let mut language = LanguageCode::default();
        let mut version = 0;
        let mut flag = 0;
        let mut remark = None;
        let mut ext_fields = ExtFields::new();
        let mut refused = None;
        while let Some(key) = map.next_key::<Key>()? {
            let key = match key {
                Key::Remark | Key::ExtFields if self.skip => Key::Other,
                key => key,
            };
            match key {
                Key::Code => code = map.next_value::<LenientI32>()?.0,
                Key::Opaque => opaque = map.next_value::<LenientI32>()?.0,
                Key::Version => version = map.next_value::<LenientI32>()?.0.unwrap_or(0),
                Key::Flag => flag = map.next_value::<LenientI32>()?.0.unwrap_or(0),
                Key::Language => language = map.next_value::<LenientLanguage>()?.0,
                Key::Remark => {
                    let raw: &'de RawValue = map.next_value()?;
                    let mut text = String::with_capacity(raw.get().len());
                    remark = push_raw_value(&mut text, raw.get()).map(|_| text);
                }
                Key::ExtFields => {
                    let decoded =
                        map.next_value_seed(ExtFieldsSeed { text_capacity: self.text_capacity })?;
                    ext_fields = decoded.fields;
                    refused = decoded.overflow.map(too_many_fields);
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(HeaderParts {
            code: code.ok_or_else(|| de::Error::missing_field("code"))?,
            language,
            version,
            opaque: opaque.ok_or_else(|| de::Error::missing_field("opaque"))?,
            flag,
            remark,
            ext_fields,
            refused,
        })
    }
}

/// The top-level keys the decoder looks at; `serializeTypeCurrentRPC` is deliberately `Other`.
enum Key {
    Code,
    Language,
    Version,
    Opaque,
    Flag,
    Remark,
    ExtFields,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a header key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "code" => Key::Code,
                    "language" => Key::Language,
                    "version" => Key::Version,
                    "opaque" => Key::Opaque,
                    "flag" => Key::Flag,
                    "remark" => Key::Remark,
                    "extFields" => Key::ExtFields,
                    _ => Key::Other,
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// An `i32` written as a JSON integer, an integral float or a numeric string; `null` is `None`.
struct LenientI32(Option<i32>);

impl<'de> Deserialize<'de> for LenientI32 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = LenientI32;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 32-bit integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<LenientI32, E> {
                i32::try_from(v)
                    .map(|v| LenientI32(Some(v)))
                    .map_err(|_| E::custom(format_args!("integer {v} out of 32-bit range")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LenientI32, E> {
                i32::try_from(v)
                    .map(|v| LenientI32(Some(v)))
                    .map_err(|_| E::custom(format_args!("integer {v} out of 32-bit range")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<LenientI32, E> {
                let in_range =
                    v.fract() == 0.0 && v >= f64::from(i32::MIN) && v <= f64::from(i32::MAX);
                if in_range {
                    // Integral and within range, so the conversion is exact.
                    Ok(LenientI32(Some(v as i32)))
                } else {
                    Err(E::custom(format_args!("{v} is not a 32-bit integer")))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LenientI32, E> {
                v.trim().parse().map(|v| LenientI32(Some(v))).map_err(|_| {
                    E::custom(format_args!(
                        "{:?} is not a 32-bit integer",
                        crate::remoting::error::quote(v)
                    ))
                })
            }
            fn visit_unit<E: de::Error>(self) -> Result<LenientI32, E> {
                Ok(LenientI32(None))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A language given by name (any case) or binary code; unknown values are `OTHER`, `null` is
/// the default.
struct LenientLanguage(LanguageCode);

impl<'de> Deserialize<'de> for LenientLanguage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = LenientLanguage;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a language name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::from_name(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(
                    u8::try_from(v).map_or(LanguageCode::Other, LanguageCode::from_code),
                ))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::Other))
            }
            fn visit_unit<E: de::Error>(self) -> Result<LenientLanguage, E> {
                Ok(LenientLanguage(LanguageCode::default()))
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
