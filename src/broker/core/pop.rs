//! POP consumption independent of the protocol: what `POP_MESSAGE` (remoting) and
//! `ReceiveMessage` (gRPC) both do, so that the two faces pop, filter, dead-letter and wait
//! the same way.
//!
//! * [`pop_once`] checks the topic, its read permission and the group, pops every queue asked
//!   for (from a different first queue each time, as RocketMQ's `randomQ % readQueueNums`)
//!   and the group's pop retry topic, revives what expired, moves the messages whose attempts
//!   ran out to `%DLQ%<group>` and acknowledges the ones a SQL92 expression rejects (RocketMQ
//!   acknowledges what the filter drops). It returns the rest with their receipts
//!   `(queue, offset, pop time)`, or, when nothing was found, what to wait for.
//!
//! # Revival (review-e77444b H7)
//!
//! An unordered pop revives as RocketMQ's `PopReviveService` does: a popped message whose
//! invisible time ran out is copied into the group's pop retry topic
//! `%RETRY%<group>_<topic>` (one queue; [`topics::pop_retry_topic`]) with its reconsume count
//! one higher, `RETRY_TOPIC` and `ORIGIN_MESSAGE_ID` set and its message id kept, and only
//! then acknowledged in its own queue, which therefore moves on: one failing message no longer
//! holds every later message of its queue in memory for attempts x invisible time. Every pop
//! of the topic also pops the retry topic (first one time in five, as RocketMQ's
//! `PopMessageProcessor` alternates, else with the room left), so a revived message comes back
//! to the same group. The group holds the retry topic (it is subscribed before the first copy
//! is stored); the faces show its messages under the topic popped and give them receipts
//! naming the retry topic, as RocketMQ's do (`ExtraInfoUtil.getRealTopic`). A copy that fails
//! (no memory, no topic uid) leaves the message in flight, tried again after
//! [`DEAD_LETTER_RETRY_MS`]: nothing is acknowledged before its copy is stored. Once a
//! message was delivered `max_attempts` times (its stored reconsume count plus this
//! delivery), it goes to `%DLQ%<group>` instead. Ordered pops redeliver from the message's
//! own queue (order would be lost otherwise, and RocketMQ does the same), as does a pop whose
//! retry topic name would be longer than a topic name may be.
//! * [`wait_for_more`] is the long poll between two [`pop_once`]: it resolves when a message
//!   is appended to a popped queue or an in-flight one becomes visible again.
//! * [`dead_letter`] and [`forward_to_dlq`] copy a popped message into `%DLQ%<group>`.
//!
//! Writing the messages out (remoting's batch body, gRPC's `Message`) and the answer codes
//! stay with each protocol.

use crate::sync::Arc;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::clients::filter_of;
use super::counters::{Pulled, TopicCounters};
use super::delay::rewrite_properties;
use super::filter::{self, SQL92};
use super::groups::GroupError;
use super::record::{self, physical_offset, NewRecord};
use super::topics::{self, DLQ_PREFIX};
use super::wait::AppendWait;
use super::{Core, Unreadable};
use crate::remoting::msgid::encode_offset_msg_id;
use crate::remoting::properties;
use crate::remoting::sql92::Sql92;
use crate::remoting::subscription::{SubscriptionExpr, TagMatcher};
use crate::store::{
    Filter, GroupStore, PopInit, PopOutcome, PopPolicy, PopReceipt, PopRequest, Popped, StoreError,
    TopicStore,
};
use crate::time::now_ms;

/// Longest a popped message stays invisible, ms: 12 h, the proxy's `maxInvisibleTimeMills`
/// (review-e77444b H7). Every later message of its queue stays in memory while it is in
/// flight, so neither face lets a client ask for more: gRPC refuses it
/// (`ILLEGAL_INVISIBLE_TIME`, as the proxy), remoting clamps to it (RocketMQ's broker takes
/// any value there, on disk; a clamp keeps such clients working, with an earlier
/// redelivery).
pub(crate) const MAX_INVISIBLE_MS: u64 = 12 * 3600 * 1000;

/// The filter expression of a pop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FilterExpr<'a> {
    /// A tag expression (`*`, `a || b`).
    Tag(&'a str),
    /// A SQL92 expression over the message properties.
    Sql(&'a str),
}

impl<'a> FilterExpr<'a> {
    /// The expression of a remoting header's `expType` and `exp` (tags when absent).
    pub(crate) fn from_type(exp_type: Option<&str>, exp: Option<&'a str>) -> Self {
        let exp = exp.unwrap_or("*");
        if exp_type.is_some_and(|t| t.eq_ignore_ascii_case(SQL92)) {
            FilterExpr::Sql(exp)
        } else {
            FilterExpr::Tag(exp)
        }
    }
}

/// One pop, whatever the protocol.
#[derive(Debug, Clone)]
pub(crate) struct PopCall<'a> {
    /// The consumer group.
    pub(crate) group: &'a str,
    /// The topic.
    pub(crate) topic: &'a str,
    /// One queue, or `None` for every queue of the topic on this broker.
    pub(crate) queue: Option<i32>,
    /// Most messages to hand out (at least 1).
    pub(crate) max: usize,
    /// How long the popped messages stay invisible, ms.
    pub(crate) invisible_ms: u64,
    /// Ordered pop (see [`PopRequest::order`]).
    pub(crate) order: bool,
    /// Ordered pop: the attempt id that gets a lost batch again.
    pub(crate) attempt_id: Option<&'a str>,
    /// Which messages the consumer wants.
    pub(crate) filter: FilterExpr<'a>,
    /// Where a queue the group never popped starts.
    pub(crate) init: PopInit,
    /// Deliveries of one message before it is dead-lettered.
    pub(crate) max_attempts: u32,
    /// Varies the first queue popped (with the clock).
    pub(crate) seed: u32,
    /// The caller vouches for the group, so it need not be known from a remoting heartbeat: a
    /// gRPC ReceiveMessage names its group, which RocketMQ creates on first use.
    pub(crate) announced: bool,
}

