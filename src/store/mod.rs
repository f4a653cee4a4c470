//! The store: the only thing the broker sees of where messages live.
//!
//! A small core ([`MessageStore`], [`TopicStore`]: append, read from an offset, min/max offset,
//! wake-ups) plus extension traits ([`ConsumerOffsets`] for group offsets and acknowledgement,
//! [`MessageLookup`] for lookups by offset or time, [`StoreStats`]). The broker holds
//! `Arc<dyn …>` trait objects, never the concrete in-memory store, so a persistent store could
//! be plugged in behind the same client-visible behaviour. (RocketMQ's own modules depend on
//! the concrete `DefaultMessageStore`, whose single interface is so wide that a new store has
//! to stub most of it; this is the lesson.)
//!
//! Payloads are opaque to the store: the broker hands it an encoded record ([`Bytes`], shared,
//! never copied), the tag hash it filters on and the store timestamp.

mod memory;
#[cfg(not(loom))]
mod pop_state;

use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use thiserror::Error;

#[cfg(not(loom))]
pub use crate::engine::EngineRecovery;
pub use crate::engine::StorageStats;
pub use crate::engine::{
    AckOutcome, Delivery, EngineConfig, EngineError, Filter, MemberId, MemoryPolicy, Mode, PopAck,
    PopInit, PopOutcome, PopPolicy, PopRequest, Popped, Retention, Settings, MAX_QUEUES,
};
pub use crate::queue::WaitId;
pub use memory::MemoryStore;

/// Why a store operation failed. The broker maps each to a RocketMQ response code.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The topic does not exist (or was deleted).
    #[error("topic `{0}` does not exist")]
    UnknownTopic(String),
    /// The topic name is not acceptable.
    #[error("invalid topic name `{0}`")]
    InvalidTopic(String),
    /// Queue id out of range.
    #[error("queue {queue} is out of range: topic `{topic}` has {queues} queues")]
    QueueOutOfRange {
        /// The topic.
        topic: String,
        /// The queue asked for.
        queue: u32,
        /// Its queue count.
        queues: u32,
    },
    /// The message is larger than the store accepts.
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    MessageTooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// No memory left under the `reject` policy: the message was not stored.
    #[error("memory budget exhausted ({used} of {budget} bytes in use)")]
    Full {
        /// Bytes in use.
        used: u64,
        /// The budget.
        budget: u64,
    },
    /// The group is not known for this topic.
    #[error("consumer group `{group}` has no subscription to `{topic}`")]
    UnknownGroup {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
    },
    /// A POP receipt that names no message in flight (acknowledged, redelivered, its
    /// invisible time changed since, or never popped).
    #[error("no message of queue {queue} at offset {offset} is in flight under this receipt")]
    StaleReceipt {
        /// The queue.
        queue: u32,
        /// The offset.
        offset: u64,
    },
    /// A new subscription would pass the store's cap (per topic, or in all): every
    /// subscription holds every later message of its topic until it acknowledges it.
    #[error(
        "consumer group `{group}` cannot subscribe to `{topic}`: {limit} subscriptions exist \
         {scope} (idle groups are released after group-idle-secs)"
    )]
    TooManySubscriptions {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The cap reached.
        limit: usize,
        /// `"on this topic"` or `"on this broker"`.
        scope: &'static str,
    },
    /// Anything else (invalid argument, shut down).
    #[error("{0}")]
    Other(String),
}

/// What a read found (see [`TopicStore::read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOutcome {
    /// First retained offset of the queue.
    pub min_offset: u64,
    /// Offset the next append gets.
    pub max_offset: u64,
    /// Where the next read continues.
    pub next_offset: u64,
    /// Messages handed to the visitor and accepted.
    pub found: usize,
}

/// A stored message as a read visitor sees it.
#[derive(Debug, Clone, Copy)]
pub struct StoredRef<'a> {
    /// Offset in its queue.
    pub offset: u64,
    /// Store timestamp, ms.
    pub store_timestamp: u64,
    /// Tag hash.
    pub tag: i32,
    /// The record as the broker stored it.
    pub record: &'a Bytes,
}

/// Largest topic uid: the broker packs uids into 17 bits of a commit-log offset.
pub const MAX_TOPIC_UID: u32 = (1 << 17) - 1;
/// Largest queue offset a message may get: the broker packs offsets into 36 bits.
pub const MAX_ID_OFFSET: u64 = (1 << 36) - 1;

