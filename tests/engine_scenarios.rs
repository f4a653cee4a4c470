//! Scenario tests of the engine's library API: one behaviour each, named
//! `given_<state>_when_<action>_should_<outcome>`. Invariant numbers refer to
//! `docs/design.md`.

use std::time::{Duration, Instant};

use baiji::engine::NODE_SIZE;
use baiji::engine::{
    AckOutcome, Engine, EngineConfig, EngineError, Filter, MemoryPolicy, Message, Mode, Retention,
    StartFrom, SubscribeOptions,
};
use bytes::Bytes;

fn config() -> EngineConfig {
    EngineConfig {
        reaper_thread: false,
        retention: Retention { time: Duration::from_secs(3600), bytes: u64::MAX },
        ..EngineConfig::default()
    }
}

fn engine_with(config: EngineConfig) -> Engine {
    Engine::new(config).expect("valid config")
}

fn engine() -> Engine {
    engine_with(config())
}

fn first() -> SubscribeOptions {
    SubscribeOptions { start: StartFrom::First, ..Default::default() }
}

fn msg(s: &str) -> Message {
    Message::new(Bytes::copy_from_slice(s.as_bytes()))
}

#[test]
fn given_topic_when_producer_sends_should_spread_round_robin_with_dense_offsets() {
    let e = engine();
    e.create_topic("T", 3).unwrap();
    let mut p = e.producer("T").unwrap();
    let receipts: Vec<_> = (0..9).map(|i| p.send(msg(&i.to_string())).unwrap()).collect();
    let mut per_queue = [0u64; 3];
    for r in &receipts {
        assert_eq!(r.offset, per_queue[r.queue as usize], "invariant 1: dense offsets per queue");
        per_queue[r.queue as usize] += 1;
    }
    assert_eq!(per_queue, [3, 3, 3], "round robin spreads evenly");
}

#[test]
fn given_sharding_key_when_appending_should_keep_key_on_one_queue_in_order() {
    let e = engine();
    e.create_topic("T", 8).unwrap();
    let t = e.topic("T").unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let qs: Vec<u32> =
        (0..20).map(|i| t.append_keyed(b"order-42", msg(&i.to_string())).unwrap().queue).collect();
    assert!(qs.windows(2).all(|w| w[0] == w[1]), "same key, same queue");
    let mut c = g.join().unwrap();
    let got = c.poll(100).unwrap();
    let bodies: Vec<String> =
        got.iter().map(|d| String::from_utf8(d.payload.to_vec()).unwrap()).collect();
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(bodies, want, "order kept within the key");
}

#[test]
fn given_bad_input_when_calling_the_api_should_return_typed_errors() {
    let e = engine();
    assert!(matches!(e.create_topic("bad topic!", 1), Err(EngineError::InvalidTopicName(_))));
    assert!(matches!(e.create_topic("T", 0), Err(EngineError::InvalidQueueCount(0))));
    assert!(matches!(e.create_topic("T", 5000), Err(EngineError::InvalidQueueCount(5000))));
    e.create_topic("T", 2).unwrap();
    e.create_topic("T", 2).unwrap();
    assert!(matches!(e.create_topic("T", 3), Err(EngineError::TopicExists { queues: 2, .. })));
    assert!(matches!(e.append_to("nope", 0, msg("x")), Err(EngineError::UnknownTopic(_))));
    assert!(matches!(
        e.append_to("T", 2, msg("x")),
        Err(EngineError::QueueOutOfRange { queue: 2, queues: 2, .. })
    ));
    assert!(matches!(e.group("G", "T"), Err(EngineError::UnknownGroup { .. })));
    assert!(matches!(e.subscribe("", "T", first()), Err(EngineError::InvalidGroupName(_))));
    let big = Message::new(Bytes::from(vec![0u8; e.config().max_message_size + 1]));
    assert!(matches!(e.append_to("T", 0, big), Err(EngineError::MessageTooLarge { .. })));
    e.subscribe("G", "T", first()).unwrap();
    let broadcast = SubscribeOptions { mode: Mode::Broadcasting, ..first() };
    assert!(matches!(e.subscribe("G", "T", broadcast), Err(EngineError::GroupModeConflict { .. })));
    assert_eq!(e.stats().live_messages, 0, "nothing was stored by failed calls");
}

