//! Producing: `SEND_MESSAGE` (V1 header), `SEND_MESSAGE_V2` (short names), one-way sends,
//! `SEND_BATCH_MESSAGE`, and topic auto-creation from `TBW102`.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::retry;
use super::{bad_header, put_refusal, store_error, store_refusal, Refusal};
use crate::broker::core::counters::TopicCounters;
use crate::broker::core::delay;
use crate::broker::core::record::{self, physical_offset, NewRecord, PutError};
use crate::broker::core::retry::group_topic;
use crate::broker::core::timer::{self, Wait};
use crate::broker::core::topics::{self, perm, AUTO_CREATE_TOPIC, DLQ_PREFIX, RETRY_PREFIX};
use crate::broker::core::transaction;
use crate::broker::core::Core;
use crate::broker::remoting::{ok, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::TopicConfig;
use crate::remoting::code::response_code;
use crate::remoting::error::quote;
use crate::remoting::header::{
    SendHeaderVersion, SendMessageRequestHeader, SendMessageResponseHeader, ToExtFields,
};
use crate::remoting::message::decode_batch;
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::properties::{self, MAX_PROPERTIES_LEN};
use crate::remoting::RemotingCommand;
use crate::store::TopicStore;
use crate::time::now_ms;

/// Most messages one batch may carry. The answer lists one 32-character msgId (plus a comma) per
/// message in one header field: 65,536 of them take about 2.1 MiB, so the answer to any batch
/// that is stored always fits a frame (a batch whose answer is dropped would be retried and
/// stored twice). A 4 MiB batch (RocketMQ's default maxMessageSize) of 64-byte messages fits.
const MAX_BATCH_ENTRIES: usize = 65_536;

/// `SEND_MESSAGE` (10) and `SEND_MESSAGE_V2` (310), answered or one-way.
pub(crate) fn send_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let reply = send_one(core, ctx, &req);
    count_oneway_rejection(core, face, &req, &reply);
    reply
}

/// `SEND_BATCH_MESSAGE` (320).
pub(crate) fn send_batch_message(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let reply = send_batch(core, ctx, &req);
    count_oneway_rejection(core, face, &req, &reply);
    reply
}

/// A one-way send that was refused cannot be told so: count it, so nothing disappears
/// uncounted.
fn count_oneway_rejection(core: &Core, face: &RemotingState, req: &RemotingCommand, reply: &Reply) {
    if let Reply::Now(resp) = reply {
        if req.is_oneway() && resp.code != response_code::SUCCESS {
            face.counters.oneway_rejected.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(code = resp.code, remark = ?resp.remark, "one-way send refused");
        }
        if resp.code == response_code::SYSTEM_BUSY {
            core.counters.sends_rejected.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn header<'a>(req: &'a RemotingCommand) -> Result<SendMessageRequestHeader<'a>, Reply> {
    let version = SendHeaderVersion::for_request_code(req.code)
        .unwrap_or_else(|| SendHeaderVersion::detect(&req.ext_fields));
    SendMessageRequestHeader::decode(&req.ext_fields, version).map_err(|e| bad_header(req, &e))
}

/// The checks every send makes before storing: topic name and permission, body and
/// properties size.
fn check(core: &Core, topic: &str, body_len: usize, properties_len: usize) -> Result<(), Refusal> {
    if let Err(remark) = topics::validate_topic(topic) {
        return Err(Refusal::new(response_code::SYSTEM_ERROR, remark));
    }
    if !topics::send_allowed(topic) {
        return Err(Refusal::new(
            response_code::NO_PERMISSION,
            format!("Sending message to topic[{}] is forbidden.", quote(topic)),
        ));
    }
    if body_len > core.config.max_message_size {
        return Err(Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            format!(
                "the message body size {body_len} exceeds the maximum {} bytes",
                core.config.max_message_size
            ),
        ));
    }
    if properties_len > MAX_PROPERTIES_LEN {
        return Err(Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            format!(
                "the message properties size {properties_len} exceeds the maximum {MAX_PROPERTIES_LEN} bytes"
            ),
        ));
    }
    Ok(())
}

