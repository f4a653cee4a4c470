//! The engine: topics of lock-free queues, consumer groups, acknowledgement, reclamation and
//! the memory budget — the library face of baiji. It knows nothing of the wire protocol.
//!
//! ```
//! use baiji::engine::{Engine, EngineConfig, Filter, Message, StartFrom, SubscribeOptions};
//!
//! # fn main() -> Result<(), baiji::engine::EngineError> {
//! let engine = Engine::new(EngineConfig::default())?;
//! engine.create_topic("orders", 4)?;
//!
//! // A group that sees tag "paid" only, from the oldest retained message.
//! let group = engine.subscribe(
//!     "billing",
//!     "orders",
//!     SubscribeOptions { filter: Filter::tags(["paid"]), start: StartFrom::First, ..Default::default() },
//! )?;
//! let mut consumer = group.join()?;
//!
//! let mut producer = engine.producer("orders")?;
//! producer.send(Message::new("order 1 paid").with_tag("paid"))?;
//! producer.send(Message::new("order 2 created").with_tag("created"))?;
//!
//! let got = consumer.recv_timeout(16, std::time::Duration::from_secs(1))?;
//! assert_eq!(got.len(), 1);
//! assert_eq!(&got[0].payload[..], b"order 1 paid");
//! consumer.ack(&got[0])?;
//!
//! engine.reap(); // normally the reaper thread does this
//! assert_eq!(engine.stats().live_messages, 0, "acknowledged and filtered messages are reclaimed");
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! * Per queue, offsets are dense and every member sees its messages in offset order.
//! * Within a clustering group each message goes to one member at a time; what a member
//!   received but did not acknowledge is delivered again to the group when its queue moves to
//!   another member (at-least-once). Broadcasting members each see every message.
//! * A message is reclaimed once every group that must see it acknowledged it (by commit,
//!   per-message ack, filter miss or broadcasting position), never earlier unless the
//!   `drop-oldest` policy evicted it, which each affected group counts in `dropped`.
//! * Messages no group must see are kept for the configured [`Retention`].

mod config;
mod consumer;
mod epoch;
mod error;
mod group;
mod topic;
mod types;

#[cfg(test)]
mod reap_tests;

use std::collections::HashMap;
use std::task::Poll;

use crossbeam_epoch::{Collector, Guard};
use crossbeam_utils::CachePadded;

use config::SCAN_LIMIT;
pub use config::{EngineConfig, MemoryPolicy, Retention};
pub use consumer::Consumer;
pub use error::EngineError;
pub use group::pop::{INFLIGHT_ENTRY_SIZE, INFLIGHT_LIMIT};
pub use types::{
    AckOutcome, Delivery, EngineStats, Filter, GroupStats, MemberId, Message, MessageRef, Mode,
    PopInit, PopOutcome, PopRequest, Popped, QueueStats, Receipt, StartFrom,
};

/// Bytes the engine counts for each message on top of its payload (its queue node).
pub use crate::queue::NODE_SIZE;

use epoch::Epoch;
use group::Sub;
use topic::{valid_topic_name, EQueue, Topic};

use crate::queue::{Reclaimer, WaitList, WaitState, Wakeup};
use crate::sync::plain::{
    AtomicBool as PlainBool, AtomicU64 as PlainU64, Ordering as PlainOrdering,
};
use crate::sync::{lock, mutant, read, try_lock, write, Arc, AtomicU64, Mutex, Ordering, RwLock};

/// Most queues a topic may have.
pub const MAX_QUEUES: u32 = 1024;

/// Most nodes one reaper pass unlinks from one queue (keeps the head lock short).
const REAP_BATCH: u64 = if cfg!(loom) { 4 } else { 8192 };

pub(crate) use crate::time::now_ms;

/// Shared state behind every handle.
pub(crate) struct Inner {
    config: EngineConfig,
    /// The settings an operator may change while the engine runs (they start as `config`'s).
    live: LiveSettings,
    epoch: Epoch,
    reclaimer: Arc<Reclaimer>,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    used: CachePadded<AtomicU64>,
    rejected: PlainU64,
    /// Async sends waiting for room under the `block` policy.
    room: WaitList,
    /// Deleted topics that handles may still reference (review 2.2): an append that passed its
    /// "deleted?" check before `delete_topic` can link its message after the topic's queues
    /// were released. The reaper sweeps these until nobody else holds them (`sweep_graveyard`).
    graveyard: Mutex<Vec<Arc<Topic>>>,
    closed: PlainBool,
    next_id: PlainU64,
    /// When the last reaper pass finished, ms since the epoch (0: none yet).
    last_pass_ms: PlainU64,
    reaper: Mutex<Option<std::thread::Thread>>,
    /// Held by the one request thread running a pass for room (engines without a reaper).
    inline_reap: Mutex<()>,
    /// Passes and releases run on request threads (tests).
    #[cfg(test)]
    inline_work: PlainU64,
}

/// The settings [`Engine::apply_settings`] changes while the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Bytes of payload plus bookkeeping the engine may hold.
    pub memory_budget: u64,
    /// What happens when an append would exceed the budget.
    pub policy: MemoryPolicy,
    /// Retention of unheld messages on topics without their own.
    pub retention: Retention,
}

/// [`Settings`] as atomics. Each is read on its own (Relaxed): a setting is a limit read
/// afresh by each append or reaper pass, not a synchronisation point; an append racing a
/// change may see the old or the new value, either is a valid limit.
#[derive(Debug)]
struct LiveSettings {
    budget: PlainU64,
    policy: PlainU64,
    retention_ms: PlainU64,
    retention_bytes: PlainU64,
}

impl LiveSettings {
    fn new(c: &EngineConfig) -> Self {
        let l = LiveSettings {
            budget: PlainU64::new(0),
            policy: PlainU64::new(0),
            retention_ms: PlainU64::new(0),
            retention_bytes: PlainU64::new(0),
        };
        l.set(Settings {
            memory_budget: c.memory_budget,
            policy: c.policy,
            retention: c.retention,
        });
        l
    }

    fn set(&self, s: Settings) {
        let policy = match s.policy {
            MemoryPolicy::Reject => 0,
            MemoryPolicy::DropOldest => 1,
            MemoryPolicy::Block => 2,
        };
        // Relaxed: see the type's docs.
        self.budget.store(s.memory_budget, PlainOrdering::Relaxed);
        self.policy.store(policy, PlainOrdering::Relaxed);
        self.retention_ms.store(s.retention.time.as_millis() as u64, PlainOrdering::Relaxed);
        self.retention_bytes.store(s.retention.bytes, PlainOrdering::Relaxed);
    }

