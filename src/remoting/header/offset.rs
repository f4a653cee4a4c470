//! Offset headers: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
//! SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and
//! GET_EARLIEST_MSG_STORETIME (32).

use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::{put_opt_str, FromExtFields, ToExtFields};

/// A request naming one queue of a topic: the shape of GET_MIN_OFFSET and
/// GET_EARLIEST_MSG_STORETIME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicQueueRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
}

/// GET_MIN_OFFSET request.
pub type GetMinOffsetRequestHeader<'a> = TopicQueueRequestHeader<'a>;
/// GET_EARLIEST_MSG_STORETIME request.
pub type GetEarliestMsgStoretimeRequestHeader<'a> = TopicQueueRequestHeader<'a>;

impl<'a> FromExtFields<'a> for TopicQueueRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self { topic: ext.required_str("topic")?, queue_id: ext.required_i32("queueId")? })
    }
}

impl ToExtFields for TopicQueueRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
    }
}

/// A response carrying one `offset`: QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET and
/// SEARCH_OFFSET_BY_TIMESTAMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetResponseHeader {
    /// `offset`.
    pub offset: i64,
}

/// QUERY_CONSUMER_OFFSET response.
pub type QueryConsumerOffsetResponseHeader = OffsetResponseHeader;
/// GET_MAX_OFFSET response.
pub type GetMaxOffsetResponseHeader = OffsetResponseHeader;
/// GET_MIN_OFFSET response.
pub type GetMinOffsetResponseHeader = OffsetResponseHeader;
/// SEARCH_OFFSET_BY_TIMESTAMP response.
pub type SearchOffsetResponseHeader = OffsetResponseHeader;

impl FromExtFields<'_> for OffsetResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self { offset: ext.required_i64("offset")? })
    }
}

impl ToExtFields for OffsetResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_i64("offset", self.offset);
    }
}

/// QUERY_CONSUMER_OFFSET request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryConsumerOffsetRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
    /// `topic`.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
    /// `setZeroIfNotFound`: true when absent (the Rust client omits it).
    pub set_zero_if_not_found: bool,
}

impl<'a> FromExtFields<'a> for QueryConsumerOffsetRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: ext.required_str("consumerGroup")?,
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            set_zero_if_not_found: ext.optional_bool("setZeroIfNotFound")?.unwrap_or(true),
        })
    }
}

impl ToExtFields for QueryConsumerOffsetRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert_bool("setZeroIfNotFound", self.set_zero_if_not_found);
    }
}

/// UPDATE_CONSUMER_OFFSET request (usually one-way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateConsumerOffsetRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
    /// `topic`.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
    /// `commitOffset`: the next offset the group will consume.
    pub commit_offset: i64,
}

impl<'a> FromExtFields<'a> for UpdateConsumerOffsetRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: ext.required_str("consumerGroup")?,
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            commit_offset: ext.required_i64("commitOffset")?,
        })
    }
}

impl ToExtFields for UpdateConsumerOffsetRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert_i64("commitOffset", self.commit_offset);
    }
}

/// GET_MAX_OFFSET request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetMaxOffsetRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
    /// `committed` (5.x): true when absent.
    pub committed: bool,
}

impl<'a> FromExtFields<'a> for GetMaxOffsetRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            committed: ext.optional_bool("committed")?.unwrap_or(true),
        })
    }
}

impl ToExtFields for GetMaxOffsetRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert_bool("committed", self.committed);
    }
}

/// SEARCH_OFFSET_BY_TIMESTAMP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchOffsetRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
    /// `timestamp`, milliseconds.
    pub timestamp: i64,
    /// `boundaryType` (5.x: `LOWER` / `UPPER`).
    pub boundary_type: Option<&'a str>,
}

impl<'a> FromExtFields<'a> for SearchOffsetRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            timestamp: ext.required_i64("timestamp")?,
            boundary_type: ext.optional_str("boundaryType"),
        })
    }
}

impl ToExtFields for SearchOffsetRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert_i64("timestamp", self.timestamp);
        put_opt_str(ext, "boundaryType", self.boundary_type);
    }
}

/// GET_EARLIEST_MSG_STORETIME response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetEarliestMsgStoretimeResponseHeader {
    /// `timestamp`: store time of the oldest readable message, milliseconds.
    pub timestamp: i64,
}

impl FromExtFields<'_> for GetEarliestMsgStoretimeResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self { timestamp: ext.required_i64("timestamp")? })
    }
}

impl ToExtFields for GetEarliestMsgStoretimeResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_i64("timestamp", self.timestamp);
    }
}

#[cfg(test)]
mod tests;
