//! Stress test: 4 producer threads, 8 queues, 3 consumer groups — A from the first offset with
//! two members, B which leaves midway and subscribes again, C which joins late from the first
//! offset — and 1,000,000 messages, with the reaper thread running. Every group incarnation
//! must receive every offset of every queue from its start on, exactly once and in order; once
//! everything is committed the engine must report 0 live messages and 0 bytes.
//!
//! 8 threads on a 2-core machine: this checks correctness under preemption, not speed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use baiji::engine::{Consumer, Engine, EngineConfig, Group, Message, StartFrom, SubscribeOptions};
use bytes::Bytes;

const MESSAGES: u64 = 1_000_000;
const PRODUCERS: u64 = 4;
const QUEUES: u32 = 8;

fn first() -> SubscribeOptions {
    SubscribeOptions { start: StartFrom::First, ..Default::default() }
}

/// What one member saw: the next expected offset of each queue it read.
struct Checker {
    name: String,
    next: Vec<Option<u64>>,
    starts: Vec<u64>,
    received: u64,
}

impl Checker {
    fn new(name: &str, group: &Group) -> Self {
        let starts = (0..QUEUES).map(|q| group.committed(q).unwrap()).collect();
        Checker { name: name.into(), next: vec![None; QUEUES as usize], starts, received: 0 }
    }

    /// Checks a batch and commits what it consumed. Returns the number of messages.
    fn take(&mut self, c: &Consumer, batch: &[baiji::engine::Delivery]) -> u64 {
        let mut last: Vec<Option<u64>> = vec![None; QUEUES as usize];
        for d in batch {
            let q = d.queue as usize;
            let want = self.next[q].unwrap_or(self.starts[q]);
            assert_eq!(
                d.offset, want,
                "{}: queue {q} must deliver every offset exactly once and in order",
                self.name
            );
            assert_eq!(d.payload.len(), 16, "payload intact");
            self.next[q] = Some(d.offset + 1);
            last[q] = Some(d.offset + 1);
        }
        for (q, l) in last.iter().enumerate() {
            if let Some(end) = l {
                c.commit(q as u32, *end).unwrap();
            }
        }
        self.received += batch.len() as u64;
        batch.len() as u64
    }

    /// Messages this member must have received once caught up with `ends` on every queue.
    fn expected(&self, ends: &[u64]) -> u64 {
        (0..QUEUES as usize).map(|q| ends[q] - self.starts[q]).sum()
    }

    /// Fails the test when a member polls nothing for 20 s after the producers finished: a
    /// lost wake-up or a wedged queue must fail, not hang.
    fn not_stuck(&self, done: bool, empty: bool, since: &mut Option<Instant>, engine: &Engine) {
        if !(done && empty) {
            return;
        }
        let since = *since.get_or_insert_with(Instant::now);
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "{}: stuck: next {:?} starts {:?} ends {:?}",
            self.name,
            self.next,
            self.starts,
            ends(engine)
        );
    }

    fn caught_up(&self, ends: &[u64], queues: &[u32]) -> bool {
        queues
            .iter()
            .all(|&q| self.next[q as usize].unwrap_or(self.starts[q as usize]) == ends[q as usize])
    }
}

/// Subscribes `name` from the first retained offset and checks where it starts: exactly at the
/// head of each queue when it joined. The head only moves forward, and the new group's hold
/// keeps it from moving past the group's start, so the start must equal the head read right
/// after subscribing (and be at or past the head read before).
fn subscribe_first(engine: &Engine, name: &str) -> Group {
    let t = engine.topic("T").unwrap();
    let heads = |t: &baiji::engine::TopicHandle| -> Vec<u64> {
        (0..QUEUES).map(|q| t.queue_stats(q).unwrap().min_offset).collect()
    };
    let before = heads(&t);
    let g = engine.subscribe(name, "T", first()).unwrap();
    let after = heads(&t);
    for q in 0..QUEUES {
        let start = g.committed(q).unwrap();
        assert!(
            before[q as usize] <= start && start == after[q as usize],
            "{name}: queue {q} must start at the head when joining: before {} start {start} after {}",
            before[q as usize],
            after[q as usize]
        );
    }
    g
}

fn ends(engine: &Engine) -> Vec<u64> {
    let t = engine.topic("T").unwrap();
    (0..QUEUES).map(|q| t.queue_stats(q).unwrap().max_offset).collect()
}

