//! POP consumption in the engine's library API: one behaviour each, named
//! `given_<state>_when_<action>_should_<outcome>`. Invariant numbers refer to
//! `docs/design.md`. Time is the caller's (`now_ms`), so nothing here sleeps.

use std::sync::Arc;
use std::time::Duration;

use baiji::engine::{
    AckOutcome, Engine, EngineConfig, EngineError, Filter, Group, Message, PopAck, PopChange,
    PopEntry, PopHolder, PopInit, PopJournal, PopOutcome, PopPolicy, PopRequest, PopRestored,
    Retention, StartFrom, SubscribeOptions, INFLIGHT_ENTRY_SIZE, INFLIGHT_LIMIT,
};
use bytes::Bytes;

fn engine() -> Engine {
    Engine::new(EngineConfig {
        reaper_thread: false,
        retention: Retention { time: Duration::ZERO, bytes: 0 },
        ..EngineConfig::default()
    })
    .expect("valid config")
}

fn setup(messages: usize) -> (Engine, Group) {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e
        .subscribe("G", "T", SubscribeOptions { start: StartFrom::First, ..Default::default() })
        .unwrap();
    for i in 0..messages {
        e.append_to("T", 0, Message::new(Bytes::from(format!("m{i}")))).unwrap();
    }
    (e, g)
}

const ALL: Filter = Filter::All;

fn req(max: usize, invisible_ms: u64, now_ms: u64) -> PopRequest<'static> {
    PopRequest {
        max,
        invisible_ms,
        now_ms,
        order: false,
        attempt_id: None,
        max_attempts: 3,
        filter: &ALL,
        init: PopInit::Min,
    }
}

fn pop(g: &Group, r: &PopRequest<'_>) -> PopOutcome {
    let mut out = PopOutcome::default();
    g.pop(0, r, &mut out).unwrap();
    out
}

fn offsets(o: &PopOutcome) -> Vec<u64> {
    o.messages.iter().map(|m| m.delivery.offset).collect()
}

#[test]
fn given_popped_messages_when_popping_again_within_invisible_time_should_hand_out_only_new_ones() {
    let (_e, g) = setup(4);
    let a = pop(&g, &req(2, 1000, 10));
    let b = pop(&g, &req(8, 1000, 20));
    assert_eq!(offsets(&a), [0, 1], "a pop hands out from the pop position");
    assert_eq!(offsets(&b), [2, 3], "popped messages are invisible to the group");
    assert!(a.messages.iter().all(|m| m.attempts == 1), "first delivery is attempt 1");
}

#[test]
fn given_all_popped_messages_acked_when_reaping_should_reclaim_them_and_release_the_inflight_bytes()
{
    let (e, g) = setup(3);
    let idle = e.stats().bytes_used;
    let o = pop(&g, &req(8, 1000, 10));
    assert_eq!(
        e.stats().bytes_used,
        idle + 3 * INFLIGHT_ENTRY_SIZE,
        "in-flight entries count in the memory budget"
    );
    for m in &o.messages {
        assert_eq!(g.pop_ack(0, m.delivery.offset, o.pop_time).unwrap(), AckOutcome::Acked);
    }
    e.reap();
    let s = e.stats();
    assert_eq!((s.live_messages, s.bytes_used), (0, 0), "invariant 7: acked messages reclaimed");
    assert_eq!(g.inflight(), 0, "nothing in flight after the acks");
}

#[test]
fn given_unacked_message_when_invisible_time_passes_should_redeliver_it_with_attempts_plus_one() {
    let (_e, g) = setup(1);
    let first = pop(&g, &req(8, 100, 1000));
    assert!(offsets(&pop(&g, &req(8, 100, 1099))).is_empty(), "still invisible before expiry");
    let again = pop(&g, &req(8, 100, 1100));
    assert_eq!(offsets(&again), [0], "visible again once the invisible time passed");
    assert_eq!(again.messages[0].attempts, 2, "a redelivery counts one more attempt");
    assert!(
        matches!(g.pop_ack(0, 0, first.pop_time), Err(EngineError::StaleReceipt { .. })),
        "the first delivery's receipt is stale after the redelivery"
    );
    assert_eq!(g.pop_ack(0, 0, again.pop_time).unwrap(), AckOutcome::Acked);
}

