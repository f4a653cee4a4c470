//! Broker completeness with real clients: retries and dead letters, delay levels, orderly
//! locks, broadcasting groups, ali-ons both ways, and consumers that die. Every test has its
//! own broker on free loopback ports and its own topics and groups.
//!
//! Waits are deadlines on observable conditions. The retry test is the long one by nature:
//! two real retry delays (levels 3 and 4: 10 s and 30 s) before the dead letter.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rocketmq_client_rust::{
    ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, ConsumeOrderlyContext,
    ConsumeOrderlyStatus, DefaultMQProducer, MQPushConsumer,
};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;

use crate::completeness_support::*;

/// Sends `per_queue` messages to each of `queues` queues (bodies `<label>-q<queue>-<i>`);
/// returns their `UNIQ_KEY`s.
async fn send_round(
    p: &DefaultMQProducer,
    topic: &str,
    queues: i32,
    per_queue: usize,
    label: &str,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..per_queue {
        for q in 0..queues {
            let body = format!("{label}-q{q}-{i}");
            ids.push(send_to(p, message(topic, &body, "TagA", &[], &[]), q).await);
        }
    }
    ids
}

fn all_delivered(log: &Log, ids: &[String]) -> bool {
    let seen = log.uniq_set(None);
    ids.iter().all(|id| seen.contains(id))
}

/// How often each id was delivered to the group.
fn delivery_counts(log: &Log, ids: &[String]) -> HashMap<String, usize> {
    let wanted: HashSet<&String> = ids.iter().collect();
    let mut counts = HashMap::new();
    for d in log.snapshot() {
        if wanted.contains(&d.uniq) {
            *counts.entry(d.uniq).or_insert(0) += 1;
        }
    }
    counts
}

