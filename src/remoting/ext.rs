//! [`ExtFields`]: the string-to-string map that carries every custom header field.
//!
//! # Representation
//!
//! A request header has 5–15 short entries and is read a handful of times, so the map is an
//! insertion-ordered list searched linearly (faster than hashing at this size). All keys and
//! values live back to back in one `String` arena and the list holds byte ranges into it:
//!
//! ```text
//!  arena: "topicTopicAqueueId3properties..."
//!          ^^^^^               entries[0].key
//!               ^^^^^^         entries[0].value
//!                     ^^^^^^^  entries[1].key ...
//! ```
//!
//! Decoding a JSON header therefore costs two allocations however many fields it has (the arena,
//! sized from the header length so it never grows, and the entry list), instead of two per
//! field. Replacing a value appends the new text and leaves the old bytes unused; a map is
//! short-lived (one request or response), so that garbage is never worth compacting.
//!
//! # Leniency
//!
//! The JSON decoder accepts any JSON scalar as a value and stores its text: ali-ons sends
//! `"queueId":0` and `"unitMode":false` where Java and Rust clients send strings. `null` values are
//! skipped; nested objects and arrays are kept as their JSON text. Typed getters name the field in
//! their [`HeaderError`] so the broker can answer `the custom field <queueId> is null`.

use std::fmt::{self, Write as _};
use std::ops::Range;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::remoting::error::{quote, HeaderError};

/// Entries reserved up front when decoding; a SEND header has 13.
const DEFAULT_ENTRIES: usize = 16;

#[derive(Debug, Clone)]
struct Entry {
    key: Range<usize>,
    value: Range<usize>,
}

/// Insertion-ordered map of custom header fields, stored in one string arena (see the module
/// docs).
///
/// # Examples
///
/// ```
/// use baiji::remoting::ExtFields;
///
/// let ext: ExtFields = serde_json::from_str(r#"{"queueId":0,"topic":"T","oops":"x"}"#)?;
/// assert_eq!(ext.get("queueId"), Some("0")); // ali-ons' raw number, as text
/// assert_eq!(ext.required_i32("queueId")?, 0);
/// assert_eq!(
///     ext.required_i32("oops").unwrap_err().to_string(),
///     "the custom field <oops> is not a number: x",
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct ExtFields {
    arena: String,
    entries: Vec<Entry>,
}

impl ExtFields {
    /// An empty map that allocates nothing until the first insert.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map with room for `entries` fields totalling `text_bytes` bytes of keys and values,
    /// so building a response header of known shape allocates exactly twice.
    #[must_use]
    pub fn with_capacity(entries: usize, text_bytes: usize) -> Self {
        Self { arena: String::with_capacity(text_bytes), entries: Vec::with_capacity(entries) }
    }

