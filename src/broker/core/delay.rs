//! Delayed delivery: RocketMQ's delay levels (`DELAY` on a send, and every retry).
//!
//! As in RocketMQ, a delayed message is stored in the internal topic `SCHEDULE_TOPIC_XXXX`,
//! one queue per level, with `REAL_TOPIC` and `REAL_QID` naming where it goes. Messages of
//! one level are due in the order they were stored, so the scheduler only ever looks at the
//! head of each of the 18 level queues — a heap of 18 heads, never a scan of every waiting
//! message. When a head is due it is appended to its real topic (with `DELAY` removed and a
//! new store time) and the level queue's offset is committed, which releases the waiting copy.
//! Waiting messages live in the store, so they count against the memory budget. Parking a
//! message in an internal topic ([`park`]) and delivering it to its real topic
//! ([`deliver_record`]) are shared with timer messages, which differ only in how they find
//! what is due.
//!
//! Clients never see the schedule topic: it is not in the topic table, so it is neither routed
//! nor readable, and sends to it are forbidden.
//!
//! # Across a restart (`--store-path-root-dir`)
//!
//! Nothing of its own is journaled: the schedule topic, its messages (with their store times)
//! and the internal group's committed offsets come back with the store, and the scheduler
//! starts each level at the later of the queue's first offset and the group's commit (the
//! reaper may not have freed what was delivered before a crash). With a journal the group
//! commits every level's start at once, so the store holds the schedule topic for it again
//! after a restart even before its first delivery. Due times are store time plus the level's
//! delay, so nothing is delivered early; a crash between a delivery's append and its commit
//! (one journal write) delivers that message once more after the restart (at least once, as
//! RocketMQ's `delayOffset.json` gives).

use crate::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::record::{self, NewRecord, PutError};
use super::Core;
use crate::remoting::properties;
use crate::store::{Filter, MemoryPolicy, StoreError, StoredRef, TopicStore};
use crate::time::now_ms;

/// The internal topic delayed messages wait in.
pub(crate) const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// The internal group whose commits release delivered messages.
pub(crate) const SCHEDULE_GROUP: &str = "CID_RMQ_SYS_SCHEDULE";

/// RocketMQ's `messageDelayLevel`: `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`.
pub(crate) const LEVEL_MILLIS: [u64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];

/// The highest delay level.
pub(crate) const MAX_LEVEL: u32 = LEVEL_MILLIS.len() as u32;

/// Wakes the scheduler when a new delayed message may be due earlier than what it waits for.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    wake: Notify,
}

/// The delay level a message's `DELAY` property asks for, capped at [`MAX_LEVEL`]; `None`
/// for no delay.
pub(crate) fn delay_level(delay: Option<&str>) -> Option<u32> {
    let level: i64 = delay?.trim().parse().ok()?;
    (level > 0).then(|| u32::try_from(level).unwrap_or(MAX_LEVEL).min(MAX_LEVEL))
}

/// Properties with every pair whose key is in `drop` removed and `add` appended.
pub(crate) fn rewrite_properties(props: &[u8], drop: &[&str], add: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(props.len() + 64);
    for (k, v) in properties::parse(props) {
        if !drop.contains(&k) && !add.iter().any(|(ak, _)| *ak == k) {
            let _ = properties::write_pair(&mut out, k, v);
        }
    }
    for (k, v) in add {
        let _ = properties::write_pair(&mut out, k, v);
    }
    out
}

/// Under `reject`, new delayed messages, retries and timers are refused once less than this
/// share of the budget is free: a delivery appends its copy before the waiting one is
/// released, so waiting messages that filled the budget by themselves could otherwise never
/// be delivered.
const DELIVERY_ROOM_DIVISOR: u64 = 16;

/// Refuses a message that would wait (a delay level, a retry, a timer) under `reject` when
/// less than a sixteenth of the budget is free, so that what already waits can be delivered.
/// Under `drop-oldest` delivery evicts instead and nothing is refused here.
///
/// # Errors
/// [`StoreError::Full`] as a [`PutError::Store`].
pub(crate) fn ensure_delivery_room(core: &Core) -> Result<(), PutError> {
    // The policy in force now, not the one configured at the start (`updateBrokerConfig`).
    if core.store.settings().policy == MemoryPolicy::Reject {
        let (used, budget) = core.store.used_and_budget();
        if used.saturating_add(budget / DELIVERY_ROOM_DIVISOR) > budget {
            return Err(PutError::Store(StoreError::Full { used, budget }));
        }
    }
    Ok(())
}

