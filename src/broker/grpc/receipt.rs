//! gRPC receipt handles and the server-side renewal of `auto_renew` deliveries.
//!
//! # The handle
//!
//! The engine's receipt of a popped message is `(queue, offset, pop time)`: a redelivery or a
//! change of invisible time gives the message a later pop time, and the older receipt is then
//! stale. A gRPC client holds that receipt as an opaque string, [`ReceiptHandle`]:
//!
//! ```text
//!   b1.<topic uid, hex>.<queue>.<offset>.<pop time, ms>
//! ```
//!
//! The topic uid tells a handle of a deleted and re-created topic apart. Anything that does not
//! parse, names another topic, or is no longer the latest receipt is answered
//! `INVALID_RECEIPT_HANDLE` (40013), the one code on which clients stop retrying an ack.
//!
//! # Renewal (`auto_renew`)
//!
//! Push consumers ask for `auto_renew` and no invisible time: the server then pops with
//! [`DEFAULT_INVISIBLE_MS`] and extends the invisible time itself while the consumer works on
//! the message, as RocketMQ's proxy does. [`Renewals`] keeps, **per client id**, every such
//! delivery that is neither acknowledged nor given up:
//!
//! ```text
//!   client id → (group, topic, queue, offset) → {handed, current, deadline, until}
//! ```
//!
//! * `handed` is the pop time in the handle the client holds; `current` the engine's latest
//!   receipt after renewals. [`Renewals::take`] turns the one into the other, so the
//!   client's handle keeps working however often the server renewed it, and takes the
//!   renewal out of the table before the ack, change or forward uses that receipt (given back
//!   with [`Renewals::put_back`] if the store refuses): no renewal can make it stale meanwhile.
//! * Every [`RENEW_TICK`], [`Renewals::renew_due`] looks: a delivery whose invisible time ends within
//!   [`RENEW_AHEAD_MS`] gets [`DEFAULT_INVISIBLE_MS`] more, until [`RENEW_MAX_MS`] after it was
//!   first handed out; then it is left to expire and be delivered again.
//! * Renewal stops for a delivery when it is acknowledged, its invisible time changed by the
//!   client (a nack), forwarded to the dead-letter queue, or found stale; and for every
//!   delivery of a client whose gRPC session ended (`NotifyClientTermination`, or no Telemetry
//!   stream and no call for `client-expiry-secs`): its messages then come back after their
//!   invisible time, as RocketMQ's do. The renewal task is `grpc::consumer::renew`.

use std::collections::HashMap;
use std::time::Duration;

use crate::store::PopReceipt;
use crate::sync::{lock, Arc, Mutex};

/// The invisible time of an `auto_renew` delivery, and of each renewal (the proxy's
/// `defaultInvisibleTimeMills`).
pub(crate) const DEFAULT_INVISIBLE_MS: u64 = 60_000;
/// How often deliveries due are renewed (the proxy's `renewSchedulePeriodMillis`).
pub(crate) const RENEW_TICK: Duration = Duration::from_secs(5);
/// A delivery is renewed when its invisible time ends within this (`renewAheadTimeMillis`).
pub(crate) const RENEW_AHEAD_MS: u64 = 10_000;
/// A delivery is renewed for at most this long after it was handed out (`renewMaxTimeMillis`).
pub(crate) const RENEW_MAX_MS: u64 = 3 * 3600 * 1000;
/// Most deliveries renewed at once, over every client (bounds what clients make the broker
/// keep; past it a delivery simply expires after [`DEFAULT_INVISIBLE_MS`]).
pub(crate) const MAX_RENEWALS: usize = 262_144;
/// Most deliveries renewed at once for one client (review-e77444b L5): a fair share of
/// [`MAX_RENEWALS`], so that one client holding many unacknowledged messages cannot stop the
/// renewal of every other client's (at least eight such clients fit). Far above what a push
/// consumer holds at its defaults (the Java SDK caches 1,024 messages per queue).
pub(crate) const MAX_RENEWALS_PER_CLIENT: usize = MAX_RENEWALS / 8;

const VERSION: &str = "b1";

/// A gRPC receipt handle: which delivery of which message (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReceiptHandle {
    /// The uid of the topic the message is in.
    pub(crate) topic_uid: u32,
    /// The engine's receipt: queue, offset and the delivery's pop time.
    pub(crate) receipt: PopReceipt,
}

impl ReceiptHandle {
    /// The handle as clients hold it.
    pub(crate) fn encode(&self) -> String {
        let r = self.receipt;
        format!("{VERSION}.{:x}.{}.{}.{}", self.topic_uid, r.queue, r.offset, r.pop_time)
    }

