//! Single-thread cost of the engine's operations (criterion).
//!
//! Threads: ONE. Everything runs on the bench thread and the engine has no reaper thread
//! (`reaper_thread: false`); the bench reaps by hand between timed chunks. On this 2-core
//! machine that leaves the other core to the OS and to whoever else compiles, so these
//! figures are the cleanest on the box: the cost of the code path itself, without cache-line
//! transfers or cross-thread frees (those show up in `engine_throughput` and `queue_latency`).
//!
//! Cases (group `engine_ops`):
//! * `base/message` — harness only: build a 128-byte [`Message`] from a shared payload and drop
//!   it, the work every append case also does, so the rest can be read net of it;
//! * `append/{0,1,4}_groups` — `TopicHandle::append` per message, with 0, 1 or 4 clustering
//!   groups subscribed (the producer's cost must not depend on the group count);
//! * `poll/batch32` — `Consumer::poll_into` of 32 ready messages (elements = 32);
//! * `ack/per_message` — `Consumer::ack` of one delivered message, in order;
//! * `commit/prefix32` — `Consumer::commit` moving the committed offset by 32 (elements = 32);
//! * `reap/unlink_8192`, `reap/free_8192`, `reap/total_8192` — the reaper pass over 8192
//!   acknowledged messages (`REAP_BATCH`): the pass that unlinks and defers them, the passes
//!   that free them once the epoch allows, and both (elements = 8192, so criterion prints the
//!   per-message cost as its throughput);
//! * peers: `peer/crossbeam_send` and `peer/crossbeam_try_recv` — crossbeam-channel unbounded
//!   on one thread, the nearest "append" and "poll" of a general-purpose channel.
//!
//! The payload is one shared 128-byte `Bytes` cloned per message (an atomic increment), as the
//! broker's payloads are slices of a received frame; `engine_throughput` allocates a fresh
//! payload per message instead.

use std::hint::black_box;
use std::time::{Duration, Instant};

use baiji::engine::{
    Consumer, Delivery, Engine, EngineConfig, Group, Message, Retention, StartFrom,
    SubscribeOptions, TopicHandle,
};
use bytes::Bytes;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};

/// Messages appended per timed chunk; the untimed clean-up (commit + reap) runs between chunks.
const CHUNK: u64 = 4096;
/// Messages one reap bench reclaims per iteration (the engine's `REAP_BATCH`).
const REAP_N: u64 = 8192;
const PAYLOAD: usize = 128;

type Bg<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

fn payload() -> Bytes {
    let b = Bytes::from(vec![7u8; PAYLOAD]);
    // Promote it to the shared representation now, so the clones in the loops are plain
    // reference-count increments.
    drop(b.clone());
    b
}

/// An engine without reaper thread whose unsubscribed messages are reclaimable at once.
fn engine() -> Engine {
    Engine::new(EngineConfig {
        reaper_thread: false,
        retention: Retention { time: Duration::ZERO, bytes: 0 },
        ..EngineConfig::default()
    })
    .expect("engine")
}

/// Reaps until `n` messages are unlinked, then twice more so the epoch lets the chains go.
fn reap_all(engine: &Engine, n: u64) {
    let mut got = 0;
    while got < n {
        let r = engine.reap();
        assert!(r > 0 || got >= n, "reap made no progress ({got} of {n})");
        got += r;
    }
    engine.reap();
    engine.reap();
}

struct Rig {
    engine: Engine,
    topic: TopicHandle,
    groups: Vec<Group>,
    payload: Bytes,
}

impl Rig {
    fn new(groups: usize) -> Self {
        let engine = engine();
        engine.create_topic("ops", 1).expect("topic");
        let groups = (0..groups)
            .map(|i| {
                engine
                    .subscribe(
                        &format!("g{i}"),
                        "ops",
                        SubscribeOptions { start: StartFrom::Last, ..SubscribeOptions::default() },
                    )
                    .expect("subscribe")
            })
            .collect();
        let topic = engine.topic("ops").expect("topic handle");
        Rig { engine, topic, groups, payload: payload() }
    }

    fn fill(&self, n: u64) -> u64 {
        let mut last = 0;
        for _ in 0..n {
            last = self.topic.append(0, Message::new(self.payload.clone())).expect("append").offset;
        }
        last + 1
    }

    /// Commits everything for every group and reclaims `n` messages.
    fn release(&self, end: u64, n: u64) {
        for g in &self.groups {
            g.commit(0, end).expect("commit");
        }
        reap_all(&self.engine, n);
    }
}

fn bench_base(g: &mut Bg<'_>) {
    let p = payload();
    g.throughput(Throughput::Elements(1));
    g.bench_function("base/message", |b| b.iter(|| black_box(Message::new(black_box(&p).clone()))));
}

