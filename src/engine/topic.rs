//! Topics and the engine's view of each queue: the lock-free [`Queue`] plus who must see which
//! offsets (the holds) and byte accounting.

use std::collections::{BTreeMap, HashMap};

use crossbeam_epoch::Guard;
use crossbeam_utils::CachePadded;

use super::config::Retention;
use super::types::StartFrom;
use crate::queue::{Queue, Reclaimer, NODE_SIZE};
use crate::sync::plain::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{lock, Arc, Mutex, RwLock};

/// Who must see which offsets of one queue (invariant 5): subscription `id` holds offsets
/// `start..end`, "must acknowledge them before the reaper may take them". A clustering group
/// holds from its subscription until it unsubscribes; a broadcasting group holds while it has
/// live members. A hold is open (`end` unknown, unbounded) until it is closed at its end.
///
/// Kept as a difference map, so that the reaper, walking consecutive offsets from the head,
/// learns how many holds cover each one in O(1) amortised, however many subscriptions the
/// queue has (review-e77444b H3: it used to count every hold for every node): each hold adds
/// +1 at its start and, once closed, -1 at its end, and the number of holds covering `o` is
/// the sum of the edges at or below `o`. Edges below the queue's first live offset are folded
/// into one edge there by each pass ([`coverage_from`](Self::coverage_from)), so the map holds
/// at most about two edges per subscription plus one.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    /// The start of each open hold, by subscription id.
    open: HashMap<u64, u64>,
    /// +1 at each hold's start, -1 at each closed hold's end; no zero entries.
    edges: BTreeMap<u64, i64>,
}

impl Holds {
    fn add_edge(&mut self, at: u64, delta: i64) {
        let e = self.edges.entry(at).or_insert(0);
        *e += delta;
        if *e == 0 {
            self.edges.remove(&at);
        }
    }

    /// Opens a hold of subscription `id` at `start` (no-op if it has an open one).
    pub(crate) fn open(&mut self, id: u64, start: u64) {
        if let std::collections::hash_map::Entry::Vacant(v) = self.open.entry(id) {
            v.insert(start);
            self.add_edge(start, 1);
        }
    }

    /// Closes the open hold of `id` at `end` (at its start if `end` is below it): offsets at or
    /// above `end` no longer need that subscription. No-op if `id` has no open hold.
    pub(crate) fn close(&mut self, id: u64, end: u64) {
        if let Some(start) = self.open.remove(&id) {
            self.add_edge(end.max(start), -1);
        }
    }

    /// Folds every edge at or below `first` (the queue's first live offset: nothing below it is
    /// asked about again) into one edge at `first`, and returns how many holds cover `first`,
    /// `first + 1`, ... as [`Coverage::at`] is asked for them in increasing order.
    pub(crate) fn coverage_from(&mut self, first: u64) -> Coverage<'_> {
        let mut below = 0;
        while let Some(entry) = self.edges.first_entry() {
            if *entry.key() > first {
                break;
            }
            below += entry.remove();
        }
        visited_holds(1);
        if below != 0 {
            self.edges.insert(first, below);
        }
        Coverage { count: 0, edges: self.edges.range(first..).peekable() }
    }

    /// Open holds (subscriptions that must still see offsets from their start on).
    #[cfg(test)]
    pub(crate) fn open_count(&self) -> usize {
        self.open.len()
    }
}

/// How many holds cover consecutive offsets (see [`Holds::coverage_from`]).
pub(crate) struct Coverage<'a> {
    count: i64,
    edges: std::iter::Peekable<std::collections::btree_map::Range<'a, u64, i64>>,
}

impl Coverage<'_> {
    /// The number of holds covering `offset`; offsets must be asked for in increasing order.
    pub(crate) fn at(&mut self, offset: u64) -> u32 {
        while let Some((_, d)) = self.edges.next_if(|(at, _)| **at <= offset) {
            visited_holds(1);
            self.count += d;
        }
        // Every -1 follows its hold's +1 at a lower or equal offset, so no prefix is negative.
        debug_assert!(self.count >= 0, "a hold closed that was never opened");
        u32::try_from(self.count).unwrap_or(0)
    }
}

