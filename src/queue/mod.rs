//! The lock-free queue: a multi-producer, doubly-linked list of immutable message nodes with a
//! per-node acknowledgement counter, read under epoch guards and trimmed from the head by one
//! reaper at a time.
//!
//! This layer knows nothing of topics, consumer groups or RocketMQ. It is the part that
//! `loom-tests/` checks exhaustively; the invariants it upholds are numbered as in
//! `docs/design.md` ("Invariants") and cited by number below and in the models.
//!
//! # The list
//!
//! ```text
//!   head (dummy)                                              tail (may lag by a node)
//!      │                                                         │
//!      ▼                                                         ▼
//!   ┌──────┐ next  ┌──────┐ next  ┌──────┐ next  ┌──────┐ next  ┌──────┐ next
//!   │ end 4│──────▶│ end 5│──────▶│ end 6│──────▶│ end 7│──────▶│ end 8│──────▶ null | WAITING
//!   │      │◀──────│off 4 │◀──────│off 5 │◀──────│off 6 │◀──────│off 7 │
//!   └──────┘ prev  └──────┘ prev  └──────┘ prev  └──────┘ prev  └──────┘
//!   reclaimed        live messages: offsets head.end .. tail.end
//! ```
//!
//! Every node stores `end`, the offset *after* its message (`offset + 1`). The node `head`
//! points to is a dummy in the sense of Michael & Scott: its message has already been reclaimed
//! (or it is the initial sentinel, whose `end` is the queue's start offset), and the live
//! messages are the nodes after it. Storing `end` instead of `offset` lets the sentinel exist
//! without a "minus one" offset.
//!
//! # Protocol
//!
//! **Append** (any number of threads, lock-free; Michael & Scott 1996, "Simple, Fast, and
//! Practical Non-Blocking and Blocking Concurrent Queue Algorithms"): load `tail`; if its `next`
//! is set, help swing `tail` forward and retry; otherwise fill the new node's `prev` (the tail)
//! and `end` (`tail.end + 1`) *before* publication and CAS the tail's `next` from null to the
//! node. Exactly one append wins each predecessor, so offsets are dense and strictly increasing
//! in link order (invariant 1), and a node is fully written before the CAS that publishes it
//! (invariant 2). The winner then tries once to swing `tail`; anyone may finish that for it.
//!
//! **Read** (any number of threads, wait-free per step): under a pinned [`Guard`], follow `next`
//! from a node known to be alive. A reader keeps its position between guards as a [`NodeRef`]
//! (pointer plus `end`) and may only dereference it again after [`NodeRef::get`] has checked,
//! under the new guard, that `head.end <= ref.end`: nodes are reclaimed strictly from the head,
//! so a node whose `end` is not below the dummy's is still linked, or it is the dummy itself,
//! and was so after the guard was pinned (invariant 4).
//!
//! **Acknowledge**: a consumer group bumps [`Node::ack`] at most once per node (invariant 6 is
//! the engine's duty; this layer only counts). The counter is the only field of a published
//! node, besides the links, that ever changes.
//!
//! **Reclaim** (one thread at a time, serialised by [`Queue::lock_head`]): [`HeadLock::unlink_while`]
//! walks from the dummy while a predicate (the engine's "every group acknowledged it", retention
//! or the drop-oldest policy) accepts the next node, makes the last accepted node the new dummy,
//! clears its `prev`, stores it in `head`, and hands the old dummy and every node before the new
//! one to the epoch collector as one chain. Before that it helps `tail` past the chain, so `tail`
//! never points at a node that is about to be freed. The chain is not freed inside the epoch's
//! deferred function (which may run on a latency-critical producer thread): the deferred
//! function only moves it to a [`Reclaimer`] list that the reaper thread drains with
//! [`Reclaimer::free_ready`].
//!
//! **Wait** ("an append pays for waking only when someone waits"): a reader that found no
//! `next` registers in the queue's wait list and, still holding the list's lock, CASes the
//! `next` link of the node it waits behind from null to null-with-tag [`WAITING`]. An append's
//! single publishing CAS expects whatever `next` it loaded (plain null or tagged null); when the
//! value it replaced carried the tag, it drains and wakes the list. Both sides are RMWs on the
//! same word, so they are totally ordered: either the waiter's tag CAS comes first and the
//! appender sees the tag (and takes the list lock after the waiter released it, so it sees the
//! registration), or the append comes first and the waiter's CAS fails on a non-null `next` and
//! it reads the message instead of sleeping. No fence, no shared counter on the fast path.
//!
//! # Node state machine
//!
//! | state | `next` | who moves it on |
//! |---|---|---|
//! | private (being appended) | null | its producer fills `prev`, `end`, payload |
//! | tail | null, or null with `WAITING` | a waiter sets the tag; one appender links a successor |
//! | live | successor (never changes again) | groups bump `acks`; the reaper unlinks it |
//! | dummy | successor | the reaper replaces it and defers it |
//! | deferred | — | the epoch collector hands it to the [`Reclaimer`] |
//! | freed | — | — |
//!
//! # Memory orderings
//!
//! | operation | ordering | pairs with |
//! |---|---|---|
//! | publishing CAS on `tail.next` | AcqRel (success) | Acquire loads of `next` by readers, appenders, the reaper: they see `end`, `prev`, payload (inv. 2); Acquire side sees a waiter's tag |
//! | load of `next` | Acquire | the publishing CAS |
//! | waiter's tag CAS on `next` | AcqRel / Acquire on failure | the publishing CAS (failure reads the published node) |
//! | `tail` CAS / load | Release / Acquire | other `tail` CASes, so a loaded tail is a published node |
//! | `head` store (reaper) / load | Release / Acquire | readers see the new dummy's `prev` cleared and its `end` |
//! | `prev` store before publication | Relaxed | published by the publishing CAS |
//! | `prev` clear on the new dummy | Release | Acquire loads of `prev` by backward walks |
//! | `acks` increment / load | Release / Acquire | the reaper's decision happens after the groups' reads of the node |
//!
//! Epoch pinning (`crossbeam-epoch`, with the [`Collector`](crossbeam_epoch::Collector) passed
//! in by the caller, never the global one) supplies the SeqCst fences that make "unlinked, then
//! deferred" safe against every guard pinned before the unlink.

