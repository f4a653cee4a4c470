//! Accounting under load, through the public engine API only: producers, consumer groups that
//! join, leave and lag, and the reaper thread, under each memory policy (`reject`,
//! `drop-oldest`, `block`), with a small budget so that every policy is exercised.
//!
//! Once everything is committed, per group (design.md invariants 9 and 10: "nothing accepted is
//! lost uncounted", counters exact):
//!
//! * `acked + filtered + dropped == accepted`, over the messages the group must see (everything
//!   for the groups there from the start; what came after its subscription for the late group);
//! * `dropped == 0` unless the policy is `drop-oldest`;
//!
//! and on the producer side `accepted + rejected_messages == attempted`. A group that
//! unsubscribes midway must not have counted more than was accepted. At the end the engine
//! holds no message and no byte.
//!
//! Clustering groups are read by `Consumer`s (poll, `recv_timeout`, per-message acks, consumer
//! and group commits) that join and leave; broadcasting groups have an external member
//! (`add_member` / `commit_member`, as the broker drives them) that never leaves, plus others
//! that come and go, plus `Consumer` members. Choices come from fixed seeds; the interleaving is
//! up to the scheduler, and the assertions hold for every interleaving.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use baiji::engine::NODE_SIZE;
use baiji::engine::{
    Consumer, Engine, EngineConfig, EngineError, Filter, Group, MemberId, MemoryPolicy, Message,
    Mode, Retention, StartFrom, SubscribeOptions,
};
use bytes::Bytes;

const QUEUES: u32 = 4;
const PRODUCERS: u64 = 2;
const PER_PRODUCER: u64 = 2500;
const PAYLOAD: usize = 24;
/// Room for this many messages: small enough that the policies act all the time.
const BUDGET_MESSAGES: u64 = 96;
const SEEDS: [u64; 4] = [0x5EED_0001, 0xBA11_D002, 0x0DD5_EED3, 0xC0FF_EE04];
const TAGS: [&str; 3] = ["a", "b", "c"];

#[path = "common/rng.rs"]
mod rng;
use rng::Rng;

/// What the producers did.
#[derive(Debug, Default)]
struct Sent {
    attempted: AtomicU64,
    accepted: AtomicU64,
    rejected: AtomicU64,
}

fn ends(e: &Engine) -> Vec<u64> {
    let t = e.topic("T").unwrap();
    (0..QUEUES).map(|q| t.queue_stats(q).unwrap().max_offset).collect()
}

fn lag(rng: &mut Rng) {
    match rng.below(4) {
        0 => thread::sleep(Duration::from_micros(50 + rng.below(400))),
        _ => thread::yield_now(),
    }
}

/// One producer: `PER_PRODUCER` attempts; under `block`, most through `send_async` (which waits
/// for room), the rest synchronous (refused like `reject`). `gate` is held per send so the test
/// can stop every producer between two sends.
fn produce(e: &Engine, seed: u64, sent: &Sent, gate: &RwLock<()>) {
    let mut rng = Rng(seed);
    let mut p = e.producer("T").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let block = e.config().policy == MemoryPolicy::Block;
    for i in 0..PER_PRODUCER {
        let mut payload = vec![0u8; PAYLOAD];
        payload[..8].copy_from_slice(&(seed ^ i).to_le_bytes());
        let mut msg = Message::new(Bytes::from(payload));
        if rng.below(4) != 0 {
            msg = msg.with_tag(TAGS[rng.below(3) as usize]);
        }
        let _open = gate.read().unwrap();
        sent.attempted.fetch_add(1, Ordering::SeqCst);
        let r =
            if block && rng.below(4) != 0 { rt.block_on(p.send_async(msg)) } else { p.send(msg) };
        match r {
            Ok(_) => sent.accepted.fetch_add(1, Ordering::SeqCst),
            Err(EngineError::BudgetExceeded { .. }) => sent.rejected.fetch_add(1, Ordering::SeqCst),
            Err(other) => panic!("unexpected append error {other}"),
        };
        drop(_open);
        if rng.below(8) == 0 {
            thread::yield_now();
        }
    }
}

