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
//! table, per (topic, group) the store holds (at most `max-groups-per-topic` per topic and
//! `max-subscriptions` in all, the idle ones released after `group-idle-secs`, see
//! `baiji_subscriptions`) or that pulled (at most [`MAX_GROUPS_PER_TOPIC`] per topic; pulls of
//! further groups count in the topic's totals only), per request code of the dispatch table
//! and per response code RocketMQ names. A scrape costs O(topics + groups).
//!
//! The HTTP side is a small hand-written HTTP/1.1 responder on the broker's tokio runtime:
//! one request per connection (`Connection: close`), `GET /metrics` only, a bounded request
//! head and a read deadline. Prometheus needs nothing more, and it keeps the dependency tree
//! as it was (no HTTP server crate).

use crate::sync::Arc;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::core::counters::{Histogram, TopicCounters};
use super::core::topics::{is_system_topic, RETRY_PREFIX};
use super::core::Core;
use super::remoting::table::{BROKER, NAMESRV};
use super::remoting::RemotingState;
use crate::remoting::code::response_code;
use crate::store::{GroupFigures, MemoryStats, TopicFigures};
use crate::sync::read;
use crate::sync::Ordering;

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

/// Renders every metric (a scrape): one function per metric family, in this order.
pub(crate) fn render(core: &Core, face: &RemotingState) -> String {
    let mut common = String::new();
    common.push_str("cluster=\"");
    escape_label(&core.config.cluster_name, &mut common);
    common.push_str("\",node_type=\"broker\",node_id=\"");
    escape_label(&core.config.broker_name, &mut common);
    common.push('"');
    let mut t = Text { out: String::with_capacity(16 * 1024), common };
    let entries = core.topics.counters_all();
    // Request-path counters.
    messages_in(&mut t, &entries);
    message_size(&mut t, &entries);
    messages_out(&mut t, &entries);
    rpc_latency(&mut t, face);
    // Gauges from the store, the topic table and the client registry.
    let topics = core.store.topic_figures();
    let groups = core.store.group_figures();
    clients(&mut t, core, &entries, &groups);
    consumer_lag(&mut t, core, &entries, &topics, &groups);
    // baiji's own.
    let mem = core.store.memory();
    // The policy in force now (`updateBrokerConfig` may have changed the configured one).
    let policy = super::core::config::policy_name(core.store.settings().policy);
    memory(&mut t, core, (&mem, policy), &topics, &groups);
    refusals(&mut t, (&mem, policy), core, face);
    journal(&mut t, core);
    storage(&mut t, core);
    #[cfg(feature = "replicas")]
    replica(&mut t, core);
    t.out
}

/// A broker set's replica (`replica-peers`; none for a single broker): its role and how far
/// its Raft log and store have come.
#[cfg(feature = "replicas")]
fn replica(t: &mut Text, core: &Core) {
    let Some(r) = core.replica() else { return };
    let f = r.figures();
    unlabelled(
        t,
        [
            (
                "baiji_replica_id",
                "gauge",
                "This process's replica id in its broker set.",
                f.id.to_string(),
            ),
            (
                "baiji_replica_leader",
                "gauge",
                "1 while this replica leads its broker set (registered as brokerId 0), else 0.",
                u8::from(f.leading).to_string(),
            ),
            (
                "baiji_replica_term",
                "gauge",
                "The Raft term this replica is in.",
                f.term.to_string(),
            ),
            (
                "baiji_replica_last_log_index",
                "gauge",
                "Index of the last Raft log entry this replica holds.",
                f.last_log_index.to_string(),
            ),
            (
                "baiji_replica_applied_index",
                "gauge",
                "Index of the last Raft log entry applied to this replica's store.",
                f.applied_index.to_string(),
            ),
            (
                "baiji_replica_voters",
                "gauge",
                "Voters of the broker set's membership as this replica knows it.",
                f.voters.to_string(),
            ),
        ],
    );
}

