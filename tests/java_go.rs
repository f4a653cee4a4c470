//! baiji driven by the real Apache RocketMQ **4.9.7 Java** remoting client and the real
//! **rocketmq-client-go v2.1.2**, unmodified official releases built from their source tags, as
//! `../shared/clients` (its README) packages them for offline use.
//!
//! Each test starts its own broker (free loopback ports, embedded name server) and runs one
//! scenario program as a child process: `tests/java_client/BaijiJavaClient.java` (compiled once
//! into `target/java_client/`) or `tests/go_client/main.go` (built once into
//! `target/go_client/`), both rebuilt only when their sources change. The program prints what
//! its client did as JSON lines (messages sent with the ids, queues and offsets the broker
//! answered; messages each consumer received; check-backs; replies; trace records; every client
//! error), and the test asserts on them: every sent message received exactly once per consumer
//! (every member, for broadcasting), tag and SQL92 filters respected, per-key order for orderly
//! consumption, exactly the committed transactional messages delivered after check-back,
//! `request()` answered, traces found by the query the dashboard makes (QUERY_MESSAGE by message
//! id on `RMQ_SYS_TRACE_TOPIC`), and the VIP channel (`listenPort - 2`) served.
//!
//! **The one allowed skip:** where the shared clients are absent (`../shared/clients` beside
//! the repository, or `$BAIJI_SHARED_CLIENTS`), every test here prints `skipped:
//! ../shared/clients not found (the real Java 4.9.7 / Go v2.1.2 clients)` and passes. Where
//! they are present, a missing JDK, Go toolchain or Debian jar fails the test (`.ci/test` runs
//! `java/install-deps.sh`; the harness runs `go/setup-module.sh`).
//!
//! Go v2.1.2 has no VIP-channel scenario (`WithVIPChannel` is stored and never read:
//! `internal/client.go` `brokerVIPChannel` has no caller) and no message query (its traces are
//! looked up with the Java client's).

#[path = "common/mod.rs"]
mod common;
#[path = "java_go/harness.rs"]
mod harness;
mod support;

use std::collections::{BTreeMap, BTreeSet};

use baiji::broker::BrokerConfig;
use harness::{Client, Run, Target};
use serde_json::Value;

/// Runs `scenario` of `client` on a broker of its own configured by `tweak`; `None` where the
/// shared clients are absent (the skip).
async fn scenario(
    client: Client,
    scenario: &str,
    tweak: impl FnOnce(&mut BrokerConfig),
    extra: &[(&str, String)],
) -> Option<Run> {
    let shared = harness::shared_clients()?;
    let broker = support::start_broker(tweak).await;
    let topic = support::unique(&format!("{client:?}_{scenario}"));
    let group = support::unique(&format!("{client:?}_{scenario}_g"));
    let t = Target { broker: &broker, topic: &topic, group: &group };
    let run = harness::run(client, &shared, scenario, &t, extra).await;
    broker.shutdown().await;
    Some(run)
}

fn text<'a>(e: &'a Value, field: &str) -> &'a str {
    e[field].as_str().unwrap_or_default()
}

/// How often `member` received each body.
fn counts(run: &Run, member: &str) -> BTreeMap<String, usize> {
    let mut n = BTreeMap::new();
    for e in run.received(member) {
        *n.entry(text(e, "body").to_string()).or_default() += 1;
    }
    n
}

/// Asserts `member` received each of `expected` exactly once and nothing else.
fn assert_each_once(run: &Run, member: &str, expected: &BTreeSet<String>, rule: &str) {
    let got = counts(run, member);
    let missing: Vec<&String> = expected.iter().filter(|b| !got.contains_key(*b)).collect();
    let twice: Vec<(&String, &usize)> = got.iter().filter(|(_, n)| **n > 1).collect();
    let unexpected: Vec<&String> = got.keys().filter(|b| !expected.contains(*b)).collect();
    assert!(
        missing.is_empty() && twice.is_empty() && unexpected.is_empty(),
        "{rule}: {member} receives each of the {} expected messages exactly once and nothing \
         else; missing {missing:?}, more than once {twice:?}, unexpected {unexpected:?}\n{}",
        expected.len(),
        run.problems()
    );
}

