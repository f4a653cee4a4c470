//! Admin reads, answered as RocketMQ's `AdminBrokerProcessor` answers them:
//! `GET_BROKER_RUNTIME_INFO` (28), `GET_TOPIC_STATS_INFO` (202), `GET_CONSUMER_CONNECTION_LIST`
//! (203), `GET_PRODUCER_CONNECTION_LIST` (204), `GET_CONSUME_STATS` (208),
//! `QUERY_TOPIC_CONSUME_BY_WHO` (300), `VIEW_BROKER_STATS_DATA` (315),
//! `GET_BROKER_CONSUME_STATS` (317), `GET_ALL_PRODUCER_INFO` (328).
//!
//! The client lists name the gRPC face's clients too (the core's registry lists them beside
//! the remoting ones, [`crate::broker::core::clients::ClientDirectory`]).
//!
//! Where a persistent broker reports its disk, baiji reports its memory: the commit log's
//! capacity and free space are the memory budget and what is left of it, its disk ratio is
//! the budget's used share (see README, "Operating baiji").

use crate::sync::Arc;

use super::bad_header;
use crate::broker::core::rates::{StatsName, StatsWindow};
use crate::broker::core::Core;
use crate::broker::remoting::{json_reply, reply_error, ConnCtx, RemotingState, Reply};
use crate::remoting::body::{
    BrokerStatsData, BrokerStatsItem, Connection, ConsumeStats, ConsumeStatsList,
    ConsumerConnection, GroupList, KvTable, MessageQueue, OffsetWrapper, ProducerConnection,
    ProducerInfo, ProducerTableInfo, TopicOffset, TopicStatsTable,
};
use crate::remoting::code::response_code;
use crate::remoting::{RemotingCommand, BROKER_VERSION};

fn queue(core: &Core, topic: &str, queue_id: u32) -> MessageQueue {
    MessageQueue {
        topic: topic.to_string(),
        broker_name: core.config.broker_name.clone(),
        queue_id: queue_id as i32,
    }
}

/// `MixAll.humanReadableByteCount(bytes, false)` as RocketMQ prints capacities.
fn human_bytes(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / 1024f64.ln()).floor() as i32;
    let unit = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"].get(exp as usize - 1).unwrap_or(&"EiB");
    format!("{:.1} {unit}", bytes as f64 / 1024f64.powi(exp))
}

/// `[ d days, h hours, m minutes, s seconds ]`, RocketMQ's `runtime` entry.
fn runtime_text(ms: u64) -> String {
    let s = ms / 1000;
    format!(
        "[ {} days, {} hours, {} minutes, {} seconds ]",
        s / 86_400,
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    )
}

