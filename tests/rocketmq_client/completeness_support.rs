//! What the completeness tests share: the client runtime, a broker per test, client builders,
//! a delivery log, deadline polling, a raw remoting probe, child consumer processes and the
//! ali-ons scripts.
//!
//! A consumer that must be killed (`SIGKILL`) or frozen (`SIGSTOP`) runs in a child process:
//! the test binary itself, started with `--exact <the test> --nocapture` and the environment
//! variable [`CHILD_ENV`]. Each test that spawns children first calls [`run_as_child`], which
//! turns that run into the child consumer and never returns to the test body.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baiji::broker::{BrokerConfig, RunningBroker};
use baiji::remoting::body::{
    ConsumerListBody, JsonBody, LockBatchRequestBody, LockBatchResponseBody,
};
use baiji::remoting::client::request_once;
use baiji::remoting::code::request_code;
use baiji::remoting::{ExtFields, RemotingCommand};
use rocketmq_client_rust::{
    ClientRuntime, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, ConsumeOrderlyContext,
    ConsumeOrderlyStatus, DefaultMQProducer, DefaultMQPushConsumer, DefaultMQPushConsumerBuilder,
    MQPushConsumer,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;

/// The broker name every test broker has (`BrokerConfig::default()`).
pub(crate) const BROKER_NAME: &str = "baiji-a";

pub(crate) use crate::support::{client_config, client_runtime};

/// Installs a log subscriber once (`RUST_LOG=warn,baiji=debug` to see what happens).
pub(crate) fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

/// A broker with its embedded name server, both on free loopback ports.
pub(crate) struct TestBroker {
    pub(crate) broker: RunningBroker,
    pub(crate) namesrv: String,
    pub(crate) addr: SocketAddr,
}

impl TestBroker {
    /// Messages the store holds (every topic, the schedule topic included).
    pub(crate) fn live_messages(&self) -> u64 {
        self.broker.store().memory().live_messages
    }

    /// Bytes the store holds.
    pub(crate) fn bytes_used(&self) -> u64 {
        self.broker.store().memory().bytes_used
    }

    /// Whether the store has `topic`.
    pub(crate) fn has_topic(&self, topic: &str) -> bool {
        self.broker.store().topic(topic).is_some()
    }

    /// Messages ever appended to `topic`: the sum of its queues' next offsets (0 if it does not
    /// exist). Unlike [`live_messages`](Self::live_messages), consumption and reclaiming do not
    /// lower it.
    pub(crate) fn appended(&self, topic: &str) -> u64 {
        let Some(t) = self.broker.store().topic(topic) else {
            return 0;
        };
        (0..t.queue_count()).map(|q| t.offsets(q).map_or(0, |(_, max)| max)).sum()
    }

    /// Queue count of `topic` (0 if it does not exist).
    pub(crate) fn queue_count(&self, topic: &str) -> u32 {
        self.broker.store().topic(topic).map_or(0, |t| t.queue_count())
    }
}

/// Starts a broker; `tweak` adjusts the configuration.
pub(crate) async fn start_broker(tweak: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
    init_logging();
    let broker = crate::common::broker::start(crate::common::broker::loopback(), tweak).await;
    let namesrv = broker.namesrv_addr().expect("embedded name server").to_string();
    let addr = broker.broker_addr().expect("broker address");
    TestBroker { broker, namesrv, addr }
}

/// The client id a client with `instance` has.
pub(crate) fn client_id(instance: &str) -> String {
    format!("127.0.0.1@{instance}")
}

/// A started producer.
pub(crate) async fn producer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
) -> DefaultMQProducer {
    let o = crate::support::ProducerOptions {
        send_timeout_ms: 5_000,
        retries: 0,
        client_config: true,
        latency_fault: false,
    };
    crate::support::start_producer(rt, namesrv, group, o).await
}

/// A push consumer builder with the test defaults (from the first offset, one message per
/// listener call).
pub(crate) fn push_consumer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
    instance: &str,
) -> DefaultMQPushConsumerBuilder {
    DefaultMQPushConsumer::builder(Arc::clone(rt))
        .client_config(client_config(namesrv, instance))
        .consumer_group(group)
        .name_server_addr(namesrv)
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .consume_message_batch_max_size(1)
        .consume_thread_min(2)
        .consume_thread_max(4)
}