/// The bodies of the `sent` events, after checking the broker accepted each (`SEND_OK`; a
/// one-way send has no answer).
fn sent_ok(run: &Run, n: usize) -> BTreeSet<String> {
    let sent = run.of("sent");
    assert_eq!(sent.len(), n, "the client was told every send went through\n{}", run.problems());
    for s in &sent {
        if s["mode"] != "oneway" {
            assert_eq!(s["status"], "SEND_OK", "an accepted send answers SEND_OK: {s}");
        }
    }
    sent.iter().map(|s| text(s, "body").to_string()).collect()
}

/// Sync, async, one-way and batch sends, all read once by one consumer, each with the id,
/// queue and offset its send answered.
fn assert_produced(run: &Run) {
    run.assert_clean();
    let bodies = sent_ok(run, 16);
    for mode in ["sync", "async", "oneway", "batch"] {
        let n = run.of("sent").iter().filter(|s| s["mode"] == mode).count();
        assert_eq!(n, 4, "four {mode} sends were made\n{}", run.problems());
    }
    assert_each_once(run, "c1", &bodies, "every sent message is delivered");
    let received: BTreeMap<&str, &Value> =
        run.received("c1").into_iter().map(|e| (text(e, "body"), e)).collect();
    for s in run.of("sent") {
        let r = received[text(s, "body")];
        if s["id"].is_string() {
            assert_eq!(r["id"], s["id"], "the consumer sees the message id its send returned");
        }
        if s["queue"].is_number() {
            assert_eq!(
                (&r["queue"], &r["offset"]),
                (&s["queue"], &s["offset"]),
                "the consumer sees {} at the queue and offset its send returned",
                s["body"]
            );
        }
    }
}

async fn produce(client: Client) {
    let Some(run) = scenario(client, "produce", |_| {}, &[]).await else { return };
    assert_produced(&run);
}

#[tokio::test]
async fn given_a_java_producer_when_it_sends_sync_async_oneway_and_batch_should_deliver_each_once()
{
    produce(Client::Java).await;
}

#[tokio::test]
async fn given_a_go_producer_when_it_sends_sync_async_oneway_and_batch_should_deliver_each_once() {
    produce(Client::Go).await;
}

/// 24 messages over tags TagA, TagB, TagC and none, properties `a`/`b` varied: the consumer
/// gets exactly those `matches` accepts.
async fn filtered(client: Client, scenario_name: &str, matches: fn(&Value) -> bool, rule: &str) {
    let Some(run) = scenario(client, scenario_name, |_| {}, &[]).await else { return };
    run.assert_clean();
    sent_ok(&run, 24);
    let expected: BTreeSet<String> = run
        .of("sent")
        .into_iter()
        .filter(|s| matches(s))
        .map(|s| text(s, "body").to_string())
        .collect();
    assert!(!expected.is_empty(), "some messages match the subscription");
    assert_each_once(&run, "c1", &expected, rule);
}

fn tag_a_or_b(s: &Value) -> bool {
    s["tag"] == "TagA" || s["tag"] == "TagB"
}

fn a_over_5_and_b_x(s: &Value) -> bool {
    let a: i64 = text(s, "a").parse().unwrap_or(i64::MIN);
    a > 5 && s["b"] == "x"
}

#[tokio::test]
async fn given_a_java_tag_subscription_when_four_tags_are_sent_should_deliver_only_taga_and_tagb() {
    filtered(Client::Java, "tag", tag_a_or_b, "`TagA || TagB` delivers exactly TagA and TagB")
        .await;
}

