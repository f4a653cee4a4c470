//! The raw driver: RocketMQ's remoting protocol spoken directly with baiji's own codec, the same
//! minimal client for every RocketMQ broker (baiji, rocketmq-broker, a Java broker).
//!
//! * Setup: `GET_BROKER_CLUSTER_INFO` on the name server, `UPDATE_AND_CREATE_TOPIC` on the
//!   first master, then `GET_ROUTEINFO_BY_TOPIC` until the route shows the topic.
//! * Producers: `SEND_MESSAGE_V2` (one message) or `SEND_BATCH_MESSAGE`, V2 header, to the
//!   queue the runner picks. A producer with one lane owns its socket and does a plain
//!   write-then-read per request; with several lanes they share one pipelined connection.
//! * Consumers: `HEART_BEAT` with the subscription (as a push consumer), queues divided among
//!   members by `queue % members`, start offset from `QUERY_CONSUMER_OFFSET` or else
//!   `GET_MAX_OFFSET`, then one long-polling `PULL_MESSAGE` loop per queue (suspend 15 s, 32
//!   messages, consumed offset committed in the next pull), all pipelined on the member's
//!   connection, as the real clients do.
//! * With `--consume pop`: the same heartbeat and queue division, then one long-polling
//!   `POP_MESSAGE` loop per queue (poll 15 s, 32 messages, 60 s invisible), each batch
//!   acknowledged by one `BATCH_ACK_MESSAGE` (the Rust client's byte-array bitset) sent together
//!   with the next pop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::payload::now_ns;
use super::{
    take_batches, BenchError, BenchResult, ConsumeMode, Consumer, Driver, Producer, Received,
    Workload,
};
use crate::remoting::body::{
    AckBits, BatchAck, BatchAckMessageRequestBody, ClusterInfo, ConsumeFromWhere, ConsumeType,
    ConsumerData, ExpressionType, HeartbeatData, JsonBody, MessageModel, SubscriptionData,
    TopicRouteData, MASTER_ID,
};
use crate::remoting::client::{ClientError, Connection, Pipeline, PipelineOptions};
use crate::remoting::code::{request_code as rc, response_code};
use crate::remoting::header::{
    pull_sys_flag, CreateTopicRequestHeader, FromExtFields, GetMaxOffsetRequestHeader,
    GetRouteInfoRequestHeader, OffsetResponseHeader, PopMessageRequestHeader,
    PopMessageResponseHeader, PullMessageRequestHeader, PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader, SendHeaderVersion, SendMessageRequestHeader, ToExtFields,
    UnregisterClientRequestHeader,
};
use crate::remoting::message::{decode_records, encode_batch_entry};
use crate::remoting::{ExtFields, RemotingCommand};
use crate::sync::lock;

const RPC_TIMEOUT: Duration = Duration::from_secs(30);
const SUSPEND_MS: i64 = 15_000;
const PULL_BATCH: i32 = 32;
const PRODUCER_GROUP: &str = "bench_producer";
/// Properties of every sent message: what a client sends at least.
const PROPERTIES: &str = "WAIT\u{1}true";

/// The raw protocol driver for one name server.
#[derive(Debug)]
pub struct RawDriver {
    namesrv: String,
    route: Mutex<Option<BrokerRoute>>,
}

#[derive(Debug, Clone)]
struct BrokerRoute {
    addr: String,
    name: String,
}

impl RawDriver {
    /// A driver for the name server at `namesrv` (`host:port`).
    #[must_use]
    pub fn new(namesrv: &str) -> Self {
        RawDriver { namesrv: namesrv.to_string(), route: Mutex::new(None) }
    }

    /// Name of the broker [`Driver::prepare`] found.
    ///
    /// # Errors
    ///
    /// [`BenchError::Protocol`] before a successful `prepare`.
    pub fn broker_name(&self) -> BenchResult<String> {
        self.broker().map(|b| b.name)
    }

    fn broker(&self) -> BenchResult<BrokerRoute> {
        lock(&self.route)
            .clone()
            .ok_or_else(|| BenchError::Protocol("prepare() has not found a broker".into()))
    }
}