/// The core: topics by name.
pub trait MessageStore: Send + Sync + std::fmt::Debug {
    /// The topic, if it exists.
    fn topic(&self, name: &str) -> Option<Arc<dyn TopicStore>>;
    /// The topic, created with `queues` queues if it does not exist.
    ///
    /// # Errors
    /// [`StoreError::InvalidTopic`] and others from the implementation.
    fn ensure_topic(&self, name: &str, queues: u32) -> Result<Arc<dyn TopicStore>, StoreError> {
        self.ensure_topic_from(name, queues, 0)
    }
    /// As [`ensure_topic`](Self::ensure_topic), a topic it creates numbering its queues'
    /// messages from `first_offset` or later (a restart that continues the offsets the
    /// previous run handed out, so that no client's old offset names a new message); an
    /// existing topic is returned as it is.
    ///
    /// # Errors
    /// As [`ensure_topic`](Self::ensure_topic).
    fn ensure_topic_from(
        &self,
        name: &str,
        queues: u32,
        first_offset: u64,
    ) -> Result<Arc<dyn TopicStore>, StoreError>;
    /// As [`ensure_topic_from`](Self::ensure_topic_from), a topic it creates numbering queue
    /// `i`'s messages from `starts[i]` or later (a replica of a broker set installing another
    /// replica's queues). The default refuses: a store that cannot must not pretend to.
    ///
    /// # Errors
    /// As [`ensure_topic`](Self::ensure_topic).
    fn ensure_topic_at(
        &self,
        name: &str,
        starts: &[u64],
    ) -> Result<Arc<dyn TopicStore>, StoreError> {
        let _ = starts;
        Err(StoreError::Other(format!("cannot create topic {name} at given offsets")))
    }
    /// Deletes a topic and everything in it.
    ///
    /// # Errors
    /// [`StoreError::UnknownTopic`].
    fn delete_topic(&self, name: &str) -> Result<(), StoreError>;
    /// The live topic that holds this uid now (see [`TopicStore::uid`]).
    fn topic_by_uid(&self, uid: u32) -> Option<Arc<dyn TopicStore>>;
    /// Names and queue counts of every topic.
    fn topics(&self) -> Vec<(String, u32)>;
    /// The journal of a store whose state outlives the process ([`MemoryStore::open`]): a
    /// key-value journal in shared memory where the layer above keeps the small state that
    /// must survive a restart besides messages and committed offsets (undecided transactions,
    /// POP receipts, delivered timers). Keys starting with `u` or `o` are the store's own;
    /// callers take another first byte each. `None` for a store that keeps nothing.
    fn journal(&self) -> Option<Arc<crate::shm::Journal>> {
        None
    }
}

