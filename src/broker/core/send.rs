//! Sending, whatever the protocol: the one send path of the remoting `SEND_MESSAGE`s and
//! `SEND_BATCH_MESSAGE`, and of gRPC `SendMessage`.
//!
//! [`store_message`] checks a message (topic name and permission, body and properties size),
//! resolves its topic (creating it from `TBW102` when auto-creation allows), picks its queue,
//! adds a `UNIQ_KEY` when the producer sent none, sends a retry past its maximum to the
//! dead-letter queue, parks a half message in the transaction table and a delayed or timer
//! message in its wait, appends the rest, and counts it. It decides on the message's
//! [`Routing`] view, which the face built once; the properties string is stored as the
//! producer sent it (plus what the broker adds).
//!
//! A refusal is a [`SendError`]; each face maps it to its own code (remoting:
//! `processor::send`, gRPC: `grpc::status`). Its `Display` is RocketMQ's remark, which both
//! faces show. A send refused for lack of memory is counted here, once
//! ([`Counters::sends_rejected`](super::counters::Counters::sends_rejected)).

use std::borrow::Cow;
use std::net::SocketAddr;

use bytes::Bytes;

use super::counters::TopicCounters;
use super::delay::rewrite_properties;
use super::record::{self, physical_offset, NewRecord, PutError, RecordError};
use super::retry::group_topic;
use super::timer::{self, Wait};
use super::topics::{self, perm, AUTO_CREATE_TOPIC, DLQ_PREFIX, RETRY_PREFIX};
use super::transaction;
use super::Core;
use crate::remoting::body::TopicConfig;
use crate::remoting::error::quote;
use crate::remoting::message::BatchEntry;
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::properties::{self, Routing, MAX_PROPERTIES_LEN};
use crate::store::{StoreError, TopicStore};
use crate::sync::{Arc, Ordering};
use crate::time::now_ms;

/// Why a message was not stored. `Display` is the remark RocketMQ words it with (where it has
/// one), which both faces show as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SendError {
    /// The topic name breaks RocketMQ's rule (the rule's wording).
    InvalidTopic(String),
    /// Clients may not send to this topic (an internal one).
    Forbidden(String),
    /// The body is over `max-message-size`.
    BodyTooLarge {
        /// Its size, bytes.
        size: usize,
        /// The maximum.
        max: usize,
    },
    /// The properties are over their 16-bit length.
    PropertiesTooLarge(usize),
    /// The topic does not exist and may not be created.
    UnknownTopic(String),
    /// A queue id the topic does not have.
    BadQueue {
        /// The topic.
        topic: String,
        /// The queue asked for.
        asked: i32,
        /// Its queue count.
        queues: u32,
    },
    /// A half message without `PGROUP`.
    NoProducerGroup,
    /// A timer the broker refuses (RocketMQ's wording).
    IllegalTimer(String),
    /// The record could not be written out again (properties too long with the broker's own).
    Record(RecordError),
    /// The store refused it (a full budget among others).
    Store(StoreError),
    /// This broker cannot store it now, but another may: a follower of a broker set, or a set
    /// that cannot reach a quorum (RocketMQ's `SERVICE_NOT_AVAILABLE`, which producers retry
    /// on another broker).
    Unavailable(String),
}

/// The remark RocketMQ answers a store error with (a few have their own wording).
pub(crate) fn store_remark(e: &StoreError) -> String {
    match e {
        StoreError::UnknownTopic(t) => not_exist(t),
        StoreError::Full { used, budget } => format!(
            "[REJECT]system busy, start flow control for a while: baiji's memory budget is exhausted ({used} of {budget} bytes in use)"
        ),
        other => other.to_string(),
    }
}

