//! The memory budget: what a message costs, reserving room for an append under the policy
//! (refuse, evict the oldest, or wait), linking the message once its room is reserved, and the
//! settings an operator may change while the engine runs.
//!
//! `used` (on [`Inner`]) is the one counter: an append adds its cost before it checks the
//! budget and takes it back when refused, the reaper and evictions subtract what they unlink,
//! and POP in-flight entries add and subtract their bookkeeping. Every access is Relaxed: the
//! budget is a limit, not a synchronisation point.

use std::task::Poll;

use super::topic::{Topic, TopicQueue};
use super::{
    group, now_ms, EngineConfig, EngineError, Inner, MemoryPolicy, Message, Receipt, Retention,
};
use crate::queue::Wakeup;
use crate::sync::plain::{AtomicU64 as PlainU64, Ordering as PlainOrdering};
use crate::sync::{mutant, read, Arc, Ordering};

/// The settings [`Engine::apply_settings`](super::Engine::apply_settings) changes while the
/// engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Bytes of payload plus bookkeeping the engine may hold.
    pub memory_budget: u64,
    /// What happens when an append would exceed the budget.
    pub policy: MemoryPolicy,
    /// Retention of unheld messages on topics without their own.
    pub retention: Retention,
}

/// [`Settings`] as atomics. Each is read on its own (Relaxed): a setting is a limit read
/// afresh by each append or reaper pass, not a synchronisation point; an append racing a
/// change may see the old or the new value, either is a valid limit.
#[derive(Debug)]
pub(super) struct LiveSettings {
    budget: PlainU64,
    policy: PlainU64,
    retention_ms: PlainU64,
    retention_bytes: PlainU64,
}

impl LiveSettings {
    pub(super) fn new(c: &EngineConfig) -> Self {
        let l = LiveSettings {
            budget: PlainU64::new(0),
            policy: PlainU64::new(0),
            retention_ms: PlainU64::new(0),
            retention_bytes: PlainU64::new(0),
        };
        l.set(Settings {
            memory_budget: c.memory_budget,
            policy: c.policy,
            retention: c.retention,
        });
        l
    }

    pub(super) fn set(&self, s: Settings) {
        let policy = match s.policy {
            MemoryPolicy::Reject => 0,
            MemoryPolicy::DropOldest => 1,
            MemoryPolicy::Block => 2,
        };
        // Relaxed: see the type's docs.
        self.budget.store(s.memory_budget, PlainOrdering::Relaxed);
        self.policy.store(policy, PlainOrdering::Relaxed);
        self.retention_ms.store(s.retention.time.as_millis() as u64, PlainOrdering::Relaxed);
        self.retention_bytes.store(s.retention.bytes, PlainOrdering::Relaxed);
    }

    pub(super) fn budget(&self) -> u64 {
        // Relaxed: see the type's docs.
        self.budget.load(PlainOrdering::Relaxed)
    }

    pub(super) fn policy(&self) -> MemoryPolicy {
        // Relaxed: see the type's docs.
        match self.policy.load(PlainOrdering::Relaxed) {
            1 => MemoryPolicy::DropOldest,
            2 => MemoryPolicy::Block,
            _ => MemoryPolicy::Reject,
        }
    }

    pub(super) fn retention(&self) -> Retention {
        // Relaxed: see the type's docs.
        Retention {
            time: std::time::Duration::from_millis(self.retention_ms.load(PlainOrdering::Relaxed)),
            bytes: self.retention_bytes.load(PlainOrdering::Relaxed),
        }
    }
}

impl Inner {
    pub(super) fn message_cost(&self, msg: &Message) -> Result<u64, EngineError> {
        let size = msg.payload.len();
        if size > self.config.max_message_size {
            return Err(EngineError::MessageTooLarge { size, limit: self.config.max_message_size });
        }
        Ok(size as u64 + self.node_cost())
    }

    /// What the budget counts for each message on top of its payload in this engine.
    pub(super) fn node_cost(&self) -> u64 {
        #[cfg(not(loom))]
        return super::topic::node_cost(self.durable.is_some());
        #[cfg(loom)]
        return super::topic::node_cost(false);
    }