#[test]
fn given_misuse_of_acks_when_acking_should_error_or_noop_without_touching_other_groups() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let a = e.subscribe("A", "T", first()).unwrap();
    let b = e.subscribe("B", "T", first()).unwrap();
    for i in 0..4 {
        e.append_to("T", 0, msg(&i.to_string())).unwrap();
    }
    let mut ca = a.join().unwrap();
    let got = ca.poll(2).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(ca.ack(&got[0]).unwrap(), AckOutcome::Acked);
    assert_eq!(ca.ack(&got[0]).unwrap(), AckOutcome::AlreadyAcked, "acking twice is a no-op");
    assert!(
        matches!(ca.ack_offset(0, 3), Err(EngineError::NotDelivered { offset: 3, .. })),
        "acking an offset never delivered is refused"
    );
    assert!(matches!(ca.ack_offset(7, 0), Err(EngineError::QueueOutOfRange { .. })));
    a.commit(0, 2).unwrap();
    assert!(matches!(a.commit(0, 1), Err(EngineError::CommitBehind { committed: 2, .. })));
    a.commit(0, 2).unwrap();
    assert!(matches!(a.commit(0, 9), Err(EngineError::OffsetBeyondEnd { end: 4, .. })));
    e.reap();
    assert_eq!(e.stats().live_messages, 4, "B still holds everything (invariant 3)");
    let sb = b.stats();
    assert_eq!((sb.acked, sb.backlog, sb.dropped), (0, 4, 0), "A's misuse left B untouched");
    b.commit(0, 4).unwrap();
    a.commit(0, 4).unwrap();
    e.reap();
    assert_eq!(e.stats().live_messages, 0);
    assert_eq!(e.stats().bytes_used, 0, "invariant 9: accounting back to zero");
}

#[test]
fn given_two_members_when_one_leaves_unacked_should_redeliver_to_the_other() {
    let e = engine();
    e.create_topic("T", 4).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let mut m1 = g.join().unwrap();
    let mut m2 = g.join().unwrap();
    let (a1, a2) = (m1.assignment().to_vec(), m2.assignment().to_vec());
    assert_eq!(a1.len() + a2.len(), 4, "queues split between members");
    assert!(a1.iter().all(|q| !a2.contains(q)), "no queue owned twice");
    let mut p = e.producer("T").unwrap();
    for i in 0..8 {
        p.send(msg(&i.to_string())).unwrap();
    }
    let got1 = m1.poll(100).unwrap();
    let got2 = m2.poll(100).unwrap();
    assert_eq!(got1.len() + got2.len(), 8, "each message to one member (invariant 8)");
    for d in &got2 {
        m2.ack(d).unwrap();
    }
    drop(m1); // leaves without acknowledging
    assert_eq!(m2.assignment().len(), 4, "the survivor owns every queue");
    let again = m2.poll(100).unwrap();
    let mut re: Vec<_> = again.iter().map(|d| (d.queue, d.offset)).collect();
    let mut lost: Vec<_> = got1.iter().map(|d| (d.queue, d.offset)).collect();
    re.sort();
    lost.sort();
    assert_eq!(re, lost, "what the departed member held is delivered again, nothing else");
}

#[test]
fn given_broadcasting_group_when_members_read_should_each_see_all_and_slowest_holds() {
    // No retention: whatever is kept here is kept by the group.
    let e = engine_with(EngineConfig {
        retention: Retention { time: Duration::ZERO, bytes: 0 },
        ..config()
    });
    e.create_topic("T", 2).unwrap();
    let opts =
        SubscribeOptions { mode: Mode::Broadcasting, start: StartFrom::Last, ..Default::default() };
    let g = e.subscribe("B", "T", opts).unwrap();
    let mut m1 = g.join().unwrap();
    let mut m2 = g.join().unwrap();
    let mut p = e.producer("T").unwrap();
    for i in 0..6 {
        p.send(msg(&i.to_string())).unwrap();
    }
    let g1 = m1.poll(100).unwrap();
    let g2 = m2.poll(100).unwrap();
    assert_eq!((g1.len(), g2.len()), (6, 6), "every member sees every message");
    for q in 0..2 {
        m1.commit(q, 3).unwrap();
    }
    e.reap();
    assert_eq!(e.stats().live_messages, 6, "the slowest member holds the nodes");
    drop(m2);
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "a member that leaves stops holding memory");
    drop(m1);
    p.send(msg("later")).unwrap();
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "a broadcasting group without members holds nothing");
}

