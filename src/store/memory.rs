//! The in-memory store: the store traits over the [`Engine`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::Waker;
#[cfg(not(loom))]
use std::time::Duration;

use bytes::Bytes;

#[cfg(not(loom))]
use super::pop_state;
use super::{
    ConsumerOffsets, GroupFigures, GroupStore, MemoryStats, MessageLookup, MessageStore, PopAck,
    PopConsumption, PopOutcome, PopPolicy, PopReceipt, PopRequest, QueueFigures, ReadOutcome,
    StoreError, StoreStats, StoredRef, TopicFigures, TopicStore, WaitId, MAX_ID_OFFSET,
    MAX_TOPIC_UID,
};
#[cfg(not(loom))]
use crate::engine::EngineRecovery;
use crate::engine::{
    Engine, EngineConfig, EngineError, Filter, Group, MemberId, Message, Mode, Retention,
    StartFrom, SubscribeOptions, TopicHandle,
};
#[cfg(not(loom))]
use crate::shm::Directory;
use crate::shm::Journal;
use crate::sync::plain::{lock, read, write};

fn map_err(e: EngineError) -> StoreError {
    match e {
        EngineError::UnknownTopic(t) => StoreError::UnknownTopic(t),
        EngineError::InvalidTopicName(t) => StoreError::InvalidTopic(t),
        EngineError::QueueOutOfRange { topic, queue, queues } => {
            StoreError::QueueOutOfRange { topic, queue, queues }
        }
        EngineError::MessageTooLarge { size, limit } => StoreError::MessageTooLarge { size, limit },
        EngineError::Storage(why) => StoreError::Other(format!("message store directory: {why}")),
        EngineError::BudgetExceeded { used, budget, .. } => StoreError::Full { used, budget },
        EngineError::UnknownGroup { group, topic } => StoreError::UnknownGroup { group, topic },
        EngineError::StaleReceipt { queue, offset } => StoreError::StaleReceipt { queue, offset },
        EngineError::TooManySubscriptions { group, topic, limit, per_topic } => {
            StoreError::TooManySubscriptions {
                group,
                topic,
                limit,
                scope: if per_topic { "on this topic" } else { "on this broker" },
            }
        }
        other => StoreError::Other(other.to_string()),
    }
}

/// Appends stop this far below [`MAX_ID_OFFSET`], so that appends racing the check cannot
/// pass it (they would need 16 Mi messages in flight on one topic).
const OFFSET_MARGIN: u64 = 1 << 24;
/// The last offset a topic appends below (see [`TopicStore::uid`]).
const OFFSET_LIMIT: u64 = MAX_ID_OFFSET - OFFSET_MARGIN;

/// A topic of the in-memory store.
#[derive(Debug)]
struct MemTopic {
    handle: TopicHandle,
    uid: u32,
    /// The highest queue end any of its appends reached (starts at its first offset).
    high: AtomicU64,
}

impl MemTopic {
    /// Refuses `n` more messages if an offset could pass what a message id can name.
    fn check_offsets(&self, n: u64) -> Result<(), StoreError> {
        // Relaxed: a bound with a margin for racing appends (OFFSET_MARGIN), not a protocol.
        if self.high.load(Ordering::Relaxed).saturating_add(n) > OFFSET_LIMIT {
            return Err(StoreError::Other(format!(
                "topic {} has used every offset a message id can name",
                self.handle.name()
            )));
        }
        Ok(())
    }

    fn appended(&self, first: u64, n: u64) {
        // Relaxed: see `check_offsets`.
        self.high.fetch_max(first.saturating_add(n), Ordering::Relaxed);
    }

    /// The end of its longest queue: no message of this topic ever had an offset at or above.
    fn offsets_end(&self) -> u64 {
        let ends = (0..self.handle.queue_count())
            .filter_map(|q| self.handle.queue_stats(q).ok())
            .map(|s| s.max_offset);
        // Relaxed: see `check_offsets`.
        ends.fold(self.high.load(Ordering::Relaxed), u64::max)
    }
}

/// Topic uids (see [`TopicStore::uid`]): fresh ones while they last, then the uids of deleted
/// topics, each with the offset its next topic must start at.
#[derive(Debug)]
struct Uids {
    next: u32,
    free: VecDeque<(u32, u64)>,
}

impl Uids {
    /// A uid and the first offset its topic's queues must use; `None` when every uid is taken.
    fn take(&mut self) -> Option<(u32, u64)> {
        if self.next <= MAX_TOPIC_UID {
            let uid = self.next;
            self.next += 1;
            return Some((uid, 0));
        }
        self.free.pop_front()
    }

    /// Gives back `uid`, whose topic never had an offset at or above `end`.
    fn give_back(&mut self, uid: u32, end: u64) {
        // A uid whose offsets are nearly used up retires for good (a new topic must have room).
        if end <= OFFSET_LIMIT / 2 {
            self.free.push_back((uid, end));
        }
    }
}

impl TopicStore for MemTopic {
    fn name(&self) -> &str {
        self.handle.name()
    }

    fn uid(&self) -> u32 {
        self.uid
    }

