//! loom models of baiji's lock-free protocols, one per named race.
//!
//! Each model starts from a fresh epoch `Collector` (never the global one) and uses payloads
//! that own a `loom::sync::Arc` (queue and engine models alike), so loom reports a leaked
//! payload as a leaked `Arc`. Under loom, reclaimed nodes are poisoned instead of deallocated
//! and every node accessor asserts it is not poisoned, so a use after reclamation fails the
//! model (invariant 4).
//!
//! Each model's doc names the bug it exists to catch as a mutant: a one-line branch in the
//! engine behind `baiji::sync::mutant`, switched on by `BAIJI_MUTANT=<name>`.
//! `.ci/loom-mutants` runs every (mutant, model) pair and requires the model to FAIL.
//!
//! Invariant numbers refer to `docs/design.md`.

mod common;

use common::{model, model_capped};
use std::sync::atomic::AtomicBool as StdBool;
use std::time::Duration;

use baiji::__private::{NodeRef, Queue, Reclaimer, WaitState, Wakeup, NODE_SIZE};
use baiji::engine::{
    AckOutcome, Engine, EngineConfig, EngineError, Filter, Group, MemoryPolicy, Message, Mode,
    PopInit, PopOutcome, PopPolicy, PopRequest, Retention, StartFrom, SubscribeOptions,
};
use bytes::Bytes;
use crossbeam_epoch::Collector;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A payload whose lifetime loom tracks: it owns a clone of a `loom::sync::Arc`.
struct Tracked {
    _alive: Arc<()>,
    bytes: Vec<u8>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

fn payload(value: u64, alive: &Arc<()>) -> Bytes {
    tracked(&value.to_le_bytes(), alive)
}

fn tracked(bytes: &[u8], alive: &Arc<()>) -> Bytes {
    Bytes::from_owner(Tracked { _alive: Arc::clone(alive), bytes: bytes.to_vec() })
}

/// An engine message whose payload is [`Tracked`].
fn msg(bytes: &[u8], alive: &Arc<()>) -> Message {
    Message::new(tracked(bytes, alive))
}

/// Asserts that the engine holds nothing any more (invariants 7 and 9).
fn assert_empty(e: &Engine) {
    let s = e.stats();
    assert_eq!(s.live_messages, 0, "invariant 7: everything acknowledged is reclaimed ({s:?})");
    assert_eq!(s.bytes_used, 0, "invariant 9: the accounting returns to zero ({s:?})");
}

fn value(b: &Bytes) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

fn engine(budget: u64, policy: MemoryPolicy) -> Engine {
    let config = EngineConfig {
        memory_budget: budget,
        policy,
        reaper_thread: false,
        spin: Duration::ZERO,
        // Nothing unheld is retained, so the reaper is as aggressive as it can be.
        retention: Retention { time: Duration::ZERO, bytes: 0 },
        ..EngineConfig::default()
    };
    match Engine::with_collector(config, Collector::new()) {
        Ok(e) => e,
        Err(e) => panic!("engine config rejected: {e}"),
    }
}

/// Invariant 1: two producers racing on the same tail get offsets 0 and 1, linked in offset
/// order with correct `prev` links.
///
/// Catches `weak_publish` (the publishing CAS without Release: the second producer reads the
/// first one's `end` through the link without happening after its write).
#[test]
fn two_producers_append() {
    model(|| {
        let alive = Arc::new(());
        let collector = Collector::new();
        let q = Arc::new(Queue::new(0, Reclaimer::new()));
        let spawn = |v: u64| {
            let (q, c, alive) = (Arc::clone(&q), collector.clone(), Arc::clone(&alive));
            thread::spawn(move || {
                let h = c.register();
                let g = h.pin();
                q.append(payload(v, &alive), 0, 0, &g).offset
            })
        };
        let (t1, t2) = (spawn(10), spawn(20));
        let (o1, o2) = (t1.join().unwrap(), t2.join().unwrap());
        assert_ne!(o1, o2, "invariant 1: each append gets its own offset");
        assert!(o1 < 2 && o2 < 2, "invariant 1: offsets are dense from 0");
        let h = collector.register();
        let g = h.pin();
        let mut prev = q.head(&g);
        let mut expect = 0;
        while let Some(n) = prev.next(&g) {
            assert_eq!(n.offset(), expect, "invariant 1: link order is offset order");
            let want = if n.offset() == o1 { 10 } else { 20 };
            assert_eq!(
                value(n.payload()),
                want,
                "the payload belongs to the offset its producer got"
            );
            assert_eq!(
                n.prev(&g).map(|p| p.end()),
                Some(prev.end()),
                "prev is set before publication"
            );
            prev = n;
            expect += 1;
        }
        assert_eq!(expect, 2);
    });
}

/// Invariant 1 for batches: a two-message batch racing a single append gets two consecutive
/// offsets (nothing lands between them), and the queue stays dense with correct `prev` links.
///
/// Catches `weak_publish` (the batch's chain published without Release).
#[test]
fn batch_vs_single_append() {
    model(|| {
        let alive = Arc::new(());
        let collector = Collector::new();
        let q = Arc::new(Queue::new(0, Reclaimer::new()));
        let batch = {
            let (q, c, alive) = (Arc::clone(&q), collector.clone(), Arc::clone(&alive));
            thread::spawn(move || {
                let h = c.register();
                let g = h.pin();
                let msgs = vec![(payload(1, &alive), 0, 0), (payload(2, &alive), 0, 0)];
                q.append_batch(msgs, &g).map(|a| a.offset)
            })
        };
        let single = {
            let h = collector.register();
            let g = h.pin();
            q.append(payload(9, &alive), 0, 0, &g).offset
        };
        let first = batch.join().unwrap().expect("a non-empty batch is appended");
        assert!(
            single == 0 && first == 1 || single == 2 && first == 0,
            "invariant 1: batch offsets are consecutive"
        );
        let h = collector.register();
        let g = h.pin();
        let mut prev = q.head(&g);
        let mut values = Vec::new();
        while let Some(n) = prev.next(&g) {
            assert_eq!(n.offset(), values.len() as u64, "invariant 1: dense");
            assert_eq!(
                n.prev(&g).map(|p| p.end()),
                Some(prev.end()),
                "prev links follow next links"
            );
            values.push(value(n.payload()));
            prev = n;
        }
        let want = if first == 0 { vec![1, 2, 9] } else { vec![9, 1, 2] };
        assert_eq!(values, want, "the batch keeps its order and stays together");
    });
}

/// Invariants 1 and 2: a reader racing with a producer sees a gap-free prefix of offsets with
/// fully written payloads.
///
/// Catches `weak_publish` (a reader sees the node before its fields).
#[test]
fn producer_vs_reader() {
    model(|| {
        let alive = Arc::new(());
        let collector = Collector::new();
        let q = Arc::new(Queue::new(5, Reclaimer::new()));
        let producer = {
            let (q, c, alive) = (Arc::clone(&q), collector.clone(), Arc::clone(&alive));
            thread::spawn(move || {
                let h = c.register();
                for v in 0..2 {
                    let g = h.pin();
                    q.append(payload(100 + v, &alive), v, 0, &g);
                }
            })
        };
        let h = collector.register();
        let g = h.pin();
        let mut n = q.head(&g);
        let mut seen = 0;
        while let Some(next) = n.next(&g) {
            assert_eq!(next.offset(), 5 + seen, "invariant 1: no gap, no reordering");
            assert_eq!(value(next.payload()), 100 + seen, "invariant 2: payload fully visible");
            n = next;
            seen += 1;
        }
        drop(g);
        producer.join().unwrap();
        assert!(seen <= 2);
    });
}

/// Invariant 4: a reader holding a `NodeRef` across guards never touches a node the reaper
/// reclaimed; invariant 7 and the `Arc` payloads: nothing leaks.
///
/// Catches `unvalidated_noderef` (`NodeRef::get` without the check against the head's `end`).
///
/// Bound 2: at 3 the exploration took 194 CPU-seconds on an idle machine (1,186 s wall at load
/// 10), the longest model in the suite by far; at 2 it took 112 s wall at load 10, and the
/// mutant is caught at 2 in 14 s (measured 2026-12-01).
#[test]
fn reader_vs_reaper() {
    model_capped(2, || {
        let alive = Arc::new(());
        let collector = Collector::new();
        let reclaimer = Reclaimer::new();
        let q = Arc::new(Queue::new(0, Arc::clone(&reclaimer)));
        {
            let h = collector.register();
            let g = h.pin();
            q.append(payload(0, &alive), 0, 0, &g);
            q.append(payload(1, &alive), 0, 0, &g);
        }
        let reader = {
            let (q, c) = (Arc::clone(&q), collector.clone());
            thread::spawn(move || {
                let h = c.register();
                let pos = {
                    let g = h.pin();
                    let first = q.head(&g).next(&g).map(|n| {
                        let _ = value(n.payload());
                        NodeRef::new(&q, n)
                    });
                    first
                };
                let g = h.pin();
                if let Some(n) = pos.and_then(|p| p.get(&q, &g)) {
                    // Touches the node again under a new guard: must still be alive.
                    let _ = value(n.payload());
                    let _ = n.next(&g).map(|m| value(m.payload()));
                }
            })
        };
        let reaper = {
            let (q, c, r) = (Arc::clone(&q), collector.clone(), Arc::clone(&reclaimer));
            thread::spawn(move || {
                let h = c.register();
                {
                    let mut head = q.lock_head();
                    let g = h.pin();
                    let u = head.unlink_while(u64::MAX, &g, |_| true);
                    assert!(u.count <= 2);
                }
                for _ in 0..2 {
                    h.pin().flush();
                    r.free_ready();
                }
            })
        };
        reader.join().unwrap();
        reaper.join().unwrap();
    });
}

/// Invariant 4 through the queue's offset index (`src/queue/index.rs`): a reader looks a
/// message up by offset, then by time, through the index while the reaper unlinks the indexed
/// nodes and frees them (two epoch flushes, so the memory is really reclaimed). The reader
/// never touches a reclaimed node and gets either the old or the new answer. The bug it
/// catches: an index entry that leads a reader to a freed node, i.e. an entry neither pruned
/// before its node is unlinked nor validated against the head when it is read. (The index
/// has both rules and either alone keeps this model green; removing both makes it fail.)
///
/// Catches `index_no_prune,unvalidated_noderef` (both rules off at once).
#[test]
fn index_lookup_vs_reaper() {
    // Bound 2: at 3 it ran past 10 CPU-minutes; the use-after-free it exists for needs one
    // preemption (the reader between loading an entry and validating it).
    model_capped(2, || {
        let alive = Arc::new(());
        let collector = Collector::new();
        let reclaimer = Reclaimer::new();
        let q = Arc::new(Queue::new(0, Arc::clone(&reclaimer)));
        {
            let h = collector.register();
            let g = h.pin();
            // Under loom the index stride is 2: offsets 0 and 2 are indexed.
            for v in 0..3 {
                q.append(payload(v, &alive), 10 + v, 0, &g);
            }
        }
        let reader = {
            let (q, c) = (Arc::clone(&q), collector.clone());
            thread::spawn(move || {
                let h = c.register();
                let g = h.pin();
                if let Some(n) = q.find(1, &g) {
                    assert_eq!(value(n.payload()), 1, "find returns the node at its offset");
                }
                // Stored at 11: offset 1, or the end (3) once the reaper took everything.
                let at = q.offset_at_time(11, &g);
                assert!(at == 1 || at == 3, "offset_at_time(11) = {at}");
            })
        };
        let reaper = {
            let (q, c, r) = (Arc::clone(&q), collector.clone(), Arc::clone(&reclaimer));
            thread::spawn(move || {
                let h = c.register();
                {
                    let mut head = q.lock_head();
                    let g = h.pin();
                    assert_eq!(head.unlink_while(u64::MAX, &g, |_| true).count, 3);
                }
                for _ in 0..2 {
                    h.pin().flush();
                    r.free_ready();
                }
            })
        };
        reader.join().unwrap();
        reaper.join().unwrap();
    });
}

/// Invariants 3 and 6: two groups acknowledge the same message concurrently while the reaper
/// runs; the message is reclaimed only after both acknowledged, and then it is reclaimed.
///
/// Catches `reaper_off_by_one` (the reaper takes a node one acknowledgement early).
#[test]
fn ack_counter_two_groups() {
    model(|| {
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let opts = SubscribeOptions { start: StartFrom::First, ..Default::default() };
        let a = e.subscribe("A", "T", opts.clone()).unwrap();
        let b = e.subscribe("B", "T", opts).unwrap();
        let alive = Arc::new(());
        e.append_to("T", 0, msg(b"m", &alive)).unwrap();
        let a_acked = Arc::new(AtomicBool::new(false));
        let ta = {
            let a_acked = Arc::clone(&a_acked);
            thread::spawn(move || {
                a_acked.store(true, Ordering::SeqCst);
                a.commit(0, 1).unwrap();
            })
        };
        // B acknowledges concurrently with A, then the reaper runs while A may still be busy.
        b.commit(0, 1).unwrap();
        if e.reap() > 0 {
            assert!(a_acked.load(Ordering::SeqCst), "invariant 3: reclaimed before A acknowledged");
        }
        ta.join().unwrap();
        e.reap();
        assert_empty(&e);
    });
}

/// Invariant 5: a group that joins "from the first offset" while a producer appends and the
/// reaper reclaims unheld messages receives every message from its start offset on.
///
/// Catches `join_unlocked` (a subscription resolving its start and opening its hold without
/// the head lock, so a reap slips between the two and takes a message the group then misses).
#[test]
fn group_joins_during_appends() {
    model(|| {
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let alive = Arc::new(());
        // One message nobody holds yet (retention zero: the reaper may take it at once).
        e.append_to("T", 0, msg(&[0], &alive)).unwrap();
        let producer = {
            let (e, alive) = (Arc::clone(&e), Arc::clone(&alive));
            thread::spawn(move || {
                e.append_to("T", 0, msg(&[1], &alive)).unwrap();
                e.reap();
            })
        };
        let g = e
            .subscribe("G", "T", SubscribeOptions { start: StartFrom::First, ..Default::default() })
            .unwrap();
        let start = g.committed(0).unwrap();
        producer.join().unwrap();
        e.reap();
        let mut c = g.join().unwrap();
        let got = c.poll(16).unwrap();
        let offsets: Vec<u64> = got.iter().map(|d| d.offset).collect();
        let want: Vec<u64> = (start..2).collect();
        assert_eq!(offsets, want, "invariant 5: every message from the join offset on is kept");
        for d in &got {
            assert_eq!(u64::from(d.payload[0]), d.offset, "payload matches offset");
        }
        assert_eq!(g.stats().dropped, 0, "invariant 3: nothing the group holds is lost");
        drop(got);
        c.commit(0, 2).unwrap();
        e.reap();
        assert_empty(&e);
    });
}

/// Invariants 5 and 7: a group leaving with a message it received but never acknowledged
/// (it acknowledged a later one) does not pin that message forever, and the other group
/// still receives everything.
///
/// Catches `leave_unsettled` (a leave that closes its hold at its frontier without settling
/// the acknowledgements above it, so its ack of offset 1 counts for the other group) and
/// `leak_payload` (reclamation that never drops a freed node's payload: loom reports the
/// leaked `Arc` of the [`Tracked`] payload).
#[test]
fn group_leaves_with_unacked() {
    model(|| {
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let opts = SubscribeOptions { start: StartFrom::First, ..Default::default() };
        let a = e.subscribe("A", "T", opts.clone()).unwrap();
        let b = e.subscribe("B", "T", opts).unwrap();
        let alive = Arc::new(());
        for i in 0..2u8 {
            e.append_to("T", 0, msg(&[i], &alive)).unwrap();
        }
        let mut ca = a.join().unwrap();
        let got = ca.poll(16).unwrap();
        assert_eq!(got.len(), 2);
        ca.ack(&got[1]).unwrap();
        // A leaves without acknowledging offset 0 while B reads, commits and reaps.
        let leaver = thread::spawn(move || {
            drop(ca);
            a.unsubscribe();
        });
        // B takes offset 0 alone, acknowledges it and lets the reaper run before it reads on:
        // A's acknowledgement of offset 1 must not count once A is gone (invariant 5).
        let mut cb = b.join().unwrap();
        let first = cb.poll(1).unwrap();
        assert_eq!(first.iter().map(|d| d.offset).collect::<Vec<_>>(), vec![0]);
        cb.ack(&first[0]).unwrap();
        e.reap();
        let rest = cb.poll(16).unwrap();
        let offsets: Vec<u64> = rest.iter().map(|d| d.offset).collect();
        assert_eq!(offsets, vec![1], "invariant 3: B's messages stay until B acknowledges");
        cb.commit(0, 2).unwrap();
        leaver.join().unwrap();
        e.reap();
        assert_empty(&e);
    });
}

/// Invariants 4 and 10: `drop-oldest` evicts under a lagging reader; the reader never touches
/// an evicted node, and every message is either delivered to the group or counted as dropped.
///
/// The producer reaps twice: crossbeam-epoch frees a bag only after two epoch advances, and
/// one flush advances at most once, so with a single reap the evicted nodes would only be
/// freed at teardown and the "never touches" half could not fail. The model records whether
/// the evicted message's payload was dropped before the reader looked again and fails if no
/// interleaving did, so it cannot go vacuous.
///
/// Catches `evict_uncounted` (an eviction the group does not count as dropped) and
/// `free_unguarded` (an unlinked chain freed without waiting for the epoch's grace period, so
/// a reader still pinned on an evicted node touches freed memory).
#[test]
fn drop_oldest_vs_lagging_reader() {
    static FREED_BEFORE_SECOND_POLL: StdBool = StdBool::new(false);
    model(|| {
        // Room for exactly two one-byte messages.
        let e = Arc::new(engine(2 * (1 + NODE_SIZE as u64), MemoryPolicy::DropOldest));
        e.create_topic("T", 1).unwrap();
        let g = e
            .subscribe("G", "T", SubscribeOptions { start: StartFrom::First, ..Default::default() })
            .unwrap();
        let alive = Arc::new(());
        // Message 0 gets its own tracker: its count shows whether its node was really freed.
        let first = Arc::new(());
        e.append_to("T", 0, msg(&[0], &first)).unwrap();
        e.append_to("T", 0, msg(&[1], &alive)).unwrap();
        let mut c = g.join().unwrap();
        let producer = {
            let (e, alive) = (Arc::clone(&e), Arc::clone(&alive));
            thread::spawn(move || {
                // Two bytes: evicting one message is not enough, so the node the reader's
                // cursor remembers is freed, not kept as the queue's dummy.
                e.append_to("T", 0, msg(&[2, 2], &alive)).unwrap();
                // Frees what the eviction unlinked: the first pass seals the deferred chain
                // and advances the epoch once, the second advances it again and frees it.
                e.reap();
                e.reap();
            })
        };
        let mut seen = Vec::new();
        for d in c.poll(1).unwrap() {
            c.ack(&d).unwrap();
            seen.push(d.offset);
        }
        producer.join().unwrap();
        if Arc::strong_count(&first) == 1 {
            // Nobody holds message 0's payload any more: its node was freed during the race.
            FREED_BEFORE_SECOND_POLL.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        for d in c.poll(16).unwrap() {
            assert_eq!(u64::from(d.payload[0]), d.offset, "payload matches offset");
            c.ack(&d).unwrap();
            seen.push(d.offset);
        }
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "invariant 8: offset order, no duplicate");
        let stats = g.stats();
        assert!(
            seen.len() as u64 + stats.dropped >= 3,
            "invariant 10: each message delivered or counted as dropped (seen {seen:?}, {stats:?})"
        );
        assert_eq!(
            stats.acked + stats.dropped,
            3,
            "invariant 9: every message is acknowledged or dropped exactly once ({stats:?})"
        );
        assert!(e.stats().bytes_used <= e.config().memory_budget, "the budget holds");
        e.reap();
        assert_empty(&e);
    });
    assert!(
        FREED_BEFORE_SECOND_POLL.load(std::sync::atomic::Ordering::SeqCst),
        "vacuous: in no interleaving were the evicted nodes freed before the reader looked again"
    );
}

/// No lost wake-up: a consumer that registers behind the last node and parks is woken by an
/// append that races with its registration (a lost wake-up is a deadlock loom reports).
///
/// Catches `append_no_wake` (an append that replaces a `WAITING` tag without waking the list).
#[test]
fn parked_consumer_wakeup() {
    model(|| {
        let alive = Arc::new(());
        let collector = Collector::new();
        let q = Arc::new(Queue::new(0, Reclaimer::new()));
        let consumer = {
            let (q, c) = (Arc::clone(&q), collector.clone());
            thread::spawn(move || {
                let h = c.register();
                loop {
                    let g = h.pin();
                    let last = q.last(&g);
                    if last.end() > 0 {
                        return;
                    }
                    match q.wait_behind(last, Wakeup::Thread(thread::current()), None, &g) {
                        WaitState::Ready => continue,
                        WaitState::Registered(id) => {
                            drop(g);
                            while q.is_waiting(id) {
                                thread::park();
                            }
                        }
                    }
                }
            })
        };
        {
            let h = collector.register();
            let g = h.pin();
            q.append(payload(1, &alive), 0, 0, &g);
        }
        consumer.join().unwrap();
    });
}

/// The same race through the engine's blocking receive (spin disabled, so it parks at once).
///
/// Catches `append_no_wake` through the engine (a consumer parked in `recv_timeout`).
#[test]
fn parked_engine_consumer_wakeup() {
    model(|| {
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let g = e.subscribe("G", "T", SubscribeOptions::default()).unwrap();
        let mut c = g.join().unwrap();
        let alive = Arc::new(());
        let producer = {
            let (e, alive) = (Arc::clone(&e), Arc::clone(&alive));
            thread::spawn(move || {
                e.append_to("T", 0, msg(b"x", &alive)).unwrap();
            })
        };
        let got = c.recv_timeout(1, Duration::from_secs(3600)).unwrap();
        assert_eq!(got.len(), 1, "woken with the message");
        producer.join().unwrap();
        c.ack(&got[0]).unwrap();
        drop(got);
        e.reap();
        assert_empty(&e);
    });
}

/// Review 2.1, interleaving 1 (invariants 3 and 10): `Group::commit` passes its `closed` check,
/// then the same group unsubscribes (closing its hold at its frontier, 0), then the commit bumps
/// nodes the group no longer holds. The stray bumps make the reaper count them as acknowledged
/// by the *other* group, which never received them: B loses them under `reject`. The commit must
/// re-check `closed` under the track's lock. Payloads are tracked for leaks.
///
/// Catches `commit_ignores_close` (the pre-fix code, injected by `.ci/loom-mutants`).
#[test]
fn commit_vs_unsubscribe() {
    model(|| {
        let alive = Arc::new(());
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let opts = SubscribeOptions { start: StartFrom::First, ..Default::default() };
        let a = e.subscribe("A", "T", opts.clone()).unwrap();
        let b = e.subscribe("B", "T", opts).unwrap();
        for v in 0..2 {
            e.append_to("T", 0, Message::new(payload(v, &alive))).unwrap();
        }
        let a2 = a.clone();
        let committer = thread::spawn(move || {
            // Before the unsubscription it succeeds; after it, it must refuse.
            let _ = a2.commit(0, 2);
        });
        a.unsubscribe();
        committer.join().unwrap();
        e.reap();
        let mut cb = b.join().unwrap();
        let got: Vec<u64> = cb.poll(16).unwrap().iter().map(|d| value(&d.payload)).collect();
        assert_eq!(got, vec![0, 1], "invariant 3: B receives what only B still holds");
        assert_eq!(b.stats().dropped, 0, "invariant 10: nothing is dropped under reject");
        cb.commit(0, 2).unwrap();
        drop(cb);
        e.reap();
        assert_eq!(e.stats().live_messages, 0, "invariant 7: acknowledged by all, reclaimed");
        assert_eq!(e.stats().bytes_used, 0, "invariant 9: accounting returns to zero");
    });
}

/// Review 2.1, interleaving 2 (invariants 5 and 7): `Group::add_member` on a broadcasting group
/// passes its `closed` check, then the group unsubscribes, then the member is added and opens a
/// hold on the closed subscription, which nobody can ever close again: every later message of
/// the topic is pinned for good. `add_member` must re-check `closed` under the membership lock.
/// Payloads are tracked for leaks.
///
/// Catches `add_member_ignores_close` (the pre-fix code, injected by `.ci/loom-mutants`).
#[test]
fn add_member_vs_unsubscribe() {
    model(|| {
        let alive = Arc::new(());
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let opts = SubscribeOptions { mode: Mode::Broadcasting, ..Default::default() };
        let g = e.subscribe("G", "T", opts).unwrap();
        let g2 = g.clone();
        let joiner = thread::spawn(move || {
            // Before the unsubscription it joins (and the unsubscription removes it); after
            // it, it must refuse.
            let _ = g2.add_member();
        });
        g.unsubscribe();
        joiner.join().unwrap();
        assert_eq!(g.stats().members, 0, "an ended subscription has no member");
        e.append_to("T", 0, Message::new(payload(7, &alive))).unwrap();
        e.reap();
        assert_eq!(e.stats().live_messages, 0, "invariant 7: an ended group pins nothing");
        assert_eq!(e.stats().bytes_used, 0, "invariant 9: accounting returns to zero");
    });
}

/// Review 2.3, `Engine::stats` (invariant 9): it computed `next_offset - first_offset`, loading
/// the end first; an append and a reaper pass between the two loads put the head past the end
/// it had loaded, and the subtraction underflowed (a panic in debug builds, a huge
/// `live_messages` in release). The race needs one preemption (between the two loads); the
/// bound is capped at 2 because a whole reaper pass at 3 takes minutes to explore. Payloads are
/// tracked for leaks.
///
/// Catches `stats_end_first` (the pre-fix code, injected by `.ci/loom-mutants`).
#[test]
fn stats_vs_reaper() {
    model_capped(2, || {
        let alive = Arc::new(());
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let producer = {
            let (e, alive) = (Arc::clone(&e), Arc::clone(&alive));
            thread::spawn(move || {
                e.append_to("T", 0, Message::new(payload(1, &alive))).unwrap();
                // Nobody holds it and retention is zero: reclaimed at once.
                e.reap();
            })
        };
        let s = e.stats();
        assert!(s.live_messages <= 1, "live messages out of range: {s:?}");
        producer.join().unwrap();
        e.reap();
        assert_eq!(e.stats().live_messages, 0, "invariant 7: unheld and expired, reclaimed");
        assert_eq!(e.stats().bytes_used, 0, "invariant 9: accounting returns to zero");
    });
}

/// Review 2.2 (invariant 9): an append that passed its "topic deleted?" check links its message
/// after `delete_topic` released the topic's queues. Nothing reaped a deleted topic, so the
/// message's bytes were never returned to the budget, which shrank for good. Payloads are
/// tracked for leaks.
///
/// Catches `no_graveyard` (the pre-fix code, injected by `.ci/loom-mutants`).
#[test]
fn delete_topic_vs_append() {
    model(|| {
        let alive = Arc::new(());
        let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
        e.create_topic("T", 1).unwrap();
        let t = e.topic("T").unwrap();
        let producer = {
            let alive = Arc::clone(&alive);
            thread::spawn(move || {
                // Accepted before the deletion, refused after it.
                let _ = t.append(0, Message::new(payload(1, &alive)));
            })
        };
        e.delete_topic("T").unwrap();
        producer.join().unwrap();
        e.reap();
        assert_eq!(e.stats().live_messages, 0, "invariant 7");
        assert_eq!(e.stats().bytes_used, 0, "invariant 9: a deleted topic's bytes come back");
    });
}

/// Review 2.3, `drop-oldest` over-eviction (invariant 10 and the policy's contract): each
/// producer that overshoots the budget evicted the *total* overshoot, including the other
/// producers' in-flight costs, so two racing producers evicted three messages where two were
/// needed (and one of them the other producer's new message). Each must evict its own share.
/// Payloads are tracked for leaks.
///
/// Catches `evict_total_overshoot` (the pre-fix code, injected by `.ci/loom-mutants`).
#[test]
fn drop_oldest_two_producers() {
    model(|| {
        let alive = Arc::new(());
        // Room for exactly two 8-byte messages, and two are there already.
        let e = Arc::new(engine(2 * (8 + NODE_SIZE as u64), MemoryPolicy::DropOldest));
        e.create_topic("T", 1).unwrap();
        for v in 0..2 {
            e.append_to("T", 0, Message::new(payload(v, &alive))).unwrap();
        }
        let producer = {
            let (e, alive) = (Arc::clone(&e), Arc::clone(&alive));
            thread::spawn(move || {
                e.append_to("T", 0, Message::new(payload(2, &alive))).unwrap();
            })
        };
        e.append_to("T", 0, Message::new(payload(3, &alive))).unwrap();
        producer.join().unwrap();
        let s = e.stats();
        assert_eq!(s.evicted_messages, 2, "two overshoots of one message each: {s:?}");
        assert_eq!(s.live_messages, 2, "both new messages are kept: {s:?}");
        assert!(s.bytes_used <= e.config().memory_budget, "the budget holds: {s:?}");
        e.reap();
        assert_eq!(e.stats().live_messages, 0, "invariant 7: unheld and expired, reclaimed");
        assert_eq!(e.stats().bytes_used, 0, "invariant 9: accounting returns to zero");
    });
}

/// Item 12 of issue 10, `Track::cursor_node` (invariant 10): a clustering consumer about to
/// wait in `recv_timeout` catches up with evictions when it looks for the node to wait behind,
/// and that catch-up's count of evicted, unacknowledged messages was discarded. An eviction
/// between the consumer's last poll and its registration was then neither acknowledged nor
/// counted as dropped. Payloads are tracked for leaks.
///
/// Catches `cursor_drops_discarded` (the pre-fix code, injected by `.ci/loom-mutants`).
#[test]
fn drop_oldest_vs_waiting_consumer() {
    model(|| {
        let alive = Arc::new(());
        // Room for exactly two 8-byte messages.
        let e = Arc::new(engine(2 * (8 + NODE_SIZE as u64), MemoryPolicy::DropOldest));
        e.create_topic("T", 1).unwrap();
        let g = e
            .subscribe("G", "T", SubscribeOptions { start: StartFrom::First, ..Default::default() })
            .unwrap();
        for v in 0..2 {
            e.append_to("T", 0, Message::new(payload(v, &alive))).unwrap();
        }
        let mut c = g.join().unwrap();
        // Received, not acknowledged: offset 0 is the group's to drop when it is evicted.
        assert_eq!(c.poll(16).unwrap().len(), 2);
        let producer = {
            let (e, alive) = (Arc::clone(&e), Arc::clone(&alive));
            thread::spawn(move || {
                // Evicts offset 0, then links offset 2 and wakes the consumer.
                e.append_to("T", 0, Message::new(payload(2, &alive))).unwrap();
            })
        };
        let got = c.recv_timeout(16, Duration::from_secs(3600)).unwrap();
        assert_eq!(got.iter().map(|d| d.offset).collect::<Vec<_>>(), vec![2], "woken with it");
        producer.join().unwrap();
        c.commit(0, 3).unwrap();
        let s = g.stats();
        assert_eq!(
            s.acked + s.dropped,
            3,
            "invariant 10: each message acknowledged or counted as dropped, once ({s:?})"
        );
        assert_eq!(s.dropped, 1, "offset 0 was evicted unacknowledged ({s:?})");
        drop(c);
        e.reap();
        assert_eq!(e.stats().live_messages, 0, "invariant 7: acknowledged by all, reclaimed");
        assert_eq!(e.stats().bytes_used, 0, "invariant 9: accounting returns to zero");
    });
}

/// A POP request for the models: up to `max` messages, invisible for 10 ms, at time `now`.
fn pop_req(max: usize, now: u64) -> PopRequest<'static> {
    const ALL: Filter = Filter::All;
    PopRequest {
        max,
        invisible_ms: 10,
        now_ms: now,
        order: false,
        attempt_id: None,
        max_attempts: 16,
        filter: &ALL,
        init: PopInit::Min,
    }
}