#[test]
fn given_tag_filter_when_polling_should_deliver_matches_and_reclaim_the_rest() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e
        .subscribe("G", "T", SubscribeOptions { filter: Filter::tags(["A", "B"]), ..first() })
        .unwrap();
    for (i, tag) in ["A", "C", "B", "C", "A"].iter().enumerate() {
        e.append_to("T", 0, msg(&i.to_string()).with_tag(tag)).unwrap();
    }
    let mut c = g.join().unwrap();
    let got = c.poll(100).unwrap();
    assert_eq!(got.iter().map(|d| d.offset).collect::<Vec<_>>(), vec![0, 2, 4]);
    for d in &got {
        c.ack(d).unwrap();
    }
    e.reap();
    assert_eq!(e.stats().live_messages, 0, "filtered-out messages count as acknowledged");
    let s = g.stats();
    assert_eq!((s.delivered, s.acked, s.filtered), (3, 3, 2));
}

#[test]
fn given_start_positions_when_subscribing_should_begin_where_asked() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    for i in 0..5 {
        e.append_to("T", 0, msg(&i.to_string()).with_timestamp(1000 + i)).unwrap();
    }
    let cases = [
        (StartFrom::First, 0),
        (StartFrom::Last, 5),
        (StartFrom::Offset(3), 3),
        (StartFrom::Offset(99), 5),
        (StartFrom::Timestamp(1002), 2),
        (StartFrom::Timestamp(5000), 5),
    ];
    for (i, (start, want)) in cases.into_iter().enumerate() {
        let g = e
            .subscribe(&format!("G{i}"), "T", SubscribeOptions { start, ..Default::default() })
            .unwrap();
        assert_eq!(g.committed(0).unwrap(), want, "{start:?}");
        let mut c = g.join().unwrap();
        assert_eq!(c.poll(100).unwrap().first().map(|d| d.offset), (want < 5).then_some(want));
    }
    let t = e.topic("T").unwrap();
    assert_eq!(t.offset_for_timestamp(0, 1003).unwrap(), 3);
}

#[test]
fn given_no_group_when_retention_passes_should_keep_then_reclaim() {
    let e = engine_with(EngineConfig {
        // Long enough that the first reap below surely runs inside it on a loaded machine;
        // the reclamation after it is awaited as a condition, not a fixed sleep.
        retention: Retention { time: Duration::from_secs(2), bytes: u64::MAX },
        ..config()
    });
    e.create_topic("T", 1).unwrap();
    for i in 0..3 {
        e.append_to("T", 0, msg(&i.to_string())).unwrap();
    }
    e.reap();
    assert_eq!(e.stats().live_messages, 3, "kept for the retention time");
    let g = e.subscribe("Late", "T", first()).unwrap();
    assert_eq!(
        g.join().unwrap().poll(10).unwrap().len(),
        3,
        "a late group from the first offset sees them"
    );
    g.unsubscribe();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        e.reap();
        if e.stats().live_messages == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "reclaimed once retention passed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn given_retention_bytes_when_exceeded_should_reclaim_oldest_unheld() {
    let per = 10 + NODE_SIZE as u64;
    let e = engine_with(EngineConfig {
        retention: Retention { time: Duration::from_secs(3600), bytes: 3 * per },
        ..config()
    });
    e.create_topic("T", 1).unwrap();
    for i in 0..5 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i as u8; 10]))).unwrap();
    }
    e.reap();
    let q = e.topic("T").unwrap().queue_stats(0).unwrap();
    assert_eq!((q.min_offset, q.live_messages), (2, 3), "oldest beyond the byte retention go");
}