#[test]
fn given_changed_invisible_time_when_using_the_old_receipt_should_be_stale_and_the_new_one_valid() {
    let (_e, g) = setup(1);
    let o = pop(&g, &req(8, 10_000, 1000));
    let renewed = g.change_invisible(0, 0, o.pop_time, 0, 1000).unwrap();
    assert!(renewed > o.pop_time, "a change of invisible time issues a newer receipt");
    assert!(
        matches!(
            g.change_invisible(0, 0, o.pop_time, 5, 1000),
            Err(EngineError::StaleReceipt { .. })
        ),
        "the old receipt cannot change it again"
    );
    assert!(
        matches!(g.pop_ack(0, 0, o.pop_time), Err(EngineError::StaleReceipt { .. })),
        "the old receipt cannot acknowledge"
    );
    let again = pop(&g, &req(8, 10_000, renewed + 1));
    assert_eq!(offsets(&again), [0], "invisible time 0 makes it visible again at once");
    assert!(again.pop_time > renewed, "the redelivery's receipt differs from every earlier one");
}

#[test]
fn given_message_failing_every_attempt_when_attempts_run_out_should_dead_letter_and_acknowledge_it()
{
    let (e, g) = setup(1);
    let mut now = 1000;
    for attempt in 1..=3 {
        let o = pop(&g, &req(8, 10, now));
        assert_eq!(o.messages.len(), 1, "delivery {attempt} of 3");
        assert_eq!(o.messages[0].attempts, attempt);
        now += 10;
    }
    let o = pop(&g, &req(8, 10, now));
    assert!(o.messages.is_empty(), "no fourth delivery with max_attempts 3");
    assert_eq!(o.dead.len(), 1, "handed back for the dead-letter queue");
    assert_eq!(o.dead[0].attempts, 3);
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "a dead-lettered message is acknowledged by the group");
}

#[test]
fn given_ordered_pop_when_queue_has_invisible_message_should_block_unless_attempt_id_repeats() {
    let (_e, g) = setup(3);
    let ordered =
        |max, now, id| PopRequest { order: true, attempt_id: Some(id), ..req(max, 1000, now) };
    let a = pop(&g, &ordered(2, 10, "a1"));
    assert_eq!(offsets(&a), [0, 1]);
    let blocked = pop(&g, &ordered(2, 20, "a2"));
    assert!(blocked.messages.is_empty(), "an ordered queue with an unacked message is blocked");
    assert_eq!(blocked.blocked, 1);
    let repeat = pop(&g, &ordered(2, 30, "a1"));
    assert_eq!(offsets(&repeat), [0, 1], "the same attempt id gets the same batch");
    g.pop_ack(0, 0, repeat.pop_time).unwrap();
    assert!(pop(&g, &ordered(2, 40, "a3")).messages.is_empty(), "still blocked by offset 1");
    g.pop_ack(0, 1, repeat.pop_time).unwrap();
    assert_eq!(offsets(&pop(&g, &ordered(2, 50, "a4"))), [2], "unblocked once all are acked");
}

#[test]
fn given_one_group_name_used_for_pop_and_commit_when_committing_should_acknowledge_popped_messages()
{
    let (e, g) = setup(2);
    let o = pop(&g, &req(8, 1000, 10));
    g.commit(0, 2).unwrap();
    assert_eq!(
        g.pop_ack(0, 0, o.pop_time).unwrap(),
        AckOutcome::AlreadyAcked,
        "invariant 6: a commit of the shared position acknowledged it once"
    );
    assert!(pop(&g, &req(8, 1, 5000)).messages.is_empty(), "committed messages are not popped");
    e.reap();
    assert_eq!(e.stats().live_messages, 0);
    assert_eq!(g.inflight(), 0, "entries acknowledged by the commit are forgotten");
}

#[test]
fn given_tag_filter_when_popping_should_acknowledge_the_messages_it_rejects() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e
        .subscribe("G", "T", SubscribeOptions { start: StartFrom::First, ..Default::default() })
        .unwrap();
    e.append_to("T", 0, Message::new("a").with_tag("x")).unwrap();
    e.append_to("T", 0, Message::new("b").with_tag("y")).unwrap();
    let f = Filter::tags(["y"]);
    let o = pop(&g, &PopRequest { filter: &f, ..req(8, 1000, 10) });
    assert_eq!(offsets(&o), [1], "only the matching tag is handed out");
    g.pop_ack(0, 1, o.pop_time).unwrap();
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "the filtered message counts as acknowledged");
}

