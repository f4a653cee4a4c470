//! The run: pace producers, check deliveries, sample the broker, summarise.
//!
//! Timeline of a run (`t0` = first send):
//!
//! ```text
//! prepare → consumers join → t0 ── warm-up ──┬── measured window ──┬── drain ── stop
//!                                            measure_start          sending ends
//! ```
//! A backlog run (`--backlog`) starts its consumers' polling only after sending ended and the
//! broker's memory was sampled with everything retained.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use tokio::task::JoinHandle;

use super::payload::{self, now_ns, Stamp};
use super::stats::{
    new_histogram, BenchReport, GroupReport, Percentiles, ProcReport, SecondSample, Seen,
};
use super::{
    proc_stat, tcp_probe, BenchArgs, BenchError, BenchResult, Consumer, Driver, Producer, Received,
};

/// Counters every task updates and the progress line reads. Relaxed everywhere: they are
/// statistics read once a second, and the final values are read after joining the tasks.
struct Live {
    sent: AtomicU64,
    received: Vec<AtomicU64>,
    send_errors: AtomicU64,
    stop_consumers: AtomicBool,
    /// Messages still to send in the measured window (`--count`), else `u64::MAX`.
    remaining: AtomicU64,
}

struct LaneResult {
    lane: u32,
    next_seq: u64,
    failed: Vec<u64>,
    rtt: Histogram<u64>,
}

struct MemberResult {
    group: usize,
    seen: Seen,
    e2e: Histogram<u64>,
}