    /// Number of fields.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map has no fields.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn text(&self, range: &Range<usize>) -> &str {
        // Ranges are produced by `push` from the arena's own lengths, always at char boundaries.
        self.arena.get(range.clone()).unwrap_or_default()
    }

    /// Index of `key`. Keys are a few bytes long (`a`…`n` in V2 sends), so this compares lengths
    /// first and bytes inline: no char-boundary checks and no `memcmp` call per entry, which
    /// were 4% of the broker's CPU under load (REPORT.md, profile of workload b).
    fn position(&self, key: &str) -> Option<usize> {
        let arena = self.arena.as_bytes();
        self.entries.iter().position(|e| key_eq(arena.get(e.key.clone()), key.as_bytes()))
    }

    fn push(&mut self, text: &str) -> Range<usize> {
        let start = self.arena.len();
        self.arena.push_str(text);
        start..self.arena.len()
    }

    /// Value of `key`, if present.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key).and_then(|i| self.entries.get(i)).map(|e| self.text(&e.value))
    }

    /// Whether `key` is present.
    #[must_use]
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Sets `key` to `value`, replacing an existing value in place (the entry keeps its position).
    pub fn insert(&mut self, key: &str, value: &str) {
        let value = self.push(value);
        match self.position(key) {
            Some(i) => {
                if let Some(entry) = self.entries.get_mut(i) {
                    entry.value = value;
                }
            }
            None => {
                let key = self.push(key);
                self.entries.push(Entry { key, value });
            }
        }
    }

    /// Sets `key` to the decimal text of `value`, without allocating a temporary string.
    pub fn insert_i64(&mut self, key: &str, value: i64) {
        let mut buf = [0u8; 20];
        let digits = crate::remoting::json_write::format_i64(value, &mut buf);
        // Digits and '-' are ASCII.
        let text = std::str::from_utf8(digits).unwrap_or("0");
        self.insert(key, text);
    }

    /// Sets `key` to the decimal text of `value`, without allocating a temporary string.
    pub fn insert_u64(&mut self, key: &str, value: u64) {
        let mut buf = [0u8; 20];
        let digits = crate::remoting::json_write::format_u64(value, &mut buf);
        let text = std::str::from_utf8(digits).unwrap_or("0");
        self.insert(key, text);
    }

    /// Sets `key` to `"true"` or `"false"`.
    pub fn insert_bool(&mut self, key: &str, value: bool) {
        self.insert(key, if value { "true" } else { "false" });
    }

    /// Removes `key`; returns whether it was present. The arena bytes are not reclaimed.
    pub fn remove(&mut self, key: &str) -> bool {
        match self.position(key) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// The fields in insertion order.
    #[must_use]
    pub fn iter(&self) -> Iter<'_> {
        Iter { fields: self, next: 0 }
    }

    /// Value of a field the request cannot do without.
    ///
    /// # Errors
    ///
    /// [`HeaderError::Missing`] if the field is absent.
    pub fn required_str(&self, key: &'static str) -> Result<&str, HeaderError> {
        self.get(key).ok_or(HeaderError::Missing { field: key })
    }

    /// Value of an optional field; same as [`get`](Self::get), named for symmetry with the typed
    /// getters.
    #[must_use]
    pub fn optional_str(&self, key: &str) -> Option<&str> {
        self.get(key)
    }

    /// A required 32-bit decimal field.
    ///
    /// # Errors
    ///
    /// [`HeaderError::Missing`] if absent, [`HeaderError::NotANumber`] if not a decimal `i32`.
    pub fn required_i32(&self, key: &'static str) -> Result<i32, HeaderError> {
        parse_int(key, self.required_str(key)?)
    }

    /// A required 64-bit decimal field.
    ///
    /// # Errors
    ///
    /// [`HeaderError::Missing`] if absent, [`HeaderError::NotANumber`] if not a decimal `i64`.
    pub fn required_i64(&self, key: &'static str) -> Result<i64, HeaderError> {
        parse_int(key, self.required_str(key)?)
    }

    /// An optional 32-bit decimal field; absent or empty text is `None`.
    ///
    /// # Errors
    ///
    /// [`HeaderError::NotANumber`] if present, non-empty and not a decimal `i32`.
    pub fn optional_i32(&self, key: &'static str) -> Result<Option<i32>, HeaderError> {
        self.optional_parsed(key, parse_int)
    }

    /// An optional 64-bit decimal field; absent or empty text is `None`.
    ///
    /// # Errors
    ///
    /// [`HeaderError::NotANumber`] if present, non-empty and not a decimal `i64`.
    pub fn optional_i64(&self, key: &'static str) -> Result<Option<i64>, HeaderError> {
        self.optional_parsed(key, parse_int)
    }

    /// An optional boolean field; absent or empty text is `None`.
    ///
    /// Accepted spellings are `true`/`false` in any letter case (what Java's `Boolean.toString`,
    /// the Rust client and ali-ons' JSON booleans produce) and `1`/`0`. Java's own parser maps
    /// every other text to `false`; this one rejects it instead, so a typo surfaces as an error
    /// rather than silently flipping behaviour.
    ///
    /// # Errors
    ///
    /// [`HeaderError::NotABoolean`] for any other non-empty text.
    pub fn optional_bool(&self, key: &'static str) -> Result<Option<bool>, HeaderError> {
        self.optional_parsed(key, parse_bool)
    }

    /// A required boolean field, spelled as for [`optional_bool`](Self::optional_bool).
    ///
    /// # Errors
    ///
    /// [`HeaderError::Missing`] if absent, [`HeaderError::NotABoolean`] if not a boolean.
    pub fn required_bool(&self, key: &'static str) -> Result<bool, HeaderError> {
        parse_bool(key, self.required_str(key)?)
    }

    fn optional_parsed<T>(
        &self,
        key: &'static str,
        parse: fn(&'static str, &str) -> Result<T, HeaderError>,
    ) -> Result<Option<T>, HeaderError> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(text) => parse(key, text).map(Some),
        }
    }

    /// Appends a value the JSON decoder produced by writing straight into the arena.
    fn push_decoded(&mut self, key: Range<usize>, value: Range<usize>) {
        let arena = self.arena.as_bytes();
        let key_text = arena.get(key.clone()).unwrap_or_default();
        let duplicate =
            self.entries.iter().position(|e| key_eq(arena.get(e.key.clone()), key_text));
        match duplicate.and_then(|i| self.entries.get_mut(i)) {
            // Last occurrence wins, as with the `HashMap` Java and Rust decode into.
            Some(entry) => entry.value = value,
            None => self.entries.push(Entry { key, value }),
        }
    }

    /// Inserts a key and value given as raw bytes, replacing invalid UTF-8 with U+FFFD (used by
    /// the binary header decoder; Java decodes those bytes the same way).
    pub(crate) fn insert_lossy(&mut self, key: &[u8], value: &[u8]) {
        let key = String::from_utf8_lossy(key);
        let value = String::from_utf8_lossy(value);
        self.insert(&key, &value);
    }

    /// Bytes the keys and values occupy, live entries only (the binary encoder's size input).
    pub(crate) fn text_len(&self) -> usize {
        self.entries.iter().map(|e| e.key.len() + e.value.len()).sum()
    }

    #[cfg(test)]
    pub(crate) fn capacities(&self) -> (usize, usize) {
        (self.arena.capacity(), self.entries.capacity())
    }
}

