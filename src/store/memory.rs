//! The in-memory store: the store traits over the [`Engine`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::Waker;

use bytes::Bytes;

use super::{
    ConsumerOffsets, MemoryStats, MessageLookup, MessageStore, ReadOutcome, StoreError, StoreStats,
    StoredRef, TopicStore, WaitId,
};
use crate::engine::{
    Engine, EngineConfig, EngineError, Filter, MemberId, Message, Mode, Retention, StartFrom,
    SubscribeOptions, TopicHandle,
};

fn map_err(e: EngineError) -> StoreError {
    match e {
        EngineError::UnknownTopic(t) => StoreError::UnknownTopic(t),
        EngineError::InvalidTopicName(t) => StoreError::InvalidTopic(t),
        EngineError::QueueOutOfRange { topic, queue, queues } => {
            StoreError::QueueOutOfRange { topic, queue, queues }
        }
        EngineError::MessageTooLarge { size, limit } => StoreError::MessageTooLarge { size, limit },
        EngineError::BudgetExceeded { used, budget, .. } => StoreError::Full { used, budget },
        EngineError::UnknownGroup { group, topic } => StoreError::UnknownGroup { group, topic },
        other => StoreError::Other(other.to_string()),
    }
}

/// A topic of the in-memory store.
#[derive(Debug)]
struct MemTopic {
    handle: TopicHandle,
    uid: u32,
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

    fn is_deleted(&self) -> bool {
        self.handle.is_deleted()
    }

    fn append(&self, queue: u32, record: Bytes, tag: i32, ts: u64) -> Result<u64, StoreError> {
        let msg = Message::new(record).with_tag_hash(tag).with_timestamp(ts);
        self.handle.append(queue, msg).map(|r| r.offset).map_err(map_err)
    }

    fn append_batch(
        &self,
        queue: u32,
        records: Vec<(Bytes, i32)>,
        ts: u64,
    ) -> Result<u64, StoreError> {
        let msgs = records
            .into_iter()
            .map(|(r, tag)| Message::new(r).with_tag_hash(tag).with_timestamp(ts))
            .collect();
        self.handle.append_batch(queue, msgs).map(|r| r.offset).map_err(map_err)
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

/// The store traits over an in-memory [`Engine`].
#[derive(Debug)]
pub struct MemoryStore {
    engine: Engine,
    topics: RwLock<HashMap<String, Arc<MemTopic>>>,
    by_uid: RwLock<HashMap<u32, Arc<MemTopic>>>,
    next_uid: AtomicU32,
    offsets: Mutex<HashMap<OffsetKey, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
            next_uid: AtomicU32::new(1),
            offsets: Mutex::new(HashMap::new()),
        })
    }

    /// The engine underneath (statistics and tests).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn handle(&self, name: &str) -> Option<Arc<MemTopic>> {
        let t = self.topics.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()?;
        (!t.handle.is_deleted()).then_some(t)
    }

    fn group(
        &self,
        group: &str,
        topic: &str,
        mode: Mode,
    ) -> Result<crate::engine::Group, StoreError> {
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

    fn ensure_topic(&self, name: &str, queues: u32) -> Result<Arc<dyn TopicStore>, StoreError> {
        if let Some(t) = self.handle(name) {
            return Ok(t);
        }
        let mut topics = self.topics.write().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = topics.get(name).filter(|t| !t.handle.is_deleted()) {
            return Ok(Arc::clone(t) as Arc<dyn TopicStore>);
        }
        self.engine.ensure_topic(name, queues).map_err(map_err)?;
        let handle = self.engine.topic(name).map_err(map_err)?;
        // Relaxed: uniqueness only.
        let uid = self.next_uid.fetch_add(1, Ordering::Relaxed);
        let t = Arc::new(MemTopic { handle, uid });
        topics.insert(name.to_string(), Arc::clone(&t));
        self.by_uid.write().unwrap_or_else(|p| p.into_inner()).insert(uid, Arc::clone(&t));
        Ok(t)
    }

    fn delete_topic(&self, name: &str) -> Result<(), StoreError> {
        let t = self.topics.write().unwrap_or_else(|p| p.into_inner()).remove(name);
        if let Some(t) = &t {
            self.by_uid.write().unwrap_or_else(|p| p.into_inner()).remove(&t.uid);
        }
        lock(&self.offsets).retain(|(_, topic, _), _| topic != name);
        self.engine.delete_topic(name).map_err(map_err)
    }

    fn topic_by_uid(&self, uid: u32) -> Option<Arc<dyn TopicStore>> {
        let t = self.by_uid.read().unwrap_or_else(|p| p.into_inner()).get(&uid).cloned()?;
        (!t.handle.is_deleted()).then_some(t as Arc<dyn TopicStore>)
    }

    fn topics(&self) -> Vec<(String, u32)> {
        self.engine.topics()
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
        lock(&self.offsets).retain(|(g, t, _), _| !(g == group && t == topic));
    }

    fn commit(&self, group: &str, topic: &str, queue: u32, offset: u64) -> Result<(), StoreError> {
        let t = self.handle(topic).ok_or_else(|| StoreError::UnknownTopic(topic.into()))?;
        if queue >= t.queue_count() {
            return Err(StoreError::QueueOutOfRange {
                topic: topic.into(),
                queue,
                queues: t.queue_count(),
            });
        }
        lock(&self.offsets).insert((group.to_string(), topic.to_string(), queue), offset);
        if let Ok(g) = self.engine.group(group, topic) {
            if g.mode() == Mode::Clustering {
                let end = t.handle.queue_stats(queue).map_err(map_err)?.max_offset;
                // Acknowledgements only move forward; a client moving its offset backward
                // (an offset reset) only changes what it is told, not what was acknowledged.
                match g.commit(queue, offset.min(end)) {
                    Ok(()) | Err(EngineError::CommitBehind { .. }) => {}
                    Err(e) => return Err(map_err(e)),
                }
            }
        }
        Ok(())
    }

    fn committed(&self, group: &str, topic: &str, queue: u32) -> Option<u64> {
        lock(&self.offsets).get(&(group.to_string(), topic.to_string(), queue)).copied()
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

impl MessageLookup for MemoryStore {
    fn get(&self, topic: &dyn TopicStore, queue: u32, offset: u64) -> Option<(Bytes, u64)> {
        let t = self.handle(topic.name())?;
        t.handle.get(queue, offset, |m| (m.payload.clone(), m.timestamp)).ok().flatten()
    }

    fn offset_for_timestamp(
        &self,
        topic: &dyn TopicStore,
        queue: u32,
        timestamp: u64,
    ) -> Option<u64> {
        let t = self.handle(topic.name())?;
        t.handle.offset_for_timestamp(queue, timestamp).ok()
    }

    fn earliest_timestamp(&self, topic: &dyn TopicStore, queue: u32) -> Option<u64> {
        let t = self.handle(topic.name())?;
        let min = t.handle.queue_stats(queue).ok()?.min_offset;
        t.handle.get(queue, min, |m| m.timestamp).ok().flatten()
    }
}

impl StoreStats for MemoryStore {
    fn memory(&self) -> MemoryStats {
        let s = self.engine.stats();
        MemoryStats {
            bytes_used: s.bytes_used,
            budget: s.memory_budget,
            live_messages: s.live_messages,
            reclaimed_messages: s.reclaimed_messages,
            evicted_messages: s.evicted_messages,
            rejected_messages: s.rejected_messages,
        }
    }
}
