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
//! The JSON decoders (`header_codec`) accept any JSON value and store its text exactly as the
//! client wrote it: ali-ons sends `"queueId":0` and `"unitMode":false` where Java and Rust
//! clients send strings; a number keeps its own text (`1e308` stays 5 bytes), nested objects and
//! arrays are kept as their JSON text (no tree is built), strings are unescaped. `null` values
//! are skipped. Typed getters name the field in their [`HeaderError`] so the broker can answer
//! `the custom field <queueId> is null`.
//!
//! # Bounds
//!
//! Decoding stores at most [`MAX_EXT_FIELDS`] fields (duplicates included; more is refused) in
//! an arena no larger than the header, and resolves duplicate keys in one linear pass
//! (`ExtFields::dedup_keep_last`), so what a header costs is linear in its length.

use std::fmt;
use std::ops::Range;

use crate::remoting::error::{quote, HeaderError};

/// Most fields a decoded header may carry, duplicates included. The broker reads at most about
/// 15 (a V1 send has 13, Java 5.x adds up to 5 `RpcRequestHeader` fields); 256 leaves room for
/// any client's extensions while bounding what one header can cost. A header with more is
/// refused (answered with an error, see [`FrameError::HeaderRefused`]).
///
/// [`FrameError::HeaderRefused`]: crate::remoting::FrameError::HeaderRefused
pub const MAX_EXT_FIELDS: usize = 256;

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

    /// The values of `keys`, as [`get`](Self::get) would return them. Each search starts just
    /// after the previous key's entry and wraps around, so a header whose fields come in the
    /// order of `keys` (a send header from the Rust client or from Java, whose fastjson sorts
    /// `a`..`n`) costs one comparison per key instead of a scan each.
    pub(crate) fn get_many<const N: usize>(&self, keys: &[&str; N]) -> [Option<&str>; N] {
        let arena = self.arena.as_bytes();
        let n = self.entries.len();
        let mut start = 0;
        keys.map(|key| {
            let from = start;
            let found =
                (0..n).map(|k| if from + k < n { from + k } else { from + k - n }).find(|&i| {
                    self.entries
                        .get(i)
                        .is_some_and(|e| key_eq(arena.get(e.key.clone()), key.as_bytes()))
                })?;
            start = found + 1;
            self.entries.get(found).map(|e| self.text(&e.value))
        })
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
        self.insert(key, itoa::Buffer::new().format(value));
    }

    /// Sets `key` to the decimal text of `value`, without allocating a temporary string.
    pub fn insert_u64(&mut self, key: &str, value: u64) {
        self.insert(key, itoa::Buffer::new().format(value));
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
        value::required_str(key, self.get(key))
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
        value::required_int(key, self.get(key))
    }

    /// A required 64-bit decimal field.
    ///
    /// # Errors
    ///
    /// [`HeaderError::Missing`] if absent, [`HeaderError::NotANumber`] if not a decimal `i64`.
    pub fn required_i64(&self, key: &'static str) -> Result<i64, HeaderError> {
        value::required_int(key, self.get(key))
    }

    /// An optional 32-bit decimal field; absent or empty text is `None`.
    ///
    /// # Errors
    ///
    /// [`HeaderError::NotANumber`] if present, non-empty and not a decimal `i32`.
    pub fn optional_i32(&self, key: &'static str) -> Result<Option<i32>, HeaderError> {
        value::optional_int(key, self.get(key))
    }

    /// An optional 64-bit decimal field; absent or empty text is `None`.
    ///
    /// # Errors
    ///
    /// [`HeaderError::NotANumber`] if present, non-empty and not a decimal `i64`.
    pub fn optional_i64(&self, key: &'static str) -> Result<Option<i64>, HeaderError> {
        value::optional_int(key, self.get(key))
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
        value::optional_bool(key, self.get(key))
    }

    /// A required boolean field, spelled as for [`optional_bool`](Self::optional_bool).
    ///
    /// # Errors
    ///
    /// [`HeaderError::Missing`] if absent, [`HeaderError::NotABoolean`] if not a boolean.
    pub fn required_bool(&self, key: &'static str) -> Result<bool, HeaderError> {
        parse_bool(key, self.required_str(key)?)
    }

    /// The arena, for a header decoder (`header_codec`) that writes a key's and a value's text
    /// straight into it and then records them with [`push_entry`](Self::push_entry), so a
    /// decoded field costs no allocation of its own. Only appending or truncating back to an
    /// earlier length keeps the recorded ranges meaningful; a range that is not a whole `str`
    /// of the arena reads as empty, never panics.
    pub(crate) fn arena_mut(&mut self) -> &mut String {
        &mut self.arena
    }

    /// Appends an entry whose key and value text the caller wrote into the arena
    /// ([`arena_mut`](Self::arena_mut)), without looking for duplicates: a decoder resolves
    /// them once at the end with [`dedup_keep_last`](Self::dedup_keep_last).
    pub(crate) fn push_entry(&mut self, key: Range<usize>, value: Range<usize>) {
        self.entries.push(Entry { key, value });
    }

    /// Resolves duplicate keys as the `HashMap` Java and Rust decode into does: the last value
    /// wins, at the position of the first occurrence. Linear: a short list (the usual 5–15
    /// fields) is scanned, a longer one goes through a hash map of its keys.
    pub(crate) fn dedup_keep_last(&mut self) {
        const SCAN_UP_TO: usize = 16;
        let arena = self.arena.as_bytes();
        if self.entries.len() <= SCAN_UP_TO && !may_repeat(arena, &self.entries) {
            return;
        }
        let mut keep = vec![true; self.entries.len()];
        if self.entries.len() <= SCAN_UP_TO {
            for later in 1..self.entries.len() {
                let Some(key) = self.entries.get(later).map(|e| e.key.clone()) else { break };
                let key = arena.get(key).unwrap_or_default();
                let first = self.entries.iter().take(later).enumerate().find(|(i, e)| {
                    keep.get(*i).copied().unwrap_or(false) && key_eq(arena.get(e.key.clone()), key)
                });
                if let Some((first, _)) = first {
                    let value = self.entries.get(later).map(|e| e.value.clone());
                    if let (Some(entry), Some(value)) = (self.entries.get_mut(first), value) {
                        entry.value = value;
                    }
                    if let Some(k) = keep.get_mut(later) {
                        *k = false;
                    }
                }
            }
        } else {
            let mut seen: std::collections::HashMap<&[u8], usize> =
                std::collections::HashMap::with_capacity(self.entries.len());
            for later in 0..self.entries.len() {
                let Some(entry) = self.entries.get(later) else { break };
                let key = arena.get(entry.key.clone()).unwrap_or_default();
                count_key_work(key.len());
                match seen.get(key).copied() {
                    Some(first) => {
                        let value = entry.value.clone();
                        if let Some(first) = self.entries.get_mut(first) {
                            first.value = value;
                        }
                        if let Some(k) = keep.get_mut(later) {
                            *k = false;
                        }
                    }
                    None => {
                        seen.insert(key, later);
                    }
                }
            }
        }
        let mut flags = keep.into_iter();
        self.entries.retain(|_| flags.next().unwrap_or(true));
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

#[cfg(test)]
thread_local! {
    /// Bytes compared while looking keys up, plus one per comparison: the work figure the
    /// decoding-bounds tests hold linear in the input.
    pub(crate) static KEY_WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Adds `n` to `KEY_WORK` (tests only).
#[inline]
fn count_key_work(n: usize) {
    #[cfg(test)]
    KEY_WORK.with(|w| w.set(w.get().saturating_add(n as u64 + 1)));
    #[cfg(not(test))]
    let _ = n;
}

/// Whether two of `entries`' keys might be equal: `false` when every key has its own
/// signature (length, first and last byte), which equal keys would share. Real headers have
/// distinct keys (a V2 send's are `a` to `n`), so this one pass, with no allocation and no key
/// comparison, is all that resolving their duplicates costs.
fn may_repeat(arena: &[u8], entries: &[Entry]) -> bool {
    let mut seen = 0u64;
    for e in entries {
        let key = arena.get(e.key.clone()).unwrap_or_default();
        count_key_work(0);
        let (first, last) = (key.first().copied(), key.last().copied());
        let sig = key.len().wrapping_mul(7)
            + usize::from(first.unwrap_or(0))
            + usize::from(last.unwrap_or(0)).wrapping_mul(3);
        let bit = 1u64 << (sig % 64);
        if seen & bit != 0 {
            return true;
        }
        seen |= bit;
    }
    false
}

/// Whether a stored key (`None` if its range were ever outside the arena) equals `key`.
#[inline]
fn key_eq(stored: Option<&[u8]>, key: &[u8]) -> bool {
    count_key_work(stored.map_or(0, |k| k.len().min(key.len())));
    match stored {
        Some(k) => k.len() == key.len() && k.iter().zip(key).all(|(a, b)| a == b),
        None => false,
    }
}

/// Typed readings of a value already looked up (`None`: the field is absent), shared by
/// [`ExtFields`]' getters and by decoders that look many keys up at once
/// ([`ExtFields::get_many`]).
pub(crate) mod value {
    use super::{parse_bool, parse_int, HeaderError};

    /// A field the request cannot do without.
    pub(crate) fn required_str<'a>(
        key: &'static str,
        value: Option<&'a str>,
    ) -> Result<&'a str, HeaderError> {
        value.ok_or(HeaderError::Missing { field: key })
    }

    /// A required decimal field.
    pub(crate) fn required_int<T: std::str::FromStr>(
        key: &'static str,
        value: Option<&str>,
    ) -> Result<T, HeaderError> {
        parse_int(key, required_str(key, value)?)
    }

    /// An optional decimal field; absent or empty text is `None`.
    pub(crate) fn optional_int<T: std::str::FromStr>(
        key: &'static str,
        value: Option<&str>,
    ) -> Result<Option<T>, HeaderError> {
        optional(key, value, parse_int)
    }

    /// An optional boolean field (see [`ExtFields::optional_bool`](super::ExtFields::optional_bool)).
    pub(crate) fn optional_bool(
        key: &'static str,
        value: Option<&str>,
    ) -> Result<Option<bool>, HeaderError> {
        optional(key, value, parse_bool)
    }

    fn optional<T>(
        key: &'static str,
        value: Option<&str>,
        parse: fn(&'static str, &str) -> Result<T, HeaderError>,
    ) -> Result<Option<T>, HeaderError> {
        match value {
            None | Some("") => Ok(None),
            Some(text) => parse(key, text).map(Some),
        }
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

#[cfg(test)]
mod tests;