/// Stores a message to be delivered to `real_topic`/`real_queue` after `level`'s delay.
/// Returns the schedule queue and offset it waits at.
///
/// # Errors
/// [`PutError::Record`] when the properties with `REAL_TOPIC`, `REAL_QID` and `DELAY` would
/// not fit a record (checked before anything is stored), [`StoreError::Full`] under `reject`
/// when less than a sixteenth of the budget is free (see [`ensure_delivery_room`]), or the
/// store's error.
pub(crate) fn schedule(
    core: &Core,
    level: u32,
    real_topic: &str,
    real_queue: u32,
    rec: &NewRecord<'_>,
) -> Result<(Arc<dyn TopicStore>, u32, u64), PutError> {
    ensure_delivery_room(core)?;
    let queue = level.clamp(1, MAX_LEVEL) - 1;
    let level_str = level.to_string();
    let topic = core.store.ensure_topic(SCHEDULE_TOPIC, MAX_LEVEL)?;
    let offset = park(
        core,
        topic.as_ref(),
        queue,
        Parked { real_topic, real_queue, add: &[(properties::DELAY, &level_str)], reserve: 0 },
        rec,
    )?;
    core.scheduler.wake.notify_one();
    Ok((topic, queue, offset))
}

/// Where a parked message goes when it is due, and what its waiting copy carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parked<'a> {
    /// The topic it is delivered to (`REAL_TOPIC`).
    pub(crate) real_topic: &'a str,
    /// The queue it is delivered to (`REAL_QID`).
    pub(crate) real_queue: u32,
    /// Properties the waiting copy carries besides `REAL_TOPIC` and `REAL_QID`.
    pub(crate) add: &'a [(&'a str, &'a str)],
    /// Bytes of properties delivery may add beyond what it removes, checked now so that a
    /// stored copy can always be delivered.
    pub(crate) reserve: usize,
}

/// Stores a message in `queue` of an internal topic (delay levels, timers) to wait, with
/// `REAL_TOPIC` and `REAL_QID` naming where [`deliver_record`] takes it. Returns its offset.
///
/// # Errors
/// [`PutError::Record`] when the properties with what is added (and `reserve`) would not fit
/// a record (checked before anything is stored), or the store's error.
pub(crate) fn park(
    core: &Core,
    topic: &dyn TopicStore,
    queue: u32,
    p: Parked<'_>,
    rec: &NewRecord<'_>,
) -> Result<u64, PutError> {
    let qid = p.real_queue.to_string();
    let mut add = vec![(properties::REAL_TOPIC, p.real_topic), (properties::REAL_QID, &qid)];
    add.extend_from_slice(p.add);
    let props = rewrite_properties(rec.properties, &[], &add);
    let stored = record::encode(
        &NewRecord { properties: &props, ..*rec },
        core.cluster_property.len().saturating_add(p.reserve),
    )?;
    let tag = properties::tags_code(&props);
    Ok(topic.append(queue, stored, tag, now_ms())?)
}