#[test]
fn given_reject_policy_when_budget_full_should_refuse_and_lose_nothing_accepted() {
    let per = 100 + NODE_SIZE as u64;
    let e = engine_with(EngineConfig { memory_budget: 3 * per, ..config() });
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 0..5u8 {
        match e.append_to("T", 0, Message::new(Bytes::from(vec![i; 100]))) {
            Ok(r) => accepted.push(r.offset),
            Err(EngineError::BudgetExceeded { .. }) => refused += 1,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!((accepted.len(), refused), (3, 2));
    assert_eq!(e.stats().rejected_messages, 2);
    let mut c = g.join().unwrap();
    let got: Vec<u64> = c.poll(10).unwrap().iter().map(|d| d.offset).collect();
    assert_eq!(got, accepted, "invariant 10: every accepted message is delivered");
    c.commit(0, 3).unwrap();
    // Room again: the append's own reap pass frees it even without the reaper thread.
    e.append_to("T", 0, Message::new(Bytes::from(vec![9; 100]))).unwrap();
}

#[test]
fn given_drop_oldest_when_budget_full_should_evict_and_count_per_group() {
    let per = 100 + NODE_SIZE as u64;
    let e = engine_with(EngineConfig {
        memory_budget: 3 * per,
        policy: MemoryPolicy::DropOldest,
        ..config()
    });
    e.create_topic("T", 1).unwrap();
    let a = e.subscribe("A", "T", first()).unwrap();
    let b = e.subscribe("B", "T", first()).unwrap();
    e.append_to("T", 0, Message::new(Bytes::from(vec![0; 100]))).unwrap();
    b.commit(0, 1).unwrap();
    for i in 1..5u8 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i; 100]))).unwrap();
    }
    assert!(e.stats().bytes_used <= 3 * per, "the budget holds");
    assert_eq!(e.stats().evicted_messages, 2);
    let mut ca = a.join().unwrap();
    let got: Vec<u64> = ca.poll(10).unwrap().iter().map(|d| d.offset).collect();
    assert_eq!(got, vec![2, 3, 4], "the group's cursor jumped past the evicted messages");
    assert_eq!(a.stats().dropped, 2, "A missed offsets 0 and 1");
    assert_eq!(b.stats().dropped, 1, "B had acknowledged offset 0, so it missed only 1");
}

#[test]
fn given_block_policy_when_budget_full_should_make_async_send_wait_for_room() {
    let per = 100 + NODE_SIZE as u64;
    let e = engine_with(EngineConfig {
        memory_budget: 2 * per,
        policy: MemoryPolicy::Block,
        reaper_thread: true,
        ..config()
    });
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let t = e.topic("T").unwrap();
    t.append(0, Message::new(Bytes::from(vec![0; 100]))).unwrap();
    t.append(0, Message::new(Bytes::from(vec![1; 100]))).unwrap();
    assert!(
        matches!(
            t.append(0, Message::new(Bytes::from(vec![2; 100]))),
            Err(EngineError::BudgetExceeded { .. })
        ),
        "a non-async append cannot wait"
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let committer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        g.commit(0, 2).unwrap();
    });
    let started = Instant::now();
    let r = rt.block_on(t.append_async(0, Message::new(Bytes::from(vec![2; 100])))).unwrap();
    assert_eq!(r.offset, 2);
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "it waited for the commit to free room"
    );
    committer.join().unwrap();
}

#[test]
fn given_waiting_consumers_when_appending_should_wake_blocking_and_async_receivers() {
    let e = std::sync::Arc::new(engine());
    e.create_topic("T", 2).unwrap();
    let g = e.subscribe("G", "T", SubscribeOptions::default()).unwrap();
    let mut c = g.join().unwrap();
    let empty = c.recv_timeout(8, Duration::from_millis(50)).unwrap();
    assert!(empty.is_empty(), "times out with nothing");
    let e2 = std::sync::Arc::clone(&e);
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        e2.append_to("T", 1, msg("hello")).unwrap();
    });
    // recv_timeout polls once more when its park times out, so a lost wake-up would still
    // return the message — after the timeout. The timeout is 60 s and the check 20 s: only a
    // real wake-up by the append (50 ms in) returns in time, however loaded the machine.
    let waited = std::time::Instant::now();
    let got = c.recv_timeout(8, Duration::from_secs(60)).unwrap();
    assert_eq!(got.len(), 1);
    assert!(
        waited.elapsed() < Duration::from_secs(20),
        "the blocking receiver must be woken by the append, not by its timeout: {:?}",
        waited.elapsed()
    );
    producer.join().unwrap();

    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let e3 = std::sync::Arc::clone(&e);
    let producer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        e3.append_to("T", 0, msg("async")).unwrap();
    });
    let got = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), c.recv(8)).await });
    assert_eq!(got.expect("woken before the timeout").unwrap().len(), 1);
    producer.join().unwrap();
}