    fn queue_count(&self) -> u32 {
        self.handle.queue_count()
    }

    fn set_retention(&self, retention: Retention) {
        self.handle.set_retention(retention);
    }

    fn set_keep_acknowledged(&self, keep: std::time::Duration) {
        self.handle.set_keep_acknowledged(keep);
    }

    fn is_deleted(&self) -> bool {
        self.handle.is_deleted()
    }

    fn append(&self, queue: u32, record: Bytes, tag: i32, ts: u64) -> Result<u64, StoreError> {
        self.check_offsets(1)?;
        let msg = Message::new(record).with_tag_hash(tag).with_timestamp(ts);
        let offset = self.handle.append(queue, msg).map(|r| r.offset).map_err(map_err)?;
        self.appended(offset, 1);
        Ok(offset)
    }

    fn append_batch(
        &self,
        queue: u32,
        records: Vec<(Bytes, i32)>,
        ts: u64,
    ) -> Result<u64, StoreError> {
        let n = records.len() as u64;
        self.check_offsets(n)?;
        let msgs = records
            .into_iter()
            .map(|(r, tag)| Message::new(r).with_tag_hash(tag).with_timestamp(ts))
            .collect();
        let first = self.handle.append_batch(queue, msgs).map(|r| r.offset).map_err(map_err)?;
        self.appended(first, n);
        Ok(first)
    }

    fn read(
        &self,
        queue: u32,
        from: u64,
        max: usize,
        filter: &Filter,
        visit: &mut dyn FnMut(StoredRef<'_>) -> bool,
    ) -> Result<ReadOutcome, StoreError> {
        let out = self
            .handle
            .read(queue, from, max, filter, |m| {
                visit(StoredRef {
                    offset: m.offset,
                    store_timestamp: m.timestamp,
                    tag: m.tag as i32,
                    record: m.payload,
                })
            })
            .map_err(map_err)?;
        Ok(ReadOutcome {
            min_offset: out.first_offset,
            max_offset: out.end_offset,
            next_offset: out.next_offset,
            found: out.found,
        })
    }

    fn offsets(&self, queue: u32) -> Result<(u64, u64), StoreError> {
        let s = self.handle.queue_stats(queue).map_err(map_err)?;
        Ok((s.min_offset, s.max_offset))
    }

    fn watch(
        &self,
        queue: u32,
        offset: u64,
        waker: &Waker,
        previous: Option<WaitId>,
    ) -> Result<Option<WaitId>, StoreError> {
        self.handle.watch(queue, offset, waker, previous).map_err(map_err)
    }

    fn cancel_watch(&self, queue: u32, id: WaitId) {
        self.handle.cancel_wait(queue, id);
    }
}

type OffsetKey = (String, String, u32);

/// Every group's committed offsets, by (group, topic, queue): what clients are told.
type Offsets = Arc<OffsetTable>;

/// The committed offsets, and (in a store opened on a directory) their journal: each change is
/// journaled under the table's lock, so the journal's last record of a key is its value here.
#[derive(Debug, Default)]
struct OffsetTable {
    map: Mutex<HashMap<OffsetKey, u64>>,
    journal: Option<Arc<Journal>>,
}

/// A committed offset's journal key: `o`, group, NUL, topic, NUL, queue (BE).
fn offset_key((group, topic, queue): &OffsetKey) -> Vec<u8> {
    let mut k = Vec::with_capacity(group.len() + topic.len() + 7);
    k.push(b'o');
    k.extend_from_slice(group.as_bytes());
    k.push(0);
    k.extend_from_slice(topic.as_bytes());
    k.push(0);
    k.extend_from_slice(&queue.to_be_bytes());
    k
}

#[cfg(not(loom))]
fn decode_offset_key(k: &[u8]) -> Option<OffsetKey> {
    let rest = k.strip_prefix(b"o")?;
    let (names, queue) = rest.split_at(rest.len().checked_sub(4)?);
    let mut parts = names.strip_suffix(&[0])?.splitn(2, |b| *b == 0);
    let group = String::from_utf8(parts.next()?.to_vec()).ok()?;
    let topic = String::from_utf8(parts.next()?.to_vec()).ok()?;
    Some((group, topic, u32::from_be_bytes(queue.try_into().ok()?)))
}

impl OffsetTable {
    fn insert(&self, key: OffsetKey, offset: u64) -> Result<(), StoreError> {
        let mut map = lock(&self.map);
        if let Some(j) = &self.journal {
            j.put(&offset_key(&key), &offset.to_le_bytes()).map_err(|e| {
                StoreError::Other(format!("the committed offset could not be kept: {e}"))
            })?;
        }
        map.insert(key, offset);
        Ok(())
    }

    fn get(&self, key: &OffsetKey) -> Option<u64> {
        lock(&self.map).get(key).copied()
    }

    fn all(&self) -> Vec<(String, String, u32, u64)> {
        lock(&self.map).iter().map(|((g, t, q), o)| (g.clone(), t.clone(), *q, *o)).collect()
    }

