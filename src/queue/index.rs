//! The sparse index of one queue: every [`STRIDE`]-th offset mapped to its node (and that
//! node's timestamp), so that a lookup by offset or by time walks at most about one stride of
//! nodes instead of the whole backlog (Iggy's offset/time index, in the queue's lock-free
//! terms).
//!
//! # Protocol
//!
//! Slot `s` describes the node at offset `s * STRIDE`. Its entry is a [`NodeRef`] (pointer plus
//! `end`) and the node's timestamp, kept in a deque of slots behind one [`RwLock`]:
//!
//! * **Record** (appenders): after the publishing CAS, while still pinned, an appender whose
//!   message landed on a multiple of `STRIDE` records it with `try_write`. If the lock is busy
//!   it gives up and leaves a *hole*: an append never waits for the index, so it stays
//!   lock-free. Appenders also race each other, so slots can be filled out of order; a slot
//!   beyond the deque's end is reached by pushing holes. A reader that walks past the node of
//!   a hole fills it (again with `try_write`). A slot below the deque's first one (already
//!   pruned) is never recorded.
//! * **Prune** (the head-lock holder, in [`HeadLock::unlink_while`](super::HeadLock)): drop
//!   the slots of every node it is about to unlink, *before* it moves the head and defers them.
//! * **Look up** (readers, under an epoch guard, read lock): pick the entry nearest to the
//!   wanted offset (or the last entry older than the wanted time), copy it out, release the
//!   lock, and turn it into a node only through [`NodeRef::get`], which checks under the
//!   reader's guard that the head has not moved past it. Then walk `next`/`prev` from there.
//!
//! # Invariants
//!
//! * **No use after free (invariant 4)**, by two independent rules, either of which suffices:
//!   1. *Invalidate before unlink.* A reader that copied an entry pinned before it took the
//!      read lock, so before the prune that removed the entry, so before the reaper's
//!      `defer` of the node: the epoch keeps the node until the reader unpins. An entry
//!      recorded after the prune (an appender or reader that lost the race with the reaper)
//!      would be below the first slot and is dropped, under the same lock.
//!   2. *Validate like a `NodeRef`.* An entry is recorded by a pinned thread while its node
//!      is linked, so its pointer and `end` describe one node; nodes are reclaimed strictly
//!      from the head and recycled memory always carries a larger `end`, so a stale entry
//!      fails the head check in `NodeRef::get` before anything is dereferenced.
//!
//!   `loom-tests` (`index_lookup_vs_reaper`) checks the protocol with the reaper really
//!   freeing (two epoch flushes).
//! * **Publication (invariant 2).** An entry is recorded after the publishing CAS and read
//!   under the same lock, so a reader that gets a pointer from the index sees the node's
//!   fields as one that followed a `next` link would.
//! * **Sorted.** Slot `s` can only hold the node at offset `s * STRIDE`, so entries are in
//!   offset order and, when the queue's timestamps do not decrease, in time order.
//! * **Bounded.** The deque holds one slot per `STRIDE` retained offsets; it gives back
//!   capacity when it is mostly empty.
//!
//! Lock order: a queue's head lock, then its index lock. Appenders and readers take the index
//! lock alone and hold it for O(1) work (plus a scan over holes, which are rare).

use std::collections::VecDeque;

use crossbeam_epoch::Guard;

use super::{Node, NodeRef, Queue};
use crate::sync::{mutant, read, write, RwLock};

/// Offsets between two indexed nodes: a lookup walks at most about half of it (a power of
/// two, so the slot of an offset is a shift). Small, because the broker's pull reads 32
/// messages: a lookup must not cost more than the read it starts.
pub(crate) const STRIDE: u64 = if cfg!(loom) { 2 } else { 64 };
const SHIFT: u32 = STRIDE.trailing_zeros();
const _: () = assert!(STRIDE.is_power_of_two());

/// Whether the node at `offset` belongs in the index.
#[inline(always)]
pub(crate) fn indexed(offset: u64) -> bool {
    offset & (STRIDE - 1) == 0
}

/// One slot's content: the node at `slot * STRIDE` and its timestamp.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) node: NodeRef,
    pub(crate) timestamp: u64,
}

#[derive(Debug, Default)]
struct Slots {
    /// The slot of `entries[0]`.
    base: u64,
    entries: VecDeque<Option<Entry>>,
}