    fn budget(&self) -> u64 {
        // Relaxed: see the type's docs.
        self.budget.load(PlainOrdering::Relaxed)
    }

    fn policy(&self) -> MemoryPolicy {
        // Relaxed: see the type's docs.
        match self.policy.load(PlainOrdering::Relaxed) {
            1 => MemoryPolicy::DropOldest,
            2 => MemoryPolicy::Block,
            _ => MemoryPolicy::Reject,
        }
    }

    fn retention(&self) -> Retention {
        // Relaxed: see the type's docs.
        Retention {
            time: std::time::Duration::from_millis(self.retention_ms.load(PlainOrdering::Relaxed)),
            bytes: self.retention_bytes.load(PlainOrdering::Relaxed),
        }
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("bytes_used", &self.used.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Inner {
    pub(crate) fn pin(&self) -> Guard {
        self.epoch.pin()
    }

    fn check_open(&self) -> Result<(), EngineError> {
        // Acquire: pairs with the Release store in `Engine::drop`.
        if self.closed.load(PlainOrdering::Acquire) {
            Err(EngineError::Closed)
        } else {
            Ok(())
        }
    }

    fn next_id(&self) -> u64 {
        // Relaxed: uniqueness only.
        self.next_id.fetch_add(1, PlainOrdering::Relaxed)
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>, EngineError> {
        self.check_open()?;
        read(&self.topics).get(name).cloned().ok_or_else(|| EngineError::UnknownTopic(name.into()))
    }

    fn message_cost(&self, msg: &Message) -> Result<u64, EngineError> {
        let size = msg.payload.len();
        if size > self.config.max_message_size {
            return Err(EngineError::MessageTooLarge { size, limit: self.config.max_message_size });
        }
        Ok(size as u64 + NODE_SIZE as u64)
    }

    /// Charges (positive) or releases (negative) the bookkeeping of `delta` POP in-flight
    /// entries. Never refused: the entries exist already; appends see the smaller room.
    fn charge_inflight(&self, delta: i64) {
        let bytes = delta.unsigned_abs() * group::pop::INFLIGHT_ENTRY_SIZE;
        // Relaxed: a counter, as in `reserve`.
        if delta > 0 {
            self.used.fetch_add(bytes, Ordering::Relaxed);
        } else if delta < 0 {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Takes `cost` bytes from the budget, applying the policy when there is no room.
    fn reserve(&self, cost: u64, topic: &Topic, queue: u32) -> Result<(), EngineError> {
        let budget = self.live.budget();
        // Relaxed: a counter; the budget is a limit, not a synchronisation point.
        let prev = self.used.fetch_add(cost, Ordering::Relaxed);
        if prev + cost <= budget {
            return Ok(());
        }
        if self.live.policy() == MemoryPolicy::DropOldest && cost <= budget {
            // Only this append's share of the overshoot: `prev` includes the costs of racing
            // appends, which evict their own shares (the shares add up to the total).
            let overshoot = prev + cost - budget;
            let own = if mutant("evict_total_overshoot") { overshoot } else { overshoot.min(cost) };
            self.evict(own, topic, queue);
            return Ok(());
        }
        self.used.fetch_sub(cost, Ordering::Relaxed);
        // The reaper may simply not have run yet: have what is reclaimable reclaimed, retry once.
        self.reap_for_room();
        let prev = self.used.fetch_add(cost, Ordering::Relaxed);
        if prev + cost <= budget {
            return Ok(());
        }
        self.used.fetch_sub(cost, Ordering::Relaxed);
        Err(EngineError::BudgetExceeded { needed: cost, used: prev, budget })
    }

    /// Counts `e` in `rejected_messages` if it is a refusal for lack of room. Called where the
    /// refusal is final (an async send under `block` that waits and then succeeds is not one).
    fn refused(&self, e: EngineError) -> EngineError {
        if matches!(e, EngineError::BudgetExceeded { .. }) {
            // Relaxed: a statistic.
            self.rejected.fetch_add(1, PlainOrdering::Relaxed);
        }
        e
    }

    /// Checks everything about an append except the budget; returns the queue and the cost.
    fn prepare<'t>(
        &self,
        topic: &'t Topic,
        queue: u32,
        msg: &Message,
    ) -> Result<(&'t EQueue, u64), EngineError> {
        let Some(eq) = topic.queues.get(queue as usize) else {
            return Err(EngineError::QueueOutOfRange {
                topic: topic.name.clone(),
                queue,
                queues: topic.queue_count(),
            });
        };
        self.check_open()?;
        if topic.is_deleted() {
            return Err(EngineError::UnknownTopic(topic.name.clone()));
        }
        Ok((eq, self.message_cost(msg)?))
    }

    fn append_at(&self, topic: &Topic, queue: u32, msg: Message) -> Result<Receipt, EngineError> {
        let (eq, cost) = self.prepare(topic, queue, &msg)?;
        self.reserve(cost, topic, queue).map_err(|e| self.refused(e))?;
        Ok(self.link(eq, cost, msg))
    }

    /// Links a message whose budget is already reserved.
    fn link(&self, eq: &EQueue, cost: u64, msg: Message) -> Receipt {
        // Relaxed: statistics; added before linking so a queue's byte count never underflows.
        eq.bytes_in.fetch_add(cost, Ordering::Relaxed);
        let guard = self.pin();
        let ts = msg.timestamp.unwrap_or_else(now_ms);
        let a = eq.q.append(msg.payload, ts, msg.tag, &guard);
        Receipt { queue: eq.id, offset: a.offset }
    }

    /// Evicts at least `need` bytes, oldest first: from `queue` of `topic`, then the topic's
    /// other queues, then other topics.
    fn evict(&self, need: u64, topic: &Topic, queue: u32) {
        let mut left = need;
        let n = topic.queues.len();
        for i in 0..n {
            if left == 0 {
                return;
            }
            left =
                left.saturating_sub(self.evict_from(&topic.queues[(queue as usize + i) % n], left));
        }
        let topics: Vec<Arc<Topic>> = read(&self.topics).values().cloned().collect();
        for eq in topics.iter().filter(|t| t.name != topic.name).flat_map(|t| t.queues.iter()) {
            if left == 0 {
                return;
            }
            left = left.saturating_sub(self.evict_from(eq, left));
        }
    }

    /// Evicts the oldest messages of one queue until `need` bytes are released; returns the
    /// bytes released.
    fn evict_from(&self, eq: &EQueue, need: u64) -> u64 {
        let mut head = eq.q.lock_head();
        let guard = self.pin();
        let mut freed = 0u64;
        let u = head.unlink_while(u64::MAX, &guard, |n| {
            if freed >= need {
                return false;
            }
            freed += n.payload().len() as u64 + NODE_SIZE as u64;
            true
        });
        if u.count == 0 {
            return 0;
        }
        let released = eq.account_unlinked(u.count, u.payload_bytes, true);
        self.used.fetch_sub(released, Ordering::Relaxed);
        released
    }

    /// Reclaims what is reclaimable in one queue (`retention`: its topic's). Returns the
    /// number of messages unlinked.
    fn reap_queue(&self, eq: &EQueue, retention: Retention, now: u64) -> u64 {
        let mut head = eq.q.lock_head();
        let guard = self.pin();
        let first = eq.q.first_offset(&guard);
        let mut holds = lock(&eq.holds);
        holds.retain(|h| h.end > first);
        let deadline = now.saturating_sub(retention.time.as_millis() as u64);
        let mut live = eq.live_bytes();
        let u = head.unlink_while(REAP_BATCH, &guard, |n| {
            let o = n.offset();
            let required = holds.iter().filter(|h| h.covers(o)).count() as u32;
            let reclaim = if required == 0 {
                n.timestamp() <= deadline || live > retention.bytes
            } else {
                n.ack_count() + u32::from(mutant("reaper_off_by_one")) >= required
            };
            if reclaim {
                live = live.saturating_sub(n.payload().len() as u64 + NODE_SIZE as u64);
            }
            reclaim
        });
        drop(holds);
        if u.count > 0 {
            let released = eq.account_unlinked(u.count, u.payload_bytes, false);
            self.used.fetch_sub(released, Ordering::Relaxed);
        }
        u.count
    }

    /// A refused append's attempt to make room. With a reaper thread, only wakes it: request
    /// threads never pay for a pass (one refused send per producer would otherwise mean one
    /// full pass each). Without one, runs a pass, unless another thread is already running one.
    fn reap_for_room(&self) {
        if let Some(t) = lock(&self.reaper).as_ref() {
            t.unpark();
            return;
        }
        if let Some(_only) = try_lock(&self.inline_reap) {
            #[cfg(test)]
            self.inline_work.fetch_add(1, PlainOrdering::Relaxed);
            self.reap_pass();
        }
    }

    /// Releases a deleted topic's messages: on the reaper thread if there is one (a whole
    /// topic can be millions of messages), here otherwise. Either way the topic goes to the
    /// graveyard, whose sweep in every pass also releases what a late append linked after
    /// this (review 2.2).
    fn release_later(&self, t: Arc<Topic>) {
        let reaper = lock(&self.reaper).clone();
        if reaper.is_none() {
            #[cfg(test)]
            self.inline_work.fetch_add(1, PlainOrdering::Relaxed);
            release_topic(self, &t);
        }
        if !mutant("no_graveyard") {
            lock(&self.graveyard).push(t);
        }
        if let Some(r) = reaper {
            r.unpark();
        }
    }

    /// One reaper pass over every queue, then frees what the epoch says is safe to free.
    fn reap_pass(&self) -> u64 {
        let topics: Vec<Arc<Topic>> = read(&self.topics).values().cloned().collect();
        let now = now_ms();
        let mut n = 0;
        for t in &topics {
            let retention = t.retention(self.live.retention());
            for eq in t.queues.iter() {
                n += self.reap_queue(eq, retention, now);
            }
        }
        n += self.sweep_graveyard();
        // Push this thread's deferred functions to the collector and let it advance.
        self.pin().flush();
        self.reclaimer.free_ready();
        if n > 0 {
            self.room.wake_all();
        }
        // Relaxed: a statistic for operators (how long ago the reaper last ran); nothing is
        // published through it.
        self.last_pass_ms.store(now_ms(), PlainOrdering::Relaxed);
        n
    }

    /// Releases what late appends linked into deleted topics, and forgets each deleted topic
    /// once the graveyard holds its last reference. Returns the messages unlinked.
    fn sweep_graveyard(&self) -> u64 {
        let mut graves = lock(&self.graveyard);
        let mut n = 0;
        graves.retain_mut(|t| {
            // Unique: no handle is left, so no append can be running on the topic or start on
            // it. `get_mut` synchronises with the other `Arc`s' drops (as `Arc::drop` does), so
            // whatever an append linked before dropping its handle is visible to the sweep
            // below, which is therefore the last one needed.
            let last = Arc::get_mut(t).is_some();
            n += unlink_topic(self, t);
            !last
        });
        n
    }

    fn subs_of(&self, topic: &Topic, group: &str) -> Option<Arc<Sub>> {
        read(&topic.subs).iter().find(|s| s.group == group).cloned()
    }
}

/// Options of a subscription.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscribeOptions {
    /// Which messages the group wants (others count as acknowledged).
    pub filter: Filter,
    /// Where the group starts reading each queue (broadcasting: where each new member starts).
    pub start: StartFrom,
    /// Clustering or broadcasting.
    pub mode: Mode,
}

/// The engine. Dropping it stops the reaper; handles that outlive it get
/// [`EngineError::Closed`].
#[derive(Debug)]
pub struct Engine {
    inner: Arc<Inner>,
    reaper: Option<std::thread::JoinHandle<()>>,
}

impl Engine {
    /// Starts an engine with its own epoch collector (and its reaper thread, if configured).
    ///
    /// # Errors
    /// [`EngineError::InvalidConfig`] if a setting is out of range.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        Self::with_collector(config, Collector::new())
    }

    /// Starts an engine reclaiming through `collector` (loom models pass a fresh one).
    ///
    /// # Errors
    /// [`EngineError::InvalidConfig`] if a setting is out of range.
    pub fn with_collector(config: EngineConfig, collector: Collector) -> Result<Self, EngineError> {
        config.validate()?;
        let inner = Arc::new(Inner {
            epoch: Epoch::new(collector),
            reclaimer: Reclaimer::new(),
            topics: RwLock::new(HashMap::new()),
            used: CachePadded::new(AtomicU64::new(0)),
            rejected: PlainU64::new(0),
            room: WaitList::default(),
            graveyard: Mutex::new(Vec::new()),
            closed: PlainBool::new(false),
            next_id: PlainU64::new(1),
            last_pass_ms: PlainU64::new(0),
            reaper: Mutex::new(None),
            inline_reap: Mutex::new(()),
            #[cfg(test)]
            inline_work: PlainU64::new(0),
            live: LiveSettings::new(&config),
            config,
        });
        let reaper = if inner.config.reaper_thread { Some(spawn_reaper(&inner)?) } else { None };
        Ok(Engine { inner, reaper })
    }

    /// The configuration the engine started with (the live settings are
    /// [`settings`](Self::settings)).
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The memory budget, policy and default retention in force now.
    pub fn settings(&self) -> Settings {
        let l = &self.inner.live;
        Settings { memory_budget: l.budget(), policy: l.policy(), retention: l.retention() }
    }

    /// Changes the memory budget, policy and default retention while the engine runs. A
    /// smaller budget refuses (or, under `drop-oldest`, evicts for) further appends until
    /// reclamation brings the use under it; nothing already stored is dropped by the change
    /// itself. Async sends waiting for room are woken to look again.
    ///
    /// # Errors
    /// [`EngineError::InvalidConfig`] for a zero budget.
    pub fn apply_settings(&self, settings: Settings) -> Result<(), EngineError> {
        if settings.memory_budget == 0 {
            return Err(EngineError::InvalidConfig("memory_budget must be positive".into()));
        }
        self.inner.live.set(settings);
        self.inner.room.wake_all();
        Ok(())
    }

    /// Creates a topic with `queues` queues. Creating an existing topic with the same queue
    /// count is a no-op.
    ///
    /// # Errors
    /// [`EngineError::InvalidTopicName`], [`EngineError::InvalidQueueCount`],
    /// [`EngineError::TopicExists`] (with another queue count), [`EngineError::Closed`].
    pub fn create_topic(&self, name: &str, queues: u32) -> Result<(), EngineError> {
        let existing = self.ensure_topic(name, queues)?;
        if existing != queues {
            return Err(EngineError::TopicExists { topic: name.into(), queues: existing });
        }
        Ok(())
    }

    /// Creates the topic if it does not exist and returns its queue count either way.
    ///
    /// # Errors
    /// As [`create_topic`](Self::create_topic), except that an existing topic is not an error.
    pub fn ensure_topic(&self, name: &str, queues: u32) -> Result<u32, EngineError> {
        self.ensure_topic_from(name, queues, 0)
    }

    /// As [`ensure_topic`](Self::ensure_topic), except that a topic it creates numbers each
    /// queue's messages from `first_offset` instead of 0 (a store that names messages by
    /// offset uses it to keep a re-created topic's offsets clear of an earlier one's).
    ///
    /// # Errors
    /// As [`ensure_topic`](Self::ensure_topic).
    pub fn ensure_topic_from(
        &self,
        name: &str,
        queues: u32,
        first_offset: u64,
    ) -> Result<u32, EngineError> {
        self.inner.check_open()?;
        if !valid_topic_name(name) {
            return Err(EngineError::InvalidTopicName(name.into()));
        }
        if queues == 0 || queues > MAX_QUEUES {
            return Err(EngineError::InvalidQueueCount(queues));
        }
        if let Some(t) = read(&self.inner.topics).get(name) {
            return Ok(t.queue_count());
        }
        let mut topics = write(&self.inner.topics);
        let t = topics.entry(name.to_string()).or_insert_with(|| {
            Arc::new(Topic::new(name.to_string(), queues, first_offset, &self.inner.reclaimer))
        });
        Ok(t.queue_count())
    }

    /// Deletes a topic: its messages are released, its subscriptions end, handles to it get
    /// [`EngineError::UnknownTopic`].
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::Closed`].
    pub fn delete_topic(&self, name: &str) -> Result<(), EngineError> {
        self.inner.check_open()?;
        let t = write(&self.inner.topics)
            .remove(name)
            .ok_or_else(|| EngineError::UnknownTopic(name.into()))?;
        // Release: pairs with the Acquire load in `Topic::is_deleted`.
        t.deleted.store(true, Ordering::Release);
        let subs = std::mem::take(&mut *write(&t.subs));
        for s in subs {
            let forgotten = s.close(&|| self.inner.pin());
            self.inner.charge_inflight(-(forgotten as i64));
        }
        self.inner.release_later(t);
        // Sends waiting for room: there may be room soon, and those for this topic must fail.
        self.inner.room.wake_all();
        Ok(())
    }

    /// Names and queue counts of every topic.
    pub fn topics(&self) -> Vec<(String, u32)> {
        let mut v: Vec<_> =
            read(&self.inner.topics).values().map(|t| (t.name.clone(), t.queue_count())).collect();
        v.sort();
        v
    }

    /// A handle on a topic, for repeated operations without a name lookup.
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::Closed`].
    pub fn topic(&self, name: &str) -> Result<TopicHandle, EngineError> {
        Ok(TopicHandle { inner: Arc::clone(&self.inner), topic: self.inner.topic(name)? })
    }

    /// A producer on `topic` that spreads its messages round-robin over the queues.
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::Closed`].
    pub fn producer(&self, topic: &str) -> Result<Producer, EngineError> {
        let handle = self.topic(topic)?;
        // Start each producer at a different queue so many producers spread evenly.
        let next = handle.topic.rr.fetch_add(1, Ordering::Relaxed) % handle.topic.queue_count();
        Ok(Producer { handle, next })
    }

    /// Appends to the queue `queue` of `topic`.
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::QueueOutOfRange`],
    /// [`EngineError::MessageTooLarge`], [`EngineError::BudgetExceeded`], [`EngineError::Closed`].
    pub fn append_to(&self, topic: &str, queue: u32, msg: Message) -> Result<Receipt, EngineError> {
        let t = self.inner.topic(topic)?;
        self.inner.append_at(&t, queue, msg)
    }

    /// Subscribes `group` to `topic` (or returns the existing subscription if the mode matches).
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::InvalidGroupName`],
    /// [`EngineError::GroupModeConflict`], [`EngineError::Closed`].
    pub fn subscribe(
        &self,
        group: &str,
        topic: &str,
        options: SubscribeOptions,
    ) -> Result<Group, EngineError> {
        if group.is_empty() || group.len() > 255 {
            return Err(EngineError::InvalidGroupName(group.into()));
        }
        let t = self.inner.topic(topic)?;
        let mut subs = write(&t.subs);
        if let Some(s) = subs.iter().find(|s| s.group == group) {
            if s.mode != options.mode {
                return Err(EngineError::GroupModeConflict {
                    group: group.into(),
                    topic: topic.into(),
                });
            }
            return Ok(Group { inner: Arc::clone(&self.inner), sub: Arc::clone(s) });
        }
        let inner = &self.inner;
        let sub = Arc::new(Sub::new(
            inner.next_id(),
            group.to_string(),
            Arc::clone(&t),
            options.mode,
            options.filter,
            options.start,
            &|| inner.pin(),
        ));
        subs.push(Arc::clone(&sub));
        Ok(Group { inner: Arc::clone(&self.inner), sub })
    }

    /// The existing subscription of `group` to `topic`.
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::UnknownGroup`], [`EngineError::Closed`].
    pub fn group(&self, group: &str, topic: &str) -> Result<Group, EngineError> {
        let t = self.inner.topic(topic)?;
        let sub = self.inner.subs_of(&t, group).ok_or_else(|| EngineError::UnknownGroup {
            group: group.into(),
            topic: topic.into(),
        })?;
        Ok(Group { inner: Arc::clone(&self.inner), sub })
    }

