//! Reference-model test: a plain model (a `VecDeque` per queue, a frontier, ack set and cursor
//! per group and queue) and the real engine are driven by the same seeded random operations —
//! append, poll, ack, commit, group join and leave, member join and leave, reap, under budget
//! pressure with both `reject` and `drop-oldest`, and POP (pop with redelivery after the
//! invisible time, hand-over for revival and dead-lettering under each group's `PopPolicy`,
//! acks and changes of invisible time by receipt, which settle or put back what was handed
//! over, stale receipts, a clock that moves) — and every delivery, every outcome and the statistics are
//! compared after each step. A failure prints the seed and the step; rerun one
//! seed with `BAIJI_MODEL_SEED=<seed> cargo test --test engine_model`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use baiji::engine::NODE_SIZE;
use baiji::engine::{
    AckOutcome, Consumer, Engine, EngineConfig, EngineError, Filter, Group, MemoryPolicy, Message,
    PopAck, PopInit, PopOutcome, PopPolicy, PopReceipt, PopRequest, Retention, StartFrom,
    SubscribeOptions, INFLIGHT_ENTRY_SIZE,
};
use baiji::hash::java_string_hash;
use bytes::Bytes;

#[path = "common/rng.rs"]
mod rng;
use rng::Rng;

const QUEUES: usize = 3;
const TAGS: [&str; 3] = ["A", "B", "C"];

#[derive(Debug, Clone)]
struct MMsg {
    offset: u64,
    tag: u32,
    id: u64,
    size: u64,
}

#[derive(Debug, Clone, Default)]
struct MTrack {
    frontier: u64,
    acked: BTreeSet<u64>,
    cursor: u64,
    hwm: u64,
}

impl MTrack {
    fn new(s: u64) -> Self {
        MTrack { frontier: s, acked: BTreeSet::new(), cursor: s, hwm: s }
    }
    fn is_acked(&self, o: u64) -> bool {
        o < self.frontier || self.acked.contains(&o)
    }
    fn absorb(&mut self) {
        while self.acked.remove(&self.frontier) {
            self.frontier += 1;
        }
        self.cursor = self.cursor.max(self.frontier);
    }
    fn mark(&mut self, o: u64) {
        if o == self.frontier {
            self.frontier += 1;
            self.absorb();
        } else {
            self.acked.insert(o);
        }
    }
    /// Evictions below `first_live`: returns how many were not acknowledged.
    fn reconcile(&mut self, first_live: u64) -> u64 {
        if first_live <= self.frontier {
            return 0;
        }
        let below = self.acked.range(..first_live).count() as u64;
        let dropped = first_live - self.frontier - below;
        self.acked = self.acked.split_off(&first_live);
        self.frontier = first_live;
        self.cursor = self.cursor.max(first_live);
        self.hwm = self.hwm.max(first_live);
        self.absorb();
        dropped
    }
}

/// A popped, unacknowledged message: (pop time, invisible ms, attempts).
type MInflight = (u64, u64, u32);

/// One queue's POP state in the model.
#[derive(Debug, Clone, Default)]
struct MPop {
    started: bool,
    pos: u64,
    inflight: BTreeMap<u64, MInflight>,
}

/// Deliveries of one message before it is dead-lettered, in the model runs.
const MAX_ATTEMPTS: u32 = 3;

struct MGroup {
    name: String,
    pops: Vec<MPop>,
    /// How this group's pops treat expired messages.
    policy: PopPolicy,
    filter: Filter,
    tracks: Vec<MTrack>,
    members: Vec<u64>,
    owners: Vec<Option<u64>>,
    next_member: u64,
    delivered: u64,
    acked: u64,
    filtered: u64,
    dropped: u64,
    // The real side.
    group: Group,
    consumers: Vec<(u64, Consumer)>,
}

fn owner_of(queue: usize, queues: usize, members: &[u64]) -> Option<u64> {
    let k = members.len();
    if k == 0 {
        return None;
    }
    if queues <= k {
        return members.get(queue).copied();
    }
    let (avg, rem) = (queues / k, queues % k);
    let big = rem * (avg + 1);
    let idx = if queue < big { queue / (avg + 1) } else { rem + (queue - big) / avg };
    members.get(idx).copied()
}

