//! RocketMQ plain ACL (`acl-file`): requests signed here exactly as the Java
//! `AclClientRPCHook` signs them (the custom header fields and `AccessKey` in a `TreeMap`, their
//! values concatenated in key order, then the body, HMAC-SHA1 keyed with the secret key,
//! base64), checked against the permission matrix: every request code unsigned, signed sends,
//! pulls, heartbeats and admin codes per account, the name server's open route queries, one-way
//! refusals, the whitelists, and the file reloaded while the broker runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use base64::Engine as _;
use hmac::{KeyInit, Mac};

use super::*;

const AK: &str = "rocketmq2";
const SK: &str = "12345678";
const ADMIN_AK: &str = "RocketMQ";
const ADMIN_SK: &str = "adminsecret";

/// An account with `PUB|SUB` on `AclOk`, `DENY` on `AclDenied`, `PUB` on `AclPubOnly`, `DENY`
/// on other topics, `SUB` on groups but `g_denied`; and an admin.
fn acl_yaml(denied_perm: &str, global_white: &str) -> String {
    format!(
        r#"globalWhiteRemoteAddresses:
{global_white}
accounts:
  - accessKey: {AK}
    secretKey: {SK}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - AclOk=PUB|SUB
      - AclDenied={denied_perm}
      - AclPubOnly=PUB
    groupPerms:
      - g_denied=DENY
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    whiteRemoteAddress: 192.168.0.*
    admin: true
  - accessKey: loopback
    secretKey: unused-secret
    whiteRemoteAddress: 127.0.0.1-5
    defaultTopicPerm: DENY
"#
    )
}

/// Writes `text` to a fresh file in the temp dir.
fn acl_file(text: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "baiji-acl-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("plain_acl.yml");
    std::fs::write(&path, text).expect("the ACL file is written");
    path
}

async fn acl_broker(text: &str) -> (RunningBroker, PathBuf) {
    let path = acl_file(text);
    let p = path.clone();
    (start_broker(move |c| c.security.acl_file = Some(p)).await, path)
}

/// Signs `req` as the Java `AclClientRPCHook` does.
fn signed(mut req: RemotingCommand, ak: &str, sk: &str) -> RemotingCommand {
    req.ext_fields.insert("AccessKey", ak);
    let sorted: BTreeMap<String, String> = req
        .ext_fields
        .iter()
        .filter(|(k, _)| *k != "Signature")
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut content = Vec::new();
    for v in sorted.values() {
        content.extend_from_slice(v.as_bytes());
    }
    content.extend_from_slice(&req.body);
    let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(sk.as_bytes()).expect("any key");
    mac.update(&content);
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    req.ext_fields.insert("Signature", &sig);
    req
}

fn heartbeat(group: &str, topic: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"clientID":"127.0.0.1@acl","producerDataSet":[],"consumerDataSet":[{{"groupName":"{group}","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"classFilterMode":false,"topic":"{topic}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}}],"unitMode":false}}]}}"#
    );
    RemotingCommand::request(rc::HEART_BEAT, 0).with_body(body.into_bytes())
}

fn assert_refused(resp: &RemotingCommand, remark: &str) {
    assert_eq!(resp.code, code::NO_PERMISSION, "refused with NO_PERMISSION: {resp:?}");
    assert_eq!(resp.remark.as_deref(), Some(remark), "RocketMQ's AclException text: {resp:?}");
}

fn assert_allowed(resp: &RemotingCommand) {
    assert_ne!(resp.code, code::NO_PERMISSION, "not refused by the ACL: {resp:?}");
}

