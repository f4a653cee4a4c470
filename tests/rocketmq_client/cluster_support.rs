//! What the cluster tests stand on: name servers (the real `rocketmq-namesrv-rust` 1.0.0 as a
//! process, or baiji's own in-process), baiji brokers in-process or as a process that can be
//! killed, raw name-server queries, the Rust client's runtime, and the bookkeeping of which
//! message went where and who received it.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baiji::broker::{BrokerConfig, RunningBroker};
use baiji::remoting::body::{ClusterInfo, JsonBody, TopicRouteData};
use baiji::remoting::client::{request_once, Connection};
use baiji::remoting::code::{request_code, response_code};
use baiji::remoting::{ExtFields, RemotingCommand};
use cheetah_string::CheetahString;
use rocketmq_client_rust::{
    AllocateMessageQueueStrategy, ClientRuntime, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
    SendStatus,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;

// ---------------------------------------------------------------------------------------------
// Waiting

/// Polls `check` every 100 ms until it holds; panics with `what` after `timeout`. Returns how
/// long it took.
pub(crate) async fn eventually<F, Fut>(what: &str, timeout: Duration, check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polled = crate::common::wait::poll(timeout, Duration::from_millis(100), check).await;
    polled.unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for: {what}"))
}

/// A port nothing listens on right now, for a child process (a real name server, a baiji
/// binary) that must be told its port before it binds it.
///
/// The port comes from below the kernel's ephemeral range (Linux: 32768-60999 by default), so
/// no socket of this or another test that binds port 0 can take it between this check and the
/// child's bind: a pick-then-bind race is only possible with another process picking the same
/// way, and the per-process start offset makes that unlikely too. Ports are never handed out
/// twice by one test process.
pub(crate) fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = (std::process::id() % u32::from(SPAN)) as u16;
    for _ in 0..SPAN {
        let port = LOW + (base + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}

async fn wait_listening(addr: SocketAddr, what: &str) {
    eventually(&format!("{what} to listen on {addr}"), Duration::from_secs(20), || async move {
        tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await;
}

/// A scratch directory under the system temp dir, removed on drop unless the test failed
/// (then its logs stay for a look).
#[derive(Debug)]
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(what: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "baiji-cluster-{}-{}-{what}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a scratch dir");
        Scratch(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {} failed", child.id());
}

/// Waits up to `timeout` for `child` to exit; kills it if it does not.
fn reap(child: &mut Child, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

// ---------------------------------------------------------------------------------------------
// Name servers

/// Where the real name server's binary is: `$BAIJI_NAMESRV_BIN`, else what
/// `.ci/install-namesrv` installs. Missing → the test fails saying how to install it.
pub(crate) fn namesrv_bin() -> PathBuf {
    let path = match std::env::var_os("BAIJI_NAMESRV_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/namesrv/bin/rocketmq-namesrv-rust")
        }
    };
    assert!(
        path.is_file(),
        "the real RocketMQ name server (rocketmq-namesrv 1.0.0) is not installed at {}: run \
         .ci/install-namesrv (cargo install into .tools/namesrv, ~9 min once), or point \
         BAIJI_NAMESRV_BIN at a rocketmq-namesrv-rust binary",
        path.display()
    );
    path
}

/// Which name server a test runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NsKind {
    /// `rocketmq-namesrv-rust` 1.0.0, the Rust port of RocketMQ's name server, as a process.
    Real,
    /// `baiji::broker::start_namesrv`, in-process.
    Baiji,
}

/// A name server on a fixed loopback port, which can be stopped and started again there.
#[derive(Debug)]
pub(crate) struct NameServer {
    pub(crate) kind: NsKind,
    pub(crate) addr: SocketAddr,
    real: Option<Child>,
    baiji: Option<RunningBroker>,
    dir: Scratch,
}

impl NameServer {
    /// Starts one on a free port and waits until it accepts connections.
    pub(crate) async fn start(kind: NsKind) -> NameServer {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut ns = NameServer { kind, addr, real: None, baiji: None, dir: Scratch::new("ns") };
        ns.start_again().await;
        ns
    }

    /// `host:port`, as clients and brokers are given it.
    pub(crate) fn addr_string(&self) -> String {
        self.addr.to_string()
    }

    /// (Re)starts it on its port.
    pub(crate) async fn start_again(&mut self) {
        assert!(self.real.is_none() && self.baiji.is_none(), "already running");
        match self.kind {
            NsKind::Real => {
                let home = self.dir.path().join("home");
                std::fs::create_dir_all(&home).expect("namesrv home");
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.path().join("namesrv.out"))
                    .expect("namesrv log");
                let child = Command::new(namesrv_bin())
                    .args([
                        "--listenPort",
                        &self.addr.port().to_string(),
                        "--bindAddress",
                        "127.0.0.1",
                    ])
                    .env("HOME", &home)
                    .env("ROCKETMQ_HOME", self.dir.path())
                    .current_dir(self.dir.path())
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().expect("log fd"))
                    .stderr(log)
                    .spawn()
                    .expect("spawn rocketmq-namesrv-rust");
                self.real = Some(child);
            }
            NsKind::Baiji => {
                // The port was just released by the previous instance (SO_REUSEADDR is set by
                // tokio), but allow for a slow close.
                let start = Instant::now();
                let running = loop {
                    match baiji::broker::start_namesrv(self.addr).await {
                        Ok(r) => break r,
                        Err(e) if start.elapsed() < Duration::from_secs(10) => {
                            eprintln!("baiji namesrv on {}: {e}; retrying", self.addr);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => panic!("baiji namesrv on {}: {e}", self.addr),
                    }
                };
                self.baiji = Some(running);
            }
        }
        wait_listening(self.addr, "the name server").await;
    }

    /// Stops it: SIGTERM (the real one stops gracefully in ~1 s) or a clean shutdown.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.real.take() {
            signal(&child, "TERM");
            let graceful =
                tokio::task::spawn_blocking(move || reap(&mut child, Duration::from_secs(10)))
                    .await
                    .expect("reaper");
            assert!(graceful, "rocketmq-namesrv-rust did not stop within 10 s of SIGTERM");
        }
        if let Some(b) = self.baiji.take() {
            b.shutdown().await;
        }
    }
}