struct World {
    seed: u64,
    step: usize,
    policy: MemoryPolicy,
    budget: u64,
    queues: Vec<VecDeque<MMsg>>,
    next: Vec<u64>,
    used: u64,
    groups: Vec<MGroup>,
    group_seq: usize,
    next_id: u64,
    engine: Engine,
    /// The POP clock, ms.
    now: u64,
}

impl World {
    fn ctx(&self) -> String {
        format!("seed {} step {} ({:?})", self.seed, self.step, self.policy)
    }

    fn first_live(&self, q: usize) -> u64 {
        self.queues[q].front().map_or(self.next[q], |m| m.offset)
    }

    fn reconcile_all(&mut self) {
        for q in 0..QUEUES {
            let first = self.first_live(q);
            for g in &mut self.groups {
                g.dropped += g.tracks[q].reconcile(first);
            }
        }
    }

    fn model_reap(&mut self) {
        for q in 0..QUEUES {
            while let Some(m) = self.queues[q].front() {
                let held = self.groups.iter().any(|g| {
                    // A group holds offsets from its start on until it acknowledges them.
                    m.offset >= start_of(g, q) && !g.tracks[q].is_acked(m.offset)
                });
                if held {
                    break;
                }
                let m = self.queues[q].pop_front().unwrap();
                self.used -= m.size + NODE_SIZE as u64;
            }
        }
    }

    fn model_evict(&mut self, q: usize, need: u64) {
        let mut left = need;
        for i in 0..QUEUES {
            let qq = (q + i) % QUEUES;
            let mut freed = 0;
            while freed < left {
                let Some(m) = self.queues[qq].pop_front() else {
                    break;
                };
                freed += m.size + NODE_SIZE as u64;
                self.used -= m.size + NODE_SIZE as u64;
            }
            left = left.saturating_sub(freed);
            if left == 0 {
                break;
            }
        }
    }

    fn append(&mut self, rng: &mut Rng) {
        let q = rng.below(QUEUES as u64) as usize;
        let tag = if rng.below(4) == 0 { None } else { Some(TAGS[rng.below(3) as usize]) };
        let size = 1 + rng.below(40);
        let id = self.next_id;
        self.next_id += 1;
        let mut payload = id.to_le_bytes().to_vec();
        payload.resize(size.max(8) as usize, 0);
        let size = payload.len() as u64;
        let cost = size + NODE_SIZE as u64;
        let mut msg = Message::new(Bytes::from(payload));
        if let Some(t) = tag {
            msg = msg.with_tag(t);
        }
        let real = self.engine.append_to("T", q as u32, msg);
        // The model: the same budget rules.
        let accepted = if self.used + cost <= self.budget {
            true
        } else if self.policy == MemoryPolicy::DropOldest {
            // Only this append's share: in-flight bookkeeping may have pushed `used` over the
            // budget without an append.
            self.model_evict(q, (self.used + cost - self.budget).min(cost));
            true
        } else {
            self.model_reap();
            self.used + cost <= self.budget
        };
        match (&real, accepted) {
            (Ok(r), true) => {
                assert_eq!(
                    (r.queue as usize, r.offset),
                    (q, self.next[q]),
                    "{}: append receipt",
                    self.ctx()
                );
                let tag = tag.map_or(0, |t| java_string_hash(t) as u32);
                self.queues[q].push_back(MMsg { offset: self.next[q], tag, id, size });
                self.next[q] += 1;
                self.used += cost;
            }
            (Err(EngineError::BudgetExceeded { .. }), false) => {}
            other => panic!("{}: append disagrees: {other:?}", self.ctx()),
        }
        self.reconcile_all();
    }

