//! The Prometheus endpoint (`--metrics-listen`): RocketMQ 5's broker metrics under their
//! names and labels, plus baiji's own (`baiji_*`), in the Prometheus text format 0.0.4.
//!
//! Two kinds of figures:
//! * **Counters on the request path** (messages and bytes in per topic, out per topic and
//!   group, message sizes, RPC latencies): relaxed atomic adds into structures the path
//!   already holds (the topic table's entry for the topic, the table slot of the request
//!   code). No allocation and no lock is added per message; a pull looks its group's counters
//!   up once per pull (not per message) under the topic entry's read lock.
//! * **Gauges computed at scrape time** from the store's figures (`StoreStats`), the client
//!   registry and the topic table.
//!
//! Cardinality is bounded by the broker's own tables: one series set per topic of the topic
//! table, per (topic, group) the store holds or that pulled (at most [`MAX_GROUPS_PER_TOPIC`]
//! per topic; pulls of further groups count in the topic's totals only), per request code of
//! the dispatch table and per response code RocketMQ names.
//!
//! The HTTP side is a small hand-written HTTP/1.1 responder on the broker's tokio runtime:
//! one request per connection (`Connection: close`), `GET /metrics` only, a bounded request
//! head and a read deadline. Prometheus needs nothing more, and it keeps the dependency tree
//! as it was (no HTTP server crate).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::core::topics::{is_system_topic, RETRY_PREFIX};
use super::remoting::table::{Role, BROKER, NAMESRV};
use super::Shared;
use crate::remoting::code::response_code;
use crate::sync::{AtomicU64, Ordering};

/// Most groups whose out counters one topic keeps (see the module docs).
pub(crate) const MAX_GROUPS_PER_TOPIC: usize = 1024;

/// RocketMQ's `rocketmq_message_size` buckets, bytes: 1 KiB, 4 KiB, 512 KiB, 1, 2, 4 MiB.
const SIZE_BOUNDS: &[u64] = &[1 << 10, 4 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20];
/// RocketMQ's `rocketmq_rpc_latency` buckets, milliseconds (kept in microseconds here).
const LATENCY_BOUNDS_US: &[u64] = &[1_000, 3_000, 5_000, 10_000, 100_000, 1_000_000, 3_000_000];

