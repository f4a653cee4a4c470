//! The client driver: the real `rocketmq-client-rust` 1.0.0 (feature `bench-client`).
//!
//! * Setup: the topic is created by the raw driver's admin calls (not measured).
//! * Producers: one `DefaultMQProducer` per producer (its own client instance), shared by its
//!   lanes; `send_to_queue` (the runner picks the queue) or `send_batch` for batches, retries
//!   off, so a failure is counted rather than hidden.
//! * Consumers: one clustering `DefaultMQPushConsumer` per member, `CONSUME_FROM_FIRST_OFFSET`
//!   (the topic is fresh), a concurrent listener that forwards each message to the runner and
//!   returns `ConsumeSuccess`. The client's rebalance and its periodic offset commits are its
//!   own business, as in an application.
//!
//! Two client settings can be changed from the environment, for experiments only (the published
//! figures use the client's defaults):
//! * `BAIJI_BENCH_CLIENT_PULL_INTERVAL_MS`: the push consumer's `pull_interval` (default 0). The
//!   client 1.0.0 drops a queue's pull request for good (logging "Failed to send sharded pull
//!   request ... Capacity(Rate)") when its pull-request shard sees more than 4096 pulls a second,
//!   which a consumer that keeps up at tens of thousands of messages a second does (issue 16:
//!   each pull then returns a few messages); an interval of a few milliseconds bounds the rate.
//! * `BAIJI_BENCH_CLIENT_PULL_SHARDS`: the client's `pull_message_service_shards` (default: the
//!   cores it may use, at most 8). Fewer shards reach that limit at a lower message rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::sync::lock;
use bytes::Bytes;
use rocketmq_client_rust::{
    ClientConfig, ClientResult, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
    MessageListenerConcurrently, TelemetryHandle,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};
use tokio::sync::mpsc;

use super::raw::RawDriver;
use super::{BenchError, BenchResult, Consumer, Driver, Producer, Received, Workload};

/// The client's own runtime (it insists on one): 2 workers, as many as there are cores here,
/// and a listener lane wide enough for every member of a bench run.
static OWNER: LazyLock<Option<RuntimeOwner>> = LazyLock::new(|| {
    let mut cfg = RuntimeConfig::for_parallelism("bench-client", 2);
    cfg.max_blocking_threads = 64;
    cfg.blocking_lane_policies.metadata_io.max_concurrency = 32;
    cfg.blocking_lane_policies.metadata_io.max_queue_depth = 4096;
    RuntimeOwner::plan(cfg).ok()?.build().ok()
});

static INSTANCE: AtomicU64 = AtomicU64::new(0);

fn client_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Protocol(format!("rocketmq-client-rust {what}: {e}"))
}

fn runtime(scope: &'static str) -> BenchResult<Arc<ClientRuntime>> {
    let owner = OWNER
        .as_ref()
        .ok_or_else(|| BenchError::Protocol("cannot build the client's runtime".into()))?;
    ClientRuntime::try_new(
        owner.root_context().component(scope),
        ClientRuntimeConfig::default(),
        TelemetryHandle::noop(),
    )
    .map_err(|e| client_err("runtime", e))
}

/// A numeric setting from the environment (unset or unparsable: none).
fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

fn instance_name(kind: &str) -> String {
    format!("bench-{kind}-{}-{}", std::process::id(), INSTANCE.fetch_add(1, Ordering::Relaxed))
}

/// The rocketmq-client-rust driver for one name server.
#[derive(Debug)]
pub struct ClientDriver {
    namesrv: String,
    admin: RawDriver,
    broker_name: std::sync::Mutex<String>,
}

impl ClientDriver {
    /// A driver for the name server at `namesrv` (`host:port`).
    #[must_use]
    pub fn new(namesrv: &str) -> Self {
        ClientDriver {
            namesrv: namesrv.to_string(),
            admin: RawDriver::new(namesrv),
            broker_name: std::sync::Mutex::new(String::new()),
        }
    }
}

impl Driver for ClientDriver {
    type Producer = ClientProducer;
    type Consumer = ClientConsumer;

    async fn prepare(&self, w: &Workload) -> BenchResult<()> {
        self.admin.prepare(w).await?;
        *lock(&self.broker_name) = self.admin.broker_name()?;
        Ok(())
    }

