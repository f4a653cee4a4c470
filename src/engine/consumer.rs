//! A member of a consumer group: polls its assigned queues, waits (spin, then park, or async),
//! acknowledges.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::group::Subscription;
use super::types::{AckOutcome, Delivery, MemberId};
use super::{EngineError, Inner};
use crate::queue::{WaitId, WaitState, Wakeup};
use crate::sync::{spin_hint, Arc, Ordering};

/// One member of a consumer group. Dropping it leaves the group: its queues go to the other
/// members, and what it received without acknowledging is delivered to them again.
#[derive(Debug)]
pub struct Consumer {
    inner: Arc<Inner>,
    sub: Arc<Subscription>,
    id: MemberId,
    version: u64,
    queues: Vec<u32>,
    next: usize,
}

/// Registrations a waiting consumer holds: `(queue, id)` pairs and the group's.
#[derive(Debug, Default)]
struct Waits {
    queues: Vec<(u32, WaitId)>,
    group: Option<WaitId>,
}

impl Consumer {
    pub(crate) fn new(inner: Arc<Inner>, sub: Arc<Subscription>, id: MemberId) -> Self {
        let mut c = Consumer { inner, sub, id, version: u64::MAX, queues: Vec::new(), next: 0 };
        c.refresh();
        c
    }

    /// This member's id within its group.
    pub fn id(&self) -> MemberId {
        self.id
    }

    /// The queues this member reads now (they change when members join or leave).
    pub fn assignment(&mut self) -> &[u32] {
        self.refresh();
        &self.queues
    }

    fn refresh(&mut self) {
        // Acquire: pairs with the Release increment in `Subscription::rebalance`.
        let v = self.sub.version.load(Ordering::Acquire);
        if v != self.version {
            self.version = v;
            self.queues = self.sub.assignment(self.id);
        }
    }

    fn check(&self) -> Result<(), EngineError> {
        self.inner.check_open()?;
        if self.sub.is_closed() {
            return Err(EngineError::NotAMember);
        }
        Ok(())
    }

    /// Takes up to `max` messages that are ready now, without waiting; appends them to `out`
    /// and returns how many it appended. Messages of one queue come in offset order.
    ///
    /// # Errors
    /// [`EngineError::NotAMember`] if the subscription ended, [`EngineError::Closed`].
    pub fn poll_into(&mut self, out: &mut Vec<Delivery>, max: usize) -> Result<usize, EngineError> {
        self.check()?;
        self.refresh();
        let before = out.len();
        let n = self.queues.len();
        if n == 0 || max == 0 {
            return Ok(0);
        }
        let guard = self.inner.pin();
        // Start where the last poll stopped so no queue starves.
        for i in 0..n {
            let got = out.len() - before;
            if got >= max {
                break;
            }
            let q = self.queues[(self.next + i) % n];
            self.sub.poll_queue(self.id, q, max - got, out, &guard)?;
        }
        self.next = (self.next + 1) % n;
        Ok(out.len() - before)
    }

    /// Takes up to `max` messages that are ready now, without waiting.
    ///
    /// # Errors
    /// As [`poll_into`](Self::poll_into).
    pub fn poll(&mut self, max: usize) -> Result<Vec<Delivery>, EngineError> {
        let mut out = Vec::new();
        self.poll_into(&mut out, max)?;
        Ok(out)
    }

    /// Registers `who` behind every assigned queue's end and on the group; returns `true` if a
    /// message (or an assignment change) is already there and the caller should poll instead.
    fn register(&mut self, who: &Wakeup, waits: &mut Waits) -> Result<bool, EngineError> {
        let guard = self.inner.pin();
        waits.group = self.sub.waiters.register_with(waits.group, who.clone(), || {
            // Acquire: pairs with the Release increment in `Subscription::rebalance`.
            self.sub.version.load(Ordering::Acquire) == self.version && !self.sub.is_closed()
        });
        if waits.group.is_none() {
            return Ok(true);
        }
        for &q in &self.queues {
            let Some(node) = self.sub.wait_node(self.id, q, &guard)? else {
                continue;
            };
            let Some(eq) = self.sub.topic.queues.get(q as usize) else {
                continue;
            };
            let prev = waits.queues.iter().find(|(wq, _)| *wq == q).map(|(_, id)| *id);
            match eq.q.wait_behind(node, who.clone(), prev, &guard) {
                WaitState::Ready => return Ok(true),
                WaitState::Registered(id) => match waits.queues.iter_mut().find(|(wq, _)| *wq == q)
                {
                    Some(slot) => slot.1 = id,
                    None => waits.queues.push((q, id)),
                },
            }
        }
        Ok(false)
    }

    fn cancel(&self, waits: &mut Waits) {
        for (q, id) in waits.queues.drain(..) {
            if let Some(eq) = self.sub.topic.queues.get(q as usize) {
                eq.q.cancel_wait(id);
            }
        }
        if let Some(id) = waits.group.take() {
            self.sub.waiters.deregister(id);
        }
    }

