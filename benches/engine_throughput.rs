//! Burst throughput of the engine with producer and consumer threads (criterion,
//! `Throughput::Elements` = messages appended per burst).
//!
//! Threads, on a 2-core machine: each case runs P producer threads and one consumer thread per
//! group (G), plus the engine's reaper thread (parked between passes, 1–20 ms apart) and the
//! bench thread (parked while a burst runs). Busy threads = P + G, so only `1p1g` (and the
//! 1-producer/1-consumer peers and base) fit the 2 cores; every other case oversubscribes them
//! and is printed as such when it starts. The grid is kept anyway because the issue asks for
//! it: it shows how the engine behaves when the OS has to time-slice producers and consumers.
//!
//! A burst: the bench thread opens a gate, each producer appends [`BURST`] messages of 128
//! bytes (a fresh allocation per message, as a producer building messages would) to its own
//! queue, and each consumer receives with `recv_timeout` (the engine's spin-then-park) and
//! acknowledges by committing, per queue, what it polled. The burst ends when every consumer
//! has received every message. Each producer also times its own loop, printed after each case
//! as "producer ns/msg", so the producer's cost can be compared across group counts.
//!
//! In the same run: a harness-only base case (the producer bumps an atomic counter, the consumer
//! spins on it), crossbeam-channel unbounded (1 producer, 1 consumer, same `Bytes` payloads,
//! blocking `recv`) and the disruptor crate's single-producer ring (1 consumer, `BusySpin`,
//! 128-byte events copied into the preallocated slots — its natural use, without allocation).
//!
//! `engine_throughput_mimalloc` runs this same file with mimalloc as the global allocator; the
//! benchmark group's name says which allocator ran.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use baiji::engine::{Engine, EngineConfig, Message, StartFrom, SubscribeOptions};
use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};
use disruptor::{BusySpin, Producer as _};

/// Which global allocator this binary runs with (set by the `_mimalloc` wrapper).
pub(crate) static ALLOCATOR: OnceLock<&'static str> = OnceLock::new();

/// Messages each producer appends per burst.
const BURST: u64 = 8192;
const PAYLOAD: usize = 128;
/// Producer counts and group counts of the grid.
const GRID: [usize; 3] = [1, 2, 4];

/// Spawns a named thread (names show in `perf report --sort comm`).
fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    thread::Builder::new().name(name).spawn(f).expect("spawn")
}

fn fresh_payload(i: u64) -> Bytes {
    Bytes::from(vec![i as u8; PAYLOAD])
}

/// Opens bursts for the producer threads: a generation counter; `u64::MAX` means stop.
#[derive(Default)]
struct Gate {
    generation: Mutex<u64>,
    cv: Condvar,
}

impl Gate {
    fn set(&self, f: impl FnOnce(&mut u64)) {
        f(&mut self.generation.lock().expect("gate"));
        self.cv.notify_all();
    }

    /// Waits for a generation after `seen`; `false` when the gate is stopped.
    fn wait(&self, seen: &mut u64) -> bool {
        let mut g = self.generation.lock().expect("gate");
        while *g == *seen {
            g = self.cv.wait(g).expect("gate");
        }
        *seen = *g;
        *g != u64::MAX
    }
}

/// Consumers report a finished burst; the last one unparks the bench thread.
struct Done {
    count: AtomicUsize,
    of: usize,
    bench: Thread,
}

impl Done {
    fn arrive(&self) {
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.of {
            self.bench.unpark();
        }
    }

    fn wait_and_reset(&self) {
        while self.count.load(Ordering::Acquire) < self.of {
            thread::park();
        }
        self.count.store(0, Ordering::Relaxed);
    }
}

/// The shared part of every case: gate, completion, expected totals, producer timing.
struct Shared {
    gate: Gate,
    done: Done,
    /// Cumulative messages each consumer must have received at the end of the current burst.
    expected: AtomicU64,
    stop: AtomicBool,
    producer_ns: AtomicU64,
    producer_msgs: AtomicU64,
}

impl Shared {
    fn new(consumers: usize) -> Arc<Self> {
        Arc::new(Shared {
            gate: Gate::default(),
            done: Done { count: AtomicUsize::new(0), of: consumers, bench: thread::current() },
            expected: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            producer_ns: AtomicU64::new(0),
            producer_msgs: AtomicU64::new(0),
        })
    }

