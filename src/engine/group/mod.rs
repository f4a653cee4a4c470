//! Consumer groups: one group's subscription to one topic, its per-queue acknowledgement
//! tracks, its members and their queue assignment.
//!
//! # Acknowledgement bookkeeping (invariants 5, 6, 9, 10)
//!
//! For every queue a clustering subscription keeps a [`Track`]:
//!
//! ```text
//!        frontier F            cursor C        hwm H
//!   ... acked │ acked? acked? ... │ not yet delivered ...
//!             └── `acked` holds the acknowledged offsets in [F, ..)
//! ```
//!
//! * every offset below `F` has been acknowledged by the group (its node's counter bumped once);
//! * `acked` holds the acknowledged offsets at or above `F` (per-message acks out of order, and
//!   messages the filter skipped), one bit each (`ack_set.rs`: bounded by the live messages);
//! * `C` is the next offset to hand out; `H` the end of everything handed out at least once.
//!
//! A node's counter is bumped exactly when its offset enters "below `F`" or `acked`, and never
//! when it is already in either, so each group bumps each node at most once (invariant 6). The
//! subscription's hold in the queue says from which offset the group must acknowledge (its
//! start), and, once it unsubscribes, up to which offset it did: on leaving, the group first
//! acknowledges the unacknowledged offsets below its highest acknowledged one, so that the hold
//! can end at `top` with every node below `top` bumped and none at or above it (invariant 5).
//!
//! Nodes the group has not acknowledged can only leave the queue through the `drop-oldest`
//! policy. A track notices that lazily (`reconcile`): when the queue's first live offset is
//! above `F`, the unacknowledged offsets in between were evicted and count as `dropped`
//! (invariant 10).
//!
//! A broadcasting subscription keeps one track per member and a group frontier `G`, the minimum
//! of the members' frontiers; nodes are bumped when `G` passes them. Its hold exists only while
//! it has members, so a broadcasting group without members holds no memory.
//!
//! # Counting (invariants 9, 10)
//!
//! Each message a group must see is counted exactly once in its `acked`, `filtered` or
//! `dropped`: a clustering track counts when its frontier or ack set takes the offset in, or
//! when `reconcile` finds it evicted, wherever that reconcile runs (polls, acks, commits, the
//! wait path, statistics). For a broadcasting group only the group frontier counts, as `G`
//! passes each offset (filtered if the filter rejects it, else acked) or finds it evicted;
//! its members count deliveries only, since every member sees every message. An ended
//! subscription counts nothing more: it holds nothing above where it stopped.
//!
//! A clustering queue also keeps the group's POP state (`pop.rs`: a pop position and the
//! in-flight table) beside its track, under the same lock, so pops, POP acks, changes of
//! invisible time, commits and per-message acks of one queue are serialised; POP acknowledges
//! through the track only, so invariant 6 holds for it as for the other ways.
//!
//! # Idle subscriptions
//!
//! Every pop, POP ack, change of invisible time, commit and member change stamps the
//! subscription's last activity, under the membership lock or a queue track's lock. Releasing
//! an idle subscription (`close_if_idle`) checks the stamp, the members and the in-flight
//! messages while it holds the membership lock and every queue track at once, so no such
//! operation runs between the decision and the end (`idle_release_vs_pop`).
//!
//! Lock order: the topic's subscription map, then the subscription's membership, then a queue
//! track (`close_if_idle` alone holds several: all of them, in queue order), then the queue's
//! head lock, then its holds. A [`PopJournal`](super::PopJournal) is called under a queue track
//! or (when the subscription ends) the membership lock, and takes only locks of its own.
//! `Engine::subscribe` replacing an ended subscription takes that one's membership lock (under
//! the map's) to wait until its closing, and its journal's `ended`, are done.

use crossbeam_epoch::Guard;

mod ack_set;
pub(crate) mod pop;
mod track;

use pop::PopQueue;
use track::Track;

use super::topic::{Topic, TopicQueue};
use super::types::GroupStats;
use super::types::{AckOutcome, Delivery, Filter, MemberId, Mode, PopJournal, StartFrom};
use super::{Consumer, EngineError, Inner};
use crate::queue::{Node, WaitList};
use crate::sync::plain::AtomicU64 as PlainU64;
use crate::sync::{lock, mutant, write, Arc, AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};

