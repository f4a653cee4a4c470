//! The gRPC port under `--acl-file`, spoken to with a tonic client over loopback TCP: what the
//! Python SDK cannot send cleanly (nothing signed, a whitelisted peer, upper-case hex, a
//! Telemetry stream without the rights its Settings name, RPCs it never makes as asked).

use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::Request;

use super::pb::messaging_service_client::MessagingServiceClient;
use super::pb::{
    self, telemetry_command, Code, EndTransactionRequest, HeartbeatRequest, Message,
    QueryRouteRequest, Resource, SendMessageRequest, Settings, SystemProperties, TelemetryCommand,
};
use crate::broker::security::sign::{sign_content_hex, Credentials};
use crate::broker::{BrokerConfig, RunningBroker};
use crate::sync::{AtomicU64, Ordering};

/// The SDKs' `x-mq-date-time` format (`yyyyMMdd'T'HHmmss'Z'`); any value verifies, as in
/// RocketMQ (ACL 1.0 does not check its age).
const DATE: &str = "20240102T030405Z";

const ACL: &str = r#"
accounts:
  - accessKey: writer
    secretKey: writer-secret
    defaultTopicPerm: PUB
    defaultGroupPerm: SUB
  - accessKey: reader
    secretKey: reader-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
  - accessKey: nobody
    secretKey: nobody-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
  - accessKey: local
    secretKey: local-secret
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
"#;