/// Why a pop was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PopError {
    /// The topic does not exist.
    #[error("topic[{0}] not exist, apply first please!")]
    UnknownTopic(String),
    /// The topic is not readable.
    #[error("the topic[{0}] peeking message is forbidden")]
    NoPermission(String),
    /// A group that may not be used (a bad name, or unknown).
    #[error(transparent)]
    Group(#[from] GroupError),
    /// A queue id the topic does not have.
    #[error("queueId[{queue}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{queues}]")]
    BadQueue {
        /// The topic.
        topic: String,
        /// The queue id asked for.
        queue: i32,
        /// Its queue count.
        queues: u32,
    },
    /// A SQL92 expression that does not compile.
    #[error("parse the consumer's subscription failed, {0}")]
    BadFilter(String),
    /// The store refused the pop.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one [`pop_once`] handed out.
#[derive(Debug)]
pub(crate) struct PopBatch {
    /// The topic popped.
    pub(crate) topic: Arc<dyn TopicStore>,
    /// The group that popped it.
    pub(crate) group: Arc<dyn GroupStore>,
    /// Its counters (`rocketmq_messages_out_total` and the admin codes' figures).
    pub(crate) counters: Arc<TopicCounters>,
    /// The pop time of every message: with its queue and offset, its receipt.
    pub(crate) pop_time: u64,
    /// The messages, per queue in offset order (those a SQL92 filter rejected are gone).
    pub(crate) messages: Vec<Popped>,
    /// Nothing found: each popped queue's end as it was before the pop looked (an append at
    /// or after it is news).
    pub(crate) ends: Vec<(u32, u64)>,
    /// Nothing found: when an in-flight message becomes visible again, ms since the epoch.
    pub(crate) wake_at: Option<u64>,
    /// [`Core::pop_changes`] as it was before the pop looked.
    pub(crate) changes: u64,
    /// What the pop found in the group's pop retry topic, if it has one (see "Revival").
    pub(crate) retried: Option<Retried>,
    /// The pop stopped early with messages left below the ends it recorded: a queue's scan
    /// hit the engine's scan limit, or a SQL92 filter rejected (and acknowledged) what it
    /// popped. Popping again at once goes on from there, where waiting for an append would
    /// leave that backlog until the next one (review-e77444b M5; RocketMQ's
    /// `PopMessageProcessor` pops again while `restCount > 0`).
    pub(crate) more: bool,
}

/// What one [`pop_once`] handed out of the group's pop retry topic `%RETRY%<group>_<topic>`.
#[derive(Debug)]
pub(crate) struct Retried {
    /// The pop retry topic.
    pub(crate) topic: Arc<dyn TopicStore>,
    /// The group's handle on it (its receipts are acknowledged there).
    pub(crate) group: Arc<dyn GroupStore>,
    /// Its counters.
    pub(crate) counters: Arc<TopicCounters>,
    /// The messages, in offset order.
    pub(crate) messages: Vec<Popped>,
    /// Its queue's end before the pop looked (an append at or after it is news).
    pub(crate) end: u64,
}

/// One topic of a [`PopBatch`]: the topic popped, or its pop retry topic.
struct Part<'a> {
    topic: &'a Arc<dyn TopicStore>,
    group: &'a Arc<dyn GroupStore>,
    counters: &'a Arc<TopicCounters>,
    messages: &'a [Popped],
    retry: bool,
}

/// What a face wrote out of one popped queue.
#[derive(Debug)]
pub(crate) struct QueueOut {
    /// Whether the queue is the group's pop retry topic's (its receipts carry retry flag `1`),
    /// not the popped topic's.
    pub(crate) retry: bool,
    /// The queue.
    pub(crate) queue: u32,
    /// The offsets written, with their delivery attempts, in the order written.
    pub(crate) offsets: Vec<(u64, u32)>,
    /// The bytes they took.
    pub(crate) bytes: usize,
}

impl PopBatch {
    /// Hands each message to `write` with the topic it is stored in (the popped topic, or the
    /// group's pop retry topic), which writes it out in its face's form and returns the bytes
    /// it took, or `None` for a record it cannot write: that one is acknowledged (it would
    /// come back forever) and logged. Counts what was written out for the group
    /// (`rocketmq_messages_out_total` and the admin codes' out figures, as pulls count) and
    /// returns it per queue, in the order written.
    pub(crate) fn write_out(
        &self,
        mut write: impl FnMut(&dyn TopicStore, &Popped) -> Option<usize>,
    ) -> Vec<QueueOut> {
        let mut per_queue: Vec<QueueOut> = Vec::new();
        for part in self.parts() {
            let first = per_queue.len();
            for m in part.messages {
                let d = &m.delivery;
                let Some(n) = write(part.topic.as_ref(), m) else {
                    tracing::warn!(topic = %part.topic.name(), queue = d.queue, offset = d.offset, "a stored message cannot be popped; skipped");
                    let receipt =
                        PopReceipt { queue: d.queue, offset: d.offset, pop_time: self.pop_time };
                    let _ = part.group.pop_ack(receipt);
                    continue;
                };
                match per_queue[first..].iter_mut().find(|o| o.queue == d.queue) {
                    Some(o) => {
                        o.offsets.push((d.offset, m.attempts));
                        o.bytes += n;
                    }
                    None => per_queue.push(QueueOut {
                        retry: part.retry,
                        queue: d.queue,
                        offsets: vec![(d.offset, m.attempts)],
                        bytes: n,
                    }),
                }
            }
            for o in &per_queue[first..] {
                let next = o.offsets.iter().map(|(off, _)| off + 1).max().unwrap_or(0);
                let pulled =
                    Pulled { queue: o.queue, next, messages: o.offsets.len(), bytes: o.bytes };
                part.counters.messages_out(part.group.group(), part.topic.queue_count(), pulled);
            }
        }
        per_queue
    }

