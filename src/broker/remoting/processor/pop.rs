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
//! * An expired message is revived as RocketMQ revives it (see [`crate::broker::core::pop`],
//!   "Revival"): copied into `%RETRY%<group>_<topic>` and popped from there. Such a message is
//!   written out as stored there (topic `%RETRY%<group>_<topic>`, queue 0, its offset there)
//!   and its queue's start and message offsets carry retry flag `1`, so a client builds
//!   `POP_CK` naming the retry topic and acks it there (`ExtraInfoUtil.getRealTopic`); RocketMQ
//!   rewrites the topic and pre-fills `POP_CK` instead (`popResponseReturnActualRetryTopic`
//!   off), which clients treat the same way. `POP_CK` is never pre-filled. Ordered pops
//!   redeliver from the message's own queue, as RocketMQ's do.
//! * A stale receipt (a redelivery or a change of invisible time replaced it) is answered
//!   `NO_MESSAGE` where RocketMQ silently writes an ack nothing matches; either way the message
//!   stays in flight under its newer receipt.
//! * The invisible time of a pop or a change is clamped to 12 h (the proxy's
//!   `maxInvisibleTimeMills`): an in-flight message holds its queue's later messages in memory.
//! * A group no heartbeat announced is created on its first pop, as RocketMQ's
//!   `autoCreateSubscriptionGroup` (default on) does; it is released after `group-idle-secs`
//!   without a pop, ack or change (`Core::release_idle_groups`).
//! * Dead-lettering is server-side after `pop-retry-max-times` redeliveries, for every pop (the
//!   Rust client never sends a popped message back itself).

use crate::sync::Arc;
use std::borrow::Cow;

use crate::broker::remoting::acl;
use crate::broker::security::acl::{Resource, SUB};
use std::time::Duration;

use bytes::BytesMut;

use super::{bad_header, store_error};
use crate::broker::core::groups::GroupError;
use crate::broker::core::pop::{self as popper, FilterExpr, PopBatch, PopCall, PopError, QueueOut};
use crate::broker::core::record::{self, Placement};
use crate::broker::core::topics::{self, RETRY_PREFIX};
use crate::broker::core::Core;
use crate::broker::remoting::{json_reply, ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::{
    BatchAckMessageRequestBody, JsonBody, MessageModel, MessageQueue, MessageQueueAssignment,
    MessageRequestMode, MessageRequestModeTable, QueryAssignmentRequestBody,
    QueryAssignmentResponseBody, SetMessageRequestModeRequestBody,
};
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    ExtraInfo, FromExtFields, PopMessageRequestHeader, PopMessageResponseHeader, ToExtFields,
    POP_ORDER_REVIVE_QUEUE,
};
use crate::remoting::{ExtFields, RemotingCommand};
use crate::store::{AckOutcome, PopInit, PopReceipt, Popped, StoreError};
use crate::sync::lock;
use crate::time::now_ms;

/// Most messages one pop returns (RocketMQ refuses more).
const MAX_POP_NUMS: i32 = 32;
/// A request that arrives later than its poll time plus this is answered `POLLING_TIMEOUT`.
const LATE_MS: i64 = 500;
/// Most messages one `BATCH_ACK_MESSAGE` acknowledges: a client acks what one pop handed
/// out (at most [`MAX_POP_NUMS`] per queue), so this is many pops' worth.
const MAX_BATCH_ACKS: usize = 4096;
/// Most `SET_MESSAGE_REQUEST_MODE` entries kept (a bound on what clients can make the broker
/// remember).
const MAX_MODES: usize = 65_536;

/// `SET_MESSAGE_REQUEST_MODE` data: what each `(topic, group)` that set a mode sent.
#[derive(Debug, Default)]
pub(crate) struct RequestModes {
    modes: std::sync::Mutex<
        std::collections::HashMap<(String, String), SetMessageRequestModeRequestBody>,
    >,
}

impl RequestModes {
    fn get(&self, topic: &str, group: &str) -> Option<MessageRequestMode> {
        let m = lock(&self.modes);
        m.get(&(topic.to_owned(), group.to_owned())).map(|b| b.mode.clone())
    }

