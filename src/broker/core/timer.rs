//! Timer messages (RocketMQ 5): `TIMER_DELIVER_MS` (epoch milliseconds), `TIMER_DELAY_SEC` and
//! `TIMER_DELAY_MS` deliver a message at any time up to `timer-max-delay-sec` ahead.
//!
//! As in RocketMQ, a timer message waits in the internal topic `rmq_sys_wheel_timer` with
//! `REAL_TOPIC`, `REAL_QID` and `TIMER_OUT_MS` (its due time) and is appended to its real topic
//! when due, with `REAL_TOPIC`/`REAL_QID` removed and `TIMER_ENQUEUE_MS`/`TIMER_DEQUEUE_MS`
//! added. The parking and delivery are the delay levels' ([`delay::park`],
//! [`delay::deliver_record`]); what differs is the order. Delay levels are due in store order
//! per level, so the schedule only looks at 18 queue heads. Timers are due in any order, so:
//!
//! - **Which message is next** comes from an ordered set of `(due, queue, offset)` entries,
//!   one per waiting message (24 bytes each with a hash of its topic and id, kept outside the
//!   store): popping the next due one is O(log n), and nothing ever scans the waiting
//!   messages. A recall ([`recall`]) finds its message among those due at its handle's time.
//! - **Releasing the stored copies.** The store releases a queue's messages by a group's
//!   committed offset, in offset order only, so a message delivered ahead of an earlier-stored
//!   one that is still waiting stays in memory until that one goes too. To bound this, the
//!   timer topic has one queue per band of delays, each band 1.25 times as long as the one
//!   before (below 1 s, 1–1.25 s, …, up to the maximum delay; 58 queues for 3 days): a
//!   message stored at `t` in a band `[lo, hi)` is released by `t + hi` at the latest (given
//!   room to deliver), so no message stays more than a quarter of its delay (1 s below 1 s)
//!   after it was delivered. Per queue, the
//!   index keeps the offsets delivered beyond the committed prefix ([`TimerIndex::done`]) and
//!   commits as the prefix grows, so every stored copy is released exactly once.
//!
//! Waiting timer messages live in the store, so they count against the memory budget.
//!
//! # Across a restart (`--store-path-root-dir`)
//!
//! With a store that has a journal, the timer topic, its messages and the timer group's
//! committed offsets come back after a restart or a crash; what the index held beyond them is
//! the `done` offsets above each queue's committed prefix, journaled as key `t` + queue (u32
//! BE) + offset (u64 BE), empty value. A delivered (or recalled, or evicted) message is
//! recorded at once, under the index's lock: an offset above the prefix is journaled, one that
//! extends the prefix is committed (the store journals the commit) and the keys the prefix
//! passed are deleted. The group commits each queue's start as soon as it holds the topic, so
//! the store holds the topic for it again after a restart. At start ([`restore`]) the index
//! is rebuilt: each queue from its committed offset, every stored message whose offset is not
//! journaled done waits again at the due time its record carries (`TIMER_OUT_MS`), so it is
//! delivered once and never early. A crash between a delivery's append to its real topic and
//! its record (one journal write) delivers it once more after the restart (at least once, as
//! RocketMQ's timer checkpoint gives). Without a journal nothing is written, as before.

use crate::sync::{Arc, Mutex};
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::delay::{self, Parked};
use super::record::{NewRecord, PutError};
use super::Core;
use crate::remoting::properties::{self, Routing};
use crate::shm::Journal;
use crate::store::{Filter, GroupStore, StoreError, StoredRef, TopicStore};
use crate::sync::lock;
use crate::time::now_ms;

/// The internal topic timer messages wait in (RocketMQ's `TimerMessageStore.TIMER_TOPIC`).
pub(crate) const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";
/// The internal group whose commits release delivered timer messages.
pub(crate) const TIMER_GROUP: &str = "CID_RMQ_SYS_WHEEL_TIMER";
/// The properties that make a message a timer message, in the order RocketMQ reads them.
const TIMER_KEYS: [&str; 3] =
    [properties::TIMER_DELAY_SEC, properties::TIMER_DELAY_MS, properties::TIMER_DELIVER_MS];
/// What delivery adds to the properties at most: `TIMER_DEQUEUE_MS`, its separators and up to
/// 20 digits. Reserved when a timer message is stored, so its delivery always fits.
const DELIVERY_RESERVE: usize = properties::TIMER_DEQUEUE_MS.len() + 2 + 20;
/// Most due messages delivered per lock of the index.
const BATCH: usize = 256;
/// How long to wait before retrying when the real topic had no room.
const RETRY_FULL: Duration = Duration::from_millis(100);
/// First byte of the journal keys of done offsets (`t` + queue u32 BE + offset u64 BE).
const DONE_PREFIX: u8 = b't';
/// Messages read per call when the index is rebuilt at start.
const REBUILD_BATCH: usize = 1024;

