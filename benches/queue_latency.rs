//! Per-queue handoff latency under a paced load, and fan-out throughput with more threads than
//! cores (`harness = false`; prints Markdown tables).
//!
//! Threads, on a 2-core machine:
//! * latency cases: TWO busy threads — the producer (the bench thread, busy-waiting on `Instant`
//!   to append one 128-byte message about every 2 µs) and one consumer thread — plus, for baiji,
//!   the engine's reaper thread, which wakes every 1 ms while it has work. Two busy threads on
//!   two cores is the most this machine can run without time-slicing, so the latency cases
//!   measure the hand-off, not the scheduler (the reaper and anything else running on the box
//!   do show in the tail; the load average is printed at start and end);
//! * fan-out cases: 1 producer + 2 or 4 consumer threads = 3 or 5 busy threads on 2 cores, on
//!   purpose: they show what each design does when the OS must time-slice its threads.
//!
//! Latency = the consumer's receipt time − the timestamp the producer took just before
//! appending, both in nanoseconds since one shared `Instant` origin, carried in the payload.
//! Recorded with hdrhistogram after a warm-up of [`WARMUP`] messages, over [`MEASURED`]
//! messages, in [`ROUNDS`] interleaved rounds merged per case. Cases in the same run:
//! * `base (atomic)`: harness only — the producer stores a timestamp and a sequence number in
//!   two atomics, the consumer spins on the sequence number: the physical limit of a hand-off
//!   between two cores here;
//! * `baiji`: `TopicHandle::append` / `Consumer::recv_timeout` (spins `config.spin`, 50 µs by
//!   default, then parks), acknowledging by commit;
//! * `crossbeam unbounded`: `send` / blocking `recv`;
//! * `tokio broadcast`: capacity 1024, the consumer awaits `recv` in a current-thread runtime;
//! * `disruptor spsc`: ring of 1024 128-byte slots, `BusySpin` consumer.
//!
//! Fan-out: 1 producer appends [`FANOUT_MSGS`] messages as fast as it can (stopping at
//! [`FANOUT_DEADLINE`]), 2 or 4 consumers each receive every message: baiji (one group per
//! consumer, `recv_timeout`, commit), tokio broadcast (a lagging receiver loses messages,
//! counted as `lagged`), disruptor (one `BusySpin` handler per consumer; a full ring blocks the
//! producer). The peers run with capacity 1024 and again with 2^20 (more than the messages
//! sent: no loss, no back-pressure, like baiji within its budget).
//! Reported: messages received per second per consumer, from the producer's start to that
//! consumer's last receipt.
//!
//! Arguments that do not start with `--` filter the cases by substring (for profiling one
//! case). Without `--bench` (as under `cargo test --benches`) it only does a short smoke run. `queue_latency_mimalloc` runs this file with mimalloc as the global allocator.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use baiji::engine::{Engine, EngineConfig, Message, StartFrom, SubscribeOptions};
use bytes::Bytes;
use crossbeam_utils::CachePadded;
use disruptor::{BusySpin, Producer as _};
use hdrhistogram::Histogram;
use tokio::sync::broadcast;

/// Which global allocator this binary runs with (set by the `_mimalloc` wrapper).
pub(crate) static ALLOCATOR: OnceLock<&'static str> = OnceLock::new();

const PAYLOAD: usize = 128;
/// Pace of the latency cases.
const INTERVAL: Duration = Duration::from_micros(2);
/// Messages sent before recording starts, in each round.
const WARMUP: u64 = 20_000;
/// Messages recorded per latency case and round.
const MEASURED: u64 = 100_000;
/// The latency cases run in this many interleaved rounds (base, baiji, crossbeam, tokio,
/// disruptor, base, baiji, ...) and each case's rounds are merged, so a noisy second on this
/// shared 2-vCPU machine does not land on one case only.
const ROUNDS: usize = 4;
/// Messages the fan-out producer sends (at most; see the deadline).
const FANOUT_MSGS: u64 = 500_000;
/// The fan-out producer stops sending after this long.
const FANOUT_DEADLINE: Duration = Duration::from_secs(8);
/// Ring / channel capacity of the bounded peers.
const RING: usize = 1024;
/// A second fan-out capacity above [`FANOUT_MSGS`]: the peers then never block the producer
/// nor drop a message, like baiji, which retains everything within its memory budget.
const BIG_RING: usize = 1 << 20;

/// Set when the binary runs without `--bench` (under `cargo test`): a quick smoke run.
static SMOKE: AtomicBool = AtomicBool::new(false);