/// One delivery to one consumer.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// The consumer's instance name.
    pub(crate) consumer: String,
    /// Topic of the queue it was pulled from (`%RETRY%…` for a retry).
    pub(crate) queue_topic: String,
    /// The message's topic as the client shows it (retries: restored to the original).
    pub(crate) topic: String,
    pub(crate) queue: i32,
    pub(crate) offset: i64,
    /// `UNIQ_KEY`: the id the producer's `SendResult::msg_id` reports.
    pub(crate) uniq: String,
    /// The offset message id.
    pub(crate) msg_id: String,
    pub(crate) reconsume_times: i32,
    pub(crate) body: String,
    pub(crate) properties: HashMap<String, String>,
    pub(crate) at: Instant,
}

impl Delivery {
    pub(crate) fn from_ext(consumer: &str, queue_topic: &str, m: &MessageExt) -> Self {
        let properties: HashMap<String, String> =
            m.properties().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Delivery {
            consumer: consumer.to_string(),
            queue_topic: queue_topic.to_string(),
            topic: m.topic().to_string(),
            queue: m.queue_id(),
            offset: m.queue_offset(),
            uniq: properties.get("UNIQ_KEY").cloned().unwrap_or_default(),
            msg_id: m.msg_id().to_string(),
            reconsume_times: m.reconsume_times(),
            body: m.body().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default(),
            properties,
            at: Instant::now(),
        }
    }

    pub(crate) fn prop(&self, key: &str) -> Option<&str> {
        self.properties.get(key).map(String::as_str)
    }
}

/// Deliveries in arrival order, shared between listeners and the test.
#[derive(Debug, Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<Delivery>>>);

impl Log {
    pub(crate) fn push(&self, d: Delivery) {
        crate::common::sync::lock(&self.0).push(d);
    }

    pub(crate) fn snapshot(&self) -> Vec<Delivery> {
        crate::common::sync::lock(&self.0).clone()
    }

    pub(crate) fn len(&self) -> usize {
        crate::common::sync::lock(&self.0).len()
    }

    /// Distinct `UNIQ_KEY`s delivered (to `consumer`, or to anyone).
    pub(crate) fn uniq_set(&self, consumer: Option<&str>) -> std::collections::HashSet<String> {
        self.snapshot()
            .into_iter()
            .filter(|d| consumer.map_or(true, |c| d.consumer == c))
            .map(|d| d.uniq)
            .collect()
    }
}

/// A concurrently listener that records every delivery and answers success.
pub(crate) fn recording_listener(
    consumer: &str,
    log: &Log,
) -> impl Fn(
    &[&MessageExt],
    &ConsumeConcurrentlyContext,
) -> rocketmq_client_rust::ClientResult<ConsumeConcurrentlyStatus>
       + Send
       + Sync
       + 'static {
    let (consumer, log) = (consumer.to_string(), log.clone());
    move |msgs: &[&MessageExt], ctx: &ConsumeConcurrentlyContext| {
        let queue_topic = ctx.get_message_queue().topic().to_string();
        for m in msgs {
            log.push(Delivery::from_ext(&consumer, &queue_topic, m));
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

/// An orderly listener that records every delivery and answers success.
pub(crate) fn recording_orderly_listener(
    consumer: &str,
    log: &Log,
) -> impl Fn(
    &[&MessageExt],
    &mut ConsumeOrderlyContext,
) -> rocketmq_client_rust::ClientResult<ConsumeOrderlyStatus>
       + Send
       + Sync
       + 'static {
    let (consumer, log) = (consumer.to_string(), log.clone());
    move |msgs: &[&MessageExt], ctx: &mut ConsumeOrderlyContext| {
        let queue_topic = ctx.get_message_queue().topic().to_string();
        for m in msgs {
            log.push(Delivery::from_ext(&consumer, &queue_topic, m));
        }
        Ok(ConsumeOrderlyStatus::Success)
    }
}

/// Polls `cond` every 50 ms until it holds or `timeout` passes; returns whether it held.
pub(crate) async fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let every = Duration::from_millis(50);
    crate::common::wait::poll(timeout, every, || std::future::ready(cond())).await.is_ok()
}

/// A message to `topic` with a body, tag, keys and user properties.
pub(crate) fn message(
    topic: &str,
    body: &str,
    tag: &str,
    keys: &[&str],
    props: &[(&str, &str)],
) -> rocketmq_model::common::message::message_single::Message {
    let mut b = rocketmq_model::common::message::message_single::Message::builder()
        .topic(topic)
        .tags(tag)
        .body_slice(body.as_bytes());
    if !keys.is_empty() {
        b = b.keys(keys.iter().map(|k| (*k).to_string()).collect());
    }
    for (k, v) in props {
        b = b.raw_property(*k, *v).expect("a user property");
    }
    b.build().expect("a valid message")
}

