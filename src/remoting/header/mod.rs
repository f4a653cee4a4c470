//! Typed custom headers, decoded from and encoded to [`ExtFields`].
//!
//! Each request or response family has a struct named like RocketMQ's. Request headers borrow
//! their strings from the request's [`ExtFields`] (`SendMessageRequestHeader<'a>`), so decoding
//! the hot SEND and PULL headers allocates nothing; response headers own their data because the
//! broker builds them.
//!
//! Decoding is lenient: optional fields fall back to RocketMQ's defaults, unknown fields (`lo`,
//! `ns`, `bname`, `AccessKey`, `Signature`, …) are ignored, and ali-ons' unquoted numbers and
//! booleans already arrive as text. A missing required field or a malformed number is a
//! [`HeaderError`] naming the wire field, which the broker returns as the remark of an error
//! response. Encoding writes every required field and the optional ones that are set, always
//! as strings.

/// Declares a header struct and its [`FromExtFields`] and [`ToExtFields`] impls from one list
/// of fields, each with its Rust type and wire name, so that a field is written once instead of
/// three times (struct, decoder, encoder):
///
/// ```text
/// ext_header! {
///     /// Doc and derives, as on any struct.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub struct AckMessageRequestHeader<'a> {
///         /// `consumerGroup`.
///         pub consumer_group: &'a str = "consumerGroup",
///         /// `order`; false when absent.
///         pub order: bool = "order" [default: false],
///         ...
///     }
/// }
/// ```
///
/// The type says how a field is read and written ([`Field`]): `&str`, `String`, `i32`, `i64`,
/// `u64` and `bool` are required, `Option<_>` of them optional (written only when set). Options
/// in brackets after the name:
///
/// * `[default: D]`: optional on the wire; absent or empty text reads as `D`; always written;
/// * `[default: D, sparse]`: the same, but written only when the value is not `D`;
/// * `[nonempty]` (on `Option<&str>`): empty text reads as `None`.
///
/// Fields are read in the order listed, so the first missing or malformed one is the error, and
/// written in that order. Headers with any other rule are written by hand.
macro_rules! ext_header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident<$lt:lifetime> {
            $(
                $(#[$fmeta:meta])*
                pub $field:ident: $ty:ty = $key:literal $([$($opt:tt)*])?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name<$lt> { $( $(#[$fmeta])* pub $field: $ty, )* }

        impl<$lt> $crate::remoting::header::FromExtFields<$lt> for $name<$lt> {
            fn from_ext_fields(
                ext: &$lt $crate::remoting::ext::ExtFields,
            ) -> Result<Self, $crate::remoting::error::HeaderError> {
                Ok(Self { $( $field: ext_header!(@read ext, $key, $ty; $($($opt)*)?), )* })
            }
        }

        impl $crate::remoting::header::ToExtFields for $name<'_> {
            fn write_ext_fields(&self, ext: &mut $crate::remoting::ext::ExtFields) {
                $( ext_header!(@write &self.$field, ext, $key; $($($opt)*)?); )*
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                pub $field:ident: $ty:ty = $key:literal $([$($opt:tt)*])?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name { $( $(#[$fmeta])* pub $field: $ty, )* }

        impl $crate::remoting::header::FromExtFields<'_> for $name {
            fn from_ext_fields(
                ext: &$crate::remoting::ext::ExtFields,
            ) -> Result<Self, $crate::remoting::error::HeaderError> {
                Ok(Self { $( $field: ext_header!(@read ext, $key, $ty; $($($opt)*)?), )* })
            }
        }

        impl $crate::remoting::header::ToExtFields for $name {
            fn write_ext_fields(&self, ext: &mut $crate::remoting::ext::ExtFields) {
                $( ext_header!(@write &self.$field, ext, $key; $($($opt)*)?); )*
            }
        }
    };
    (@read $ext:ident, $key:literal, $ty:ty; ) => {
        <$ty as $crate::remoting::header::Field>::read($ext, $key)?
    };
    (@read $ext:ident, $key:literal, $ty:ty; nonempty) => {
        <$ty as $crate::remoting::header::Field>::read($ext, $key)?.filter(|s| !s.is_empty())
    };
    (@read $ext:ident, $key:literal, $ty:ty; default: $default:expr $(, sparse)?) => {
        <Option<$ty> as $crate::remoting::header::Field>::read($ext, $key)?
            .filter(|v| !$crate::remoting::header::Field::is_empty_text(v))
            .unwrap_or_else(|| $default.into())
    };
    (@write $value:expr, $ext:ident, $key:literal; default: $default:expr, sparse) => {
        if $crate::remoting::header::differs($value, $default) {
            $crate::remoting::header::Field::write($value, $ext, $key);
        }
    };
    (@write $value:expr, $ext:ident, $key:literal; $(nonempty)? $(default: $default:expr)?) => {
        $crate::remoting::header::Field::write($value, $ext, $key)
    };
}

mod admin;
mod client;
mod offset;
mod pop;
mod pull;
mod query;
mod send;
mod transaction;

pub use admin::{
    CreateTopicRequestHeader, DeleteTopicRequestHeader, GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader, RegisterBrokerResponseHeader, UnregisterBrokerRequestHeader,
};
pub use client::{
    ConsumerSendMsgBackRequestHeader, GetConsumeStatsRequestHeader,
    GetConsumerListByGroupRequestHeader, GetTopicStatsInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader, UnregisterClientRequestHeader,
};
pub use offset::{
    GetEarliestMsgStoretimeRequestHeader, GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader, OffsetResponseHeader, QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader, SearchOffsetRequestHeader, SearchOffsetResponseHeader,
    TopicQueueRequestHeader, UpdateConsumerOffsetRequestHeader,
};
pub use pop::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    ExtraInfo, PopMessageRequestHeader, PopMessageResponseHeader, POP_ORDER_REVIVE_QUEUE,
};
pub use pull::{pull_sys_flag, PullMessageRequestHeader, PullMessageResponseHeader};
pub use query::{QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader};
pub use send::{
    RecallMessageRequestHeader, RecallMessageResponseHeader, SendHeaderVersion,
    SendMessageRequestHeader, SendMessageResponseHeader, DEFAULT_MSG_REGION,
};
pub use transaction::{CheckTransactionStateRequestHeader, EndTransactionRequestHeader};

use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;

/// A header that can be read from a command's custom fields.
pub trait FromExtFields<'a>: Sized {
    /// Reads the header; request headers borrow their strings from `ext`.
    ///
    /// # Errors
    ///
    /// [`HeaderError`] naming the first required field that is missing or malformed.
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError>;
}

/// A header that can be written into a command's custom fields.
pub trait ToExtFields {
    /// Writes every field that is set, as strings, into `ext`.
    fn write_ext_fields(&self, ext: &mut ExtFields);

    /// The header as a fresh map.
    fn to_ext_fields(&self) -> ExtFields {
        let mut ext = ExtFields::new();
        self.write_ext_fields(&mut ext);
        ext
    }
}

/// How a header field of one Rust type is read from and written to [`ExtFields`]: a plain
/// type is a required field, an `Option` an optional one written only when set. The readings
/// are [`ExtFields`]' typed getters, so the errors are theirs.
trait Field<'a>: Sized {
    /// Reads the field named `key`.
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError>;

    /// Writes the field as text under `key`.
    fn write(&self, ext: &mut ExtFields, key: &str);

    /// Whether this is empty text, which a field with a default reads as absent (numbers and
    /// booleans already read empty text as absent).
    fn is_empty_text(&self) -> bool {
        false
    }
}

impl<'a> Field<'a> for &'a str {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.required_str(key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        ext.insert(key, self);
    }
    fn is_empty_text(&self) -> bool {
        self.is_empty()
    }
}

impl<'a> Field<'a> for String {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.required_str(key).map(str::to_owned)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        ext.insert(key, self);
    }
    fn is_empty_text(&self) -> bool {
        self.is_empty()
    }
}

impl<'a> Field<'a> for i32 {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.required_i32(key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        ext.insert_i64(key, i64::from(*self));
    }
}

impl<'a> Field<'a> for i64 {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.required_i64(key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        ext.insert_i64(key, *self);
    }
}

/// A value the client reads as unsigned; it arrives as an `i64`.
impl<'a> Field<'a> for u64 {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        required_u64(ext, key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        ext.insert_u64(key, *self);
    }
}

impl<'a> Field<'a> for bool {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.required_bool(key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        ext.insert_bool(key, *self);
    }
}

impl<'a> Field<'a> for Option<&'a str> {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        Ok(ext.optional_str(key))
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        put_opt_str(ext, key, *self);
    }
}