    /// Forgets the offsets `gone` selects (their journal records are deleted too; a deletion
    /// that cannot be written is logged: the offset then comes back after a restart).
    fn forget(&self, gone: impl Fn(&OffsetKey) -> bool) {
        let mut map = lock(&self.map);
        map.retain(|k, _| {
            if !gone(k) {
                return true;
            }
            if let Some(j) = &self.journal {
                if let Err(e) = j.delete(&offset_key(k)) {
                    #[cfg(feature = "broker")]
                    tracing::error!("a forgotten committed offset could not be journaled: {e}");
                    let _ = e;
                }
            }
            false
        });
    }
}

/// Stores a group's committed offset (the client's view, which may move backward) and
/// acknowledges everything below it in the engine (only forward).
fn commit_offset(
    offsets: &OffsetTable,
    t: &MemTopic,
    g: Option<&Group>,
    (group, queue, offset): (&str, u32, u64),
) -> Result<(), StoreError> {
    let topic = t.handle.name();
    if queue >= t.queue_count() {
        return Err(StoreError::QueueOutOfRange {
            topic: topic.into(),
            queue,
            queues: t.queue_count(),
        });
    }
    offsets.insert((group.to_string(), topic.to_string(), queue), offset)?;
    if let Some(g) = g.filter(|g| g.mode() == Mode::Clustering) {
        let end = t.handle.queue_stats(queue).map_err(map_err)?.max_offset;
        // Acknowledgements only move forward; a client moving its offset backward (an offset
        // reset) only changes what it is told, not what was acknowledged. A subscription that
        // ended meanwhile has nothing left to acknowledge.
        match g.commit(queue, offset.min(end)) {
            Ok(()) | Err(EngineError::CommitBehind { .. } | EngineError::NotAMember) => {}
            Err(e) => return Err(map_err(e)),
        }
    }
    Ok(())
}

/// A group's subscription to a topic of the in-memory store (see [`GroupStore`]).
#[derive(Debug)]
struct MemGroup {
    group: Group,
    topic: Arc<MemTopic>,
    offsets: Offsets,
}

impl GroupStore for MemGroup {
    fn group(&self) -> &str {
        self.group.name()
    }

    fn topic(&self) -> &str {
        self.group.topic()
    }

    fn pop(
        &self,
        queue: u32,
        req: &PopRequest<'_>,
        out: &mut PopOutcome,
    ) -> Result<(), StoreError> {
        self.group.pop(queue, req, out).map_err(|e| self.gone(e))
    }

    fn pop_with(
        &self,
        queue: u32,
        req: &PopRequest<'_>,
        policy: &PopPolicy,
        out: &mut PopOutcome,
    ) -> Result<(), StoreError> {
        self.group.pop_with(queue, req, policy, out).map_err(|e| self.gone(e))
    }

    fn pop_ack(&self, r: PopReceipt) -> Result<PopAck, StoreError> {
        self.group.ack_popped(engine_receipt(r)).map_err(|e| self.gone(e))
    }

    fn change_invisible(
        &self,
        r: PopReceipt,
        invisible_ms: u64,
        now_ms: u64,
    ) -> Result<PopReceipt, StoreError> {
        let renewed = self
            .group
            .change_invisible(r.queue, r.offset, r.pop_time, invisible_ms, now_ms)
            .map_err(|e| self.gone(e))?;
        Ok(PopReceipt { pop_time: renewed, ..r })
    }

    fn commit(&self, queue: u32, offset: u64) -> Result<(), StoreError> {
        if self.topic.handle.is_deleted() {
            return Err(StoreError::UnknownTopic(self.topic.handle.name().into()));
        }
        commit_offset(&self.offsets, &self.topic, Some(&self.group), (self.group(), queue, offset))
    }
}

impl MemGroup {
    /// A subscription that ended since the handle was taken reads as an unknown group, as a
    /// lookup by name would find it.
    fn gone(&self, e: EngineError) -> StoreError {
        match e {
            EngineError::NotAMember => StoreError::UnknownGroup {
                group: self.group.name().into(),
                topic: self.group.topic().into(),
            },
            other => map_err(other),
        }
    }
}

/// The store traits over an in-memory [`Engine`].
#[derive(Debug)]
pub struct MemoryStore {
    engine: Engine,
    topics: RwLock<HashMap<String, Arc<MemTopic>>>,
    by_uid: RwLock<HashMap<u32, Arc<MemTopic>>>,
    uids: Mutex<Uids>,
    /// Committed offsets; its journal is the store's (topic uids, committed offsets, POP
    /// state) when the store was opened on a directory.
    offsets: Offsets,
    /// POP state read back at open and not yet given back to its groups
    /// ([`PopConsumption::restore_pop_state`]).
    #[cfg(not(loom))]
    pending_pop: PendingPop,
}

/// POP state waiting to be given back (see [`MemoryStore::open`]): `any` says whether there is
/// some, so that the POP paths check one flag (never set in heap mode) before the lock.
#[cfg(not(loom))]
#[derive(Debug, Default)]
struct PendingPop {
    any: std::sync::atomic::AtomicBool,
    records: Mutex<pop_state::Records>,
}

/// A topic uid's journal key.
fn uid_key(topic: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + topic.len());
    k.push(b'u');
    k.extend_from_slice(topic.as_bytes());
    k
}

