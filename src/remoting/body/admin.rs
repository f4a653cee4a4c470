//! Admin bodies of the list and view codes: UPDATE_AND_CREATE_TOPIC_LIST's
//! `CreateTopicListRequestBody` (18), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST's
//! `SubscriptionGroupList` (225), the batch deletions' `DeleteTopicListRequestBody` (5002) and
//! `DeleteSubscriptionGroupListRequestBody` (5003), QUERY_CONSUME_TIME_SPAN's `QueryConsumeTimeSpanBody` (303) and
//! GET_ALL_MESSAGE_REQUEST_MODE's `MessageRequestModeManager` JSON (402), with RocketMQ's field
//! names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::remoting::body::{
    null_default, JsonBody, MessageQueue, SetMessageRequestModeRequestBody, TopicConfig,
};

/// `UPDATE_AND_CREATE_TOPIC_LIST` request body: `{"topicConfigList":[TopicConfig…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTopicListRequestBody {
    /// The topics to create or update.
    #[serde(default, deserialize_with = "null_default")]
    pub topic_config_list: Vec<TopicConfig>,
}

impl JsonBody for CreateTopicListRequestBody {}

/// `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST` request body:
/// `{"groupConfigList":[SubscriptionGroupConfig…]}`, each config kept as the JSON object sent
/// (the broker keeps RocketMQ's fields of it, as for `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionGroupList {
    /// The groups' configs.
    #[serde(default, deserialize_with = "null_default")]
    pub group_config_list: Vec<serde_json::Value>,
}

impl JsonBody for SubscriptionGroupList {}

/// `DELETE_TOPIC_IN_BROKER_LIST` request body: `{"topicList":[…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteTopicListRequestBody {
    /// The topics to delete.
    #[serde(default, deserialize_with = "null_default")]
    pub topic_list: Vec<String>,
}

impl JsonBody for DeleteTopicListRequestBody {}

/// `DELETE_SUBSCRIPTIONGROUP_LIST` request body: `{"groupNameList":[…],"cleanOffset":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteSubscriptionGroupListRequestBody {
    /// The groups to delete.
    #[serde(default, deserialize_with = "null_default")]
    pub group_name_list: Vec<String>,
    /// Also forget their offsets (and stop holding messages for them).
    #[serde(default)]
    pub clean_offset: bool,
}

impl JsonBody for DeleteSubscriptionGroupListRequestBody {}

/// One queue's time span (`QueueTimeSpan`): store times in milliseconds, -1 where RocketMQ's
/// store finds no message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueTimeSpan {
    /// The queue.
    #[serde(default, deserialize_with = "null_default")]
    pub message_queue: MessageQueue,
    /// Store time of the oldest retained message.
    #[serde(default, deserialize_with = "null_default")]
    pub min_time_stamp: i64,
    /// Store time of the newest message.
    #[serde(default, deserialize_with = "null_default")]
    pub max_time_stamp: i64,
    /// Store time of the last message the group committed (the oldest retained one when it
    /// committed none).
    #[serde(default, deserialize_with = "null_default")]
    pub consume_time_stamp: i64,
    /// How long the group's next message has waited, milliseconds (0 when it is caught up).
    #[serde(default, deserialize_with = "null_default")]
    pub delay_time: i64,
}

/// `QUERY_CONSUME_TIME_SPAN` response body: `{"consumeTimeSpanSet":[QueueTimeSpan…]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryConsumeTimeSpanBody {
    /// One entry per queue.
    #[serde(default, deserialize_with = "null_default")]
    pub consume_time_span_set: Vec<QueueTimeSpan>,
}

impl JsonBody for QueryConsumeTimeSpanBody {}

/// `GET_ALL_MESSAGE_REQUEST_MODE` response body, RocketMQ's `MessageRequestModeManager` as
/// JSON: `{"messageRequestModeMap":{topic:{group:SetMessageRequestModeRequestBody}}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRequestModeTable {
    /// Per topic, per consumer group, what `SET_MESSAGE_REQUEST_MODE` stored.
    #[serde(default, deserialize_with = "null_default")]
    pub message_request_mode_map:
        BTreeMap<String, BTreeMap<String, SetMessageRequestModeRequestBody>>,
}

impl JsonBody for MessageRequestModeTable {}
