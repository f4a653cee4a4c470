//! POP consumption with the real client: rocketmq-client-rust 1.0.0 push consumers built with
//! `client_rebalance(false)` ask `QUERY_ASSIGNMENT`, are told `POP` (the broker's
//! `default-message-request-mode`), and then pop, ack (batch acks), and change the invisible
//! time of what their listener fails. Each test has its own broker.
//!
//! Timing: the client's shortest invisible time is 5 s, and a failed message comes back after
//! the first step of its delay table, 10 s; deadlines are generous multiples of those.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rocketmq_client_rust::{
    ClientRuntime, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQPushConsumer,
    MQPushConsumer,
};
use rocketmq_model::common::message::message_ext::MessageExt;

use crate::completeness_support::*;

/// A started POP push consumer of `topic` (concurrent listener, 5 s invisible time).
async fn pop_consumer(
    b: &TestBroker,
    rt: &Arc<ClientRuntime>,
    topic: &str,
    group: &str,
    instance: &str,
    listener: impl Fn(
            &[&MessageExt],
            &ConsumeConcurrentlyContext,
        ) -> rocketmq_client_rust::ClientResult<ConsumeConcurrentlyStatus>
        + Send
        + Sync
        + 'static,
) -> DefaultMQPushConsumer {
    let mut c = push_consumer(rt, &b.namesrv, group, instance)
        .client_rebalance(false)
        .pop_invisible_time(5_000)
        .build();
    c.subscribe(topic, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(listener);
    c.start().await.expect("the consumer starts");
    c
}

async fn pop_broker(tweak: impl FnOnce(&mut baiji::broker::BrokerConfig)) -> TestBroker {
    start_broker(|c| {
        c.remoting.default_message_request_mode = "POP".into();
        tweak(c);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_pop_members_with_concurrent_listeners_when_messages_are_sent_should_deliver_each_exactly_once_and_return_memory(
) {
    let b = pop_broker(|_| {}).await;
    let rt = client_runtime("pop-once");
    let (topic, group) = ("pop_once_topic", "pop_once_group");
    let mut p = producer(&rt, &b.namesrv, "pop_once_producer").await;
    create_topic(&mut p, topic, 4).await;
    let idle = b.bytes_used();
    let log = Log::default();
    let mut a =
        pop_consumer(&b, &rt, topic, group, "pop-a", recording_listener("pop-a", &log)).await;
    let mut c =
        pop_consumer(&b, &rt, topic, group, "pop-b", recording_listener("pop-b", &log)).await;
    let mut sent = Vec::new();
    for i in 0..40 {
        sent.push(send(&p, message(topic, &format!("m{i}"), "TagA", &[], &[])).await);
    }
    assert!(
        eventually(Duration::from_secs(60), || log.uniq_set(None).len() == sent.len()).await,
        "every message arrives: {} of {}",
        log.uniq_set(None).len(),
        sent.len()
    );
    let store = b.broker.store();
    assert!(
        eventually(Duration::from_secs(30), || store.inflight(group, topic) == 0).await,
        "every popped message is acknowledged: {} in flight",
        store.inflight(group, topic)
    );
    let mut per: HashMap<String, usize> = HashMap::new();
    for d in log.snapshot() {
        *per.entry(d.uniq.clone()).or_default() += 1;
        assert_eq!(d.reconsume_times, 0, "{}: a first delivery", d.body);
        assert_eq!(d.topic, topic);
    }
    let twice: Vec<_> = per.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no message reaches the group twice: {twice:?}");
    // Which member wins a message is a race; that the other pops too shows once it is alone.
    a.shutdown().await;
    let before = log.len();
    for i in 0..8 {
        sent.push(send(&p, message(topic, &format!("n{i}"), "TagA", &[], &[])).await);
    }
    assert!(
        eventually(Duration::from_secs(60), || log.uniq_set(Some("pop-b")).len()
            + log.uniq_set(Some("pop-a")).len()
            >= sent.len()
            && log.len() >= before + 8)
        .await,
        "the remaining member pops what is sent after the other left"
    );
    let mut per: HashMap<String, usize> = HashMap::new();
    for d in log.snapshot() {
        *per.entry(d.uniq.clone()).or_default() += 1;
    }
    let twice: Vec<_> = per.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no message reaches the group twice: {twice:?}");
    assert!(
        sent[40..].iter().all(|id| log.uniq_set(Some("pop-b")).contains(id)),
        "pop-b received every message sent after pop-a left"
    );
    assert!(
        eventually(Duration::from_secs(30), || b.live_messages() == 0 && b.bytes_used() <= idle)
            .await,
        "memory returns to idle once everything is acked: {} live, {} bytes (idle {idle})",
        b.live_messages(),
        b.bytes_used()
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_listener_failing_the_first_delivery_when_popping_should_get_it_again_with_reconsume_times_plus_one(
) {
    let b = pop_broker(|_| {}).await;
    let rt = client_runtime("pop-retry");
    let (topic, group) = ("pop_retry_topic", "pop_retry_group");
    let mut p = producer(&rt, &b.namesrv, "pop_retry_producer").await;
    create_topic(&mut p, topic, 4).await;
    let log = Log::default();
    let record = recording_listener("pop-r", &log);
    let mut c = pop_consumer(&b, &rt, topic, group, "pop-r", move |msgs, ctx| {
        record(msgs, ctx)?;
        // Fails the first delivery; the client then changes the invisible time (10 s).
        Ok(if msgs.iter().all(|m| m.reconsume_times() == 0) {
            ConsumeConcurrentlyStatus::ReconsumeLater
        } else {
            ConsumeConcurrentlyStatus::ConsumeSuccess
        })
    })
    .await;
    let id = send(&p, message(topic, "retry-me", "TagA", &[], &[])).await;
    assert!(
        eventually(Duration::from_secs(60), || log
            .snapshot()
            .iter()
            .any(|d| d.uniq == id && d.reconsume_times == 1))
        .await,
        "the failed message comes back with reconsume times 1: {:?}",
        log.snapshot().iter().map(|d| (&d.uniq, d.reconsume_times)).collect::<Vec<_>>()
    );
    let store = b.broker.store();
    assert!(
        eventually(Duration::from_secs(30), || store.inflight(group, topic) == 0).await,
        "the successful second delivery is acknowledged"
    );
    let times: Vec<i32> =
        log.snapshot().iter().filter(|d| d.uniq == id).map(|d| d.reconsume_times).collect();
    assert_eq!(times, [0, 1], "delivered twice, counted 0 then 1");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_listener_always_failing_when_attempts_run_out_should_move_the_message_to_the_group_dlq(
) {
    // One delivery only: the expiry after the client's nack dead-letters it.
    let b = pop_broker(|c| c.core.pop_retry_max_times = 0).await;
    let rt = client_runtime("pop-dlq");
    let (topic, group) = ("pop_dlq_topic", "pop_dlq_group");
    let mut p = producer(&rt, &b.namesrv, "pop_dlq_producer").await;
    create_topic(&mut p, topic, 4).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let mut c = pop_consumer(&b, &rt, topic, group, "pop-d", move |msgs, _| {
        seen.fetch_add(msgs.len(), Ordering::SeqCst);
        Ok(ConsumeConcurrentlyStatus::ReconsumeLater)
    })
    .await;
    send(&p, message(topic, "doomed", "TagA", &[], &[])).await;
    let dlq = format!("%DLQ%{group}");
    assert!(
        eventually(Duration::from_secs(60), || b.appended(&dlq) == 1).await,
        "the message reaches {dlq} after its attempts"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "delivered once, then dead-lettered");
    let store = b.broker.store();
    assert_eq!(store.inflight(group, topic), 0, "a dead letter is no longer in flight");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_pop_member_killed_with_unacked_messages_when_their_invisible_time_passes_should_deliver_them_to_the_other_member(
) {
    if run_as_child().await {
        return;
    }
    let b = pop_broker(|_| {}).await;
    let rt = client_runtime("pop-kill");
    let (topic, group) = ("pop_kill_topic", "pop_kill_group");
    let mut p = producer(&rt, &b.namesrv, "pop_kill_producer").await;
    create_topic(&mut p, topic, 4).await;
    let log = Log::default();
    let spec = ChildSpec {
        namesrv: b.namesrv.clone(),
        group: group.into(),
        topic: topic.into(),
        instance: "pop-child".into(),
        broadcasting: false,
        orderly: false,
        pop: true,
    };
    let mut child = ChildConsumer::spawn(
        "pop::given_pop_member_killed_with_unacked_messages_when_their_invisible_time_passes_should_deliver_them_to_the_other_member",
        &spec,
        &log,
    );
    assert!(eventually(Duration::from_secs(60), || child.is_ready()).await, "the child starts");
    let mut sent = Vec::new();
    for i in 0..4 {
        sent.push(send(&p, message(topic, &format!("k{i}"), "TagA", &[], &[])).await);
    }
    assert!(
        eventually(Duration::from_secs(60), || !log.uniq_set(Some("pop-child")).is_empty()).await,
        "the child pops messages (and never acks them)"
    );
    child.kill();
    let held = log.uniq_set(Some("pop-child"));
    let other =
        pop_consumer(&b, &rt, topic, group, "pop-live", recording_listener("pop-live", &log)).await;
    assert!(
        eventually(Duration::from_secs(60), || held.is_subset(&log.uniq_set(Some("pop-live"))))
            .await,
        "what the killed member held reaches the live one after the invisible time"
    );
    assert!(
        eventually(Duration::from_secs(60), || sent
            .iter()
            .all(|id| log.uniq_set(Some("pop-live")).contains(id) || held.contains(id)))
        .await,
        "the rest reaches the live member too"
    );
    let mut other = other;
    other.shutdown().await;
}
