//! Bodies between brokers and name servers: REGISTER_BROKER (103), GET_BROKER_CLUSTER_INFO
//! (106) and GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206).
//!
//! The registration body is the uncompressed JSON form; its field names match what
//! rocketmq-rust's name server deserialises (`TopicConfigAndMappingSerializeWrapper`, flattened
//! `topicConfigTable`/`dataVersion`, and required `topicQueueMappingInfoMap`,
//! `topicQueueMappingDetailMap` and `mappingDataVersion`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::remoting::body::{null_default, BrokerData, JsonBody};

/// Filter type of every topic baiji creates.
pub const DEFAULT_TOPIC_FILTER_TYPE: &str = "SINGLE_TAG";

fn default_topic_filter_type() -> String {
    DEFAULT_TOPIC_FILTER_TYPE.to_owned()
}

/// Version stamp of a broker's topic table; the name server compares it to skip unchanged
/// registrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVersion {
    /// State version (5.x).
    #[serde(default, deserialize_with = "null_default")]
    pub state_version: i64,
    /// Time of the last change, milliseconds.
    #[serde(default, deserialize_with = "null_default")]
    pub timestamp: i64,
    /// Number of changes.
    #[serde(default, deserialize_with = "null_default")]
    pub counter: i64,
}

/// One topic's configuration as brokers publish it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfig {
    /// Topic.
    #[serde(default, deserialize_with = "null_default")]
    pub topic_name: String,
    /// Queues consumers read.
    #[serde(default, deserialize_with = "null_default")]
    pub read_queue_nums: u32,
    /// Queues producers write.
    #[serde(default, deserialize_with = "null_default")]
    pub write_queue_nums: u32,
    /// PermName bits.
    #[serde(default, deserialize_with = "null_default")]
    pub perm: u32,
    /// `SINGLE_TAG`.
    #[serde(default = "default_topic_filter_type")]
    pub topic_filter_type: String,
    /// Topic system flag.
    #[serde(default, deserialize_with = "null_default")]
    pub topic_sys_flag: u32,
    /// Ordered topic.
    #[serde(default, deserialize_with = "null_default")]
    pub order: bool,
    /// 5.x attributes; `{}` when none.
    #[serde(default, deserialize_with = "null_default")]
    pub attributes: BTreeMap<String, String>,
}

impl TopicConfig {
    /// A read-write (perm 6) single-tag topic with the given queue counts.
    #[must_use]
    pub fn new(topic_name: impl Into<String>, read_queue_nums: u32, write_queue_nums: u32) -> Self {
        Self {
            topic_name: topic_name.into(),
            read_queue_nums,
            write_queue_nums,
            perm: 6,
            topic_filter_type: default_topic_filter_type(),
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }
}

/// A broker's topic table with its static-topic mapping (always empty for baiji).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicConfigAndMappingSerializeWrapper {
    /// Topic name → config.
    #[serde(default, deserialize_with = "null_default")]
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    /// Version of the table.
    #[serde(default, deserialize_with = "null_default")]
    pub data_version: DataVersion,
    /// Static-topic queue mappings (unused; always emitted as `{}`).
    #[serde(default, deserialize_with = "null_default")]
    pub topic_queue_mapping_info_map: BTreeMap<String, serde_json::Value>,
    /// Static-topic mapping details (unused; always emitted as `{}`).
    #[serde(default, deserialize_with = "null_default")]
    pub topic_queue_mapping_detail_map: BTreeMap<String, serde_json::Value>,
    /// Version of the mappings.
    #[serde(default, deserialize_with = "null_default")]
    pub mapping_data_version: DataVersion,
}

/// REGISTER_BROKER request body (uncompressed form).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisterBrokerBody {
    /// The topics this broker serves.
    #[serde(default, deserialize_with = "null_default")]
    pub topic_config_serialize_wrapper: TopicConfigAndMappingSerializeWrapper,
    /// Filter servers (obsolete); `[]`.
    #[serde(default, deserialize_with = "null_default")]
    pub filter_server_list: Vec<String>,
}

impl JsonBody for RegisterBrokerBody {}

impl JsonBody for TopicConfigAndMappingSerializeWrapper {}

/// GET_BROKER_CLUSTER_INFO response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    /// Broker name → addresses.
    #[serde(default, deserialize_with = "null_default")]
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    /// Cluster name → broker names.
    #[serde(default, deserialize_with = "null_default")]
    pub cluster_addr_table: BTreeMap<String, Vec<String>>,
}

impl JsonBody for ClusterInfo {}

/// A list of topic names (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, GET_TOPICS_BY_CLUSTER).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicList {
    /// Topic names.
    #[serde(default, deserialize_with = "null_default")]
    pub topic_list: Vec<String>,
    /// Broker address, when the list is one broker's.
    #[serde(default)]
    pub broker_addr: Option<String>,
}

impl JsonBody for TopicList {}

/// `GET_TOPIC_CONFIG`'s body (RocketMQ's `TopicConfigAndQueueMapping`, without a static topic's
/// `mappingDetail`).
impl JsonBody for TopicConfig {}

#[cfg(test)]
mod tests;