fn not_exist(topic: &str) -> String {
    format!(
        "topic[{}] not exist, apply first please! https://rocketmq.apache.org/docs/bestPractice/06FAQ",
        quote(topic)
    )
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::InvalidTopic(remark) | SendError::IllegalTimer(remark) => {
                f.write_str(remark)
            }
            SendError::Forbidden(t) => {
                write!(f, "Sending message to topic[{}] is forbidden.", quote(t))
            }
            SendError::BodyTooLarge { size, max } => {
                write!(f, "the message body size {size} exceeds the maximum {max} bytes")
            }
            SendError::PropertiesTooLarge(size) => write!(
                f,
                "the message properties size {size} exceeds the maximum {MAX_PROPERTIES_LEN} bytes"
            ),
            SendError::UnknownTopic(t) => f.write_str(&not_exist(t)),
            SendError::BadQueue { topic, asked, queues } => write!(
                f,
                "request queueId[{asked}] is illegal, topic:[{topic}] queueNums:[{queues}]"
            ),
            SendError::NoProducerGroup => {
                f.write_str("a transactional (half) message needs the PGROUP property")
            }
            SendError::Record(e) => write!(f, "{e}"),
            SendError::Store(e) => f.write_str(&store_remark(e)),
            SendError::Unavailable(why) => write!(f, "service not available now: {why}"),
        }
    }
}

impl std::error::Error for SendError {}

impl From<PutError> for SendError {
    fn from(e: PutError) -> Self {
        match e {
            PutError::Record(e) => SendError::Record(e),
            PutError::Store(e) => SendError::Store(e),
        }
    }
}

impl From<StoreError> for SendError {
    fn from(e: StoreError) -> Self {
        SendError::Store(e)
    }
}

/// The checks every send makes before storing: topic name and permission, body and
/// properties size.
///
/// # Errors
/// [`SendError::InvalidTopic`], [`SendError::Forbidden`], [`SendError::BodyTooLarge`],
/// [`SendError::PropertiesTooLarge`].
pub(crate) fn check(
    core: &Core,
    topic: &str,
    body_len: usize,
    properties_len: usize,
) -> Result<(), SendError> {
    topics::validate_topic(topic).map_err(SendError::InvalidTopic)?;
    if !topics::send_allowed(topic) {
        return Err(SendError::Forbidden(topic.to_owned()));
    }
    let max = core.config.max_message_size;
    if body_len > max {
        return Err(SendError::BodyTooLarge { size: body_len, max });
    }
    if properties_len > MAX_PROPERTIES_LEN {
        return Err(SendError::PropertiesTooLarge(properties_len));
    }
    Ok(())
}

