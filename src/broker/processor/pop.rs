//! POP consumption (RocketMQ 5): `POP_MESSAGE`, `ACK_MESSAGE`, `BATCH_ACK_MESSAGE`,
//! `CHANGE_MESSAGE_INVISIBLETIME`, and how clients learn to pop: `QUERY_ASSIGNMENT` and
//! `SET_MESSAGE_REQUEST_MODE`. `PEEK_MESSAGE`, `NOTIFICATION` and `POLLING_INFO` are not
//! served (`REQUEST_CODE_NOT_SUPPORTED`; no registry client sends them).
//!
//! The engine keeps the per-delivery state ([`crate::store::PopConsumption`]). The receipt a
//! client sends back is RocketMQ's `extraInfo` (`POP_CK`), which the client builds itself from
//! the response headers; baiji reads its queue id and pop time, and the header's offset.
//!
//! Differences from RocketMQ, each invisible to clients that follow the protocol:
//!
//! * An expired message is popped again from its own queue with a reconsume count one higher
//!   (the engine's attempts), not copied into `%RETRY%<group>_<topic>` first: the retry flag of
//!   every receipt is `0` and `POP_CK` is never pre-filled. The reconsume count, the message id
//!   and the topic a client sees are those RocketMQ's revive gives it.
//! * A stale receipt (a redelivery or a change of invisible time replaced it) is answered
//!   `NO_MESSAGE` where RocketMQ silently writes an ack nothing matches; either way the message
//!   stays in flight under its newer receipt.
//! * Dead-lettering is server-side after `pop-retry-max-times` redeliveries, for every pop (the
//!   Rust client never sends a popped message back itself).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;

use super::pull::AppendWait;
use super::{bad_header, check_offset_group, queue_id, store_error};
use crate::broker::clients::filter_of;
use crate::broker::filter::{self, SQL92};
use crate::broker::record::{self, physical_offset, NewRecord, Placement};
use crate::broker::schedule::rewrite_properties;
use crate::broker::topics::{perm, DLQ_PREFIX, RETRY_PREFIX};
use crate::broker::{metrics, ok, reply_error, ConnCtx, Reply, Shared};
use crate::remoting::body::{
    BatchAckMessageRequestBody, JsonBody, MessageModel, MessageQueue, MessageQueueAssignment,
    MessageRequestMode, QueryAssignmentRequestBody, QueryAssignmentResponseBody,
    SetMessageRequestModeRequestBody,
};
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    ExtraInfo, FromExtFields, PopMessageRequestHeader, PopMessageResponseHeader, ToExtFields,
    POP_ORDER_REVIVE_QUEUE,
};
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::sql92::Sql92;
use crate::remoting::subscription::{SubscriptionExpr, TagMatcher};
use crate::remoting::{properties, ExtFields, RemotingCommand};
use crate::store::{
    AckOutcome, Filter, PopInit, PopOutcome, PopRequest, Popped, StoreError, TopicStore,
};
use crate::time::now_ms;

/// Most messages one pop returns (RocketMQ refuses more).
const MAX_POP_NUMS: i32 = 32;
/// A request that arrives later than its poll time plus this is answered `POLLING_TIMEOUT`.
const LATE_MS: i64 = 500;
/// Most `SET_MESSAGE_REQUEST_MODE` entries kept (a bound on what clients can make the broker
/// remember).
const MAX_MODES: usize = 65_536;

/// `SET_MESSAGE_REQUEST_MODE` data: the mode of each `(topic, group)` that set one.
#[derive(Debug, Default)]
pub(crate) struct RequestModes {
    modes: std::sync::Mutex<std::collections::HashMap<(String, String), MessageRequestMode>>,
}

impl RequestModes {
    fn get(&self, topic: &str, group: &str) -> Option<MessageRequestMode> {
        let m = self.modes.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(topic.to_owned(), group.to_owned())).cloned()
    }

    fn set(&self, topic: String, group: String, mode: MessageRequestMode) -> bool {
        let mut m = self.modes.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_MODES && !m.contains_key(&(topic.clone(), group.clone())) {
            return false;
        }
        m.insert((topic, group), mode);
        true
    }
}