fn store_error(e: crate::shm::SegmentError) -> StoreError {
    StoreError::Other(format!("message store directory: {e}"))
}

impl MemoryStore {
    /// A store over a new engine.
    ///
    /// # Errors
    /// [`StoreError::Other`] if the engine configuration is invalid.
    pub fn new(config: EngineConfig) -> Result<Self, StoreError> {
        Ok(MemoryStore {
            engine: Engine::new(config).map_err(map_err)?,
            topics: RwLock::new(HashMap::new()),
            by_uid: RwLock::new(HashMap::new()),
            uids: Mutex::new(Uids { next: 1, free: VecDeque::new() }),
            offsets: Arc::default(),
            #[cfg(not(loom))]
            pending_pop: PendingPop::default(),
        })
    }

    /// A store whose messages and topics ([`Engine::open`]), topic uids (so message ids stay
    /// valid) and committed offsets live in the directory `dir`, restored from what an earlier
    /// store left there, after a clean stop or a crash alike. Every group with a committed
    /// offset is subscribed again at once, so the messages it has not consumed are held for
    /// it until its consumers come back (what it consumed is freed at its next commit). Until they are, retention frees nothing (see below).
    /// Every group with POP state (its pop positions and in-flight messages, journaled as it
    /// changes: `pop_state`) is subscribed again too and holds every retained message until
    /// [`PopConsumption::restore_pop_state`] gives its state back (at the latest, the first
    /// POP call does).
    ///
    /// # Errors
    /// [`StoreError::Other`] if the configuration is invalid or the directory's logs cannot be
    /// opened.
    #[cfg(not(loom))]
    pub fn open(
        config: EngineConfig,
        dir: &Directory,
        segment_size: usize,
    ) -> Result<(Self, EngineRecovery), StoreError> {
        // The reaper runs from the engine's start, before the groups hold again what they held:
        // under the configured retention it would free at once every restored message older
        // than it that only a group held (a waiting timer or delay-level message, an
        // undecided half message, a backlog). So the engine opens with no retention, and gets
        // the configured one once every group is subscribed again (at the end).
        let retention = config.retention;
        let opening = EngineConfig {
            retention: Retention { time: Duration::from_millis(u64::MAX), bytes: u64::MAX },
            ..config
        };
        let (engine, recovery) = Engine::open(opening, dir, segment_size).map_err(map_err)?;
        let (journal, _) = Journal::open(dir, "store", 1 << 20).map_err(store_error)?;
        let journal = Arc::new(journal);
        let mut uids: HashMap<String, u32> = HashMap::new();
        for (k, v) in journal.entries(b"u") {
            let (Ok(name), Some(uid)) = (
                String::from_utf8(k[1..].to_vec()),
                v.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes),
            ) else {
                continue;
            };
            uids.insert(name, uid);
        }
        let names: std::collections::HashSet<String> =
            engine.topics().into_iter().map(|(n, _)| n).collect();
        for gone in uids.keys().filter(|n| !names.contains(*n)) {
            journal.delete(&uid_key(gone)).map_err(store_error)?;
        }
        uids.retain(|n, _| names.contains(n));
        let next = uids.values().copied().max().map_or(1, |m| m + 1);
        let store = MemoryStore {
            engine,
            topics: RwLock::new(HashMap::new()),
            by_uid: RwLock::new(HashMap::new()),
            uids: Mutex::new(Uids { next, free: VecDeque::new() }),
            offsets: Arc::new(OffsetTable {
                map: Mutex::new(HashMap::new()),
                journal: Some(Arc::clone(&journal)),
            }),
            pending_pop: PendingPop::default(),
        };
        let mut names: Vec<String> = names.into_iter().collect();
        names.sort();
        for name in names {
            let handle = store.engine.topic(&name).map_err(map_err)?;
            let uid = match uids.get(&name) {
                Some(uid) => *uid,
                None => {
                    let Some((uid, _)) = lock(&store.uids).take() else { continue };
                    journal.put(&uid_key(&name), &uid.to_le_bytes()).map_err(store_error)?;
                    uid
                }
            };
            let t = Arc::new(MemTopic { handle, uid, high: AtomicU64::new(0) });
            t.appended(t.offsets_end(), 0);
            write(&store.topics).insert(name, Arc::clone(&t));
            write(&store.by_uid).insert(uid, t);
        }
        for (k, v) in journal.entries(b"o") {
            let Some(key) = decode_offset_key(&k) else { continue };
            let Some(offset) = v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
            else {
                continue;
            };
            let Some(t) = store.handle(&key.1) else {
                journal.delete(&k).map_err(store_error)?;
                continue;
            };
            // The group holds what it has not consumed until its consumers are back (nothing
            // to hold past the queue's end: its last segments were set aside). Its commit is
            // not applied as acknowledgements here: that happens with the next commit, after
            // the layer above has set each topic's settings (keeping acknowledged messages,
            // `Core::open`), so nothing is freed that a running broker would have kept.
            if offset <= t.offsets_end() {
                let _ = store.group(&key.0, &key.1, Mode::Clustering);
            }
            lock(&store.offsets.map).insert(key, offset);
        }
        // A POP group holds what it held, and gets its state back with
        // `restore_pop_state` (see there); every change is journaled from now on.
        store.hold_pop_groups(&journal);
        store
            .engine
            .set_pop_journal(Arc::new(pop_state::PopRecords::new(Arc::clone(&journal))))
            .map_err(map_err)?;
        let settings = crate::engine::Settings { retention, ..store.engine.settings() };
        store.engine.apply_settings(settings).map_err(map_err)?;
        Ok((store, recovery))
    }

    /// Subscribes every group with POP records in `journal` again, so that it holds every
    /// retained message until its state is given back ([`restore_pop`](Self::restore_pop)),
    /// and keeps the records for that. Records of a topic that is gone are deleted.
    #[cfg(not(loom))]
    fn hold_pop_groups(&self, journal: &Journal) {
        let mut records = pop_state::read(journal);
        records.retain(|(group, topic), _| {
            if self.handle(topic).is_none() {
                pop_state::forget_subscription(journal, group, topic);
                return false;
            }
            if let Err(e) = self.group(group, topic, Mode::Clustering) {
                // Kept for the next start (a cap on subscriptions, say).
                #[cfg(feature = "broker")]
                tracing::warn!(%group, %topic, error = %e, "POP state not restored");
                let _ = e;
                return false;
            }
            true
        });
        let any = !records.is_empty();
        *lock(&self.pending_pop.records) = records;
        // Relaxed: set before the store is shared.
        self.pending_pop.any.store(any, std::sync::atomic::Ordering::Relaxed);
    }

    /// Gives the POP groups their state back if it is still pending: called first by every
    /// POP path, so that nothing pops, acknowledges or changes a group before it has its state.
    fn resume_pop(&self) {
        #[cfg(not(loom))]
        // Acquire: pairs with the Release store in `restore_pop`, after which the state is in
        // place.
        if self.pending_pop.any.load(std::sync::atomic::Ordering::Acquire) {
            self.restore_pop();
        }
    }

    /// Gives every pending POP group its state back (see [`pop_state`]): the acknowledgements
    /// and in-flight entries of each queue with a position, under the pending lock (a POP path
    /// racing it waits for it in [`resume_pop`](Self::resume_pop)). An entry below the
    /// group's committed offset is not put back in flight. Records that cannot be put back are
    /// deleted. Returns the in-flight entries put back.
    #[cfg(not(loom))]
    fn restore_pop(&self) -> usize {
        let mut pending = lock(&self.pending_pop.records);
        let records = std::mem::take(&mut *pending);
        let Some(journal) = self.journal_ref() else { return 0 };
        let mut restored = 0;
        for ((group, topic), queues) in records {
            let Ok(g) = self.engine.group(&group, &topic) else { continue };
            for (queue, mut records) in queues {
                let committed = self.offsets.get(&(group.clone(), topic.clone(), queue));
                let mut gone: Vec<u64> = Vec::new();
                records.entries.retain(|(off, _)| {
                    let keep = !committed.is_some_and(|c| *off < c);
                    if !keep {
                        gone.push(*off);
                    }
                    keep
                });
                let mut position = None;
                match records.position {
                    // Entries without a position (a crash between their records and it): they
                    // are delivered again as new messages.
                    None => gone.extend(records.entries.iter().map(|(o, _)| *o)),
                    Some(p) => match g.restore_pop(queue, p, &records.entries) {
                        Ok(r) => {
                            restored += r.inflight;
                            gone.extend(r.dropped);
                        }
                        // A queue the topic no longer has.
                        Err(_) => {
                            gone.extend(records.entries.iter().map(|(o, _)| *o));
                            position = pop_state::position_key(&group, &topic, queue);
                        }
                    },
                }
                let keys: Vec<Vec<u8>> = gone
                    .into_iter()
                    .filter_map(|off| pop_state::entry_key(&group, &topic, queue, off))
                    .chain(position)
                    .collect();
                pop_state::forget(journal, keys.iter().map(|k| &k[..]));
            }
        }
        // Release: pairs with the Acquire load in `resume_pop`.
        self.pending_pop.any.store(false, std::sync::atomic::Ordering::Release);
        drop(pending);
        restored
    }

    /// The store's journal, if it was opened on a directory.
    fn journal_ref(&self) -> Option<&Arc<Journal>> {
        self.offsets.journal.as_ref()
    }

    /// The engine underneath (statistics and tests).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn handle(&self, name: &str) -> Option<Arc<MemTopic>> {
        let t = read(&self.topics).get(name).cloned()?;
        (!t.handle.is_deleted()).then_some(t)
    }

    /// The live topic behind `topic`: the one holding its uid now, if that is still it (not a
    /// topic created since under the same name or given the same uid).
    fn same_topic(&self, topic: &dyn TopicStore) -> Option<Arc<MemTopic>> {
        let t = read(&self.by_uid).get(&topic.uid()).cloned()?;
        (!t.handle.is_deleted() && t.handle.name() == topic.name()).then_some(t)
    }

    fn group(&self, group: &str, topic: &str, mode: Mode) -> Result<Group, StoreError> {
        // New clustering groups hold every retained message until they commit; a broadcasting
        // member holds from the oldest retained until its first pull says where it reads.
        let opts = SubscribeOptions { start: StartFrom::First, mode, filter: Filter::All };
        match self.engine.subscribe(group, topic, opts.clone()) {
            Err(EngineError::GroupModeConflict { .. }) => {
                // The group changed its message model: the old subscription goes.
                if let Ok(g) = self.engine.group(group, topic) {
                    g.unsubscribe();
                }
                self.engine.subscribe(group, topic, opts).map_err(map_err)
            }
            other => other.map_err(map_err),
        }
    }
}