/// Sends and returns the `UNIQ_KEY` (`SendResult::msg_id`).
pub(crate) async fn send(
    p: &DefaultMQProducer,
    msg: rocketmq_model::common::message::message_single::Message,
) -> String {
    let r = p.send(msg).await.expect("the send succeeds").expect("a send result");
    r.msg_id.expect("a message id").to_string()
}

/// Sends to one queue and returns the `UNIQ_KEY`.
pub(crate) async fn send_to(
    p: &DefaultMQProducer,
    msg: rocketmq_model::common::message::message_single::Message,
    queue: i32,
) -> String {
    let topic = msg.topic().to_string();
    let mq = rocketmq_model::common::message::message_queue::MessageQueue::from_parts(
        topic,
        BROKER_NAME,
        queue,
    );
    let r = p.send_to_queue(msg, mq).await.expect("the send succeeds").expect("a send result");
    r.msg_id.expect("a message id").to_string()
}

/// Creates `topic` with `queues` queues the way an admin client does: `UPDATE_AND_CREATE_TOPIC`
/// to the master of every broker serving `TBW102`.
pub(crate) async fn create_topic(p: &mut DefaultMQProducer, topic: &str, queues: i32) {
    p.create_topic("TBW102", topic, queues, HashMap::new()).await.expect("the topic is created");
}

// ---------------------------------------------------------------------------------------------
// A raw remoting probe: requests the real clients would not send on the test's behalf.

/// Sends one request on a fresh connection and returns the response (5 s at most).
///
/// Blocking, for the tests' synchronous polling closures, on a multi-threaded runtime: it
/// moves off the worker itself (`block_in_place`, which is a no-op when a caller already did).
pub(crate) fn raw_request(addr: SocketAddr, cmd: RemotingCommand) -> RemotingCommand {
    let code = cmd.code;
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(request_once(addr, cmd, Duration::from_secs(5)))
    })
    .unwrap_or_else(|e| panic!("the broker answers request code {code} within 5 s: {e}"))
}

/// `GET_CONSUMER_LIST_BY_GROUP`: the client ids the broker counts as live members.
pub(crate) fn consumer_ids(addr: SocketAddr, group: &str) -> Vec<String> {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    let resp = raw_request(
        addr,
        RemotingCommand::request(request_code::GET_CONSUMER_LIST_BY_GROUP, 0).with_ext_fields(ext),
    );
    if resp.code != 0 {
        return Vec::new();
    }
    ConsumerListBody::from_json_slice(&resp.body).map(|b| b.consumer_id_list).unwrap_or_default()
}

/// `LOCK_BATCH_MQ` on behalf of `client`: the queues (ids) the broker granted it.
pub(crate) fn try_lock(
    addr: SocketAddr,
    group: &str,
    client: &str,
    topic: &str,
    queues: &[i32],
) -> Vec<i32> {
    let body = LockBatchRequestBody {
        consumer_group: group.into(),
        client_id: client.into(),
        only_this_broker: false,
        mq_set: queues
            .iter()
            .map(|q| baiji::remoting::body::MessageQueue {
                topic: topic.into(),
                broker_name: BROKER_NAME.into(),
                queue_id: *q,
            })
            .collect(),
    };
    let resp = raw_request(
        addr,
        RemotingCommand::request(request_code::LOCK_BATCH_MQ, 0)
            .with_body(body.to_json_bytes().expect("a lock body")),
    );
    assert_eq!(resp.code, 0, "LOCK_BATCH_MQ answers SUCCESS: {:?}", resp.remark);
    let mut granted: Vec<i32> = LockBatchResponseBody::from_json_slice(&resp.body)
        .expect("a lock response body")
        .lock_ok_mq_set
        .into_iter()
        .map(|mq| mq.queue_id)
        .collect();
    granted.sort_unstable();
    granted
}