    fn set(&self, body: SetMessageRequestModeRequestBody) -> bool {
        let mut m = lock(&self.modes);
        let key = (body.topic.clone(), body.consumer_group.clone());
        if m.len() >= MAX_MODES && !m.contains_key(&key) {
            return false;
        }
        m.insert(key, body);
        true
    }

    /// Every stored mode, per topic and group (`GET_ALL_MESSAGE_REQUEST_MODE`).
    fn all(&self) -> MessageRequestModeTable {
        let mut table = MessageRequestModeTable::default();
        for ((topic, group), body) in lock(&self.modes).iter() {
            table
                .message_request_mode_map
                .entry(topic.clone())
                .or_default()
                .insert(group.clone(), body.clone());
        }
        table
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
    /// Nothing found: wait for what the batch says (an append at or after each queue's end as
    /// it was before the pop looked, so an append racing the pop wakes it at once, or an
    /// in-flight message becoming visible again).
    Park(PopBatch),
}

/// `POP_MESSAGE` (200050).
pub(crate) fn pop_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let parked = match pop(core, &req, Pass::First) {
        PopResult::Reply(r) => return r,
        PopResult::Park(batch) => batch,
    };
    let poll = PopMessageRequestHeader::from_ext_fields(&req.ext_fields)
        .map_or(0, |h| u64::try_from(h.poll_time).unwrap_or(0));
    let hold = Duration::from_millis(poll.min(face.config.long_poll_max_ms));
    // Over the connection's cap of parked requests (or with its channel full): POLLING_FULL.
    let slot = Arc::clone(&ctx.suspended).try_acquire_owned();
    let permit = ctx.tx.clone().try_reserve_owned();
    let (Ok(slot), Ok(permit)) = (slot, permit) else {
        return not_found(&req, response_code::POLLING_FULL, "polling full");
    };
    let (core, ctx) = (Arc::clone(core), ctx.clone());
    tokio::spawn(async move {
        let mut shutdown = ctx.shutdown.clone();
        let deadline = tokio::time::Instant::now() + hold;
        let mut parked = parked;
        let reply = loop {
            if *shutdown.borrow() {
                break None;
            }
            // Woken by an append to a popped queue, or when an in-flight message of one
            // becomes visible again.
            tokio::select! {
                woken = popper::wait_for_more(&core, &parked, deadline) => {
                    if !woken {
                        break None;
                    }
                }
                _ = shutdown.changed() => break None,
                _ = ctx.tx.closed() => return,
            }
            match pop(&core, &req, Pass::Woken) {
                PopResult::Reply(r) => break Some(r),
                PopResult::Park(batch) => parked = batch,
            }
        };
        let reply = reply.or_else(|| match pop(&core, &req, Pass::Last) {
            PopResult::Reply(r) => Some(r),
            PopResult::Park(_) => None,
        });
        if let Some(Reply::Now(resp)) = reply {
            permit.send(*resp);
        }
        drop(slot);
    });
    Reply::Nothing
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

/// The remoting answer to a refused pop.
fn pop_error(req: &RemotingCommand, e: &PopError) -> Reply {
    let code = match e {
        PopError::UnknownTopic(_) => response_code::TOPIC_NOT_EXIST,
        PopError::NoPermission(_) => response_code::NO_PERMISSION,
        PopError::Group(GroupError::BadName) | PopError::BadQueue { .. } => {
            response_code::SYSTEM_ERROR
        }
        PopError::Group(GroupError::Unknown(_)) => response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
        PopError::BadFilter(_) => response_code::SUBSCRIPTION_PARSE_FAILED,
        PopError::Store(e) => return store_error(req, e),
    };
    let remark = match e {
        PopError::UnknownTopic(t) => format!("topic[{}] not exist, apply first please!", quote(t)),
        PopError::NoPermission(t) => {
            format!("the topic[{}] peeking message is forbidden", quote(t))
        }
        PopError::BadQueue { topic, queue, queues } => format!(
            "queueId[{queue}] is illegal, topic:[{}] topicConfig.readQueueNums:[{queues}]",
            quote(topic)
        ),
        other => other.to_string(),
    };
    reply_error(req, code, remark)
}

fn pop(core: &Arc<Core>, req: &RemotingCommand, pass: Pass) -> PopResult {
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
    // Bounded: an in-flight message holds every later message of its queue in memory.
    let invisible_ms = invisible_ms.min(popper::MAX_INVISIBLE_MS);
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
    let call = PopCall {
        group: h.consumer_group,
        topic: h.topic,
        queue: (h.queue_id >= 0).then_some(h.queue_id),
        max: h.max_msg_nums as usize,
        invisible_ms,
        order: h.order,
        attempt_id: h.attempt_id,
        filter: FilterExpr::from_type(h.exp_type, h.exp),
        init: if h.init_mode == 0 { PopInit::Min } else { PopInit::Max },
        max_attempts: core.config.pop_retry_max_times.saturating_add(1),
        seed: req.opaque as u32,
        // RocketMQ creates the subscription group on first use (`autoCreateSubscriptionGroup`,
        // on by default; `PopMessageProcessor` also compensates the consumer's info), so a POP
        // consumer need not heartbeat first (review-e77444b L9). What such groups hold is
        // bounded by the subscription caps and released after `group-idle-secs` idle.
        announced: true,
    };
    let batch = match popper::pop_once(core, &call, now) {
        Ok(b) => b,
        Err(e) => return reply(pop_error(req, &e)),
    };
    let mut body = BytesMut::new();
    let per_queue = batch.write_out(|t, m| write_out(core, t, m, &mut body));
    if per_queue.is_empty() {
        if pass != Pass::Last && h.poll_time > 0 {
            return PopResult::Park(batch);
        }
        let code = if pass == Pass::Last {
            response_code::POLLING_TIMEOUT
        } else {
            response_code::PULL_NOT_FOUND
        };
        return reply(not_found(req, code, "no new message"));
    }
    let header = pop_header(&h, &batch, &per_queue, invisible_ms);
    reply(Reply::now(
        RemotingCommand::response_to(req, response_code::SUCCESS, None)
            .with_ext_fields(header.to_ext_fields())
            .with_body(body.freeze()),
    ))
}

/// Appends the stored layout of popped message `m` of `topic` (its reconsume count raised by
/// its earlier deliveries) to `body`; the bytes written, or `None` for a record that cannot
/// be.
fn write_out(
    core: &Core,
    topic: &dyn crate::store::TopicStore,
    m: &Popped,
    body: &mut BytesMut,
) -> Option<usize> {
    let d = &m.delivery;
    let at = Placement {
        topic: topic.name(),
        topic_uid: topic.uid(),
        queue: d.queue,
        offset: d.offset,
        store_timestamp: d.timestamp,
        store_host: core.store_host,
    };
    let redeliveries = i32::try_from(m.attempts.saturating_sub(1)).unwrap_or(i32::MAX);
    match record::write_out_redelivered(&d.payload, &at, &core.cluster_property, redeliveries, body)
    {
        Ok(n) if n > 0 => Some(n),
        _ => None,
    }
}

/// The header of a pop answer: the receipts' pop time, and per queue the start and popped
/// offsets (and an ordered pop's delivery counts), as RocketMQ's `PopMessageProcessor` writes
/// them.
fn pop_header(
    h: &PopMessageRequestHeader<'_>,
    batch: &PopBatch,
    per_queue: &[QueueOut],
    invisible_ms: u64,
) -> PopMessageResponseHeader {
    let revive_qid = if h.order { POP_ORDER_REVIVE_QUEUE } else { 0 };
    let mut start_info = Vec::new();
    let mut msg_info = Vec::new();
    let mut order_info = Vec::new();
    let mut rest = 0u64;
    for QueueOut { retry, queue: q, offsets: offs, .. } in per_queue {
        // RocketMQ's `ExtraInfoUtil.getRetry`: 1 for a V1 pop retry topic.
        let flag = u8::from(*retry);
        let start = offs.iter().map(|(o, _)| *o).min().unwrap_or(0);
        start_info.push(format!("{flag} {q} {start}"));
        let list: Vec<String> = offs.iter().map(|(o, _)| o.to_string()).collect();
        msg_info.push(format!("{flag} {q} {}", list.join(",")));
        if h.order {
            for (o, a) in offs {
                order_info.push(format!("0 qo{q}%{o} {}", a.saturating_sub(1)));
            }
            let min = offs.iter().map(|(_, a)| a.saturating_sub(1)).min().unwrap_or(0);
            order_info.push(format!("0 {q} {min}"));
        }
        let last = offs.iter().map(|(o, _)| *o).max().unwrap_or(0);
        let topic = match (&batch.retried, retry) {
            (Some(r), true) => &r.topic,
            _ => &batch.topic,
        };
        rest += topic.offsets(*q).map_or(0, |(_, end)| end.saturating_sub(last + 1));
    }
    PopMessageResponseHeader {
        pop_time: batch.pop_time,
        invisible_time: invisible_ms,
        revive_qid,
        rest_num: rest,
        start_offset_info: Some(start_info.join(";")),
        msg_offset_info: Some(msg_info.join(";")),
        order_count_info: h.order.then(|| order_info.join(";")),
    }
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

/// The topic an ack or change of invisible time is for: the header's (clients name the pop
/// retry topic there themselves, `ExtraInfoUtil.getRealTopic`), or the one its receipt's retry
/// flag names when the header gives the original topic.
fn real_topic(group: &str, topic: &str, extra_info: &str) -> String {
    let retry = ExtraInfo::parse(extra_info).map_or("0", |e| e.retry);
    topics::pop_real_topic(group, topic, retry)
}

/// The receipt a request names (its queue, offset and `extraInfo`'s pop time).
fn receipt(
    req: &RemotingCommand,
    extra_info: &str,
    queue: i32,
    offset: i64,
) -> Result<PopReceipt, Reply> {
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
    Ok(PopReceipt { queue, offset, pop_time })
}

/// `ACK_MESSAGE` (200051).
pub(crate) fn ack_message(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match AckMessageRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let receipt = match receipt(&req, h.extra_info, h.queue_id, h.offset) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let topic = real_topic(h.consumer_group, h.topic, h.extra_info);
    match core.store.pop_ack(h.consumer_group, &topic, receipt) {
        Ok(ack) => {
            let ordered = ExtraInfo::parse(h.extra_info)
                .is_some_and(|e| e.revive_qid == POP_ORDER_REVIVE_QUEUE);
            // The rest of an ordered queue may be unblocked now, or the queue had its
            // in-flight maximum and has room again (review-e77444b M5).
            if (ack.outcome == AckOutcome::Acked && ordered) || ack.room_freed {
                popper::note_change(core);
            }
            Reply::now(ok(&req, ExtFields::new()))
        }
        Err(e) => receipt_error(&req, &e),
    }
}

/// `BATCH_ACK_MESSAGE` (200151): every set bit of every checkpoint, best effort (RocketMQ
/// answers success whatever each ack finds).
pub(crate) fn batch_ack_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
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
    // Bounded before any is applied (review-e77444b L8): each set bit is one locked engine
    // ack, run inline, and a 16 MiB body can carry about 1e8 of them.
    let mut bits = 0usize;
    for ack in &body.acks {
        bits += ack.bit_set.ones().take(MAX_BATCH_ACKS + 1).count();
        if bits > MAX_BATCH_ACKS {
            return reply_error(
                &req,
                response_code::INVALID_PARAMETER,
                format!("a batch ack may acknowledge at most {MAX_BATCH_ACKS} messages"),
            );
        }
    }
    // Under ACL, `SUB` on every checkpoint's topic and group, as `ACK_MESSAGE` needs
    // (review-e77444b L3: a valid signature let any account ack other groups' messages).
    let mut needs: Vec<(Resource<'_>, u8)> = Vec::new();
    for ack in &body.acks {
        for r in [
            Resource::topic(Cow::Borrowed(&ack.topic)),
            Resource::Group(Cow::Borrowed(&ack.consumer_group)),
        ] {
            if !needs.iter().any(|(n, _)| *n == r) {
                needs.push((r, SUB));
            }
        }
    }
    if let Some(refused) = acl::check_found(face.acl.as_deref(), ctx, &req, needs, false) {
        return refused;
    }
    let mut room_freed = false;
    for ack in &body.acks {
        let (Ok(queue), Ok(start), Ok(pop_time)) = (
            u32::try_from(ack.queue_id),
            u64::try_from(ack.start_offset),
            u64::try_from(ack.pop_time),
        ) else {
            continue;
        };
        // The checkpoint names the original topic and a retry flag (`BatchAck.retry`).
        let topic = topics::pop_real_topic(&ack.consumer_group, &ack.topic, &ack.retry);
        for bit in ack.bit_set.ones() {
            let receipt = PopReceipt { queue, offset: start + bit, pop_time };
            match core.store.pop_ack(&ack.consumer_group, &topic, receipt) {
                Ok(a) => room_freed |= a.room_freed,
                Err(e) => {
                    tracing::debug!(group = %ack.consumer_group, topic = %ack.topic, queue, offset = start + bit, error = %e, "batch ack entry refused");
                }
            }
        }
    }
    if room_freed {
        // A queue had its in-flight maximum: parked pops find room again.
        popper::note_change(core);
    }
    Reply::now(ok(&req, ExtFields::new()))
}

/// `CHANGE_MESSAGE_INVISIBLETIME` (200053).
pub(crate) fn change_invisible_time(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let h = match ChangeInvisibleTimeRequestHeader::from_ext_fields(&req.ext_fields) {
        Ok(h) => h,
        Err(e) => return bad_header(&req, &e),
    };
    let receipt = match receipt(&req, h.extra_info, h.queue_id, h.offset) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let revive_qid = ExtraInfo::parse(h.extra_info).map_or(0, |e| e.revive_qid);
    // Bounded as a pop's (see `popper::MAX_INVISIBLE_MS`).
    let invisible = u64::try_from(h.invisible_time).unwrap_or(0).min(popper::MAX_INVISIBLE_MS);
    let topic = real_topic(h.consumer_group, h.topic, h.extra_info);
    match core.store.change_invisible(h.consumer_group, &topic, receipt, invisible, now_ms()) {
        Ok(renewed) => {
            popper::note_change(core);
            let header = ChangeInvisibleTimeResponseHeader {
                pop_time: renewed,
                invisible_time: invisible as i64,
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
pub(crate) fn query_assignment(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
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
    let Some(conf) = core.topics.get(&body.topic) else {
        return reply_error(
            &req,
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist, apply first please!", quote(&body.topic)),
        );
    };
    let mode = if body.topic.starts_with(RETRY_PREFIX) {
        MessageRequestMode::Pull
    } else {
        face.request_modes.get(&body.topic, &body.consumer_group).unwrap_or(
            if face.config.pop_by_default() {
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
            let mut ids = core.clients.consumer_ids(&body.consumer_group);
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
                broker_name: core.config.broker_name.clone(),
                queue_id: q as i32,
            },
            mode: mode.clone(),
            attachments: None,
        })
        .collect();
    json_reply(&req, &QueryAssignmentResponseBody { message_queue_assignments: assignments })
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
    _core: &Arc<Core>,
    face: &Arc<RemotingState>,
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
    if !face.request_modes.set(body) {
        return reply_error(&req, response_code::SYSTEM_BUSY, "too many request modes set".into());
    }
    Reply::now(ok(&req, ExtFields::new()))
}

/// `GET_ALL_MESSAGE_REQUEST_MODE` (402): body RocketMQ's `MessageRequestModeManager` JSON,
/// `{"messageRequestModeMap":{topic:{group:{topic,consumerGroup,mode,popShareQueueNum}}}}`,
/// of what `SET_MESSAGE_REQUEST_MODE` stored (`{}` when nothing was).
pub(crate) fn get_all_message_request_mode(
    _core: &Arc<Core>,
    face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    json_reply(&req, &face.request_modes.all())
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