/// The topic a send goes to, created from `TBW102` if it does not exist yet and
/// auto-creation is on (RocketMQ's rules: at most `defaultTopicQueueNums` and the template's
/// queue count; retry topics get one queue).
///
/// # Errors
/// [`SendError::UnknownTopic`], or the store's refusal to create it.
pub(crate) fn resolve_topic(
    core: &Core,
    topic: &str,
    default_topic: &str,
    default_queues: i32,
) -> Result<(Arc<dyn TopicStore>, Arc<TopicCounters>), SendError> {
    if let Some((_, counters)) = core.topics.get_perm_counted(topic) {
        if let Some(t) = core.store.topic(topic) {
            return Ok((t, counters));
        }
    }
    let not_exist = || SendError::UnknownTopic(topic.to_owned());
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
        if core.topics.len() >= core.auto_create_limit {
            // review-e77444b L2: auto-creation (any valid name a send or a gRPC route query
            // gives) could use up every topic uid, and then no `%RETRY%` or `%DLQ%` topic
            // could be made: send-backs refused, dead letters kept in flight for ever.
            tracing::warn!(%topic, limit = core.auto_create_limit, "topic not auto-created: the broker holds as many topics as auto-creation may make; the rest are kept for retry and dead-letter topics");
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
    core.create_topic(conf)?;
    let t = core.store.topic(topic).ok_or_else(not_exist)?;
    // Deleted again in between: the counters of a topic that is gone.
    let counters = core.topics.get_perm_counted(topic).map(|(_, c)| c).unwrap_or_default();
    Ok((t, counters))
}

/// Topic uids kept for `%RETRY%` and `%DLQ%` topics (and admin-created ones): auto-creation
/// stops this far below [`MAX_TOPIC_UID`](crate::store::MAX_TOPIC_UID) (review-e77444b L2).
pub(crate) const TOPIC_UID_RESERVE: usize = 16_384;

/// Most topics the broker holds before auto-creation is refused.
pub(crate) const AUTO_CREATE_TOPIC_LIMIT: usize =
    crate::store::MAX_TOPIC_UID as usize - TOPIC_UID_RESERVE;

/// The properties to store and the message's `UNIQ_KEY`: the client's, or one the broker adds
/// when it sent none.
fn with_uniq_key<'a>(
    core: &Core,
    props: &'a [u8],
    sent: Option<&'a str>,
) -> (Cow<'a, [u8]>, Cow<'a, str>) {
    if let Some(uniq) = sent {
        return (Cow::Borrowed(props), Cow::Borrowed(uniq));
    }
    let uniq = core.new_uniq_key();
    let mut v = props.to_vec();
    let _ = properties::write_pair(&mut v, properties::UNIQ_KEY, &uniq);
    (Cow::Owned(v), Cow::Owned(uniq))
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
fn pick_queue(topic: &dyn TopicStore, choice: QueueChoice<'_>) -> Result<u32, SendError> {
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
        QueueChoice::Asked(asked) => u32::try_from(asked)
            .ok()
            .filter(|q| *q < queues)
            .ok_or_else(|| SendError::BadQueue { topic: topic.name().to_owned(), asked, queues }),
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

/// One message to store, as either face received it.
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
    pub(crate) born_host: SocketAddr,
    /// Times it was consumed before (a retry's).
    pub(crate) reconsume_times: i32,
    /// Retries of a message sent to a retry topic before it goes to the dead-letter queue.
    pub(crate) max_reconsume_times: i32,
    /// The body as sent.
    pub(crate) body: &'a [u8],
    /// The properties as sent (RocketMQ's `name\x01value\x02` string).
    pub(crate) properties: &'a [u8],
    /// The view of `properties` the send routes on (built once, by the face).
    pub(crate) routing: Routing<'a>,
}

impl Incoming<'_> {
    /// The record to store for this message, with `properties` as they are stored.
    fn record<'p>(&'p self, properties: &'p [u8]) -> NewRecord<'p> {
        NewRecord {
            flag: self.flag,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
            reconsume_times: self.reconsume_times,
            body: self.body,
            properties,
        }
    }
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
    /// The recall handle of a timer message ([`recall`](super::recall)); `None` for any other.
    pub(crate) recall_handle: Option<String>,
}

