//! Rates for the admin codes: messages in and out per second over the last 10 s, 1 min and
//! 10 min (RocketMQ's `putTps` / `getTransferredTps` windows), and each topic's put rate over
//! the last 10 s (`topicPutTps`).
//!
//! A task samples the request-path counters of the topic table once a second; the samples
//! are kept in two bounded rings (600 broker totals, 11 per-topic snapshots), so the memory is
//! bounded by the topic table. A rate over a window is the difference of the newest sample
//! and the oldest one inside the window, divided by the time between them.
//!
//! RocketMQ's stats items (`VIEW_BROKER_STATS_DATA`: `TOPIC_PUT_NUMS`, `GROUP_GET_NUMS`, …) are
//! sampled as `StatsItem` samples them: every 10 s for the minute (the last 7 samples), every
//! 10 min for the hour (7) and every hour for the day (25), each ring starting with a zero one
//! period before an item's first sample; an answer sets the live figures against the oldest
//! sample of each ring ([`Rates::stats_item`]). At most [`MAX_STATS_ITEMS`] items keep rings;
//! one beyond them answers from the broker's start.

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

/// Most stats items that keep sample rings.
pub(crate) const MAX_STATS_ITEMS: usize = 10_000;

/// Each window's sampling period (ms) and how many samples its ring keeps: RocketMQ's
/// `StatsItem` minute, hour and day lists.
const WINDOWS: [(u64, usize); 3] = [(10_000, 7), (600_000, 7), (3_600_000, 25)];

/// A RocketMQ stats name baiji counts (`BrokerStatsManager`'s constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatsName {
    /// Messages stored per topic (key: the topic).
    TopicPutNums,
    /// Body bytes stored per topic.
    TopicPutSize,
    /// Messages delivered per group and topic (key: `topic@group`).
    GroupGetNums,
    /// Bytes delivered per group and topic.
    GroupGetSize,
    /// Messages stored by the broker (key: the cluster name).
    BrokerPutNums,
    /// Messages delivered by the broker (key: the cluster name).
    BrokerGetNums,
}

impl StatsName {
    /// The stats name of RocketMQ's constant `name`, if baiji counts it.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "TOPIC_PUT_NUMS" => Self::TopicPutNums,
            "TOPIC_PUT_SIZE" => Self::TopicPutSize,
            "GROUP_GET_NUMS" => Self::GroupGetNums,
            "GROUP_GET_SIZE" => Self::GroupGetSize,
            "BROKER_PUT_NUMS" => Self::BrokerPutNums,
            "BROKER_GET_NUMS" => Self::BrokerGetNums,
            _ => return None,
        })
    }
}

/// What a stats item has counted: calls, messages, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Figures {
    times: u64,
    nums: u64,
    size: u64,
}

impl Figures {
    fn since(self, old: Figures) -> Figures {
        Figures {
            times: self.times.saturating_sub(old.times),
            nums: self.nums.saturating_sub(old.nums),
            size: self.size.saturating_sub(old.size),
        }
    }
}

/// What a stats item is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ItemKey {
    Topic(String),
    Group(String, String),
    BrokerPut,
    BrokerGet,
}

/// One stats item's figures over one window (RocketMQ's `StatsSnapshot`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StatsWindow {
    /// What was counted over the window.
    pub(crate) sum: u64,
    /// `sum` per second.
    pub(crate) tps: f64,
    /// `sum` per counted call (0 without calls).
    pub(crate) avgpt: f64,
}

type Ring = VecDeque<(u64, Figures)>;

