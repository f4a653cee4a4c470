//! The broker's topic table: RocketMQ topic configs (queue counts, permissions) over the
//! store's topics, plus the naming rules.

use crate::sync::{Arc, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::broker::core::counters::TopicCounters;

use crate::remoting::body::{DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper};
use crate::sync::{read, write};

/// `TBW102`: the template producers route unknown topics through.
pub(crate) const AUTO_CREATE_TOPIC: &str = "TBW102";
/// `RMQ_SYS_TRACE_TOPIC`: where traced clients send their trace records (the Java client's
/// `TopicValidator.RMQ_SYS_TRACE_TOPIC`, the Go client's `RMQ_SYS_TRACE_TOPIC`), read by the
/// dashboard and mqadmin with `QUERY_MESSAGE`; no group consumes it.
pub(crate) const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// The topic of a cluster's reply messages (request/reply), `<cluster>_REPLY_TOPIC`, as
/// RocketMQ's `MixAll.REPLY_TOPIC_POSTFIX` and the clients' `createReplyMessage` name it.
pub(crate) fn reply_topic(cluster: &str) -> String {
    format!("{cluster}_REPLY_TOPIC")
}
/// Prefix of a group's retry topic.
pub(crate) const RETRY_PREFIX: &str = "%RETRY%";
/// Prefix of a group's dead-letter topic.
pub(crate) const DLQ_PREFIX: &str = "%DLQ%";

/// A group's POP retry topic for `topic`, `%RETRY%<group>_<topic>` (RocketMQ's
/// `KeyBuilder.buildPopRetryTopicV1`): where an expired popped message is copied, with its
/// reconsume count one higher, so that its own queue moves on (as `PopReviveService`
/// revives). Clients name it in acks and invisible-time changes of such messages
/// (`ExtraInfoUtil.getRealTopic`).
pub(crate) fn pop_retry_topic(group: &str, topic: &str) -> String {
    format!("{RETRY_PREFIX}{group}_{topic}")
}

/// The topic a POP receipt's retry flag names (`ExtraInfoUtil.getRealTopic`): `topic` itself
/// for `0` (or a name that already is a retry topic), the V1 pop retry topic for `1`, the V2
/// one (`%RETRY%<group>+<topic>`) for `2`.
pub(crate) fn pop_real_topic(group: &str, topic: &str, retry: &str) -> String {
    if topic.starts_with(RETRY_PREFIX) {
        return topic.to_owned();
    }
    match retry {
        "1" => pop_retry_topic(group, topic),
        "2" => format!("{RETRY_PREFIX}{group}+{topic}"),
        _ => topic.to_owned(),
    }
}

/// Permission bits (RocketMQ `PermName`).
pub(crate) mod perm {
    /// Readable.
    pub(crate) const READ: u32 = 0x4;
    /// Writable.
    pub(crate) const WRITE: u32 = 0x2;
    /// May be used as a template for auto-created topics.
    pub(crate) const INHERIT: u32 = 0x1;
    /// Read and write.
    pub(crate) const RW: u32 = READ | WRITE;
}

/// Topics clients may not send to (RocketMQ `TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`).
const NOT_ALLOWED_SEND: [&str; 7] = [
    "SCHEDULE_TOPIC_XXXX",
    "SCHEDULE_TOPIC_XXXX_V2",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
];

/// Topics an admin may not create (RocketMQ `TopicValidator.isSystemTopic`).
pub(crate) fn is_system_topic(t: &str) -> bool {
    t == AUTO_CREATE_TOPIC
        || NOT_ALLOWED_SEND.contains(&t)
        || t == "BenchmarkTest"
        || t == "RMQ_SYS_TRACE_TOPIC"
        || t.starts_with("rmq_sys_")
}

/// The topics baiji's own tasks keep waiting messages in (delay levels, timers, half
/// messages). They are not in the topic table (never routed or pulled), and a client may not
/// subscribe to them or commit offsets on them either: a subscription would hold their
/// messages for good, a commit would release messages still waiting.
pub(crate) fn is_internal_topic(t: &str) -> bool {
    t == super::delay::SCHEDULE_TOPIC
        || t == super::timer::TIMER_TOPIC
        || t == super::transaction::HALF_TOPIC
}

/// The groups with which baiji's own tasks hold the internal topics; a client heartbeat
/// naming one is ignored (so no client becomes a member, and commits as it are refused).
pub(crate) fn is_internal_group(g: &str) -> bool {
    g == super::delay::SCHEDULE_GROUP
        || g == super::timer::TIMER_GROUP
        || g == super::transaction::HALF_GROUP
}

/// Whether clients may send to `t`.
pub(crate) fn send_allowed(t: &str) -> bool {
    // The timer topic too: RocketMQ re-reads what lands there as timer messages; baiji keeps
    // it internal (never routed or readable), like the schedule topic.
    !NOT_ALLOWED_SEND.contains(&t) && t != super::timer::TIMER_TOPIC
}

/// RocketMQ's topic name rule, with its Java wording on failure.
pub(crate) fn validate_topic(t: &str) -> Result<(), String> {
    if t.trim().is_empty() {
        return Err("The specified topic is blank.".into());
    }
    if t.len() > 127 {
        return Err("The specified topic is longer than topic max length.".into());
    }
    if !t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-')) {
        return Err(
            "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
                .into(),
        );
    }
    Ok(())
}

