//! Route data returned by GET_ROUTEINFO_BY_TOPIC.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::remoting::body::{null_default, JsonBody};

/// Broker id of a master; clients send only to this address.
pub const MASTER_ID: u64 = 0;

/// Route of one topic: which brokers serve it with how many queues.
///
/// Serialises as the standard form every client accepts:
/// `{"orderTopicConf":null,"queueDatas":[…],"brokerDatas":[…],"filterServerTable":{}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRouteData {
    /// `brokerA:4;brokerB:4` overrides the publish queues of ordered topics; baiji leaves it
    /// `null`.
    #[serde(default)]
    pub order_topic_conf: Option<String>,
    /// One entry per broker serving the topic.
    #[serde(default, deserialize_with = "null_default")]
    pub queue_datas: Vec<QueueData>,
    /// Addresses of those brokers.
    #[serde(default, deserialize_with = "null_default")]
    pub broker_datas: Vec<BrokerData>,
    /// Filter servers (obsolete); always emitted, normally empty.
    #[serde(default, deserialize_with = "null_default")]
    pub filter_server_table: BTreeMap<String, Vec<String>>,
}

impl JsonBody for TopicRouteData {}

/// Queues of a topic on one broker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueData {
    /// Broker name.
    #[serde(default, deserialize_with = "null_default")]
    pub broker_name: String,
    /// Queues consumers read.
    #[serde(default, deserialize_with = "null_default")]
    pub read_queue_nums: u32,
    /// Queues producers write.
    #[serde(default, deserialize_with = "null_default")]
    pub write_queue_nums: u32,
    /// PermName bits: READ 4, WRITE 2, INHERIT 1.
    #[serde(default, deserialize_with = "null_default")]
    pub perm: u32,
    /// Topic system flag (`topicSynFlag` in old Java versions is accepted on input).
    #[serde(default, deserialize_with = "null_default", alias = "topicSynFlag")]
    pub topic_sys_flag: u32,
}

/// Addresses of one broker (master and slaves).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerData {
    /// Cluster name.
    #[serde(default, deserialize_with = "null_default")]
    pub cluster: String,
    /// Broker name.
    #[serde(default, deserialize_with = "null_default")]
    pub broker_name: String,
    /// Broker id → `ip:port`; id [`MASTER_ID`] is the master. Written with quoted keys.
    #[serde(default, deserialize_with = "null_default")]
    pub broker_addrs: BTreeMap<u64, String>,
    /// Zone, normally `null`.
    #[serde(default)]
    pub zone_name: Option<String>,
    /// Slave acting as master (always emitted; required by the Rust client).
    #[serde(default, deserialize_with = "null_default")]
    pub enable_acting_master: bool,
}

#[cfg(test)]
mod tests;