    /// Every subscription of every topic.
    pub fn groups(&self) -> Vec<Group> {
        let topics: Vec<Arc<Topic>> = read(&self.inner.topics).values().cloned().collect();
        topics
            .iter()
            .flat_map(|t| read(&t.subs).clone())
            .map(|sub| Group { inner: Arc::clone(&self.inner), sub })
            .collect()
    }

    /// One reclamation pass over every queue (the reaper thread calls this periodically).
    /// Returns how many messages it reclaimed.
    pub fn reap(&self) -> u64 {
        self.inner.reap_pass()
    }

    /// When the last reclamation pass finished, ms since the Unix epoch (0: none yet). With a
    /// reaper thread, `now - last_reap_ms()` well above `reaper_max_interval` means the reaper
    /// is falling behind (or stuck).
    pub fn last_reap_ms(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.inner.last_pass_ms.load(PlainOrdering::Relaxed)
    }

    /// Bytes the budget counts now (payload plus bookkeeping of live records): one atomic
    /// load, unlike [`stats`](Self::stats), which walks every topic.
    pub fn bytes_used(&self) -> u64 {
        // Relaxed: a figure for admission heuristics and operators, not a synchronisation
        // point; the budget itself is enforced by the compare-exchange loop on this counter.
        self.inner.used.load(Ordering::Relaxed)
    }