mod index;
mod pool;
pub(crate) mod wait;

use std::fmt;
use std::sync::atomic::AtomicU64 as StdAtomicU64;

use bytes::Bytes;
use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use crossbeam_utils::CachePadded;

use crate::sync::{lock, mutant, Arc, AtomicU32, Mutex, MutexGuard, Ordering, Published};

pub(crate) use wait::WaitList;
pub use wait::{WaitId, Wakeup};

/// Tag bit on a `next` link: somebody waits behind this node (see "Wait" above).
pub const WAITING: usize = 1;

/// The timestamp that marks a hole node ([`Node::is_hole`]); appenders never store it (the
/// engine caps message timestamps below it).
pub const HOLE_TIMESTAMP: u64 = u64::MAX;

/// Number of bytes a node adds to its payload: the node itself, as allocated.
pub const NODE_SIZE: usize = std::mem::size_of::<Node>();

/// One message in a queue. Immutable once published, except for its `next` link (set once),
/// its ack counter and, for the node that becomes the dummy, its `prev` link (cleared).
pub struct Node {
    next: Atomic<Node>,
    prev: Atomic<Node>,
    end: Published<u64>,
    timestamp: Published<u64>,
    tag: Published<u32>,
    acks: AtomicU32,
    payload: Published<Bytes>,
    /// Under loom nodes are never deallocated, only poisoned, so that a use after "free" is a
    /// failed assertion instead of undefined behaviour.
    #[cfg(loom)]
    freed: crate::sync::AtomicBool,
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Node>() <= 72, "a node must stay within 72 bytes");

impl Node {
    fn new(payload: Bytes, timestamp: u64, tag: u32, end: u64) -> Self {
        Node {
            next: Atomic::null(),
            prev: Atomic::null(),
            end: Published::new(end),
            timestamp: Published::new(timestamp),
            tag: Published::new(tag),
            acks: AtomicU32::new(0),
            payload: Published::new(payload),
            #[cfg(loom)]
            freed: crate::sync::AtomicBool::new(false),
        }
    }

    /// Under loom: fails the model if this node was already reclaimed (invariant 4).
    #[inline(always)]
    fn check_live(&self) {
        #[cfg(loom)]
        assert!(
            !self.freed.load(Ordering::SeqCst),
            "invariant 4: a reclaimed node (end {}) was accessed",
            self.end.get()
        );
    }