/// The config an admin's create-or-update asks for (`UPDATE_AND_CREATE_TOPIC` and each entry
/// of `UPDATE_AND_CREATE_TOPIC_LIST`), checked as RocketMQ checks it: a valid name, not a
/// system topic, queue counts between 1 and [`MAX_QUEUES`](crate::store::MAX_QUEUES); the
/// permission keeps its read, write and inherit bits.
///
/// # Errors
/// The remark to answer with (`SYSTEM_ERROR`).
pub(crate) fn admin_topic_config(
    topic: &str,
    read_queue_nums: i64,
    write_queue_nums: i64,
    perm_bits: i64,
    topic_sys_flag: i64,
    order: bool,
) -> Result<TopicConfig, String> {
    validate_topic(topic)?;
    if is_system_topic(topic) {
        return Err(format!(
            "The topic[{}] is conflict with system topic.",
            crate::remoting::error::quote(topic)
        ));
    }
    let q = |n: i64| u32::try_from(n).ok().filter(|n| (1..=crate::store::MAX_QUEUES).contains(n));
    let (Some(read), Some(write)) = (q(read_queue_nums), q(write_queue_nums)) else {
        return Err(format!("queue counts must be between 1 and {}", crate::store::MAX_QUEUES));
    };
    let mut conf = TopicConfig::new(topic, read, write);
    conf.perm = u32::try_from(perm_bits).unwrap_or(perm::RW) & (perm::RW | perm::INHERIT);
    conf.topic_sys_flag = u32::try_from(topic_sys_flag).unwrap_or(0);
    conf.order = order;
    Ok(conf)
}