    /// Engine-wide statistics.
    pub fn stats(&self) -> EngineStats {
        let topics: Vec<Arc<Topic>> = read(&self.inner.topics).values().cloned().collect();
        let guard = self.inner.pin();
        let (mut live, mut reclaimed, mut evicted) = (0, 0, 0);
        for t in &topics {
            for eq in t.queues.iter() {
                // The head first: a reaper pass between the two loads can only move the head
                // past an end loaded before it (review 2.3), never past one loaded after.
                // Saturating all the same: a statistic must not panic.
                if mutant("stats_end_first") {
                    // The pre-fix order: the end first, then a head that may have passed it.
                    let next = eq.q.next_offset(&guard);
                    live += next.wrapping_sub(eq.q.first_offset(&guard));
                } else {
                    let first = eq.q.first_offset(&guard);
                    live += eq.q.next_offset(&guard).saturating_sub(first);
                }
                // Relaxed: statistics.
                reclaimed += eq.reclaimed.load(Ordering::Relaxed);
                evicted += eq.evicted.load(Ordering::Relaxed);
            }
        }
        EngineStats {
            bytes_used: self.inner.used.load(Ordering::Relaxed),
            memory_budget: self.inner.live.budget(),
            live_messages: live,
            reclaimed_messages: reclaimed,
            evicted_messages: evicted,
            rejected_messages: self.inner.rejected.load(PlainOrdering::Relaxed),
            topics: topics.len(),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in `check_open` and in the reaper loop.
        self.inner.closed.store(true, PlainOrdering::Release);
        // Sends waiting for room under `block` see `closed` and fail (see `RoomWait`).
        self.inner.room.wake_all();
        if let Some(t) = lock(&self.inner.reaper).take() {
            t.unpark();
        }
        if let Some(h) = self.reaper.take() {
            let _ = h.join();
        }
        // Break the topic <-> subscription cycles so everything is freed with the last handle.
        let mut topics: Vec<Arc<Topic>> =
            write(&self.inner.topics).drain().map(|(_, t)| t).collect();
        // Deleted topics the reaper thread had not released yet (their subscriptions are gone).
        topics.append(&mut lock(&self.inner.graveyard));
        for t in &topics {
            let subs = std::mem::take(&mut *write(&t.subs));
            for s in subs {
                s.closed.store(true, Ordering::Release);
                s.waiters.wake_all();
            }
            for eq in t.queues.iter() {
                eq.q.wake_waiters();
            }
            release_topic(&self.inner, t);
        }
    }
}

/// Unlinks every message of a deleted topic and returns its bytes to the budget.
fn release_topic(inner: &Inner, t: &Topic) {
    unlink_topic(inner, t);
    inner.pin().flush();
    inner.reclaimer.free_ready();
}

/// Unlinks every message of `t`'s queues and returns their bytes to the budget; returns the
/// messages unlinked.
fn unlink_topic(inner: &Inner, t: &Topic) -> u64 {
    let mut n = 0;
    for eq in t.queues.iter() {
        let mut head = eq.q.lock_head();
        let guard = inner.pin();
        let u = head.unlink_while(u64::MAX, &guard, |_| true);
        if u.count > 0 {
            let released = eq.account_unlinked(u.count, u.payload_bytes, false);
            inner.used.fetch_sub(released, Ordering::Relaxed);
            n += u.count;
        }
    }
    n
}

#[cfg(not(loom))]
fn spawn_reaper(inner: &Arc<Inner>) -> Result<std::thread::JoinHandle<()>, EngineError> {
    let inner = Arc::clone(inner);
    std::thread::Builder::new()
        .name("baiji-reaper".into())
        .spawn(move || {
            *lock(&inner.reaper) = Some(std::thread::current());
            let min = inner.config.reaper_interval;
            let max = inner.config.reaper_max_interval;
            let mut pause = min;
            // Acquire: pairs with the Release store in `Engine::drop`.
            while !inner.closed.load(PlainOrdering::Acquire) {
                let n = inner.reap_pass();
                if n >= REAP_BATCH {
                    // A pass stopped at its batch cap: more is reclaimable now. Go again at
                    // once (after yielding the core), or reclamation would be capped at
                    // REAP_BATCH per queue per interval and fall behind fast producers.
                    pause = min;
                    std::thread::yield_now();
                    continue;
                }
                pause = if n > 0 { min } else { (pause * 2).min(max) };
                std::thread::park_timeout(pause);
            }
        })
        .map_err(|e| EngineError::InvalidConfig(format!("cannot spawn the reaper thread: {e}")))
}

/// Under loom the reaper is driven by the model through [`Engine::reap`].
#[cfg(loom)]
fn spawn_reaper(_: &Arc<Inner>) -> Result<std::thread::JoinHandle<()>, EngineError> {
    Err(EngineError::InvalidConfig("loom models drive the reaper with Engine::reap".into()))
}

/// A handle on one topic.
#[derive(Debug, Clone)]
pub struct TopicHandle {
    inner: Arc<Inner>,
    topic: Arc<Topic>,
}

impl TopicHandle {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.topic.name
    }

