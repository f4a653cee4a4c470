//! Checks a running cluster with the real Rust RocketMQ client, given only the name server:
//! every named broker is registered, a producer spreads a topic over all of their queues, and
//! one consumer group of two members receives every message, from every broker, exactly once.
//! `tests/mixed_cluster.sh` runs it against a persistent rocketmq-broker beside a baiji broker.
//!
//! ```sh
//! cargo run --example cluster_check -- --namesrv 127.0.0.1:9876 --cluster DefaultCluster \
//!     --brokers broker-a,baiji-a --topic MixedTopic --messages 2000
//! ```
//! With `--absent`, it only checks that the named brokers are gone from the name server (after
//! they stopped). Exit status 0 when everything checks out, 1 (with the reason) otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use baiji::remoting::body::{ClusterInfo, JsonBody, TopicRouteData};
use baiji::remoting::client::request_once;
use baiji::remoting::code::{request_code, response_code};
use baiji::remoting::{ExtFields, RemotingCommand};
use cheetah_string::CheetahString;
use rocketmq_client_rust::{
    AllocateMessageQueueStrategy, ClientConfig, ClientRuntime, ClientRuntimeConfig,
    ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, DefaultMQProducer,
    DefaultMQPushConsumer, MQPushConsumer, SendStatus, TelemetryHandle,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_queue::MessageQueue;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_protocol::protocol::heartbeat::message_model::MessageModel;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

static OWNER: LazyLock<RuntimeOwner> = LazyLock::new(|| {
    let mut config = RuntimeConfig::for_parallelism("cluster-check", 4);
    config.blocking_lane_policies.metadata_io.max_concurrency = 8;
    config.blocking_lane_policies.metadata_io.max_queue_depth = 256;
    RuntimeOwner::plan(config).expect("runtime plan").build().expect("client runtime builds")
});

struct Args {
    namesrv: String,
    cluster: String,
    brokers: Vec<String>,
    topic: String,
    messages: u64,
    /// Only check that the brokers are gone from the name server (after they stopped).
    absent: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        namesrv: "127.0.0.1:9876".into(),
        cluster: "DefaultCluster".into(),
        brokers: Vec::new(),
        topic: "ClusterCheck".into(),
        messages: 2_000,
        absent: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--namesrv" => a.namesrv = value()?,
            "--cluster" => a.cluster = value()?,
            "--brokers" => a.brokers = value()?.split(',').map(str::to_owned).collect(),
            "--topic" => a.topic = value()?,
            "--messages" => {
                a.messages = value()?.parse().map_err(|e| format!("--messages: {e}"))?
            }
            "--absent" => a.absent = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.brokers.is_empty() {
        return Err("--brokers a,b is required".into());
    }
    Ok(a)
}

/// One request on a fresh connection; `None` if the server is unreachable or does not answer
/// within 3 s.
async fn call(addr: SocketAddr, code: i32, ext: ExtFields) -> Option<RemotingCommand> {
    let request = RemotingCommand::request(code, 0).with_ext_fields(ext);
    request_once(addr, request, Duration::from_secs(3)).await.ok()
}

async fn cluster_info(ns: SocketAddr) -> Option<ClusterInfo> {
    let r = call(ns, request_code::GET_BROKER_CLUSTER_INFO, ExtFields::new()).await?;
    (r.code == response_code::SUCCESS).then(|| ClusterInfo::from_json_slice(&r.body).ok()).flatten()
}

async fn route(ns: SocketAddr, topic: &str) -> Option<TopicRouteData> {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    let r = call(ns, request_code::GET_ROUTEINFO_BY_TOPIC, ext).await?;
    (r.code == response_code::SUCCESS)
        .then(|| TopicRouteData::from_json_slice(&r.body).ok())
        .flatten()
}

/// RocketMQ's allocation by circle, held back until the group has both members, so that no
/// queue changes hands after consumption started and "exactly once" is a fair demand.
struct WholeGroupByCircle(usize);

impl AllocateMessageQueueStrategy for WholeGroupByCircle {
    fn allocate(
        &self,
        _group: &CheetahString,
        current_cid: &CheetahString,
        mq_all: &[MessageQueue],
        cid_all: &[CheetahString],
    ) -> rocketmq_error::Result<Vec<MessageQueue>> {
        let mut cids: Vec<&CheetahString> = cid_all.iter().collect();
        cids.sort();
        cids.dedup();
        let Some(index) = cids.iter().position(|c| *c == current_cid) else {
            return Ok(Vec::new());
        };
        if cids.len() != self.0 {
            return Ok(Vec::new());
        }
        let mut mqs: Vec<&MessageQueue> = mq_all.iter().collect();
        mqs.sort_by(|a, b| {
            (a.broker_name().as_str(), a.queue_id()).cmp(&(b.broker_name().as_str(), b.queue_id()))
        });
        Ok(mqs
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % cids.len() == index)
            .map(|(_, q)| q.clone())
            .collect())
    }

    fn get_name(&self) -> &'static str {
        "WHOLE_GROUP_BY_CIRCLE"
    }
}