/// Which processing of a pop request this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// As it arrives: it may be late, and it may be parked.
    First,
    /// Parked, and woken by an append or an expiry: it may be parked again.
    Woken,
    /// The poll time is over: answered whatever it finds.
    Last,
}

enum PopResult {
    Reply(Reply),
    /// Nothing found: wait for an append at or after `ends` (each queue's end as it was before
    /// the pop looked, so an append racing the pop wakes it at once) or until `wake_at`.
    Park {
        topic: Arc<dyn TopicStore>,
        ends: Vec<(u32, u64)>,
        wake_at: Option<u64>,
    },
}

/// `POP_MESSAGE` (200050).
pub(crate) fn pop_message(s: &Arc<Shared>, ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let (topic, ends, wake_at) = match pop(s, &req, Pass::First) {
        PopResult::Reply(r) => return r,
        PopResult::Park { topic, ends, wake_at } => (topic, ends, wake_at),
    };
    let poll = PopMessageRequestHeader::from_ext_fields(&req.ext_fields)
        .map_or(0, |h| u64::try_from(h.poll_time).unwrap_or(0));
    let hold = Duration::from_millis(poll.min(s.config.long_poll_max_ms));
    // Over the connection's cap of parked requests (or with its channel full): POLLING_FULL.
    let slot = Arc::clone(&ctx.suspended).try_acquire_owned();
    let permit = ctx.tx.clone().try_reserve_owned();
    let (Ok(slot), Ok(permit)) = (slot, permit) else {
        return not_found(&req, response_code::POLLING_FULL, "polling full");
    };
    let (s, ctx) = (Arc::clone(s), ctx.clone());
    tokio::spawn(async move {
        let mut shutdown = ctx.shutdown.clone();
        let deadline = tokio::time::Instant::now() + hold;
        let (mut topic, mut ends, mut wake_at) = (topic, ends, wake_at);
        let reply = loop {
            if *shutdown.borrow() {
                break None;
            }
            // Woken by an append to a popped queue, or when an in-flight message of one
            // becomes visible again.
            let until = wake_at.map_or(deadline, |at| {
                let ms = at.saturating_sub(now_ms());
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(ms))
            });
            let appended = AnyAppend::new(&topic, &ends);
            tokio::select! {
                woken = tokio::time::timeout_at(until, appended) => {
                    if woken.is_err() && tokio::time::Instant::now() >= deadline {
                        break None;
                    }
                }
                _ = shutdown.changed() => break None,
                _ = ctx.tx.closed() => return,
            }
            match pop(&s, &req, Pass::Woken) {
                PopResult::Reply(r) => break Some(r),
                PopResult::Park { topic: t, ends: e, wake_at: w } => {
                    (topic, ends, wake_at) = (t, e, w);
                }
            }
        };
        let reply = reply.or_else(|| match pop(&s, &req, Pass::Last) {
            PopResult::Reply(r) => Some(r),
            PopResult::Park { .. } => None,
        });
        if let Some(Reply::Now(resp)) = reply {
            permit.send(*resp);
        }
        drop(slot);
    });
    Reply::Nothing
}

/// Resolves when any of the queues has a message at or after its given end.
struct AnyAppend {
    waits: Vec<AppendWait>,
}

impl AnyAppend {
    fn new(topic: &Arc<dyn TopicStore>, ends: &[(u32, u64)]) -> Self {
        let waits = ends
            .iter()
            .map(|&(q, end)| AppendWait {
                topic: Arc::clone(topic),
                queue: q,
                offset: end,
                id: None,
            })
            .collect();
        AnyAppend { waits }
    }
}