    fn poll(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        let gi = rng.below(self.groups.len() as u64) as usize;
        self.reconcile_all();
        let g = &mut self.groups[gi];
        if g.consumers.is_empty() {
            return;
        }
        let ci = rng.below(g.consumers.len() as u64) as usize;
        let member = g.consumers[ci].0;
        let mut got: Vec<(u32, u64, u64)> = g.consumers[ci]
            .1
            .poll(10_000)
            .unwrap_or_else(|e| panic!("seed {}: poll failed: {e}", self.seed))
            .iter()
            .map(|d| (d.queue, d.offset, u64::from_le_bytes(d.payload[..8].try_into().unwrap())))
            .collect();
        // Within a queue a poll delivers in offset order (invariant 8); only the interleaving
        // of queues is the engine's choice, so that is all the sort below may hide.
        let mut last = [None::<u64>; QUEUES];
        for &(q, offset, _) in &got {
            let prev = last[q as usize].replace(offset);
            assert!(
                prev.map_or(true, |p| p < offset),
                "{}: queue {q} delivered offset {offset} after {prev:?} in one poll",
                self.ctx()
            );
        }
        got.sort();
        let mut want = Vec::new();
        for q in 0..QUEUES {
            if g.owners[q] != Some(member) {
                continue;
            }
            let t = &mut g.tracks[q];
            let from = t.cursor;
            for m in self.queues[q].iter().filter(|m| m.offset >= from) {
                if t.is_acked(m.offset) {
                    continue;
                }
                if g.filter.matches(m.tag) {
                    want.push((q as u32, m.offset, m.id));
                    g.delivered += 1;
                } else {
                    t.mark(m.offset);
                    g.filtered += 1;
                }
            }
            t.cursor = t.cursor.max(self.next[q]);
            t.hwm = t.hwm.max(t.cursor);
        }
        if got != want {
            let assignments: Vec<_> =
                g.consumers.iter_mut().map(|(id, c)| (*id, c.assignment().to_vec())).collect();
            eprintln!("engine assignments {assignments:?} stats {:?}", g.group.stats());
        }
        assert_eq!(
            got, want,
            "seed {} step {}: deliveries of {} member {member}",
            self.seed, self.step, g.name
        );
    }

    fn ack(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        self.reconcile_all();
        let gi = rng.below(self.groups.len() as u64) as usize;
        let q = rng.below(QUEUES as u64) as usize;
        let next = self.next[q];
        let g = &mut self.groups[gi];
        let Some((_, c)) = g.consumers.first() else {
            return;
        };
        let t = &mut g.tracks[q];
        let lo = t.frontier.saturating_sub(2);
        let o = lo + rng.below(next + 3 - lo);
        let real = c.ack_offset(q as u32, o);
        let want = if t.is_acked(o) {
            Ok(AckOutcome::AlreadyAcked)
        } else if o >= t.hwm {
            Err(EngineError::NotDelivered { queue: q as u32, offset: o })
        } else {
            t.mark(o);
            g.acked += 1;
            Ok(AckOutcome::Acked)
        };
        assert_eq!(real, want, "seed {} step {}: ack {} q{q} o{o}", self.seed, self.step, g.name);
    }

    fn commit(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        self.reconcile_all();
        let gi = rng.below(self.groups.len() as u64) as usize;
        let q = rng.below(QUEUES as u64) as usize;
        let next = self.next[q];
        let g = &mut self.groups[gi];
        let t = &mut g.tracks[q];
        let lo = t.frontier.saturating_sub(1);
        let x = lo + rng.below(next + 2 - lo);
        let real = g.group.commit(q as u32, x);
        let want = if x > next {
            Err(EngineError::OffsetBeyondEnd { queue: q as u32, offset: x, end: next })
        } else if x < t.frontier {
            Err(EngineError::CommitBehind { queue: q as u32, offset: x, committed: t.frontier })
        } else {
            let newly = (t.frontier..x).filter(|o| !t.acked.contains(o)).count() as u64;
            g.acked += newly;
            t.acked = t.acked.split_off(&x);
            t.frontier = x;
            t.absorb();
            t.cursor = t.cursor.max(t.frontier);
            t.hwm = t.hwm.max(t.frontier);
            Ok(())
        };
        assert_eq!(
            real, want,
            "seed {} step {}: commit {} q{q} to {x}",
            self.seed, self.step, g.name
        );
    }

