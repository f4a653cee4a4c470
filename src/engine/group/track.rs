//! One reader's acknowledgement state in one queue: the [`Track`] of the module docs above
//! (frontier, out-of-order ack set, cursor, high-water mark), as a pure per-queue algorithm
//! over the lock-free queue. The caller serialises every call on a track (its subscription's
//! queue lock) and holds an epoch guard; a track never takes a lock itself.

use crossbeam_epoch::Guard;

use super::ack_set::AckSet;
use crate::engine::config::SCAN_LIMIT;
use crate::engine::types::{AckOutcome, Delivery, Filter};
use crate::engine::EngineError;
use crate::queue::{Node, NodeRef, Queue};
use crate::sync::mutant;

/// What one [`Track::deliver`] counted. A clustering track's counts are its group's; a
/// broadcasting member's deliveries are, but its filtered and dropped messages are counted
/// once for the whole group, when the group frontier passes them (`Subscription::advance_group`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Tally {
    pub(super) delivered: u64,
    pub(super) filtered: u64,
    pub(super) dropped: u64,
    /// The scan stopped at its limit with nodes left after it (not for want of room).
    pub(super) scan_limited: bool,
}

/// The node whose `end` is `end` (the message at `end - 1`, or the dummy), if still linked.
pub(super) fn node_ending_at<'g>(
    q: &Queue,
    hint: Option<NodeRef>,
    end: u64,
    guard: &'g Guard,
) -> Option<&'g Node> {
    if let Some(n) = hint.filter(|r| r.end() == end).and_then(|r| r.get(q, guard)) {
        return Some(n);
    }
    let head = q.head(guard);
    if head.end() == end {
        return Some(head);
    }
    if end < head.end() {
        return None;
    }
    q.find(end - 1, guard)
}

/// The delivery of `n`, read from queue `queue_id`.
pub(super) fn delivery_of(queue_id: u32, n: &Node) -> Delivery {
    Delivery {
        queue: queue_id,
        offset: n.offset(),
        timestamp: n.timestamp(),
        tag: n.tag(),
        payload: n.payload().clone(),
    }
}

/// One reader's acknowledgement state in one queue (see the module docs).
#[derive(Debug)]
pub(super) struct Track {
    pub(super) frontier: u64,
    frontier_ref: Option<NodeRef>,
    /// The acknowledged offsets at or above the frontier (bounded: see `ack_set`).
    acked: AckSet,
    pub(super) cursor: u64,
    cursor_ref: Option<NodeRef>,
    hwm: u64,
}

impl Track {
    pub(super) fn new(start: u64) -> Self {
        Track {
            frontier: start,
            frontier_ref: None,
            acked: AckSet::default(),
            cursor: start,
            cursor_ref: None,
            hwm: start,
        }
    }

    /// Offsets the track still has to acknowledge, given the queue's end.
    pub(super) fn backlog(&self, end: u64) -> u64 {
        end.saturating_sub(self.frontier).saturating_sub(self.acked.len())
    }

    /// Catches up with evictions: returns how many offsets below the queue's first live one
    /// this track had not acknowledged (they were evicted under it).
    pub(super) fn reconcile(&mut self, first_live: u64) -> u64 {
        if first_live <= self.frontier {
            return 0;
        }
        let acked_below = self.acked.remove_below(first_live);
        let dropped = first_live - self.frontier - acked_below;
        self.frontier = first_live;
        self.frontier_ref = None;
        if self.cursor < first_live {
            self.cursor = first_live;
            self.cursor_ref = None;
        }
        self.hwm = self.hwm.max(first_live);
        self.absorb();
        if mutant("evict_uncounted") {
            0
        } else {
            dropped
        }
    }

    /// Moves the frontier over acknowledged offsets that became contiguous with it, and keeps
    /// the cursor at or above the frontier (a rewound cursor can otherwise fall behind it when
    /// acknowledgements arrive, and the nodes below the frontier may already be reclaimed).
    pub(super) fn absorb(&mut self) {
        while self.acked.remove(self.frontier) {
            self.frontier += 1;
            self.frontier_ref = None;
        }
        if self.cursor < self.frontier {
            self.cursor = self.frontier;
            self.cursor_ref = self.frontier_ref;
        }
    }

