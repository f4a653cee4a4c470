//! POP consumption headers (RocketMQ 5: `PopMessageRequestHeader`, `AckMessageRequestHeader`,
//! `ChangeInvisibleTimeRequestHeader` and their responses) and the `extraInfo` receipt
//! (`ExtraInfoUtil`): `ckQueueOffset popTime invisibleTime reviveQid retryFlag brokerName
//! queueId [queueOffset]`, space separated.

use super::{required_u64, FromExtFields, ToExtFields};
use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;

/// `reviveQid` RocketMQ gives ordered pops (`KeyBuilder.POP_ORDER_REVIVE_QUEUE`).
pub const POP_ORDER_REVIVE_QUEUE: i32 = 999;

/// The `POP_MESSAGE` request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopMessageRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
    /// `topic`.
    pub topic: &'a str,
    /// `queueId`: -1 pops every queue.
    pub queue_id: i32,
    /// `maxMsgNums`: at most 32.
    pub max_msg_nums: i32,
    /// `invisibleTime`, ms.
    pub invisible_time: i64,
    /// `pollTime`, ms: how long the broker may hold the request (0: not at all).
    pub poll_time: i64,
    /// `bornTime`, ms since the epoch.
    pub born_time: i64,
    /// `initMode`: 0 MIN, 1 MAX.
    pub init_mode: i32,
    /// `expType`: `TAG` or `SQL92`.
    pub exp_type: Option<&'a str>,
    /// `exp`: the filter expression.
    pub exp: Option<&'a str>,
    /// `order`: ordered pop.
    pub order: bool,
    /// `attemptId`: identifies a retried ordered pop.
    pub attempt_id: Option<&'a str>,
}

impl<'a> FromExtFields<'a> for PopMessageRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: ext.required_str("consumerGroup")?,
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            max_msg_nums: ext.required_i32("maxMsgNums")?,
            invisible_time: ext.required_i64("invisibleTime")?,
            poll_time: ext.required_i64("pollTime")?,
            born_time: ext.required_i64("bornTime")?,
            init_mode: ext.required_i32("initMode")?,
            exp_type: ext.optional_str("expType"),
            exp: ext.optional_str("exp"),
            order: ext.optional_bool("order")?.unwrap_or(false),
            attempt_id: ext.optional_str("attemptId").filter(|s| !s.is_empty()),
        })
    }
}

impl ToExtFields for PopMessageRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert_i64("maxMsgNums", i64::from(self.max_msg_nums));
        ext.insert_i64("invisibleTime", self.invisible_time);
        ext.insert_i64("pollTime", self.poll_time);
        ext.insert_i64("bornTime", self.born_time);
        ext.insert_i64("initMode", i64::from(self.init_mode));
        super::put_opt_str(ext, "expType", self.exp_type);
        super::put_opt_str(ext, "exp", self.exp);
        ext.insert_bool("order", self.order);
        super::put_opt_str(ext, "attemptId", self.attempt_id);
    }
}

/// The `POP_MESSAGE` response header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PopMessageResponseHeader {
    /// `popTime`: the pop time of every message of the answer.
    pub pop_time: u64,
    /// `invisibleTime`, ms.
    pub invisible_time: u64,
    /// `reviveQid`: 0, or [`POP_ORDER_REVIVE_QUEUE`] for an ordered pop.
    pub revive_qid: i32,
    /// `restNum`: messages left in the popped queues.
    pub rest_num: u64,
    /// `startOffsetInfo`: `;`-joined `"<retry> <queueId> <startOffset>"`.
    pub start_offset_info: Option<String>,
    /// `msgOffsetInfo`: `;`-joined `"<retry> <queueId> <o1,o2,…>"`.
    pub msg_offset_info: Option<String>,
    /// `orderCountInfo` (ordered pops): per message `"<retry> qo<queueId>%<offset> <count>"`
    /// and per queue `"<retry> <queueId> <minCount>"`.
    pub order_count_info: Option<String>,
}

