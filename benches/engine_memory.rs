//! Memory cost of a retained message (`harness = false`; prints a Markdown table).
//!
//! Threads: ONE busy thread (the bench thread appends and polls) plus the engine's reaper
//! thread, which finds nothing to reclaim (the group never acknowledges) and backs off to its
//! longest pause. Timing does not matter here, only bytes, so the 2 cores are plenty.
//!
//! Retains [`FULL_COUNT`] messages of 128 bytes (each payload its own allocation, as an in-process
//! producer's `Vec<u8>`) in one topic of one queue with one clustering group that never
//! acknowledges, and reports the bookkeeping bytes per retained message beyond the payload:
//! * by the engine's own accounting: `stats().bytes_used` delta / count − 128;
//! * by the process: resident set (`/proc/self/statm`) delta / count − 128, which also counts
//!   the allocator's per-block overhead of both the payload and the node.
//!
//! Then the group's only member polls every message once (deliveries dropped, nothing
//! acknowledged) and the resident delta is read again: the first clone of a `Vec`-backed
//! `Bytes` promotes it to a shared, reference-counted buffer, one more small allocation per
//! message for as long as the message is retained.
//!
//! `engine_memory_mimalloc` runs this file with mimalloc as the global allocator.

use std::sync::OnceLock;

use baiji::engine::NODE_SIZE;
use baiji::engine::{Engine, EngineConfig, Message, StartFrom, SubscribeOptions};

/// Which global allocator this binary runs with (set by the `_mimalloc` wrapper).
pub(crate) static ALLOCATOR: OnceLock<&'static str> = OnceLock::new();

const FULL_COUNT: u64 = 1_000_000;
const PAYLOAD: u64 = 128;

/// Resident set size in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 =
        statm.split_whitespace().nth(1).and_then(|f| f.parse().ok()).expect("resident pages");
    pages * 4096
}

fn per_message(delta: u64, count: u64) -> f64 {
    delta as f64 / count as f64
}

/// Runs the measurement (the `_mimalloc` wrapper calls this too).
pub(crate) fn main() {
    let alloc = ALLOCATOR.get().copied().unwrap_or("system");
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then only a smoke run.
    let count = if std::env::args().any(|a| a == "--bench") { FULL_COUNT } else { 10_000 };
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    engine.create_topic("mem", 1).expect("topic");
    let group = engine
        .subscribe(
            "never-acks",
            "mem",
            SubscribeOptions { start: StartFrom::Last, ..SubscribeOptions::default() },
        )
        .expect("subscribe");
    let mut consumer = group.join().expect("join");
    let topic = engine.topic("mem").expect("topic");

    let used0 = engine.stats().bytes_used;
    let rss0 = rss();
    for i in 0..count {
        topic.append(0, Message::new(vec![i as u8; PAYLOAD as usize])).expect("append");
    }
    let stats = engine.stats();
    let rss1 = rss();
    assert_eq!(stats.live_messages, count, "every message is retained");

    let mut out = Vec::with_capacity(4096);
    let mut polled = 0u64;
    while polled < count {
        out.clear();
        polled += consumer.poll_into(&mut out, 4096).expect("poll") as u64;
    }
    drop(out);
    let rss2 = rss();
    assert_eq!(engine.stats().live_messages, count, "nothing was acknowledged");

    let accounted = per_message(stats.bytes_used - used0, count);
    let resident = per_message(rss1 - rss0, count);
    let resident_polled = per_message(rss2 - rss0, count);
    println!("# engine_memory ({alloc} allocator)\n");
    println!(
        "{count} retained messages of {PAYLOAD} B, one group that never acknowledges; \
         NODE_SIZE = {NODE_SIZE} B\n"
    );
    println!("| measure | bytes per message | bookkeeping beyond the payload | target ≤ 96 |");
    println!("|---|---:|---:|---|");
    for (what, per) in [
        ("engine accounting (stats().bytes_used)", accounted),
        ("process RSS, retained", resident),
        ("process RSS, retained and polled once", resident_polled),
    ] {
        let extra = per - PAYLOAD as f64;
        let verdict = if extra <= 96.0 { "met" } else { "missed" };
        println!("| {what} | {per:.1} | {extra:.1} | {verdict} |");
    }
}
