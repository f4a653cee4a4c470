//! Error types, one per concern.
//!
//! The split follows who must react:
//!
//! * [`FrameError`] — the byte stream cannot be cut into commands, or a command cannot even be
//!   read (length out of range, unknown serialize type, a header that is not JSON at all). The
//!   connection is no longer in a known state and must be closed. The one exception is
//!   [`FrameError::HeaderRefused`]: a whole frame whose header exceeds a decoding limit, answered
//!   with an error while the connection stays open.
//! * [`HeaderError`] — the command arrived intact but a field of its custom header is missing or
//!   malformed. The broker answers the request with an error code and this error's text as the
//!   remark; the connection stays open.
//! * [`BodyError`] — a JSON body (route data, heartbeat, lock request, …) does not parse.
//!   Answered like a header error.
//! * [`MessageError`] — a stored-message record, a batch body or a properties string is
//!   malformed, or a record to be written exceeds a format limit.
//! * [`MsgIdError`] — a message id string is not a valid offset message id.
//!
//! Every message is written to be sent back to a client as a response remark.

use thiserror::Error;

/// Longest malformed value quoted back in an error message, in bytes.
const QUOTE_LIMIT: usize = 64;

/// Copies at most [`QUOTE_LIMIT`] bytes of `value` (cut at a character boundary) for quoting in
/// an error, so a hostile multi-megabyte field cannot blow up a remark.
pub(crate) fn quote(value: &str) -> String {
    if value.len() <= QUOTE_LIMIT {
        return value.to_owned();
    }
    let mut end = QUOTE_LIMIT;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let mut quoted = String::with_capacity(end + 3);
    quoted.push_str(value.get(..end).unwrap_or_default());
    quoted.push_str("...");
    quoted
}

/// The stream cannot be decoded into commands, or a command cannot be encoded; fatal for the
/// connection.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The 4-byte length prefix is negative.
    #[error("frame length {0} is negative")]
    NegativeLength(i32),
    /// The length prefix is smaller than the 4-byte header-length word it must cover.
    #[error("frame length {0} is smaller than the 4-byte header-length word")]
    LengthTooSmall(i32),
    /// The frame is larger than [`MAX_FRAME_LEN`](crate::remoting::frame::MAX_FRAME_LEN).
    #[error("frame length {length} exceeds the maximum of {max} bytes")]
    TooLarge {
        /// Announced (decode) or required (encode) length.
        length: usize,
        /// The limit in force.
        max: usize,
    },
    /// The header length in the second word does not fit inside the frame.
    #[error("header length {header_len} exceeds the {available} bytes left in the frame")]
    HeaderLengthExceedsFrame {
        /// Header length announced by the frame.
        header_len: usize,
        /// Bytes of the frame after the header-length word.
        available: usize,
    },
    /// The serialize-type byte is neither 0 (JSON) nor 1 (ROCKETMQ).
    #[error("unknown serialize type {0}")]
    UnknownSerializeType(u8),
    /// The JSON header is not a JSON object with a numeric `code` and `opaque`.
    #[error("malformed JSON header: {0}")]
    MalformedJsonHeader(String),
    /// The ROCKETMQ binary header is truncated or has an impossible length field.
    #[error("malformed ROCKETMQ header: {0}")]
    MalformedBinaryHeader(&'static str),
    /// An encoded header is longer than the 24 bits the frame reserves for its length.
    #[error("header of {0} bytes exceeds the 16777215-byte header limit")]
    HeaderTooLarge(usize),
    /// A value does not fit the field width of the ROCKETMQ binary header.
    #[error("{field} {value} does not fit the ROCKETMQ header's 16-bit field")]
    FieldOutOfRange {
        /// Which header field.
        field: &'static str,
        /// The value that did not fit.
        value: i32,
    },
    /// The frame arrived whole but its header exceeds a decoding limit
    /// ([`MAX_HEADER_BYTES`](crate::remoting::frame::MAX_HEADER_BYTES),
    /// [`MAX_EXT_FIELDS`](crate::remoting::ext::MAX_EXT_FIELDS)). Unlike every other variant
    /// this one is **not** fatal: the frame has been consumed, the stream is still in step, and
    /// the request can be answered with [`RefusedHeader::response`].
    #[error("request header refused: {}", .0.reason)]
    HeaderRefused(Box<RefusedHeader>),
    /// A string in the ROCKETMQ binary header is longer than its length field allows.
    #[error("{field} of {len} bytes is too long for the ROCKETMQ header")]
    StringTooLong {
        /// Which string.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
}

/// What could be read of a request whose header was refused, to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedHeader {
    /// The request code.
    pub code: i32,
    /// The request id the answer must echo.
    pub opaque: i32,
    /// The flags (response, one-way).
    pub flag: i32,
    /// The header encoding the answer must use.
    pub serialize_type: crate::remoting::header_codec::types::SerializeType,
    /// Why it was refused (the answer's remark).
    pub reason: String,
}