    /// Sets how long this topic keeps messages no group holds, overriding the engine's
    /// [`EngineConfig::retention`] (e.g. a dead-letter topic kept for days, bounded in bytes).
    /// Takes effect at the reaper's next pass; messages still count against the memory budget.
    pub fn set_retention(&self, retention: Retention) {
        self.topic.set_retention(retention);
    }

    /// This topic's retention of messages no group holds (its own, or the engine's).
    pub fn retention(&self) -> Retention {
        self.topic.retention(self.inner.live.retention())
    }

    /// Its number of queues.
    pub fn queue_count(&self) -> u32 {
        self.topic.queue_count()
    }

    /// Whether the topic has been deleted since the handle was taken.
    pub fn is_deleted(&self) -> bool {
        self.topic.is_deleted()
    }

    /// Appends to queue `queue`.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::MessageTooLarge`],
    /// [`EngineError::BudgetExceeded`], [`EngineError::UnknownTopic`] (deleted),
    /// [`EngineError::Closed`].
    pub fn append(&self, queue: u32, msg: Message) -> Result<Receipt, EngineError> {
        self.inner.append_at(&self.topic, queue, msg)
    }

    /// Appends `messages` to queue `queue` as one contiguous run with consecutive offsets
    /// (nothing else lands between them); returns the first one's receipt. All or nothing:
    /// the budget is taken for the whole batch at once.
    ///
    /// # Errors
    /// As [`append`](Self::append); [`EngineError::EmptyBatch`] for no messages.
    pub fn append_batch(&self, queue: u32, messages: Vec<Message>) -> Result<Receipt, EngineError> {
        let inner = &*self.inner;
        let Some(first) = messages.first() else { return Err(EngineError::EmptyBatch) };
        let (eq, mut cost) = inner.prepare(&self.topic, queue, first)?;
        for m in &messages[1..] {
            cost += inner.message_cost(m)?;
        }
        inner.reserve(cost, &self.topic, queue).map_err(|e| inner.refused(e))?;
        // Relaxed: statistics; added before linking (see `link`).
        eq.bytes_in.fetch_add(cost, Ordering::Relaxed);
        let guard = inner.pin();
        let now = now_ms();
        let appended = eq.q.append_batch(
            messages.into_iter().map(|m| (m.payload, m.timestamp.unwrap_or(now), m.tag)),
            &guard,
        );
        match appended {
            Some(a) => Ok(Receipt { queue, offset: a.offset }),
            None => Err(EngineError::EmptyBatch),
        }
    }