/// Counts a send refused for lack of memory (the one place it is counted).
fn counted<T>(core: &Core, r: Result<T, SendError>) -> Result<T, SendError> {
    if let Err(SendError::Store(StoreError::Full { .. })) = &r {
        // Relaxed: a statistic.
        core.counters.sends_rejected.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// Stores one message (see the module docs).
///
/// # Errors
/// [`SendError`] for a refused message.
pub(crate) fn store_message(core: &Core, m: &Incoming<'_>) -> Result<Stored, SendError> {
    // A broker set's sends go through `replica::Replica::send` ([`send`]); this path (replies)
    // is not replicated yet.
    core.unreplicated("sends on this path are").map_err(SendError::Unavailable)?;
    counted(core, store_one(core, m))
}

/// Stores one message wherever this broker stores: through its broker set when it is a
/// replica of one ([`replica::Replica::send`](super::replica)), else as [`store_message`].
///
/// # Errors
/// [`SendError`] for a refused message.
// Only the gRPC face awaits a send (the remoting face answers from its own task).
#[cfg_attr(not(feature = "grpc"), allow(dead_code))]
pub(crate) async fn send(core: &Core, m: &Incoming<'_>) -> Result<Stored, SendError> {
    #[cfg(feature = "replicas")]
    if let Some(replica) = core.replica() {
        return replica.send(core, m).await;
    }
    store_message(core, m)
}

fn store_one(core: &Core, m: &Incoming<'_>) -> Result<Stored, SendError> {
    check(core, m.topic, m.body.len(), m.properties.len())?;
    let (mut topic, counters) = resolve_topic(core, m.topic, m.default_topic, m.default_queues)?;
    let mut queue = pick_queue(topic.as_ref(), m.queue)?;
    let mut routing = m.routing;
    let (mut props, mut uniq) = with_uniq_key(core, m.properties, routing.uniq_key);
    let rewritten: Vec<u8>;
    if m.topic.starts_with(RETRY_PREFIX) && m.reconsume_times > m.max_reconsume_times {
        // A retry the client sent itself (its send-back failed), past the group's maximum:
        // to the dead-letter queue, undelayed, as RocketMQ does.
        let dlq = format!("{DLQ_PREFIX}{}", &m.topic[RETRY_PREFIX.len()..]);
        (topic, queue) = (group_topic(core, &dlq)?, 0);
        // Rewriting drops ill-formed pairs too: what follows routes on the string as stored.
        rewritten = rewrite_properties(&props, &[properties::DELAY], &[]);
        routing = Routing::parse(&rewritten);
        uniq = Cow::Owned(routing.uniq_key.unwrap_or_default().to_owned());
        props = Cow::Borrowed(&rewritten);
    }
    // A half message waits for its producer's decision in the half topic; its timer
    // properties (if any) stay as sent (the producer clears any delay level first).
    let half = transaction::is_half(m.sys_flag, &routing);
    if half && transaction::producer_group(&routing).is_none() {
        return Err(SendError::NoProducerGroup);
    }
    let wait = if half {
        Wait::No
    } else {
        timer::wait_of(&mut props, &routing, now_ms(), core.config.timer_max_delay_sec)
            .map_err(SendError::IllegalTimer)?
    };
    let rec = m.record(&props);
    // A half, delayed or timer message waits in an internal topic; the producer gets that
    // copy's id and offset, as from RocketMQ.
    let (uid, stored_queue, offset) = if half {
        let (u, o) = transaction::prepare(core, topic.name(), queue, &rec, &routing, &uniq)?;
        (u, 0, o)
    } else {
        timer::store(core, wait, &topic, queue, &rec, routing.tags_code())?
    };
    counters.message_in(m.body.len());
    // As `SendMessageProcessor`: a timer message, unless it is a retry, can be recalled.
    let recall_handle = match wait {
        Wait::Until(due) if !topic.name().starts_with(RETRY_PREFIX) => {
            Some(super::recall::handle_for(core, topic.name(), due, &uniq))
        }
        _ => None,
    };
    counters.put_request();
    Ok(Stored {
        msg_id: encode_offset_msg_id(core.store_host, physical_offset(uid, stored_queue, offset)),
        queue_id: queue,
        queue_offset: offset,
        uniq_key: uniq.into_owned(),
        half,
        recall_handle,
    })
}

/// A batch of messages to store in one queue, all or none (remoting's `SEND_BATCH_MESSAGE`;
/// its face has checked the batch as a whole).
#[derive(Debug)]
pub(crate) struct Batch<'a> {
    /// The topic it is sent to.
    pub(crate) topic: &'a str,
    /// The template topic for auto-creation (`""`: `TBW102`).
    pub(crate) default_topic: &'a str,
    /// Queues an auto-created topic gets at most.
    pub(crate) default_queues: i32,
    /// The queue the client asked for (negative: round-robin).
    pub(crate) queue: i32,
    /// The sys flag of every message.
    pub(crate) sys_flag: i32,
    /// When the producer made them, ms.
    pub(crate) born_timestamp: i64,
    /// The producer's address.
    pub(crate) born_host: SocketAddr,
    /// Times they were consumed before.
    pub(crate) reconsume_times: i32,
    /// The messages.
    pub(crate) entries: &'a [BatchEntry],
}

/// Where a batch was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredBatch {
    /// The queue.
    pub(crate) queue_id: u32,
    /// The offset of its first message.
    pub(crate) first_offset: u64,
    /// Every message's offset message id, in order.
    pub(crate) msg_ids: Vec<String>,
}

/// Stores a batch: resolves its topic and queue, adds a `UNIQ_KEY` to each message that has
/// none, appends them with consecutive offsets, and counts them.
///
/// # Errors
/// [`SendError`] (nothing is stored then).
pub(crate) fn store_batch(core: &Core, b: &Batch<'_>) -> Result<StoredBatch, SendError> {
    counted(core, store_all(core, b))
}