    /// The popped topic, then the pop retry topic if it was popped.
    fn parts(&self) -> impl Iterator<Item = Part<'_>> {
        let main = Part {
            topic: &self.topic,
            group: &self.group,
            counters: &self.counters,
            messages: &self.messages,
            retry: false,
        };
        let retried = self.retried.as_ref().map(|r| Part {
            topic: &r.topic,
            group: &r.group,
            counters: &r.counters,
            messages: &r.messages,
            retry: true,
        });
        std::iter::once(main).chain(retried)
    }

    /// Messages handed out in all (the popped topic's and the retry topic's).
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))] // the gRPC face sizes its answer
    pub(crate) fn len(&self) -> usize {
        self.messages.len() + self.retried.as_ref().map_or(0, |r| r.messages.len())
    }
}

/// Tells parked pops that a popped message may be visible again although nothing was
/// appended: its invisible time changed, an ack unblocked an ordered queue, or an ack freed
/// room in a queue that had its in-flight maximum ([`crate::store::PopAck::room_freed`]).
/// They all pop once more (one counter per broker: cheap, and a pop that finds nothing parks
/// again).
pub(crate) fn note_change(core: &Core) {
    core.pop_changes.send_modify(|v| *v = v.wrapping_add(1));
}

/// The engine's tag filter and the SQL92 expression, if any.
fn compile(f: FilterExpr<'_>) -> Result<(Filter, Option<Arc<Sql92>>), PopError> {
    match f {
        FilterExpr::Sql(expr) => match filter::compile(expr) {
            Ok(sql) => Ok((Filter::All, Some(sql))),
            Err(e) => Err(PopError::BadFilter(e.to_string())),
        },
        FilterExpr::Tag(expr) => {
            Ok((filter_of(&TagMatcher::from_expr(SubscriptionExpr::parse(expr))), None))
        }
    }
}

/// Pops once, at `now` (ms since the epoch); see the module docs.
///
/// # Errors
/// [`PopError`] for an unknown or unreadable topic, an unknown group, a bad queue or filter,
/// or a store that refused.
pub(crate) fn pop_once(core: &Core, call: &PopCall<'_>, now: u64) -> Result<PopBatch, PopError> {
    // POP state (what is invisible, its revives) would live on one replica of a broker set.
    core.unreplicated("POP consumption is")
        .map_err(|why| PopError::Store(StoreError::Other(why)))?;
    let changes = *core.pop_changes.borrow();
    let (topic, counters) = core.readable_topic(call.topic).map_err(|e| match e {
        Unreadable::Unknown => PopError::UnknownTopic(call.topic.to_owned()),
        Unreadable::Forbidden => PopError::NoPermission(call.topic.to_owned()),
    })?;
    core.check_group(call.group, call.announced)?;
    let count = topic.queue_count();
    let queues: Vec<u32> = match call.queue {
        None => {
            let first = (now as u32).wrapping_add(call.seed) % count.max(1);
            (0..count).map(|i| (first + i) % count).collect()
        }
        Some(q) => match u32::try_from(q).ok().filter(|q| *q < count) {
            Some(q) => vec![q],
            None => {
                return Err(PopError::BadQueue {
                    topic: call.topic.to_owned(),
                    queue: q,
                    queues: count,
                })
            }
        },
    };
    let (filter, sql) = compile(call.filter)?;
    let req = PopRequest {
        max: call.max.max(1),
        invisible_ms: call.invisible_ms,
        now_ms: now,
        order: call.order,
        attempt_id: call.attempt_id,
        max_attempts: call.max_attempts,
        filter: &filter,
        init: call.init,
    };
    // Before looking: an append after this is news to a parked pop.
    let ends: Vec<(u32, u64)> =
        queues.iter().filter_map(|&q| Some((q, topic.offsets(q).ok()?.1))).collect();
    // One handle for every queue: the group is looked up (or subscribed) once per pop.
    let group = core.store.pop_group(call.group, call.topic)?;
    // Unordered pops revive into the pop retry topic (module docs, "Revival").
    let retry_name = Some(topics::pop_retry_topic(call.group, call.topic))
        .filter(|n| !call.order && topics::validate_topic(n).is_ok());
    let policy = if retry_name.is_some() { &REVIVE } else { &DEAD_LETTER_PENDING };
    let retry_topic = || retry_name.as_deref().and_then(|n| core.readable_topic(n).ok());
    let retry_first = (now as u32).wrapping_add(call.seed) % 5 == 0;
    let mut retry_out = PopOutcome::default();
    let mut retried = None;
    if retry_first {
        retried = pop_retry(core, call.group, retry_topic(), &req, &mut retry_out);
    }
    let mut out = PopOutcome::default();
    for &q in &queues {
        if out.messages.len() + retry_out.messages.len() >= req.max {
            break;
        }
        let left = PopRequest { max: req.max - retry_out.messages.len(), ..req };
        group.pop_with(q, &left, policy, &mut out)?;
    }
    // Revived before the retry topic is popped (again), so a message that expired is
    // delivered again by this very pop when there is room.
    let mut revived = settle_expired(core, call, topic.as_ref(), group.as_ref(), &out, now);
    let room = req.max.saturating_sub(out.messages.len() + retry_out.messages.len());
    let left = PopRequest { max: room, ..req };
    match &retried {
        None => retried = pop_retry(core, call.group, retry_topic(), &left, &mut retry_out),
        Some(r) if revived && room > 0 => pop_retry_queue(r, &left, &mut retry_out),
        Some(_) => {}
    }
    if let Some(r) = &retried {
        revived |= settle_expired(core, call, r.topic.as_ref(), r.group.as_ref(), &retry_out, now);
    }
    if revived {
        // A parked pop that found no retry topic yet waits on the popped topic only.
        note_change(core);
    }
    let nothing = out.messages.is_empty()
        && out.dead.is_empty()
        && out.revive.is_empty()
        && retry_out.messages.is_empty()
        && retry_out.dead.is_empty()
        && retry_out.revive.is_empty();
    let pop_time = if nothing { now } else { out.pop_time.max(retry_out.pop_time) };
    let mut popped = 0;
    let mut keep = |messages: &mut Vec<Popped>, g: &dyn GroupStore| {
        popped += messages.len();
        if let Some(sql) = &sql {
            messages.retain(|m| {
                let d = &m.delivery;
                let keep = filter::matches(sql, &d.payload, &core.cluster_property);
                if !keep {
                    // RocketMQ acknowledges what the expression rejects.
                    let _ = g.pop_ack(PopReceipt { queue: d.queue, offset: d.offset, pop_time });
                }
                keep
            });
        }
        messages.len()
    };
    let mut messages = out.messages;
    let mut kept = keep(&mut messages, group.as_ref());
    if let Some(r) = &mut retried {
        r.messages = retry_out.messages;
        kept += keep(&mut r.messages, r.group.as_ref());
    }
    let more = out.scan_limited > 0 || retry_out.scan_limited > 0 || kept < popped;
    Ok(PopBatch {
        topic,
        group,
        counters,
        pop_time,
        messages,
        ends,
        wake_at: out.next_expiry.into_iter().chain(retry_out.next_expiry).min(),
        changes,
        more,
        retried,
    })
}

