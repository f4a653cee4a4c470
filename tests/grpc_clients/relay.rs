//! mqadmin's and the dashboard's consumer relays (`GET_CONSUMER_RUNNING_INFO` 307,
//! `CONSUME_MESSAGE_DIRECTLY` 309, over remoting) to a consumer that is a 5.x SDK session: the
//! broker asks it over its Telemetry stream as Apache's proxy does (`PrintThreadStackTraceCommand`,
//! `VerifyMessageCommand`, with a nonce) and answers the admin with the bodies the proxy makes.
//!
//! Only the Node.js SDK (1.0.8) answers these commands: with the stack trace `mock stack`, and
//! with `NOT_IMPLEMENTED` for a verify. The Python SDK 5.1.2 reads only Settings and
//! transaction checks from its stream (`rpc_channel.py`), so it never answers: no test here.

use baiji::remoting::client::request_once;
use baiji::remoting::code::{request_code as rc, response_code as code};
use baiji::remoting::header::SendHeaderVersion;
use baiji::remoting::{ExtFields, RemotingCommand};
use serde_json::Value;

use crate::support::{create_topic, s, start_broker, start_with_line, unique, Sdk, PATIENCE};

#[tokio::test]
async fn given_a_node_push_consumer_when_mqadmin_asks_307_and_309_should_relay_over_telemetry() {
    let b = start_broker(|_| {}).await;
    let topic = unique("GrpcRelay");
    let group = unique("grpc_relay");
    create_topic(&b, &topic, 4).await;
    // A group that never consumes holds the message: baiji frees one every group consumed, and
    // 309 needs it after the Node consumer took it.
    let mut holder = baiji::remoting::client::Connection::connect(b.remoting, PATIENCE)
        .await
        .expect("a connection");
    let body = format!(
        r#"{{"clientID":"127.0.0.1@holder","producerDataSet":[],"consumerDataSet":[{{"groupName":"holder","consumeType":"CONSUME_ACTIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"topic":"{topic}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}}],"unitMode":false}}]}}"#
    );
    let hb = RemotingCommand::request(rc::HEART_BEAT, 0).with_body(body.into_bytes());
    let r = holder.call_within(hb, PATIENCE).await.expect("the heartbeat is answered");
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let to = ("grpc_relay_tests", topic.as_str(), 0, 4);
    let send = crate::common::raw::send(SendHeaderVersion::V2, to, "", b"again".to_vec());
    let r = request_once(b.remoting, send, PATIENCE).await.expect("the broker answers a send");
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let msg_id = r.ext_fields.get("msgId").expect("an offset msgId").to_string();
    let args = ["--mode", "push", "--endpoint", &b.grpc, "--topic", &topic, "--group", &group];
    let (node, started) = start_with_line(
        Sdk::Node,
        "grpc_consumer.js",
        args.iter().map(|a| a.to_string()).collect(),
    )
    .await;
    let client = s(&started, "clientId").to_string();
    assert!(!client.is_empty(), "the consumer says its client id: {started}");

    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", &group);
    ext.insert("clientId", &client);
    ext.insert_bool("jstackEnable", true);
    let req = RemotingCommand::request(rc::GET_CONSUMER_RUNNING_INFO, 0).with_ext_fields(ext);
    let r = request_once(b.remoting, req, PATIENCE).await.expect("307 is answered");
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let info: Value = serde_json::from_slice(&r.body).expect("a ConsumerRunningInfo JSON body");
    assert_eq!(info["jstack"], "mock stack", "the stack trace the SDK sent: {info}");

    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", &group);
    ext.insert("clientId", &client);
    ext.insert("msgId", &msg_id);
    ext.insert("topic", &topic);
    let req = RemotingCommand::request(rc::CONSUME_MESSAGE_DIRECTLY, 0).with_ext_fields(ext);
    let r = request_once(b.remoting, req, PATIENCE).await.expect("309 is answered");
    assert_eq!(r.code, code::SUCCESS, "the proxy answers SUCCESS with the client's verdict: {r:?}");
    let result: Value = serde_json::from_slice(&r.body).expect("a ConsumeMessageDirectlyResult");
    assert_eq!(result["remark"], "from gRPC client", "{result}");
    assert!(
        result.get("consumeResult").is_none(),
        "NOT_IMPLEMENTED leaves consumeResult unset, as the proxy does: {result}"
    );

    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "another_group");
    ext.insert("clientId", &client);
    let req = RemotingCommand::request(rc::GET_CONSUMER_RUNNING_INFO, 0).with_ext_fields(ext);
    let r = request_once(b.remoting, req, PATIENCE).await.expect("answered");
    assert_eq!(r.code, code::SYSTEM_ERROR, "not a member of that group: {r:?}");
    drop(node);
    drop(holder);
    b.running.shutdown().await;
}