    fn rebalance(g: &mut MGroup) {
        for q in 0..QUEUES {
            let new = owner_of(q, QUEUES, &g.members);
            if g.owners[q] != new {
                g.owners[q] = new;
                g.tracks[q].cursor = g.tracks[q].frontier;
            }
        }
    }

    fn join_group(&mut self, rng: &mut Rng) {
        if self.groups.len() >= 3 {
            return;
        }
        self.reconcile_all();
        let name = format!("G{}", self.group_seq);
        self.group_seq += 1;
        let filter = if rng.below(3) == 0 { Filter::tags(["A", "B"]) } else { Filter::All };
        // In place (today's), revived at the first or second expiry, dead letters pending.
        let policy = PopPolicy {
            in_place_deliveries: [u32::MAX, 1, 2][rng.below(3) as usize],
            dead_letter_pending: rng.below(2) == 0,
            lease_ms: rng.below(20),
        };
        let (start, starts): (StartFrom, Vec<u64>) = match rng.below(3) {
            0 => (StartFrom::First, (0..QUEUES).map(|q| self.first_live(q)).collect()),
            1 => (StartFrom::Last, self.next.clone()),
            _ => {
                let o = rng.below(self.next.iter().max().copied().unwrap_or(0) + 2);
                (
                    StartFrom::Offset(o),
                    (0..QUEUES).map(|q| o.clamp(self.first_live(q), self.next[q])).collect(),
                )
            }
        };
        let group = self
            .engine
            .subscribe(
                &name,
                "T",
                SubscribeOptions { filter: filter.clone(), start, ..Default::default() },
            )
            .unwrap();
        for (q, s) in starts.iter().enumerate() {
            assert_eq!(
                group.committed(q as u32).unwrap(),
                *s,
                "{}: start of {name} in q{q}",
                self.ctx()
            );
        }
        self.groups.push(MGroup {
            name,
            policy,
            filter,
            tracks: starts.iter().map(|s| MTrack::new(*s)).collect(),
            pops: vec![MPop::default(); QUEUES],
            members: Vec::new(),
            owners: vec![None; QUEUES],
            next_member: 1,
            delivered: 0,
            acked: 0,
            filtered: 0,
            dropped: 0,
            group,
            consumers: Vec::new(),
        });
        self.add_member_to(self.groups.len() - 1);
    }

    fn add_member_to(&mut self, gi: usize) {
        let g = &mut self.groups[gi];
        let c = g.group.join().unwrap();
        let id = g.next_member;
        g.next_member += 1;
        if let Some((_, last)) = g.consumers.last() {
            assert!(c.id() > last.id(), "member ids increase with joins");
        }
        g.members.push(id);
        g.consumers.push((id, c));
        Self::rebalance(g);
    }

    fn member_change(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        self.reconcile_all();
        let gi = rng.below(self.groups.len() as u64) as usize;
        let g = &mut self.groups[gi];
        if g.consumers.len() < 2 && rng.below(2) == 0 {
            self.add_member_to(gi);
        } else if !g.consumers.is_empty() {
            let ci = rng.below(g.consumers.len() as u64) as usize;
            let (id, c) = g.consumers.remove(ci);
            drop(c);
            g.members.retain(|m| *m != id);
            Self::rebalance(g);
        }
    }

    fn leave_group(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        let gi = rng.below(self.groups.len() as u64) as usize;
        let g = self.groups.remove(gi);
        g.group.unsubscribe();
        drop(g.consumers);
        let inflight: u64 = g.pops.iter().map(|p| p.inflight.len() as u64).sum();
        self.used -= inflight * INFLIGHT_ENTRY_SIZE;
    }