#[tokio::test]
async fn given_a_go_tag_subscription_when_four_tags_are_sent_should_deliver_only_taga_and_tagb() {
    filtered(Client::Go, "tag", tag_a_or_b, "`TagA || TagB` delivers exactly TagA and TagB").await;
}

#[tokio::test]
async fn given_a_java_sql92_subscription_when_properties_vary_should_deliver_only_matches() {
    filtered(Client::Java, "sql", a_over_5_and_b_x, "`a > 5 AND b = 'x'` delivers exactly those")
        .await;
}

#[tokio::test]
async fn given_a_go_sql92_subscription_when_properties_vary_should_deliver_only_matches() {
    filtered(Client::Go, "sql", a_over_5_and_b_x, "`a > 5 AND b = 'x'` delivers exactly those")
        .await;
}

/// Six keys, six messages each, sent through a queue selector by key; an orderly consumer.
async fn orderly(client: Client) {
    let Some(run) = scenario(client, "orderly", |_| {}, &[]).await else { return };
    run.assert_clean();
    let bodies = sent_ok(&run, 36);
    let mut queues_of_key: BTreeMap<&str, BTreeSet<i64>> = BTreeMap::new();
    for s in run.of("sent") {
        queues_of_key.entry(text(s, "key")).or_default().insert(s["queue"].as_i64().unwrap_or(-1));
    }
    for (key, queues) in &queues_of_key {
        assert_eq!(queues.len(), 1, "the selector sends all of {key} to one queue: {queues:?}");
    }
    assert_each_once(&run, "c1", &bodies, "every message of every key is delivered");
    let mut seqs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut offsets: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in run.received("c1") {
        let (key, seq) = text(r, "body").split_once('-').expect("bodies are <key>-<seq>");
        seqs.entry(key.to_string()).or_default().push(seq.parse().expect("a sequence number"));
        offsets
            .entry(r["queue"].as_i64().unwrap_or(-1))
            .or_default()
            .push(r["offset"].as_i64().unwrap_or(-1));
    }
    for (key, got) in &seqs {
        assert_eq!(
            got,
            &(0..6).collect::<Vec<u32>>(),
            "{key} is consumed in the order it was sent"
        );
    }
    for (queue, got) in &offsets {
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "queue {queue} is consumed in offset order: {got:?}"
        );
    }
}

#[tokio::test]
async fn given_a_java_orderly_consumer_when_keys_go_through_a_selector_should_keep_key_order() {
    orderly(Client::Java).await;
}

#[tokio::test]
async fn given_a_go_orderly_consumer_when_keys_go_through_a_selector_should_keep_key_order() {
    orderly(Client::Go).await;
}

/// Two broadcasting members of one group: each receives every message once.
async fn broadcast(client: Client) {
    let Some(run) = scenario(client, "broadcast", |_| {}, &[]).await else { return };
    run.assert_clean();
    let bodies = sent_ok(&run, 8);
    for member in ["c1", "c2"] {
        assert_each_once(&run, member, &bodies, "a broadcasting member gets every message");
    }
}

#[tokio::test]
async fn given_two_java_broadcasting_members_when_messages_are_sent_should_each_get_all() {
    broadcast(Client::Java).await;
}

#[tokio::test]
async fn given_two_go_broadcasting_members_when_messages_are_sent_should_each_get_all() {
    broadcast(Client::Go).await;
}

/// A broadcasting member that starts after the first one read every message still gets them
/// all from the first offset when the broker keeps acknowledged messages
/// (`keep-acknowledged-secs`); by default they are freed at once and it finds none (README,
/// "What differs from a persistent broker").
#[tokio::test]
async fn given_kept_acknowledged_messages_when_a_java_broadcasting_member_starts_late_should_get_all(
) {
    let keep = |c: &mut BrokerConfig| c.core.keep_acknowledged_secs = 600;
    let Some(run) = scenario(Client::Java, "late_broadcast", keep, &[]).await else { return };
    run.assert_clean();
    let bodies = sent_ok(&run, 8);
    for member in ["c1", "c2"] {
        assert_each_once(&run, member, &bodies, "every broadcasting member gets every message");
    }
}

