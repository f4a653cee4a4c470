//! The data of `baiji top`: a live view of a cluster gathered with the admin request codes any
//! RocketMQ broker answers (so it works against RocketMQ brokers too), and the pure function
//! that turns two samples into the rows shown.
//!
//! One [`sample`] asks the name server for its brokers (`GET_BROKER_CLUSTER_INFO`), then each
//! master for its runtime figures (`GET_BROKER_RUNTIME_INFO`), its topics
//! (`GET_ALL_TOPIC_CONFIG`), each topic's offsets (`GET_TOPIC_STATS_INFO`) and consumer groups
//! (`QUERY_TOPIC_CONSUME_BY_WHO`), and each group's progress (`GET_CONSUME_STATS`). [`view`]
//! derives rates from the differences between two samples: messages in per second from the
//! topics' max offsets, messages consumed per second from the groups' committed offsets. The
//! memory figures (budget used, held bytes per group, drops) are baiji's additions to those
//! answers; against another broker they show as absent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use thiserror::Error;

use crate::remoting::body::{
    ClusterInfo, ConsumeStats, GroupList, JsonBody, KvTable, TopicConfigAndMappingSerializeWrapper,
    TopicStatsTable,
};
use crate::remoting::client::{ClientError, Connection};
use crate::remoting::code::{request_code, response_code};
use crate::remoting::{ExtFields, RemotingCommand};

/// Why a sample could not be taken.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TopError {
    /// The request failed (connection, timeout).
    #[error("{what}: {source}")]
    Client {
        /// What was asked of whom.
        what: String,
        /// The failure.
        source: ClientError,
    },
    /// The server answered with an error code.
    #[error("{what}: code {code} {remark}")]
    Refused {
        /// What was asked of whom.
        what: String,
        /// The response code.
        code: i32,
        /// The response remark.
        remark: String,
    },
    /// The answer's body did not parse.
    #[error("{what}: {why}")]
    Body {
        /// What was asked of whom.
        what: String,
        /// The parse error.
        why: String,
    },
}

/// One broker's figures at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerSample {
    /// Cluster name.
    pub cluster: String,
    /// Broker name.
    pub name: String,
    /// The master's address.
    pub addr: String,
    /// `GET_BROKER_RUNTIME_INFO`'s table (empty if it failed).
    pub runtime: BTreeMap<String, String>,
    /// Its topics (system topics left out).
    pub topics: Vec<TopicSample>,
    /// Its consumer groups.
    pub groups: Vec<GroupSample>,
    /// The first failure while sampling this broker, if any.
    pub error: Option<String>,
}

/// One topic on one broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicSample {
    /// Topic name.
    pub name: String,
    /// Queues.
    pub queues: u32,
    /// Sum of the queues' max offsets (messages ever stored).
    pub max_offsets: i64,
    /// Sum of the queues' `max - min` (messages retained).
    pub retained: i64,
}

/// One consumer group on one broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSample {
    /// Group name.
    pub name: String,
    /// Sum of its committed offsets over the queues it consumes.
    pub consumed: i64,
    /// Sum of `broker offset - consumer offset`.
    pub lag: i64,
    /// Bytes of retained messages it holds (baiji only).
    pub held_bytes: Option<u64>,
    /// Messages evicted before it consumed them (baiji only).
    pub dropped: Option<u64>,
}

/// The whole cluster at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// When it was taken, ms (any monotonic clock; only differences are used).
    pub at_ms: u64,
    /// The brokers, by name.
    pub brokers: Vec<BrokerSample>,
}

/// A broker's row.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerRow {
    /// Cluster name.
    pub cluster: String,
    /// Broker name.
    pub name: String,
    /// Address.
    pub addr: String,
    /// Version (`brokerVersionDesc`).
    pub version: String,
    /// Messages in per second over the broker's last 10 s (`putTps`).
    pub in_tps: Option<f64>,
    /// Messages out per second over the broker's last 10 s (`getTransferredTps`).
    pub out_tps: Option<f64>,
    /// Memory in use and the budget, bytes (baiji only).
    pub memory: Option<(u64, u64)>,
    /// Messages evicted by `drop-oldest` so far (baiji only).
    pub evicted: Option<u64>,
    /// Sends refused for lack of memory so far (baiji only).
    pub refused: Option<u64>,
    /// Why the broker could not be (fully) sampled.
    pub error: Option<String>,
}