/// Delivers one due message to its real topic (`REAL_TOPIC`, `REAL_QID`) with the properties
/// in `drop` removed and `add` appended; `seed` spreads it over the queues when `REAL_QID` is
/// out of range. `Ok(false)` when it must wait (no room); `Ok(true)` when it was delivered or
/// cannot ever be (logged), so the waiting copy can be released.
///
/// # Errors
/// The store's error other than a full budget.
pub(crate) fn deliver_record(
    core: &Core,
    stored: &bytes::Bytes,
    seed: u64,
    drop: &[&str],
    add: &[(&str, &str)],
) -> Result<bool, StoreError> {
    let Some(d) = record::decode(stored) else { return Ok(true) };
    let Some(real_topic) = properties::find(d.properties, properties::REAL_TOPIC) else {
        tracing::warn!("a delayed message without REAL_TOPIC was dropped");
        return Ok(true);
    };
    let props = rewrite_properties(d.properties, drop, add);
    let topic = match core.store.topic(real_topic) {
        Some(t) => t,
        None if real_topic.starts_with(super::topics::RETRY_PREFIX) => {
            let mut c = crate::remoting::body::TopicConfig::new(real_topic, 1, 1);
            c.perm = super::topics::perm::RW;
            core.create_topic(c)?;
            match core.store.topic(real_topic) {
                Some(t) => t,
                None => return Ok(true),
            }
        }
        None => {
            tracing::warn!(topic = %real_topic, "the topic of a delayed message is gone; dropped");
            return Ok(true);
        }
    };
    let asked: u32 = properties::find(d.properties, properties::REAL_QID)
        .and_then(|q| q.parse().ok())
        .unwrap_or(0);
    let queue = if asked < topic.queue_count() {
        asked
    } else {
        (seed % u64::from(topic.queue_count())) as u32
    };
    let rec = match record::encode(
        &NewRecord {
            flag: d.flag,
            sys_flag: d.sys_flag,
            born_timestamp: d.born_timestamp,
            born_host: d.born_host,
            reconsume_times: d.reconsume_times,
            body: d.body,
            properties: &props,
        },
        core.cluster_property.len(),
    ) {
        Ok(rec) => rec,
        Err(e) => {
            // Never for what `park` stored: it reserved room for what delivery adds.
            tracing::warn!(topic = %real_topic, error = %e, "a delayed message cannot be delivered; dropped");
            return Ok(true);
        }
    };
    match topic.append(queue, rec, properties::tags_code(&props), now_ms()) {
        Ok(_) => Ok(true),
        Err(StoreError::Full { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Delivers one due delay-level message to its real topic, without `DELAY`.
fn deliver(core: &Core, m: StoredRef<'_>) -> Result<bool, StoreError> {
    deliver_record(core, m.record, m.offset, &[properties::DELAY], &[])
}

/// How long a delay level waits before trying again a message whose delivery failed (not for
/// lack of room): RocketMQ's `DELAY_FOR_A_PERIOD`.
const RETRY_FAILED_MS: u64 = 10_000;

/// Delivers delayed messages when due until shutdown.
pub(crate) async fn run(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    let topic = match core.store.ensure_topic(SCHEDULE_TOPIC, MAX_LEVEL) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "cannot create the schedule topic: delayed messages are not delivered");
            return;
        }
    };
    // The internal group's handle: it commits after every delivery.
    let holder = core.store.holder(SCHEDULE_GROUP, SCHEDULE_TOPIC).ok();
    // After a restart the group's commit may be past the first retained offset (what was
    // delivered before a crash and not freed yet); in a fresh store it has none.
    let mut next: Vec<u64> = (0..MAX_LEVEL)
        .map(|q| {
            let min = topic.offsets(q).map_or(0, |(min, _)| min);
            core.store.committed(SCHEDULE_GROUP, SCHEDULE_TOPIC, q).map_or(min, |c| c.max(min))
        })
        .collect();
    if let (Some(h), Some(_)) = (&holder, core.store.journal()) {
        // A committed offset per level from the start: the store holds the topic for the
        // group again after a restart (it re-subscribes the groups that committed).
        for (q, offset) in (0..MAX_LEVEL).zip(&next) {
            if let Err(e) = h.commit(q, *offset) {
                tracing::error!(level = q + 1, error = %e, "the schedule group's start could not be committed");
            }
        }
    }
    loop {
        let now = now_ms();
        let mut earliest: Option<u64> = None;
        for (level, next_offset) in next.iter_mut().enumerate() {
            let q = level as u32;
            let delay = LEVEL_MILLIS[level];
            loop {
                let mut due_at = None;
                let mut outcome = Ok(true);
                let mut visit = |m: StoredRef<'_>| {
                    let due = m.store_timestamp + delay;
                    if due > now {
                        due_at = Some(due);
                        return false;
                    }
                    outcome = deliver(&core, m);
                    matches!(outcome, Ok(true))
                };
                let out = match topic.read(q, *next_offset, 1, &Filter::All, &mut visit) {
                    Ok(o) => o,
                    Err(_) => break,
                };
                if let Err(e) = outcome {
                    // As RocketMQ's `DeliverDelayedMessageTimerTask`: a failed re-put is tried
                    // again after `DELAY_FOR_A_PERIOD` (10 s), the level's offset kept; without
                    // a wake-up set here the level waited for an unrelated notify (up to 1 h).
                    tracing::warn!(level = level + 1, offset = *next_offset, error = %e, "delivering a delayed message failed; trying again in 10 s");
                    let again = now + RETRY_FAILED_MS;
                    earliest = Some(earliest.map_or(again, |e| e.min(again)));
                    break;
                } else if let Ok(false) = outcome {
                    // No room in the real topic: try again shortly.
                    earliest = Some(earliest.map_or(now + 100, |e| e.min(now + 100)));
                    break;
                }
                if let Some(due) = due_at {
                    earliest = Some(earliest.map_or(due, |e| e.min(due)));
                    break;
                }
                if out.found == 0 {
                    // Nothing more at this level (or what we pointed at was evicted).
                    *next_offset = (*next_offset).max(out.min_offset).min(out.max_offset);
                    break;
                }
                *next_offset = out.next_offset;
                if let Some(h) = &holder {
                    let _ = h.commit(q, *next_offset);
                }
            }
        }
        let wait = earliest.map_or(Duration::from_secs(3600), |due| {
            Duration::from_millis(due.saturating_sub(now_ms()))
        });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = core.scheduler.wake.notified() => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_delay_property_when_parsing_should_cap_levels_and_ignore_non_positive() {
        let level = |props: &[u8]| delay_level(properties::Routing::parse(props).delay);
        assert_eq!(level(b"DELAY\x012\x02"), Some(2));
        assert_eq!(level(b"DELAY\x0199\x02"), Some(MAX_LEVEL));
        assert_eq!(level(b"DELAY\x010\x02"), None);
        assert_eq!(level(b"DELAY\x01-1\x02"), None);
        assert_eq!(level(b"TAGS\x01A\x02"), None);
    }

    #[test]
    fn given_properties_when_rewriting_should_drop_and_replace_keys() {
        let p = rewrite_properties(
            b"A\x011\x02DELAY\x013\x02B\x012\x02",
            &["DELAY"],
            &[("B", "9"), ("C", "x")],
        );
        assert_eq!(properties::parse(&p), vec![("A", "1"), ("B", "9"), ("C", "x")]);
    }
}
