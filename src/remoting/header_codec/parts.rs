//! What both header encodings share: the fields of a header ([`HeaderParts`] decoded,
//! [`HeaderRef`] to encode) and the texts of their refusals.
//!
//! They live apart from [`RemotingCommand`](crate::remoting::RemotingCommand) so that the
//! codecs, which `command.rs` calls, do not have to import it back.

use crate::remoting::ext::{ExtFields, MAX_EXT_FIELDS};
use crate::remoting::frame::MAX_HEADER_BYTES;
use crate::remoting::header_codec::types::LanguageCode;

/// Entries reserved up front when decoding `extFields`; a SEND header has 13.
pub(crate) const DEFAULT_ENTRIES: usize = 16;

/// The refusal text for a header of `len` bytes.
pub(crate) fn header_too_long(len: usize) -> String {
    format!("the request header of {len} bytes exceeds the limit of {MAX_HEADER_BYTES} bytes")
}

/// The refusal text for a header with `n` fields or more.
pub(crate) fn too_many_fields(n: usize) -> String {
    format!("the request header has {n} or more extFields; at most {MAX_EXT_FIELDS} are accepted")
}

/// The header fields shared by both header encodings.
#[derive(Debug)]
pub(crate) struct HeaderParts {
    pub(crate) code: i32,
    pub(crate) language: LanguageCode,
    pub(crate) version: i32,
    pub(crate) opaque: i32,
    pub(crate) flag: i32,
    pub(crate) remark: Option<String>,
    pub(crate) ext_fields: ExtFields,
    /// Set when the header exceeds a decoding limit: why. The fields above are then only what
    /// could be read cheaply (at least `code`, `opaque` and `flag`).
    pub(crate) refused: Option<String>,
}

/// A command's header fields, borrowed for encoding.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeaderRef<'a> {
    pub(crate) code: i32,
    pub(crate) language: LanguageCode,
    pub(crate) version: i32,
    pub(crate) opaque: i32,
    pub(crate) flag: i32,
    pub(crate) remark: Option<&'a str>,
    pub(crate) ext_fields: &'a ExtFields,
}
