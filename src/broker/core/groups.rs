//! Subscription-group configs admins created (`UPDATE_AND_CREATE_SUBSCRIPTIONGROUP`), kept as
//! the JSON object the admin sent (RocketMQ's `SubscriptionGroupConfig`, whatever version wrote
//! it), RocketMQ's fields only and bounded in size and number, and given back as it came.
//! baiji itself needs little of it: a group exists once a heartbeat names it; the gRPC face
//! reads `consumeMessageOrderly` and `retryMaxTimes`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::{Map, Value};

use super::topics::{is_internal_group, is_internal_topic};
use super::Core;
use crate::remoting::body::{MessageQueue, QueueTimeSpan};
use crate::sync::{read, write, RwLock};

/// RocketMQ's longest group name (`Validators.CHARACTER_MAX_LENGTH`).
pub(crate) const MAX_GROUP_LEN: usize = 255;

/// Whether `group` is a group name RocketMQ accepts: not empty, at most [`MAX_GROUP_LEN`]
/// characters.
pub(crate) fn valid_name(group: &str) -> bool {
    !group.is_empty() && group.chars().count() <= MAX_GROUP_LEN
}

/// Why a consumer group may not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GroupError {
    /// A blank group name or one longer than RocketMQ allows.
    #[error("the consumer group name is blank or longer than {MAX_GROUP_LEN} characters")]
    BadName,
    /// No client announced the group.
    #[error("subscription group [{0}] does not exist")]
    Unknown(String),
}

impl Core {
    /// Creates or replaces subscription group `name`'s config ([`SubscriptionGroups::put`])
    /// and journals it.
    ///
    /// # Errors
    /// As [`SubscriptionGroups::put`].
    pub(crate) fn put_group_config(
        &self,
        name: String,
        config: Map<String, Value>,
        size: usize,
    ) -> Result<(), GroupConfigError> {
        let journaled = name.clone();
        self.groups.put(name, config, size)?;
        self.journal_group(&journaled);
        Ok(())
    }

    /// Creates or replaces every config of `configs`, or none ([`SubscriptionGroups::put_all`]),
    /// and journals them.
    ///
    /// # Errors
    /// As [`SubscriptionGroups::put_all`].
    pub(crate) fn put_group_configs(
        &self,
        configs: Vec<(String, Map<String, Value>, usize)>,
    ) -> Result<(), GroupConfigError> {
        let names: Vec<String> = configs.iter().map(|(n, ..)| n.clone()).collect();
        self.groups.put_all(configs)?;
        for name in &names {
            self.journal_group(name);
        }
        Ok(())
    }

    /// Forgets subscription group `name`'s config and journals that.
    pub(crate) fn remove_group_config(&self, name: &str) {
        self.groups.remove(name);
        self.journal_group(name);
    }
}

impl Core {
    /// Checks that `group` may be used: a valid name, and (unless the caller vouches for it,
    /// `announced`) a group a heartbeat made known (RocketMQ 5 refuses offsets and pops of
    /// groups it has no subscription config for). Bounds the state a client can make the
    /// broker keep.
    ///
    /// # Errors
    /// [`GroupError`].
    pub(crate) fn check_group(&self, group: &str, announced: bool) -> Result<(), GroupError> {
        if !valid_name(group) {
            return Err(GroupError::BadName);
        }
        if !announced && !self.clients.knows_group(group) {
            return Err(GroupError::Unknown(group.to_owned()));
        }
        Ok(())
    }

    /// Releases the subscriptions no client uses any more (review-e77444b H3): a group that
    /// only pops (a gRPC `ReceiveMessage`, a remoting `POP_MESSAGE` without heartbeat) has no
    /// member in the client registry, so the registry's own idle release never sees it. Such
    /// a subscription ends once it has had no pop, ack, change of invisible time or commit for
    /// `group-idle-secs`, and no popped message is still invisible, as a heartbeating group is
    /// released `group-idle-secs` after its last member left (RocketMQ forgets a consumer
    /// once its channel expires). Kept: the broker's internal holders, the groups a heartbeat
    /// announced (the registry releases those) and the groups a face reports in use (a gRPC
    /// client's live session names it). A later pop starts a new subscription, from the
    /// oldest retained message. Returns how many it released; `group-idle-secs = 0` keeps
    /// every group.
    pub(crate) fn release_idle_groups(&self, now_ms: u64) -> usize {
        if self.config.group_idle_secs == 0 {
            return 0;
        }
        let idle = Duration::from_secs(self.config.group_idle_secs);
        let in_use = read(&self.groups.in_use).clone();
        let mut may_release = |group: &str, topic: &str| {
            !is_internal_group(group)
                && !is_internal_topic(topic)
                && !in_use.contains(group)
                && !self.clients.knows_group(group)
        };
        let released = self.store.release_idle_groups(idle, now_ms, &mut may_release);
        for (group, topic) in &released {
            tracing::info!(%group, %topic, "POP group idle: its messages are no longer held");
            if let Some((_, counters)) = self.topics.get_perm_counted(topic) {
                counters.forget_group(group);
            }
        }
        released.len()
    }
}