/// A transaction listener that commits or rolls back at once, or answers UNKNOW and decides on
/// check-back: exactly the committed messages are delivered, and only the undecided ones are
/// checked. The broker checks a half message 2 s old every 500 ms (RocketMQ's
/// `transactionTimeOut` / `transactionCheckInterval`, shortened).
async fn transaction(client: Client) {
    let tweak = |c: &mut BrokerConfig| {
        c.core.transaction_time_out = 2_000;
        c.core.transaction_check_interval = 500;
    };
    let Some(run) = scenario(client, "transaction", tweak, &[]).await else { return };
    run.assert_clean();
    sent_ok(&run, 5);
    let committed: BTreeSet<String> =
        ["now-commit-0", "check-commit-0", "check-commit-1"].map(String::from).into();
    assert_each_once(&run, "c1", &committed, "exactly the committed messages are delivered");
    let mut answers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for c in run.of("checked") {
        answers.entry(text(c, "body")).or_default().insert(text(c, "answer"));
    }
    let commit = BTreeSet::from(["COMMIT_MESSAGE"]);
    let rollback = BTreeSet::from(["ROLLBACK_MESSAGE"]);
    let expected = BTreeMap::from([
        ("check-commit-0", commit.clone()),
        ("check-commit-1", commit),
        ("check-rollback-0", rollback),
    ]);
    assert_eq!(
        answers, expected,
        "the broker checks back exactly the messages left UNKNOW, and the listener's answers \
         decide them"
    );
}

#[tokio::test]
async fn given_a_java_transaction_left_unknow_when_checked_back_should_deliver_only_commits() {
    transaction(Client::Java).await;
}

#[tokio::test]
async fn given_a_go_transaction_left_unknow_when_checked_back_should_deliver_only_commits() {
    transaction(Client::Go).await;
}

/// The trace types the Java and Go clients record for a message sent and consumed.
const TRACE_TYPES: [&str; 3] = ["Pub", "SubBefore", "SubAfter"];

/// Asserts `run` found every trace type of every id in `ids`.
fn assert_traced(run: &Run, ids: &[String], context: &str) {
    assert!(
        run.events.last().is_some_and(|e| e["kind"] == "done"),
        "the trace query runs to its end: {}",
        run.problems()
    );
    for id in ids {
        let types: BTreeSet<&str> = run
            .of("trace")
            .into_iter()
            .filter(|t| t["id"] == id.as_str())
            .flat_map(|t| t["types"].as_array().into_iter().flatten().filter_map(Value::as_str))
            .collect();
        assert!(
            TRACE_TYPES.iter().all(|t| types.contains(t)),
            "QUERY_MESSAGE by message id on RMQ_SYS_TRACE_TOPIC finds the {TRACE_TYPES:?} \
             records of {id}; found {types:?}\n{}{context}",
            run.problems()
        );
    }
}

/// The UNIQ_KEY ids of what `run` sent.
fn sent_ids(run: &Run) -> Vec<String> {
    run.of("sent").iter().map(|s| text(s, "id").to_string()).collect()
}

#[tokio::test]
async fn given_traced_java_clients_when_messages_flow_should_find_their_traces_by_message_id() {
    let Some(run) = scenario(Client::Java, "trace", |_| {}, &[]).await else { return };
    run.assert_clean();
    sent_ok(&run, 3);
    assert_traced(&run, &sent_ids(&run), "");
}

