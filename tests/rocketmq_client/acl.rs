//! RocketMQ plain ACL with the real client's ACL hook (`AclClientRPCHook` with
//! `SessionCredentials`): a broker started with an `acl-file` the test writes into a temp dir
//! serves signed sends and consumption on permitted topics, refuses denied topics, wrong
//! secrets and admin codes of a normal account with `NO_PERMISSION` (16), which the client
//! surfaces to the application.

use std::sync::Arc;
use std::time::Duration;

use rocketmq_client_rust::{
    AclClientRPCHook, ClientRuntime, DefaultMQProducer, MQClientException, MQPushConsumer,
    SessionCredentials,
};

use crate::completeness_support::*;

const PATIENCE: Duration = Duration::from_secs(60);
const OK_TOPIC: &str = "acl_ok_topic";
const DENIED_TOPIC: &str = "acl_denied_topic";

const ACL: &str = r#"globalWhiteRemoteAddresses:
accounts:
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - acl_ok_topic=PUB|SUB
      - acl_denied_topic=DENY
  - accessKey: RocketMQ
    secretKey: adminsecret
    admin: true
"#;

fn hook(ak: &str, sk: &str) -> Arc<AclClientRPCHook> {
    Arc::new(AclClientRPCHook::new(SessionCredentials::with_keys(ak.to_string(), sk.to_string())))
}

async fn signed_producer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
    ak: &str,
    sk: &str,
) -> DefaultMQProducer {
    let mut p = DefaultMQProducer::builder(Arc::clone(rt))
        .client_config(client_config(namesrv, &format!("{group}-producer")))
        .producer_group(group)
        .name_server_addr(namesrv)
        .send_msg_timeout(5_000)
        .retry_times_when_send_failed(0)
        .rpc_hook(hook(ak, sk))
        .build();
    p.start().await.expect("the producer starts");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acl_credentials_should_send_and_consume_permitted_topics_and_be_refused_elsewhere() {
    let dir = std::env::temp_dir().join(format!("baiji-acl-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("plain_acl.yml");
    std::fs::write(&path, ACL).expect("the ACL file is written");
    let b = start_broker(|c| c.acl_file = Some(path.clone())).await;
    let rt = client_runtime("acl");

    // The admin account creates the topics; the normal account may not.
    let mut admin = signed_producer(&rt, &b.namesrv, "acl_admin", "RocketMQ", "adminsecret").await;
    create_topic(&mut admin, OK_TOPIC, 2).await;
    create_topic(&mut admin, DENIED_TOPIC, 2).await;
    let mut p = signed_producer(&rt, &b.namesrv, "acl_producer", "rocketmq2", "12345678").await;
    let e = p
        .create_topic("TBW102", "acl_made_by_user", 2, Default::default())
        .await
        .expect_err("a normal account may not create topics");
    let refusal = e
        .source_ref::<MQClientException>()
        .unwrap_or_else(|| panic!("the broker's answer is the cause: {e:?}"));
    assert_eq!(refusal.response_code(), 16, "refused with NO_PERMISSION: {refusal:?}");
    assert!(!b.has_topic("acl_made_by_user"), "the refused creation did nothing");

    // Permitted topic: sent and consumed.
    send_to(&p, message(OK_TOPIC, "allowed", "TagA", &[], &[]), 0).await;
    let log = Log::default();
    let mut c = push_consumer(&rt, &b.namesrv, "acl_group", "acl-consumer")
        .rpc_hook(Some(hook("rocketmq2", "12345678")))
        .build();
    c.subscribe(OK_TOPIC, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener("acl-consumer", &log));
    c.start().await.expect("the consumer starts");
    assert!(
        eventually(PATIENCE, || log.snapshot().iter().any(|d| d.body == "allowed")).await,
        "the permitted message is consumed: {:?}",
        log.snapshot()
    );

    // Denied topic: the application sees NO_PERMISSION.
    let e = p
        .send(message(DENIED_TOPIC, "denied", "TagA", &[], &[]))
        .await
        .expect_err("a send to a denied topic is refused");
    assert_eq!(e.broker_response_code(), Some(16), "refused with NO_PERMISSION: {e}");

    // A wrong secret is refused, on a permitted topic too.
    let wrong = signed_producer(&rt, &b.namesrv, "acl_wrong", "rocketmq2", "not-the-secret").await;
    let e = wrong
        .send(message(OK_TOPIC, "wrong-secret", "TagA", &[], &[]))
        .await
        .expect_err("a wrong secret is refused");
    assert_eq!(e.broker_response_code(), Some(16), "refused with NO_PERMISSION: {e}");
    assert_eq!(b.appended(OK_TOPIC), 1, "only the permitted message was stored");
    assert_eq!(b.appended(DENIED_TOPIC), 0, "nothing was stored on the denied topic");

    c.shutdown().await;
    p.shutdown().await;
    admin.shutdown().await;
    b.broker.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
