//! Shared set-up for the tests that drive baiji with the real RocketMQ client
//! (`rocketmq-client-rust` 1.0.0): one broker per test on free ports, the client runtime, and
//! helpers that record what consumers receive and which queues rebalancing gave them.
//!
//! Client facts these helpers rely on (observed with the real client; the Java and Go clients' wire
//! facts are in `docs/client-wire-facts.md`):
//! * every client needs a `ClientRuntime` built on a `RuntimeOwner`, which owns its own Tokio
//!   runtime; one static owner serves the whole test binary;
//! * push-consumer listeners run on the owner's `metadata_io` blocking lane. Its default size on
//!   a 2-core machine (4 running, 16 queued) overflows when several consumers share a process,
//!   and an overflowing consume request is treated as failed and sent back for retry ~10 s later,
//!   so the lanes are sized generously here and listeners only push into a channel;
//! * the rebalance period is read from the environment when a client instance is created, so it
//!   is shortened once, before any client exists.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, Once};
use std::time::Duration;

use baiji::broker::{BrokerConfig, RunningBroker};
use cheetah_string::CheetahString;
use rocketmq_client_rust::{
    ClientConfig, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
    MessageQueueListener, TelemetryHandle,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::{MessageConst, MessageTrait};
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;
use rocketmq_protocol::protocol::remoting_command_defaults::{
    RemotingCommandDefaults, RemotingCommandFactory,
};
use rocketmq_protocol::protocol::SerializeType;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner, ScopeId};
use tokio::sync::mpsc;

/// Generous bound for anything the tests wait for; a healthy run needs a fraction of it.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// The one runtime owner of the test binary (the client's background tasks run on it).
static OWNER: LazyLock<RuntimeOwner> = LazyLock::new(|| {
    let mut config = RuntimeConfig::for_parallelism("baiji-test-client", 4)
        .with_max_blocking_threads(256)
        .expect("a valid blocking-thread limit");
    // Listeners run here: room for every consumer of every test running at once.
    config.blocking_lane_policies.metadata_io.max_concurrency = 128;
    config.blocking_lane_policies.metadata_io.max_queue_depth = 16_384;
    config.blocking_lane_policies.metadata_io.queue_timeout = Duration::from_secs(60);
    RuntimeOwner::plan(config).expect("valid runtime config").build().expect("runtime builds")
});

static INIT: Once = Once::new();

/// Process-wide set-up, done once before the first client exists (every test module of this
/// binary goes through it, and child consumer processes inherit it): the rebalance period
/// (the client's default is 20 s; membership changes also rebalance at once, on
/// `NOTIFY_CONSUMER_IDS_CHANGED`), a private directory for the local offsets of broadcasting
/// consumers, and logging (`RUST_LOG`, default: errors only).
pub(crate) fn init() {
    INIT.call_once(|| {
        let offsets: std::path::PathBuf =
            [env!("CARGO_TARGET_TMPDIR"), "rocketmq_offsets", &std::process::id().to_string()]
                .iter()
                .collect();
        // Edition 2021: set_var is safe; this runs before any client thread reads the env.
        std::env::set_var("rocketmq.client.rebalance.waitInterval", "1000");
        std::env::set_var("rocketmq.client.rebalance.minInterval", "200");
        std::env::set_var("rocketmq.client.localOffsetStoreDir", offsets);
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        LazyLock::force(&OWNER);
    });
}

pub(crate) use crate::common::names::unique;

/// A broker on free loopback ports with its embedded name server, configured by `tweak`.
pub(crate) async fn start_broker(tweak: impl FnOnce(&mut BrokerConfig)) -> RunningBroker {
    init();
    crate::common::broker::start(crate::common::broker::loopback(), tweak).await
}

/// The name server address clients are given.
pub(crate) fn namesrv(broker: &RunningBroker) -> String {
    broker.namesrv_addr().expect("an embedded name server").to_string()
}

/// A client runtime of its own for one test (its own client-instance pool).
pub(crate) fn client_runtime(scope: &str) -> Arc<ClientRuntime> {
    init();
    let scope = ScopeId::try_new(scope.to_string()).expect("a non-blank scope");
    ClientRuntime::try_new(
        OWNER.root_context().component(scope),
        ClientRuntimeConfig::default(),
        TelemetryHandle::noop(),
    )
    .expect("a client runtime")
}

