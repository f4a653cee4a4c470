//! VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12) headers.

use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::{put_opt_str, FromExtFields, ToExtFields};

/// Ext field that marks a QUERY_MESSAGE whose `key` is a UNIQ_KEY.
const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";

/// VIEW_MESSAGE_BY_ID request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewMessageRequestHeader<'a> {
    /// `offset`: commit-log offset decoded from an offset msgId.
    pub offset: i64,
    /// `topic` (5.x, optional).
    pub topic: Option<&'a str>,
}

impl<'a> FromExtFields<'a> for ViewMessageRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self { offset: ext.required_i64("offset")?, topic: ext.optional_str("topic") })
    }
}

impl ToExtFields for ViewMessageRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_i64("offset", self.offset);
        put_opt_str(ext, "topic", self.topic);
    }
}

/// QUERY_MESSAGE request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryMessageRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
    /// `key`: a `KEYS` token or, with [`unique_key_query`](Self::unique_key_query), a UNIQ_KEY.
    pub key: &'a str,
    /// `maxNum`: at most this many messages.
    pub max_num: i32,
    /// `beginTimestamp`, milliseconds.
    pub begin_timestamp: i64,
    /// `endTimestamp`, milliseconds.
    pub end_timestamp: i64,
    /// Ext field `_UNIQUE_KEY_QUERY` is `true`.
    pub unique_key_query: bool,
}

impl<'a> FromExtFields<'a> for QueryMessageRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: ext.required_str("topic")?,
            key: ext.required_str("key")?,
            max_num: ext.required_i32("maxNum")?,
            begin_timestamp: ext.required_i64("beginTimestamp")?,
            end_timestamp: ext.required_i64("endTimestamp")?,
            unique_key_query: ext.optional_bool(UNIQUE_KEY_QUERY)?.unwrap_or(false),
        })
    }
}

impl ToExtFields for QueryMessageRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
        ext.insert("key", self.key);
        ext.insert_i64("maxNum", i64::from(self.max_num));
        ext.insert_i64("beginTimestamp", self.begin_timestamp);
        ext.insert_i64("endTimestamp", self.end_timestamp);
        if self.unique_key_query {
            ext.insert_bool(UNIQUE_KEY_QUERY, true);
        }
    }
}

/// QUERY_MESSAGE response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryMessageResponseHeader {
    /// `indexLastUpdateTimestamp`.
    pub index_last_update_timestamp: i64,
    /// `indexLastUpdatePhyoffset`.
    pub index_last_update_phyoffset: i64,
}

impl FromExtFields<'_> for QueryMessageResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            index_last_update_timestamp: ext.required_i64("indexLastUpdateTimestamp")?,
            index_last_update_phyoffset: ext.required_i64("indexLastUpdatePhyoffset")?,
        })
    }
}

impl ToExtFields for QueryMessageResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_i64("indexLastUpdateTimestamp", self.index_last_update_timestamp);
        ext.insert_i64("indexLastUpdatePhyoffset", self.index_last_update_phyoffset);
    }
}

#[cfg(test)]
mod tests;
