//! A direct scanner for the JSON header shapes real clients send; the serde decoder in
//! [`json`](super::json) handles everything else.
//!
//! Under a max-rate load the serde visitor was the broker's largest single cost: 27 % of its
//! CPU in a profile of `baiji bench` workload (b) (`benches/results/profile.md`). Every client
//! writes the same flat shape — integers for `code`/`opaque`/`version`/`flag`, a plain string
//! for `language`, a flat `extFields` object of strings (ali-ons: also numbers and booleans) —
//! so one pass over the bytes reads it without serde's per-token dispatch.
//!
//! # Contract
//!
//! [`decode`] returns `Some` only for a header that is valid JSON and that the serde decoder
//! would decode to the same [`HeaderParts`]; for anything else (an escaped key, a nested value,
//! a number where a string is usual, a missing `code`, bad JSON, a header over the size limit,
//! too many fields, ...) it returns `None` and the caller runs the serde decoder, so errors,
//! refusals and lenient readings stay exactly as that decoder defines them. Whitespace is
//! legal before and after every token and is never part of a value (`"k": false` is `false`).
//! The property tests below check the agreement both ways on generated headers with arbitrary
//! whitespace, raw scalars, escapes and nested values, edited or not.

use std::ops::Range;

use crate::remoting::ext::{ExtFields, MAX_EXT_FIELDS};
use crate::remoting::frame::MAX_HEADER_BYTES;
use crate::remoting::header_codec::json_ext::unescape_into;
use crate::remoting::header_codec::parts::{HeaderParts, DEFAULT_ENTRIES};
use crate::remoting::header_codec::types::LanguageCode;

/// Decodes `header` if it has the common shape (see the module docs); `None` otherwise.
pub(crate) fn decode(header: &[u8]) -> Option<HeaderParts> {
    if header.len() > MAX_HEADER_BYTES {
        return None;
    }
    // One validation up front; every range the scanner cuts falls on ASCII delimiters, so each
    // is a char boundary of this text.
    let text = std::str::from_utf8(header).ok()?;
    let mut s = Scanner { text, bytes: header, at: 0 };
    let mut code = None;
    let mut opaque = None;
    let mut language = LanguageCode::default();
    let mut version = 0;
    let mut flag = 0;
    let mut remark = None;
    let mut ext_fields = ExtFields::new();
    s.expect(b'{')?;
    if s.peek()? == b'}' {
        s.at += 1;
    } else {
        loop {
            let key = s.plain_string()?;
            s.expect(b':')?;
            match key {
                "code" => code = Some(s.int32()?),
                "opaque" => opaque = Some(s.int32()?),
                "version" => version = s.int32()?,
                "flag" => flag = s.int32()?,
                "language" => language = LanguageCode::from_name(s.plain_string()?),
                "remark" => {
                    remark = match s.scalar()? {
                        Scalar::Null => None,
                        Scalar::Str { content, escaped } => {
                            let content = s.slice(content);
                            let mut out = String::with_capacity(content.len());
                            if escaped {
                                unescape_into(&mut out, content);
                            } else {
                                out.push_str(content);
                            }
                            Some(out)
                        }
                        Scalar::Raw(raw) => Some(s.slice(raw).to_owned()),
                    }
                }
                "extFields" => ext_fields = s.ext_fields()?,
                _ => {
                    s.scalar()?;
                }
            }
            if s.next_member()? {
                break;
            }
        }
    }
    s.skip_ws();
    if s.at != s.bytes.len() {
        return None;
    }
    Some(HeaderParts {
        code: code?,
        language,
        version,
        opaque: opaque?,
        flag,
        remark,
        ext_fields,
        refused: None,
    })
}

/// A scalar JSON value, as ranges into the header.
enum Scalar {
    Null,
    /// A string's content between its quotes; `escaped` if it holds a backslash escape.
    Str {
        content: Range<usize>,
        escaped: bool,
    },
    /// A number, `true` or `false`, as written.
    Raw(Range<usize>),
}

