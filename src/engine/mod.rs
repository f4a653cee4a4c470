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
//!
//! # Where things are
//!
//! * `mod.rs`: [`Engine`] (topics, subscriptions, statistics, shutdown) and the state every
//!   handle shares.
//! * `budget.rs`: what a message costs, reserving room under the [`MemoryPolicy`], eviction,
//!   the [`Settings`] that change while the engine runs.
//! * `reaper.rs`: reclamation passes, deleted topics and their graveyard, the reaper thread.
//! * `handle.rs`: [`TopicHandle`] and [`Producer`] (appends, stateless reads, waits).
//! * `group/`: [`Group`] and the subscription behind it (acknowledgement tracks in
//!   `track.rs`, POP state in `pop.rs`); [`Consumer`] in `consumer.rs`.
//! * `topic.rs`: a topic's queues and the holds saying which group must see which offsets.
//!
//! # Where the state changes
//!
//! Every change a journal of the engine's state would record goes through one of these (what
//! the reaper and evictions unlink follows from them and the budget):
//!
//! | change | function |
//! |---|---|
//! | append | `Inner::link`, `Inner::link_batch` (`budget.rs`) |
//! | topic create / delete | [`Engine::ensure_topic_from`], [`Engine::delete_topic`] |
//! | subscribe / end a subscription | [`Engine::subscribe`]; `Subscription::close`, `close_if_idle` (`group/`: unsubscribe, topic deletion and idle release all end there) |
//! | member join / leave | `Subscription::add_member`, `remove_member` |
//! | commit, per-message ack | `Subscription::commit`, `Subscription::ack` |
//! | pop, POP ack, change of invisible time | `Subscription::pop_queue`, `pop_ack`, `change_invisible` (`group/pop.rs`) |
//!
//! The POP changes are reported to a [`PopJournal`] when one is set
//! ([`Engine::set_pop_journal`]), under the queue's lock, and an ended subscription tells it
//! too; [`Group::restore_pop`] gives a recorded POP state back.

mod budget;
mod config;
mod consumer;
#[cfg(not(loom))]
mod durable;
mod epoch;
mod error;
mod group;
mod handle;
mod reaper;
mod topic;
mod types;

#[cfg(test)]
mod reap_tests;

use std::collections::HashMap;

use crossbeam_epoch::{Collector, Guard};
use crossbeam_utils::CachePadded;

pub use budget::Settings;
pub use config::{EngineConfig, MemoryPolicy, Retention, KEEP_YIELDS_AT_PERCENT};
pub use consumer::Consumer;
#[cfg(not(loom))]
pub use durable::EngineRecovery;
pub use error::EngineError;
pub use group::pop::{INFLIGHT_ENTRY_SIZE, INFLIGHT_LIMIT};
pub use group::Group;
pub use handle::{Producer, ReadOutcome, TopicHandle};
pub use types::{
    AckOutcome, Delivery, EngineStats, Filter, GroupStats, MemberId, Message, MessageRef, Mode,
    PopAck, PopChange, PopEntry, PopHolder, PopInit, PopJournal, PopOutcome, PopPolicy, PopReceipt,
    PopRequest, PopRestored, Popped, QueueStats, Receipt, StartFrom,
};

/// Bytes the engine counts for each message on top of its payload (its queue node).
pub use crate::queue::NODE_SIZE;

use budget::LiveSettings;
use epoch::Epoch;
use group::Subscription;
use reaper::{release_topic, spawn_reaper};
use topic::{valid_topic_name, Topic};

use crate::queue::{Reclaimer, WaitList};
use crate::sync::plain::{
    AtomicBool as PlainBool, AtomicU64 as PlainU64, Ordering as PlainOrdering,
};
use crate::sync::{lock, mutant, read, write, Arc, AtomicU64, Mutex, Ordering, RwLock};