/// A one-queue engine with group `G` subscribed from the first offset and one tracked message.
fn pop_engine(alive: &Arc<()>) -> (Arc<Engine>, Group) {
    let e = Arc::new(engine(1 << 20, MemoryPolicy::Reject));
    e.create_topic("T", 1).unwrap();
    let g = e
        .subscribe("G", "T", SubscribeOptions { start: StartFrom::First, ..Default::default() })
        .unwrap();
    e.append_to("T", 0, msg(b"m", alive)).unwrap();
    (e, g)
}

/// POP, invariants 6 and 8: an ack racing the expiry of the same message comes out one way
/// only. Either the ack wins (the message is done and the re-pop finds nothing) or the re-pop
/// wins (the message is delivered again under a new receipt and the ack's receipt is stale);
/// never both, which would acknowledge a message that is being delivered again.
///
/// Catches `pop_receipt_unchecked` (an ack or change of invisible time that does not compare
/// the receipt's pop time with the delivery's).
#[test]
fn pop_ack_vs_expiry() {
    model(|| {
        let alive = Arc::new(());
        let (e, g) = pop_engine(&alive);
        let mut first = PopOutcome::default();
        g.pop(0, &pop_req(1, 1000), &mut first).unwrap();
        assert_eq!(first.messages.len(), 1);
        let g2 = g.clone();
        let acker = thread::spawn(move || g2.pop_ack(0, 0, 1000));
        // At 1010 the 10 ms invisible time has passed: the message is visible again.
        let mut again = PopOutcome::default();
        g.pop(0, &pop_req(1, 1010), &mut again).unwrap();
        let acked = acker.join().unwrap();
        let redelivered = again.messages.len() == 1;
        assert!(
            matches!(acked, Ok(AckOutcome::Acked)) != redelivered,
            "exactly one of the ack and the redelivery wins: ack {acked:?}, redelivered {redelivered}"
        );
        if redelivered {
            assert_eq!(again.messages[0].attempts, 2, "a redelivery is the second attempt");
            assert_eq!(g.pop_ack(0, 0, again.pop_time).unwrap(), AckOutcome::Acked);
        }
        e.reap();
        assert_empty(&e);
    });
}