    fn pop(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        self.reconcile_all();
        let gi = rng.below(self.groups.len() as u64) as usize;
        let q = rng.below(QUEUES as u64) as usize;
        let max = 1 + rng.below(4) as usize;
        let invisible = rng.below(30);
        let now = self.now;
        let first_live = self.first_live(q);
        let ctx = self.ctx();
        let g = &mut self.groups[gi];
        let all = Filter::All;
        let req = PopRequest {
            max,
            invisible_ms: invisible,
            now_ms: now,
            order: false,
            attempt_id: None,
            max_attempts: MAX_ATTEMPTS,
            filter: &all,
            init: PopInit::Min,
        };
        let mut out = PopOutcome::default();
        g.group
            .pop_with(q as u32, &req, &g.policy, &mut out)
            .unwrap_or_else(|e| panic!("{ctx}: pop failed: {e}"));
        let got: Vec<(u64, u64, u32)> = out
            .messages
            .iter()
            .map(|m| {
                assert_eq!(m.delivery.queue as usize, q, "{ctx}: popped from the queue asked");
                let id = u64::from_le_bytes(m.delivery.payload[..8].try_into().unwrap());
                (m.delivery.offset, id, m.attempts)
            })
            .collect();
        let dead: Vec<(u64, u32)> =
            out.dead.iter().map(|m| (m.delivery.offset, m.attempts)).collect();
        let revive: Vec<(u64, u32)> =
            out.revive.iter().map(|m| (m.delivery.offset, m.attempts)).collect();
        // The model.
        let (t, p) = (&mut g.tracks[q], &mut g.pops[q]);
        let before = p.inflight.len() as u64;
        p.inflight.retain(|o, _| !t.is_acked(*o));
        if !p.started {
            p.started = true;
            p.pos = first_live.max(t.frontier);
        }
        let (mut want, mut want_dead, mut want_revive) = (Vec::new(), Vec::new(), Vec::new());
        let policy = g.policy;
        let expired: Vec<u64> = p
            .inflight
            .iter()
            .filter(|(_, (pt, inv, _))| now >= pt + inv && now > *pt)
            .map(|(o, _)| *o)
            .collect();
        for o in expired {
            if want.len() >= max {
                break;
            }
            let id = self.queues[q].iter().find(|m| m.offset == o).map(|m| m.id);
            let Some(id) = id else { panic!("{ctx}: in-flight offset {o} is retained") };
            let e = p.inflight.get_mut(&o).unwrap();
            if e.2 >= MAX_ATTEMPTS {
                want_dead.push((o, e.2));
                if policy.dead_letter_pending {
                    // Handed over: the caller's, under this pop's receipt, for its lease.
                    *e = (now, policy.lease_ms, e.2);
                } else {
                    p.inflight.remove(&o);
                    t.mark(o);
                    g.acked += 1;
                }
                continue;
            }
            if e.2 >= policy.in_place_deliveries {
                want_revive.push((o, e.2));
                *e = (now, policy.lease_ms, e.2);
                continue;
            }
            *e = (now, invisible, e.2 + 1);
            want.push((o, id, e.2));
            g.delivered += 1;
        }
        if want.len() < max {
            p.pos = p.pos.max(t.frontier);
            let from = p.pos;
            let mut last = None;
            for m in self.queues[q].iter().filter(|m| m.offset >= from) {
                if want.len() >= max {
                    break;
                }
                last = Some(m.offset);
                if t.is_acked(m.offset) {
                    continue;
                }
                want.push((m.offset, m.id, 1));
                p.inflight.insert(m.offset, (now, invisible, 1));
                g.delivered += 1;
            }
            if let Some(l) = last {
                p.pos = l + 1;
            }
            t.hwm = t.hwm.max(p.pos);
        }
        let after = p.inflight.len() as u64;
        self.used = self.used + after * INFLIGHT_ENTRY_SIZE - before * INFLIGHT_ENTRY_SIZE;
        assert_eq!(got, want, "{ctx}: pop of {} q{q} max {max} at {now}", g.name);
        assert_eq!(dead, want_dead, "{ctx}: dead letters of {} q{q} at {now}", g.name);
        assert_eq!(revive, want_revive, "{ctx}: revivals of {} q{q} at {now}", g.name);
        assert_eq!(
            (out.scan_limited, out.inflight_full),
            (0, 0),
            "{ctx}: a handful of messages stops neither at the scan limit nor at the cap"
        );
        assert_eq!(out.pop_time, now, "{ctx}: the pop time is the request's clock");
    }