/// The runtime figures of GET_BROKER_RUNTIME_INFO (RocketMQ's `prepareRuntimeInfo` keys, with
/// memory where it reports disk, and baiji's own `baiji*` keys).
pub(crate) fn runtime_info(core: &Core, face: &RemotingState) -> KvTable {
    let now = crate::time::now_ms();
    let mem = core.store.memory();
    let settings = core.store.settings();
    let (put_total, get_total) = core.rates.totals();
    let tps = |v: [f64; 3]| format!("{:.2} {:.2} {:.2}", v[0], v[1], v[2]);
    let put = tps(core.rates.put_tps());
    let get = tps(core.rates.get_tps());
    let earliest = core
        .store
        .topics()
        .iter()
        .filter_map(|(name, queues)| {
            let t = core.store.topic(name)?;
            (0..*queues).filter_map(|q| core.store.earliest_timestamp(t.as_ref(), q)).min()
        })
        .min()
        .unwrap_or(0);
    let free = mem.budget.saturating_sub(mem.bytes_used);
    let ratio = if mem.budget == 0 { 0.0 } else { mem.bytes_used as f64 / mem.budget as f64 };
    // Relaxed: statistics, each read on its own.
    let load = |c: &crate::sync::AtomicU64| c.load(crate::sync::Ordering::Relaxed).to_string();
    let mut entries: Vec<(&str, String)> = vec![
        ("brokerActive", "true".into()),
        ("brokerVersionDesc", "V5_3_1".into()),
        ("brokerVersion", BROKER_VERSION.to_string()),
        ("baijiVersion", env!("CARGO_PKG_VERSION").into()),
        ("bootTimestamp", core.boot_ms.to_string()),
        ("runtime", runtime_text(now.saturating_sub(core.boot_ms))),
        ("startAcceptSendRequestTimeStamp", core.boot_ms.to_string()),
        ("msgPutTotalYesterdayMorning", "0".into()),
        ("msgPutTotalTodayMorning", "0".into()),
        ("msgPutTotalTodayNow", put_total.to_string()),
        ("msgGetTotalYesterdayMorning", "0".into()),
        ("msgGetTotalTodayMorning", "0".into()),
        ("msgGetTotalTodayNow", get_total.to_string()),
        ("putTps", put),
        ("getTransferredTps", get.clone()),
        ("getTotalTps", get.clone()),
        ("getFoundTps", get),
        ("getMissTps", "0.00 0.00 0.00".into()),
        ("sendThreadPoolQueueSize", "0".into()),
        ("sendThreadPoolQueueCapacity", "0".into()),
        ("sendThreadPoolQueueHeadWaitTimeMills", "0".into()),
        ("pullThreadPoolQueueSize", "0".into()),
        ("pullThreadPoolQueueCapacity", "0".into()),
        ("pullThreadPoolQueueHeadWaitTimeMills", "0".into()),
        ("queryThreadPoolQueueHeadWaitTimeMills", "0".into()),
        ("pageCacheLockTimeMills", "0".into()),
        ("dispatchBehindBytes", "0".into()),
        ("earliestMessageTimeStamp", earliest.to_string()),
        ("timerReadBehind", "0".into()),
        ("timerOffsetBehind", core.timers.waiting().to_string()),
        ("timerCongestNum", "0".into()),
        ("timerEnqueueTps", "0.0".into()),
        ("timerDequeueTps", "0.0".into()),
        // Memory where RocketMQ reports the commit log's disk.
        (
            "commitLogDirCapacity",
            format!("Total : {}, Free : {}.", human_bytes(mem.budget), human_bytes(free)),
        ),
        ("commitLogDiskRatio", format!("{ratio:.4}")),
        ("consumeQueueDiskRatio", format!("{ratio:.4}")),
        ("commitLogMinOffset", "0".into()),
        ("commitLogMaxOffset", mem.bytes_used.to_string()),
        ("remainHowManyDataToFlush", "0 B".into()),
        ("remainHowManyDataToCommit", "0 B".into()),
        // baiji's own.
        ("baijiMemoryUsed", mem.bytes_used.to_string()),
        ("baijiMemoryBudget", mem.budget.to_string()),
        ("baijiMemoryPolicy", crate::broker::core::config::policy_name(settings.policy).into()),
        ("baijiLiveMessages", mem.live_messages.to_string()),
        ("baijiReclaimedMessages", mem.reclaimed_messages.to_string()),
        ("baijiEvictedMessages", mem.evicted_messages.to_string()),
        ("baijiRejectedMessages", mem.rejected_messages.to_string()),
        ("baijiSendsRejected", load(&core.counters.sends_rejected)),
        ("baijiOnewayRejected", load(&face.counters.oneway_rejected)),
    ];
    if let Some(j) = &core.journal {
        // Config changes the journal could not write (a full tmpfs): not kept over a restart.
        entries.push(("baijiConfigJournalFailed", j.figures().failed_writes.to_string()));
    }
    if let (Some(s), Some(r)) = (core.store.storage(), &core.recovery) {
        entries.push(("baijiStoreSegmentBytes", s.segment_bytes.to_string()));
        entries.push(("baijiStoreJournalBytes", s.journal_bytes.to_string()));
        entries.push(("baijiStoreFailedWrites", s.failed_writes.to_string()));
        entries.push(("baijiStoreRecoveredMessages", r.messages.to_string()));
        entries.push(("baijiStoreTornRecords", r.torn_records.to_string()));
        entries.push(("baijiStoreRecoveryMs", r.elapsed.as_millis().to_string()));
    }
    KvTable { table: entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect() }
}