/// Whether an error means the subscription ended (the leaving group's driver stops then).
fn ended(r: &Result<impl Sized, EngineError>) -> bool {
    matches!(r, Err(EngineError::NotAMember))
}

/// Drives a clustering group: consumers join and leave (what they did not acknowledge is
/// redelivered), poll or wait, acknowledge most messages one by one and commit now and then.
fn drive_clustering(g: &Group, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng(seed);
    let Ok(c) = g.join() else { return };
    let mut consumers: Vec<Consumer> = vec![c];
    while !stop.load(Ordering::SeqCst) {
        match rng.below(24) {
            0 if consumers.len() < 3 => match g.join() {
                Ok(c) => consumers.push(c),
                Err(EngineError::NotAMember) => return,
                Err(other) => panic!("join: {other}"),
            },
            1 if consumers.len() > 1 => {
                let i = rng.below(consumers.len() as u64) as usize;
                consumers.swap_remove(i);
            }
            2..=4 => lag(&mut rng),
            _ => {
                let i = rng.below(consumers.len() as u64) as usize;
                let c = &mut consumers[i];
                let max = 1 + rng.below(24) as usize;
                let got = if rng.below(2) == 0 {
                    c.poll(max)
                } else {
                    c.recv_timeout(max, Duration::from_micros(200 + rng.below(800)))
                };
                if ended(&got) {
                    return;
                }
                let got = got.unwrap();
                let mut last = [None; QUEUES as usize];
                for d in &got {
                    last[d.queue as usize] = Some(d.offset + 1);
                    if rng.below(10) < 7 {
                        let r = c.ack(d);
                        if ended(&r) {
                            return;
                        }
                        r.unwrap();
                    }
                }
                if rng.below(3) == 0 {
                    for (q, l) in last.iter().enumerate() {
                        let Some(to) = *l else { continue };
                        let r = if rng.below(2) == 0 {
                            c.commit(q as u32, to)
                        } else {
                            g.commit(q as u32, to)
                        };
                        match r {
                            Ok(()) | Err(EngineError::CommitBehind { .. }) => {}
                            Err(EngineError::NotAMember) => return,
                            Err(other) => panic!("commit: {other}"),
                        }
                    }
                }
            }
        }
    }
}

/// An external broadcasting member's committed position per queue, as far as it knows.
struct External {
    id: MemberId,
    pos: [u64; QUEUES as usize],
}

impl External {
    /// Commits queue `q` somewhere between its position and `end`.
    fn commit(&mut self, g: &Group, q: u32, end: u64, rng: &mut Rng) {
        let from = self.pos[q as usize].min(end);
        let to = from + rng.below(end - from + 1);
        match g.commit_member(self.id, q, to) {
            Ok(()) => self.pos[q as usize] = to,
            Err(EngineError::CommitBehind { committed, .. }) => self.pos[q as usize] = committed,
            Err(other) => panic!("commit_member: {other}"),
        }
    }
}