/// Pops the group's pop retry topic (its one queue) into `out`, from its oldest message:
/// the group holds it from before the first copy, so nothing there predates the group's
/// interest. `None` if the topic does not exist (nothing was revived yet); a refusal is
/// logged and treated as nothing found, the popped topic's messages are still handed out.
fn pop_retry(
    core: &Core,
    group: &str,
    retry: Option<(Arc<dyn TopicStore>, Arc<TopicCounters>)>,
    req: &PopRequest<'_>,
    out: &mut PopOutcome,
) -> Option<Retried> {
    let (topic, counters) = retry?;
    let end = topic.offsets(0).ok()?.1;
    let handle = match core.store.pop_group(group, topic.name()) {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!(%group, topic = %topic.name(), error = %e, "pop retry topic not popped");
            return None;
        }
    };
    let retried = Retried { topic, group: handle, counters, messages: Vec::new(), end };
    pop_retry_queue(&retried, req, out);
    Some(retried)
}

/// Pops up to `req.max` messages of the pop retry topic's queue into `out`, from its oldest
/// message; a refusal is logged and treated as nothing found.
fn pop_retry_queue(r: &Retried, req: &PopRequest<'_>, out: &mut PopOutcome) {
    if req.max == 0 {
        return;
    }
    let req = PopRequest { init: PopInit::Min, order: false, attempt_id: None, ..*req };
    if let Err(e) = r.group.pop_with(0, &req, &REVIVE, out) {
        tracing::debug!(group = %r.group.group(), topic = %r.topic.name(), error = %e, "pop retry topic not popped");
    }
}

/// Copies what a pop handed over (`out.dead`, `out.revive`) of `topic` to where it goes and
/// settles it in `group`; returns whether a message was revived into the pop retry topic.
fn settle_expired(
    core: &Core,
    call: &PopCall<'_>,
    topic: &dyn TopicStore,
    group: &dyn GroupStore,
    out: &PopOutcome,
    now: u64,
) -> bool {
    let receipt = |p: &Popped| PopReceipt {
        queue: p.delivery.queue,
        offset: p.delivery.offset,
        pop_time: out.pop_time,
    };
    for d in &out.dead {
        let copied = dead_letter(core, call.group, topic, d);
        settle_copy(group, receipt(d), copied, now);
    }
    let mut revived = false;
    for p in &out.revive {
        let copied = revive(core, call, topic, p);
        revived |= copied.is_ok();
        settle_copy(group, receipt(p), copied, now);
    }
    revived
}

/// Revives an expired popped message of `topic`: a copy in the group's pop retry topic with
/// its reconsume count one higher, or, once it was delivered `call.max_attempts` times, a
/// copy in `%DLQ%<group>` (module docs, "Revival").
///
/// # Errors
/// The store's refusal of the retry topic, the group's subscription to it, or the copy.
fn revive(
    core: &Core,
    call: &PopCall<'_>,
    topic: &dyn TopicStore,
    p: &Popped,
) -> Result<(), StoreError> {
    let reconsumed = record::decode(&p.delivery.payload)
        .map_or(0, |r| u32::try_from(r.reconsume_times).unwrap_or(0));
    if reconsumed.saturating_add(p.attempts) >= call.max_attempts {
        return dead_letter(core, call.group, topic, p);
    }
    let name = topics::pop_retry_topic(call.group, call.topic);
    let copied = super::retry::group_topic(core, &name).and_then(|retry| {
        // Held by the group before the copy is stored, so retention never takes it first.
        core.store.pop_group(call.group, &name)?;
        copy_popped(core, retry.as_ref(), topic, p)
    });
    if let Err(e) = &copied {
        // Relaxed: a statistic.
        core.counters.revives_failed.fetch_add(1, crate::sync::Ordering::Relaxed);
        tracing::warn!(group = %call.group, topic = %topic.name(), error = %e, "an expired popped message could not be revived yet; kept in flight, tried again in 1 s");
    }
    copied
}

