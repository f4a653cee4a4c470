//! POP consumption: per-delivery state of a clustering group, beside its cursors and commits.
//!
//! # Protocol
//!
//! A POP request does not own queues: any caller pops any queue of the group. Per queue the
//! group keeps, under the queue's track lock (the same lock as commits and acks, so every
//! operation below is atomic with respect to the others):
//!
//! ```text
//!   frontier F          pop position P
//!   ... acked │ in flight / acked … │ not popped yet ...
//!             └── `inflight`: offset → (pop time, invisible time, attempts, holder)
//! ```
//!
//! * a pop first treats in-flight messages whose invisible time has passed (see "Revival and
//!   dead letters"), then hands out new messages from `P`, which it moves past them;
//! * a message's receipt is `(queue, offset, pop time)`. Acknowledging or changing the
//!   invisible time needs the receipt of its latest delivery: a redelivery, a hand-over to the
//!   caller or a change of invisible time gives the entry a strictly greater pop time, so the
//!   older receipt is stale ([`EngineError::StaleReceipt`]). That is what makes an ack racing
//!   an expiry come out one way only: either the ack removes the entry before the re-pop looks
//!   (the message is done), or the re-pop restamps it first (the ack is stale, the message is
//!   delivered again or handed over);
//! * an entry is visible again when `now >= pop_time + invisible` **and** `now > pop_time`:
//!   the strict half guarantees that a re-pop at `now` gives a pop time no earlier receipt of
//!   that message had, even after a change of invisible time to 0;
//! * ordered pop: a queue with an entry that is not yet visible again is blocked; a pop that
//!   repeats the attempt id of the queue's last batch gets that batch's entries again under
//!   the receipt of this pop, each only if its pop time is not later than this pop's `now` (a
//!   change of invisible time since the caller read its clock keeps its newer receipt, and the
//!   entry is not handed out again), keeping an invisible time the consumer changed.
//!
//! # Revival and dead letters
//!
//! An expired entry that had `attempts` deliveries goes one of three ways, by the request's
//! `max_attempts` and the caller's [`PopPolicy`]:
//!
//! | attempts | what the pop does | the entry |
//! |---|---|---|
//! | `>= max_attempts` | hands it out in `dead` | `dead_letter_pending`: handed over (below); else acknowledged and removed |
//! | `>= in_place_deliveries` | hands it out in `revive` | handed over |
//! | fewer | redelivers it in `messages`, attempts + 1 | the consumer's, under the new receipt |
//!
//! *Handed over* means: the entry's holder becomes the caller, its pop time this pop's `now`
//! (its receipt is the outcome's) and its invisible time the policy's lease, so it is neither
//! redelivered nor handed over again while the caller copies it (to a retry topic, as
//! RocketMQ's `PopReviveService` does, or to a dead-letter queue). The caller then
//! acknowledges it with that receipt (the copy is stored; the original queue moves on) or
//! changes its invisible time to a short one (the copy failed; it is handed over again when it
//! expires, its attempts unchanged). An entry the caller neither settles nor puts back is
//! expired again at the end of its lease. A consumer's receipt for it is stale from the
//! hand-over on, like any replaced receipt. Under [`PopPolicy::IN_PLACE`] (`Group::pop`)
//! nothing is handed over: every expired message is redelivered from its own queue until its
//! attempts run out, then acknowledged and handed out in `dead`.
//!
//! # Journal and restore
//!
//! With a [`PopJournal`] set (an engine under a store opened on a directory), every pop, POP
//! ack and change of invisible time reports what it changed in the queue, still under the
//! queue's lock and before it returns: the entries it touched as they are now (`None` once
//! gone) and the pop position if it moved. Offsets below the position that are not in flight
//! are acknowledged, so the last position and the last entry per offset are the queue's whole
//! POP state; `restore_pop` gives it back to a fresh subscription (acknowledging the rest of
//! what is below the position, putting the entries back under their own pop times). Entries
//! that leave otherwise (a commit or an eviction acknowledged them) are reported as gone the
//! next time the queue is popped, as they are forgotten then. Without a journal nothing is
//! collected.
//!
//! # Invariants
//!
//! * The node's ack counter is bumped through the track only (`ack_one`, `mark`, `ack_until`),
//!   which bump an offset once however it is acknowledged (invariant 6): by a POP ack (of a
//!   consumer, or of the caller settling a hand-over), a dead-lettering, a filter miss, or a
//!   commit of the same group name used for pulling.
//! * In-flight messages are not acknowledged, so the group holds them (invariants 3, 5).
//!   Entries whose offset got acknowledged otherwise (a commit, an eviction) are forgotten
//!   the next time the queue is popped.
//! * The in-flight table holds at most [`INFLIGHT_LIMIT`] entries per queue; each entry costs
//!   [`INFLIGHT_ENTRY_SIZE`] bytes of the memory budget, charged by the caller from the
//!   deltas these functions return.