/// The topic a send goes to, created from `TBW102` if it does not exist yet and
/// auto-creation is on (RocketMQ's rules: at most `defaultTopicQueueNums` and the template's
/// queue count; retry topics get one queue).
pub(crate) fn resolve_topic(
    core: &Core,
    topic: &str,
    default_topic: &str,
    default_queues: i32,
) -> Result<(Arc<dyn TopicStore>, Arc<TopicCounters>), Refusal> {
    if let Some((_, counters)) = core.topics.get_perm_counted(topic) {
        if let Some(t) = core.store.topic(topic) {
            return Ok((t, counters));
        }
    }
    let not_exist = || {
        Refusal::new(
            response_code::TOPIC_NOT_EXIST,
            format!("topic[{topic}] not exist, apply first please! https://rocketmq.apache.org/docs/bestPractice/06FAQ", topic = quote(topic)),
        )
    };
    let conf = if let Some(existing) = core.topics.get(topic) {
        existing
    } else if topic.starts_with(RETRY_PREFIX) {
        let mut c = TopicConfig::new(topic, 1, 1);
        c.perm = perm::RW;
        c
    } else {
        if !core.config.auto_create_topic {
            return Err(not_exist());
        }
        let template = if default_topic.is_empty() { AUTO_CREATE_TOPIC } else { default_topic };
        let Some(def) = core.topics.get(template) else { return Err(not_exist()) };
        if def.perm & perm::INHERIT == 0 {
            return Err(not_exist());
        }
        let q = u32::try_from(default_queues).unwrap_or(1).clamp(1, def.write_queue_nums.max(1));
        let mut c = TopicConfig::new(topic, q, q);
        c.perm = def.perm & !perm::INHERIT;
        c
    };
    match core.create_topic(conf) {
        Ok(_) => {
            let t = core.store.topic(topic).ok_or_else(not_exist)?;
            // Deleted again in between: the counters of a topic that is gone.
            let counters = core.topics.get_perm_counted(topic).map(|(_, c)| c).unwrap_or_default();
            Ok((t, counters))
        }
        Err(e) => Err(store_refusal(&e)),
    }
}

/// The properties to store: the client's, plus a `UNIQ_KEY` if it sent none.
fn with_uniq_key<'a>(core: &Core, props: &'a [u8]) -> Cow<'a, [u8]> {
    if properties::find(props, properties::UNIQ_KEY).is_some() {
        return Cow::Borrowed(props);
    }
    let mut v = props.to_vec();
    let _ = properties::write_pair(&mut v, properties::UNIQ_KEY, &core.new_uniq_key());
    Cow::Owned(v)
}

/// Which queue of the topic a message goes to.
#[derive(Debug, Clone, Copy)]
// Only the gRPC face sends with a message group or without a queue of its own.
#[cfg_attr(not(feature = "grpc"), allow(dead_code))]
pub(crate) enum QueueChoice<'a> {
    /// The client's choice (remoting); a negative id asks for round-robin.
    Asked(i32),
    /// Derived from a message group (gRPC FIFO): the same group always lands on the same
    /// queue while the topic's queue count stays the same.
    Group(&'a str),
    /// Round-robin.
    Any,
}

/// Picks the queue (see [`QueueChoice`]).
fn pick_queue(topic: &dyn TopicStore, choice: QueueChoice<'_>) -> Result<u32, Refusal> {
    let queues = topic.queue_count().max(1);
    let round_robin = || {
        // Relaxed: only spreads sends; no ordering with anything else.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % queues
    };
    match choice {
        QueueChoice::Any => Ok(round_robin()),
        QueueChoice::Asked(asked) if asked < 0 => Ok(round_robin()),
        QueueChoice::Group(group) => Ok(group_queue(group, queues)),
        QueueChoice::Asked(asked) => {
            u32::try_from(asked).ok().filter(|q| *q < queues).ok_or_else(|| {
                Refusal::new(
                    response_code::SYSTEM_ERROR,
                    format!(
                        "request queueId[{asked}] is illegal, topic:[{}] queueNums:[{queues}]",
                        topic.name()
                    ),
                )
            })
        }
    }
}