/// Two `request()` calls answered by a consumer that replies with `createReplyMessage`: each
/// returns the reply made for it.
async fn request(client: Client) {
    let Some(run) = scenario(client, "request", |_| {}, &[]).await else { return };
    run.assert_clean();
    let replies = run.of("reply");
    assert_eq!(replies.len(), 2, "each request() returns a reply\n{}", run.problems());
    for r in replies {
        assert_eq!(
            text(r, "body"),
            format!("reply-{}", text(r, "request")),
            "request() returns the reply made for its request"
        );
        assert!(
            !text(r, "correlationId").is_empty() && r["correlationId"] == r["requestCorrelationId"],
            "the reply carries its request's CORRELATION_ID: {r}"
        );
    }
}

#[tokio::test]
async fn given_a_java_consumer_that_replies_when_request_is_called_should_return_the_reply() {
    request(Client::Java).await;
}

#[tokio::test]
async fn given_a_go_consumer_that_replies_when_request_is_called_should_return_the_reply() {
    request(Client::Go).await;
}

/// A free loopback port `p` whose `p - 2`, where `vipChannelEnabled` clients go
/// (`MixAll.brokerVIPChannel`), is free too.
fn port_with_free_vip_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let p = l.local_addr().expect("its address").port();
        if p > 1026 && std::net::TcpListener::bind(("127.0.0.1", p - 2)).is_ok() {
            return p;
        }
    }
}

#[tokio::test]
async fn given_java_clients_with_the_vip_channel_when_they_send_and_consume_should_deliver_once() {
    let port = port_with_free_vip_port();
    let tweak = move |c: &mut BrokerConfig| {
        c.remoting.listen.set_port(port);
        c.remoting.fast_listen_port = None;
    };
    let Some(run) = scenario(Client::Java, "vip", tweak, &[]).await else { return };
    assert_produced(&run);
}

/// Looks the trace records of `ids` up with the Java client (`trace-query`), each for at most
/// `wait_ms`.
async fn query_traces(t: &Target<'_>, ids: &[String], wait_ms: u64) -> Option<Run> {
    let shared = harness::shared_clients()?;
    let extra =
        [("ids", ids.join(",")), ("types", TRACE_TYPES.join(",")), ("wait", wait_ms.to_string())];
    Some(harness::run(Client::Java, &shared, "trace-query", t, &extra).await)
}

/// RocketMQ keeps `RMQ_SYS_TRACE_TOPIC`, which no group consumes, as long as any commit log
/// (`fileReservedTime`, 72 h): the trace records outlive the broker's retention of ordinary
/// unconsumed messages (5 s here).
#[tokio::test]
async fn given_a_5s_retention_when_java_traces_are_queried_after_it_should_still_find_them() {
    let Some(shared) = harness::shared_clients() else { return };
    let broker = support::start_broker(|c| c.core.retention_secs = 5).await;
    let topic = support::unique("Java_trace_kept");
    let group = support::unique("Java_trace_kept_g");
    let t = Target { broker: &broker, topic: &topic, group: &group };
    let run = harness::run(Client::Java, &shared, "trace", &t, &[]).await;
    run.assert_clean();
    let ids = sent_ids(&run);
    assert_traced(&run, &ids, "");
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    let later = query_traces(&t, &ids, 3_000).await.expect("the shared clients are present");
    assert_traced(&later, &ids, "\n(queried 7 s after the first query found them)");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_traced_go_clients_when_messages_flow_should_find_their_traces_by_message_id() {
    let Some(shared) = harness::shared_clients() else { return };
    let broker = support::start_broker(|_| {}).await;
    let topic = support::unique("Go_trace");
    let group = support::unique("Go_trace_g");
    let t = Target { broker: &broker, topic: &topic, group: &group };
    let run = harness::run(Client::Go, &shared, "trace", &t, &[]).await;
    run.assert_clean();
    sent_ok(&run, 3);
    let ids = sent_ids(&run);
    let query = query_traces(&t, &ids, 10_000).await.expect("the shared clients are present");
    assert_traced(&query, &ids, &format!("\nthe Go client's stderr: {}", run.stderr));
    broker.shutdown().await;
}

/// What the admin side of [`relay`] got: the answers to 307 and 309, or why there were none.
#[derive(Debug)]
struct Relayed {
    running_info: Result<baiji::remoting::RemotingCommand, String>,
    consumed: Result<baiji::remoting::RemotingCommand, String>,
}

/// Writes the stop file when dropped, so that the client's scenario ends on every path.
struct StopOnDrop(std::path::PathBuf);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, b"stop");
    }
}