/// Whether a stored key (`None` if its range were ever outside the arena) equals `key`.
#[inline]
fn key_eq(stored: Option<&[u8]>, key: &[u8]) -> bool {
    match stored {
        Some(k) => k.len() == key.len() && k.iter().zip(key).all(|(a, b)| a == b),
        None => false,
    }
}

fn parse_int<T: std::str::FromStr>(field: &'static str, text: &str) -> Result<T, HeaderError> {
    text.parse().map_err(|_| HeaderError::NotANumber { field, value: quote(text) })
}

fn parse_bool(field: &'static str, text: &str) -> Result<bool, HeaderError> {
    if text.eq_ignore_ascii_case("true") || text == "1" {
        Ok(true)
    } else if text.eq_ignore_ascii_case("false") || text == "0" {
        Ok(false)
    } else {
        Err(HeaderError::NotABoolean { field, value: quote(text) })
    }
}

/// Iterator over `(key, value)` pairs of an [`ExtFields`] in insertion order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    fields: &'a ExtFields,
    next: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.fields.entries.get(self.next)?;
        self.next += 1;
        Some((self.fields.text(&entry.key), self.fields.text(&entry.value)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.fields.entries.len().saturating_sub(self.next);
        (n, Some(n))
    }
}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut fields = Self::new();
        for (k, v) in iter {
            fields.insert(k.as_ref(), v.as_ref());
        }
        fields
    }
}

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Map equality: same keys with the same values, regardless of order and arena layout.
impl PartialEq for ExtFields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl Eq for ExtFields {}

impl Serialize for ExtFields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Lenient decoding: see the module docs. `null` decodes to an empty map.
impl<'de> Deserialize<'de> for ExtFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ExtFieldsSeed { text_capacity: 0 }.deserialize(deserializer)
    }
}

/// Decodes an `extFields` value with the arena pre-sized to `text_capacity` bytes (the caller
/// passes the header length, an upper bound on the text of all fields).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExtFieldsSeed {
    pub(crate) text_capacity: usize,
}

