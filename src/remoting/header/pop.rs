//! POP consumption headers (RocketMQ 5: `PopMessageRequestHeader`, `AckMessageRequestHeader`,
//! `ChangeInvisibleTimeRequestHeader` and their responses) and the `extraInfo` receipt
//! (`ExtraInfoUtil`): `ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName
//! queueId [queueOffset]`, space separated.

/// `reviveQid` RocketMQ gives ordered pops (`KeyBuilder.POP_ORDER_REVIVE_QUEUE`).
pub const POP_ORDER_REVIVE_QUEUE: i32 = 999;

ext_header! {
    /// The `POP_MESSAGE` request header.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct PopMessageRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `queueId`: -1 pops every queue.
        pub queue_id: i32 = "queueId",
        /// `maxMsgNums`: at most 32.
        pub max_msg_nums: i32 = "maxMsgNums",
        /// `invisibleTime`, ms.
        pub invisible_time: i64 = "invisibleTime",
        /// `pollTime`, ms: how long the broker may hold the request (0: not at all).
        pub poll_time: i64 = "pollTime",
        /// `bornTime`, ms since the epoch.
        pub born_time: i64 = "bornTime",
        /// `initMode`: 0 MIN, 1 MAX.
        pub init_mode: i32 = "initMode",
        /// `expType`: `TAG` or `SQL92`.
        pub exp_type: Option<&'a str> = "expType",
        /// `exp`: the filter expression.
        pub exp: Option<&'a str> = "exp",
        /// `order`: ordered pop.
        pub order: bool = "order" [default: false],
        /// `attemptId`: identifies a retried ordered pop; empty is none.
        pub attempt_id: Option<&'a str> = "attemptId" [nonempty],
    }
}

ext_header! {
    /// The `POP_MESSAGE` response header.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PopMessageResponseHeader {
        /// `popTime`: the pop time of every message of the answer.
        pub pop_time: u64 = "popTime",
        /// `invisibleTime`, ms.
        pub invisible_time: u64 = "invisibleTime",
        /// `reviveQid`: 0, or [`POP_ORDER_REVIVE_QUEUE`] for an ordered pop.
        pub revive_qid: i32 = "reviveQid",
        /// `restNum`: messages left in the popped queues.
        pub rest_num: u64 = "restNum",
        /// `startOffsetInfo`: `;`-joined `"<retry> <queueId> <startOffset>"`.
        pub start_offset_info: Option<String> = "startOffsetInfo",
        /// `msgOffsetInfo`: `;`-joined `"<retry> <queueId> <o1,o2,…>"`.
        pub msg_offset_info: Option<String> = "msgOffsetInfo",
        /// `orderCountInfo` (ordered pops): per message `"<retry> qo<queueId>%<offset> <count>"`
        /// and per queue `"<retry> <queueId> <minCount>"`.
        pub order_count_info: Option<String> = "orderCountInfo",
    }
}

ext_header! {
    /// The `ACK_MESSAGE` request header.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AckMessageRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
        /// `topic`: the real topic of the message.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
        /// `extraInfo`: the message's `POP_CK`.
        pub extra_info: &'a str = "extraInfo",
        /// `offset`: the message's queue offset.
        pub offset: i64 = "offset",
    }
}

ext_header! {
    /// The `CHANGE_MESSAGE_INVISIBLETIME` request header.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ChangeInvisibleTimeRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
        /// `topic`: the real topic of the message.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
        /// `extraInfo`: the message's `POP_CK`.
        pub extra_info: &'a str = "extraInfo",
        /// `offset`: the message's queue offset.
        pub offset: i64 = "offset",
        /// `invisibleTime`, ms from now.
        pub invisible_time: i64 = "invisibleTime",
    }
}

ext_header! {
    /// The `CHANGE_MESSAGE_INVISIBLETIME` response header.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ChangeInvisibleTimeResponseHeader {
        /// `popTime`: the pop time of the new receipt.
        pub pop_time: u64 = "popTime",
        /// `invisibleTime`, ms.
        pub invisible_time: i64 = "invisibleTime",
        /// `reviveQid`.
        pub revive_qid: i32 = "reviveQid",
    }
}

/// The fields of an `extraInfo` receipt the broker needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtraInfo<'a> {
    /// Checkpoint start offset.
    pub ck_queue_offset: i64,
    /// Pop time.
    pub pop_time: i64,
    /// Invisible time, ms.
    pub invisible_time: i64,
    /// Revive queue id ([`POP_ORDER_REVIVE_QUEUE`] for ordered pops).
    pub revive_qid: i32,
    /// `0` normal topic, `1` retry topic V1, `2` retry topic V2.
    pub retry: &'a str,
    /// Broker name.
    pub broker_name: &'a str,
    /// Queue id.
    pub queue_id: i32,
    /// The message's queue offset, when the receipt carries it.
    pub queue_offset: Option<i64>,
}

impl<'a> ExtraInfo<'a> {
    /// Parses `extraInfo`; `None` if it has fewer than 7 fields or a malformed number.
    #[must_use]
    pub fn parse(s: &'a str) -> Option<Self> {
        let mut f = s.split(' ');
        let ck_queue_offset = f.next()?.parse().ok()?;
        let pop_time = f.next()?.parse().ok()?;
        let invisible_time = f.next()?.parse().ok()?;
        let revive_qid = f.next()?.parse().ok()?;
        let retry = f.next()?;
        let broker_name = f.next()?;
        let queue_id = f.next()?.parse().ok()?;
        let queue_offset = match f.next() {
            Some(o) => Some(o.parse().ok()?),
            None => None,
        };
        Some(ExtraInfo {
            ck_queue_offset,
            pop_time,
            invisible_time,
            revive_qid,
            retry,
            broker_name,
            queue_id,
            queue_offset,
        })
    }

    /// The receipt's text (`ExtraInfoUtil.buildExtraInfo`, plus the queue offset if set).
    #[must_use]
    pub fn build(&self) -> String {
        let mut s = format!(
            "{} {} {} {} {} {} {}",
            self.ck_queue_offset,
            self.pop_time,
            self.invisible_time,
            self.revive_qid,
            self.retry,
            self.broker_name,
            self.queue_id
        );
        if let Some(o) = self.queue_offset {
            s.push(' ');
            s.push_str(&o.to_string());
        }
        s
    }
}

#[cfg(test)]
mod tests;