use std::collections::BTreeMap;

use crossbeam_epoch::Guard;

use super::track::delivery_of;
use super::{Counters, Group, QueueState, Subscription};
use crate::engine::types::{
    AckOutcome, PopAck, PopChange, PopEntry, PopHolder, PopInit, PopJournal, PopOutcome, PopPolicy,
    PopReceipt, PopRequest, PopRestored, Popped,
};
use crate::engine::EngineError;
use crate::queue::NodeRef;
use crate::sync::mutant;

/// Most popped, unacknowledged messages a group keeps per queue; a pop hands out no new
/// message of a queue that has this many in flight.
pub const INFLIGHT_LIMIT: usize = 4096;

/// Bytes of the memory budget one in-flight entry costs (key, value and tree overhead).
pub const INFLIGHT_ENTRY_SIZE: u64 = 64;

/// One popped, unacknowledged message.
#[derive(Debug, Clone, Copy)]
struct Inflight {
    pop_time: u64,
    invisible_ms: u64,
    attempts: u32,
    holder: Holder,
}

/// Who holds an in-flight message (see the module docs, "Revival and dead letters").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// A consumer it was popped to; `changed` once the consumer changed its invisible time.
    Consumer { changed: bool },
    /// The caller of the pop that handed it out in `revive` or `dead`, copying it elsewhere.
    Caller,
}

impl Inflight {
    fn fresh(now: u64, invisible_ms: u64) -> Self {
        Inflight {
            pop_time: now,
            invisible_ms,
            attempts: 1,
            holder: Holder::Consumer { changed: false },
        }
    }

    fn deadline(&self) -> u64 {
        self.pop_time.saturating_add(self.invisible_ms)
    }

    /// Whether the message is visible again at `now` (see the module docs for the strict half).
    fn expired(&self, now: u64) -> bool {
        if mutant("pop_ignores_invisible") {
            return true;
        }
        now >= self.deadline() && now > self.pop_time
    }

    fn entry(&self) -> PopEntry {
        PopEntry {
            pop_time: self.pop_time,
            invisible_ms: self.invisible_ms,
            attempts: self.attempts,
            holder: match self.holder {
                Holder::Consumer { changed: false } => PopHolder::Consumer,
                Holder::Consumer { changed: true } => PopHolder::ConsumerChanged,
                Holder::Caller => PopHolder::Caller,
            },
        }
    }

    fn from_entry(e: &PopEntry) -> Self {
        Inflight {
            pop_time: e.pop_time,
            invisible_ms: e.invisible_ms,
            attempts: e.attempts.max(1),
            holder: match e.holder {
                PopHolder::Consumer => Holder::Consumer { changed: false },
                PopHolder::ConsumerChanged => Holder::Consumer { changed: true },
                PopHolder::Caller => Holder::Caller,
            },
        }
    }

    /// Hands the (expired) message to the pop's caller at `now`, under a new receipt and
    /// invisible for `lease_ms`: neither redelivered nor taken again meanwhile.
    fn take(&mut self, now: u64, lease_ms: u64) {
        if !mutant("take_keeps_receipt") {
            self.pop_time = now;
        }
        self.invisible_ms = if mutant("take_without_lease") { 0 } else { lease_ms };
        self.holder = Holder::Caller;
    }
}

/// A group's POP state in one queue.
#[derive(Debug, Default)]
pub(crate) struct PopQueue {
    started: bool,
    pos: u64,
    pos_ref: Option<NodeRef>,
    inflight: BTreeMap<u64, Inflight>,
    /// The attempt id of the last ordered batch.
    attempt: Option<String>,
}

