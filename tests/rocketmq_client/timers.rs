//! Timer messages (RocketMQ 5) with the real client's delivery-time API
//! (`MessageBuilder::delay_secs`, `delay_millis`, `deliver_time_ms`: the properties
//! `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`, `TIMER_DELIVER_MS`). Each test has its own broker.
//!
//! Timing: "never before due" is asserted strictly; arrival only within generous deadlines (the
//! machine is shared and loaded). Due times are whole milliseconds of the broker's clock, taken
//! when the send arrives, so the test's own lower bound allows the 1 ms the broker's truncated
//! clock may read behind the test's `Instant`; the broker-side stamps (`TIMER_OUT_MS`,
//! `TIMER_DEQUEUE_MS`, same machine clock) are compared exactly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq_client_rust::{
    ClientRuntime, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
};
use rocketmq_model::common::message::message_single::Message;

use crate::completeness_support::*;

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis() as u64
}

fn ms_prop(d: &Delivery, key: &str) -> u64 {
    d.prop(key)
        .unwrap_or_else(|| panic!("{}: the delivered message carries {key}", d.body))
        .parse()
        .unwrap_or_else(|_| panic!("{}: {key} is epoch milliseconds", d.body))
}

/// A started push consumer of `topic` (all queues) recording into `log`, proven to be pulling
/// queue 0 by a warm-up message.
async fn consumer_of(
    b: &TestBroker,
    rt: &Arc<ClientRuntime>,
    p: &DefaultMQProducer,
    topic: &str,
    group: &str,
    log: &Log,
) -> DefaultMQPushConsumer {
    let mut c = push_consumer(rt, &b.namesrv, group, &format!("{group}-consumer")).build();
    c.subscribe(topic, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener(group, log));
    c.start().await.expect("the consumer starts");
    let warm = send_to(p, message(topic, "warm-up", "TagT", &[], &[]), 0).await;
    assert!(
        eventually(Duration::from_secs(20), || log.uniq_set(None).contains(&warm)).await,
        "the consumer receives an ordinary message"
    );
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_timer_messages_at_10s_1_5s_plus_a_few_ms_and_1s_when_sent_should_arrive_once_each_never_before_due_in_due_order(
) {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("timers");
    let (topic, group) = ("timer_topic", "timer_group");
    let mut p = producer(&rt, &b.namesrv, "timer_producer").await;
    create_topic(&mut p, topic, 4).await;
    let log = Log::default();
    let mut c = consumer_of(&b, &rt, &p, topic, group, &log).await;

    let timer =
        |body: &str| Message::builder().topic(topic).tags("TagT").body_slice(body.as_bytes());
    // Sent latest-due first, all to queue 0: they must come out in due order.
    let before_10s = Instant::now();
    let deliver_at = epoch_ms() + 10_000;
    let id_10s =
        send_to(&p, timer("at-10s").deliver_time_ms(deliver_at).build().expect("msg"), 0).await;
    let before_1507ms = Instant::now();
    let id_1507ms =
        send_to(&p, timer("in-1507ms").delay_millis(1_507).build().expect("msg"), 0).await;
    let before_1s = Instant::now();
    let id_1s = send_to(&p, timer("in-1s").delay_secs(1).build().expect("msg"), 0).await;
    assert!(
        log.uniq_set(None).contains(&id_10s)
            || (b.broker.timers_waiting() >= 1 && b.live_messages() >= 1 && b.bytes_used() > 0),
        "an accepted timer waits in the store, counted against the memory budget"
    );

    let ids = [id_10s.clone(), id_1507ms.clone(), id_1s.clone()];
    assert!(
        eventually(Duration::from_secs(60), || {
            let seen = log.uniq_set(None);
            ids.iter().all(|id| seen.contains(id))
        })
        .await,
        "every timer message arrives"
    );
    // A second delivery would show within this pause.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deliveries = log.snapshot();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for d in &deliveries {
        *counts.entry(d.uniq.as_str()).or_default() += 1;
    }
    for id in &ids {
        assert_eq!(counts.get(id.as_str()), Some(&1), "{id} is delivered exactly once");
    }
    let got = |id: &str| deliveries.iter().find(|d| d.uniq == id).expect("delivered").clone();
    let tolerance = Duration::from_millis(1);
    for (id, before, delay) in [
        (&id_1s, before_1s, Duration::from_millis(1_000)),
        (&id_1507ms, before_1507ms, Duration::from_millis(1_507)),
        (&id_10s, before_10s, Duration::from_millis(10_000)),
    ] {
        let d = got(id);
        let took = d.at.duration_since(before);
        assert!(
            took + tolerance >= delay,
            "{}: arrived after {took:?}, not before {delay:?}",
            d.body
        );
        let (out, enq, deq) = (
            ms_prop(&d, "TIMER_OUT_MS"),
            ms_prop(&d, "TIMER_ENQUEUE_MS"),
            ms_prop(&d, "TIMER_DEQUEUE_MS"),
        );
        assert!(deq >= out, "{}: delivered at {deq}, not before its due time {out}", d.body);
        assert!(out > enq, "{}: due after it was stored", d.body);
        assert_eq!((d.topic.as_str(), d.queue), (topic, 0), "delivered to its topic and queue");
        assert!(
            d.prop("REAL_TOPIC").is_none() && d.prop("REAL_QID").is_none(),
            "{:?}",
            d.properties
        );
    }
    let at_10s = got(&id_10s);
    assert_eq!(ms_prop(&at_10s, "TIMER_OUT_MS"), deliver_at, "TIMER_DELIVER_MS is the due time");
    assert!(ms_prop(&at_10s, "TIMER_DEQUEUE_MS") >= deliver_at, "not before TIMER_DELIVER_MS");
    let offsets: Vec<i64> = [&id_1s, &id_1507ms, &id_10s].iter().map(|id| got(id).offset).collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "appended to the queue in due order, whatever the send order: {offsets:?}"
    );
    assert!(
        eventually(Duration::from_secs(10), || b.broker.timers_waiting() == 0).await,
        "nothing waits any more"
    );
    assert!(
        eventually(Duration::from_secs(20), || b.live_messages() == 0).await,
        "the waiting copies are released and the delivered messages reclaimed once consumed \
         (live: {})",
        b.live_messages()
    );

    c.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_timer_beyond_the_maximum_when_sent_should_be_refused_with_message_illegal() {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("timers-max");
    let topic = "timer_max_topic";
    let mut p = producer(&rt, &b.namesrv, "timer_max_producer").await;
    create_topic(&mut p, topic, 1).await;
    let timer = || Message::builder().topic(topic).tags("TagT").body_slice(b"far");
    for msg in [
        timer().delay_secs(259_201).build().expect("msg"),
        timer().deliver_time_ms(epoch_ms() + 259_200_000 + 60_000).build().expect("msg"),
    ] {
        let e = p.send(msg).await.expect_err("a timer beyond timerMaxDelaySec is refused");
        // The client redacts the remark; tests/broker_raw/timer.rs checks it on the wire.
        assert_eq!(e.broker_response_code(), Some(13), "refused with MESSAGE_ILLEGAL: {e}");
    }
    assert_eq!(b.live_messages(), 0, "nothing refused is stored");
    // Two days ahead is within the maximum: accepted, and waiting.
    let ok = timer().delay_secs(2 * 86_400).build().expect("msg");
    send(&p, ok).await;
    assert_eq!(b.broker.timers_waiting(), 1, "an accepted timer waits");
    assert_eq!(b.live_messages(), 1, "in the store");
    p.shutdown().await;
    b.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_delivery_time_already_past_when_sent_should_be_delivered_at_once_as_an_ordinary_message(
) {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("timers-past");
    let (topic, group) = ("timer_past_topic", "timer_past_group");
    let mut p = producer(&rt, &b.namesrv, "timer_past_producer").await;
    create_topic(&mut p, topic, 4).await;
    let log = Log::default();
    let mut c = consumer_of(&b, &rt, &p, topic, group, &log).await;
    let msg = Message::builder()
        .topic(topic)
        .tags("TagT")
        .body_slice(b"past")
        .deliver_time_ms(epoch_ms() - 60_000)
        .build()
        .expect("msg");
    let id = send_to(&p, msg, 1).await;
    assert_eq!(b.broker.timers_waiting(), 0, "a time already past does not wait");
    assert!(
        eventually(Duration::from_secs(20), || log.uniq_set(None).contains(&id)).await,
        "the message is delivered"
    );
    let d = log.snapshot().into_iter().find(|d| d.uniq == id).expect("delivered");
    assert_eq!((d.topic.as_str(), d.queue), (topic, 1), "on its topic and queue");
    assert!(d.prop("TIMER_OUT_MS").is_none(), "stored as an ordinary message, as RocketMQ does");
    assert!(d.prop("TIMER_DELIVER_MS").is_some(), "with the producer's properties kept");
    c.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}
