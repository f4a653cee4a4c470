//! NATS JetStream with memory storage: one stream `<topic>` over the subjects `<topic>.<q>`
//! (a subject per queue), interest retention (a message is dropped once every consumer
//! acknowledged it, as baiji drops it once every group did), publish with ack (`PubAck`
//! awaited; a batch publishes all and then awaits every ack), and one durable pull consumer per
//! bench group whose members share it, each acknowledging every message explicitly.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use baiji::bench::{BenchError, BenchResult, Consumer, Driver, Producer, Received, Workload};
use bytes::Bytes;
use futures::{FutureExt, StreamExt};

fn err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Protocol(format!("nats {what}: {e}"))
}

pub(crate) struct NatsDriver {
    addr: String,
}

impl NatsDriver {
    pub(crate) fn new(addr: &str) -> Self {
        NatsDriver { addr: addr.to_string() }
    }

    async fn context(&self) -> BenchResult<jetstream::Context> {
        let client =
            async_nats::connect(self.addr.as_str()).await.map_err(|e| err("connect", e))?;
        Ok(jetstream::new(client))
    }
}

impl Driver for NatsDriver {
    type Producer = NatsProducer;
    type Consumer = NatsConsumer;

    async fn prepare(&self, w: &Workload) -> BenchResult<()> {
        let js = self.context().await?;
        let _ = js.delete_stream(&w.topic).await;
        js.create_stream(stream::Config {
            name: w.topic.clone(),
            subjects: vec![format!("{}.*", w.topic)],
            storage: stream::StorageType::Memory,
            retention: stream::RetentionPolicy::Interest,
            ..Default::default()
        })
        .await
        .map_err(|e| err("create stream", e))?;
        Ok(())
    }

    async fn producer(&self, w: &Workload, _id: usize) -> BenchResult<Vec<NatsProducer>> {
        let js = self.context().await?;
        let subjects: Vec<String> = (0..w.queues).map(|q| format!("{}.{q}", w.topic)).collect();
        Ok((0..w.lanes)
            .map(|_| NatsProducer { js: js.clone(), subjects: subjects.clone() })
            .collect())
    }

    async fn consumer(
        &self,
        w: &Workload,
        group: usize,
        _member: usize,
    ) -> BenchResult<NatsConsumer> {
        let js = self.context().await?;
        let s = js.get_stream(&w.topic).await.map_err(|e| err("get stream", e))?;
        let name = w.group_name(group);
        let c: consumer::PullConsumer = s
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    deliver_policy: consumer::DeliverPolicy::New,
                    max_ack_pending: 1_000_000,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| err("create consumer", e))?;
        Ok(NatsConsumer { consumer: c, messages: None, prefix_len: w.topic.len() + 1 })
    }

    async fn cleanup(&self, w: &Workload) {
        if let Ok(js) = self.context().await {
            let _ = js.delete_stream(&w.topic).await;
        }
    }
}

pub(crate) struct NatsProducer {
    js: jetstream::Context,
    subjects: Vec<String>,
}

impl Producer for NatsProducer {
    async fn send(&mut self, queue: u32, msgs: &[Bytes]) -> BenchResult<()> {
        let subject = self.subjects[queue as usize % self.subjects.len()].clone();
        let mut acks = Vec::with_capacity(msgs.len());
        for m in msgs {
            acks.push(
                self.js.publish(subject.clone(), m.clone()).await.map_err(|e| err("publish", e))?,
            );
        }
        for a in acks {
            a.await.map_err(|e| err("publish ack", e))?;
        }
        Ok(())
    }

    async fn close(self) {}
}

pub(crate) struct NatsConsumer {
    consumer: consumer::PullConsumer,
    messages: Option<consumer::pull::Stream>,
    prefix_len: usize,
}

impl Consumer for NatsConsumer {
    async fn poll(&mut self, out: &mut Vec<Received>, wait: Duration) -> BenchResult<()> {
        if self.messages.is_none() {
            let s = self.consumer.messages().await.map_err(|e| err("messages", e))?;
            self.messages = Some(s);
        }
        let Some(stream) = self.messages.as_mut() else { return Ok(()) };
        let first = match tokio::time::timeout(wait, stream.next()).await {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => return Ok(()),
        };
        let received_ns = baiji::bench::now_ns();
        let mut got = vec![first];
        while got.len() < 256 {
            match stream.next().now_or_never() {
                Some(Some(m)) => got.push(m),
                _ => break,
            }
        }
        for m in got {
            let m = m.map_err(|e| err("message", e))?;
            m.ack().await.map_err(|e| err("ack", e))?;
            let queue = m.subject.get(self.prefix_len..).and_then(|q| q.parse().ok()).unwrap_or(0);
            out.push(Received { queue, payload: m.payload.clone(), received_ns });
        }
        Ok(())
    }

    async fn close(self) {}
}