    /// Waits up to `timeout` for messages: spins for the engine's `spin` setting (cheap
    /// hand-off for latency-critical threads), then parks the thread until an append to one of
    /// its queues wakes it. Returns an empty vector on timeout, and at once if `max` is 0.
    ///
    /// # Errors
    /// As [`poll_into`](Self::poll_into).
    pub fn recv_timeout(
        &mut self,
        max: usize,
        timeout: Duration,
    ) -> Result<Vec<Delivery>, EngineError> {
        let mut out = Vec::new();
        if max == 0 {
            // Nothing asked, nothing to wait for (polling for zero would never succeed).
            self.check()?;
            return Ok(out);
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let spin_until = start + self.inner.config.spin.min(timeout);
        loop {
            if self.poll_into(&mut out, max)? > 0 {
                return Ok(out);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(out);
            }
            if now < spin_until {
                self.spin_for_next(spin_until);
                continue;
            }
            let me = Wakeup::Thread(crate::sync::thread::current());
            let mut waits = Waits::default();
            let ready = self.register(&me, &mut waits);
            if let Ok(false) = ready {
                park_until(deadline);
            }
            self.cancel(&mut waits);
            ready?;
        }
    }

    /// Spins until a message is linked behind one of this member's cursors, its assignment
    /// changes, or `until` passes. One atomic load per assigned queue per round, no lock: the
    /// cheap part of the spin-then-park wait that latency-critical threads rely on.
    fn spin_for_next(&mut self, until: Instant) {
        let guard = self.inner.pin();
        let nodes: Vec<_> = self
            .queues
            .iter()
            .filter_map(|&q| self.sub.wait_node(self.id, q, &guard).ok().flatten())
            .collect();
        if nodes.is_empty() {
            return;
        }
        let version = self.version;
        let mut rounds = 0u32;
        loop {
            if nodes.iter().any(|n| n.has_next(&guard)) {
                return;
            }
            rounds = rounds.wrapping_add(1);
            // Reading the clock costs more than a round: look at it every 64 rounds.
            if rounds % 64 == 0 {
                // Acquire: pairs with the Release increment in `Subscription::rebalance`.
                if self.sub.version.load(Ordering::Acquire) != version || Instant::now() >= until {
                    return;
                }
            }
            spin_hint();
        }
    }

    /// Waits for messages without blocking the thread (none asked, `max == 0`: ready at once,
    /// empty).
    ///
    /// # Errors
    /// As [`poll_into`](Self::poll_into).
    ///
    /// # Cancel safety
    /// Cancel-safe: messages are only taken from the queues in the poll that returns them.
    pub fn recv(&mut self, max: usize) -> Recv<'_> {
        Recv { consumer: self, max, waits: Waits::default() }
    }

    /// Acknowledges one delivered message. Acknowledging it twice is a no-op
    /// ([`AckOutcome::AlreadyAcked`]).
    ///
    /// # Errors
    /// [`EngineError::NotDelivered`] for an offset never delivered to the group,
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`], [`EngineError::Closed`].
    pub fn ack(&self, delivery: &Delivery) -> Result<AckOutcome, EngineError> {
        self.ack_offset(delivery.queue, delivery.offset)
    }

    /// Acknowledges the message at `offset` of queue `queue`.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub fn ack_offset(&self, queue: u32, offset: u64) -> Result<AckOutcome, EngineError> {
        self.check()?;
        let guard = self.inner.pin();
        self.sub.ack(Some(self.id), queue, offset, &guard)
    }

    /// Commits `offset` in queue `queue` (everything below is acknowledged; for broadcasting
    /// groups, by this member).
    ///
    /// # Errors
    /// [`EngineError::CommitBehind`], [`EngineError::OffsetBeyondEnd`],
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`], [`EngineError::Closed`].
    pub fn commit(&self, queue: u32, offset: u64) -> Result<(), EngineError> {
        self.check()?;
        let guard = self.inner.pin();
        let member = (self.sub.mode == super::Mode::Broadcasting).then_some(self.id);
        self.sub.commit(member, queue, offset, &guard)
    }

    /// Leaves the group (same as dropping the consumer).
    pub fn leave(self) {}
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let inner = &self.inner;
        self.sub.remove_member(self.id, &|| inner.pin());
    }
}

#[cfg(not(loom))]
fn park_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::park_timeout(deadline - now);
    }
}

/// Loom has no timed park: park until woken (models always provide the wake-up).
#[cfg(loom)]
fn park_until(_deadline: Instant) {
    crate::sync::thread::park();
}

/// The future of [`Consumer::recv`].
#[derive(Debug)]
pub struct Recv<'a> {
    consumer: &'a mut Consumer,
    max: usize,
    waits: Waits,
}

impl Future for Recv<'_> {
    type Output = Result<Vec<Delivery>, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.max == 0 {
            // Nothing asked: ready at once (polling for zero would never succeed).
            return Poll::Ready(this.consumer.check().map(|()| Vec::new()));
        }
        let who = Wakeup::Task(cx.waker().clone());
        loop {
            let mut out = Vec::new();
            match this.consumer.poll_into(&mut out, this.max) {
                Ok(0) => {}
                Ok(_) => {
                    this.consumer.cancel(&mut this.waits);
                    return Poll::Ready(Ok(out));
                }
                Err(e) => {
                    this.consumer.cancel(&mut this.waits);
                    return Poll::Ready(Err(e));
                }
            }
            match this.consumer.register(&who, &mut this.waits) {
                Ok(false) => return Poll::Pending,
                Ok(true) => continue,
                Err(e) => {
                    this.consumer.cancel(&mut this.waits);
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

impl Drop for Recv<'_> {
    fn drop(&mut self) {
        let Recv { consumer, waits, .. } = self;
        consumer.cancel(waits);
    }
}