fn smoke() -> bool {
    SMOKE.load(Ordering::Relaxed)
}

fn warmup() -> u64 {
    if smoke() {
        1_000
    } else {
        WARMUP
    }
}

fn measured() -> u64 {
    if smoke() {
        5_000
    } else {
        MEASURED
    }
}

fn total() -> u64 {
    warmup() + measured()
}

fn rounds() -> usize {
    if smoke() {
        1
    } else {
        ROUNDS
    }
}

fn fanout_msgs() -> u64 {
    if smoke() {
        20_000
    } else {
        FANOUT_MSGS
    }
}

/// Spawns a named thread (names show in `perf report --sort comm`).
fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    thread::Builder::new().name(name.into()).spawn(f).expect("spawn")
}

/// Nanoseconds since the run's shared origin.
fn now_ns(origin: Instant) -> u64 {
    origin.elapsed().as_nanos() as u64
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// A 128-byte message carrying `seq` and the timestamp `ts`.
fn stamped(seq: u64, ts: u64) -> [u8; PAYLOAD] {
    let mut m = [0u8; PAYLOAD];
    m[..8].copy_from_slice(&ts.to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    m
}

/// `(seq, ts)` of a stamped message.
fn stamp_of(m: &[u8]) -> (u64, u64) {
    let ts = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
    let seq = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
    (seq, ts)
}

fn record(h: &mut Histogram<u64>, seq: u64, ts: u64, now: u64) {
    if seq >= warmup() {
        h.saturating_record(now.saturating_sub(ts).max(1));
    }
}

/// Calls `send(seq)` for `TOTAL` sequence numbers, about one every [`INTERVAL`], busy-waiting.
/// After a hiccup longer than 50 µs the schedule restarts instead of bursting to catch up.
fn pace(mut send: impl FnMut(u64)) {
    let mut next = Instant::now();
    for seq in 0..total() {
        let mut now = Instant::now();
        while now < next {
            spin_loop();
            now = Instant::now();
        }
        if now - next > Duration::from_micros(50) {
            next = now;
        }
        next += INTERVAL;
        send(seq);
    }
}

fn latency_base(origin: Instant) -> Histogram<u64> {
    struct Cell {
        seq: AtomicU64,
        ts: AtomicU64,
    }
    let cell = Arc::new(CachePadded::new(Cell { seq: AtomicU64::new(0), ts: AtomicU64::new(0) }));
    let c = Arc::clone(&cell);
    let consumer = thread::spawn(move || {
        let mut h = histogram();
        let mut last = 0;
        while last < total() {
            let s = c.seq.load(Ordering::Acquire);
            if s == last {
                spin_loop();
                continue;
            }
            let ts = c.ts.load(Ordering::Relaxed);
            let now = now_ns(origin);
            // The producer may have moved on between the two loads: then take the newer pair.
            if c.seq.load(Ordering::Acquire) != s {
                continue;
            }
            record(&mut h, s - 1, ts, now);
            last = s;
        }
        h
    });
    pace(|seq| {
        cell.ts.store(now_ns(origin), Ordering::Relaxed);
        cell.seq.store(seq + 1, Ordering::Release);
    });
    consumer.join().expect("consumer")
}

fn latency_baiji(origin: Instant) -> Histogram<u64> {
    latency_baiji_with(origin, EngineConfig::default())
}

/// Diagnostic: the same without the reaper thread (nothing is reclaimed during the case; the
/// engine frees it all when dropped), to show what the reaper's passes add to the tail.
fn latency_baiji_no_reaper(origin: Instant) -> Histogram<u64> {
    latency_baiji_with(origin, EngineConfig { reaper_thread: false, ..EngineConfig::default() })
}

fn latency_baiji_with(origin: Instant, config: EngineConfig) -> Histogram<u64> {
    let engine = Engine::new(config).expect("engine");
    engine.create_topic("lat", 1).expect("topic");
    let group = engine
        .subscribe(
            "lat",
            "lat",
            SubscribeOptions { start: StartFrom::Last, ..SubscribeOptions::default() },
        )
        .expect("subscribe");
    let mut consumer = group.join().expect("join");
    let topic = engine.topic("lat").expect("topic");
    let receiver = spawn("baiji-consumer", move || {
        let mut h = histogram();
        let mut got = 0;
        while got < total() {
            let batch = consumer.recv_timeout(32, Duration::from_millis(100)).expect("recv");
            let now = now_ns(origin);
            let Some(last) = batch.last() else { continue };
            for d in &batch {
                let (seq, ts) = stamp_of(&d.payload);
                record(&mut h, seq, ts, now);
            }
            got += batch.len() as u64;
            consumer.commit(last.queue, last.offset + 1).expect("commit");
        }
        h
    });
    pace(|seq| {
        let mut v = vec![0u8; PAYLOAD];
        let ts = now_ns(origin);
        v.copy_from_slice(&stamped(seq, ts));
        topic.append(0, Message::new(v)).expect("append");
    });
    receiver.join().expect("consumer")
}

fn latency_crossbeam(origin: Instant) -> Histogram<u64> {
    let (tx, rx) = crossbeam_channel::unbounded::<Bytes>();
    let receiver = thread::spawn(move || {
        let mut h = histogram();
        while let Ok(b) = rx.recv() {
            let now = now_ns(origin);
            let (seq, ts) = stamp_of(&b);
            record(&mut h, seq, ts, now);
            if seq + 1 == total() {
                break;
            }
        }
        h
    });
    pace(|seq| {
        let mut v = vec![0u8; PAYLOAD];
        let ts = now_ns(origin);
        v.copy_from_slice(&stamped(seq, ts));
        tx.send(Bytes::from(v)).expect("send");
    });
    receiver.join().expect("consumer")
}

fn latency_tokio(origin: Instant) -> Histogram<u64> {
    let (tx, mut rx) = broadcast::channel::<Bytes>(RING);
    let receiver = thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(async move {
            let mut h = histogram();
            let mut lagged = 0;
            loop {
                match rx.recv().await {
                    Ok(b) => {
                        let now = now_ns(origin);
                        let (seq, ts) = stamp_of(&b);
                        record(&mut h, seq, ts, now);
                        if seq + 1 == total() {
                            break;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => lagged += n,
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
            if lagged > 0 {
                println!("    tokio broadcast latency: the receiver lagged by {lagged} messages");
            }
            h
        })
    });
    pace(|seq| {
        let mut v = vec![0u8; PAYLOAD];
        let ts = now_ns(origin);
        v.copy_from_slice(&stamped(seq, ts));
        tx.send(Bytes::from(v)).expect("send");
    });
    drop(tx);
    receiver.join().expect("consumer")
}

/// A disruptor event: one 128-byte message in a preallocated slot.
struct Slot {
    data: [u8; PAYLOAD],
}

fn slot() -> Slot {
    Slot { data: [0; PAYLOAD] }
}

fn latency_disruptor(origin: Instant) -> Histogram<u64> {
    let (done_tx, done_rx) = mpsc::channel();
    let mut h = histogram();
    let handler = move |e: &Slot, _seq: i64, _end_of_batch: bool| {
        let now = now_ns(origin);
        let (seq, ts) = stamp_of(&e.data);
        record(&mut h, seq, ts, now);
        if seq + 1 == total() {
            done_tx.send(h.clone()).expect("report");
        }
    };
    let mut producer =
        disruptor::build_single_producer(RING, slot, BusySpin).handle_events_with(handler).build();
    pace(|seq| {
        let ts = now_ns(origin);
        let m = stamped(seq, ts);
        producer.publish(|e| e.data = m);
    });
    drop(producer);
    done_rx.recv().expect("histogram")
}

/// One consumer's fan-out result.
#[derive(Debug, Clone, Copy, Default)]
struct FanResult {
    received: u64,
    lagged: u64,
    /// Nanoseconds from the producer's start to this consumer's last receipt.
    span_ns: u64,
}

impl FanResult {
    fn rate(&self) -> f64 {
        self.received as f64 / (self.span_ns.max(1) as f64 / 1e9)
    }
}

/// Sends up to `FANOUT_MSGS` messages through `send` until the deadline; returns how many.
fn fan_produce(mut send: impl FnMut(u64) -> bool) -> u64 {
    let start = Instant::now();
    let mut sent = 0;
    while sent < fanout_msgs() {
        if sent % 1024 == 0 && start.elapsed() > FANOUT_DEADLINE {
            break;
        }
        if !send(sent) {
            break;
        }
        sent += 1;
    }
    sent
}

fn fanout_baiji(origin: Instant, consumers: usize) -> (u64, Vec<FanResult>) {
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    engine.create_topic("fan", 1).expect("topic");
    let final_count = Arc::new(AtomicU64::new(u64::MAX));
    let start = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for g in 0..consumers {
        let group = engine
            .subscribe(
                &format!("g{g}"),
                "fan",
                SubscribeOptions { start: StartFrom::Last, ..SubscribeOptions::default() },
            )
            .expect("subscribe");
        let mut c = group.join().expect("join");
        let (final_count, start) = (Arc::clone(&final_count), Arc::clone(&start));
        threads.push(spawn("baiji-fan-consumer", move || {
            let mut r = FanResult::default();
            let mut last = 0;
            while r.received < final_count.load(Ordering::Acquire) {
                let batch = c.recv_timeout(256, Duration::from_millis(10)).expect("recv");
                if let Some(d) = batch.last() {
                    last = now_ns(origin);
                    r.received += batch.len() as u64;
                    c.commit(d.queue, d.offset + 1).expect("commit");
                }
            }
            r.span_ns = last.saturating_sub(start.load(Ordering::Acquire));
            r
        }));
    }
    let topic = engine.topic("fan").expect("topic");
    start.store(now_ns(origin), Ordering::Release);
    let sent = fan_produce(|i| topic.append(0, Message::new(vec![i as u8; PAYLOAD])).is_ok());
    final_count.store(sent, Ordering::Release);
    let results = threads.into_iter().map(|t| t.join().expect("consumer")).collect();
    (sent, results)
}

fn fanout_tokio(origin: Instant, consumers: usize) -> (u64, Vec<FanResult>) {
    fanout_tokio_with(origin, consumers, RING)
}

fn fanout_tokio_big(origin: Instant, consumers: usize) -> (u64, Vec<FanResult>) {
    fanout_tokio_with(origin, consumers, BIG_RING)
}

fn fanout_tokio_with(origin: Instant, consumers: usize, ring: usize) -> (u64, Vec<FanResult>) {
    let (tx, _) = broadcast::channel::<Bytes>(ring);
    let start = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..consumers)
        .map(|_| {
            let mut rx = tx.subscribe();
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
                rt.block_on(async move {
                    let mut r = FanResult::default();
                    let mut last = 0;
                    loop {
                        match rx.recv().await {
                            Ok(b) => {
                                std::hint::black_box(&b);
                                last = now_ns(origin);
                                r.received += 1;
                            }
                            Err(broadcast::error::RecvError::Lagged(n)) => r.lagged += n,
                            Err(broadcast::error::RecvError::Closed) => break,
                        }
                    }
                    r.span_ns = last.saturating_sub(start.load(Ordering::Acquire));
                    r
                })
            })
        })
        .collect();
    start.store(now_ns(origin), Ordering::Release);
    let sent = fan_produce(|i| tx.send(Bytes::from(vec![i as u8; PAYLOAD])).is_ok());
    drop(tx);
    let results = threads.into_iter().map(|t| t.join().expect("consumer")).collect();
    (sent, results)
}

fn fanout_disruptor(origin: Instant, consumers: usize) -> (u64, Vec<FanResult>) {
    fanout_disruptor_with(origin, consumers, RING)
}

fn fanout_disruptor_big(origin: Instant, consumers: usize) -> (u64, Vec<FanResult>) {
    fanout_disruptor_with(origin, consumers, BIG_RING)
}

fn fanout_disruptor_with(origin: Instant, consumers: usize, ring: usize) -> (u64, Vec<FanResult>) {
    // Per consumer: messages seen and the time of the last batch's end.
    let stats: Arc<Vec<CachePadded<(AtomicU64, AtomicU64)>>> = Arc::new(
        (0..consumers).map(|_| CachePadded::new((AtomicU64::new(0), AtomicU64::new(0)))).collect(),
    );
    let handler = |i: usize| {
        let stats = Arc::clone(&stats);
        let mut seen = 0u64;
        move |e: &Slot, _seq: i64, end_of_batch: bool| {
            std::hint::black_box(e.data[0]);
            seen += 1;
            if end_of_batch {
                stats[i].0.store(seen, Ordering::Relaxed);
                stats[i].1.store(now_ns(origin), Ordering::Relaxed);
            }
        }
    };
    // Fan-out always has at least two consumers; the builder's type changes after the first.
    let mut builder = disruptor::build_single_producer(ring, slot, BusySpin)
        .handle_events_with(handler(0))
        .handle_events_with(handler(1));
    for i in 2..consumers {
        builder = builder.handle_events_with(handler(i));
    }
    let mut producer = builder.build();
    let start = now_ns(origin);
    let deadline = Instant::now() + FANOUT_DEADLINE;
    let stop = AtomicBool::new(false);
    let sent = fan_produce(|i| {
        let m = [i as u8; PAYLOAD];
        loop {
            if producer.try_publish(|e| e.data = m).is_ok() {
                return true;
            }
            if Instant::now() > deadline {
                stop.store(true, Ordering::Relaxed);
                return false;
            }
            spin_loop();
        }
    });
    // Dropping the producer joins the handlers once they processed everything published.
    drop(producer);
    let results = stats
        .iter()
        .map(|s| FanResult {
            received: s.0.load(Ordering::Relaxed),
            lagged: 0,
            span_ns: s.1.load(Ordering::Relaxed).saturating_sub(start),
        })
        .collect();
    if stop.load(Ordering::Relaxed) {
        println!("    disruptor fan-out: the ring stayed full until the deadline");
    }
    (sent, results)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

type LatencyCase = (&'static str, fn(Instant) -> Histogram<u64>);
type FanoutCase = (&'static str, fn(Instant, usize) -> (u64, Vec<FanResult>));

/// Runs the harness (the `_mimalloc` wrapper calls this too).
pub(crate) fn main() {
    let alloc = ALLOCATOR.get().copied().unwrap_or("system");
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then only a smoke run.
    SMOKE.store(!std::env::args().any(|a| a == "--bench"), Ordering::Relaxed);
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f));
    let origin = Instant::now();
    println!("# queue_latency ({alloc} allocator)\n");
    println!("load average at start: {}\n", loadavg());

    let latency: [LatencyCase; 6] = [
        ("base (atomic)", latency_base),
        ("baiji", latency_baiji),
        ("baiji, no reaper thread (diagnostic)", latency_baiji_no_reaper),
        ("crossbeam unbounded", latency_crossbeam),
        ("tokio broadcast", latency_tokio),
        ("disruptor spsc", latency_disruptor),
    ];
    println!(
        "## Handoff latency, 1 producer + 1 consumer (2 busy threads), 128 B every {} µs, \
         {} interleaved rounds of {} messages after {} warm-up\n",
        INTERVAL.as_micros(),
        rounds(),
        measured(),
        warmup()
    );
    println!(
        "| case | p50 ns | p99 ns | p99.9 ns | max ns | mean ns | p50 / base | p99.9 / base |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let latency: Vec<LatencyCase> =
        latency.into_iter().filter(|(name, _)| wanted(name) || name.starts_with("base")).collect();
    let mut merged: Vec<Histogram<u64>> = latency.iter().map(|_| histogram()).collect();
    for _ in 0..rounds() {
        for ((_, run), into) in latency.iter().zip(merged.iter_mut()) {
            into.add(run(origin)).expect("same histogram bounds");
        }
    }
    let mut base: Option<(u64, u64)> = None;
    for ((name, _), h) in latency.iter().zip(merged) {
        let (p50, p99, p999) =
            (h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.value_at_quantile(0.999));
        let b = *base.get_or_insert((p50, p999));
        println!(
            "| {name} | {p50} | {p99} | {p999} | {} | {:.0} | {:.2} | {:.2} |",
            h.max(),
            h.mean(),
            p50 as f64 / b.0.max(1) as f64,
            p999 as f64 / b.1.max(1) as f64,
        );
    }

    let fanout: [FanoutCase; 5] = [
        ("baiji", fanout_baiji),
        ("tokio broadcast (1024)", fanout_tokio),
        ("tokio broadcast (2^20)", fanout_tokio_big),
        ("disruptor (1024)", fanout_disruptor),
        ("disruptor (2^20)", fanout_disruptor_big),
    ];
    println!(
        "\n## Fan-out, 1 producer + N consumers on 2 cores (1+N busy threads), up to \
         {} messages of 128 B, each consumer sees every message\n",
        fanout_msgs()
    );
    println!("| case | consumers | sent | min received | lagged (lost) | msgs/s per consumer (min) | msgs/s per consumer (mean) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for consumers in [2usize, 4] {
        for (name, run) in fanout {
            if !wanted(&format!("fanout {name}")) {
                continue;
            }
            let (sent, results) = run(origin, consumers);
            let min_rate = results.iter().map(FanResult::rate).fold(f64::MAX, f64::min);
            let mean_rate = results.iter().map(FanResult::rate).sum::<f64>() / results.len() as f64;
            let min_recv = results.iter().map(|r| r.received).min().unwrap_or(0);
            let lagged: u64 = results.iter().map(|r| r.lagged).sum();
            println!(
                "| {name} | {consumers} | {sent} | {min_recv} | {lagged} | {min_rate:.0} | {mean_rate:.0} |"
            );
        }
    }
    println!("\nload average at end: {}", loadavg());
}
