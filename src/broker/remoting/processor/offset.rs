//! Offsets and queue metadata: `QUERY_CONSUMER_OFFSET`, `UPDATE_CONSUMER_OFFSET`,
//! `GET_MAX_OFFSET`, `GET_MIN_OFFSET`, `SEARCH_OFFSET_BY_TIMESTAMP`,
//! `GET_EARLIEST_MSG_STORETIME`, `QUERY_CONSUME_TIME_SPAN`.

use crate::sync::Arc;

use super::{bad_header, check_offset_group, queue_id, store_error};
use crate::broker::core::topics;
use crate::broker::core::Core;
use crate::broker::remoting::{json_reply, ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::QueryConsumeTimeSpanBody;
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    FromExtFields, GetEarliestMsgStoretimeResponseHeader, GetMaxOffsetRequestHeader,
    OffsetResponseHeader, QueryConsumerOffsetRequestHeader, SearchOffsetRequestHeader, ToExtFields,
    TopicQueueRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use crate::remoting::RemotingCommand;
use crate::store::TopicStore;

fn offset_reply(req: &RemotingCommand, offset: u64) -> Reply {
    Reply::now(ok(req, OffsetResponseHeader { offset: offset as i64 }.to_ext_fields()))
}

/// A topic handle and one of its queues.
type TopicQueue = (Arc<dyn TopicStore>, u32);

/// The topic and queue a metadata request names. An unknown topic reads as an empty queue
/// (RocketMQ answers offset 0 there too), so `None` is not an error.
fn topic_queue(
    core: &Core,
    req: &RemotingCommand,
    topic: &str,
    q: i32,
) -> Result<Option<TopicQueue>, Reply> {
    let Some(t) = core.store.topic(topic) else { return Ok(None) };
    let q = queue_id(req, q, topic, t.queue_count())?;
    Ok(Some((t, q)))
}

/// `QUERY_CONSUMER_OFFSET` (14), with RocketMQ's rule for groups that never committed: a
/// queue that was never trimmed answers 0 (the group starts from the beginning), otherwise
/// `QUERY_NOT_FOUND` and the client applies its consume-from-where.
pub(crate) fn query_consumer_offset(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match QueryConsumerOffsetRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let tq = match topic_queue(core, &req, h.topic, h.queue_id) {
        Ok(tq) => tq,
        Err(r) => return r,
    };
    if let Some((_, q)) = &tq {
        if let Some(o) = core.store.committed(h.consumer_group, h.topic, *q) {
            return offset_reply(&req, o);
        }
    }
    if !h.set_zero_if_not_found {
        return reply_error(
            &req,
            response_code::QUERY_NOT_FOUND,
            "Not found, do not set to zero, maybe this group boot first".into(),
        );
    }
    let never_trimmed =
        tq.and_then(|(t, q)| t.offsets(q).ok()).is_some_and(|(min, max)| min == 0 && max > 0);
    if never_trimmed {
        return offset_reply(&req, 0);
    }
    reply_error(
        &req,
        response_code::QUERY_NOT_FOUND,
        "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first".into(),
    )
}

/// `UPDATE_CONSUMER_OFFSET` (15), usually one-way. Committed offsets of clustering groups are
/// what acknowledge messages, so memory is reclaimed as consumers commit.
pub(crate) fn update_consumer_offset(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match UpdateConsumerOffsetRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    if let Err(r) = check_offset_group(core, &req, h.consumer_group) {
        return r;
    }
    let Some(t) = core.store.topic(h.topic).filter(|_| !topics::is_internal_topic(h.topic)) else {
        return reply_error(
            &req,
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist", quote(h.topic)),
        );
    };
    let q = match queue_id(&req, h.queue_id, h.topic, t.queue_count()) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let Ok(offset) = u64::try_from(h.commit_offset) else {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("commitOffset {} is negative", h.commit_offset),
        );
    };
    #[cfg(feature = "replicas")]
    if let Some(replica) = core.replica() {
        // Answered once the broker set holds the commit (a follower forwards it to the leader).
        let (replica, tx) = (Arc::clone(replica), _ctx.tx.clone());
        let (group, topic) = (h.consumer_group.to_owned(), h.topic.to_owned());
        tokio::spawn(async move {
            let reply = match replica.commit(&group, &topic, q, offset).await {
                Ok(()) => ok(&req, Default::default()),
                Err(e) => RemotingCommand::response_to(
                    &req,
                    response_code::SERVICE_NOT_AVAILABLE,
                    Some(e.to_string()),
                ),
            };
            if !req.is_oneway() {
                // The connection is gone when this fails: nobody waits for the answer.
                let _ = tx.send(reply).await;
            }
        });
        return Reply::Nothing;
    }
    match core.store.commit(h.consumer_group, h.topic, q, offset) {
        Ok(()) => Reply::now(ok(&req, Default::default())),
        Err(e) => store_error(&req, &e),
    }
}