#[test]
fn given_deleted_topic_when_using_handles_should_error_and_release_memory() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let mut c = g.join().unwrap();
    let t = e.topic("T").unwrap();
    t.append(0, msg("x")).unwrap();
    e.delete_topic("T").unwrap();
    assert!(t.is_deleted());
    assert!(matches!(t.append(0, msg("y")), Err(EngineError::UnknownTopic(_))));
    assert!(matches!(c.poll(1), Err(EngineError::NotAMember)));
    assert_eq!(e.stats().bytes_used, 0, "the deleted topic's bytes are back in the budget");
    assert!(matches!(e.delete_topic("T"), Err(EngineError::UnknownTopic(_))));
}

#[test]
fn given_activity_when_reading_stats_should_report_offsets_backlog_and_bytes() {
    let e = engine();
    e.create_topic("T", 2).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let t = e.topic("T").unwrap();
    for i in 0..4 {
        t.append(i % 2, Message::new(Bytes::from(vec![0u8; 50]))).unwrap();
    }
    let s = e.stats();
    assert_eq!(s.bytes_used, 4 * (50 + NODE_SIZE as u64));
    assert_eq!(s.live_messages, 4);
    let mut c = g.join().unwrap();
    let got = c.poll(3).unwrap();
    c.ack(&got[0]).unwrap();
    let gs = g.stats();
    assert_eq!((gs.delivered, gs.acked, gs.backlog, gs.members), (3, 1, 3, 1));
    g.commit(0, 2).unwrap();
    g.commit(1, 2).unwrap();
    e.reap();
    let q0 = t.queue_stats(0).unwrap();
    assert_eq!((q0.min_offset, q0.max_offset, q0.live_messages, q0.reclaimed), (2, 2, 0, 2));
    let s = e.stats();
    assert_eq!((s.live_messages, s.reclaimed_messages, s.bytes_used), (0, 4, 0));
}

#[test]
fn given_stateless_reader_when_reading_should_see_offsets_and_filtered_scan() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let t = e.topic("T").unwrap();
    for (i, tag) in ["A", "B", "A"].iter().enumerate() {
        t.append(0, msg(&i.to_string()).with_tag(tag)).unwrap();
    }
    let mut seen = Vec::new();
    let out = t
        .read(0, 0, 10, &Filter::tags(["A"]), |m| {
            seen.push(m.offset);
            true
        })
        .unwrap();
    assert_eq!(seen, vec![0, 2]);
    assert_eq!((out.first_offset, out.end_offset, out.next_offset, out.found), (0, 3, 3, 2));
    let out = t.read(0, 1, 1, &Filter::All, |_| true).unwrap();
    assert_eq!((out.next_offset, out.found), (2, 1));
    let out = t.read(0, 1, 10, &Filter::All, |m| m.offset < 2).unwrap();
    assert_eq!(
        (out.next_offset, out.found),
        (2, 1),
        "a visitor that declines stops the read there"
    );
    assert_eq!(t.get(0, 1, |m| m.payload.clone()).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(t.get(0, 7, |_| ()).unwrap(), None);
}

#[test]
fn given_topic_retention_override_when_reaping_should_keep_that_topic_longer_and_bound_its_bytes() {
    // The engine keeps nothing unheld; one topic (a dead-letter topic, say) keeps an hour's
    // worth, at most 3 messages' worth of bytes per queue.
    let e = engine_with(EngineConfig {
        retention: Retention { time: Duration::ZERO, bytes: 0 },
        ..config()
    });
    e.create_topic("PLAIN", 1).unwrap();
    e.create_topic("KEPT", 1).unwrap();
    let kept = e.topic("KEPT").unwrap();
    assert_eq!(
        kept.retention(),
        Retention { time: Duration::ZERO, bytes: 0 },
        "engine default first"
    );
    let per_message = (1 + NODE_SIZE) as u64;
    let long = Retention { time: Duration::from_secs(3600), bytes: 3 * per_message };
    kept.set_retention(long);
    assert_eq!(kept.retention(), long);
    let mut plain = e.producer("PLAIN").unwrap();
    let mut p = e.producer("KEPT").unwrap();
    for i in 0..5u8 {
        plain.send(Message::new(Bytes::from(vec![i]))).unwrap();
        p.send(Message::new(Bytes::from(vec![i]))).unwrap();
    }
    e.reap();
    let q = |t: &str| {
        let s = e.topic(t).unwrap().queue_stats(0).unwrap();
        (s.min_offset, s.max_offset)
    };
    assert_eq!(q("PLAIN"), (5, 5), "the engine's retention reclaims the plain topic");
    assert_eq!(q("KEPT"), (2, 5), "the override keeps the newest 3 (its byte bound)");
    // A group reading the kept topic from the first offset still sees them.
    let mut c = e.subscribe("G", "KEPT", first()).unwrap().join().unwrap();
    let got: Vec<u8> = c.poll(10).unwrap().iter().map(|d| d.payload[0]).collect();
    assert_eq!(got, vec![2, 3, 4]);
}