/// One queue of a topic.
#[derive(Debug)]
pub(crate) struct TopicQueue {
    pub(crate) id: u32,
    /// The stream of its records in a durable engine (`sid << 32 | id`; the sid is 0 in a
    /// heap-only engine).
    #[cfg_attr(loom, allow(dead_code))] // loom models build no durable engine
    pub(crate) stream: u64,
    /// What the budget counts for each message on top of its payload: its node, and in a
    /// durable engine its record's headers too ([`node_cost`]).
    pub(crate) node_cost: u64,
    pub(crate) q: Queue,
    /// Who must see which offsets. Lock order: the queue's head lock, then this.
    pub(crate) holds: Mutex<Holds>,
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
    pub(crate) fn new(id: u32, sid: u32, first_offset: u64, reclaimer: Arc<Reclaimer>) -> Self {
        TopicQueue {
            id,
            stream: u64::from(sid) << 32 | u64::from(id),
            node_cost: node_cost(sid != 0),
            q: Queue::new(first_offset, reclaimer),
            holds: Mutex::new(Holds::default()),
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
        lock(&self.holds).open(id, start);
    }

    /// Closes hold `id` at `end`: offsets at or above `end` no longer need that subscription.
    pub(crate) fn close_hold(&self, id: u64, end: u64) {
        lock(&self.holds).close(id, end);
    }

    /// Records `count` unlinked messages of `bytes` payload in this queue's counters and
    /// returns the bytes (payload + nodes) they released.
    pub(crate) fn account_unlinked(&self, count: u64, payload: u64, evicted: bool) -> u64 {
        let released = payload + count * self.node_cost;
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
    /// Its stable id in a durable engine (journaled; never reused); 0 in a heap-only engine.
    pub(crate) sid: u32,
    pub(crate) queues: Box<[TopicQueue]>,
    /// The subscriptions reading it, by group name.
    pub(crate) subscriptions: RwLock<HashMap<String, Arc<super::group::Subscription>>>,
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
    /// How long this topic keeps messages every group acknowledged, milliseconds; `u64::MAX`
    /// means the engine's `keep_acknowledged`. A setting, read once per pass, as above.
    keep_acknowledged_ms: AtomicU64,
}

impl Topic {
    /// A topic whose queue `i` numbers its messages from `starts[i]`.
    pub(crate) fn with_starts(
        name: String,
        sid: u32,
        starts: &[u64],
        reclaimer: &Arc<Reclaimer>,
    ) -> Self {
        Topic {
            name,
            sid,
            queues: (0..starts.len() as u32)
                .map(|i| TopicQueue::new(i, sid, starts[i as usize], Arc::clone(reclaimer)))
                .collect(),
            subscriptions: RwLock::new(HashMap::new()),
            deleted: crate::sync::AtomicBool::new(false),
            rr: AtomicU32::new(0),
            retention_ms: AtomicU64::new(u64::MAX),
            retention_bytes: AtomicU64::new(0),
            keep_acknowledged_ms: AtomicU64::new(u64::MAX),
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

    /// Overrides the engine's `keep_acknowledged` for this topic.
    pub(crate) fn set_keep_acknowledged(&self, keep: std::time::Duration) {
        let ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX - 1).min(u64::MAX - 1);
        // Relaxed: a setting; the reaper picks it up at its next pass.
        self.keep_acknowledged_ms.store(ms, Ordering::Relaxed);
    }

    /// How long this topic keeps acknowledged messages: its own if set, else `default`.
    pub(crate) fn keep_acknowledged(&self, default: std::time::Duration) -> std::time::Duration {
        // Relaxed: see `set_keep_acknowledged`.
        match self.keep_acknowledged_ms.load(Ordering::Relaxed) {
            u64::MAX => default,
            ms => std::time::Duration::from_millis(ms),
        }
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

/// Bytes a durable engine's record adds to a message: the record header (32), the message's
/// entry header (16) and up to 7 bytes of padding to the record's 8-byte alignment (a batch,
/// one record for all its messages, costs less than this counts).
pub(crate) const RECORD_OVERHEAD: u64 = 56;

/// What the budget counts for a message on top of its payload.
pub(crate) const fn node_cost(durable: bool) -> u64 {
    if durable {
        NODE_SIZE as u64 + RECORD_OVERHEAD
    } else {
        NODE_SIZE as u64
    }
}

/// Whether `name` is a valid topic name (RocketMQ's rule: 1..=127 chars of `[%|a-zA-Z0-9_-]`).
pub(crate) fn valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 127
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Holds;

    fn coverage(h: &mut Holds, first: u64, to: u64) -> Vec<u32> {
        let mut c = h.coverage_from(first);
        (first..to).map(|o| c.at(o)).collect()
    }

    #[test]
    fn given_open_and_closed_holds_when_walking_offsets_should_count_the_holds_covering_each() {
        let mut h = Holds::default();
        h.open(1, 0);
        h.open(2, 2);
        h.open(3, 3);
        h.close(2, 4);
        h.close(3, 1); // closed below its start: it covers nothing
        assert_eq!(coverage(&mut h, 0, 6), [1, 1, 2, 2, 1, 1]);
        h.close(1, 5);
        assert_eq!(coverage(&mut h, 3, 7), [2, 1, 0, 0], "hold 2 ends at 4, hold 1 at 5");
        assert_eq!(coverage(&mut h, 6, 7), [0]);
        assert_eq!(h.edges.len(), 0, "folded edges that cancel out leave nothing behind");
    }

    #[test]
    fn given_a_folded_prefix_when_holds_open_and_close_again_should_keep_the_counts() {
        let mut h = Holds::default();
        h.open(1, 0);
        h.open(2, 5);
        assert_eq!(coverage(&mut h, 7, 9), [2, 2], "both holds cover what is above their starts");
        assert_eq!(h.edges.len(), 1, "one edge for everything below the first live offset");
        h.open(1, 9); // already open: no second hold
        h.close(2, 8);
        h.open(2, 10); // a broadcasting group's members came back: a new hold from 10
        assert_eq!(coverage(&mut h, 7, 12), [2, 1, 1, 2, 2]);
        assert_eq!(h.open_count(), 2);
    }
}

#[cfg(test)]
thread_local! {
    /// Holds the reaper looked at on this thread (unit tests measure its work per node).
    pub(crate) static HOLD_VISITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts `n` holds looked at by the reaper (unit tests only).
#[inline(always)]
pub(crate) fn visited_holds(_n: u64) {
    #[cfg(test)]
    HOLD_VISITS.with(|v| v.set(v.get() + _n));
}
