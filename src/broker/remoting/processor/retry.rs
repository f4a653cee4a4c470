//! Retries and dead letters: `CONSUMER_SEND_MSG_BACK`.
//!
//! As a persistent broker does it: the consumed message (found by its commit-log offset) is
//! copied into `%RETRY%<group>` with `RETRY_TOPIC` (its original topic, if not already set),
//! `ORIGIN_MESSAGE_ID` (the first delivery's offset msgId, kept across retries), its other
//! properties (`UNIQ_KEY` included, so clients see the same message id) and a reconsume count
//! one higher, delayed by the level the request names (0: `3 + reconsume count`). After the
//! group's maximum reconsume times (or a negative level) it goes to `%DLQ%<group>` instead,
//! undelayed. The original message is acknowledged by the group's commit as usual, so retries
//! never pin the original queue.

use std::sync::Arc;

use super::{bad_header, put_error};
use crate::broker::core::delay::{self, rewrite_properties, MAX_LEVEL};
use crate::broker::core::record::{self, split_physical_offset, NewRecord, PutError};
use crate::broker::core::retry::group_topic;
use crate::broker::core::topics::{DLQ_PREFIX, RETRY_PREFIX};
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::code::response_code;
use crate::remoting::header::{ConsumerSendMsgBackRequestHeader, FromExtFields};
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::{properties, ExtFields, RemotingCommand};
use crate::time::now_ms;

/// Clients older than this ignore `maxReconsumeTimes` (RocketMQ `V3_4_9`).
const VERSION_WITH_MAX_RECONSUME: i32 = 121;
/// The default maximum of a concurrently consuming group.
const DEFAULT_MAX_RECONSUME: i32 = 16;

/// The maximum reconsume times a request asks for (honoured from clients of `V3_4_9` on).
pub(crate) fn max_reconsume(req: &RemotingCommand, asked: Option<i32>) -> i32 {
    if req.version >= VERSION_WITH_MAX_RECONSUME {
        asked.unwrap_or(DEFAULT_MAX_RECONSUME)
    } else {
        DEFAULT_MAX_RECONSUME
    }
}

/// `CONSUMER_SEND_MSG_BACK` (36).
pub(crate) fn consumer_send_msg_back(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match ConsumerSendMsgBackRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let lost = || {
        reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("look message by offset failed, the offset is {}", h.offset),
        )
    };
    let Some((uid, queue, offset)) = split_physical_offset(h.offset) else { return lost() };
    let Some(topic) = core.store.topic_by_uid(uid) else { return lost() };
    let Some((stored, _)) = core.store.get(topic.as_ref(), queue, offset) else { return lost() };
    let Some(d) = record::decode(&stored) else { return lost() };

    let max = max_reconsume(&req, h.max_reconsume_times);
    let origin_id = properties::find(d.properties, properties::ORIGIN_MESSAGE_ID)
        .filter(|v| !v.trim().is_empty())
        .map_or_else(|| encode_offset_msg_id(core.store_host, h.offset), str::to_owned);
    let retry_topic =
        properties::find(d.properties, properties::RETRY_TOPIC).unwrap_or(topic.name()).to_owned();
    let props = rewrite_properties(
        d.properties,
        &[properties::DELAY],
        &[(properties::RETRY_TOPIC, &retry_topic), (properties::ORIGIN_MESSAGE_ID, &origin_id)],
    );
    let rec = NewRecord {
        flag: d.flag,
        sys_flag: d.sys_flag,
        born_timestamp: d.born_timestamp,
        born_host: d.born_host,
        reconsume_times: d.reconsume_times.saturating_add(1),
        body: d.body,
        properties: &props,
    };
    let result: Result<(), PutError> = if d.reconsume_times >= max || h.delay_level < 0 {
        record::encode(&rec, core.cluster_property.len()).map_err(PutError::from).and_then(|encoded| {
            let dlq = group_topic(core, &format!("{DLQ_PREFIX}{}", h.group))?;
            tracing::info!(group = %h.group, topic = %retry_topic, "message moved to the dead-letter queue");
            dlq.append(0, encoded, properties::tags_code(&props), now_ms())?;
            Ok(())
        })
    } else {
        // `reconsume_times` is whatever the producer sent: saturate rather than overflow.
        let level =
            if h.delay_level == 0 { d.reconsume_times.saturating_add(3) } else { h.delay_level };
        let level = u32::try_from(level).unwrap_or(MAX_LEVEL).clamp(1, MAX_LEVEL);
        let retry = format!("{RETRY_PREFIX}{}", h.group);
        group_topic(core, &retry)
            .map_err(PutError::from)
            .and_then(|_| delay::schedule(core, level, &retry, 0, &rec).map(|_| ()))
    };
    match result {
        Ok(()) => Reply::now(ok(&req, ExtFields::new())),
        Err(e) => put_error(&req, &e),
    }
}
