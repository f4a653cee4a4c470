//! Orderly consumption locks (`LOCK_BATCH_MQ` / `UNLOCK_BATCH_MQ`): a queue locked by one
//! client of a group is not granted to another until the holder unlocks it, leaves (shutdown,
//! closed connection, heartbeat expiry) or stops renewing for 60 s (RocketMQ's
//! `rocketmq.broker.rebalance.lockMaxLiveTime`). Clients renew every 20 s.
//!
//! Bounds: the processor locks only queues this broker has (its own broker name, an existing
//! topic, a queue id in range) and refuses a `mqSet` over [`MAX_LOCK_BATCH`], so a group holds
//! at most one entry per real queue. Expired entries are purged by the housekeeping pass and a
//! group left without entries is removed. Each group has its own mutex: the map of groups is
//! only read-locked to find it (write-locked to add or remove one), never held across a
//! request's loop.

use crate::sync::{Arc, Mutex, RwLock};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::remoting::body::MessageQueue;
use crate::sync::{lock, read, write};

/// How long a lock lives without renewal.
pub(crate) const LOCK_TTL: Duration = Duration::from_secs(60);

/// Most queues one `LOCK_BATCH_MQ` or `UNLOCK_BATCH_MQ` may name.
pub(crate) const MAX_LOCK_BATCH: usize = 4096;

/// (topic, queue id): the processor only passes queues of this broker.
type Key = (String, i32);

#[derive(Debug)]
struct Lock {
    client: String,
    renewed: Instant,
}

/// One group's locks. `dead` is set, under this mutex, when the group is removed from the map:
/// a locker that found it before the removal looks it up again.
#[derive(Debug, Default)]
struct GroupLocks {
    dead: bool,
    locks: HashMap<Key, Lock>,
}

/// The locks of every group, per (topic, queue id).
#[derive(Debug, Default)]
pub(crate) struct LockManager {
    groups: RwLock<HashMap<String, Arc<Mutex<GroupLocks>>>>,
}

fn key(mq: &MessageQueue) -> Key {
    (mq.topic.clone(), mq.queue_id)
}

impl LockManager {
    fn find(&self, group: &str) -> Option<Arc<Mutex<GroupLocks>>> {
        read(&self.groups).get(group).cloned()
    }

    fn find_or_add(&self, group: &str) -> Arc<Mutex<GroupLocks>> {
        if let Some(g) = self.find(group) {
            return g;
        }
        let mut groups = write(&self.groups);
        Arc::clone(groups.entry(group.to_string()).or_default())
    }

    /// Locks (or renews) what is free, expired or already held by `client`; returns the queues
    /// `client` holds afterwards, out of those asked for.
    pub(crate) fn lock(
        &self,
        group: &str,
        client: &str,
        mqs: &[MessageQueue],
    ) -> Vec<MessageQueue> {
        let now = Instant::now();
        loop {
            let g = self.find_or_add(group);
            let mut g = lock(&g);
            if g.dead {
                continue;
            }
            let mut granted = Vec::new();
            for mq in mqs {
                let l = g
                    .locks
                    .entry(key(mq))
                    .or_insert_with(|| Lock { client: client.to_string(), renewed: now });
                let free = l.client == client || now.duration_since(l.renewed) >= LOCK_TTL;
                if free {
                    if l.client != client {
                        l.client = client.to_string();
                    }
                    l.renewed = now;
                    granted.push(mq.clone());
                }
            }
            return granted;
        }
    }

    /// Releases the named queues if `client` holds them.
    pub(crate) fn unlock(&self, group: &str, client: &str, mqs: &[MessageQueue]) {
        if let Some(g) = self.find(group) {
            let mut g = lock(&g);
            for mq in mqs {
                let k = key(mq);
                if g.locks.get(&k).is_some_and(|l| l.client == client) {
                    g.locks.remove(&k);
                }
            }
        }
    }

    /// Releases everything `client` holds in `group` (it left the group).
    pub(crate) fn release(&self, group: &str, client: &str) {
        if let Some(g) = self.find(group) {
            lock(&g).locks.retain(|_, l| l.client != client);
        }
    }

    /// Drops locks not renewed for [`LOCK_TTL`] as of `now`, and groups left without any.
    pub(crate) fn purge(&self, now: Instant) {
        let all: Vec<(String, Arc<Mutex<GroupLocks>>)> =
            read(&self.groups).iter().map(|(n, g)| (n.clone(), Arc::clone(g))).collect();
        let mut empty = Vec::new();
        for (name, g) in all {
            let mut locks = lock(&g);
            locks.locks.retain(|_, l| now.duration_since(l.renewed) < LOCK_TTL);
            if locks.locks.is_empty() {
                empty.push(name);
            }
        }
        if empty.is_empty() {
            return;
        }
        let mut groups = write(&self.groups);
        for name in empty {
            // Re-checked under the map's write lock: a locker may have added entries since.
            let gone = groups.get(&name).is_some_and(|g| {
                let mut g = crate::sync::lock(g);
                g.dead = g.locks.is_empty();
                g.dead
            });
            if gone {
                groups.remove(&name);
            }
        }
    }

    /// Number of groups with a lock map (tests).
    #[cfg(test)]
    fn group_count(&self) -> usize {
        read(&self.groups).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(q: i32) -> MessageQueue {
        MessageQueue { topic: "T".into(), broker_name: "b".into(), queue_id: q }
    }

    #[test]
    fn given_locked_queue_when_another_client_asks_should_refuse_until_released() {
        let m = LockManager::default();
        assert_eq!(m.lock("G", "c1", &[mq(0), mq(1)]).len(), 2);
        assert!(
            m.lock("G", "c2", &[mq(0)]).is_empty(),
            "a queue locked by c1 is not granted to c2"
        );
        assert_eq!(m.lock("G", "c1", &[mq(0)]).len(), 1, "the holder renews");
        assert_eq!(m.lock("H", "c2", &[mq(0)]).len(), 1, "locks are per group");
        m.unlock("G", "c2", &[mq(0)]);
        assert!(m.lock("G", "c2", &[mq(0)]).is_empty(), "only the holder unlocks");
        m.release("G", "c1");
        assert_eq!(
            m.lock("G", "c2", &[mq(0), mq(1)]).len(),
            2,
            "a departed client's locks are free"
        );
    }

    #[test]
    fn given_expired_locks_when_purged_should_drop_them_and_their_empty_groups() {
        let m = LockManager::default();
        m.lock("G", "c1", &[mq(0), mq(1)]);
        m.lock("H", "c1", &[mq(0)]);
        m.release("H", "c1");
        m.purge(Instant::now());
        assert_eq!(m.group_count(), 1, "a group without locks is removed, a live one kept");
        m.purge(Instant::now() + LOCK_TTL);
        assert_eq!(m.group_count(), 0, "expired locks are purged, and their group with them");
        assert_eq!(m.lock("G", "c2", &[mq(0)]).len(), 1, "a purged group locks afresh");
    }
}