    /// Parses a handle; `None` for anything [`encode`](Self::encode) did not write.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('.');
        if parts.next()? != VERSION {
            return None;
        }
        let topic_uid = u32::from_str_radix(parts.next()?, 16).ok()?;
        let queue = parts.next()?.parse().ok()?;
        let offset = parts.next()?.parse().ok()?;
        let pop_time = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(ReceiptHandle { topic_uid, receipt: PopReceipt { queue, offset, pop_time } })
    }
}

/// Which message of which group a renewal is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    group: Arc<str>,
    topic: Arc<str>,
    queue: u32,
    offset: u64,
}

#[derive(Debug, Clone, Copy)]
struct Renewal {
    /// The pop time in the handle the client holds.
    handed: u64,
    /// The engine's latest receipt.
    current: u64,
    /// When the current invisible time ends.
    deadline: u64,
    /// No renewal after this.
    until: u64,
}

type ClientRenewals = HashMap<Key, Renewal>;

/// A receipt resolved with its renewal taken out of the table ([`Renewals::take`]).
#[derive(Debug)]
pub(crate) struct Taken {
    /// The engine's receipt now (a renewed delivery has a later pop time).
    pub(crate) current: PopReceipt,
    /// The renewal taken out, if the delivery was renewed.
    entry: Option<(Key, Renewal)>,
}

/// Deliveries renewed on behalf of each client (see the module docs).
///
/// One mutex over every client: `renew_due` holds it across its engine calls, which is what
/// makes [`take`](Self::take) atomic with respect to renewals (review-e77444b M4; splitting
/// it would reopen that race, so L5's second half stays as it is).
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    clients: Mutex<Table>,
    /// Deliveries not tracked because the table or the client's share was full.
    refused: crate::sync::AtomicU64,
}

/// Every client's renewals, and how many there are in all (kept, so that `track` does not
/// sum every client's map for each delivery, review-e77444b L5).
#[derive(Debug, Default)]
struct Table {
    map: HashMap<String, ClientRenewals>,
    total: usize,
}