impl Drop for NameServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.real.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Brokers

/// A baiji broker in this process, registering with `namesrv`.
pub(crate) async fn start_broker(
    namesrv: &str,
    cluster: &str,
    name: &str,
    register_interval_secs: u64,
) -> RunningBroker {
    baiji::broker::start(BrokerConfig {
        core: baiji::broker::CoreConfig {
            namesrv_addr: Some(namesrv.to_string()),
            cluster_name: cluster.to_string(),
            broker_name: name.to_string(),
            default_queues: 4,
            ..Default::default()
        },
        remoting: baiji::broker::RemotingConfig {
            listen: "127.0.0.1:0".parse().expect("addr"),
            namesrv_listen: None,
            register_interval_secs,
            ..Default::default()
        },
        ..BrokerConfig::default()
    })
    .await
    .expect("start a baiji broker")
}

/// A baiji broker as a process (`target/…/baiji broker`), for what only a process can do: be
/// killed without unregistering, or frozen, or stopped by SIGTERM and started again with the
/// same command.
#[derive(Debug)]
pub(crate) struct BrokerProcess {
    child: Option<Child>,
    addr: SocketAddr,
    args: Vec<String>,
    dir: Scratch,
}

impl BrokerProcess {
    pub(crate) async fn start(
        namesrv: &str,
        cluster: &str,
        name: &str,
        register_interval_secs: u64,
    ) -> BrokerProcess {
        Self::start_with(namesrv, cluster, name, register_interval_secs, false).await
    }

    /// As [`start`](Self::start); with `store`, under `--store-path-root-dir` (a directory of
    /// its scratch directory).
    pub(crate) async fn start_with(
        namesrv: &str,
        cluster: &str,
        name: &str,
        register_interval_secs: u64,
        store: bool,
    ) -> BrokerProcess {
        Self::start_args(namesrv, cluster, name, register_interval_secs, store, &[]).await
    }

