//! Subscription-group configs admins created (`UPDATE_AND_CREATE_SUBSCRIPTIONGROUP`), kept as
//! the JSON object the admin sent (RocketMQ's `SubscriptionGroupConfig`, whatever version wrote
//! it) and given back as it came. baiji itself needs little of it: a group exists once a
//! heartbeat names it; the gRPC face reads `consumeMessageOrderly` and `retryMaxTimes`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

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
}

/// Most subscription groups an admin may create (bounds the table).
pub(crate) const MAX_SUBSCRIPTION_GROUPS: usize = 65_536;

/// Subscription-group configs by name.
#[derive(Debug, Default)]
pub(crate) struct SubscriptionGroups {
    table: RwLock<BTreeMap<String, Map<String, Value>>>,
}

impl SubscriptionGroups {
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