/// Drives a broadcasting group: its `anchor` (an external member that never leaves, so the
/// group holds from its first message to the end), external members that come and go, and
/// `Consumer` members that poll, acknowledge and commit.
fn drive_broadcasting(e: &Engine, g: &Group, anchor: MemberId, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng(seed);
    let mut externals = vec![External { id: anchor, pos: [0; QUEUES as usize] }];
    let mut consumers: Vec<Consumer> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match rng.below(24) {
            0 if externals.len() < 3 => {
                let id = g.add_member().unwrap();
                externals.push(External { id, pos: [0; QUEUES as usize] });
            }
            1 if externals.len() > 1 => {
                let i = 1 + rng.below(externals.len() as u64 - 1) as usize;
                g.remove_member(externals.swap_remove(i).id);
            }
            2 if consumers.len() < 2 => consumers.push(g.join().unwrap()),
            3 if !consumers.is_empty() => {
                let i = rng.below(consumers.len() as u64) as usize;
                consumers.swap_remove(i);
            }
            4..=6 => lag(&mut rng),
            7..=14 => {
                let i = rng.below(externals.len() as u64) as usize;
                let q = rng.below(u64::from(QUEUES)) as u32;
                let end = ends(e)[q as usize];
                externals[i].commit(g, q, end, &mut rng);
            }
            _ if !consumers.is_empty() => {
                let i = rng.below(consumers.len() as u64) as usize;
                let c = &mut consumers[i];
                let max = 1 + rng.below(24) as usize;
                let got = if rng.below(2) == 0 {
                    c.poll(max).unwrap()
                } else {
                    c.recv_timeout(max, Duration::from_micros(200 + rng.below(800))).unwrap()
                };
                let mut last = [None; QUEUES as usize];
                for d in &got {
                    last[d.queue as usize] = Some(d.offset + 1);
                    if rng.below(2) == 0 {
                        c.ack(d).unwrap();
                    }
                }
                for (q, l) in last.iter().enumerate() {
                    if let Some(to) = *l {
                        match c.commit(q as u32, to) {
                            Ok(()) | Err(EngineError::CommitBehind { .. }) => {}
                            Err(other) => panic!("member commit: {other}"),
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // Drain: the consumers leave; every remaining external member consumes everything.
    drop(consumers);
    let end = ends(e);
    for x in &externals {
        for q in 0..QUEUES {
            match g.commit_member(x.id, q, end[q as usize]) {
                Ok(()) | Err(EngineError::CommitBehind { .. }) => {}
                Err(other) => panic!("final commit_member: {other}"),
            }
        }
    }
}

fn subscribe(e: &Engine, name: &str, mode: Mode, filter: Filter, start: StartFrom) -> Group {
    e.subscribe(name, "T", SubscribeOptions { filter, start, mode }).unwrap()
}

fn run(policy: MemoryPolicy, seed: u64) {
    let ctx = format!("{policy:?}, seed {seed:#x}");
    let e = Arc::new(
        Engine::new(EngineConfig {
            memory_budget: BUDGET_MESSAGES * (PAYLOAD + NODE_SIZE) as u64,
            policy,
            retention: Retention { time: Duration::ZERO, bytes: 0 },
            spin: Duration::ZERO,
            ..EngineConfig::default()
        })
        .unwrap(),
    );
    e.create_topic("T", QUEUES).unwrap();
    let first = StartFrom::First;
    let c_all = subscribe(&e, "c-all", Mode::Clustering, Filter::All, first);
    let c_tag = subscribe(&e, "c-tag", Mode::Clustering, Filter::tags(["a"]), first);
    let b_all = subscribe(&e, "b-all", Mode::Broadcasting, Filter::All, first);
    let b_tag = subscribe(&e, "b-tag", Mode::Broadcasting, Filter::tags(["a", "b"]), first);
    let leaver = subscribe(&e, "leaver", Mode::Clustering, Filter::All, first);
    // Before the first message: the broadcasting groups hold from offset 0 on.
    let b_all_anchor = b_all.add_member().unwrap();
    let b_tag_anchor = b_tag.add_member().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Sent::default());
    let gate = Arc::new(RwLock::new(()));
    let mut drivers = Vec::new();
    for (i, g) in [&c_all, &c_tag, &leaver].into_iter().enumerate() {
        let (g, stop) = (g.clone(), Arc::clone(&stop));
        drivers.push(thread::spawn(move || drive_clustering(&g, seed + i as u64, &stop)));
    }
    for (i, (g, anchor)) in [(&b_all, b_all_anchor), (&b_tag, b_tag_anchor)].into_iter().enumerate()
    {
        let (e, g, stop) = (Arc::clone(&e), g.clone(), Arc::clone(&stop));
        drivers.push(thread::spawn(move || {
            drive_broadcasting(&e, &g, anchor, seed + 10 + i as u64, &stop)
        }));
    }
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|i| {
            let (e, sent, gate) = (Arc::clone(&e), Arc::clone(&sent), Arc::clone(&gate));
            thread::spawn(move || produce(&e, seed.wrapping_mul(31) + i, &sent, &gate))
        })
        .collect();

    // Midway: the leaver unsubscribes, and a late group subscribes from the end while no
    // producer is between its attempt and its receipt (so its start is exactly the ends).
    let deadline = Instant::now() + Duration::from_secs(120);
    while sent.attempted.load(Ordering::SeqCst) < PRODUCERS * PER_PRODUCER / 2 {
        assert!(Instant::now() < deadline, "{ctx}: producers stalled");
        thread::sleep(Duration::from_millis(1));
    }
    leaver.unsubscribe();
    let (late, late_starts) = {
        let _closed = gate.write().unwrap();
        let late = subscribe(&e, "late", Mode::Clustering, Filter::All, StartFrom::Last);
        let starts = ends(&e);
        for q in 0..QUEUES {
            assert_eq!(late.committed(q).unwrap(), starts[q as usize], "{ctx}: late start");
        }
        (late, starts)
    };
    {
        let (g, stop) = (late.clone(), Arc::clone(&stop));
        drivers.push(thread::spawn(move || drive_clustering(&g, seed + 20, &stop)));
    }

    for p in producers {
        p.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    for d in drivers {
        d.join().unwrap();
    }
    let end = ends(&e);
    for g in [&c_all, &c_tag, &late] {
        for q in 0..QUEUES {
            g.commit(q, end[q as usize]).unwrap();
        }
    }

    let attempted = sent.attempted.load(Ordering::SeqCst);
    let accepted = sent.accepted.load(Ordering::SeqCst);
    let stats = e.stats();
    assert_eq!(attempted, PRODUCERS * PER_PRODUCER, "{ctx}");
    assert_eq!(accepted, end.iter().sum::<u64>(), "{ctx}: every accepted message has an offset");
    assert_eq!(
        accepted + stats.rejected_messages,
        attempted,
        "{ctx}: accepted + rejected == attempted (test counted {} refusals)",
        sent.rejected.load(Ordering::SeqCst)
    );
    if policy == MemoryPolicy::DropOldest {
        assert_eq!(stats.rejected_messages, 0, "{ctx}: drop-oldest accepts everything");
    }
    let late_accepted: u64 = end.iter().zip(&late_starts).map(|(e, s)| e - s).sum();
    for (g, must_see) in [
        (&c_all, accepted),
        (&c_tag, accepted),
        (&b_all, accepted),
        (&b_tag, accepted),
        (&late, late_accepted),
    ] {
        let s = g.stats();
        assert_eq!(
            s.acked + s.filtered + s.dropped,
            must_see,
            "{ctx}: group {}: acked + filtered + dropped == accepted ({s:?})",
            s.group
        );
        if policy != MemoryPolicy::DropOldest {
            assert_eq!(s.dropped, 0, "{ctx}: group {}: nothing dropped ({s:?})", s.group);
        }
    }
    let s = leaver.stats();
    assert!(
        s.acked + s.filtered + s.dropped <= accepted,
        "{ctx}: the group that left counted no more than was accepted ({s:?})"
    );
    if policy != MemoryPolicy::DropOldest {
        assert_eq!(s.dropped, 0, "{ctx}: the group that left dropped nothing ({s:?})");
    }

    // Everything is acknowledged: the reaper reclaims it all and the budget is whole again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        e.reap();
        let s = e.stats();
        if s.live_messages == 0 && s.bytes_used == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{ctx}: not reclaimed: {s:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn reject_accounting_adds_up() {
    for seed in SEEDS {
        run(MemoryPolicy::Reject, seed);
    }
}

#[test]
fn drop_oldest_accounting_adds_up() {
    for seed in SEEDS {
        run(MemoryPolicy::DropOldest, seed);
    }
}

#[test]
fn block_accounting_adds_up() {
    for seed in SEEDS {
        run(MemoryPolicy::Block, seed);
    }
}