/// The store directory's figures (`store-path-root-dir`; none without it): its segment files
/// now and what the start found there.
fn storage(t: &mut Text, core: &Core) {
    let (Some(s), Some(r)) = (core.store.storage(), &core.recovery) else { return };
    unlabelled(
        t,
        [
            (
                "baiji_store_segment_bytes",
                "gauge",
                "Bytes of message segment files mapped in the store directory (counted in the memory budget).",
                s.segment_bytes.to_string(),
            ),
            ("baiji_store_segments", "gauge", "Message segment files mapped now.", s.segments.to_string()),
            (
                "baiji_store_freed_segments_total",
                "counter",
                "Message segment files freed (all their messages reclaimed) and removed.",
                s.freed_segments.to_string(),
            ),
            (
                "baiji_store_journal_bytes",
                "gauge",
                "Bytes of the store's journal files (topics, queue heads, uids, committed offsets).",
                s.journal_bytes.to_string(),
            ),
            (
                "baiji_store_failed_writes_total",
                "counter",
                "Store journal changes that could not be written (a full tmpfs): not kept over a restart.",
                s.failed_writes.to_string(),
            ),
            (
                "baiji_store_recovered_messages",
                "gauge",
                "Messages restored from the store directory at start.",
                r.messages.to_string(),
            ),
            (
                "baiji_store_recovered_holes",
                "gauge",
                "Offsets restored as holes at start (claimed by sends a crash cut short, never answered).",
                r.holes.to_string(),
            ),
            (
                "baiji_store_torn_records",
                "gauge",
                "Torn message records skipped at start (never served).",
                r.torn_records.to_string(),
            ),
            (
                "baiji_store_dropped_records",
                "gauge",
                "Complete records not restored at start: already reclaimed, or of a deleted topic.",
                r.dropped_records.to_string(),
            ),
            (
                "baiji_store_quarantined_segments",
                "gauge",
                "Segment files set aside at start (renamed *.quarantine: damaged, foreign or truncated).",
                r.quarantined.len().to_string(),
            ),
            (
                "baiji_store_recovery_seconds",
                "gauge",
                "Time restoring the store directory took at start.",
                format!("{:.6}", r.elapsed.as_secs_f64()),
            ),
        ],
    );
}

/// The configuration journal's figures (`store-path-root-dir`; none without it).
fn journal(t: &mut Text, core: &Core) {
    let Some(j) = &core.journal else { return };
    let f = j.figures();
    unlabelled(
        t,
        [
            (
                "baiji_config_journal_recovered_records",
                "gauge",
                "Records of topic and group configs read back at start.",
                f.recovered_records.to_string(),
            ),
            (
                "baiji_config_journal_torn_records",
                "gauge",
                "Torn records skipped at start (changes a crash cut short, never answered).",
                f.torn_records.to_string(),
            ),
            (
                "baiji_config_journal_recovery_seconds",
                "gauge",
                "Time reading the configuration journal back at start took.",
                format!("{:.6}", f.recovery_time.as_secs_f64()),
            ),
            (
                "baiji_config_journal_failed_writes_total",
                "counter",
                "Config changes the journal could not write (not kept over a restart).",
                f.failed_writes.to_string(),
            ),
            (
                "baiji_config_journal_bytes",
                "gauge",
                "Bytes of the configuration journal's mapped segment files.",
                f.mapped_bytes.to_string(),
            ),
        ],
    );
}

/// One family with one unlabelled sample per `(name, kind, help, value)`.
fn unlabelled<const N: usize>(t: &mut Text, rows: [(&str, &str, &str, String); N]) {
    for (name, kind, help, value) in rows {
        t.family(name, kind, help);
        t.sample(name, &[], value);
    }
}

/// The label pairs as `&str`s, for [`Text::sample`].
fn label_refs<'a>(l: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    l.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The labels of a topic's in-counters.
fn in_labels(topic: &str) -> [(&'static str, String); 3] {
    [
        ("topic", topic.to_string()),
        ("message_type", "normal".to_string()),
        ("is_system", bool_label(is_system_topic(topic)).to_string()),
    ]
}

/// `rocketmq_messages_in_total` and `rocketmq_throughput_in_total`, per topic.
fn messages_in(t: &mut Text, entries: &[(String, Arc<TopicCounters>)]) {
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
            t.sample(name, &label_refs(&in_labels(topic)), if bytes { *b } else { *n });
        }
    }
}