/// `GET_BROKER_RUNTIME_INFO` (28).
pub(crate) fn get_broker_runtime_info(
    core: &Arc<Core>,
    face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    json_reply(&req, &runtime_info(core, face))
}

/// `GET_TOPIC_STATS_INFO` (202): each queue's min and max offset and the store time of its
/// last message.
pub(crate) fn get_topic_stats_info(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let topic = match req.ext_fields.required_str("topic") {
        Ok(t) => t,
        Err(e) => return bad_header(&req, &e),
    };
    let Some(t) = core.store.topic(topic) else {
        return reply_error(&req, response_code::SYSTEM_ERROR, format!("topic[{topic}] not exist"));
    };
    let mut table = TopicStatsTable {
        offset_table: Vec::with_capacity(t.queue_count() as usize),
        topic_put_tps: core.rates.topic_put_tps(topic),
    };
    for q in 0..t.queue_count() {
        let (min, max) = t.offsets(q).unwrap_or((0, 0));
        let last = match max.checked_sub(1) {
            Some(o) => core.store.store_timestamp(t.as_ref(), q, o).unwrap_or(0),
            None => 0,
        };
        table.offset_table.push((
            queue(core, topic, q),
            TopicOffset {
                min_offset: min as i64,
                max_offset: max as i64,
                last_update_timestamp: last as i64,
            },
        ));
    }
    json_reply(&req, &table)
}

fn connection(c: crate::broker::core::clients::ClientConn) -> Connection {
    Connection {
        client_id: c.client_id,
        client_addr: c.addr,
        language: c.language.name().to_string(),
        version: c.version,
    }
}

/// `GET_CONSUMER_CONNECTION_LIST` (203).
pub(crate) fn get_consumer_connection_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let group = match req.ext_fields.required_str("consumerGroup") {
        Ok(g) => g,
        Err(e) => return bad_header(&req, &e),
    };
    let Some(view) = core.clients.group_view(group).filter(|v| !v.conns.is_empty()) else {
        return reply_error(
            &req,
            response_code::CONSUMER_NOT_ONLINE,
            format!("the consumer group[{group}] not online"),
        );
    };
    let body = ConsumerConnection {
        connection_set: view.conns.into_iter().map(connection).collect(),
        subscription_table: view.subscriptions.into_iter().map(|d| (d.topic.clone(), d)).collect(),
        consume_type: view.consume_type,
        message_model: view.model,
        consume_from_where: view.from_where,
    };
    json_reply(&req, &body)
}

/// `GET_PRODUCER_CONNECTION_LIST` (204).
pub(crate) fn get_producer_connection_list(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let group = match req.ext_fields.required_str("producerGroup") {
        Ok(g) => g,
        Err(e) => return bad_header(&req, &e),
    };
    let conns = core.clients.producer_conns(group);
    if conns.is_empty() {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("the producer group[{group}] not exist"),
        );
    }
    json_reply(
        &req,
        &ProducerConnection { connection_set: conns.into_iter().map(connection).collect() },
    )
}

/// The topics a group consumes: its heartbeats' subscriptions and the topics the store holds
/// for it, sorted.
pub(crate) fn topics_of_group(core: &Core, group: &str) -> Vec<String> {
    let mut topics = core.clients.topics_of(group);
    topics.extend(
        core.store.group_figures().into_iter().filter(|g| g.group == group).map(|g| g.topic),
    );
    topics.sort();
    topics.dedup();
    topics
}