/// A consumer group's subscription to a topic.
#[derive(Debug, Clone)]
pub struct Group {
    pub(super) inner: Arc<Inner>,
    pub(super) sub: Arc<Subscription>,
}

impl Group {
    /// The group's name.
    pub fn name(&self) -> &str {
        &self.sub.group
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.sub.topic.name
    }

    /// The subscription's mode.
    pub fn mode(&self) -> Mode {
        self.sub.mode
    }

    /// The subscription's filter.
    pub fn filter(&self) -> &Filter {
        &self.sub.filter
    }

    pub(super) fn check(&self) -> Result<(), EngineError> {
        self.inner.check_open()?;
        if self.sub.is_closed() {
            return Err(EngineError::NotAMember);
        }
        Ok(())
    }

    /// Joins a new member; queues are rebalanced over the members (clustering) or the member
    /// reads every queue from the subscription's start (broadcasting).
    ///
    /// # Errors
    /// [`EngineError::NotAMember`] if the subscription ended, [`EngineError::Closed`].
    pub fn join(&self) -> Result<Consumer, EngineError> {
        self.check()?;
        let id = self.sub.new_member_id();
        let inner = &self.inner;
        self.sub.add_member(id, &|| inner.pin())?;
        Ok(Consumer::new(Arc::clone(&self.inner), Arc::clone(&self.sub), id))
    }

    /// Adds a member that is driven from outside (the broker's broadcasting clients, whose
    /// acknowledgements come from [`commit_member`](Self::commit_member)).
    ///
    /// # Errors
    /// [`EngineError::NotAMember`] if the subscription ended, [`EngineError::Closed`].
    pub fn add_member(&self) -> Result<MemberId, EngineError> {
        self.check()?;
        let id = self.sub.new_member_id();
        let inner = &self.inner;
        self.sub.add_member(id, &|| inner.pin())?;
        Ok(id)
    }

    /// Removes a member added with [`add_member`](Self::add_member). Idempotent.
    pub fn remove_member(&self, member: MemberId) {
        let inner = &self.inner;
        self.sub.remove_member(member, &|| inner.pin());
    }

    /// Commits `offset` in queue `queue`: the group has consumed everything below it. A commit
    /// equal to the committed offset is a no-op.
    ///
    /// # Errors
    /// [`EngineError::CommitBehind`] (acknowledgements cannot be taken back),
    /// [`EngineError::OffsetBeyondEnd`], [`EngineError::QueueOutOfRange`],
    /// [`EngineError::NotAMember`] (broadcasting groups commit per member), [`EngineError::Closed`].
    pub fn commit(&self, queue: u32, offset: u64) -> Result<(), EngineError> {
        self.check()?;
        self.sub.commit(None, queue, offset, &self.inner.pin())
    }

    /// Records that broadcasting member `member` has consumed queue `queue` below `offset`;
    /// the group acknowledges what its slowest member has passed.
    ///
    /// # Errors
    /// As [`commit`](Self::commit); [`EngineError::NotAMember`] for an unknown member.
    pub fn commit_member(
        &self,
        member: MemberId,
        queue: u32,
        offset: u64,
    ) -> Result<(), EngineError> {
        self.check()?;
        self.sub.commit(Some(member), queue, offset, &self.inner.pin())
    }

    /// The committed offset of queue `queue` (broadcasting: the slowest member's).
    ///
    /// # Errors
    /// [`EngineError::QueueOutOfRange`], [`EngineError::NotAMember`], [`EngineError::Closed`].
    pub fn committed(&self, queue: u32) -> Result<u64, EngineError> {
        self.check()?;
        self.sub.committed(queue, &self.inner.pin())
    }

    /// Statistics of the group.
    pub fn stats(&self) -> GroupStats {
        let guard = self.inner.pin();
        let committed = (0..self.sub.topic.queue_count())
            .map(|q| self.sub.committed(q, &guard).unwrap_or(0))
            .collect();
        let c = &self.sub.counters;
        GroupStats {
            group: self.sub.group.clone(),
            topic: self.sub.topic.name.clone(),
            mode: self.sub.mode,
            members: self.sub.member_count(),
            backlog: self.sub.backlog(&guard),
            // Relaxed: statistics.
            delivered: c.delivered.load(Ordering::Relaxed),
            acked: c.acked.load(Ordering::Relaxed),
            filtered: c.filtered.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            committed,
        }
    }

