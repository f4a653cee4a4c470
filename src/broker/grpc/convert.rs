//! RocketMQ messages ⇄ v2 `Message` (`docs/rocketmq5-grpc-pop-transactions.md` 1.5 and 1.11).
//!
//! Delivery ([`to_message`]): user properties are every property that is not one of RocketMQ's
//! system keys; the system properties carry tag, keys, message id (`UNIQ_KEY`), an MD5 body
//! digest in upper-case hex (the one digest all three installable clients compute alike), the
//! message type, born/store host and time, the delivery time of a timer message, the message
//! group (`__SHARDINGKEY`), the queue, offset and delivery attempt (`reconsume_times + 1`).

use std::collections::HashMap;
use std::net::SocketAddr;

use md5::{Digest as _, Md5};

use super::pb::{self, DigestType, Encoding, MessageType};
use crate::broker::core::record::Decoded;
use crate::remoting::message::sys_flag;
use crate::remoting::properties;

/// RocketMQ's reserved property keys (`MessageConst.STRING_HASH_SET`): a user property may not
/// use one (`ILLEGAL_MESSAGE_PROPERTY_KEY`), and none is shown as a user property.
pub(crate) const SYSTEM_KEYS: &[&str] = &[
    "TRACE_ON",
    "MSG_REGION",
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "BUYER_ID",
    "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "UNIQ_KEY",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "POP_CK",
    "POP_CK_OFFSET",
    "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "TTL",
    "ARRIVE_TIME",
    "PUSH_REPLY_TIME",
    "CLUSTER",
    "MSG_TYPE",
    "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES",
    "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY",
    "TIMER_DEL_MS",
    "TIMER_DELAY_LEVEL",
    "__BORNHOST",
    "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "__CRC32#",
];

/// Properties that are not in [`SYSTEM_KEYS`] but that a delivery shows as system properties
/// (or that are the broker's bookkeeping): never user properties either.
const HIDDEN_KEYS: &[&str] = &[
    properties::SHARDING_KEY,
    properties::TRANSACTION_ID,
    "TRACE_CONTEXT",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "TRANSACTION_CHECK_TIMES",
    "INNER_NUM",
    "INNER_BASE",
];

/// `DLQ_ORIGIN_TOPIC`: the topic a dead letter came from.
pub(crate) const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
/// `DLQ_ORIGIN_MESSAGE_ID`: the message id a dead letter had.
pub(crate) const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
/// `TRACE_CONTEXT`: the client's trace context.
pub(crate) const TRACE_CONTEXT: &str = "TRACE_CONTEXT";

/// Whether `key` is one of RocketMQ's reserved property keys.
pub(crate) fn is_system_key(key: &str) -> bool {
    SYSTEM_KEYS.contains(&key)
}

/// The body digest the 5.x clients check: MD5, upper-case hex.
pub(crate) fn md5_hex(body: &[u8]) -> String {
    let sum = Md5::digest(body);
    let mut s = String::with_capacity(32);
    for b in sum.iter() {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Milliseconds since the epoch as a protobuf timestamp.
pub(crate) fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// A protobuf timestamp as milliseconds since the epoch (saturating).
pub(crate) fn timestamp_ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds.saturating_mul(1000).saturating_add(i64::from(t.nanos / 1_000_000))
}

/// A protobuf duration as milliseconds (negative ones as 0, saturating).
pub(crate) fn duration_ms(d: &prost_types::Duration) -> u64 {
    let ms = d.seconds.saturating_mul(1000).saturating_add(i64::from(d.nanos / 1_000_000));
    u64::try_from(ms).unwrap_or(0)
}

/// Milliseconds as a protobuf duration.
pub(crate) fn duration(ms: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ms / 1000).unwrap_or(i64::MAX),
        nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap_or(0),
    }
}

/// Where and when a message being delivered is stored, and how it is being delivered.
#[derive(Debug, Clone)]
pub(crate) struct Delivered<'a> {
    /// The topic the client asked for (a retry topic's messages show their original topic
    /// when `RETRY_TOPIC` names it).
    pub(crate) topic: &'a str,
    /// The queue it is read from.
    pub(crate) queue_id: i32,
    /// Its offset in that queue.
    pub(crate) queue_offset: i64,
    /// When the broker stored it, ms since the epoch.
    pub(crate) store_timestamp_ms: i64,
    /// The broker's address.
    pub(crate) store_host: SocketAddr,
    /// The receipt handle of a popped (received) message.
    pub(crate) receipt_handle: Option<String>,
    /// How long a received message stays invisible, ms.
    pub(crate) invisible_ms: Option<u64>,
    /// Times it was delivered before (the record's `reconsume_times` unless the caller counts
    /// otherwise); the delivery attempt is this plus one.
    pub(crate) reconsume_times: i32,
}

/// The message type a stored message shows (1.11: transaction, then a timer, then a group).
fn message_type(d: &Decoded<'_>) -> MessageType {
    let p = d.properties;
    if properties::find(p, properties::TRAN_MSG).is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || d.sys_flag & sys_flag::TRANSACTION_TYPE_MASK != 0
    {
        MessageType::Transaction
    } else if [
        properties::DELAY,
        properties::TIMER_DELIVER_MS,
        properties::TIMER_DELAY_SEC,
        properties::TIMER_DELAY_MS,
    ]
    .iter()
    .any(|k| properties::find(p, k).is_some())
    {
        MessageType::Delay
    } else if properties::find(p, properties::SHARDING_KEY).is_some() {
        MessageType::Fifo
    } else {
        MessageType::Normal
    }
}