    /// Appends to the queue chosen by `key`: the same key always lands in the same queue, so
    /// messages with one key keep their order.
    ///
    /// # Errors
    /// As [`append`](Self::append).
    pub fn append_keyed(&self, key: &[u8], msg: Message) -> Result<Receipt, EngineError> {
        let q = (crate::hash::fnv1a_64(key) % u64::from(self.topic.queue_count())) as u32;
        self.append(q, msg)
    }

    /// Appends to queue `queue`, waiting for room under the `block` policy (other policies
    /// behave as [`append`](Self::append)).
    ///
    /// # Errors
    /// As [`append`](Self::append), except that `BudgetExceeded` is only returned when the
    /// message is larger than the whole budget.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future before it completes appends nothing.
    pub async fn append_async(&self, queue: u32, msg: Message) -> Result<Receipt, EngineError> {
        let inner = &*self.inner;
        loop {
            let (eq, cost) = inner.prepare(&self.topic, queue, &msg)?;
            match inner.reserve(cost, &self.topic, queue) {
                Ok(()) => return Ok(inner.link(eq, cost, msg)),
                Err(EngineError::BudgetExceeded { .. })
                    if inner.live.policy() == MemoryPolicy::Block
                        && cost <= inner.live.budget() =>
                {
                    RoomWait { inner, topic: &self.topic, cost, id: None }.await;
                }
                Err(e) => return Err(inner.refused(e)),
            }
        }
    }