/// POP: a change of invisible time racing the expiry of the same message comes out one way
/// only, and a successful change makes the old receipt stale.
///
/// Catches `pop_receipt_unchecked` (the change succeeds with the receipt the redelivery
/// replaced) and `change_keeps_receipt` (the change leaves the old receipt valid).
#[test]
fn pop_change_invisible_vs_expiry() {
    model(|| {
        let alive = Arc::new(());
        let (e, g) = pop_engine(&alive);
        let mut first = PopOutcome::default();
        g.pop(0, &pop_req(1, 1000), &mut first).unwrap();
        let g2 = g.clone();
        let changer = thread::spawn(move || g2.change_invisible(0, 0, 1000, 100, 1010));
        let mut again = PopOutcome::default();
        g.pop(0, &pop_req(1, 1010), &mut again).unwrap();
        let changed = changer.join().unwrap();
        let redelivered = again.messages.len() == 1;
        assert!(
            changed.is_ok() != redelivered,
            "exactly one of the change and the redelivery wins: {changed:?}, {redelivered}"
        );
        let receipt = match changed {
            Ok(renewed) => {
                assert!(
                    g.pop_ack(0, 0, 1000).is_err(),
                    "the receipt a change of invisible time replaced is stale"
                );
                renewed
            }
            Err(_) => again.pop_time,
        };
        assert_eq!(g.pop_ack(0, 0, receipt).unwrap(), AckOutcome::Acked);
        e.reap();
        assert_empty(&e);
    });
}