/// The names of this broker's system topics (`GET_SYSTEM_TOPIC_LIST_FROM_BROKER`), as
/// RocketMQ's `TopicConfigManager.getSystemTopic` lists the ones it made: those its own tasks
/// keep (delay levels, timers, half messages) and the system topics of its table (`TBW102`,
/// the trace topic, reply topics), sorted.
pub(crate) fn system_topics(table: &TopicTable, cluster: &str) -> Vec<String> {
    let reply = reply_topic(cluster);
    let mut v: Vec<String> = [super::delay::SCHEDULE_TOPIC, super::timer::TIMER_TOPIC]
        .into_iter()
        .chain([super::transaction::HALF_TOPIC])
        .map(str::to_owned)
        .chain(read(&table.configs).keys().filter(|t| is_system_topic(t) || **t == reply).cloned())
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The topic configs this broker serves, with a data version that changes with them.
#[derive(Debug)]
pub(crate) struct TopicTable {
    /// Each topic's config and its request-path metric counters (kept while the topic is).
    configs: RwLock<HashMap<String, (TopicConfig, Arc<TopicCounters>)>>,
    counter: AtomicI64,
    timestamp: AtomicI64,
}

impl TopicTable {
    pub(crate) fn new(default_queues: u32, auto_create: bool) -> Self {
        let t = TopicTable {
            configs: RwLock::new(HashMap::new()),
            counter: AtomicI64::new(0),
            timestamp: AtomicI64::new(crate::time::now_ms() as i64),
        };
        if auto_create {
            let mut c = TopicConfig::new(AUTO_CREATE_TOPIC, default_queues, default_queues);
            c.perm = perm::RW | perm::INHERIT;
            t.put(c);
        }
        t
    }

    /// The permission bits of `topic`, without copying its config (the send path's check).
    pub(crate) fn get_perm(&self, topic: &str) -> Option<u32> {
        read(&self.configs).get(topic).map(|(c, _)| c.perm)
    }

    /// The permission bits and the metric counters of `topic`, in the one lookup the send
    /// and pull paths make anyway.
    pub(crate) fn get_perm_counted(&self, topic: &str) -> Option<(u32, Arc<TopicCounters>)> {
        let configs = read(&self.configs);
        configs.get(topic).map(|(c, m)| (c.perm, Arc::clone(m)))
    }

    pub(crate) fn get(&self, topic: &str) -> Option<TopicConfig> {
        read(&self.configs).get(topic).map(|(c, _)| c.clone())
    }

    /// Inserts or replaces a config (a replaced topic keeps its counters); bumps the data
    /// version.
    pub(crate) fn put(&self, config: TopicConfig) {
        let mut configs = write(&self.configs);
        match configs.get_mut(&config.topic_name) {
            Some(entry) => entry.0 = config,
            None => {
                configs.insert(config.topic_name.clone(), (config, Arc::default()));
            }
        }
        drop(configs);
        self.bump();
    }

    /// Topics in the table.
    pub(crate) fn len(&self) -> usize {
        read(&self.configs).len()
    }

    /// Every topic's counters, by name (for a scrape).
    pub(crate) fn counters_all(&self) -> Vec<(String, Arc<TopicCounters>)> {
        let configs = read(&self.configs);
        let mut v: Vec<_> = configs.iter().map(|(k, (_, m))| (k.clone(), Arc::clone(m))).collect();
        drop(configs);
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    pub(crate) fn remove(&self, topic: &str) -> bool {
        let removed = write(&self.configs).remove(topic).is_some();
        if removed {
            self.bump();
        }
        removed
    }

    fn bump(&self) {
        // Relaxed: a version number; readers only compare it.
        self.counter.fetch_add(1, Ordering::Relaxed);
        self.timestamp.store(crate::time::now_ms() as i64, Ordering::Relaxed);
    }

    pub(crate) fn data_version(&self) -> DataVersion {
        DataVersion {
            state_version: 0,
            timestamp: self.timestamp.load(Ordering::Relaxed),
            counter: self.counter.load(Ordering::Relaxed),
        }
    }

    /// Every topic's config with the data version, as `GET_ALL_TOPIC_CONFIG` answers and
    /// `REGISTER_BROKER` carries them.
    pub(crate) fn serialize_wrapper(&self) -> TopicConfigAndMappingSerializeWrapper {
        TopicConfigAndMappingSerializeWrapper {
            topic_config_table: self.all().into_iter().map(|t| (t.topic_name.clone(), t)).collect(),
            data_version: self.data_version(),
            ..Default::default()
        }
    }

    pub(crate) fn all(&self) -> Vec<TopicConfig> {
        let mut v: Vec<TopicConfig> =
            read(&self.configs).values().map(|(c, _)| c.clone()).collect();
        v.sort_by(|a, b| a.topic_name.cmp(&b.topic_name));
        v
    }
}