    /// As [`start_with`](Self::start_with), with `extra` flags after the others.
    pub(crate) async fn start_args(
        namesrv: &str,
        cluster: &str,
        name: &str,
        register_interval_secs: u64,
        store: bool,
        extra: &[String],
    ) -> BrokerProcess {
        let dir = Scratch::new(name);
        let config = dir.path().join("baiji.toml");
        std::fs::write(
            &config,
            format!("register-interval-secs = {register_interval_secs}\ndefault-queues = 4\n"),
        )
        .expect("write baiji.toml");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut args: Vec<String> = vec!["broker".into(), "--config".into()];
        args.push(config.display().to_string());
        for a in ["--listen", &addr.to_string(), "--namesrv-addr", namesrv] {
            args.push(a.to_string());
        }
        for a in ["--cluster-name", cluster, "--broker-name", name] {
            args.push(a.to_string());
        }
        // Several brokers run at once; none needs the default gRPC port (8081), nor a fast
        // port at listenPort - 2, a port `free_port` may hand to another process.
        for a in ["--grpc-listen", "off", "--fast-listen-port", "0"] {
            args.push(a.to_string());
        }
        if store {
            args.push("--store-path-root-dir".into());
            args.push(dir.path().join("store").display().to_string());
        }
        args.extend(extra.iter().cloned());
        let mut p = BrokerProcess { child: None, addr, args, dir };
        p.spawn().await;
        p
    }

    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.out"))
            .expect("broker log");
        let child = Command::new(env!("CARGO_BIN_EXE_baiji"))
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn the baiji binary");
        self.child = Some(child);
        wait_listening(self.addr, "the baiji broker process").await;
    }

    /// SIGTERM, and waits for a clean exit (10 s at most).
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, "TERM");
            let graceful =
                tokio::task::spawn_blocking(move || reap(&mut child, Duration::from_secs(10)))
                    .await
                    .expect("reaper");
            assert!(graceful, "the baiji broker did not stop within 10 s of SIGTERM");
        }
    }

    /// The same command again, on the same port (after [`stop`](Self::stop) or
    /// [`kill`](Self::kill)).
    pub(crate) async fn start_again(&mut self) {
        assert!(self.child.is_none(), "stopped first");
        self.spawn().await;
    }

    /// Its broker port's address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// SIGKILL: no unregistration, its connections die with it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the broker");
            child.wait().expect("reap the broker");
        }
    }

    /// SIGSTOP / SIGCONT: frozen, its connections stay open but it says nothing.
    pub(crate) fn freeze(&self) {
        signal(self.child.as_ref().expect("running"), "STOP");
    }

    pub(crate) fn thaw(&self) {
        signal(self.child.as_ref().expect("running"), "CONT");
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// Raw name-server queries (what an operator's mqadmin would ask)

/// One request/response over a fresh connection. `None` when the server is unreachable or does
/// not answer within 3 s.
pub(crate) async fn call(addr: SocketAddr, code: i32, ext: ExtFields) -> Option<RemotingCommand> {
    let request = RemotingCommand::request(code, 0).with_ext_fields(ext);
    request_once(addr, request, Duration::from_secs(3)).await.ok()
}

/// GET_BROKER_CLUSTER_INFO, or `None` if the name server is unreachable.
pub(crate) async fn cluster_info(ns: SocketAddr) -> Option<ClusterInfo> {
    let resp = call(ns, request_code::GET_BROKER_CLUSTER_INFO, ExtFields::new()).await?;
    assert_eq!(resp.code, response_code::SUCCESS, "cluster info refused: {:?}", resp.remark);
    Some(ClusterInfo::from_json_slice(&resp.body).expect("cluster info body parses"))
}

/// Broker name → master address, as the name server lists them in `cluster`.
pub(crate) async fn brokers_in(ns: SocketAddr, cluster: &str) -> BTreeMap<String, String> {
    let Some(info) = cluster_info(ns).await else { return BTreeMap::new() };
    let names = info.cluster_addr_table.get(cluster).cloned().unwrap_or_default();
    names
        .into_iter()
        .filter_map(|n| {
            let addr = info.broker_addr_table.get(&n)?.broker_addrs.get(&0)?.clone();
            Some((n, addr))
        })
        .collect()
}

/// GET_ROUTEINFO_BY_TOPIC: `Some(route)`, `None` for TOPIC_NOT_EXIST or an unreachable server.
pub(crate) async fn route(ns: SocketAddr, topic: &str) -> Option<TopicRouteData> {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    let resp = call(ns, request_code::GET_ROUTEINFO_BY_TOPIC, ext).await?;
    if resp.code == response_code::TOPIC_NOT_EXIST {
        return None;
    }
    assert_eq!(resp.code, response_code::SUCCESS, "route refused: {:?}", resp.remark);
    Some(TopicRouteData::from_json_slice(&resp.body).expect("route body parses"))
}

/// Broker name → write queues of `topic`, as the name server routes it.
pub(crate) async fn route_queues(ns: SocketAddr, topic: &str) -> BTreeMap<String, u32> {
    route(ns, topic)
        .await
        .map(|r| r.queue_datas.into_iter().map(|q| (q.broker_name, q.write_queue_nums)).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The Rust client

pub(crate) use crate::support::{client_config, client_runtime};

/// A started producer that knows only the name server; retries on another broker (2 retries,
/// as RocketMQ's default) and avoids brokers that failed (sendLatencyFaultEnable).
pub(crate) async fn producer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
) -> DefaultMQProducer {
    let o = crate::support::ProducerOptions {
        send_timeout_ms: 3_000,
        retries: 2,
        client_config: true,
        latency_fault: true,
    };
    crate::support::start_producer(rt, namesrv, group, o).await
}

/// Where a sent message was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) seq: u64,
    pub(crate) broker: String,
    pub(crate) queue: i32,
    pub(crate) offset: u64,
}

/// Sends messages `seqs` (body = the number) to `topic` from `parallel` tasks. A send the client
/// gives up on (after its own retries) is retried here and recorded; a message is given up after
/// 30 s. Returns what was stored where, and the failures the client reported.
pub(crate) async fn send_range(
    producer: &Arc<DefaultMQProducer>,
    topic: &str,
    seqs: std::ops::Range<u64>,
    parallel: u64,
) -> (Vec<Sent>, Vec<String>) {
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..parallel {
        let p = Arc::clone(producer);
        let topic = topic.to_string();
        let seqs = seqs.clone();
        tasks.spawn(async move {
            let mut sent = Vec::new();
            let mut failures = Vec::new();
            for seq in seqs.filter(|s| s % parallel == lane) {
                let start = Instant::now();
                loop {
                    let msg = Message::builder()
                        .topic(topic.as_str())
                        .body_slice(seq.to_string().as_bytes())
                        .build()
                        .expect("message");
                    match p.send(msg).await {
                        Ok(Some(r)) if r.send_status == SendStatus::SendOk => {
                            let mq = r.message_queue.expect("send result names its queue");
                            sent.push(Sent {
                                seq,
                                broker: mq.broker_name().to_string(),
                                queue: mq.queue_id(),
                                offset: r.queue_offset,
                            });
                            break;
                        }
                        other => {
                            let mut what = format!("{other:?}");
                            what.truncate(2_000);
                            failures.push(what);
                            assert!(
                                start.elapsed() < Duration::from_secs(30),
                                "message {seq} could not be sent for 30 s; last: {other:?}"
                            );
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }
            (sent, failures)
        });
    }
    let mut all = Vec::new();
    let mut failures = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (s, f) = r.expect("sender task");
        all.extend(s);
        failures.extend(f);
    }
    all.sort_by_key(|s| s.seq);
    (all, failures)
}

/// Sends message `seq` once; panics if the client reports a failure.
pub(crate) async fn send_one(producer: &DefaultMQProducer, topic: &str, seq: u64) -> Sent {
    let msg = Message::builder()
        .topic(topic)
        .body_slice(seq.to_string().as_bytes())
        .build()
        .expect("message");
    let r = producer
        .send(msg)
        .await
        .unwrap_or_else(|e| panic!("send to {topic}: {e}"))
        .expect("a send result");
    assert_eq!(r.send_status, SendStatus::SendOk);
    let mq = r.message_queue.expect("send result names its queue");
    Sent { seq, broker: mq.broker_name().to_string(), queue: mq.queue_id(), offset: r.queue_offset }
}

/// One message as a consumer received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivery {
    pub(crate) seq: u64,
    pub(crate) broker: String,
    pub(crate) queue: i32,
    pub(crate) offset: i64,
    pub(crate) consumer: usize,
}

/// Everything a group's consumers received.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    deliveries: Mutex<Vec<Delivery>>,
}

impl Inbox {
    pub(crate) fn snapshot(&self) -> Vec<Delivery> {
        crate::common::sync::lock(&self.deliveries).clone()
    }

    pub(crate) fn len(&self) -> usize {
        crate::common::sync::lock(&self.deliveries).len()
    }

    fn push(&self, d: Delivery) {
        crate::common::sync::lock(&self.deliveries).push(d);
    }
}

/// Seq → how many times it was received.
pub(crate) fn receipt_counts(deliveries: &[Delivery]) -> BTreeMap<u64, usize> {
    let mut m = BTreeMap::new();
    for d in deliveries {
        *m.entry(d.seq).or_insert(0) += 1;
    }
    m
}

/// The last allocation each member of a group computed, per topic.
#[derive(Debug, Default)]
pub(crate) struct Allocations {
    last: Mutex<BTreeMap<(String, String), Vec<MessageQueue>>>,
}

impl Allocations {
    /// Queues (`broker`, id) of `topic` the members hold now, per member.
    pub(crate) fn of(&self, topic: &str) -> Vec<Vec<(String, i32)>> {
        let last = crate::common::sync::lock(&self.last);
        last.iter()
            .filter(|((_, t), _)| t == topic)
            .map(|(_, mqs)| {
                mqs.iter().map(|q| (q.broker_name().to_string(), q.queue_id())).collect()
            })
            .collect()
    }
}

/// RocketMQ's "averagely by circle" allocation (member i of n takes every n-th queue of the
/// sorted queue list), held back until the group has all its `members`: no member ever takes
/// queues it will hand over a moment later, so a group that starts with messages waiting receives
/// each exactly once. By circle, a broker that disappears from the end of the sorted list (name
/// it last) moves none of the other brokers' queues between members.
#[derive(Debug)]
pub(crate) struct WholeGroupByCircle {
    pub(crate) members: usize,
    pub(crate) record: Arc<Allocations>,
}

impl AllocateMessageQueueStrategy for WholeGroupByCircle {
    fn allocate(
        &self,
        _consumer_group: &CheetahString,
        current_cid: &CheetahString,
        mq_all: &[MessageQueue],
        cid_all: &[CheetahString],
    ) -> rocketmq_error::Result<Vec<MessageQueue>> {
        let mut cids: Vec<&CheetahString> = cid_all.iter().collect();
        cids.sort();
        cids.dedup();
        let mut mine = Vec::new();
        if cids.len() == self.members {
            if let Some(index) = cids.iter().position(|c| *c == current_cid) {
                let mut mqs: Vec<&MessageQueue> = mq_all.iter().collect();
                mqs.sort_by(|a, b| {
                    (a.broker_name().as_str(), a.queue_id())
                        .cmp(&(b.broker_name().as_str(), b.queue_id()))
                });
                mine = mqs
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| i % cids.len() == index)
                    .map(|(_, q)| q.clone())
                    .collect();
            }
        }
        if let Some(topic) = mq_all.first().map(|q| q.topic().to_string()) {
            crate::common::sync::lock(&self.record.last)
                .insert((current_cid.to_string(), topic), mine.clone());
        }
        Ok(mine)
    }

    fn get_name(&self) -> &'static str {
        "WHOLE_GROUP_BY_CIRCLE"
    }
}