/// One topic: the hot path (append, read) and wake-ups for long polling.
pub trait TopicStore: Send + Sync + std::fmt::Debug {
    /// Its name.
    fn name(&self) -> &str;
    /// A number in `1..=`[`MAX_TOPIC_UID`] that no other live topic has; the broker builds
    /// commit-log offsets (message ids) from it and the queue offset. A store may give a
    /// deleted topic's uid to a new topic only if no `(uid, queue, offset)` the old topic ever
    /// had names a message of the new one (for example, by starting the new topic's offsets
    /// after the old one's), and keeps every queue offset at most [`MAX_ID_OFFSET`] (refusing
    /// appends beyond): so an id never resolves to another topic's message.
    fn uid(&self) -> u32;
    /// Number of queues.
    fn queue_count(&self) -> u32;
    /// Whether it has been deleted since this handle was taken.
    fn is_deleted(&self) -> bool;
    /// Overrides how long this topic keeps records no group holds (the store's default comes
    /// from its configuration); the records still count against the memory budget.
    fn set_retention(&self, retention: Retention);
    /// Sets how long this topic keeps records every group has acknowledged (zero: freed at
    /// once); they stay readable by offset and count against the memory budget.
    fn set_keep_acknowledged(&self, keep: std::time::Duration);
    /// Appends one record; returns its offset.
    ///
    /// # Errors
    /// [`StoreError::QueueOutOfRange`], [`StoreError::MessageTooLarge`], [`StoreError::Full`],
    /// [`StoreError::UnknownTopic`] (deleted).
    fn append(
        &self,
        queue: u32,
        record: Bytes,
        tag: i32,
        store_timestamp: u64,
    ) -> Result<u64, StoreError>;
    /// Appends records with consecutive offsets, all or nothing; returns the first offset.
    ///
    /// # Errors
    /// As [`append`](Self::append).
    fn append_batch(
        &self,
        queue: u32,
        records: Vec<(Bytes, i32)>,
        store_timestamp: u64,
    ) -> Result<u64, StoreError>;
    /// Reads queue `queue` from `from`: passes each record `filter` accepts to `visit`, at most
    /// `max`, stopping early when `visit` returns `false`.
    ///
    /// # Errors
    /// [`StoreError::QueueOutOfRange`].
    fn read(
        &self,
        queue: u32,
        from: u64,
        max: usize,
        filter: &Filter,
        visit: &mut dyn FnMut(StoredRef<'_>) -> bool,
    ) -> Result<ReadOutcome, StoreError>;
    /// `(min, max)` offsets of the queue: first retained and next to be written.
    ///
    /// # Errors
    /// [`StoreError::QueueOutOfRange`].
    fn offsets(&self, queue: u32) -> Result<(u64, u64), StoreError>;
    /// Registers `waker` for the first append at or after `offset`; `None` if one exists already.
    ///
    /// # Errors
    /// [`StoreError::QueueOutOfRange`].
    fn watch(
        &self,
        queue: u32,
        offset: u64,
        waker: &Waker,
        previous: Option<WaitId>,
    ) -> Result<Option<WaitId>, StoreError>;
    /// Withdraws a [`watch`](Self::watch) registration.
    fn cancel_watch(&self, queue: u32, id: WaitId);
}

/// Consumer groups' offsets, and the acknowledgements they imply.
pub trait ConsumerOffsets: Send + Sync {
    /// Makes a clustering group hold what it has not committed in `topic` from now on (its
    /// retained messages included). Idempotent.
    ///
    /// # Errors
    /// [`StoreError::UnknownTopic`].
    fn subscribe(&self, group: &str, topic: &str) -> Result<(), StoreError>;
    /// The handle of a clustering group that holds `topic`, made to subscribe if it does not:
    /// for the broker's own groups, which commit over and over (releasing delivered delay,
    /// timer and half messages).
    ///
    /// # Errors
    /// [`StoreError::UnknownTopic`].
    fn holder(&self, group: &str, topic: &str) -> Result<Arc<dyn GroupStore>, StoreError>;
    /// Releases a clustering group's hold on `topic` (its offsets are forgotten).
    fn unsubscribe(&self, group: &str, topic: &str);
    /// Stores a group's committed offset (the client's view, which may move backward) and
    /// acknowledges everything below it.
    ///
    /// # Errors
    /// [`StoreError::UnknownTopic`], [`StoreError::QueueOutOfRange`].
    fn commit(&self, group: &str, topic: &str, queue: u32, offset: u64) -> Result<(), StoreError>;
    /// The group's committed offset, if it ever committed one.
    fn committed(&self, group: &str, topic: &str, queue: u32) -> Option<u64>;
    /// Every committed offset: `(group, topic, queue, offset)`.
    fn committed_all(&self) -> Vec<(String, String, u32, u64)>;
    /// Adds a member to a broadcasting group (clients keep their offsets; the store derives
    /// acknowledgements from members' read positions). Returns the member's id.
    ///
    /// # Errors
    /// [`StoreError::UnknownTopic`].
    fn add_broadcast_member(&self, group: &str, topic: &str) -> Result<MemberId, StoreError>;
    /// Removes a broadcasting member: it stops holding memory.
    fn remove_broadcast_member(&self, group: &str, topic: &str, member: MemberId);
    /// Records that a broadcasting member has read queue `queue` up to `offset`.
    fn broadcast_position(
        &self,
        group: &str,
        topic: &str,
        member: MemberId,
        queue: u32,
        offset: u64,
    );
}

/// The receipt of a popped message: which delivery of which message. A redelivery or a change
/// of invisible time gives the message a later pop time, and the older receipt is then stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PopReceipt {
    /// The queue of the message.
    pub queue: u32,
    /// Its offset in the queue.
    pub offset: u64,
    /// The pop time of the delivery, ms since the epoch.
    pub pop_time: u64,
}