// ---------------------------------------------------------------------------------------------
// Retries and dead letters

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_listener_answering_reconsume_later_when_retries_run_out_should_redeliver_by_delay_level_then_dead_letter(
) {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("retry-dlq");
    let (topic, group) = ("retry_topic", "retry_group");
    let (retry, dlq) = (format!("%RETRY%{group}"), format!("%DLQ%{group}"));
    let mut p = producer(&rt, &b.namesrv, "retry_producer").await;
    create_topic(&mut p, topic, 4).await;

    // maxReconsumeTimes 2: delivery 0, retry at level 3 + 0 (10 s), retry at level 3 + 1
    // (30 s), then the third "reconsume later" sends it to the DLQ. About 42 s.
    let log = Log::default();
    let mut c =
        push_consumer(&rt, &b.namesrv, group, "retry-consumer").max_reconsume_times(2).build();
    c.subscribe(topic, "*").await.expect("subscribe");
    let l = log.clone();
    c.register_message_listener_concurrently(
        move |msgs: &[&MessageExt], ctx: &ConsumeConcurrentlyContext| {
            let queue_topic = ctx.get_message_queue().topic().to_string();
            for m in msgs {
                l.push(Delivery::from_ext("retry-consumer", &queue_topic, m));
            }
            Ok(ConsumeConcurrentlyStatus::ReconsumeLater)
        },
    );
    c.start().await.expect("the consumer starts");

    let uniq = send(
        &p,
        message(topic, "retry me", "TagR", &["order-7", "customer-3"], &[("orderNo", "A-7")]),
    )
    .await;

    assert!(
        eventually(Duration::from_secs(10), || log.len() >= 1).await,
        "the message is delivered once"
    );
    let first = log.snapshot()[0].clone();
    assert_eq!((first.queue_topic.as_str(), first.reconsume_times), (topic, 0));
    assert!(first.prop("RETRY_TOPIC").is_none(), "a first delivery has no RETRY_TOPIC");
    // The group's commit releases the original while its retries wait (the second is due at
    // 40 s): retries never pin the original queue. The client commits periodically, the first
    // time 10 s after it starts.
    let t = b.broker.store().topic(topic).expect("the topic");
    let q = u32::try_from(first.queue).expect("queue id");
    assert!(
        eventually(Duration::from_secs(20), || t.offsets(q).is_ok_and(|(min, _)| min == 1)).await,
        "the original message is reclaimed once the group commits past it, though its retry is \
         pending (queue offsets: {:?}, deliveries: {})",
        t.offsets(q),
        log.len()
    );

    assert!(
        eventually(Duration::from_secs(50), || log.len() >= 3).await,
        "two retries arrive within 10 s + 30 s (+ slack); got {}",
        log.len()
    );
    let d = log.snapshot();
    for (n, r) in d[1..3].iter().enumerate() {
        let n = n as i32 + 1;
        assert_eq!(r.queue_topic, retry, "retry {n} is pulled from the group's retry topic");
        assert_eq!(r.topic, topic, "the client restores the original topic from RETRY_TOPIC");
        assert_eq!(r.reconsume_times, n, "retry {n} carries reconsume count {n}");
        assert_eq!(r.uniq, uniq, "a retry keeps the message id (UNIQ_KEY)");
        assert_eq!(r.prop("RETRY_TOPIC"), Some(topic), "RETRY_TOPIC names the original topic");
        assert_eq!(
            r.prop("ORIGIN_MESSAGE_ID"),
            Some(first.msg_id.as_str()),
            "ORIGIN_MESSAGE_ID is the first delivery's message id"
        );
        assert_eq!(
            (r.prop("TAGS"), r.prop("KEYS"), r.prop("orderNo"), r.body.as_str()),
            (Some("TagR"), Some("order-7 customer-3"), Some("A-7"), "retry me"),
            "a retry keeps tags, keys, user properties and body"
        );
        assert!(r.prop("DELAY").is_none(), "a delivered retry no longer carries DELAY");
    }
    // Level = 3 + reconsume count: 10 s, then 30 s. The lower bounds are the semantics (never
    // before due). The upper bounds only tell the level apart from the next one (level 4 is
    // 30 s, level 5 is 60 s), leaving room for the client's route lookup of the retry topic
    // (every 10 s) and for a loaded 2-core machine; they are not latency goals.
    let gap1 = d[1].at.duration_since(d[0].at);
    let gap2 = d[2].at.duration_since(d[1].at);
    assert!(
        gap1 >= Duration::from_secs(10) && gap1 < Duration::from_secs(30),
        "the first retry comes after level 3 (10 s), before level 4 would (30 s); took {gap1:?}"
    );
    assert!(
        gap2 >= Duration::from_secs(30) && gap2 < Duration::from_secs(60),
        "the second retry comes after level 4 (30 s), before level 5 would (60 s); took {gap2:?}"
    );

    // The third "reconsume later" reaches max reconsume times: the DLQ, created on demand,
    // routable and readable.
    assert!(
        eventually(Duration::from_secs(5), || b.has_topic(&dlq)).await,
        "the DLQ topic {dlq} is created when the first dead letter arrives"
    );
    // The dead letter lives in the store like any message: counted against the budget (the
    // original, the retry copies and the schedule copies are all released by now)...
    assert!(
        eventually(Duration::from_secs(10), || b.live_messages() == 1).await,
        "only the dead letter is held in memory (live: {})",
        b.live_messages()
    );
    let dlq_log = Log::default();
    let mut reader = push_consumer(&rt, &b.namesrv, "retry_dlq_reader", "dlq-reader").build();
    reader.subscribe(dlq.as_str(), "*").await.expect("subscribe to the DLQ");
    reader.register_message_listener_concurrently(recording_listener("dlq-reader", &dlq_log));
    reader.start().await.expect("the DLQ reader starts");
    assert!(
        eventually(Duration::from_secs(15), || dlq_log.len() >= 1).await,
        "a consumer of {dlq} reads the dead letter"
    );
    let dead = dlq_log.snapshot()[0].clone();
    assert_eq!(dead.topic, dlq);
    assert_eq!(dead.uniq, uniq, "the dead letter keeps the message id");
    assert_eq!(dead.reconsume_times, 3, "a dead letter's reconsume count is one past the last");
    assert_eq!(
        (dead.prop("TAGS"), dead.prop("KEYS"), dead.prop("orderNo"), dead.body.as_str()),
        (Some("TagR"), Some("order-7 customer-3"), Some("A-7"), "retry me"),
        "the dead letter keeps its original tags, keys, user properties and body"
    );
    assert_eq!(dead.prop("RETRY_TOPIC"), Some(topic), "the dead letter names its original topic");
    assert_eq!(dead.prop("ORIGIN_MESSAGE_ID"), Some(first.msg_id.as_str()));
    assert_eq!(log.len(), 3, "after the dead letter the group gets no further retry");
    // ...and reclaimed once its reader commits (the first periodic commit comes 10 s after the
    // reader starts).
    assert!(
        eventually(Duration::from_secs(15), || b.live_messages() == 0).await,
        "a dead letter read and committed is reclaimed (live: {})",
        b.live_messages()
    );

    reader.shutdown().await;
    c.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Delayed messages

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_message_with_delay_level_2_when_sent_should_be_held_in_memory_and_arrive_5_to_6_seconds_later(
) {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("delay");
    let (topic, group) = ("delay_topic", "delay_group");
    let mut p = producer(&rt, &b.namesrv, "delay_producer").await;
    create_topic(&mut p, topic, 4).await;
    let log = Log::default();
    let mut c = push_consumer(&rt, &b.namesrv, group, "delay-consumer").build();
    c.subscribe(topic, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener("delay-consumer", &log));
    c.start().await.expect("the consumer starts");

    // A warm-up message proves the consumer is pulling queue 0 (and is then reclaimed).
    let warm = send_to(&p, message(topic, "warm-up", "TagD", &[], &[]), 0).await;
    assert!(
        eventually(Duration::from_secs(10), || log.uniq_set(None).contains(&warm)).await,
        "the consumer receives an undelayed message"
    );
    assert!(
        eventually(Duration::from_secs(15), || b.live_messages() == 0).await,
        "the warm-up message is reclaimed after the commit (the client's first periodic \
         commit comes 10 s after it starts)"
    );

    let msg = rocketmq_model::common::message::message_single::Message::builder()
        .topic(topic)
        .tags("TagD")
        .body_slice(b"delayed")
        .delay_level(2)
        .build()
        .expect("a delayed message");
    let before = Instant::now();
    let uniq = send_to(&p, msg, 0).await;
    assert!(
        b.live_messages() >= 1 && b.bytes_used() > 0,
        "a delayed message counts against the memory budget while it waits"
    );
    assert!(
        eventually(Duration::from_secs(12), || log.uniq_set(None).contains(&uniq)).await,
        "the delayed message arrives"
    );
    let d = log.snapshot().into_iter().find(|d| d.uniq == uniq).expect("the delivery");
    let took = d.at.duration_since(before);
    // Never before due (the semantics); the upper bound only tells level 2 from level 3
    // (10 s) on a loaded machine, it is not a latency goal.
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(10),
        "level 2 (5 s) arrives no earlier than due, before level 3 would (10 s); took {took:?}"
    );
    assert_eq!((d.topic.as_str(), d.queue), (topic, 0), "delivered to its real topic and queue");
    assert!(d.prop("DELAY").is_none(), "the delivered message no longer carries DELAY");
    assert!(
        eventually(Duration::from_secs(5), || b.live_messages() == 0).await,
        "nothing stays in memory once the delayed message is delivered and consumed (live: {})",
        b.live_messages()
    );

    c.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Orderly consumption

/// One orderly listener call.
#[derive(Debug, Clone)]
struct Consumed {
    consumer: &'static str,
    queue: i32,
    offset: i64,
    uniq: String,
    start: Instant,
    end: Instant,
}

type ConsumedLog = std::sync::Arc<std::sync::Mutex<Vec<Consumed>>>;

fn orderly_listener(
    consumer: &'static str,
    log: &ConsumedLog,
) -> impl Fn(
    &[&MessageExt],
    &mut ConsumeOrderlyContext,
) -> rocketmq_client_rust::ClientResult<ConsumeOrderlyStatus>
       + Send
       + Sync
       + 'static {
    let log = log.clone();
    move |msgs: &[&MessageExt], _ctx: &mut ConsumeOrderlyContext| {
        let start = Instant::now();
        // Consuming takes a while, so a rebalance finds queues busy.
        std::thread::sleep(Duration::from_millis(20));
        for m in msgs {
            let d = Delivery::from_ext(consumer, "", m);
            crate::common::sync::lock(&log).push(Consumed {
                consumer,
                queue: d.queue,
                offset: d.offset,
                uniq: d.uniq,
                start,
                end: Instant::now(),
            });
        }
        Ok(ConsumeOrderlyStatus::Success)
    }
}

