//! The ROCKETMQ binary header (serialize type 1), Java's `RocketMQSerializable`.
//!
//! ```text
//! code i16 | language u8 | version i16 | opaque i32 | flag i32 |
//! remarkLen i32 | remark | extLen i32 | { keyLen i16 | key | valueLen i32 | value }*
//! ```
//!
//! Every length is checked against the bytes that remain before anything is copied, so a
//! hostile length can neither panic the decoder nor make it allocate more than the header holds.

use bytes::{BufMut, BytesMut};

use std::ops::Range;

use crate::remoting::error::FrameError;
use crate::remoting::ext::{ExtFields, MAX_EXT_FIELDS};
use crate::remoting::frame::MAX_HEADER_BYTES;
use crate::remoting::header_codec::parts::{
    header_too_long, too_many_fields, HeaderParts, HeaderRef,
};
use crate::remoting::header_codec::types::LanguageCode;
use crate::remoting::reader::Reader;

/// Appends the binary header of `cmd`.
///
/// # Errors
///
/// [`FrameError::FieldOutOfRange`] if `code` or `version` does not fit 16 bits,
/// [`FrameError::StringTooLong`] for a key over 32767 bytes or a remark or ext block over 2 GiB.
pub(crate) fn encode(cmd: &HeaderRef<'_>, dst: &mut BytesMut) -> Result<(), FrameError> {
    let code = i16::try_from(cmd.code)
        .map_err(|_| FrameError::FieldOutOfRange { field: "code", value: cmd.code })?;
    let version = i16::try_from(cmd.version)
        .map_err(|_| FrameError::FieldOutOfRange { field: "version", value: cmd.version })?;
    let remark = cmd.remark.unwrap_or_default().as_bytes();
    let remark_len = i32::try_from(remark.len())
        .map_err(|_| FrameError::StringTooLong { field: "remark", len: remark.len() })?;
    let mut ext_len = 0usize;
    for (key, value) in cmd.ext_fields {
        if i16::try_from(key.len()).is_err() {
            return Err(FrameError::StringTooLong { field: "extFields key", len: key.len() });
        }
        ext_len += 2 + key.len() + 4 + value.len();
    }
    let ext_len_i32 = i32::try_from(ext_len)
        .map_err(|_| FrameError::StringTooLong { field: "extFields", len: ext_len })?;

    dst.reserve(2 + 1 + 2 + 4 + 4 + 4 + remark.len() + 4 + ext_len);
    dst.put_i16(code);
    dst.put_u8(cmd.language.code());
    dst.put_i16(version);
    dst.put_i32(cmd.opaque);
    dst.put_i32(cmd.flag);
    dst.put_i32(remark_len);
    dst.put_slice(remark);
    dst.put_i32(ext_len_i32);
    for (key, value) in cmd.ext_fields {
        // Lengths were range-checked above; values are shorter than the checked total.
        dst.put_i16(i16::try_from(key.len()).unwrap_or(i16::MAX));
        dst.put_slice(key.as_bytes());
        dst.put_i32(i32::try_from(value.len()).unwrap_or(i32::MAX));
        dst.put_slice(value.as_bytes());
    }
    Ok(())
}