#[tokio::test]
async fn given_an_acl_file_when_requests_are_unsigned_or_badly_signed_should_refuse_them() {
    let (broker, _) = acl_broker(&acl_yaml("DENY", "")).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    let resp = c.call(send_request("AclOk", 0, &b"x"[..])).await;
    assert_refused(&resp, "No accessKey is configured");
    let resp = c.call(signed(send_request("AclOk", 0, &b"x"[..]), AK, "wrong")).await;
    assert_refused(&resp, &format!("Check signature failed for accessKey={AK}"));
    let resp = c.call(signed(send_request("AclOk", 0, &b"x"[..]), "nobody", SK)).await;
    assert_refused(&resp, "No acl config for nobody");
    // The body is signed: the same fields with another body fail.
    let mut tampered = signed(send_request("AclOk", 0, &b"x"[..]), AK, SK);
    tampered.body = bytes::Bytes::from_static(b"y");
    assert_refused(&c.call(tampered).await, &format!("Check signature failed for accessKey={AK}"));
    // Nothing refused reached a processor: the refused sends created no topic, stored nothing.
    let _ = c.call(send_request("NeverMade", 0, &b"x"[..])).await;
    let _ = c.call(signed(send_request("NeverMade", 0, &b"x"[..]), AK, "wrong")).await;
    let resp = c.call(signed(max_offset_request("NeverMade", 0), ADMIN_AK, ADMIN_SK)).await;
    assert!(
        resp.code != code::SUCCESS || resp.ext_fields.get("offset") == Some("0"),
        "a refused send stores nothing: {resp:?}"
    );
    // The connection stays usable: a good signature is served.
    let resp = c.call(signed(send_request("AclOk", 0, &b"x"[..]), AK, SK)).await;
    assert_eq!(resp.code, code::SUCCESS, "{resp:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_topic_and_group_perms_should_allow_and_refuse_per_the_matrix() {
    let (broker, _) = acl_broker(&acl_yaml("DENY", "")).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    let send = |t: &str| signed(send_request(t, 0, &b"x"[..]), AK, SK);
    assert_eq!(c.call(send("AclOk")).await.code, code::SUCCESS);
    assert_eq!(c.call(send("AclPubOnly")).await.code, code::SUCCESS);
    assert_refused(&c.call(send("AclDenied")).await, "No default permission for topic:AclDenied");
    assert_refused(&c.call(send("Unlisted")).await, "No default permission for topic:Unlisted");
    // A retry topic follows its group: SUB on the group, which g_denied lacks.
    assert_refused(
        &c.call(send("%RETRY%g_denied")).await,
        "No default permission for group:g_denied",
    );
    // Heartbeats: each subscribed topic and each group needs SUB.
    assert_allowed(&c.call(signed(heartbeat("g_ok", "AclOk"), AK, SK)).await);
    assert_refused(
        &c.call(signed(heartbeat("g_ok", "AclPubOnly"), AK, SK)).await,
        "No default permission for topic:AclPubOnly",
    );
    assert_refused(
        &c.call(signed(heartbeat("g_denied", "AclOk"), AK, SK)).await,
        "No default permission for group:g_denied",
    );
    // Pulls: topic SUB and group SUB.
    assert_allowed(&c.call(signed(pull_request("g_ok", "AclOk", 0, 0, 0, 0), AK, SK)).await);
    assert_refused(
        &c.call(signed(pull_request("g_ok", "AclPubOnly", 0, 0, 0, 0), AK, SK)).await,
        "No default permission for topic:AclPubOnly",
    );
    assert_refused(
        &c.call(signed(pull_request("g_denied", "AclOk", 0, 0, 0, 0), AK, SK)).await,
        "No default permission for group:g_denied",
    );
    // A recall (370): topic PUB. Past the ACL, a bad handle is the processor's refusal.
    let recall = |t: &str| {
        let mut ext = ExtFields::new();
        ext.insert("topic", t);
        ext.insert("recallHandle", "bad");
        signed(request(rc::RECALL_MESSAGE, ext), AK, SK)
    };
    assert_eq!(c.call(recall("AclPubOnly")).await.code, code::ILLEGAL_OPERATION);
    assert_refused(&c.call(recall("AclDenied")).await, "No default permission for topic:AclDenied");
    // Admin codes: refused to a normal account, served to the admin.
    assert_refused(
        &c.call(signed(create_topic_request("Made", 4), AK, SK)).await,
        &format!("Need admin permission for request code=17, but accessKey={AK} is not"),
    );
    let resp = c.call(signed(create_topic_request("Made", 4), ADMIN_AK, ADMIN_SK)).await;
    assert_eq!(resp.code, code::SUCCESS, "{resp:?}");
    broker.shutdown().await;
}

/// Every request code, unsigned, on both ports: the broker serves none of them (each is
/// refused, or not supported at all), the name server serves only its open route queries.
#[tokio::test]
async fn given_every_request_code_unsigned_should_follow_the_permission_matrix() {
    let (broker, _) = acl_broker(&acl_yaml("DENY", "")).await;
    let mut b = Conn::open(broker_addr(&broker)).await;
    let mut n = Conn::open(broker.namesrv_addr().expect("a name server")).await;
    let open_on_namesrv = [
        rc::GET_KV_CONFIG,
        rc::GET_ROUTEINFO_BY_TOPIC,
        rc::GET_BROKER_CLUSTER_INFO,
        rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        rc::GET_TOPICS_BY_CLUSTER,
        rc::GET_SYSTEM_TOPIC_LIST_FROM_NS,
    ];
    for (code_, name) in rc::ALL {
        let mut ext = ExtFields::new();
        ext.insert("topic", "AclOk");
        let resp = b.call(request(*code_, ext.clone())).await;
        assert!(
            resp.code == code::NO_PERMISSION || resp.code == code::REQUEST_CODE_NOT_SUPPORTED,
            "broker: unsigned {name} is refused or unsupported: {resp:?}"
        );
        let resp = n.call(request(*code_, ext)).await;
        if open_on_namesrv.contains(code_) {
            assert_allowed(&resp);
        } else {
            assert!(
                resp.code == code::NO_PERMISSION || resp.code == code::REQUEST_CODE_NOT_SUPPORTED,
                "name server: unsigned {name} is refused or unsupported: {resp:?}"
            );
        }
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_refused_oneway_request_should_answer_nothing_and_keep_the_connection() {
    let (broker, _) = acl_broker(&acl_yaml("DENY", "")).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    assert_eq!(
        c.call(signed(send_request("AclOk", 0, &b"x"[..]), AK, SK)).await.code,
        code::SUCCESS
    );
    let mut oneway = send_request("AclOk", 0, &b"x"[..]);
    oneway.opaque = c.opaque();
    oneway.flag |= RemotingCommand::FLAG_ONEWAY;
    c.write(&oneway).await;
    // `call` fails on an answer with another opaque: the refusal was not answered.
    let resp = c.call(signed(max_offset_request("AclOk", 0), AK, SK)).await;
    assert_eq!(resp.code, code::SUCCESS, "the next request's answer comes first: {resp:?}");
    assert_eq!(resp.ext_fields.get("offset"), Some("1"), "the refused one-way send stored nothing");
    assert_eq!(broker.acl_refused(), 1, "the unanswered refusal is counted");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_whitelisted_addresses_should_skip_signature_checks() {
    // Account whitelist: 127.0.0.1-5 covers the test's loopback peer, so a wrong secret passes.
    let (broker, _) = acl_broker(&acl_yaml("DENY", "")).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    let resp = c.call(signed(send_request("AclOk", 0, &b"x"[..]), "loopback", "wrong")).await;
    assert_eq!(resp.code, code::SUCCESS, "{resp:?}");
    broker.shutdown().await;
    // Global whitelist: no credentials at all.
    let (broker, _) = acl_broker(&acl_yaml("DENY", "  - 10.0.0.1,127.0.*.*")).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    let resp = c.call(send_request("AclDenied", 0, &b"x"[..])).await;
    assert_eq!(resp.code, code::SUCCESS, "{resp:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_the_acl_file_changes_should_apply_the_new_rules() {
    let (broker, path) = acl_broker(&acl_yaml("DENY", "")).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    let send = || signed(send_request("AclDenied", 0, &b"x"[..]), AK, SK);
    assert_refused(&c.call(send()).await, "No default permission for topic:AclDenied");
    std::fs::write(&path, acl_yaml("PUB", "")).expect("the ACL file is rewritten");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let resp = c.call(send()).await;
        if resp.code == code::SUCCESS {
            break;
        }
        assert!(Instant::now() < deadline, "the new rules apply within the patience: {resp:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A file that no longer parses keeps the rules in force.
    std::fs::write(&path, "accounts: [ {accessKey: x}").expect("the ACL file is broken");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(c.call(send()).await.code, code::SUCCESS, "the previous rules stay");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_no_acl_file_should_serve_unsigned_requests_as_before() {
    let broker = start_broker(|_| {}).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    let resp = c.call(send_request("AclOk", 0, &b"x"[..])).await;
    assert_eq!(resp.code, code::SUCCESS, "{resp:?}");
    broker.shutdown().await;
}

/// A standalone name server (`baiji namesrv --acl-file`) with the ACL `text`.
async fn acl_namesrv(text: &str) -> RunningBroker {
    let path = acl_file(text);
    baiji::broker::start_namesrv_with(BrokerConfig {
        security: baiji::broker::SecurityConfig { acl_file: Some(path), ..Default::default() },
        remoting: baiji::broker::RemotingConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            ..Default::default()
        },
        ..BrokerConfig::default()
    })
    .await
    .expect("the name server starts")
}

#[tokio::test]
async fn given_a_standalone_name_server_with_an_acl_file_should_answer_routes_to_all_and_register_only_admins(
) {
    let namesrv = acl_namesrv(&acl_yaml("DENY", "")).await;
    let addr = namesrv.namesrv_addr().expect("its address");
    let mut c = Conn::open(addr).await;
    let register = || super::hardening::register_broker_request("ns_acl", 0, "127.0.0.1:10", "NsT");
    assert_refused(&c.call(register()).await, "No accessKey is configured");
    assert_refused(
        &c.call(signed(register(), AK, SK)).await,
        &format!("Need admin permission for request code=103, but accessKey={AK} is not"),
    );
    assert_refused(
        &c.call(signed(register(), ADMIN_AK, "wrong")).await,
        &format!("Check signature failed for accessKey={ADMIN_AK}"),
    );
    assert_eq!(
        super::hardening::route_addrs(&mut c, "NsT", "ns_acl").await,
        None,
        "a route query is answered unsigned, and no refused registration made a route"
    );
    let r = c.call(signed(register(), ADMIN_AK, ADMIN_SK)).await;
    assert_eq!(r.code, code::SUCCESS, "the admin registers: {r:?}");
    let route = super::hardening::route_addrs(&mut c, "NsT", "ns_acl").await;
    assert_eq!(
        route.and_then(|a| a.get(&0).cloned()).as_deref(),
        Some("127.0.0.1:10"),
        "the admin's registration is routed, and the route is readable unsigned"
    );
    assert_eq!(namesrv.acl_refused(), 3, "each refusal is counted");
    namesrv.shutdown().await;
}

#[tokio::test]
async fn given_an_acl_protected_name_server_should_register_a_broker_that_signs_and_refuse_a_wrong_secret(
) {
    use baiji::broker::acl::Credentials;
    let namesrv = acl_namesrv(&acl_yaml("DENY", "")).await;
    let ns = namesrv.namesrv_addr().expect("its address");
    let external = |name: &'static str, secret: &'static str| {
        move |c: &mut BrokerConfig| {
            c.remoting.namesrv_listen = None;
            c.core.namesrv_addr = Some(ns.to_string());
            c.core.broker_name = name.to_string();
            c.remoting.inner_client_authentication_credentials =
                Some(Credentials { access_key: ADMIN_AK.into(), secret_key: secret.into() });
        }
    };
    let good = start_broker(external("acl_signed", ADMIN_SK)).await;
    let mut watcher = Conn::open(ns).await;
    let deadline = Instant::now() + PATIENCE;
    while super::hardening::route_addrs(&mut watcher, "TBW102", "acl_signed").await.is_none() {
        assert!(Instant::now() < deadline, "a broker signing with the admin account registers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(namesrv.acl_refused(), 0, "its signed registration was not refused");
    let bad = start_broker(external("acl_wrong", "not-the-secret")).await;
    while namesrv.acl_refused() == 0 {
        assert!(Instant::now() < deadline, "the wrong secret's registration reaches the ACL");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        super::hardening::route_addrs(&mut watcher, "TBW102", "acl_wrong").await,
        None,
        "a broker signing with a wrong secret is not registered"
    );
    bad.shutdown().await;
    let refused = namesrv.acl_refused();
    good.shutdown().await;
    assert_eq!(namesrv.acl_refused(), refused, "the signed UNREGISTER_BROKER is accepted too");
    namesrv.shutdown().await;
}

/// The commit-log offset an answered send's offset msgId names (its last 16 hex digits).
fn stored_offset(send_answer: &RemotingCommand) -> i64 {
    let id = send_answer.ext_fields.get("msgId").expect("a msgId");
    i64::from_str_radix(&id[id.len() - 16..], 16).expect("a hex offset")
}

fn view_request(offset: i64) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("offset", &offset.to_string());
    request(rc::VIEW_MESSAGE_BY_ID, ext)
}

fn batch_ack(group: &str, topic: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"brokerName":"baiji-a","acks":[{{"c":"{group}","t":"{topic}","r":"0","so":0,"q":0,"rq":0,"pt":1,"it":60000,"b":"AQ=="}}]}}"#
    );
    request(rc::BATCH_ACK_MESSAGE, ExtFields::new()).with_body(body.into_bytes())
}

fn send_back(group: &str, origin_topic: &str, offset: i64) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("offset", &offset.to_string());
    ext.insert("group", group);
    ext.insert("delayLevel", "0");
    ext.insert("originTopic", origin_topic);
    ext.insert("maxReconsumeTimes", "16");
    ext.insert("unitMode", "false");
    request(rc::CONSUMER_SEND_MSG_BACK, ext)
}

#[tokio::test]
async fn given_resources_known_only_after_a_lookup_should_check_them_too() {
    // review-e77444b L3: VIEW_MESSAGE_BY_ID and BATCH_ACK_MESSAGE needed only a valid
    // signature (any account could read any topic's messages, half messages included, and
    // ack other groups' in-flight messages); a send-back checked only its group.
    let (broker, _) = acl_broker(&acl_yaml("DENY", "")).await;
    let mut c = Conn::open(broker_addr(&broker)).await;
    let ok = c.call(signed(send_request("AclOk", 0, &b"x"[..]), AK, SK)).await;
    assert_eq!(ok.code, code::SUCCESS, "{ok:?}");
    let pub_only = c.call(signed(send_request("AclPubOnly", 0, &b"y"[..]), AK, SK)).await;
    assert_eq!(pub_only.code, code::SUCCESS, "{pub_only:?}");
    // Viewing needs SUB on the message's topic; the admin sees everything.
    let resp = c.call(signed(view_request(stored_offset(&ok)), AK, SK)).await;
    assert_eq!(resp.code, code::SUCCESS, "SUB on AclOk: {resp:?}");
    let resp = c.call(signed(view_request(stored_offset(&pub_only)), AK, SK)).await;
    assert_eq!(resp.code, code::NO_PERMISSION, "PUB only on AclPubOnly: {resp:?}");
    assert!(resp.remark.as_deref().is_some_and(|r| r.contains("AclPubOnly")), "{resp:?}");
    let mut admin = Conn::open(broker_addr(&broker)).await;
    let resp = admin.call(signed(view_request(stored_offset(&pub_only)), ADMIN_AK, ADMIN_SK)).await;
    assert_ne!(resp.code, code::NO_PERMISSION, "the admin may: {resp:?}");
    // A batch ack needs SUB on each checkpoint's topic and group.
    assert_allowed(&c.call(signed(batch_ack("g_ok", "AclOk"), AK, SK)).await);
    let resp = c.call(signed(batch_ack("g_denied", "AclOk"), AK, SK)).await;
    assert_refused(&resp, "No default permission for group:g_denied");
    let resp = c.call(signed(batch_ack("g_ok", "Unlisted"), AK, SK)).await;
    assert_refused(&resp, "No default permission for topic:Unlisted");
    // A send-back needs PUB on its origin topic (Java's PlainAccessResource) and its group.
    assert_allowed(&c.call(signed(send_back("g_ok", "AclOk", stored_offset(&ok)), AK, SK)).await);
    let resp = c.call(signed(send_back("g_ok", "Unlisted", stored_offset(&ok)), AK, SK)).await;
    assert_refused(&resp, "No default permission for topic:Unlisted");
    broker.shutdown().await;
}