#[test]
fn given_unsubscribed_pop_group_with_inflight_messages_should_release_their_bytes() {
    let (e, g) = setup(2);
    pop(&g, &req(8, 1000, 10));
    g.unsubscribe();
    e.reap();
    assert_eq!(e.stats().bytes_used, 0, "invariant 9: no in-flight bookkeeping left behind");
}

/// The wall clock, ms since the Unix epoch: activity stamps use it, so the idle tests pass
/// times computed from it (never sleeping).
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

const IDLE: Duration = Duration::from_secs(60);

/// review-e77444b H3: a POP group nobody pops any more (a renamed consumer, a typo) stops
/// holding messages once it has been idle for the given time.
#[test]
fn given_pop_group_idle_for_the_idle_time_when_releasing_should_end_it_and_free_what_it_held() {
    let (e, g) = setup(3);
    let o = pop(&g, &req(1, 1000, wall_ms()));
    // The ack is stamped between `before` and `after`.
    let before = wall_ms();
    g.pop_ack(0, 0, o.pop_time).unwrap();
    let after = wall_ms();
    e.reap();
    assert_eq!(e.stats().live_messages, 2, "the group holds what it has not acknowledged");
    assert!(
        e.release_idle_groups(IDLE, before + 59_999, |_, _| true).is_empty(),
        "59.999 s after its last ack it is not idle yet"
    );
    let released = e.release_idle_groups(IDLE, after + 60_000, |_, _| true);
    assert_eq!(released, [("G".to_owned(), "T".to_owned())]);
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "what only the released group held is reclaimed");
    assert_eq!(e.stats().bytes_used, 0, "invariant 9: nothing of it is left in the budget");
    assert!(matches!(g.pop_ack(0, 1, o.pop_time), Err(EngineError::NotAMember)));
    assert!(matches!(e.group("G", "T"), Err(EngineError::UnknownGroup { .. })));
    let again = e.subscribe("G", "T", SubscribeOptions::default()).expect("a new subscription");
    assert!(again.release_if_idle(IDLE, wall_ms() + 120_000), "the new one ages the same way");
}

#[test]
fn given_a_member_or_an_invisible_message_or_a_kept_name_when_releasing_should_keep_the_group() {
    let (e, g) = setup(2);
    let far = wall_ms() + 365 * 24 * 3600 * 1000;
    assert!(e.release_idle_groups(IDLE, far, |_, _| false).is_empty(), "the caller keeps it");
    let member = g.add_member().unwrap();
    assert!(!g.release_if_idle(IDLE, far), "a group with a member is not idle");
    let leaving = wall_ms();
    g.remove_member(member);
    assert!(!g.release_if_idle(IDLE, leaving + 59_999), "idle time runs from the last leave");
    let now = wall_ms();
    let hour = 3_600_000;
    let o = pop(&g, &req(1, hour, now));
    assert_eq!(offsets(&o), [0]);
    assert!(
        !g.release_if_idle(IDLE, now + hour - 1),
        "a popped message still invisible keeps its group (a consumer may be working on it)"
    );
    assert_eq!(g.inflight(), 1);
    assert!(g.release_if_idle(IDLE, now + hour), "once it is visible again the group may go");
    assert_eq!(
        e.stats().bytes_used,
        2 * (2 + baiji::engine::NODE_SIZE as u64),
        "in-flight refunded"
    );
}

fn ordered(max: usize, invisible_ms: u64, now: u64, id: &str) -> PopRequest<'_> {
    PopRequest { order: true, attempt_id: Some(id), ..req(max, invisible_ms, now) }
}

/// review-e77444b L7: a repeated ordered batch whose clock was read before a change of
/// invisible time took the queue's lock does not restamp that message: its pop time would go
/// back, the consumer's newer receipt would be stale and the older one valid again.
#[test]
fn given_a_change_after_the_repeat_read_its_clock_when_repeating_an_ordered_batch_should_keep_the_newer_receipt(
) {
    let (_e, g) = setup(2);
    let a = pop(&g, &ordered(2, 1000, 1000, "a1"));
    assert_eq!(offsets(&a), [0, 1]);
    let renewed = g.change_invisible(0, 0, a.pop_time, 5000, 1005).unwrap();
    // The repeat read its clock at 1002, before the change above took the lock.
    let repeat = pop(&g, &ordered(2, 1000, 1002, "a1"));
    assert_eq!(offsets(&repeat), [1], "offset 0 stays under the receipt of its change");
    for stale in [a.pop_time, repeat.pop_time] {
        assert!(
            matches!(g.pop_ack(0, 0, stale), Err(EngineError::StaleReceipt { .. })),
            "pop times only increase: receipt {stale} of offset 0 is not valid (again)"
        );
    }
    assert_eq!(g.pop_ack(0, 0, renewed).unwrap(), AckOutcome::Acked);
    assert_eq!(g.pop_ack(0, 1, repeat.pop_time).unwrap(), AckOutcome::Acked);
}