/// POP, invariant 8: two members popping the same queue at the same time never both get the
/// message within its invisible time.
///
/// Catches `pop_ignores_invisible` (a popped message treated as visible again at once).
#[test]
fn pop_two_members_same_queue() {
    model(|| {
        let alive = Arc::new(());
        let (e, g) = pop_engine(&alive);
        let g2 = g.clone();
        let other = thread::spawn(move || {
            let mut out = PopOutcome::default();
            g2.pop(0, &pop_req(1, 1000), &mut out).unwrap();
            out
        });
        let mut mine = PopOutcome::default();
        g.pop(0, &pop_req(1, 1000), &mut mine).unwrap();
        let theirs = other.join().unwrap();
        assert_eq!(
            mine.messages.len() + theirs.messages.len(),
            1,
            "invariant 8: one member gets the message, the other nothing while it is invisible"
        );
        let receipt = if mine.messages.is_empty() { theirs.pop_time } else { mine.pop_time };
        assert_eq!(g.pop_ack(0, 0, receipt).unwrap(), AckOutcome::Acked);
        e.reap();
        assert_empty(&e);
    });
}

/// The wall clock, ms since the Unix epoch (the engine stamps activity with it).
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// H3 (review-e77444b): releasing an idle POP group racing a pop of it comes out one way only.
/// Either the pop finds the group ended (`NotAMember`), or it hands the message out and the
/// group is kept, because that message is in flight and invisible; never a pop that hands a
/// message out and a release that then forgets it (the message would be lost to the group).
///
/// Catches `idle_checked_before_locks` (the release decides from what it saw before it held
/// the group's queue locks).
#[test]
fn idle_release_vs_pop() {
    const HOUR: u64 = 3_600_000;
    model(|| {
        let alive = Arc::new(());
        let (e, g) = pop_engine(&alive);
        let now = wall_ms();
        let g2 = g.clone();
        let popper = thread::spawn(move || {
            let mut out = PopOutcome::default();
            let req = PopRequest { invisible_ms: HOUR, ..pop_req(1, now) };
            g2.pop(0, &req, &mut out).map(|()| (out.messages.len(), out.pop_time))
        });
        // Half an hour on, with 1 ms of idleness enough: only an invisible message keeps it.
        let released = g.release_if_idle(Duration::from_millis(1), now + HOUR / 2);
        let popped = popper.join().unwrap();
        match popped {
            Ok((1, pop_time)) => {
                assert!(!released, "a group was released under a message it had just handed out");
                assert_eq!(g.pop_ack(0, 0, pop_time).unwrap(), AckOutcome::Acked);
                g.unsubscribe();
            }
            Err(EngineError::NotAMember) => {
                assert!(released, "the pop found the group ended, so the release ended it")
            }
            other => panic!("a pop of one retained message gave {other:?}"),
        }
        e.reap();
        assert_empty(&e);
    });
}

