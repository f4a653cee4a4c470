//! Reading JSON into [`ExtFields`]: the serde seed that decodes an `extFields` object straight
//! into the map's arena, and the text helpers the direct scanner ([`json_scan`]) shares with
//! it. `ExtFields`' serde impls live here too, so the map itself knows nothing of JSON.
//!
//! Values are read leniently (see [`ExtFields`]' module docs): any JSON value is stored as the
//! text the client wrote, strings unescaped, `null` skipped.
//!
//! [`json_scan`]: super::json_scan

use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::remoting::ext::{ExtFields, MAX_EXT_FIELDS};
use crate::remoting::header_codec::parts::{too_many_fields, DEFAULT_ENTRIES};

impl Serialize for ExtFields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Lenient decoding: see the module docs. `null` decodes to an empty map; more than
/// [`MAX_EXT_FIELDS`] fields is an error. Values are read as raw JSON text, so this decodes from
/// serde_json's borrowing deserializers (`from_str`, `from_slice`) only.
impl<'de> Deserialize<'de> for ExtFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let decoded = ExtFieldsSeed { text_capacity: 0 }.deserialize(deserializer)?;
        match decoded.overflow {
            Some(n) => Err(de::Error::custom(too_many_fields(n))),
            None => Ok(decoded.fields),
        }
    }
}

/// What [`ExtFieldsSeed`] decoded.
#[derive(Debug)]
pub(crate) struct DecodedFields {
    /// The fields, duplicates resolved; empty when `overflow` is set.
    pub(crate) fields: ExtFields,
    /// `Some(n)` when the object had more than [`MAX_EXT_FIELDS`] fields (`n` counted so far;
    /// the rest was skipped without being stored).
    pub(crate) overflow: Option<usize>,
}

/// Decodes an `extFields` value with the arena pre-sized to `text_capacity` bytes (the caller
/// passes the header length, an upper bound on the text of all fields: unescaping only
/// shortens). Stops storing after [`MAX_EXT_FIELDS`] fields but reads the object to its end, so
/// the rest of the header (its `opaque`) can still be read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExtFieldsSeed {
    pub(crate) text_capacity: usize,
}

impl<'de> DeserializeSeed<'de> for ExtFieldsSeed {
    type Value = DecodedFields;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<DecodedFields, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ExtFieldsSeed {
    type Value = DecodedFields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of header fields or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<DecodedFields, E> {
        Ok(DecodedFields { fields: ExtFields::new(), overflow: None })
    }

    fn visit_unit<E: de::Error>(self) -> Result<DecodedFields, E> {
        self.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<DecodedFields, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DecodedFields, A::Error> {
        let mut fields = ExtFields::with_capacity(DEFAULT_ENTRIES, self.text_capacity);
        let mut count = 0usize;
        while let Some(key) = map.next_key_seed(ArenaText(fields.arena_mut()))? {
            count += 1;
            if count > MAX_EXT_FIELDS {
                // Refused: read the rest without storing it (linear, no allocation).
                map.next_value::<IgnoredAny>()?;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    count = count.saturating_add(1);
                }
                return Ok(DecodedFields { fields: ExtFields::new(), overflow: Some(count) });
            }
            let mark = key.start;
            let raw: &'de RawValue = map.next_value()?;
            match push_raw_value(fields.arena_mut(), raw.get()) {
                Some(value) => fields.push_entry(key, value),
                None => fields.arena_mut().truncate(mark),
            }
        }
        fields.dedup_keep_last();
        Ok(DecodedFields { fields, overflow: None })
    }
}

/// Appends a JSON string (an object key) to the arena and returns its range.
struct ArenaText<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for ArenaText<'_> {
    type Value = Range<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Range<usize>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for ArenaText<'_> {
    type Value = Range<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Range<usize>, E> {
        let start = self.0.len();
        self.0.push_str(v);
        Ok(start..self.0.len())
    }
}

/// Appends the text of the JSON value `raw` (as serde_json validated it) to `dst` and returns
/// its range; `None` for `null`. A string is unescaped; anything else keeps the exact text the
/// client wrote: `1e308` stays 5 bytes, `0` stays `0`, an object or array stays its JSON text.
/// Never longer than `raw`, and linear in it.
pub(crate) fn push_raw_value(dst: &mut String, raw: &str) -> Option<Range<usize>> {
    let raw = raw.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r'));
    if raw == "null" {
        return None;
    }
    let start = dst.len();
    match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(content) => unescape_into(dst, content),
        None => dst.push_str(raw),
    }
    Some(start..dst.len())
}

/// Appends the unescaped text of a JSON string's content (validated by serde_json). A lone
/// surrogate escape becomes U+FFFD.
pub(crate) fn unescape_into(dst: &mut String, content: &str) {
    let mut rest = content;
    while let Some(at) = rest.find('\\') {
        dst.push_str(rest.get(..at).unwrap_or_default());
        let escape = rest.get(at + 1..).unwrap_or_default();
        let mut chars = escape.chars();
        let consumed = match chars.next() {
            Some('u') => {
                let (c, used) = unicode_escape(escape);
                dst.push(c);
                used
            }
            Some(c) => {
                dst.push(match c {
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    other => other,
                });
                c.len_utf8()
            }
            None => 0,
        };
        rest = escape.get(consumed..).unwrap_or_default();
    }
    dst.push_str(rest);
}

/// Decodes `uXXXX` (and a following `\uXXXX` low surrogate) at the start of `escape`; returns
/// the character and the bytes used.
fn unicode_escape(escape: &str) -> (char, usize) {
    let hex = |s: Option<&str>| s.and_then(|h| u16::from_str_radix(h, 16).ok());
    let Some(high) = hex(escape.get(1..5)) else {
        return (char::REPLACEMENT_CHARACTER, 1);
    };
    if (0xD800..0xDC00).contains(&high) {
        if escape.get(5..7) == Some("\\u") {
            if let Some(low) = hex(escape.get(7..11)).filter(|l| (0xDC00..0xE000).contains(l)) {
                let code = 0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                return (char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER), 11);
            }
        }
        return (char::REPLACEMENT_CHARACTER, 5);
    }
    (char::from_u32(u32::from(high)).unwrap_or(char::REPLACEMENT_CHARACTER), 5)
}

#[cfg(test)]
mod tests;