/// How a sent message waits before it is delivered to its topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// It does not: it is stored at once.
    No,
    /// At a delay level (`DELAY`).
    Level(u32),
    /// Until this epoch millisecond (a timer message).
    Until(u64),
}

/// How a message with `props` (and their view `routing`) waits, as RocketMQ 5 reads it (`HookUtils.handleScheduleMessage`):
/// a delay level wins and the timer properties are removed from `props`; a message already
/// carrying `TIMER_OUT_MS` is no timer message; otherwise `TIMER_DELAY_SEC`, then
/// `TIMER_DELAY_MS`, then `TIMER_DELIVER_MS` give the due time, and a time not after `now` is
/// no wait at all.
///
/// # Errors
/// The remark RocketMQ answers `MESSAGE_ILLEGAL` (13) with: a value that is not an integer, a
/// due time more than `max_delay_sec` ahead, or a timer deletion (`TIMER_DEL_UNIQKEY`) for a
/// time already past; and baiji's remark for a deletion of a waiting timer, which it does not
/// support.
pub(crate) fn wait_of(
    props: &mut Cow<'_, [u8]>,
    routing: &Routing<'_>,
    now: u64,
    max_delay_sec: u64,
) -> Result<Wait, String> {
    let has_timer = routing.has_timer();
    if let Some(level) = delay::delay_level(routing.delay) {
        if has_timer {
            *props = Cow::Owned(delay::rewrite_properties(props, &TIMER_KEYS, &[]));
        }
        return Ok(Wait::Level(level));
    }
    if !has_timer || routing.timer_out_ms.is_some() {
        return Ok(Wait::No);
    }
    let max_ms = i128::from(max_delay_sec) * 1000;
    let illegal = || {
        format!(
            "timer message illegal, the delay time should not be bigger than the max delay \
             {max_ms}ms; or if set del msg, the delay time should be bigger than the current time"
        )
    };
    let value = |v: Option<&str>| -> Option<Result<i64, String>> {
        v.map(|v| v.parse::<i64>().map_err(|_| illegal()))
    };
    let now_i = i128::from(now);
    let due = if let Some(sec) = value(routing.timer_delay_sec) {
        now_i + i128::from(sec?) * 1000
    } else if let Some(ms) = value(routing.timer_delay_ms) {
        now_i + i128::from(ms?)
    } else if let Some(at) = value(routing.timer_deliver_ms) {
        i128::from(at?)
    } else {
        return Ok(Wait::No);
    };
    let deletes = routing.timer_del_uniqkey.is_some();
    if due <= now_i {
        return if deletes { Err(illegal()) } else { Ok(Wait::No) };
    }
    if due - now_i > max_ms {
        return Err(illegal());
    }
    if deletes {
        return Err(
            "baiji does not support deleting a waiting timer message (TIMER_DEL_UNIQKEY)".into()
        );
    }
    u64::try_from(due).map(Wait::Until).map_err(|_| illegal())
}

/// One waiting timer message: when it is due and where it waits. Ordered by due time, then
/// place (`key` never decides: a place holds one message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Entry {
    /// Due time, epoch milliseconds.
    pub(crate) due: u64,
    /// Its queue in the timer topic.
    pub(crate) queue: u32,
    /// Its offset there.
    pub(crate) offset: u64,
    /// [`key_of`] its real topic and `UNIQ_KEY`: a recall reads only the records it may name.
    pub(crate) key: u32,
}

/// The 32-bit key of a timer message's real topic and `UNIQ_KEY` ([`Entry::key`]).
pub(crate) fn key_of(topic: &str, uniq_key: &str) -> u32 {
    let mut bytes = Vec::with_capacity(topic.len() + 1 + uniq_key.len());
    bytes.extend_from_slice(topic.as_bytes());
    bytes.push(1);
    bytes.extend_from_slice(uniq_key.as_bytes());
    crate::hash::fnv1a_64(&bytes) as u32
}

/// The waiting timer messages by due time, and, per queue of the timer topic, how far the
/// delivered ones can be released.
///
/// Invariants: every entry is in `waiting` until [`pop_due`](Self::pop_due) hands it out or
/// [`remove`](Self::remove) takes it (and back in only if [`insert`](Self::insert)ed again);
/// per queue, `next` only grows, and `done` holds exactly the offsets reported done that are
/// above `next`.
#[derive(Debug)]
pub(crate) struct TimerIndex {
    waiting: BTreeSet<Entry>,
    release: Vec<Release>,
}

/// Per queue: every offset below `next` is done; `done` holds those above it.
#[derive(Debug)]
struct Release {
    next: u64,
    done: BTreeSet<u64>,
}