impl PopQueue {
    /// Forgets every in-flight entry; returns how many there were.
    pub(crate) fn forget(&mut self) -> u64 {
        let n = self.inflight.len() as u64;
        self.inflight.clear();
        n
    }

    /// Whether an entry is still invisible at `now` (a consumer may be working on it).
    pub(crate) fn invisible_at(&self, now: u64) -> bool {
        self.inflight.values().any(|e| !e.expired(now))
    }

    fn next_expiry(&self) -> Option<u64> {
        self.inflight.values().map(|e| e.deadline().max(e.pop_time + 1)).min()
    }

    /// Tells `journal` (if any) what changed: the entries of `touched` as they are now, and
    /// the position if it is not `before` any more. Called under the queue's lock.
    fn report(
        &self,
        journal: Option<&dyn PopJournal>,
        sub: &Subscription,
        queue: u32,
        before: Option<u64>,
        touched: &[u64],
    ) {
        let Some(j) = journal else { return };
        let position = (self.started && before != Some(self.pos)).then_some(self.pos);
        if position.is_none() && touched.is_empty() {
            return;
        }
        let entries: Vec<(u64, Option<PopEntry>)> =
            touched.iter().map(|off| (*off, self.inflight.get(off).map(Inflight::entry))).collect();
        j.record(&PopChange {
            group: &sub.group,
            topic: &sub.topic.name,
            queue,
            position,
            entries: &entries,
        });
    }
}

fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Subscription {
    /// Pops queue `queue` into `out` (up to `req.max` messages in `out.messages` in all),
    /// treating expired messages as `policy` says, and tells `journal` what changed. Returns
    /// the change in the number of in-flight entries.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`]; [`EngineError::NotAMember`] if the subscription ended
    /// or is broadcasting.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pop_queue(
        &self,
        queue: u32,
        req: &PopRequest<'_>,
        policy: &PopPolicy,
        out: &mut PopOutcome,
        guard: &Guard,
        journal: Option<&dyn PopJournal>,
    ) -> Result<i64, EngineError> {
        let (eq, mut st) = self.open_queue(queue)?;
        let QueueState::Clustering { track, pop, .. } = &mut *st else {
            return Err(EngineError::NotAMember);
        };
        self.touch();
        let q = &eq.q;
        let now = req.now_ms;
        out.pop_time = now;
        let before = pop.inflight.len() as i64;
        // What a journal is told (nothing is collected without one).
        let journaling = journal.is_some();
        let pos_before = pop.started.then_some(pop.pos);
        let mut touched: Vec<u64> = Vec::new();
        let mut dropped = track.reconcile(q.first_offset(guard));
        // Acknowledged otherwise since (a commit of the same group name, an eviction).
        pop.inflight.retain(|off, _| {
            let keep = !track.is_acked(*off);
            if !keep && journaling {
                touched.push(*off);
            }
            keep
        });
        if !pop.started {
            pop.started = true;
            let (first, end) = (q.first_offset(guard), q.next_offset(guard));
            let start = match req.init {
                PopInit::Min => first,
                PopInit::Max if first == 0 => 0,
                PopInit::Max => end.saturating_sub(1).max(first),
            };
            // What the group held below its start it will never pop: acknowledged now.
            let (n, _) = track.ack_until(q, start, true, None, &mut dropped, guard);
            Counters::add(&self.counters.acked, n);
            pop.pos = start.max(track.frontier);
            pop.pos_ref = None;
        }
        let finish = |pop: &PopQueue, out: &mut PopOutcome, dropped: u64, touched: &[u64]| {
            Counters::add(&self.counters.dropped, dropped);
            out.next_expiry = earliest(out.next_expiry, pop.next_expiry());
            pop.report(journal, self, queue, pos_before, touched);
            pop.inflight.len() as i64 - before
        };
        if req.order && pop.inflight.values().any(|e| !e.expired(now)) {
            let repeat = req.attempt_id.is_some() && pop.attempt.as_deref() == req.attempt_id;
            if !repeat {
                out.blocked += 1;
                return Ok(finish(pop, out, dropped, &touched));
            }
            // The same batch again, under receipts of this pop time (review-e77444b L7).
            for (&off, e) in pop.inflight.iter_mut() {
                let Holder::Consumer { changed } = e.holder else {
                    // Handed to the caller for revival or dead-lettering: not the batch's.
                    continue;
                };
                if now < e.pop_time && !mutant("repeat_ignores_receipt") {
                    // A change of invisible time since the caller read `now` gave it a newer
                    // receipt: it stays under that one (pop times never go back). At equal
                    // times the receipt stays what it is (a repeat within the batch's own
                    // millisecond, or right at the change's).
                    continue;
                }
                let Some(n) = q.find(off, guard) else { continue };
                // An invisible time the consumer changed is kept: its deadline stays.
                let deadline = e.deadline();
                e.pop_time = now;
                e.invisible_ms =
                    if changed { deadline.saturating_sub(now) } else { req.invisible_ms };
                out.messages.push(Popped { delivery: delivery_of(queue, n), attempts: e.attempts });
                Counters::add(&self.counters.delivered, 1);
                if journaling {
                    touched.push(off);
                }
            }
            return Ok(finish(pop, out, dropped, &touched));
        }
        let start_len = out.messages.len();
        // Visible again: redelivered first, handed out for revival, or dead-lettered once
        // their attempts ran out.
        let expired: Vec<u64> =
            pop.inflight.iter().filter(|(_, e)| e.expired(now)).map(|(o, _)| *o).collect();
        for off in expired {
            if out.messages.len() >= req.max {
                break;
            }
            if journaling {
                // Each way below changes the entry or removes it.
                touched.push(off);
            }
            let Some(n) = q.find(off, guard) else {
                pop.inflight.remove(&off);
                continue;
            };
            let Some(e) = pop.inflight.get_mut(&off) else { continue };
            let popped = Popped { delivery: delivery_of(queue, n), attempts: e.attempts };
            if e.attempts >= req.max_attempts {
                if policy.dead_letter_pending {
                    e.take(now, policy.lease_ms);
                } else {
                    pop.inflight.remove(&off);
                    if let Ok(AckOutcome::Acked) =
                        track.ack_one(q, queue, off, true, &mut dropped, guard)
                    {
                        Counters::add(&self.counters.acked, 1);
                    }
                }
                out.dead.push(popped);
                continue;
            }
            if e.attempts >= policy.in_place_deliveries {
                e.take(now, policy.lease_ms);
                out.revive.push(popped);
                continue;
            }
            e.attempts += 1;
            e.pop_time = now;
            e.invisible_ms = req.invisible_ms;
            e.holder = Holder::Consumer { changed: false };
            out.messages.push(Popped { attempts: e.attempts, ..popped });
            Counters::add(&self.counters.delivered, 1);
        }
        let want = req.max.saturating_sub(out.messages.len());
        let cap = INFLIGHT_LIMIT.saturating_sub(pop.inflight.len());
        let room = want.min(cap);
        if room > 0 {
            let mut fresh = Vec::new();
            let t = track.deliver_from(
                &mut pop.pos,
                &mut pop.pos_ref,
                q,
                queue,
                req.filter,
                room,
                true,
                &mut fresh,
                guard,
            );
            Counters::add(&self.counters.delivered, t.delivered);
            Counters::add(&self.counters.filtered, t.filtered);
            dropped += t.dropped;
            out.scan_limited += u32::from(t.scan_limited);
            for d in fresh {
                pop.inflight.insert(d.offset, Inflight::fresh(now, req.invisible_ms));
                if journaling {
                    touched.push(d.offset);
                }
                out.messages.push(Popped { delivery: d, attempts: 1 });
            }
        }
        if cap < want && pop.pos < q.next_offset(guard) {
            // Stopped by the in-flight cap, not by the request, with messages still after it.
            out.inflight_full += 1;
        }
        if req.order && out.messages.len() > start_len {
            pop.attempt = req.attempt_id.map(str::to_owned);
        }
        Ok(finish(pop, out, dropped, &touched))
    }

    /// Acknowledges the popped message at `offset` of `queue` under the receipt `pop_time`.
    /// Returns what it did and the change in the number of in-flight entries.
    ///
    /// # Errors
    /// [`EngineError::StaleReceipt`] if it is in flight under another receipt or was never
    /// popped; [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`].
    pub(crate) fn pop_ack(
        &self,
        queue: u32,
        offset: u64,
        pop_time: u64,
        guard: &Guard,
        journal: Option<&dyn PopJournal>,
    ) -> Result<(PopAck, i64), EngineError> {
        let (eq, mut st) = self.open_queue(queue)?;
        let QueueState::Clustering { track, pop, .. } = &mut *st else {
            return Err(EngineError::NotAMember);
        };
        self.touch();
        let mut dropped = 0;
        let out = match pop.inflight.get(&offset) {
            Some(e) if e.pop_time == pop_time || mutant("pop_receipt_unchecked") => {
                let full = pop.inflight.len() >= INFLIGHT_LIMIT;
                pop.inflight.remove(&offset);
                let room_freed = full && pop.inflight.len() < INFLIGHT_LIMIT;
                let r = track.ack_one(&eq.q, queue, offset, true, &mut dropped, guard);
                if r == Ok(AckOutcome::Acked) {
                    Counters::add(&self.counters.acked, 1);
                }
                let started = pop.started.then_some(pop.pos);
                pop.report(journal, self, queue, started, &[offset]);
                r.map(|outcome| (PopAck { outcome, room_freed }, -1))
            }
            Some(_) => Err(EngineError::StaleReceipt { queue, offset }),
            None => {
                dropped += track.reconcile(eq.q.first_offset(guard));
                if track.is_acked(offset) {
                    Ok((PopAck { outcome: AckOutcome::AlreadyAcked, room_freed: false }, 0))
                } else {
                    Err(EngineError::StaleReceipt { queue, offset })
                }
            }
        };
        Counters::add(&self.counters.dropped, dropped);
        out
    }

    /// Makes the popped message at `offset` of `queue` (receipt `pop_time`) invisible for
    /// `invisible_ms` from `now`; returns its new receipt, a pop time greater than the old one.
    /// The message stays in flight: a change never frees room under [`INFLIGHT_LIMIT`].
    ///
    /// # Errors
    /// [`EngineError::StaleReceipt`] if it is not in flight under that receipt;
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`].
    pub(crate) fn change_invisible(
        &self,
        queue: u32,
        offset: u64,
        pop_time: u64,
        invisible_ms: u64,
        now: u64,
        journal: Option<&dyn PopJournal>,
    ) -> Result<u64, EngineError> {
        let (_, mut st) = self.open_queue(queue)?;
        let QueueState::Clustering { pop, .. } = &mut *st else {
            return Err(EngineError::NotAMember);
        };
        self.touch();
        match pop.inflight.get_mut(&offset) {
            Some(e) if e.pop_time == pop_time || mutant("pop_receipt_unchecked") => {
                let renewed = if mutant("change_keeps_receipt") {
                    e.pop_time
                } else {
                    now.max(e.pop_time + 1)
                };
                e.pop_time = renewed;
                e.invisible_ms = invisible_ms;
                // A message handed to the caller stays the caller's (put back after a failed
                // copy, it is handed out again when it expires).
                if let Holder::Consumer { changed } = &mut e.holder {
                    *changed = true;
                }
                let started = pop.started.then_some(pop.pos);
                pop.report(journal, self, queue, started, &[offset]);
                Ok(renewed)
            }
            _ => Err(EngineError::StaleReceipt { queue, offset }),
        }
    }

    /// Gives queue `queue` back the POP state a [`PopJournal`] recorded: pop position
    /// `position` and the in-flight `entries`. Every offset below the position that is not in
    /// flight is acknowledged (bumped once, as a POP ack would); entries are put back with
    /// their pop time (their receipts stay valid), invisible time, attempts and holder. An
    /// entry already acknowledged (below a commit), at or past the position (clamped to the
    /// queue's end) or no longer in the queue is not put back, and is listed in
    /// [`PopRestored::dropped`]. A queue popped already is left as it is. Returns what it did
    /// and the change in the number of in-flight entries.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`]; [`EngineError::NotAMember`] if the subscription ended
    /// or is broadcasting.
    pub(crate) fn restore_pop(
        &self,
        queue: u32,
        position: u64,
        entries: &[(u64, PopEntry)],
        guard: &Guard,
    ) -> Result<(PopRestored, i64), EngineError> {
        let (eq, mut st) = self.open_queue(queue)?;
        let QueueState::Clustering { track, pop, .. } = &mut *st else {
            return Err(EngineError::NotAMember);
        };
        let mut out = PopRestored::default();
        if pop.started {
            return Ok((out, 0));
        }
        self.touch();
        let q = &eq.q;
        let before = pop.inflight.len() as i64;
        let mut dropped = track.reconcile(q.first_offset(guard));
        let position = position.min(q.next_offset(guard));
        let mut keep: BTreeMap<u64, Inflight> = BTreeMap::new();
        for (off, e) in entries {
            let live = *off < position
                && !track.is_acked(*off)
                && q.find(*off, guard).is_some_and(|n| !n.is_hole());
            if live {
                keep.insert(*off, Inflight::from_entry(e));
            } else {
                out.dropped.push(*off);
            }
        }
        let (acked, filtered) =
            track.ack_below_except(q, position, |o| keep.contains_key(&o), &mut dropped, guard);
        Counters::add(&self.counters.acked, acked);
        Counters::add(&self.counters.filtered, filtered);
        Counters::add(&self.counters.dropped, dropped);
        out.acked = acked + filtered;
        // An eviction since the checks above took what it took: forgotten at the next pop.
        out.inflight = keep.len();
        pop.inflight.append(&mut keep);
        pop.started = true;
        pop.pos = position.max(track.frontier);
        pop.pos_ref = None;
        Ok((out, pop.inflight.len() as i64 - before))
    }

    /// In-flight entries of every queue.
    pub(crate) fn inflight(&self) -> u64 {
        self.queues
            .iter()
            .map(|st| match &*crate::sync::lock(st) {
                QueueState::Clustering { pop, .. } => pop.inflight.len() as u64,
                QueueState::Broadcasting(_) => 0,
            })
            .sum()
    }
}