fn store_all(core: &Core, b: &Batch<'_>) -> Result<StoredBatch, SendError> {
    let (topic, counters) = resolve_topic(core, b.topic, b.default_topic, b.default_queues)?;
    let queue = pick_queue(topic.as_ref(), QueueChoice::Asked(b.queue))?;
    let records = encode_batch(core, b)?;
    let n = records.len() as u64;
    let first = topic.append_batch(queue, records, now_ms())?;
    for e in b.entries {
        counters.message_in(e.body.len());
    }
    counters.put_request();
    let msg_ids = (first..first + n)
        .map(|o| encode_offset_msg_id(core.store_host, physical_offset(topic.uid(), queue, o)))
        .collect();
    Ok(StoredBatch { queue_id: queue, first_offset: first, msg_ids })
}

/// A plain message (or batch) the leader of a broker set has decided on before the set holds
/// it: the encoded records, their topic and queue. Applying appends them as they are, so every
/// replica stores the same bytes at the same offsets ([`replica`](super::replica)).
#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
pub(crate) struct Planned {
    /// The topic.
    pub(crate) topic: Arc<dyn TopicStore>,
    counters: Arc<TopicCounters>,
    /// The queue.
    pub(crate) queue: u32,
    /// The encoded records with their tag hash codes.
    pub(crate) records: Vec<(Bytes, i32)>,
    /// The first message's `UNIQ_KEY`.
    uniq_key: String,
    /// Body bytes in all (the counters').
    body_bytes: Vec<usize>,
}

/// What a broker set does not replicate yet: refused there, never stored unreplicated.
#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
fn not_replicated(what: &str) -> SendError {
    SendError::Unavailable(super::not_replicated_remark(&format!("{what} are")))
}

/// Decides how a plain message is stored (the checks, topic, queue and `UNIQ_KEY` of
/// [`store_message`]) without storing it. Half, delayed and timer messages, and retries past
/// their maximum, are refused with [`SendError::Unavailable`].
///
/// # Errors
/// [`SendError`] for a refused message.
#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
pub(crate) fn plan_message(core: &Core, m: &Incoming<'_>) -> Result<Planned, SendError> {
    counted(core, plan_one(core, m))
}

#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
fn plan_one(core: &Core, m: &Incoming<'_>) -> Result<Planned, SendError> {
    check(core, m.topic, m.body.len(), m.properties.len())?;
    let (topic, counters) = resolve_topic(core, m.topic, m.default_topic, m.default_queues)?;
    let queue = pick_queue(topic.as_ref(), m.queue)?;
    let routing = m.routing;
    let (mut props, uniq) = with_uniq_key(core, m.properties, routing.uniq_key);
    if m.topic.starts_with(RETRY_PREFIX) && m.reconsume_times > m.max_reconsume_times {
        return Err(not_replicated("dead letters"));
    }
    if transaction::is_half(m.sys_flag, &routing) {
        return Err(not_replicated("transactional (half) messages"));
    }
    let wait = timer::wait_of(&mut props, &routing, now_ms(), core.config.timer_max_delay_sec)
        .map_err(SendError::IllegalTimer)?;
    if wait != Wait::No {
        return Err(not_replicated("delayed and timer messages"));
    }
    let rec = m.record(&props);
    let encoded = record::encode(&rec, core.cluster_property.len()).map_err(SendError::Record)?;
    Ok(Planned {
        topic,
        counters,
        queue,
        records: vec![(encoded, routing.tags_code())],
        uniq_key: uniq.into_owned(),
        body_bytes: vec![m.body.len()],
    })
}

/// [`store_batch`]'s decisions without storing (see [`plan_message`]).
///
/// # Errors
/// [`SendError`] (nothing is stored then).
#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
pub(crate) fn plan_batch(core: &Core, b: &Batch<'_>) -> Result<Planned, SendError> {
    counted(core, plan_all(core, b))
}

