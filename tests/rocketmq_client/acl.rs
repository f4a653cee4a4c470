//! RocketMQ plain ACL with the real client's ACL hook (`AclClientRPCHook` with
//! `SessionCredentials`): a broker started with an `acl-file` the test writes into a temp dir
//! serves signed sends and consumption on permitted topics, refuses denied topics, wrong
//! secrets and admin codes of a normal account with `NO_PERMISSION` (16), which the client
//! surfaces to the application. And ali-ons (Node.js) with its own ACL options, whose
//! signature is the same scheme (tests/node/acl.js).

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
    let b = start_broker(|c| c.security.acl_file = Some(path.clone())).await;
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

/// ali-ons 3.12.0 with its ACL options (`accessKey` / `secretKey`): it signs as RocketMQ's
/// `AclClientRPCHook` does (HMAC-SHA1, base64, over the sorted values of every ext field it
/// sends, `AccessKey` and its own `OnsChannel: ALIYUN` among them, then the body), so baiji
/// verifies it. tests/node/acl.js sends and consumes on the permitted topic; a send to the
/// denied topic is answered NO_PERMISSION (16) with RocketMQ's remark, which ali-ons's
/// `send()` retries and then reports as its own "still failed" error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_ali_ons_with_acl_credentials_should_send_and_consume_permitted_topics_and_be_refused_elsewhere(
) {
    let dir = std::env::temp_dir().join(format!("baiji-acl-ons-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("plain_acl.yml");
    std::fs::write(&path, ACL).expect("the ACL file is written");
    let b = start_broker(|c| c.security.acl_file = Some(path.clone())).await;
    let rt = client_runtime("acl-ons");
    // ali-ons sends only to topics that have a route: the admin creates both.
    let mut admin = signed_producer(&rt, &b.namesrv, "acl_admin", "RocketMQ", "adminsecret").await;
    create_topic(&mut admin, OK_TOPIC, 2).await;
    create_topic(&mut admin, DENIED_TOPIC, 2).await;
    let refused_before = b.broker.acl_refused();

    let ns = b.namesrv.clone();
    let out = tokio::task::spawn_blocking(move || {
        run_node(
            "acl.js",
            &[
                "--namesrv",
                &ns,
                "--topic",
                OK_TOPIC,
                "--denied-topic",
                DENIED_TOPIC,
                "--group",
                "acl_ons_group",
                "--access-key",
                "rocketmq2",
                "--secret-key",
                "12345678",
                "--max-ms",
                "45000",
            ],
            Duration::from_secs(60),
        )
    })
    .await
    .expect("node acl.js");
    let line = |k: &str| out.iter().find_map(|v| v.get(k).cloned());
    let sent = line("sent").unwrap_or_else(|| panic!("a permitted send: {out:?}"));
    assert_eq!(sent["sendStatus"], "SEND_OK", "ali-ons's signed send is accepted: {out:?}");
    let denied = line("deniedSend").unwrap_or_else(|| panic!("a denied send: {out:?}"));
    assert!(denied["error"].is_string(), "send() to the denied topic fails: {out:?}");
    let answer = line("deniedAnswer").unwrap_or_else(|| panic!("the broker's answer: {out:?}"));
    assert_eq!(answer["code"], 16, "the denied send is answered NO_PERMISSION: {out:?}");
    assert_eq!(
        answer["remark"],
        format!("No default permission for topic:{DENIED_TOPIC}"),
        "past the signature check (which comes first): the signature verified, the topic \
         did not: {out:?}"
    );
    let consumed = line("consumed").unwrap_or_else(|| panic!("a consumed message: {out:?}"));
    assert_eq!(
        (consumed["topic"].as_str(), consumed["body"].as_str()),
        (Some(OK_TOPIC), Some("signed by ali-ons")),
        "the signed consumer receives the permitted message: {out:?}"
    );
    assert_eq!(b.appended(OK_TOPIC), 1, "the permitted message was stored once");
    assert_eq!(b.appended(DENIED_TOPIC), 0, "nothing was stored on the denied topic");
    assert!(
        b.broker.acl_refused() > refused_before,
        "the refusals were the ACL's (counted): {}",
        b.broker.acl_refused()
    );

    admin.shutdown().await;
    b.broker.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
