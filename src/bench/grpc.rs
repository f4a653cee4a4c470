//! The gRPC driver: RocketMQ 5's `apache.rocketmq.v2.MessagingService`, spoken with tonic's
//! client over the protos `build.rs` compiles (features `grpc` and `bench`), as the 5.x SDKs
//! speak it to a proxy or to baiji's gRPC face.
//!
//! * Setup: the topic is created over remoting exactly as the raw driver does
//!   ([`RawDriver::prepare`](super::raw::RawDriver)), since gRPC has no admin RPC; then
//!   `QueryRoute` on the gRPC endpoint (`--grpc-endpoint`) until it lists the topic's queues.
//! * Producers: one HTTP/2 connection per producer, its lanes concurrent unary `SendMessage`
//!   calls on it (one message per call), all with the producer's `x-mq-client-id`. Before the
//!   first send the producer opens its Telemetry stream and waits for the server's answer to
//!   its `Settings` (publishing the topic), as every SDK does. The broker picks the queue (the
//!   client's `queue_id` is ignored by the proxy and by baiji), so the runner's queue choice
//!   does not reach the wire.
//! * Consumers: a SimpleConsumer per member, on its own connection, with its Settings
//!   (subscription of the group, `*`) exchanged on Telemetry when it joins. After the first
//!   poll one receive loop runs: `ReceiveMessage` (batch 32, invisible time 30 s, long polling
//!   15 s), then one `AckMessage` for the whole batch, sent together with the next receive.
//!   One loop per member, because a receive pops every queue of the broker: several loops of
//!   one client would pop the same queue concurrently and hand its messages out of order.
//!
//! Receipt is stamped as each message of the server-streamed answer is decoded and the
//! receiving task has woken with it (the rule of [`Received::received_ns`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::Request;

use super::payload::now_ns;
use super::raw::RawDriver;
use super::{
    take_batches, BenchError, BenchResult, Consumer, Driver, Producer, Received, Workload,
};
use crate::broker::grpc::pb::{
    self, messaging_service_client::MessagingServiceClient, receive_message_response::Content,
    settings::PubSub, telemetry_command, AckMessageEntry, AckMessageRequest, ClientType, Code,
    Encoding, FilterExpression, FilterType, MessageQueue, MessageType,
    NotifyClientTerminationRequest, Publishing, QueryRouteRequest, ReceiveMessageRequest, Resource,
    SendMessageRequest, Settings, Subscription, SubscriptionEntry, SystemProperties,
    TelemetryCommand,
};

const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a receive waits on the broker for messages.
const LONG_POLLING: Duration = Duration::from_secs(15);
/// How long a received batch stays invisible to others before it is acknowledged.
const INVISIBLE: Duration = Duration::from_secs(30);
const RECEIVE_BATCH: i32 = 32;
/// The counter behind message ids, unique per process.
static MESSAGE_IDS: AtomicU64 = AtomicU64::new(0);

/// The gRPC driver: a remoting name server for setup, a gRPC endpoint for the traffic.
#[derive(Debug)]
pub struct GrpcDriver {
    raw: RawDriver,
    endpoint: String,
}

impl GrpcDriver {
    /// A driver that creates topics through the name server at `namesrv` and sends and
    /// receives on the gRPC endpoint `endpoint` (`host:port`).
    #[must_use]
    pub fn new(namesrv: &str, endpoint: &str) -> Self {
        GrpcDriver { raw: RawDriver::new(namesrv), endpoint: endpoint.to_string() }
    }

    async fn channel(&self) -> BenchResult<Channel> {
        let uri = format!("http://{}", self.endpoint);
        let endpoint = Endpoint::from_shared(uri.clone())
            .map_err(|e| BenchError::Args(format!("gRPC endpoint {uri}: {e}")))?
            .connect_timeout(RPC_TIMEOUT)
            .tcp_nodelay(true);
        endpoint.connect().await.map_err(|e| {
            BenchError::io(format!("connecting to {uri}"), std::io::Error::other(e.to_string()))
        })
    }
}

/// A client of the service with its `x-mq-client-id`.
#[derive(Debug, Clone)]
struct Client {
    rpc: MessagingServiceClient<Channel>,
    id: MetadataValue<tonic::metadata::Ascii>,
}