impl Group {
    /// Pops queue `queue` (POP consumption): hands out, into `out`, messages of the queue
    /// whose invisible time expired (redelivered, or dead-lettered once their attempts ran
    /// out) and then new ones, each invisible to the group for `req.invisible_ms`. Call it for
    /// several queues with one `out` to pop them together (`req.max` bounds the total). The
    /// group name may be used for pulling too: commits and pops then share one position of
    /// acknowledgement, as RocketMQ's consumer offset is shared (see the README). This is
    /// [`pop_with`](Self::pop_with) under [`PopPolicy::IN_PLACE`].
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`] (ended or broadcasting),
    /// [`EngineError::Closed`].
    pub fn pop(
        &self,
        queue: u32,
        req: &PopRequest<'_>,
        out: &mut PopOutcome,
    ) -> Result<(), EngineError> {
        self.pop_with(queue, req, &PopPolicy::IN_PLACE, out)
    }

    /// [`pop`](Self::pop), with expired messages treated as `policy` says: redelivered from
    /// their own queue, handed out for revival in [`PopOutcome::revive`], or dead-lettered in
    /// [`PopOutcome::dead`] (acknowledged first, or still in flight). What is handed out for
    /// revival or dead-lettering is in flight under the receipt
    /// [`PopOutcome::receipt`] gives and invisible for [`PopPolicy::lease_ms`]; the caller
    /// settles it with [`ack_popped`](Self::ack_popped) once its copy is stored, or puts it
    /// back with [`change_popped`](Self::change_popped) (a short invisible time) if the copy
    /// failed. The receipt rules hold for it as for any delivery: a client still holding the
    /// receipt of its last delivery finds it stale.
    ///
    /// # Errors
    /// As [`pop`](Self::pop).
    pub fn pop_with(
        &self,
        queue: u32,
        req: &PopRequest<'_>,
        policy: &PopPolicy,
        out: &mut PopOutcome,
    ) -> Result<(), EngineError> {
        self.check()?;
        let journal = self.inner.pop_journal();
        let delta = self.sub.pop_queue(queue, req, policy, out, &self.inner.pin(), journal)?;
        self.inner.charge_inflight(delta);
        Ok(())
    }

    /// Acknowledges a popped message by its receipt: queue, offset and the pop time of its
    /// latest delivery. An already acknowledged message gives [`AckOutcome::AlreadyAcked`].
    ///
    /// # Errors
    /// [`EngineError::StaleReceipt`] (a newer delivery or change of invisible time replaced
    /// the receipt, or the message was never popped), [`EngineError::QueueOutOfRange`],
    /// [`EngineError::NotAMember`], [`EngineError::Closed`].
    pub fn pop_ack(
        &self,
        queue: u32,
        offset: u64,
        pop_time: u64,
    ) -> Result<AckOutcome, EngineError> {
        self.ack_popped(PopReceipt { queue, offset, pop_time }).map(|a| a.outcome)
    }

    /// [`pop_ack`](Self::pop_ack) by a [`PopReceipt`], saying also whether the ack freed room
    /// under [`INFLIGHT_LIMIT`] ([`PopAck::room_freed`]).
    ///
    /// # Errors
    /// As [`pop_ack`](Self::pop_ack).
    pub fn ack_popped(&self, receipt: PopReceipt) -> Result<PopAck, EngineError> {
        self.check()?;
        let PopReceipt { queue, offset, pop_time } = receipt;
        let journal = self.inner.pop_journal();
        let (ack, delta) = self.sub.pop_ack(queue, offset, pop_time, &self.inner.pin(), journal)?;
        self.inner.charge_inflight(delta);
        Ok(ack)
    }

    /// Makes a popped message invisible for `invisible_ms` from `now_ms` (0: visible at once)
    /// and returns its new receipt's pop time; the old receipt becomes stale.
    ///
    /// # Errors
    /// As [`pop_ack`](Self::pop_ack).
    pub fn change_invisible(
        &self,
        queue: u32,
        offset: u64,
        pop_time: u64,
        invisible_ms: u64,
        now_ms: u64,
    ) -> Result<u64, EngineError> {
        self.check()?;
        let journal = self.inner.pop_journal();
        self.sub.change_invisible(queue, offset, pop_time, invisible_ms, now_ms, journal)
    }

    /// [`change_invisible`](Self::change_invisible) by a [`PopReceipt`]; returns the new one.
    /// The message stays in flight, so a change never frees room under [`INFLIGHT_LIMIT`].
    ///
    /// # Errors
    /// As [`pop_ack`](Self::pop_ack).
    pub fn change_popped(
        &self,
        receipt: PopReceipt,
        invisible_ms: u64,
        now_ms: u64,
    ) -> Result<PopReceipt, EngineError> {
        let PopReceipt { queue, offset, pop_time } = receipt;
        let renewed = self.change_invisible(queue, offset, pop_time, invisible_ms, now_ms)?;
        Ok(PopReceipt { pop_time: renewed, ..receipt })
    }

    /// Gives queue `queue` back the POP state a [`PopJournal`] recorded before a restart (see
    /// [`Engine::set_pop_journal`](crate::engine::Engine::set_pop_journal)): the last position
    /// and the last entry of each in-flight offset it was told. Call it on a fresh
    /// subscription (from [`StartFrom::First`](crate::engine::StartFrom::First)), after any
    /// commit is re-applied and before the queue is popped: every offset below `position`
    /// that is not in `entries` is acknowledged, and each entry is in flight again with its
    /// pop time (a receipt handed out before the restart still acknowledges it), invisible
    /// time, attempts and holder, so it comes back when its invisible time ends, not before.
    /// Entries it could not put back are listed in [`PopRestored::dropped`]; a queue popped
    /// already is left as it is. Nothing is reported to the journal.
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`] (ended or broadcasting),
    /// [`EngineError::Closed`].
    pub fn restore_pop(
        &self,
        queue: u32,
        position: u64,
        entries: &[(u64, PopEntry)],
    ) -> Result<PopRestored, EngineError> {
        self.check()?;
        let (restored, delta) =
            self.sub.restore_pop(queue, position, entries, &self.inner.pin())?;
        self.inner.charge_inflight(delta);
        Ok(restored)
    }

    /// Popped messages not yet acknowledged (nor dead-lettered), those handed out for revival
    /// or dead-lettering and not yet settled included.
    pub fn inflight(&self) -> u64 {
        self.sub.inflight()
    }
}