    /// Called by a consumer after each receive with its cumulative count.
    fn check(&self, received: u64, signalled: &mut u64) {
        let exp = self.expected.load(Ordering::Acquire);
        if received >= exp && exp > *signalled {
            *signalled = exp;
            self.done.arrive();
        }
    }

    fn producer_loop(&self, mut burst: impl FnMut()) {
        let mut seen = 0;
        while self.gate.wait(&mut seen) {
            let t = Instant::now();
            burst();
            self.producer_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            self.producer_msgs.fetch_add(BURST, Ordering::Relaxed);
        }
    }
}

/// One case: its threads and how many messages a burst appends.
struct Rig {
    shared: Arc<Shared>,
    per_consumer: u64,
    threads: Vec<JoinHandle<()>>,
    /// Kept alive until the threads are joined (the engine's reaper stops with it).
    engine: Option<Engine>,
}

impl Rig {
    fn burst(&self) -> Duration {
        self.shared.expected.fetch_add(self.per_consumer, Ordering::AcqRel);
        let start = Instant::now();
        self.shared.gate.set(|g| *g += 1);
        self.shared.done.wait_and_reset();
        start.elapsed()
    }

    fn finish(mut self, name: &str) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.gate.set(|g| *g = u64::MAX);
        for t in self.threads.drain(..) {
            t.join().expect("bench thread panicked");
        }
        let ns = self.shared.producer_ns.load(Ordering::Relaxed);
        let msgs = self.shared.producer_msgs.load(Ordering::Relaxed).max(1);
        println!(
            "    {name}: producer ns/msg {:.1} (each producer's own loop, mean over {msgs} messages)",
            ns as f64 / msgs as f64
        );
        if let Some(e) = self.engine.take() {
            let s = e.stats();
            println!(
                "    {name}: engine after the run: live {} reclaimed {} bytes_used {}",
                s.live_messages, s.reclaimed_messages, s.bytes_used
            );
        }
    }
}

fn baiji_rig(producers: usize, groups: usize) -> Rig {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    engine.create_topic("burst", producers as u32).expect("topic");
    let shared = Shared::new(groups);
    let mut threads = Vec::new();
    for g in 0..groups {
        let group = engine
            .subscribe(
                &format!("g{g}"),
                "burst",
                SubscribeOptions { start: StartFrom::Last, ..SubscribeOptions::default() },
            )
            .expect("subscribe");
        let mut consumer = group.join().expect("join");
        let shared = Arc::clone(&shared);
        threads.push(spawn(format!("consumer-{g}"), move || {
            let (mut received, mut signalled) = (0u64, 0u64);
            let mut high = vec![0u64; producers];
            let mut touched = vec![false; producers];
            while !shared.stop.load(Ordering::Acquire) {
                let got = consumer.recv_timeout(256, Duration::from_millis(10)).expect("recv");
                if got.is_empty() {
                    continue;
                }
                received += got.len() as u64;
                for d in &got {
                    let q = d.queue as usize;
                    high[q] = d.offset + 1;
                    touched[q] = true;
                }
                for q in 0..producers {
                    if std::mem::take(&mut touched[q]) {
                        consumer.commit(q as u32, high[q]).expect("commit");
                    }
                }
                drop(got);
                shared.check(received, &mut signalled);
            }
        }));
    }
    for p in 0..producers {
        let topic = engine.topic("burst").expect("topic");
        let shared = Arc::clone(&shared);
        threads.push(spawn(format!("producer-{p}"), move || {
            shared.producer_loop(|| {
                for i in 0..BURST {
                    topic.append(p as u32, Message::new(fresh_payload(i))).expect("append");
                }
            });
        }));
    }
    Rig { shared, per_consumer: producers as u64 * BURST, threads, engine: Some(engine) }
}

fn base_rig() -> Rig {
    let shared = Shared::new(1);
    let counter = Arc::new(crossbeam_utils::CachePadded::new(AtomicU64::new(0)));
    let mut threads = Vec::new();
    {
        let (shared, counter) = (Arc::clone(&shared), Arc::clone(&counter));
        threads.push(spawn("consumer".into(), move || {
            let mut signalled = 0;
            while !shared.stop.load(Ordering::Acquire) {
                let n = counter.load(Ordering::Acquire);
                shared.check(n, &mut signalled);
                std::hint::spin_loop();
            }
        }));
    }
    {
        let shared2 = Arc::clone(&shared);
        threads.push(spawn("producer".into(), move || {
            shared2.producer_loop(|| {
                for _ in 0..BURST {
                    counter.fetch_add(1, Ordering::Release);
                }
            });
        }));
    }
    Rig { shared, per_consumer: BURST, threads, engine: None }
}