fn acl_file(text: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    // Relaxed: a unique number, nothing else synchronises on it.
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("baiji-grpc-acl-unit-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plain_acl.yml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn broker(acl: &str) -> (RunningBroker, MessagingServiceClient<Channel>) {
    let (b, c, _) = broker_at(acl).await;
    (b, c)
}

/// [`broker`], and where its ACL file is.
async fn broker_at(acl: &str) -> (RunningBroker, MessagingServiceClient<Channel>, PathBuf) {
    let path = acl_file(acl);
    let mut config = BrokerConfig::default();
    config.remoting.listen = "127.0.0.1:0".parse().unwrap();
    config.remoting.namesrv_listen = None;
    config.remoting.fast_listen_port = Some(0);
    config.grpc.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
    config.security.acl_file = Some(path.clone());
    let b = crate::broker::start(config).await.unwrap();
    let uri = format!("http://{}", b.grpc_addr().unwrap());
    let channel = Endpoint::from_shared(uri).unwrap().connect().await.unwrap();
    (b, MessagingServiceClient::new(channel), path)
}

/// `msg` with a client id and, given an account, the SDKs' signature metadata (`upper`: the
/// hex in upper case, as RocketMQ's own test writes it).
fn req<T>(msg: T, account: Option<(&str, &str)>, upper: bool) -> Request<T> {
    let mut r = Request::new(msg);
    let m = r.metadata_mut();
    m.insert("x-mq-client-id", MetadataValue::from_static("acl-test-client"));
    if let Some((ak, sk)) = account {
        let mut sig = sign_content_hex(DATE.as_bytes(), sk);
        if upper {
            sig = sig.to_ascii_uppercase();
        }
        let auth = format!(
            "MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"
        );
        m.insert("x-mq-date-time", MetadataValue::from_static(DATE));
        m.insert("authorization", auth.parse().unwrap());
    }
    r
}

fn res(name: &str) -> Option<Resource> {
    Some(Resource { name: name.into(), ..Resource::default() })
}

fn send(topic: &str) -> SendMessageRequest {
    static N: AtomicU64 = AtomicU64::new(0);
    // Relaxed: a unique number.
    let n = N.fetch_add(1, Ordering::Relaxed);
    SendMessageRequest {
        messages: vec![Message {
            topic: res(topic),
            system_properties: Some(SystemProperties {
                message_id: format!("ACL{n:029X}"),
                message_type: pb::MessageType::Normal as i32,
                born_host: "127.0.0.1".into(),
                ..SystemProperties::default()
            }),
            body: b"acl".to_vec(),
            ..Message::default()
        }],
    }
}

fn code(s: Option<&pb::Status>) -> i32 {
    s.map_or(-1, |s| s.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_acl_file_when_a_send_is_unsigned_or_badly_signed_should_answer_unauthorized() {
    let (b, mut c) = broker(ACL).await;
    let before = b.acl_refused();
    let r = c.send_message(req(send("AclT"), None, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Unauthorized as i32, "unsigned: {r:?}");
    assert!(r.entries.is_empty(), "nothing was sent");
    let wrong = Some(("writer", "not-the-secret"));
    let r = c.send_message(req(send("AclT"), wrong, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Unauthorized as i32, "a wrong secret: {r:?}");
    let unknown = Some(("stranger", "x"));
    let r = c.send_message(req(send("AclT"), unknown, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Unauthorized as i32, "an unknown account: {r:?}");
    let right = Some(("writer", "writer-secret"));
    let r = c.send_message(req(send("AclT"), right, true)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Ok as i32, "the right keys, hex upper case: {r:?}");
    assert_eq!(b.acl_refused(), before + 3, "each refusal counted with remoting's");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_whitelisted_peer_should_pass_unsigned_or_with_its_accounts_address() {
    let open = "globalWhiteRemoteAddresses:\n  - 127.0.0.*\naccounts: []\n";
    let (b, mut c) = broker(open).await;
    let r = c.send_message(req(send("AclW"), None, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Ok as i32, "a globally white peer: {r:?}");
    b.shutdown().await;
    let (b, mut c) = broker(ACL).await;
    // `local` may publish nothing and signs wrongly, but its whiteRemoteAddress is loopback.
    let local = Some(("local", "wrong"));
    let r = c.send_message(req(send("AclW"), local, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Ok as i32, "the account's white address: {r:?}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_rpcs_the_sdk_makes_when_rights_are_missing_should_answer_forbidden() {
    let (b, mut c) = broker(ACL).await;
    let forbidden = Code::Forbidden as i32;
    let reader = Some(("reader", "reader-secret"));
    let nobody = Some(("nobody", "nobody-secret"));
    // EndTransaction needs PUB on its topic.
    let end = EndTransactionRequest {
        topic: res("AclE"),
        message_id: "m".into(),
        transaction_id: "t".into(),
        resolution: pb::TransactionResolution::Commit as i32,
        ..EndTransactionRequest::default()
    };
    let r = c.end_transaction(req(end, reader, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), forbidden, "EndTransaction without PUB: {r:?}");
    // QueryRoute needs PUB or SUB on the topic.
    let route = QueryRouteRequest { topic: res("AclR"), ..QueryRouteRequest::default() };
    let r = c.query_route(req(route.clone(), nobody, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), forbidden, "QueryRoute with DENY: {r:?}");
    let r = c.query_route(req(route, reader, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Ok as i32, "QueryRoute with SUB: {r:?}");
    // A consumer's heartbeat needs its group, and SUB on it.
    let hb = HeartbeatRequest { group: None, client_type: pb::ClientType::SimpleConsumer as i32 };
    let r = c.heartbeat(req(hb, reader, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), forbidden, "a consumer heartbeat naming no group: {r:?}");
    let hb =
        HeartbeatRequest { group: res("G"), client_type: pb::ClientType::SimpleConsumer as i32 };
    let r = c.heartbeat(req(hb, nobody, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), forbidden, "a group without SUB: {r:?}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_telemetry_settings_without_the_rights_they_name_should_end_the_stream_denied() {
    let (b, mut c) = broker(ACL).await;
    let settings = |account| {
        let cmd = TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(Settings {
                client_type: Some(pb::ClientType::Producer as i32),
                pub_sub: Some(pb::settings::PubSub::Publishing(pb::Publishing {
                    topics: vec![Resource { name: "AclTel".into(), ..Resource::default() }],
                    ..pb::Publishing::default()
                })),
                ..Settings::default()
            })),
        };
        req(tokio_stream::iter(vec![cmd]), account, false)
    };
    // Unsigned: refused when the stream opens.
    let e = c.telemetry(settings(None)).await.expect_err("an unsigned stream is refused");
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    // Signed, but `reader` may not publish the topic its Settings name.
    let mut s =
        c.telemetry(settings(Some(("reader", "reader-secret")))).await.unwrap().into_inner();
    let first = tokio::time::timeout(Duration::from_secs(30), s.message()).await.unwrap();
    let e = first.expect_err("the Settings are refused");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    // `writer` may: its Settings are echoed.
    let mut s =
        c.telemetry(settings(Some(("writer", "writer-secret")))).await.unwrap().into_inner();
    let first = tokio::time::timeout(Duration::from_secs(30), s.message()).await.unwrap();
    let echoed = first.unwrap().expect("a reply");
    assert_eq!(code(echoed.status.as_ref()), Code::Ok as i32, "{echoed:?}");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_acl_file_changes_should_apply_the_new_rules_to_grpc() {
    let (b, mut c, path) = broker_at(ACL).await;
    let writer = Some(("writer", "writer-secret"));
    let r = c.send_message(req(send("AclReload"), writer, false)).await.unwrap().into_inner();
    assert_eq!(code(r.status.as_ref()), Code::Ok as i32, "{r:?}");
    let denied = ACL.replace("    defaultTopicPerm: PUB\n", "    defaultTopicPerm: DENY\n");
    // Longer text than before: the reload sees the new length even within one mtime tick.
    std::fs::write(&path, format!("{denied}\n# reloaded\n")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = c.send_message(req(send("AclReload"), writer, false)).await.unwrap().into_inner();
        if code(r.status.as_ref()) == Code::Forbidden as i32 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the reloaded rules apply: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_peer_under_acl_when_probed_for_its_grpc_port_should_answer_only_signed_by_an_admin(
) {
    let acl = format!("{ACL}  - accessKey: peer\n    secretKey: peer-secret\n    admin: true\n");
    let (b, _c, _) = broker_at(&acl).await;
    let peer = b.broker_addr().expect("a broker port").to_string();
    let port = b.grpc_addr().map(|a| a.port());
    assert_eq!(
        super::route::ask_grpc_port(&peer, None).await,
        Some(None),
        "an unsigned probe is refused by the peer's ACL (review L4)"
    );
    let writer = Credentials { access_key: "writer".into(), secret_key: "writer-secret".into() };
    assert_eq!(
        super::route::ask_grpc_port(&peer, Some(&writer)).await,
        Some(None),
        "GET_BROKER_CONFIG is an admin request"
    );
    let admin = Credentials { access_key: "peer".into(), secret_key: "peer-secret".into() };
    assert_eq!(
        super::route::ask_grpc_port(&peer, Some(&admin)).await,
        Some(port),
        "signed with the broker's admin credentials, the probe learns the peer's gRPC port"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_peer_whose_port_speaks_only_tls_when_probed_should_ask_again_over_tls() {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = acl_file("").parent().unwrap().to_path_buf();
    std::fs::write(dir.join("peer.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("peer.key"), made.signing_key.serialize_pem()).unwrap();
    let mut config = BrokerConfig::default();
    config.remoting.listen = "127.0.0.1:0".parse().unwrap();
    config.remoting.namesrv_listen = None;
    config.remoting.fast_listen_port = Some(0);
    config.grpc.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
    config.security.tls_mode = crate::broker::security::config::TlsMode::Enforcing;
    config.security.tls_cert = Some(dir.join("peer.pem"));
    config.security.tls_key = Some(dir.join("peer.key"));
    let b = crate::broker::start(config).await.unwrap();
    let peer = b.broker_addr().expect("a broker port").to_string();
    let plain = crate::remoting::client::request_once(
        peer.as_str(),
        crate::remoting::RemotingCommand::request(
            crate::remoting::code::request_code::GET_BROKER_CONFIG,
            0,
        ),
        Duration::from_secs(5),
    )
    .await;
    assert!(plain.is_err(), "the peer's port refuses plaintext: {plain:?}");
    assert_eq!(
        super::route::ask_grpc_port(&peer, None).await,
        Some(b.grpc_addr().map(|a| a.port())),
        "the probe learns the gRPC port over TLS (review L4)"
    );
    b.shutdown().await;
}