impl MessageStore for MemoryStore {
    fn topic(&self, name: &str) -> Option<Arc<dyn TopicStore>> {
        self.handle(name).map(|t| t as Arc<dyn TopicStore>)
    }

    fn ensure_topic_from(
        &self,
        name: &str,
        queues: u32,
        first_offset: u64,
    ) -> Result<Arc<dyn TopicStore>, StoreError> {
        if queues == 0 || queues > crate::engine::MAX_QUEUES {
            return Err(map_err(EngineError::InvalidQueueCount(queues)));
        }
        self.ensure_topic_at(name, &vec![first_offset; queues as usize])
    }

    fn ensure_topic_at(
        &self,
        name: &str,
        starts: &[u64],
    ) -> Result<Arc<dyn TopicStore>, StoreError> {
        if let Some(t) = self.handle(name) {
            return Ok(t);
        }
        let mut topics = write(&self.topics);
        if let Some(t) = topics.get(name).filter(|t| !t.handle.is_deleted()) {
            return Ok(Arc::clone(t) as Arc<dyn TopicStore>);
        }
        let Some((uid, reused_from)) = lock(&self.uids).take() else {
            return Err(StoreError::Other(format!(
                "cannot create topic {name}: {MAX_TOPIC_UID} topics exist"
            )));
        };
        // A reused uid's offsets continue above its last topic's, so that no old message id
        // names a new message.
        let starts: Vec<u64> =
            starts.iter().map(|s| reused_from.max((*s).min(OFFSET_LIMIT))).collect();
        let high = starts.iter().copied().max().unwrap_or(reused_from);
        let created = self
            .engine
            .ensure_topic_at(name, &starts)
            .and_then(|_| self.engine.topic(name))
            .map_err(map_err);
        let handle = match created {
            Ok(h) => h,
            Err(e) => {
                lock(&self.uids).give_back(uid, reused_from);
                return Err(e);
            }
        };
        if let Some(j) = self.journal_ref() {
            // Before anything is appended: message ids name the uid.
            if let Err(e) = j.put(&uid_key(name), &uid.to_le_bytes()) {
                let _ = self.engine.delete_topic(name);
                lock(&self.uids).give_back(uid, reused_from);
                return Err(store_error(e));
            }
        }
        let t = Arc::new(MemTopic { handle, uid, high: AtomicU64::new(high) });
        topics.insert(name.to_string(), Arc::clone(&t));
        write(&self.by_uid).insert(uid, Arc::clone(&t));
        Ok(t)
    }