impl TimerIndex {
    /// An empty index over queues whose first offsets are `starts`.
    pub(crate) fn new(starts: impl IntoIterator<Item = u64>) -> Self {
        TimerIndex {
            waiting: BTreeSet::new(),
            release: starts
                .into_iter()
                .map(|next| Release { next, done: BTreeSet::new() })
                .collect(),
        }
    }

    /// Adds a waiting message.
    pub(crate) fn insert(&mut self, e: Entry) {
        self.waiting.insert(e);
    }

    /// The earliest due time, if any message waits.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.waiting.first().map(|e| e.due)
    }

    /// Removes and returns the earliest message if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<Entry> {
        if self.next_due()? > now {
            return None;
        }
        self.waiting.pop_first()
    }

    /// Messages waiting.
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The waiting messages due within `due` whose key is `key`.
    pub(crate) fn candidates(&self, due: RangeInclusive<u64>, key: u32) -> Vec<Entry> {
        let lo = Entry { due: *due.start(), queue: 0, offset: 0, key: 0 };
        let hi = Entry { due: *due.end(), queue: u32::MAX, offset: u64::MAX, key: u32::MAX };
        if lo > hi {
            return Vec::new();
        }
        self.waiting.range(lo..=hi).filter(|e| e.key == key).copied().collect()
    }

    /// Takes a waiting message out (never handed out then); false when it no longer waits.
    pub(crate) fn remove(&mut self, e: &Entry) -> bool {
        self.waiting.remove(e)
    }

    /// The first offset of `queue` not yet known done (everything below it is released).
    pub(crate) fn next_release(&self, queue: u32) -> Option<u64> {
        self.release.get(queue as usize).map(|r| r.next)
    }

    /// Records that the message at `offset` of `queue` is delivered (or gone). Returns the
    /// queue's new committed offset when the prefix of done offsets grew: everything below
    /// it can be released. A repeated or unknown report changes nothing.
    pub(crate) fn done(&mut self, queue: u32, offset: u64) -> Option<u64> {
        let r = self.release.get_mut(queue as usize)?;
        if offset < r.next {
            return None;
        }
        if offset > r.next {
            r.done.insert(offset);
            return None;
        }
        r.next += 1;
        while r.done.remove(&r.next) {
            r.next += 1;
        }
        Some(r.next)
    }
}

/// The upper bounds of the delay bands (ms), from 1 s growing by a quarter, until one covers
/// `max_delay_ms`. Band `i` holds delays below `bounds[i]` (and at least `bounds[i - 1]`); the
/// last band, `bounds.len()`, holds the rest.
fn band_bounds(max_delay_ms: u64) -> Vec<u64> {
    let mut bounds = vec![1_000u64];
    let mut b = 1_000u64;
    while b <= max_delay_ms {
        b = b.saturating_add(b / 4);
        bounds.push(b);
        if b == u64::MAX {
            break;
        }
    }
    bounds
}

/// The band (timer-topic queue) of a delay.
fn band(bounds: &[u64], delay_ms: u64) -> u32 {
    bounds.partition_point(|&b| b <= delay_ms) as u32
}

/// The journal key of a done offset.
fn done_key(queue: u32, offset: u64) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[0] = DONE_PREFIX;
    k[1..5].copy_from_slice(&queue.to_be_bytes());
    k[5..].copy_from_slice(&offset.to_be_bytes());
    k
}

/// The queue and offset of a [`done_key`].
fn decode_done_key(k: &[u8]) -> Option<(u32, u64)> {
    let rest = k.strip_prefix(&[DONE_PREFIX])?;
    let queue = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let offset = u64::from_be_bytes(rest.get(4..)?.try_into().ok()?);
    Some((queue, offset))
}

/// The timer topic and its index, created on first use.
#[derive(Debug)]
struct State {
    topic: Arc<dyn TopicStore>,
    /// The timer group's handle: its commits release delivered messages.
    holder: Arc<dyn GroupStore>,
    bounds: Vec<u64>,
    index: TimerIndex,
    /// Taken from the index by the delivery task and not yet reported back.
    in_flight: usize,
}

