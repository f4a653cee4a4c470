//! GET_TOPIC_STATS_INFO (202) and GET_CONSUME_STATS (208) response bodies.
//!
//! Java keys these maps by a `MessageQueue` object, which fastjson writes as a bare object key
//! (not valid JSON). baiji writes the standard-JSON equivalent rocketmq-rust's admin tools read
//! (`serde_json_any_key`): the key is the queue's JSON text in a string,
//! `{"{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":0}":{…}}`.

use std::collections::BTreeMap;

use serde::de::{DeserializeOwned, Error as _};
use serde::ser::{Error as _, SerializeMap};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::remoting::body::{JsonBody, MessageQueue};

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
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicStatsTable {
    /// Queue → offsets.
    #[serde(default, with = "mq_key_map")]
    pub offset_table: Vec<(MessageQueue, TopicOffset)>,
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
}

impl JsonBody for ConsumeStats {}

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
mod tests {
    use super::*;

    fn mq(queue_id: i32) -> MessageQueue {
        MessageQueue { topic: "T".into(), broker_name: "b".into(), queue_id }
    }

    #[test]
    fn given_topic_stats_when_round_tripping_should_key_by_queue_json() {
        let table = TopicStatsTable {
            offset_table: vec![(
                mq(0),
                TopicOffset { min_offset: 0, max_offset: 10, last_update_timestamp: 5 },
            )],
        };
        let json = table.to_json_bytes().expect("serialisable");
        assert_eq!(
            std::str::from_utf8(&json).expect("UTF-8"),
            r#"{"offsetTable":{"{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":0}":{"minOffset":0,"maxOffset":10,"lastUpdateTimestamp":5}}}"#
        );
        assert_eq!(TopicStatsTable::from_json_slice(&json).expect("parses"), table);
    }

    #[test]
    fn given_consume_stats_when_round_tripping_should_be_identical() {
        let stats = ConsumeStats {
            offset_table: vec![
                (mq(0), OffsetWrapper::default()),
                (
                    mq(1),
                    OffsetWrapper {
                        broker_offset: 9,
                        consumer_offset: 7,
                        pull_offset: 8,
                        last_timestamp: 1,
                    },
                ),
            ],
            consume_tps: 1.5,
        };
        let json = stats.to_json_bytes().expect("serialisable");
        assert_eq!(ConsumeStats::from_json_slice(&json).expect("parses"), stats);
    }
}