    fn delete_topic(&self, name: &str) -> Result<(), StoreError> {
        let t = write(&self.topics).remove(name);
        if let Some(t) = &t {
            write(&self.by_uid).remove(&t.uid);
        }
        self.offsets.forget(|(_, topic, _)| topic == name);
        let deleted = self.engine.delete_topic(name).map_err(map_err);
        if let (Some(j), Ok(())) = (self.journal_ref(), &deleted) {
            if let Err(e) = j.delete(&uid_key(name)) {
                #[cfg(feature = "broker")]
                tracing::error!("topic {name}'s deletion could not be journaled: {e}");
                let _ = e;
            }
        }
        if let Some(t) = t {
            // After the engine's delete, so appends have stopped (but for one racing the
            // delete itself, review 2.2, which lands within microseconds).
            lock(&self.uids).give_back(t.uid, t.offsets_end());
        }
        deleted
    }

    fn topic_by_uid(&self, uid: u32) -> Option<Arc<dyn TopicStore>> {
        let t = read(&self.by_uid).get(&uid).cloned()?;
        (!t.handle.is_deleted()).then_some(t as Arc<dyn TopicStore>)
    }

    fn topics(&self) -> Vec<(String, u32)> {
        self.engine.topics()
    }

    fn journal(&self) -> Option<Arc<Journal>> {
        self.offsets.journal.clone()
    }
}

impl ConsumerOffsets for MemoryStore {
    fn subscribe(&self, group: &str, topic: &str) -> Result<(), StoreError> {
        self.group(group, topic, Mode::Clustering).map(|_| ())
    }