fn expect_ok(resp: &RemotingCommand, what: &str) -> BenchResult<()> {
    if resp.code == response_code::SUCCESS {
        Ok(())
    } else {
        Err(BenchError::Protocol(format!(
            "{what}: code {} {}",
            resp.code,
            resp.remark.as_deref().unwrap_or("")
        )))
    }
}

fn header_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Protocol(format!("{what}: {e}"))
}

impl Driver for RawDriver {
    type Producer = RawProducer;
    type Consumer = RawConsumer;

    async fn prepare(&self, w: &Workload) -> BenchResult<()> {
        let mut ns = Direct::connect(&self.namesrv).await?;
        // A broker that just started may not have registered yet: ask for up to a minute.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let (name, addr) = loop {
            let info = ns.call(RemotingCommand::request(rc::GET_BROKER_CLUSTER_INFO, 0)).await?;
            expect_ok(&info, "GET_BROKER_CLUSTER_INFO")?;
            let info = ClusterInfo::from_json_slice(&info.body)
                .map_err(|e| header_err("cluster info body", e))?;
            let master = info.broker_addr_table.values().find_map(|b| {
                b.broker_addrs.get(&MASTER_ID).map(|a| (b.broker_name.clone(), a.clone()))
            });
            match master {
                Some(m) => break m,
                None if tokio::time::Instant::now() > deadline => {
                    return Err(BenchError::Timeout(
                        "no broker registered with the name server".into(),
                    ))
                }
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let mut broker = Direct::connect(&addr).await?;
        let create = CreateTopicRequestHeader::read_write(
            &w.topic,
            i32::try_from(w.queues).unwrap_or(i32::MAX),
        );
        let resp = broker
            .call(
                RemotingCommand::request(rc::UPDATE_AND_CREATE_TOPIC, 0)
                    .with_ext_fields(create.to_ext_fields()),
            )
            .await?;
        expect_ok(&resp, "UPDATE_AND_CREATE_TOPIC")?;
        // The broker tells the name server; wait until the route shows the topic.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let h = GetRouteInfoRequestHeader { topic: &w.topic, accept_standard_json_only: true };
            let r = ns
                .call(
                    RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC, 0)
                        .with_ext_fields(h.to_ext_fields()),
                )
                .await?;
            if r.code == response_code::SUCCESS {
                let route = TopicRouteData::from_json_slice(&r.body)
                    .map_err(|e| header_err("route body", e))?;
                if route.queue_datas.iter().any(|q| q.write_queue_nums >= w.queues) {
                    let addr = route
                        .broker_datas
                        .iter()
                        .find_map(|b| b.broker_addrs.get(&MASTER_ID).cloned())
                        .unwrap_or(addr);
                    *lock(&self.route) = Some(BrokerRoute { addr, name });
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(BenchError::Timeout(format!(
                    "route of topic {} never appeared",
                    w.topic
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn producer(&self, w: &Workload, _id: usize) -> BenchResult<Vec<RawProducer>> {
        let b = self.broker()?;
        let base = SendBase { topic: w.topic.clone(), broker_name: b.name.clone() };
        if w.lanes == 1 {
            let conn = Direct::connect(&b.addr).await?;
            return Ok(vec![RawProducer { conn: ProducerConn::Direct(conn), base }]);
        }
        let mux = Arc::new(Mux::connect(&b.addr).await?);
        Ok((0..w.lanes)
            .map(|_| RawProducer { conn: ProducerConn::Mux(Arc::clone(&mux)), base: base.clone() })
            .collect())
    }

    async fn consumer(
        &self,
        w: &Workload,
        group: usize,
        member: usize,
    ) -> BenchResult<RawConsumer> {
        let b = self.broker()?;
        let group_name = w.group_name(group);
        let client_id = format!("127.0.0.1@bench-{}-g{group}-m{member}", std::process::id());
        let sub_version = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
        )
        .unwrap_or(0);
        let subscription = SubscriptionData {
            class_filter_mode: false,
            topic: w.topic.clone(),
            sub_string: "*".into(),
            tags_set: Vec::new(),
            code_set: Vec::new(),
            sub_version,
            expression_type: ExpressionType::Tag,
        };
        let info = running_info(&self.namesrv, &subscription, sub_version)?;
        let mux = Arc::new(Mux::connect_as(&b.addr, Some((group_name.clone(), info))).await?);
        let hb = HeartbeatData {
            client_id: client_id.clone(),
            producer_data_set: Vec::new(),
            consumer_data_set: vec![ConsumerData {
                group_name: group_name.clone(),
                consume_type: ConsumeType::ConsumePassively,
                message_model: MessageModel::Clustering,
                consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
                subscription_data_set: vec![subscription],
                unit_mode: false,
            }],
            heartbeat_fingerprint: 0,
            without_sub: false,
        };
        let hb_body = hb.to_json_bytes().map_err(|e| header_err("heartbeat body", e))?;
        let heartbeat = RemotingCommand::request(rc::HEART_BEAT, 0).with_body(hb_body);
        expect_ok(&mux.call(heartbeat.clone()).await?, "HEART_BEAT")?;
        let keepalive = {
            let mux = Arc::clone(&mux);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    if mux.call(heartbeat.clone()).await.is_err() {
                        return;
                    }
                }
            })
        };
        let mut queues = Vec::new();
        for q in (0..w.queues).filter(|q| *q as usize % w.members == member) {
            let qid = i32::try_from(q).unwrap_or(i32::MAX);
            let h = QueryConsumerOffsetRequestHeader {
                consumer_group: &group_name,
                topic: &w.topic,
                queue_id: qid,
                set_zero_if_not_found: false,
            };
            let r = mux
                .call(
                    RemotingCommand::request(rc::QUERY_CONSUMER_OFFSET, 0)
                        .with_ext_fields(h.to_ext_fields()),
                )
                .await?;
            let offset = if r.code == response_code::SUCCESS {
                OffsetResponseHeader::from_ext_fields(&r.ext_fields)
                    .map_err(|e| header_err("QUERY_CONSUMER_OFFSET", e))?
                    .offset
            } else {
                let h =
                    GetMaxOffsetRequestHeader { topic: &w.topic, queue_id: qid, committed: true };
                let r = mux
                    .call(
                        RemotingCommand::request(rc::GET_MAX_OFFSET, 0)
                            .with_ext_fields(h.to_ext_fields()),
                    )
                    .await?;
                expect_ok(&r, "GET_MAX_OFFSET")?;
                OffsetResponseHeader::from_ext_fields(&r.ext_fields)
                    .map_err(|e| header_err("GET_MAX_OFFSET", e))?
                    .offset
            };
            queues.push((q, offset.max(0)));
        }
        let (tx, rx) = mpsc::channel(64);
        Ok(RawConsumer {
            mux,
            spec: Arc::new(PullSpec {
                topic: w.topic.clone(),
                group: group_name,
                sub_version,
                pop: w.consume == ConsumeMode::Pop,
                broker_name: b.name.clone(),
            }),
            client_id,
            queues,
            tx: Some(tx),
            rx,
            tasks: vec![keepalive],
        })
    }

    async fn cleanup(&self, _w: &Workload) {}
}

#[derive(Debug, Clone)]
struct SendBase {
    topic: String,
    broker_name: String,
}

impl SendBase {
    fn command(&self, queue: u32, msgs: &[Bytes]) -> RemotingCommand {
        let born = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(0))
            .unwrap_or(0);
        let batch = msgs.len() > 1;
        let h = SendMessageRequestHeader {
            producer_group: PRODUCER_GROUP,
            topic: &self.topic,
            default_topic: "TBW102",
            default_topic_queue_nums: 4,
            queue_id: i32::try_from(queue).unwrap_or(0),
            sys_flag: 0,
            born_timestamp: born,
            flag: 0,
            properties: PROPERTIES,
            reconsume_times: 0,
            unit_mode: false,
            max_reconsume_times: None,
            batch,
            broker_name: Some(&self.broker_name),
        };
        let mut ext = ExtFields::with_capacity(14, 128);
        h.write_ext_fields_as(&mut ext, SendHeaderVersion::V2);
        let (code, body) = if batch {
            let mut body = BytesMut::with_capacity(msgs.iter().map(|m| m.len() + 40).sum());
            for m in msgs {
                // Lengths are bounded by --size, far below i32::MAX; an error cannot happen.
                let _ = encode_batch_entry(&mut body, 0, m, PROPERTIES.as_bytes());
            }
            (rc::SEND_BATCH_MESSAGE, body.freeze())
        } else {
            (rc::SEND_MESSAGE_V2, msgs.first().cloned().unwrap_or_default())
        };
        RemotingCommand::request(code, 0).with_ext_fields(ext).with_body(body)
    }
}

/// One producer lane of the raw driver.
#[derive(Debug)]
pub struct RawProducer {
    conn: ProducerConn,
    base: SendBase,
}

#[derive(Debug)]
enum ProducerConn {
    Direct(Direct),
    Mux(Arc<Mux>),
}

impl Producer for RawProducer {
    async fn send(&mut self, queue: u32, msgs: &[Bytes]) -> BenchResult<()> {
        let cmd = self.base.command(queue, msgs);
        let resp = match &mut self.conn {
            ProducerConn::Direct(d) => d.call(cmd).await?,
            ProducerConn::Mux(m) => m.call(cmd).await?,
        };
        expect_ok(&resp, "send")
    }