    /// Ends the subscription. Messages it alone held become reclaimable; its members get
    /// [`EngineError::NotAMember`]. Idempotent.
    pub fn unsubscribe(&self) {
        let inner = &self.inner;
        // Closed before it leaves the map: a new subscription of the group is made only once
        // this one has ended (`Engine::subscribe` waits for a closing predecessor), so a POP
        // journal hears of the end before the new one's first change.
        let forgotten = self.sub.close(&|| inner.pin(), inner.pop_journal());
        inner.charge_inflight(-(forgotten as i64));
        self.forget();
    }

    /// When the subscription last saw activity, ms since the Unix epoch: its creation, a pop,
    /// a POP ack or change of invisible time, a commit, a member joining or leaving.
    pub fn last_active_ms(&self) -> u64 {
        self.sub.last_active_ms()
    }

    /// Ends the subscription, as [`unsubscribe`](Self::unsubscribe) does, if it is idle at
    /// `now_ms` (ms since the Unix epoch, the clock of the pops): it has no member, no
    /// activity (see [`last_active_ms`](Self::last_active_ms)) for `idle`, and no popped
    /// message that is still invisible. Decided atomically with respect to every pop, ack,
    /// change, commit and member change of the group: each of those either counts as activity
    /// or fails with [`EngineError::NotAMember`]. Returns whether it ended it.
    pub fn release_if_idle(&self, idle: std::time::Duration, now_ms: u64) -> bool {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let Some(idle_since) = now_ms.checked_sub(idle_ms) else { return false };
        let inner = &self.inner;
        match self.sub.close_if_idle(idle_since, now_ms, &|| inner.pin(), inner.pop_journal()) {
            Some(forgotten) => {
                inner.charge_inflight(-(forgotten as i64));
                self.forget();
                true
            }
            None => false,
        }
    }

    /// Takes the subscription out of its topic's map, if it is still there.
    pub(super) fn forget(&self) {
        let mut subscriptions = write(&self.sub.topic.subscriptions);
        if subscriptions.get(&self.sub.group).is_some_and(|s| Arc::ptr_eq(s, &self.sub)) {
            subscriptions.remove(&self.sub.group);
            self.inner.forget_subscriptions(1);
        }
    }
}

/// Counters of one subscription. Relaxed everywhere: statistics only.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) delivered: PlainU64,
    pub(crate) acked: PlainU64,
    pub(crate) filtered: PlainU64,
    pub(crate) dropped: PlainU64,
}

