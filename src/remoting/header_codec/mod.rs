//! The two encodings of a command header: JSON (serialize type 0, every client's default) and
//! RocketMQ's binary layout (type 1).
//!
//! [`RemotingCommand`](crate::remoting::RemotingCommand) calls [`decode`] and [`encode`]; this
//! folder never imports it back.
//!
//! | file | what it does |
//! |---|---|
//! | [`types`] | [`SerializeType`] and [`LanguageCode`]; imports nothing |
//! | [`parts`] | the fields both encodings share, decoded ([`HeaderParts`]) and to encode ([`HeaderRef`]); the refusal texts |
//! | [`json`] | JSON header: the encoder, and the serde visitor whose readings and errors are the reference |
//! | [`json_scan`] | a direct scanner for the flat shapes every client writes, tried first; `None` hands over to serde |
//! | [`json_ext`] | the serde seed that reads `extFields` straight into the [`ExtFields`] arena; the unescaper both readers share; `ExtFields`' serde impls |
//! | [`json_write`] | JSON string and integer writing for the encoder |
//! | [`binary`] | the `RocketMQSerializable` layout, both ways |
//!
//! Both decoders bound their cost by the header: at most [`MAX_EXT_FIELDS`] fields and
//! [`MAX_HEADER_BYTES`] bytes are read in full; a header over either limit comes back with
//! [`HeaderParts::refused`] set and its `code`, `opaque` and `flag` read, so the broker can
//! answer it (`FrameError::HeaderRefused`) instead of closing the connection.
//!
//! [`ExtFields`]: crate::remoting::ExtFields
//! [`MAX_EXT_FIELDS`]: crate::remoting::MAX_EXT_FIELDS
//! [`MAX_HEADER_BYTES`]: crate::remoting::MAX_HEADER_BYTES

use bytes::BytesMut;

use crate::remoting::error::FrameError;

pub(crate) mod binary;
pub(crate) mod json;
pub(crate) mod json_ext;
pub(crate) mod json_scan;
pub(crate) mod json_write;
pub(crate) mod parts;
pub(crate) mod types;

pub(crate) use parts::{HeaderParts, HeaderRef};
pub use types::{LanguageCode, SerializeType};

/// Decodes a header of type `serialize_type`.
///
/// # Errors
///
/// [`FrameError::MalformedJsonHeader`] or [`FrameError::MalformedBinaryHeader`] if it cannot
/// be read at all (see [`json::decode`] and [`binary::decode`]).
pub(crate) fn decode(
    serialize_type: SerializeType,
    header: &[u8],
) -> Result<HeaderParts, FrameError> {
    match serialize_type {
        SerializeType::Json => json::decode(header),
        SerializeType::RocketMq => binary::decode(header),
    }
}

/// Appends `header` encoded as `serialize_type` to `dst`.
///
/// # Errors
///
/// A [`FrameError`] for a value the binary layout cannot hold (see [`binary::encode`]); JSON
/// can hold every header.
pub(crate) fn encode(
    serialize_type: SerializeType,
    header: &HeaderRef<'_>,
    dst: &mut BytesMut,
) -> Result<(), FrameError> {
    match serialize_type {
        SerializeType::Json => {
            json::encode(header, dst);
            Ok(())
        }
        SerializeType::RocketMq => binary::encode(header, dst),
    }
}