/// A client that lost a pop's answer repeats it at once, often within the same millisecond:
/// the batch comes again under the same receipt (the pop time does not move at all).
#[test]
fn given_a_repeat_within_the_batch_millisecond_when_repeating_should_hand_out_the_batch_again() {
    let (_e, g) = setup(2);
    let a = pop(&g, &ordered(2, 1000, 1000, "a1"));
    let repeat = pop(&g, &ordered(2, 1000, 1000, "a1"));
    assert_eq!(offsets(&repeat), [0, 1], "the same attempt id gets the same batch");
    assert_eq!(g.pop_ack(0, 0, a.pop_time).unwrap(), AckOutcome::Acked, "under the same receipt");
}

/// review-e77444b L7: a repeated ordered batch keeps an invisible time the consumer changed.
#[test]
fn given_a_changed_invisible_time_when_repeating_an_ordered_batch_should_keep_it() {
    let (_e, g) = setup(2);
    let a = pop(&g, &ordered(2, 1000, 1000, "a1"));
    // The consumer needs a minute for offset 0 (until 61,001).
    g.change_invisible(0, 0, a.pop_time, 60_000, 1001).unwrap();
    let repeat = pop(&g, &ordered(2, 1000, 1500, "a1"));
    assert_eq!(offsets(&repeat), [0, 1], "the lost batch is handed out again");
    assert_eq!(
        offsets(&pop(&g, &req(8, 1000, 2600))),
        [1],
        "offset 1 is visible again after the repeat's 1 s; offset 0 keeps the consumer's minute"
    );
    assert_eq!(repeat.next_expiry, Some(2500));
}

/// review-e77444b M5: a pop that stops at the scan limit with messages behind it says so, so
/// the caller pops again at once instead of waiting for an append that may never come.
#[test]
fn given_a_filter_rejecting_a_long_run_when_popping_should_say_the_scan_stopped_early() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e
        .subscribe("G", "T", SubscribeOptions { start: StartFrom::First, ..Default::default() })
        .unwrap();
    for _ in 0..5000 {
        e.append_to("T", 0, Message::new("x").with_tag("x")).unwrap();
    }
    e.append_to("T", 0, Message::new("y").with_tag("y")).unwrap();
    let f = Filter::tags(["y"]);
    let first = pop(&g, &PopRequest { filter: &f, ..req(1, 1000, 10) });
    assert!(first.messages.is_empty());
    assert_eq!(first.scan_limited, 1, "4,096 of 5,001 nodes looked at: more is left");
    let second = pop(&g, &PopRequest { filter: &f, ..req(1, 1000, 20) });
    assert_eq!(offsets(&second), [5000], "the next pop goes on where the scan stopped");
    assert_eq!(second.scan_limited, 0);
}

/// review-e77444b M5: a queue at the in-flight cap says so in the pop, and the ack that frees
/// room says so in its outcome, so parked pops are woken by it.
#[test]
fn given_a_queue_at_the_inflight_cap_when_acking_should_say_the_ack_freed_room() {
    let n = INFLIGHT_LIMIT as u64 + 4;
    let (_e, g) = setup(n as usize);
    let full = pop(&g, &req(INFLIGHT_LIMIT + 100, 1000, 10));
    assert_eq!(full.messages.len(), INFLIGHT_LIMIT);
    assert_eq!(full.inflight_full, 1, "messages are left that the cap keeps back");
    assert_eq!(full.scan_limited, 0, "the scan did not stop at its limit");
    let ack = g.ack_popped(full.receipt(&full.messages[0])).unwrap();
    assert_eq!(ack, PopAck { outcome: AckOutcome::Acked, room_freed: true });
    let ack = g.ack_popped(full.receipt(&full.messages[1])).unwrap();
    assert!(!ack.room_freed, "the queue was already under the cap");
    let more = pop(&g, &req(8, 1000, 20));
    assert_eq!(offsets(&more), [INFLIGHT_LIMIT as u64, INFLIGHT_LIMIT as u64 + 1]);
    assert_eq!(more.inflight_full, 1, "two places freed for six wanted: still at the cap");
    g.ack_popped(more.receipt(&more.messages[0])).unwrap();
    let one = pop(&g, &req(1, 1000, 30));
    assert_eq!(
        (one.messages.len(), one.inflight_full),
        (1, 0),
        "a request within the room left is not stopped by the cap"
    );
}