    async fn close(self) {}
}

struct PullSpec {
    topic: String,
    group: String,
    sub_version: i64,
    /// Pop instead of pull.
    pop: bool,
    broker_name: String,
}

/// One consumer group member of the raw driver.
pub struct RawConsumer {
    mux: Arc<Mux>,
    spec: Arc<PullSpec>,
    client_id: String,
    /// Assigned queues and where to start; pull loops start at the first poll.
    queues: Vec<(u32, i64)>,
    tx: Option<mpsc::Sender<Vec<Received>>>,
    rx: mpsc::Receiver<Vec<Received>>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for RawConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawConsumer").field("client_id", &self.client_id).finish_non_exhaustive()
    }
}

impl Consumer for RawConsumer {
    async fn poll(&mut self, out: &mut Vec<Received>, wait: Duration) -> BenchResult<()> {
        if let Some(tx) = self.tx.take() {
            for &(q, offset) in &self.queues {
                let (mux, spec, tx) = (Arc::clone(&self.mux), Arc::clone(&self.spec), tx.clone());
                self.tasks.push(if spec.pop {
                    tokio::spawn(pop_loop(mux, spec, q, tx))
                } else {
                    tokio::spawn(pull_loop(mux, spec, q, offset, tx))
                });
            }
        }
        take_batches(&mut self.rx, out, wait).await;
        Ok(())
    }