impl Client {
    fn new(channel: Channel, id: &str) -> BenchResult<Self> {
        let id = MetadataValue::try_from(id)
            .map_err(|e| BenchError::Args(format!("client id {id:?}: {e}")))?;
        let rpc = MessagingServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Client { rpc, id })
    }

    /// `msg` as a request with the headers every SDK sends and a deadline.
    fn request<T>(&self, msg: T, timeout: Duration) -> Request<T> {
        let mut r = Request::new(msg);
        let m = r.metadata_mut();
        m.insert("x-mq-client-id", self.id.clone());
        m.insert("x-mq-language", MetadataValue::from_static("RUST"));
        m.insert("x-mq-protocol", MetadataValue::from_static("v2"));
        r.set_timeout(timeout);
        r
    }

    /// Opens Telemetry, sends `settings` and waits for the server's merged Settings. The
    /// returned sender keeps the stream open; dropping it ends the session's stream.
    async fn settle(
        &self,
        settings: Settings,
    ) -> BenchResult<(mpsc::Sender<TelemetryCommand>, JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel(4);
        let first = TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(settings)),
        };
        tx.send(first).await.map_err(|_| BenchError::Protocol("telemetry closed".into()))?;
        let mut req = Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        req.metadata_mut().insert("x-mq-client-id", self.id.clone());
        let mut incoming = self.rpc.clone().telemetry(req).await.map_err(rpc_err)?.into_inner();
        let answer = tokio::time::timeout(RPC_TIMEOUT, incoming.message())
            .await
            .map_err(|_| BenchError::Timeout("no Settings answer on Telemetry".into()))?
            .map_err(rpc_err)?;
        match answer {
            Some(TelemetryCommand {
                status,
                command: Some(telemetry_command::Command::Settings(_)),
            }) => check(status.as_ref(), "Telemetry Settings")?,
            Some(TelemetryCommand { status, .. }) => {
                check(status.as_ref(), "Telemetry")?;
                return Err(BenchError::Protocol("Telemetry answered without Settings".into()));
            }
            None => return Err(BenchError::Protocol("Telemetry ended before Settings".into())),
        }
        // Whatever the server pushes later (it pushes nothing to these clients) is read and
        // dropped, so the stream never stalls on flow control.
        let drain =
            tokio::spawn(async move { while let Ok(Some(_)) = incoming.message().await {} });
        Ok((tx, drain))
    }
}

fn rpc_err(s: tonic::Status) -> BenchError {
    BenchError::Protocol(format!("gRPC {:?}: {}", s.code(), s.message()))
}

/// An error unless `status` is RocketMQ's OK.
fn check(status: Option<&pb::Status>, what: &str) -> BenchResult<()> {
    match status {
        Some(s) if s.code == Code::Ok as i32 => Ok(()),
        Some(s) => Err(BenchError::Protocol(format!("{what}: code {} {}", s.code, s.message))),
        None => Err(BenchError::Protocol(format!("{what}: no status"))),
    }
}