    fn unsubscribe(&self, group: &str, topic: &str) {
        if let Ok(g) = self.engine.group(group, topic) {
            g.unsubscribe();
        }
        self.offsets.forget(|(g, t, _)| g == group && t == topic);
    }

    fn holder(&self, group: &str, topic: &str) -> Result<Arc<dyn GroupStore>, StoreError> {
        let g = self.group(group, topic, Mode::Clustering)?;
        let t = self.handle(topic).ok_or_else(|| StoreError::UnknownTopic(topic.into()))?;
        Ok(Arc::new(MemGroup { group: g, topic: t, offsets: Arc::clone(&self.offsets) }))
    }

    fn commit(&self, group: &str, topic: &str, queue: u32, offset: u64) -> Result<(), StoreError> {
        let t = self.handle(topic).ok_or_else(|| StoreError::UnknownTopic(topic.into()))?;
        let g = self.engine.group(group, topic).ok();
        commit_offset(&self.offsets, &t, g.as_ref(), (group, queue, offset))
    }

    fn committed(&self, group: &str, topic: &str, queue: u32) -> Option<u64> {
        self.offsets.get(&(group.to_string(), topic.to_string(), queue))
    }

    fn committed_all(&self) -> Vec<(String, String, u32, u64)> {
        self.offsets.all()
    }

    fn add_broadcast_member(&self, group: &str, topic: &str) -> Result<MemberId, StoreError> {
        self.group(group, topic, Mode::Broadcasting)?.add_member().map_err(map_err)
    }

    fn remove_broadcast_member(&self, group: &str, topic: &str, member: MemberId) {
        if let Ok(g) = self.engine.group(group, topic) {
            g.remove_member(member);
        }
    }

    fn broadcast_position(
        &self,
        group: &str,
        topic: &str,
        member: MemberId,
        queue: u32,
        offset: u64,
    ) {
        let (Ok(g), Some(t)) = (self.engine.group(group, topic), self.handle(topic)) else {
            return;
        };
        let Ok(end) = t.handle.queue_stats(queue).map(|s| s.max_offset) else { return };
        // A position behind the member's last one (the client re-reads) changes nothing.
        let _ = g.commit_member(member, queue, offset.min(end));
    }
}

impl PopConsumption for MemoryStore {
    fn restore_pop_state(&self) -> usize {
        #[cfg(not(loom))]
        {
            self.restore_pop()
        }
        #[cfg(loom)]
        0
    }

    fn pop_group(&self, group: &str, topic: &str) -> Result<Arc<dyn GroupStore>, StoreError> {
        self.resume_pop();
        let g = match self.engine.group(group, topic) {
            Ok(g) if g.mode() == Mode::Clustering => g,
            // POP is clustering consumption; a broadcasting group of that name keeps its state.
            Ok(_) => {
                return Err(StoreError::Other(format!(
                    "consumer group `{group}` consumes `{topic}` by broadcasting; POP is clustering only"
                )))
            }
            Err(_) => self.group(group, topic, Mode::Clustering)?,
        };
        let t = self.handle(topic).ok_or_else(|| StoreError::UnknownTopic(topic.into()))?;
        Ok(Arc::new(MemGroup { group: g, topic: t, offsets: Arc::clone(&self.offsets) }))
    }

    fn pop_ack(&self, group: &str, topic: &str, r: PopReceipt) -> Result<PopAck, StoreError> {
        self.resume_pop();
        let g = self.engine.group(group, topic).map_err(map_err)?;
        g.ack_popped(engine_receipt(r)).map_err(map_err)
    }

    fn change_invisible(
        &self,
        group: &str,
        topic: &str,
        r: PopReceipt,
        invisible_ms: u64,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        self.resume_pop();
        let g = self.engine.group(group, topic).map_err(map_err)?;
        g.change_invisible(r.queue, r.offset, r.pop_time, invisible_ms, now_ms).map_err(map_err)
    }

    fn inflight(&self, group: &str, topic: &str) -> u64 {
        self.resume_pop();
        self.engine.group(group, topic).map_or(0, |g| g.inflight())
    }

    fn release_idle_groups(
        &self,
        idle: std::time::Duration,
        now_ms: u64,
        may_release: &mut dyn FnMut(&str, &str) -> bool,
    ) -> Vec<(String, String)> {
        // A restored group's in-flight messages keep it.
        self.resume_pop();
        let released = self.engine.release_idle_groups(idle, now_ms, may_release);
        if !released.is_empty() {
            let gone: std::collections::HashSet<(&str, &str)> =
                released.iter().map(|(g, t)| (g.as_str(), t.as_str())).collect();
            self.offsets.forget(|(g, t, _)| gone.contains(&(g.as_str(), t.as_str())));
        }
        released
    }

    fn subscription_count(&self) -> (usize, usize) {
        (self.engine.groups().len(), self.engine.config().max_subscriptions)
    }
}

/// The engine's receipt for the store's.
fn engine_receipt(r: PopReceipt) -> crate::engine::PopReceipt {
    crate::engine::PopReceipt { queue: r.queue, offset: r.offset, pop_time: r.pop_time }
}

