//! Reclamation: the reaper's pass over every queue (a node goes once every hold covering it
//! has acknowledged it, or once retention lets an unheld one go), the release of deleted
//! topics and their graveyard, and the reaper thread.

use super::topic::{Topic, TopicQueue};
use super::{now_ms, EngineError, Inner, Retention, KEEP_YIELDS_AT_PERCENT};
use crate::sync::plain::Ordering as PlainOrdering;
use crate::sync::{lock, mutant, read, try_lock, Arc, Ordering};

/// Most nodes one reaper pass unlinks from one queue (keeps the head lock short).
const REAP_BATCH: u64 = if cfg!(loom) { 4 } else { 8192 };

impl Inner {
    /// Reclaims what is reclaimable in one queue (`retention`: its topic's; `keep_ms`: how long
    /// its topic keeps acknowledged messages, 0 when they go at once or the budget is nearly
    /// full). Returns the number of messages unlinked.
    pub(super) fn reap_queue(
        &self,
        eq: &TopicQueue,
        retention: Retention,
        keep_ms: u64,
        now: u64,
        heads: &mut Vec<(u64, u64)>,
    ) -> u64 {
        let mut head = eq.q.lock_head();
        let guard = self.pin();
        let first = eq.q.first_offset(&guard);
        let mut holds = lock(&eq.holds);
        let mut cover = holds.coverage_from(first);
        let deadline = now.saturating_sub(retention.time.as_millis() as u64);
        let keep_deadline = now.saturating_sub(keep_ms);
        let mut live = eq.live_bytes();
        let u = head.unlink_while(REAP_BATCH, &guard, |n| {
            let o = n.offset();
            let required = cover.at(o);
            let reclaim = if required == 0 {
                n.is_hole() || n.timestamp() <= deadline || live > retention.bytes
            } else {
                n.ack_count() + u32::from(mutant("reaper_off_by_one")) >= required
                    && (keep_ms == 0 || n.timestamp() <= keep_deadline || live > retention.bytes)
            };
            if reclaim {
                live = live.saturating_sub(n.payload().len() as u64 + eq.node_cost);
            }
            reclaim
        });
        drop(holds);
        if u.count > 0 {
            // Journaled at the end of the pass, before `free_ready` (see `journal_heads`).
            heads.push((eq.stream, eq.q.first_offset(&guard)));
            let released = eq.account_unlinked(u.count, u.payload_bytes, false);
            self.used.fetch_sub(released, Ordering::Relaxed);
        }
        u.count
    }

    /// A durable engine journals a queue's new first offset after unlinking nodes and before
    /// they can be freed (`guard`, pinned across the unlink, defers that): a crash image
    /// without the record still has the nodes' records, which come back (acknowledged
    /// messages served again, never lost ones).
    pub(super) fn journal_head(&self, eq: &TopicQueue, guard: &crossbeam_epoch::Guard) {
        #[cfg(not(loom))]
        if let Some(d) = &self.durable {
            d.heads_moved(&[(eq.stream, eq.q.first_offset(guard))]);
        }
        let _ = (eq, guard);
    }

    /// Journals the heads a reaper pass moved, in one journal call: the nodes it unlinked
    /// reach the [`Reclaimer`](crate::queue::Reclaimer) through the epoch, and the pass's own
    /// `free_ready`, which follows this, frees them. (An engine without a reaper thread may
    /// also free them from a topic deletion racing the pass: a crash in that window serves
    /// those acknowledged messages again, it loses nothing.)
    fn journal_heads(&self, heads: &[(u64, u64)]) {
        #[cfg(not(loom))]
        if let (Some(d), false) = (&self.durable, heads.is_empty()) {
            d.heads_moved(heads);
        }
        let _ = heads;
    }

    /// A refused append's attempt to make room. With a reaper thread, only wakes it: request
    /// threads never pay for a pass (one refused send per producer would otherwise mean one
    /// full pass each). Without one, runs a pass, unless another thread is already running one.
    pub(super) fn reap_for_room(&self) {
        if let Some(t) = lock(&self.reaper).as_ref() {
            t.unpark();
            return;
        }
        if let Some(_only) = try_lock(&self.inline_reap) {
            #[cfg(test)]
            self.inline_work.fetch_add(1, PlainOrdering::Relaxed);
            self.reap_pass();
        }
    }

    /// Releases a deleted topic's messages: on the reaper thread if there is one (a whole
    /// topic can be millions of messages), here otherwise. Either way the topic goes to the
    /// graveyard, whose sweep in every pass also releases what a late append linked after
    /// this (review 2.2).
    pub(super) fn release_later(&self, t: Arc<Topic>) {
        let reaper = lock(&self.reaper).clone();
        if reaper.is_none() {
            #[cfg(test)]
            self.inline_work.fetch_add(1, PlainOrdering::Relaxed);
            release_topic(self, &t);
        }
        if !mutant("no_graveyard") {
            lock(&self.graveyard).push(t);
        }
        if let Some(r) = reaper {
            r.unpark();
        }
    }