impl Renewals {
    fn lock(&self) -> crate::sync::MutexGuard<'_, Table> {
        lock(&self.clients)
    }

    /// Deliveries refused renewal so far (the table or the client's share was full).
    pub(crate) fn refused(&self) -> u64 {
        // Relaxed: a statistic.
        self.refused.load(crate::sync::Ordering::Relaxed)
    }

    /// Renews the delivery `receipt` of `group` in `topic` (invisible for `invisible_ms` from
    /// its pop time) on behalf of `client`. Returns `false` when the table is full, or the
    /// client has [`MAX_RENEWALS_PER_CLIENT`] (the delivery is then not renewed, and counted
    /// in [`refused`](Self::refused)).
    pub(crate) fn track(
        &self,
        client: &str,
        (group, topic): (&str, &str),
        receipt: PopReceipt,
        invisible_ms: u64,
    ) -> bool {
        let PopReceipt { queue, offset, pop_time } = receipt;
        let mut t = self.lock();
        let share = t.map.get(client).map_or(0, HashMap::len);
        if t.total >= MAX_RENEWALS || share >= MAX_RENEWALS_PER_CLIENT {
            // Relaxed: a statistic.
            self.refused.fetch_add(1, crate::sync::Ordering::Relaxed);
            return false;
        }
        let Table { map, total } = &mut *t;
        let c = map.entry(client.to_owned()).or_default();
        let key = Key { group: group.into(), topic: topic.into(), queue, offset };
        let replaced = c.insert(
            key,
            Renewal {
                handed: pop_time,
                current: pop_time,
                deadline: pop_time.saturating_add(invisible_ms),
                until: pop_time.saturating_add(RENEW_MAX_MS),
            },
        );
        if replaced.is_none() {
            *total += 1;
        }
        true
    }

    /// The engine's receipt for the receipt `handed` of `client`'s handle (the latest
    /// renewal's if the server renewed that delivery, else `handed` itself), with its renewal
    /// taken out of the table: no
    /// renewal can replace that receipt while the caller acknowledges, changes or forwards
    /// the message with it (review-e77444b M4; the proxy's `ChangeInvisibleDurationActivity`
    /// removes the handle from its renewal table first too). The caller gives it back with
    /// [`put_back`](Self::put_back) if the store refused; on success the delivery is settled.
    pub(crate) fn take(
        &self,
        client: &str,
        (group, topic): (&str, &str),
        handed: PopReceipt,
    ) -> Taken {
        let PopReceipt { queue, offset, pop_time: handed_at } = handed;
        let mut t = self.lock();
        let key = Key { group: group.into(), topic: topic.into(), queue, offset };
        let Some(c) = t.map.get_mut(client) else { return Taken { current: handed, entry: None } };
        if !c.get(&key).is_some_and(|r| r.handed == handed_at) {
            return Taken { current: handed, entry: None };
        }
        let Some(r) = c.remove(&key) else { return Taken { current: handed, entry: None } };
        if c.is_empty() {
            t.map.remove(client);
        }
        t.total -= 1;
        Taken { current: PopReceipt { pop_time: r.current, ..handed }, entry: Some((key, r)) }
    }

    /// Gives back a renewal [`take`](Self::take) took out (the store refused the receipt, so
    /// the delivery is renewed as before), unless the table is full or holds a newer one.
    pub(crate) fn put_back(&self, client: &str, taken: Taken) {
        let Some((key, r)) = taken.entry else { return };
        let mut t = self.lock();
        if t.total >= MAX_RENEWALS {
            return;
        }
        let Table { map, total } = &mut *t;
        if let std::collections::hash_map::Entry::Vacant(v) =
            map.entry(client.to_owned()).or_default().entry(key)
        {
            v.insert(r);
            *total += 1;
        }
    }

    /// Stops renewing anything for `client` (it terminated).
    pub(crate) fn forget_client(&self, client: &str) {
        let mut t = self.lock();
        if let Some(c) = t.map.remove(client) {
            t.total -= c.len();
        }
    }

    /// Deliveries renewed for `client`.
    #[cfg(test)]
    pub(crate) fn count(&self, client: &str) -> usize {
        self.lock().map.get(client).map_or(0, HashMap::len)
    }

    /// One round of renewal at `now`: forgets the clients that are no longer `alive`, renews
    /// every delivery due with `renew(group, topic, current receipt)` (which returns the new
    /// receipt's pop time, or `None` when the message is no longer in flight under it),
    /// and drops the ones it could not renew or that reached [`RENEW_MAX_MS`]. Returns how
    /// many it renewed.
    pub(crate) fn renew_due(
        &self,
        now: u64,
        alive: impl Fn(&str) -> bool,
        mut renew: impl FnMut(&str, &str, PopReceipt) -> Option<u64>,
    ) -> usize {
        let mut t = self.lock();
        t.map.retain(|client, c| alive(client) && !c.is_empty());
        let mut renewed = 0;
        for c in t.map.values_mut() {
            c.retain(|k, r| {
                if r.deadline > now.saturating_add(RENEW_AHEAD_MS) {
                    return true;
                }
                if now >= r.until {
                    return false;
                }
                let current = PopReceipt { queue: k.queue, offset: k.offset, pop_time: r.current };
                match renew(&k.group, &k.topic, current) {
                    Some(t) => {
                        r.current = t;
                        r.deadline = now.saturating_add(DEFAULT_INVISIBLE_MS);
                        renewed += 1;
                        true
                    }
                    None => false,
                }
            });
        }
        // This walk sees every entry anyway.
        t.total = t.map.values().map(HashMap::len).sum();
        renewed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rcpt(offset: u64, pop_time: u64) -> PopReceipt {
        PopReceipt { queue: 0, offset, pop_time }
    }

    #[test]
    fn given_one_client_at_its_share_when_another_tracks_should_still_renew_the_other() {
        // review-e77444b L5: one client could fill the whole table, and then no other
        // client's delivery was renewed (each came back after 60 s while being processed).
        let r = Renewals::default();
        let names = ("g", "t");
        for off in 0..MAX_RENEWALS_PER_CLIENT as u64 {
            assert!(r.track("greedy", names, rcpt(off, 1), DEFAULT_INVISIBLE_MS));
        }
        let one_more = MAX_RENEWALS_PER_CLIENT as u64;
        assert!(!r.track("greedy", names, rcpt(one_more, 1), DEFAULT_INVISIBLE_MS), "its share");
        assert_eq!(r.refused(), 1, "counted");
        assert!(r.track("other", names, rcpt(0, 1), DEFAULT_INVISIBLE_MS), "others still fit");
        assert_eq!(r.count("greedy"), MAX_RENEWALS_PER_CLIENT);
        assert_eq!(r.count("other"), 1);
    }

    #[test]
    fn given_a_handle_when_encoded_and_parsed_should_round_trip() {
        let h = ReceiptHandle {
            topic_uid: 0xabc,
            receipt: PopReceipt { queue: 3, offset: 42, pop_time: 1_700_000 },
        };
        assert_eq!(h.encode(), "b1.abc.3.42.1700000");
        assert_eq!(ReceiptHandle::parse(&h.encode()), Some(h));
    }

    #[test]
    fn given_garbage_when_parsing_a_handle_should_refuse_it() {
        for bad in
            ["", "b1", "b2.1.2.3.4", "b1.zz.2.3.4", "b1.1.2.3", "b1.1.2.3.4.5", "b1.1.-2.3.4"]
        {
            assert_eq!(ReceiptHandle::parse(bad), None, "{bad:?}");
        }
    }

    const ALIVE: fn(&str) -> bool = |_| true;

    #[test]
    fn given_a_renewed_delivery_when_resolving_the_handed_receipt_should_give_the_latest() {
        let r = Renewals::default();
        assert!(r.track("c", ("g", "t"), rcpt(5, 1_000), DEFAULT_INVISIBLE_MS));
        assert_eq!(r.renew_due(1_000, ALIVE, |_, _, _| Some(9)), 0, "not due yet");
        let due = 1_000 + DEFAULT_INVISIBLE_MS - RENEW_AHEAD_MS;
        assert_eq!(r.renew_due(due, ALIVE, |_, _, cur: PopReceipt| Some(cur.pop_time + 7)), 1);
        assert_eq!(
            r.take("other", ("g", "t"), rcpt(5, 1_000)).current.pop_time,
            1_000,
            "another client's is its own"
        );
        assert_eq!(
            r.take("c", ("g", "t"), rcpt(5, 1_000)).current.pop_time,
            1_007,
            "the handle follows renewals"
        );
        assert_eq!(
            r.take("c", ("g", "t"), rcpt(5, 1_000)).current.pop_time,
            1_000,
            "settled by the take: no longer renewed"
        );
    }

    #[test]
    fn given_a_taken_delivery_when_a_renewal_is_due_should_not_replace_its_receipt() {
        // review-e77444b M4: a renewal between the ack's resolve and its store call made a
        // valid ack stale (INVALID_RECEIPT_HANDLE, then renewed for 3 h and redelivered).
        let r = Renewals::default();
        r.track("c", ("g", "t"), rcpt(5, 1_000), DEFAULT_INVISIBLE_MS);
        let taken = r.take("c", ("g", "t"), rcpt(5, 1_000));
        assert_eq!(taken.current.pop_time, 1_000);
        let due = 1_000 + DEFAULT_INVISIBLE_MS - RENEW_AHEAD_MS;
        let renewed = r.renew_due(due, ALIVE, |_, _, cur: PopReceipt| Some(cur.pop_time + 7));
        assert_eq!(renewed, 0, "the taken delivery is not renewed under the caller's receipt");
        assert_eq!(r.take("c", ("g", "t"), rcpt(5, 1_000)).current.pop_time, 1_000, "taken once");
        r.put_back("c", taken);
        assert_eq!(r.count("c"), 1, "given back after a refusal");
        assert_eq!(r.renew_due(due, ALIVE, |_, _, cur: PopReceipt| Some(cur.pop_time + 7)), 1);
        assert_eq!(r.take("c", ("g", "t"), rcpt(5, 1_000)).current.pop_time, 1_007);
        assert_eq!(r.count("c"), 0, "settled by the take");
    }

    #[test]
    fn given_tracks_takes_and_forgets_when_counting_should_keep_the_total_of_every_client() {
        let r = Renewals::default();
        let total = |r: &Renewals| {
            let t = r.lock();
            (t.total, t.map.values().map(HashMap::len).sum::<usize>())
        };
        r.track("a", ("g", "t"), rcpt(1, 1_000), 1_000);
        r.track("a", ("g", "t"), rcpt(1, 1_000), 1_000);
        r.track("a", ("g", "t"), rcpt(2, 1_000), 1_000);
        r.track("b", ("g", "t"), rcpt(1, 1_000), 1_000);
        assert_eq!(total(&r), (3, 3), "a repeated track replaces");
        let taken = r.take("a", ("g", "t"), rcpt(1, 1_000));
        assert_eq!(total(&r), (2, 2));
        r.put_back("a", taken);
        assert_eq!(total(&r), (3, 3));
        r.forget_client("a");
        assert_eq!(total(&r), (1, 1));
        r.renew_due(5_000, ALIVE, |_, _, _| None);
        assert_eq!(total(&r), (0, 0));
    }

    #[test]
    fn given_a_delivery_the_store_refuses_when_renewing_should_stop_renewing_it() {
        let r = Renewals::default();
        r.track("c", ("g", "t"), rcpt(5, 1_000), 1_000);
        assert_eq!(r.renew_due(2_000, ALIVE, |_, _, _| None), 0);
        assert_eq!(r.count("c"), 0);
    }

    #[test]
    fn given_a_gone_or_terminated_client_when_renewing_should_forget_its_deliveries() {
        let r = Renewals::default();
        r.track("gone", ("g", "t"), rcpt(1, 1_000), 1_000);
        r.track("terminated", ("g", "t"), rcpt(2, 1_000), 1_000);
        r.forget_client("terminated");
        assert_eq!(r.count("terminated"), 0);
        let calls = std::cell::Cell::new(0);
        r.renew_due(
            2_000,
            |c| c != "gone",
            |_, _, cur: PopReceipt| {
                calls.set(calls.get() + 1);
                Some(cur.pop_time + 1)
            },
        );
        assert_eq!(calls.get(), 0, "a gone client's deliveries are not renewed");
        assert_eq!(r.count("gone"), 0);
    }

    #[test]
    fn given_a_delivery_renewed_for_three_hours_when_due_should_let_it_expire() {
        let r = Renewals::default();
        r.track("c", ("g", "t"), rcpt(1, 1_000), DEFAULT_INVISIBLE_MS);
        assert_eq!(
            r.renew_due(1_000 + RENEW_MAX_MS, ALIVE, |_, _, cur: PopReceipt| Some(
                cur.pop_time + 1
            )),
            0
        );
        assert_eq!(r.count("c"), 0);
    }
}