fn crossbeam_rig() -> Rig {
    let shared = Shared::new(1);
    let (tx, rx) = crossbeam_channel::unbounded::<Bytes>();
    let mut threads = Vec::new();
    {
        let shared = Arc::clone(&shared);
        threads.push(spawn("consumer".into(), move || {
            let (mut received, mut signalled) = (0u64, 0u64);
            while let Ok(b) = rx.recv() {
                black_box(&b);
                drop(b);
                received += 1;
                shared.check(received, &mut signalled);
            }
        }));
    }
    {
        let shared2 = Arc::clone(&shared);
        threads.push(spawn("producer".into(), move || {
            shared2.producer_loop(|| {
                for i in 0..BURST {
                    tx.send(fresh_payload(i)).expect("send");
                }
            });
            // `tx` drops here: the consumer's `recv` returns Err and it exits.
        }));
    }
    Rig { shared, per_consumer: BURST, threads, engine: None }
}

/// A disruptor event: the 128-byte message, copied into the preallocated slot.
struct Slot {
    data: [u8; PAYLOAD],
}

fn disruptor_rig() -> Rig {
    let shared = Shared::new(1);
    let handler_shared = Arc::clone(&shared);
    let mut signalled = 0u64;
    let handler = move |e: &Slot, seq: i64, _end_of_batch: bool| {
        black_box(e.data[0]);
        handler_shared.check(seq as u64 + 1, &mut signalled);
    };
    let producer_shared = Arc::clone(&shared);
    let threads = vec![spawn("producer".into(), move || {
        let mut producer =
            disruptor::build_single_producer(4096, || Slot { data: [0; PAYLOAD] }, BusySpin)
                .handle_events_with(handler)
                .build();
        producer_shared.producer_loop(|| {
            for i in 0..BURST {
                let msg = [i as u8; PAYLOAD];
                producer.publish(|e| e.data = msg);
            }
        });
        // Dropping the producer joins the consumer thread.
    })];
    Rig { shared, per_consumer: BURST, threads, engine: None }
}

fn run_case(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    busy_threads: usize,
    elements: u64,
    make: impl FnOnce() -> Rig,
) {
    let fit = if busy_threads > 2 { "OVERSUBSCRIBES the 2 cores" } else { "fits the 2 cores" };
    // Criterion's filter is the first free argument (a regex); when it is a plain substring
    // that does not match, skip building a rig criterion would not run.
    let filter =
        std::env::args().skip(1).find(|a| !a.starts_with("--") && a.parse::<f64>().is_err());
    if filter.is_some_and(|f| {
        !f.contains(|c: char| ".*+?()[]{}|^$\\".contains(c)) && !name.contains(f.as_str())
    }) {
        return;
    }
    println!("case {name}: {busy_threads} busy threads, {fit}");
    let rig = make();
    g.throughput(Throughput::Elements(elements));
    g.bench_function(name, |b| b.iter_custom(|iters| (0..iters).map(|_| rig.burst()).sum()));
    rig.finish(name);
}

/// Runs the benches (the `_mimalloc` wrapper calls this too).
pub(crate) fn main() {
    let alloc = ALLOCATOR.get().copied().unwrap_or("system");
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    {
        let mut g = c.benchmark_group(format!("engine_throughput_{alloc}"));
        g.sampling_mode(SamplingMode::Flat);
        run_case(&mut g, "base/1p1c", 2, BURST, base_rig);
        run_case(&mut g, "crossbeam_unbounded/1p1c", 2, BURST, crossbeam_rig);
        run_case(&mut g, "disruptor_spsc/1p1c", 2, BURST, disruptor_rig);
        for p in GRID {
            for groups in GRID {
                run_case(
                    &mut g,
                    &format!("baiji/{p}p{groups}g"),
                    p + groups,
                    p as u64 * BURST,
                    || baiji_rig(p, groups),
                );
            }
        }
        g.finish();
    }
    c.final_summary();
}