fn config(ns: &str, instance: &str) -> ClientConfig {
    ClientConfig::builder()
        .namesrv_addr(ns)
        .client_ip("127.0.0.1")
        .instance_name(instance)
        .poll_name_server_interval(10_000)
        .build()
        .expect("client config")
}

async fn run(a: Args) -> Result<(), String> {
    let ns: SocketAddr = a.namesrv.parse().map_err(|e| format!("--namesrv: {e}"))?;
    let want: BTreeSet<String> = a.brokers.iter().cloned().collect();
    if a.absent {
        let start = Instant::now();
        loop {
            let info = cluster_info(ns).await.unwrap_or_default();
            let left: Vec<&String> =
                want.iter().filter(|b| info.broker_addr_table.contains_key(*b)).collect();
            if left.is_empty() {
                println!(
                    "name server no longer lists {want:?} ({:?} after asking)",
                    start.elapsed()
                );
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "the name server still lists {left:?} 30 s after they stopped"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // 1. Every broker is registered in the cluster.
    let start = Instant::now();
    let listed = loop {
        let info = cluster_info(ns).await.unwrap_or_default();
        let names: BTreeSet<String> = info
            .cluster_addr_table
            .get(&a.cluster)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect();
        if want.is_subset(&names) {
            break info;
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!("cluster {} lists {names:?}, not all of {want:?}", a.cluster));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for b in &want {
        println!("registered: {b} at {:?}", listed.broker_addr_table[b].broker_addrs);
    }

    // 2. A producer that knows only the name server spreads the topic over every queue of
    // every broker.
    std::env::set_var("rocketmq.client.rebalance.waitInterval", "2000");
    let rt = ClientRuntime::try_new(
        OWNER.root_context().component("cluster-check"),
        ClientRuntimeConfig::default(),
        TelemetryHandle::noop(),
    )
    .map_err(|e| format!("client runtime: {e}"))?;
    let mut producer = DefaultMQProducer::builder(Arc::clone(&rt))
        .client_config(config(&a.namesrv, "check-producer"))
        .producer_group("cluster-check-producers")
        .name_server_addr(a.namesrv.as_str())
        .build();
    producer.start().await.map_err(|e| format!("producer: {e}"))?;

    // An unknown topic is created by whichever broker the first send reaches through TBW102,
    // and routed there alone (RocketMQ's autoCreateTopicEnable, per broker).
    let auto = format!("{}Auto", a.topic);
    let msg = Message::builder().topic(auto.as_str()).body_slice(b"auto").build().expect("message");
    match producer.send(msg).await {
        Ok(Some(r)) => {
            let on = r.message_queue.map(|q| q.broker_name().to_string()).unwrap_or_default();
            tokio::time::sleep(Duration::from_millis(500)).await;
            let routed: Vec<String> = route(ns, &auto)
                .await
                .map(|r| r.queue_datas.into_iter().map(|q| q.broker_name).collect())
                .unwrap_or_default();
            println!("auto-created {auto}: first send stored on {on}; routed on {routed:?}");
        }
        other => return Err(format!("a send to the unknown topic {auto} failed: {other:?}")),
    }

    // The topic itself is created on every broker of the cluster, as `mqadmin updateTopic -c`
    // does: UPDATE_AND_CREATE_TOPIC to each broker serving TBW102.
    producer
        .create_topic("TBW102", &a.topic, 4, std::collections::HashMap::new())
        .await
        .map_err(|e| format!("create {} on every broker: {e}", a.topic))?;
    let start = Instant::now();
    let routed = loop {
        let r = route(ns, &a.topic).await.unwrap_or_default();
        let on: BTreeMap<String, u32> =
            r.queue_datas.iter().map(|q| (q.broker_name.clone(), q.write_queue_nums)).collect();
        if want.iter().all(|b| on.contains_key(b)) {
            println!("created {} on every broker; route: {on:?} (broker → write queues)", a.topic);
            break on;
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err(format!("the route of {} lists {on:?}", a.topic));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let producer = Arc::new(producer);
    let mut tasks = tokio::task::JoinSet::new();
    let lanes = 4;
    for lane in 0..lanes {
        let (p, topic, n) = (Arc::clone(&producer), a.topic.clone(), a.messages);
        tasks.spawn(async move {
            let mut out = Vec::new();
            let mut failures = 0u32;
            for seq in (0..n).filter(|s| s % lanes == lane) {
                loop {
                    let msg = Message::builder()
                        .topic(topic.as_str())
                        .body_slice(seq.to_string().as_bytes())
                        .build()
                        .expect("message");
                    match p.send(msg).await {
                        Ok(Some(r)) if r.send_status == SendStatus::SendOk => {
                            let q = r.message_queue.expect("queue");
                            out.push((seq, q.broker_name().to_string(), q.queue_id()));
                            break;
                        }
                        other => {
                            failures += 1;
                            if failures > 50 {
                                return Err(format!("send {seq} keeps failing: {other:?}"));
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            }
            Ok((out, failures))
        });
    }
    let mut sent = Vec::new();
    let mut failures = 0;
    while let Some(r) = tasks.join_next().await {
        let (s, f) = r.map_err(|e| e.to_string())??;
        sent.extend(s);
        failures += f;
    }
    let mut queues: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (_, b, q) in &sent {
        queues.entry(b.clone()).or_default().insert(*q);
    }
    let mut per_broker: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, b, _) in &sent {
        *per_broker.entry(b.as_str()).or_default() += 1;
    }
    println!(
        "producer: sent {} messages ({failures} client-reported failures); per broker {per_broker:?}; queues used {queues:?}",
        sent.len()
    );
    for (b, n) in &routed {
        let used = queues.get(b).map_or(0, BTreeSet::len);
        if want.contains(b) && used != *n as usize {
            return Err(format!("the producer used {used} of {b}'s {n} queues"));
        }
    }

    // 3. One consumer group of two members receives everything from every broker.
    let received: Arc<Mutex<Vec<(u64, String, usize)>>> = Arc::new(Mutex::new(Vec::new()));
    let strategy: Arc<dyn AllocateMessageQueueStrategy> = Arc::new(WholeGroupByCircle(2));
    let mut members = Vec::new();
    for i in 0..2usize {
        let mut c = DefaultMQPushConsumer::builder(Arc::clone(&rt))
            .client_config(config(&a.namesrv, &format!("check-member-{i}")))
            .consumer_group("cluster-check-consumers")
            .name_server_addr(a.namesrv.as_str())
            .message_model(MessageModel::Clustering)
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .allocate_message_queue_strategy(Arc::clone(&strategy))
            .build();
        c.subscribe(a.topic.as_str(), "*").await.map_err(|e| format!("subscribe: {e}"))?;
        let log = Arc::clone(&received);
        c.register_message_listener_concurrently(
            move |msgs: &[&MessageExt], _: &ConsumeConcurrentlyContext| {
                let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                for m in msgs {
                    let seq = m
                        .body()
                        .and_then(|b| std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok()))
                        .unwrap_or(u64::MAX);
                    log.push((seq, m.broker_name().to_string(), i));
                }
                Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
            },
        );
        c.start().await.map_err(|e| format!("consumer: {e}"))?;
        members.push(c);
    }
    let start = Instant::now();
    let n = usize::try_from(a.messages).map_err(|e| e.to_string())?;
    let got = loop {
        let got = received.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let unique: BTreeSet<u64> = got.iter().map(|g| g.0).collect();
        if unique.len() >= n {
            break got;
        }
        if start.elapsed() > Duration::from_secs(120) {
            return Err(format!("the group received {} of {n} distinct messages", unique.len()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let took = start.elapsed();
    let mut from: BTreeMap<(String, usize), usize> = BTreeMap::new();
    for (_, b, i) in &got {
        *from.entry((b.clone(), *i)).or_default() += 1;
    }
    let unique: BTreeSet<u64> = got.iter().map(|g| g.0).collect();
    println!(
        "group: received {} deliveries of {} distinct messages in {took:?}; (broker, member) → count {from:?}",
        got.len(),
        unique.len()
    );
    for mut c in members {
        c.shutdown().await;
    }
    if let Ok(mut p) = Arc::try_unwrap(producer) {
        p.shutdown().await;
    }
    let _ = rt.shutdown().await;
    let from_brokers: BTreeSet<&str> = got.iter().map(|g| g.1.as_str()).collect();
    if unique != (0..a.messages).collect::<BTreeSet<u64>>() || got.len() != n {
        return Err("the group did not receive every message exactly once".into());
    }
    if !want.iter().all(|b| from_brokers.contains(b.as_str())) {
        return Err(format!("the group received from {from_brokers:?} only"));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cluster_check: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let result = match rt {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(()) => {
            println!("cluster_check: OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("cluster_check: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