    async fn close(self) {
        for t in &self.tasks {
            t.abort();
        }
        let h = UnregisterClientRequestHeader {
            client_id: &self.client_id,
            producer_group: None,
            consumer_group: Some(&self.spec.group),
        };
        let cmd =
            RemotingCommand::request(rc::UNREGISTER_CLIENT, 0).with_ext_fields(h.to_ext_fields());
        let _ = tokio::time::timeout(Duration::from_secs(2), self.mux.call(cmd)).await;
    }
}

async fn pull_loop(
    mux: Arc<Mux>,
    spec: Arc<PullSpec>,
    queue: u32,
    mut offset: i64,
    tx: mpsc::Sender<Vec<Received>>,
) {
    let qid = i32::try_from(queue).unwrap_or(0);
    loop {
        let sys_flag =
            pull_sys_flag::SUSPEND | if offset > 0 { pull_sys_flag::COMMIT_OFFSET } else { 0 };
        let h = PullMessageRequestHeader {
            consumer_group: &spec.group,
            topic: &spec.topic,
            queue_id: qid,
            queue_offset: offset,
            max_msg_nums: PULL_BATCH,
            sys_flag,
            commit_offset: offset,
            suspend_timeout_millis: SUSPEND_MS,
            subscription: None,
            sub_version: spec.sub_version,
            expression_type: "TAG",
            max_msg_bytes: None,
        };
        let cmd = RemotingCommand::request(rc::PULL_MESSAGE, 0).with_ext_fields(h.to_ext_fields());
        let (resp, received_ns) = match mux.call_stamped(cmd).await {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let next = PullMessageResponseHeader::from_ext_fields(&resp.ext_fields)
            .ok()
            .and_then(|h| i64::try_from(h.next_begin_offset).ok());
        match resp.code {
            response_code::SUCCESS => {
                let Ok(records) = decode_records(&resp.body) else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let last = records.last().map(|r| r.queue_offset + 1);
                let batch: Vec<Received> = records
                    .into_iter()
                    .map(|r| Received { queue, payload: r.body, received_ns })
                    .collect();
                offset = next.or(last).unwrap_or(offset);
                if tx.send(batch).await.is_err() {
                    return;
                }
            }
            response_code::PULL_NOT_FOUND
            | response_code::PULL_RETRY_IMMEDIATELY
            | response_code::PULL_OFFSET_MOVED => {
                offset = next.unwrap_or(offset);
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The `BATCH_ACK_MESSAGE` of one popped batch: every offset in `offsets`, relative to the
/// smallest, under the batch's receipt.
fn batch_ack(
    spec: &PullSpec,
    queue: u32,
    h: &PopMessageResponseHeader,
    offsets: &[i64],
) -> RemotingCommand {
    let start = offsets.iter().copied().min().unwrap_or(0);
    let mut bits = Vec::new();
    for o in offsets {
        let i = usize::try_from(o - start).unwrap_or(0);
        if bits.len() <= i / 8 {
            bits.resize(i / 8 + 1, 0u8);
        }
        bits[i / 8] |= 1 << (i % 8);
    }
    let body = BatchAckMessageRequestBody {
        broker_name: spec.broker_name.clone(),
        acks: vec![BatchAck {
            consumer_group: spec.group.clone(),
            topic: spec.topic.clone(),
            retry: "0".into(),
            start_offset: start,
            queue_id: i32::try_from(queue).unwrap_or(0),
            revive_queue_id: h.revive_qid,
            pop_time: i64::try_from(h.pop_time).unwrap_or(0),
            invisible_time: i64::try_from(h.invisible_time).unwrap_or(0),
            bit_set: AckBits(bits),
        }],
    };
    let json = body.to_json_bytes().unwrap_or_default();
    RemotingCommand::request(rc::BATCH_ACK_MESSAGE, 0).with_body(json)
}

async fn pop_loop(mux: Arc<Mux>, spec: Arc<PullSpec>, queue: u32, tx: mpsc::Sender<Vec<Received>>) {
    let qid = i32::try_from(queue).unwrap_or(0);
    let mut ack: Option<RemotingCommand> = None;
    loop {
        let born = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(0))
            .unwrap_or(0);
        let h = PopMessageRequestHeader {
            consumer_group: &spec.group,
            topic: &spec.topic,
            queue_id: qid,
            max_msg_nums: PULL_BATCH,
            invisible_time: 60_000,
            poll_time: SUSPEND_MS,
            born_time: born,
            init_mode: 1,
            exp_type: Some("TAG"),
            exp: Some("*"),
            order: false,
            attempt_id: None,
        };
        let cmd = RemotingCommand::request(rc::POP_MESSAGE, 0).with_ext_fields(h.to_ext_fields());
        // The previous batch's ack travels with this pop, as the clients ack asynchronously.
        let popped = match ack.take() {
            Some(a) => tokio::join!(mux.call(a), mux.call_stamped(cmd)).1,
            None => mux.call_stamped(cmd).await,
        };
        let (resp, received_ns) = match popped {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if resp.code != response_code::SUCCESS {
            if !matches!(resp.code, response_code::POLLING_TIMEOUT | response_code::PULL_NOT_FOUND)
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            continue;
        }
        let (Ok(header), Ok(records)) = (
            PopMessageResponseHeader::from_ext_fields(&resp.ext_fields),
            decode_records(&resp.body),
        ) else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let offsets: Vec<i64> = records.iter().map(|r| r.queue_offset).collect();
        ack = Some(batch_ack(&spec, queue, &header, &offsets));
        let batch: Vec<Received> =
            records.into_iter().map(|r| Received { queue, payload: r.body, received_ns }).collect();
        if tx.send(batch).await.is_err() {
            return;
        }
    }
}

/// How a [`ClientError`] reads in the bench's results.
fn client_err(e: ClientError) -> BenchError {
    match e {
        ClientError::Connect { addr, source } => {
            BenchError::io(format!("connecting to {addr}"), source)
        }
        ClientError::Io(e) => BenchError::io("socket", e),
        ClientError::Encode(e) => header_err("encode", e),
        ClientError::Decode(e) => header_err("decode", e),
        ClientError::Closed => BenchError::Protocol("connection closed by the broker".into()),
        ClientError::Timeout { code, .. } => {
            BenchError::Timeout(format!("no answer to request code {code}"))
        }
        e @ ClientError::ConnectTimeout { .. } => BenchError::Timeout(e.to_string()),
        e => BenchError::Protocol(e.to_string()),
    }
}

/// The bench client's answer to a broker → client request: the running info of its group
/// (see [`Mux::connect_as`]); anything else (NOTIFY_CONSUMER_IDS_CHANGED, …) is refused.
fn answer(cmd: &RemotingCommand, running_info: &Option<(String, Bytes)>) -> RemotingCommand {
    if let (rc::GET_CONSUMER_RUNNING_INFO, Some((group, body))) = (cmd.code, running_info) {
        let asked = cmd.ext_fields.get("consumerGroup");
        if asked == Some(group.as_str()) {
            return RemotingCommand::response_to(cmd, response_code::SUCCESS, None)
                .with_body(body.clone());
        }
        let remark =
            format!("The Consumer Group <{}> not exist in this consumer", asked.unwrap_or(""));
        return RemotingCommand::response_to(cmd, response_code::SYSTEM_ERROR, Some(remark));
    }
    RemotingCommand::response_to(
        cmd,
        response_code::REQUEST_CODE_NOT_SUPPORTED,
        Some("bench client".into()),
    )
}

/// The body of the bench consumer's answer to `GET_CONSUMER_RUNNING_INFO`: RocketMQ's
/// `ConsumerRunningInfo` with the properties a pull consumer reports and its subscription. It
/// keeps no process queues or consume statistics to report, so `mqTable` and `statusTable`
/// are empty (as a consumer's are before its first rebalance).
fn running_info(namesrv: &str, sub: &SubscriptionData, started_ms: i64) -> BenchResult<Bytes> {
    let sub = serde_json::to_value(sub).map_err(|e| header_err("running info", e))?;
    let body = serde_json::json!({
        "properties": {
            "PROP_NAMESERVER_ADDR": namesrv,
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CONSUMEORDERLY": "false",
            "PROP_CLIENT_VERSION": concat!("baiji-bench-", env!("CARGO_PKG_VERSION")),
            "PROP_CONSUMER_START_TIMESTAMP": started_ms.to_string(),
        },
        "subscriptionSet": [sub],
        "mqTable": {},
        "statusTable": {},
        "userConsumerInfo": {},
    });
    serde_json::to_vec(&body).map(Bytes::from).map_err(|e| header_err("running info", e))
}

/// A connection with one request in flight: write, then read until the answer.
#[derive(Debug)]
pub(crate) struct Direct(Connection);

impl Direct {
    pub(crate) async fn connect(addr: &str) -> BenchResult<Self> {
        let conn = Connection::connect(addr, RPC_TIMEOUT).await.map_err(client_err)?;
        Ok(Direct(conn.with_call_timeout(RPC_TIMEOUT)))
    }

    pub(crate) async fn call(&mut self, cmd: RemotingCommand) -> BenchResult<RemotingCommand> {
        self.0.call(cmd).await.map_err(client_err)
    }
}

/// A pipelined connection: any number of requests in flight, answers matched by opaque.
#[derive(Debug)]
pub(crate) struct Mux(Pipeline);

impl Mux {
    pub(crate) async fn connect(addr: &str) -> BenchResult<Self> {
        Self::connect_as(addr, None).await
    }

    /// As [`Mux::connect`]; with `running_info` = (group, body), a consumer's connection that
    /// answers the broker's `GET_CONSUMER_RUNNING_INFO` (307, relayed from mqadmin's
    /// `consumerStatus` and the dashboard's client view) for that group with `body`, as a
    /// RocketMQ consumer does.
    pub(crate) async fn connect_as(
        addr: &str,
        running_info: Option<(String, Bytes)>,
    ) -> BenchResult<Self> {
        let options =
            PipelineOptions::default().connect_timeout(RPC_TIMEOUT).call_timeout(RPC_TIMEOUT);
        let answer = Box::new(move |cmd: RemotingCommand| Some(answer(&cmd, &running_info)));
        Pipeline::connect_with(addr, options, answer).await.map(Mux).map_err(client_err)
    }

    pub(crate) async fn call(&self, cmd: RemotingCommand) -> BenchResult<RemotingCommand> {
        self.call_stamped(cmd).await.map(|(resp, _)| resp)
    }

    /// As [`Mux::call`], also returning when this task got the decoded response ([`now_ns`]).
    ///
    /// That is the receipt point every wire driver shares (the Redis and NATS drivers stamp when
    /// their client library hands the consuming task a decoded reply): after the connection's
    /// reader task has decoded the frame and the waiting task has woken. Stamping in the reader
    /// task, at the socket read, would leave out one task hop the other drivers include.
    pub(crate) async fn call_stamped(
        &self,
        cmd: RemotingCommand,
    ) -> BenchResult<(RemotingCommand, u64)> {
        let resp = self.0.call(cmd).await.map_err(client_err)?;
        Ok((resp, now_ns()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running_info_request(group: &str) -> RemotingCommand {
        let mut ext = ExtFields::new();
        ext.insert("consumerGroup", group);
        ext.insert("clientId", "127.0.0.1@bench");
        RemotingCommand::request(rc::GET_CONSUMER_RUNNING_INFO, 7).with_ext_fields(ext)
    }

    #[test]
    fn given_a_running_info_request_for_its_group_should_answer_its_subscription() {
        let sub = SubscriptionData {
            topic: "BenchTopic".into(),
            sub_string: "*".into(),
            ..Default::default()
        };
        let info = running_info("127.0.0.1:9876", &sub, 42).expect("a body");
        let mine = Some(("bench_g0".to_string(), info));
        let r = answer(&running_info_request("bench_g0"), &mine);
        assert_eq!((r.code, r.opaque), (response_code::SUCCESS, 7), "{r:?}");
        let body: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
        assert_eq!(body["subscriptionSet"][0]["topic"], "BenchTopic", "{body}");
        assert_eq!(body["properties"]["PROP_CONSUMER_START_TIMESTAMP"], "42", "{body}");
        let r = answer(&running_info_request("other_group"), &mine);
        assert_eq!(r.code, response_code::SYSTEM_ERROR, "another group: {r:?}");
        let r = answer(&running_info_request("bench_g0"), &None);
        assert_eq!(r.code, response_code::REQUEST_CODE_NOT_SUPPORTED, "a producer's connection");
        let notify = RemotingCommand::request(rc::NOTIFY_CONSUMER_IDS_CHANGED, 8);
        let r = answer(&notify, &mine);
        assert_eq!(r.code, response_code::REQUEST_CODE_NOT_SUPPORTED, "{r:?}");
    }
}
