//! Handles on a topic: [`TopicHandle`] (appends, stateless reads, waits, statistics) and
//! [`Producer`] (round-robin appends).

use super::budget::RoomWait;
use super::config::SCAN_LIMIT;
use super::topic::{Topic, TopicQueue};
use super::{
    EngineError, Filter, Inner, MemoryPolicy, Message, MessageRef, QueueStats, Receipt, Retention,
    StartFrom,
};
use crate::queue::{WaitState, Wakeup};
use crate::sync::{Arc, Ordering};

/// A handle on one topic.
#[derive(Debug, Clone)]
pub struct TopicHandle {
    pub(super) inner: Arc<Inner>,
    pub(super) topic: Arc<Topic>,
}

impl TopicHandle {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.topic.name
    }

    /// Sets how long this topic keeps messages no group holds, overriding the engine's
    /// [`EngineConfig::retention`](super::EngineConfig::retention) (e.g. a dead-letter topic
    /// kept for days, bounded in bytes).
    /// Takes effect at the reaper's next pass; messages still count against the memory budget.
    pub fn set_retention(&self, retention: Retention) {
        self.topic.set_retention(retention);
    }

    /// This topic's retention of messages no group holds (its own, or the engine's).
    pub fn retention(&self) -> Retention {
        self.topic.retention(self.inner.live.retention())
    }

    /// Sets how long this topic keeps messages every group has acknowledged, overriding the
    /// engine's [`EngineConfig::keep_acknowledged`](super::EngineConfig::keep_acknowledged)
    /// (zero: freed at once). Kept messages stay readable by offset and count against the
    /// memory budget; they are bounded per queue by the topic's retention bytes and freed
    /// first when the budget is nearly full. Takes effect at the reaper's next pass.
    pub fn set_keep_acknowledged(&self, keep: std::time::Duration) {
        self.topic.set_keep_acknowledged(keep);
    }

    /// How long this topic keeps acknowledged messages (its own, or the engine's).
    pub fn keep_acknowledged(&self) -> std::time::Duration {
        self.topic.keep_acknowledged(self.inner.config.keep_acknowledged)
    }

    /// Its number of queues.
    pub fn queue_count(&self) -> u32 {
        self.topic.queue_count()
    }

    /// Whether the topic has been deleted since the handle was taken.
    pub fn is_deleted(&self) -> bool {
        self.topic.is_deleted()
    }

    /// Appends to queue `queue`.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::MessageTooLarge`],
    /// [`EngineError::BudgetExceeded`], [`EngineError::UnknownTopic`] (deleted),
    /// [`EngineError::Closed`].
    pub fn append(&self, queue: u32, msg: Message) -> Result<Receipt, EngineError> {
        self.inner.append_at(&self.topic, queue, msg)
    }

    /// Appends `messages` to queue `queue` as one contiguous run with consecutive offsets
    /// (nothing else lands between them); returns the first one's receipt. All or nothing:
    /// the budget is taken for the whole batch at once.
    ///
    /// # Errors
    /// As [`append`](Self::append); [`EngineError::EmptyBatch`] for no messages.
    pub fn append_batch(&self, queue: u32, messages: Vec<Message>) -> Result<Receipt, EngineError> {
        let inner = &*self.inner;
        let Some(first) = messages.first() else { return Err(EngineError::EmptyBatch) };
        let (eq, mut cost) = inner.prepare(&self.topic, queue, first)?;
        for m in &messages[1..] {
            cost += inner.message_cost(m)?;
        }
        inner.reserve(cost, &self.topic, queue).map_err(|e| inner.refused(e))?;
        inner.link_batch(eq, cost, messages)
    }

    /// Appends to the queue chosen by `key`: the same key always lands in the same queue, so
    /// messages with one key keep their order.
    ///
    /// # Errors
    /// As [`append`](Self::append).
    pub fn append_keyed(&self, key: &[u8], msg: Message) -> Result<Receipt, EngineError> {
        let q = (crate::hash::fnv1a_64(key) % u64::from(self.topic.queue_count())) as u32;
        self.append(q, msg)
    }

    /// Appends to queue `queue`, waiting for room under the `block` policy (other policies
    /// behave as [`append`](Self::append)).
    ///
    /// # Errors
    /// As [`append`](Self::append), except that `BudgetExceeded` is only returned when the
    /// message is larger than the whole budget.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future before it completes appends nothing.
    pub async fn append_async(&self, queue: u32, msg: Message) -> Result<Receipt, EngineError> {
        let inner = &*self.inner;
        loop {
            let (eq, cost) = inner.prepare(&self.topic, queue, &msg)?;
            match inner.reserve(cost, &self.topic, queue) {
                Ok(()) => return inner.link(eq, cost, msg),
                Err(EngineError::BudgetExceeded { .. })
                    if inner.live.policy() == MemoryPolicy::Block
                        && cost <= inner.live.budget() =>
                {
                    RoomWait { inner, topic: &self.topic, cost, id: None }.await;
                }
                Err(e) => return Err(inner.refused(e)),
            }
        }
    }

    /// Reads queue `queue` from offset `from` without any group state: calls `visit` for each
    /// message `filter` accepts, up to `max` of them, stopping early when `visit` returns
    /// `false` (that message is then not counted as read). The broker's pull path.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn read<F: FnMut(MessageRef<'_>) -> bool>(
        &self,
        queue: u32,
        from: u64,
        max: usize,
        filter: &Filter,
        mut visit: F,
    ) -> Result<ReadOutcome, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        let head = eq.q.head(&guard);
        let first = head.end();
        let end = eq.q.next_offset(&guard);
        let mut out =
            ReadOutcome { first_offset: first, end_offset: end, next_offset: from, found: 0 };
        if from < first || from >= end {
            return Ok(out);
        }
        let mut prev = if from == first { Some(head) } else { eq.q.find(from - 1, &guard) };
        let mut budget = SCAN_LIMIT.max(max.saturating_mul(16));
        while let Some(p) = prev {
            if out.found >= max || budget == 0 {
                break;
            }
            budget -= 1;
            let Some(n) = p.next(&guard) else { break };
            if !n.is_hole() && filter.matches(n.tag()) {
                let m = MessageRef {
                    offset: n.offset(),
                    timestamp: n.timestamp(),
                    tag: n.tag(),
                    payload: n.payload(),
                };
                if !visit(m) {
                    break;
                }
                out.found += 1;
            }
            out.next_offset = n.end();
            prev = Some(n);
        }
        Ok(out)
    }

    /// The message at `offset` of queue `queue`, if retained, passed to `visit`.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn get<R>(
        &self,
        queue: u32,
        offset: u64,
        visit: impl FnOnce(MessageRef<'_>) -> R,
    ) -> Result<Option<R>, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        Ok(eq.q.find(offset, &guard).filter(|n| !n.is_hole()).map(|n| {
            visit(MessageRef {
                offset: n.offset(),
                timestamp: n.timestamp(),
                tag: n.tag(),
                payload: n.payload(),
            })
        }))
    }

    /// The offset of the first message stored at or after `timestamp` in queue `queue` (the
    /// queue's end if none).
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn offset_for_timestamp(&self, queue: u32, timestamp: u64) -> Result<u64, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        Ok(eq.resolve_start(StartFrom::Timestamp(timestamp), &guard))
    }

    /// Statistics of queue `queue`.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn queue_stats(&self, queue: u32) -> Result<QueueStats, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        // The dummy (the last reclaimed node) and the last linked node keep their store times.
        let head = eq.q.head(&guard);
        let last = eq.q.last(&guard);
        let (min, max) = (head.end(), last.end());
        Ok(QueueStats {
            queue,
            min_offset: min,
            max_offset: max,
            live_messages: max - min,
            bytes: eq.live_bytes(),
            // Relaxed: statistics.
            reclaimed: eq.reclaimed.load(Ordering::Relaxed),
            evicted: eq.evicted.load(Ordering::Relaxed),
            last_store_timestamp: last.timestamp(),
            reclaimed_store_timestamp: head.timestamp(),
        })
    }

    /// Registers `waker` to be woken when a message is appended to queue `queue` at or after
    /// `offset`. Returns `None` when such a message already exists (do not wait), or
    /// `Some(registration)` to pass to [`cancel_wait`](Self::cancel_wait) if the wait is given up.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::Closed`].
    pub fn watch(
        &self,
        queue: u32,
        offset: u64,
        waker: &std::task::Waker,
        previous: Option<crate::queue::WaitId>,
    ) -> Result<Option<crate::queue::WaitId>, EngineError> {
        let eq = self.queue(queue)?;
        let guard = self.inner.pin();
        let last = eq.q.last(&guard);
        if last.end() > offset || self.topic.is_deleted() {
            return Ok(None);
        }
        Ok(match eq.q.wait_behind(last, Wakeup::Task(waker.clone()), previous, &guard) {
            WaitState::Ready => None,
            WaitState::Registered(id) => Some(id),
        })
    }

    /// Withdraws a registration made by [`watch`](Self::watch).
    pub fn cancel_wait(&self, queue: u32, id: crate::queue::WaitId) {
        if let Some(eq) = self.topic.queues.get(queue as usize) {
            eq.q.cancel_wait(id);
        }
    }

    fn queue(&self, queue: u32) -> Result<&TopicQueue, EngineError> {
        self.inner.check_open()?;
        self.topic.queues.get(queue as usize).ok_or_else(|| EngineError::QueueOutOfRange {
            topic: self.topic.name.clone(),
            queue,
            queues: self.topic.queue_count(),
        })
    }
}