impl Future for AnyAppend {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut ready = false;
        // Every wait registers (or stays registered), so any append wakes the task.
        for w in self.waits.iter_mut() {
            ready |= Pin::new(w).poll(cx).is_ready();
        }
        if ready {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// The answer to a pop that found nothing: RocketMQ sends the response header anyway (the
/// Rust client decodes it whatever the code).
fn not_found(req: &RemotingCommand, code: i32, remark: &str) -> Reply {
    let h = PopMessageResponseHeader { pop_time: now_ms(), ..PopMessageResponseHeader::default() };
    Reply::now(
        RemotingCommand::response_to(req, code, Some(remark.to_owned()))
            .with_ext_fields(h.to_ext_fields()),
    )
}

/// The filter of a pop: tags in the engine, SQL92 here.
fn pop_filter(
    req: &RemotingCommand,
    h: &PopMessageRequestHeader<'_>,
) -> Result<(Filter, Option<Arc<Sql92>>), Reply> {
    let expr = h.exp.unwrap_or("*");
    if h.exp_type.is_some_and(|t| t.eq_ignore_ascii_case(SQL92)) {
        return match filter::compile(expr) {
            Ok(sql) => Ok((Filter::All, Some(sql))),
            Err(e) => Err(reply_error(
                req,
                response_code::SUBSCRIPTION_PARSE_FAILED,
                format!("parse the consumer's subscription failed, {e}"),
            )),
        };
    }
    Ok((filter_of(&TagMatcher::from_expr(SubscriptionExpr::parse(expr))), None))
}

fn pop(s: &Arc<Shared>, req: &RemotingCommand, pass: Pass) -> PopResult {
    let reply = |r: Reply| PopResult::Reply(r);
    let h = match PopMessageRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return reply(bad_header(req, &e)),
    };
    if h.max_msg_nums > MAX_POP_NUMS || h.max_msg_nums <= 0 {
        return reply(reply_error(
            req,
            response_code::INVALID_PARAMETER,
            format!("the max message num of pop request must be 1 to 32, not {}", h.max_msg_nums),
        ));
    }
    let Ok(invisible_ms) = u64::try_from(h.invisible_time) else {
        return reply(reply_error(
            req,
            response_code::INVALID_PARAMETER,
            format!("invalid invisibleTime {}", h.invisible_time),
        ));
    };
    let now = now_ms();
    if pass == Pass::First
        && h.poll_time > 0
        && (now as i64).saturating_sub(h.born_time).saturating_sub(h.poll_time) > LATE_MS
    {
        return reply(not_found(
            req,
            response_code::POLLING_TIMEOUT,
            "the pop request arrived too late",
        ));
    }
    let routed = s.topics.get_perm_counted(h.topic);
    let Some(((perm_bits, counters), topic)) =
        routed.and_then(|r| Some((r, s.store.topic(h.topic)?)))
    else {
        return reply(reply_error(
            req,
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist, apply first please!", quote(h.topic)),
        ));
    };
    if perm_bits & perm::READ == 0 {
        return reply(reply_error(
            req,
            response_code::NO_PERMISSION,
            format!("the topic[{}] peeking message is forbidden", quote(h.topic)),
        ));
    }
    if let Err(r) = check_offset_group(s, req, h.consumer_group) {
        return reply(r);
    }
    let count = topic.queue_count();
    let queues: Vec<u32> = if h.queue_id < 0 {
        // Every queue, from a different one each time (RocketMQ: `randomQ % readQueueNums`).
        let first = (now as u32).wrapping_add(req.opaque as u32) % count.max(1);
        (0..count).map(|i| (first + i) % count).collect()
    } else {
        match queue_id(req, h.queue_id, h.topic, count) {
            Ok(q) => vec![q],
            Err(r) => return reply(r),
        }
    };
    let (filter, sql) = match pop_filter(req, &h) {
        Ok(f) => f,
        Err(r) => return reply(r),
    };
    let max = h.max_msg_nums as usize;
    let preq = PopRequest {
        max,
        invisible_ms,
        now_ms: now,
        order: h.order,
        attempt_id: h.attempt_id,
        max_attempts: s.config.pop_retry_max_times.saturating_add(1),
        filter: &filter,
        init: if h.init_mode == 0 { PopInit::Min } else { PopInit::Max },
    };
    // Before looking: an append after this wakes a parked pop at once (see `PopResult::Park`).
    let ends: Vec<(u32, u64)> =
        queues.iter().filter_map(|&q| Some((q, topic.offsets(q).ok()?.1))).collect();
    let mut out = PopOutcome::default();
    for &q in &queues {
        if out.messages.len() >= max {
            break;
        }
        if let Err(e) = s.store.pop(h.consumer_group, h.topic, q, &preq, &mut out) {
            return reply(store_error(req, &e));
        }
    }
    for d in &out.dead {
        dead_letter(s, h.consumer_group, topic.as_ref(), d);
    }
    let mut body = BytesMut::new();
    // Per queue: the offsets written, in body order, and the bytes they took.
    let mut per_queue: Vec<QueueOut> = Vec::new();
    for m in &out.messages {
        let d = &m.delivery;
        if let Some(sql) = &sql {
            if !filter::matches(sql, &d.payload, &s.cluster_property) {
                // RocketMQ acknowledges what the expression rejects.
                let _ = s.store.pop_ack(h.consumer_group, h.topic, d.queue, d.offset, out.pop_time);
                continue;
            }
        }
        let at = Placement {
            topic: topic.name(),
            topic_uid: topic.uid(),
            queue: d.queue,
            offset: d.offset,
            store_timestamp: d.timestamp,
            store_host: s.store_host,
        };
        let redeliveries = i32::try_from(m.attempts.saturating_sub(1)).unwrap_or(i32::MAX);
        match record::write_out_redelivered(
            &d.payload,
            &at,
            &s.cluster_property,
            redeliveries,
            &mut body,
        ) {
            Ok(n) if n > 0 => match per_queue.iter_mut().find(|o| o.queue == d.queue) {
                Some(o) => {
                    o.offsets.push((d.offset, m.attempts));
                    o.bytes += n;
                }
                None => per_queue.push(QueueOut {
                    queue: d.queue,
                    offsets: vec![(d.offset, m.attempts)],
                    bytes: n,
                }),
            },
            _ => {
                // A record that cannot be written out would come back forever: acknowledged.
                tracing::warn!(topic = %h.topic, queue = d.queue, offset = d.offset, "a stored message cannot be popped; skipped");
                let _ = s.store.pop_ack(h.consumer_group, h.topic, d.queue, d.offset, out.pop_time);
            }
        }
    }
    if per_queue.is_empty() {
        if pass != Pass::Last && h.poll_time > 0 {
            return PopResult::Park { topic, ends, wake_at: out.next_expiry };
        }
        let code = if pass == Pass::Last {
            response_code::POLLING_TIMEOUT
        } else {
            response_code::PULL_NOT_FOUND
        };
        return reply(not_found(req, code, "no new message"));
    }
    // Counted as pulls are (rocketmq_messages_out_total and the admin codes' out figures).
    for o in &per_queue {
        let next = o.offsets.iter().map(|(off, _)| off + 1).max().unwrap_or(0);
        let pulled =
            metrics::Pulled { queue: o.queue, next, messages: o.offsets.len(), bytes: o.bytes };
        counters.messages_out(h.consumer_group, topic.queue_count(), pulled);
    }
    let revive_qid = if h.order { POP_ORDER_REVIVE_QUEUE } else { 0 };
    let mut start_info = Vec::new();
    let mut msg_info = Vec::new();
    let mut order_info = Vec::new();
    let mut rest = 0u64;
    for QueueOut { queue: q, offsets: offs, .. } in &per_queue {
        let start = offs.iter().map(|(o, _)| *o).min().unwrap_or(0);
        start_info.push(format!("0 {q} {start}"));
        let list: Vec<String> = offs.iter().map(|(o, _)| o.to_string()).collect();
        msg_info.push(format!("0 {q} {}", list.join(",")));
        if h.order {
            for (o, a) in offs {
                order_info.push(format!("0 qo{q}%{o} {}", a.saturating_sub(1)));
            }
            let min = offs.iter().map(|(_, a)| a.saturating_sub(1)).min().unwrap_or(0);
            order_info.push(format!("0 {q} {min}"));
        }
        let last = offs.iter().map(|(o, _)| *o).max().unwrap_or(0);
        rest += topic.offsets(*q).map_or(0, |(_, end)| end.saturating_sub(last + 1));
    }
    let header = PopMessageResponseHeader {
        pop_time: out.pop_time,
        invisible_time: invisible_ms,
        revive_qid,
        rest_num: rest,
        start_offset_info: Some(start_info.join(";")),
        msg_offset_info: Some(msg_info.join(";")),
        order_count_info: h.order.then(|| order_info.join(";")),
    };
    reply(Reply::now(
        RemotingCommand::response_to(req, response_code::SUCCESS, None)
            .with_ext_fields(header.to_ext_fields())
            .with_body(body.freeze()),
    ))
}

/// Copies a message whose attempts ran out into `%DLQ%<group>` (the group already
/// acknowledged it), as `CONSUMER_SEND_MSG_BACK` does past the maximum.
fn dead_letter(s: &Shared, group: &str, topic: &dyn TopicStore, p: &Popped) {
    let d = &p.delivery;
    let Some(rec) = record::decode(&d.payload) else { return };
    let phys = physical_offset(topic.uid(), d.queue, d.offset);
    let origin = properties::find(rec.properties, properties::ORIGIN_MESSAGE_ID)
        .filter(|v| !v.trim().is_empty())
        .map_or_else(|| encode_offset_msg_id(s.store_host, phys), str::to_owned);
    let retry_topic = properties::find(rec.properties, properties::RETRY_TOPIC)
        .unwrap_or(topic.name())
        .to_owned();
    let props = rewrite_properties(
        rec.properties,
        &[properties::DELAY],
        &[(properties::RETRY_TOPIC, &retry_topic), (properties::ORIGIN_MESSAGE_ID, &origin)],
    );
    let attempts = i32::try_from(p.attempts).unwrap_or(i32::MAX);
    let new = NewRecord {
        flag: rec.flag,
        sys_flag: rec.sys_flag,
        born_timestamp: rec.born_timestamp,
        born_host: rec.born_host,
        reconsume_times: rec.reconsume_times.saturating_add(attempts),
        body: rec.body,
        properties: &props,
    };
    let result = record::encode(&new, s.cluster_property.len())
        .map_err(|e| e.to_string())
        .and_then(|encoded| {
            let dlq = super::retry::group_topic(s, &format!("{DLQ_PREFIX}{group}"))
                .map_err(|e| e.to_string())?;
            dlq.append(0, encoded, properties::tags_code(&props), now_ms())
                .map_err(|e| e.to_string())
        });
    match result {
        Ok(_) => {
            tracing::info!(%group, topic = %topic.name(), attempts = p.attempts, "popped message moved to the dead-letter queue")
        }
        Err(e) => {
            tracing::warn!(%group, topic = %topic.name(), error = %e, "popped message could not be dead-lettered; dropped")
        }
    }
}

/// What one pop answer wrote out of one queue.
#[derive(Debug)]
struct QueueOut {
    queue: u32,
    /// Offsets with their delivery attempts, in body order.
    offsets: Vec<(u64, u32)>,
    /// Bytes they took in the body.
    bytes: usize,
}

/// The answer to a receipt the store refused.
fn receipt_error(req: &RemotingCommand, e: &StoreError) -> Reply {
    match e {
        StoreError::StaleReceipt { .. } => {
            reply_error(req, response_code::NO_MESSAGE, format!("{e}: the receipt is stale"))
        }
        other => store_error(req, other),
    }
}

/// The queue and pop time a receipt names.
fn receipt(
    req: &RemotingCommand,
    extra_info: &str,
    queue: i32,
    offset: i64,
) -> Result<(u32, u64, u64), Reply> {
    let bad = |what: &str| {
        Err(reply_error(
            req,
            response_code::INVALID_PARAMETER,
            format!("{what}: {}", quote(extra_info)),
        ))
    };
    let Some(e) = ExtraInfo::parse(extra_info) else { return bad("malformed extraInfo") };
    let (Ok(queue), Ok(offset), Ok(pop_time)) =
        (u32::try_from(queue), u64::try_from(offset), u64::try_from(e.pop_time))
    else {
        return bad("negative queue, offset or pop time");
    };
    Ok((queue, offset, pop_time))
}

/// `ACK_MESSAGE` (200051).
pub(crate) fn ack_message(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let h = match AckMessageRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let (queue, offset, pop_time) = match receipt(&req, h.extra_info, h.queue_id, h.offset) {
        Ok(r) => r,
        Err(r) => return r,
    };
    match s.store.pop_ack(h.consumer_group, h.topic, queue, offset, pop_time) {
        Ok(AckOutcome::Acked | AckOutcome::AlreadyAcked) => Reply::now(ok(&req, ExtFields::new())),
        Err(e) => receipt_error(&req, &e),
    }
}

/// `BATCH_ACK_MESSAGE` (200151): every set bit of every checkpoint, best effort (RocketMQ
/// answers success whatever each ack finds).
pub(crate) fn batch_ack_message(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let body = match BatchAckMessageRequestBody::from_json_slice(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return reply_error(
                &req,
                response_code::INVALID_PARAMETER,
                format!("bad batch ack body: {e}"),
            )
        }
    };
    for ack in &body.acks {
        let (Ok(queue), Ok(start), Ok(pop_time)) = (
            u32::try_from(ack.queue_id),
            u64::try_from(ack.start_offset),
            u64::try_from(ack.pop_time),
        ) else {
            continue;
        };
        for bit in ack.bit_set.ones() {
            let r = s.store.pop_ack(&ack.consumer_group, &ack.topic, queue, start + bit, pop_time);
            if let Err(e) = r {
                tracing::debug!(group = %ack.consumer_group, topic = %ack.topic, queue, offset = start + bit, error = %e, "batch ack entry refused");
            }
        }
    }
    Reply::now(ok(&req, ExtFields::new()))
}