/// A topic's row.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicRow {
    /// Broker name.
    pub broker: String,
    /// Topic name.
    pub topic: String,
    /// Queues.
    pub queues: u32,
    /// Messages retained.
    pub retained: i64,
    /// Messages in per second since the previous sample (`None` on the first).
    pub in_rate: Option<f64>,
}

/// A consumer group's row.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRow {
    /// Broker name.
    pub broker: String,
    /// Group name.
    pub group: String,
    /// Messages consumed per second since the previous sample (`None` on the first).
    pub out_rate: Option<f64>,
    /// Messages not yet consumed.
    pub lag: i64,
    /// Bytes of retained messages it holds (baiji only).
    pub held_bytes: Option<u64>,
    /// Messages evicted before it consumed them (baiji only).
    pub dropped: Option<u64>,
}

/// What the screen shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct View {
    /// One row per broker.
    pub brokers: Vec<BrokerRow>,
    /// One row per topic per broker.
    pub topics: Vec<TopicRow>,
    /// One row per group per broker.
    pub groups: Vec<GroupRow>,
}

/// The first of RocketMQ's `"a b c"` rate triples.
fn first_rate(v: Option<&String>) -> Option<f64> {
    v?.split_whitespace().next()?.parse().ok()
}

fn number(table: &BTreeMap<String, String>, key: &str) -> Option<u64> {
    table.get(key)?.parse().ok()
}

/// Rate per second of a counter that went from `old` to `new` in `ms`; `None` without a
/// previous value or elapsed time. A counter that went backward (a reset, a recreated topic)
/// counts from zero.
fn per_second(old: Option<i64>, new: i64, ms: u64) -> Option<f64> {
    let old = old?;
    if ms == 0 {
        return None;
    }
    let delta = if new >= old { new - old } else { new };
    Some(delta as f64 * 1000.0 / ms as f64)
}

/// The rows for `cur`, with rates against `prev` (the sample before it, if any).
#[must_use]
pub fn view(prev: Option<&Sample>, cur: &Sample) -> View {
    let ms = prev.map_or(0, |p| cur.at_ms.saturating_sub(p.at_ms));
    let old_broker = |name: &str| prev.and_then(|p| p.brokers.iter().find(|b| b.name == name));
    let mut v = View::default();
    for b in &cur.brokers {
        let rt = &b.runtime;
        v.brokers.push(BrokerRow {
            cluster: b.cluster.clone(),
            name: b.name.clone(),
            addr: b.addr.clone(),
            version: rt.get("brokerVersionDesc").cloned().unwrap_or_default(),
            in_tps: first_rate(rt.get("putTps")),
            out_tps: first_rate(rt.get("getTransferredTps")),
            memory: number(rt, "baijiMemoryUsed").zip(number(rt, "baijiMemoryBudget")),
            evicted: number(rt, "baijiEvictedMessages"),
            refused: number(rt, "baijiSendsRejected"),
            error: b.error.clone(),
        });
        let old = old_broker(&b.name);
        for t in &b.topics {
            let before = old.and_then(|o| o.topics.iter().find(|x| x.name == t.name));
            v.topics.push(TopicRow {
                broker: b.name.clone(),
                topic: t.name.clone(),
                queues: t.queues,
                retained: t.retained,
                in_rate: per_second(before.map(|x| x.max_offsets), t.max_offsets, ms),
            });
        }
        for g in &b.groups {
            let before = old.and_then(|o| o.groups.iter().find(|x| x.name == g.name));
            v.groups.push(GroupRow {
                broker: b.name.clone(),
                group: g.name.clone(),
                out_rate: per_second(before.map(|x| x.consumed), g.consumed, ms),
                lag: g.lag,
                held_bytes: g.held_bytes,
                dropped: g.dropped,
            });
        }
    }
    v
}

/// Topics a RocketMQ broker keeps for itself, left out of the view.
#[must_use]
pub fn is_system_topic(topic: &str, broker: &BrokerSample) -> bool {
    topic == "TBW102"
        || topic == "SCHEDULE_TOPIC_XXXX"
        || topic == "OFFSET_MOVED_EVENT"
        || topic == "SELF_TEST_TOPIC"
        || topic == "BenchmarkTest"
        || topic == "TRANS_CHECK_MAX_TIME_TOPIC"
        || topic.starts_with("RMQ_SYS_")
        || topic.starts_with("rmq_sys_")
        || topic == broker.name
        || topic == broker.cluster
}

