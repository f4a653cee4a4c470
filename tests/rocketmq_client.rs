//! baiji driven by the real RocketMQ client (`rocketmq-client-rust` 1.0.0) over loopback: what
//! a producer is told was accepted reaches every consumer group, once per group, in queue
//! order, and the broker's memory is given back once the groups committed.
//!
//! Every test starts its own broker on free ports and uses its own topic and group names, so
//! the tests run in parallel threads of one process (sharing one client runtime owner).

#[path = "common/mod.rs"]
mod common;
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baiji::broker::RunningBroker;
use rocketmq_client_rust::{
    ClientError, ClientRuntime, DefaultLitePullConsumer, DefaultMQProducer, JavaHashCode,
    SendResult, SendStatus,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use tokio::sync::mpsc;

use support::*;

/// Queues of every topic the tests create.
const QUEUES: i32 = 4;

fn message(topic: &str, tag: Option<&str>, key: &str, body: &str) -> Message {
    let b = Message::builder().topic(topic).key(key).body_slice(body.as_bytes());
    let b = match tag {
        Some(t) => b.tags(t),
        None => b,
    };
    b.build().expect("a valid message")
}

/// What a producer was told about one message it sent.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    uniq: String,
    /// The broker's id for the stored message (store host + commit-log offset).
    offset_msg_id: String,
    queue: i32,
    offset: i64,
    tag: Option<String>,
    key: String,
    body: String,
}

impl Sent {
    fn from_result(r: &SendResult, tag: Option<&str>, key: &str, body: &str) -> Sent {
        assert_eq!(r.send_status, SendStatus::SendOk, "an accepted send reports SEND_OK");
        Sent {
            uniq: r
                .msg_id
                .as_ref()
                .expect("a send result carries the message's UNIQ_KEY")
                .to_string(),
            offset_msg_id: r.offset_msg_id.clone().expect("a send result carries the offset msgId"),
            queue: r.message_queue.as_ref().expect("a send result names its queue").queue_id(),
            offset: r.queue_offset as i64,
            tag: tag.map(str::to_string),
            key: key.to_string(),
            body: body.to_string(),
        }
    }
}

/// Sends `msg` synchronously and returns what the producer was told.
async fn send_sync(
    p: &DefaultMQProducer,
    topic: &str,
    tag: Option<&str>,
    key: &str,
    body: &str,
) -> Sent {
    let r = p
        .send(message(topic, tag, key, body))
        .await
        .unwrap_or_else(|e| panic!("a send to a healthy broker succeeds: {e}"))
        .expect("a synchronous send returns a result");
    Sent::from_result(&r, tag, key, body)
}

/// Sends `n` messages one after the other, the `i`-th with key `{key}{i}` and body `{body}{i}`.
async fn send_series(
    p: &DefaultMQProducer,
    topic: &str,
    tag: Option<&str>,
    key: &str,
    body: &str,
    n: usize,
) -> Vec<Sent> {
    let mut sent = Vec::with_capacity(n);
    for i in 0..n {
        sent.push(send_sync(p, topic, tag, &format!("{key}{i}"), &format!("{body}{i}")).await);
    }
    sent
}

/// Checks that what a group received is exactly what was sent: each message once, at the queue
/// and offset its send reported, with its tag, key and body.
fn assert_exactly_once(group: &str, sent: &[Sent], got: &[Got]) {
    let by_uniq: HashMap<&str, &Sent> = sent.iter().map(|s| (s.uniq.as_str(), s)).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    for g in got {
        let s = by_uniq
            .get(g.uniq.as_str())
            .unwrap_or_else(|| panic!("group {group} received a message nobody sent: {g:?}"));
        assert!(
            seen.insert(g.uniq.as_str()),
            "group {group} must receive each message once; {g:?} came twice"
        );
        assert_eq!(
            (g.queue, g.offset),
            (s.queue, s.offset),
            "a message arrives at the queue and offset its send reported"
        );
        assert_eq!(
            g.offset_msg_id, s.offset_msg_id,
            "the msgId a consumer decodes is the one the send reported"
        );
        assert_eq!(g.tags, s.tag, "the tag survives the broker");
        assert_eq!(g.keys.as_deref(), Some(s.key.as_str()), "the key survives the broker");
        assert_eq!(g.text(), s.body, "the body survives the broker");
    }
    assert_eq!(seen.len(), sent.len(), "group {group} must receive every accepted message");
}

/// Checks that per queue the group saw offsets in increasing order.
fn assert_queue_order(group: &str, got: &[Got]) {
    for (queue, offsets) in offsets_by_queue(got) {
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "group {group} must receive queue {queue} in offset order, got {offsets:?}"
        );
    }
}

/// A broker, a client runtime, a producer and a topic with [`QUEUES`] queues.
struct Fixture {
    broker: RunningBroker,
    rt: Arc<ClientRuntime>,
    ns: String,
    topic: String,
    producer: DefaultMQProducer,
}

impl Fixture {
    async fn new(name: &str) -> Fixture {
        Fixture::build(name, start_broker(|_| {}).await, client_runtime(name), 2, true).await
    }

    async fn with_broker(name: &str, broker: RunningBroker, retries: u32) -> Fixture {
        Fixture::build(name, broker, client_runtime(name), retries, true).await
    }

    /// A broker, a client runtime `rt` and a started producer; the topic is created with
    /// [`QUEUES`] queues when `create` is set, else the first send creates it from `TBW102`.
    async fn build(
        name: &str,
        broker: RunningBroker,
        rt: Arc<ClientRuntime>,
        retries: u32,
        create: bool,
    ) -> Fixture {
        let ns = namesrv(&broker);
        let topic = unique(&format!("{name}_topic"));
        let mut producer = producer(&rt, &ns, retries).await;
        if create {
            create_topic(&mut producer, &topic, QUEUES).await;
        }
        Fixture { broker, rt, ns, topic, producer }
    }