/// A client config: loopback client IP, an explicit instance name (so client ids are
/// predictable and distinct), and the shortest timers the client accepts (10 s route poll and
/// heartbeat, 1 s offset persistence).
pub(crate) fn client_config(namesrv: &str, instance: &str) -> ClientConfig {
    ClientConfig::builder()
        .namesrv_addr(namesrv)
        .client_ip("127.0.0.1")
        .instance_name(instance)
        .poll_name_server_interval(10_000)
        .heartbeat_broker_interval(10_000)
        .persist_consumer_offset_interval(1_000)
        .build()
        .expect("valid client config")
}

/// A client runtime whose commands use RocketMQ's binary header (serialize type 1) instead of
/// the process default, JSON.
pub(crate) fn client_runtime_binary(scope: &str) -> Arc<ClientRuntime> {
    init();
    let scope = ScopeId::try_new(scope.to_string()).expect("a non-blank scope");
    let version = rocketmq_model::version::CURRENT_VERSION as i32;
    ClientRuntime::try_new_with_remoting_command_factory(
        OWNER.root_context().component(scope),
        ClientRuntimeConfig::default(),
        TelemetryHandle::noop(),
        RemotingCommandFactory::new(RemotingCommandDefaults::new(version, SerializeType::ROCKETMQ)),
    )
    .expect("a client runtime")
}

/// How a test producer is built: the harnesses of this binary differ in patience and retries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProducerOptions {
    /// Send timeout, ms.
    pub(crate) send_timeout_ms: u32,
    /// Retries of a failed send (on another broker, when there is one).
    pub(crate) retries: u32,
    /// Whether it gets the tests' client config (loopback IP, an instance name from the group,
    /// short timers), or the client's defaults.
    pub(crate) client_config: bool,
    /// Whether it avoids brokers that failed (`sendLatencyFaultEnable`).
    pub(crate) latency_fault: bool,
}

/// A started producer of `group` that knows only the name server, built as `o` says.
pub(crate) async fn start_producer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
    o: ProducerOptions,
) -> DefaultMQProducer {
    let mut b = DefaultMQProducer::builder(Arc::clone(rt));
    if o.client_config {
        b = b.client_config(client_config(namesrv, &format!("{group}-producer")));
    }
    let mut p = b
        .producer_group(group)
        .name_server_addr(namesrv)
        .send_msg_timeout(o.send_timeout_ms)
        .retry_times_when_send_failed(o.retries)
        .build();
    if o.latency_fault {
        p.set_send_latency_fault_enable(true);
    }
    p.start().await.expect("the producer starts");
    p
}

/// A started producer of a group of its own.
pub(crate) async fn producer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    retries: u32,
) -> DefaultMQProducer {
    let o = ProducerOptions {
        send_timeout_ms: 10_000,
        retries,
        client_config: false,
        latency_fault: false,
    };
    start_producer(rt, namesrv, &unique("pg"), o).await
}

/// Creates `topic` with `queues` queues through the client's admin call (UPDATE_AND_CREATE_TOPIC
/// to the brokers serving `TBW102`), so consumers find its route when they start.
pub(crate) async fn create_topic(p: &mut DefaultMQProducer, topic: &str, queues: i32) {
    p.create_topic("TBW102", topic, queues, HashMap::new())
        .await
        .unwrap_or_else(|e| panic!("creating topic {topic} must succeed: {e}"));
}