/// A custom-header field of a well-framed request is missing or malformed.
///
/// The texts follow the Java broker's wording (`the custom field <queueId> is null`) so clients
/// and operators see familiar remarks.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// A required field is absent (or JSON `null`).
    #[error("the custom field <{field}> is null")]
    Missing {
        /// Wire name of the field.
        field: &'static str,
    },
    /// A numeric field does not parse as a decimal integer of the expected width.
    #[error("the custom field <{field}> is not a number: {value}")]
    NotANumber {
        /// Wire name of the field.
        field: &'static str,
        /// The offending text (truncated).
        value: String,
    },
    /// A boolean field is not `true`/`false`/`1`/`0`.
    #[error("the custom field <{field}> is not a boolean: {value}")]
    NotABoolean {
        /// Wire name of the field.
        field: &'static str,
        /// The offending text (truncated).
        value: String,
    },
    /// A numeric field is outside the range the protocol allows (for example a negative offset
    /// in a field the clients read as unsigned).
    #[error("the custom field <{field}> is out of range: {value}")]
    OutOfRange {
        /// Wire name of the field.
        field: &'static str,
        /// The offending value.
        value: String,
    },
}

impl HeaderError {
    /// Wire name of the field the error is about, for logs and metrics.
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            Self::Missing { field }
            | Self::NotANumber { field, .. }
            | Self::NotABoolean { field, .. }
            | Self::OutOfRange { field, .. } => field,
        }
    }
}

/// A JSON request or response body does not have the expected shape.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The body is empty where a JSON document is required.
    #[error("the request body is empty")]
    Empty,
    /// The body is not valid JSON of the expected shape.
    #[error("malformed JSON body: {0}")]
    Json(#[from] serde_json::Error),
}

/// A stored-message record, batch body or properties string is malformed, or a record to be
/// written exceeds a limit of the format.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The buffer ends inside a record.
    #[error("message record truncated in {field}: needs {needed} bytes, {remaining} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A length field is negative.
    #[error("message field {field} has negative length {len}")]
    NegativeLength {
        /// The length field.
        field: &'static str,
        /// Its value.
        len: i64,
    },
    /// The magic code is not a known stored-message version.
    #[error("unknown message magic code {0:#010x}")]
    UnknownMagic(i32),
    /// The record's TOTALSIZE disagrees with the lengths of its parts.
    #[error("message record declares {declared} bytes but its fields take {actual}")]
    SizeMismatch {
        /// TOTALSIZE as written.
        declared: i64,
        /// Size computed from the fields.
        actual: usize,
    },
    /// The topic is longer than the record format can hold.
    #[error("message topic length too long {len} (at most {max} bytes)")]
    TopicTooLong {
        /// Topic length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The properties are longer than the 16-bit length field can hold.
    #[error("message properties length too long {len} (at most {max} bytes)")]
    PropertiesTooLong {
        /// Properties length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The body or the whole record is longer than a 32-bit length can hold.
    #[error("message body length too long {0}")]
    BodyTooLong(usize),
    /// The topic or properties are not valid UTF-8.
    #[error("message {0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    /// A host port outside 0..=65535.
    #[error("message host port {0} is out of range")]
    InvalidPort(i32),
    /// A property key or value contains a separator byte (0x01 or 0x02).
    #[error("message property {key} contains a reserved separator byte")]
    PropertySeparator {
        /// The key (truncated), or the key of the value, that contains the separator.
        key: String,
    },
}

/// A string is not a valid offset message id.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MsgIdError {
    /// Not 32 (IPv4) or 56 (IPv6) hex digits.
    #[error("message id must be 32 or 56 hex digits, got {0} characters")]
    BadLength(usize),
    /// A character that is not a hex digit.
    #[error("message id has a non-hex character at position {0}")]
    BadHex(usize),
    /// The embedded port is outside 0..=65535.
    #[error("message id carries invalid port {0}")]
    InvalidPort(i32),
}

#[cfg(test)]
mod tests;