    async fn consumer(
        &self,
        member: &str,
        opts: &PushOptions,
    ) -> (PushConsumer, mpsc::UnboundedReceiver<Got>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (PushConsumer::start(&self.rt, &self.ns, member, opts, tx).await, rx)
    }

    async fn shutdown(mut self, consumers: Vec<PushConsumer>) {
        for c in consumers {
            c.shutdown().await;
        }
        self.producer.shutdown().await;
        self.broker.shutdown().await;
        let _ = self.rt.shutdown().await;
    }
}

/// Waits until the members of one group split the topic's queues between them: each holds
/// some, none holds one another holds, together they hold all.
async fn wait_split(group: &str, topic: &str, members: &[&PushConsumer]) {
    let what = format!("the members of {group} split the queues of {topic}");
    wait_until(PATIENCE, &what, || {
        let sets: Vec<BTreeSet<i32>> = members.iter().map(|m| m.assignment.queues(topic)).collect();
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<i32> = sets.iter().flatten().copied().collect();
        let ok = sets.iter().all(|s| !s.is_empty())
            && total == union.len()
            && union.len() == QUEUES as usize;
        async move { ok }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_groups_of_two_members_when_10000_tagged_keyed_messages_are_sent_should_deliver_each_once_per_group_in_queue_order_and_reclaim_memory(
) {
    const N: usize = 10_000;
    let mut fx = Fixture::new("ten_k").await;
    let groups = [unique("ten_k_a"), unique("ten_k_b")];
    let mut consumers = Vec::new();
    let mut rxs = Vec::new();
    for group in &groups {
        let (tx, rx) = mpsc::unbounded_channel();
        let opts = PushOptions::new(group, &fx.topic, "*");
        let one =
            PushConsumer::start(&fx.rt, &fx.ns, &format!("{group}-m1"), &opts, tx.clone()).await;
        let two = PushConsumer::start(&fx.rt, &fx.ns, &format!("{group}-m2"), &opts, tx).await;
        wait_split(group, &fx.topic, &[&one, &two]).await;
        consumers.push(one);
        consumers.push(two);
        rxs.push(rx);
    }

    // One producer, several sending tasks (sync sends, so each result is known).
    const SENDERS: usize = 4;
    let started = Instant::now();
    let producer = Arc::new(fx.producer);
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let (p, topic) = (Arc::clone(&producer), fx.topic.clone());
        tasks.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in (s..N).step_by(SENDERS) {
                let tag = ["TagA", "TagB", "TagC"][i % 3];
                sent.push(
                    send_sync(&p, &topic, Some(tag), &format!("key-{i}"), &format!("body-{i}"))
                        .await,
                );
            }
            sent
        }));
    }
    let mut sent = Vec::with_capacity(N);
    for t in tasks {
        sent.extend(t.await.expect("a sending task"));
    }
    fx.producer = Arc::into_inner(producer).expect("the sending tasks are done");
    eprintln!("sent {N} messages in {:?}", started.elapsed());

    for (group, rx) in groups.iter().zip(rxs.iter_mut()) {
        let got = receive(rx, N, PATIENCE * 2, group).await;
        assert_exactly_once(group, &sent, &got);
        assert_queue_order(group, &got);
        let mut queues_of: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
        for g in &got {
            queues_of.entry(g.member.as_str()).or_default().insert(g.queue);
        }
        assert_eq!(queues_of.len(), 2, "both members of {group} receive messages: {queues_of:?}");
        let all: Vec<i32> = queues_of.values().flatten().copied().collect();
        let distinct: BTreeSet<i32> = all.iter().copied().collect();
        assert_eq!(
            all.len(),
            distinct.len(),
            "a queue belongs to one member of {group}: {queues_of:?}"
        );
        assert_eq!(
            distinct.len(),
            QUEUES as usize,
            "the members of {group} share all queues: {queues_of:?}"
        );
    }
    eprintln!("both groups received everything after {:?}", started.elapsed());

    wait_reclaimed(&fx.broker, "every message is reclaimed once both groups committed").await;
    eprintln!("memory reclaimed after {:?}", started.elapsed());
    let mem = fx.broker.store().memory();
    assert!(mem.reclaimed_messages >= N as u64, "every message was reclaimed: {mem:?}");
    for (group, rx) in groups.iter().zip(rxs.iter_mut()) {
        let extra = drain(rx);
        assert!(extra.is_empty(), "nothing is redelivered to {group} after its commits: {extra:?}");
    }
    fx.shutdown(consumers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_synchronously_sent_messages_when_a_group_consumes_them_should_receive_each_at_the_reported_queue_and_offset(
) {
    let mut fx = Fixture::new("sync").await;
    let group = unique("sync_g");
    let mut sent = Vec::new();
    for i in 0..50 {
        let key = format!("sync-{i}");
        let body = format!("sync body {i}");
        let msg = Message::builder()
            .topic(fx.topic.as_str())
            .tags("TagS")
            .key(key.as_str())
            .body_slice(body.as_bytes())
            .raw_property("orderNo", format!("A-{i}"))
            .expect("a user property")
            .build()
            .expect("a valid message");
        let r = fx.producer.send(msg).await.expect("sync send").expect("a result");
        sent.push(Sent::from_result(&r, Some("TagS"), &key, &body));
    }
    // The offset msgId leads back to the message (VIEW_MESSAGE_BY_ID at the address it encodes),
    // while the broker retains it: before any group consumed it.
    for s in sent.iter().take(5) {
        let m = fx.producer.view_message(&fx.topic, &s.offset_msg_id).await.unwrap_or_else(|e| {
            panic!("viewing message {} by its msgId succeeds: {e}", s.offset_msg_id)
        });
        assert_eq!(
            m.body().as_deref(),
            Some(s.body.as_bytes()),
            "the message viewed by its msgId is the one sent"
        );
    }
    let (c, mut rx) = fx.consumer("sync-m", &PushOptions::new(&group, &fx.topic, "*")).await;
    let got = receive(&mut rx, sent.len(), PATIENCE, "sync sends").await;
    assert_exactly_once(&group, &sent, &got);
    assert_queue_order(&group, &got);
    let broker_addr = fx.broker.broker_addr().expect("a broker address").to_string();
    for g in &got {
        assert_eq!(g.store_host, broker_addr, "a message's store host is the broker clients reach");
    }
    for g in &got {
        let i = g.keys.as_deref().and_then(|k| k.strip_prefix("sync-")).expect("a sync key");
        assert_eq!(
            g.properties.get("orderNo").map(String::as_str),
            Some(format!("A-{i}").as_str()),
            "user properties survive the broker"
        );
    }
    wait_reclaimed(&fx.broker, "the synchronously sent messages are reclaimed").await;
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_when_messages_are_sent_asynchronously_should_report_every_callback_ok_and_deliver_each(
) {
    const N: usize = 50;
    let fx = Fixture::new("async").await;
    let group = unique("async_g");
    let (c, mut rx) = fx.consumer("async-m", &PushOptions::new(&group, &fx.topic, "*")).await;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Result<Sent, String>>();
    for i in 0..N {
        let key = format!("async-{i}");
        let body = format!("async body {i}");
        let done = done_tx.clone();
        let (k, b) = (key.clone(), body.clone());
        fx.producer
            .send_with_callback(
                message(&fx.topic, Some("TagAsync"), &key, &body),
                move |r: Option<&SendResult>, e: Option<&ClientError>| {
                    let _ = done.send(match (r, e) {
                        (Some(r), _) => Ok(Sent::from_result(r, Some("TagAsync"), &k, &b)),
                        (None, Some(e)) => Err(e.to_string()),
                        (None, None) => Err("a callback without result or error".into()),
                    });
                },
            )
            .await
            .expect("an asynchronous send is accepted for sending");
    }
    let mut sent = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while sent.len() < N {
        let r = tokio::time::timeout_at(deadline, done_rx.recv())
            .await
            .expect("every asynchronous send calls back")
            .expect("the callback channel stays open");
        sent.push(
            r.unwrap_or_else(|e| panic!("an asynchronous send to a healthy broker succeeds: {e}")),
        );
    }
    let got = receive(&mut rx, N, PATIENCE, "async sends").await;
    assert_exactly_once(&group, &sent, &got);
    assert_queue_order(&group, &got);
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_when_messages_are_sent_one_way_should_deliver_every_one_not_counted_as_rejected(
) {
    const N: usize = 200;
    let fx = Fixture::new("oneway").await;
    let group = unique("oneway_g");
    let (c, mut rx) = fx.consumer("oneway-m", &PushOptions::new(&group, &fx.topic, "*")).await;
    let mut bodies = BTreeSet::new();
    for i in 0..N {
        let body = format!("oneway body {i}");
        fx.producer
            .send_oneway(message(&fx.topic, Some("TagOneway"), &format!("oneway-{i}"), &body))
            .await
            .expect("a one-way send is written");
        bodies.insert(body);
    }
    // One-way sends get no answer: each either arrives or is counted as refused by the broker.
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() as u64 + fx.broker.oneway_rejected() < N as u64 {
        assert!(
            Instant::now() < deadline,
            "every one-way message arrives or is counted as rejected: {} arrived, {} rejected of {N}",
            got.len(),
            fx.broker.oneway_rejected()
        );
        if let Ok(Some(g)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
            got.push(g);
        }
    }
    assert_eq!(fx.broker.oneway_rejected(), 0, "a healthy broker refuses no one-way send");
    let received: BTreeSet<String> = got.iter().map(Got::text).collect();
    assert_eq!(received.len(), got.len(), "each one-way message arrives once");
    assert_eq!(received, bodies, "exactly the one-way messages sent arrive");
    assert_queue_order(&group, &got);
    wait_reclaimed(&fx.broker, "the one-way messages are reclaimed").await;
    assert!(drain(&mut rx).is_empty(), "nothing arrives twice");
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_when_a_batch_is_sent_should_deliver_all_of_it_at_consecutive_offsets_of_one_queue(
) {
    const N: usize = 32;
    let fx = Fixture::new("batch").await;
    let group = unique("batch_g");
    let (c, mut rx) = fx.consumer("batch-m", &PushOptions::new(&group, &fx.topic, "*")).await;
    let mut results = Vec::new();
    for round in 0..3 {
        let msgs: Vec<Message> = (0..N)
            .map(|i| {
                message(
                    &fx.topic,
                    Some("TagBatch"),
                    &format!("batch-{round}-{i}"),
                    &format!("batch {round} {i}"),
                )
            })
            .collect();
        let r = fx.producer.send_batch(msgs).await.expect("a batch send succeeds");
        assert_eq!(r.send_status, SendStatus::SendOk, "an accepted batch reports SEND_OK");
        results.push(r);
    }
    let mut sent = Vec::new();
    for (round, r) in results.iter().enumerate() {
        let ids: Vec<String> = r
            .msg_id
            .as_ref()
            .expect("a batch result carries the messages' ids")
            .as_str()
            .split(',')
            .map(str::to_string)
            .collect();
        assert_eq!(ids.len(), N, "a batch result names every message of the batch");
        let offset_ids: Vec<String> = r
            .offset_msg_id
            .as_ref()
            .expect("a batch result carries the stored messages' ids")
            .split(',')
            .map(str::to_string)
            .collect();
        assert_eq!(offset_ids.len(), N, "a batch result has the stored id of every message");
        let queue = r.message_queue.as_ref().expect("a queue").queue_id();
        for (i, (uniq, offset_msg_id)) in ids.into_iter().zip(offset_ids).enumerate() {
            sent.push(Sent {
                uniq,
                offset_msg_id,
                queue,
                offset: r.queue_offset as i64 + i as i64,
                tag: Some("TagBatch".into()),
                key: format!("batch-{round}-{i}"),
                body: format!("batch {round} {i}"),
            });
        }
    }
    let got = receive(&mut rx, sent.len(), PATIENCE, "batch sends").await;
    // Consecutive offsets of one queue, in the batch's order, are what `assert_exactly_once`
    // checks against the offsets derived from the first one.
    assert_exactly_once(&group, &sent, &got);
    assert_queue_order(&group, &got);
    wait_reclaimed(&fx.broker, "the batched messages are reclaimed").await;
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_when_messages_are_sent_with_a_key_selector_should_keep_each_key_on_one_queue_in_send_order(
) {
    const PER_KEY: usize = 20;
    let fx = Fixture::new("selector").await;
    let group = unique("selector_g");
    let (c, mut rx) = fx.consumer("selector-m", &PushOptions::new(&group, &fx.topic, "*")).await;
    let keys = ["order-1", "order-2", "order-3", "order-4", "order-5"];
    let mut sent = Vec::new();
    for seq in 0..PER_KEY {
        for key in keys {
            let body = format!("{key} step {seq}");
            let r = fx
                .producer
                .send_with_selector(
                    message(&fx.topic, Some("TagOrder"), key, &body),
                    |mqs: &[MessageQueue], _m: &Message, k: &String| {
                        let i = (k.as_str().java_hash_code() as i64).unsigned_abs() as usize
                            % mqs.len();
                        Some(mqs[i].clone())
                    },
                    key.to_string(),
                )
                .await
                .expect("a selector send succeeds")
                .expect("a result");
            sent.push(Sent::from_result(&r, Some("TagOrder"), key, &body));
        }
    }
    for key in keys {
        let queues: BTreeSet<i32> = sent.iter().filter(|s| s.key == key).map(|s| s.queue).collect();
        assert_eq!(queues.len(), 1, "all messages of key {key} go to one queue: {queues:?}");
    }
    let got = receive(&mut rx, sent.len(), PATIENCE, "selector sends").await;
    assert_exactly_once(&group, &sent, &got);
    for key in keys {
        let steps: Vec<String> =
            got.iter().filter(|g| g.keys.as_deref() == Some(key)).map(Got::text).collect();
        let expected: Vec<String> = (0..PER_KEY).map(|s| format!("{key} step {s}")).collect();
        assert_eq!(steps, expected, "the messages of key {key} arrive in the order they were sent");
    }
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_subscription_to_tag_a_or_tag_b_when_mixed_tags_are_sent_should_receive_exactly_the_matching_messages(
) {
    let fx = Fixture::new("tags").await;
    let group = unique("tags_g");
    // The spaced expression is the one whose codeSet rocketmq-client-rust 1.0.0 computes wrongly
    // (it hashes " TagB" and "TagA "); the broker must filter by the tag names.
    let (c, mut rx) =
        fx.consumer("tags-m", &PushOptions::new(&group, &fx.topic, "TagA || TagB")).await;
    // A second group takes what the first filters out, so reclaiming needs both.
    let other = unique("tags_c_g");
    let (c2, mut rx2) = fx.consumer("tags-c-m", &PushOptions::new(&other, &fx.topic, "TagC")).await;
    let mut sent = Vec::new();
    for i in 0..80 {
        let tag = [Some("TagA"), Some("TagB"), Some("TagC"), None][i % 4];
        sent.push(
            send_sync(&fx.producer, &fx.topic, tag, &format!("tag-{i}"), &format!("tagged {i}"))
                .await,
        );
    }
    let wanted: Vec<Sent> = sent
        .iter()
        .filter(|s| matches!(s.tag.as_deref(), Some("TagA" | "TagB")))
        .cloned()
        .collect();
    let got = receive(&mut rx, wanted.len(), PATIENCE, "tag-filtered subscription").await;
    assert_exactly_once(&group, &wanted, &got);
    assert_queue_order(&group, &got);
    let tag_c: Vec<Sent> =
        sent.iter().filter(|s| s.tag.as_deref() == Some("TagC")).cloned().collect();
    let got = receive(&mut rx2, tag_c.len(), PATIENCE, "TagC subscription").await;
    assert_exactly_once(&other, &tag_c, &got);
    // Messages the filter skipped count as consumed: once the group committed past them they
    // are reclaimed too, and nothing else arrives.
    wait_reclaimed(&fx.broker, "filtered-out messages are reclaimed with the consumed ones").await;
    let extra = drain(&mut rx);
    assert!(extra.is_empty(), "a TagA || TagB subscription receives no other tag: {extra:?}");
    let extra = drain(&mut rx2);
    assert!(extra.is_empty(), "a TagC subscription receives no other tag: {extra:?}");
    fx.shutdown(vec![c, c2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_sent_messages_when_a_lite_pull_consumer_polls_and_commits_should_receive_them_all_and_store_its_offsets(
) {
    const N: usize = 120;
    let fx = Fixture::new("lite").await;
    let group = unique("lite_g");
    let sent = send_series(&fx.producer, &fx.topic, Some("TagLite"), "lite-", "lite ", N).await;
    let consumer = DefaultLitePullConsumer::builder(Arc::clone(&fx.rt))
        .consumer_group(group.as_str())
        .name_server_addr(fx.ns.as_str())
        .instance_name("lite-m")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .pull_batch_size(16)
        .poll_timeout_millis(500)
        // The broker holds an empty pull this long; shutdown waits for the pull in flight.
        .broker_suspend_max_time_millis(1_000)
        .consumer_timeout_millis_when_suspend(5_000)
        .auto_commit(false)
        .build()
        .expect("a lite pull consumer");
    consumer.subscribe(&fx.topic).await.expect("subscribe");
    consumer.start().await.expect("the lite pull consumer starts");
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < N {
        assert!(Instant::now() < deadline, "only {} of {N} messages were polled", got.len());
        for m in consumer.poll_with_timeout(500).await {
            got.push(Got::of("lite-m", &m));
        }
    }
    let assigned = consumer.assignment().await.expect("the consumer's assignment");
    assert_eq!(
        assigned.len(),
        QUEUES as usize,
        "a lone lite pull consumer is assigned every queue"
    );
    consumer.commit_with_set(assigned.clone(), true).await;
    assert_exactly_once(&group, &sent, &got);
    assert_queue_order(&group, &got);
    wait_committed_to_end(&fx.broker, &group, &fx.topic).await;
    wait_reclaimed(&fx.broker, "messages a lite pull consumer committed are reclaimed").await;
    for q in &assigned {
        let end = got.iter().filter(|g| g.queue == q.queue_id()).count() as i64;
        assert_eq!(
            consumer.committed(q).await.expect("the committed offset"),
            end,
            "the broker answers the committed offset of queue {}",
            q.queue_id()
        );
    }
    consumer.shutdown().await;
    fx.shutdown(Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_group_that_committed_when_its_consumer_restarts_should_resume_after_the_committed_offset(
) {
    const N: usize = 200;
    let fx = Fixture::new("restart").await;
    let group = unique("restart_g");
    let opts = PushOptions::new(&group, &fx.topic, "*");

    let (first, mut rx) = fx.consumer("restart-m1", &opts).await;
    let before = send_series(&fx.producer, &fx.topic, Some("TagR"), "before-", "before ", N).await;
    let got_before = receive(&mut rx, N, PATIENCE, "before the restart").await;
    assert_exactly_once(&group, &before, &got_before);
    wait_committed_to_end(&fx.broker, &group, &fx.topic).await;
    first.shutdown().await;
    assert!(drain(&mut rx).is_empty(), "nothing is redelivered before the restart");

    let after = send_series(&fx.producer, &fx.topic, Some("TagR"), "after-", "after ", N).await;
    // A new member of the same group (ConsumeFromFirstOffset: a broker that forgot the commits
    // would make it start over).
    let (second, mut rx) = fx.consumer("restart-m2", &opts).await;
    let got_after = receive(&mut rx, N, PATIENCE, "after the restart").await;
    assert_exactly_once(&group, &after, &got_after);
    let last_before: BTreeMap<i32, i64> = offsets_by_queue(&got_before)
        .into_iter()
        .map(|(q, o)| (q, *o.last().expect("an offset")))
        .collect();
    for (q, offsets) in offsets_by_queue(&got_after) {
        let resume = last_before.get(&q).map_or(0, |o| o + 1);
        assert_eq!(
            offsets.first(),
            Some(&resume),
            "queue {q} resumes right after its committed offset"
        );
    }
    wait_committed_to_end(&fx.broker, &group, &fx.topic).await;
    wait_reclaimed(&fx.broker, "everything is reclaimed after the restarted consumer committed")
        .await;
    let extra = drain(&mut rx);
    assert!(
        extra.is_empty(),
        "the restarted consumer receives nothing it already consumed: {extra:?}"
    );
    fx.shutdown(vec![second]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_messages_sent_before_any_group_when_a_group_subscribes_from_the_first_offset_should_receive_the_retained_messages(
) {
    const N: usize = 100;
    // No group and no topic: the first send creates the topic from TBW102 (4 queues, the
    // client's defaultTopicQueueNums).
    let fx =
        Fixture::build("late", start_broker(|_| {}).await, client_runtime("late"), 2, false).await;
    let sent = send_series(&fx.producer, &fx.topic, Some("TagL"), "late-", "late ", N).await;
    let queues: BTreeSet<i32> = sent.iter().map(|s| s.queue).collect();
    assert_eq!(
        queues.len(),
        QUEUES as usize,
        "a topic created from TBW102 has the producer's 4 queues"
    );
    assert_eq!(
        fx.broker.store().memory().live_messages,
        N as u64,
        "messages no group holds are retained for a group that comes later"
    );
    let group = unique("late_g");
    let (c, mut rx) = fx.consumer("late-m", &PushOptions::new(&group, &fx.topic, "*")).await;
    let got = receive(&mut rx, N, PATIENCE, "late group").await;
    assert_exactly_once(&group, &sent, &got);
    assert_queue_order(&group, &got);
    wait_reclaimed(&fx.broker, "the retained messages are reclaimed once the late group committed")
        .await;
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_small_memory_budget_when_a_producer_sends_until_refused_should_deliver_exactly_the_accepted_messages(
) {
    const BODY: usize = 2_000; // below the client's 4 KiB compression threshold
    let broker = start_broker(|c| {
        c.core.memory_budget = 2 * 1024 * 1024;
        c.core.memory_policy = "reject".into();
    })
    .await;
    // No retries: every refusal the client reports is one refused request.
    let fx = Fixture::with_broker("budget", broker, 0).await;
    // The group joins first and its only member leaves: the group holds everything sent from
    // now on (retention of messages no group holds is time-bounded; a group's hold is not).
    let group = unique("budget_g");
    let opts = PushOptions::new(&group, &fx.topic, "*");
    let (first, _) = fx.consumer("budget-m1", &opts).await;
    let what = format!("{group} is assigned every queue");
    wait_until(PATIENCE, &what, || {
        let all = first.assignment.queues(&fx.topic).len() == QUEUES as usize;
        async move { all }
    })
    .await;
    first.shutdown().await;
    let mut accepted = Vec::new();
    let mut refused = 0u64;
    let mut i = 0usize;
    while refused < 20 {
        assert!(i < 100_000, "a 2 MiB budget must refuse sends long before {i} messages");
        let key = format!("budget-{i}");
        let body = format!("{i:08}{}", "x".repeat(BODY));
        match fx.producer.send(message(&fx.topic, Some("TagM"), &key, &body)).await {
            Ok(Some(r)) => {
                assert_eq!(
                    refused, 0,
                    "once the budget is exhausted and nobody consumes, every send is refused"
                );
                accepted.push(Sent::from_result(&r, Some("TagM"), &key, &body));
            }
            Ok(None) => panic!("a synchronous send returns a result"),
            Err(e) => {
                assert_eq!(
                    e.broker_response_code(),
                    Some(2),
                    "a send refused for lack of memory is answered SYSTEM_BUSY: {e}"
                );
                refused += 1;
            }
        }
        i += 1;
    }
    assert!(!accepted.is_empty(), "the budget holds some messages before it refuses");
    assert_eq!(fx.broker.sends_rejected(), refused, "the broker counts every refused send");
    assert_eq!(
        fx.broker.store().memory().live_messages,
        accepted.len() as u64,
        "the broker holds exactly the accepted messages"
    );

    let (c, mut rx) = fx.consumer("budget-m2", &opts).await;
    let got = receive(&mut rx, accepted.len(), PATIENCE, "accepted messages").await;
    assert_exactly_once(&group, &accepted, &got);
    wait_reclaimed(&fx.broker, "the accepted messages are reclaimed once consumed").await;
    assert!(drain(&mut rx).is_empty(), "no message arrives that was refused or already consumed");
    // With the memory back, the broker accepts again.
    send_sync(&fx.producer, &fx.topic, Some("TagM"), "after", "after the budget was reclaimed")
        .await;
    fx.shutdown(vec![c]).await;
}

/// `len` bytes of lowercase letters from a fixed pseudo-random sequence: the client compresses
/// bodies of 4 KiB and more, and these stay large when compressed.
fn noisy_body(len: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            char::from(b'a' + ((x >> 33) % 26) as u8)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_bodies_above_the_compression_threshold_when_sent_should_arrive_unchanged() {
    let fx = Fixture::new("large").await;
    let group = unique("large_g");
    let (c, mut rx) = fx.consumer("large-m", &PushOptions::new(&group, &fx.topic, "*")).await;
    let bodies = [
        "compressible ".repeat(400),    // ~5 KiB, shrinks a lot
        noisy_body(200 * 1024, 1),      // 200 KiB
        noisy_body(3 * 1024 * 1024, 2), // 3 MiB: above the pull's 256 KiB budget on its own
        "small".to_string(),
    ];
    let mut sent = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        sent.push(
            send_sync(&fx.producer, &fx.topic, Some("TagBig"), &format!("big-{i}"), body).await,
        );
    }
    let got = receive(&mut rx, sent.len(), PATIENCE, "large bodies").await;
    assert_exactly_once(&group, &sent, &got);
    wait_reclaimed(&fx.broker, "large messages are reclaimed").await;
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_clients_using_the_binary_header_when_they_send_and_consume_should_deliver_every_message(
) {
    let broker = start_broker(|_| {}).await;
    let fx = Fixture::build("binary", broker, client_runtime_binary("binary"), 2, true).await;
    let group = unique("binary_g");
    let (c, mut rx) =
        fx.consumer("binary-m", &PushOptions::new(&group, &fx.topic, "TagA || TagB")).await;
    let mut sent = Vec::new();
    for i in 0..60 {
        let tag = ["TagA", "TagB", "TagC"][i % 3];
        sent.push(
            send_sync(
                &fx.producer,
                &fx.topic,
                Some(tag),
                &format!("bin-{i}"),
                &format!("binary {i}"),
            )
            .await,
        );
    }
    let wanted: Vec<Sent> = sent.into_iter().filter(|s| s.tag.as_deref() != Some("TagC")).collect();
    let got = receive(&mut rx, wanted.len(), PATIENCE, "binary-header clients").await;
    assert_exactly_once(&group, &wanted, &got);
    assert_queue_order(&group, &got);
    wait_reclaimed(&fx.broker, "messages consumed by binary-header clients are reclaimed").await;
    assert!(drain(&mut rx).is_empty(), "nothing arrives twice or outside the subscription");
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_members_when_one_leaves_mid_stream_should_lose_nothing_and_redeliver_only_what_it_had_received(
) {
    const N: usize = 2_000;
    let mut fx = Fixture::new("leave").await;
    let group = unique("leave_g");
    let opts = PushOptions::new(&group, &fx.topic, "*");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stays = PushConsumer::start(&fx.rt, &fx.ns, "leave-stays", &opts, tx.clone()).await;
    let leaves = PushConsumer::start(&fx.rt, &fx.ns, "leave-leaves", &opts, tx).await;
    wait_split(&group, &fx.topic, &[&stays, &leaves]).await;

    let producer = Arc::new(fx.producer);
    let sender = {
        let (p, topic) = (Arc::clone(&producer), fx.topic.clone());
        tokio::spawn(async move {
            let mut sent = Vec::with_capacity(N);
            for i in 0..N {
                sent.push(
                    send_sync(
                        &p,
                        &topic,
                        Some("TagL"),
                        &format!("leave-{i}"),
                        &format!("leave {i}"),
                    )
                    .await,
                );
            }
            sent
        })
    };
    // The leaving member goes while messages flow.
    let mut got: Vec<Got> = Vec::new();
    while got.iter().filter(|g| g.member == "leave-leaves").count() < 100 {
        got.extend(receive(&mut rx, 1, PATIENCE, "before the leave").await);
    }
    leaves.shutdown().await;
    // What it received before its shutdown returned may still be in the channel.
    got.extend(drain(&mut rx));
    let left_at = got.len();
    let what = format!("the remaining member of {group} takes over every queue");
    wait_until(PATIENCE, &what, || {
        let all = stays.assignment.queues(&fx.topic).len() == QUEUES as usize;
        async move { all }
    })
    .await;
    let sent = sender.await.expect("the sending task");
    fx.producer = Arc::into_inner(producer).expect("the sending task is done");

    let wanted: HashSet<String> = sent.iter().map(|s| s.uniq.clone()).collect();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let distinct: HashSet<String> = got.iter().map(|g| g.uniq.clone()).collect();
        if distinct == wanted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every message reaches the group after a member left: {} of {N} arrived",
            distinct.len()
        );
        if let Ok(Some(g)) = tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
            got.push(g);
        }
    }
    wait_committed_to_end(&fx.broker, &group, &fx.topic).await;
    got.extend(drain(&mut rx));
    let by_uniq: HashMap<&str, &Sent> = sent.iter().map(|s| (s.uniq.as_str(), s)).collect();
    let received_by_leaver: HashSet<&str> = got[..left_at]
        .iter()
        .filter(|g| g.member == "leave-leaves")
        .map(|g| g.uniq.as_str())
        .collect();
    let mut seen = HashSet::new();
    for (i, g) in got.iter().enumerate() {
        let s = by_uniq
            .get(g.uniq.as_str())
            .unwrap_or_else(|| panic!("a message nobody sent arrived: {g:?}"));
        assert_eq!(
            (g.queue, g.offset),
            (s.queue, s.offset),
            "a message arrives where its send put it"
        );
        if i >= left_at {
            assert_eq!(g.member, "leave-stays", "a member that left receives nothing more");
        }
        if !seen.insert(g.uniq.as_str()) {
            assert!(
                received_by_leaver.contains(g.uniq.as_str()),
                "only messages the leaving member had received may arrive twice: {g:?}"
            );
        }
    }
    for member in ["leave-stays", "leave-leaves"] {
        let mine: Vec<Got> = got.iter().filter(|g| g.member == member).cloned().collect();
        assert_queue_order(member, &mine);
    }
    fx.shutdown(vec![stays]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_messages_every_group_consumed_when_a_new_group_subscribes_from_the_first_offset_should_start_at_the_oldest_retained_message(
) {
    const N: usize = 100;
    let fx = Fixture::new("reclaimed").await;
    let first_group = unique("reclaimed_a");
    let (first, mut first_rx) =
        fx.consumer("reclaimed-a", &PushOptions::new(&first_group, &fx.topic, "*")).await;
    let old = send_series(&fx.producer, &fx.topic, Some("TagO"), "old-", "old ", N).await;
    let got = receive(&mut first_rx, N, PATIENCE, "the first group").await;
    assert_exactly_once(&first_group, &old, &got);
    wait_reclaimed(&fx.broker, "the only group committed everything").await;

    // A new group starts from the first offset: what was reclaimed is gone (baiji keeps
    // messages in memory only while some group needs them), what comes next is delivered.
    let second_group = unique("reclaimed_b");
    let (second, mut second_rx) =
        fx.consumer("reclaimed-b", &PushOptions::new(&second_group, &fx.topic, "*")).await;
    let what = format!("{second_group} is assigned every queue");
    wait_until(PATIENCE, &what, || {
        let all = second.assignment.queues(&fx.topic).len() == QUEUES as usize;
        async move { all }
    })
    .await;
    let new = send_series(&fx.producer, &fx.topic, Some("TagN"), "new-", "new ", N).await;
    let got = receive(&mut second_rx, N, PATIENCE, "the new group").await;
    assert_exactly_once(&second_group, &new, &got);
    assert_queue_order(&second_group, &got);
    let got = receive(&mut first_rx, N, PATIENCE, "the first group, again").await;
    assert_exactly_once(&first_group, &new, &got);
    wait_reclaimed(&fx.broker, "both groups committed the new messages").await;
    assert!(drain(&mut second_rx).is_empty(), "the new group receives nothing twice");
    assert!(drain(&mut first_rx).is_empty(), "the first group receives nothing twice");
    fx.shutdown(vec![first, second]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_consumer_started_before_its_topic_exists_when_a_producer_creates_it_should_receive_everything_sent(
) {
    const N: usize = 50;
    let fx = Fixture::build("early", start_broker(|_| {}).await, client_runtime("early"), 2, false)
        .await;
    let group = unique("early_g");
    let mut opts = PushOptions::new(&group, &fx.topic, "*");
    // The consumer learns the new topic's route at its next route refresh.
    opts.route_poll_ms = 10_000;
    let (c, mut rx) = fx.consumer("early-m", &opts).await;
    let sent = send_series(&fx.producer, &fx.topic, Some("TagE"), "early-", "early ", N).await;
    let got =
        receive(&mut rx, N, PATIENCE, "a consumer that subscribed before the topic existed").await;
    assert_exactly_once(&group, &sent, &got);
    assert_queue_order(&group, &got);
    wait_reclaimed(&fx.broker, "the messages are reclaimed once the early group committed").await;
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_restarted_empty_when_its_consumer_resynchronises_should_deliver_what_is_sent_next(
) {
    const N: usize = 40;
    let fx = Fixture::new("restart_broker").await;
    let group = unique("restart_broker_g");
    let mut opts = PushOptions::new(&group, &fx.topic, "*");
    // The new broker learns the group from its next heartbeat.
    opts.heartbeat_ms = 10_000;
    let (c, mut rx) = fx.consumer("restart-broker-m", &opts).await;
    let before = send_series(&fx.producer, &fx.topic, Some("TagB1"), "b1-", "first life ", N).await;
    let got = receive(&mut rx, N, PATIENCE, "before the broker restart").await;
    assert_exactly_once(&group, &before, &got);

    // The broker stops (its messages and offsets are gone) and a new one takes its ports.
    let (broker_addr, namesrv_addr) = (fx.broker.broker_addr(), fx.broker.namesrv_addr());
    let Fixture { broker, rt, ns, topic, producer: old_producer } = fx;
    broker.shutdown().await;
    let broker = start_broker(|c| {
        c.remoting.listen = broker_addr.expect("the old broker's address");
        c.remoting.namesrv_listen = namesrv_addr;
    })
    .await;
    // A fresh producer (the old one's connections died with the broker: rocketmq-client-rust
    // 1.0.0 sometimes keeps using a closed name-server connection until its requests time out).
    let mut old_producer = old_producer;
    let _ = tokio::time::timeout(PATIENCE, old_producer.shutdown()).await;
    let mut producer = support::producer(&rt, &ns, 2).await;
    create_topic(&mut producer, &topic, QUEUES).await;
    let fx = Fixture { broker, rt, ns, topic, producer };
    // The consumer still holds its old offsets; pulling beyond the new, empty queues moves it
    // back to 0, which it commits. Only then can new messages not be skipped.
    let store = fx.broker.store();
    let what = format!("{group} moved back to offset 0 on every queue of the new broker");
    wait_until(PATIENCE, &what, || {
        let done = (0..QUEUES as u32).all(|q| store.committed(&group, &fx.topic, q) == Some(0));
        async move { done }
    })
    .await;
    let after = send_series(&fx.producer, &fx.topic, Some("TagB2"), "b2-", "second life ", N).await;
    let got = receive(&mut rx, N, PATIENCE, "after the broker restart").await;
    assert_exactly_once(&group, &after, &got);
    assert_queue_order(&group, &got);
    wait_reclaimed(&fx.broker, "the new broker reclaims what the consumer committed").await;
    fx.shutdown(vec![c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_messages_sent_before_any_group_when_a_group_subscribes_from_the_last_offset_should_still_receive_them(
) {
    // RocketMQ answers offset 0 to a group without a committed offset while the queue was never
    // trimmed, so even a group that asks for the LAST offset starts at the beginning.
    const N: usize = 40;
    let fx = Fixture::new("late_last").await;
    let sent = send_series(&fx.producer, &fx.topic, Some("TagLL"), "ll-", "from last ", N).await;
    let group = unique("late_last_g");
    let mut opts = PushOptions::new(&group, &fx.topic, "*");
    opts.from = ConsumeFromWhere::ConsumeFromLastOffset;
    let (c, mut rx) = fx.consumer("late-last-m", &opts).await;
    let got = receive(&mut rx, N, PATIENCE, "a late group consuming from the last offset").await;
    assert_exactly_once(&group, &sent, &got);
    assert_queue_order(&group, &got);
    fx.shutdown(vec![c]).await;
}

// The admin codes a running client sees (resetOffsetByTime), issue 15.
#[path = "rocketmq_client/admin.rs"]
mod admin;

// Retries, dead letters, delay levels, orderly locks, broadcasting, ali-ons and dying members
// (the "broker completeness" scenarios). `#[path]`: a test target's root looks for modules in
// `tests/`, where cargo would also take them for test targets of their own.
#[path = "rocketmq_client/completeness_support.rs"]
mod completeness_support;

#[path = "rocketmq_client/completeness.rs"]
mod completeness;

// Timer messages (RocketMQ 5: TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS), issue 12.
#[path = "rocketmq_client/timers.rs"]
mod timers;

// Cluster membership: baiji brokers under a real rocketmq-namesrv and under baiji's own name
// server (issue 6).
#[path = "rocketmq_client/cluster.rs"]
mod cluster;
#[path = "rocketmq_client/cluster_support.rs"]
mod cluster_support;
// Replicated broker sets under the real client (issue 27).
#[cfg(feature = "replicas")]
#[path = "rocketmq_client/replicas.rs"]
mod replicas;

// Transactional messages: commit, rollback, check-back, a producer that leaves (issue 12).
#[path = "rocketmq_client/transactions.rs"]
mod transactions;
// SQL92 selectors (issue 12): broker-side filtering by message properties.
#[path = "rocketmq_client/sql92.rs"]
mod sql92;

// RocketMQ plain ACL with the client's AclClientRPCHook (issue 17).
#[path = "rocketmq_client/acl.rs"]
mod acl;

// gRPC and remoting clients on one broker (tests/rocketmq_client/grpc_interop.rs).
#[cfg(feature = "grpc")]
#[path = "rocketmq_client/grpc_interop.rs"]
mod grpc_interop;

// TLS on the remoting port, with the client's enable_tls (issue 17).
#[path = "rocketmq_client/tls.rs"]
mod tls;

// POP consumption (issue 13): push consumers with client-side rebalancing off.
#[path = "rocketmq_client/pop.rs"]
mod pop;