    /// Records that `node` (at or above the frontier, not yet acknowledged) is acknowledged.
    pub(super) fn mark(&mut self, q: &Queue, node: &Node) {
        let off = node.offset();
        if off == self.frontier {
            self.frontier += 1;
            self.frontier_ref = Some(NodeRef::new(q, node));
            self.absorb();
        } else {
            self.acked.insert(off);
        }
    }

    /// One past the highest acknowledged offset (the frontier if nothing above it is): where a
    /// leaving group's hold can end once everything below is settled.
    pub(super) fn top(&self) -> u64 {
        self.acked.last().map_or(self.frontier, |o| o + 1)
    }

    /// Whether `offset` is acknowledged by this track.
    pub(super) fn is_acked(&self, offset: u64) -> bool {
        offset < self.frontier || self.acked.contains(offset)
    }

    /// Acknowledges every offset in `[frontier, to)` that is not yet acknowledged, bumping
    /// each node once if `bump`; returns how many it acknowledged, split into those `filter`
    /// (if given) rejects and the others: `(acked, filtered)`. `to` must not exceed the
    /// queue's end. Reconciles evictions first (their count is added to `dropped`).
    pub(super) fn ack_until(
        &mut self,
        q: &Queue,
        to: u64,
        bump: bool,
        filter: Option<&Filter>,
        dropped: &mut u64,
        guard: &Guard,
    ) -> (u64, u64) {
        *dropped += self.reconcile(q.first_offset(guard));
        if to <= self.frontier {
            return (0, 0);
        }
        let Some(mut n) = node_ending_at(q, self.frontier_ref, self.frontier, guard) else {
            // Evicted between the reconcile and the lookup: nothing left below to bump.
            *dropped += self.reconcile(q.first_offset(guard));
            return (0, 0);
        };
        let (mut count, mut filtered) = (0, 0);
        while n.end() < to {
            let Some(next) = n.next(guard) else { break };
            n = next;
            if !self.acked.contains(n.offset()) {
                if bump {
                    n.ack();
                }
                if n.is_hole() || filter.is_some_and(|f| !f.matches(n.tag())) {
                    filtered += 1;
                } else {
                    count += 1;
                }
            }
        }
        let reached = n.end();
        self.acked.remove_below(reached);
        self.frontier = reached;
        self.frontier_ref = Some(NodeRef::new(q, n));
        self.absorb();
        if self.cursor < self.frontier {
            self.cursor = self.frontier;
            self.cursor_ref = self.frontier_ref;
        }
        self.hwm = self.hwm.max(self.frontier);
        (count, filtered)
    }

    /// Acknowledges every offset in `[frontier, to)` that `keep` rejects and that is not
    /// acknowledged yet, bumping each node once, and raises the high-water mark to `to`: a
    /// POP group's state given back after a restart (`Subscription::restore_pop`), where every
    /// offset below the pop position is acknowledged unless it is in flight (`keep`). Returns
    /// `(acked, filtered)`, holes counted as filtered. `to` must not exceed the queue's end.
    /// Reconciles evictions first (their count is added to `dropped`).
    pub(super) fn ack_below_except(
        &mut self,
        q: &Queue,
        to: u64,
        keep: impl Fn(u64) -> bool,
        dropped: &mut u64,
        guard: &Guard,
    ) -> (u64, u64) {
        *dropped += self.reconcile(q.first_offset(guard));
        self.hwm = self.hwm.max(to);
        if to <= self.frontier {
            return (0, 0);
        }
        let Some(mut n) = node_ending_at(q, self.frontier_ref, self.frontier, guard) else {
            *dropped += self.reconcile(q.first_offset(guard));
            return (0, 0);
        };
        let (mut count, mut filtered) = (0, 0);
        while n.end() < to {
            let Some(next) = n.next(guard) else { break };
            n = next;
            let off = n.offset();
            if keep(off) || self.is_acked(off) {
                continue;
            }
            n.ack();
            if n.is_hole() {
                filtered += 1;
            } else {
                count += 1;
            }
            self.mark(q, n);
        }
        (count, filtered)
    }