/// A message as a consumer saw it.
#[derive(Debug, Clone)]
pub(crate) struct Got {
    /// Which consumer received it (the name given to [`PushConsumer::start`]).
    pub(crate) member: String,
    /// Topic (the original one for retried messages).
    pub(crate) topic: String,
    /// Queue id.
    pub(crate) queue: i32,
    /// Offset in the queue.
    pub(crate) offset: i64,
    /// The client-generated unique id (`UNIQ_KEY`), what `SendResult::msg_id` reports.
    pub(crate) uniq: String,
    /// `TAGS`.
    pub(crate) tags: Option<String>,
    /// `KEYS`.
    pub(crate) keys: Option<String>,
    /// The offset message id (store host and commit-log offset), what
    /// `SendResult::offset_msg_id` reports.
    pub(crate) offset_msg_id: String,
    /// The broker address stored in the message.
    pub(crate) store_host: String,
    /// The body.
    pub(crate) body: Vec<u8>,
    /// Times it was redelivered.
    pub(crate) reconsume_times: i32,
    /// All properties.
    pub(crate) properties: BTreeMap<String, String>,
}

impl Got {
    /// What a consumer saw of `m`.
    pub(crate) fn of(member: &str, m: &MessageExt) -> Got {
        let uniq = m
            .property(&CheetahString::from_static_str(
                MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
            ))
            .map(|s| s.to_string())
            .unwrap_or_default();
        Got {
            member: member.to_string(),
            topic: m.topic().to_string(),
            queue: m.queue_id(),
            offset: m.queue_offset(),
            uniq,
            tags: m.get_tags().map(|t| t.to_string()),
            keys: m.get_keys().map(|k| k.to_string()),
            offset_msg_id: m.msg_id().to_string(),
            store_host: m.store_host().to_string(),
            body: m.body().map(|b| b.to_vec()).unwrap_or_default(),
            reconsume_times: m.reconsume_times(),
            properties: m
                .properties()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// The body as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The latest queue assignment rebalancing gave one consumer, per topic.
#[derive(Debug, Default, Clone)]
pub(crate) struct Assignment(Arc<Mutex<HashMap<String, BTreeSet<i32>>>>);

impl Assignment {
    /// Queue ids of `topic` currently assigned.
    pub(crate) fn queues(&self, topic: &str) -> BTreeSet<i32> {
        self.0.lock().unwrap().get(topic).cloned().unwrap_or_default()
    }
}

impl MessageQueueListener for Assignment {
    fn message_queue_changed(
        &self,
        topic: &str,
        _all: &std::collections::HashSet<MessageQueue>,
        assigned: &std::collections::HashSet<MessageQueue>,
    ) {
        let ids = assigned.iter().map(MessageQueue::queue_id).collect();
        self.0.lock().unwrap().insert(topic.to_string(), ids);
    }
}

/// How a push consumer is set up.
#[derive(Debug, Clone)]
pub(crate) struct PushOptions {
    /// Group name.
    pub(crate) group: String,
    /// Subscriptions: (topic, expression).
    pub(crate) subscriptions: Vec<(String, String)>,
    /// Where a group without a committed offset starts.
    pub(crate) from: ConsumeFromWhere,
    /// Messages per listener call.
    pub(crate) batch: u32,
    /// How often the client refreshes topic routes, ms (the client allows 10 000 at least).
    pub(crate) route_poll_ms: u32,
    /// How often the client sends heartbeats to brokers, ms (10 000 at least).
    pub(crate) heartbeat_ms: u32,
}

impl PushOptions {
    /// Clustering, from the first offset, one subscription.
    pub(crate) fn new(group: &str, topic: &str, expression: &str) -> Self {
        PushOptions {
            group: group.to_string(),
            subscriptions: vec![(topic.to_string(), expression.to_string())],
            from: ConsumeFromWhere::ConsumeFromFirstOffset,
            batch: 8,
            route_poll_ms: 30_000,
            heartbeat_ms: 30_000,
        }
    }
}

/// A started clustering push consumer whose listener forwards every message to a channel.
pub(crate) struct PushConsumer {
    /// The client.
    pub(crate) consumer: DefaultMQPushConsumer,
    /// Its latest assignment.
    pub(crate) assignment: Assignment,
}

impl PushConsumer {
    /// Starts a consumer named `member` (its instance name, so its client id is unique)
    /// that sends what it receives to `tx`. One consume worker per consumer: the listener
    /// then sees each queue's messages in the order they were pulled.
    pub(crate) async fn start(
        rt: &Arc<ClientRuntime>,
        namesrv: &str,
        member: &str,
        opts: &PushOptions,
        tx: mpsc::UnboundedSender<Got>,
    ) -> PushConsumer {
        let cfg = ClientConfig::builder()
            .namesrv_addr(namesrv)
            .instance_name(member)
            .persist_consumer_offset_interval(1_000)
            .poll_name_server_interval(opts.route_poll_ms)
            .heartbeat_broker_interval(opts.heartbeat_ms)
            .build()
            .expect("a valid client config");
        let assignment = Assignment::default();
        let mut consumer = DefaultMQPushConsumer::builder(Arc::clone(rt))
            .client_config(cfg)
            .consumer_group(opts.group.as_str())
            .message_model(MessageModel::Clustering)
            .consume_from_where(opts.from)
            .consume_thread_min(1)
            .consume_thread_max(1)
            .consume_message_batch_max_size(opts.batch)
            .pull_batch_size(32)
            .message_queue_listener(Some(Arc::new(assignment.clone())))
            // Shutdown lets a listener call in progress finish (and its offset be persisted).
            .await_termination_millis_when_shutdown(10_000)
            .build();
        for (topic, expr) in &opts.subscriptions {
            consumer.subscribe(topic.as_str(), expr.as_str()).await.expect("subscribe");
        }
        let who = member.to_string();
        consumer.register_message_listener_concurrently(
            move |msgs: &[&MessageExt], _ctx: &ConsumeConcurrentlyContext| {
                for m in msgs {
                    let _ = tx.send(Got::of(&who, m));
                }
                Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
            },
        );
        consumer.start().await.expect("the push consumer starts");
        PushConsumer { consumer, assignment }
    }

    /// Stops the consumer (persists its offsets, leaves its group).
    pub(crate) async fn shutdown(mut self) {
        self.consumer.shutdown().await;
    }
}

/// Polls `cond` every few milliseconds until it holds; panics with `what` after `within`.
pub(crate) async fn wait_until<F, Fut>(within: Duration, what: &str, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polled = crate::common::wait::poll(within, Duration::from_millis(20), cond).await;
    assert!(polled.is_ok(), "timed out after {within:?} waiting until {what}");
}

/// Receives until `n` messages arrived; panics (saying what arrived) after `within`.
pub(crate) async fn receive(
    rx: &mut mpsc::UnboundedReceiver<Got>,
    n: usize,
    within: Duration,
    what: &str,
) -> Vec<Got> {
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(m)) => got.push(m),
            Ok(None) => panic!("{what}: the consumer's channel closed after {} of {n}", got.len()),
            Err(_) => {
                panic!("{what}: only {} of {n} messages arrived within {within:?}", got.len())
            }
        }
    }
    got
}