/// Each queue of `topic` with `group`'s progress on it: the queue's max offset, the group's
/// committed offset, its pulled offset and the store time of the last message it committed.
fn queue_progress(core: &Core, group: &str, topic: &str) -> Vec<(MessageQueue, OffsetWrapper)> {
    let Some(t) = core.store.topic(topic) else { return Vec::new() };
    let counters = core.topics.get_perm_counted(topic).map(|(_, c)| c);
    (0..t.queue_count())
        .map(|q| {
            let (_, max) = t.offsets(q).unwrap_or((0, 0));
            let committed = core.store.committed(group, topic, q).unwrap_or(0);
            let pulled = counters.as_ref().map_or(0, |c| c.pulled_offset(group, q as usize));
            let last = match committed.checked_sub(1) {
                Some(o) => core.store.store_timestamp(t.as_ref(), q, o).unwrap_or(0),
                None => 0,
            };
            let progress = OffsetWrapper {
                broker_offset: max as i64,
                consumer_offset: committed as i64,
                pull_offset: committed.max(pulled) as i64,
                last_timestamp: last as i64,
            };
            (queue(core, topic, q), progress)
        })
        .collect()
}

/// `GET_CONSUME_STATS` (208): per queue of each topic the group consumes, the queue's max
/// offset, the group's committed offset, its pulled offset and the store time of the last
/// message it committed.
pub(crate) fn get_consume_stats(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let group = match req.ext_fields.required_str("consumerGroup") {
        Ok(g) => g,
        Err(e) => return bad_header(&req, &e),
    };
    let topics = match req.ext_fields.optional_str("topic").filter(|t| !t.is_empty()) {
        Some(t) => vec![t.to_string()],
        None => topics_of_group(core, group),
    };
    if topics.is_empty() && !core.groups.contains(group) && !core.clients.knows_group(group) {
        return reply_error(
            &req,
            response_code::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("subscription group [{group}] does not exist"),
        );
    }
    let figures = core.store.group_figures();
    let mut stats = ConsumeStats::default();
    let mut held = 0;
    let mut dropped = 0;
    for topic in &topics {
        stats.offset_table.extend(queue_progress(core, group, topic));
        for f in figures.iter().filter(|f| f.group == group && f.topic == *topic) {
            held += f.held_bytes;
            dropped += f.dropped;
        }
    }
    stats.held_bytes = Some(held);
    stats.dropped_messages = Some(dropped);
    json_reply(&req, &stats)
}

/// `QUERY_TOPIC_CONSUME_BY_WHO` (300): the groups subscribed to a topic (heartbeats) or
/// holding it (the store).
pub(crate) fn query_topic_consume_by_who(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let topic = match req.ext_fields.required_str("topic") {
        Ok(t) => t,
        Err(e) => return bad_header(&req, &e),
    };
    let mut groups = core.clients.groups_of_topic(topic);
    groups.extend(
        core.store.group_figures().into_iter().filter(|g| g.topic == topic).map(|g| g.group),
    );
    groups.sort();
    groups.dedup();
    json_reply(&req, &GroupList { group_list: groups })
}

fn stats_item(w: StatsWindow) -> BrokerStatsItem {
    BrokerStatsItem { sum: w.sum, tps: w.tps, avgpt: w.avgpt }
}

/// `VIEW_BROKER_STATS_DATA` (315): one stats item's last minute, hour and day
/// (`TOPIC_PUT_NUMS`/`_SIZE` by topic, `GROUP_GET_NUMS`/`_SIZE` by `topic@group`,
/// `BROKER_PUT_NUMS`/`BROKER_GET_NUMS` by cluster name); RocketMQ's `SYSTEM_ERROR` for an item
/// that does not exist (nothing counted yet, or a stats name baiji does not count).
pub(crate) fn view_broker_stats_data(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let (name, key) =
        match (req.ext_fields.required_str("statsName"), req.ext_fields.required_str("statsKey")) {
            (Ok(n), Ok(k)) => (n, k),
            (Err(e), _) | (_, Err(e)) => return bad_header(&req, &e),
        };
    let windows = StatsName::parse(name)
        .and_then(|n| core.rates.stats_item(core, n, key, crate::time::now_ms()));
    let Some([minute, hour, day]) = windows else {
        return reply_error(
            &req,
            response_code::SYSTEM_ERROR,
            format!("The stats <{name}> <{key}> not exist"),
        );
    };
    let body = BrokerStatsData {
        stats_minute: stats_item(minute),
        stats_hour: stats_item(hour),
        stats_day: stats_item(day),
    };
    json_reply(&req, &body)
}