impl FromExtFields<'_> for PopMessageResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            pop_time: required_u64(ext, "popTime")?,
            invisible_time: required_u64(ext, "invisibleTime")?,
            revive_qid: ext.required_i32("reviveQid")?,
            rest_num: required_u64(ext, "restNum")?,
            start_offset_info: ext.optional_str("startOffsetInfo").map(str::to_owned),
            msg_offset_info: ext.optional_str("msgOffsetInfo").map(str::to_owned),
            order_count_info: ext.optional_str("orderCountInfo").map(str::to_owned),
        })
    }
}

impl ToExtFields for PopMessageResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_u64("popTime", self.pop_time);
        ext.insert_u64("invisibleTime", self.invisible_time);
        ext.insert_i64("reviveQid", i64::from(self.revive_qid));
        ext.insert_u64("restNum", self.rest_num);
        super::put_opt_str(ext, "startOffsetInfo", self.start_offset_info.as_deref());
        super::put_opt_str(ext, "msgOffsetInfo", self.msg_offset_info.as_deref());
        super::put_opt_str(ext, "orderCountInfo", self.order_count_info.as_deref());
    }
}

/// The `ACK_MESSAGE` request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckMessageRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
    /// `topic`: the real topic of the message.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
    /// `extraInfo`: the message's `POP_CK`.
    pub extra_info: &'a str,
    /// `offset`: the message's queue offset.
    pub offset: i64,
}

impl<'a> FromExtFields<'a> for AckMessageRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: ext.required_str("consumerGroup")?,
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            extra_info: ext.required_str("extraInfo")?,
            offset: ext.required_i64("offset")?,
        })
    }
}

impl ToExtFields for AckMessageRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert("extraInfo", self.extra_info);
        ext.insert_i64("offset", self.offset);
    }
}

/// The `CHANGE_MESSAGE_INVISIBLETIME` request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeInvisibleTimeRequestHeader<'a> {
    /// `consumerGroup`.
    pub consumer_group: &'a str,
    /// `topic`: the real topic of the message.
    pub topic: &'a str,
    /// `queueId`.
    pub queue_id: i32,
    /// `extraInfo`: the message's `POP_CK`.
    pub extra_info: &'a str,
    /// `offset`: the message's queue offset.
    pub offset: i64,
    /// `invisibleTime`, ms from now.
    pub invisible_time: i64,
}

impl<'a> FromExtFields<'a> for ChangeInvisibleTimeRequestHeader<'a> {
    fn from_ext_fields(ext: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: ext.required_str("consumerGroup")?,
            topic: ext.required_str("topic")?,
            queue_id: ext.required_i32("queueId")?,
            extra_info: ext.required_str("extraInfo")?,
            offset: ext.required_i64("offset")?,
            invisible_time: ext.required_i64("invisibleTime")?,
        })
    }
}

impl ToExtFields for ChangeInvisibleTimeRequestHeader<'_> {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert("consumerGroup", self.consumer_group);
        ext.insert("topic", self.topic);
        ext.insert_i64("queueId", i64::from(self.queue_id));
        ext.insert("extraInfo", self.extra_info);
        ext.insert_i64("offset", self.offset);
        ext.insert_i64("invisibleTime", self.invisible_time);
    }
}

/// The `CHANGE_MESSAGE_INVISIBLETIME` response header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangeInvisibleTimeResponseHeader {
    /// `popTime`: the pop time of the new receipt.
    pub pop_time: u64,
    /// `invisibleTime`, ms.
    pub invisible_time: i64,
    /// `reviveQid`.
    pub revive_qid: i32,
}

impl FromExtFields<'_> for ChangeInvisibleTimeResponseHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            pop_time: required_u64(ext, "popTime")?,
            invisible_time: ext.required_i64("invisibleTime")?,
            revive_qid: ext.required_i32("reviveQid")?,
        })
    }
}

impl ToExtFields for ChangeInvisibleTimeResponseHeader {
    fn write_ext_fields(&self, ext: &mut ExtFields) {
        ext.insert_u64("popTime", self.pop_time);
        ext.insert_i64("invisibleTime", self.invisible_time);
        ext.insert_i64("reviveQid", i64::from(self.revive_qid));
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