fn resource(name: &str) -> Resource {
    Resource { resource_namespace: String::new(), name: name.to_string() }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn now_timestamp() -> prost_types::Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn client_id(role: &str) -> String {
    format!("127.0.0.1@bench-grpc-{}-{role}", std::process::id())
}

impl Driver for GrpcDriver {
    type Producer = GrpcProducer;
    type Consumer = GrpcConsumer;

    async fn prepare(&self, w: &Workload) -> BenchResult<()> {
        self.raw.prepare(w).await?;
        let client = Client::new(self.channel().await?, &client_id("setup"))?;
        // The route over gRPC comes from the same broker state; wait until it lists the topic.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let req = QueryRouteRequest { topic: Some(resource(&w.topic)), endpoints: None };
            let r = client
                .rpc
                .clone()
                .query_route(client.request(req, RPC_TIMEOUT))
                .await
                .map_err(rpc_err)?
                .into_inner();
            let ok = r.status.as_ref().is_some_and(|s| s.code == Code::Ok as i32);
            if ok && !r.message_queues.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(BenchError::Timeout(format!(
                    "QueryRoute never listed topic {}: {:?}",
                    w.topic, r.status
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn producer(&self, w: &Workload, id: usize) -> BenchResult<Vec<GrpcProducer>> {
        let client = Client::new(self.channel().await?, &client_id(&format!("p{id}")))?;
        let settings = Settings {
            client_type: Some(ClientType::Producer as i32),
            request_timeout: Some(duration(RPC_TIMEOUT)),
            pub_sub: Some(PubSub::Publishing(Publishing {
                topics: vec![resource(&w.topic)],
                max_body_size: 0,
                validate_message_type: true,
            })),
            ..Settings::default()
        };
        let (telemetry, drain) = client.settle(settings).await?;
        let session = Arc::new(Session { _telemetry: telemetry, drain });
        Ok((0..w.lanes)
            .map(|_| GrpcProducer {
                client: client.clone(),
                topic: w.topic.clone(),
                _session: Arc::clone(&session),
            })
            .collect())
    }

    async fn consumer(
        &self,
        w: &Workload,
        group: usize,
        member: usize,
    ) -> BenchResult<GrpcConsumer> {
        let group_name = w.group_name(group);
        let client =
            Client::new(self.channel().await?, &client_id(&format!("g{group}-m{member}")))?;
        let filter = FilterExpression { r#type: FilterType::Tag as i32, expression: "*".into() };
        let settings = Settings {
            client_type: Some(ClientType::SimpleConsumer as i32),
            request_timeout: Some(duration(RPC_TIMEOUT)),
            pub_sub: Some(PubSub::Subscription(Subscription {
                group: Some(resource(&group_name)),
                subscriptions: vec![SubscriptionEntry {
                    topic: Some(resource(&w.topic)),
                    expression: Some(filter.clone()),
                }],
                fifo: None,
                receive_batch_size: None,
                long_polling_timeout: None,
            })),
            ..Settings::default()
        };
        let (telemetry, drain) = client.settle(settings).await?;
        let (tx, rx) = mpsc::channel(64);
        Ok(GrpcConsumer {
            spec: Some(ReceiveSpec {
                client: client.clone(),
                group: group_name.clone(),
                topic: w.topic.clone(),
                filter,
            }),
            tx: Some(tx),
            rx,
            task: None,
            client,
            group: group_name,
            _session: Session { _telemetry: telemetry, drain },
        })
    }

    async fn cleanup(&self, w: &Workload) {
        self.raw.cleanup(w).await;
    }
}

/// A client's open Telemetry stream: the sender keeps it open, the task reads it.
#[derive(Debug)]
struct Session {
    _telemetry: mpsc::Sender<TelemetryCommand>,
    drain: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.drain.abort();
    }
}

/// One producer lane of the gRPC driver: a unary `SendMessage` per message, concurrent with
/// the other lanes' calls on the producer's connection.
#[derive(Debug)]
pub struct GrpcProducer {
    client: Client,
    topic: String,
    _session: Arc<Session>,
}

impl GrpcProducer {
    fn message(&self, body: &Bytes) -> pb::Message {
        // Relaxed: only uniqueness matters, which every fetch_add gives whatever the ordering;
        // no other memory is published through this counter.
        let n = MESSAGE_IDS.fetch_add(1, Ordering::Relaxed);
        pb::Message {
            topic: Some(resource(&self.topic)),
            user_properties: Default::default(),
            system_properties: Some(SystemProperties {
                // Unique per process and message, which is all the broker needs of it.
                message_id: format!("B41J1{:08X}{n:016X}", std::process::id()),
                body_encoding: Encoding::Identity as i32,
                message_type: MessageType::Normal as i32,
                born_timestamp: Some(now_timestamp()),
                born_host: "127.0.0.1".into(),
                ..SystemProperties::default()
            }),
            body: body.to_vec(),
        }
    }
}

impl Producer for GrpcProducer {
    async fn send(&mut self, _queue: u32, msgs: &[Bytes]) -> BenchResult<()> {
        let messages = msgs.iter().map(|m| self.message(m)).collect();
        let req = self.client.request(SendMessageRequest { messages }, RPC_TIMEOUT);
        let resp = self.client.rpc.send_message(req).await.map_err(rpc_err)?.into_inner();
        check(resp.status.as_ref(), "SendMessage")?;
        for e in &resp.entries {
            check(e.status.as_ref(), "SendMessage entry")?;
        }
        Ok(())
    }

    async fn close(self) {}
}

/// What a consumer's receive loop needs.
#[derive(Debug)]
struct ReceiveSpec {
    client: Client,
    group: String,
    topic: String,
    filter: FilterExpression,
}

/// One SimpleConsumer of the gRPC driver.
#[derive(Debug)]
pub struct GrpcConsumer {
    /// Until the first poll starts the receive loop with it.
    spec: Option<ReceiveSpec>,
    tx: Option<mpsc::Sender<Vec<Received>>>,
    rx: mpsc::Receiver<Vec<Received>>,
    task: Option<JoinHandle<()>>,
    /// For the goodbye (`NotifyClientTermination`).
    client: Client,
    group: String,
    /// Dropped last: ends the Telemetry stream.
    _session: Session,
}

impl Consumer for GrpcConsumer {
    async fn poll(&mut self, out: &mut Vec<Received>, wait: Duration) -> BenchResult<()> {
        if let (Some(spec), Some(tx)) = (self.spec.take(), self.tx.take()) {
            self.task = Some(tokio::spawn(receive_loop(spec, tx)));
        }
        take_batches(&mut self.rx, out, wait).await;
        Ok(())
    }

    async fn close(self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        let c = &self.client;
        let bye = NotifyClientTerminationRequest { group: Some(resource(&self.group)) };
        let mut rpc = c.rpc.clone();
        let terminate = rpc.notify_client_termination(c.request(bye, RPC_TIMEOUT));
        let _ = tokio::time::timeout(Duration::from_secs(2), terminate).await;
    }
}

/// One receive's messages, stamped, and the ack of them; `None` on a failed call. A stream
/// broken after some messages still yields them and their ack (else they would come back
/// after the invisible time as duplicates).
async fn receive_once(spec: &ReceiveSpec) -> Option<(Vec<Received>, Option<AckMessageRequest>)> {
    let req = ReceiveMessageRequest {
        group: Some(resource(&spec.group)),
        message_queue: Some(MessageQueue {
            topic: Some(resource(&spec.topic)),
            id: -1,
            permission: 0,
            broker: None,
            accept_message_types: Vec::new(),
        }),
        filter_expression: Some(spec.filter.clone()),
        batch_size: RECEIVE_BATCH,
        invisible_duration: Some(duration(INVISIBLE)),
        auto_renew: false,
        long_polling_timeout: Some(duration(LONG_POLLING)),
        attempt_id: None,
    };
    let req = spec.client.request(req, LONG_POLLING + RPC_TIMEOUT);
    let mut stream = spec.client.rpc.clone().receive_message(req).await.ok()?.into_inner();
    let mut batch = Vec::new();
    let mut entries = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(resp)) => match resp.content {
                Some(Content::Message(m)) => {
                    let received_ns = now_ns();
                    let sys = m.system_properties.unwrap_or_default();
                    entries.push(AckMessageEntry {
                        message_id: sys.message_id,
                        receipt_handle: sys.receipt_handle.unwrap_or_default(),
                        lite_topic: None,
                    });
                    batch.push(Received {
                        queue: u32::try_from(sys.queue_id).unwrap_or(0),
                        payload: Bytes::from(m.body),
                        received_ns,
                    });
                }
                // MESSAGE_NOT_FOUND after a long poll without messages is the quiet case.
                Some(Content::Status(s))
                    if s.code != Code::Ok as i32 && s.code != Code::MessageNotFound as i32 =>
                {
                    return None;
                }
                _ => {}
            },
            Ok(None) => break,
            Err(_) if batch.is_empty() => return None,
            Err(_) => break,
        }
    }
    let ack = (!entries.is_empty()).then(|| AckMessageRequest {
        group: Some(resource(&spec.group)),
        topic: Some(resource(&spec.topic)),
        entries,
    });
    Some((batch, ack))
}

async fn receive_loop(spec: ReceiveSpec, tx: mpsc::Sender<Vec<Received>>) {
    let mut ack: Option<AckMessageRequest> = None;
    loop {
        // The previous batch's ack travels with this receive, as the SDKs ack asynchronously.
        let received = match ack.take() {
            Some(a) => {
                let mut rpc = spec.client.rpc.clone();
                let req = spec.client.request(a, RPC_TIMEOUT);
                tokio::join!(rpc.ack_message(req), receive_once(&spec)).1
            }
            None => receive_once(&spec).await,
        };
        let Some((batch, next_ack)) = received else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        ack = next_ack;
        if !batch.is_empty() && tx.send(batch).await.is_err() {
            return;
        }
    }
}
