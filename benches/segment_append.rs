//! Cost of appending a record to the shared-memory segment log (criterion).
//!
//! Threads: ONE or TWO writers (the case's name says which), plus the log's maintenance thread,
//! which makes the next 64 MiB segment ahead of need and frees the full ones; on this 2-core
//! machine the two-writer cases leave no core idle, so they show contention on the cursor word
//! as much as the machine allows.
//!
//! Cases (group `segment_append`), each for 128-byte and 4 KiB payloads:
//! * `base/vec_copy/1_thread/{128,4096}` and `base/vec_copy/2_threads/...` — the base case:
//!   copy the payload into a fresh heap buffer (`Bytes::copy_from_slice`) and drop it, what an
//!   append into heap memory costs at least;
//! * `append/1_thread/{128,4096}` and `append/2_threads/...` — `Log::append` (pin, one
//!   reservation, header and payload writes, checksums), `Reservation::commit` and the drop of
//!   the record's `Bytes` (its reference given back, so full segments are freed as the bench
//!   runs: the cost of making and freeing segments is in the figure).
//!
//! The log lives in `/dev/shm` (a tmpfs) when there is one, else in the temporary directory.
//! Two-thread cases time `iters` operations on each thread and count both threads' operations.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use baiji::shm::{Directory, Log, LogConfig, RecordMeta};
use bytes::Bytes;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use crossbeam_epoch::Collector;

type Bg<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

const SIZES: [usize; 2] = [128, 4096];

/// Runs `op` `iters` times on each of `threads` threads at once; returns the wall time.
fn timed<F: Fn() + Sync>(threads: usize, iters: u64, op: F) -> Duration {
    let barrier = Barrier::new(threads);
    let (op, barrier) = (&op, &barrier);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        op();
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("bench thread")).max().unwrap_or_default()
    })
}

fn bench_base(g: &mut Bg<'_>) {
    for size in SIZES {
        let payload = vec![7u8; size];
        for threads in [1usize, 2] {
            g.throughput(Throughput::Elements(threads as u64));
            let name = format!("base/vec_copy/{}/{size}", thread_label(threads));
            g.bench_function(name.as_str(), |b| {
                b.iter_custom(|iters| {
                    timed(threads, iters, || drop(black_box(Bytes::copy_from_slice(&payload))))
                })
            });
        }
    }
}

fn bench_append(g: &mut Bg<'_>, log: &Log) {
    for size in SIZES {
        let payload = vec![7u8; size];
        for threads in [1usize, 2] {
            g.throughput(Throughput::Elements(threads as u64));
            let name = format!("append/{}/{size}", thread_label(threads));
            g.bench_function(name.as_str(), |b| {
                b.iter_custom(|iters| {
                    timed(threads, iters, || {
                        // Each bench thread pins through its own handle, registered once.
                        thread_local! {
                            static HANDLE: std::cell::RefCell<Option<crossbeam_epoch::LocalHandle>> =
                                const { std::cell::RefCell::new(None) };
                        }
                        HANDLE.with(|h| {
                            let mut h = h.borrow_mut();
                            let handle = h.get_or_insert_with(|| log.collector().register());
                            let guard = handle.pin();
                            let meta = RecordMeta { kind: 1, stream: 1, claim: 0 };
                            let r = log.append(meta, &[&payload], &guard).expect("append");
                            drop(black_box(r.commit()));
                        })
                    })
                })
            });
        }
    }
}

fn thread_label(threads: usize) -> &'static str {
    if threads == 1 {
        "1_thread"
    } else {
        "2_threads"
    }
}

fn main() {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = base.join(format!("baiji-bench-segment-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    {
        let dir = Directory::open(&path, "bench/segment").expect("directory");
        let (log, _) =
            dir.open_log("messages", LogConfig::default(), Collector::new(), drop).expect("log");
        let mut c = Criterion::default()
            .sample_size(20)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .configure_from_args();
        let mut g = c.benchmark_group("segment_append");
        bench_base(&mut g);
        bench_append(&mut g, &log);
        g.finish();
        let s = log.stats();
        eprintln!(
            "log after the run: {} records appended, {} segments freed, {} live ({} MiB mapped)",
            s.appended_records,
            s.freed_segments,
            s.live_segments,
            s.mapped_bytes >> 20
        );
        c.final_summary();
    }
    let _ = std::fs::remove_dir_all(&path);
}