#[cfg(test)]
mod engine_tests {
    use super::*;
    use crate::broker::core::pop::{pop_once, FilterExpr, PopCall};
    use crate::broker::core::Core;
    use crate::broker::BrokerConfig;
    use crate::remoting::body::TopicConfig;
    use crate::store::{MemoryStore, PopInit, PopReceipt, StoreError};

    #[test]
    fn given_a_renewed_delivery_when_acked_with_the_handle_first_handed_out_should_succeed() {
        let config = BrokerConfig::default();
        let store: Arc<dyn crate::store::Store> = Arc::new(
            MemoryStore::new(config.engine_config().expect("an engine config")).expect("a store"),
        );
        let s = Core::new(config.core, store, "127.0.0.1:10911".parse().expect("an address"));
        let mut c = TopicConfig::new("T", 1, 1);
        c.perm = crate::broker::core::topics::perm::RW;
        s.create_topic(c).expect("a topic");
        let rec = crate::broker::core::record::NewRecord {
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: "127.0.0.1:1".parse().expect("an address"),
            reconsume_times: 0,
            body: b"b",
            properties: b"",
        };
        let bytes = crate::broker::core::record::encode(&rec, 0).expect("a record");
        s.store.topic("T").expect("T").append(0, bytes, 0, 1).expect("appended");
        let call = PopCall {
            group: "g",
            topic: "T",
            queue: None,
            max: 1,
            invisible_ms: DEFAULT_INVISIBLE_MS,
            order: false,
            attempt_id: None,
            filter: FilterExpr::Tag("*"),
            init: PopInit::Min,
            max_attempts: 17,
            seed: 0,
            announced: true,
        };
        let t0 = 1_000_000;
        let b = pop_once(&s, &call, t0).expect("pops");
        let m = b.messages.first().expect("a message");
        let (q, off) = (m.delivery.queue, m.delivery.offset);
        let r = Renewals::default();
        let handed = PopReceipt { queue: q, offset: off, pop_time: b.pop_time };
        r.track("c", ("g", "T"), handed, DEFAULT_INVISIBLE_MS);
        // Renewed twice, each time just before the invisible time would have ended.
        for round in 1..=2 {
            let now = t0 + round * (DEFAULT_INVISIBLE_MS - RENEW_AHEAD_MS);
            let renewed = r.renew_due(
                now,
                |_| true,
                |g, t, cur| s.store.change_invisible(g, t, cur, DEFAULT_INVISIBLE_MS, now).ok(),
            );
            assert_eq!(renewed, 1, "round {round}");
            let later = pop_once(&s, &call, now + DEFAULT_INVISIBLE_MS - 1).expect("pops");
            assert!(later.messages.is_empty(), "still invisible after renewal {round}");
        }
        let direct = s.store.pop_ack("g", "T", handed);
        assert!(matches!(direct, Err(StoreError::StaleReceipt { .. })), "the engine moved on");
        let resolved = r.take("c", ("g", "T"), handed).current;
        s.store.pop_ack("g", "T", resolved).expect("the client's handle still acks");
    }
}