fn bench_append(g: &mut Bg<'_>) {
    g.throughput(Throughput::Elements(1));
    for groups in [0usize, 1, 4] {
        let rig = Rig::new(groups);
        let name = format!("append/{groups}_groups");
        g.bench_function(name.as_str(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(CHUNK);
                    let start = Instant::now();
                    let mut end = 0;
                    for _ in 0..n {
                        end = rig
                            .topic
                            .append(0, Message::new(rig.payload.clone()))
                            .expect("append")
                            .offset;
                    }
                    total += start.elapsed();
                    rig.release(end + 1, n);
                    left -= n;
                }
                total
            })
        });
    }
}

/// A rig with one group and one member that owns the queue.
fn one_member() -> (Rig, Consumer) {
    let rig = Rig::new(1);
    let c = rig.groups[0].join().expect("join");
    (rig, c)
}

fn drain(c: &mut Consumer, n: u64) -> Vec<Delivery> {
    let mut out = Vec::with_capacity(n as usize);
    while (out.len() as u64) < n {
        let want = n as usize - out.len();
        c.poll_into(&mut out, want).expect("poll");
    }
    out
}

fn bench_poll(g: &mut Bg<'_>) {
    let (rig, mut c) = one_member();
    g.throughput(Throughput::Elements(32));
    g.bench_function("poll/batch32", |b| {
        let mut buf = Vec::with_capacity(32);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let polls = left.min(CHUNK / 32);
                let end = rig.fill(polls * 32);
                let start = Instant::now();
                for _ in 0..polls {
                    buf.clear();
                    let got = c.poll_into(&mut buf, 32).expect("poll");
                    debug_assert_eq!(got, 32);
                    black_box(&buf);
                }
                buf.clear();
                total += start.elapsed();
                c.commit(0, end).expect("commit");
                reap_all(&rig.engine, polls * 32);
                left -= polls;
            }
            total
        })
    });
}

fn bench_ack(g: &mut Bg<'_>) {
    let (rig, mut c) = one_member();
    g.throughput(Throughput::Elements(1));
    g.bench_function("ack/per_message", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                rig.fill(n);
                let got = drain(&mut c, n);
                let start = Instant::now();
                for d in &got {
                    black_box(c.ack(d).expect("ack"));
                }
                total += start.elapsed();
                drop(got);
                reap_all(&rig.engine, n);
                left -= n;
            }
            total
        })
    });
}

fn bench_commit(g: &mut Bg<'_>) {
    let (rig, mut c) = one_member();
    g.throughput(Throughput::Elements(32));
    g.bench_function("commit/prefix32", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let commits = left.min(CHUNK / 32);
                let end = rig.fill(commits * 32);
                let first = end - commits * 32;
                drop(drain(&mut c, commits * 32));
                let start = Instant::now();
                for i in 1..=commits {
                    c.commit(0, first + i * 32).expect("commit");
                }
                total += start.elapsed();
                reap_all(&rig.engine, commits * 32);
                left -= commits;
            }
            total
        })
    });
}

#[derive(Clone, Copy)]
enum ReapPart {
    Unlink,
    Free,
    Total,
}

fn bench_reap(g: &mut Bg<'_>) {
    g.throughput(Throughput::Elements(REAP_N));
    for (part, name) in [
        (ReapPart::Unlink, "reap/unlink_8192"),
        (ReapPart::Free, "reap/free_8192"),
        (ReapPart::Total, "reap/total_8192"),
    ] {
        let rig = Rig::new(1);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let end = rig.fill(REAP_N);
                    rig.groups[0].commit(0, end).expect("commit");
                    let start = Instant::now();
                    let unlinked = rig.engine.reap();
                    let mid = Instant::now();
                    assert_eq!(unlinked, REAP_N, "one pass unlinks a whole REAP_BATCH");
                    rig.engine.reap();
                    rig.engine.reap();
                    let stop = Instant::now();
                    total += match part {
                        ReapPart::Unlink => mid - start,
                        ReapPart::Free => stop - mid,
                        ReapPart::Total => stop - start,
                    };
                }
                total
            })
        });
    }
}

fn bench_peers(g: &mut Bg<'_>) {
    let p = payload();
    let (tx, rx) = crossbeam_channel::unbounded::<Message>();
    g.throughput(Throughput::Elements(1));
    g.bench_function("peer/crossbeam_send", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                let start = Instant::now();
                for _ in 0..n {
                    tx.send(Message::new(p.clone())).expect("send");
                }
                total += start.elapsed();
                while rx.try_recv().is_ok() {}
                left -= n;
            }
            total
        })
    });
    g.bench_function("peer/crossbeam_try_recv", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                for _ in 0..n {
                    tx.send(Message::new(p.clone())).expect("send");
                }
                let start = Instant::now();
                for _ in 0..n {
                    black_box(rx.try_recv().expect("recv"));
                }
                total += start.elapsed();
                left -= n;
            }
            total
        })
    });
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    {
        let mut g = c.benchmark_group("engine_ops");
        g.sampling_mode(SamplingMode::Flat);
        bench_base(&mut g);
        bench_append(&mut g);
        bench_poll(&mut g);
        bench_ack(&mut g);
        bench_commit(&mut g);
        bench_reap(&mut g);
        bench_peers(&mut g);
        g.finish();
    }
    c.final_summary();
}
