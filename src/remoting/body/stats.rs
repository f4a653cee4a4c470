//! Admin bodies: GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), the connection lists
//! (203, 204), GET_BROKER_RUNTIME_INFO's `KVTable` (28), the reset-offset table (220, 222),
//! QUERY_TOPIC_CONSUME_BY_WHO's `GroupList` (300), the subscription-group wrapper (201),
//! VIEW_BROKER_STATS_DATA's `BrokerStatsData` (315), GET_BROKER_CONSUME_STATS's
//! `ConsumeStatsList` (317) and GET_ALL_PRODUCER_INFO's `ProducerTableInfo` (328).
//!
//! Java keys these maps by a `MessageQueue` object, which fastjson writes as a bare object key
//! (not valid JSON). baiji writes the standard-JSON equivalent rocketmq-rust's admin tools read
//! (`serde_json_any_key`): the key is the queue's JSON text in a string,
//! `{"{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":0}":{…}}`.

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::{Error as _, SerializeMap};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::remoting::body::{
    ConsumeFromWhere, ConsumeType, JsonBody, MessageModel, MessageQueue, SubscriptionData,
};

/// Offsets of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicOffset {
    /// Smallest readable offset.
    #[serde(default)]
    pub min_offset: i64,
    /// Next offset to be written.
    #[serde(default)]
    pub max_offset: i64,
    /// Store time of the last message, milliseconds.
    #[serde(default)]
    pub last_update_timestamp: i64,
}

/// Per-queue offsets of a topic.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicStatsTable {
    /// Queue → offsets.
    #[serde(default, with = "mq_key_map")]
    pub offset_table: Vec<(MessageQueue, TopicOffset)>,
    /// Messages stored per second (rocketmq-rust's admin tool requires the field).
    #[serde(default)]
    pub topic_put_tps: f64,
}

impl JsonBody for TopicStatsTable {}

/// Progress of a consumer group on one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OffsetWrapper {
    /// Queue max offset.
    #[serde(default)]
    pub broker_offset: i64,
    /// Committed offset.
    #[serde(default)]
    pub consumer_offset: i64,
    /// Offset of the last pull.
    #[serde(default)]
    pub pull_offset: i64,
    /// Store time of the last consumed message, milliseconds.
    #[serde(default)]
    pub last_timestamp: i64,
}

/// Progress of a consumer group.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeStats {
    /// Queue → progress.
    #[serde(default, with = "mq_key_map")]
    pub offset_table: Vec<(MessageQueue, OffsetWrapper)>,
    /// Messages consumed per second.
    #[serde(default)]
    pub consume_tps: f64,
    /// baiji's addition (RocketMQ's tools ignore it): bytes of retained messages the group
    /// holds, over the topics listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_bytes: Option<u64>,
    /// baiji's addition: messages `drop-oldest` evicted before the group acknowledged them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_messages: Option<u64>,
}

/// One client connection (RocketMQ's `Connection`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Connection {
    /// The client id.
    #[serde(default)]
    pub client_id: String,
    /// `ip:port` of the client.
    #[serde(default)]
    pub client_addr: String,
    /// Language name (`JAVA`, `RUST`, ...).
    #[serde(default)]
    pub language: String,
    /// The client's version code.
    #[serde(default)]
    pub version: i32,
}

/// GET_CONSUMER_CONNECTION_LIST response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerConnection {
    /// The group's live clients.
    #[serde(default)]
    pub connection_set: Vec<Connection>,
    /// Topic → subscription.
    #[serde(default)]
    pub subscription_table: BTreeMap<String, SubscriptionData>,
    /// Push or pull.
    #[serde(default)]
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    #[serde(default)]
    pub message_model: MessageModel,
    /// Where the group starts without an offset.
    #[serde(default)]
    pub consume_from_where: ConsumeFromWhere,
}

impl JsonBody for ConsumerConnection {}

/// GET_PRODUCER_CONNECTION_LIST response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducerConnection {
    /// The group's live clients.
    #[serde(default)]
    pub connection_set: Vec<Connection>,
}

impl JsonBody for ProducerConnection {}