impl Core {
    /// `QUERY_CONSUME_TIME_SPAN`: per queue of `topic`, the store times of its oldest retained
    /// and its newest message, of the last message `group` committed and how long the group's
    /// next message has waited, as RocketMQ's `AdminBrokerProcessor.queryConsumeTimeSpan`
    /// computes them (the newest and the committed message's times as
    /// [`MessageLookup::store_timestamp`] keeps them after the message is freed, -1 where no
    /// time is known; a group that committed nothing counts from the oldest retained message).
    /// `None` for a topic this broker does not have.
    ///
    /// [`MessageLookup::store_timestamp`]: crate::store::MessageLookup::store_timestamp
    pub(crate) fn consume_time_span(&self, topic: &str, group: &str) -> Option<Vec<QueueTimeSpan>> {
        self.topics.get(topic)?;
        let t = self.store.topic(topic)?;
        let now = crate::time::now_ms() as i64;
        let mut spans = Vec::with_capacity(t.queue_count() as usize);
        for q in 0..t.queue_count() {
            let (min, max) = t.offsets(q).unwrap_or((0, 0));
            let time_at = |o: u64| -> i64 {
                self.store.get(t.as_ref(), q, o).map_or(-1, |(_, ts)| ts as i64)
            };
            let kept_time_at = |o: u64| -> i64 {
                match self.store.store_timestamp(t.as_ref(), q, o) {
                    Some(ts) if ts > 0 => ts as i64,
                    _ => -1,
                }
            };
            let min_time = self.store.earliest_timestamp(t.as_ref(), q).map_or(-1, |ts| ts as i64);
            let max_time = max.checked_sub(1).map_or(-1, kept_time_at);
            let committed = self.store.committed(group, topic, q);
            let consume_time = match committed {
                Some(c) if c > 0 => kept_time_at(c - 1),
                _ => min_time,
            };
            let next = committed.unwrap_or(min).max(min);
            let delay_time = if next < max {
                let next_time = time_at(next);
                if next_time >= 0 {
                    now.saturating_sub(next_time).max(0)
                } else {
                    0
                }
            } else {
                0
            };
            spans.push(QueueTimeSpan {
                message_queue: MessageQueue {
                    topic: topic.to_owned(),
                    broker_name: self.config.broker_name.clone(),
                    queue_id: q as i32,
                },
                min_time_stamp: min_time,
                max_time_stamp: max_time,
                consume_time_stamp: consume_time,
                delay_time,
            });
        }
        Some(spans)
    }
}

/// Most subscription groups an admin may create (bounds the table).
pub(crate) const MAX_SUBSCRIPTION_GROUPS: usize = 65_536;

/// The largest `SubscriptionGroupConfig` body kept, bytes: a config RocketMQ writes is a few
/// hundred bytes, its largest (with `subscriptionDataSet` and `attributes`) a few KiB.
pub(crate) const MAX_GROUP_CONFIG_BYTES: usize = 16 * 1024;

/// The most JSON all configs together may hold, bytes (as sent): bounds the table's memory,
/// which is outside the message budget, whatever the number of groups.
pub(crate) const MAX_GROUP_CONFIGS_BYTES: usize = 32 * 1024 * 1024;

/// The fields of RocketMQ's `SubscriptionGroupConfig` (4.x and 5.x): a config keeps only
/// these, each with the JSON type RocketMQ gives it; others are dropped.
const KNOWN_FIELDS: &[(&str, FieldType)] = &[
    ("groupName", FieldType::String),
    ("consumeEnable", FieldType::Bool),
    ("consumeFromMinEnable", FieldType::Bool),
    ("consumeBroadcastEnable", FieldType::Bool),
    ("consumeMessageOrderly", FieldType::Bool),
    ("retryQueueNums", FieldType::Number),
    ("retryMaxTimes", FieldType::Number),
    ("groupRetryPolicy", FieldType::Object),
    ("brokerId", FieldType::Number),
    ("whichBrokerWhenConsumeSlowly", FieldType::Number),
    ("notifyConsumerIdsChangedEnable", FieldType::Bool),
    ("groupSysFlag", FieldType::Number),
    ("consumeTimeoutMinute", FieldType::Number),
    ("subscriptionDataSet", FieldType::Array),
    ("attributes", FieldType::Object),
];