fn consumed_ids(log: &ConsumedLog) -> HashSet<String> {
    crate::common::sync::lock(log).iter().map(|c| c.uniq.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_orderly_consumers_when_one_joins_and_the_other_shuts_down_should_consume_each_queue_in_order_under_its_lock(
) {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("orderly");
    let (topic, group) = ("orderly_topic", "orderly_group");
    let mut p = producer(&rt, &b.namesrv, "orderly_producer").await;
    create_topic(&mut p, topic, 4).await;
    assert_eq!(b.queue_count(topic), 4);
    let log: ConsumedLog = Default::default();
    let all = [0, 1, 2, 3];

    let mut a = push_consumer(&rt, &b.namesrv, group, "orderly-a").build();
    a.subscribe(topic, "*").await.expect("subscribe");
    a.register_message_listener_orderly(orderly_listener("orderly-a", &log));
    a.start().await.expect("A starts");

    // Phase 1: A alone holds every queue.
    let mut sent = send_round(&p, topic, 4, 5, "one").await;
    assert!(
        eventually(Duration::from_secs(20), || consumed_ids(&log).len() >= sent.len()).await,
        "A consumes phase 1"
    );
    let addr = b.addr;
    let spy = tokio::task::block_in_place(|| try_lock(addr, group, "127.0.0.1@spy", topic, &all));
    assert!(spy.is_empty(), "queues locked by A are not granted to another client: {spy:?}");

    // Phase 2: B joins; the queues rebalance moves to B are consumed by B only once A has
    // released them.
    let mut bc = push_consumer(&rt, &b.namesrv, group, "orderly-b").build();
    bc.subscribe(topic, "*").await.expect("subscribe");
    bc.register_message_listener_orderly(orderly_listener("orderly-b", &log));
    bc.start().await.expect("B starts");
    assert!(
        eventually(Duration::from_secs(10), || {
            tokio::task::block_in_place(|| consumer_ids(addr, group)).len() == 2
        })
        .await,
        "the broker counts both members"
    );
    let phase2 = send_round(&p, topic, 4, 5, "two").await;
    sent.extend(phase2.iter().cloned());
    assert!(
        eventually(Duration::from_secs(30), || consumed_ids(&log).len() >= sent.len()).await,
        "phase 2 is consumed by the two members"
    );
    let spy = tokio::task::block_in_place(|| try_lock(addr, group, "127.0.0.1@spy", topic, &all));
    assert!(spy.is_empty(), "every queue is locked by A or B: {spy:?}");
    let snapshot = crate::common::sync::lock(&log).clone();
    let b_queues: HashSet<i32> =
        snapshot.iter().filter(|c| c.consumer == "orderly-b").map(|c| c.queue).collect();
    assert_eq!(b_queues.len(), 2, "B gets half of the queues once A releases them: {b_queues:?}");

    // Phase 3: A shuts down (unlocking); B takes over every lock.
    a.shutdown().await;
    let phase3 = send_round(&p, topic, 4, 5, "three").await;
    sent.extend(phase3.iter().cloned());
    assert!(
        eventually(Duration::from_secs(30), || consumed_ids(&log).len() >= sent.len()).await,
        "B consumes phase 3 after A left"
    );
    let snapshot = crate::common::sync::lock(&log).clone();
    let phase3: HashSet<&String> = phase3.iter().collect();
    let by_b: HashSet<i32> = snapshot
        .iter()
        .filter(|c| phase3.contains(&c.uniq))
        .map(|c| {
            assert_eq!(c.consumer, "orderly-b", "after A left only B consumes");
            c.queue
        })
        .collect();
    assert_eq!(by_b.len(), 4, "B took over every queue: {by_b:?}");
    let spy = tokio::task::block_in_place(|| try_lock(addr, group, "127.0.0.1@spy", topic, &all));
    assert!(spy.is_empty(), "B holds every lock: {spy:?}");

    // Per queue, across both members: in order, nothing skipped, and never two members
    // consuming one queue at the same time. A member consumes its stretch strictly in order;
    // the next holder resumes right after it, or repeats its last message: the client (like
    // the Java one) updates its offset only after releasing its consume lock, so a handover
    // can persist the offset from just before the last message.
    let mut per_queue: BTreeMap<i32, Vec<Consumed>> = BTreeMap::new();
    for c in snapshot {
        per_queue.entry(c.queue).or_default().push(c);
    }
    for (q, mut cs) in per_queue {
        cs.sort_by_key(|c| c.start);
        let seq: Vec<(&str, i64)> = cs.iter().map(|c| (c.consumer, c.offset)).collect();
        assert_eq!(seq.first().map(|s| s.1), Some(0), "queue {q} starts at 0: {seq:?}");
        assert_eq!(seq.last().map(|s| s.1), Some(14), "queue {q} ends at 14: {seq:?}");
        for w in cs.windows(2) {
            if w[0].consumer == w[1].consumer {
                assert_eq!(
                    w[1].offset,
                    w[0].offset + 1,
                    "queue {q}: {} consumes strictly in order: {seq:?}",
                    w[0].consumer
                );
            } else {
                assert!(
                    w[1].offset == w[0].offset + 1 || w[1].offset == w[0].offset,
                    "queue {q}: {} resumes where {} stopped: {seq:?}",
                    w[1].consumer,
                    w[0].consumer
                );
                assert!(
                    w[1].start >= w[0].end,
                    "queue {q}: {} started before {} finished: one lock holder at a time",
                    w[1].consumer,
                    w[0].consumer
                );
            }
        }
    }

    bc.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Broadcasting

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_broadcasting_group_of_two_when_members_pull_freeze_and_die_should_deliver_all_to_each_and_reclaim_behind_the_slowest_live_member(
) {
    if run_as_child().await {
        return;
    }
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("broadcast");
    let (topic, group) = ("broadcast_topic", format!("broadcast_group_{}", std::process::id()));
    let mut p = producer(&rt, &b.namesrv, "broadcast_producer").await;
    create_topic(&mut p, topic, 4).await;
    let log = Log::default();

    let mut a = push_consumer(&rt, &b.namesrv, &group, "bc-a")
        .message_model(MessageModel::Broadcasting)
        .build();
    a.subscribe(topic, "*").await.expect("subscribe");
    a.register_message_listener_concurrently(recording_listener("bc-a", &log));
    a.start().await.expect("A starts");
    let spec = ChildSpec {
        namesrv: b.namesrv.clone(),
        group: group.clone(),
        topic: topic.into(),
        instance: "bc-b".into(),
        broadcasting: true,
        orderly: false,
        pop: false,
    };
    let mut child = ChildConsumer::spawn(
        &test_path("given_broadcasting_group_of_two_when_members_pull_freeze_and_die_should_deliver_all_to_each_and_reclaim_behind_the_slowest_live_member"),
        &spec,
        &log,
    );
    let addr = b.addr;
    assert!(
        eventually(Duration::from_secs(20), || {
            child.is_ready()
                && tokio::task::block_in_place(|| consumer_ids(addr, &group)).len() == 2
        })
        .await,
        "both broadcasting members register (child started: {}, members: {:?})",
        child.is_ready(),
        tokio::task::block_in_place(|| consumer_ids(addr, &group))
    );

    // Both members get everything; memory returns once both pulled past it.
    let one = send_round(&p, topic, 4, 5, "one").await;
    let got = |who: &str, ids: &[String]| {
        let seen = log.uniq_set(Some(who));
        ids.iter().all(|id| seen.contains(id))
    };
    assert!(
        eventually(Duration::from_secs(15), || got("bc-a", &one) && got("bc-b", &one)).await,
        "each member receives every message"
    );
    assert!(
        eventually(Duration::from_secs(5), || b.live_messages() == 0).await,
        "memory is reclaimed after both members pulled past the messages (live: {})",
        b.live_messages()
    );

    // A frozen member is still a live member: it holds what it has not pulled.
    child.freeze();
    let two = send_round(&p, topic, 4, 5, "two").await;
    assert!(
        eventually(Duration::from_secs(10), || got("bc-a", &two)).await,
        "the running member receives everything"
    );
    let held = Instant::now() + Duration::from_secs(1);
    while Instant::now() < held {
        assert_eq!(
            b.live_messages(),
            two.len() as u64,
            "the slowest live member holds the messages it has not pulled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // It dies: it stops holding memory, and reclamation goes on with the other member.
    child.kill();
    assert!(
        eventually(Duration::from_secs(10), || b.live_messages() == 0).await,
        "a member that leaves stops holding memory (live: {})",
        b.live_messages()
    );
    let three = send_round(&p, topic, 4, 3, "three").await;
    assert!(
        eventually(Duration::from_secs(10), || got("bc-a", &three)).await,
        "the remaining member receives everything"
    );
    assert!(
        eventually(Duration::from_secs(5), || b.live_messages() == 0).await,
        "one member leaving does not stop reclamation (live: {})",
        b.live_messages()
    );
    let b_saw = log.uniq_set(Some("bc-b"));
    assert!(
        two.iter().chain(&three).all(|id| !b_saw.contains(id)),
        "the frozen member consumed nothing"
    );

    a.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// ali-ons

fn json_str<'a>(v: &'a serde_json::Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k)).and_then(|v| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_ali_ons_producer_when_it_creates_a_topic_and_sends_should_deliver_to_the_rust_consumer_with_tags_keys_and_properties(
) {
    let b = start_broker(|_| {}).await;
    let (topic, group) = ("ons_to_rust_topic", "ons_to_rust_group");
    let ns = b.namesrv.clone();
    let out = tokio::task::spawn_blocking(move || {
        run_node(
            "producer.js",
            &[
                "--namesrv",
                &ns,
                "--topic",
                topic,
                "--queues",
                "4",
                "--count",
                "3",
                "--tag",
                "TagO",
                "--key",
                "ko1",
                "--key",
                "ko2",
                "--prop",
                "orderNo=O-1",
                "--prop",
                "source=ali-ons",
                "--body",
                "hello from node",
            ],
            Duration::from_secs(30),
        )
    })
    .await
    .expect("node producer");
    assert_eq!(
        json_str(&out[0], &["created"]),
        Some(topic),
        "ali-ons creates the topic through UPDATE_AND_CREATE_TOPIC: {out:?}"
    );
    assert_eq!(b.queue_count(topic), 4, "with the queue count it asked for");
    let sent: Vec<&serde_json::Value> = out[1..].iter().collect();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|r| json_str(r, &["sendStatus"]) == Some("SEND_OK")), "{sent:?}");

    let rt = client_runtime("ons-to-rust");
    let log = Log::default();
    let mut c = push_consumer(&rt, &b.namesrv, group, "ons-reader").build();
    c.subscribe(topic, "TagO").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener("ons-reader", &log));
    c.start().await.expect("the consumer starts");
    assert!(
        eventually(Duration::from_secs(15), || log.len() >= 3).await,
        "the Rust consumer receives what ali-ons sent"
    );
    let mut got = log.snapshot();
    got.sort_by(|x, y| x.body.cmp(&y.body));
    for (i, d) in got.iter().enumerate() {
        assert_eq!(d.body, format!("hello from node #{i}"));
        assert_eq!(
            (d.prop("TAGS"), d.prop("KEYS"), d.prop("orderNo"), d.prop("source")),
            (Some("TagO"), Some("ko1 ko2"), Some("O-1"), Some("ali-ons")),
            "tags, keys and user properties from ali-ons arrive intact"
        );
        let r = sent
            .iter()
            .find(|r| json_str(r, &["body"]) == Some(d.body.as_str()))
            .expect("its send result");
        assert!(
            json_str(r, &["msgId"]).is_some_and(|id| id.eq_ignore_ascii_case(&d.msg_id)),
            "the message id ali-ons was given is the one the consumer sees ({r} vs {})",
            d.msg_id
        );
    }

    c.shutdown().await;
    b.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_rust_producer_when_ali_ons_consumes_and_retries_should_deliver_with_tags_keys_and_properties_then_redeliver_via_retry(
) {
    let b = start_broker(|_| {}).await;
    let rt = client_runtime("rust-to-ons");
    let (topic, group) = ("rust_to_ons_topic", "rust_to_ons_group");
    let mut p = producer(&rt, &b.namesrv, "rust_to_ons_producer").await;
    create_topic(&mut p, topic, 4).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let m = message(
            topic,
            &format!("hello from rust #{i}"),
            "TagN",
            &["kn1", "kn2"],
            &[("orderNo", "N-1"), ("source", "rust")],
        );
        ids.push(send(&p, m).await);
    }
    // Not subscribed: filtered out by the tag expression.
    send(&p, message(topic, "other tag", "TagX", &[], &[])).await;

    // ali-ons answers ACTION_RETRY to each first delivery (CONSUMER_SEND_MSG_BACK, delay
    // level 0 → level 3, 10 s) and exits after the three retries succeed.
    let ns = b.namesrv.clone();
    let out = tokio::task::spawn_blocking(move || {
        run_node(
            "consumer.js",
            &[
                "--namesrv",
                &ns,
                "--topic",
                topic,
                "--group",
                group,
                "--sub",
                "TagN",
                "--from-first",
                "--retry-first",
                "--count",
                "3",
                "--max-ms",
                "45000",
            ],
            Duration::from_secs(60),
        )
    })
    .await
    .expect("node consumer");
    assert!(out.iter().any(|v| v.get("ready").is_some()), "the ali-ons consumer starts: {out:?}");
    let deliveries: Vec<&serde_json::Value> =
        out.iter().filter(|v| v.get("topic").is_some()).collect();
    let uniq = |v: &serde_json::Value| json_str(v, &["props", "UNIQ_KEY"]).map(str::to_owned);
    let first: Vec<&&serde_json::Value> =
        deliveries.iter().filter(|v| v["reconsumeTimes"] == 0).collect();
    let retried: Vec<&&serde_json::Value> =
        deliveries.iter().filter(|v| v["reconsumeTimes"] == 1).collect();
    assert_eq!(first.len(), 3, "ali-ons receives the three TagN messages once: {deliveries:?}");
    assert_eq!(retried.len(), 3, "and each again after its retry: {deliveries:?}");
    assert!(deliveries.iter().all(|v| json_str(v, &["tags"]) == Some("TagN")), "TagX filtered");
    let expected: HashSet<String> = ids.into_iter().collect();
    for v in first.iter().chain(&retried) {
        assert!(uniq(v).is_some_and(|u| expected.contains(&u)), "a sent message id: {v}");
        assert_eq!(
            (
                json_str(v, &["keys"]),
                json_str(v, &["props", "orderNo"]),
                json_str(v, &["props", "source"])
            ),
            (Some("kn1 kn2"), Some("N-1"), Some("rust")),
            "keys and user properties from the Rust producer arrive intact: {v}"
        );
    }
    for v in first.iter().chain(&retried) {
        assert_eq!(json_str(v, &["topic"]), Some(topic));
    }
    assert!(first.iter().all(|v| json_str(v, &["props", "RETRY_TOPIC"]).is_none()));
    for v in &retried {
        // ali-ons shows a retry under its original topic, restored from RETRY_TOPIC.
        assert_eq!(json_str(v, &["props", "RETRY_TOPIC"]), Some(topic), "a retry: {v}");
    }

    p.shutdown().await;
    b.broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Consumers that die

/// Waits until the group's two members each own two of the four queues, stably (two probe
/// rounds in a row with the same owners); returns queue → owner.
async fn settle_two_members(
    p: &DefaultMQProducer,
    topic: &str,
    log: &Log,
    sent_per_queue: &mut [i64; 4],
) -> BTreeMap<i32, String> {
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut previous: Option<BTreeMap<i32, String>> = None;
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        let ids = send_round(p, topic, 4, 1, &format!("probe{round}")).await;
        for n in sent_per_queue.iter_mut() {
            *n += 1;
        }
        if eventually(Duration::from_secs(5), || all_delivered(log, &ids)).await {
            let owners: BTreeMap<i32, String> = log
                .snapshot()
                .into_iter()
                .filter(|d| ids.contains(&d.uniq))
                .map(|d| (d.queue, d.consumer))
                .collect();
            let distinct: HashSet<&String> = owners.values().collect();
            let balanced = owners.len() == 4
                && distinct.len() == 2
                && distinct.iter().all(|c| owners.values().filter(|o| o == c).count() == 2);
            if balanced && previous.as_ref() == Some(&owners) {
                return owners;
            }
            previous = Some(owners);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("the two members never settled on two queues each");
}

/// Waits until the group has committed everything sent so far.
async fn all_committed(addr: std::net::SocketAddr, group: &str, topic: &str, sent: &[i64; 4]) {
    let ok = eventually(Duration::from_secs(15), || {
        tokio::task::block_in_place(|| {
            (0..4).all(|q| committed_offset(addr, group, topic, q) == Some(sent[q as usize]))
        })
    })
    .await;
    assert!(ok, "the group commits every consumed message");
}

/// How the second member dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Death {
    /// `SIGKILL` while it waits in suspended pulls: no `UNREGISTER_CLIENT`, no `UNLOCK_BATCH_MQ`;
    /// the kernel closes its connection.
    Kill,
    /// `SIGSTOP`: its connection stays open but it stops heartbeating (and renewing locks), so
    /// the broker must expire it.
    Freeze,
}

/// Client expiry of the freeze scenarios. The Rust client heartbeats every 10 s at the fastest,
/// so 15 s is about the shortest expiry under which a live client stays.
const FREEZE_EXPIRY_SECS: u64 = 15;

/// Two members of one clustering group (A in this process, B in a child) settle on two queues
/// each and commit everything; B dies; everything sent afterwards reaches A exactly once.
async fn member_dies(test: &str, label: &str, death: Death, orderly: bool) {
    let b = start_broker(|c| {
        // A kill must be noticed by the connection closing, long before the default expiry.
        c.core.client_expiry_secs = if death == Death::Freeze { FREEZE_EXPIRY_SECS } else { 120 };
    })
    .await;
    let rt = client_runtime("dying");
    let (topic, group) = (format!("{label}_topic"), format!("{label}_group"));
    let (topic, group) = (topic.as_str(), group.as_str());
    let (a_name, b_name) = (format!("{label}-a"), format!("{label}-b"));
    let mut p = producer(&rt, &b.namesrv, &format!("{label}_producer")).await;
    create_topic(&mut p, topic, 4).await;
    let log = Log::default();
    let mut a = push_consumer(&rt, &b.namesrv, group, &a_name).build();
    a.subscribe(topic, "*").await.expect("subscribe");
    if orderly {
        a.register_message_listener_orderly(recording_orderly_listener(&a_name, &log));
    } else {
        a.register_message_listener_concurrently(recording_listener(&a_name, &log));
    }
    a.start().await.expect("A starts");
    let spec = ChildSpec {
        namesrv: b.namesrv.clone(),
        group: group.into(),
        topic: topic.into(),
        instance: b_name.clone(),
        broadcasting: false,
        orderly,
        pop: false,
    };
    let mut child = ChildConsumer::spawn(&test_path(test), &spec, &log);
    let mut sent = [0i64; 4];
    let owners = settle_two_members(&p, topic, &log, &mut sent).await;
    let b_queues: Vec<i32> =
        owners.iter().filter(|(_, o)| **o == b_name).map(|(q, _)| *q).collect();
    let one = send_round(&p, topic, 4, 5, "one").await;
    sent.iter_mut().for_each(|n| *n += 5);
    assert!(
        eventually(Duration::from_secs(10), || all_delivered(&log, &one)).await,
        "batch 1 is consumed"
    );
    // Settled: nothing in flight, so nothing may be delivered twice.
    all_committed(b.addr, group, topic, &sent).await;
    let addr = b.addr;
    let spy = |queues: &[i32]| {
        tokio::task::block_in_place(|| try_lock(addr, group, "127.0.0.1@spy", topic, queues))
    };
    if orderly {
        let granted = spy(&b_queues);
        assert!(granted.is_empty(), "B's queues are locked by B: {granted:?}");
    }

    // B waits in suspended pulls on its queues (everything is consumed) when it dies.
    match death {
        Death::Kill => child.kill(),
        Death::Freeze => child.freeze(),
    }
    let died = Instant::now();
    let two = send_round(&p, topic, 4, 5, "two").await;
    assert!(
        eventually(Duration::from_secs(45), || all_delivered(&log, &two)).await,
        "every message sent after B died reaches the survivor (B owned {b_queues:?})"
    );
    let took = died.elapsed();
    eprintln!("{label}: B's queues taken over {took:?} after it died");
    match death {
        // Semantic bound: a kill is noticed when the connection closes, not at the channel
        // expiry (120 s) or the lock expiry (60 s); the rest is rebalance time on 2 busy cores.
        Death::Kill => assert!(
            took < Duration::from_secs(30),
            "a killed member's queues{} are taken over once its connection closes, took {took:?}",
            if orderly { " and locks" } else { "" }
        ),
        Death::Freeze => {
            assert!(took >= Duration::from_secs(5), "B's queues wait for its expiry ({took:?})");
            // B last renewed its locks at most 20 s before it froze; the 60 s lock expiry
            // alone could not free them before 40 s.
            assert!(
                took < Duration::from_secs(35),
                "an expired member's queues{} are freed with its channel, took {took:?}",
                if orderly { " and locks" } else { "" }
            );
            assert_eq!(
                tokio::task::block_in_place(|| consumer_ids(addr, group)),
                vec![client_id(&a_name)],
                "the expired member left the group"
            );
        }
    }
    for (id, n) in delivery_counts(&log, &[one, two.clone()].concat()) {
        assert_eq!(n, 1, "message {id} is delivered once: nothing was in flight");
    }
    assert!(
        log.snapshot().iter().filter(|d| two.contains(&d.uniq)).all(|d| d.consumer == a_name),
        "only the survivor consumes after B died"
    );
    if orderly {
        let granted = spy(&[0, 1, 2, 3]);
        assert!(granted.is_empty(), "the survivor holds every lock: {granted:?}");
    }

    drop(child);
    a.shutdown().await;
    p.shutdown().await;
    b.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_member_waiting_in_long_poll_when_its_process_is_killed_should_rebalance_to_the_survivor_without_loss_or_duplicates(
) {
    if run_as_child().await {
        return;
    }
    member_dies(
        "given_member_waiting_in_long_poll_when_its_process_is_killed_should_rebalance_to_the_survivor_without_loss_or_duplicates",
        "killed",
        Death::Kill,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_member_frozen_without_unregistering_when_its_channel_expires_should_rebalance_to_the_survivor_without_loss_or_duplicates(
) {
    if run_as_child().await {
        return;
    }
    member_dies(
        "given_member_frozen_without_unregistering_when_its_channel_expires_should_rebalance_to_the_survivor_without_loss_or_duplicates",
        "frozen",
        Death::Freeze,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_orderly_member_holding_queue_locks_when_its_process_is_killed_should_free_its_locks_for_the_survivor_at_once(
) {
    if run_as_child().await {
        return;
    }
    member_dies(
        "given_orderly_member_holding_queue_locks_when_its_process_is_killed_should_free_its_locks_for_the_survivor_at_once",
        "lock_killed",
        Death::Kill,
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_orderly_member_frozen_without_unregistering_when_its_channel_expires_should_free_its_locks_for_the_survivor(
) {
    if run_as_child().await {
        return;
    }
    member_dies(
        "given_orderly_member_frozen_without_unregistering_when_its_channel_expires_should_free_its_locks_for_the_survivor",
        "lock_frozen",
        Death::Freeze,
        true,
    )
    .await;
}