/// Everything already in the channel.
pub(crate) fn drain(rx: &mut mpsc::UnboundedReceiver<Got>) -> Vec<Got> {
    let mut got = Vec::new();
    while let Ok(m) = rx.try_recv() {
        got.push(m);
    }
    got
}

/// Waits until the broker holds no message any more (every group committed past all of them).
pub(crate) async fn wait_reclaimed(broker: &RunningBroker, what: &str) {
    let store = broker.store();
    wait_until(PATIENCE, what, || {
        let live = store.memory().live_messages;
        async move { live == 0 }
    })
    .await;
}

/// Waits until `group` committed every queue of `topic` up to its end.
pub(crate) async fn wait_committed_to_end(broker: &RunningBroker, group: &str, topic: &str) {
    let store = broker.store();
    let what = format!("group {group} committed every queue of {topic} to its end");
    wait_until(PATIENCE, &what, || {
        let done = store.topic(topic).is_some_and(|t| {
            (0..t.queue_count()).all(|q| {
                let end = t.offsets(q).map(|(_, max)| max).unwrap_or(0);
                end == 0 || store.committed(group, topic, q) == Some(end)
            })
        });
        async move { done }
    })
    .await;
}

/// Per queue, the offsets in the order they arrived.
pub(crate) fn offsets_by_queue<'a>(
    got: impl IntoIterator<Item = &'a Got>,
) -> BTreeMap<i32, Vec<i64>> {
    let mut by_queue: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for g in got {
        by_queue.entry(g.queue).or_default().push(g.offset);
    }
    by_queue
}