/// A started clustering push consumer of `group` on `topic` from the first offset, recording
/// into `inbox` as member `index`.
pub(crate) async fn push_consumer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
    topic: &str,
    index: usize,
    inbox: &Arc<Inbox>,
    strategy: Option<Arc<dyn AllocateMessageQueueStrategy>>,
) -> DefaultMQPushConsumer {
    let mut builder = DefaultMQPushConsumer::builder(Arc::clone(rt))
        .client_config(client_config(namesrv, &format!("{group}-member-{index}")))
        .consumer_group(group)
        .name_server_addr(namesrv)
        .message_model(MessageModel::Clustering)
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .consume_message_batch_max_size(32);
    if let Some(s) = strategy {
        builder = builder.allocate_message_queue_strategy(s);
    }
    let mut c = builder.build();
    c.subscribe(topic, "*").await.expect("subscribe");
    let inbox = Arc::clone(inbox);
    c.register_message_listener_concurrently(
        move |msgs: &[&MessageExt], _ctx: &ConsumeConcurrentlyContext| {
            for m in msgs {
                let body = m.body().expect("a body");
                let seq = std::str::from_utf8(&body)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .expect("the body is the message's number");
                inbox.push(Delivery {
                    seq,
                    broker: m.broker_name().to_string(),
                    queue: m.queue_id(),
                    offset: m.queue_offset(),
                    consumer: index,
                });
            }
            Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
        },
    );
    c.start().await.expect("consumer starts");
    c
}