impl State {
    /// Records that `e` is delivered, recalled or gone. Without a journal, returns the commit
    /// that releases what it allows, for the caller to make after the lock. With one, records
    /// it now (see the module docs: journals an offset above the prefix, or commits the grown
    /// prefix and deletes the keys it passed) and returns `None`.
    fn finish(&mut self, journal: Option<&Journal>, e: &Entry) -> Option<(u32, u64)> {
        let Some(j) = journal else {
            return self.index.done(e.queue, e.offset).map(|c| (e.queue, c));
        };
        let before = self.index.next_release(e.queue)?;
        match self.index.done(e.queue, e.offset) {
            None if e.offset > before => {
                if let Err(err) = j.put(&done_key(e.queue, e.offset), &[]) {
                    tracing::error!(queue = e.queue, offset = e.offset, error = %err, "a delivered timer message could not be journaled: a restart delivers it again");
                }
            }
            None => {}
            Some(c) => {
                if let Err(err) = self.holder.commit(e.queue, c) {
                    tracing::error!(queue = e.queue, offset = c, error = %err, "delivered timer messages could not be released");
                }
                for o in before + 1..c {
                    if let Err(err) = j.delete(&done_key(e.queue, o)) {
                        tracing::warn!(error = %err, "a released timer offset could not be forgotten (dropped at the next start)");
                    }
                }
            }
        }
        None
    }
}

/// The broker's timer messages: the index and a wake-up for the delivery task.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    state: Mutex<Option<State>>,
    wake: Notify,
    /// Where the done offsets are journaled (see the module docs); `None`: nowhere.
    journal: Option<Arc<Journal>>,
}

impl Timers {
    /// No timer state yet; done offsets journaled in `journal` if there is one.
    pub(crate) fn new(journal: Option<Arc<Journal>>) -> Self {
        Timers { journal, ..Timers::default() }
    }

    /// Timer messages waiting (those being delivered right now included).
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.state).as_ref().map_or(0, |st| st.index.len() + st.in_flight)
    }
}

/// Runs `f` on the timer state, creating the topic (one queue per band, held by the timer
/// group before anything is stored in it) on first use; with a journal, the index is rebuilt
/// from what the store kept (see [`rebuild`]).
fn with_state<R>(core: &Core, f: impl FnOnce(&mut State) -> R) -> Result<R, StoreError> {
    let mut g = lock(&core.timers.state);
    if let Some(st) = g.as_mut() {
        return Ok(f(st));
    }
    let bounds = band_bounds(core.config.timer_max_delay_sec.saturating_mul(1000));
    let queues = u32::try_from(bounds.len() + 1).unwrap_or(u32::MAX);
    let topic = core.store.ensure_topic(TIMER_TOPIC, queues)?;
    let holder = core.store.holder(TIMER_GROUP, TIMER_TOPIC)?;
    let journal = core.timers.journal.as_deref();
    let starts: Vec<u64> = (0..topic.queue_count())
        .map(|q| {
            let min = topic.offsets(q).map_or(0, |(min, _)| min);
            match journal.and_then(|_| core.store.committed(TIMER_GROUP, TIMER_TOPIC, q)) {
                Some(committed) => committed.max(min),
                None => min,
            }
        })
        .collect();
    let index = TimerIndex::new(starts);
    let st = g.insert(State { topic, holder, bounds, index, in_flight: 0 });
    if let Some(j) = journal {
        rebuild(j, st);
    }
    Ok(f(st))
}

/// Puts back into a new index (whose queues start at the timer group's committed offsets)
/// every stored timer message not journaled done, then reports the journaled done offsets
/// (committing the prefix a crash may have left uncommitted) and commits every queue's start,
/// so the group has a committed offset the store restores (see the module docs).
fn rebuild(journal: &Journal, st: &mut State) {
    let queues = st.topic.queue_count();
    let mut done: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); queues as usize];
    for (k, _) in journal.entries(&[DONE_PREFIX]) {
        let known = decode_done_key(&k)
            .filter(|(q, o)| st.index.next_release(*q).is_some_and(|next| *o >= next));
        match known {
            Some((q, o)) => {
                done[q as usize].insert(o);
            }
            None => {
                // Below the committed prefix (a crash before its deletion) or unknown.
                if let Err(e) = journal.delete(&k) {
                    tracing::warn!(error = %e, "a released timer offset could not be forgotten");
                }
            }
        }
    }
    let mut waiting = 0usize;
    for (q, done) in (0..queues).zip(&done) {
        let Some(mut from) = st.index.next_release(q) else { continue };
        let end = st.topic.offsets(q).map_or(0, |(_, end)| end);
        let index = &mut st.index;
        while from < end {
            let mut visit = |m: StoredRef<'_>| {
                if !done.contains(&m.offset) {
                    index.insert(entry_of(q, &m));
                    waiting += 1;
                }
                true
            };
            match st.topic.read(q, from, REBUILD_BATCH, &Filter::All, &mut visit) {
                Ok(out) if out.next_offset > from => from = out.next_offset,
                _ => break,
            }
        }
    }
    for (q, done) in (0..queues).zip(done) {
        for offset in done {
            st.finish(Some(journal), &Entry { due: 0, queue: q, offset, key: 0 });
        }
        if let Some(start) = st.index.next_release(q) {
            if let Err(e) = st.holder.commit(q, start) {
                tracing::error!(queue = q, error = %e, "the timer group's start could not be committed");
            }
        }
    }
    if waiting > 0 {
        tracing::info!(waiting, "timer messages restored");
    }
}