    /// The message's offset in its queue.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.check_live();
        self.end.get() - 1
    }

    /// The offset just after this message (`offset + 1`).
    #[inline]
    pub fn end(&self) -> u64 {
        self.check_live();
        *self.end.get()
    }

    /// The store timestamp the appender gave the message (milliseconds since the Unix epoch in
    /// the engine, but the queue does not interpret it).
    #[inline]
    pub fn timestamp(&self) -> u64 {
        self.check_live();
        *self.timestamp.get()
    }

    /// The tag hash the appender gave the message (0 = no tag).
    #[inline]
    pub fn tag(&self) -> u32 {
        self.check_live();
        *self.tag.get()
    }

    /// Whether this node is a hole: an offset recovery found claimed but never completed (a
    /// send that was never answered). Holes carry no message; readers skip them.
    #[inline]
    pub fn is_hole(&self) -> bool {
        self.timestamp() == HOLE_TIMESTAMP
    }

    /// The payload, shared with every reader (cloning it copies no bytes).
    #[inline]
    pub fn payload(&self) -> &Bytes {
        self.check_live();
        self.payload.get()
    }

    /// How many acknowledgements the node has received.
    #[inline]
    pub fn ack_count(&self) -> u32 {
        self.check_live();
        // Acquire: pairs with the Release increment in `ack`, so whoever sees the count also
        // sees everything the acknowledging group did before acknowledging.
        self.acks.load(Ordering::Acquire)
    }

    /// Adds one acknowledgement and returns the new count. The caller guarantees that each
    /// consumer group calls this at most once per node (invariant 6).
    #[inline]
    pub fn ack(&self) -> u32 {
        self.check_live();
        // Release: pairs with the Acquire load in `ack_count` (the reaper's decision).
        self.acks.fetch_add(1, Ordering::Release) + 1
    }

    /// The next node, if one has been linked.
    #[inline]
    pub fn next<'g>(&self, guard: &'g Guard) -> Option<&'g Node> {
        self.check_live();
        step();
        // Acquire: pairs with the publishing CAS, so the successor's fields are visible (inv. 2).
        let next = self.next.load(Ordering::Acquire, guard);
        // `self` is alive under `guard` (callers only reach it through the head, the tail, a
        // validated `NodeRef` or another node's link while pinned), and nodes are freed
        // strictly from the head.
        // SAFETY: so the successor of a node reachable under `guard` is reachable too; its
        // unlink is deferred until the guard is dropped (invariant 4).
        unsafe { next.as_ref() }
    }

    /// Whether a successor has been linked (one atomic load; for spinning waiters).
    #[inline]
    pub fn has_next(&self, guard: &Guard) -> bool {
        self.check_live();
        // Acquire: pairs with the publishing CAS (the caller reads the successor next).
        !self.next.load(Ordering::Acquire, guard).is_null()
    }

    /// The previous node, if it is still linked (the dummy's `prev` is cleared).
    #[inline]
    pub fn prev<'g>(&self, guard: &'g Guard) -> Option<&'g Node> {
        self.check_live();
        // Acquire: pairs with the reaper's Release clear of the new dummy's `prev`.
        let prev = self.prev.load(Ordering::Acquire, guard);
        // SAFETY: a non-null `prev` was loaded under `guard` before the reaper cleared it, and
        // the reaper clears it before it defers the predecessor, so the predecessor's
        // destruction is deferred past this guard (invariant 4).
        unsafe { prev.as_ref() }
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("offset", &self.end.get().wrapping_sub(1))
            .field("timestamp", self.timestamp.get())
            .field("tag", self.tag.get())
            .field("acks", &self.acks)
            .field("payload_len", &self.payload.get().len())
            .finish()
    }
}

/// A position in a queue that outlives a guard: a node pointer plus that node's `end`.
///
/// It can only be turned back into a reference with [`NodeRef::get`], which checks under the
/// caller's guard that the node has not been reclaimed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NodeRef {
    ptr: *const Node,
    end: u64,
    queue: u64,
}

// SAFETY: a `NodeRef` is an address plus two integers; it is only dereferenced through `get`,
// which validates it against the queue under an epoch guard on whichever thread calls it.
unsafe impl Send for NodeRef {}
// SAFETY: as above; `&NodeRef` gives no access to the node without `get`.
unsafe impl Sync for NodeRef {}

impl NodeRef {
    /// Remembers `node`, which lives in `queue`.
    pub fn new(queue: &Queue, node: &Node) -> Self {
        NodeRef { ptr: node, end: node.end(), queue: queue.id }
    }

    /// The remembered node's `end` (its offset + 1).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The node again, if it is still linked (or is the dummy) in `queue`; `None` if the reaper
    /// has reclaimed it or `self` belongs to another queue.
    pub fn get<'g>(&self, queue: &Queue, guard: &'g Guard) -> Option<&'g Node> {
        let unlinked = queue.head(guard).end() > self.end && !mutant("unvalidated_noderef");
        if self.queue != queue.id || unlinked {
            return None;
        }
        // The head was loaded under `guard` and its `end` is not above ours; `end`s are unique
        // within a queue, so a reused address cannot pass this check.
        // SAFETY: our node is the head or after it, so it cannot be freed before the guard is
        // dropped (invariant 4).
        Some(unsafe { &*self.ptr })
    }
}

impl fmt::Debug for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeRef").field("end", &self.end).field("queue", &self.queue).finish()
    }
}

/// What [`Queue::wait_behind`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitState {
    /// A message is already linked behind the node: read it, do not sleep.
    Ready,
    /// The waiter is registered and will be woken by the next append behind the node.
    Registered(WaitId),
}

/// The result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The offset the message got.
    pub offset: u64,
    /// How many waiters this append woke.
    pub woke: usize,
}

static NEXT_QUEUE_ID: StdAtomicU64 = StdAtomicU64::new(1);