/// H7 (review-e77444b): a consumer's ack racing the hand-over of the same expired message for
/// revival comes out one way only. Either the ack wins (the message is done and the pop hands
/// nothing over) or the hand-over wins (the message goes to the caller under a new receipt and
/// the consumer's is stale); never both, which would copy to the retry topic a message the
/// group already acknowledged.
///
/// Catches `take_keeps_receipt` (the hand-over leaves the consumer's receipt valid).
#[test]
fn pop_ack_vs_revival() {
    model(|| {
        let alive = Arc::new(());
        let (e, g) = pop_engine(&alive);
        let revive = PopPolicy { in_place_deliveries: 1, lease_ms: 100, ..PopPolicy::IN_PLACE };
        let mut first = PopOutcome::default();
        g.pop_with(0, &pop_req(1, 1000), &revive, &mut first).unwrap();
        assert_eq!(first.messages.len(), 1);
        let g2 = g.clone();
        let acker = thread::spawn(move || g2.pop_ack(0, 0, 1000));
        // At 1010 the 10 ms invisible time has passed: the message is handed over.
        let mut again = PopOutcome::default();
        g.pop_with(0, &pop_req(1, 1010), &revive, &mut again).unwrap();
        let acked = acker.join().unwrap();
        assert!(again.messages.is_empty(), "revival: never redelivered in place");
        let handed_over = again.revive.len() == 1;
        assert!(
            matches!(acked, Ok(AckOutcome::Acked)) != handed_over,
            "exactly one of the ack and the hand-over wins: ack {acked:?}, handed over {handed_over}"
        );
        if handed_over {
            let settled = g.ack_popped(again.receipt(&again.revive[0])).unwrap();
            assert_eq!(settled.outcome, AckOutcome::Acked, "the caller settles its copy");
        }
        e.reap();
        assert_empty(&e);
    });
}

