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
mod tests {
    use super::*;

    fn route() -> TopicRouteData {
        TopicRouteData {
            order_topic_conf: None,
            queue_datas: vec![QueueData {
                broker_name: "broker-a".into(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![BrokerData {
                cluster: "DefaultCluster".into(),
                broker_name: "broker-a".into(),
                broker_addrs: BTreeMap::from([(MASTER_ID, "127.0.0.1:10911".to_owned())]),
                zone_name: None,
                enable_acting_master: false,
            }],
            filter_server_table: BTreeMap::new(),
        }
    }

    #[test]
    fn given_route_when_serialising_should_match_the_standard_form() {
        let json = route().to_json_bytes().expect("serialisable");
        assert_eq!(
            std::str::from_utf8(&json).expect("UTF-8"),
            r#"{"orderTopicConf":null,"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],"brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{"0":"127.0.0.1:10911"},"zoneName":null,"enableActingMaster":false}],"filterServerTable":{}}"#,
            "every field the Rust client requires, with quoted integer keys"
        );
        assert_eq!(TopicRouteData::from_json_slice(&json).expect("parses"), route());
    }

    #[test]
    fn given_old_java_route_when_parsing_should_accept_missing_fields_and_old_names() {
        let json = br#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"b"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSynFlag":1,"writeQueueNums":8}]}"#;
        let r = TopicRouteData::from_json_slice(json).expect("lenient");
        assert_eq!(r.queue_datas.first().map(|q| q.topic_sys_flag), Some(1));
        assert_eq!(
            r.broker_datas.first().and_then(|b| b.broker_addrs.get(&MASTER_ID)).map(String::as_str),
            Some("10.0.0.1:10911")
        );
    }
}