    /// Acknowledges one delivered offset.
    pub(super) fn ack_one(
        &mut self,
        q: &Queue,
        queue_id: u32,
        offset: u64,
        bump: bool,
        dropped: &mut u64,
        guard: &Guard,
    ) -> Result<AckOutcome, EngineError> {
        *dropped += self.reconcile(q.first_offset(guard));
        if self.is_acked(offset) {
            return Ok(AckOutcome::AlreadyAcked);
        }
        if offset >= self.hwm {
            return Err(EngineError::NotDelivered { queue: queue_id, offset });
        }
        // Through the queue's index (review-e77444b H7): walking from the frontier made every
        // ack behind a stuck frontier cost its distance from it.
        let Some(n) = q.find(offset, guard) else {
            // Not linked: below the head, evicted since the reconcile above (it counts them).
            *dropped += self.reconcile(q.first_offset(guard));
            return if self.is_acked(offset) {
                Ok(AckOutcome::AlreadyAcked)
            } else {
                Err(EngineError::NotDelivered { queue: queue_id, offset })
            };
        };
        if bump {
            n.ack();
        }
        self.mark(q, n);
        Ok(AckOutcome::Acked)
    }

    /// Hands out up to `max` messages from the cursor, skipping acknowledged offsets and
    /// acknowledging (and bumping, if `bump`) the ones `filter` rejects. Returns what this
    /// track counted; the caller decides which counts are the group's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver(
        &mut self,
        q: &Queue,
        queue_id: u32,
        filter: &Filter,
        max: usize,
        bump: bool,
        out: &mut Vec<Delivery>,
        guard: &Guard,
    ) -> Tally {
        let (mut pos, mut pos_ref) = (self.cursor, self.cursor_ref);
        let t =
            self.deliver_from(&mut pos, &mut pos_ref, q, queue_id, filter, max, bump, out, guard);
        self.cursor = pos;
        self.cursor_ref = pos_ref;
        t
    }

    /// [`deliver`](Self::deliver) from a position of the caller's (the cursor, or a POP
    /// group's pop position), which it first raises to the frontier if acknowledgements or
    /// evictions passed it, and leaves after the last message looked at.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver_from(
        &mut self,
        pos: &mut u64,
        pos_ref: &mut Option<NodeRef>,
        q: &Queue,
        queue_id: u32,
        filter: &Filter,
        max: usize,
        bump: bool,
        out: &mut Vec<Delivery>,
        guard: &Guard,
    ) -> Tally {
        let mut dropped = self.reconcile(q.first_offset(guard));
        if *pos < self.frontier {
            *pos = self.frontier;
            *pos_ref = self.frontier_ref;
        }
        let mut prev = match node_ending_at(q, *pos_ref, *pos, guard) {
            Some(n) => n,
            None => {
                dropped += self.reconcile(q.first_offset(guard));
                if *pos < self.frontier {
                    *pos = self.frontier;
                }
                match node_ending_at(q, None, *pos, guard) {
                    Some(n) => n,
                    None => return Tally { dropped, ..Tally::default() },
                }
            }
        };
        let (mut delivered, mut filtered) = (0u64, 0u64);
        let start_len = out.len();
        // Bound the work done under the track's lock when the filter rejects long runs.
        let mut budget = SCAN_LIMIT.max(max.saturating_mul(16));
        while out.len() - start_len < max && budget > 0 {
            budget -= 1;
            let Some(n) = prev.next(guard) else { break };
            let off = n.offset();
            if !self.is_acked(off) {
                if !n.is_hole() && filter.matches(n.tag()) {
                    out.push(delivery_of(queue_id, n));
                    delivered += 1;
                } else {
                    if bump {
                        n.ack();
                    }
                    self.mark(q, n);
                    filtered += 1;
                }
            }
            prev = n;
        }
        let scan_limited = budget == 0 && out.len() - start_len < max && prev.has_next(guard);
        *pos = prev.end();
        *pos_ref = Some(NodeRef::new(q, prev));
        self.hwm = self.hwm.max(*pos);
        Tally { delivered, filtered, dropped, scan_limited }
    }

    /// Rewinds the cursor to the frontier (a new owner redelivers what was not acknowledged).
    pub(super) fn rewind(&mut self) {
        self.cursor = self.frontier;
        self.cursor_ref = self.frontier_ref;
    }

    /// The node the cursor waits behind, when it has caught up with the queue's end. Catches
    /// up with evictions first and adds what they took from under the track to `dropped`.
    pub(super) fn cursor_node<'g>(
        &mut self,
        q: &Queue,
        dropped: &mut u64,
        guard: &'g Guard,
    ) -> Option<&'g Node> {
        let evicted = self.reconcile(q.first_offset(guard));
        *dropped += if mutant("cursor_drops_discarded") { 0 } else { evicted };
        node_ending_at(q, self.cursor_ref, self.cursor, guard)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The track on its own, over a real queue: one rule per test, the counts each call
    //! returns, and the node counters it bumps (invariant 6: at most once per node).

    use bytes::Bytes;
    use crossbeam_epoch::{Collector, LocalHandle};

    use super::*;
    use crate::queue::Reclaimer;

    const TAG_A: u32 = 1;
    const TAG_B: u32 = 2;

    /// A queue of `n` messages from offset 0; message `i` has tag B when `i` is in `b`, else A.
    fn queue(n: u64, b: &[u64]) -> (Queue, LocalHandle) {
        let handle = Collector::new().register();
        let q = Queue::new(0, Reclaimer::new());
        {
            let guard = handle.pin();
            for i in 0..n {
                let tag = if b.contains(&i) { TAG_B } else { TAG_A };
                q.append(Bytes::from(vec![i as u8]), 1000 + i, tag, &guard);
            }
        }
        (q, handle)
    }

    fn acks(q: &Queue, guard: &Guard) -> Vec<u32> {
        let mut out = Vec::new();
        let mut n = q.head(guard);
        while let Some(next) = n.next(guard) {
            out.push(next.ack_count());
            n = next;
        }
        out
    }

    fn offsets(d: &[Delivery]) -> Vec<u64> {
        d.iter().map(|d| d.offset).collect()
    }

    #[test]
    fn given_out_of_order_acks_when_the_gap_closes_should_absorb_them_into_the_frontier() {
        let (q, h) = queue(5, &[]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        t.deliver(&q, 0, &Filter::All, 5, true, &mut out, &g);
        let mut dropped = 0;
        for off in [2, 3] {
            assert_eq!(t.ack_one(&q, 0, off, true, &mut dropped, &g), Ok(AckOutcome::Acked));
        }
        assert_eq!((t.frontier, t.top()), (0, 4), "acks above the frontier wait in the ack set");
        assert_eq!(t.backlog(5), 3, "offsets 0, 1 and 4 are still to acknowledge");
        assert_eq!(t.ack_one(&q, 0, 0, true, &mut dropped, &g), Ok(AckOutcome::Acked));
        assert_eq!(t.frontier, 1, "offset 1 still holds the frontier");
        assert_eq!(t.ack_one(&q, 0, 1, true, &mut dropped, &g), Ok(AckOutcome::Acked));
        assert_eq!(t.frontier, 4, "the frontier absorbs 2 and 3 once 1 is acknowledged");
        assert!(t.is_acked(3) && !t.is_acked(4));
        assert_eq!(
            acks(&q, &g),
            [1, 1, 1, 1, 0],
            "invariant 6: each acknowledged node bumped once"
        );
        assert_eq!(dropped, 0);
    }

    #[test]
    fn given_acked_or_undelivered_offsets_when_acking_should_change_nothing() {
        let (q, h) = queue(4, &[]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        t.deliver(&q, 0, &Filter::All, 2, true, &mut out, &g);
        let mut dropped = 0;
        assert_eq!(t.ack_one(&q, 0, 1, true, &mut dropped, &g), Ok(AckOutcome::Acked));
        assert_eq!(t.ack_one(&q, 0, 1, true, &mut dropped, &g), Ok(AckOutcome::AlreadyAcked));
        assert_eq!(
            t.ack_one(&q, 0, 2, true, &mut dropped, &g),
            Err(EngineError::NotDelivered { queue: 0, offset: 2 }),
            "an offset at or above the high-water mark was never delivered"
        );
        assert_eq!(acks(&q, &g), [0, 1, 0, 0], "a repeated or refused ack bumps nothing");
    }

    #[test]
    fn given_a_filter_when_delivering_should_hand_out_matches_and_acknowledge_the_rest() {
        let (q, h) = queue(6, &[1, 4]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        let tally = t.deliver(&q, 0, &Filter::tag_hashes([TAG_B as i32]), 8, true, &mut out, &g);
        assert_eq!(offsets(&out), [1, 4], "only tag B is delivered");
        assert_eq!((tally.delivered, tally.filtered, tally.dropped), (2, 4, 0));
        assert_eq!(acks(&q, &g), [1, 0, 1, 1, 0, 1], "filter misses count as acknowledged");
        assert_eq!((t.frontier, t.cursor), (1, 6), "the frontier stops at the first delivery");
    }

    #[test]
    fn given_a_filter_rejecting_everything_when_delivering_should_stop_at_the_scan_limit() {
        let n = SCAN_LIMIT as u64 + 10;
        let (q, h) = queue(n, &[]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        let tally = t.deliver(&q, 0, &Filter::tag_hashes([TAG_B as i32]), 1, true, &mut out, &g);
        assert!(out.is_empty());
        assert_eq!(tally.filtered, SCAN_LIMIT as u64, "one call looks at SCAN_LIMIT nodes at most");
        assert_eq!(t.cursor, SCAN_LIMIT as u64, "the next call goes on from there");
        let tally = t.deliver(&q, 0, &Filter::tag_hashes([TAG_B as i32]), 1, true, &mut out, &g);
        assert_eq!((tally.filtered, t.frontier), (10, n));
    }

    #[test]
    fn given_delivered_but_unacked_messages_when_rewinding_should_deliver_them_again() {
        let (q, h) = queue(4, &[]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        t.deliver(&q, 0, &Filter::All, 4, true, &mut out, &g);
        let mut dropped = 0;
        t.ack_one(&q, 0, 1, true, &mut dropped, &g).unwrap();
        t.rewind();
        let mut again = Vec::new();
        t.deliver(&q, 0, &Filter::All, 4, true, &mut again, &g);
        assert_eq!(offsets(&again), [0, 2, 3], "the acknowledged offset is skipped");
    }

    #[test]
    fn given_a_commit_when_acking_until_should_count_each_unacked_offset_once() {
        let (q, h) = queue(6, &[2]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        t.deliver(&q, 0, &Filter::All, 6, true, &mut out, &g);
        let mut dropped = 0;
        t.ack_one(&q, 0, 3, true, &mut dropped, &g).unwrap();
        let filter = Filter::tag_hashes([TAG_A as i32]);
        let (acked, filtered) = t.ack_until(&q, 5, true, Some(&filter), &mut dropped, &g);
        assert_eq!((acked, filtered), (3, 1), "0, 1, 4 acked and 2 filtered; 3 was already");
        assert_eq!((t.frontier, t.top()), (5, 5));
        assert_eq!(acks(&q, &g), [1, 1, 1, 1, 1, 0], "invariant 6: offset 3 bumped once");
        assert_eq!(t.ack_until(&q, 3, true, None, &mut dropped, &g), (0, 0), "behind: nothing");
    }

    /// review-e77444b H7: an ack far above a stuck frontier (a poison message nobody
    /// acknowledges) finds its node through the queue's index, not by walking from the
    /// frontier, so acks behind the poison message are not quadratic.
    #[test]
    fn given_a_stuck_frontier_when_acking_far_above_it_should_not_walk_from_the_frontier() {
        const N: u64 = 20_000;
        let (q, h) = queue(N, &[]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        while out.len() < N as usize {
            t.deliver(&q, 0, &Filter::All, N as usize, true, &mut out, &g);
        }
        let mut dropped = 0;
        for off in [N - 1, N / 2, 1] {
            let (r, steps) =
                crate::queue::steps_of(|| t.ack_one(&q, 0, off, true, &mut dropped, &g));
            assert_eq!(r, Ok(AckOutcome::Acked));
            assert!(steps <= 256, "acking {off} above the frontier 0 took {steps} steps");
        }
        assert_eq!((t.frontier, t.backlog(N)), (0, N - 3), "offset 0 still holds the frontier");
    }

    #[test]
    fn given_evicted_messages_when_reconciling_should_count_only_the_unacked_ones_as_dropped() {
        let (q, h) = queue(6, &[]);
        let g = h.pin();
        let mut t = Track::new(0);
        let mut out = Vec::new();
        t.deliver(&q, 0, &Filter::All, 2, true, &mut out, &g);
        let mut dropped = 0;
        t.ack_one(&q, 0, 1, true, &mut dropped, &g).unwrap();
        // The drop-oldest policy takes offsets 0 to 3 whatever the groups acknowledged.
        let u = q.lock_head().unlink_while(4, &g, |_| true);
        assert_eq!(u.count, 4);
        assert_eq!(t.reconcile(q.first_offset(&g)), 3, "invariant 10: 0, 2 and 3 were dropped");
        assert_eq!((t.frontier, t.cursor), (4, 4), "frontier and cursor jump past the eviction");
        assert_eq!(t.reconcile(q.first_offset(&g)), 0, "counted once");
        let mut rest = Vec::new();
        t.deliver(&q, 0, &Filter::All, 8, true, &mut rest, &g);
        assert_eq!(offsets(&rest), [4, 5]);
    }
}