    /// Charges (positive) or releases (negative) the bookkeeping of `delta` POP in-flight
    /// entries. Never refused: the entries exist already; appends see the smaller room.
    pub(super) fn charge_inflight(&self, delta: i64) {
        let bytes = delta.unsigned_abs() * group::pop::INFLIGHT_ENTRY_SIZE;
        // Relaxed: a counter, as in `reserve`.
        if delta > 0 {
            self.used.fetch_add(bytes, Ordering::Relaxed);
        } else if delta < 0 {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Takes `cost` bytes from the budget, applying the policy when there is no room.
    pub(super) fn reserve(&self, cost: u64, topic: &Topic, queue: u32) -> Result<(), EngineError> {
        let budget = self.live.budget();
        // Relaxed: a counter; the budget is a limit, not a synchronisation point.
        let prev = self.used.fetch_add(cost, Ordering::Relaxed);
        if prev + cost <= budget {
            return Ok(());
        }
        if self.live.policy() == MemoryPolicy::DropOldest && cost <= budget {
            // Only this append's share of the overshoot: `prev` includes the costs of racing
            // appends, which evict their own shares (the shares add up to the total).
            let overshoot = prev + cost - budget;
            let own = if mutant("evict_total_overshoot") { overshoot } else { overshoot.min(cost) };
            self.evict(own, topic, queue);
            return Ok(());
        }
        self.used.fetch_sub(cost, Ordering::Relaxed);
        // The reaper may simply not have run yet: have what is reclaimable reclaimed, retry once.
        self.reap_for_room();
        let prev = self.used.fetch_add(cost, Ordering::Relaxed);
        if prev + cost <= budget {
            return Ok(());
        }
        self.used.fetch_sub(cost, Ordering::Relaxed);
        Err(EngineError::BudgetExceeded { needed: cost, used: prev, budget })
    }

    /// Counts `e` in `rejected_messages` if it is a refusal for lack of room. Called where the
    /// refusal is final (an async send under `block` that waits and then succeeds is not one).
    pub(super) fn refused(&self, e: EngineError) -> EngineError {
        if matches!(e, EngineError::BudgetExceeded { .. }) {
            // Relaxed: a statistic.
            self.rejected.fetch_add(1, PlainOrdering::Relaxed);
        }
        e
    }

    /// Checks everything about an append except the budget; returns the queue and the cost.
    pub(super) fn prepare<'t>(
        &self,
        topic: &'t Topic,
        queue: u32,
        msg: &Message,
    ) -> Result<(&'t TopicQueue, u64), EngineError> {
        let Some(eq) = topic.queues.get(queue as usize) else {
            return Err(EngineError::QueueOutOfRange {
                topic: topic.name.clone(),
                queue,
                queues: topic.queue_count(),
            });
        };
        self.check_open()?;
        if topic.is_deleted() {
            return Err(EngineError::UnknownTopic(topic.name.clone()));
        }
        Ok((eq, self.message_cost(msg)?))
    }

    pub(super) fn append_at(
        &self,
        topic: &Topic,
        queue: u32,
        msg: Message,
    ) -> Result<Receipt, EngineError> {
        let (eq, cost) = self.prepare(topic, queue, &msg)?;
        self.reserve(cost, topic, queue).map_err(|e| self.refused(e))?;
        self.link(eq, cost, msg)
    }

    /// Gives back the budget of an append that failed after its reservation.
    fn unreserve(&self, eq: &TopicQueue, cost: u64) {
        // Relaxed: as in `reserve`; nothing was linked, so nothing else counts these bytes.
        eq.bytes_in.fetch_sub(cost, Ordering::Relaxed);
        self.used.fetch_sub(cost, Ordering::Relaxed);
    }

    /// Links a message whose budget is already reserved. With [`link_batch`](Self::link_batch),
    /// the one place where messages enter a queue. In a durable engine the message is first
    /// written to a record of the message log; the node's payload is the record's copy, the
    /// record claims the offset before it is published and is committed before this returns
    /// (see `durable`).
    ///
    /// # Errors
    /// [`EngineError::Storage`] if a durable engine cannot write the record (the budget is
    /// given back).
    pub(super) fn link(
        &self,
        eq: &TopicQueue,
        cost: u64,
        msg: Message,
    ) -> Result<Receipt, EngineError> {
        // Relaxed: statistics; added before linking so a queue's byte count never underflows.
        eq.bytes_in.fetch_add(cost, Ordering::Relaxed);
        let guard = self.pin();
        let ts = msg.timestamp.unwrap_or_else(now_ms);
        #[cfg(not(loom))]
        if let Some(d) = &self.durable {
            let header = super::durable::entry_header(ts, msg.tag, msg.payload.len());
            let meta = crate::shm::RecordMeta {
                kind: super::durable::MESSAGES,
                stream: eq.stream,
                claim: crate::shm::NO_CLAIM,
            };
            let mut r = match d.log.append(meta, &[&header, &msg.payload], &guard) {
                Ok(r) => r,
                Err(e) => {
                    self.unreserve(eq, cost);
                    return Err(super::durable::storage(e));
                }
            };
            let body = r.payload().slice(super::durable::ENTRY_HEADER..);
            let a = eq.q.append_claimed(body, ts, msg.tag, &guard, &mut |c| r.set_claim(c));
            drop(r.commit());
            return Ok(Receipt { queue: eq.id, offset: a.offset });
        }
        let a = eq.q.append(msg.payload, ts, msg.tag, &guard);
        Ok(Receipt { queue: eq.id, offset: a.offset })
    }

    /// Links `messages`, whose budget (`cost` in all) is already reserved, as one contiguous
    /// run; returns the first one's receipt.
    ///
    /// # Errors
    /// [`EngineError::EmptyBatch`] for no messages (the reservation is given back).
    pub(super) fn link_batch(
        &self,
        eq: &TopicQueue,
        cost: u64,
        messages: Vec<Message>,
    ) -> Result<Receipt, EngineError> {
        if messages.is_empty() {
            self.used.fetch_sub(cost, Ordering::Relaxed);
            return Err(EngineError::EmptyBatch);
        }
        // Relaxed: statistics; added before linking (see `link`).
        eq.bytes_in.fetch_add(cost, Ordering::Relaxed);
        let guard = self.pin();
        let now = now_ms();
        #[cfg(not(loom))]
        if let Some(d) = &self.durable {
            use super::durable::{entry_header, ENTRY_HEADER};
            let headers: Vec<[u8; ENTRY_HEADER]> = messages
                .iter()
                .map(|m| entry_header(m.timestamp.unwrap_or(now), m.tag, m.payload.len()))
                .collect();
            let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * messages.len());
            for (h, m) in headers.iter().zip(&messages) {
                parts.push(h);
                parts.push(&m.payload);
            }
            let meta = crate::shm::RecordMeta {
                kind: super::durable::MESSAGES,
                stream: eq.stream,
                claim: crate::shm::NO_CLAIM,
            };
            let mut r = match d.log.append(meta, &parts, &guard) {
                Ok(r) => r,
                Err(e) => {
                    self.unreserve(eq, cost);
                    return Err(super::durable::storage(e));
                }
            };
            let record = r.payload().clone();
            let mut at = 0;
            let nodes: Vec<(bytes::Bytes, u64, u32)> = messages
                .iter()
                .map(|m| {
                    let start = at + ENTRY_HEADER;
                    at = start + m.payload.len();
                    (record.slice(start..at), m.timestamp.unwrap_or(now), m.tag)
                })
                .collect();
            drop(record);
            let a = eq.q.append_batch_claimed(nodes, &guard, &mut |c| r.set_claim(c));
            drop(r.commit());
            return match a {
                Some(a) => Ok(Receipt { queue: eq.id, offset: a.offset }),
                None => Err(EngineError::EmptyBatch), // not reached: `messages` is not empty
            };
        }
        let appended = eq.q.append_batch(
            messages.into_iter().map(|m| (m.payload, m.timestamp.unwrap_or(now), m.tag)),
            &guard,
        );
        match appended {
            Some(a) => Ok(Receipt { queue: eq.id, offset: a.offset }),
            None => {
                self.unreserve(eq, cost);
                Err(EngineError::EmptyBatch)
            }
        }
    }

