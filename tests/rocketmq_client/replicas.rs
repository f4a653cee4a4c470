//! A replicated broker set (issue 27) under the real rocketmq-client-rust 1.0.0, at the client's
//! settings of the cluster tests (3 s send timeout, 2 retries, route polls every 10 s): three
//! `baiji broker` processes with one broker name and `--replica-peers` under baiji's name server.
//! The producer and a push consumer are given only the name server's address; the leader is
//! killed (SIGKILL) while the producer sends. Every message the client was told `SEND_OK` must
//! reach the consumer at the queue and offset the send reported (the new leader holds the same
//! queues), and the consumer must go on after the failover by itself.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster_support::{
    client_runtime, eventually, free_port, producer, push_consumer, route, send_range,
    BrokerProcess, Inbox, NameServer, NsKind, Sent,
};

const SET: &str = "set-a";

/// The address the name server routes as the set's `brokerId 0`.
async fn leader(ns: SocketAddr) -> Option<String> {
    let r = route(ns, "TBW102").await?;
    r.broker_datas.into_iter().find(|b| b.broker_name == SET)?.broker_addrs.get(&0).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_set_when_its_leader_is_killed_under_a_real_producer_and_push_consumer_should_deliver_every_acknowledged_message_at_its_offset(
) {
    let ns = NameServer::start(NsKind::Baiji).await;
    let nsa = ns.addr_string();
    let peers: Vec<String> = (1..=3).map(|id| format!("{id}=127.0.0.1:{}", free_port())).collect();
    let peers = peers.join(";");
    let mut replicas = Vec::new();
    for id in 1..=3u64 {
        let extra: Vec<String> = [
            "--replica-id",
            &id.to_string(),
            "--replica-peers",
            &peers,
            "--keep-acknowledged-secs",
            "3600",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        replicas
            .push(Some(BrokerProcess::start_args(&nsa, "SetCluster", SET, 5, false, &extra).await));
    }
    // The first election may hand over once (openraft lets a candidate with a higher id take
    // the first term); the new leader registers again within 3 s of taking over. The clients
    // start once brokerId 0 has not changed for 4 s: a client's route is polled every 10 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut stable: (Option<String>, Instant) = (None, Instant::now());
    while stable.0.is_none() || stable.1.elapsed() < Duration::from_secs(4) {
        assert!(Instant::now() < deadline, "a leader routed as brokerId 0, stable for 4 s");
        let now = leader(ns.addr).await;
        if now != stable.0 {
            stable = (now, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let rt = client_runtime("replica-set");
    let topic = "ReplicatedTopic";
    let producer = Arc::new(producer(&rt, &nsa, "set-producers").await);
    let inbox = Arc::new(Inbox::default());
    let _consumer = push_consumer(&rt, &nsa, "set-consumers", topic, 0, &inbox, None).await;

    // Phase 1: all three up.
    let (mut sent, failures) = send_range(&producer, topic, 0..1_000, 4).await;
    assert!(failures.is_empty(), "sends failed with the whole set up: {failures:?}");
    eventually("phase 1 received", Duration::from_secs(60), || async { inbox.len() >= 1_000 })
        .await;

    // Phase 2: the leader killed 200 ms into the next 1,000 sends.
    let addr = leader(ns.addr).await.expect("a leader");
    let i = replicas
        .iter()
        .position(|r| r.as_ref().is_some_and(|r: &BrokerProcess| r.addr().to_string() == addr))
        .expect("the leader is one of the set");
    let mut dead = replicas[i].take().expect("the leader");
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        dead.kill();
        Instant::now()
    });
    let (p2, failures) = send_range(&producer, topic, 1_000..2_000, 4).await;
    let killed_at = killer.await.expect("killed");
    println!(
        "[set] phase 2: {} sends the client reported failed (then sent again) around the kill",
        failures.len()
    );
    sent.extend(p2);
    let new_leader = leader(ns.addr).await.expect("a new leader");
    assert_ne!(new_leader, addr, "the name server routes the new leader as brokerId 0");

    // Every acknowledged message reaches the consumer at its reported queue and offset.
    let want: BTreeSet<(u64, i32, i64)> =
        sent.iter().map(|s: &Sent| (s.seq, s.queue, s.offset as i64)).collect();
    let took = eventually("every acknowledged message received", Duration::from_secs(90), || {
        let want = &want;
        let inbox = &inbox;
        async move {
            let got: BTreeSet<(u64, i32, i64)> =
                inbox.snapshot().iter().map(|d| (d.seq, d.queue, d.offset)).collect();
            want.is_subset(&got)
        }
    })
    .await;
    println!(
        "[set] all 2,000 acknowledged messages received {took:?} after the last send; the kill was {:?} before that",
        killed_at.elapsed()
    );
    let mut copies: BTreeMap<u64, usize> = BTreeMap::new();
    for d in inbox.snapshot() {
        *copies.entry(d.seq).or_default() += 1;
    }
    let again = copies.values().filter(|n| **n > 1).count();
    println!("[set] {again} messages received more than once (at-least-once around the kill)");
    assert_eq!(copies.len(), 2_000, "nothing else was received");
    drop(replicas);
}
