//! Client membership, retry and admin-statistics headers: UNREGISTER_CLIENT (35),
//! GET_CONSUMER_LIST_BY_GROUP (38), NOTIFY_CONSUMER_IDS_CHANGED (40), CONSUMER_SEND_MSG_BACK
//! (36), GET_TOPIC_STATS_INFO (202) and GET_CONSUME_STATS (208).

use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::{put_opt_i64, put_opt_str, FromExtFields, ToExtFields};

/// UNREGISTER_CLIENT request: the client leaves a producer and/or consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnregisterClientRequestHeader<'a> {
    /// `clientID`.
    pub client_id: &'a str,
    /// `producerGroup`.
    pub producer_group: Option<&'a str>,
    /// `consumerGroup`.
    pub consumer_group: Option<&'a str>,
}

impl<'a> FromExtFields<'a> for UnregisterClientRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            client_id: ext.required_str("clientID")?,
            producer_group: ext.optional_str("producerGroup"),
            consumer_group: ext.optional_str("consumerGroup"),
        })
    }
}

impl ToExtFields for UnregisterClientRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("clientID", self.client_id);
        put_opt_str(ext, "producerGroup", self.producer_group);
        put_opt_str(ext, "consumerGroup", self.consumer_group);
    }
}

/// A request naming one consumer group: GET_CONSUMER_LIST_BY_GROUP and
/// NOTIFY_CONSUMER_IDS_CHANGED share this shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetConsumerListByGroupRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
}

/// NOTIFY_CONSUMER_IDS_CHANGED request (broker → client, one-way).
pub type NotifyConsumerIdsChangedRequestHeader<'a> = GetConsumerListByGroupRequestHeader<'a>;

impl<'a> FromExtFields<'a> for GetConsumerListByGroupRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self { consumer_group: ext.required_str("consumerGroup")? })
    }
}

impl ToExtFields for GetConsumerListByGroupRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
    }
}

/// CONSUMER_SEND_MSG_BACK request: redeliver a consumed message later (or dead-letter it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerSendMsgBackRequestHeader<'a> {
    /// `offset`: commit-log offset of the consumed message.
    pub offset: i64,
    /// `group`: the consumer group.
    pub group: &'a str,
    /// `delayLevel`: 0 lets the broker choose, negative sends straight to the DLQ.
    pub delay_level: i32,
    /// `originMsgId`: the client's msgId (UNIQ_KEY).
    pub origin_msg_id: Option<&'a str>,
    /// `originTopic`.
    pub origin_topic: Option<&'a str>,
    /// `unitMode`; false when absent.
    pub unit_mode: bool,
    /// `maxReconsumeTimes`; absent means the group's default.
    pub max_reconsume_times: Option<i32>,
}

impl<'a> FromExtFields<'a> for ConsumerSendMsgBackRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            offset: ext.required_i64("offset")?,
            group: ext.required_str("group")?,
            delay_level: ext.required_i32("delayLevel")?,
            origin_msg_id: ext.optional_str("originMsgId"),
            origin_topic: ext.optional_str("originTopic"),
            unit_mode: ext.optional_bool("unitMode")?.unwrap_or(false),
            max_reconsume_times: ext.optional_i32("maxReconsumeTimes")?,
        })
    }
}

impl ToExtFields for ConsumerSendMsgBackRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_i64("offset", self.offset);
        ext.insert("group", self.group);
        ext.insert_i64("delayLevel", i64::from(self.delay_level));
        put_opt_str(ext, "originMsgId", self.origin_msg_id);
        put_opt_str(ext, "originTopic", self.origin_topic);
        ext.insert_bool("unitMode", self.unit_mode);
        put_opt_i64(ext, "maxReconsumeTimes", self.max_reconsume_times.map(i64::from));
    }
}

/// GET_TOPIC_STATS_INFO request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetTopicStatsInfoRequestHeader<'a> {
    /// `topic`.
    pub topic: &'a str,
}

impl<'a> FromExtFields<'a> for GetTopicStatsInfoRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self { topic: ext.required_str("topic")? })
    }
}

impl ToExtFields for GetTopicStatsInfoRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("topic", self.topic);
    }
}

/// GET_CONSUME_STATS request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetConsumeStatsRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
    /// `topic`: one topic, or all the group's topics when absent.
    pub topic: Option<&'a str>,
}

impl<'a> FromExtFields<'a> for GetConsumeStatsRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: ext.required_str("consumerGroup")?,
            topic: ext.optional_str("topic").filter(|t| !t.is_empty()),
        })
    }
}

impl ToExtFields for GetConsumeStatsRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
        put_opt_str(ext, "topic", self.topic);
    }
}

#[cfg(test)]
mod tests;