/// A stored message (a decoded record) as a v2 `Message`.
pub(crate) fn to_message(d: &Decoded<'_>, at: &Delivered<'_>) -> pb::Message {
    let p = d.properties;
    let find = |k: &str| properties::find(p, k).map(str::to_owned);
    let mut user_properties = HashMap::new();
    for (k, v) in properties::parse(p) {
        if !is_system_key(k)
            && !HIDDEN_KEYS.contains(&k)
            && !k.starts_with(properties::TRANSIENT_PREFIX)
        {
            user_properties.insert(k.to_owned(), v.to_owned());
        }
    }
    let topic = find(properties::RETRY_TOPIC).unwrap_or_else(|| at.topic.to_owned());
    let delivery_timestamp = find(properties::TIMER_DELIVER_MS)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(timestamp);
    let dead_letter_queue = match (find(DLQ_ORIGIN_TOPIC), find(DLQ_ORIGIN_MESSAGE_ID)) {
        (Some(topic), Some(message_id)) => Some(pb::DeadLetterQueue { topic, message_id }),
        _ => None,
    };
    let compressed = d.sys_flag & sys_flag::COMPRESSED != 0;
    let system_properties = pb::SystemProperties {
        tag: find(properties::TAGS),
        keys: properties::keys(p).map(str::to_owned).collect(),
        message_id: find(properties::UNIQ_KEY).unwrap_or_default(),
        body_digest: Some(pb::Digest { r#type: DigestType::Md5 as i32, checksum: md5_hex(d.body) }),
        body_encoding: if compressed { Encoding::Gzip } else { Encoding::Identity } as i32,
        message_type: message_type(d) as i32,
        born_timestamp: Some(timestamp(d.born_timestamp)),
        born_host: d.born_host.ip().to_string(),
        store_timestamp: Some(timestamp(at.store_timestamp_ms)),
        store_host: at.store_host.to_string(),
        delivery_timestamp,
        receipt_handle: at.receipt_handle.clone(),
        queue_id: at.queue_id,
        queue_offset: Some(at.queue_offset),
        invisible_duration: at.invisible_ms.map(duration),
        delivery_attempt: Some(at.reconsume_times.saturating_add(1)),
        message_group: find(properties::SHARDING_KEY),
        trace_context: find(TRACE_CONTEXT),
        orphaned_transaction_recovery_duration: None,
        dead_letter_queue,
        priority: None,
    };
    pb::Message {
        topic: Some(pb::Resource { resource_namespace: String::new(), name: topic }),
        user_properties,
        system_properties: Some(system_properties),
        body: d.body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_body_when_digesting_should_give_upper_case_md5_hex() {
        assert_eq!(md5_hex(b""), "D41D8CD98F00B204E9800998ECF8427E");
        assert_eq!(md5_hex(b"hello"), "5D41402ABC4B2A76B9719D911017C592");
    }

    #[test]
    fn given_times_when_converting_should_round_trip_milliseconds() {
        assert_eq!(timestamp_ms(&timestamp(1_700_000_000_123)), 1_700_000_000_123);
        assert_eq!(duration_ms(&duration(20_500)), 20_500);
        assert_eq!(duration_ms(&prost_types::Duration { seconds: -1, nanos: 0 }), 0);
    }

    #[test]
    fn given_a_stored_fifo_message_when_delivered_should_split_system_and_user_properties() {
        let props = b"UNIQ_KEY\x01ID1\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02__SHARDINGKEY\x01g1\x02color\x01red\x02CLUSTER\x01c\x02";
        let d = Decoded {
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            reconsume_times: 2,
            born_host: "10.0.0.1:5000".parse().expect("an address"),
            body: b"hello",
            properties: props,
        };
        let at = Delivered {
            topic: "T",
            queue_id: 3,
            queue_offset: 7,
            store_timestamp_ms: 1_700_000_000_500,
            store_host: "127.0.0.1:10911".parse().expect("an address"),
            receipt_handle: Some("rh".into()),
            invisible_ms: Some(30_000),
            reconsume_times: 2,
        };
        let m = to_message(&d, &at);
        let sys = m.system_properties.expect("system properties");
        assert_eq!(sys.message_id, "ID1", "the message id is UNIQ_KEY");
        assert_eq!(sys.tag.as_deref(), Some("TagA"));
        assert_eq!(sys.keys, vec!["k1".to_string(), "k2".to_string()]);
        assert_eq!(sys.message_group.as_deref(), Some("g1"));
        assert_eq!(sys.message_type, MessageType::Fifo as i32);
        assert_eq!(sys.delivery_attempt, Some(3), "reconsume times + 1");
        assert_eq!((sys.queue_id, sys.queue_offset), (3, Some(7)));
        assert_eq!(sys.receipt_handle.as_deref(), Some("rh"));
        assert_eq!(
            sys.body_digest.map(|d| (d.r#type, d.checksum)),
            Some((DigestType::Md5 as i32, md5_hex(b"hello")))
        );
        assert_eq!(sys.born_host, "10.0.0.1");
        assert_eq!(m.user_properties.len(), 1, "only the user's own: {:?}", m.user_properties);
        assert_eq!(m.user_properties.get("color").map(String::as_str), Some("red"));
        assert_eq!(m.topic.map(|t| t.name), Some("T".to_string()));
    }

    #[test]
    fn given_property_keys_should_know_rocketmq_reserved_ones() {
        assert!(is_system_key("UNIQ_KEY") && is_system_key("TAGS") && is_system_key("__BORNHOST"));
        assert!(!is_system_key("color") && !is_system_key("__SHARDINGKEY"));
    }
}
