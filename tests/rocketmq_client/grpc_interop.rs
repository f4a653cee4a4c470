//! One message, two protocols (issue 14 item 2): what a RocketMQ 5 SDK sends over gRPC reaches
//! a real remoting consumer (`rocketmq-client-rust` 1.0.0's push consumer), and what the
//! remoting producer sends reaches a gRPC SimpleConsumer — body, tag, keys, user properties
//! and message id (`UNIQ_KEY`) intact both ways. The gRPC side is the Python SDK 5.1.2
//! (`tests/grpc/*.py`, installed in `.tools/py` by `.ci/test`).

use std::collections::BTreeSet;
use std::time::Duration;

use rocketmq_client_rust::MQPushConsumer;
use serde_json::Value;

use crate::completeness_support::*;

/// Bound for every wait (a healthy run takes a few seconds).
const PATIENCE: Duration = Duration::from_secs(60);

async fn broker_with_grpc() -> (TestBroker, String) {
    let b = start_broker(|c| c.grpc.grpc_listen = Some("127.0.0.1:0".parse().expect("an address")))
        .await;
    let grpc = b.broker.grpc_addr().expect("the gRPC endpoint").to_string();
    (b, grpc)
}

fn of_kind<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|v| v["kind"] == kind).collect()
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or_else(|| panic!("{field} is a string in {v}"))
}

fn sorted_keys(keys: &str) -> Vec<&str> {
    let mut k: Vec<&str> = keys.split(' ').filter(|k| !k.is_empty()).collect();
    k.sort_unstable();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_messages_sent_over_grpc_when_a_remoting_push_consumer_subscribes_should_get_them_intact(
) {
    let (b, grpc) = broker_with_grpc().await;
    let rt = client_runtime("grpc-interop-in");
    let (topic, group) = ("grpc_to_remoting", "grpc_to_remoting_group");
    let mut admin = producer(&rt, &b.namesrv, "grpc_interop_admin").await;
    create_topic(&mut admin, topic, 4).await;
    let log = Log::default();
    let mut c = push_consumer(&rt, &b.namesrv, group, "interop-remoting").build();
    c.subscribe(topic, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener("interop-remoting", &log));
    c.start().await.expect("the push consumer starts");

    let lines = run_python("producer.py", &["normal", &grpc, topic, "4"], PATIENCE);
    let sent = of_kind(&lines, "sent");
    assert_eq!(sent.len(), 4, "the gRPC producer reports every send: {lines:#?}");
    assert!(
        eventually(PATIENCE, || log.len() >= sent.len()).await,
        "the remoting consumer gets every message; got {:?}",
        log.snapshot()
    );
    let got = log.snapshot();
    assert_eq!(got.len(), sent.len(), "each message once: {got:#?}");
    for line in sent {
        let id = text(line, "message_id");
        let d = got
            .iter()
            .find(|d| d.uniq == id)
            .unwrap_or_else(|| panic!("message {id} reaches the consumer with its id: {got:#?}"));
        assert_eq!(d.topic, topic);
        assert_eq!(d.body, text(line, "body"), "the body is intact");
        assert_eq!(d.prop("TAGS"), Some(text(line, "tag")), "the tag is intact");
        let keys: Vec<&str> =
            line["keys"].as_array().expect("keys").iter().filter_map(Value::as_str).collect();
        let mut keys_sorted = keys.clone();
        keys_sorted.sort_unstable();
        assert_eq!(sorted_keys(d.prop("KEYS").unwrap_or("")), keys_sorted, "the keys are intact");
        for (k, v) in line["props"].as_object().expect("props") {
            assert_eq!(d.prop(k), v.as_str(), "user property {k} is intact");
        }
        assert_eq!(d.reconsume_times, 0, "a first delivery");
    }
    c.shutdown().await;
    admin.shutdown().await;
    b.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_messages_sent_over_remoting_when_a_grpc_simple_consumer_receives_should_get_them_intact(
) {
    let (b, grpc) = broker_with_grpc().await;
    let rt = client_runtime("grpc-interop-out");
    let topic = "remoting_to_grpc";
    let mut p = producer(&rt, &b.namesrv, "remoting_to_grpc_producer").await;
    create_topic(&mut p, topic, 4).await;
    let mut ids = BTreeSet::new();
    for i in 0..3 {
        let body = format!("from-remoting-{i}");
        let (k1, k2) = (format!("k1-{i}"), format!("k2-{i}"));
        let size = i.to_string();
        let m = message(topic, &body, "TagR", &[&k1, &k2], &[("color", "green"), ("size", &size)]);
        ids.insert(send(&p, m).await);
    }
    let lines = run_python(
        "consumer_simple.py",
        &[
            "--mode",
            "receive",
            "--endpoint",
            &grpc,
            "--topic",
            topic,
            "--group",
            "remoting_to_grpc_group",
            "--count",
            "3",
            "--invisible",
            "30",
        ],
        PATIENCE,
    );
    let got = of_kind(&lines, "message");
    let got_ids: BTreeSet<String> = got.iter().map(|m| text(m, "id").to_owned()).collect();
    assert_eq!(got_ids, ids, "the gRPC consumer gets each message by its id: {lines:#?}");
    assert_eq!(got.len(), 3, "each once: {lines:#?}");
    for m in got {
        let body = text(m, "body");
        let i = body.strip_prefix("from-remoting-").expect("a body the producer sent");
        assert_eq!(text(m, "topic"), topic);
        assert_eq!(text(m, "tag"), "TagR", "the tag is intact: {m}");
        assert_eq!(m["keys"], serde_json::json!([format!("k1-{i}"), format!("k2-{i}")]));
        assert_eq!(m["properties"]["color"], "green", "user properties are intact: {m}");
        assert_eq!(m["properties"]["size"], i, "user properties are intact: {m}");
        for system in ["UNIQ_KEY", "TAGS", "KEYS", "WAIT"] {
            assert!(m["properties"].get(system).is_none(), "{system} is no user property: {m}");
        }
        assert_eq!(m["attempt"], 1, "a first delivery is attempt 1: {m}");
    }
    p.shutdown().await;
    b.broker.shutdown().await;
}
