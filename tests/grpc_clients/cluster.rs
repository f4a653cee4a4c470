//! Two baiji brokers in one cluster (the second registers with the first's embedded name
//! server): a gRPC client pointed at either one uses both, each at its own gRPC endpoint —
//! QueryRoute lists every broker that serves gRPC (issue 14 item 4).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use baiji::remoting::body::{JsonBody, TopicRouteData};
use baiji::remoting::client::request_once;
use baiji::remoting::code::{request_code as rc, response_code as code};
use baiji::remoting::header::{GetRouteInfoRequestHeader, ToExtFields};
use baiji::remoting::RemotingCommand;

use super::support::{
    create_topic, of_kind, pull_until, run, s, start_broker, unique, Broker, Sdk, PATIENCE,
};

const QUEUES: i32 = 4;
const MESSAGES: usize = 16;

/// Waits until the name server at `ns` routes `topic` to `brokers` brokers.
async fn wait_for_route(ns: std::net::SocketAddr, topic: &str, brokers: usize) {
    let start = Instant::now();
    loop {
        let h = GetRouteInfoRequestHeader { topic, accept_standard_json_only: true };
        let req = RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC, 0)
            .with_ext_fields(h.to_ext_fields());
        let r = request_once(ns, req, PATIENCE).await.expect("the name server answers");
        if r.code == code::SUCCESS {
            let route = TopicRouteData::from_json_slice(&r.body).expect("a route body");
            if route.queue_datas.len() >= brokers {
                return;
            }
        }
        assert!(start.elapsed() < PATIENCE, "{topic} is routed to {brokers} brokers in time");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The UNIQ_KEYs stored in `topic` on `b` once it holds at least one message.
async fn ids_on(b: &Broker, topic: &str) -> BTreeSet<String> {
    let msgs =
        pull_until(b, topic, QUEUES, "the broker got some of the messages", |m| !m.is_empty())
            .await;
    msgs.iter().filter_map(|m| super::support::props(m).get("UNIQ_KEY").cloned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_two_baiji_brokers_when_a_grpc_client_uses_one_should_send_to_and_receive_from_both()
{
    let a = start_broker(|c| c.core.broker_name = "baiji-a".into()).await;
    let ns = a.running.namesrv_addr().expect("a's embedded name server");
    let b = start_broker(|c| {
        c.core.broker_name = "baiji-b".into();
        c.remoting.namesrv_listen = None;
        c.core.namesrv_addr = Some(ns.to_string());
    })
    .await;
    let topic = unique("GrpcCluster");
    create_topic(&a, &topic, QUEUES).await;
    create_topic(&b, &topic, QUEUES).await;
    wait_for_route(ns, &topic, 2).await;

    // A producer pointed at broker a: the Python SDK spreads sends over the route's queues.
    let count = MESSAGES.to_string();
    let lines = run(
        Sdk::Python,
        "producer.py",
        vec!["normal".into(), a.grpc.clone(), topic.clone(), count.clone()],
    )
    .await;
    let sent: BTreeSet<String> =
        of_kind(&lines, "sent").iter().map(|l| s(l, "message_id").to_owned()).collect();
    assert_eq!(sent.len(), MESSAGES, "every send answered: {lines:#?}");
    let on_a = ids_on(&a, &topic).await;
    let on_b = ids_on(&b, &topic).await;
    assert!(on_a.is_disjoint(&on_b), "each message stored once: {on_a:?} / {on_b:?}");
    let stored: BTreeSet<String> = on_a.union(&on_b).cloned().collect();
    assert_eq!(stored, sent, "both brokers together hold exactly what was sent");

    // A SimpleConsumer pointed at broker b receives the messages of both.
    let group = unique("GrpcClusterGroup");
    let lines = run(
        Sdk::Python,
        "consumer_simple.py",
        vec![
            "--mode".into(),
            "receive".into(),
            "--endpoint".into(),
            b.grpc.clone(),
            "--topic".into(),
            topic.clone(),
            "--group".into(),
            group,
            "--count".into(),
            count,
            "--invisible".into(),
            "30".into(),
        ],
    )
    .await;
    let got: BTreeSet<String> =
        of_kind(&lines, "message").iter().map(|l| s(l, "id").to_owned()).collect();
    assert_eq!(got, sent, "the consumer of b received every message, a's too: {lines:#?}");
    b.running.shutdown().await;
    a.running.shutdown().await;
}