fn pop_with(g: &Group, r: &PopRequest<'_>, policy: &PopPolicy) -> PopOutcome {
    let mut out = PopOutcome::default();
    g.pop_with(0, r, policy, &mut out).unwrap();
    out
}

/// review-e77444b M2: with dead letters pending, a message whose attempts ran out is handed
/// out still in flight, so the caller acknowledges it only once its dead-letter copy is
/// stored, and can put it back if the copy failed.
#[test]
fn given_dead_letters_pending_when_attempts_run_out_should_stay_in_flight_until_the_caller_acks() {
    let (e, g) = setup(1);
    let policy = PopPolicy { dead_letter_pending: true, lease_ms: 100, ..PopPolicy::IN_PLACE };
    let mut now = 1000;
    for attempt in 1..=3 {
        let o = pop_with(&g, &req(8, 10, now), &policy);
        assert_eq!(o.messages.len(), 1, "delivery {attempt} of 3");
        now += 10;
    }
    let o = pop_with(&g, &req(8, 10, now), &policy);
    assert!(o.messages.is_empty());
    assert_eq!(o.dead.len(), 1, "handed out for the dead-letter queue");
    assert_eq!(o.dead[0].attempts, 3);
    e.reap();
    assert_eq!(e.stats().live_messages, 1, "still held while the caller copies it");
    assert_eq!(g.inflight(), 1);
    let during = pop_with(&g, &req(8, 10, now + 99), &policy);
    assert!(
        during.messages.is_empty() && during.dead.is_empty(),
        "neither redelivered nor handed out again during the lease"
    );
    // The copy failed: back in 5 ms.
    let put_back = g.change_popped(o.receipt(&o.dead[0]), 5, now + 99).unwrap();
    let again = pop_with(&g, &req(8, 10, put_back.pop_time + 5), &policy);
    assert_eq!(again.dead.len(), 1, "handed out again once the short invisible time passed");
    assert_eq!(again.dead[0].attempts, 3, "putting back is no delivery");
    assert!(
        matches!(g.ack_popped(put_back), Err(EngineError::StaleReceipt { .. })),
        "the receipt the second hand-over replaced is stale"
    );
    assert_eq!(g.ack_popped(again.receipt(&again.dead[0])).unwrap().outcome, AckOutcome::Acked);
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "acknowledged once the copy is stored");
    assert_eq!(e.stats().bytes_used, 0, "invariant 9: the in-flight entry is refunded");
}

/// review-e77444b H7: with revival, an expired message is handed over for the caller's retry
/// topic instead of being redelivered from its queue, and the queue moves on once the caller
/// acknowledges the original; a consumer's receipt of it is stale from the hand-over on.
#[test]
fn given_revival_when_a_message_expires_should_hand_it_over_and_let_its_queue_move_on() {
    let (e, g) = setup(3);
    let policy = PopPolicy { in_place_deliveries: 1, lease_ms: 100, ..PopPolicy::IN_PLACE };
    let o = pop_with(&g, &req(3, 10, 1000), &policy);
    assert_eq!(offsets(&o), [0, 1, 2]);
    g.pop_ack(0, 1, o.pop_time).unwrap();
    g.pop_ack(0, 2, o.pop_time).unwrap();
    e.reap();
    assert_eq!(e.stats().live_messages, 3, "offset 0, unacknowledged, holds the queue");
    let r = pop_with(&g, &req(8, 10, 1010), &policy);
    assert!(r.messages.is_empty(), "not redelivered from its own queue");
    assert_eq!(r.revive.len(), 1);
    assert_eq!((r.revive[0].delivery.offset, r.revive[0].attempts), (0, 1));
    assert!(
        matches!(g.pop_ack(0, 0, o.pop_time), Err(EngineError::StaleReceipt { .. })),
        "an ack racing the expiry comes out one way: the consumer's receipt is stale"
    );
    let during = pop_with(&g, &req(8, 10, 1109), &policy);
    assert!(during.revive.is_empty(), "not handed out twice while the copy is made");
    assert_eq!(g.ack_popped(r.receipt(&r.revive[0])).unwrap().outcome, AckOutcome::Acked);
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "the copy is stored: the original queue moves on");
}