impl Slots {
    fn put(&mut self, slot: u64, entry: Entry) {
        if self.entries.is_empty() && slot > self.base {
            // The first slot of a queue that starts beyond offset 0, or after a full prune.
            self.base = slot;
        }
        let Some(i) = slot.checked_sub(self.base) else { return };
        let Ok(i) = usize::try_from(i) else { return };
        if i >= self.entries.len() {
            self.entries.resize(i, None);
            self.entries.push_back(Some(entry));
        } else {
            self.entries[i] = Some(entry);
        }
    }

    /// The present entry at or before index `i`, with its index.
    fn at_or_before(&self, i: usize) -> Option<(usize, Entry)> {
        let i = i.min(self.entries.len().checked_sub(1)?);
        (0..=i).rev().find_map(|j| self.entries[j].map(|e| (j, e)))
    }

    /// The present entry at or after index `i`.
    fn at_or_after(&self, i: usize) -> Option<Entry> {
        self.entries.iter().skip(i).find_map(|e| *e)
    }
}

/// The sparse index of one queue. See the module documentation.
#[derive(Debug)]
pub(crate) struct Index {
    slots: RwLock<Slots>,
}

impl Index {
    pub(crate) fn new() -> Self {
        Index { slots: RwLock::new(Slots::default()) }
    }

    /// Records `nodes` (each at a multiple of `STRIDE`, linked in `queue`, the caller pinned)
    /// unless the lock is busy. Never blocks.
    pub(crate) fn record<'n>(&self, queue: &Queue, nodes: impl IntoIterator<Item = &'n Node>) {
        let Some(mut slots) = crate::sync::try_write(&self.slots) else { return };
        for n in nodes {
            let entry = Entry { node: NodeRef::new(queue, n), timestamp: n.timestamp() };
            slots.put(n.offset() >> SHIFT, entry);
        }
    }

    /// Drops the slots of offsets below `first_end - 1`: the reaper is about to make the node
    /// ending at `first_end` the dummy and to unlink everything before it.
    pub(crate) fn prune(&self, first_end: u64) {
        // Slot `s` holds the node ending at `s * STRIDE + 1`; keep it if that is >= first_end.
        let keep_from = first_end.saturating_sub(1).div_ceil(STRIDE);
        if mutant("index_no_prune") {
            return;
        }
        let mut slots = write(&self.slots);
        if keep_from <= slots.base {
            return;
        }
        let drop = usize::try_from(keep_from - slots.base).unwrap_or(usize::MAX);
        let n = drop.min(slots.entries.len());
        slots.entries.drain(..n);
        slots.base = keep_from;
        let (len, cap) = (slots.entries.len(), slots.entries.capacity());
        if cap > 64 && len < cap / 4 {
            slots.entries.shrink_to(len * 2);
        }
    }

    /// The recorded entries nearest to `offset`: the last one at or before it and the first
    /// one after it (either may be stale: validate with [`NodeRef::get`]).
    pub(crate) fn around(&self, offset: u64) -> (Option<Entry>, Option<Entry>) {
        let slots = read(&self.slots);
        let slot = offset >> SHIFT;
        let Some(i) = slot.checked_sub(slots.base) else {
            return (None, slots.at_or_after(0));
        };
        let i = usize::try_from(i).unwrap_or(usize::MAX);
        let before = slots.at_or_before(i).map(|(_, e)| e);
        let after = slots.at_or_after(i.saturating_add(1));
        (before, after)
    }

    /// The last recorded entry whose timestamp is below `timestamp`, assuming timestamps do
    /// not decrease along the queue (binary search; a hole counts as its nearest entry
    /// before it).
    pub(crate) fn before_time(&self, timestamp: u64) -> Option<Entry> {
        let slots = read(&self.slots);
        let older = |i: usize| slots.at_or_before(i).map_or(true, |(_, e)| e.timestamp < timestamp);
        let (mut lo, mut hi) = (0, slots.entries.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if older(mid) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        // `lo` is the first slot not older; the answer is the last present one before it.
        slots.at_or_before(lo.checked_sub(1)?).map(|(_, e)| e)
    }

    /// Number of slots held (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        read(&self.slots).entries.len()
    }
}

impl Entry {
    /// The entry's node, if the reaper has not reclaimed it (see [`NodeRef::get`]).
    #[inline]
    pub(crate) fn get<'g>(&self, queue: &Queue, guard: &'g Guard) -> Option<&'g Node> {
        self.node.get(queue, guard)
    }
}