    async fn producer(&self, w: &Workload, _id: usize) -> BenchResult<Vec<ClientProducer>> {
        let cfg = ClientConfig::builder()
            .namesrv_addr(self.namesrv.as_str())
            .instance_name(instance_name("producer").as_str())
            .client_ip("127.0.0.1")
            .build()
            .map_err(|e| client_err("config", e))?;
        let mut p = DefaultMQProducer::builder(runtime("bench-producer")?)
            .client_config(cfg)
            .producer_group("bench_producer")
            .name_server_addr(self.namesrv.as_str())
            .send_msg_timeout(10_000)
            .retry_times_when_send_failed(0)
            .build();
        p.start().await.map_err(|e| client_err("producer start", e))?;
        let p = Arc::new(p);
        let broker = lock(&self.broker_name).clone();
        Ok((0..w.lanes)
            .map(|_| ClientProducer {
                producer: Arc::clone(&p),
                topic: w.topic.clone(),
                broker: broker.clone(),
            })
            .collect())
    }

    async fn consumer(
        &self,
        w: &Workload,
        group: usize,
        _member: usize,
    ) -> BenchResult<ClientConsumer> {
        let mut cfg = ClientConfig::builder()
            .namesrv_addr(self.namesrv.as_str())
            .instance_name(instance_name("consumer").as_str())
            .client_ip("127.0.0.1");
        if let Some(shards) = env_u64("BAIJI_BENCH_CLIENT_PULL_SHARDS") {
            cfg = cfg.pull_message_service_shards(usize::try_from(shards).unwrap_or(usize::MAX));
        }
        let cfg = cfg.build().map_err(|e| client_err("config", e))?;
        let mut c = DefaultMQPushConsumer::builder(runtime("bench-consumer")?)
            .client_config(cfg)
            .consumer_group(w.group_name(group).as_str())
            .name_server_addr(self.namesrv.as_str())
            .message_model(MessageModel::Clustering)
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .consume_thread_min(1)
            .consume_thread_max(2)
            .consume_message_batch_max_size(32)
            .pull_batch_size(32)
            .pull_interval(env_u64("BAIJI_BENCH_CLIENT_PULL_INTERVAL_MS").unwrap_or(0))
            .build();
        c.subscribe(w.topic.as_str(), "*").await.map_err(|e| client_err("subscribe", e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        c.register_message_listener_concurrently(Forward { tx });
        c.start().await.map_err(|e| client_err("consumer start", e))?;
        Ok(ClientConsumer { consumer: c, rx })
    }

    async fn cleanup(&self, _w: &Workload) {}
}

/// One lane of a client producer.
pub struct ClientProducer {
    producer: Arc<DefaultMQProducer>,
    topic: String,
    broker: String,
}

impl std::fmt::Debug for ClientProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientProducer").field("topic", &self.topic).finish_non_exhaustive()
    }
}

fn message(topic: &str, body: &Bytes) -> BenchResult<Message> {
    Message::builder().topic(topic).body_slice(body).build().map_err(|e| client_err("message", e))
}

impl Producer for ClientProducer {
    async fn send(&mut self, queue: u32, msgs: &[Bytes]) -> BenchResult<()> {
        if let [one] = msgs {
            let mq =
                MessageQueue::from_parts(self.topic.as_str(), self.broker.as_str(), queue as i32);
            self.producer
                .send_to_queue(message(&self.topic, one)?, mq)
                .await
                .map_err(|e| client_err("send", e))?;
        } else {
            let batch =
                msgs.iter().map(|m| message(&self.topic, m)).collect::<BenchResult<Vec<_>>>()?;
            self.producer.send_batch(batch).await.map_err(|e| client_err("send batch", e))?;
        }
        Ok(())
    }

    async fn close(self) {
        if let Ok(mut p) = Arc::try_unwrap(self.producer) {
            p.shutdown().await;
        }
    }
}

struct Forward {
    tx: mpsc::UnboundedSender<Received>,
}

impl MessageListenerConcurrently for Forward {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _ctx: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let received_ns = super::payload::now_ns();
        for m in msgs {
            let queue = u32::try_from(m.queue_id()).unwrap_or(0);
            let payload = m.body().unwrap_or_default();
            let _ = self.tx.send(Received { queue, payload, received_ns });
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// One member of a consumer group, as a push consumer.
pub struct ClientConsumer {
    consumer: DefaultMQPushConsumer,
    rx: mpsc::UnboundedReceiver<Received>,
}

impl std::fmt::Debug for ClientConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConsumer").finish_non_exhaustive()
    }
}

impl Consumer for ClientConsumer {
    async fn poll(&mut self, out: &mut Vec<Received>, wait: Duration) -> BenchResult<()> {
        if let Ok(Some(first)) = tokio::time::timeout(wait, self.rx.recv()).await {
            out.push(first);
            while let Ok(more) = self.rx.try_recv() {
                out.push(more);
            }
        }
        Ok(())
    }

    async fn close(mut self) {
        self.consumer.shutdown().await;
    }
}