/// What the engine offers between the two: the first redelivery in place, later ones revived.
#[test]
fn given_two_deliveries_in_place_when_a_message_keeps_failing_should_redeliver_once_then_revive() {
    let (_e, g) = setup(1);
    let policy = PopPolicy { in_place_deliveries: 2, lease_ms: 100, ..PopPolicy::IN_PLACE };
    let first = pop_with(&g, &req(1, 10, 1000), &policy);
    let second = pop_with(&g, &req(1, 10, 1010), &policy);
    assert_eq!((offsets(&first), offsets(&second)), (vec![0], vec![0]), "redelivered in place");
    assert_eq!(second.messages[0].attempts, 2);
    let third = pop_with(&g, &req(1, 10, 1020), &policy);
    assert!(third.messages.is_empty());
    assert_eq!(third.revive[0].attempts, 2, "then handed over, with the deliveries it had");
    let late = pop_with(&g, &req(1, 10, 1120), &policy);
    assert_eq!(late.revive.len(), 1, "a hand-over nobody settled is handed out again");
    assert!(g.ack_popped(third.receipt(&third.revive[0])).is_err(), "under a new receipt");
}

/// A POP journal as a store keeps one: the last position of each queue and the last entry of
/// each offset, every subscription's records deleted when it ends.
#[derive(Debug, Default)]
struct Recorder {
    state: std::sync::Mutex<RecordedState>,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct RecordedState {
    positions: std::collections::BTreeMap<(String, String, u32), u64>,
    entries: std::collections::BTreeMap<(String, String, u32, u64), PopEntry>,
    changes: usize,
    ended: Vec<(String, String)>,
}

impl PopJournal for Recorder {
    fn record(&self, c: &PopChange<'_>) {
        let mut s = self.state.lock().unwrap();
        s.changes += 1;
        let (g, t) = (c.group.to_owned(), c.topic.to_owned());
        for (off, e) in c.entries {
            let k = (g.clone(), t.clone(), c.queue, *off);
            match e {
                Some(e) => s.entries.insert(k, *e),
                None => s.entries.remove(&k),
            };
        }
        if let Some(p) = c.position {
            s.positions.insert((g, t, c.queue), p);
        }
    }

    fn ended(&self, group: &str, topic: &str) {
        let mut s = self.state.lock().unwrap();
        s.positions.retain(|(g, t, _), _| !(g == group && t == topic));
        s.entries.retain(|(g, t, _, _), _| !(g == group && t == topic));
        s.ended.push((group.to_owned(), topic.to_owned()));
    }
}

impl Recorder {
    fn state(&self) -> RecordedState {
        self.state.lock().unwrap().clone()
    }

