//! POP consumption bodies: `BATCH_ACK_MESSAGE` (200151), `QUERY_ASSIGNMENT` (400) and
//! `SET_MESSAGE_REQUEST_MODE` (401).
//!
//! A batch ack's bitset `b` arrives in two encodings: Java (fastjson) writes the bytes of
//! `BitSet.toByteArray()` as a base64 string; the Rust client (rocketmq-protocol 1.0.0
//! `SerializableBitVec`) writes a JSON array of byte values, its `u64` words cast to bytes.
//! Both are little-endian bit order: bit *i* is bit `i % 8` of byte `i / 8`.

use serde::{Deserialize, Deserializer, Serialize};

use crate::remoting::body::{lenient_enum, null_default, JsonBody, MessageModel, MessageQueue};

lenient_enum! {
    /// How a group's members read a queue: pulling it (client-side rebalance) or popping it.
    MessageRequestMode, default = Pull, {
        /// Pull consumption.
        Pull = "PULL",
        /// POP consumption.
        Pop = "POP",
    }
}

/// A batch ack's bitset, whichever encoding it came in (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AckBits(pub Vec<u8>);

impl AckBits {
    /// The set bits' indexes, ascending.
    pub fn ones(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().enumerate().flat_map(|(i, byte)| {
            (0..8u64).filter(move |b| byte >> b & 1 == 1).map(move |b| i as u64 * 8 + b)
        })
    }
}

impl Serialize for AckBits {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The Rust client's form: an array of byte values.
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for AckBits {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AckBits;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a base64 string or an array of byte values")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AckBits, E> {
                decode_base64(v).map(AckBits).ok_or_else(|| E::custom("invalid base64 bitset"))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<AckBits, E> {
                Ok(AckBits::default())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<AckBits, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(AckBits(out))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// Standard base64 (with or without padding); `None` for any other character.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s {
        acc = (acc << 6) | value(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// One checkpoint's acknowledgements (`BatchAck`, short JSON keys).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchAck {
    /// `c`: the consumer group.
    #[serde(rename = "c", alias = "consumerGroup", default, deserialize_with = "null_default")]
    pub consumer_group: String,
    /// `t`: the original topic.
    #[serde(rename = "t", alias = "topic", default, deserialize_with = "null_default")]
    pub topic: String,
    /// `r`: `0` normal, `1` retry V1, `2` retry V2.
    #[serde(rename = "r", alias = "retry", default, deserialize_with = "null_default")]
    pub retry: String,
    /// `so`: the checkpoint's start offset; bit *i* acknowledges offset `so + i`.
    #[serde(rename = "so", alias = "startOffset", default, deserialize_with = "null_default")]
    pub start_offset: i64,
    /// `q`: the queue.
    #[serde(rename = "q", alias = "queueId", default, deserialize_with = "null_default")]
    pub queue_id: i32,
    /// `rq`: the revive queue.
    #[serde(rename = "rq", alias = "reviveQueueId", default, deserialize_with = "null_default")]
    pub revive_queue_id: i32,
    /// `pt`: the pop time (the receipt).
    #[serde(rename = "pt", alias = "popTime", default, deserialize_with = "null_default")]
    pub pop_time: i64,
    /// `it`: the invisible time.
    #[serde(rename = "it", alias = "invisibleTime", default, deserialize_with = "null_default")]
    pub invisible_time: i64,
    /// `b`: which offsets are acknowledged.
    #[serde(rename = "b", alias = "bitSet", default)]
    pub bit_set: AckBits,
}

/// The `BATCH_ACK_MESSAGE` body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchAckMessageRequestBody {
    /// The broker the acks are for.
    #[serde(default, deserialize_with = "null_default")]
    pub broker_name: String,
    /// The checkpoints.
    #[serde(default, deserialize_with = "null_default")]
    pub acks: Vec<BatchAck>,
}

impl JsonBody for BatchAckMessageRequestBody {}

/// The `QUERY_ASSIGNMENT` request body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryAssignmentRequestBody {
    /// Topic.
    #[serde(default, deserialize_with = "null_default")]
    pub topic: String,
    /// Consumer group.
    #[serde(default, deserialize_with = "null_default")]
    pub consumer_group: String,
    /// The asking client.
    #[serde(default, deserialize_with = "null_default")]
    pub client_id: String,
    /// The client's allocation strategy (used in PULL mode).
    #[serde(default, deserialize_with = "null_default")]
    pub strategy_name: String,
    /// Clustering or broadcasting.
    #[serde(default, deserialize_with = "null_default")]
    pub message_model: MessageModel,
}

impl JsonBody for QueryAssignmentRequestBody {}

/// One assigned queue and how to read it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueueAssignment {
    /// The queue.
    pub message_queue: MessageQueue,
    /// Pull or pop it.
    pub mode: MessageRequestMode,
    /// Extra attributes (none from baiji).
    pub attachments: Option<std::collections::BTreeMap<String, String>>,
}

/// The `QUERY_ASSIGNMENT` response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryAssignmentResponseBody {
    /// The client's queues.
    #[serde(default, deserialize_with = "null_default")]
    pub message_queue_assignments: Vec<MessageQueueAssignment>,
}

impl JsonBody for QueryAssignmentResponseBody {}

/// The `SET_MESSAGE_REQUEST_MODE` request body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetMessageRequestModeRequestBody {
    /// Topic.
    #[serde(default, deserialize_with = "null_default")]
    pub topic: String,
    /// Consumer group.
    #[serde(default, deserialize_with = "null_default")]
    pub consumer_group: String,
    /// The mode.
    #[serde(default, deserialize_with = "null_default")]
    pub mode: MessageRequestMode,
    /// How many clients share a queue in POP mode (<= 0: every client reads every queue).
    #[serde(default = "no_share", deserialize_with = "null_default")]
    pub pop_share_queue_num: i32,
}

fn no_share() -> i32 {
    -1
}

impl JsonBody for SetMessageRequestModeRequestBody {}

#[cfg(test)]
mod tests;