/// The index entry of a stored timer message: due at its `TIMER_OUT_MS` (at once when it has
/// none or its record is malformed: delivery then drops it as it would have).
fn entry_of(queue: u32, m: &StoredRef<'_>) -> Entry {
    let props = super::record::decode(m.record).map_or(&[][..], |d| d.properties);
    let due = properties::find(props, properties::TIMER_OUT_MS)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let real_topic = properties::find(props, properties::REAL_TOPIC).unwrap_or_default();
    let uniq = properties::find(props, properties::UNIQ_KEY).unwrap_or_default();
    Entry { due, queue, offset: m.offset, key: key_of(real_topic, uniq) }
}

/// Rebuilds the timer index at start from a store that kept its state (see the module docs);
/// nothing without a journal or before any timer message was ever stored.
pub(crate) fn restore(core: &Core) {
    if core.timers.journal.is_none() || core.store.topic(TIMER_TOPIC).is_none() {
        return;
    }
    if let Err(e) = with_state(core, |_| ()) {
        tracing::error!(error = %e, "the timer topic cannot be held: waiting timer messages are not restored");
    }
}

/// Stores a message on `topic` queue `queue` as `wait` says: parked in the schedule topic
/// (a delay level) or the timer topic (a due time), or appended at once. Returns the stored
/// copy's topic uid, queue and offset (what the message id names); `tag` is the tags-code of
/// `rec`'s properties. The one place a send and a transaction commit store a message they may
/// have to delay.
pub(crate) fn store(
    core: &Core,
    wait: Wait,
    topic: &Arc<dyn TopicStore>,
    queue: u32,
    rec: &NewRecord<'_>,
    tag: i32,
) -> Result<(u32, u32, u64), PutError> {
    match wait {
        Wait::Level(level) => {
            delay::schedule(core, level, topic.name(), queue, rec).map(|(t, q, o)| (t.uid(), q, o))
        }
        Wait::Until(due) => {
            schedule(core, due, topic.name(), queue, rec).map(|(t, q, o)| (t.uid(), q, o))
        }
        Wait::No => {
            let encoded = super::record::encode(rec, core.cluster_property.len())?;
            Ok(topic.append(queue, encoded, tag, now_ms()).map(|o| (topic.uid(), queue, o))?)
        }
    }
}

/// Stores a timer message due at `due` to be delivered to `real_topic`/`real_queue`. Returns
/// the timer-topic queue and offset it waits at.
///
/// # Errors
/// [`PutError::Record`] when the properties with what is added would not fit a record
/// (checked before anything is stored), [`StoreError::Full`] under `reject` when less than a
/// sixteenth of the budget is free (room kept for deliveries), or the store's error.
pub(crate) fn schedule(
    core: &Core,
    due: u64,
    real_topic: &str,
    real_queue: u32,
    rec: &NewRecord<'_>,
) -> Result<(Arc<dyn TopicStore>, u32, u64), PutError> {
    delay::ensure_delivery_room(core)?;
    let now = now_ms();
    let (topic, queue) = with_state(core, |st| {
        let q =
            band(&st.bounds, due.saturating_sub(now)).min(st.topic.queue_count().saturating_sub(1));
        (Arc::clone(&st.topic), q)
    })?;
    let (due_str, now_str) = (due.to_string(), now.to_string());
    let add =
        [(properties::TIMER_OUT_MS, due_str.as_str()), (properties::TIMER_ENQUEUE_MS, &now_str)];
    let offset = delay::park(
        core,
        topic.as_ref(),
        queue,
        Parked { real_topic, real_queue, add: &add, reserve: DELIVERY_RESERVE },
        rec,
    )?;
    let uniq = properties::find(rec.properties, properties::UNIQ_KEY).unwrap_or_default();
    let key = key_of(real_topic, uniq);
    let first = with_state(core, |st| {
        let first = st.index.next_due().map_or(true, |next| due < next);
        st.index.insert(Entry { due, queue, offset, key });
        first
    })?;
    if first {
        core.timers.wake.notify_one();
    }
    Ok((topic, queue, offset))
}

/// Delivers one due timer message. `Ok(false)`: no room, try again later.
fn deliver(core: &Core, topic: &dyn TopicStore, e: Entry) -> Result<bool, StoreError> {
    let Some((stored, _)) = core.store.get(topic, e.queue, e.offset) else {
        // Evicted by `drop-oldest` (counted there): nothing left to deliver.
        return Ok(true);
    };
    let now = now_ms().to_string();
    delay::deliver_record(
        core,
        &stored,
        e.offset,
        &[properties::REAL_TOPIC, properties::REAL_QID],
        &[(properties::TIMER_DEQUEUE_MS, &now)],
    )
}

