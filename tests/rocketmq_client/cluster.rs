//! Cluster membership, end to end over loopback: baiji brokers register with a real name server
//! (`rocketmq-namesrv-rust` 1.0.0, installed by `.ci/install-namesrv`) or with baiji's own, and
//! the real Rust client, given only the name server's address, finds them there.
//!
//! Each test has its own ports, cluster, topic and groups, and waits by polling with a deadline.
//! Times printed with `--nocapture` are what the report quotes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocketmq_client_rust::{AllocateMessageQueueStrategy, DefaultMQProducer};

use crate::cluster_support::{
    brokers_in, client_runtime, eventually, producer, push_consumer, receipt_counts,
    register_broker_request, route_queues, send_one, send_range, start_broker, Allocations,
    BrokerProcess, Inbox, NameServer, NsKind, Sent, WholeGroupByCircle,
};

fn unwrap_producer(p: Arc<DefaultMQProducer>) -> DefaultMQProducer {
    Arc::try_unwrap(p).unwrap_or_else(|_| panic!("a sender task still holds the producer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_baiji_broker_under_a_real_namesrv_when_a_client_sends_10000_messages_should_deliver_all_and_drop_the_route_on_clean_stop(
) {
    let t0 = Instant::now();
    let ns = NameServer::start(NsKind::Real).await;
    let nsa = ns.addr_string();
    let (cluster, name, topic) = ("SoloCluster", "baiji-solo", "ClusterSoloTopic");
    let broker = start_broker(&nsa, cluster, name, 30).await;
    let broker_addr = broker.broker_addr().expect("a broker address").to_string();

    // Registered at start: the real name server's cluster info lists baiji at its address.
    let took = eventually("the real name server lists baiji-solo", Duration::from_secs(5), || {
        let want = broker_addr.clone();
        async move { brokers_in(ns.addr, cluster).await.get(name) == Some(&want) }
    })
    .await;
    println!("registered with the real name server after {took:?}");

    // The client knows only the name server. Its first send goes through TBW102: baiji creates
    // the topic and registers again at once, so the route exists before the consumer asks.
    let rt = client_runtime("cluster-solo");
    let producer = Arc::new(producer(&rt, &nsa, "solo-producers").await);
    let (first, _) = send_range(&producer, topic, 0..1, 1).await;
    assert_eq!(first[0].broker, name);
    eventually("the auto-created topic's route", Duration::from_secs(5), || async {
        route_queues(ns.addr, topic).await.contains_key(name)
    })
    .await;
    let inbox = Arc::new(Inbox::default());
    let mut consumer = push_consumer(&rt, &nsa, "solo-consumers", topic, 0, &inbox, None).await;

    let sending = Instant::now();
    let (rest, failures) = send_range(&producer, topic, 1..10_000, 4).await;
    println!("sent 10,000 messages in {:?}", sending.elapsed());
    assert!(failures.is_empty(), "sends failed through a healthy broker: {failures:?}");
    assert!(rest.iter().all(|s| s.broker == name));
    let took = eventually("all 10,000 messages consumed", Duration::from_secs(120), || async {
        inbox.len() >= 10_000
    })
    .await;
    println!("consumed 10,000 messages {took:?} after the last send");
    let counts = receipt_counts(&inbox.snapshot());
    assert_eq!(counts.len(), 10_000, "every message arrives");
    assert!(counts.values().all(|&n| n == 1), "and exactly once");

    consumer.shutdown().await;
    unwrap_producer(producer).shutdown().await;
    let _ = rt.shutdown().await;

    // A clean stop unregisters: the route and the cluster entry are gone.
    broker.shutdown().await;
    let took =
        eventually("the route to disappear after a clean stop", Duration::from_secs(5), || async {
            route_queues(ns.addr, topic).await.is_empty()
                && !brokers_in(ns.addr, cluster).await.contains_key(name)
        })
        .await;
    println!("route gone {took:?} after the clean stop; test took {:?}", t0.elapsed());
}

/// Two baiji brokers under one name server; the group of two receives everything exactly once;
/// `baiji-b` is killed (SIGKILL: no unregistration) while messages wait on it unconsumed, and
/// the test accounts for every message.
async fn two_brokers_one_killed(kind: NsKind) {
    let t0 = Instant::now();
    let ns = NameServer::start(kind).await;
    let nsa = ns.addr_string();
    let cluster = format!("Pair{kind:?}Cluster");
    let topic = format!("ClusterPair{kind:?}");
    let group = format!("pair-{kind:?}-consumers");
    // baiji-a lives in this process; baiji-b is a process to kill. By name, b's queues sort after
    // a's, so its loss moves none of a's queues between the group's members.
    let a = start_broker(&nsa, &cluster, "baiji-a", 5).await;
    let mut b = BrokerProcess::start(&nsa, &cluster, "baiji-b", 5).await;
    eventually("both brokers registered", Duration::from_secs(10), || async {
        brokers_in(ns.addr, &cluster).await.len() == 2
    })
    .await;

    let rt = client_runtime("cluster-pair");
    let mut producer = producer(&rt, &nsa, &format!("pair-{kind:?}-producers")).await;

    // TBW102 auto-creation is per broker, as in RocketMQ: a send to an unknown topic goes
    // through the TBW102 route (both brokers' queues); the broker that receives it creates the
    // topic and registers it at once, and the name server routes the topic to that broker alone
    // (round robin alone would not reach the other: the producer takes the topic's own route as
    // soon as the name server has one).
    let auto = format!("{topic}Auto");
    let first = send_one(&producer, &auto, 0).await;
    let want = BTreeMap::from([(first.broker.clone(), 4)]);
    eventually(
        "the auto-created topic routed to the broker that created it",
        Duration::from_secs(5),
        || {
            let want = want.clone();
            let auto = auto.clone();
            async move { route_queues(ns.addr, &auto).await == want }
        },
    )
    .await;

    // Topics meant for the whole cluster are created on every broker, as `mqadmin updateTopic
    // -c <cluster>` does: the client asks the name server which brokers serve TBW102 and sends
    // each UPDATE_AND_CREATE_TOPIC.
    producer
        .create_topic("TBW102", &topic, 4, HashMap::new())
        .await
        .expect("create the topic on both brokers");
    let want = BTreeMap::from([("baiji-a".to_string(), 4), ("baiji-b".to_string(), 4)]);
    eventually("the topic routed on both brokers", Duration::from_secs(5), || {
        let want = want.clone();
        let topic = topic.clone();
        async move { route_queues(ns.addr, &topic).await == want }
    })
    .await;
    let producer = Arc::new(producer);
    let mut sent: Vec<Sent> = Vec::new();
    // The producer's first send fetches that route: it spreads over all 8 queues at once.
    let mut next = 0;
    let spreading = Instant::now();
    while sent.iter().map(|s| (s.broker.as_str(), s.queue)).collect::<BTreeSet<_>>().len() < 8 {
        assert!(
            spreading.elapsed() < Duration::from_secs(30),
            "the producer never used all 8 queues"
        );
        sent.extend(send_range(&producer, &topic, next..next + 1, 1).await.0);
        next += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = spreading.elapsed();
    println!("[{kind:?}] the producer spread {next} messages over all 8 queues within {took:?}");

    let inbox = Arc::new(Inbox::default());
    let record = Arc::new(Allocations::default());
    let strategy: Arc<dyn AllocateMessageQueueStrategy> =
        Arc::new(WholeGroupByCircle { members: 2, record: Arc::clone(&record) });
    let mut members = Vec::new();
    for i in 0..2 {
        members.push(
            push_consumer(&rt, &nsa, &group, &topic, i, &inbox, Some(Arc::clone(&strategy))).await,
        );
    }

    // Phase 1: the producer spreads the topic over both brokers' queues; the group receives
    // every message exactly once.
    let (p1, failures) = send_range(&producer, &topic, next..2_000, 4).await;
    assert!(failures.is_empty(), "sends failed with both brokers up: {failures:?}");
    sent.extend(p1);
    let queues: BTreeSet<(&str, i32)> = sent.iter().map(|s| (s.broker.as_str(), s.queue)).collect();
    assert_eq!(queues.len(), 8, "the producer used all 4 queues of both brokers: {queues:?}");
    let took = eventually("phase 1: 2,000 messages received", Duration::from_secs(60), || async {
        inbox.len() >= 2_000
    })
    .await;
    println!(
        "[{kind:?}] phase 1: 2,000 messages over 8 queues received {took:?} after the last send"
    );
    let phase1 = inbox.snapshot();
    let counts = receipt_counts(&phase1);
    assert_eq!(counts.len(), 2_000);
    assert!(counts.values().all(|&n| n == 1), "phase 1 is received exactly once");
    let by_member: BTreeSet<usize> = phase1.iter().map(|d| d.consumer).collect();
    assert_eq!(by_member.len(), 2, "both members of the group consumed");

    // Phase 2: the group stops pulling (at most one pull per queue already on its way may still
    // return), messages pile up on both brokers, and baiji-b is killed with them.
    for m in &members {
        m.suspend().await;
    }
    let (p2, failures) = send_range(&producer, &topic, 2_000..3_000, 4).await;
    assert!(failures.is_empty(), "{failures:?}");
    sent.extend(p2.iter().cloned());
    b.kill();
    for m in &members {
        m.resume().await;
    }

    // The name server forgets baiji-b: the Rust name server and baiji's both drop a broker whose
    // registering connection closed; without that it would take the 120 s expiry.
    let took =
        eventually("the name server drops the killed broker", Duration::from_secs(150), || async {
            let brokers = brokers_in(ns.addr, &cluster).await;
            brokers.len() == 1 && brokers.contains_key("baiji-a")
        })
        .await;
    println!("[{kind:?}] killed broker dropped from cluster info {took:?} after SIGKILL");
    let route: Vec<String> = route_queues(ns.addr, &topic).await.into_keys().collect();
    assert_eq!(route, ["baiji-a"], "the route keeps only the live broker");

    // Phase 3: the clients carry on with baiji-a. The producer's route still names baiji-b
    // until its next poll; its retries go to the other broker.
    let sending = Instant::now();
    let (p3, failures) = send_range(&producer, &topic, 3_000..4_000, 4).await;
    println!(
        "[{kind:?}] phase 3: 1,000 sends in {:?} after the kill; the client gave up on {} attempts \
         (the test retried them), the first: {:?}",
        sending.elapsed(),
        failures.len(),
        failures.first()
    );
    assert!(p3.iter().all(|s| s.broker == "baiji-a"), "nothing can be stored on the dead broker");
    sent.extend(p3);
    let on_a: BTreeSet<u64> =
        sent.iter().filter(|s| s.broker == "baiji-a").map(|s| s.seq).collect();
    let took = eventually(
        "every message stored on baiji-a received, and baiji-b's queues released",
        Duration::from_secs(90),
        || async {
            let got: BTreeSet<u64> = inbox.snapshot().iter().map(|d| d.seq).collect();
            let released = record.of(&topic).iter().flatten().all(|(b, _)| b == "baiji-a");
            on_a.is_subset(&got) && released
        },
    )
    .await;
    println!(
        "[{kind:?}] carried on with baiji-a: all its messages received {took:?} after phase 3"
    );

    // The accounting. Every received message is where it was sent, and none arrived twice.
    let deliveries = inbox.snapshot();
    let where_sent: BTreeMap<u64, &Sent> = sent.iter().map(|s| (s.seq, s)).collect();
    assert_eq!(where_sent.len(), 4_000);
    for d in &deliveries {
        let s = where_sent[&d.seq];
        assert_eq!(
            (d.broker.as_str(), d.queue, d.offset),
            (s.broker.as_str(), s.queue, s.offset as i64),
            "message {} was received from where it was stored",
            d.seq
        );
    }
    let counts = receipt_counts(&deliveries);
    let twice: Vec<u64> = counts.iter().filter(|(_, &n)| n > 1).map(|(&s, _)| s).collect();
    assert!(twice.is_empty(), "received more than once: {twice:?}");
    // Lost = stored on baiji-b in phase 2 and never received: exactly what the killed broker
    // held unconsumed. Per queue, what was received is a prefix and what was lost the rest.
    let lost: Vec<&Sent> = sent.iter().filter(|s| !counts.contains_key(&s.seq)).collect();
    let p2_on_b: Vec<&Sent> = p2.iter().filter(|s| s.broker == "baiji-b").collect();
    assert!(
        lost.iter().all(|s| s.broker == "baiji-b" && (2_000..3_000).contains(&s.seq)),
        "only phase-2 messages on the killed broker may be lost"
    );
    for q in 0..4 {
        let received =
            deliveries.iter().filter(|d| d.broker == "baiji-b" && d.queue == q).map(|d| d.offset);
        let lost_here = lost.iter().filter(|s| s.queue == q).map(|s| s.offset as i64);
        if let (Some(last_received), Some(first_lost)) = (received.max(), lost_here.min()) {
            assert!(
                last_received < first_lost,
                "baiji-b queue {q}: lost messages are the unconsumed tail"
            );
        }
    }
    // The suspended group left (at least) all but one pull's worth per queue on baiji-b.
    assert!(
        lost.len() + 4 * 32 >= p2_on_b.len() && !lost.is_empty(),
        "{} lost of {} left on baiji-b",
        lost.len(),
        p2_on_b.len()
    );
    println!(
        "[{kind:?}] lost exactly {} messages, all stored on baiji-b in phase 2 and unconsumed when it \
         was killed ({} of its {} phase-2 messages had been pulled); {} of {} received; test took {:?}",
        lost.len(),
        p2_on_b.len() - lost.len(),
        p2_on_b.len(),
        counts.len(),
        sent.len(),
        t0.elapsed()
    );

    for mut m in members {
        m.shutdown().await;
    }
    unwrap_producer(producer).shutdown().await;
    let _ = rt.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_baiji_brokers_under_a_real_namesrv_when_one_is_killed_should_lose_only_its_unconsumed_messages(
) {
    two_brokers_one_killed(NsKind::Real).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_baiji_brokers_under_baiji_namesrv_when_one_is_killed_should_lose_only_its_unconsumed_messages(
) {
    two_brokers_one_killed(NsKind::Baiji).await;
}

/// The name server restarts under a running broker: the broker re-registers within one
/// interval, and clients that start afterwards find it.
async fn namesrv_restart(kind: NsKind) {
    let t0 = Instant::now();
    let interval = 5;
    let mut ns = NameServer::start(kind).await;
    let nsa = ns.addr_string();
    let cluster = format!("Restart{kind:?}Cluster");
    let topic = format!("ClusterRestart{kind:?}");
    let name = "baiji-r";
    let broker = start_broker(&nsa, &cluster, name, interval).await;
    let rt = client_runtime("cluster-restart");
    let producer = Arc::new(producer(&rt, &nsa, &format!("restart-{kind:?}-producers")).await);
    send_range(&producer, &topic, 0..1, 1).await;
    eventually("the topic's route", Duration::from_secs(5), || async {
        route_queues(ns.addr, &topic).await.contains_key(name)
    })
    .await;

    ns.stop().await;
    // Down: a producer that already has the route keeps sending; the message path never
    // waits for the name server.
    let (down, failures) = send_range(&producer, &topic, 1..101, 1).await;
    assert!(
        down.len() == 100 && failures.is_empty(),
        "sends while the name server is down: {failures:?}"
    );
    ns.start_again().await;
    let took = eventually(
        "the broker re-registers after the restart",
        Duration::from_secs(interval + 5),
        || async { route_queues(ns.addr, &topic).await.contains_key(name) },
    )
    .await;
    println!(
        "[{kind:?}] re-registered {took:?} after the name server came back (interval {interval} s)"
    );
    assert!(took <= Duration::from_secs(interval), "re-registration took longer than one interval");

    // Clients that start now find the broker through the restarted name server.
    let inbox = Arc::new(Inbox::default());
    let mut consumer =
        push_consumer(&rt, &nsa, &format!("restart-{kind:?}-consumers"), &topic, 0, &inbox, None)
            .await;
    let fresh = Arc::new(
        crate::cluster_support::producer(&rt, &nsa, &format!("restart-{kind:?}-fresh")).await,
    );
    let (after, failures) = send_range(&fresh, &topic, 101..201, 1).await;
    assert!(after.len() == 100 && failures.is_empty(), "{failures:?}");
    eventually("all 201 messages consumed", Duration::from_secs(30), || async {
        inbox.len() >= 201
    })
    .await;
    assert_eq!(receipt_counts(&inbox.snapshot()).len(), 201);
    consumer.shutdown().await;
    unwrap_producer(fresh).shutdown().await;
    unwrap_producer(producer).shutdown().await;
    let _ = rt.shutdown().await;
    broker.shutdown().await;
    println!("[{kind:?}] restart test took {:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_running_broker_when_the_real_namesrv_restarts_should_reregister_within_one_interval(
) {
    namesrv_restart(NsKind::Real).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_running_broker_when_baiji_namesrv_restarts_should_reregister_within_one_interval()
{
    namesrv_restart(NsKind::Baiji).await;
}

/// A broker that stops registering while its connection stays open (SIGSTOP) is expired after
/// 120 s; when it wakes up it registers again.
async fn frozen_broker_expires(kind: NsKind) {
    let interval = 2;
    let ns = NameServer::start(kind).await;
    let nsa = ns.addr_string();
    let cluster = format!("Frozen{kind:?}Cluster");
    let name = "baiji-frozen";
    let b = BrokerProcess::start(&nsa, &cluster, name, interval).await;
    eventually("registered", Duration::from_secs(10), || async {
        brokers_in(ns.addr, &cluster).await.contains_key(name)
    })
    .await;
    // Right after a registration, so the last one is at most a moment old.
    b.freeze();
    let took = eventually("the frozen broker expires", Duration::from_secs(150), || async {
        !brokers_in(ns.addr, &cluster).await.contains_key(name)
    })
    .await;
    println!("[{kind:?}] frozen broker expired {took:?} after SIGSTOP");
    assert!(
        took >= Duration::from_secs(120 - interval),
        "expired before 120 s without registration"
    );
    b.thaw();
    let back = eventually("the thawed broker registers again", Duration::from_secs(30), || async {
        brokers_in(ns.addr, &cluster).await.contains_key(name)
    })
    .await;
    println!("[{kind:?}] thawed broker registered again after {back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_frozen_broker_under_baiji_namesrv_when_120s_pass_should_expire_it_and_take_it_back_when_it_wakes(
) {
    frozen_broker_expires(NsKind::Baiji).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_frozen_broker_under_a_real_namesrv_when_120s_pass_should_expire_it_and_take_it_back_when_it_wakes(
) {
    frozen_broker_expires(NsKind::Real).await;
}

/// Registrations that carry some topics only (a Java broker's incremental REGISTER_BROKER, a
/// rocketmq-rust broker's REGISTER_TOPIC_IN_NAMESRV) add to a broker's routes and take nothing
/// away; DELETE_TOPIC_IN_NAMESRV (mqadmin deleteTopic) removes one; the registration goes with
/// its connection. Both name servers must agree.
async fn partial_registrations(kind: NsKind) {
    use baiji::remoting::body::{JsonBody, QueueData, TopicRouteData};
    use baiji::remoting::code::{request_code, response_code};
    use baiji::remoting::ExtFields;

    let ns = NameServer::start(kind).await;
    let cluster = format!("Partial{kind:?}Cluster");
    let (name, addr) = ("persistent-x", "127.0.0.1:1");
    let t = |n: u32| format!("Partial{kind:?}T{n}");
    let (t1, t2, t3, t4) = (t(1), t(2), t(3), t(4));
    let routed = |topics: Vec<String>| {
        let ns = ns.addr;
        async move {
            let mut m = BTreeMap::new();
            for topic in topics {
                m.insert(topic.clone(), route_queues(ns, &topic).await.get(name).copied());
            }
            m
        }
    };
    let mut conn = crate::cluster_support::RawConn::connect(ns.addr).await;

    // A full registration.
    let (ext, body) = register_broker_request(&cluster, name, addr, &[(&t1, 4), (&t2, 4)], 1);
    let r = conn.call(request_code::REGISTER_BROKER, ext, body).await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    // An incremental one, with only the topic just created.
    let (ext, body) = register_broker_request(&cluster, name, addr, &[(&t3, 2)], 2);
    let r = conn.call(request_code::REGISTER_BROKER, ext, body).await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    // One topic the rocketmq-rust way.
    let mut ext = ExtFields::new();
    ext.insert("topic", &t4);
    let body = TopicRouteData {
        queue_datas: vec![QueueData {
            broker_name: name.to_string(),
            read_queue_nums: 3,
            write_queue_nums: 3,
            perm: 6,
            topic_sys_flag: 0,
        }],
        ..Default::default()
    }
    .to_json_bytes()
    .expect("route body")
    .to_vec();
    let r = conn.call(request_code::REGISTER_TOPIC_IN_NAMESRV, ext, body).await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    let all = vec![t1.clone(), t2.clone(), t3.clone(), t4.clone()];
    assert_eq!(
        routed(all.clone()).await.into_values().collect::<Vec<_>>(),
        [Some(4), Some(4), Some(2), Some(3)],
        "[{kind:?}] every topic registered so far is routed"
    );

    // mqadmin deleteTopic tells the name server too.
    let mut ext = ExtFields::new();
    ext.insert("topic", &t1);
    ext.insert("clusterName", &cluster);
    let r = conn.call(request_code::DELETE_TOPIC_IN_NAMESRV, ext, Vec::new()).await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    assert_eq!(
        routed(all).await.into_values().collect::<Vec<_>>(),
        [None, Some(4), Some(2), Some(3)],
        "[{kind:?}] only the deleted topic is gone"
    );

    // The registration lives as long as its connection.
    drop(conn);
    let took =
        eventually("the broker to go with its connection", Duration::from_secs(10), || async {
            !brokers_in(ns.addr, &cluster).await.contains_key(name)
        })
        .await;
    assert!(route_queues(ns.addr, &t2).await.is_empty());
    println!("[{kind:?}] partial registrations agree; the broker went {took:?} after its connection closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_registered_broker_when_it_registers_some_topics_under_a_real_namesrv_should_add_them_to_its_routes(
) {
    partial_registrations(NsKind::Real).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_registered_broker_when_it_registers_some_topics_under_baiji_namesrv_should_add_them_to_its_routes(
) {
    partial_registrations(NsKind::Baiji).await;
}

/// A broker under `--store-path-root-dir` restarted cleanly (SIGTERM, then the same command)
/// under a running push consumer: each queue keeps its messages and continues at its own end,
/// so the consumer, resuming from the offsets it holds, reads every message sent after the
/// restart. Without the offsets
/// kept, the new messages would start again at 0 and a consumer pulling at its old offset once
/// producers had passed it would skip everything below (the window the README describes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_with_a_store_dir_when_restarted_cleanly_should_let_a_running_consumer_read_every_new_message(
) {
    let t0 = Instant::now();
    let ns = NameServer::start(NsKind::Baiji).await;
    let nsa = ns.addr_string();
    let topic = "ClusterStoreRestart";
    let mut broker = BrokerProcess::start_with(&nsa, "StoreCluster", "baiji-s", 2, true).await;
    let rt = client_runtime("store-restart");
    let producer = Arc::new(producer(&rt, &nsa, "store-restart-producers").await);
    let inbox = Arc::new(Inbox::default());
    let mut consumer =
        push_consumer(&rt, &nsa, "store-restart-consumers", topic, 0, &inbox, None).await;
    let (first, failures) = send_range(&producer, topic, 0..200, 2).await;
    assert!(first.len() == 200 && failures.is_empty(), "{failures:?}");
    eventually("the first 200 consumed", Duration::from_secs(60), || async { inbox.len() >= 200 })
        .await;
    // The client commits every 5 s: let its commit of the 200 reach the broker.
    tokio::time::sleep(Duration::from_secs(6)).await;
    broker.stop().await;
    broker.start_again().await;
    // Sent at once after the restart, more per queue than the consumer had read before it.
    let (second, failures) = send_range(&producer, topic, 200..800, 2).await;
    assert!(second.len() == 600 && failures.is_empty(), "{failures:?}");
    let old_end: BTreeMap<i32, u64> = first.iter().fold(BTreeMap::new(), |mut m, s| {
        let e = m.entry(s.queue).or_insert(0);
        *e = (*e).max(s.offset + 1);
        m
    });
    // Each queue continues at its own end: its messages are kept (so an offset below the
    // end still names the old message), and a new one never takes an old one's offset.
    for s in &second {
        assert!(
            s.offset >= old_end.get(&s.queue).copied().unwrap_or(0),
            "message {} got offset {} on queue {}, below the queue's end in the last run {old_end:?}",
            s.seq,
            s.offset,
            s.queue
        );
    }
    let took = eventually(
        "every message sent after the restart consumed",
        Duration::from_secs(60),
        || async {
            let got: BTreeSet<u64> = inbox.snapshot().iter().map(|d| d.seq).collect();
            (200..800).all(|s| got.contains(&s))
        },
    )
    .await;
    println!(
        "all 600 messages sent after the clean restart consumed {took:?} after the sends; test took {:?}",
        t0.elapsed()
    );
    consumer.shutdown().await;
    unwrap_producer(producer).shutdown().await;
    let _ = rt.shutdown().await;
    broker.stop().await;
}
