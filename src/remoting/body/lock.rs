//! LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42) bodies and the GET_CONSUMER_LIST_BY_GROUP (38)
//! response body.

use serde::{Deserialize, Serialize};

use crate::remoting::body::{null_default, JsonBody};

/// One queue of a topic on a broker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    /// Topic.
    #[serde(default, deserialize_with = "null_default")]
    pub topic: String,
    /// Broker name.
    #[serde(default, deserialize_with = "null_default")]
    pub broker_name: String,
    /// Queue id.
    #[serde(default, deserialize_with = "null_default")]
    pub queue_id: i32,
}

/// Queues an orderly consumer wants locked (or unlocked) for itself.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LockBatchRequestBody {
    /// Consumer group.
    #[serde(default, deserialize_with = "null_default")]
    pub consumer_group: String,
    /// Client asking for the locks.
    #[serde(default, deserialize_with = "null_default")]
    pub client_id: String,
    /// Lock only on this broker (proxy use).
    #[serde(default, deserialize_with = "null_default")]
    pub only_this_broker: bool,
    /// The queues.
    #[serde(default, deserialize_with = "null_default")]
    pub mq_set: Vec<MessageQueue>,
}

impl JsonBody for LockBatchRequestBody {}

/// UNLOCK_BATCH_MQ request body; the same shape as a lock request.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

/// The queues now locked by the requesting client.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockBatchResponseBody {
    /// `lockOKMQSet` (exact casing).
    #[serde(rename = "lockOKMQSet", default, deserialize_with = "null_default")]
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

impl JsonBody for LockBatchResponseBody {}

/// Members of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerListBody {
    /// Client ids of the live members.
    #[serde(default, deserialize_with = "null_default")]
    pub consumer_id_list: Vec<String>,
}

impl JsonBody for ConsumerListBody {}

#[cfg(test)]
mod tests;