#[test]
fn given_four_producers_and_three_groups_when_streaming_a_million_messages_should_deliver_exactly_once_and_reclaim_all(
) {
    let engine = Arc::new(Engine::new(EngineConfig::default()).unwrap());
    engine.create_topic("T", QUEUES).unwrap();
    let a = engine.subscribe("A", "T", first()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(PRODUCERS as usize + 1));

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (engine, sent, start) =
                (Arc::clone(&engine), Arc::clone(&sent), Arc::clone(&start));
            thread::spawn(move || {
                let mut prod = engine.producer("T").unwrap();
                start.wait();
                for i in 0..MESSAGES / PRODUCERS {
                    let mut b = [0u8; 16];
                    b[..8].copy_from_slice(&p.to_le_bytes());
                    b[8..].copy_from_slice(&i.to_le_bytes());
                    prod.send(Message::new(Bytes::copy_from_slice(&b))).unwrap();
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    // Group A: two members, splitting the queues between them.
    let members: Vec<_> =
        (0..2)
            .map(|i| {
                let (a, engine, done) = (a.clone(), Arc::clone(&engine), Arc::clone(&done));
                let mut c = a.join().unwrap();
                thread::spawn(move || {
                    let mut check = Checker::new(&format!("A member {i}"), &a);
                    let mut stuck_since: Option<Instant> = None;
                    loop {
                        let batch = c.recv_timeout(512, Duration::from_millis(20)).unwrap();
                        check.take(&c, &batch);
                        let mine = c.assignment().to_vec();
                        if done.load(Ordering::Acquire) && batch.is_empty() {
                            let since = *stuck_since.get_or_insert_with(Instant::now);
                            assert!(
                            since.elapsed() < Duration::from_secs(20),
                            "{}: stuck: queues {mine:?} next {:?} starts {:?} ends {:?} stats {:?}",
                            check.name, check.next, check.starts, ends(&engine), a.stats()
                        );
                        }
                        if batch.is_empty()
                            && done.load(Ordering::Acquire)
                            && check.caught_up(&ends(&engine), &mine)
                        {
                            // Stay a member until the other one is done too: leaving now would
                            // hand this member's (fully consumed) queues to the other one.
                            return (check.received, c);
                        }
                    }
                })
            })
            .collect();
    // Both members have joined before any message is sent, so the assignment is fixed.

    // Group B: leaves midway, then subscribes again from the first retained offset.
    let b_thread = {
        let (engine, done, sent) = (Arc::clone(&engine), Arc::clone(&done), Arc::clone(&sent));
        let b = engine.subscribe("B", "T", first()).unwrap();
        thread::spawn(move || {
            let all: Vec<u32> = (0..QUEUES).collect();
            let mut c = b.join().unwrap();
            let mut check = Checker::new("B", &b);
            while sent.load(Ordering::Relaxed) < MESSAGES / 2 {
                let batch = c.recv_timeout(512, Duration::from_millis(20)).unwrap();
                check.take(&c, &batch);
            }
            drop(c);
            b.unsubscribe();
            let b = subscribe_first(&engine, "B");
            let mut c = b.join().unwrap();
            let mut check = Checker::new("B again", &b);
            let mut stuck_since = None;
            loop {
                let batch = c.recv_timeout(512, Duration::from_millis(20)).unwrap();
                check.take(&c, &batch);
                let fin = done.load(Ordering::Acquire);
                check.not_stuck(fin, batch.is_empty(), &mut stuck_since, &engine);
                let ends = ends(&engine);
                if batch.is_empty() && fin && check.caught_up(&ends, &all) {
                    return (check.received, check.expected(&ends));
                }
            }
        })
    };

    start.wait();
    // Group C: joins late, from the first retained offset.
    while sent.load(Ordering::Relaxed) < MESSAGES / 4 {
        thread::sleep(Duration::from_millis(1));
    }
    let c_thread = {
        let (engine, done) = (Arc::clone(&engine), Arc::clone(&done));
        let g = subscribe_first(&engine, "C");
        thread::spawn(move || {
            let all: Vec<u32> = (0..QUEUES).collect();
            let mut c = g.join().unwrap();
            let mut check = Checker::new("C", &g);
            let mut stuck_since = None;
            loop {
                let batch = c.recv_timeout(512, Duration::from_millis(20)).unwrap();
                check.take(&c, &batch);
                let fin = done.load(Ordering::Acquire);
                check.not_stuck(fin, batch.is_empty(), &mut stuck_since, &engine);
                let ends = ends(&engine);
                if batch.is_empty() && fin && check.caught_up(&ends, &all) {
                    return (check.received, check.expected(&ends));
                }
            }
        })
    };

    for p in producers {
        p.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let finished: Vec<(u64, Consumer)> = members.into_iter().map(|m| m.join().unwrap()).collect();
    let a_received: u64 = finished.iter().map(|(n, _)| n).sum();
    drop(finished);
    let b_received = b_thread.join().unwrap();
    let c_received = c_thread.join().unwrap();
    assert_eq!(a_received, MESSAGES, "group A receives every message exactly once");
    // The late incarnations started where subscribe_first checked; from there each must have
    // received exactly every offset up to the end of each queue (take() checked no gap and no
    // repeat, so the count pins "exactly once").
    assert_eq!(b_received.0, b_received.1, "B again receives everything from its start");
    assert_eq!(c_received.0, c_received.1, "C receives everything from its start");
    assert!(c_received.1 > 0, "C joined before the producers finished");
    assert_eq!(ends(&engine).iter().sum::<u64>(), MESSAGES);

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = engine.stats();
        if s.live_messages == 0 && s.bytes_used == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "everything acknowledged must be reclaimed: {s:?}");
        thread::sleep(Duration::from_millis(10));
    }
    let groups = engine.groups();
    assert_eq!(groups.len(), 3, "A, B and C are still subscribed");
    for g in groups {
        let s = g.stats();
        assert_eq!((s.backlog, s.dropped), (0, 0), "{}: nothing left, nothing dropped", s.group);
    }
}