/// `QUERY_CONSUMER_OFFSET`: the group's committed offset of a queue, if any.
pub(crate) fn committed_offset(
    addr: SocketAddr,
    group: &str,
    topic: &str,
    queue: i32,
) -> Option<i64> {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("topic", topic);
    ext.insert("queueId", &queue.to_string());
    ext.insert("setZeroIfNotFound", "false");
    let resp = raw_request(
        addr,
        RemotingCommand::request(request_code::QUERY_CONSUMER_OFFSET, 0).with_ext_fields(ext),
    );
    (resp.code == 0).then(|| resp.ext_fields.get("offset").and_then(|o| o.parse().ok())).flatten()
}

// ---------------------------------------------------------------------------------------------
// Child consumer processes.

/// Set in a child's environment: `key=value` pairs separated by `;` (see [`ChildSpec`]).
pub(crate) const CHILD_ENV: &str = "BAIJI_TEST_CHILD_CONSUMER";

/// What a child consumer does.
#[derive(Debug, Clone)]
pub(crate) struct ChildSpec {
    pub(crate) namesrv: String,
    pub(crate) group: String,
    pub(crate) topic: String,
    pub(crate) instance: String,
    pub(crate) broadcasting: bool,
    /// Orderly (queue locks) instead of concurrently.
    pub(crate) orderly: bool,
    /// POP consumption (client-side rebalancing off, 5 s invisible time), with a listener
    /// that never returns: what it received stays unacknowledged until it is killed.
    pub(crate) pop: bool,
}

impl ChildSpec {
    fn encode(&self) -> String {
        format!(
            "namesrv={};group={};topic={};instance={};broadcasting={};orderly={};pop={}",
            self.namesrv,
            self.group,
            self.topic,
            self.instance,
            self.broadcasting,
            self.orderly,
            self.pop
        )
    }

    fn decode(s: &str) -> Option<Self> {
        let kv: HashMap<&str, &str> = s.split(';').filter_map(|p| p.split_once('=')).collect();
        Some(ChildSpec {
            namesrv: kv.get("namesrv")?.to_string(),
            group: kv.get("group")?.to_string(),
            topic: kv.get("topic")?.to_string(),
            instance: kv.get("instance")?.to_string(),
            broadcasting: kv.get("broadcasting")? == &"true",
            orderly: kv.get("orderly")? == &"true",
            pop: kv.get("pop") == Some(&"true"),
        })
    }
}

/// In a child process, runs the consumer [`CHILD_ENV`] describes until the process is
/// killed (or its parent goes away) and returns `true`; in a normal test run returns `false`.
pub(crate) async fn run_as_child() -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return false };
    let spec = ChildSpec::decode(&spec).expect("a valid child spec");
    // The parent holds our stdin; when it goes away (even killed), so do we.
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        std::process::exit(0);
    });
    let rt = client_runtime("child");
    let instance = spec.instance.clone();
    let mut builder = push_consumer(&rt, &spec.namesrv, &spec.group, &spec.instance).message_model(
        if spec.broadcasting { MessageModel::Broadcasting } else { MessageModel::Clustering },
    );
    if spec.pop {
        builder = builder.client_rebalance(false).pop_invisible_time(5_000);
    }
    let mut c = builder.build();
    c.subscribe(spec.topic.as_str(), "*").await.expect("subscribe");
    // Written before the listener returns: a line the parent sees is a message this child
    // consumed.
    let print = move |queue_topic: &str, msgs: &[&MessageExt]| {
        let mut out = std::io::stdout().lock();
        for m in msgs {
            let d = Delivery::from_ext(&instance, queue_topic, m);
            let _ = writeln!(
                out,
                "\nDELIVERY\t{}\t{}\t{}\t{}\t{}",
                d.topic, d.queue, d.offset, d.uniq, d.body
            );
        }
        let _ = out.flush();
    };
    if spec.orderly {
        c.register_message_listener_orderly(
            move |msgs: &[&MessageExt], ctx: &mut ConsumeOrderlyContext| {
                print(ctx.get_message_queue().topic().as_str(), msgs);
                Ok(ConsumeOrderlyStatus::Success)
            },
        );
    } else {
        let hang = spec.pop;
        c.register_message_listener_concurrently(
            move |msgs: &[&MessageExt], ctx: &ConsumeConcurrentlyContext| {
                print(ctx.get_message_queue().topic().as_str(), msgs);
                if hang {
                    // Never acknowledges: the parent kills this process.
                    std::thread::sleep(Duration::from_secs(3600));
                }
                Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
            },
        );
    }
    c.start().await.expect("the child consumer starts");
    {
        let mut out = std::io::stdout().lock();
        // libtest has printed `test <name> ... ` without a newline.
        let _ = writeln!(out, "\nREADY");
        let _ = out.flush();
    }
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// A child process running one consumer; killed when dropped.
pub(crate) struct ChildConsumer {
    child: Child,
    ready: Arc<Mutex<bool>>,
}