    /// Reads queue `queue` from offset `from` without any group state: calls `visit` for each
    /// message `filter` accepts, up to `max` of them, stopping early when `visit` returns
    /// `false` (that message is then not counted as read). The broker's pull path.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn read<F: FnMut(MessageRef<'_>) -> bool>(
        &self,
        queue: u32,
        from: u64,
        max: usize,
        filter: &Filter,
        mut visit: F,
    ) -> Result<ReadOutcome, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        let head = eq.q.head(&guard);
        let first = head.end();
        let end = eq.q.next_offset(&guard);
        let mut out =
            ReadOutcome { first_offset: first, end_offset: end, next_offset: from, found: 0 };
        if from < first || from >= end {
            return Ok(out);
        }
        let mut prev = if from == first { Some(head) } else { eq.q.find(from - 1, &guard) };
        let mut budget = SCAN_LIMIT.max(max.saturating_mul(16));
        while let Some(p) = prev {
            if out.found >= max || budget == 0 {
                break;
            }
            budget -= 1;
            let Some(n) = p.next(&guard) else { break };
            if filter.matches(n.tag()) {
                let m = MessageRef {
                    offset: n.offset(),
                    timestamp: n.timestamp(),
                    tag: n.tag(),
                    payload: n.payload(),
                };
                if !visit(m) {
                    break;
                }
                out.found += 1;
            }
            out.next_offset = n.end();
            prev = Some(n);
        }
        Ok(out)
    }

    /// The message at `offset` of queue `queue`, if retained, passed to `visit`.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn get<R>(
        &self,
        queue: u32,
        offset: u64,
        visit: impl FnOnce(MessageRef<'_>) -> R,
    ) -> Result<Option<R>, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        Ok(eq.q.find(offset, &guard).map(|n| {
            visit(MessageRef {
                offset: n.offset(),
                timestamp: n.timestamp(),
                tag: n.tag(),
                payload: n.payload(),
            })
        }))
    }

    /// The offset of the first message stored at or after `timestamp` in queue `queue` (the
    /// queue's end if none).
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn offset_for_timestamp(&self, queue: u32, timestamp: u64) -> Result<u64, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        Ok(eq.resolve_start(StartFrom::Timestamp(timestamp), &guard))
    }

    /// Statistics of queue `queue`.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn queue_stats(&self, queue: u32) -> Result<QueueStats, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        let min = eq.q.first_offset(&guard);
        let max = eq.q.next_offset(&guard);
        Ok(QueueStats {
            queue,
            min_offset: min,
            max_offset: max,
            live_messages: max - min,
            bytes: eq.live_bytes(),
            // Relaxed: statistics.
            reclaimed: eq.reclaimed.load(Ordering::Relaxed),
            evicted: eq.evicted.load(Ordering::Relaxed),
        })
    }

    /// Registers `waker` to be woken when a message is appended to queue `queue` at or after
    /// `offset`. Returns `None` when such a message already exists (do not wait), or
    /// `Some(registration)` to pass to [`cancel_wait`](Self::cancel_wait) if the wait is given up.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn watch(
        &self,
        queue: u32,
        offset: u64,
        waker: &std::task::Waker,
        previous: Option<crate::queue::WaitId>,
    ) -> Result<Option<crate::queue::WaitId>, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        let last = eq.q.last(&guard);
        if last.end() > offset || self.topic.is_deleted() {
            return Ok(None);
        }
        Ok(match eq.q.wait_behind(last, Wakeup::Task(waker.clone()), previous, &guard) {
            WaitState::Ready => None,
            WaitState::Registered(id) => Some(id),
        })
    }

    /// Withdraws a registration made by [`watch`](Self::watch).
    pub fn cancel_wait(&self, queue: u32, id: crate::queue::WaitId) {
        if let Some(eq) = self.topic.queues.get(queue as usize) {
            eq.q.cancel_wait(id);
        }
    }

    fn queue(&self, queue: u32) -> Result<&EQueue, EngineError> {
        self.inner.check_open()?;
        self.topic.queues.get(queue as usize).ok_or_else(|| EngineError::QueueOutOfRange {
            topic: self.topic.name.clone(),
            queue,
            queues: self.topic.queue_count(),
        })
    }
}

/// Waits until the budget has room for `cost` more bytes (the `block` policy), or until the
/// engine shuts down or `topic` is deleted (the send then fails in `prepare`).
struct RoomWait<'a> {
    inner: &'a Inner,
    topic: &'a Topic,
    cost: u64,
    id: Option<crate::queue::WaitId>,
}

impl std::future::Future for RoomWait<'_> {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let (inner, topic, cost) = (self.inner, self.topic, self.cost);
        let budget = inner.live.budget();
        self.id = inner.room.register_with(self.id, Wakeup::Task(cx.waker().clone()), || {
            // Relaxed: the wait list's lock orders this read after a reaper pass that freed
            // room and then woke the list. Likewise `Engine::drop` and `delete_topic` set
            // their flag before they wake the list: this check sees it, or the wake-up sees
            // this registration.
            inner.used.load(Ordering::Relaxed) + cost > budget
                && inner.check_open().is_ok()
                && !topic.is_deleted()
        });
        if self.id.is_some() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

impl Drop for RoomWait<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.inner.room.deregister(id);
        }
    }
}

/// What a [`TopicHandle::read`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOutcome {
    /// The queue's first retained offset.
    pub first_offset: u64,
    /// The offset the next append will get.
    pub end_offset: u64,
    /// Where the next read should start: after the last message looked at.
    pub next_offset: u64,
    /// Messages passed to the visitor and accepted by it.
    pub found: usize,
}

/// Appends to a topic, spreading messages round-robin over its queues.
#[derive(Debug, Clone)]
pub struct Producer {
    handle: TopicHandle,
    next: u32,
}

impl Producer {
    /// The topic handle (explicit-queue and keyed appends).
    pub fn topic(&self) -> &TopicHandle {
        &self.handle
    }

    fn advance(&mut self) -> u32 {
        let q = self.next;
        self.next = (self.next + 1) % self.handle.queue_count();
        q
    }

    /// Appends to the next queue in round-robin order.
    ///
    /// # Errors
    /// As [`TopicHandle::append`].
    pub fn send(&mut self, msg: Message) -> Result<Receipt, EngineError> {
        let q = self.advance();
        self.handle.append(q, msg)
    }

    /// Like [`send`](Self::send), waiting for room under the `block` policy.
    ///
    /// # Errors
    /// As [`TopicHandle::append_async`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future appends nothing (the queue choice still advances).
    pub async fn send_async(&mut self, msg: Message) -> Result<Receipt, EngineError> {
        let q = self.advance();
        self.handle.append_async(q, msg).await
    }
}

/// A consumer group's subscription to a topic.
#[derive(Debug, Clone)]
pub struct Group {
    inner: Arc<Inner>,
    sub: Arc<Sub>,
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &str {
        &self.sub.group
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.sub.topic.name
    }

    /// The subscription's mode.
    pub fn mode(&self) -> Mode {
        self.sub.mode
    }

    /// The subscription's filter.
    pub fn filter(&self) -> &Filter {
        &self.sub.filter
    }

    fn check(&self) -> Result<(), EngineError> {
        self.inner.check_open()?;
        if self.sub.is_closed() {
            return Err(EngineError::NotAMember);
        }
        Ok(())
    }