    /// Evicts at least `need` bytes, oldest first: from `queue` of `topic`, then the topic's
    /// other queues, then other topics.
    pub(super) fn evict(&self, need: u64, topic: &Topic, queue: u32) {
        let mut left = need;
        let n = topic.queues.len();
        for i in 0..n {
            if left == 0 {
                return;
            }
            left =
                left.saturating_sub(self.evict_from(&topic.queues[(queue as usize + i) % n], left));
        }
        let topics: Vec<Arc<Topic>> = read(&self.topics).values().cloned().collect();
        for eq in topics.iter().filter(|t| t.name != topic.name).flat_map(|t| t.queues.iter()) {
            if left == 0 {
                return;
            }
            left = left.saturating_sub(self.evict_from(eq, left));
        }
    }

    /// Evicts the oldest messages of one queue until `need` bytes are released; returns the
    /// bytes released.
    pub(super) fn evict_from(&self, eq: &TopicQueue, need: u64) -> u64 {
        let mut head = eq.q.lock_head();
        let guard = self.pin();
        let mut freed = 0u64;
        let u = head.unlink_while(u64::MAX, &guard, |n| {
            if freed >= need {
                return false;
            }
            freed += n.payload().len() as u64 + eq.node_cost;
            true
        });
        if u.count == 0 {
            return 0;
        }
        self.journal_head(eq, &guard);
        let released = eq.account_unlinked(u.count, u.payload_bytes, true);
        self.used.fetch_sub(released, Ordering::Relaxed);
        released
    }
}

/// Waits until the budget has room for `cost` more bytes (the `block` policy), or until the
/// engine shuts down or `topic` is deleted (the send then fails in `prepare`).
pub(super) struct RoomWait<'a> {
    pub(super) inner: &'a Inner,
    pub(super) topic: &'a Topic,
    pub(super) cost: u64,
    pub(super) id: Option<crate::queue::WaitId>,
}

impl std::future::Future for RoomWait<'_> {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let (inner, topic, cost) = (self.inner, self.topic, self.cost);
        let budget = inner.live.budget();
        self.id = inner.room.register_with(self.id, Wakeup::Task(cx.waker().clone()), || {
            // Relaxed: the wait list's lock orders this read after a reaper pass that freed
            // room and then woke the list. Likewise `Engine::drop` and `delete_topic` set
            // their flag before they wake the list: this check sees it, or the wake-up sees
            // this registration.
            inner.used.load(Ordering::Relaxed) + cost > budget
                && inner.check_open().is_ok()
                && !topic.is_deleted()
        });
        if self.id.is_some() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}

impl Drop for RoomWait<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.inner.room.deregister(id);
        }
    }
}