/// The queue a message group maps to: FNV-1a over the group's bytes, modulo the queue count.
/// Deterministic across processes and restarts (unlike `std`'s randomly keyed hasher), so a
/// group keeps its queue, and its order, as long as the topic keeps its queue count.
pub(crate) fn group_queue(group: &str, queues: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in group.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(queues.max(1))) as u32
}

/// One message to store, as either protocol received it.
#[derive(Debug)]
pub(crate) struct Incoming<'a> {
    /// The topic it is sent to.
    pub(crate) topic: &'a str,
    /// The template topic for auto-creation (`""`: `TBW102`).
    pub(crate) default_topic: &'a str,
    /// Queues an auto-created topic gets at most.
    pub(crate) default_queues: i32,
    /// The queue it goes to.
    pub(crate) queue: QueueChoice<'a>,
    /// The message flag.
    pub(crate) flag: i32,
    /// The sys flag (compression, transaction type).
    pub(crate) sys_flag: i32,
    /// When the producer made it, ms.
    pub(crate) born_timestamp: i64,
    /// The producer's address.
    pub(crate) born_host: std::net::SocketAddr,
    /// Times it was consumed before (a retry's).
    pub(crate) reconsume_times: i32,
    /// Retries of a message sent to a retry topic before it goes to the dead-letter queue.
    pub(crate) max_reconsume_times: i32,
    /// The body as sent.
    pub(crate) body: &'a [u8],
    /// The properties as sent (RocketMQ's `name\x01value\x02` string).
    pub(crate) properties: &'a [u8],
}

/// Where a message was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// The offset message id (RocketMQ's `msgId`) of the stored copy.
    pub(crate) msg_id: String,
    /// The queue of the topic it was sent to.
    pub(crate) queue_id: u32,
    /// Its offset in the queue it was stored in (a half or timer message's in the internal
    /// topic, as RocketMQ answers).
    pub(crate) queue_offset: u64,
    /// Its `UNIQ_KEY` (the client's, or the one the broker added).
    pub(crate) uniq_key: String,
    /// Whether it is a half (transactional) message; its transaction id is `uniq_key`.
    pub(crate) half: bool,
}