/// Runs the workload of `args` through `driver`, prints a progress line each second (unless
/// `--quiet`) and the table at the end, writes `--json`, and returns the report.
///
/// # Errors
///
/// [`BenchError`] when the arguments make no workload or the system under test cannot be
/// prepared or connected to. Failures of single sends are counted, not returned.
pub async fn run<D: Driver>(args: &BenchArgs, driver: D) -> BenchResult<BenchReport> {
    let w = args.workload()?;
    let driver = Arc::new(driver);
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let _ = now_ns(); // fix the clock anchor before anything is stamped
    let (tcp, tcp_burst) = if args.tcp_probe > 0 {
        let burst = Percentiles::of(&tcp_probe::measure(args.tcp_probe, w.size, None).await?);
        let paced = match 1_000_000_000u64.checked_div(w.rate) {
            Some(ns) => {
                let every = Some(std::time::Duration::from_nanos(ns));
                Percentiles::of(&tcp_probe::measure(args.tcp_probe, w.size, every).await?)
            }
            None => burst.clone(),
        };
        (paced, burst)
    } else {
        (Percentiles::default(), Percentiles::default())
    };
    driver.prepare(&w).await?;
    let mut pids: Vec<u32> = args.broker_pid.into_iter().collect();
    pids.extend(&args.extra_pid);
    let rss = || args.broker_pid.and_then(proc_stat::rss_kb);
    let rss_idle = rss().unwrap_or(0);

    let live = Arc::new(Live {
        sent: AtomicU64::new(0),
        received: (0..w.groups).map(|_| AtomicU64::new(0)).collect(),
        send_errors: AtomicU64::new(0),
        stop_consumers: AtomicBool::new(false),
        remaining: AtomicU64::new(w.count.unwrap_or(u64::MAX)),
    });

    // Consumers join before anything is sent, so they hold every message.
    let mut consumers = Vec::new();
    for g in 0..w.groups {
        for m in 0..w.members {
            consumers.push((g, driver.consumer(&w, g, m).await?));
        }
    }
    let mut producers = Vec::new();
    for p in 0..w.producers {
        producers.extend(driver.producer(&w, p).await?);
    }
    let lanes = producers.len();

    let t0 = Instant::now();
    let measure_start = t0 + w.warmup;
    let measure_start_ns = now_ns() + u64::try_from(w.warmup.as_nanos()).unwrap_or(u64::MAX);
    let send_end = if w.count.is_some() { None } else { Some(measure_start + w.duration) };

    let spawn_consumers = |consumers: Vec<(usize, D::Consumer)>| -> Vec<JoinHandle<MemberResult>> {
        consumers
            .into_iter()
            .map(|(g, c)| tokio::spawn(consume(c, g, Arc::clone(&live), measure_start_ns)))
            .collect()
    };
    let mut consumer_tasks = Vec::new();
    let mut pending_consumers = Some(consumers);
    if !w.backlog {
        consumer_tasks = spawn_consumers(pending_consumers.take().unwrap_or_default());
    }

    let interval = (w.rate > 0)
        .then(|| Duration::from_secs_f64((w.per_request * lanes) as f64 / w.rate as f64));
    let producer_tasks: Vec<JoinHandle<LaneResult>> = producers
        .into_iter()
        .enumerate()
        .map(|(i, lane)| {
            let spec = LaneSpec {
                lane: i as u32,
                first_at: t0
                    + interval.map_or(Duration::ZERO, |iv| iv.mul_f64(i as f64 / lanes as f64)),
                interval,
                measure_start,
                send_end,
                size: w.size,
                per_request: w.per_request,
                queues: w.queues,
            };
            tokio::spawn(produce(lane, spec, Arc::clone(&live)))
        })
        .collect();

    // Progress and sampling, once a second, until told to stop.
    let stop_progress = Arc::new(AtomicBool::new(false));
    let progress = tokio::spawn(progress(
        Arc::clone(&live),
        Arc::clone(&stop_progress),
        args.broker_pid,
        args.quiet,
        t0,
    ));
    // CPU and sent count at the start of the measured window.
    tokio::time::sleep_until(measure_start.into()).await;
    let cpu_start = proc_stat::cpu_total(&pids);
    let sent_at_measure = live.sent.load(Ordering::Relaxed);

    let mut lane_results = Vec::new();
    for t in producer_tasks {
        lane_results.push(t.await.map_err(|e| BenchError::Protocol(format!("producer: {e}")))?);
    }
    let sending_ended = Instant::now();
    let measured = sending_ended.saturating_duration_since(measure_start).as_secs_f64();
    let sent_total = live.sent.load(Ordering::Relaxed);
    let sent_measured = sent_total.saturating_sub(sent_at_measure);

    let mut rss_full = None;
    let mut consume_started = measure_start;
    if let Some(consumers) = pending_consumers.take() {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rss_full = rss();
        if !args.quiet {
            eprintln!(
                "backlog of {sent_total} messages sent; broker RSS {rss_full:?} KiB; consuming"
            );
        }
        consume_started = Instant::now();
        consumer_tasks = spawn_consumers(consumers);
    }
    // Drain: every group has as many deliveries as acknowledged sends, or the timeout.
    let drain_deadline = Instant::now() + w.drain_timeout;
    while Instant::now() < drain_deadline
        && live.received.iter().any(|r| r.load(Ordering::Relaxed) < sent_total)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drained = Instant::now();
    let cpu = proc_stat::cpu_total(&pids) - cpu_start;
    live.stop_consumers.store(true, Ordering::Relaxed);
    let mut members = Vec::new();
    for t in consumer_tasks {
        members.push(t.await.map_err(|e| BenchError::Protocol(format!("consumer: {e}")))?);
    }
    if w.backlog || args.broker_pid.is_some() {
        tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    }
    let rss_after = rss();
    stop_progress.store(true, Ordering::Relaxed);
    let series = progress.await.unwrap_or_default();
    driver.cleanup(&w).await;

    // Summaries.
    let mut rtt = new_histogram();
    let mut sent_per_lane = vec![0u64; lane_results.len()];
    let mut failed: HashMap<u32, Vec<u64>> = HashMap::new();
    for r in lane_results {
        let _ = rtt.add(&r.rtt);
        sent_per_lane[r.lane as usize] = r.next_seq;
        if !r.failed.is_empty() {
            failed.insert(r.lane, r.failed);
        }
    }
    let mut e2e = new_histogram();
    let mut seen: Vec<Seen> = (0..w.groups).map(|_| Seen::default()).collect();
    for m in members {
        let _ = e2e.add(&m.e2e);
        seen[m.group].merge(m.seen);
    }
    let groups: Vec<GroupReport> = seen
        .iter()
        .enumerate()
        .map(|(g, s)| GroupReport {
            group: w.group_name(g),
            received: s.received,
            lost: s.lost(&sent_per_lane, &failed),
            duplicated: s.duplicated,
            out_of_order: s.out_of_order + s.foreign,
        })
        .collect();
    let received_per_s = if w.groups == 0 {
        0.0
    } else if w.backlog {
        let secs = drained.saturating_duration_since(consume_started).as_secs_f64().max(1e-9);
        groups.iter().map(|g| g.received).sum::<u64>() as f64 / w.groups as f64 / secs
    } else {
        e2e.len() as f64 / w.groups as f64 / measured.max(1e-9)
    };
    let broker = args.broker_pid.map(|pid| {
        let peak_sampled = series.iter().filter_map(|s| s.rss_kb).max().unwrap_or(0);
        let peak = proc_stat::hwm_kb(pid).unwrap_or(0).max(peak_sampled);
        let sent_for_cpu = sent_total.saturating_sub(sent_at_measure).max(1);
        ProcReport {
            rss_idle_kb: rss_idle,
            rss_peak_kb: peak,
            rss_full_kb: rss_full,
            rss_after_kb: rss_after.unwrap_or(0),
            bytes_per_retained_msg: rss_full
                .map(|f| (f.saturating_sub(rss_idle) as f64 * 1024.0) / sent_total.max(1) as f64),
            cpu_s: cpu,
            cpu_us_per_msg: cpu * 1e6 / sent_for_cpu as f64,
        }
    });
    let clean = live.send_errors.load(Ordering::Relaxed) == 0
        && groups.iter().all(|g| g.lost == 0 && g.duplicated == 0 && g.out_of_order == 0);
    let report = BenchReport {
        system: args.system.clone(),
        driver: args.driver.clone(),
        workload: args.workload.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started_unix,
        size: w.size,
        shape: format!(
            "{} producer(s) × {} in flight × {} msg/request, {} group(s) × {} member(s), {} queue(s)",
            w.producers, w.lanes, w.per_request, w.groups, w.members, w.queues
        ),
        rate: w.rate,
        measured_s: measured,
        sent_measured,
        sent_total,
        send_errors: live.send_errors.load(Ordering::Relaxed),
        sent_per_s: sent_measured as f64 / measured.max(1e-9),
        received_per_s,
        send_rtt: Percentiles::of(&rtt),
        e2e: Percentiles::of(&e2e),
        tcp_rtt: tcp,
        tcp_rtt_burst: tcp_burst,
        groups,
        series,
        broker,
        clean,
    };
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&report)
            .map_err(|e| BenchError::Protocol(format!("results to JSON: {e}")))?;
        std::fs::write(path, json)
            .map_err(|e| BenchError::io(format!("writing {}", path.display()), e))?;
    }
    Ok(report)
}

