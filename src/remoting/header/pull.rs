//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) headers.

use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::{put_opt_i64, put_opt_str, required_u64, FromExtFields, ToExtFields};

/// `PullSysFlag` bits of a pull request's `sysFlag`.
pub mod pull_sys_flag {
    /// Store `commitOffset` for the group before reading.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// The broker may hold the request (long polling) for `suspendTimeoutMillis`.
    pub const SUSPEND: i32 = 0x2;
    /// The request carries its subscription expression; otherwise use the heartbeat's.
    pub const SUBSCRIPTION: i32 = 0x4;
    /// Class filter mode (obsolete).
    pub const CLASS_FILTER: i32 = 0x8;
    /// Sent by the lite pull consumer.
    pub const LITE_PULL: i32 = 0x10;
}

/// Expression type assumed when a request or subscription does not name one.
const DEFAULT_EXPRESSION_TYPE: &str = "TAG";

/// The pull request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullMessageRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
    /// `topic`.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
    /// `queueOffset`: logical offset to read from.
    pub queue_offset: i64,
    /// `maxMsgNums`: at most this many messages.
    pub max_msg_nums: i32,
    /// `sysFlag`: see [`pull_sys_flag`].
    pub sys_flag: i32,
    /// `commitOffset`: consumed offset to store when [`pull_sys_flag::COMMIT_OFFSET`] is set.
    pub commit_offset: i64,
    /// `suspendTimeoutMillis`: how long the broker may hold the request.
    pub suspend_timeout_millis: i64,
    /// `subscription`: expression, meaningful with [`pull_sys_flag::SUBSCRIPTION`].
    pub subscription: Option<&'a str>,
    /// `subVersion`: the subscription's version (a timestamp).
    pub sub_version: i64,
    /// `expressionType`: `TAG` when absent.
    pub expression_type: &'a str,
    /// `maxMsgBytes`: byte budget of the reply, if the client set one.
    pub max_msg_bytes: Option<i32>,
}

impl PullMessageRequestHeader<'_> {
    /// Whether `commitOffset` should be stored before reading.
    #[must_use]
    pub fn has_commit_offset(&self) -> bool {
        self.sys_flag & pull_sys_flag::COMMIT_OFFSET != 0
    }

    /// Whether the request may be held for long polling.
    #[must_use]
    pub fn has_suspend(&self) -> bool {
        self.sys_flag & pull_sys_flag::SUSPEND != 0
    }

    /// Whether the request carries its own subscription expression.
    #[must_use]
    pub fn has_subscription(&self) -> bool {
        self.sys_flag & pull_sys_flag::SUBSCRIPTION != 0
    }

    /// Whether the request comes from a lite pull consumer.
    #[must_use]
    pub fn is_lite_pull(&self) -> bool {
        self.sys_flag & pull_sys_flag::LITE_PULL != 0
    }
}

impl<'a> FromExtFields<'a> for PullMessageRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: ext.required_str("consumerGroup")?,
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            queue_offset: ext.required_i64("queueOffset")?,
            max_msg_nums: ext.required_i32("maxMsgNums")?,
            sys_flag: ext.required_i32("sysFlag")?,
            commit_offset: ext.required_i64("commitOffset")?,
            suspend_timeout_millis: ext.required_i64("suspendTimeoutMillis")?,
            subscription: ext.optional_str("subscription"),
            sub_version: ext.required_i64("subVersion")?,
            expression_type: match ext.optional_str("expressionType") {
                None | Some("") => DEFAULT_EXPRESSION_TYPE,
                Some(t) => t,
            },
            max_msg_bytes: ext.optional_i32("maxMsgBytes")?,
        })
    }
}

impl ToExtFields for PullMessageRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert_i64("queueOffset", self.queue_offset);
        ext.insert_i64("maxMsgNums", i64::from(self.max_msg_nums));
        ext.insert_i64("sysFlag", i64::from(self.sys_flag));
        ext.insert_i64("commitOffset", self.commit_offset);
        ext.insert_i64("suspendTimeoutMillis", self.suspend_timeout_millis);
        put_opt_str(ext, "subscription", self.subscription);
        ext.insert_i64("subVersion", self.sub_version);
        ext.insert("expressionType", self.expression_type);
        put_opt_i64(ext, "maxMsgBytes", self.max_msg_bytes.map(i64::from));
    }
}

/// The pull response header.
///
/// Offsets are unsigned because the Rust client converts them to `u64` and fails on a negative
/// value; the type makes that response impossible to build.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PullMessageResponseHeader {
    /// `suggestWhichBrokerId`: always 0 (master) for baiji.
    pub suggest_which_broker_id: u64,
    /// `nextBeginOffset`: where the client pulls next.
    pub next_begin_offset: u64,
    /// `minOffset` of the queue.
    pub min_offset: u64,
    /// `maxOffset` of the queue.
    pub max_offset: u64,
    /// `offsetDelta` (5.x, optional).
    pub offset_delta: Option<i64>,
    /// `topicSysFlag` (optional).
    pub topic_sys_flag: Option<i32>,
    /// `groupSysFlag` (optional).
    pub group_sys_flag: Option<i32>,
    /// `forbiddenType` (optional).
    pub forbidden_type: Option<i32>,
}

impl FromExtFields<'_> for PullMessageResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            suggest_which_broker_id: required_u64(ext, "suggestWhichBrokerId")?,
            next_begin_offset: required_u64(ext, "nextBeginOffset")?,
            min_offset: required_u64(ext, "minOffset")?,
            max_offset: required_u64(ext, "maxOffset")?,
            offset_delta: ext.optional_i64("offsetDelta")?,
            topic_sys_flag: ext.optional_i32("topicSysFlag")?,
            group_sys_flag: ext.optional_i32("groupSysFlag")?,
            forbidden_type: ext.optional_i32("forbiddenType")?,
        })
    }
}

impl ToExtFields for PullMessageResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_u64("suggestWhichBrokerId", self.suggest_which_broker_id);
        ext.insert_u64("nextBeginOffset", self.next_begin_offset);
        ext.insert_u64("minOffset", self.min_offset);
        ext.insert_u64("maxOffset", self.max_offset);
        put_opt_i64(ext, "offsetDelta", self.offset_delta);
        put_opt_i64(ext, "topicSysFlag", self.topic_sys_flag.map(i64::from));
        put_opt_i64(ext, "groupSysFlag", self.group_sys_flag.map(i64::from));
        put_opt_i64(ext, "forbiddenType", self.forbidden_type.map(i64::from));
    }
}

#[cfg(test)]
mod tests;