/// What a [`TopicHandle::read`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOutcome {
    /// The queue's first retained offset.
    pub first_offset: u64,
    /// The offset the next append will get.
    pub end_offset: u64,
    /// Where the next read should start: after the last message looked at.
    pub next_offset: u64,
    /// Messages passed to the visitor and accepted by it.
    pub found: usize,
}

/// Appends to a topic, spreading messages round-robin over its queues.
#[derive(Debug, Clone)]
pub struct Producer {
    pub(super) handle: TopicHandle,
    pub(super) next: u32,
}

impl Producer {
    /// The topic handle (explicit-queue and keyed appends).
    pub fn topic(&self) -> &TopicHandle {
        &self.handle
    }

    fn advance(&mut self) -> u32 {
        let q = self.next;
        self.next = (self.next + 1) % self.handle.queue_count();
        q
    }

    /// Appends to the next queue in round-robin order.
    ///
    /// # Errors
    /// As [`TopicHandle::append`].
    pub fn send(&mut self, msg: Message) -> Result<Receipt, EngineError> {
        let q = self.advance();
        self.handle.append(q, msg)
    }

    /// Like [`send`](Self::send), waiting for room under the `block` policy.
    ///
    /// # Errors
    /// As [`TopicHandle::append_async`].
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped future appends nothing (the queue choice still advances).
    pub async fn send_async(&mut self, msg: Message) -> Result<Receipt, EngineError> {
        let q = self.advance();
        self.handle.append_async(q, msg).await
    }
}
