//! Who pays for reclamation: with a reaper thread, request threads never run a reaper pass or
//! free a deleted topic themselves (review 1.6).

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Engine, EngineConfig, EngineError, Message, Retention, StartFrom, SubscribeOptions};
use crate::queue::NODE_SIZE;
use crate::sync::plain::Ordering;

fn engine(reaper_thread: bool, budget: u64) -> Engine {
    let e = Engine::new(EngineConfig {
        memory_budget: budget,
        reaper_thread,
        // The reaper would sleep for long between passes if nothing woke it.
        reaper_interval: Duration::from_secs(30),
        reaper_max_interval: Duration::from_secs(30),
        retention: Retention { time: Duration::from_secs(3600), bytes: u64::MAX },
        ..EngineConfig::default()
    });
    match e {
        Ok(e) => e,
        Err(e) => panic!("config rejected: {e}"),
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn inline_work(e: &Engine) -> u64 {
    e.inner.inline_work.load(Ordering::Relaxed)
}

#[test]
fn refused_sends_and_deletes_leave_reclamation_to_the_reaper_thread() {
    let per = 100 + NODE_SIZE as u64;
    let e = engine(true, 4 * per);
    // The reaper thread registers itself when it starts.
    wait_for("the reaper thread", || super::lock(&e.inner.reaper).is_some());
    e.create_topic("T", 1).unwrap();
    let first = SubscribeOptions { start: StartFrom::First, ..Default::default() };
    let g = e.subscribe("G", "T", first).unwrap();
    for i in 0..4u8 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i; 100]))).unwrap();
    }
    for _ in 0..100 {
        let r = e.append_to("T", 0, Message::new(Bytes::from(vec![9; 100])));
        assert!(matches!(r, Err(EngineError::BudgetExceeded { .. })), "{r:?}");
    }
    assert_eq!(inline_work(&e), 0, "a refused send ran a reaper pass on its own thread");
    // Room comes back through the (woken) reaper thread.
    g.commit(0, 4).unwrap();
    wait_for("room", || e.append_to("T", 0, Message::new(Bytes::from(vec![7; 100]))).is_ok());
    e.delete_topic("T").unwrap();
    assert_eq!(inline_work(&e), 0, "delete_topic released the topic on its own thread");
    wait_for("the deleted topic's bytes", || e.stats().bytes_used == 0);
}

#[test]
fn without_a_reaper_thread_a_refused_send_reclaims_inline() {
    let per = 100 + NODE_SIZE as u64;
    let e = engine(false, 2 * per);
    e.create_topic("T", 1).unwrap();
    let first = SubscribeOptions { start: StartFrom::First, ..Default::default() };
    let g = e.subscribe("G", "T", first).unwrap();
    for i in 0..2u8 {
        e.append_to("T", 0, Message::new(Bytes::from(vec![i; 100]))).unwrap();
    }
    g.commit(0, 2).unwrap();
    e.append_to("T", 0, Message::new(Bytes::from(vec![2; 100]))).unwrap();
    assert_eq!(inline_work(&e), 1);
    e.delete_topic("T").unwrap();
    assert_eq!(e.stats().bytes_used, 0);
}

/// H3 (review-e77444b): the reaper's work per reclaimed node does not grow with the number of
/// subscriptions holding the queue (it used to count every hold for every node).
#[test]
fn given_many_groups_when_reaping_should_not_look_at_every_hold_for_every_node() {
    const GROUPS: u64 = 200;
    const MESSAGES: u64 = 1000;
    let e = engine(false, 1 << 30);
    e.create_topic("T", 1).unwrap();
    let first = SubscribeOptions { start: StartFrom::First, ..Default::default() };
    let groups: Vec<_> =
        (0..GROUPS).map(|i| e.subscribe(&format!("G{i}"), "T", first.clone()).unwrap()).collect();
    for _ in 0..MESSAGES {
        e.append_to("T", 0, Message::new(Bytes::from_static(b"m"))).unwrap();
    }
    for g in &groups {
        g.commit(0, MESSAGES).unwrap();
    }
    super::topic::HOLD_VISITS.with(|v| v.set(0));
    assert_eq!(e.reap(), MESSAGES, "invariant 7: acknowledged by every group, reclaimed");
    let visits = super::topic::HOLD_VISITS.with(|v| v.get());
    assert!(
        visits <= 2 * (GROUPS + MESSAGES),
        "the reaper looked at {visits} holds for {MESSAGES} nodes and {GROUPS} holds"
    );
}