/// The live figures of every stats item that exists (RocketMQ creates one with its first
/// count).
fn live_items(core: &Core) -> Vec<(ItemKey, Figures)> {
    // Relaxed: statistics, each read on its own.
    let load = |a: &crate::sync::AtomicU64| a.load(crate::sync::Ordering::Relaxed);
    let mut items = Vec::new();
    let (mut put, mut get) = (0, 0);
    for (topic, c) in core.topics.counters_all() {
        let stored = c.stored_total();
        put += stored;
        get += c.delivered_total();
        let puts = load(&c.puts);
        if puts > 0 {
            let f = Figures { times: puts, nums: stored, size: c.size.snapshot().1 };
            items.push((ItemKey::Topic(topic.clone()), f));
        }
        for (group, o) in crate::sync::read(&c.out).iter() {
            let nums = load(&o.messages);
            if nums > 0 {
                let f = Figures { times: load(&o.pulls), nums, size: load(&o.bytes) };
                items.push((ItemKey::Group(topic.clone(), group.to_string()), f));
            }
        }
    }
    if put > 0 {
        items.push((ItemKey::BrokerPut, Figures { times: 0, nums: put, size: 0 }));
    }
    if get > 0 {
        items.push((ItemKey::BrokerGet, Figures { times: 0, nums: get, size: 0 }));
    }
    items
}

/// The live figures of one stats item, if it exists.
fn live_item(core: &Core, key: &ItemKey) -> Option<Figures> {
    // Relaxed: statistics, each read on its own.
    let load = |a: &crate::sync::AtomicU64| a.load(crate::sync::Ordering::Relaxed);
    match key {
        ItemKey::Topic(topic) => {
            let (_, c) = core.topics.get_perm_counted(topic)?;
            let times = load(&c.puts);
            (times > 0).then(|| Figures {
                times,
                nums: c.stored_total(),
                size: c.size.snapshot().1,
            })
        }
        ItemKey::Group(topic, group) => {
            let (_, c) = core.topics.get_perm_counted(topic)?;
            let out = crate::sync::read(&c.out);
            let o = out.get(group.as_str())?;
            let nums = load(&o.messages);
            (nums > 0).then(|| Figures { times: load(&o.pulls), nums, size: load(&o.bytes) })
        }
        ItemKey::BrokerPut | ItemKey::BrokerGet => {
            live_items(core).into_iter().find(|(k, _)| k == key).map(|(_, f)| f)
        }
    }
}

/// The window of `ring` (sampled every `period` ms) ending with the live figures `now` at
/// `now_ms`; an empty ring counts from a zero one period back.
fn window(
    ring: Option<&Ring>,
    period: u64,
    now_ms: u64,
    now: Figures,
    name: StatsName,
) -> StatsWindow {
    let (old_ms, old) = ring
        .and_then(|r| r.front().copied())
        .unwrap_or((now_ms.saturating_sub(period), Figures::default()));
    let d = now.since(old);
    let sum = match name {
        StatsName::TopicPutSize | StatsName::GroupGetSize => d.size,
        _ => d.nums,
    };
    let ms = now_ms.saturating_sub(old_ms);
    let tps = if ms == 0 { 0.0 } else { sum as f64 * 1000.0 / ms as f64 };
    let avgpt = if d.times == 0 { 0.0 } else { sum as f64 / d.times as f64 };
    StatsWindow { sum, tps, avgpt }
}

/// The stats items' sample rings.
#[derive(Debug, Default)]
struct Items {
    /// When the rings were last looked at (ms; 0: never).
    last_ms: u64,
    rings: HashMap<ItemKey, [Ring; 3]>,
}

impl Items {
    /// Adds the samples due at `now_ms` (see the module docs); drops the rings of items gone.
    fn sample(&mut self, live: Vec<(ItemKey, Figures)>, now_ms: u64) {
        let mut keep = std::collections::HashSet::with_capacity(live.len());
        for (key, figures) in live {
            if !self.rings.contains_key(&key) && self.rings.len() >= MAX_STATS_ITEMS {
                continue;
            }
            let rings = self.rings.entry(key.clone()).or_insert_with(|| {
                WINDOWS.map(|(period, _)| {
                    let mut r = VecDeque::new();
                    r.push_back((now_ms.saturating_sub(period), Figures::default()));
                    r
                })
            });
            for (ring, (period, len)) in rings.iter_mut().zip(WINDOWS) {
                let due = ring.back().map_or(true, |(ms, _)| now_ms.saturating_sub(*ms) >= period);
                if due {
                    ring.push_back((now_ms, figures));
                    while ring.len() > len {
                        ring.pop_front();
                    }
                }
            }
            keep.insert(key);
        }
        self.rings.retain(|k, _| keep.contains(k));
    }
}