struct LaneSpec {
    lane: u32,
    first_at: Instant,
    interval: Option<Duration>,
    measure_start: Instant,
    send_end: Option<Instant>,
    size: usize,
    per_request: usize,
    queues: u32,
}

async fn produce<P: Producer>(mut p: P, spec: LaneSpec, live: Arc<Live>) -> LaneResult {
    let mut rtt = new_histogram();
    let mut failed = Vec::new();
    let mut seq = 0u64;
    let mut queue = spec.lane % spec.queues;
    let mut next_at = spec.first_at;
    let mut msgs: Vec<Bytes> = Vec::with_capacity(spec.per_request);
    loop {
        if let Some(iv) = spec.interval {
            if next_at > Instant::now() {
                tokio::time::sleep_until(next_at.into()).await;
            }
            next_at += iv;
        }
        let now = Instant::now();
        if spec.send_end.is_some_and(|end| now >= end) {
            break;
        }
        let measuring = now >= spec.measure_start;
        let mut n = spec.per_request as u64;
        if measuring && spec.send_end.is_none() {
            // Count mode: claim this request's messages from what is left.
            let left = live
                .remaining
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| Some(r.saturating_sub(n)))
                .unwrap_or(0);
            n = n.min(left);
            if n == 0 {
                break;
            }
        }
        msgs.clear();
        let sent_ns = now_ns();
        for i in 0..n {
            let s = Stamp { producer: spec.lane, seq: seq + i, sent_ns };
            msgs.push(payload::stamp(s, spec.size));
        }
        let t = Instant::now();
        let r = p.send(queue, &msgs).await;
        let dt = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1);
        match r {
            Ok(()) => {
                live.sent.fetch_add(n, Ordering::Relaxed);
                if measuring {
                    let _ = rtt.record(dt);
                }
            }
            Err(e) => {
                if live.send_errors.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("send failed: {e}");
                }
                failed.extend(seq..seq + n);
            }
        }
        seq += n;
        queue = (queue + 1) % spec.queues;
    }
    p.close().await;
    LaneResult { lane: spec.lane, next_seq: seq, failed, rtt }
}