/// Runs `f` on its own thread and waits (generously) for its result: a call that never returns
/// fails the test instead of hanging it.
fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("{what} did not return"))
}

#[test]
fn given_ready_message_when_receiving_at_most_zero_with_timeout_should_return_empty_at_once() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let mut c = g.join().unwrap();
    e.append_to("T", 0, msg("x")).unwrap();
    let (got, mut c) = returns("recv_timeout(0, 1 h)", move || {
        let got = c.recv_timeout(0, Duration::from_secs(3600));
        (got, c)
    });
    assert_eq!(got.unwrap(), Vec::new(), "asking for nothing gets nothing");
    assert_eq!(c.poll(8).unwrap().len(), 1, "and takes nothing");
}

#[test]
fn given_ready_message_when_async_receiving_at_most_zero_should_return_empty_at_once() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let mut c = g.join().unwrap();
    e.append_to("T", 0, msg("x")).unwrap();
    let (got, mut c) = returns("recv(0)", move || {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let got = rt.block_on(c.recv(0));
        (got, c)
    });
    assert_eq!(got.unwrap(), Vec::new(), "asking for nothing gets nothing");
    assert_eq!(c.poll(8).unwrap().len(), 1, "and takes nothing");
}

/// A waker that records whether it was woken.
#[derive(Default)]
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Flag {
    fn woken(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An engine under `block` whose budget is full of messages of topic `HELD` that group `G`
/// holds, and a topic `T`; returns the engine and the group (which must stay alive).
fn full_block_engine() -> (Engine, baiji::engine::Group) {
    let per = 100 + NODE_SIZE as u64;
    let e = engine_with(EngineConfig {
        memory_budget: 2 * per,
        policy: MemoryPolicy::Block,
        ..config()
    });
    e.create_topic("HELD", 1).unwrap();
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "HELD", first()).unwrap();
    for i in 0..2u8 {
        e.append_to("HELD", 0, Message::new(Bytes::from(vec![i; 100]))).unwrap();
    }
    (e, g)
}

/// Polls `f` once with a waker that raises `flag`.
fn poll_once<F: std::future::Future>(
    f: std::pin::Pin<&mut F>,
    flag: &std::sync::Arc<Flag>,
) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::from(std::sync::Arc::clone(flag));
    f.poll(&mut std::task::Context::from_waker(&waker))
}

#[test]
fn given_async_send_waiting_for_room_when_its_topic_is_deleted_should_wake_and_fail() {
    let (e, _g) = full_block_engine();
    let t = e.topic("T").unwrap();
    let flag = std::sync::Arc::new(Flag::default());
    let mut send = Box::pin(t.append_async(0, Message::new(Bytes::from(vec![9; 100]))));
    assert!(poll_once(send.as_mut(), &flag).is_pending(), "no room: the send waits");
    e.delete_topic("T").unwrap();
    assert!(flag.woken(), "deleting the topic wakes the sends waiting to append to it");
    assert!(
        matches!(
            poll_once(send.as_mut(), &flag),
            std::task::Poll::Ready(Err(EngineError::UnknownTopic(_)))
        ),
        "and they fail instead of waiting for room on a topic that is gone"
    );
}

#[test]
fn given_async_send_waiting_for_room_when_the_engine_is_dropped_should_wake_and_fail() {
    let (e, _g) = full_block_engine();
    let t = e.topic("T").unwrap();
    let flag = std::sync::Arc::new(Flag::default());
    let mut send = Box::pin(t.append_async(0, Message::new(Bytes::from(vec![9; 100]))));
    assert!(poll_once(send.as_mut(), &flag).is_pending(), "no room: the send waits");
    drop(e);
    assert!(flag.woken(), "shutting the engine down wakes the sends waiting for room");
    assert!(
        matches!(poll_once(send.as_mut(), &flag), std::task::Poll::Ready(Err(EngineError::Closed))),
        "and they fail with Closed"
    );
}