/// The JSON type of a [`KNOWN_FIELDS`] entry.
#[derive(Debug, Clone, Copy)]
enum FieldType {
    String,
    Bool,
    Number,
    Object,
    Array,
}

impl FieldType {
    fn accepts(self, v: &Value) -> bool {
        match self {
            FieldType::String => v.is_string(),
            FieldType::Bool => v.is_boolean(),
            FieldType::Number => v.is_number(),
            FieldType::Object => v.is_object() || v.is_null(),
            FieldType::Array => v.is_array() || v.is_null(),
        }
    }
}

/// Why a subscription-group config was refused (the remark the admin gets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GroupConfigError {
    /// The body is larger than [`MAX_GROUP_CONFIG_BYTES`].
    #[error("the SubscriptionGroupConfig body is {0} bytes; at most {MAX_GROUP_CONFIG_BYTES}")]
    TooLarge(usize),
    /// The body is not a JSON object.
    #[error("bad SubscriptionGroupConfig body: {0}")]
    Malformed(String),
    /// A known field has the wrong JSON type.
    #[error("bad SubscriptionGroupConfig body: {0} has the wrong type")]
    WrongType(&'static str),
    /// `groupName` is missing.
    #[error("groupName is missing")]
    NoName,
    /// `groupName` is blank or longer than [`MAX_GROUP_LEN`].
    #[error("the group name is blank or longer than {MAX_GROUP_LEN} characters")]
    BadName,
    /// The table is full (count or bytes).
    #[error("at most {MAX_SUBSCRIPTION_GROUPS} subscription groups of {MAX_GROUP_CONFIGS_BYTES} bytes of configs in all")]
    Full,
}

/// Reads a `SubscriptionGroupConfig` body: at most [`MAX_GROUP_CONFIG_BYTES`], a JSON object
/// with `groupName`; only RocketMQ's fields are kept, each of its type.
///
/// # Errors
/// [`GroupConfigError`].
pub(crate) fn parse_config(body: &[u8]) -> Result<(String, Map<String, Value>), GroupConfigError> {
    if body.len() > MAX_GROUP_CONFIG_BYTES {
        return Err(GroupConfigError::TooLarge(body.len()));
    }
    let sent: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GroupConfigError::Malformed(e.to_string()))?;
    let mut kept = Map::new();
    for (name, kind) in KNOWN_FIELDS {
        if let Some(v) = sent.get(*name) {
            if !kind.accepts(v) {
                return Err(GroupConfigError::WrongType(name));
            }
            kept.insert((*name).to_owned(), v.clone());
        }
    }
    let name = kept.get("groupName").and_then(Value::as_str).ok_or(GroupConfigError::NoName)?;
    if !valid_name(name) {
        return Err(GroupConfigError::BadName);
    }
    Ok((name.to_owned(), kept))
}

/// One config of a list (`UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST`), checked as
/// [`parse_config`] checks a body of its own; returns it with the bytes it counts for.
///
/// # Errors
/// [`GroupConfigError`].
pub(crate) fn parse_config_value(
    value: &Value,
) -> Result<(String, Map<String, Value>, usize), GroupConfigError> {
    let bytes =
        serde_json::to_vec(value).map_err(|e| GroupConfigError::Malformed(e.to_string()))?;
    let (name, config) = parse_config(&bytes)?;
    Ok((name, config, bytes.len()))
}

/// Subscription-group configs by name, with the bytes each was sent as.
#[derive(Debug, Default)]
pub(crate) struct SubscriptionGroups {
    table: RwLock<Table>,
    /// Groups a face reports in use although no heartbeat announced them (the consumer
    /// groups of live gRPC sessions): never released as idle.
    in_use: RwLock<HashSet<String>>,
}

#[derive(Debug, Default)]
struct Table {
    configs: BTreeMap<String, (Map<String, Value>, usize)>,
    /// Sum of the sizes in `configs`.
    bytes: usize,
}