/// A lock-free multi-producer queue of messages. See the module documentation.
pub struct Queue {
    head: CachePadded<Atomic<Node>>,
    tail: CachePadded<Atomic<Node>>,
    waiters: WaitList,
    reaper: Mutex<()>,
    reclaimer: Arc<Reclaimer>,
    index: index::Index,
    id: u64,
}

impl Queue {
    /// An empty queue whose first message will get offset `start`. Reclaimed nodes go to
    /// `reclaimer`, which is usually shared by every queue of an engine.
    pub fn new(start: u64, reclaimer: Arc<Reclaimer>) -> Self {
        let sentinel = Owned::new(Node::new(Bytes::new(), 0, 0, start));
        // A relaxed id is enough: it only needs to be unique.
        let id = NEXT_QUEUE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let q = Queue {
            head: CachePadded::new(Atomic::null()),
            tail: CachePadded::new(Atomic::null()),
            waiters: WaitList::default(),
            reaper: Mutex::new(()),
            reclaimer,
            index: index::Index::new(),
            id,
        };
        // SAFETY: nobody else can see `q` yet, so the unprotected guard is not observed by any
        // concurrent reclamation.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let s = sentinel.into_shared(guard);
        // Relaxed: `q` is published to other threads by whatever moves it there (Arc, spawn).
        q.head.store(s, Ordering::Relaxed);
        q.tail.store(s, Ordering::Relaxed);
        q
    }