/// A small deterministic generator (xorshift64*), so the test needs no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[test]
fn given_large_queue_when_looking_up_by_offset_or_time_should_agree_with_a_walk_across_reaping() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    let t = e.topic("T").unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // What was appended, in offset order: (timestamp, payload). Timestamps never decrease but
    // repeat and jump; some messages arrive in batches (indexed by the batch's appender).
    let mut appended: Vec<(u64, u64)> = Vec::new();
    let mut ts = 1_000u64;
    let mut append_some = |appended: &mut Vec<(u64, u64)>, n: u64, rng: &mut Rng| {
        let mut left = n;
        while left > 0 {
            let batch = (1 + rng.below(100)).min(left);
            let mut msgs = Vec::new();
            for _ in 0..batch {
                ts += rng.below(3) * (1 + rng.below(5));
                let v = appended.len() as u64;
                msgs.push(Message::new(Bytes::from(v.to_le_bytes().to_vec())).with_timestamp(ts));
                appended.push((ts, v));
            }
            if batch == 1 {
                t.append(0, msgs.pop().unwrap()).unwrap();
            } else {
                t.append_batch(0, msgs).unwrap();
            }
            left -= batch;
        }
    };
    // The reference: a walk over what is retained.
    let check = |appended: &[(u64, u64)], rng: &mut Rng| {
        let s = t.queue_stats(0).unwrap();
        assert_eq!(s.max_offset, appended.len() as u64);
        for _ in 0..2_000 {
            let o = rng.below(s.max_offset + 10);
            let got = t.get(0, o, |m| {
                (m.timestamp, u64::from_le_bytes(m.payload[..8].try_into().unwrap()))
            });
            let want = (s.min_offset..s.max_offset).contains(&o).then(|| appended[o as usize]);
            assert_eq!(
                got.unwrap(),
                want,
                "get({o}) with retained {}..{}",
                s.min_offset,
                s.max_offset
            );
            let target = appended[rng.below(appended.len() as u64) as usize].0 + rng.below(3) - 1;
            let walk = (s.min_offset..s.max_offset)
                .find(|&i| appended[i as usize].0 >= target)
                .unwrap_or(s.max_offset);
            assert_eq!(t.offset_for_timestamp(0, target).unwrap(), walk, "timestamp {target}");
            if (s.min_offset..s.max_offset).contains(&o) {
                let mut seen = Vec::new();
                t.read(0, o, 3, &Filter::All, |m| {
                    seen.push(m.offset);
                    true
                })
                .unwrap();
                let want: Vec<u64> = (o..s.max_offset.min(o + 3)).collect();
                assert_eq!(seen, want, "read from {o}");
            }
        }
    };
    append_some(&mut appended, 150_000, &mut rng);
    check(&appended, &mut rng);
    // Reap part of the queue, several times, appending in between.
    for round in 1..=3u64 {
        g.commit(0, round * 40_000 + rng.below(1000)).unwrap();
        while e.reap() > 0 {}
        assert!(t.queue_stats(0).unwrap().min_offset >= round * 40_000);
        append_some(&mut appended, 20_000, &mut rng);
        check(&appended, &mut rng);
    }
}

/// review-e77444b H3: a client that names ever new groups cannot make the engine hold
/// messages for ever more subscriptions; the cap refuses with a typed error and counts per
/// topic and per engine, and a subscription that ends frees its place.
#[test]
fn given_subscription_caps_when_groups_keep_coming_should_refuse_past_the_cap_and_reuse_freed_places(
) {
    let e = engine_with(EngineConfig {
        max_subscriptions_per_topic: 3,
        max_subscriptions: 4,
        ..config()
    });
    e.create_topic("A", 1).unwrap();
    e.create_topic("B", 1).unwrap();
    let a: Vec<_> = (0..3).map(|i| e.subscribe(&format!("g{i}"), "A", first()).unwrap()).collect();
    assert!(
        matches!(
            e.subscribe("g3", "A", first()),
            Err(EngineError::TooManySubscriptions { limit: 3, per_topic: true, .. })
        ),
        "the topic's cap refuses a fourth group"
    );
    assert!(e.subscribe("g0", "A", first()).is_ok(), "an existing subscription is no new one");
    e.subscribe("h0", "B", first()).unwrap();
    assert!(
        matches!(
            e.subscribe("h1", "B", first()),
            Err(EngineError::TooManySubscriptions { limit: 4, per_topic: false, .. })
        ),
        "the engine's cap counts every topic"
    );
    a[0].unsubscribe();
    e.subscribe("h1", "B", first()).expect("an ended subscription frees its place");
    e.delete_topic("B").unwrap();
    e.subscribe("g3", "A", first()).expect("a deleted topic's subscriptions free theirs");
    assert_eq!(e.groups().len(), 3);
}