/// The sampled rates (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Rates {
    samples: Mutex<Samples>,
    items: Mutex<Items>,
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
        drop(g);
        let due = {
            let items = lock(&self.items);
            items.last_ms == 0 || now_ms.saturating_sub(items.last_ms) >= WINDOWS[0].0
        };
        if due {
            // Read before the rings' lock is taken (the topic table's locks are not held under
            // it).
            let live = live_items(core);
            let mut items = lock(&self.items);
            items.last_ms = now_ms;
            items.sample(live, now_ms);
        }
    }

    /// The minute, hour and day figures of stats item `name` for `key` at `now_ms`; `None`
    /// when no such item exists (nothing counted yet, an unknown topic, group or cluster).
    pub(crate) fn stats_item(
        &self,
        core: &Core,
        name: StatsName,
        key: &str,
        now_ms: u64,
    ) -> Option<[StatsWindow; 3]> {
        let item = match name {
            StatsName::TopicPutNums | StatsName::TopicPutSize => ItemKey::Topic(key.to_owned()),
            StatsName::GroupGetNums | StatsName::GroupGetSize => {
                let (topic, group) = key.split_once('@')?;
                ItemKey::Group(topic.to_owned(), group.to_owned())
            }
            StatsName::BrokerPutNums if key == core.config.cluster_name => ItemKey::BrokerPut,
            StatsName::BrokerGetNums if key == core.config.cluster_name => ItemKey::BrokerGet,
            StatsName::BrokerPutNums | StatsName::BrokerGetNums => return None,
        };
        let live = live_item(core, &item)?;
        let items = lock(&self.items);
        let rings = items.rings.get(&item);
        let mut out = [StatsWindow::default(); 3];
        for (i, (period, _)) in WINDOWS.iter().enumerate() {
            out[i] = window(rings.map(|r| &r[i]), *period, now_ms, live, name);
        }
        Some(out)
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

    fn figs(times: u64, nums: u64) -> Figures {
        Figures { times, nums, size: nums * 10 }
    }

    #[test]
    fn given_stats_samples_when_windowing_should_count_from_the_oldest_sample_of_each_ring() {
        let key = ItemKey::Topic("T".into());
        let mut items = Items::default();
        // First seen at 100 s with 5 messages in 2 sends: each ring starts with a zero one
        // period back, so what came before the first sample counts.
        items.sample(vec![(key.clone(), figs(2, 5))], 100_000);
        let rings = items.rings.get(&key).expect("rings");
        let minute = window(Some(&rings[0]), 10_000, 100_000, figs(2, 5), StatsName::TopicPutNums);
        assert_eq!(minute.sum, 5);
        assert_eq!(minute.tps, 0.5, "5 over the 10 s since the zero sample");
        assert_eq!(minute.avgpt, 2.5, "messages per send");
        // Samples every 10 s for 2 minutes, one message each: the minute ring keeps 7.
        for i in 1..=12u64 {
            items.sample(vec![(key.clone(), figs(2 + i, 5 + i))], 100_000 + i * 10_000);
        }
        let rings = items.rings.get(&key).expect("rings");
        assert_eq!(rings[0].len(), 7, "the minute ring keeps seven samples");
        let now = 220_000;
        let minute = window(Some(&rings[0]), 10_000, now, figs(14, 17), StatsName::TopicPutNums);
        assert_eq!(minute.sum, 6, "the last minute: one message per 10 s");
        let size = window(Some(&rings[0]), 10_000, now, figs(14, 17), StatsName::TopicPutSize);
        assert_eq!(size.sum, 60, "the size item counts bytes");
        let hour = window(Some(&rings[1]), 600_000, now, figs(14, 17), StatsName::TopicPutNums);
        assert_eq!(hour.sum, 17, "the hour ring still holds its zero sample");
        // The item is gone (its topic was deleted): its rings go too.
        items.sample(Vec::new(), 230_000);
        assert!(items.rings.is_empty());
    }
}
