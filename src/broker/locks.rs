//! Orderly consumption locks (`LOCK_BATCH_MQ` / `UNLOCK_BATCH_MQ`): a queue locked by one
//! client of a group is not granted to another until the holder unlocks it, leaves (shutdown,
//! closed connection, heartbeat expiry) or stops renewing for 60 s (RocketMQ's
//! `rocketmq.broker.rebalance.lockMaxLiveTime`). Clients renew every 20 s.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::remoting::body::MessageQueue;

/// How long a lock lives without renewal.
pub(crate) const LOCK_TTL: Duration = Duration::from_secs(60);

type Key = (String, String, i32);

#[derive(Debug)]
struct Lock {
    client: String,
    renewed: Instant,
}

/// The locks of every group, per (topic, broker name, queue id).
#[derive(Debug, Default)]
pub(crate) struct LockManager {
    groups: Mutex<HashMap<String, HashMap<Key, Lock>>>,
}

fn key(mq: &MessageQueue) -> Key {
    (mq.topic.clone(), mq.broker_name.clone(), mq.queue_id)
}

impl LockManager {
    /// Locks (or renews) what is free, expired or already held by `client`; returns the queues
    /// `client` holds afterwards, out of those asked for.
    pub(crate) fn lock(
        &self,
        group: &str,
        client: &str,
        mqs: &[MessageQueue],
    ) -> Vec<MessageQueue> {
        let now = Instant::now();
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let locks = groups.entry(group.to_string()).or_default();
        let mut granted = Vec::new();
        for mq in mqs {
            let l = locks
                .entry(key(mq))
                .or_insert_with(|| Lock { client: client.to_string(), renewed: now });
            let free = l.client == client || now.duration_since(l.renewed) >= LOCK_TTL;
            if free {
                l.client = client.to_string();
                l.renewed = now;
                granted.push(mq.clone());
            }
        }
        granted
    }

    /// Releases the named queues if `client` holds them.
    pub(crate) fn unlock(&self, group: &str, client: &str, mqs: &[MessageQueue]) {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(locks) = groups.get_mut(group) {
            for mq in mqs {
                if locks.get(&key(mq)).is_some_and(|l| l.client == client) {
                    locks.remove(&key(mq));
                }
            }
        }
    }

    /// Releases everything `client` holds in `group` (it left the group).
    pub(crate) fn release(&self, group: &str, client: &str) {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(locks) = groups.get_mut(group) {
            locks.retain(|_, l| l.client != client);
        }
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
}