/// A string table (GET_BROKER_RUNTIME_INFO).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvTable {
    /// Key → value.
    #[serde(default)]
    pub table: BTreeMap<String, String>,
}

impl JsonBody for KvTable {}

/// INVOKE_BROKER_TO_RESET_OFFSET response and RESET_CONSUMER_CLIENT_OFFSET request body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetOffsetBody {
    /// Queue → the offset to consume from.
    #[serde(default, with = "mq_key_map")]
    pub offset_table: Vec<(MessageQueue, i64)>,
}

impl JsonBody for ResetOffsetBody {}

/// QUERY_TOPIC_CONSUME_BY_WHO response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupList {
    /// Consumer groups.
    #[serde(default)]
    pub group_list: Vec<String>,
}

impl JsonBody for GroupList {}

impl JsonBody for ConsumeStats {}

/// One window of a stats item (RocketMQ's `BrokerStatsItem`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerStatsItem {
    /// What the item counted over the window.
    #[serde(default)]
    pub sum: u64,
    /// `sum` per second over the window.
    #[serde(default)]
    pub tps: f64,
    /// `sum` per counted call (messages per send or pull).
    #[serde(default)]
    pub avgpt: f64,
}

/// VIEW_BROKER_STATS_DATA response body (RocketMQ's `BrokerStatsData`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerStatsData {
    /// The last minute.
    #[serde(default)]
    pub stats_minute: BrokerStatsItem,
    /// The last hour.
    #[serde(default)]
    pub stats_hour: BrokerStatsItem,
    /// The last day.
    #[serde(default)]
    pub stats_day: BrokerStatsItem,
}

impl JsonBody for BrokerStatsData {}

/// GET_BROKER_CONSUME_STATS response body (RocketMQ's `ConsumeStatsList`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeStatsList {
    /// One single-entry map per group: group → its stats per topic.
    #[serde(default)]
    pub consume_stats_list: Vec<BTreeMap<String, Vec<ConsumeStats>>>,
    /// The broker's address.
    #[serde(default)]
    pub broker_addr: String,
    /// Messages not yet consumed, over every group and queue.
    #[serde(default)]
    pub total_diff: i64,
    /// Messages pulled but not committed, over every group and queue.
    #[serde(default)]
    pub total_inflight_diff: i64,
}

impl JsonBody for ConsumeStatsList {}

/// One producer client (RocketMQ's `ProducerInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProducerInfo {
    /// The client id.
    #[serde(default)]
    pub client_id: String,
    /// The client's address as Netty prints it (`/ip:port`).
    #[serde(default, rename = "remoteIP")]
    pub remote_ip: String,
    /// Language name (`JAVA`, `PYTHON`, ...).
    #[serde(default)]
    pub language: String,
    /// The client's version code.
    #[serde(default)]
    pub version: i32,
    /// When the client was last heard from, ms since the Unix epoch.
    #[serde(default)]
    pub last_update_timestamp: i64,
}

/// GET_ALL_PRODUCER_INFO response body (RocketMQ's `ProducerTableInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProducerTableInfo {
    /// Producer group → its clients.
    #[serde(default)]
    pub data: BTreeMap<String, Vec<ProducerInfo>>,
}

impl JsonBody for ProducerTableInfo {}

/// (De)serialises `Vec<(MessageQueue, V)>` as an object keyed by each queue's JSON text.
mod mq_key_map {
    use super::*;

    pub(super) fn serialize<S: Serializer, V: Serialize>(
        entries: &[(MessageQueue, V)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(entries.len()))?;
        for (queue, value) in entries {
            let key = serde_json::to_string(queue).map_err(S::Error::custom)?;
            map.serialize_entry(&key, value)?;
        }
        map.end()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>, V: DeserializeOwned>(
        deserializer: D,
    ) -> Result<Vec<(MessageQueue, V)>, D::Error> {
        let raw = Option::<BTreeMap<String, V>>::deserialize(deserializer)?.unwrap_or_default();
        raw.into_iter()
            .map(|(key, value)| {
                serde_json::from_str::<MessageQueue>(&key)
                    .map(|queue| (queue, value))
                    .map_err(D::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