impl<'de> DeserializeSeed<'de> for ExtFieldsSeed {
    type Value = ExtFields;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ExtFields, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ExtFieldsSeed {
    type Value = ExtFields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of header fields or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<ExtFields, E> {
        Ok(ExtFields::new())
    }

    fn visit_unit<E: de::Error>(self) -> Result<ExtFields, E> {
        Ok(ExtFields::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<ExtFields, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtFields, A::Error> {
        let mut fields = ExtFields::with_capacity(
            map.size_hint().unwrap_or(DEFAULT_ENTRIES),
            self.text_capacity,
        );
        while let Some(key) = map.next_key_seed(ArenaText(&mut fields.arena))? {
            let mark = key.start;
            match map.next_value_seed(ScalarText(&mut fields.arena))? {
                Some(value) => fields.push_decoded(key, value),
                None => fields.arena.truncate(mark),
            }
        }
        Ok(fields)
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

/// Appends the text of any JSON value to the arena; `None` for `null`.
///
/// Also used for the command's `remark`, which gets the same leniency.
pub(crate) struct ScalarText<'a>(pub(crate) &'a mut String);

impl ScalarText<'_> {
    fn append(self, text: impl fmt::Display) -> Option<Range<usize>> {
        let start = self.0.len();
        // Writing into a `String` cannot fail.
        let _ = write!(self.0, "{text}");
        Some(start..self.0.len())
    }
}

impl<'de> DeserializeSeed<'de> for ScalarText<'_> {
    type Value = Option<Range<usize>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ScalarText<'_> {
    type Value = Option<Range<usize>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let start = self.0.len();
        self.0.push_str(v);
        Ok(Some(start..self.0.len()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(self.append(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(self.append(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(self.append(v))
    }

    /// JavaScript prints integral doubles below 1e21 without a fraction, as does Rust's
    /// `Display` for `f64`; other values keep Rust's shortest round-trip form.
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(self.append(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let value = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(self.append(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let value = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(self.append(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(json: &str) -> ExtFields {
        serde_json::from_str(json).expect("lenient ext decoding accepts this")
    }

    #[test]
    fn given_ali_ons_raw_scalars_when_decoding_should_store_their_string_form() {
        let ext = decode(
            r#"{"queueId":0,"unitMode":false,"bornTimestamp":1700000000123,"neg":-5,"f":1.5,"big":1e20,"s":"x","n":null}"#,
        );
        assert_eq!(ext.get("queueId"), Some("0"), "integers print as plain decimal");
        assert_eq!(ext.get("unitMode"), Some("false"), "booleans print as true/false");
        assert_eq!(ext.get("bornTimestamp"), Some("1700000000123"));
        assert_eq!(ext.get("neg"), Some("-5"));
        assert_eq!(ext.get("f"), Some("1.5"));
        assert_eq!(ext.get("big"), Some("100000000000000000000"), "JS prints 1e20 in full");
        assert_eq!(ext.get("s"), Some("x"));
        assert!(!ext.contains_key("n"), "null values are skipped");
        assert_eq!(ext.len(), 7);
    }

    #[test]
    fn given_nested_values_when_decoding_should_keep_json_text() {
        let ext = decode(r#"{"o":{"a":1},"l":[1,"x"],"after":"ok"}"#);
        assert_eq!(ext.get("o"), Some(r#"{"a":1}"#));
        assert_eq!(ext.get("l"), Some(r#"[1,"x"]"#));
        assert_eq!(ext.get("after"), Some("ok"), "decoding continues after a nested value");
    }

    #[test]
    fn given_null_ext_fields_when_decoding_should_be_empty() {
        assert!(decode("null").is_empty());
        assert!(decode("{}").is_empty());
    }

    #[test]
    fn given_duplicate_keys_when_decoding_should_keep_last() {
        let ext = decode(r#"{"k":"1","k":"2"}"#);
        assert_eq!(ext.len(), 1);
        assert_eq!(ext.get("k"), Some("2"));
    }

    #[test]
    fn given_inserts_and_removes_when_reading_should_behave_like_an_ordered_map() {
        let mut ext = ExtFields::new();
        ext.insert("a", "1");
        ext.insert("b", "2");
        ext.insert("a", "3");
        ext.insert_i64("c", -42);
        ext.insert_bool("d", true);
        let pairs: Vec<_> = ext.iter().collect();
        assert_eq!(
            pairs,
            vec![("a", "3"), ("b", "2"), ("c", "-42"), ("d", "true")],
            "replacement keeps position"
        );
        assert!(ext.remove("b"));
        assert!(!ext.remove("b"));
        assert_eq!(ext.get("b"), None);
        assert_eq!(ext.len(), 3);
    }

    #[test]
    fn given_typed_getters_when_fields_are_bad_should_name_the_field() {
        let ext: ExtFields = [("queueId", "abc"), ("empty", ""), ("flag", "TRUE"), ("b", "yes")]
            .into_iter()
            .collect();
        assert_eq!(
            ext.required_i32("queueId").map_err(|e| e.to_string()),
            Err("the custom field <queueId> is not a number: abc".to_owned())
        );
        assert_eq!(ext.required_i32("missing"), Err(HeaderError::Missing { field: "missing" }));
        assert_eq!(ext.optional_i32("missing"), Ok(None));
        assert_eq!(ext.optional_i64("empty"), Ok(None), "empty optional is absent");
        assert!(ext.required_i64("empty").is_err(), "empty required number is malformed");
        assert_eq!(ext.optional_bool("flag"), Ok(Some(true)));
        assert!(matches!(ext.optional_bool("b"), Err(HeaderError::NotABoolean { field: "b", .. })));
        let too_big: ExtFields = [("q", "2147483648")].into_iter().collect();
        assert!(too_big.required_i32("q").is_err(), "i32 overflow is not a number");
        assert_eq!(too_big.required_i64("q"), Ok(2_147_483_648));
    }

    #[test]
    fn given_equal_content_in_different_order_should_compare_equal() {
        let a: ExtFields = [("x", "1"), ("y", "2")].into_iter().collect();
        let mut b: ExtFields = [("y", "0"), ("x", "1")].into_iter().collect();
        assert_ne!(a, b);
        b.insert("y", "2");
        assert_eq!(a, b, "equality is by content, not arena layout");
    }
}