/// `GET_MAX_OFFSET` (30): the offset the next message will get.
pub(crate) fn get_max_offset(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match GetMaxOffsetRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    match topic_queue(core, &req, h.topic, h.queue_id) {
        Ok(Some((t, q))) => offset_reply(&req, t.offsets(q).map_or(0, |(_, max)| max)),
        Ok(None) => offset_reply(&req, 0),
        Err(r) => r,
    }
}

/// `GET_MIN_OFFSET` (31): the oldest retained offset.
pub(crate) fn get_min_offset(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match TopicQueueRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    match topic_queue(core, &req, h.topic, h.queue_id) {
        Ok(Some((t, q))) => offset_reply(&req, t.offsets(q).map_or(0, |(min, _)| min)),
        Ok(None) => offset_reply(&req, 0),
        Err(r) => r,
    }
}

/// `SEARCH_OFFSET_BY_TIMESTAMP` (29): the first message stored at or after the time.
pub(crate) fn search_offset_by_timestamp(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match SearchOffsetRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    match topic_queue(core, &req, h.topic, h.queue_id) {
        Ok(Some((t, q))) => {
            let ts = u64::try_from(h.timestamp).unwrap_or(0);
            offset_reply(&req, core.store.offset_for_timestamp(t.as_ref(), q, ts).unwrap_or(0))
        }
        Ok(None) => offset_reply(&req, 0),
        Err(r) => r,
    }
}

/// `GET_EARLIEST_MSG_STORETIME` (32).
pub(crate) fn get_earliest_msg_storetime(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match TopicQueueRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let ts = match topic_queue(core, &req, h.topic, h.queue_id) {
        Ok(Some((t, q))) => core.store.earliest_timestamp(t.as_ref(), q).unwrap_or(0),
        Ok(None) => 0,
        Err(r) => return r,
    };
    Reply::now(ok(
        &req,
        GetEarliestMsgStoretimeResponseHeader { timestamp: ts as i64 }.to_ext_fields(),
    ))
}

/// `QUERY_CONSUME_TIME_SPAN` (303): header `topic` and `group`; body
/// `{"consumeTimeSpanSet":[QueueTimeSpan…]}`, one per queue (see
/// [`Core::consume_time_span`]), or `TOPIC_NOT_EXIST`.
pub(crate) fn query_consume_time_span(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let (topic, group) =
        match (req.ext_fields.required_str("topic"), req.ext_fields.required_str("group")) {
            (Ok(t), Ok(g)) => (t, g),
            (Err(e), _) | (_, Err(e)) => return bad_header(&req, &e),
        };
    match core.consume_time_span(topic, group) {
        Some(spans) => json_reply(&req, &QueryConsumeTimeSpanBody { consume_time_span_set: spans }),
        None => reply_error(
            &req,
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist", quote(topic)),
        ),
    }
}