/// A histogram with fixed upper bounds: one relaxed counter per bucket (the last one is
/// `+Inf`) and the sum. The count is not stored: the renderer adds the buckets it read, so
/// `le="+Inf"` always equals `_count` in one scrape, even while observations race it.
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [u64],
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [u64]) -> Self {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub(crate) fn observe(&self, v: u64) {
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        // Relaxed: statistics; each counter is read on its own by the renderer, nothing is
        // published through them, and a scrape racing an observation may see either state.
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// Per-bucket counts (not cumulative) and the sum.
    fn snapshot(&self) -> (Vec<u64>, u64) {
        // Relaxed: see `observe`.
        let b = self.buckets.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        (b, self.sum.load(Ordering::Relaxed))
    }

    fn is_empty(&self) -> bool {
        // Relaxed: see `observe`.
        self.buckets.iter().all(|c| c.load(Ordering::Relaxed) == 0)
    }
}

/// One group's consumption of one topic.
#[derive(Debug)]
pub(crate) struct OutCounters {
    messages: AtomicU64,
    bytes: AtomicU64,
    /// Per queue, the offset after the last message a pull of the group delivered (0: none):
    /// what RocketMQ calls the pulled offset, for in-flight and queueing latency.
    pulled: Box<[AtomicU64]>,
}

impl OutCounters {
    fn new(queues: u32) -> Self {
        OutCounters {
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            pulled: (0..queues).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The pulled offset of `queue` (0 if it never delivered or the queue is unknown).
    fn pulled(&self, queue: usize) -> u64 {
        // Relaxed: a statistic.
        self.pulled.get(queue).map_or(0, |p| p.load(Ordering::Relaxed))
    }
}

/// What one pull delivered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pulled {
    /// The queue.
    pub(crate) queue: u32,
    /// The offset after the last message looked at.
    pub(crate) next: u64,
    /// Messages delivered.
    pub(crate) messages: usize,
    /// Bytes of the response body.
    pub(crate) bytes: usize,
}

impl OutCounters {
    fn add(&self, p: Pulled) {
        // Relaxed: statistics; each counter is read on its own by the renderer.
        self.messages.fetch_add(p.messages as u64, Ordering::Relaxed);
        self.bytes.fetch_add(p.bytes as u64, Ordering::Relaxed);
        if let Some(o) = self.pulled.get(p.queue as usize) {
            o.fetch_max(p.next, Ordering::Relaxed);
        }
    }
}

/// One topic's request-path counters, held in its topic-table entry. Messages and bytes in
/// are the size histogram's count and sum (two atomic adds per stored message, not four).
#[derive(Debug)]
pub(crate) struct TopicCounters {
    size: Histogram,
    out: RwLock<HashMap<Box<str>, OutCounters>>,
}

impl Default for TopicCounters {
    fn default() -> Self {
        TopicCounters { size: Histogram::new(SIZE_BOUNDS), out: RwLock::new(HashMap::new()) }
    }
}

impl TopicCounters {
    /// A stored message whose body has `body_len` bytes.
    pub(crate) fn message_in(&self, body_len: usize) {
        self.size.observe(body_len as u64);
    }

    /// One pull delivered `pulled.messages` messages of `pulled.bytes` bytes of queue
    /// `pulled.queue` (of `queues`) to `group`, up to offset `pulled.next`.
    pub(crate) fn messages_out(&self, group: &str, queues: u32, pulled: Pulled) {
        let read = self.out.read().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = read.get(group) {
            c.add(pulled);
            return;
        }
        drop(read);
        let mut out = self.out.write().unwrap_or_else(|p| p.into_inner());
        if out.len() >= MAX_GROUPS_PER_TOPIC && !out.contains_key(group) {
            return;
        }
        out.entry(group.into()).or_insert_with(|| OutCounters::new(queues)).add(pulled);
    }
}

impl TopicCounters {
    /// Messages stored in this topic since the broker started.
    pub(crate) fn stored_total(&self) -> u64 {
        self.size.snapshot().0.iter().sum()
    }

    /// Messages pulls delivered from this topic since the broker started, every group.
    pub(crate) fn delivered_total(&self) -> u64 {
        let out = self.out.read().unwrap_or_else(|p| p.into_inner());
        // Relaxed: statistics.
        out.values().map(|o| o.messages.load(Ordering::Relaxed)).sum()
    }

    /// The offset after the last message a pull of `group` delivered from `queue` (0: none).
    pub(crate) fn pulled_offset(&self, group: &str, queue: usize) -> u64 {
        let out = self.out.read().unwrap_or_else(|p| p.into_inner());
        out.get(group).map_or(0, |o| o.pulled(queue))
    }
}

/// Slots of [`RpcLatency`]: one per response code RocketMQ names, one for any other code.
fn response_slot(code: i32) -> usize {
    response_code::ALL.iter().position(|(c, _)| *c == code).unwrap_or(response_code::ALL.len())
}

/// `rocketmq_rpc_latency` per (request code of the dispatch tables, response code), for the
/// requests answered inline (a suspended pull's later answer is not timed).
#[derive(Debug)]
pub(crate) struct RpcLatency {
    broker: Box<[Box<[Histogram]>]>,
    namesrv: Box<[Box<[Histogram]>]>,
}

impl Default for RpcLatency {
    fn default() -> Self {
        let slots = || -> Box<[Histogram]> {
            (0..=response_code::ALL.len()).map(|_| Histogram::new(LATENCY_BOUNDS_US)).collect()
        };
        RpcLatency {
            broker: BROKER.iter().map(|_| slots()).collect(),
            namesrv: NAMESRV.iter().map(|_| slots()).collect(),
        }
    }
}

impl RpcLatency {
    /// A request of the `index`-th code of `role`'s table answered with `code` after `took`.
    pub(crate) fn observe(&self, role: Role, index: usize, code: i32, took: Duration) {
        let table = match role {
            Role::Broker => &self.broker,
            Role::NameServer => &self.namesrv,
        };
        if let Some(h) = table.get(index).and_then(|t| t.get(response_slot(code))) {
            h.observe(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        }
    }
}

/// Appends `v` escaped as a Prometheus label value (backslash, double quote, newline).
pub(crate) fn escape_label(v: &str, out: &mut String) {
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// The text of one scrape, built family by family.
struct Text {
    out: String,
    /// `cluster="…",node_type="broker",node_id="…"`, escaped once.
    common: String,
}

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample: `name{common,labels} value`.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        self.out.push('{');
        self.out.push_str(&self.common);
        for (k, v) in labels {
            self.out.push(',');
            self.out.push_str(k);
            self.out.push_str("=\"");
            escape_label(v, &mut self.out);
            self.out.push('"');
        }
        let _ = writeln!(self.out, "}} {value}");
    }

    /// A histogram's `_bucket` series (cumulative), `_sum` and `_count`; bounds are divided
    /// by `scale` (and the sum with them) when printed.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram, scale: u64) {
        let (buckets, sum) = h.snapshot();
        let les: Vec<String> = h
            .bounds
            .iter()
            .map(|b| fmt_scaled(*b, scale))
            .chain(std::iter::once("+Inf".to_string()))
            .collect();
        let mut cumulative = 0u64;
        let bucket = format!("{name}_bucket");
        for (n, le) in buckets.iter().zip(&les) {
            cumulative = cumulative.saturating_add(*n);
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", le));
            self.sample(&bucket, &with_le, cumulative);
        }
        self.sample(&format!("{name}_sum"), labels, fmt_scaled(sum, scale));
        self.sample(&format!("{name}_count"), labels, cumulative);
    }
}

/// `v / scale` as a decimal number.
fn fmt_scaled(v: u64, scale: u64) -> String {
    if scale <= 1 {
        return v.to_string();
    }
    let frac = v % scale;
    if frac == 0 {
        (v / scale).to_string()
    } else {
        let digits = scale.ilog10() as usize;
        let s = format!("{}.{:0width$}", v / scale, frac, width = digits);
        s.trim_end_matches('0').to_string()
    }
}

fn bool_label(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// RocketMQ's `is_system` for a group: its `CID_RMQ_SYS_` prefix (`MixAll.isSysConsumerGroup`)
/// and its tools' groups.
fn is_system_group(g: &str) -> bool {
    g.starts_with("CID_RMQ_SYS_") || g == "TOOLS_CONSUMER" || g == "FILTERSRV_CONSUMER"
}

/// Renders every metric (a scrape).
pub(crate) fn render(s: &Shared) -> String {
    let mut common = String::new();
    common.push_str("cluster=\"");
    escape_label(&s.config.cluster_name, &mut common);
    common.push_str("\",node_type=\"broker\",node_id=\"");
    escape_label(&s.config.broker_name, &mut common);
    common.push('"');
    let mut t = Text { out: String::with_capacity(16 * 1024), common };
    let entries = s.topics.counters_all();
    let now = crate::time::now_ms();

    // Request-path counters.
    let in_labels = |topic: &str| -> [(&'static str, String); 3] {
        [
            ("topic", topic.to_string()),
            ("message_type", "normal".to_string()),
            ("is_system", bool_label(is_system_topic(topic)).to_string()),
        ]
    };
    let refs = |l: &[(&'static str, String)], t: &mut Text, name: &str, v: u64| {
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
        t.sample(name, &l, v);
    };
    let totals: Vec<(u64, u64)> = entries
        .iter()
        .map(|(_, c)| {
            let (buckets, sum) = c.size.snapshot();
            (buckets.iter().sum(), sum)
        })
        .collect();
    for (name, help, bytes) in [
        ("rocketmq_messages_in_total", "Messages stored, per topic.", false),
        ("rocketmq_throughput_in_total", "Bytes of message bodies stored, per topic.", true),
    ] {
        t.family(name, "counter", help);
        for ((topic, _), (n, b)) in entries.iter().zip(&totals) {
            refs(&in_labels(topic), &mut t, name, if bytes { *b } else { *n });
        }
    }
    t.family("rocketmq_message_size", "histogram", "Sizes of stored message bodies, bytes.");
    for (topic, c) in &entries {
        if c.size.is_empty() {
            continue;
        }
        let l = in_labels(topic);
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
        t.histogram("rocketmq_message_size", &l, &c.size, 1);
    }
    let mut outs: Vec<(String, String, u64, u64)> = Vec::new();
    for (topic, c) in &entries {
        for (group, o) in c.out.read().unwrap_or_else(|p| p.into_inner()).iter() {
            // Relaxed: statistics.
            outs.push((
                topic.clone(),
                group.to_string(),
                o.messages.load(Ordering::Relaxed),
                o.bytes.load(Ordering::Relaxed),
            ));
        }
    }
    outs.sort();
    for (name, help, bytes) in [
        (
            "rocketmq_messages_out_total",
            "Messages delivered by pulls and pops, per topic and group.",
            false,
        ),
        (
            "rocketmq_throughput_out_total",
            "Bytes delivered by pulls and pops (as written out), per topic and group.",
            true,
        ),
    ] {
        t.family(name, "counter", help);
        for (topic, group, m, b) in &outs {
            let labels = [
                ("topic", topic.as_str()),
                ("consumer_group", group.as_str()),
                ("is_retry", bool_label(topic.starts_with(RETRY_PREFIX))),
                ("is_system", bool_label(is_system_topic(topic) || is_system_group(group))),
            ];
            t.sample(name, &labels, if bytes { *b } else { *m });
        }
    }
    t.family(
        "rocketmq_rpc_latency",
        "histogram",
        "Time to answer a request inline, milliseconds, per request and response code.",
    );
    for (table, hists) in [(BROKER, &s.rpc.broker), (NAMESRV, &s.rpc.namesrv)] {
        for ((_, req_name, _), slots) in table.iter().zip(hists.iter()) {
            let req = req_name.to_ascii_lowercase();
            for (i, h) in slots.iter().enumerate() {
                if h.is_empty() {
                    continue;
                }
                let resp = match response_code::ALL.get(i) {
                    Some((_, n)) => n.to_ascii_lowercase(),
                    None => "other".to_string(),
                };
                let labels = [
                    ("protocol_type", "remoting"),
                    ("request_code", req.as_str()),
                    ("response_code", resp.as_str()),
                ];
                t.histogram("rocketmq_rpc_latency", &labels, h, 1000);
            }
        }
    }

    // Gauges from the store, the topic table and the client registry.
    let topics = s.store.topic_figures();
    let groups = s.store.group_figures();
    t.family("rocketmq_topic_number", "gauge", "Topics this broker serves.");
    t.sample("rocketmq_topic_number", &[], entries.len());
    let mut group_names: Vec<&str> = groups.iter().map(|g| g.group.as_str()).collect();
    let connected = s.clients.consumer_group_members();
    group_names.extend(connected.iter().map(|(g, _)| g.as_str()));
    group_names.sort_unstable();
    group_names.dedup();
    t.family("rocketmq_consumer_group_number", "gauge", "Consumer groups known to this broker.");
    t.sample("rocketmq_consumer_group_number", &[], group_names.len());
    t.family("rocketmq_producer_connections", "gauge", "Producer clients connected.");
    t.sample(
        "rocketmq_producer_connections",
        &[("protocol_type", "remoting")],
        s.clients.producer_client_count(),
    );
    t.family("rocketmq_consumer_connections", "gauge", "Consumer clients connected, per group.");
    for (g, members) in &connected {
        let labels = [
            ("consumer_group", g.as_str()),
            ("protocol_type", "remoting"),
            ("is_system", bool_label(is_system_group(g))),
        ];
        t.sample("rocketmq_consumer_connections", &labels, *members);
    }

    // Lag, in flight and queueing latency, per (topic, group) the store holds messages for.
    let by_topic: HashMap<&str, &crate::store::TopicFigures> =
        topics.iter().map(|f| (f.name.as_str(), f)).collect();
    struct Lag {
        lag: u64,
        inflight: u64,
        queueing_ms: u64,
    }
    let lags: Vec<Lag> = groups
        .iter()
        .map(|g| {
            let mut l = Lag { lag: 0, inflight: 0, queueing_ms: 0 };
            let (Some(f), Some(store_topic)) =
                (by_topic.get(g.topic.as_str()), s.store.topic(&g.topic))
            else {
                return l;
            };
            let counters = entries.iter().find(|(t, _)| *t == g.topic).map(|(_, c)| c);
            let outs = counters.map(|c| c.out.read().unwrap_or_else(|p| p.into_inner()));
            let out = outs.as_ref().and_then(|o| o.get(g.group.as_str()));
            let mut oldest: Option<u64> = None;
            for (q, qf) in f.queues.iter().enumerate() {
                let committed = s
                    .store
                    .committed(&g.group, &g.topic, q as u32)
                    .unwrap_or(qf.min_offset)
                    .clamp(qf.min_offset, qf.max_offset);
                let pulled = out.map_or(0, |o| o.pulled(q)).clamp(committed, qf.max_offset);
                l.lag += qf.max_offset - committed;
                l.inflight += pulled - committed;
                if pulled < qf.max_offset {
                    if let Some((_, ts)) = s.store.get(store_topic.as_ref(), q as u32, pulled) {
                        oldest = Some(oldest.map_or(ts, |o: u64| o.min(ts)));
                    }
                }
            }
            l.queueing_ms = oldest.map_or(0, |ts| now.saturating_sub(ts));
            l
        })
        .collect();
    let group_labels = |g: &crate::store::GroupFigures| -> [(&'static str, String); 4] {
        [
            ("topic", g.topic.clone()),
            ("consumer_group", g.group.clone()),
            ("is_retry", bool_label(g.topic.starts_with(RETRY_PREFIX)).to_string()),
            (
                "is_system",
                bool_label(is_system_topic(&g.topic) || is_system_group(&g.group)).to_string(),
            ),
        ]
    };
    t.family(
        "rocketmq_consumer_lag_messages",
        "gauge",
        "Messages between a group's committed offset and the end of each queue, summed.",
    );
    for (g, l) in groups.iter().zip(&lags) {
        refs(&group_labels(g), &mut t, "rocketmq_consumer_lag_messages", l.lag);
    }
    t.family(
        "rocketmq_consumer_inflight_messages",
        "gauge",
        "Messages pulled by a group and not yet committed (pulled offset - committed offset).",
    );
    for (g, l) in groups.iter().zip(&lags) {
        refs(&group_labels(g), &mut t, "rocketmq_consumer_inflight_messages", l.inflight);
    }
    t.family(
        "rocketmq_consumer_queueing_latency",
        "gauge",
        "Age of the oldest message a group has not pulled yet, milliseconds (0: none waits).",
    );
    for (g, l) in groups.iter().zip(&lags) {
        refs(&group_labels(g), &mut t, "rocketmq_consumer_queueing_latency", l.queueing_ms);
    }

    // baiji's own.
    let mem = s.store.memory();
    t.family("baiji_memory_used_bytes", "gauge", "Bytes of the memory budget in use.");
    t.sample("baiji_memory_used_bytes", &[], mem.bytes_used);
    t.family("baiji_memory_limit_bytes", "gauge", "The memory budget, bytes.");
    t.sample("baiji_memory_limit_bytes", &[], mem.budget);
    t.family("baiji_topic_retained_messages", "gauge", "Messages retained, per topic.");
    for f in &topics {
        let n: u64 = f.queues.iter().map(|q| q.live_messages).sum();
        t.sample("baiji_topic_retained_messages", &[("topic", &f.name)], n);
    }
    t.family("baiji_topic_retained_bytes", "gauge", "Bytes retained, per topic.");
    for f in &topics {
        let n: u64 = f.queues.iter().map(|q| q.bytes).sum();
        t.sample("baiji_topic_retained_bytes", &[("topic", &f.name)], n);
    }
    t.family(
        "baiji_group_held_bytes",
        "gauge",
        "Bytes of retained messages a group holds (not yet acknowledged), estimated per queue \
         from its mean message size.",
    );
    for g in &groups {
        let labels = [("topic", g.topic.as_str()), ("consumer_group", g.group.as_str())];
        t.sample("baiji_group_held_bytes", &labels, g.held_bytes);
    }
    // The policy in force now (`updateBrokerConfig` may have changed the configured one).
    let policy = super::config::policy_name(s.store.settings().policy);
    t.family(
        "baiji_dropped_messages_total",
        "counter",
        "Messages evicted by the drop-oldest policy before a group acknowledged them.",
    );
    for g in &groups {
        let labels =
            [("policy", policy), ("topic", g.topic.as_str()), ("consumer_group", g.group.as_str())];
        t.sample("baiji_dropped_messages_total", &labels, g.dropped);
    }
    t.family("baiji_evicted_messages_total", "counter", "Messages evicted by drop-oldest.");
    t.sample("baiji_evicted_messages_total", &[("policy", policy)], mem.evicted_messages);
    t.family(
        "baiji_refused_messages_total",
        "counter",
        "Messages the store refused for lack of memory (reject policy).",
    );
    t.sample("baiji_refused_messages_total", &[("policy", policy)], mem.rejected_messages);
    t.family(
        "baiji_sends_refused_total",
        "counter",
        "Sends answered SYSTEM_BUSY for lack of memory.",
    );
    // Relaxed: statistics.
    let busy = s.counters.sends_rejected.load(Ordering::Relaxed);
    t.sample("baiji_sends_refused_total", &[("policy", policy)], busy);
    t.family(
        "baiji_oneway_sends_refused_total",
        "counter",
        "One-way sends refused (the producer cannot be told).",
    );
    // Relaxed: statistics.
    let oneway = s.counters.oneway_rejected.load(Ordering::Relaxed);
    t.sample("baiji_oneway_sends_refused_total", &[], oneway);
    t.family(
        "baiji_reaper_lag_seconds",
        "gauge",
        "Time since the reaper's last completed pass, seconds (-1: none yet).",
    );
    let lag = if mem.last_reclaim_ms == 0 {
        "-1".to_string()
    } else {
        fmt_scaled(now.saturating_sub(mem.last_reclaim_ms), 1000)
    };
    t.sample("baiji_reaper_lag_seconds", &[], lag);
    t.out
}

/// Most bytes of a request head read before answering 431.
const MAX_HEAD: usize = 8 * 1024;
/// How long a scrape connection may take to send its request.
const READ_DEADLINE: Duration = Duration::from_secs(10);
/// Most scrape connections served at once.
const MAX_SCRAPES: usize = 16;

/// Serves `GET /metrics` on `listener` until shutdown.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPES));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                        continue; // dropped: closed at once
                    };
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(READ_DEADLINE * 2, answer(&shared, stream))
                            .await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Reads one request head and answers it.
async fn answer(shared: &Shared, mut stream: TcpStream) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = tokio::time::timeout(READ_DEADLINE, async {
        loop {
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok::<bool, std::io::Error>(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(false);
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok(false);
            }
            head.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    let complete = match complete {
        Ok(r) => r?,
        Err(_) => false,
    };
    let (status, content_type, body) = if !complete {
        ("400 Bad Request", "text/plain", "bad request\n".to_string())
    } else {
        let line = head.split(|&b| b == b'\r').next().unwrap_or(&[]);
        let mut parts = line.split(|&b| b == b' ');
        let (method, target) = (parts.next().unwrap_or(&[]), parts.next().unwrap_or(&[]));
        let path = target.split(|&b| b == b'?').next().unwrap_or(&[]);
        match (method, path) {
            (b"GET", b"/metrics") => {
                ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(shared))
            }
            (b"GET", _) => ("404 Not Found", "text/plain", "try /metrics\n".to_string()),
            _ => ("405 Method Not Allowed", "text/plain", "GET only\n".to_string()),
        }
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    resp.push_str(&body);
    stream.write_all(resp.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_quotes_backslashes_and_newlines_when_escaping_should_follow_the_text_format() {
        let mut out = String::new();
        escape_label("a\"b\\c\nd", &mut out);
        assert_eq!(out, r#"a\"b\\c\nd"#);
    }

    #[test]
    fn given_values_when_scaling_should_print_decimals() {
        assert_eq!(fmt_scaled(1_000, 1000), "1");
        assert_eq!(fmt_scaled(1_500, 1000), "1.5");
        assert_eq!(fmt_scaled(7, 1000), "0.007");
        assert_eq!(fmt_scaled(42, 1), "42");
    }

    #[test]
    fn given_observations_when_snapshotting_should_land_in_their_buckets() {
        let h = Histogram::new(SIZE_BOUNDS);
        for v in [0, 1024, 1025, 5 << 20] {
            h.observe(v);
        }
        let (b, sum) = h.snapshot();
        assert_eq!(b, [2, 1, 0, 0, 0, 0, 1]);
        assert_eq!(sum, 1024 + 1025 + (5 << 20));
    }
}
