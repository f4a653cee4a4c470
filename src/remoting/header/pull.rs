//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) headers.

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

ext_header! {
    /// The pull request header.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PullMessageRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
        /// `queueOffset`: logical offset to read from.
        pub queue_offset: i64 = "queueOffset",
        /// `maxMsgNums`: at most this many messages.
        pub max_msg_nums: i32 = "maxMsgNums",
        /// `sysFlag`: see [`pull_sys_flag`].
        pub sys_flag: i32 = "sysFlag",
        /// `commitOffset`: consumed offset to store when [`pull_sys_flag::COMMIT_OFFSET`] is set.
        pub commit_offset: i64 = "commitOffset",
        /// `suspendTimeoutMillis`: how long the broker may hold the request.
        pub suspend_timeout_millis: i64 = "suspendTimeoutMillis",
        /// `subscription`: expression, meaningful with [`pull_sys_flag::SUBSCRIPTION`].
        pub subscription: Option<&'a str> = "subscription",
        /// `subVersion`: the subscription's version (a timestamp).
        pub sub_version: i64 = "subVersion",
        /// `expressionType`: `TAG` when absent or empty.
        pub expression_type: &'a str = "expressionType" [default: DEFAULT_EXPRESSION_TYPE],
        /// `maxMsgBytes`: byte budget of the reply, if the client set one.
        pub max_msg_bytes: Option<i32> = "maxMsgBytes",
    }
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

ext_header! {
    /// The pull response header.
    ///
    /// Offsets are unsigned because the Rust client converts them to `u64` and fails on a
    /// negative value; the type makes that response impossible to build.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PullMessageResponseHeader {
        /// `suggestWhichBrokerId`: always 0 (master) for baiji.
        pub suggest_which_broker_id: u64 = "suggestWhichBrokerId",
        /// `nextBeginOffset`: where the client pulls next.
        pub next_begin_offset: u64 = "nextBeginOffset",
        /// `minOffset` of the queue.
        pub min_offset: u64 = "minOffset",
        /// `maxOffset` of the queue.
        pub max_offset: u64 = "maxOffset",
        /// `offsetDelta` (5.x, optional).
        pub offset_delta: Option<i64> = "offsetDelta",
        /// `topicSysFlag` (optional).
        pub topic_sys_flag: Option<i32> = "topicSysFlag",
        /// `groupSysFlag` (optional).
        pub group_sys_flag: Option<i32> = "groupSysFlag",
        /// `forbiddenType` (optional).
        pub forbidden_type: Option<i32> = "forbiddenType",
    }
}

#[cfg(test)]
mod tests;