impl ChildConsumer {
    /// Starts the test binary as a child running only `test` (which must call
    /// [`run_as_child`] first) as the consumer `spec`; its deliveries go to `log`.
    pub(crate) fn spawn(test: &str, spec: &ChildSpec, log: &Log) -> Self {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new(exe)
            .args([test, "--exact", "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, spec.encode())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child consumer");
        let stdout = child.stdout.take().expect("child stdout");
        let ready = Arc::new(Mutex::new(false));
        let (log, instance, ready2) = (log.clone(), spec.instance.clone(), Arc::clone(&ready));
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.ends_with("READY") {
                    *crate::common::sync::lock(&ready2) = true;
                    continue;
                }
                let Some(at) = line.find("DELIVERY\t") else { continue };
                let f: Vec<&str> = line[at..].splitn(6, '\t').collect();
                if f.len() == 6 && f[0] == "DELIVERY" {
                    log.push(Delivery {
                        consumer: instance.clone(),
                        queue_topic: f[1].to_string(),
                        topic: f[1].to_string(),
                        queue: f[2].parse().unwrap_or(-1),
                        offset: f[3].parse().unwrap_or(-1),
                        uniq: f[4].to_string(),
                        msg_id: String::new(),
                        reconsume_times: 0,
                        body: f[5].to_string(),
                        properties: HashMap::new(),
                        at: Instant::now(),
                    });
                }
            }
        });
        ChildConsumer { child, ready }
    }

    /// Whether its consumer has started.
    pub(crate) fn is_ready(&self) -> bool {
        *crate::common::sync::lock(&self.ready)
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {sig} succeeded");
    }

    /// Freezes the process (`SIGSTOP`): its connections stay open, it sends nothing.
    pub(crate) fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Kills the process (`SIGKILL`): no unregistering; the kernel closes its connections.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildConsumer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The test path (`completeness::<name>`) of a test function of this module tree.
pub(crate) fn test_path(name: &str) -> String {
    format!("completeness::{name}")
}

// ---------------------------------------------------------------------------------------------
// ali-ons scripts.

/// `tests/node`, after checking that `npm ci --prefix tests/node` was run.
pub(crate) fn node_dir() -> PathBuf {
    let dir: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "node"].iter().collect();
    assert!(
        dir.join("node_modules").join("ali-ons").is_dir(),
        "tests/node/node_modules is missing: run `npm ci --prefix tests/node` (the ali-ons tests \
         need the npm package; .ci/test does this)"
    );
    dir
}

/// Runs `node tests/node/<script> <args>` to completion (at most `timeout`) and returns the
/// JSON lines it printed.
pub(crate) fn run_node(script: &str, args: &[&str], timeout: Duration) -> Vec<serde_json::Value> {
    let dir = node_dir();
    run_program(Command::new("node").arg(dir.join(script)).current_dir(&dir), script, args, timeout)
}

/// Runs `tests/grpc/<script> <args>` with the Python 5.x SDK's interpreter (`.tools/py`, which
/// `.ci/test` installs) to completion (at most `timeout`) and returns the JSON lines it printed.
pub(crate) fn run_python(script: &str, args: &[&str], timeout: Duration) -> Vec<serde_json::Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".tools/py/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run .ci/test (it installs rocketmq-python-client 5.1.2 there)",
        python.display()
    );
    run_program(
        Command::new(python).arg(root.join("tests/grpc").join(script)),
        script,
        args,
        timeout,
    )
}

/// Runs `cmd` with `args` to completion (at most `timeout`; `script` names it in failures) and
/// returns the JSON lines it printed on standard output.
fn run_program(
    cmd: &mut Command,
    script: &str,
    args: &[&str],
    timeout: Duration,
) -> Vec<serde_json::Value> {
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {script}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let lines = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    crate::common::sync::lock(&lines).push(v);
                }
            }
        })
    };
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = reader.join();
    let lines = crate::common::sync::lock(&lines).clone();
    match status {
        Some(s) => assert!(s.success(), "{script} exits 0, not {s}; printed {lines:?}"),
        None => panic!("{script} did not finish within {timeout:?}; printed {lines:?}"),
    }
    lines
}