impl MessageLookup for MemoryStore {
    fn get(&self, topic: &dyn TopicStore, queue: u32, offset: u64) -> Option<(Bytes, u64)> {
        let t = self.same_topic(topic)?;
        t.handle.get(queue, offset, |m| (m.payload.clone(), m.timestamp)).ok().flatten()
    }

    fn offset_for_timestamp(
        &self,
        topic: &dyn TopicStore,
        queue: u32,
        timestamp: u64,
    ) -> Option<u64> {
        let t = self.same_topic(topic)?;
        t.handle.offset_for_timestamp(queue, timestamp).ok()
    }

    fn earliest_timestamp(&self, topic: &dyn TopicStore, queue: u32) -> Option<u64> {
        let t = self.same_topic(topic)?;
        let min = t.handle.queue_stats(queue).ok()?.min_offset;
        t.handle.get(queue, min, |m| m.timestamp).ok().flatten()
    }

    fn store_timestamp(&self, topic: &dyn TopicStore, queue: u32, offset: u64) -> Option<u64> {
        let t = self.same_topic(topic)?;
        let s = t.handle.queue_stats(queue).ok()?;
        if offset >= s.max_offset {
            return None;
        }
        if offset + 1 == s.max_offset {
            return Some(s.last_store_timestamp);
        }
        if offset >= s.min_offset {
            if let Some(ts) = t.handle.get(queue, offset, |m| m.timestamp).ok().flatten() {
                return Some(ts);
            }
        }
        // Reclaimed, perhaps since the statistics above: the time of the last reclaimed one now.
        let s = t.handle.queue_stats(queue).ok()?;
        Some(s.reclaimed_store_timestamp)
    }
}

impl super::StoreSettings for MemoryStore {
    fn settings(&self) -> super::Settings {
        self.engine.settings()
    }

    fn apply_settings(&self, settings: super::Settings) -> Result<(), StoreError> {
        self.engine.apply_settings(settings).map_err(|e| StoreError::Other(e.to_string()))
    }
}

impl StoreStats for MemoryStore {
    fn storage(&self) -> Option<crate::engine::StorageStats> {
        let mut s = self.engine.storage_stats()?;
        if let Some(j) = self.journal_ref() {
            s.journal_bytes += j.stats().mapped_bytes;
        }
        Some(s)
    }

    fn used_and_budget(&self) -> (u64, u64) {
        // The budget in force now: `updateBrokerConfig` may have changed it since the start.
        (self.engine.bytes_used(), self.engine.settings().memory_budget)
    }

    fn memory(&self) -> MemoryStats {
        let s = self.engine.stats();
        MemoryStats {
            bytes_used: s.bytes_used,
            budget: s.memory_budget,
            live_messages: s.live_messages,
            reclaimed_messages: s.reclaimed_messages,
            evicted_messages: s.evicted_messages,
            rejected_messages: s.rejected_messages,
            last_reclaim_ms: self.engine.last_reap_ms(),
        }
    }

    fn topic_figures(&self) -> Vec<TopicFigures> {
        let handles: Vec<Arc<MemTopic>> = read(&self.topics).values().cloned().collect();
        let mut out: Vec<TopicFigures> = handles
            .iter()
            .filter(|t| !t.handle.is_deleted())
            .map(|t| {
                let stats: Vec<_> = (0..t.handle.queue_count())
                    .filter_map(|q| t.handle.queue_stats(q).ok())
                    .collect();
                TopicFigures {
                    name: t.handle.name().to_string(),
                    evicted_messages: stats.iter().map(|s| s.evicted).sum(),
                    queues: stats
                        .iter()
                        .map(|s| QueueFigures {
                            min_offset: s.min_offset,
                            max_offset: s.max_offset,
                            live_messages: s.live_messages,
                            bytes: s.bytes,
                        })
                        .collect(),
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn group_figures(&self) -> Vec<GroupFigures> {
        let mut out: Vec<GroupFigures> = self
            .engine
            .groups()
            .iter()
            .map(|g| {
                let st = g.stats();
                let mut held_bytes = 0u64;
                if let Some(t) = self.handle(&st.topic) {
                    for (q, &committed) in st.committed.iter().enumerate() {
                        let Ok(qs) = t.handle.queue_stats(q as u32) else { continue };
                        let held = qs.max_offset.saturating_sub(committed.max(qs.min_offset));
                        if qs.live_messages > 0 {
                            // u128: held × bytes cannot overflow; the quotient is at most bytes.
                            let est = u128::from(held.min(qs.live_messages)) * u128::from(qs.bytes)
                                / u128::from(qs.live_messages);
                            held_bytes = held_bytes.saturating_add(est as u64);
                        }
                    }
                }
                GroupFigures {
                    broadcasting: st.mode == Mode::Broadcasting,
                    backlog: st.backlog,
                    held_bytes,
                    dropped: st.dropped,
                    group: st.group,
                    topic: st.topic,
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.group, &a.topic).cmp(&(&b.group, &b.topic)));
        out
    }
}