/// M2 (review-e77444b): a dead letter handed out still in flight is handed out once while its
/// lease lasts, however two members' pops race for it; the caller's ack then settles it.
///
/// Catches `take_without_lease` (a handed-over message visible again at once, so a pop a
/// millisecond later hands it out again: two dead-letter copies).
#[test]
fn dead_letter_pending_vs_pop() {
    model(|| {
        let alive = Arc::new(());
        let (e, g) = pop_engine(&alive);
        let pending = PopPolicy { dead_letter_pending: true, lease_ms: 100, ..PopPolicy::IN_PLACE };
        let one_attempt = |now| PopRequest { max_attempts: 1, ..pop_req(1, now) };
        let mut first = PopOutcome::default();
        g.pop_with(0, &one_attempt(1000), &pending, &mut first).unwrap();
        assert_eq!(first.messages.len(), 1);
        let g2 = g.clone();
        let other = thread::spawn(move || {
            let mut out = PopOutcome::default();
            let req = PopRequest { max_attempts: 1, ..pop_req(1, 1011) };
            g2.pop_with(0, &req, &pending, &mut out).unwrap();
            out
        });
        let mut mine = PopOutcome::default();
        g.pop_with(0, &one_attempt(1010), &pending, &mut mine).unwrap();
        let theirs = other.join().unwrap();
        assert_eq!(
            mine.dead.len() + theirs.dead.len(),
            1,
            "one dead letter handed out within the lease: mine {mine:?}, theirs {theirs:?}"
        );
        assert!(mine.messages.is_empty() && theirs.messages.is_empty(), "and not redelivered");
        let holder = if mine.dead.is_empty() { &theirs } else { &mine };
        let settled = g.ack_popped(holder.receipt(&holder.dead[0])).unwrap();
        assert_eq!(settled.outcome, AckOutcome::Acked);
        e.reap();
        assert_empty(&e);
    });
}