/// Waits until a message is appended to one of `batch`'s queues at or after its end, an
/// in-flight message becomes visible again (`batch.wake_at`, or [`note_change`] since the pop),
/// or `deadline`; a batch that stopped early with work left ([`PopBatch::more`]) does not
/// wait. Returns whether it was woken before the deadline.
pub(crate) async fn wait_for_more(
    core: &Core,
    batch: &PopBatch,
    deadline: tokio::time::Instant,
) -> bool {
    if batch.more {
        // Let other tasks run between two pops of a long filtered backlog.
        tokio::task::yield_now().await;
        return tokio::time::Instant::now() < deadline;
    }
    let until = batch.wake_at.map_or(deadline, |at| {
        let ms = at.saturating_sub(now_ms());
        deadline.min(tokio::time::Instant::now() + std::time::Duration::from_millis(ms))
    });
    let mut changes = core.pop_changes.subscribe();
    let changed = async {
        while *changes.borrow_and_update() == batch.changes {
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    let appended = AnyAppend::new(batch);
    let woken = tokio::time::timeout_at(until, async {
        tokio::select! {
            () = appended => {}
            () = changed => {}
        }
    })
    .await;
    woken.is_ok() || tokio::time::Instant::now() < deadline
}

/// Resolves when any of the queues has a message at or after its given end.
struct AnyAppend {
    waits: Vec<AppendWait>,
}

impl AnyAppend {
    /// Waits on every popped queue's end, and on the pop retry topic's if it was popped.
    fn new(batch: &PopBatch) -> Self {
        let wait = |topic: &Arc<dyn TopicStore>, queue: u32, offset: u64| AppendWait {
            topic: Arc::clone(topic),
            queue,
            offset,
            id: None,
        };
        let mut waits: Vec<AppendWait> =
            batch.ends.iter().map(|&(q, end)| wait(&batch.topic, q, end)).collect();
        if let Some(r) = &batch.retried {
            waits.push(wait(&r.topic, 0, r.end));
        }
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

/// How an ordered pop (or one whose retry topic name would be too long) treats expired
/// messages: redelivered from their own queue, and once their attempts ran out handed over
/// still in flight, so that the dead-letter copy is stored
/// before the message is acknowledged (review-e77444b M2).
const DEAD_LETTER_PENDING: PopPolicy = PopPolicy {
    in_place_deliveries: u32::MAX,
    dead_letter_pending: true,
    lease_ms: DEAD_LETTER_LEASE_MS,
};

/// How an unordered pop treats expired messages: revived into the pop retry topic at their
/// first expiry (module docs, "Revival"), dead letters handed over still in flight.
const REVIVE: PopPolicy =
    PopPolicy { in_place_deliveries: 1, dead_letter_pending: true, lease_ms: DEAD_LETTER_LEASE_MS };

/// How long a message being dead-lettered stays invisible while its copy is stored, ms (it is
/// acknowledged or put back long before).
const DEAD_LETTER_LEASE_MS: u64 = 30_000;

/// How soon a message whose dead-letter copy failed is tried again, ms (RocketMQ's proxy
/// nacks what it could not handle with 1 s).
pub(crate) const DEAD_LETTER_RETRY_MS: u64 = 1_000;

/// Settles a message handed over for dead-lettering or revival under `receipt`: acknowledged
/// once its copy is stored; else put back in flight for [`DEAD_LETTER_RETRY_MS`], its attempts
/// unchanged, so the next pop after that tries again (the message is never lost, and the
/// failure is counted in `baiji_dead_letter_failures_total`).
fn settle_copy(
    group: &dyn GroupStore,
    receipt: PopReceipt,
    copied: Result<(), StoreError>,
    now: u64,
) {
    let settled = match copied {
        Ok(()) => group.pop_ack(receipt).map(|_| ()),
        Err(_) => group.change_invisible(receipt, DEAD_LETTER_RETRY_MS, now).map(|_| ()),
    };
    if let Err(e) = settled {
        // Acknowledged otherwise meanwhile (a commit of the same group name), or the group
        // ended: nothing is left to settle.
        tracing::debug!(group = %group.group(), queue = receipt.queue, offset = receipt.offset, error = %e, "dead letter not settled");
    }
}

/// Copies a popped message into `%DLQ%<group>`, as `CONSUMER_SEND_MSG_BACK` does past the
/// maximum: the DLQ copy keeps the body and properties, records the original message id and
/// topic, and its reconsume times is the number of deliveries. The caller acknowledges the
/// message once this succeeded; a failure is logged and counted, and the caller keeps the
/// message in flight to try again.
///
/// # Errors
/// The store's refusal of the `%DLQ%` topic or of the copy (no room, no topic uid left).
pub(crate) fn dead_letter(
    core: &Core,
    group: &str,
    topic: &dyn TopicStore,
    p: &Popped,
) -> Result<(), StoreError> {
    match copy_to_dlq(core, group, topic, p) {
        Ok(()) => {
            tracing::info!(%group, topic = %topic.name(), attempts = p.attempts, "popped message moved to the dead-letter queue");
            Ok(())
        }
        Err(e) => {
            // Relaxed: a statistic.
            core.counters.dead_letters_failed.fetch_add(1, crate::sync::Ordering::Relaxed);
            tracing::warn!(%group, topic = %topic.name(), error = %e, "popped message could not be dead-lettered yet; kept in flight, tried again in 1 s");
            Err(e)
        }
    }
}

fn copy_to_dlq(
    core: &Core,
    group: &str,
    topic: &dyn TopicStore,
    p: &Popped,
) -> Result<(), StoreError> {
    let dlq = super::retry::group_topic(core, &format!("{DLQ_PREFIX}{group}"))?;
    copy_popped(core, dlq.as_ref(), topic, p)
}

/// Copies popped message `p` of `topic` into queue 0 of `dest` (a dead-letter or pop retry
/// topic) as RocketMQ's revive and dead-lettering copy it: body, flags and properties kept
/// (`UNIQ_KEY` too, so clients see the same message id) but a delay level, `RETRY_TOPIC`
/// and `ORIGIN_MESSAGE_ID` set if not yet, and a reconsume count raised by its deliveries
/// from `topic`.
fn copy_popped(
    core: &Core,
    dest: &dyn TopicStore,
    topic: &dyn TopicStore,
    p: &Popped,
) -> Result<(), StoreError> {
    let d = &p.delivery;
    let dlq = dest;
    let Some(rec) = record::decode(&d.payload) else {
        // Kept as it was stored rather than lost (a read steps over it, as over the original).
        dlq.append(0, d.payload.clone(), 0, now_ms())?;
        return Ok(());
    };
    let phys = physical_offset(topic.uid(), d.queue, d.offset);
    let origin = properties::find(rec.properties, properties::ORIGIN_MESSAGE_ID)
        .filter(|v| !v.trim().is_empty())
        .map_or_else(|| encode_offset_msg_id(core.store_host, phys), str::to_owned);
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
    let tag = properties::tags_code(&props);
    let Ok(encoded) = record::encode(&new, core.cluster_property.len()) else {
        // The added properties pushed it past the limit: the stored record as it was, not lost.
        dlq.append(0, d.payload.clone(), properties::tags_code(rec.properties), now_ms())?;
        return Ok(());
    };
    dlq.append(0, encoded, tag, now_ms())?;
    Ok(())
}

/// Moves the popped message `receipt` names in `topic`, delivered for the `attempts`-th
/// time, to `%DLQ%<group>` and acknowledges it (gRPC's `ForwardMessageToDeadLetterQueue`).
/// The message is taken first (its invisible time changed to a lease, which makes every
/// other receipt of it stale, so only one call moves it), then read and copied, and only then
/// acknowledged (review-e77444b M2): a copy that fails puts it back in flight for
/// [`DEAD_LETTER_RETRY_MS`] and is answered with the store's error, never with OK.
///
/// # Errors
/// [`StoreError::StaleReceipt`] if the message is not in flight under that receipt (nothing is
/// copied), [`StoreError::UnknownTopic`], or the store's refusal of the copy.
#[cfg_attr(not(feature = "grpc"), allow(dead_code))] // only the gRPC face forwards
pub(crate) fn forward_to_dlq(
    core: &Core,
    group: &str,
    topic: &str,
    receipt: PopReceipt,
    attempts: u32,
) -> Result<(), StoreError> {
    let PopReceipt { queue, offset, .. } = receipt;
    let Some(t) = core.store.topic(topic) else {
        return Err(StoreError::UnknownTopic(topic.to_owned()));
    };
    let now = now_ms();
    let leased = match core.store.change_invisible(group, topic, receipt, DEAD_LETTER_LEASE_MS, now)
    {
        Ok(pop_time) => PopReceipt { pop_time, ..receipt },
        Err(StoreError::StaleReceipt { .. }) => {
            // Moved by an earlier call (a client retrying) if it is acknowledged; else stale.
            return core.store.pop_ack(group, topic, receipt).map(|_| ());
        }
        Err(e) => return Err(e),
    };
    let Some((payload, timestamp)) = core.store.get(t.as_ref(), queue, offset) else {
        // Only drop-oldest takes an in-flight message (counted in the group's dropped).
        tracing::warn!(%group, %topic, queue, offset, "message to dead-letter already evicted");
        return core.store.pop_ack(group, topic, leased).map(|_| ());
    };
    let delivery = crate::store::Delivery { queue, offset, timestamp, tag: 0, payload };
    match dead_letter(core, group, t.as_ref(), &Popped { delivery, attempts }) {
        Ok(()) => {
            core.store.pop_ack(group, topic, leased)?;
            note_change(core);
            Ok(())
        }
        Err(e) => {
            let _ = core.store.change_invisible(group, topic, leased, DEAD_LETTER_RETRY_MS, now);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::BrokerConfig;
    use crate::remoting::body::TopicConfig;
    use crate::store::MemoryStore;

    const TOPIC: &str = "PopperTopic";
    const GROUP: &str = "popper_group";

    fn shared() -> Core {
        shared_with(|_| {})
    }

    fn shared_with(tweak: impl FnOnce(&mut BrokerConfig)) -> Core {
        let mut config = BrokerConfig::default();
        tweak(&mut config);
        let store: Arc<dyn crate::store::Store> = Arc::new(
            MemoryStore::new(config.engine_config().expect("a valid engine config"))
                .expect("a store"),
        );
        let core = Core::new(config.core, store, "127.0.0.1:10911".parse().expect("an address"));
        let mut c = TopicConfig::new(TOPIC, 1, 1);
        c.perm = crate::broker::core::topics::perm::RW;
        core.create_topic(c).expect("the topic is created");
        core
    }

    fn append(core: &Core, id: &str, color: &str) {
        let mut props = Vec::new();
        for (k, v) in [(properties::UNIQ_KEY, id), ("color", color)] {
            properties::write_pair(&mut props, k, v).expect("a property");
        }
        let rec = NewRecord {
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: "127.0.0.1:1".parse().expect("an address"),
            reconsume_times: 0,
            body: b"body",
            properties: &props,
        };
        let bytes = record::encode(&rec, 0).expect("a record");
        let t = core.store.topic(TOPIC).expect("the topic");
        t.append(0, bytes, 0, now_ms()).expect("appended");
    }

    fn call(max_attempts: u32, filter: FilterExpr<'_>) -> PopCall<'_> {
        PopCall {
            group: GROUP,
            topic: TOPIC,
            queue: None,
            max: 32,
            invisible_ms: 1_000,
            order: false,
            attempt_id: None,
            filter,
            init: PopInit::Min,
            max_attempts,
            seed: 0,
            announced: true,
        }
    }

    fn dead_letters(core: &Core) -> u64 {
        core.store
            .topic(&format!("{DLQ_PREFIX}{GROUP}"))
            .and_then(|t| t.offsets(0).ok())
            .map_or(0, |(first, end)| end - first)
    }

    /// The stored reconsume count and message id of a popped message.
    fn reconsumed(p: &Popped) -> (i32, String) {
        let rec = record::decode(&p.delivery.payload).expect("a record");
        let id = properties::find(rec.properties, properties::UNIQ_KEY).unwrap_or("").to_owned();
        (rec.reconsume_times, id)
    }

    fn retried(b: &PopBatch) -> &[Popped] {
        b.retried.as_ref().map_or(&[], |r| &r.messages)
    }

    fn backlog(core: &Core, topic: &str) -> Option<u64> {
        let figures = core.store.group_figures();
        figures.into_iter().find(|g| g.group == GROUP && g.topic == topic).map(|g| g.backlog)
    }

    /// The retained messages once the reaper thread got to `want` (or after 10 s, whatever
    /// the count is then).
    fn live_messages_reaching(core: &Core, want: u64) -> u64 {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let live = core.store.memory().live_messages;
            if live == want || std::time::Instant::now() > until {
                return live;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn given_a_message_whose_attempts_ran_out_when_popped_again_should_move_it_to_the_dlq() {
        let core = shared();
        append(&core, "ID1", "blue");
        let c = call(2, FilterExpr::Tag("*"));
        let t0 = 1_000_000;
        let first = pop_once(&core, &c, t0).expect("pops");
        assert_eq!(first.messages.len(), 1);
        let second = pop_once(&core, &c, t0 + 1_000).expect("pops");
        assert!(second.messages.is_empty(), "not from its own queue again");
        let again = retried(&second);
        assert_eq!(again.len(), 1, "revived and delivered again by the same pop");
        assert_eq!(reconsumed(&again[0]), (1, "ID1".to_owned()), "one reconsume, same id");
        let third = pop_once(&core, &c, t0 + 2_000).expect("pops");
        assert_eq!(third.len(), 0, "not delivered a third time");
        assert_eq!(dead_letters(&core), 1, "moved to %DLQ%<group>");
        assert_eq!(core.store.inflight(GROUP, TOPIC), 0);
        let retry = topics::pop_retry_topic(GROUP, TOPIC);
        assert_eq!(core.store.inflight(GROUP, &retry), 0, "acknowledged in the retry topic");
    }

    #[test]
    fn given_a_failing_message_when_its_invisible_time_runs_out_should_let_its_queue_move_on() {
        // review-e77444b H7: the expired message was redelivered from its own queue, so every
        // later message of the queue stayed held (and in memory) for attempts x invisible
        // time although the group acknowledged them.
        let core = shared();
        for id in ["IDA", "IDB", "IDC"] {
            append(&core, id, "blue");
        }
        let c = call(17, FilterExpr::Tag("*"));
        let t0 = 1_000_000;
        let first = pop_once(&core, &c, t0).expect("pops");
        assert_eq!(first.messages.len(), 3);
        for m in &first.messages[1..] {
            let d = &m.delivery;
            let r = PopReceipt { queue: d.queue, offset: d.offset, pop_time: first.pop_time };
            first.group.pop_ack(r).expect("acknowledged");
        }
        assert_eq!(backlog(&core, TOPIC), Some(1));
        let second = pop_once(&core, &c, t0 + 1_000).expect("pops");
        assert_eq!(reconsumed(&retried(&second)[0]).1, "IDA", "delivered again");
        assert_eq!(backlog(&core, TOPIC), Some(0), "acknowledged in its own queue");
        assert_eq!(
            live_messages_reaching(&core, 1),
            1,
            "its queue's messages freed, the copy kept"
        );
        let retry = topics::pop_retry_topic(GROUP, TOPIC);
        assert_eq!(backlog(&core, &retry), Some(1), "the copy is held instead");
        // The consumer acknowledges the copy with the receipt it got.
        let r = second.retried.as_ref().expect("retried");
        let d = &r.messages[0].delivery;
        let receipt = PopReceipt { queue: d.queue, offset: d.offset, pop_time: second.pop_time };
        core.store.pop_ack(GROUP, &retry, receipt).expect("acknowledged in the retry topic");
        assert_eq!(backlog(&core, &retry), Some(0));
        assert_eq!(pop_once(&core, &c, t0 + 10_000).expect("pops").len(), 0, "done");
    }

    #[test]
    fn given_an_ordered_pop_when_a_message_expires_should_redeliver_it_in_place() {
        let core = shared();
        append(&core, "IDO", "blue");
        let mut c = call(17, FilterExpr::Tag("*"));
        c.order = true;
        let t0 = 1_000_000;
        assert_eq!(pop_once(&core, &c, t0).expect("pops").messages.len(), 1);
        let again = pop_once(&core, &c, t0 + 1_000).expect("pops");
        assert_eq!(again.messages.first().map(|m| m.attempts), Some(2), "from its own queue");
        assert!(again.retried.is_none(), "ordered pops keep their order: no retry topic");
    }

    #[test]
    fn given_a_receipt_when_forwarding_to_the_dlq_should_need_the_latest_and_move_it_once() {
        let core = shared();
        append(&core, "ID2", "blue");
        let c = call(16, FilterExpr::Tag("*"));
        let b = pop_once(&core, &c, 1_000_000).expect("pops");
        let m = b.messages.first().expect("a message");
        let (q, off) = (m.delivery.queue, m.delivery.offset);
        let stale = forward_to_dlq(
            &core,
            GROUP,
            TOPIC,
            PopReceipt { queue: q, offset: off, pop_time: b.pop_time + 1 },
            1,
        );
        assert!(matches!(stale, Err(StoreError::StaleReceipt { .. })), "{stale:?}");
        assert_eq!(dead_letters(&core), 0, "a stale receipt moves nothing");
        forward_to_dlq(
            &core,
            GROUP,
            TOPIC,
            PopReceipt { queue: q, offset: off, pop_time: b.pop_time },
            1,
        )
        .expect("forwarded");
        forward_to_dlq(
            &core,
            GROUP,
            TOPIC,
            PopReceipt { queue: q, offset: off, pop_time: b.pop_time },
            1,
        )
        .expect("a retry is fine");
        assert_eq!(dead_letters(&core), 1, "moved once");
        let after = pop_once(&core, &c, 1_000_000 + 5_000).expect("pops");
        assert!(after.messages.is_empty(), "a dead-lettered message is not redelivered");
    }

    #[test]
    fn given_a_sql92_filter_when_popping_should_hand_out_matches_and_acknowledge_the_rest() {
        let core = shared();
        append(&core, "ID3", "red");
        append(&core, "ID4", "blue");
        let c = call(16, FilterExpr::Sql("color = 'blue'"));
        let b = pop_once(&core, &c, 1_000_000).expect("pops");
        assert_eq!(b.messages.len(), 1, "only the match");
        let later = pop_once(&core, &c, 1_000_000 + 5_000).expect("pops");
        assert_eq!(later.len(), 1, "the match comes back, the rejected one never");
        assert_eq!(retried(&later).first().map(|m| reconsumed(m).0), Some(1));
    }

    #[test]
    fn given_a_dead_letter_copy_that_fails_when_popped_again_should_keep_it_and_move_it_later() {
        // review-e77444b M2: the engine acknowledged a dead letter before its copy was stored,
        // so a copy refused for lack of memory lost the message.
        let core = shared();
        append(&core, "ID7", "blue");
        let c = call(1, FilterExpr::Tag("*"));
        let t0 = 1_000_000;
        assert_eq!(pop_once(&core, &c, t0).expect("pops").messages.len(), 1);
        let settings = core.store.settings();
        let full = crate::store::Settings {
            memory_budget: core.store.used_and_budget().0.max(1),
            ..settings
        };
        core.store.apply_settings(full).expect("a smaller budget");
        let b = pop_once(&core, &c, t0 + 1_000).expect("pops");
        assert!(b.messages.is_empty(), "its attempts ran out");
        assert_eq!(dead_letters(&core), 0, "no room for the copy");
        assert_eq!(core.store.inflight(GROUP, TOPIC), 1, "kept in flight, not lost");
        assert_eq!(core.counters.dead_letters_failed.load(crate::sync::Ordering::Relaxed), 1);
        core.store.apply_settings(settings).expect("the budget back");
        let b = pop_once(&core, &c, t0 + 5 * DEAD_LETTER_RETRY_MS).expect("pops");
        assert!(b.messages.is_empty(), "not redelivered to the consumer");
        assert_eq!(dead_letters(&core), 1, "moved once there is room");
        assert_eq!(core.store.inflight(GROUP, TOPIC), 0, "acknowledged after the copy");
    }

    fn subscriptions(core: &Core) -> usize {
        core.store.subscription_count().0
    }

    #[test]
    fn given_a_pop_only_group_when_idle_for_group_idle_secs_should_release_it() {
        let core = shared_with(|c| c.core.group_idle_secs = 1);
        let mut c = call(16, FilterExpr::Tag("*"));
        let t0 = now_ms();
        pop_once(&core, &c, t0).expect("pops");
        c.group = "kept_group";
        core.groups.set_in_use(["kept_group".to_owned()].into_iter().collect());
        pop_once(&core, &c, t0).expect("pops");
        assert_eq!(subscriptions(&core), 2);
        assert_eq!(core.release_idle_groups(t0), 0, "not idle yet");
        // Well past the group's last activity (a few ms after t0) plus group-idle-secs.
        let later = t0 + 30_000;
        assert_eq!(core.release_idle_groups(later), 1, "idle for group-idle-secs");
        assert_eq!(subscriptions(&core), 1, "the group a live session names is kept");
        append(&core, "ID5", "blue");
        c.group = GROUP;
        let again = pop_once(&core, &c, later).expect("a new subscription");
        assert_eq!(again.messages.len(), 1, "starts from the oldest retained message");
    }

    #[test]
    fn given_a_popped_message_still_invisible_when_releasing_idle_groups_should_keep_the_group() {
        let core = shared_with(|c| c.core.group_idle_secs = 1);
        append(&core, "ID6", "blue");
        let mut c = call(16, FilterExpr::Tag("*"));
        c.invisible_ms = 60_000;
        let t0 = now_ms();
        assert_eq!(pop_once(&core, &c, t0).expect("pops").messages.len(), 1);
        assert_eq!(core.release_idle_groups(t0 + 5_000), 0, "a consumer may be working on it");
        assert_eq!(core.release_idle_groups(t0 + 90_000), 1, "visible again and idle");
    }

    #[test]
    fn given_internal_or_zero_idle_when_releasing_idle_groups_should_keep_every_group() {
        let core = shared_with(|c| c.core.group_idle_secs = 0);
        pop_once(&core, &call(16, FilterExpr::Tag("*")), 1_000).expect("pops");
        assert_eq!(core.release_idle_groups(u64::MAX / 2), 0, "group-idle-secs 0: never");
        let core = shared_with(|c| c.core.group_idle_secs = 1);
        core.store.holder(super::super::delay::SCHEDULE_GROUP, TOPIC).expect("a holder");
        assert_eq!(core.release_idle_groups(now_ms() + 10_000), 0, "internal holders stay");
    }

    #[test]
    fn given_the_group_cap_when_one_more_group_pops_should_refuse_it_until_one_is_released() {
        let core = shared_with(|c| {
            c.core.max_groups_per_topic = 2;
            c.core.group_idle_secs = 1;
        });
        let t0 = now_ms();
        for g in ["g1", "g2"] {
            let mut c = call(16, FilterExpr::Tag("*"));
            c.group = g;
            pop_once(&core, &c, t0).expect("under the cap");
        }
        let mut c = call(16, FilterExpr::Tag("*"));
        c.group = "g3";
        let refused = pop_once(&core, &c, t0);
        assert!(
            matches!(
                refused,
                Err(PopError::Store(StoreError::TooManySubscriptions { limit: 2, .. }))
            ),
            "{refused:?}"
        );
        assert_eq!(core.release_idle_groups(t0 + 30_000), 2);
        pop_once(&core, &c, t0 + 30_000).expect("room again");
    }

    #[test]
    fn given_bad_names_when_popping_should_refuse_with_the_reason() {
        let core = shared();
        let mut c = call(16, FilterExpr::Tag("*"));
        c.announced = false;
        assert!(matches!(pop_once(&core, &c, 1), Err(PopError::Group(GroupError::Unknown(_)))));
        c.announced = true;
        c.topic = "NoSuchTopic";
        assert!(matches!(pop_once(&core, &c, 1), Err(PopError::UnknownTopic(_))));
        c.topic = TOPIC;
        c.filter = FilterExpr::Sql("color = ");
        assert!(matches!(pop_once(&core, &c, 1), Err(PopError::BadFilter(_))));
        c.filter = FilterExpr::Tag("*");
        c.queue = Some(7);
        assert!(matches!(pop_once(&core, &c, 1), Err(PopError::BadQueue { .. })));
    }
}