impl Counters {
    fn add(c: &PlainU64, n: u64) {
        if n > 0 {
            c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A broadcasting subscription's state in one queue.
#[derive(Debug)]
struct Broadcast {
    /// Whether a hold is open (there are members).
    held: bool,
    /// The group frontier: the minimum of the members' frontiers.
    group: Track,
    members: Vec<(MemberId, Track)>,
}

/// A subscription's state in one queue.
#[derive(Debug)]
enum QueueState {
    /// Clustering: one track, read by the member that owns the queue, and by POP requests
    /// from their own position (`pop`).
    Clustering { track: Track, owner: Option<MemberId>, pop: PopQueue },
    /// Broadcasting: a track per member.
    Broadcasting(Broadcast),
}

#[derive(Debug, Default)]
struct Membership {
    members: Vec<MemberId>,
    /// Owner of each queue (clustering).
    owners: Vec<Option<MemberId>>,
}

/// RocketMQ's `AllocateMessageQueueAveragely`: contiguous ranges, the first `n % k` members
/// get one queue more.
fn owner_of(queue: usize, queues: usize, members: &[MemberId]) -> Option<MemberId> {
    let k = members.len();
    if k == 0 {
        return None;
    }
    if queues <= k {
        return members.get(queue).copied();
    }
    let (avg, rem) = (queues / k, queues % k);
    // The first `rem` members own `avg + 1` queues each, the rest `avg`.
    let big = rem * (avg + 1);
    let idx = if queue < big { queue / (avg + 1) } else { rem + (queue - big) / avg };
    members.get(idx).copied()
}

/// One consumer group's subscription to one topic.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) id: u64,
    pub(crate) group: String,
    pub(crate) topic: Arc<Topic>,
    pub(crate) mode: Mode,
    pub(crate) filter: Filter,
    start: StartFrom,
    membership: Mutex<Membership>,
    queues: Box<[Mutex<QueueState>]>,
    /// Bumped on every membership change; members refresh their assignment when it moves.
    pub(crate) version: AtomicU64,
    /// Members waiting for an assignment change.
    pub(crate) waiters: WaitList,
    pub(crate) closed: AtomicBool,
    pub(crate) counters: Counters,
    /// When the subscription last saw activity (created, popped, POP-acked, changed, committed,
    /// a member joining or leaving), ms since the Unix epoch. Only ever raised, and only under
    /// the membership lock or one of the queue locks, so that `close_if_idle`, holding all of
    /// them, reads a value no operation can move under it.
    last_active_ms: PlainU64,
}

impl Subscription {
    /// Creates the subscription and, for clustering, opens its holds in every queue.
    pub(crate) fn new(
        id: u64,
        group: String,
        topic: Arc<Topic>,
        mode: Mode,
        filter: Filter,
        start: StartFrom,
        guard_fn: &dyn Fn() -> Guard,
    ) -> Self {
        let queues = topic
            .queues
            .iter()
            .map(|eq| {
                Mutex::new(match mode {
                    Mode::Clustering => {
                        let _head = (!mutant("join_unlocked")).then(|| eq.q.lock_head());
                        let guard = guard_fn();
                        let s = eq.resolve_start(start, &guard);
                        eq.open_hold(id, s);
                        QueueState::Clustering {
                            track: Track::new(s),
                            owner: None,
                            pop: PopQueue::default(),
                        }
                    }
                    Mode::Broadcasting => QueueState::Broadcasting(Broadcast {
                        held: false,
                        group: Track::new(0),
                        members: Vec::new(),
                    }),
                })
            })
            .collect();
        Subscription {
            id,
            group,
            topic,
            mode,
            filter,
            start,
            membership: Mutex::new(Membership::default()),
            queues,
            version: AtomicU64::new(0),
            waiters: WaitList::default(),
            closed: AtomicBool::new(false),
            counters: Counters::default(),
            last_active_ms: PlainU64::new(crate::time::now_ms()),
        }
    }

    /// Records activity now (call with the membership lock or a queue lock held).
    pub(crate) fn touch(&self) {
        // Relaxed: read by `close_if_idle` under the same locks, which order it.
        self.last_active_ms.fetch_max(crate::time::now_ms(), std::sync::atomic::Ordering::Relaxed);
    }

    /// When the subscription last saw activity (see the field).
    pub(crate) fn last_active_ms(&self) -> u64 {
        // Relaxed: see `touch`; outside the locks this is a hint.
        self.last_active_ms.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn is_closed(&self) -> bool {
        // Acquire: pairs with the Release store in `close`.
        self.closed.load(Ordering::Acquire)
    }

    fn queue(&self, queue: u32) -> Result<(&TopicQueue, MutexGuard<'_, QueueState>), EngineError> {
        match (self.topic.queues.get(queue as usize), self.queues.get(queue as usize)) {
            (Some(eq), Some(st)) => Ok((eq, lock(st))),
            _ => Err(EngineError::QueueOutOfRange {
                topic: self.topic.name.clone(),
                queue,
                queues: self.topic.queue_count(),
            }),
        }
    }

    /// [`queue`](Self::queue), then fails with [`EngineError::NotAMember`] if the subscription
    /// has ended. `close` sets `closed` before it takes any queue's lock, so a caller that holds
    /// the lock and still sees `closed == false` runs entirely before `close` settles this
    /// queue: what it acknowledges is part of what the closed hold covers (review 2.1). A
    /// check before taking the lock is not enough: `close` could run in between, end the hold
    /// at the group's frontier, and the caller would then bump nodes the group no longer holds.
    fn open_queue(
        &self,
        queue: u32,
    ) -> Result<(&TopicQueue, MutexGuard<'_, QueueState>), EngineError> {
        let (eq, st) = self.queue(queue)?;
        if self.is_closed() && !mutant("commit_ignores_close") {
            return Err(EngineError::NotAMember);
        }
        Ok((eq, st))
    }

    /// A fresh member id, unique within this subscription.
    pub(crate) fn new_member_id(&self) -> MemberId {
        // Relaxed: only uniqueness matters.
        MemberId::fresh()
    }

    /// Adds a member and rebalances. Idempotent.
    ///
    /// # Errors
    /// [`EngineError::NotAMember`] if the subscription has ended: `close` sets `closed` under
    /// the membership lock, so checking it here, under that lock, is exact; a member added to
    /// a closed broadcasting subscription would open a hold nobody ever closes (review 2.1).
    pub(crate) fn add_member(
        &self,
        id: MemberId,
        guard_fn: &dyn Fn() -> Guard,
    ) -> Result<(), EngineError> {
        let mut m = lock(&self.membership);
        if self.is_closed() && !mutant("add_member_ignores_close") {
            return Err(EngineError::NotAMember);
        }
        self.touch();
        if let Err(pos) = m.members.binary_search(&id) {
            m.members.insert(pos, id);
            if self.mode == Mode::Broadcasting {
                for (eq, st) in self.topic.queues.iter().zip(self.queues.iter()) {
                    let mut st = lock(st);
                    if let QueueState::Broadcasting(b) = &mut *st {
                        let _head = eq.q.lock_head();
                        let guard = guard_fn();
                        let mut s = eq.resolve_start(self.start, &guard);
                        if b.held {
                            s = s.max(b.group.frontier);
                        } else {
                            eq.open_hold(self.id, s);
                            b.group = Track::new(s);
                            b.held = true;
                        }
                        b.members.push((id, Track::new(s)));
                    }
                }
            }
            self.rebalance(&mut m);
        }
        Ok(())
    }

    /// Removes a member and rebalances; what it had received but not acknowledged goes to the
    /// next owner of its queues (clustering). Idempotent.
    pub(crate) fn remove_member(&self, id: MemberId, guard_fn: &dyn Fn() -> Guard) {
        let mut m = lock(&self.membership);
        let Ok(pos) = m.members.binary_search(&id) else {
            return;
        };
        m.members.remove(pos);
        // A group's idle time runs from when its last member left.
        self.touch();
        if self.mode == Mode::Broadcasting {
            for (eq, st) in self.topic.queues.iter().zip(self.queues.iter()) {
                let mut st = lock(st);
                if let QueueState::Broadcasting(b) = &mut *st {
                    b.members.retain(|(mid, _)| *mid != id);
                    let guard = guard_fn();
                    self.advance_group(eq, b, &guard);
                }
            }
        }
        self.rebalance(&mut m);
    }

    /// Moves a broadcasting queue's group frontier to its slowest member, bumping what it
    /// passes; closes the hold when no member is left.
    fn advance_group(&self, eq: &TopicQueue, b: &mut Broadcast, guard: &Guard) {
        if !b.held {
            return;
        }
        let mut dropped = 0;
        match b.members.iter().map(|(_, t)| t.frontier).min() {
            Some(min) => {
                let to = min.min(eq.q.next_offset(guard));
                // The group counts each message once, here: acknowledged, filtered, or (in
                // `ack_until`'s reconcile) dropped. Members' own counts are not the group's.
                let (acked, filtered) =
                    b.group.ack_until(&eq.q, to, true, Some(&self.filter), &mut dropped, guard);
                Counters::add(&self.counters.acked, acked);
                Counters::add(&self.counters.filtered, filtered);
            }
            None => {
                dropped += b.group.reconcile(eq.q.first_offset(guard));
                eq.close_hold(self.id, b.group.frontier);
                b.held = false;
            }
        }
        Counters::add(&self.counters.dropped, dropped);
    }

    fn rebalance(&self, m: &mut Membership) {
        if self.mode == Mode::Clustering {
            let n = self.queues.len();
            m.owners.resize(n, None);
            for (q, st) in self.queues.iter().enumerate() {
                let new = owner_of(q, n, &m.members);
                if m.owners[q] != new {
                    m.owners[q] = new;
                    if let QueueState::Clustering { track, owner, .. } = &mut *lock(st) {
                        *owner = new;
                        track.rewind();
                    }
                }
            }
        }
        // Release: pairs with the Acquire load in members' `refresh`.
        self.version.fetch_add(1, Ordering::Release);
        self.waiters.wake_all();
    }

    /// The queues `member` reads now.
    pub(crate) fn assignment(&self, member: MemberId) -> Vec<u32> {
        let m = lock(&self.membership);
        if !m.members.contains(&member) {
            return Vec::new();
        }
        match self.mode {
            Mode::Broadcasting => (0..self.queues.len() as u32).collect(),
            Mode::Clustering => m
                .owners
                .iter()
                .enumerate()
                .filter(|(_, o)| **o == Some(member))
                .map(|(q, _)| q as u32)
                .collect(),
        }
    }

    pub(crate) fn member_count(&self) -> usize {
        lock(&self.membership).members.len()
    }

    /// Delivers up to `max` messages of `queue` to `member`.
    pub(crate) fn poll_queue(
        &self,
        member: MemberId,
        queue: u32,
        max: usize,
        out: &mut Vec<Delivery>,
        guard: &Guard,
    ) -> Result<(), EngineError> {
        let (eq, mut st) = self.open_queue(queue)?;
        match &mut *st {
            QueueState::Clustering { track, owner, .. } => {
                if *owner == Some(member) {
                    let t = track.deliver(&eq.q, queue, &self.filter, max, true, out, guard);
                    Counters::add(&self.counters.delivered, t.delivered);
                    Counters::add(&self.counters.filtered, t.filtered);
                    Counters::add(&self.counters.dropped, t.dropped);
                }
            }
            QueueState::Broadcasting(b) => {
                if let Some((_, t)) = b.members.iter_mut().find(|(m, _)| *m == member) {
                    // Members do not bump: the group frontier does. Only the delivery count
                    // is the group's (see `Tally`).
                    let t = t.deliver(&eq.q, queue, &self.filter, max, false, out, guard);
                    Counters::add(&self.counters.delivered, t.delivered);
                    // A filtered message may have moved this member's frontier.
                    self.advance_group(eq, b, guard);
                }
            }
        }
        Ok(())
    }

    /// The node `member` would wait behind in `queue` (its cursor, caught up with the end), or
    /// `None` if it does not read that queue now.
    pub(crate) fn wait_node<'g>(
        &self,
        member: MemberId,
        queue: u32,
        guard: &'g Guard,
    ) -> Result<Option<&'g Node>, EngineError> {
        let (eq, mut st) = self.queue(queue)?;
        Ok(match &mut *st {
            QueueState::Clustering { track, owner, .. } if *owner == Some(member) => {
                let mut dropped = 0;
                let n = track.cursor_node(&eq.q, &mut dropped, guard);
                Counters::add(&self.counters.dropped, dropped);
                n
            }
            // A member's catch-up with evictions is not the group's (the group frontier
            // counts them): discarded.
            QueueState::Broadcasting(b) => b
                .members
                .iter_mut()
                .find(|(m, _)| *m == member)
                .and_then(|(_, t)| t.cursor_node(&eq.q, &mut 0, guard)),
            _ => None,
        })
    }

    /// Per-message acknowledgement by `member` (or by the group, `None`, for clustering).
    pub(crate) fn ack(
        &self,
        member: Option<MemberId>,
        queue: u32,
        offset: u64,
        guard: &Guard,
    ) -> Result<AckOutcome, EngineError> {
        let (eq, mut st) = self.open_queue(queue)?;
        let mut dropped = 0;
        let out = match &mut *st {
            QueueState::Clustering { track, .. } => {
                let r = track.ack_one(&eq.q, queue, offset, true, &mut dropped, guard);
                if r == Ok(AckOutcome::Acked) {
                    Counters::add(&self.counters.acked, 1);
                }
                r
            }
            QueueState::Broadcasting(b) => {
                let Some((_, t)) =
                    member.and_then(|id| b.members.iter_mut().find(|(m, _)| *m == id))
                else {
                    return Err(EngineError::NotAMember);
                };
                let mut member_dropped = 0;
                let r = t.ack_one(&eq.q, queue, offset, false, &mut member_dropped, guard);
                self.advance_group(eq, b, guard);
                r
            }
        };
        Counters::add(&self.counters.dropped, dropped);
        out
    }

    /// Commits `offset` for the group (clustering) or for `member` (broadcasting): everything
    /// below it is acknowledged. A commit at the committed offset is a no-op; below it, an error.
    pub(crate) fn commit(
        &self,
        member: Option<MemberId>,
        queue: u32,
        offset: u64,
        guard: &Guard,
    ) -> Result<(), EngineError> {
        let (eq, mut st) = self.open_queue(queue)?;
        self.touch();
        let end = eq.q.next_offset(guard);
        if offset > end {
            return Err(EngineError::OffsetBeyondEnd { queue, offset, end });
        }
        let mut dropped = 0;
        let track = match &mut *st {
            QueueState::Clustering { track, .. } => track,
            QueueState::Broadcasting(b) => {
                let Some(idx) = member.and_then(|id| b.members.iter().position(|(m, _)| *m == id))
                else {
                    return Err(EngineError::NotAMember);
                };
                let t = &mut b.members[idx].1;
                let mut member_dropped = 0;
                t.reconcile(eq.q.first_offset(guard));
                if offset < t.frontier {
                    return Err(EngineError::CommitBehind { queue, offset, committed: t.frontier });
                }
                t.ack_until(&eq.q, offset, false, None, &mut member_dropped, guard);
                self.advance_group(eq, b, guard);
                return Ok(());
            }
        };
        dropped += track.reconcile(eq.q.first_offset(guard));
        if offset < track.frontier {
            Counters::add(&self.counters.dropped, dropped);
            return Err(EngineError::CommitBehind { queue, offset, committed: track.frontier });
        }
        let (n, _) = track.ack_until(&eq.q, offset, true, None, &mut dropped, guard);
        Counters::add(&self.counters.acked, n);
        Counters::add(&self.counters.dropped, dropped);
        Ok(())
    }

    /// The committed offset of `queue` (broadcasting: the slowest member's).
    pub(crate) fn committed(&self, queue: u32, guard: &Guard) -> Result<u64, EngineError> {
        let (eq, mut st) = self.queue(queue)?;
        let first = eq.q.first_offset(guard);
        let mut dropped = 0;
        // Checked under the queue's lock, as in `open_queue`: once `close` has settled a
        // clustering track, the group holds nothing at or above its frontier, so whatever is
        // reclaimed there later is not the group's drop.
        let closed = self.is_closed();
        let c = match &mut *st {
            QueueState::Clustering { track, .. } if closed => track.frontier,
            QueueState::Clustering { track, .. } => {
                dropped += track.reconcile(first);
                track.frontier
            }
            QueueState::Broadcasting(b) => {
                if b.held {
                    dropped += b.group.reconcile(first);
                }
                b.group.frontier
            }
        };
        Counters::add(&self.counters.dropped, dropped);
        Ok(c)
    }

    /// Backlog (messages still to acknowledge) over all queues.
    pub(crate) fn backlog(&self, guard: &Guard) -> u64 {
        let mut total = 0;
        for (eq, st) in self.topic.queues.iter().zip(self.queues.iter()) {
            let mut st = lock(st);
            let first = eq.q.first_offset(guard);
            let end = eq.q.next_offset(guard);
            let mut dropped = 0;
            // An ended subscription has nothing left to acknowledge (see `committed`).
            let closed = self.is_closed();
            total += match &mut *st {
                QueueState::Clustering { .. } if closed => 0,
                QueueState::Clustering { track, .. } => {
                    dropped += track.reconcile(first);
                    track.backlog(end)
                }
                QueueState::Broadcasting(b) if b.held => {
                    dropped += b.group.reconcile(first);
                    b.group.backlog(end)
                }
                QueueState::Broadcasting(_) => 0,
            };
            Counters::add(&self.counters.dropped, dropped);
        }
        total
    }

    /// Ends the subscription: acknowledges what must be acknowledged so that the holds can
    /// close (see the module docs), closes them, tells `journal` that its POP state is gone,
    /// and wakes members so they see `NotAMember`. Returns how many POP in-flight entries it
    /// forgot (their bookkeeping bytes go back to the budget).
    pub(crate) fn close(
        &self,
        guard_fn: &dyn Fn() -> Guard,
        journal: Option<&dyn PopJournal>,
    ) -> u64 {
        let mut m = lock(&self.membership);
        if self.closed.swap(true, Ordering::AcqRel) {
            return 0;
        }
        m.members.clear();
        let mut forgotten = 0;
        for (eq, st) in self.topic.queues.iter().zip(self.queues.iter()) {
            forgotten += self.settle_queue(eq, &mut lock(st), &guard_fn());
        }
        self.journal_end(journal);
        drop(m);
        self.closed_wake();
        forgotten
    }

    /// [`close`](Self::close), only if the subscription is idle: no member, no activity after
    /// `idle_since` and no popped message still invisible at `now` (ms since the Unix epoch,
    /// the clock pops use). Decided under the membership lock and every queue lock at once,
    /// so no pop, ack, change of invisible time, commit or member change runs between the
    /// decision and the end: each either ran before (and its activity counts) or finds the
    /// subscription ended. Returns the in-flight entries forgotten, `None` if not idle or
    /// already ended.
    pub(crate) fn close_if_idle(
        &self,
        idle_since: u64,
        now: u64,
        guard_fn: &dyn Fn() -> Guard,
        journal: Option<&dyn PopJournal>,
    ) -> Option<u64> {
        let mut m = lock(&self.membership);
        if self.is_closed() || !m.members.is_empty() || self.last_active_ms() > idle_since {
            return None;
        }
        // Lock order: membership, then every queue track in queue order (nobody holds two
        // queue tracks otherwise), then a queue's head lock and its holds.
        let mut states: Vec<MutexGuard<'_, QueueState>> = self.queues.iter().map(lock).collect();
        if !mutant("idle_checked_before_locks") {
            let busy = states.iter().any(|st| match &**st {
                QueueState::Clustering { pop, .. } => pop.invisible_at(now),
                QueueState::Broadcasting(_) => false,
            });
            if busy || self.last_active_ms() > idle_since {
                return None;
            }
        }
        self.closed.store(true, Ordering::Release);
        m.members.clear();
        let mut forgotten = 0;
        for (eq, st) in self.topic.queues.iter().zip(states.iter_mut()) {
            forgotten += self.settle_queue(eq, st, &guard_fn());
        }
        drop(states);
        self.journal_end(journal);
        drop(m);
        self.closed_wake();
        Some(forgotten)
    }

    /// Tells `journal` that this (clustering) subscription's POP state is gone: called by a
    /// closing subscription with its membership lock held, after every queue was settled
    /// (see [`PopJournal`]'s protocol).
    fn journal_end(&self, journal: Option<&dyn PopJournal>) {
        if let (Some(j), Mode::Clustering) = (journal, self.mode) {
            j.ended(&self.group, &self.topic.name);
        }
    }

    /// Returns once a closing of this subscription (`close`, `close_if_idle`), if one runs, has
    /// finished: both hold the membership lock from setting `closed` to their end.
    pub(crate) fn wait_closed(&self) {
        drop(lock(&self.membership));
    }

    /// A closing subscription's work in one queue (its lock held, `closed` already set):
    /// settle the acknowledgements and close the hold. Returns the in-flight entries forgotten.
    fn settle_queue(&self, eq: &TopicQueue, st: &mut QueueState, guard: &Guard) -> u64 {
        let mut dropped = 0;
        let mut forgotten = 0;
        match st {
            QueueState::Clustering { track, owner, pop } => {
                *owner = None;
                forgotten += pop.forget();
                dropped += track.reconcile(eq.q.first_offset(guard));
                let top = track.top();
                let top = if mutant("leave_unsettled") { track.frontier } else { top };
                // These are acknowledged (bumped) on leaving: they count as acked.
                let (n, _) = track.ack_until(&eq.q, top, true, None, &mut dropped, guard);
                Counters::add(&self.counters.acked, n);
                eq.close_hold(self.id, track.frontier);
            }
            QueueState::Broadcasting(b) => {
                b.members.clear();
                self.advance_group(eq, b, guard);
            }
        }
        Counters::add(&self.counters.dropped, dropped);
        forgotten
    }

    /// Tells members and parked waiters that the subscription ended.
    fn closed_wake(&self) {
        // Release: pairs with the Acquire loads in members' `refresh`.
        self.version.fetch_add(1, Ordering::Release);
        self.waiters.wake_all();
        for eq in self.topic.queues.iter() {
            // Members parked on a queue notice the closed subscription on wake-up.
            eq.q.wake_waiters();
        }
    }
}
