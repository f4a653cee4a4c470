//! gRPC clients in the admin views (issue 25): a Python SDK producer and SimpleConsumer are
//! listed by the remoting admin codes as Apache's proxy registers them with its broker
//! (`GET_PRODUCER_CONNECTION_LIST` 204 with the topic as producer group,
//! `GET_CONSUMER_CONNECTION_LIST` 203, `GET_CONSUME_STATS` 208, `QUERY_TOPIC_CONSUME_BY_WHO`
//! 300, `GET_ALL_PRODUCER_INFO` 328), and leave them once they close (NotifyClientTermination)
//! or expire (killed, silent for `client-expiry-secs`).

use std::time::{Duration, Instant};

use baiji::remoting::client::request_once;
use baiji::remoting::code::{request_code as rc, response_code as code};
use baiji::remoting::{ExtFields, RemotingCommand};
use serde_json::Value;

use crate::support::{create_topic, start, start_broker, unique, Broker, Sdk, PATIENCE};

async fn ask(b: &Broker, code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
    let mut ext = ExtFields::new();
    for (k, v) in fields {
        ext.insert(k, v);
    }
    let req = RemotingCommand::request(code, 0).with_ext_fields(ext);
    request_once(b.remoting, req, PATIENCE).await.expect("the broker answers")
}

fn json(cmd: &RemotingCommand) -> Value {
    serde_json::from_slice(&cmd.body).unwrap_or_else(|e| panic!("a JSON body ({e}): {cmd:?}"))
}

/// Asks `code` with `fields` until `done` holds for the answer (at most [`PATIENCE`]).
async fn until(
    b: &Broker,
    code: i32,
    fields: &[(&str, &str)],
    what: &str,
    done: impl Fn(&RemotingCommand) -> bool,
) -> RemotingCommand {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = ask(b, code, fields).await;
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}; last answer {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_grpc_clients_when_asking_the_admin_views_should_list_them_until_they_leave() {
    let b = start_broker(|c| c.core.client_expiry_secs = 15).await;
    let topic = unique("GrpcAdmin");
    let group = unique("grpc_admin_group");
    create_topic(&b, &topic, 4).await;
    let stop = std::env::temp_dir().join(unique("grpc-admin-stop"));
    let stop_path = stop.to_string_lossy().into_owned();
    let producer = start(
        Sdk::Python,
        "producer.py",
        ["hold_until", b.grpc.as_str(), topic.as_str(), stop_path.as_str()]
            .map(str::to_owned)
            .to_vec(),
    )
    .await;
    let consumer = start(
        Sdk::Python,
        "consumer_simple.py",
        [
            "--endpoint",
            b.grpc.as_str(),
            "--topic",
            topic.as_str(),
            "--group",
            group.as_str(),
            "--mode",
            "hold",
            "--invisible",
            "20",
            "--linger",
            "120",
        ]
        .map(str::to_owned)
        .to_vec(),
    )
    .await;

    // The producer: in the producer group named after its topic, as the proxy registers it.
    let by_topic = [("producerGroup", topic.as_str())];
    let r = until(&b, rc::GET_PRODUCER_CONNECTION_LIST, &by_topic, "the producer listed", |r| {
        r.code == code::SUCCESS
    })
    .await;
    let body = json(&r);
    let p = &body["connectionSet"][0];
    assert_eq!(p["language"], "PYTHON", "the SDK's language: {body}");
    assert!(p["clientId"].as_str().is_some_and(|id| !id.is_empty()), "{body}");
    assert!(p["clientAddr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{body}");
    let r = ask(&b, rc::GET_ALL_PRODUCER_INFO, &[]).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let body = json(&r);
    let info = &body["data"][topic.as_str()][0];
    assert_eq!(info["clientId"], p["clientId"], "the same client in the producer table: {body}");
    assert!(info["remoteIP"].as_str().is_some_and(|a| a.starts_with("/127.0.0.1:")), "{body}");

    // The consumer: in its group, with its subscription, as the proxy shows a SimpleConsumer.
    let by_group = [("consumerGroup", group.as_str())];
    let r = until(&b, rc::GET_CONSUMER_CONNECTION_LIST, &by_group, "the consumer listed", |r| {
        r.code == code::SUCCESS
    })
    .await;
    let body = json(&r);
    let c = &body["connectionSet"][0];
    assert_eq!(c["language"], "PYTHON", "{body}");
    assert_eq!(body["subscriptionTable"][topic.as_str()]["subString"], "*", "{body}");
    assert_eq!(body["consumeType"], "CONSUME_ACTIVELY", "a SimpleConsumer: {body}");
    assert_eq!(body["messageModel"], "CLUSTERING", "{body}");
    let r = ask(&b, rc::GET_CONSUME_STATS, &by_group).await;
    assert_eq!(r.code, code::SUCCESS, "its consume stats: {r:?}");
    let table = json(&r)["offsetTable"].clone();
    assert_eq!(table.as_object().map(|m| m.len()), Some(4), "the topic's queues: {table}");
    let r = ask(&b, rc::QUERY_TOPIC_CONSUME_BY_WHO, &[("topic", topic.as_str())]).await;
    let groups = json(&r)["groupList"].clone();
    assert!(groups.as_array().is_some_and(|g| g.iter().any(|g| g == group.as_str())), "{groups}");

    // Closed: the producer says goodbye (NotifyClientTermination) and is gone at once.
    std::fs::write(&stop, b"stop").expect("the stop file is written");
    until(&b, rc::GET_PRODUCER_CONNECTION_LIST, &by_topic, "the producer gone", |r| {
        r.code == code::SYSTEM_ERROR
    })
    .await;
    drop(producer);
    // Expired: the consumer is killed, silent, and dropped after client-expiry-secs.
    drop(consumer);
    until(&b, rc::GET_CONSUMER_CONNECTION_LIST, &by_group, "the consumer expired", |r| {
        r.code == code::CONSUMER_NOT_ONLINE
    })
    .await;
    let _ = std::fs::remove_file(&stop);
    b.running.shutdown().await;
}