/// The offsets of queue 0 of `t` still readable (a read from its first offset).
fn readable(e: &Engine, t: &str) -> Vec<u64> {
    let t = e.topic(t).unwrap();
    let first = t.read(0, 0, 0, &Filter::All, |_| true).unwrap().first_offset;
    let mut seen = Vec::new();
    t.read(0, first, 100, &Filter::All, |m| {
        seen.push(m.offset);
        true
    })
    .unwrap();
    seen
}

#[test]
fn given_keep_acknowledged_when_every_group_acknowledged_should_keep_them_readable_by_offset() {
    let e = engine_with(EngineConfig { keep_acknowledged: Duration::from_secs(3600), ..config() });
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    for i in 0..5 {
        e.append_to("T", 0, msg(&i.to_string())).unwrap();
    }
    g.commit(0, 5).unwrap();
    e.reap();
    assert_eq!(readable(&e, "T"), vec![0, 1, 2, 3, 4], "acknowledged messages are kept");
    let late = e.subscribe("Late", "T", first()).unwrap();
    assert_eq!(
        late.join().unwrap().poll(10).unwrap().len(),
        5,
        "a new group from the first sees them"
    );
    late.unsubscribe();
    // The topic's own setting wins over the engine's: zero frees them at the next pass.
    e.topic("T").unwrap().set_keep_acknowledged(Duration::ZERO);
    e.reap();
    assert_eq!(readable(&e, "T"), Vec::<u64>::new(), "without keeping, acknowledged ones go");
    assert_eq!(e.stats().live_messages, 0);
}

#[test]
fn given_keep_acknowledged_when_off_should_free_acknowledged_messages_at_once() {
    let e = engine();
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    for i in 0..5 {
        e.append_to("T", 0, msg(&i.to_string())).unwrap();
    }
    g.commit(0, 3).unwrap();
    e.reap();
    assert_eq!(readable(&e, "T"), vec![3, 4], "the default keeps nothing acknowledged");
}

#[test]
fn given_kept_acknowledged_messages_when_the_budget_is_nearly_full_should_free_them_first() {
    let per = 100 + NODE_SIZE as u64;
    let e = engine_with(EngineConfig {
        memory_budget: 10 * per,
        keep_acknowledged: Duration::from_secs(3600),
        ..config()
    });
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    for i in 0..8u8 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i; 100]))).unwrap();
    }
    g.commit(0, 8).unwrap();
    e.reap();
    assert_eq!(readable(&e, "T").len(), 8, "80 % of the budget: kept");
    for i in 8..10u8 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i; 100]))).unwrap();
    }
    e.reap();
    assert_eq!(
        readable(&e, "T"),
        vec![8, 9],
        "above 90 % of the budget the kept ones go, the unacknowledged stay"
    );
    for i in 10..18u8 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i; 100])))
            .expect("keeping acknowledged messages never refuses a send");
    }
}

#[test]
fn given_keep_acknowledged_when_retention_bytes_are_exceeded_should_free_the_oldest_kept() {
    let per = 10 + NODE_SIZE as u64;
    let e = engine_with(EngineConfig {
        keep_acknowledged: Duration::from_secs(3600),
        retention: Retention { time: Duration::from_secs(3600), bytes: 3 * per },
        ..config()
    });
    e.create_topic("T", 1).unwrap();
    let g = e.subscribe("G", "T", first()).unwrap();
    for i in 0..5 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i as u8; 10]))).unwrap();
    }
    g.commit(0, 5).unwrap();
    e.reap();
    assert_eq!(readable(&e, "T"), vec![2, 3, 4], "kept ones are bounded by the retention bytes");
}