/// Stores one message: the checks, topic resolution (and auto-creation), queue choice, a
/// retry past its maximum to the dead-letter queue, a half message to the transaction
/// table, a timer or delayed message to its wait, and the topic's counters. The one send path
/// of the remoting `SEND_MESSAGE`s and of gRPC `SendMessage`.
///
/// # Errors
/// RocketMQ's response code and remark for a refused message (see [`Refusal`]).
pub(crate) fn store_message(core: &Core, m: &Incoming<'_>) -> Result<Stored, Refusal> {
    check(core, m.topic, m.body.len(), m.properties.len())?;
    let (topic, counters) = resolve_topic(core, m.topic, m.default_topic, m.default_queues)?;
    let queue = pick_queue(topic.as_ref(), m.queue)?;
    let mut props = with_uniq_key(core, m.properties);
    let (mut topic, mut queue) = (topic, queue);
    if m.topic.starts_with(RETRY_PREFIX) && m.reconsume_times > m.max_reconsume_times {
        // A retry the client sent itself (its send-back failed), past the group's maximum:
        // to the dead-letter queue, undelayed, as RocketMQ does.
        let dlq = format!("{DLQ_PREFIX}{}", &m.topic[RETRY_PREFIX.len()..]);
        match group_topic(core, &dlq) {
            Ok(t) => (topic, queue) = (t, 0),
            Err(e) => return Err(store_refusal(&e)),
        }
        props = Cow::Owned(delay::rewrite_properties(&props, &[properties::DELAY], &[]));
    }
    // A half message waits for its producer's decision in the half topic; its timer
    // properties (if any) stay as sent (the producer clears any delay level first).
    let half = transaction::is_half(m.sys_flag, &props);
    if half && transaction::producer_group(&props).is_none() {
        return Err(Refusal::new(
            response_code::MESSAGE_ILLEGAL,
            "a transactional (half) message needs the PGROUP property",
        ));
    }
    let wait = if half {
        Wait::No
    } else {
        match timer::wait_of(&mut props, now_ms(), core.config.timer_max_delay_sec) {
            Ok(w) => w,
            Err(remark) => return Err(Refusal::new(response_code::MESSAGE_ILLEGAL, remark)),
        }
    };
    let rec = NewRecord {
        flag: m.flag,
        sys_flag: m.sys_flag,
        born_timestamp: m.born_timestamp,
        born_host: m.born_host,
        reconsume_times: m.reconsume_times,
        body: m.body,
        properties: &props,
    };
    // A half, delayed or timer message waits in an internal topic; the producer gets that
    // copy's id and offset, as from RocketMQ.
    let stored = if half {
        transaction::prepare(core, topic.name(), queue, &rec).map(|(u, o)| (u, 0, o))
    } else {
        timer::store(core, wait, &topic, queue, &rec)
    };
    match stored {
        Ok((uid, stored_queue, offset)) => {
            counters.message_in(m.body.len());
            Ok(Stored {
                msg_id: encode_offset_msg_id(
                    core.store_host,
                    physical_offset(uid, stored_queue, offset),
                ),
                queue_id: queue,
                queue_offset: offset,
                uniq_key: properties::find(&props, properties::UNIQ_KEY)
                    .unwrap_or_default()
                    .to_owned(),
                half,
            })
        }
        Err(e) => Err(put_refusal(&e)),
    }
}

fn send_one(core: &Arc<Core>, ctx: &ConnCtx, req: &RemotingCommand) -> Reply {
    let h = match header(req) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let max_reconsume_times = if h.topic.starts_with(RETRY_PREFIX) {
        retry::max_reconsume(req, h.max_reconsume_times)
    } else {
        i32::MAX
    };
    let m = Incoming {
        topic: h.topic,
        default_topic: h.default_topic,
        default_queues: h.default_topic_queue_nums,
        queue: QueueChoice::Asked(h.queue_id),
        flag: h.flag,
        sys_flag: h.sys_flag,
        born_timestamp: h.born_timestamp,
        born_host: ctx.peer,
        reconsume_times: h.reconsume_times,
        max_reconsume_times,
        body: &req.body,
        properties: h.properties.as_bytes(),
    };
    match store_message(core, &m) {
        Ok(stored) => {
            let resp = SendMessageResponseHeader {
                msg_id: stored.msg_id,
                queue_id: stored.queue_id as i32,
                queue_offset: stored.queue_offset as i64,
                transaction_id: stored.half.then_some(stored.uniq_key),
                batch_uniq_id: None,
            };
            Reply::now(ok(req, resp.to_ext_fields()))
        }
        Err(r) => r.reply(req),
    }
}