async fn consume<C: Consumer>(
    mut c: C,
    group: usize,
    live: Arc<Live>,
    measure_start_ns: u64,
) -> MemberResult {
    let mut seen = Seen::default();
    let mut e2e = new_histogram();
    let mut buf: Vec<Received> = Vec::with_capacity(256);
    let mut errors = 0u32;
    while !live.stop_consumers.load(Ordering::Relaxed) {
        buf.clear();
        if let Err(e) = c.poll(&mut buf, Duration::from_millis(100)).await {
            errors += 1;
            if errors <= 5 {
                eprintln!("consumer of group {group}: {e}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let now = now_ns();
        for r in &buf {
            match payload::read(&r.payload) {
                Some(s) => {
                    seen.record(r.queue, s);
                    if s.sent_ns >= measure_start_ns {
                        let at = if r.received_ns > 0 { r.received_ns } else { now };
                        let _ = e2e.record(at.saturating_sub(s.sent_ns).max(1));
                    }
                }
                None => seen.foreign += 1,
            }
        }
        live.received[group].fetch_add(buf.len() as u64, Ordering::Relaxed);
    }
    c.close().await;
    MemberResult { group, seen, e2e }
}

async fn progress(
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
    pid: Option<u32>,
    quiet: bool,
    t0: Instant,
) -> Vec<SecondSample> {
    let mut series = Vec::new();
    let mut tick =
        tokio::time::interval_at((t0 + Duration::from_secs(1)).into(), Duration::from_secs(1));
    let (mut last_sent, mut last_recv) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let sent = live.sent.load(Ordering::Relaxed);
        let recv: u64 = live.received.iter().map(|r| r.load(Ordering::Relaxed)).sum();
        let rss = pid.and_then(proc_stat::rss_kb);
        let s = SecondSample {
            t: t0.elapsed().as_secs_f64().round(),
            sent: sent - last_sent,
            received: recv - last_recv,
            rss_kb: rss,
        };
        if !quiet {
            eprintln!(
                "[{:>4.0}s] sent {:>9}/s  received {:>9}/s  total sent {:>10} received {:>10}  errors {}{}",
                s.t,
                s.sent,
                s.received,
                sent,
                recv,
                live.send_errors.load(Ordering::Relaxed),
                rss.map(|r| format!("  broker RSS {} MiB", r / 1024)).unwrap_or_default()
            );
        }
        series.push(s);
        (last_sent, last_recv) = (sent, recv);
    }
    series
}