/// Takes the waiting timer message of `real_topic` with `uniq_key`, due within `due`, out of
/// the index: it is never delivered, and its stored copy is released as a delivered one is.
/// False when none waits so (delivered, recalled already, never sent, or evicted); one the
/// delivery task has taken out already is delivered.
pub(crate) fn recall(
    core: &Core,
    real_topic: &str,
    uniq_key: &str,
    due: RangeInclusive<u64>,
) -> bool {
    let key = key_of(real_topic, uniq_key);
    let (topic, candidates) = {
        let g = lock(&core.timers.state);
        let Some(st) = g.as_ref() else { return false };
        (Arc::clone(&st.topic), st.index.candidates(due, key))
    };
    // The records are read without the lock (as the delivery task reads them); the entry
    // is taken out only if it still waits.
    let names = |e: &Entry| {
        let Some((stored, _)) = core.store.get(topic.as_ref(), e.queue, e.offset) else {
            return false;
        };
        super::record::decode(&stored).is_some_and(|d| {
            properties::find(d.properties, properties::REAL_TOPIC) == Some(real_topic)
                && properties::find(d.properties, properties::UNIQ_KEY) == Some(uniq_key)
        })
    };
    let Some(e) = candidates.into_iter().find(names) else { return false };
    let (commit, holder) = {
        let mut g = lock(&core.timers.state);
        let Some(st) = g.as_mut() else { return false };
        if !st.index.remove(&e) {
            return false;
        }
        (st.finish(core.timers.journal.as_deref(), &e), Arc::clone(&st.holder))
    };
    if let Some((q, c)) = commit {
        let _ = holder.commit(q, c);
    }
    true
}

