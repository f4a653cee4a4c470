//! Histograms, the delivery checker, and the results (table and JSON).

use std::collections::HashMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::payload::Stamp;

/// Latency histogram in nanoseconds, 1 µs to 100 s at 3 significant digits.
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable_histogram()))
}

#[cold]
fn unreachable_histogram() -> Histogram<u64> {
    // `new(3)` fails only for sigfig > 5; kept separate so no call site unwraps.
    panic!("hdrhistogram refused 3 significant digits")
}

/// Summary of one latency histogram, in microseconds.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// `(percentile, µs)` points from 0 to 99.999 on a log scale of 1/(1 - p), for plots.
    pub curve: Vec<(f64, f64)>,
}

impl Percentiles {
    /// Summarises a nanosecond histogram.
    pub(crate) fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let mut curve = Vec::new();
        let mut x = 0.0f64;
        while x <= 5.0 + 1e-9 {
            let q = 1.0 - 10f64.powf(-x);
            curve.push(((q * 100.0 * 1000.0).round() / 1000.0, us(q)));
            x += 0.1;
        }
        Percentiles {
            count: h.len(),
            p50: us(0.5),
            p90: us(0.9),
            p99: us(0.99),
            p999: us(0.999),
            max: h.max() as f64 / 1000.0,
            mean: h.mean() / 1000.0,
            curve,
        }
    }
}

/// Which messages one consumer member saw: a bitmap per producer lane, and the last sequence
/// per (lane, queue) to catch reordering.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    bits: HashMap<u32, Vec<u64>>,
    last: HashMap<(u32, u32), u64>,
    pub(crate) received: u64,
    pub(crate) duplicated: u64,
    pub(crate) out_of_order: u64,
    pub(crate) foreign: u64,
}

impl Seen {
    /// Records one delivery.
    pub(crate) fn record(&mut self, queue: u32, s: Stamp) {
        self.received += 1;
        let words = self.bits.entry(s.producer).or_default();
        let (w, b) = ((s.seq / 64) as usize, s.seq % 64);
        if words.len() <= w {
            words.resize(w + 1, 0);
        }
        if words[w] & (1 << b) != 0 {
            self.duplicated += 1;
        }
        words[w] |= 1 << b;
        match self.last.get_mut(&(s.producer, queue)) {
            Some(last) if s.seq < *last => self.out_of_order += 1,
            Some(last) => *last = s.seq,
            None => {
                self.last.insert((s.producer, queue), s.seq);
            }
        }
    }

    /// Folds another member's view in; a message both saw is a duplicate.
    pub(crate) fn merge(&mut self, other: Seen) {
        self.received += other.received;
        self.duplicated += other.duplicated;
        self.out_of_order += other.out_of_order;
        self.foreign += other.foreign;
        for (p, words) in other.bits {
            let mine = self.bits.entry(p).or_default();
            if mine.len() < words.len() {
                mine.resize(words.len(), 0);
            }
            for (m, w) in mine.iter_mut().zip(words) {
                self.duplicated += u64::from((*m & w).count_ones());
                *m |= w;
            }
        }
    }

    /// Messages acknowledged to producers (`acked[lane]` = sequences `0..n` minus `failed`)
    /// that this view never saw.
    pub(crate) fn lost(&self, sent: &[u64], failed: &HashMap<u32, Vec<u64>>) -> u64 {
        let mut lost = 0;
        for (lane, &n) in sent.iter().enumerate() {
            let lane = lane as u32;
            let words = self.bits.get(&lane).map(Vec::as_slice).unwrap_or(&[]);
            let seen_below_n: u64 = (0..n)
                .step_by(64)
                .map(|start| {
                    let w = words.get((start / 64) as usize).copied().unwrap_or(0);
                    let valid = (n - start).min(64);
                    let mask = if valid == 64 { u64::MAX } else { (1u64 << valid) - 1 };
                    u64::from((w & mask).count_ones())
                })
                .sum();
            let failed_here = failed.get(&lane).map_or(0, |f| f.iter().filter(|&&s| s < n).count());
            lost += n.saturating_sub(seen_below_n + failed_here as u64);
        }
        lost
    }
}

/// What one consumer group saw.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct GroupReport {
    /// Group name.
    pub group: String,
    /// Deliveries (duplicates included).
    pub received: u64,
    /// Acknowledged sends never delivered.
    pub lost: u64,
    /// Deliveries of a message already delivered.
    pub duplicated: u64,
    /// Deliveries with a lower sequence than an earlier one from the same producer lane and
    /// queue.
    pub out_of_order: u64,
}

/// One second of the run.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct SecondSample {
    /// Seconds since sending started.
    pub t: f64,
    /// Messages acknowledged in that second.
    pub sent: u64,
    /// Messages delivered in that second, all groups together.
    pub received: u64,
    /// Broker RSS at the end of that second, KiB (when a PID was given).
    pub rss_kb: Option<u64>,
}

/// The broker process as sampled from `/proc`.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ProcReport {
    /// RSS before anything was sent, KiB.
    pub rss_idle_kb: u64,
    /// Highest RSS sampled during the run, KiB.
    pub rss_peak_kb: u64,
    /// RSS with the whole backlog retained (backlog mode), KiB.
    pub rss_full_kb: Option<u64>,
    /// RSS after everything was consumed and the settle time passed, KiB.
    pub rss_after_kb: u64,
    /// (full − idle) / messages retained, bytes (backlog mode).
    pub bytes_per_retained_msg: Option<f64>,
    /// Broker CPU seconds (user + system) during the measured window.
    pub cpu_s: f64,
    /// Broker CPU microseconds per message sent in the measured window.
    pub cpu_us_per_msg: f64,
}