/// L7 (review-e77444b): a consumer's change of invisible time racing an ordered pop that
/// repeats the batch's attempt id with a clock read before the change comes out one way only.
/// Either the repeat restamps the message first (the change's receipt is stale) or the change
/// does (the repeat leaves the message under the change's newer receipt); never both, which
/// would move the message's pop time back and make a replaced receipt valid again.
///
/// Catches `repeat_ignores_receipt` (the repeat restamps whatever the message's pop time).
#[test]
fn ordered_repeat_vs_change() {
    model(|| {
        let alive = Arc::new(());
        let (e, g) = pop_engine(&alive);
        let ordered = |now| PopRequest {
            order: true,
            attempt_id: Some("a1"),
            invisible_ms: 1000,
            ..pop_req(1, now)
        };
        let mut first = PopOutcome::default();
        g.pop(0, &ordered(1000), &mut first).unwrap();
        assert_eq!(first.messages.len(), 1);
        let g2 = g.clone();
        let changer = thread::spawn(move || g2.change_invisible(0, 0, 1000, 500, 1005));
        // The repeat read its clock (1002) before the change's (1005).
        let mut repeat = PopOutcome::default();
        g.pop(0, &ordered(1002), &mut repeat).unwrap();
        let changed = changer.join().unwrap();
        let repeated = repeat.messages.len() == 1;
        assert!(
            changed.is_ok() != repeated,
            "exactly one of the change and the repeat wins: {changed:?}, repeated {repeated}"
        );
        assert!(g.pop_ack(0, 0, 1000).is_err(), "the first receipt stays replaced");
        let receipt = match changed {
            Ok(renewed) => renewed,
            Err(_) => repeat.pop_time,
        };
        assert_eq!(g.pop_ack(0, 0, receipt).unwrap(), AckOutcome::Acked);
        e.reap();
        assert_empty(&e);
    });
}