    /// The dummy node: the last reclaimed one (or the sentinel). Live messages follow it.
    #[inline]
    pub fn head<'g>(&self, guard: &'g Guard) -> &'g Node {
        // Acquire: pairs with the reaper's Release store of a new dummy.
        let h = self.head.load(Ordering::Acquire, guard);
        // SAFETY: `head` is never null, and the node it points to is only deferred after `head`
        // has moved past it, which the guard orders after this load (invariant 4).
        unsafe { h.deref() }
    }

    /// The last linked node (the dummy when the queue is empty).
    #[inline]
    pub fn last<'g>(&self, guard: &'g Guard) -> &'g Node {
        // Acquire: pairs with the Release tail CASes.
        let t = self.tail.load(Ordering::Acquire, guard);
        // SAFETY: `tail` is never null and the reaper helps it past any node before deferring
        // that node, so the node it points to is alive under `guard` (invariant 4).
        let mut n = unsafe { t.deref() };
        while let Some(next) = n.next(guard) {
            n = next;
        }
        n
    }

    /// Offset of the oldest live message (equals [`next_offset`](Self::next_offset) when the
    /// queue is empty).
    #[inline]
    pub fn first_offset(&self, guard: &Guard) -> u64 {
        self.head(guard).end()
    }

    /// Offset the next appended message will get.
    #[inline]
    pub fn next_offset(&self, guard: &Guard) -> u64 {
        self.last(guard).end()
    }

    /// Appends a message and returns its offset. Lock-free; wakes waiters only if some wait.
    pub fn append(&self, payload: Bytes, timestamp: u64, tag: u32, guard: &Guard) -> Appended {
        self.append_claimed(payload, timestamp, tag, guard, &mut |_| {})
    }

    /// As [`append`](Self::append), calling `claim(offset)` with the offset the message is
    /// about to take before each attempt to publish it (a durable store records the claim in
    /// its record before the publishing CAS can make the offset visible: S3 of `crate::shm`).
    /// The last call names the offset the message got.
    pub fn append_claimed(
        &self,
        payload: Bytes,
        timestamp: u64,
        tag: u32,
        guard: &Guard,
        claim: &mut dyn FnMut(u64),
    ) -> Appended {
        let new = pool::alloc(Node::new(payload, timestamp, tag, 0));
        self.publish_chain(&[new], guard, claim)
    }

    /// Appends several messages as one contiguous run: they get consecutive offsets, and no
    /// other append lands between them (RocketMQ batch semantics). The chain is linked
    /// privately, then published with the same single CAS as one message. Returns `None` for
    /// an empty batch.
    pub fn append_batch<I>(&self, messages: I, guard: &Guard) -> Option<Appended>
    where
        I: IntoIterator<Item = (Bytes, u64, u32)>,
    {
        self.append_batch_claimed(messages, guard, &mut |_| {})
    }

    /// As [`append_batch`](Self::append_batch), calling `claim(last)` with the offset the
    /// batch's *last* message is about to take before each attempt to publish it (see
    /// [`append_claimed`](Self::append_claimed)): a record covering the batch then claims
    /// every offset it may have made visible.
    pub fn append_batch_claimed<I>(
        &self,
        messages: I,
        guard: &Guard,
        claim: &mut dyn FnMut(u64),
    ) -> Option<Appended>
    where
        I: IntoIterator<Item = (Bytes, u64, u32)>,
    {
        let nodes: Vec<*mut Node> = messages
            .into_iter()
            .map(|(p, ts, tag)| pool::alloc(Node::new(p, ts, tag, 0)))
            .collect();
        if nodes.is_empty() {
            return None;
        }
        for w in nodes.windows(2) {
            // SAFETY: the nodes were just allocated and are private to this call until the
            // publishing CAS in `publish_chain`; nobody else can hold a reference to them.
            let (a, b) = unsafe { (&*w[0], &*w[1]) };
            // Relaxed: published by the AcqRel CAS that links the first node (invariant 2).
            a.next.store(Shared::from(w[1] as *const Node), Ordering::Relaxed);
            b.prev.store(Shared::from(w[0] as *const Node), Ordering::Relaxed);
        }
        Some(self.publish_chain(&nodes, guard, claim))
    }

    /// The append protocol ("Append" above), once for single messages and batches: links the
    /// private, non-empty chain `nodes` (each node's `next` already pointing at the one after
    /// it, the last one's null) after the current last node with one CAS, numbering the
    /// nodes from that node's `end`; then swings `tail`, records index entries, and wakes the
    /// waiters if the replaced link carried the `WAITING` tag. Before each publishing CAS it
    /// calls `claim` with the offset the chain's last node would get.
    fn publish_chain(
        &self,
        nodes: &[*mut Node],
        guard: &Guard,
        claim: &mut dyn FnMut(u64),
    ) -> Appended {
        let (first, last) = (nodes[0], nodes[nodes.len() - 1]);
        loop {
            // Acquire: pairs with the Release tail CASes (the tail is a published node).
            let t = self.tail.load(Ordering::Acquire, guard);
            // SAFETY: see `last`: the tail is alive under `guard`.
            let tail = unsafe { t.deref() };
            // Acquire: pairs with the publishing CAS of whoever linked a successor.
            let next = tail.next.load(Ordering::Acquire, guard);
            if !next.is_null() {
                // The tail lags: help it forward. Release: pairs with Acquire tail loads.
                let _ = self.tail.compare_exchange(
                    t,
                    next.with_tag(0),
                    Ordering::Release,
                    Ordering::Relaxed,
                    guard,
                );
                continue;
            }
            let base = tail.end();
            for (i, &n) in nodes.iter().enumerate() {
                // SAFETY: the chain is private to this call until the CAS below succeeds;
                // `&mut` is exclusive.
                let node = unsafe { &mut *n };
                *node.end.get_mut() = base + 1 + i as u64;
            }
            // Before the CAS that may publish these offsets (program order puts the caller's
            // stores before the CAS's Release).
            let last_offset = base + nodes.len() as u64 - 1;
            let late_claim = mutant("claim_after_publish");
            if !late_claim {
                claim(last_offset);
            }
            // SAFETY: as above.
            let head_of_chain = unsafe { &*first };
            // Relaxed: published by the AcqRel CAS below (invariant 2).
            head_of_chain.prev.store(t, Ordering::Relaxed);
            // Expect exactly what we loaded: plain null, or null tagged WAITING by a waiter.
            // AcqRel: Release publishes the chain (its fields and inner links were written
            // before); Acquire sees the waiter's registration.
            let linked = Shared::from(first as *const Node);
            let publish = if mutant("weak_publish") { Ordering::Acquire } else { Ordering::AcqRel };
            let won = tail.next.compare_exchange(next, linked, publish, Ordering::Acquire, guard);
            if won.is_err() {
                continue;
            }
            if late_claim {
                claim(last_offset);
            }
            // Release: pairs with Acquire tail loads. Failure means someone helped.
            let _ = self.tail.compare_exchange(
                t,
                Shared::from(last as *const Node),
                Ordering::Release,
                Ordering::Relaxed,
                guard,
            );
            let len = nodes.len() as u64;
            let first_indexed = base.next_multiple_of(index::STRIDE) - base;
            if first_indexed < len {
                let indexed = (first_indexed..len).step_by(index::STRIDE as usize).map(|i| {
                    // SAFETY: the chain is linked and we are still pinned, so none of its
                    // nodes can have been freed (invariant 4).
                    unsafe { &*nodes[i as usize] }
                });
                self.index.record(self, indexed);
            }
            let wake = next.tag() & WAITING != 0 && !mutant("append_no_wake");
            let woke = if wake { self.waiters.wake_all() } else { 0 };
            return Appended { offset: base, woke };
        }
    }

    /// The live node holding `offset`, if any. Walks from whichever start is nearest: the
    /// head, the last node, or the index entries around `offset` (see [`index`]), so it
    /// walks at most about half an index stride, however long the queue.
    pub fn find<'g>(&self, offset: u64, guard: &'g Guard) -> Option<&'g Node> {
        let head = self.head(guard);
        let last = self.last(guard);
        if offset < head.end() || offset >= last.end() {
            return None;
        }
        let want = offset + 1; // the `end` of the node we look for; no overflow: < last.end()
        let (before, after) = self.index.around(offset);
        // Forward start: the head (a dummy, before every live offset) or the entry at or
        // before `offset`; backward start: the last node or the entry after `offset`.
        let mut fwd = head;
        if let Some(n) = before.and_then(|e| e.get(self, guard)) {
            if n.end() > fwd.end() && n.end() <= want {
                fwd = n;
            }
        }
        let mut back = last;
        if let Some(n) = after.and_then(|e| e.get(self, guard)) {
            if n.end() < back.end() && n.end() >= want {
                back = n;
            }
        }
        // An indexed node walked past is a hole in the index (see `index`): fill it.
        let mut hole = None;
        let found = if want - fwd.end() <= back.end() - want {
            let mut n = fwd;
            while n.end() < want {
                step();
                n = n.next(guard)?;
                if hole.is_none() && index::indexed(n.offset()) {
                    hole = Some(n);
                }
            }
            Some(n)
        } else {
            let mut n = back;
            while n.end() > want {
                step();
                n = n.prev(guard)?;
                if hole.is_none() && index::indexed(n.offset()) {
                    hole = Some(n);
                }
            }
            (n.end() == want).then_some(n)
        };
        if let Some(h) = hole {
            self.index.record(self, [h]);
        }
        found
    }

    /// The offset of the first live message whose timestamp is at least `timestamp` (the
    /// queue's next offset if there is none). Exact when timestamps do not decrease along the
    /// queue (what the engine's clock gives, give or take a racing producer); otherwise an
    /// offset from which the timestamps reach `timestamp`, as RocketMQ's binary search gives.
    /// Starts from the index entry just before that time, so it walks about one stride.
    pub fn offset_at_time(&self, timestamp: u64, guard: &Guard) -> u64 {
        let head = self.head(guard);
        let mut n = self
            .index
            .before_time(timestamp)
            .and_then(|e| e.get(self, guard))
            .filter(|n| n.end() >= head.end())
            .unwrap_or(head);
        while let Some(next) = n.next(guard) {
            step();
            if next.timestamp() >= timestamp {
                return next.offset();
            }
            n = next;
        }
        n.end()
    }

    /// Registers `who` to be woken by the next append behind `node` (normally the last node),
    /// or refreshes the registration `id`. Returns [`WaitState::Ready`] instead when a message
    /// is already linked behind `node`.
    pub fn wait_behind(
        &self,
        node: &Node,
        who: Wakeup,
        id: Option<WaitId>,
        guard: &Guard,
    ) -> WaitState {
        let registered = self.waiters.register_with(id, who, || {
            // AcqRel: the Release half orders our registration before an appender that reads
            // the tag; on failure, Acquire pairs with the publishing CAS.
            match node.next.compare_exchange(
                Shared::null(),
                Shared::null().with_tag(WAITING),
                Ordering::AcqRel,
                Ordering::Acquire,
                guard,
            ) {
                Ok(_) => true,
                // Already tagged by another waiter: stay registered. Linked: do not wait.
                Err(e) => e.current.is_null(),
            }
        });
        match registered {
            Some(id) => WaitState::Registered(id),
            None => WaitState::Ready,
        }
    }

    /// Withdraws a wait registration (timeout, cancellation). Harmless if already woken.
    pub fn cancel_wait(&self, id: WaitId) {
        self.waiters.deregister(id);
    }

    /// Wakes every registered waiter without an append (the subscription it waits for closed).
    pub fn wake_waiters(&self) -> usize {
        self.waiters.wake_all()
    }

    /// Whether the registration `id` is still waiting (no append has woken it yet). For the
    /// loom models only.
    #[cfg(loom)]
    pub fn is_waiting(&self, id: WaitId) -> bool {
        self.waiters.is_registered(id)
    }

    /// Takes the right to unlink from the head. One holder at a time; appends and reads go on.
    pub fn lock_head(&self) -> HeadLock<'_> {
        HeadLock { queue: self, _lock: lock(&self.reaper) }
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no reader, appender or reaper can reach the list any more;
        // everything unlinked earlier belongs to the reclaimer, not to this walk.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let mut cur = self.head.load(Ordering::Relaxed, guard);
        while !cur.is_null() {
            // SAFETY: the nodes from the dummy to the end are owned by this queue alone now.
            let owned = unsafe { cur.into_owned() };
            cur = owned.next.load(Ordering::Relaxed, guard).with_tag(0);
            drop(owned);
        }
    }
}