    /// A receipt for an ack or change: the right one mostly, a stale one sometimes.
    fn receipt(g: &MGroup, q: usize, rng: &mut Rng) -> Option<(u64, u64)> {
        let p = &g.pops[q];
        if p.inflight.is_empty() {
            return None;
        }
        let i = rng.below(p.inflight.len() as u64) as usize;
        let (&o, &(pt, _, _)) = p.inflight.iter().nth(i)?;
        Some(match rng.below(4) {
            0 => (o, pt.saturating_sub(1 + rng.below(3))),
            1 => (o + 1 + rng.below(2), pt),
            _ => (o, pt),
        })
    }

    fn pop_ack(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        self.reconcile_all();
        let ctx = self.ctx();
        let gi = rng.below(self.groups.len() as u64) as usize;
        let q = rng.below(QUEUES as u64) as usize;
        let g = &mut self.groups[gi];
        let Some((o, pt)) = Self::receipt(g, q, rng) else { return };
        // Both spellings of the ack: by loose fields and by receipt.
        let real = if rng.below(2) == 0 {
            g.group.pop_ack(q as u32, o, pt)
        } else {
            let r = g.group.ack_popped(PopReceipt { queue: q as u32, offset: o, pop_time: pt });
            r.map(|PopAck { outcome, room_freed }| {
                assert!(!room_freed, "{ctx}: a handful of messages never fills the in-flight cap");
                outcome
            })
        };
        let (t, p) = (&mut g.tracks[q], &mut g.pops[q]);
        let stale = Err(EngineError::StaleReceipt { queue: q as u32, offset: o });
        let want = match p.inflight.get(&o) {
            Some(e) if e.0 == pt => {
                p.inflight.remove(&o);
                self.used -= INFLIGHT_ENTRY_SIZE;
                if t.is_acked(o) {
                    Ok(AckOutcome::AlreadyAcked)
                } else {
                    t.mark(o);
                    g.acked += 1;
                    Ok(AckOutcome::Acked)
                }
            }
            Some(_) => stale,
            None if t.is_acked(o) => Ok(AckOutcome::AlreadyAcked),
            None => stale,
        };
        assert_eq!(real, want, "{ctx}: pop ack of {} q{q} o{o} receipt {pt}", g.name);
    }

    fn change_invisible(&mut self, rng: &mut Rng) {
        if self.groups.is_empty() {
            return;
        }
        self.reconcile_all();
        let (ctx, now) = (self.ctx(), self.now);
        let gi = rng.below(self.groups.len() as u64) as usize;
        let q = rng.below(QUEUES as u64) as usize;
        let g = &mut self.groups[gi];
        let Some((o, pt)) = Self::receipt(g, q, rng) else { return };
        let invisible = rng.below(30);
        let real = g.group.change_invisible(q as u32, o, pt, invisible, now);
        let want = match g.pops[q].inflight.get_mut(&o) {
            Some(e) if e.0 == pt => {
                let renewed = now.max(pt + 1);
                *e = (renewed, invisible, e.2);
                Ok(renewed)
            }
            _ => Err(EngineError::StaleReceipt { queue: q as u32, offset: o }),
        };
        assert_eq!(real, want, "{ctx}: change of {} q{q} o{o} receipt {pt}", g.name);
    }

    fn reap(&mut self) {
        self.engine.reap();
        self.model_reap();
        self.reconcile_all();
    }