    /// One reaper pass over every queue, then frees what the epoch says is safe to free.
    pub(super) fn reap_pass(&self) -> u64 {
        let topics: Vec<Arc<Topic>> = read(&self.topics).values().cloned().collect();
        let now = now_ms();
        let mut n = 0;
        // Acknowledged messages are kept only while the budget has room to spare: keeping
        // them must never be what refuses or evicts a new message. Relaxed: a counter read
        // as a limit, as in `reserve`.
        let budget = self.live.budget();
        let spare = u128::from(budget) * u128::from(KEEP_YIELDS_AT_PERCENT) / 100;
        let roomy =
            u128::from(self.used.load(Ordering::Relaxed)) <= spare || mutant("keep_ignores_budget");
        let mut heads = Vec::new();
        for t in &topics {
            let retention = t.retention(self.live.retention());
            let keep = t.keep_acknowledged(self.config.keep_acknowledged);
            let keep_ms =
                if roomy { u64::try_from(keep.as_millis()).unwrap_or(u64::MAX) } else { 0 };
            for eq in t.queues.iter() {
                n += self.reap_queue(eq, retention, keep_ms, now, &mut heads);
            }
        }
        self.journal_heads(&heads);
        n += self.sweep_graveyard();
        // Push this thread's deferred functions to the collector and let it advance.
        self.pin().flush();
        self.reclaimer.free_ready();
        if n > 0 {
            self.room.wake_all();
        }
        // Relaxed: a statistic for operators (how long ago the reaper last ran); nothing is
        // published through it.
        self.last_pass_ms.store(now_ms(), PlainOrdering::Relaxed);
        n
    }

    /// Releases what late appends linked into deleted topics, and forgets each deleted topic
    /// once the graveyard holds its last reference. Returns the messages unlinked.
    pub(super) fn sweep_graveyard(&self) -> u64 {
        let mut graves = lock(&self.graveyard);
        let mut n = 0;
        graves.retain_mut(|t| {
            // Unique: no handle is left, so no append can be running on the topic or start on
            // it. `get_mut` synchronises with the other `Arc`s' drops (as `Arc::drop` does), so
            // whatever an append linked before dropping its handle is visible to the sweep
            // below, which is therefore the last one needed.
            let last = Arc::get_mut(t).is_some();
            n += unlink_topic(self, t);
            !last
        });
        n
    }
}

/// Unlinks every message of a deleted topic and returns its bytes to the budget.
pub(super) fn release_topic(inner: &Inner, t: &Topic) {
    unlink_topic(inner, t);
    inner.pin().flush();
    inner.reclaimer.free_ready();
}

/// Unlinks every message of `t`'s queues and returns their bytes to the budget; returns the
/// messages unlinked.
pub(super) fn unlink_topic(inner: &Inner, t: &Topic) -> u64 {
    let mut n = 0;
    for eq in t.queues.iter() {
        let mut head = eq.q.lock_head();
        let guard = inner.pin();
        let u = head.unlink_while(u64::MAX, &guard, |_| true);
        if u.count > 0 {
            let released = eq.account_unlinked(u.count, u.payload_bytes, false);
            inner.used.fetch_sub(released, Ordering::Relaxed);
            n += u.count;
        }
    }
    n
}

#[cfg(not(loom))]
pub(super) fn spawn_reaper(inner: &Arc<Inner>) -> Result<std::thread::JoinHandle<()>, EngineError> {
    let inner = Arc::clone(inner);
    std::thread::Builder::new()
        .name("baiji-reaper".into())
        .spawn(move || {
            *lock(&inner.reaper) = Some(std::thread::current());
            let min = inner.config.reaper_interval;
            let max = inner.config.reaper_max_interval;
            let mut pause = min;
            // Acquire: pairs with the Release store in `Engine::drop`.
            while !inner.closed.load(PlainOrdering::Acquire) {
                let n = inner.reap_pass();
                if n >= REAP_BATCH {
                    // A pass stopped at its batch cap: more is reclaimable now. Go again at
                    // once (after yielding the core), or reclamation would be capped at
                    // REAP_BATCH per queue per interval and fall behind fast producers.
                    pause = min;
                    std::thread::yield_now();
                    continue;
                }
                pause = if n > 0 { min } else { (pause * 2).min(max) };
                std::thread::park_timeout(pause);
            }
        })
        .map_err(|e| EngineError::InvalidConfig(format!("cannot spawn the reaper thread: {e}")))
}

/// Under loom the reaper is driven by the model through [`Engine::reap`].
#[cfg(loom)]
pub(super) fn spawn_reaper(_: &Arc<Inner>) -> Result<std::thread::JoinHandle<()>, EngineError> {
    Err(EngineError::InvalidConfig("loom models drive the reaper with Engine::reap".into()))
}
