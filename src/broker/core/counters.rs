//! The core's counters: what the request paths count per topic (messages and bytes in, out per
//! group, message sizes) and per broker (refused sends, skipped records), read by the metrics
//! endpoint and the admin codes.
//!
//! Relaxed atomic adds into structures the path already holds (the topic table's entry for the
//! topic): no allocation and no lock is added per message; a pull or pop looks its group's
//! counters up once (not per message) under the topic entry's read lock. Every counter here is
//! a statistic: nothing is published through it, each is read on its own, and a reader racing
//! an update may see either state, so every access is `Relaxed`.

use std::collections::HashMap;

use crate::sync::{read, write, AtomicU64, Ordering, RwLock};

/// Most groups whose out counters one topic keeps (pulls of further groups count in the
/// topic's totals only).
pub(crate) const MAX_GROUPS_PER_TOPIC: usize = 1024;

/// RocketMQ's `rocketmq_message_size` buckets, bytes: 1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB.
const SIZE_BOUNDS: &[u64] = &[1 << 10, 4 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20];

/// A histogram with fixed upper bounds: one relaxed counter per bucket (the last one is
/// `+Inf`) and the sum. The count is not stored: the renderer adds the buckets it read, so
/// `le="+Inf"` always equals `_count` in one scrape, even while observations race it.
#[derive(Debug)]
pub(crate) struct Histogram {
    pub(crate) bounds: &'static [u64],
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [u64]) -> Self {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub(crate) fn observe(&self, v: u64) {
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        // Relaxed: statistics; each counter is read on its own by the renderer, nothing is
        // published through them, and a scrape racing an observation may see either state.
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Per-bucket counts (not cumulative) and the sum.
    pub(crate) fn snapshot(&self) -> (Vec<u64>, u64) {
        // Relaxed: see `observe`.
        let b = self.buckets.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        (b, self.sum.load(Ordering::Relaxed))
    }

    pub(crate) fn is_empty(&self) -> bool {
        // Relaxed: see `observe`.
        self.buckets.iter().all(|c| c.load(Ordering::Relaxed) == 0)
    }
}

/// One group's consumption of one topic.
#[derive(Debug)]
pub(crate) struct OutCounters {
    pub(crate) messages: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Pulls and pops that delivered at least one message (RocketMQ's `GROUP_GET_NUMS` times).
    pub(crate) pulls: AtomicU64,
    /// Per queue, the offset after the last message a pull of the group delivered (0: none):
    /// what RocketMQ calls the pulled offset, for in-flight and queueing latency.
    pulled: Box<[AtomicU64]>,
}

impl OutCounters {
    fn new(queues: u32) -> Self {
        OutCounters {
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            pulls: AtomicU64::new(0),
            pulled: (0..queues).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The pulled offset of `queue` (0 if it never delivered or the queue is unknown).
    pub(crate) fn pulled(&self, queue: usize) -> u64 {
        // Relaxed: a statistic.
        self.pulled.get(queue).map_or(0, |p| p.load(Ordering::Relaxed))
    }
}

/// What one pull delivered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pulled {
    /// The queue.
    pub(crate) queue: u32,
    /// The offset after the last message looked at.
    pub(crate) next: u64,
    /// Messages delivered.
    pub(crate) messages: usize,
    /// Bytes of the response body.
    pub(crate) bytes: usize,
}

impl OutCounters {
    fn add(&self, p: Pulled) {
        // Relaxed: statistics; each counter is read on its own by the renderer.
        self.messages.fetch_add(p.messages as u64, Ordering::Relaxed);
        self.bytes.fetch_add(p.bytes as u64, Ordering::Relaxed);
        if p.messages > 0 {
            self.pulls.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(o) = self.pulled.get(p.queue as usize) {
            o.fetch_max(p.next, Ordering::Relaxed);
        }
    }
}

/// One topic's request-path counters, held in its topic-table entry. Messages and bytes in
/// are the size histogram's count and sum (two atomic adds per stored message, not four).
#[derive(Debug)]
pub(crate) struct TopicCounters {
    pub(crate) size: Histogram,
    pub(crate) out: RwLock<HashMap<Box<str>, OutCounters>>,
    /// Send requests stored (one per message, one per batch: RocketMQ's `TOPIC_PUT_NUMS`
    /// times).
    pub(crate) puts: AtomicU64,
    /// Messages delivered to groups whose counters were forgotten ([`Self::forget_group`]),
    /// so the topic's total never goes back.
    retired: AtomicU64,
}

impl Default for TopicCounters {
    fn default() -> Self {
        TopicCounters {
            size: Histogram::new(SIZE_BOUNDS),
            out: RwLock::new(HashMap::new()),
            puts: AtomicU64::new(0),
            retired: AtomicU64::new(0),
        }
    }
}

impl TopicCounters {
    /// A stored message whose body has `body_len` bytes.
    pub(crate) fn message_in(&self, body_len: usize) {
        self.size.observe(body_len as u64);
    }

    /// One send request stored its message or batch.
    pub(crate) fn put_request(&self) {
        // Relaxed: a statistic.
        self.puts.fetch_add(1, Ordering::Relaxed);
    }

    /// One pull delivered `pulled.messages` messages of `pulled.bytes` bytes of queue
    /// `pulled.queue` (of `queues`) to `group`, up to offset `pulled.next`.
    pub(crate) fn messages_out(&self, group: &str, queues: u32, pulled: Pulled) {
        let read = read(&self.out);
        if let Some(c) = read.get(group) {
            c.add(pulled);
            return;
        }
        drop(read);
        let mut out = write(&self.out);
        if out.len() >= MAX_GROUPS_PER_TOPIC && !out.contains_key(group) {
            return;
        }
        out.entry(group.into()).or_insert_with(|| OutCounters::new(queues)).add(pulled);
    }

    /// Forgets `group`'s counters (its subscription was released as idle): the per-group
    /// series go, and the room for [`MAX_GROUPS_PER_TOPIC`] groups is not used up by groups
    /// that came once and left (review-e77444b L6). Its messages stay in the topic's total.
    pub(crate) fn forget_group(&self, group: &str) {
        if let Some(c) = write(&self.out).remove(group) {
            // Relaxed: statistics.
            self.retired.fetch_add(c.messages.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

impl TopicCounters {
    /// Messages stored in this topic since the broker started.
    pub(crate) fn stored_total(&self) -> u64 {
        self.size.snapshot().0.iter().sum()
    }

    /// Messages pulls delivered from this topic since the broker started, every group.
    pub(crate) fn delivered_total(&self) -> u64 {
        let out = read(&self.out);
        // Relaxed: statistics.
        let live: u64 = out.values().map(|o| o.messages.load(Ordering::Relaxed)).sum();
        live + self.retired.load(Ordering::Relaxed)
    }

    /// The offset after the last message a pull of `group` delivered from `queue` (0: none).
    pub(crate) fn pulled_offset(&self, group: &str, queue: usize) -> u64 {
        let out = read(&self.out);
        out.get(group).map_or(0, |o| o.pulled(queue))
    }
}

/// Counters of what the core refused or stepped over, that the store does not see.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Sends refused for lack of memory (remoting answers SYSTEM_BUSY, gRPC
    /// TOO_MANY_REQUESTS), counted once, where the send core refuses them.
    pub(crate) sends_rejected: AtomicU64,
    /// Stored records a read could not write out and stepped over (never for a record the
    /// broker built itself; a read never stalls on one).
    pub(crate) records_skipped: AtomicU64,
    /// Dead-letter copies of popped messages that the store refused (each message stays in
    /// flight and is tried again).
    pub(crate) dead_letters_failed: AtomicU64,
    /// Revive copies of expired popped messages into a pop retry topic that the store
    /// refused (each message stays in flight and is tried again).
    pub(crate) revives_failed: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_a_forgotten_group_should_drop_its_counters_but_keep_the_topic_total() {
        let t = TopicCounters::default();
        let p = |messages| Pulled { queue: 0, next: 1, messages, bytes: 10 };
        t.messages_out("gone", 1, p(3));
        t.messages_out("stays", 1, p(2));
        t.forget_group("gone");
        assert_eq!(t.pulled_offset("gone", 0), 0, "its counters are gone");
        assert_eq!(t.pulled_offset("stays", 0), 1, "others keep theirs");
        assert_eq!(t.delivered_total(), 5, "the topic's total does not go back");
    }

    #[test]
    fn given_observations_when_snapshotting_should_land_in_their_buckets() {
        let h = Histogram::new(SIZE_BOUNDS);
        for v in [0, 1024, 1025, 5 << 20] {
            h.observe(v);
        }
        let (b, sum) = h.snapshot();
        assert_eq!(b, [2, 1, 0, 0, 0, 0, 1]);
        assert_eq!(sum, 1024 + 1025 + (5 << 20));
    }
}