/// `rocketmq_message_size`, per topic that stored any.
fn message_size(t: &mut Text, entries: &[(String, Arc<TopicCounters>)]) {
    t.family("rocketmq_message_size", "histogram", "Sizes of stored message bodies, bytes.");
    for (topic, c) in entries {
        if c.size.is_empty() {
            continue;
        }
        let l = in_labels(topic);
        t.histogram("rocketmq_message_size", &label_refs(&l), &c.size, 1);
    }
}

/// `rocketmq_messages_out_total` and `rocketmq_throughput_out_total`, per topic and group.
fn messages_out(t: &mut Text, entries: &[(String, Arc<TopicCounters>)]) {
    let mut outs: Vec<(String, String, u64, u64)> = Vec::new();
    for (topic, c) in entries {
        for (group, o) in read(&c.out).iter() {
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
}

/// `rocketmq_rpc_latency` of the remoting face, per request and response code.
fn rpc_latency(t: &mut Text, face: &RemotingState) {
    t.family(
        "rocketmq_rpc_latency",
        "histogram",
        "Time to answer a request inline, milliseconds, per request and response code.",
    );
    for (table, hists) in [(BROKER, &face.rpc.broker), (NAMESRV, &face.rpc.namesrv)] {
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
}

/// `rocketmq_topic_number`, `rocketmq_consumer_group_number` and the producer and consumer
/// connections.
fn clients(
    t: &mut Text,
    core: &Core,
    entries: &[(String, Arc<TopicCounters>)],
    groups: &[GroupFigures],
) {
    t.family("rocketmq_topic_number", "gauge", "Topics this broker serves.");
    t.sample("rocketmq_topic_number", &[], entries.len());
    let mut group_names: Vec<&str> = groups.iter().map(|g| g.group.as_str()).collect();
    let connected = core.clients.consumer_group_members();
    group_names.extend(connected.iter().map(|(g, _)| g.as_str()));
    group_names.sort_unstable();
    group_names.dedup();
    t.family("rocketmq_consumer_group_number", "gauge", "Consumer groups known to this broker.");
    t.sample("rocketmq_consumer_group_number", &[], group_names.len());
    t.family("rocketmq_producer_connections", "gauge", "Producer clients connected.");
    t.sample(
        "rocketmq_producer_connections",
        &[("protocol_type", "remoting")],
        core.clients.producer_client_count(),
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
}

/// Lag, in flight and queueing latency of one (topic, group) the store holds messages for.
struct Lag {
    lag: u64,
    inflight: u64,
    queueing_ms: u64,
}

/// [`Lag`] of group `g`, from its topic's figures and out counters.
fn lag_of(
    core: &Core,
    g: &GroupFigures,
    by_topic: &HashMap<&str, &TopicFigures>,
    entries: &HashMap<&str, &Arc<TopicCounters>>,
    now: u64,
) -> Lag {
    let mut l = Lag { lag: 0, inflight: 0, queueing_ms: 0 };
    let (Some(f), Some(store_topic)) = (by_topic.get(g.topic.as_str()), core.store.topic(&g.topic))
    else {
        return l;
    };
    let counters = entries.get(g.topic.as_str()).copied();
    let outs = counters.map(|c| read(&c.out));
    let out = outs.as_ref().and_then(|o| o.get(g.group.as_str()));
    let mut oldest: Option<u64> = None;
    for (q, qf) in f.queues.iter().enumerate() {
        let committed = core
            .store
            .committed(&g.group, &g.topic, q as u32)
            .unwrap_or(qf.min_offset)
            .clamp(qf.min_offset, qf.max_offset);
        let pulled = out.map_or(0, |o| o.pulled(q)).clamp(committed, qf.max_offset);
        l.lag += qf.max_offset - committed;
        l.inflight += pulled - committed;
        if pulled < qf.max_offset {
            if let Some((_, ts)) = core.store.get(store_topic.as_ref(), q as u32, pulled) {
                oldest = Some(oldest.map_or(ts, |o: u64| o.min(ts)));
            }
        }
    }
    l.queueing_ms = oldest.map_or(0, |ts| now.saturating_sub(ts));
    l
}

/// One gauge family of [`Lag`]: name, help and the value it shows.
type LagFamily = (&'static str, &'static str, fn(&Lag) -> u64);

/// The labels of a group's gauges.
fn group_labels(g: &GroupFigures) -> [(&'static str, String); 4] {
    [
        ("topic", g.topic.clone()),
        ("consumer_group", g.group.clone()),
        ("is_retry", bool_label(g.topic.starts_with(RETRY_PREFIX)).to_string()),
        (
            "is_system",
            bool_label(is_system_topic(&g.topic) || is_system_group(&g.group)).to_string(),
        ),
    ]
}

/// `rocketmq_consumer_lag_messages`, `rocketmq_consumer_inflight_messages` and
/// `rocketmq_consumer_queueing_latency`, per (topic, group) the store holds messages for.
fn consumer_lag(
    t: &mut Text,
    core: &Core,
    entries: &[(String, Arc<TopicCounters>)],
    topics: &[TopicFigures],
    groups: &[GroupFigures],
) {
    let now = crate::time::now_ms();
    let by_topic: HashMap<&str, &TopicFigures> =
        topics.iter().map(|f| (f.name.as_str(), f)).collect();
    // By name: a scrape is O(groups + topics), not O(groups x topics) (review-e77444b L6).
    let entries: HashMap<&str, &Arc<TopicCounters>> =
        entries.iter().map(|(t, c)| (t.as_str(), c)).collect();
    let lags: Vec<Lag> = groups.iter().map(|g| lag_of(core, g, &by_topic, &entries, now)).collect();
    let families: [LagFamily; 3] = [
        (
            "rocketmq_consumer_lag_messages",
            "Messages between a group's committed offset and the end of each queue, summed.",
            |l| l.lag,
        ),
        (
            "rocketmq_consumer_inflight_messages",
            "Messages pulled by a group and not yet committed (pulled offset - committed offset).",
            |l| l.inflight,
        ),
        (
            "rocketmq_consumer_queueing_latency",
            "Age of the oldest message a group has not pulled yet, milliseconds (0: none waits).",
            |l| l.queueing_ms,
        ),
    ];
    for (name, help, value) in families {
        t.family(name, "gauge", help);
        for (g, l) in groups.iter().zip(&lags) {
            t.sample(name, &label_refs(&group_labels(g)), value(l));
        }
    }
}

/// baiji's memory gauges: the budget, what topics retain and what groups hold.
fn memory(
    t: &mut Text,
    core: &Core,
    (mem, policy): (&MemoryStats, &str),
    topics: &[TopicFigures],
    groups: &[GroupFigures],
) {
    t.family("baiji_memory_used_bytes", "gauge", "Bytes of the memory budget in use.");
    t.sample("baiji_memory_used_bytes", &[], mem.bytes_used);
    t.family("baiji_memory_limit_bytes", "gauge", "The memory budget, bytes.");
    t.sample("baiji_memory_limit_bytes", &[], mem.budget);
    t.family("baiji_topic_retained_messages", "gauge", "Messages retained, per topic.");
    for f in topics {
        let n: u64 = f.queues.iter().map(|q| q.live_messages).sum();
        t.sample("baiji_topic_retained_messages", &[("topic", &f.name)], n);
    }
    t.family("baiji_topic_retained_bytes", "gauge", "Bytes retained, per topic.");
    for f in topics {
        let n: u64 = f.queues.iter().map(|q| q.bytes).sum();
        t.sample("baiji_topic_retained_bytes", &[("topic", &f.name)], n);
    }
    t.family(
        "baiji_group_held_bytes",
        "gauge",
        "Bytes of retained messages a group holds (not yet acknowledged), estimated per queue \
             from its mean message size.",
    );
    for g in groups {
        let labels = [("topic", g.topic.as_str()), ("consumer_group", g.group.as_str())];
        t.sample("baiji_group_held_bytes", &labels, g.held_bytes);
    }
    t.family(
        "baiji_dropped_messages_total",
        "counter",
        "Messages evicted by the drop-oldest policy before a group acknowledged them.",
    );
    for g in groups {
        let labels =
            [("policy", policy), ("topic", g.topic.as_str()), ("consumer_group", g.group.as_str())];
        t.sample("baiji_dropped_messages_total", &labels, g.dropped);
    }
    let (subscriptions, limit) = core.store.subscription_count();
    t.family(
        "baiji_subscriptions",
        "gauge",
        "Subscriptions (consumer group x topic) holding messages; POP-only ones are released \
             after group-idle-secs without activity.",
    );
    t.sample("baiji_subscriptions", &[], subscriptions);
    t.family(
        "baiji_subscriptions_limit",
        "gauge",
        "Most subscriptions the broker holds (max-subscriptions); more are refused.",
    );
    t.sample("baiji_subscriptions_limit", &[], limit);
    t.family("baiji_evicted_messages_total", "counter", "Messages evicted by drop-oldest.");
    t.sample("baiji_evicted_messages_total", &[("policy", policy)], mem.evicted_messages);
}

/// baiji's refusal counters and the reaper's lag.
fn refusals(t: &mut Text, (mem, policy): (&MemoryStats, &str), core: &Core, face: &RemotingState) {
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
    let busy = core.counters.sends_rejected.load(Ordering::Relaxed);
    t.sample("baiji_sends_refused_total", &[("policy", policy)], busy);
    t.family(
        "baiji_oneway_sends_refused_total",
        "counter",
        "One-way sends refused (the producer cannot be told).",
    );
    // Relaxed: statistics.
    let oneway = face.counters.oneway_rejected.load(Ordering::Relaxed);
    t.sample("baiji_oneway_sends_refused_total", &[], oneway);
    t.family(
        "baiji_dead_letter_failures_total",
        "counter",
        "Dead-letter copies of popped messages the store refused; each message stays in flight \
             and is tried again a second later.",
    );
    // Relaxed: statistics.
    let failed = core.counters.dead_letters_failed.load(Ordering::Relaxed);
    t.sample("baiji_dead_letter_failures_total", &[], failed);
    t.family(
        "baiji_pop_revive_failures_total",
        "counter",
        "Copies of expired popped messages into their group's pop retry topic the store \
             refused; each message stays in flight and is tried again a second later.",
    );
    // Relaxed: statistics.
    let failed = core.counters.revives_failed.load(Ordering::Relaxed);
    t.sample("baiji_pop_revive_failures_total", &[], failed);
    t.family(
        "baiji_reaper_lag_seconds",
        "gauge",
        "Time since the reaper's last completed pass, seconds (-1: none yet).",
    );
    let lag = if mem.last_reclaim_ms == 0 {
        "-1".to_string()
    } else {
        fmt_scaled(crate::time::now_ms().saturating_sub(mem.last_reclaim_ms), 1000)
    };
    t.sample("baiji_reaper_lag_seconds", &[], lag);
}

/// Most bytes of a request head read before answering 431.
const MAX_HEAD: usize = 8 * 1024;
/// How long a scrape connection may take to send its request.
const READ_DEADLINE: Duration = Duration::from_secs(10);
/// Most scrape connections served at once.
const MAX_SCRAPES: usize = 16;

/// Serves `GET /metrics` on `listener` until shutdown.
pub(crate) async fn serve(
    core: Arc<Core>,
    face: Arc<RemotingState>,
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
                    let (core, face) = (Arc::clone(&core), Arc::clone(&face));
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(READ_DEADLINE * 2, answer(&core, &face, stream))
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
async fn answer(core: &Core, face: &RemotingState, mut stream: TcpStream) -> std::io::Result<()> {
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
                ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(core, face))
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
}