fn send_batch(core: &Arc<Core>, ctx: &ConnCtx, req: &RemotingCommand) -> Reply {
    let h = match header(req) {
        Ok(h) => h,
        Err(r) => return r,
    };
    if h.topic.starts_with(RETRY_PREFIX) {
        return reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!("batch request does not support retry group {}", quote(h.topic)),
        );
    }
    if h.topic.len() > 127 {
        return reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!("message topic length too long {}", h.topic.len()),
        );
    }
    // RocketMQ checks the whole batch body, not each entry, against maxMessageSize; checking it
    // before decoding also bounds what decoding allocates.
    if let Err(r) = check(core, h.topic, req.body.len(), h.properties.len()) {
        return r.reply(req);
    }
    if transaction::is_half(h.sys_flag, h.properties.as_bytes()) {
        return reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            "a batch cannot carry transactional (half) messages".into(),
        );
    }
    let entries = match decode_batch(&req.body) {
        Ok(e) if !e.is_empty() => e,
        Ok(_) => {
            return reply_error(req, response_code::MESSAGE_ILLEGAL, "the batch is empty".into())
        }
        Err(e) => {
            return reply_error(req, response_code::MESSAGE_ILLEGAL, format!("bad batch body: {e}"))
        }
    };
    if entries.len() > MAX_BATCH_ENTRIES {
        return reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!(
                "the batch has {} messages; at most {MAX_BATCH_ENTRIES} are accepted",
                entries.len()
            ),
        );
    }
    if let Some(e) = entries.iter().find(|e| e.properties.len() > MAX_PROPERTIES_LEN) {
        return reply_error(
            req,
            response_code::MESSAGE_ILLEGAL,
            format!(
                "the message properties size {} exceeds the maximum {MAX_PROPERTIES_LEN} bytes",
                e.properties.len()
            ),
        );
    }
    let (topic, counters) =
        match resolve_topic(core, h.topic, h.default_topic, h.default_topic_queue_nums) {
            Ok(t) => t,
            Err(r) => return r.reply(req),
        };
    let queue = match pick_queue(topic.as_ref(), QueueChoice::Asked(h.queue_id)) {
        Ok(q) => q,
        Err(r) => return r.reply(req),
    };
    let records: Result<Vec<(Bytes, i32)>, _> = entries
        .iter()
        .map(|e| {
            let props = with_uniq_key(core, &e.properties);
            let tag = properties::tags_code(&props);
            let rec = NewRecord {
                flag: e.flag,
                sys_flag: h.sys_flag,
                born_timestamp: h.born_timestamp,
                born_host: ctx.peer,
                reconsume_times: h.reconsume_times,
                body: &e.body,
                properties: &props,
            };
            record::encode(&rec, core.cluster_property.len()).map(|rec| (rec, tag))
        })
        .collect();
    let records = match records {
        Ok(r) => r,
        Err(e) => return put_refusal(&PutError::Record(e)).reply(req),
    };
    let n = records.len() as u64;
    match topic.append_batch(queue, records, now_ms()) {
        Ok(first) => {
            for e in &entries {
                counters.message_in(e.body.len());
            }
            let ids: Vec<String> = (first..first + n)
                .map(|o| {
                    encode_offset_msg_id(core.store_host, physical_offset(topic.uid(), queue, o))
                })
                .collect();
            let resp = SendMessageResponseHeader {
                msg_id: ids.join(","),
                queue_id: queue as i32,
                queue_offset: first as i64,
                transaction_id: None,
                batch_uniq_id: None,
            };
            Reply::now(ok(req, resp.to_ext_fields()))
        }
        Err(e) => store_error(req, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::group_queue;

    #[test]
    fn given_a_message_group_when_picking_its_queue_should_be_stable_and_spread() {
        assert_eq!(
            group_queue("order-42", 8),
            group_queue("order-42", 8),
            "same group, same queue"
        );
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c: a fixed value, whatever the process.
        assert_eq!(group_queue("a", 1 << 31), (0xaf63_dc4c_8601_ec8c_u64 % (1 << 31)) as u32);
        let used: std::collections::BTreeSet<u32> =
            (0..64).map(|i| group_queue(&format!("group-{i}"), 8)).collect();
        assert!(used.len() >= 6, "64 groups spread over most of 8 queues: {used:?}");
        assert_eq!(group_queue("x", 0), 0, "a topic without queues cannot divide by zero");
    }
}
