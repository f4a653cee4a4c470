//! Cutting the TCP byte stream into frames.
//!
//! ```text
//! +----------+------------------------------+----------------+-------------+
//! | length   | serializeType(1) headerLen(3)| header bytes   | body bytes  |
//! | i32 BE   | i32 BE                       | headerLen B    | the rest    |
//! +----------+------------------------------+----------------+-------------+
//!   length = 4 + headerLen + bodyLen   (the length field does not count itself)
//! ```
//!
//! # Allocation discipline
//!
//! [`decode_frame`] validates the 8-byte prefix (negative or oversized length, unknown serialize
//! type, header longer than the frame) *before* it touches the buffer's capacity, so a peer that
//! announces 16 MiB and sends 8 bytes cannot make the broker allocate 16 MiB. While a frame is
//! incomplete the buffer grows by at most `max(bytes already buffered, RESERVE_CHUNK)` per call,
//! never beyond what the prefix announces: memory stays proportional to what actually arrived,
//! and a large frame still needs only a logarithmic number of reallocations.
//!
//! A complete frame is split off the read buffer with `split_to(..).freeze()`: the header and
//! body are [`Bytes`] views of the bytes read from the socket, never copied.

use bytes::{Buf, Bytes, BytesMut};

use crate::remoting::error::FrameError;
use crate::remoting::header_codec::types::SerializeType;

/// Largest accepted value of the `length` field (16 MiB), the Java broker's and the Rust client's
/// default. The encoder keeps `4 + length` within it, so what baiji sends also passes Java's
/// stricter reading of the limit (which counts the length field too).
pub const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;

/// Largest header length the 24-bit field can express.
pub const MAX_HEADER_LEN: usize = 0x00FF_FFFF;

/// Longest header the decoders read in full (256 KiB). The largest legitimate header is a send
/// whose properties are at RocketMQ's 32767-byte limit: JSON escaping can make each byte six
/// (`\u0001`), so 6 × 32 KiB plus the other fields stays below 256 KiB; real headers are a few
/// hundred bytes to a few KiB. A longer header is only scanned for its `code`, `opaque` and
/// `flag` and answered with an error (see [`FrameError::HeaderRefused`]), so what a header can
/// cost stays linear in its length.
///
/// [`FrameError::HeaderRefused`]: crate::remoting::FrameError::HeaderRefused
pub const MAX_HEADER_BYTES: usize = 256 * 1024;

/// Bytes before the header: the length field and the serialize-type/header-length word.
pub const FRAME_PREFIX_LEN: usize = 8;

/// Upper bound on one capacity reservation while a frame is incomplete and less than this much
/// has been buffered (see the module docs). Equal to tokio-util's initial read-buffer size, so an
/// ordinary request never triggers a reservation of its own.
pub const RESERVE_CHUNK: usize = 8 * 1024;

/// One frame, split into its parts; `header` and `body` share the read buffer's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// How the header is encoded.
    pub serialize_type: SerializeType,
    /// The encoded header.
    pub header: Bytes,
    /// The body, empty if the frame has none.
    pub body: Bytes,
}

/// The validated 8-byte prefix of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramePrefix {
    /// Value of the length field: bytes that follow it.
    pub length: usize,
    /// How the header is encoded.
    pub serialize_type: SerializeType,
    /// Header length in bytes.
    pub header_len: usize,
}

impl FramePrefix {
    /// Bytes the whole frame occupies on the wire, length field included.
    #[must_use]
    pub fn wire_len(&self) -> usize {
        4 + self.length
    }

    /// Body length in bytes.
    #[must_use]
    pub fn body_len(&self) -> usize {
        self.length - 4 - self.header_len
    }
}

fn be_i32(src: &[u8], at: usize) -> Option<i32> {
    let bytes = src.get(at..at + 4)?;
    <[u8; 4]>::try_from(bytes).ok().map(i32::from_be_bytes)
}

/// Validates the first bytes of `src` as a frame prefix without consuming anything.
///
/// Returns `Ok(None)` while fewer than the bytes needed for a verdict have arrived: a bad length
/// is reported as soon as the first 4 bytes are in, the rest once all 8 are.
///
/// # Errors
///
/// A [`FrameError`] for a negative, too small or too large length, an unknown serialize type,
/// or a header length that exceeds the frame.
pub fn peek_prefix(src: &[u8]) -> Result<Option<FramePrefix>, FrameError> {
    let Some(raw_len) = be_i32(src, 0) else {
        return Ok(None);
    };
    if raw_len < 0 {
        return Err(FrameError::NegativeLength(raw_len));
    }
    if raw_len < 4 {
        return Err(FrameError::LengthTooSmall(raw_len));
    }
    let length = raw_len.unsigned_abs() as usize;
    if length > MAX_FRAME_LEN {
        return Err(FrameError::TooLarge { length, max: MAX_FRAME_LEN });
    }
    let Some(word) = be_i32(src, 4) else {
        return Ok(None);
    };
    let [type_byte, ..] = word.to_be_bytes();
    let serialize_type =
        SerializeType::from_code(type_byte).ok_or(FrameError::UnknownSerializeType(type_byte))?;
    let header_len = (word & 0x00FF_FFFF).unsigned_abs() as usize;
    let available = length - 4;
    if header_len > available {
        return Err(FrameError::HeaderLengthExceedsFrame { header_len, available });
    }
    Ok(Some(FramePrefix { length, serialize_type, header_len }))
}

/// Splits the next complete frame off the front of `src`.
///
/// Returns `Ok(None)` until the whole frame has arrived, reserving capacity as described in the
/// module docs. On success the frame's bytes are removed from `src` and shared, not copied.
///
/// # Errors
///
/// The [`FrameError`]s of [`peek_prefix`]; all are fatal for the connection, and `src` is left
/// untouched.
///
/// # Examples
///
/// ```
/// use baiji::remoting::{decode_frame, FrameError};
/// use bytes::BytesMut;
///
/// // 4 + 2 header bytes + 1 body byte, JSON header of length 2.
/// let mut src = BytesMut::from(&[0, 0, 0, 7, 0, 0, 0, 2, b'{', b'}', b'x'][..]);
/// let frame = decode_frame(&mut src)?.expect("complete");
/// assert_eq!(&frame.body[..], b"x");
///
/// let mut hostile = BytesMut::from(&[0x80, 0, 0, 0][..]);
/// assert!(matches!(decode_frame(&mut hostile), Err(FrameError::NegativeLength(_))));
/// # Ok::<(), FrameError>(())
/// ```
pub fn decode_frame(src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    let Some(prefix) = peek_prefix(src)? else {
        reserve_toward(src, FRAME_PREFIX_LEN);
        return Ok(None);
    };
    let wire_len = prefix.wire_len();
    if src.len() < wire_len {
        reserve_toward(src, wire_len);
        return Ok(None);
    }
    let mut frame = src.split_to(wire_len);
    frame.advance(FRAME_PREFIX_LEN);
    let header = frame.split_to(prefix.header_len).freeze();
    Ok(Some(Frame { serialize_type: prefix.serialize_type, header, body: frame.freeze() }))
}

/// Reserves room for more of a frame of `target` bytes, bounded by what has already arrived.
fn reserve_toward(src: &mut BytesMut, target: usize) {
    let missing = target.saturating_sub(src.len());
    let step = missing.min(src.len().max(RESERVE_CHUNK));
    if src.capacity() - src.len() < step {
        src.reserve(step);
    }
}

#[cfg(test)]
mod tests;