/// One connection to a server, asking for JSON bodies.
struct Asker {
    conn: Connection,
    addr: String,
}

impl Asker {
    async fn open(addr: &str, timeout: Duration) -> Result<Self, TopError> {
        let conn = Connection::connect(addr, timeout)
            .await
            .map_err(|source| TopError::Client { what: format!("connecting to {addr}"), source })?
            .with_call_timeout(timeout);
        Ok(Asker { conn, addr: addr.to_string() })
    }

    async fn ask<T: JsonBody>(&mut self, code: i32, ext: ExtFields) -> Result<T, TopError> {
        let name = request_code::name(code).unwrap_or("request");
        let what = format!("{name} to {}", self.addr);
        let req = RemotingCommand::request(code, 0).with_ext_fields(ext);
        let resp = self
            .conn
            .call(req)
            .await
            .map_err(|source| TopError::Client { what: what.clone(), source })?;
        if resp.code != response_code::SUCCESS {
            return Err(TopError::Refused {
                what,
                code: resp.code,
                remark: resp.remark.unwrap_or_default(),
            });
        }
        T::from_json_slice(&resp.body).map_err(|e| TopError::Body { what, why: e.to_string() })
    }
}

fn one(key: &str, value: &str) -> ExtFields {
    let mut ext = ExtFields::new();
    ext.insert(key, value);
    ext
}

/// Takes one [`Sample`] of the cluster behind name server `namesrv`; `timeout` bounds each
/// connection and request. A broker that fails part-way keeps what was gathered and says why
/// in its `error`.
///
/// # Errors
/// [`TopError`] when the name server cannot be asked.
pub async fn sample(namesrv: &str, timeout: Duration, at_ms: u64) -> Result<Sample, TopError> {
    let mut ns = Asker::open(namesrv, timeout).await?;
    let info: ClusterInfo = ns.ask(request_code::GET_BROKER_CLUSTER_INFO, ExtFields::new()).await?;
    let mut out = Sample { at_ms, brokers: Vec::new() };
    for (name, data) in &info.broker_addr_table {
        let cluster = info
            .cluster_addr_table
            .iter()
            .find(|(_, names)| names.contains(name))
            .map_or_else(|| data.cluster.clone(), |(c, _)| c.clone());
        let Some(addr) = data.broker_addrs.get(&0).cloned() else { continue };
        let mut b = BrokerSample { cluster, name: name.clone(), addr, ..Default::default() };
        if let Err(e) = sample_broker(&mut b, timeout).await {
            b.error = Some(e.to_string());
        }
        out.brokers.push(b);
    }
    Ok(out)
}