/// The segment files of a durable engine ([`Engine::storage_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StorageStats {
    /// Bytes of message segment files mapped now (the current one, the spare, and every one a
    /// live message keeps).
    pub segment_bytes: u64,
    /// Message segment files mapped now.
    pub segments: u64,
    /// Message segment files freed (unmapped and removed) since the engine was opened.
    pub freed_segments: u64,
    /// Bytes of those.
    pub freed_bytes: u64,
    /// Bytes of the journals' segment files (topics, queue heads; a store's uids and offsets).
    pub journal_bytes: u64,
    /// Journal writes that failed since the engine was opened (a full tmpfs): those changes
    /// hold in memory only.
    pub failed_writes: u64,
}

/// Most queues a topic may have.
pub const MAX_QUEUES: u32 = 1024;

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
    /// Subscriptions in every topic's map (for [`EngineConfig::max_subscriptions`]).
    subscriptions: PlainU64,
    /// When the last reaper pass finished, ms since the epoch (0: none yet).
    last_pass_ms: PlainU64,
    reaper: Mutex<Option<std::thread::Thread>>,
    /// Held by the one request thread running a pass for room (engines without a reaper).
    inline_reap: Mutex<()>,
    /// Passes and releases run on request threads (tests).
    #[cfg(test)]
    inline_work: PlainU64,
    /// The message log and journal of an engine opened on a directory ([`Engine::open`]).
    #[cfg(not(loom))]
    durable: Option<durable::Durable>,
    /// Where POP state changes are reported ([`Engine::set_pop_journal`]); set once, before
    /// anything pops. `std`'s, even under loom: it never changes once set.
    pop_journal: std::sync::OnceLock<std::sync::Arc<dyn PopJournal>>,
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

    /// The POP journal, if one was set ([`Engine::set_pop_journal`]).
    pub(crate) fn pop_journal(&self) -> Option<&dyn PopJournal> {
        self.pop_journal.get().map(|j| &**j)
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

    /// The live subscription of `group` to `topic`, if any.
    fn subscription_of(&self, topic: &Topic, group: &str) -> Option<Arc<Subscription>> {
        read(&topic.subscriptions).get(group).filter(|s| !s.is_closed()).cloned()
    }

    /// Takes one subscription from the caps of [`EngineConfig`], given how many the topic has
    /// (called under the topic's subscriptions lock, about to insert one).
    fn admit_subscription(
        &self,
        group: &str,
        topic: &str,
        on_topic: usize,
    ) -> Result<(), EngineError> {
        let refuse = |limit, per_topic| EngineError::TooManySubscriptions {
            group: group.into(),
            topic: topic.into(),
            limit,
            per_topic,
        };
        let per_topic = self.config.max_subscriptions_per_topic;
        if on_topic >= per_topic {
            return Err(refuse(per_topic, true));
        }
        let limit = self.config.max_subscriptions;
        // Relaxed: a counter; the read-modify-write itself decides, as the budget does.
        let before = self.subscriptions.fetch_add(1, PlainOrdering::Relaxed);
        if before >= limit as u64 {
            self.subscriptions.fetch_sub(1, PlainOrdering::Relaxed);
            return Err(refuse(limit, false));
        }
        Ok(())
    }

    /// Gives back `n` subscriptions taken out of a topic's map.
    pub(crate) fn forget_subscriptions(&self, n: u64) {
        // Relaxed: see `admit_subscription`.
        self.subscriptions.fetch_sub(n, PlainOrdering::Relaxed);
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
        Self::build(config, collector, Reclaimer::new(), HashMap::new(), 0, None)
    }

    /// Opens an engine whose messages, topics and queue heads live in segment files of `dir`
    /// (a tmpfs directory such as `/dev/shm/…` keeps them in RAM, with no disk I/O, and the
    /// kernel keeps them when the process dies), and restores what an earlier engine on the
    /// directory left there: every message whose append returned, at its queue and offset,
    /// with its timestamp and tag, after a clean drop or a crash alike. Records a crash cut
    /// short are skipped and counted, never served; damaged segment files are set aside.
    /// `segment_size` is the size of each message segment file (a multiple of 4096 from 8 KiB
    /// to 1 GiB; a message must fit in one with its 48 bytes of headers). The memory budget
    /// counts two segments from the start (the current one's free tail and the spare made
    /// ahead of need) and each message's record headers on top of its payload and node.
    ///
    /// Consumer groups are not kept: subscribe again after opening (a store on top keeps its
    /// committed offsets itself, as the crate's `MemoryStore` does).
    ///
    /// # Errors
    /// [`EngineError::InvalidConfig`]; [`EngineError::Storage`] if the directory's logs cannot
    /// be opened or written.
    #[cfg(not(loom))]
    pub fn open(
        config: EngineConfig,
        dir: &crate::shm::Directory,
        segment_size: usize,
    ) -> Result<(Self, EngineRecovery), EngineError> {
        config.validate()?;
        if config.max_message_size + 48 > segment_size {
            return Err(EngineError::InvalidConfig(format!(
                "segment_size {segment_size} cannot hold a message of max_message_size {}",
                config.max_message_size
            )));
        }
        let collector = Collector::new();
        let reclaimer = Reclaimer::new();
        let o = durable::open(dir, segment_size, &collector, &reclaimer, |len| {
            len as u64 + topic::node_cost(true)
        })?;
        let recovery = o.recovery;
        // The budget counts what is mapped: the restored messages and, ahead of need, the
        // current segment's free tail and the spare (two segments).
        let used = o.used + 2 * segment_size as u64;
        let engine = Self::build(config, collector, reclaimer, o.topics, used, Some(o.durable))?;
        Ok((engine, recovery))
    }

    fn build(
        config: EngineConfig,
        collector: Collector,
        reclaimer: Arc<Reclaimer>,
        topics: HashMap<String, Arc<Topic>>,
        used: u64,
        #[cfg(not(loom))] durable: Option<durable::Durable>,
        #[cfg(loom)] _durable: Option<()>,
    ) -> Result<Self, EngineError> {
        let inner = Arc::new(Inner {
            epoch: Epoch::new(collector),
            reclaimer,
            topics: RwLock::new(topics),
            used: CachePadded::new(AtomicU64::new(used)),
            rejected: PlainU64::new(0),
            room: WaitList::default(),
            graveyard: Mutex::new(Vec::new()),
            closed: PlainBool::new(false),
            next_id: PlainU64::new(1),
            subscriptions: PlainU64::new(0),
            last_pass_ms: PlainU64::new(0),
            reaper: Mutex::new(None),
            inline_reap: Mutex::new(()),
            #[cfg(test)]
            inline_work: PlainU64::new(0),
            live: LiveSettings::new(&config),
            config,
            #[cfg(not(loom))]
            durable,
            pop_journal: std::sync::OnceLock::new(),
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

    /// Reports every change of the groups' POP state (pops, POP acks, changes of invisible
    /// time, ended subscriptions) to `journal` from now on, so that a store can keep it over
    /// a restart and give it back with [`Group::restore_pop`] (see [`PopJournal`] for when it
    /// is called). Set it before anything pops; an engine without one (the heap-only mode)
    /// does no such work.
    ///
    /// # Errors
    /// [`EngineError::InvalidConfig`] if a journal was set already.
    pub fn set_pop_journal(
        &self,
        journal: std::sync::Arc<dyn PopJournal>,
    ) -> Result<(), EngineError> {
        self.inner
            .pop_journal
            .set(journal)
            .map_err(|_| EngineError::InvalidConfig("a POP journal is set already".into()))
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
        if queues == 0 || queues > MAX_QUEUES {
            return Err(EngineError::InvalidQueueCount(queues));
        }
        self.ensure_topic_at(name, &vec![first_offset; queues as usize])
    }

    /// As [`ensure_topic`](Self::ensure_topic), except that a topic it creates numbers queue
    /// `i`'s messages from `starts[i]` (a replica installing a copy of another's queues, each
    /// continuing at its own first offset). An existing topic is left as it is.
    ///
    /// # Errors
    /// As [`ensure_topic`](Self::ensure_topic); the queue count is `starts.len()`.
    pub fn ensure_topic_at(&self, name: &str, starts: &[u64]) -> Result<u32, EngineError> {
        self.inner.check_open()?;
        if !valid_topic_name(name) {
            return Err(EngineError::InvalidTopicName(name.into()));
        }
        let queues = u32::try_from(starts.len()).unwrap_or(u32::MAX);
        if queues == 0 || queues > MAX_QUEUES {
            return Err(EngineError::InvalidQueueCount(queues));
        }
        if let Some(t) = read(&self.inner.topics).get(name) {
            return Ok(t.queue_count());
        }
        let mut topics = write(&self.inner.topics);
        if let Some(t) = topics.get(name) {
            return Ok(t.queue_count());
        }
        // A durable engine journals the topic (and its sid) before anyone can append to it,
        // and a queue that starts above the lowest start as its head (recovery starts an empty
        // queue at its head).
        #[cfg(not(loom))]
        let sid = match &self.inner.durable {
            Some(d) => {
                let first = starts.iter().copied().min().unwrap_or(0);
                let sid = d.create_topic(name, queues, first)?;
                let heads: Vec<(u64, u64)> = (0..queues)
                    .zip(starts)
                    .filter(|(_, s)| **s > first)
                    .map(|(q, s)| (durable::stream_of(sid, q), *s))
                    .collect();
                if !heads.is_empty() {
                    d.heads_moved(&heads);
                }
                sid
            }
            None => 0,
        };
        #[cfg(loom)]
        let sid = 0;
        let t = Topic::with_starts(name.to_string(), sid, starts, &self.inner.reclaimer);
        topics.insert(name.to_string(), Arc::new(t));
        Ok(queues)
    }

    /// Deletes a topic: its messages are released, its subscriptions end, handles to it get
    /// [`EngineError::UnknownTopic`].
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::Closed`].
    pub fn delete_topic(&self, name: &str) -> Result<(), EngineError> {
        self.inner.check_open()?;
        let t = {
            let mut topics = write(&self.inner.topics);
            let sid = topics.get(name).ok_or_else(|| EngineError::UnknownTopic(name.into()))?.sid;
            // Journaled first: a deletion that cannot be kept is refused, not half made.
            #[cfg(not(loom))]
            if let Some(d) = &self.inner.durable {
                d.delete_topic(name, sid)?;
            }
            let _ = sid;
            topics.remove(name).ok_or_else(|| EngineError::UnknownTopic(name.into()))?
        };
        // Release: pairs with the Acquire load in `Topic::is_deleted`.
        t.deleted.store(true, Ordering::Release);
        let subscriptions = std::mem::take(&mut *write(&t.subscriptions));
        self.inner.forget_subscriptions(subscriptions.len() as u64);
        for s in subscriptions.into_values() {
            let forgotten = s.close(&|| self.inner.pin(), self.inner.pop_journal());
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
    /// [`EngineError::GroupModeConflict`], [`EngineError::TooManySubscriptions`],
    /// [`EngineError::Closed`].
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
        let existing = |s: &Arc<Subscription>| {
            if s.mode == options.mode {
                Ok(Group { inner: Arc::clone(&self.inner), sub: Arc::clone(s) })
            } else {
                Err(EngineError::GroupModeConflict { group: group.into(), topic: topic.into() })
            }
        };
        if let Some(s) = read(&t.subscriptions).get(group).filter(|s| !s.is_closed()) {
            return existing(s);
        }
        let mut subscriptions = write(&t.subscriptions);
        match subscriptions.get(group) {
            Some(s) if !s.is_closed() => return existing(s),
            // Released as idle, and not yet taken out of the map: replaced, once its closing
            // has finished (a POP journal hears of its end before the new one's changes).
            Some(s) => {
                s.wait_closed();
                subscriptions.remove(group);
                self.inner.forget_subscriptions(1);
            }
            None => {}
        }
        self.inner.admit_subscription(group, topic, subscriptions.len())?;
        let inner = &self.inner;
        let sub = Arc::new(Subscription::new(
            inner.next_id(),
            group.to_string(),
            Arc::clone(&t),
            options.mode,
            options.filter,
            options.start,
            &|| inner.pin(),
        ));
        subscriptions.insert(group.to_string(), Arc::clone(&sub));
        Ok(Group { inner: Arc::clone(&self.inner), sub })
    }

    /// The existing subscription of `group` to `topic`.
    ///
    /// # Errors
    /// [`EngineError::UnknownTopic`], [`EngineError::UnknownGroup`], [`EngineError::Closed`].
    pub fn group(&self, group: &str, topic: &str) -> Result<Group, EngineError> {
        let t = self.inner.topic(topic)?;
        let sub = self.inner.subscription_of(&t, group).ok_or_else(|| {
            EngineError::UnknownGroup { group: group.into(), topic: topic.into() }
        })?;
        Ok(Group { inner: Arc::clone(&self.inner), sub })
    }

    /// Every subscription of every topic.
    pub fn groups(&self) -> Vec<Group> {
        let topics: Vec<Arc<Topic>> = read(&self.inner.topics).values().cloned().collect();
        topics
            .iter()
            .flat_map(|t| {
                read(&t.subscriptions)
                    .values()
                    .filter(|s| !s.is_closed())
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .map(|sub| Group { inner: Arc::clone(&self.inner), sub })
            .collect()
    }

    /// Ends every subscription that is idle at `now_ms` (see [`Group::release_if_idle`]: no
    /// member, no activity for `idle`, no popped message still invisible) and that
    /// `may_release(group, topic)` accepts (the broker keeps its internal groups and the
    /// groups its clients still announce); returns the `(group, topic)` pairs it ended. What
    /// only they held becomes reclaimable. A later pop or subscribe of such a group starts a
    /// new subscription.
    pub fn release_idle_groups(
        &self,
        idle: std::time::Duration,
        now_ms: u64,
        mut may_release: impl FnMut(&str, &str) -> bool,
    ) -> Vec<(String, String)> {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let idle_since = now_ms.saturating_sub(idle_ms);
        let mut released = Vec::new();
        for g in self.groups() {
            // A hint first (no lock): most groups are busy.
            if g.sub.last_active_ms() > idle_since || !may_release(g.name(), g.topic()) {
                continue;
            }
            if g.release_if_idle(idle, now_ms) {
                released.push((g.name().to_owned(), g.topic().to_owned()));
            }
        }
        released
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

    /// The segment files of an engine opened on a directory ([`Engine::open`]); `None` for a
    /// heap-only engine.
    pub fn storage_stats(&self) -> Option<StorageStats> {
        #[cfg(not(loom))]
        if let Some(d) = &self.inner.durable {
            let log = d.log.stats();
            return Some(StorageStats {
                segment_bytes: log.mapped_bytes,
                segments: log.live_segments,
                freed_segments: log.freed_segments,
                freed_bytes: log.freed_bytes,
                journal_bytes: d.journal.stats().mapped_bytes,
                // Relaxed: a statistic.
                failed_writes: d.failed_writes.load(PlainOrdering::Relaxed),
            });
        }
        None
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
        // A durable engine keeps its files: closed first, the logs only unmap the segments
        // that the release of the topics below gives back.
        #[cfg(not(loom))]
        if let Some(d) = &self.inner.durable {
            d.log.close();
            d.journal.close();
        }
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
            let subscriptions = std::mem::take(&mut *write(&t.subscriptions));
            for s in subscriptions.into_values() {
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
