//! Rates for the admin codes: messages in and out per second over the last 10 s, 1 min and
//! 10 min (RocketMQ's `putTps` / `getTransferredTps` windows), and each topic's put rate over
//! the last 10 s (`topicPutTps`).
//!
//! A task samples the request-path counters of the topic table once a second; the samples
//! are kept in two bounded rings (600 broker totals, 11 per-topic snapshots), so the memory is
//! bounded by the topic table. A rate over a window is the difference of the newest sample
//! and the oldest one inside the window, divided by the time between them.

use crate::sync::{Arc, Mutex};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::sync::lock;
use tokio::sync::watch;

use super::Core;

/// Broker totals kept: 10 minutes of one-second samples, plus the newest.
const TOTALS: usize = 601;
/// Per-topic snapshots kept: 10 seconds.
const TOPIC_SNAPSHOTS: usize = 11;

#[derive(Debug, Default)]
struct Samples {
    /// `(ms, messages in, messages out)`, oldest first.
    totals: VecDeque<(u64, u64, u64)>,
    /// `(ms, messages in per topic)`, oldest first.
    topics: VecDeque<(u64, HashMap<String, u64>)>,
}

/// The sampled rates (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Rates {
    samples: Mutex<Samples>,
}

/// Messages per second between the oldest sample at most `window_ms` older than the newest,
/// and the newest; 0 with fewer than two samples.
fn rate(
    samples: &VecDeque<(u64, u64, u64)>,
    window_ms: u64,
    pick: fn(&(u64, u64, u64)) -> u64,
) -> f64 {
    let Some(newest) = samples.back() else { return 0.0 };
    let Some(oldest) = samples.iter().find(|s| newest.0.saturating_sub(s.0) <= window_ms) else {
        return 0.0;
    };
    let ms = newest.0.saturating_sub(oldest.0);
    if ms == 0 {
        return 0.0;
    }
    pick(newest).saturating_sub(pick(oldest)) as f64 * 1000.0 / ms as f64
}

impl Rates {
    /// Takes one sample of the counters at `now_ms`.
    pub(crate) fn sample(&self, core: &Core, now_ms: u64) {
        let counters = core.topics.counters_all();
        let mut total_in = 0;
        let mut total_out = 0;
        let mut per_topic = HashMap::with_capacity(counters.len());
        for (topic, c) in &counters {
            let stored = c.stored_total();
            total_in += stored;
            total_out += c.delivered_total();
            per_topic.insert(topic.clone(), stored);
        }
        let mut g = lock(&self.samples);
        if g.totals.len() == TOTALS {
            g.totals.pop_front();
        }
        g.totals.push_back((now_ms, total_in, total_out));
        if g.topics.len() == TOPIC_SNAPSHOTS {
            g.topics.pop_front();
        }
        g.topics.push_back((now_ms, per_topic));
    }

    /// Messages in per second over the last 10 s, 60 s and 600 s.
    pub(crate) fn put_tps(&self) -> [f64; 3] {
        let g = lock(&self.samples);
        [10_000, 60_000, 600_000].map(|w| rate(&g.totals, w, |s| s.1))
    }

    /// Messages delivered per second over the last 10 s, 60 s and 600 s.
    pub(crate) fn get_tps(&self) -> [f64; 3] {
        let g = lock(&self.samples);
        [10_000, 60_000, 600_000].map(|w| rate(&g.totals, w, |s| s.2))
    }

    /// Messages stored in and delivered since the start, as last sampled.
    pub(crate) fn totals(&self) -> (u64, u64) {
        let g = lock(&self.samples);
        g.totals.back().map_or((0, 0), |s| (s.1, s.2))
    }

    /// `topic`'s messages in per second over the last 10 s.
    pub(crate) fn topic_put_tps(&self, topic: &str) -> f64 {
        let g = lock(&self.samples);
        let (Some(old), Some(new)) = (g.topics.front(), g.topics.back()) else { return 0.0 };
        let ms = new.0.saturating_sub(old.0);
        if ms == 0 {
            return 0.0;
        }
        let n = new.1.get(topic).copied().unwrap_or(0);
        let o = old.1.get(topic).copied().unwrap_or(0);
        n.saturating_sub(o) as f64 * 1000.0 / ms as f64
    }
}

/// Samples once a second until shutdown.
pub(crate) async fn run(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    loop {
        core.rates.sample(&core, crate::time::now_ms());
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_samples_when_rating_a_window_should_divide_the_difference_by_the_time() {
        let samples: VecDeque<(u64, u64, u64)> =
            [(0, 0, 0), (10_000, 100, 50), (20_000, 300, 50)].into_iter().collect();
        assert_eq!(rate(&samples, 10_000, |s| s.1), 20.0, "200 messages in 10 s are 20 per second");
        assert_eq!(rate(&samples, 60_000, |s| s.1), 15.0, "the whole window: 300 in 20 s");
        assert_eq!(rate(&samples, 10_000, |s| s.2), 0.0, "nothing delivered in the last 10 s");
        assert_eq!(rate(&VecDeque::new(), 10_000, |s| s.1), 0.0, "no samples, no rate");
    }
}