/// Everything one run measured; written as JSON and read back by the report generator.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct BenchReport {
    /// System label.
    pub system: String,
    /// Driver label.
    pub driver: String,
    /// Workload label.
    pub workload: String,
    /// The command line that produced this run.
    pub command: String,
    /// Unix time the run started, seconds.
    pub started_unix: u64,
    /// Payload bytes.
    pub size: usize,
    /// Producers × lanes, groups × members, queues.
    pub shape: String,
    /// Target rate (0 = max).
    pub rate: u64,
    /// Length of the measured window, seconds.
    pub measured_s: f64,
    /// Messages acknowledged in the measured window.
    pub sent_measured: u64,
    /// Messages acknowledged in total (warm-up included).
    pub sent_total: u64,
    /// Sends that failed.
    pub send_errors: u64,
    /// Acknowledged messages per second in the measured window.
    pub sent_per_s: f64,
    /// Delivered messages per second per group in the measured window.
    pub received_per_s: f64,
    /// Send round trip (request written → acknowledgement read), µs, measured window.
    pub send_rtt: Percentiles,
    /// End-to-end latency (stamp → consumer receipt), µs, messages sent in the measured window.
    pub e2e: Percentiles,
    /// Loopback TCP round trip of the same size, µs, measured just before the run at the
    /// workload's rate (back to back for a max-rate workload): the floor.
    pub tcp_rtt: Percentiles,
    /// The same round trip back to back (hot threads), µs.
    #[serde(default)]
    pub tcp_rtt_burst: Percentiles,
    /// Per group checks.
    pub groups: Vec<GroupReport>,
    /// Per second throughput.
    pub series: Vec<SecondSample>,
    /// The broker process, when a PID was given.
    pub broker: Option<ProcReport>,
    /// Whether every group received every acknowledged message exactly once and in order.
    pub clean: bool,
}

impl BenchReport {
    /// The end-of-run table.
    #[must_use]
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\n{} / {} / {}: {} B, {}, {} msg/s sent, {} msg/s received per group over {:.1} s",
            self.system,
            self.driver,
            self.workload,
            self.size,
            self.shape,
            self.sent_per_s.round(),
            self.received_per_s.round(),
            self.measured_s
        );
        let _ = writeln!(
            s,
            "{:<14} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}",
            "µs", "p50", "p90", "p99", "p99.9", "max", "samples", "msgs/s"
        );
        let row = |s: &mut String, name: &str, p: &Percentiles, rate: f64| {
            let _ = writeln!(
                s,
                "{:<14} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>11.0}",
                name, p.p50, p.p90, p.p99, p.p999, p.max, p.count, rate
            );
        };
        row(&mut s, "send rtt", &self.send_rtt, self.sent_per_s);
        row(&mut s, "end-to-end", &self.e2e, self.received_per_s);
        row(&mut s, "tcp rtt", &self.tcp_rtt, 0.0);
        if self.tcp_rtt_burst != self.tcp_rtt {
            row(&mut s, "tcp rtt burst", &self.tcp_rtt_burst, 0.0);
        }
        for g in &self.groups {
            let _ = writeln!(
                s,
                "group {:<20} received {:>10} lost {:>6} duplicated {:>6} out-of-order {:>6}",
                g.group, g.received, g.lost, g.duplicated, g.out_of_order
            );
        }
        if let Some(b) = &self.broker {
            let _ = write!(
                s,
                "broker: RSS idle {} KiB, peak {} KiB, after {} KiB; CPU {:.2} s = {:.2} µs/msg",
                b.rss_idle_kb, b.rss_peak_kb, b.rss_after_kb, b.cpu_s, b.cpu_us_per_msg
            );
            if let (Some(full), Some(per)) = (b.rss_full_kb, b.bytes_per_retained_msg) {
                let _ = write!(s, "; full backlog {full} KiB = {per:.0} B/msg");
            }
            let _ = writeln!(s);
        }
        let _ = writeln!(s, "send errors {}, clean: {}", self.send_errors, self.clean);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(producer: u32, seq: u64) -> Stamp {
        Stamp { producer, seq, sent_ns: 0 }
    }

    #[test]
    fn given_deliveries_when_checked_should_count_loss_duplicates_and_reordering() {
        let mut a = Seen::default();
        for seq in [0, 1, 3, 2, 3] {
            a.record(0, st(0, seq));
        }
        let mut b = Seen::default();
        b.record(1, st(0, 1));
        a.merge(b);
        assert_eq!(a.duplicated, 2, "seq 3 twice by one member, seq 1 by both members");
        assert_eq!(a.out_of_order, 1, "2 came after 3 on the same queue");
        let failed = HashMap::from([(0u32, vec![5u64])]);
        assert_eq!(a.lost(&[7], &failed), 2, "4 and 6 were acknowledged and never seen");
    }

    #[test]
    fn percentiles_are_in_microseconds() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            let _ = h.record(v * 1000);
        }
        let p = Percentiles::of(&h);
        assert!((p.p50 - 500.0).abs() < 1.0, "median of 1..=1000 µs is 500 µs, got {}", p.p50);
        assert!(p.curve.len() > 40, "the curve has a point per 0.1 decade");
    }
}