/// mqadmin's side of [`relay`]: once the client wrote `ready` (its client id and a message id),
/// asks the broker for the client's running info (307, jstack) and to have it consume that
/// message directly (309), as `DefaultMQAdminExtImpl` sends them.
async fn admin_relays(
    broker: &baiji::broker::RunningBroker,
    group: &str,
    ready: &std::path::Path,
    stop: std::path::PathBuf,
) -> Relayed {
    use baiji::remoting::code::request_code as rc;
    use baiji::remoting::{ExtFields, RemotingCommand};
    let _stop = StopOnDrop(stop);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let ready: Value = loop {
        if let Some(v) = std::fs::read(ready).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
            break v;
        }
        if std::time::Instant::now() > deadline {
            let e = "the client never wrote its ready file".to_string();
            return Relayed { running_info: Err(e.clone()), consumed: Err(e) };
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let addr = broker.broker_addr().expect("a broker address");
    let within = std::time::Duration::from_secs(20);
    let mut conn = match baiji::remoting::client::Connection::connect(addr, within).await {
        Ok(c) => c,
        Err(e) => {
            return Relayed { running_info: Err(e.to_string()), consumed: Err(e.to_string()) }
        }
    };
    // The Go program cannot tell its client id: it is the one the group's connection list shows.
    let client_id = match ready["clientId"].as_str() {
        Some(id) => id.to_string(),
        None => {
            let mut ext = ExtFields::new();
            ext.insert("consumerGroup", group);
            let req =
                RemotingCommand::request(rc::GET_CONSUMER_CONNECTION_LIST, 0).with_ext_fields(ext);
            let list = conn.call_within(req, within).await.ok();
            let body: Value =
                list.and_then(|r| serde_json::from_slice(&r.body).ok()).unwrap_or_default();
            text(&body["connectionSet"][0], "clientId").to_string()
        }
    };
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("clientId", &client_id);
    ext.insert_bool("jstackEnable", true);
    let req = RemotingCommand::request(rc::GET_CONSUMER_RUNNING_INFO, 0).with_ext_fields(ext);
    let running_info = conn.call_within(req, within).await.map_err(|e| e.to_string());
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("clientId", &client_id);
    ext.insert("msgId", text(&ready, "msgId"));
    let req = RemotingCommand::request(rc::CONSUME_MESSAGE_DIRECTLY, 0).with_ext_fields(ext);
    let consumed = conn.call_within(req, within).await.map_err(|e| e.to_string());
    Relayed { running_info, consumed }
}

/// Creates `topic` and subscribes a group that never consumes to it (its heartbeat's connection,
/// returned, stays open): baiji frees a message once every group consumed it, and 309 needs the
/// message still stored after the client consumed it.
async fn hold(
    broker: &baiji::broker::RunningBroker,
    topic: &str,
) -> baiji::remoting::client::Connection {
    use baiji::remoting::code::request_code as rc;
    use baiji::remoting::header::{CreateTopicRequestHeader, ToExtFields};
    use baiji::remoting::{ExtFields, RemotingCommand};
    let addr = broker.broker_addr().expect("a broker address");
    let within = std::time::Duration::from_secs(20);
    let mut conn =
        baiji::remoting::client::Connection::connect(addr, within).await.expect("a connection");
    let h = CreateTopicRequestHeader::read_write(topic, 4);
    let req =
        RemotingCommand::request(rc::UPDATE_AND_CREATE_TOPIC, 0).with_ext_fields(h.to_ext_fields());
    let r = conn.call_within(req, within).await.expect("the topic is created");
    assert_eq!(r.code, 0, "{r:?}");
    let body = format!(
        r#"{{"clientID":"127.0.0.1@holder","producerDataSet":[],"consumerDataSet":[{{"groupName":"holder_of_{topic}","consumeType":"CONSUME_ACTIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"topic":"{topic}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}}],"unitMode":false}}]}}"#
    );
    let req = RemotingCommand::request(rc::HEART_BEAT, 0)
        .with_ext_fields(ExtFields::new())
        .with_body(body.into_bytes());
    let r = conn.call_within(req, within).await.expect("the heartbeat is answered");
    assert_eq!(r.code, 0, "{r:?}");
    conn
}

/// mqadmin's `consumerStatus -s` and the dashboard's "resend to consumer" on a live consumer of
/// the real client: the broker relays 307 and 309 to it and answers with what it said (its
/// thread dump, marked by `stack_mark`; `success` as its `consumeResult` after its listener got
/// the message again).
async fn relay(client: Client, stack_mark: &str, success: Value) {
    let Some(shared) = harness::shared_clients() else { return };
    let broker = support::start_broker(|_| {}).await;
    let topic = support::unique(&format!("{client:?}_relay"));
    let group = support::unique(&format!("{client:?}_relay_g"));
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&topic);
    // Names repeat from one run to the next: an earlier run's files must not be taken as this one's.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory for the files the client and test share");
    let (ready, stop) = (dir.join("ready"), dir.join("stop"));
    let extra = [
        ("ready", ready.display().to_string()),
        ("stop", stop.display().to_string()),
        ("wait", "60000".to_string()),
    ];
    let _holder = hold(&broker, &topic).await;
    let t = Target { broker: &broker, topic: &topic, group: &group };
    let (run, relayed) = tokio::join!(
        harness::run(client, &shared, "relay", &t, &extra),
        admin_relays(&broker, &group, &ready, stop)
    );
    run.assert_clean();
    let info =
        relayed.running_info.unwrap_or_else(|e| panic!("307 is answered: {e}\n{}", run.problems()));
    assert_eq!(info.code, 0, "the client's running info comes back: {info:?}\n{}", run.problems());
    // Both clients write map keys that are objects (`mqTable`), and Go writes `jstack` without
    // escaping it: not JSON a parser takes, so the text is checked.
    let body = String::from_utf8_lossy(&info.body);
    assert!(
        body.contains("\"jstack\"") && body.contains(stack_mark),
        "jstackEnable: the client's own thread dump, which mentions {stack_mark:?}: {body}"
    );
    assert!(
        body.contains("subscriptionSet"),
        "the client's ConsumerRunningInfo as it wrote it: {body}"
    );
    let consumed =
        relayed.consumed.unwrap_or_else(|e| panic!("309 is answered: {e}\n{}", run.problems()));
    assert_eq!(consumed.code, 0, "the client consumed the message directly: {consumed:?}");
    let result: Value = serde_json::from_slice(&consumed.body)
        .unwrap_or_else(|e| panic!("a ConsumeMessageDirectlyResult JSON body: {e}: {consumed:?}"));
    assert_eq!(result["consumeResult"], success, "what the client's listener said: {result}");
    assert_eq!(
        counts(&run, "c1").get("relay-0"),
        Some(&2),
        "the listener got the message once by pulling and once more from 309\n{}",
        run.problems()
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_live_java_consumer_when_mqadmin_asks_307_and_309_should_relay_its_answers() {
    relay(Client::Java, "TID:", Value::from("CR_SUCCESS")).await;
}

#[tokio::test]
async fn given_a_live_go_consumer_when_mqadmin_asks_307_and_309_should_relay_its_answers() {
    // Go's `ConsumeResult` is a number: 0, `ConsumeSuccess`.
    relay(Client::Go, "goroutine ", Value::from(0)).await;
}