/// What one [`HeadLock::unlink_while`] call removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unlinked {
    /// Messages unlinked.
    pub count: u64,
    /// Sum of their payload lengths.
    pub payload_bytes: u64,
    /// Offset of the first live message afterwards.
    pub first_offset: u64,
}

/// The right to unlink nodes from a queue's head (see [`Queue::lock_head`]).
pub struct HeadLock<'q> {
    queue: &'q Queue,
    _lock: MutexGuard<'q, ()>,
}

impl fmt::Debug for HeadLock<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeadLock").field("queue", &self.queue.id).finish()
    }
}

impl HeadLock<'_> {
    /// Unlinks live messages from the head, oldest first, while `accept` returns `true` for the
    /// next one, at most `max` of them. The last unlinked node becomes the new dummy; the rest
    /// (and the old dummy) go to the epoch collector and then to the queue's [`Reclaimer`].
    pub fn unlink_while<F: FnMut(&Node) -> bool>(
        &mut self,
        max: u64,
        guard: &Guard,
        mut accept: F,
    ) -> Unlinked {
        let q = self.queue;
        // Relaxed would do (we are the only writer of `head`), Acquire keeps the reasoning local.
        let old = q.head.load(Ordering::Acquire, guard);
        // SAFETY: `head` is never null and only this lock holder replaces or defers it.
        let old_ref = unsafe { old.deref() };
        let mut cur = old_ref;
        let mut count = 0u64;
        let mut bytes = 0u64;
        while count < max {
            match cur.next(guard) {
                Some(next) if accept(next) => {
                    count += 1;
                    bytes += next.payload().len() as u64;
                    cur = next;
                }
                _ => break,
            }
        }
        if count == 0 {
            return Unlinked { count: 0, payload_bytes: 0, first_offset: old_ref.end() };
        }
        let new_dummy = cur;
        // The tail must not point into the chain we are about to defer: help it forward until it
        // reaches the new dummy or beyond (it can only lag, never jump past a linked node).
        loop {
            // Acquire: pairs with the Release tail CASes.
            let t = q.tail.load(Ordering::Acquire, guard);
            // SAFETY: the tail is alive under `guard` (we have not deferred anything yet).
            let tail = unsafe { t.deref() };
            if tail.end() >= new_dummy.end() {
                break;
            }
            // Acquire: pairs with the publishing CAS; the tail lags so `next` is linked.
            let next = tail.next.load(Ordering::Acquire, guard);
            // Release: pairs with Acquire tail loads.
            let _ = q.tail.compare_exchange(
                t,
                next.with_tag(0),
                Ordering::Release,
                Ordering::Relaxed,
                guard,
            );
        }
        // Invalidate the index entries of the chain before the chain leaves the list, so no
        // entry read after this point can lead to it (see `index`).
        let first_offset = new_dummy.end();
        q.index.prune(first_offset);
        // Release: a backward walk that loads null stops here; one that loaded the old value
        // did so before this store and therefore before the deferral below (invariant 4).
        new_dummy.prev.store(Shared::null(), Ordering::Release);
        // Release: pairs with Acquire head loads; readers validating a NodeRef see the new end.
        q.head.store(Shared::from(new_dummy as *const Node), Ordering::Release);
        let chain = Chain { first: old.as_raw() as *mut Node, len: count };
        let reclaimer = Arc::clone(&q.reclaimer);
        // The chain is unreachable from `head`, `tail` and every live node's `prev` now; the
        // collector runs the closure once no guard pinned before this point remains.
        // The `free_unguarded` mutant skips the grace period: pinned readers may be on the chain.
        if mutant("free_unguarded") {
            reclaimer.push(chain)
        } else {
            guard.defer(move || reclaimer.push(chain))
        }
        Unlinked { count, payload_bytes: bytes, first_offset }
    }
}