    /// Joins a new member; queues are rebalanced over the members (clustering) or the member
    /// reads every queue from the subscription's start (broadcasting).
    ///
    /// # Errors
    /// [`EngineError::NotAMember`] if the subscription ended, [`EngineError::Closed`].
    pub fn join(&self) -> Result<Consumer, EngineError> {
        self.check()?;
        let id = self.sub.new_member_id();
        let inner = &self.inner;
        self.sub.add_member(id, &|| inner.pin())?;
        Ok(Consumer::new(Arc::clone(&self.inner), Arc::clone(&self.sub), id))
    }

    /// Adds a member that is driven from outside (the broker's broadcasting clients, whose
    /// acknowledgements come from [`commit_member`](Self::commit_member)).
    ///
    /// # Errors
    /// [`EngineError::NotAMember`] if the subscription ended, [`EngineError::Closed`].
    pub fn add_member(&self) -> Result<MemberId, EngineError> {
        self.check()?;
        let id = self.sub.new_member_id();
        let inner = &self.inner;
        self.sub.add_member(id, &|| inner.pin())?;
        Ok(id)
    }

    /// Removes a member added with [`add_member`](Self::add_member). Idempotent.
    pub fn remove_member(&self, member: MemberId) {
        let inner = &self.inner;
        self.sub.remove_member(member, &|| inner.pin());
    }

    /// Commits `offset` in queue `queue`: the group has consumed everything below it. A commit
    /// equal to the committed offset is a no-op.
    ///
    /// # Errors
    /// [`EngineError::CommitBehind`] (acknowledgements cannot be taken back),
    /// [`EngineError::OffsetBeyondEnd`], [`EngineError::QueueOutOfRange`],
    /// [`EngineError::NotAMember`] (broadcasting groups commit per member), [`EngineError::Closed`].
    pub fn commit(&self, queue: u32, offset: u64) -> Result<(), EngineError> {
        self.check()?;
        self.sub.commit(None, queue, offset, &self.inner.pin())
    }

    /// Records that broadcasting member `member` has consumed queue `queue` below `offset`;
    /// the group acknowledges what its slowest member has passed.
    ///
    /// # Errors
    /// As [`commit`](Self::commit); [`EngineError::NotAMember`] for an unknown member.
    pub fn commit_member(
        &self,
        member: MemberId,
        queue: u32,
        offset: u64,
    ) -> Result<(), EngineError> {
        self.check()?;
        self.sub.commit(Some(member), queue, offset, &self.inner.pin())
    }

    /// The committed offset of queue `queue` (broadcasting: the slowest member's).
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`], [`EngineError::Closed`].
    pub fn committed(&self, queue: u32) -> Result<u64, EngineError> {
        self.check()?;
        self.sub.committed(queue, &self.inner.pin())
    }

    /// Statistics of the group.
    pub fn stats(&self) -> GroupStats {
        let guard = self.inner.pin();
        let committed = (0..self.sub.topic.queue_count())
            .map(|q| self.sub.committed(q, &guard).unwrap_or(0))
            .collect();
        let c = &self.sub.counters;
        GroupStats {
            group: self.sub.group.clone(),
            topic: self.sub.topic.name.clone(),
            mode: self.sub.mode,
            members: self.sub.member_count(),
            backlog: self.sub.backlog(&guard),
            // Relaxed: statistics.
            delivered: c.delivered.load(Ordering::Relaxed),
            acked: c.acked.load(Ordering::Relaxed),
            filtered: c.filtered.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            committed,
        }
    }

    /// Ends the subscription. Messages it alone held become reclaimable; its members get
    /// [`EngineError::NotAMember`]. Idempotent.
    pub fn unsubscribe(&self) {
        write(&self.sub.topic.subs).retain(|s| !Arc::ptr_eq(s, &self.sub));
        let inner = &self.inner;
        let forgotten = self.sub.close(&|| inner.pin());
        inner.charge_inflight(-(forgotten as i64));
    }

    /// Pops queue `queue` (POP consumption): hands out, into `out`, messages of the queue
    /// whose invisible time expired (redelivered, or dead-lettered once their attempts ran
    /// out) and then new ones, each invisible to the group for `req.invisible_ms`. Call it for
    /// several queues with one `out` to pop them together (`req.max` bounds the total). The
    /// group name may be used for pulling too: commits and pops then share one position of
    /// acknowledgement, as RocketMQ's consumer offset is shared (see the README).
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`] (ended or broadcasting),
    /// [`EngineError::Closed`].
    pub fn pop(
        &self,
        queue: u32,
        req: &PopRequest<'_>,
        out: &mut PopOutcome,
    ) -> Result<(), EngineError> {
        self.check()?;
        let delta = self.sub.pop_queue(queue, req, out, &self.inner.pin())?;
        self.inner.charge_inflight(delta);
        Ok(())
    }

    /// Acknowledges a popped message by its receipt: queue, offset and the pop time of its
    /// latest delivery. An already acknowledged message gives [`AckOutcome::AlreadyAcked`].
    ///
    /// # Errors
    /// [`EngineError::StaleReceipt`] (a newer delivery or change of invisible time replaced
    /// the receipt, or the message was never popped), [`EngineError::QueueOutOfRange`],
    /// [`EngineError::NotAMember`], [`EngineError::Closed`].
    pub fn pop_ack(
        &self,
        queue: u32,
        offset: u64,
        pop_time: u64,
    ) -> Result<AckOutcome, EngineError> {
        self.check()?;
        let (outcome, delta) = self.sub.pop_ack(queue, offset, pop_time, &self.inner.pin())?;
        self.inner.charge_inflight(delta);
        Ok(outcome)
    }

    /// Makes a popped message invisible for `invisible_ms` from `now_ms` (0: visible at once)
    /// and returns its new receipt's pop time; the old receipt becomes stale.
    ///
    /// # Errors
    /// As [`pop_ack`](Self::pop_ack).
    pub fn change_invisible(
        &self,
        queue: u32,
        offset: u64,
        pop_time: u64,
        invisible_ms: u64,
        now_ms: u64,
    ) -> Result<u64, EngineError> {
        self.check()?;
        self.sub.change_invisible(queue, offset, pop_time, invisible_ms, now_ms)
    }

    /// Popped messages not yet acknowledged (nor redelivered past their attempts).
    pub fn inflight(&self) -> u64 {
        self.sub.inflight()
    }
}