/// `CHANGE_MESSAGE_INVISIBLETIME` (200053).
pub(crate) fn change_invisible_time(
    s: &Arc<Shared>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match ChangeInvisibleTimeRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let (queue, offset, pop_time) = match receipt(&req, h.extra_info, h.queue_id, h.offset) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let revive_qid = ExtraInfo::parse(h.extra_info).map_or(0, |e| e.revive_qid);
    let invisible = u64::try_from(h.invisible_time).unwrap_or(0);
    match s.store.change_invisible(
        h.consumer_group,
        h.topic,
        queue,
        offset,
        pop_time,
        invisible,
        now_ms(),
    ) {
        Ok(renewed) => {
            let header = ChangeInvisibleTimeResponseHeader {
                pop_time: renewed,
                invisible_time: h.invisible_time.max(0),
                revive_qid,
            };
            Reply::now(ok(&req, header.to_ext_fields()))
        }
        Err(e) => receipt_error(&req, &e),
    }
}

/// `QUERY_ASSIGNMENT` (400): the queues of this broker a client reads and how. In POP mode
/// every client of the group gets every queue (RocketMQ's `popShareQueueNum` <= 0); in PULL
/// mode they are spread over the group's clients as `AllocateMessageQueueAveragely` does;
/// broadcasting clients and retry topics always pull every queue.
pub(crate) fn query_assignment(s: &Arc<Shared>, _ctx: &ConnCtx, req: RemotingCommand) -> Reply {
    let body = match QueryAssignmentRequestBody::from_json_slice(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return reply_error(
                &req,
                response_code::INVALID_PARAMETER,
                format!("bad query assignment body: {e}"),
            )
        }
    };
    let Some(conf) = s.topics.get(&body.topic) else {
        return reply_error(
            &req,
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist, apply first please!", quote(&body.topic)),
        );
    };
    let mode = if body.topic.starts_with(RETRY_PREFIX) {
        MessageRequestMode::Pull
    } else {
        s.request_modes.get(&body.topic, &body.consumer_group).unwrap_or(
            if s.config.pop_by_default() {
                MessageRequestMode::Pop
            } else {
                MessageRequestMode::Pull
            },
        )
    };
    let queues = conf.read_queue_nums;
    let all: Vec<u32> = (0..queues).collect();
    let mine: Vec<u32> =
        if body.message_model == MessageModel::Broadcasting || mode == MessageRequestMode::Pop {
            all
        } else {
            let mut ids = s.clients.consumer_ids(&body.consumer_group);
            ids.sort();
            match ids.iter().position(|c| *c == body.client_id) {
                Some(i) => averagely(&all, i, ids.len()),
                None => Vec::new(),
            }
        };
    let assignments = mine
        .into_iter()
        .map(|q| MessageQueueAssignment {
            message_queue: MessageQueue {
                topic: body.topic.clone(),
                broker_name: s.config.broker_name.clone(),
                queue_id: q as i32,
            },
            mode: mode.clone(),
            attachments: None,
        })
        .collect();
    match (QueryAssignmentResponseBody { message_queue_assignments: assignments }).to_json_bytes() {
        Ok(json) => Reply::now(ok(&req, ExtFields::new()).with_body(json)),
        Err(e) => reply_error(&req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// RocketMQ's `AllocateMessageQueueAveragely` for client `index` of `clients`.
fn averagely(queues: &[u32], index: usize, clients: usize) -> Vec<u32> {
    let n = queues.len();
    if clients == 0 || index >= clients {
        return Vec::new();
    }
    let rem = n % clients;
    let size = if n <= clients {
        1
    } else if rem > 0 && index < rem {
        n / clients + 1
    } else {
        n / clients
    };
    let start = if rem > 0 && index < rem { index * size } else { index * size + rem };
    (0..size.min(n.saturating_sub(start))).map(|i| queues[(start + i) % n]).collect()
}

/// `SET_MESSAGE_REQUEST_MODE` (401).
pub(crate) fn set_message_request_mode(
    s: &Arc<Shared>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let body = match SetMessageRequestModeRequestBody::from_json_slice(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return reply_error(
                &req,
                response_code::INVALID_PARAMETER,
                format!("bad request mode body: {e}"),
            )
        }
    };
    if body.topic.starts_with(RETRY_PREFIX) {
        return reply_error(
            &req,
            response_code::NO_PERMISSION,
            "retry topic is not allowed to set mode".into(),
        );
    }
    if !matches!(body.mode, MessageRequestMode::Pull | MessageRequestMode::Pop) {
        return reply_error(
            &req,
            response_code::INVALID_PARAMETER,
            "mode must be PULL or POP".into(),
        );
    }
    if !s.request_modes.set(body.topic, body.consumer_group, body.mode) {
        return reply_error(&req, response_code::SYSTEM_BUSY, "too many request modes set".into());
    }
    Reply::now(ok(&req, ExtFields::new()))
}

#[cfg(test)]
mod tests {
    use super::averagely;

    #[test]
    fn given_queues_and_clients_when_allocating_averagely_should_match_rocketmq() {
        let q: Vec<u32> = (0..8).collect();
        assert_eq!(averagely(&q, 0, 3), [0, 1, 2], "the first n % k clients get one more");
        assert_eq!(averagely(&q, 1, 3), [3, 4, 5]);
        assert_eq!(averagely(&q, 2, 3), [6, 7]);
        assert_eq!(averagely(&q[..2], 2, 3), Vec::<u32>::new(), "more clients than queues");
    }
}