/// A run of unlinked nodes, linked by their `next` pointers: the old dummy and the nodes up to
/// (not including) the new dummy.
struct Chain {
    first: *mut Node,
    len: u64,
}

// SAFETY: a chain is unlinked and, once the epoch says so, owned by whoever holds it; nodes hold
// only `Send` data.
unsafe impl Send for Chain {}

impl Chain {
    /// Frees the chain's nodes and drops their payloads.
    ///
    /// # Safety
    /// The chain must be unreachable by every thread (its epoch grace period has passed) and
    /// freed only once.
    #[cfg(not(loom))]
    unsafe fn free(self) {
        let mut freed = Vec::with_capacity(self.len as usize);
        // SAFETY: the caller guarantees nobody else can reach the chain.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let mut cur = self.first;
        for _ in 0..self.len {
            // SAFETY: the chain has exactly `len` nodes linked by `next`, each allocated by
            // `pool::alloc` (or the sentinel's `Owned::new`), each dropped only here.
            let next = unsafe { &*cur }.next.load(Ordering::Relaxed, guard).with_tag(0);
            // SAFETY: as above; after this the memory holds no value and is handed to the pool.
            unsafe { std::ptr::drop_in_place(cur) };
            freed.push(cur);
            cur = next.as_raw() as *mut Node;
        }
        // SAFETY: every pointer came from a node allocation whose value was just dropped.
        unsafe { pool::recycle(freed) };
    }
}

