//! `--acl-file` on the gRPC port, as the Python 5.x SDK signs (`MQv2-HMAC-SHA1` over
//! `x-mq-date-time`): the right keys send, a wrong secret and a missing permission are refused
//! with the proxy's codes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::support::{run, start_broker, unique, Broker, Sdk};

/// `UNAUTHORIZED` and `FORBIDDEN` of `apache.rocketmq.v2.Code`.
const UNAUTHORIZED: i64 = 40_100;
const FORBIDDEN: i64 = 40_300;

/// Accounts: `writer` may publish to everything but read nothing, `reader` may read
/// everything but publish nothing. Nothing is whitelisted.
const ACL: &str = r#"
accounts:
  - accessKey: writer
    secretKey: writer-secret
    defaultTopicPerm: PUB
    defaultGroupPerm: DENY
  - accessKey: reader
    secretKey: reader-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"#;

fn acl_file() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "baiji-grpc-acl-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("plain_acl.yml");
    std::fs::write(&path, ACL).expect("the ACL file is written");
    path
}

/// A broker with [`ACL`] and a topic name; the topic is created by the route query of the
/// first client allowed to ask for it.
async fn broker() -> (Broker, String) {
    let path = acl_file();
    let b = start_broker(move |c| c.security.acl_file = Some(path)).await;
    (b, unique("GrpcAcl"))
}

async fn send_as(b: &Broker, topic: &str, ak: &str, sk: &str) -> serde_json::Value {
    let args = ["acl_send", b.grpc.as_str(), topic, ak, sk].map(str::to_owned).to_vec();
    let out = run(Sdk::Python, "producer.py", args).await;
    out.into_iter().find(|v| v["kind"] == "sent" || v["kind"] == "refused").expect("an outcome")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_acl_file_when_the_python_sdk_signs_should_check_keys_and_publish_rights() {
    let (b, topic) = broker().await;
    let before = b.running.acl_refused();
    let ok = send_as(&b, &topic, "writer", "writer-secret").await;
    assert_eq!(ok["kind"], "sent", "the right keys send: {ok}");
    // Refused at the SDK's first call, its route query, which it reports without the code:
    // the script asks the route once more with the SDK's signed metadata.
    let bad = send_as(&b, &topic, "writer", "not-the-secret").await;
    assert_eq!(bad["kind"], "refused", "a wrong secret is refused: {bad}");
    assert_eq!(bad["route_code"], UNAUTHORIZED, "as UNAUTHORIZED: {bad}");
    let unsigned = send_as(&b, &topic, "", "").await;
    assert_eq!(unsigned["kind"], "refused", "no credentials at all: {unsigned}");
    assert_eq!(unsigned["route_code"], UNAUTHORIZED, "{unsigned}");
    let no_pub = send_as(&b, &topic, "reader", "reader-secret").await;
    assert_eq!(no_pub["kind"], "refused", "an account without PUB is refused: {no_pub}");
    assert_eq!(no_pub["code"], FORBIDDEN, "as FORBIDDEN: {no_pub}");
    assert!(b.running.acl_refused() > before, "gRPC refusals are counted with remoting's");
    b.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_acl_file_when_a_simple_consumer_lacks_sub_should_refuse_its_receive() {
    let (b, topic) = broker().await;
    // The topic exists once an account allowed to publish sent to it.
    let sent = send_as(&b, &topic, "writer", "writer-secret").await;
    assert_eq!(sent["kind"], "sent", "{sent}");
    let group = unique("GrpcAclGroup");
    let receive = |ak: &'static str, sk: &'static str| {
        let a = [
            "--endpoint",
            &b.grpc,
            "--topic",
            &topic,
            "--group",
            &group,
            "--mode",
            "acl-receive",
            "--ak",
            ak,
            "--sk",
            sk,
        ]
        .map(str::to_owned)
        .to_vec();
        run(Sdk::Python, "consumer_simple.py", a)
    };
    let out = receive("writer", "writer-secret").await;
    let r = out.iter().find(|v| v["kind"] == "refused").expect("refused");
    assert_eq!(r["code"], FORBIDDEN, "no SUB on the group or the topic: {r}");
    let out = receive("reader", "reader-secret").await;
    assert!(out.iter().any(|v| v["kind"] == "done"), "an account with SUB receives: {out:?}");
    b.running.shutdown().await;
}