// ---------------------------------------------------------------------------------------------
// Speaking to a name server as a broker does

/// One long-lived connection to a name server, over which a test plays a broker.
#[derive(Debug)]
pub(crate) struct RawConn(Connection);

impl RawConn {
    pub(crate) async fn connect(addr: SocketAddr) -> RawConn {
        let conn = Connection::connect(addr, Duration::from_secs(3))
            .await
            .expect("connect to the name server");
        RawConn(conn.with_call_timeout(Duration::from_secs(3)))
    }

    /// Sends a request and returns its response (3 s at most).
    pub(crate) async fn call(
        &mut self,
        code: i32,
        ext: ExtFields,
        body: Vec<u8>,
    ) -> RemotingCommand {
        let request = RemotingCommand::request(code, 0).with_ext_fields(ext).with_body(body);
        self.0.call(request).await.unwrap_or_else(|e| {
            panic!("the name server answers request code {code} within 3 s: {e}")
        })
    }
}

/// A REGISTER_BROKER request for master `name` of `cluster` at `addr` carrying `topics`
/// (name, queues), built as baiji's registrar builds it.
pub(crate) fn register_broker_request(
    cluster: &str,
    name: &str,
    addr: &str,
    topics: &[(&str, u32)],
    counter: i64,
) -> (ExtFields, Vec<u8>) {
    use baiji::remoting::body::{
        DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigAndMappingSerializeWrapper,
    };
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: TopicConfigAndMappingSerializeWrapper {
            topic_config_table: topics
                .iter()
                .map(|(t, q)| (t.to_string(), TopicConfig::new(*t, *q, *q)))
                .collect(),
            data_version: DataVersion {
                state_version: 0,
                timestamp: 1_700_000_000_000 + counter,
                counter,
            },
            ..Default::default()
        },
        filter_server_list: Vec::new(),
    }
    .to_json_bytes()
    .expect("encode the body")
    .to_vec();
    let mut ext = ExtFields::new();
    ext.insert("brokerName", name);
    ext.insert("brokerAddr", addr);
    ext.insert("clusterName", cluster);
    ext.insert("haServerAddr", addr);
    ext.insert_i64("brokerId", 0);
    ext.insert_bool("compressed", false);
    ext.insert_i64("bodyCrc32", i64::from(crc32fast::hash(&body) & 0x7FFF_FFFF));
    ext.insert_bool("enableActingMaster", false);
    ext.insert_i64("heartbeatTimeoutMillis", 120_000);
    (ext, body)
}
