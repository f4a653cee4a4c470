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

    fn caught_up(&self, ends: &[u64], queues: &[u32]) -> bool {
        queues
            .iter()
            .all(|&q| self.next[q as usize].unwrap_or(self.starts[q as usize]) == ends[q as usize])
    }
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
            let b = engine.subscribe("B", "T", first()).unwrap();
            let mut c = b.join().unwrap();
            let mut check = Checker::new("B again", &b);
            loop {
                let batch = c.recv_timeout(512, Duration::from_millis(20)).unwrap();
                check.take(&c, &batch);
                if batch.is_empty()
                    && done.load(Ordering::Acquire)
                    && check.caught_up(&ends(&engine), &all)
                {
                    return check.received;
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
        let g = engine.subscribe("C", "T", first()).unwrap();
        thread::spawn(move || {
            let all: Vec<u32> = (0..QUEUES).collect();
            let mut c = g.join().unwrap();
            let mut check = Checker::new("C", &g);
            loop {
                let batch = c.recv_timeout(512, Duration::from_millis(20)).unwrap();
                check.take(&c, &batch);
                if batch.is_empty()
                    && done.load(Ordering::Acquire)
                    && check.caught_up(&ends(&engine), &all)
                {
                    return check.received;
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
    assert!(b_received > 0 && c_received > 0);
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
    for g in engine.groups() {
        let s = g.stats();
        assert_eq!((s.backlog, s.dropped), (0, 0), "{}: nothing left, nothing dropped", s.group);
    }
}