/// Delivers timer messages when due until shutdown.
pub(crate) async fn run(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    let mut due = Vec::with_capacity(BATCH);
    let journal = core.timers.journal.clone();
    let journal = journal.as_deref();
    loop {
        let now = now_ms();
        let taken = with_state(&core, |st| {
            while due.len() < BATCH {
                match st.index.pop_due(now) {
                    Some(e) => due.push(e),
                    None => break,
                }
            }
            st.in_flight = due.len();
            (Arc::clone(&st.topic), Arc::clone(&st.holder))
        });
        let (topic, holder) = match taken {
            Ok(t) => t,
            Err(e) => {
                // Sends fail the same way until the topic exists; keep trying.
                tracing::error!(error = %e, "cannot create the timer topic; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        let full_batch = due.len() == BATCH;
        let mut released = Vec::with_capacity(due.len());
        let mut waiting = Vec::new();
        for e in due.drain(..) {
            if !waiting.is_empty() {
                waiting.push(e);
                continue;
            }
            let delivered = match deliver(&core, topic.as_ref(), e) {
                Ok(true) => true,
                Ok(false) => {
                    waiting.push(e);
                    false
                }
                Err(err) => {
                    tracing::warn!(error = %err, "delivering a timer message failed; dropped");
                    true
                }
            };
            if delivered && journal.is_some() {
                // Recorded at once, not after the batch: a crash re-delivers at most this one.
                let _ = with_state(&core, |st| st.finish(journal, &e));
            } else if delivered {
                released.push(e);
            }
        }
        let no_room = !waiting.is_empty();
        let mut commits = Vec::new();
        let next = with_state(&core, |st| {
            st.in_flight = 0;
            for e in waiting {
                st.index.insert(e);
            }
            for e in released {
                commits.extend(st.finish(None, &e));
            }
            st.index.next_due()
        })
        .ok()
        .flatten();
        for (q, c) in commits {
            let _ = holder.commit(q, c);
        }
        let wait = if no_room {
            RETRY_FULL
        } else if full_batch {
            Duration::ZERO
        } else {
            next.map_or(Duration::from_secs(3600), |d| {
                Duration::from_millis(d.saturating_sub(now_ms()))
            })
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = core.timers.wake.notified() => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;
    const MAX: u64 = 259_200;

    fn wait(props: &[u8]) -> (Result<Wait, String>, Vec<u8>) {
        let mut p = Cow::Borrowed(props);
        let w = wait_of(&mut p, &Routing::parse(props), NOW, MAX);
        (w, p.into_owned())
    }

    #[test]
    fn given_timer_properties_when_reading_the_wait_should_follow_rocketmq_precedence() {
        assert_eq!(wait(b"TIMER_DELAY_SEC\x0110\x02").0, Ok(Wait::Until(NOW + 10_000)));
        assert_eq!(wait(b"TIMER_DELAY_MS\x011500\x02").0, Ok(Wait::Until(NOW + 1_500)));
        let at = format!("TIMER_DELIVER_MS\x01{}\x02", NOW + 7);
        assert_eq!(wait(at.as_bytes()).0, Ok(Wait::Until(NOW + 7)));
        // DELAY_SEC before DELAY_MS before DELIVER_MS.
        assert_eq!(
            wait(b"TIMER_DELIVER_MS\x011\x02TIMER_DELAY_MS\x015\x02TIMER_DELAY_SEC\x012\x02").0,
            Ok(Wait::Until(NOW + 2_000))
        );
        assert_eq!(wait(b"TAGS\x01A\x02").0, Ok(Wait::No));
        // Already carrying TIMER_OUT_MS: not a timer message (RocketMQ's double check).
        assert_eq!(wait(b"TIMER_DELAY_SEC\x0110\x02TIMER_OUT_MS\x011\x02").0, Ok(Wait::No));
    }

    #[test]
    fn given_a_delay_level_and_timer_properties_when_reading_the_wait_should_use_the_level_and_drop_them(
    ) {
        let (w, p) = wait(b"DELAY\x012\x02TIMER_DELAY_SEC\x0110\x02TAGS\x01A\x02");
        assert_eq!(w, Ok(Wait::Level(2)));
        assert_eq!(properties::parse(&p), vec![("DELAY", "2"), ("TAGS", "A")]);
    }

    #[test]
    fn given_a_time_not_ahead_when_reading_the_wait_should_deliver_at_once() {
        assert_eq!(wait(format!("TIMER_DELIVER_MS\x01{NOW}\x02").as_bytes()).0, Ok(Wait::No));
        assert_eq!(wait(b"TIMER_DELIVER_MS\x011\x02").0, Ok(Wait::No));
        assert_eq!(wait(b"TIMER_DELAY_SEC\x01-5\x02").0, Ok(Wait::No));
        assert_eq!(wait(b"TIMER_DELAY_MS\x010\x02").0, Ok(Wait::No));
    }

    #[test]
    fn given_an_illegal_timer_when_reading_the_wait_should_answer_rocketmqs_remark() {
        let remark = "timer message illegal, the delay time should not be bigger than the max \
                      delay 259200000ms; or if set del msg, the delay time should be bigger than \
                      the current time";
        let beyond = format!("TIMER_DELIVER_MS\x01{}\x02", NOW + MAX * 1000 + 1);
        assert_eq!(wait(beyond.as_bytes()).0, Err(remark.to_string()));
        let at_max = format!("TIMER_DELIVER_MS\x01{}\x02", NOW + MAX * 1000);
        assert_eq!(wait(at_max.as_bytes()).0, Ok(Wait::Until(NOW + MAX * 1000)));
        assert_eq!(wait(b"TIMER_DELAY_SEC\x01259201\x02").0, Err(remark.to_string()));
        assert_eq!(wait(b"TIMER_DELAY_SEC\x01abc\x02").0, Err(remark.to_string()));
        assert_eq!(wait(b"TIMER_DELAY_MS\x01 5\x02").0, Err(remark.to_string()));
        // An empty value is no property at all (Java's decoder drops it too).
        assert_eq!(wait(b"TIMER_DELIVER_MS\x01\x02").0, Ok(Wait::No));
        assert_eq!(wait(b"TIMER_DELIVER_MS\x011.5e12\x02").0, Err(remark.to_string()));
        assert_eq!(wait(b"TIMER_DELAY_SEC\x019223372036854775807\x02").0, Err(remark.to_string()));
        assert_eq!(
            wait(b"TIMER_DELIVER_MS\x011\x02TIMER_DEL_UNIQKEY\x01k\x02").0,
            Err(remark.to_string())
        );
        assert!(wait(b"TIMER_DELAY_SEC\x011\x02TIMER_DEL_UNIQKEY\x01k\x02").0.is_err());
    }

    #[test]
    fn given_the_default_maximum_when_banding_delays_should_use_58_queues_and_cover_every_delay() {
        let b = band_bounds(MAX * 1000);
        assert_eq!(b.len() + 1, 58);
        assert_eq!(band(&b, 0), 0);
        assert_eq!(band(&b, 999), 0);
        assert_eq!(band(&b, 1_000), 1);
        assert_eq!(band(&b, MAX * 1000) as usize, b.len() - 1);
        assert!(b.windows(2).all(|w| w[1] > w[0] && w[1] <= w[0] + w[0] / 4 + 1));
        assert!(band_bounds(u64::MAX).len() < 200, "any maximum fits a topic's queue count");
    }

    /// A small deterministic generator (no `rand` in the library's dev-dependencies).
    fn next(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn given_many_random_due_times_when_the_clock_advances_should_hand_each_out_once_in_due_order_and_release_every_offset(
    ) {
        let bounds = band_bounds(MAX * 1000);
        let queues = bounds.len() + 1;
        let mut idx = TimerIndex::new(vec![0; queues]);
        let mut next_offset = vec![0u64; queues];
        let mut committed = vec![0u64; queues];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut now = 0u64;
        let mut waiting = std::collections::HashSet::new();
        let mut handed = std::collections::HashSet::new();
        for round in 0..400 {
            // Store a few messages at random delays (some far, some already due).
            for _ in 0..(next(&mut seed) % 40) {
                let delay = match next(&mut seed) % 4 {
                    0 => next(&mut seed) % 2_000,
                    1 => next(&mut seed) % 60_000,
                    2 => next(&mut seed) % 3_600_000,
                    _ => next(&mut seed) % (MAX * 1000),
                };
                let q = band(&bounds, delay) as usize;
                let e = Entry { due: now + delay, queue: q as u32, offset: next_offset[q], key: 0 };
                next_offset[q] += 1;
                idx.insert(e);
                assert!(waiting.insert(e));
            }
            // Advance the clock: mostly a little, at the end past every due time.
            now += if round < 390 { next(&mut seed) % 5_000 } else { MAX * 1000 };
            let mut last_due = 0;
            while let Some(e) = idx.pop_due(now) {
                assert!(e.due <= now, "never handed out before due");
                assert!(e.due >= last_due, "handed out in due order");
                last_due = e.due;
                assert!(waiting.remove(&e), "each entry handed out once");
                assert!(handed.insert(e));
                if let Some(c) = idx.done(e.queue, e.offset) {
                    assert!(c > committed[e.queue as usize], "commits only move forward");
                    committed[e.queue as usize] = c;
                }
                assert_eq!(idx.done(e.queue, e.offset), None, "a repeated report changes nothing");
            }
            assert_eq!(idx.next_due().map(|d| d > now), (!waiting.is_empty()).then_some(true));
        }
        assert!(waiting.is_empty() && idx.len() == 0, "everything was handed out");
        assert!(handed.len() > 1000, "the model exercised enough entries: {}", handed.len());
        assert_eq!(
            committed, next_offset,
            "every stored offset is released, exactly up to the end"
        );
    }

    #[test]
    fn given_waiting_entries_when_one_is_taken_out_should_find_it_by_time_and_key_and_never_hand_it_out(
    ) {
        let mut idx = TimerIndex::new([0]);
        let a = Entry { due: 10, queue: 0, offset: 0, key: 7 };
        let b = Entry { due: 10, queue: 0, offset: 1, key: 8 };
        let c = Entry { due: 12, queue: 0, offset: 2, key: 7 };
        for e in [c, b, a] {
            idx.insert(e);
        }
        assert_eq!(idx.candidates(9..=10, 7), vec![a], "by due time and key");
        assert_eq!(idx.candidates(10..=12, 7), vec![a, c]);
        assert_eq!(idx.candidates(11..=11, 7), vec![]);
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = idx.candidates(12..=10, 7);
        assert_eq!(backwards, vec![], "an empty range finds nothing");
        assert!(idx.remove(&a));
        assert!(!idx.remove(&a), "taken out once");
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.done(0, 0), Some(1), "its offset is released like a delivered one");
        assert_eq!(idx.pop_due(100), Some(b), "never handed out");
        assert_eq!(idx.pop_due(100), Some(c));
        assert_eq!(idx.pop_due(100), None);
    }

    #[test]
    fn given_a_done_offset_when_journaled_should_decode_to_its_queue_and_offset_and_refuse_garbage()
    {
        let k = done_key(57, (1 << 36) - 1);
        assert_eq!(decode_done_key(&k), Some((57, (1 << 36) - 1)));
        assert!(done_key(1, 0) > done_key(0, u64::MAX), "keys sort by queue, then offset");
        assert_eq!(decode_done_key(&k[..12]), None, "a short key");
        let mut other = k;
        other[0] = b'h';
        assert_eq!(decode_done_key(&other), None, "another prefix");
        assert_eq!(decode_done_key(&[k.as_slice(), &[0]].concat()), None, "a long key");
    }

    #[test]
    fn given_offsets_done_out_of_order_when_releasing_should_commit_only_the_contiguous_prefix() {
        let mut idx = TimerIndex::new([5, 0]);
        assert_eq!(idx.done(0, 7), None);
        assert_eq!(idx.done(0, 6), None);
        assert_eq!(idx.done(0, 4), None, "below the start: already released");
        assert_eq!(idx.done(0, 5), Some(8));
        assert_eq!(idx.done(1, 0), Some(1));
        assert_eq!(idx.done(9, 0), None, "an unknown queue changes nothing");
    }
}
