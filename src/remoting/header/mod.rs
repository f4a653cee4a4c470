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
    SendHeaderVersion, SendMessageRequestHeader, SendMessageResponseHeader, DEFAULT_MSG_REGION,
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