impl SubscriptionGroups {
    /// Replaces the groups a face reports in use (see [`Core::release_idle_groups`]); the
    /// gRPC face reports its live sessions' groups, bounded by its session table.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) fn set_in_use(&self, groups: HashSet<String>) {
        *write(&self.in_use) = groups;
    }

    /// Whether an admin created `group`.
    pub(crate) fn contains(&self, group: &str) -> bool {
        read(&self.table).configs.contains_key(group)
    }

    /// Whether an admin made `group` consume in order (`consumeMessageOrderly`); the gRPC
    /// face tells its consumers `fifo` from it, as the proxy does.
    #[cfg(feature = "grpc")]
    pub(crate) fn orderly(&self, group: &str) -> bool {
        self.get(group)
            .and_then(|c| c.get("consumeMessageOrderly").and_then(Value::as_bool))
            .unwrap_or(false)
    }

    /// The `retryMaxTimes` an admin set for `group`, if any (negative values read as 0).
    #[cfg(feature = "grpc")]
    pub(crate) fn retry_max_times(&self, group: &str) -> Option<u32> {
        let v = self.get(group)?.get("retryMaxTimes")?.as_i64()?;
        Some(u32::try_from(v.max(0)).unwrap_or(u32::MAX))
    }

    /// The config of `group`, if an admin created it.
    pub(crate) fn get(&self, group: &str) -> Option<Map<String, Value>> {
        read(&self.table).configs.get(group).map(|(c, _)| c.clone())
    }

    /// How many groups have a config.
    pub(crate) fn len(&self) -> usize {
        read(&self.table).configs.len()
    }

    /// Every config, by group name.
    pub(crate) fn all(&self) -> BTreeMap<String, Map<String, Value>> {
        read(&self.table).configs.iter().map(|(k, (c, _))| (k.clone(), c.clone())).collect()
    }

    /// Creates or replaces the config of `name`, sent as `size` bytes.
    ///
    /// # Errors
    /// [`GroupConfigError::Full`] (nothing stored) when [`MAX_SUBSCRIPTION_GROUPS`] other
    /// groups exist already, or the configs would hold more than [`MAX_GROUP_CONFIGS_BYTES`].
    pub(crate) fn put(
        &self,
        name: String,
        config: Map<String, Value>,
        size: usize,
    ) -> Result<(), GroupConfigError> {
        let mut t = write(&self.table);
        let old = t.configs.get(&name).map(|(_, n)| *n);
        if old.is_none() && t.configs.len() >= MAX_SUBSCRIPTION_GROUPS {
            return Err(GroupConfigError::Full);
        }
        let bytes = t.bytes - old.unwrap_or(0) + size;
        if bytes > MAX_GROUP_CONFIGS_BYTES {
            return Err(GroupConfigError::Full);
        }
        t.bytes = bytes;
        t.configs.insert(name, (config, size));
        Ok(())
    }

    /// Creates or replaces every config of `configs` (name, config, bytes sent), or none.
    ///
    /// # Errors
    /// [`GroupConfigError::Full`] (nothing stored) when the table would hold more than
    /// [`MAX_SUBSCRIPTION_GROUPS`] groups or [`MAX_GROUP_CONFIGS_BYTES`] of configs.
    pub(crate) fn put_all(
        &self,
        configs: Vec<(String, Map<String, Value>, usize)>,
    ) -> Result<(), GroupConfigError> {
        let mut t = write(&self.table);
        // The sizes each name would end with (a name given twice: its last config).
        let mut after: BTreeMap<&str, usize> = BTreeMap::new();
        for (name, _, size) in &configs {
            after.insert(name, *size);
        }
        let mut count = t.configs.len();
        let mut bytes = t.bytes;
        for (name, size) in &after {
            match t.configs.get(*name) {
                Some((_, old)) => bytes = bytes - old + size,
                None => {
                    count += 1;
                    bytes += size;
                }
            }
        }
        if count > MAX_SUBSCRIPTION_GROUPS || bytes > MAX_GROUP_CONFIGS_BYTES {
            return Err(GroupConfigError::Full);
        }
        t.bytes = bytes;
        for (name, config, size) in configs {
            t.configs.insert(name, (config, size));
        }
        Ok(())
    }

    /// Forgets the config of `group`.
    pub(crate) fn remove(&self, group: &str) {
        let mut t = write(&self.table);
        if let Some((_, n)) = t.configs.remove(group) {
            t.bytes -= n;
        }
    }
}