impl<'a> Field<'a> for Option<String> {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        Ok(ext.optional_str(key).map(str::to_owned))
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        put_opt_str(ext, key, self.as_deref());
    }
}

impl<'a> Field<'a> for Option<i32> {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.optional_i32(key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        put_opt_i64(ext, key, self.map(i64::from));
    }
}

impl<'a> Field<'a> for Option<i64> {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.optional_i64(key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        put_opt_i64(ext, key, *self);
    }
}

impl<'a> Field<'a> for Option<bool> {
    fn read(ext: &'a ExtFields, key: &'static str) -> Result<Self, HeaderError> {
        ext.optional_bool(key)
    }
    fn write(&self, ext: &mut ExtFields, key: &str) {
        if let Some(value) = self {
            ext.insert_bool(key, *value);
        }
    }
}

/// Whether a field holds something other than its default (`ext_header!`'s `sparse`).
fn differs<T: PartialEq>(value: &T, default: T) -> bool {
    *value != default
}

/// Writes an optional string field.
fn put_opt_str(ext: &mut ExtFields, key: &str, value: Option<&str>) {
    if let Some(value) = value {
        ext.insert(key, value);
    }
}

/// Writes an optional integer field.
fn put_opt_i64(ext: &mut ExtFields, key: &str, value: Option<i64>) {
    if let Some(value) = value {
        ext.insert_i64(key, value);
    }
}

/// Reads a required `i64` that clients parse as unsigned.
fn required_u64(ext: &ExtFields, key: &'static str) -> Result<u64, HeaderError> {
    let value = ext.required_i64(key)?;
    u64::try_from(value)
        .map_err(|_| HeaderError::OutOfRange { field: key, value: value.to_string() })
}

/// Test helper: encodes a header, decodes it again as `$ty`, asserts equality and returns the
/// encoded map for further checks.
#[cfg(test)]
macro_rules! assert_header_round_trip {
    ($ty:ident, $header:expr) => {{
        let header = $header;
        let ext = $crate::remoting::header::ToExtFields::to_ext_fields(&header);
        let back = <$ty as $crate::remoting::header::FromExtFields>::from_ext_fields(&ext)
            .expect("a header the encoder wrote must decode");
        assert_eq!(back, header, "round trip through {ext:?}");
        ext
    }};
}
#[cfg(test)]
pub(crate) use assert_header_round_trip;
