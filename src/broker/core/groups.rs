//! Subscription-group configs admins created (`UPDATE_AND_CREATE_SUBSCRIPTIONGROUP`), kept as
//! the JSON object the admin sent (RocketMQ's `SubscriptionGroupConfig`, whatever version wrote
//! it) and given back as it came. baiji itself needs little of it: a group exists once a
//! heartbeat names it; the gRPC face reads `consumeMessageOrderly` and `retryMaxTimes`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::{Map, Value};

use super::topics::{is_internal_group, is_internal_topic};
use super::Core;
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
        }
        released.len()
    }
}

/// Most subscription groups an admin may create (bounds the table).
pub(crate) const MAX_SUBSCRIPTION_GROUPS: usize = 65_536;

/// Subscription-group configs by name.
#[derive(Debug, Default)]
pub(crate) struct SubscriptionGroups {
    table: RwLock<BTreeMap<String, Map<String, Value>>>,
    /// Groups a face reports in use although no heartbeat announced them (the consumer
    /// groups of live gRPC sessions): never released as idle.
    in_use: RwLock<HashSet<String>>,
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
        read(&self.table).contains_key(group)
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
        read(&self.table).get(group).cloned()
    }

    /// Every config, by group name.
    pub(crate) fn all(&self) -> BTreeMap<String, Map<String, Value>> {
        read(&self.table).clone()
    }

    /// Creates or replaces the config of `name`; `false` (nothing stored) when
    /// [`MAX_SUBSCRIPTION_GROUPS`] other groups exist already.
    pub(crate) fn put(&self, name: String, config: Map<String, Value>) -> bool {
        let mut t = write(&self.table);
        if t.len() >= MAX_SUBSCRIPTION_GROUPS && !t.contains_key(&name) {
            return false;
        }
        t.insert(name, config);
        true
    }

    /// Forgets the config of `group`.
    pub(crate) fn remove(&self, group: &str) {
        write(&self.table).remove(group);
    }
}