/// Parses a binary header. Invalid UTF-8 in strings is replaced (as Java does); bytes after the
/// ext block are ignored (as Java does). A header longer than [`MAX_HEADER_BYTES`] or with more
/// than [`MAX_EXT_FIELDS`] fields comes back with `refused` set (its fixed fields read, nothing
/// else stored).
///
/// # Errors
///
/// [`FrameError::MalformedBinaryHeader`] naming the field that is truncated or has a negative
/// length.
pub(crate) fn decode(header: &[u8]) -> Result<HeaderParts, FrameError> {
    let mut r = Reader::new(header);
    let truncated = FrameError::MalformedBinaryHeader("truncated fixed fields");
    let code = r.i16().ok_or_else(|| truncated.clone())?;
    let language = r.u8().ok_or_else(|| truncated.clone())?;
    let version = r.i16().ok_or_else(|| truncated.clone())?;
    let opaque = r.i32().ok_or_else(|| truncated.clone())?;
    let flag = r.i32().ok_or_else(|| truncated.clone())?;

    let mut parts = HeaderParts {
        code: i32::from(code),
        language: LanguageCode::from_code(language),
        version: i32::from(version),
        opaque,
        flag,
        remark: None,
        ext_fields: ExtFields::new(),
        refused: None,
    };
    if header.len() > MAX_HEADER_BYTES {
        parts.refused = Some(header_too_long(header.len()));
        return Ok(parts);
    }

    let remark_bytes =
        sized_block(&mut r, "remark length is negative", "remark exceeds the header")?;
    if !remark_bytes.is_empty() {
        let mut remark = String::with_capacity(lossy_len(remark_bytes));
        push_lossy_text(&mut remark, remark_bytes);
        parts.remark = Some(remark);
    }

    let ext_bytes =
        sized_block(&mut r, "extFields length is negative", "extFields exceed the header")?;
    // First pass: validate, count and size the fields without allocating; the second copies
    // them into exactly that much room.
    let mut count = 0usize;
    let mut text_len = 0usize;
    for field in ext_entries(ext_bytes) {
        let (key, value) = field?;
        count += 1;
        if count > MAX_EXT_FIELDS {
            parts.refused = Some(too_many_fields(count));
            return Ok(parts);
        }
        text_len += lossy_len(key) + lossy_len(value);
    }
    let mut ext_fields = ExtFields::with_capacity(count, text_len);
    for (key, value) in ext_entries(ext_bytes).flatten() {
        let arena = ext_fields.arena_mut();
        let key = push_lossy_text(arena, key);
        let value = push_lossy_text(arena, value);
        ext_fields.push_entry(key, value);
    }
    ext_fields.dedup_keep_last();
    parts.ext_fields = ext_fields;
    Ok(parts)
}

/// The `(key, value)` pairs of an ext block, each length checked against what remains.
fn ext_entries(block: &[u8]) -> impl Iterator<Item = Result<(&[u8], &[u8]), FrameError>> {
    let mut er = Reader::new(block);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || er.remaining() == 0 {
            return None;
        }
        let entry = next_entry(&mut er);
        failed = entry.is_err();
        Some(entry)
    })
}

fn next_entry<'a>(er: &mut Reader<'a>) -> Result<(&'a [u8], &'a [u8]), FrameError> {
    let key_len =
        er.i16().ok_or(FrameError::MalformedBinaryHeader("truncated extFields key length"))?;
    let key_len = usize::try_from(key_len)
        .map_err(|_| FrameError::MalformedBinaryHeader("extFields key length is negative"))?;
    let key = er
        .take(key_len)
        .ok_or(FrameError::MalformedBinaryHeader("extFields key exceeds the block"))?;
    let value_len =
        er.i32().ok_or(FrameError::MalformedBinaryHeader("truncated extFields value length"))?;
    let value_len = usize::try_from(value_len)
        .map_err(|_| FrameError::MalformedBinaryHeader("extFields value length is negative"))?;
    let value = er
        .take(value_len)
        .ok_or(FrameError::MalformedBinaryHeader("extFields value exceeds the block"))?;
    Ok((key, value))
}

/// Reads an i32 length and that many bytes.
fn sized_block<'a>(
    r: &mut Reader<'a>,
    negative: &'static str,
    overrun: &'static str,
) -> Result<&'a [u8], FrameError> {
    let len = r.i32().ok_or(FrameError::MalformedBinaryHeader("truncated length field"))?;
    let len = usize::try_from(len).map_err(|_| FrameError::MalformedBinaryHeader(negative))?;
    r.take(len).ok_or(FrameError::MalformedBinaryHeader(overrun))
}

/// Length of `bytes` once each invalid UTF-8 sequence is replaced by U+FFFD (3 bytes), as
/// `String::from_utf8_lossy` would produce, computed without allocating.
pub(crate) fn lossy_len(bytes: &[u8]) -> usize {
    bytes.utf8_chunks().map(|c| c.valid().len() + if c.invalid().is_empty() { 0 } else { 3 }).sum()
}

/// Appends the lossy UTF-8 text of `bytes` to `dst` (see [`lossy_len`]) and returns its range.
pub(crate) fn push_lossy_text(dst: &mut String, bytes: &[u8]) -> Range<usize> {
    let start = dst.len();
    for chunk in bytes.utf8_chunks() {
        dst.push_str(chunk.valid());
        if !chunk.invalid().is_empty() {
            dst.push(char::REPLACEMENT_CHARACTER);
        }
    }
    start..dst.len()
}

#[cfg(test)]
mod tests;