#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
fn plan_all(core: &Core, b: &Batch<'_>) -> Result<Planned, SendError> {
    let (topic, counters) = resolve_topic(core, b.topic, b.default_topic, b.default_queues)?;
    let queue = pick_queue(topic.as_ref(), QueueChoice::Asked(b.queue))?;
    let records = encode_batch(core, b)?;
    let body_bytes = b.entries.iter().map(|e| e.body.len()).collect();
    Ok(Planned { topic, counters, queue, records, uniq_key: String::new(), body_bytes })
}

/// Each message of a batch encoded (with a `UNIQ_KEY` added where it has none), with its tag
/// hash code.
fn encode_batch(core: &Core, b: &Batch<'_>) -> Result<Vec<(Bytes, i32)>, SendError> {
    let records: Result<Vec<(Bytes, i32)>, RecordError> = b
        .entries
        .iter()
        .map(|e| {
            let routing = Routing::parse(&e.properties);
            let (props, _) = with_uniq_key(core, &e.properties, routing.uniq_key);
            let rec = NewRecord {
                flag: e.flag,
                sys_flag: b.sys_flag,
                born_timestamp: b.born_timestamp,
                born_host: b.born_host,
                reconsume_times: b.reconsume_times,
                body: &e.body,
                properties: &props,
            };
            record::encode(&rec, core.cluster_property.len()).map(|r| (r, routing.tags_code()))
        })
        .collect();
    records.map_err(SendError::Record)
}

impl Planned {
    /// Counts what was stored at `first` of topic `uid` and says where it is, as
    /// [`store_message`] answers.
    #[cfg_attr(not(feature = "replicas"), allow(dead_code))]
    pub(crate) fn stored(self, core: &Core, uid: u32, first: u64) -> Stored {
        self.count();
        Stored {
            msg_id: encode_offset_msg_id(core.store_host, physical_offset(uid, self.queue, first)),
            queue_id: self.queue,
            queue_offset: first,
            uniq_key: self.uniq_key,
            half: false,
            recall_handle: None,
        }
    }

    /// The same for a batch, as [`store_batch`] answers.
    #[cfg_attr(not(feature = "replicas"), allow(dead_code))]
    pub(crate) fn stored_batch(self, core: &Core, uid: u32, first: u64) -> StoredBatch {
        self.count();
        let n = self.records.len() as u64;
        let msg_ids = (first..first + n)
            .map(|o| encode_offset_msg_id(core.store_host, physical_offset(uid, self.queue, o)))
            .collect();
        StoredBatch { queue_id: self.queue, first_offset: first, msg_ids }
    }

    fn count(&self) {
        for len in &self.body_bytes {
            self.counters.message_in(*len);
        }
        self.counters.put_request();
    }
}

#[cfg(test)]
mod tests {
    use super::{group_queue, resolve_topic, SendError};
    use crate::broker::core::Core;
    use crate::broker::BrokerConfig;
    use crate::store::MemoryStore;
    use crate::sync::Arc;

    #[test]
    fn given_the_auto_create_limit_when_one_more_topic_would_be_made_should_refuse_it_but_make_retry_topics(
    ) {
        // review-e77444b L2: auto-creation could use up every topic uid; %RETRY% and %DLQ%
        // topics could then no longer be made.
        let config = BrokerConfig::default();
        let store = MemoryStore::new(config.engine_config().expect("an engine config"));
        let store: Arc<dyn crate::store::Store> = Arc::new(store.expect("a store"));
        let mut core = Core::new(config.core, store, "127.0.0.1:10911".parse().expect("an addr"));
        core.open();
        core.auto_create_limit = core.topics.len() + 2;
        resolve_topic(&core, "Auto1", "", 4).expect("under the limit");
        resolve_topic(&core, "Auto2", "", 4).expect("at the limit");
        let refused = resolve_topic(&core, "Auto3", "", 4);
        assert!(matches!(refused, Err(SendError::UnknownTopic(_))), "{refused:?}");
        resolve_topic(&core, "%RETRY%some_group", "", 1).expect("retry topics use the reserve");
        assert!(core.topics.get("Auto3").is_none());
    }

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
