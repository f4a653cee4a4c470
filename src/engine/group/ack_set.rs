//! The acknowledged offsets a track keeps above its frontier, as a bitmap.
//!
//! A track acknowledges most offsets by moving its frontier; only acknowledgements out of order
//! (POP acks and per-message acks behind an unacknowledged offset, filter misses behind one)
//! wait here until the gap below them closes. The set is **bounded, not charged to the memory
//! budget** (review-e77444b H7): it holds offsets in `[frontier, hwm)` only, and every node in
//! that range is still linked, because the unacknowledged frontier holds the queue's head below
//! it (a node leaves only once every hold covering it is acknowledged, or by eviction, which
//! `Track::reconcile` folds into the frontier). The bitmap spans at most those offsets, one bit
//! each, from the 64-aligned word of the lowest to the word of the highest: 8 bytes per 64 live
//! messages, 1/576 of the `NODE_SIZE` the budget already charges for each of them. (A
//! `BTreeSet<u64>` costs 8 bytes of key plus tree overhead per entry: up to about a sixth of a
//! node's charge, outside the budget.)

use std::collections::VecDeque;

/// A set of offsets, one bit per offset from `base`.
#[derive(Debug, Default, Clone)]
pub(super) struct AckSet {
    /// The offset of bit 0 of `words[0]`, a multiple of 64.
    base: u64,
    /// Bit `i % 64` of word `i / 64` stands for offset `base + i`. The first and the last
    /// word are never 0.
    words: VecDeque<u64>,
    /// Offsets in the set.
    len: u64,
}

impl AckSet {
    /// Offsets in the set.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Whether `offset` is in the set.
    pub(super) fn contains(&self, offset: u64) -> bool {
        let Some(i) = offset.checked_sub(self.base) else { return false };
        self.words.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Adds `offset`; returns whether it was new.
    pub(super) fn insert(&mut self, offset: u64) -> bool {
        if self.words.is_empty() {
            self.base = offset & !63;
        }
        while offset < self.base {
            self.words.push_front(0);
            self.base -= 64;
        }
        let i = offset - self.base;
        let w = (i / 64) as usize;
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let bit = 1 << (i % 64);
        let new = self.words[w] & bit == 0;
        self.words[w] |= bit;
        self.len += u64::from(new);
        new
    }

    /// Removes `offset`; returns whether it was there.
    pub(super) fn remove(&mut self, offset: u64) -> bool {
        if !self.contains(offset) {
            return false;
        }
        let i = offset - self.base;
        self.words[(i / 64) as usize] &= !(1 << (i % 64));
        self.len -= 1;
        self.trim();
        true
    }

    /// Removes every offset below `offset`; returns how many there were.
    pub(super) fn remove_below(&mut self, offset: u64) -> u64 {
        let before = self.len;
        while let Some(&w) = self.words.front() {
            if offset >= self.base + 64 {
                self.len -= u64::from(w.count_ones());
                self.words.pop_front();
                self.base += 64;
                continue;
            }
            if offset > self.base {
                let below = (1u64 << (offset - self.base)) - 1;
                self.len -= u64::from((w & below).count_ones());
                self.words[0] = w & !below;
            }
            break;
        }
        self.trim();
        before - self.len
    }

    /// The highest offset in the set.
    pub(super) fn last(&self) -> Option<u64> {
        let w = self.words.back()?;
        let top = 63 - u64::from(w.leading_zeros());
        Some(self.base + 64 * (self.words.len() as u64 - 1) + top)
    }

    /// Drops zero words at both ends (and gives memory back when most of it is unused), so
    /// the words span exactly the set's lowest to highest offset.
    fn trim(&mut self) {
        while self.words.front() == Some(&0) {
            self.words.pop_front();
            self.base += 64;
        }
        while self.words.back() == Some(&0) {
            self.words.pop_back();
        }
        if self.words.capacity() > 64 && self.words.len() * 4 < self.words.capacity() {
            self.words.shrink_to(self.words.len() * 2);
        }
    }

    /// Bytes the set allocates.
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::AckSet;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        RemoveBelow(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..2000).prop_map(Op::Insert),
            1 => (0u64..2000).prop_map(Op::Remove),
            1 => (0u64..2000).prop_map(Op::RemoveBelow),
        ]
    }

    proptest! {
        /// Every operation agrees with a `BTreeSet` (the structure the track used before).
        #[test]
        fn given_any_operations_when_applied_should_agree_with_a_btreeset(
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let (mut set, mut model) = (AckSet::default(), BTreeSet::new());
            for op in ops {
                match op {
                    Op::Insert(o) => prop_assert_eq!(set.insert(o), model.insert(o)),
                    Op::Remove(o) => prop_assert_eq!(set.remove(o), model.remove(&o)),
                    Op::RemoveBelow(o) => {
                        let below = model.range(..o).count() as u64;
                        model = model.split_off(&o);
                        prop_assert_eq!(set.remove_below(o), below);
                    }
                }
                prop_assert_eq!(set.len(), model.len() as u64);
                prop_assert_eq!(set.last(), model.last().copied());
                for o in 0..2001 {
                    prop_assert_eq!(set.contains(o), model.contains(&o), "offset {}", o);
                }
            }
        }
    }

    /// The bound the module docs give: one bit per offset of the span, whatever came before.
    #[test]
    fn given_a_span_of_offsets_when_acked_out_of_order_should_cost_a_bit_per_offset() {
        let mut set = AckSet::default();
        for o in (1..=1_000_000).step_by(2) {
            set.insert(o);
        }
        assert_eq!(set.len(), 500_000);
        assert!(set.heap_bytes() <= 2 * 1_000_000 / 8, "{} bytes", set.heap_bytes());
        assert_eq!(set.remove_below(999_000), 499_500);
        assert!(
            set.heap_bytes() <= 2 * 1_000 / 8 + 64 * 8,
            "{} bytes once trimmed",
            set.heap_bytes()
        );
    }
}