/// Bytes that end the fast part of a string: the closing quote, an escape, a control character
/// (which JSON forbids unescaped).
static STOPS: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace (not consumed).
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn slice(&self, range: Range<usize>) -> &'a str {
        self.text.get(range).unwrap_or_default()
    }

    /// After a member: `true` at the object's closing brace, `false` at a comma followed by
    /// another member; `None` for anything else.
    fn next_member(&mut self) -> Option<bool> {
        let byte = self.peek()?;
        self.at += 1;
        match byte {
            b',' => Some(false),
            b'}' => Some(true),
            _ => None,
        }
    }

    /// A string without escapes (a key, a language name).
    fn plain_string(&mut self) -> Option<&'a str> {
        match self.scalar()? {
            Scalar::Str { content, escaped: false } => Some(self.slice(content)),
            _ => None,
        }
    }

    /// A JSON integer that fits an `i32` (no fraction, no exponent).
    fn int32(&mut self) -> Option<i32> {
        match self.scalar()? {
            Scalar::Raw(raw) => self.slice(raw).parse().ok(),
            _ => None,
        }
    }

    /// A string, number, boolean or `null`, after any whitespace; `None` for an object, an
    /// array or bad JSON.
    fn scalar(&mut self) -> Option<Scalar> {
        let first = self.peek()?;
        // After `peek`, which skipped the whitespace before the value (issue 23: taken before
        // it, `"k": false` read as " false").
        let start = self.at;
        match first {
            b'"' => self.string(),
            b'n' => self.word(b"null").map(|()| Scalar::Null),
            b't' => self.word(b"true").map(|()| Scalar::Raw(start..self.at)),
            b'f' => self.word(b"false").map(|()| Scalar::Raw(start..self.at)),
            b'-' | b'0'..=b'9' => self.number().map(Scalar::Raw),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A string starting at the opening quote; escapes are checked, not decoded.
    fn string(&mut self) -> Option<Scalar> {
        self.at += 1;
        let start = self.at;
        let mut escaped = false;
        loop {
            while !STOPS[usize::from(*self.bytes.get(self.at)?)] {
                self.at += 1;
            }
            match self.bytes.get(self.at)? {
                b'"' => {
                    let content = start..self.at;
                    self.at += 1;
                    return Some(Scalar::Str { content, escaped });
                }
                b'\\' => {
                    escaped = true;
                    match self.bytes.get(self.at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
                        b'u' => {
                            let hex = self.bytes.get(self.at + 2..self.at + 6)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.at += 6;
                        }
                        _ => return None,
                    }
                }
                // A control character.
                _ => return None,
            }
        }
    }

    /// A JSON number: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<Range<usize>> {
        let start = self.at;
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            self.digits()?;
        }
        Some(start..self.at)
    }

    /// One or more decimal digits.
    fn digits(&mut self) -> Option<()> {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
        (self.at > start).then_some(())
    }

    /// `null` or a flat object of scalars, stored as the serde decoder stores them: strings
    /// unescaped, numbers and booleans as written, `null` values skipped, duplicates resolved.
    fn ext_fields(&mut self) -> Option<ExtFields> {
        match self.peek()? {
            b'n' => return self.word(b"null").map(|()| ExtFields::new()),
            b'{' => self.at += 1,
            _ => return None,
        }
        let mut fields = ExtFields::with_capacity(DEFAULT_ENTRIES, self.bytes.len());
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(fields);
        }
        let mut count = 0;
        loop {
            let key = self.plain_string()?;
            self.expect(b':')?;
            count += 1;
            if count > MAX_EXT_FIELDS {
                return None;
            }
            match self.scalar()? {
                Scalar::Null => {}
                Scalar::Str { content, escaped } => {
                    push_scanned(&mut fields, key, self.slice(content), escaped);
                }
                Scalar::Raw(raw) => push_scanned(&mut fields, key, self.slice(raw), false),
            }
            if self.next_member()? {
                break;
            }
        }
        fields.dedup_keep_last();
        Some(fields)
    }
}

/// Appends a key and a value cut out of the header, without looking for duplicates (the
/// caller resolves them at the end): `value` is a string's content (unescaped here when
/// `escaped`) or a number's or boolean's text, stored as
/// [`push_raw_value`](super::json_ext::push_raw_value) stores them.
fn push_scanned(fields: &mut ExtFields, key: &str, value: &str, escaped: bool) {
    let arena = fields.arena_mut();
    let key_start = arena.len();
    arena.push_str(key);
    let value_start = arena.len();
    if escaped {
        unescape_into(arena, value);
    } else {
        arena.push_str(value);
    }
    let end = arena.len();
    fields.push_entry(key_start..value_start, value_start..end);
}

#[cfg(test)]
mod tests;
