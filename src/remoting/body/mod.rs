//! JSON bodies of requests and responses.
//!
//! Field names follow the Java classes (camelCase, with Java's exceptions such as `clientID`
//! and `lockOKMQSet`), checked against the structs rocketmq-rust (the Rust client and name
//! server) deserialises with serde. Two rules shape every type here:
//!
//! * **Lenient in.** Bodies clients send (heartbeat, lock requests, check-client-config) take
//!   every field as optional: absent or `null` means the Java default, enums accept unknown
//!   names as an `Other` variant instead of failing, and unknown keys are ignored.
//! * **Complete out.** Bodies baiji sends (route data, lock results, consumer lists, broker
//!   registration) always carry every field, because the Rust deserialisers mark most of them
//!   required (`queueDatas`, `brokerDatas`, `filterServerTable`, `enableActingMaster`, …).
//!
//! Maps use `BTreeMap` so output is deterministic; map keys that are integers (`brokerAddrs`)
//! are written as quoted decimal strings, the standard JSON form every client accepts.

mod admin;
mod broker;
mod heartbeat;
mod lock;
mod pop;
mod route;
mod stats;

pub use admin::{
    CreateTopicListRequestBody, DeleteSubscriptionGroupListRequestBody, DeleteTopicListRequestBody,
    MessageRequestModeTable, QueryConsumeTimeSpanBody, QueueTimeSpan, SubscriptionGroupList,
};
pub use broker::{
    ClusterInfo, DataVersion, RegisterBrokerBody, TopicConfig,
    TopicConfigAndMappingSerializeWrapper, TopicList, DEFAULT_TOPIC_FILTER_TYPE,
};
pub use heartbeat::{
    CheckClientConfigBody, ConsumeFromWhere, ConsumeType, ConsumerData, ExpressionType,
    HeartbeatData, MessageModel, ProducerData, SubscriptionData,
};
pub use lock::{
    ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody, MessageQueue,
    UnlockBatchRequestBody,
};
pub use pop::{
    AckBits, BatchAck, BatchAckMessageRequestBody, MessageQueueAssignment, MessageRequestMode,
    QueryAssignmentRequestBody, QueryAssignmentResponseBody, SetMessageRequestModeRequestBody,
};
pub use route::{BrokerData, QueueData, TopicRouteData, MASTER_ID};
pub use stats::{
    BrokerStatsData, BrokerStatsItem, Connection, ConsumeStats, ConsumeStatsList,
    ConsumerConnection, GroupList, KvTable, OffsetWrapper, ProducerConnection, ProducerInfo,
    ProducerTableInfo, ResetOffsetBody, TopicOffset, TopicStatsTable,
};

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::remoting::error::BodyError;

/// Conversion between a body type and the bytes of a command body.
pub trait JsonBody: Serialize + DeserializeOwned {
    /// Serialises to compact JSON.
    ///
    /// # Errors
    ///
    /// [`BodyError::Json`] if serialisation fails (not expected for the types of this module).
    fn to_json_bytes(&self) -> Result<Bytes, BodyError> {
        serde_json::to_vec(self).map(Bytes::from).map_err(BodyError::Json)
    }

    /// Parses a body.
    ///
    /// # Errors
    ///
    /// [`BodyError::Empty`] for an empty body, [`BodyError::Json`] if it is not JSON of this
    /// shape.
    fn from_json_slice(body: &[u8]) -> Result<Self, BodyError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(BodyError::Empty);
        }
        serde_json::from_slice(body).map_err(BodyError::Json)
    }
}

/// Deserialises `null` like an absent field: as `T::default()`.
fn null_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Defines a string-valued protocol enum that serialises as its Java name and deserialises
/// leniently: unknown names become `Other(name)`, `null` becomes the default.
macro_rules! lenient_enum {
    (
        $(#[doc = $doc:literal])+
        $name:ident, default = $default:ident,
        { $($(#[doc = $vdoc:literal])+ $variant:ident = $wire:literal,)+ }
    ) => {
        $(#[doc = $doc])+
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[doc = $vdoc])+ $variant,)+
            /// A name this version does not know, kept verbatim.
            Other(String),
        }

        impl $name {
            /// The Java name.
            #[must_use]
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $wire,)+
                    Self::Other(name) => name,
                }
            }

            /// The variant for a Java name; unknown names are kept as `Other`.
            #[must_use]
            pub fn from_name(name: &str) -> Self {
                match name {
                    $($wire => Self::$variant,)+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::$default
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " name"))
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        Ok($name::from_name(v))
                    }
                    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$name, E> {
                        Ok($name::Other(v.to_string()))
                    }
                    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$name, E> {
                        Ok($name::Other(v.to_string()))
                    }
                    fn visit_unit<E: serde::de::Error>(self) -> Result<$name, E> {
                        Ok($name::default())
                    }
                }
                deserializer.deserialize_any(V)
            }
        }
    };
}
pub(crate) use lenient_enum;