impl Chain {
    /// Under loom: poisons the chain's nodes and drops their payloads (so leak checks on
    /// payloads still work) but never deallocates, so a late access fails `check_live`.
    ///
    /// # Safety
    /// As the non-loom `free`.
    #[cfg(loom)]
    unsafe fn free(self) {
        let mut cur = self.first;
        for _ in 0..self.len {
            // SAFETY: the caller guarantees we own the chain; the node is never deallocated.
            let node = unsafe { &mut *cur };
            // SAFETY: as above; nobody else reads the links of an owned chain.
            let guard = unsafe { crossbeam_epoch::unprotected() };
            cur = node.next.load(Ordering::Relaxed, guard).with_tag(0).as_raw() as *mut Node;
            node.freed.store(true, Ordering::SeqCst);
            if !mutant("leak_payload") {
                *node.payload.get_mut() = Bytes::new();
            }
        }
    }
}

/// Where reclaimed chains wait, after their epoch grace period, for the reaper thread to free
/// them. Keeps the cost of freeing (and of the allocator's cross-thread frees) off the threads
/// that happen to run the epoch's deferred functions.
#[derive(Default)]
pub struct Reclaimer {
    ready: Mutex<Vec<Chain>>,
}

impl fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reclaimer").field("ready_chains", &lock(&self.ready).len()).finish()
    }
}

impl Reclaimer {
    /// A reclaimer to share between queues.
    pub fn new() -> Arc<Self> {
        Arc::new(Reclaimer::default())
    }

    fn push(&self, chain: Chain) {
        lock(&self.ready).push(chain);
    }

    /// Frees every chain whose grace period has passed. Returns the number of nodes freed.
    pub fn free_ready(&self) -> u64 {
        let chains = std::mem::take(&mut *lock(&self.ready));
        let mut freed = 0;
        for c in chains {
            freed += c.len;
            // SAFETY: the chain reached `ready` through the epoch collector, so no guard can
            // still see it, and taking it out of `ready` makes us its only owner.
            unsafe { c.free() };
        }
        freed
    }
}

impl Drop for Reclaimer {
    fn drop(&mut self) {
        let chains = std::mem::take(&mut *lock(&self.ready));
        for c in chains {
            // SAFETY: as in `free_ready`.
            unsafe { c.free() };
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Nodes walked by lookups on this thread (unit tests measure the cost of a lookup).
    static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one step of a walk: a lookup's, or a link followed (unit tests only).
#[inline(always)]
fn step() {
    #[cfg(test)]
    STEPS.with(|s| s.set(s.get() + 1));
}

/// Steps (see [`step`]) that `f` took on this thread (unit tests measure walks with it).
#[cfg(test)]
pub(crate) fn steps_of<R>(f: impl FnOnce() -> R) -> (R, u64) {
    STEPS.with(|s| s.set(0));
    let r = f();
    (r, STEPS.with(|s| s.get()))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A lookup by offset or by time walks a bounded number of nodes, wherever the offset is
    /// in a long queue (the broker's pull, view and send-back paths depend on it).
    #[test]
    fn lookups_cost_the_same_at_any_offset() {
        let collector = crossbeam_epoch::Collector::new();
        let handle = collector.register();
        let guard = handle.pin();
        let q = Queue::new(0, Reclaimer::new());
        const N: u64 = 200_000;
        for i in 0..N {
            q.append(Bytes::new(), 1000 + i, 0, &guard);
        }
        let bound = 4 * 64;
        for off in [0, 1, 63, 64, 65, 777, N / 3, N / 2, N / 2 + 17, N - 100, N - 1] {
            let (n, steps) = steps_of(|| q.find(off, &guard).map(|n| n.offset()));
            assert_eq!(n, Some(off));
            assert!(steps <= bound, "find({off}) walked {steps} nodes");
            let (at, steps) = steps_of(|| q.offset_at_time(1000 + off, &guard));
            assert_eq!(at, off);
            assert!(steps <= bound, "offset_at_time({}) walked {steps} nodes", 1000 + off);
        }
        // The reaper prunes the index as it unlinks: one slot per stride of what is left.
        let u = q.lock_head().unlink_while(N / 2, &guard, |_| true);
        assert_eq!(u.first_offset, N / 2);
        assert!(q.index.len() as u64 <= N / 2 / index::STRIDE + 1, "{} slots", q.index.len());
        assert_eq!(q.find(N / 2 - 1, &guard).map(|n| n.offset()), None);
        let (n, steps) = steps_of(|| q.find(N / 2 + N / 4, &guard).map(|n| n.offset()));
        assert_eq!((n, steps <= bound), (Some(N / 2 + N / 4), true), "{steps} steps");
    }
}