/// One consumer group's subscription to one topic, taken once (like a [`TopicStore`]) by
/// whoever pops, acknowledges or commits several times in a row, instead of looking the group
/// up by name each time.
pub trait GroupStore: Send + Sync + std::fmt::Debug {
    /// The group's name.
    fn group(&self) -> &str;
    /// The topic's name.
    fn topic(&self) -> &str;
    /// Pops queue `queue` into `out` (call it per queue with one `out` to pop several).
    ///
    /// # Errors
    /// [`StoreError::QueueOutOfRange`], [`StoreError::UnknownGroup`] (the subscription ended).
    fn pop(&self, queue: u32, req: &PopRequest<'_>, out: &mut PopOutcome)
        -> Result<(), StoreError>;
    /// Pops queue `queue` into `out` as [`pop`](Self::pop) does, treating expired messages as
    /// `policy` says (what it hands out in `out.revive`, and in `out.dead` with
    /// [`PopPolicy::dead_letter_pending`], stays in flight under the outcome's receipt until
    /// the caller acknowledges it or changes its invisible time).
    ///
    /// # Errors
    /// As [`pop`](Self::pop).
    fn pop_with(
        &self,
        queue: u32,
        req: &PopRequest<'_>,
        policy: &PopPolicy,
        out: &mut PopOutcome,
    ) -> Result<(), StoreError>;
    /// Acknowledges a popped message by its receipt.
    ///
    /// # Errors
    /// [`StoreError::StaleReceipt`], [`StoreError::QueueOutOfRange`],
    /// [`StoreError::UnknownGroup`].
    fn pop_ack(&self, receipt: PopReceipt) -> Result<PopAck, StoreError>;
    /// Makes a popped message invisible for `invisible_ms` from `now_ms`; returns its new
    /// receipt (the old one becomes stale).
    ///
    /// # Errors
    /// As [`pop_ack`](Self::pop_ack).
    fn change_invisible(
        &self,
        receipt: PopReceipt,
        invisible_ms: u64,
        now_ms: u64,
    ) -> Result<PopReceipt, StoreError>;
    /// Stores the group's committed offset of `queue` (as [`ConsumerOffsets::commit`]).
    ///
    /// # Errors
    /// [`StoreError::UnknownTopic`], [`StoreError::QueueOutOfRange`].
    fn commit(&self, queue: u32, offset: u64) -> Result<(), StoreError>;
}

/// POP consumption (RocketMQ 5's server-side load balancing): any caller pops any queue of a
/// clustering group; each popped message is invisible to the group for a time and is
/// acknowledged one by one by its [`PopReceipt`], or comes back with one more attempt. A group
/// name used for pulling as well shares its acknowledgement position with the pops (a commit
/// acknowledges popped messages below it).
pub trait PopConsumption: Send + Sync {
    /// The group whose pops of `topic` `group` names, made a (clustering) subscriber of the
    /// topic if it was not.
    ///
    /// # Errors
    /// [`StoreError::UnknownTopic`]; [`StoreError::Other`] for a group that broadcasts.
    fn pop_group(&self, group: &str, topic: &str) -> Result<Arc<dyn GroupStore>, StoreError>;
    /// Acknowledges a popped message by its receipt.
    ///
    /// # Errors
    /// [`StoreError::StaleReceipt`], [`StoreError::UnknownGroup`], [`StoreError::UnknownTopic`],
    /// [`StoreError::QueueOutOfRange`].
    fn pop_ack(&self, group: &str, topic: &str, receipt: PopReceipt) -> Result<PopAck, StoreError>;
    /// Makes a popped message invisible for `invisible_ms` from `now_ms`; returns the pop time
    /// of its new receipt (the old one becomes stale).
    ///
    /// # Errors
    /// As [`pop_ack`](Self::pop_ack).
    fn change_invisible(
        &self,
        group: &str,
        topic: &str,
        receipt: PopReceipt,
        invisible_ms: u64,
        now_ms: u64,
    ) -> Result<u64, StoreError>;
    /// Popped, unacknowledged messages of `group` in `topic`.
    fn inflight(&self, group: &str, topic: &str) -> u64;
    /// Gives the POP groups of a store whose state outlives the process their state back:
    /// what each acknowledged stays acknowledged, what it had in flight is in flight again
    /// under the same receipts and comes back when its invisible time ends. A store opened on
    /// its earlier state holds the groups' messages until then, and does it by itself at the
    /// first POP call; its user calls it earlier, once the topics' settings (keeping
    /// acknowledged messages) are in force, since the acknowledgements it gives back let
    /// messages be freed. Returns the in-flight entries put back (0 the second time, and for
    /// a store that keeps nothing).
    fn restore_pop_state(&self) -> usize {
        0
    }
    /// Ends every subscription that has had no member, no activity (pop, ack, change of
    /// invisible time, commit) for `idle` and no popped message still invisible at `now_ms`,
    /// and that `may_release(group, topic)` accepts; returns the `(group, topic)` pairs it
    /// ended. What only they held becomes reclaimable; a later pop starts a new subscription.
    fn release_idle_groups(
        &self,
        idle: std::time::Duration,
        now_ms: u64,
        may_release: &mut dyn FnMut(&str, &str) -> bool,
    ) -> Vec<(String, String)>;
    /// Subscriptions the store holds now, and the most it accepts.
    fn subscription_count(&self) -> (usize, usize);
}

/// Lookups outside the hot path.
pub trait MessageLookup: Send + Sync {
    /// The record at `offset`, if retained.
    fn get(&self, topic: &dyn TopicStore, queue: u32, offset: u64) -> Option<(Bytes, u64)>;
    /// First offset stored at or after `timestamp` (the end if none).
    fn offset_for_timestamp(
        &self,
        topic: &dyn TopicStore,
        queue: u32,
        timestamp: u64,
    ) -> Option<u64>;
    /// Store timestamp of the oldest retained message.
    fn earliest_timestamp(&self, topic: &dyn TopicStore, queue: u32) -> Option<u64>;
    /// Store timestamp of the message at `offset`, retained or reclaimed, as RocketMQ's
    /// statistics report it (`lastUpdateTimestamp`, a group's `lastTimestamp`). Exact when the
    /// message is retained, is the queue's last or is the last reclaimed one; for an older
    /// reclaimed offset, the last reclaimed message's time (a bound from above: a store that
    /// frees what every group acknowledged keeps no older time). `None` at or past the end; 0
    /// for an offset reclaimed before this store's first message (a reused topic uid).
    fn store_timestamp(&self, topic: &dyn TopicStore, queue: u32, offset: u64) -> Option<u64>;
}

/// Figures for operators.
pub trait StoreStats: Send + Sync {
    /// Bytes in use, the budget, live messages.
    fn memory(&self) -> MemoryStats;
    /// `(bytes_used, budget)` of [`memory`](Self::memory), for checks on a send path: a store
    /// should answer it without walking its topics.
    fn used_and_budget(&self) -> (u64, u64) {
        let m = self.memory();
        (m.bytes_used, m.budget)
    }
    /// Every live topic's figures, by name. Computed on each call (for scrapes, not the hot
    /// path); one entry per topic, so bounded by the topic table.
    fn topic_figures(&self) -> Vec<TopicFigures> {
        Vec::new()
    }
    /// Every group's subscription to every topic (groups holding messages). Computed on
    /// each call; one entry per subscription.
    fn group_figures(&self) -> Vec<GroupFigures> {
        Vec::new()
    }
    /// The segment files of a store whose state outlives the process; `None` for one that
    /// keeps nothing.
    fn storage(&self) -> Option<StorageStats> {
        None
    }
}

/// One queue's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueFigures {
    /// First retained offset.
    pub min_offset: u64,
    /// Offset the next append gets.
    pub max_offset: u64,
    /// Messages retained.
    pub live_messages: u64,
    /// Bytes retained (the store's accounting, record plus bookkeeping).
    pub bytes: u64,
}