/// `GET_BROKER_CONSUME_STATS` (317): for every consumer group the broker knows (admin-created,
/// heartbeating, holding messages, gRPC), one `ConsumeStats` per topic it consumes (only
/// ordered topics with `isOrder=true`), with the group's minute delivery rate, and the
/// broker's total lag.
pub(crate) fn get_broker_consume_stats(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let order_only = match req.ext_fields.optional_bool("isOrder") {
        Ok(o) => o.unwrap_or(false),
        Err(e) => return bad_header(&req, &e),
    };
    let mut groups: Vec<String> = core.groups.all().into_keys().collect();
    groups.extend(core.clients.consumer_groups());
    groups.extend(core.store.group_figures().into_iter().map(|f| f.group));
    groups.retain(|g| !crate::broker::core::topics::is_internal_group(g));
    groups.sort();
    groups.dedup();
    let now = crate::time::now_ms();
    let mut body = ConsumeStatsList {
        broker_addr: core.store_host.to_string(),
        ..ConsumeStatsList::default()
    };
    for group in groups {
        let mut list = Vec::new();
        for topic in topics_of_group(core, &group) {
            let Some(config) = core.topics.get(&topic) else { continue };
            if order_only && !config.order {
                continue;
            }
            let offset_table = queue_progress(core, &group, &topic);
            for (_, o) in &offset_table {
                body.total_diff += o.broker_offset - o.consumer_offset;
                body.total_inflight_diff += o.pull_offset - o.consumer_offset;
            }
            let key = format!("{topic}@{group}");
            let consume_tps = core
                .rates
                .stats_item(core, StatsName::GroupGetNums, &key, now)
                .map_or(0.0, |[minute, _, _]| minute.tps);
            list.push(ConsumeStats { offset_table, consume_tps, ..ConsumeStats::default() });
        }
        body.consume_stats_list.push(std::iter::once((group, list)).collect());
    }
    json_reply(&req, &body)
}

/// `GET_ALL_PRODUCER_INFO` (328): every producer group with its live clients, remoting and
/// gRPC (a gRPC producer in one group per topic it publishes to, as Apache's proxy registers
/// it); addresses as Netty prints them (`/ip:port`).
pub(crate) fn get_all_producer_info(
    core: &Arc<Core>,
    _face: &Arc<RemotingState>,
    _ctx: &ConnCtx,
    req: RemotingCommand,
) -> Reply {
    let data = core
        .clients
        .producer_table()
        .into_iter()
        .map(|(group, clients)| {
            let infos = clients
                .into_iter()
                .map(|p| ProducerInfo {
                    client_id: p.conn.client_id,
                    remote_ip: format!("/{}", p.conn.addr),
                    language: p.conn.language.name().to_string(),
                    version: p.conn.version,
                    last_update_timestamp: p.last_seen_ms as i64,
                })
                .collect();
            (group, infos)
        })
        .collect();
    json_reply(&req, &ProducerTableInfo { data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_sizes_when_printing_capacity_should_read_as_rocketmq_prints_it() {
        assert_eq!(human_bytes(512), "512 B", "under 1 KiB in bytes");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB", "powers of 1024 with one decimal");
        assert_eq!(human_bytes(1536), "1.5 KiB", "fractions are kept");
    }

    #[test]
    fn given_uptime_when_printing_runtime_should_split_days_hours_minutes_seconds() {
        assert_eq!(runtime_text(90_061_000), "[ 1 days, 1 hours, 1 minutes, 1 seconds ]");
    }
}