    fn check(&mut self) {
        self.reconcile_all();
        let s = self.engine.stats();
        let live: u64 = self.queues.iter().map(|q| q.len() as u64).sum();
        assert_eq!(
            (s.live_messages, s.bytes_used),
            (live, self.used),
            "{}: live messages and bytes",
            self.ctx()
        );
        let t = self.engine.topic("T").unwrap();
        for q in 0..QUEUES {
            let qs = t.queue_stats(q as u32).unwrap();
            assert_eq!(
                (qs.min_offset, qs.max_offset),
                (self.first_live(q), self.next[q]),
                "{}: q{q} range",
                self.ctx()
            );
        }
        for g in &self.groups {
            let inflight: u64 = g.pops.iter().map(|p| p.inflight.len() as u64).sum();
            assert_eq!(g.group.inflight(), inflight, "{}: in flight in {}", self.ctx(), g.name);
            let st = g.group.stats();
            let committed: Vec<u64> = g.tracks.iter().map(|t| t.frontier).collect();
            assert_eq!(
                (st.delivered, st.acked, st.filtered, st.dropped, st.committed.clone()),
                (g.delivered, g.acked, g.filtered, g.dropped, committed),
                "{}: stats of {}",
                self.ctx(),
                g.name
            );
        }
    }
}

fn start_of(g: &MGroup, q: usize) -> u64 {
    // Offsets below the frontier are acknowledged, so the frontier is as good as the start for
    // "is this held": anything below it is not held.
    g.tracks[q].frontier
}

fn run(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let policy = if seed % 2 == 0 { MemoryPolicy::Reject } else { MemoryPolicy::DropOldest };
    let budget = 12 * (24 + NODE_SIZE as u64);
    let engine = Engine::new(EngineConfig {
        memory_budget: budget,
        policy,
        reaper_thread: false,
        retention: Retention { time: Duration::ZERO, bytes: 0 },
        ..EngineConfig::default()
    })
    .unwrap();
    engine.create_topic("T", QUEUES as u32).unwrap();
    let mut w = World {
        seed,
        step: 0,
        policy,
        budget,
        queues: vec![VecDeque::new(); QUEUES],
        next: vec![0; QUEUES],
        used: 0,
        groups: Vec::new(),
        group_seq: 0,
        next_id: 0,
        engine,
        now: 1_000,
    };
    let trace = std::env::var("BAIJI_MODEL_TRACE").is_ok();
    for step in 0..steps {
        w.step = step;
        let op = rng.below(120);
        if trace {
            let gs: Vec<String> = w
                .groups
                .iter()
                .map(|g| {
                    format!(
                        "{}{:?}{:?}",
                        g.name,
                        g.owners,
                        g.tracks
                            .iter()
                            .map(|t| (t.frontier, t.cursor, t.hwm, t.acked.len()))
                            .collect::<Vec<_>>()
                    )
                })
                .collect();
            eprintln!(
                "step {step} op {op} next {:?} first {:?} groups {gs:?}",
                w.next,
                (0..QUEUES).map(|q| w.first_live(q)).collect::<Vec<_>>()
            );
        }
        match op {
            0..=34 => w.append(&mut rng),
            35..=54 => w.poll(&mut rng),
            55..=64 => w.ack(&mut rng),
            65..=76 => w.commit(&mut rng),
            77..=80 => w.join_group(&mut rng),
            81..=82 => w.leave_group(&mut rng),
            83..=87 => w.member_change(&mut rng),
            88..=99 => w.reap(),
            100..=107 => w.pop(&mut rng),
            108..=112 => w.pop_ack(&mut rng),
            113..=115 => w.change_invisible(&mut rng),
            _ => w.now += rng.below(25),
        }
        w.check();
    }
}

#[test]
fn given_seeded_random_operations_when_replayed_should_match_the_reference_model() {
    if let Ok(seed) = std::env::var("BAIJI_MODEL_SEED") {
        let seed = seed.parse().expect("BAIJI_MODEL_SEED must be a number");
        run(seed, 3000);
        return;
    }
    let seeds: u64 = std::env::var("BAIJI_MODEL_SEEDS")
        .map_or(64, |s| s.parse().expect("BAIJI_MODEL_SEEDS must be a number"));
    assert!(seeds > 0, "BAIJI_MODEL_SEEDS=0 would check nothing");
    for seed in 1..=seeds {
        let r = std::panic::catch_unwind(|| run(seed * 7919, 3000));
        if r.is_err() {
            panic!("reference model diverged; replay with BAIJI_MODEL_SEED={}", seed * 7919);
        }
    }
}