/// One topic's figures.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicFigures {
    /// The topic.
    pub name: String,
    /// Its queues, by id.
    pub queues: Vec<QueueFigures>,
    /// Messages evicted by `drop-oldest` from it so far.
    pub evicted_messages: u64,
}

/// One group's subscription to one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupFigures {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// Broadcasting (each member holds) rather than clustering.
    pub broadcasting: bool,
    /// Messages the group still holds (has not acknowledged).
    pub backlog: u64,
    /// Bytes of the retained messages the group holds, estimated per queue from the queue's
    /// mean retained message size (exact when a queue's messages are all the same size).
    pub held_bytes: u64,
    /// Messages `drop-oldest` evicted before the group acknowledged them.
    pub dropped: u64,
}

/// Memory figures of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryStats {
    /// Bytes in use.
    pub bytes_used: u64,
    /// The budget.
    pub budget: u64,
    /// Messages retained.
    pub live_messages: u64,
    /// Messages reclaimed so far.
    pub reclaimed_messages: u64,
    /// Messages evicted by `drop-oldest`.
    pub evicted_messages: u64,
    /// Appends refused for lack of memory.
    pub rejected_messages: u64,
    /// When the store's last reclamation pass finished, ms since the Unix epoch (0: none yet
    /// or not applicable).
    pub last_reclaim_ms: u64,
}

/// Settings an operator changes while the store runs (`updateBrokerConfig`).
pub trait StoreSettings: Send + Sync {
    /// The memory budget, policy and default retention in force.
    fn settings(&self) -> Settings;
    /// Puts new settings in force.
    ///
    /// # Errors
    /// [`StoreError::Other`] for a setting the store cannot take (a zero budget).
    fn apply_settings(&self, settings: Settings) -> Result<(), StoreError>;
}

/// Everything the broker needs, as one object.
pub trait Store:
    MessageStore + ConsumerOffsets + PopConsumption + MessageLookup + StoreStats + StoreSettings
{
}

impl<T> Store for T where
    T: MessageStore + ConsumerOffsets + PopConsumption + MessageLookup + StoreStats + StoreSettings
{
}