async fn sample_broker(b: &mut BrokerSample, timeout: Duration) -> Result<(), TopError> {
    let mut broker = Asker::open(&b.addr, timeout).await?;
    let runtime: KvTable =
        broker.ask(request_code::GET_BROKER_RUNTIME_INFO, ExtFields::new()).await?;
    b.runtime = runtime.table;
    let topics: TopicConfigAndMappingSerializeWrapper =
        broker.ask(request_code::GET_ALL_TOPIC_CONFIG, ExtFields::new()).await?;
    let mut groups = BTreeSet::new();
    for name in topics.topic_config_table.keys() {
        if is_system_topic(name, b) {
            continue;
        }
        let stats: TopicStatsTable =
            broker.ask(request_code::GET_TOPIC_STATS_INFO, one("topic", name)).await?;
        let who: GroupList =
            broker.ask(request_code::QUERY_TOPIC_CONSUME_BY_WHO, one("topic", name)).await?;
        groups.extend(who.group_list);
        b.topics.push(TopicSample {
            name: name.clone(),
            queues: stats.offset_table.len() as u32,
            max_offsets: stats.offset_table.iter().map(|(_, o)| o.max_offset).sum(),
            retained: stats.offset_table.iter().map(|(_, o)| o.max_offset - o.min_offset).sum(),
        });
    }
    for name in groups {
        let stats: ConsumeStats =
            broker.ask(request_code::GET_CONSUME_STATS, one("consumerGroup", &name)).await?;
        let o = &stats.offset_table;
        b.groups.push(GroupSample {
            consumed: o.iter().map(|(_, w)| w.consumer_offset).sum(),
            lag: o.iter().map(|(_, w)| (w.broker_offset - w.consumer_offset).max(0)).sum(),
            held_bytes: stats.held_bytes,
            dropped: stats.dropped_messages,
            name,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(max_offsets: i64, consumed: i64) -> BrokerSample {
        let runtime = [
            ("brokerVersionDesc", "V5_3_1"),
            ("putTps", "12.50 3.00 1.00"),
            ("getTransferredTps", "7.00 1.00 0.00"),
            ("baijiMemoryUsed", "2048"),
            ("baijiMemoryBudget", "4096"),
            ("baijiEvictedMessages", "3"),
            ("baijiSendsRejected", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        BrokerSample {
            cluster: "C".into(),
            name: "b".into(),
            addr: "127.0.0.1:10911".into(),
            runtime,
            topics: vec![TopicSample { name: "T".into(), queues: 4, max_offsets, retained: 5 }],
            groups: vec![GroupSample {
                name: "G".into(),
                consumed,
                lag: max_offsets - consumed,
                held_bytes: Some(640),
                dropped: Some(0),
            }],
            error: None,
        }
    }

    #[test]
    fn given_one_sample_when_viewing_should_show_figures_without_rates() {
        let v = view(None, &Sample { at_ms: 1000, brokers: vec![broker(10, 4)] });
        let b = &v.brokers[0];
        assert_eq!(b.in_tps, Some(12.5), "the broker's own 10 s put rate");
        assert_eq!(b.out_tps, Some(7.0), "the broker's own 10 s delivery rate");
        assert_eq!(b.memory, Some((2048, 4096)), "baiji's memory figures");
        assert_eq!((b.evicted, b.refused), (Some(3), Some(1)), "drops and refusals");
        assert_eq!(v.topics[0].in_rate, None, "no rate without a previous sample");
        assert_eq!(v.groups[0].out_rate, None, "no rate without a previous sample");
        assert_eq!(v.groups[0].lag, 6, "lag is broker minus consumer offsets");
        assert_eq!(v.groups[0].held_bytes, Some(640), "held memory per group");
    }

    #[test]
    fn given_two_samples_when_viewing_should_rate_the_offset_differences() {
        let a = Sample { at_ms: 1000, brokers: vec![broker(10, 4)] };
        let b = Sample { at_ms: 3000, brokers: vec![broker(30, 10)] };
        let v = view(Some(&a), &b);
        assert_eq!(v.topics[0].in_rate, Some(10.0), "20 messages in 2 s");
        assert_eq!(v.groups[0].out_rate, Some(3.0), "6 consumed in 2 s");
    }

    #[test]
    fn given_a_counter_that_went_back_when_viewing_should_count_from_zero() {
        let a = Sample { at_ms: 0, brokers: vec![broker(100, 50)] };
        let b = Sample { at_ms: 1000, brokers: vec![broker(4, 2)] };
        let v = view(Some(&a), &b);
        assert_eq!(v.topics[0].in_rate, Some(4.0), "a recreated topic counts from zero");
        assert_eq!(v.groups[0].out_rate, Some(2.0), "a reset group counts from zero");
    }

    #[test]
    fn given_another_brokers_runtime_when_viewing_should_leave_baiji_figures_absent() {
        let mut b = broker(1, 0);
        b.runtime.retain(|k, _| !k.starts_with("baiji"));
        let v = view(None, &Sample { at_ms: 0, brokers: vec![b] });
        assert_eq!(v.brokers[0].memory, None, "a RocketMQ broker has no memory budget");
        assert_eq!(v.brokers[0].evicted, None, "nor evictions");
    }

    #[test]
    fn given_system_topics_when_filtering_should_leave_them_out() {
        let b = broker(0, 0);
        for t in ["TBW102", "RMQ_SYS_TRACE_TOPIC", "b", "C", "SCHEDULE_TOPIC_XXXX"] {
            assert!(is_system_topic(t, &b), "{t} is the broker's own");
        }
        assert!(!is_system_topic("Orders", &b), "a user topic is shown");
    }
}