    /// Queue 0's position and entries of G in T.
    fn queue0(&self) -> (u64, Vec<(u64, PopEntry)>) {
        let s = self.state();
        let key = ("G".to_owned(), "T".to_owned());
        let pos = s.positions[&(key.0.clone(), key.1.clone(), 0)];
        let entries = s
            .entries
            .iter()
            .filter(|((g, t, q, _), _)| (g, t, *q) == (&key.0, &key.1, 0))
            .map(|((_, _, _, off), e)| (*off, *e))
            .collect();
        (pos, entries)
    }
}

/// An engine with a journal and `messages` messages in queue 0 of T, subscribed by G.
fn journaled(messages: usize) -> (Engine, Group, Arc<Recorder>) {
    let (e, g) = setup(messages);
    let rec = Arc::new(Recorder::default());
    e.set_pop_journal(rec.clone()).expect("the first journal");
    (e, g, rec)
}

#[test]
fn given_pops_acks_and_changes_when_journaled_should_record_the_position_and_each_entry() {
    let (e, g, rec) = journaled(6);
    assert!(e.set_pop_journal(rec.clone()).is_err(), "set once");
    let o = pop(&g, &req(6, 10_000, 1000));
    assert_eq!(rec.queue0().0, 6, "every offset below 6 is acknowledged or in flight");
    for off in [0, 2, 3] {
        g.pop_ack(0, off, o.pop_time).unwrap();
    }
    let renewed = g.change_invisible(0, 4, o.pop_time, 60_000, 1001).unwrap();
    let (pos, entries) = rec.queue0();
    let entry =
        |pop_time, invisible_ms, holder| PopEntry { pop_time, invisible_ms, attempts: 1, holder };
    assert_eq!(pos, 6);
    assert_eq!(
        entries,
        [
            (1, entry(1000, 10_000, PopHolder::Consumer)),
            (4, entry(renewed, 60_000, PopHolder::ConsumerChanged)),
            (5, entry(1000, 10_000, PopHolder::Consumer)),
        ],
        "what is in flight, as it is now"
    );
    let changes = rec.state().changes;
    assert!(pop(&g, &req(6, 10_000, 1002)).messages.is_empty());
    assert_eq!(rec.state().changes, changes, "a pop that changes nothing records nothing");
    g.unsubscribe();
    let s = rec.state();
    assert!(s.positions.is_empty() && s.entries.is_empty(), "an ended group's state is gone");
    assert_eq!(s.ended, [("G".to_owned(), "T".to_owned())]);
}

#[test]
fn given_a_recorded_pop_state_when_restored_after_a_restart_should_keep_acks_receipts_and_invisible_times(
) {
    // Before the restart: 6 popped at 1000 for 10 s, 0, 2 and 3 acknowledged, 4 made
    // invisible for a minute.
    let (_before, g, rec) = journaled(6);
    let o = pop(&g, &req(6, 10_000, 1000));
    for off in [0, 2, 3] {
        g.pop_ack(0, off, o.pop_time).unwrap();
    }
    let renewed = g.change_invisible(0, 4, o.pop_time, 60_000, 1001).unwrap();
    let (pos, entries) = rec.queue0();
    // After it: the same messages and one more, a fresh subscription given the state back.
    let (after, g) = setup(7);
    let idle = after.stats().bytes_used;
    let r = g.restore_pop(0, pos, &entries).expect("restored");
    assert_eq!(r, PopRestored { inflight: 3, acked: 3, dropped: vec![] });
    assert_eq!(g.inflight(), 3);
    assert_eq!(after.stats().bytes_used, idle + 3 * INFLIGHT_ENTRY_SIZE, "charged as before");
    after.reap();
    assert_eq!(after.stats().live_messages, 6, "0 is acknowledged and reclaimed (2, 3 behind 1)");
    assert_eq!(offsets(&pop(&g, &req(8, 10_000, 1100))), [6], "only the new message");
    assert_eq!(offsets(&pop(&g, &req(8, 10_000, 10_999))), Vec::<u64>::new(), "not before");
    let back = pop(&g, &req(8, 10_000, 11_000));
    assert_eq!(offsets(&back), [1, 5], "the unacknowledged ones, once their time ended");
    assert!(back.messages.iter().all(|m| m.attempts == 2), "as redeliveries");
    assert_eq!(g.pop_ack(0, 4, renewed).unwrap(), AckOutcome::Acked, "the receipt holds");
    let late = offsets(&pop(&g, &req(8, 10_000, 70_000)));
    assert_eq!(late, [1, 5, 6], "every expired one again, but not 4: acknowledged");
}

#[test]
fn given_entries_a_commit_acknowledged_or_past_the_position_when_restoring_should_drop_them() {
    let (_before, g, rec) = journaled(4);
    let o = pop(&g, &req(4, 10_000, 1000));
    g.pop_ack(0, 2, o.pop_time).unwrap();
    let (_, mut entries) = rec.queue0();
    assert_eq!(entries.iter().map(|(o, _)| *o).collect::<Vec<_>>(), [0, 1, 3]);
    let (_after, g) = setup(4);
    g.commit(0, 1).unwrap();
    entries.push((9, entries[0].1));
    let r = g.restore_pop(0, 4, &entries).expect("restored");
    assert_eq!(r.dropped, [0, 9], "below the commit, past the position");
    assert_eq!((r.inflight, r.acked), (2, 1), "1 and 3 in flight, 2 acknowledged");
    let again = g.restore_pop(0, 4, &entries).expect("a queue popped already");
    assert_eq!(again, PopRestored::default(), "is left as it is");
    assert_eq!(offsets(&pop(&g, &req(8, 10_000, 11_000))), [1, 3]);
}
