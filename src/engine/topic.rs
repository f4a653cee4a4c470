//! Topics and the engine's view of each queue: the lock-free [`Queue`] plus who must see which
//! offsets (the holds) and byte accounting.

use crossbeam_epoch::Guard;
use crossbeam_utils::CachePadded;

use super::config::Retention;
use super::types::StartFrom;
use crate::queue::{Queue, Reclaimer, NODE_SIZE};
use crate::sync::plain::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex, RwLock};

/// "This subscription must acknowledge offsets `start..end` of the queue" (invariant 5). A
/// clustering group holds from its subscription until it unsubscribes; a broadcasting group
/// holds while it has live members. `end == u64::MAX` while the hold is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) id: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

impl Hold {
    #[inline]
    pub(crate) fn covers(&self, offset: u64) -> bool {
        self.start <= offset && offset < self.end
    }
}

/// One queue of a topic.
#[derive(Debug)]
pub(crate) struct TopicQueue {
    pub(crate) id: u32,
    pub(crate) q: Queue,
    /// Who must see which offsets. Lock order: the queue's head lock, then this.
    pub(crate) holds: Mutex<Vec<Hold>>,
    /// Bytes appended (payload + node), only ever growing. Written by producers.
    pub(crate) bytes_in: CachePadded<AtomicU64>,
    /// Bytes unlinked (reclaimed or evicted). Written under the head lock.
    pub(crate) bytes_out: AtomicU64,
    /// Messages unlinked.
    pub(crate) reclaimed: AtomicU64,
    /// Of those, evicted.
    pub(crate) evicted: AtomicU64,
}

impl TopicQueue {
    pub(crate) fn new(id: u32, first_offset: u64, reclaimer: Arc<Reclaimer>) -> Self {
        TopicQueue {
            id,
            q: Queue::new(first_offset, reclaimer),
            holds: Mutex::new(Vec::new()),
            bytes_in: CachePadded::new(AtomicU64::new(0)),
            bytes_out: AtomicU64::new(0),
            reclaimed: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    /// Bytes currently retained (payload + node). Relaxed: statistics; `bytes_in` is added
    /// before the node is linked, so the difference never goes below zero at a quiescent point.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.bytes_in.load(Ordering::Relaxed).saturating_sub(self.bytes_out.load(Ordering::Relaxed))
    }

    /// The offset a subscription starting at `start` begins with in this queue. Call with the
    /// head lock held so the answer stays retained until a hold is registered.
    pub(crate) fn resolve_start(&self, start: StartFrom, guard: &Guard) -> u64 {
        let head = self.q.head(guard);
        let first = head.end();
        let end = self.q.next_offset(guard);
        match start {
            StartFrom::First => first,
            StartFrom::Last => end,
            StartFrom::Offset(o) => o.clamp(first, end),
            StartFrom::Timestamp(ts) => self.q.offset_at_time(ts, guard),
        }
    }

    /// Opens a hold at `start` (the caller holds the head lock).
    pub(crate) fn open_hold(&self, id: u64, start: u64) {
        lock(&self.holds).push(Hold { id, start, end: u64::MAX });
    }

    /// Closes hold `id` at `end`: offsets at or above `end` no longer need that subscription.
    pub(crate) fn close_hold(&self, id: u64, end: u64) {
        let mut holds = lock(&self.holds);
        if let Some(h) = holds.iter_mut().find(|h| h.id == id && h.end == u64::MAX) {
            h.end = end.max(h.start);
        }
    }

    /// Records `count` unlinked messages of `bytes` payload in this queue's counters and
    /// returns the bytes (payload + nodes) they released.
    pub(crate) fn account_unlinked(&self, count: u64, payload: u64, evicted: bool) -> u64 {
        let released = payload + count * NODE_SIZE as u64;
        // Relaxed: statistics and budget counters; no data is published through them.
        self.bytes_out.fetch_add(released, Ordering::Relaxed);
        self.reclaimed.fetch_add(count, Ordering::Relaxed);
        if evicted {
            self.evicted.fetch_add(count, Ordering::Relaxed);
        }
        released
    }
}

/// A topic: a name, N queues, the subscriptions reading it.
#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) name: String,
    pub(crate) queues: Box<[TopicQueue]>,
    pub(crate) subs: RwLock<Vec<Arc<super::group::Subscription>>>,
    /// Set by `Engine::delete_topic`. From the `sync` shim, not `plain`: appends racing the
    /// deletion synchronise through it, so loom must see it (`delete_topic_vs_append`).
    pub(crate) deleted: crate::sync::AtomicBool,
    /// Round-robin position for appends that name no queue.
    pub(crate) rr: AtomicU32,
    /// This topic's retention of unheld messages, milliseconds and bytes per queue;
    /// `u64::MAX` in `retention_ms` means the engine's default. A setting, not part of any
    /// protocol: plain atomics, read once per queue by each reaper pass.
    retention_ms: AtomicU64,
    retention_bytes: AtomicU64,
}

impl Topic {
    pub(crate) fn new(
        name: String,
        queues: u32,
        first_offset: u64,
        reclaimer: &Arc<Reclaimer>,
    ) -> Self {
        Topic {
            name,
            queues: (0..queues)
                .map(|i| TopicQueue::new(i, first_offset, Arc::clone(reclaimer)))
                .collect(),
            subs: RwLock::new(Vec::new()),
            deleted: crate::sync::AtomicBool::new(false),
            rr: AtomicU32::new(0),
            retention_ms: AtomicU64::new(u64::MAX),
            retention_bytes: AtomicU64::new(0),
        }
    }

    /// Overrides the engine's retention for this topic.
    pub(crate) fn set_retention(&self, r: Retention) {
        let ms = u64::try_from(r.time.as_millis()).unwrap_or(u64::MAX - 1).min(u64::MAX - 1);
        // Relaxed: a setting; the reaper picks it up at its next pass (bytes first, so a pass
        // that sees the new time sees the new bytes too, or at worst one pass late).
        self.retention_bytes.store(r.bytes, Ordering::Relaxed);
        self.retention_ms.store(ms, Ordering::Relaxed);
    }

    /// This topic's retention: its own if set, else `default`.
    pub(crate) fn retention(&self, default: Retention) -> Retention {
        // Relaxed: see `set_retention`.
        match self.retention_ms.load(Ordering::Relaxed) {
            u64::MAX => default,
            ms => Retention {
                time: std::time::Duration::from_millis(ms),
                bytes: self.retention_bytes.load(Ordering::Relaxed),
            },
        }
    }

    pub(crate) fn queue_count(&self) -> u32 {
        self.queues.len() as u32
    }

    pub(crate) fn is_deleted(&self) -> bool {
        // Acquire: pairs with the Release store in `Engine::delete_topic`.
        self.deleted.load(crate::sync::Ordering::Acquire)
    }
}

/// Whether `name` is a valid topic name (RocketMQ's rule: 1..=127 chars of `[%|a-zA-Z0-9_-]`).
pub(crate) fn valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 127
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}
