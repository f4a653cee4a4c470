//! Hardening: every input a client can send is answered within bounds, and nothing wedges
//! (bounded pull responses, client-driven state within limits, backpressure, the name
//! server's registrations per connection).

use super::*;
use baiji::remoting::client::{ClientError, Connection};

/// A `LITE_PULL_MESSAGE` as the Java 5.x lite pull consumer writes it: code 361, sysFlag 0x16
/// (lite pull, subscription, suspend), `subVersion` 0, TAG `*`, a 20 s suspend and
/// `maxMsgBytes = Integer.MAX_VALUE`.
fn java_lite_pull(group: &str, topic: &str, queue: i32, offset: i64) -> RemotingCommand {
    let h = PullMessageRequestHeader {
        consumer_group: group,
        topic,
        queue_id: queue,
        queue_offset: offset,
        max_msg_nums: 10,
        sys_flag: pull_sys_flag::LITE_PULL | SUB_AND_SUSPEND,
        commit_offset: 0,
        suspend_timeout_millis: 20_000,
        subscription: Some("*"),
        sub_version: 0,
        expression_type: "TAG",
        max_msg_bytes: Some(i32::MAX),
    };
    request(rc::LITE_PULL_MESSAGE, h.to_ext_fields())
}

#[tokio::test]
async fn given_five_4_mib_messages_when_lite_pulling_with_max_msg_bytes_unbounded_should_answer_each_pull_until_all_are_read(
) {
    const SIZE: usize = 4 * 1024 * 1024;
    let (broker, mut conn) = broker_with_topic("BigTopic").await;
    for i in 0..5u8 {
        let r = conn.call(send_request("BigTopic", 0, vec![i; SIZE])).await;
        assert_eq!(r.code, code::SUCCESS, "a 4 MiB message is accepted: {:?}", r.remark);
    }
    let mut offset = 0i64;
    let mut seen = Vec::new();
    let mut pulls = 0;
    while seen.len() < 5 {
        pulls += 1;
        assert!(pulls <= 10, "five messages take at most five pulls; seen {seen:?}");
        let r = conn.call(java_lite_pull("big_group", "BigTopic", 0, offset)).await;
        assert_eq!(r.code, code::SUCCESS, "a pull with messages behind it finds them: {r:?}");
        let msgs = decode_records(&r.body).expect("a valid pull body");
        assert!(!msgs.is_empty(), "a pull returns at least one message");
        for m in &msgs {
            assert_eq!(m.queue_offset, i64::try_from(seen.len()).unwrap(), "in order");
            assert_eq!(m.body.len(), SIZE, "the whole message is delivered");
            seen.push(m.queue_offset);
        }
        let next: i64 = r
            .ext_fields
            .get("nextBeginOffset")
            .and_then(|v| v.parse().ok())
            .expect("a nextBeginOffset");
        assert_eq!(next, offset + i64::try_from(msgs.len()).unwrap(), "next is after them");
        offset = next;
    }
    assert_eq!(seen, [0, 1, 2, 3, 4], "every message once, in order");
    broker.shutdown().await;
}

/// A Java 5.x heartbeat of one clustering consumer of `group` with client id `client_id`.
fn consumer_heartbeat(client_id: &str, group: &str) -> RemotingCommand {
    heartbeat_request(client_id, group, "RawTopic")
}

#[tokio::test]
async fn given_a_response_too_large_to_encode_should_answer_system_error_with_its_opaque() {
    // Five members whose client ids are 4 MiB each: their consumer list is over 16 MiB.
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut members = Vec::new();
    for i in 0..5u8 {
        let id = format!("{}{i}", "c".repeat(4 * 1024 * 1024 - 1));
        let mut m = Conn::open(broker_addr(&broker)).await;
        let r = m.call(consumer_heartbeat(&id, "huge_list_group")).await;
        assert_eq!(r.code, code::SUCCESS, "the heartbeat is accepted: {:?}", r.remark);
        members.push(m);
    }
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "huge_list_group");
    let r = conn.call(request(rc::GET_CONSUMER_LIST_BY_GROUP, ext)).await;
    assert_eq!(
        r.code,
        code::SYSTEM_ERROR,
        "a response that cannot be encoded is answered with an error: {:?}",
        r.remark
    );
    assert!(r.remark.as_deref().is_some_and(|m| m.len() < 1024), "with a short remark: {r:?}");
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

/// A `REGISTER_BROKER` as a Java broker writes it: the header fields of
/// `RegisterBrokerRequestHeader` and a `RegisterBrokerBody` with one topic, its CRC32 set.
pub(super) fn register_broker_request(
    name: &str,
    id: i64,
    addr: &str,
    topic: &str,
) -> RemotingCommand {
    register_broker_request_with(name, id, addr, topic, 4)
}

/// [`register_broker_request`] with `queues` read and write queues.
fn register_broker_request_with(
    name: &str,
    id: i64,
    addr: &str,
    topic: &str,
    queues: u64,
) -> RemotingCommand {
    let body = format!(
        r#"{{"filterServerList":[],"topicConfigSerializeWrapper":{{"dataVersion":{{"counter":1,"stateVersion":0,"timestamp":1700000000000}},"topicConfigTable":{{"{topic}":{{"order":false,"perm":6,"readQueueNums":{queues},"topicFilterType":"SINGLE_TAG","topicName":"{topic}","topicSysFlag":0,"writeQueueNums":{queues}}}}}}}}}"#
    );
    let crc = crc32fast::hash(body.as_bytes()) & 0x7FFF_FFFF;
    let mut ext = ExtFields::new();
    ext.insert("brokerAddr", addr);
    ext.insert_i64("brokerId", id);
    ext.insert("brokerName", name);
    ext.insert("clusterName", "DefaultCluster");
    ext.insert("haServerAddr", addr);
    ext.insert_bool("compressed", false);
    ext.insert_i64("bodyCrc32", i64::from(crc));
    ext.insert_bool("enableActingMaster", false);
    ext.insert_i64("heartbeatTimeoutMillis", 120_000);
    request(rc::REGISTER_BROKER, ext).with_body(body.into_bytes())
}

/// The broker ids and addresses the route of `topic` lists for broker `name`, if any.
pub(super) async fn route_addrs(
    conn: &mut Conn,
    topic: &str,
    name: &str,
) -> Option<std::collections::BTreeMap<u64, String>> {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    let r = conn.call(request(rc::GET_ROUTEINFO_BY_TOPIC, ext)).await;
    if r.code != code::SUCCESS {
        return None;
    }
    let route = TopicRouteData::from_json_slice(&r.body).expect("a valid route");
    route.broker_datas.into_iter().find(|b| b.broker_name == name).map(|b| b.broker_addrs)
}

/// Registers broker `probe` on `conn`, closes `conn`, and waits until the name server has
/// dropped `probe`: the close has been processed.
async fn close_registrant(mut conn: Conn, namesrv: SocketAddr, probe: &str) {
    let r = conn.call(register_broker_request(probe, 0, "127.0.0.1:3", "ProbeTopic")).await;
    assert_eq!(r.code, code::SUCCESS, "the probe registers: {r:?}");
    drop(conn);
    let mut watcher = Conn::open(namesrv).await;
    let deadline = Instant::now() + PATIENCE;
    while route_addrs(&mut watcher, "ProbeTopic", probe).await.is_some() {
        assert!(Instant::now() < deadline, "a closed registrant's broker leaves the routes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn given_a_registration_with_the_embedded_brokers_name_when_its_connection_closes_should_keep_the_embedded_broker(
) {
    let broker = start_broker(|_| {}).await;
    let namesrv = broker.namesrv_addr().expect("an embedded name server");
    let own = broker_addr(&broker).to_string();
    let mut intruder = Conn::open(namesrv).await;
    // A slave of the embedded broker, and a master with its name, on another connection.
    intruder.call(register_broker_request("baiji-a", 1, "127.0.0.1:1", "TBW102")).await;
    intruder.call(register_broker_request("baiji-a", 0, "127.0.0.1:2", "TBW102")).await;
    close_registrant(intruder, namesrv, "probe_broker").await;
    let mut client = Conn::open(namesrv).await;
    let addrs = route_addrs(&mut client, "TBW102", "baiji-a").await;
    assert_eq!(
        addrs.and_then(|a| a.get(&0).cloned()),
        Some(own),
        "the embedded broker stays routed, at its own address"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_master_and_its_slave_on_two_connections_when_the_slave_disconnects_should_keep_the_master(
) {
    let namesrv = baiji::broker::start_namesrv("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("the name server starts");
    let addr = namesrv.namesrv_addr().expect("its address");
    let mut master = Conn::open(addr).await;
    let r = master.call(register_broker_request("ms_broker", 0, "127.0.0.1:10", "MsTopic")).await;
    assert_eq!(r.code, code::SUCCESS, "the master registers: {r:?}");
    let mut slave = Conn::open(addr).await;
    let r = slave.call(register_broker_request("ms_broker", 1, "127.0.0.1:11", "MsTopic")).await;
    assert_eq!(r.code, code::SUCCESS, "the slave registers: {r:?}");
    let both = route_addrs(&mut master, "MsTopic", "ms_broker").await;
    assert_eq!(both.map(|a| a.len()), Some(2), "master and slave are routed");
    close_registrant(slave, addr, "probe_broker").await;
    let left = route_addrs(&mut master, "MsTopic", "ms_broker").await;
    assert_eq!(
        left.map(|a| a.into_iter().collect::<Vec<_>>()),
        Some(vec![(0, "127.0.0.1:10".to_string())]),
        "the master stays routed; only the slave left"
    );
    namesrv.shutdown().await;
}
fn update_offset_request(group: &str, topic: &str, queue: i32, offset: i64) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    ext.insert_i64("commitOffset", offset);
    request(rc::UPDATE_CONSUMER_OFFSET, ext)
}

fn query_offset_request(group: &str, topic: &str, queue: i32) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    request(rc::QUERY_CONSUMER_OFFSET, ext)
}

#[tokio::test]
async fn given_an_offset_for_a_group_name_over_255_chars_or_an_unknown_group_should_refuse_and_store_nothing(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    // 64 KiB: under the header limit (256 KiB, which refuses a 1 MiB name before any
    // processor sees it), so the offset path itself must refuse it.
    let long = "g".repeat(64 * 1024);
    let r = conn.call(update_offset_request(&long, "RawTopic", 0, 1)).await;
    assert_ne!(r.code, code::SUCCESS, "a 64 KiB group name is refused: {:?}", r.remark);
    assert!(r.remark.as_deref().is_some_and(|m| m.len() < 1024), "the name is not echoed: {r:?}");
    let r = conn.call(query_offset_request(&long, "RawTopic", 0)).await;
    assert_eq!(r.code, code::QUERY_NOT_FOUND, "nothing was stored for it: {:?}", r.remark);
    let r = conn.call(update_offset_request("never_seen_group", "RawTopic", 0, 1)).await;
    assert_eq!(
        r.code,
        code::SUBSCRIPTION_GROUP_NOT_EXIST,
        "a group that never sent a heartbeat has no offsets: {r:?}"
    );
    let r = conn.call(query_offset_request("never_seen_group", "RawTopic", 0)).await;
    assert_eq!(r.code, code::QUERY_NOT_FOUND, "nothing was stored for it: {r:?}");
    // A known group still commits.
    let hb = conn.call(heartbeat_request("127.0.0.1@raw", "known_group", "RawTopic")).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    let r = conn.call(update_offset_request("known_group", "RawTopic", 0, 0)).await;
    assert_eq!(r.code, code::SUCCESS, "a known group commits: {r:?}");
    broker.shutdown().await;
}

/// A `LOCK_BATCH_MQ` body as the Java client writes it, for queues `0..n` of `topic` on
/// `broker_name`.
fn lock_request(
    group: &str,
    client: &str,
    topic: &str,
    broker_name: &str,
    n: i32,
) -> RemotingCommand {
    let mqs: Vec<String> = (0..n)
        .map(|q| format!(r#"{{"brokerName":"{broker_name}","queueId":{q},"topic":"{topic}"}}"#))
        .collect();
    let body = format!(
        r#"{{"clientId":"{client}","consumerGroup":"{group}","mqSet":[{}],"onlyThisBroker":false}}"#,
        mqs.join(",")
    );
    RemotingCommand::request(rc::LOCK_BATCH_MQ, 0).with_body(body.into_bytes())
}

fn locked(r: &RemotingCommand) -> usize {
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("a JSON lock answer");
    v["lockOKMQSet"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn given_lock_requests_beyond_the_brokers_queues_should_grant_only_its_own_and_refuse_huge_sets(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(lock_request("lock_group", "c1", "RawTopic", "baiji-a", 4)).await;
    assert_eq!((r.code, locked(&r)), (code::SUCCESS, 4), "the topic's 4 queues lock: {r:?}");
    let r = conn.call(lock_request("lock_group", "c1", "RawTopic", "baiji-a", 100)).await;
    assert_eq!(locked(&r), 4, "queues the topic does not have are not locked");
    let r = conn.call(lock_request("lock_group", "c1", "NoSuchTopic", "baiji-a", 4)).await;
    assert_eq!(locked(&r), 0, "queues of unknown topics are not locked");
    let r = conn.call(lock_request("lock_group", "c1", "RawTopic", "other-broker", 4)).await;
    assert_eq!(locked(&r), 0, "queues of other brokers are not locked here");
    let r = conn.call(lock_request("lock_group", "c1", "RawTopic", "baiji-a", 100_000)).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "an mqSet over the cap is refused: {:?}", r.remark);
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

/// A heartbeat of one consumer of `group` with the given subscription elements (JSON).
fn heartbeat_with_subscriptions(group: &str, subs: &[String]) -> RemotingCommand {
    let body = format!(
        r#"{{"clientID":"127.0.0.1@hb","consumerDataSet":[{{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"{group}","messageModel":"CLUSTERING","subscriptionDataSet":[{}],"unitMode":false}}],"heartbeatFingerprint":0,"producerDataSet":[],"withoutSub":false}}"#,
        subs.join(",")
    );
    request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes())
}

fn subscription(topic: &str) -> String {
    format!(
        r#"{{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1,"tagsSet":[],"topic":"{topic}"}}"#
    )
}

#[tokio::test]
async fn given_heartbeats_with_empty_elements_or_too_many_subscriptions_should_refuse_them() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(heartbeat_with_subscriptions("hb_group", &vec!["{}".to_string(); 3])).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "subscriptions without a topic are refused: {r:?}");
    let many: Vec<String> = (0..5000).map(|i| subscription(&format!("T{i}"))).collect();
    let r = conn.call(heartbeat_with_subscriptions("hb_group", &many)).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "too many subscriptions are refused: {:?}", r.remark);
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "hb_group");
    let r = conn.call(request(rc::GET_CONSUMER_LIST_BY_GROUP, ext)).await;
    assert_ne!(r.code, code::SUCCESS, "a refused heartbeat registers nothing: {r:?}");
    let ok = conn.call(heartbeat_with_subscriptions("hb_group", &[subscription("RawTopic")])).await;
    assert_eq!(ok.code, code::SUCCESS, "a valid heartbeat is accepted: {ok:?}");
    broker.shutdown().await;
}

/// Whether a fresh connection to `addr` is served: a request is answered (`false` when the
/// broker closes it instead).
async fn served(addr: SocketAddr) -> bool {
    let mut conn =
        Connection::connect(addr, PATIENCE).await.expect("the broker accepts connections");
    match conn.call_within(max_offset_request("RawTopic", 0), PATIENCE).await {
        Ok(_) => true,
        Err(ClientError::Closed | ClientError::Io(_)) => false,
        Err(e) => panic!("the broker neither answers nor closes: {e}"),
    }
}

#[tokio::test]
async fn given_max_connections_when_one_more_connects_should_close_it_and_accept_again_after_one_closes(
) {
    let broker = start_broker(|c| c.core.max_connections = 2).await;
    let addr = broker_addr(&broker);
    let mut first = Conn::open(addr).await;
    assert_still_served(&mut first, "RawTopic").await;
    let mut second = Conn::open(addr).await;
    assert_still_served(&mut second, "RawTopic").await;
    let mut third = Conn::open(addr).await;
    assert!(third.closed_within(PATIENCE).await, "the connection over the cap is closed");
    assert_still_served(&mut first, "RawTopic").await;
    drop(first);
    let deadline = Instant::now() + PATIENCE;
    while !served(addr).await {
        assert!(Instant::now() < deadline, "a connection is accepted again after one closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_an_idle_timeout_when_a_connection_sends_nothing_should_close_it() {
    let broker = start_broker(|c| c.remoting.server_channel_max_idle_time_seconds = 1).await;
    let mut idle = Conn::open(broker_addr(&broker)).await;
    assert_still_served(&mut idle, "RawTopic").await;
    assert!(idle.closed_within(PATIENCE).await, "an idle connection is closed");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_the_suspended_pull_cap_when_one_more_pull_would_wait_should_answer_it_at_once() {
    let broker = start_broker(|c| c.remoting.max_suspended_pulls_per_connection = 2).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("RawTopic", 4)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    // Three pulls of an empty queue that may each wait 20 s, pipelined.
    let mut opaques = Vec::new();
    for _ in 0..3 {
        let mut pull = java_lite_pull("cap_group", "RawTopic", 0, 0);
        pull.opaque = conn.opaque();
        opaques.push(pull.opaque);
        conn.write(&pull).await;
    }
    let (_, first) = conn.read_frame(PATIENCE).await.expect("an answer");
    assert_eq!(
        (first.opaque, first.code),
        (opaques[2], code::PULL_NOT_FOUND),
        "the pull over the cap is answered at once, the two before it wait"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_client_that_pipelines_pulls_and_never_reads_should_stop_reading_its_requests() {
    const HIGH: usize = 1024 * 1024;
    let broker = start_broker(|c| c.remoting.write_buffer_high_water_mark = HIGH).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("RawTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let r = conn.call(send_request("RawTopic", 0, vec![7u8; 200 * 1024])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    // 2000 pulls answered with 200 KiB each (400 MB), written without reading any answer.
    let mut burst = BytesMut::new();
    for i in 0..2000 {
        let mut pull = pull_request("bp_group", "RawTopic", 0, 0, 0, pull_sys_flag::SUBSCRIPTION);
        pull.opaque = 10_000 + i;
        pull.encode(&mut burst).expect("an encodable pull");
    }
    let Conn { stream, .. } = conn;
    let (_reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move { writer.write_all(&burst).await });
    let deadline = Instant::now() + PATIENCE;
    while broker.reads_paused() == 0 {
        assert!(Instant::now() < deadline, "the broker stops reading a client that does not read");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queued = broker.max_queued_write_bytes();
    assert!(
        queued <= (HIGH + 300 * 1024) as u64,
        "a connection queues at most the high-water mark and one answer: {queued} bytes"
    );
    writing.abort();
    broker.shutdown().await;
}

/// An `UPDATE_CONSUMER_OFFSET` of `group` on `topic` queue 0 at `offset`.
fn commit_request(group: &str, topic: &str, offset: i64) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", group);
    ext.insert("topic", topic);
    ext.insert("queueId", "0");
    ext.insert("commitOffset", &offset.to_string());
    request(rc::UPDATE_CONSUMER_OFFSET, ext)
}

#[tokio::test]
async fn given_a_client_posing_as_the_broker_internal_groups_and_topics_should_neither_hold_nor_release_waiting_messages(
) {
    let (broker, mut conn) = broker_with_topic("InternalProbe").await;
    // A delayed message waits in SCHEDULE_TOPIC_XXXX queue 0 (level 1, 1 s).
    let mut delayed = send_request("InternalProbe", 0, &b"waits"[..]);
    let mut props = String::from("DELAY\u{1}1\u{2}");
    if let Some(p) = delayed.ext_fields.get("properties") {
        props.push_str(p);
    }
    delayed.ext_fields.insert("properties", &props);
    let r = conn.call(delayed).await;
    assert_eq!(r.code, code::SUCCESS, "the delayed send is stored: {r:?}");

    // Heartbeats as the scheduler's own group, and as a client group subscribing to the
    // internal topics: both must be ignored, or the client could hold or free waiting messages.
    for (group, topic) in [
        ("CID_RMQ_SYS_SCHEDULE", "SCHEDULE_TOPIC_XXXX"),
        ("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC"),
        ("CID_RMQ_SYS_WHEEL_TIMER", "rmq_sys_wheel_timer"),
        ("posing_group", "SCHEDULE_TOPIC_XXXX"),
    ] {
        let r = conn.call(heartbeat_request("poser@1", group, topic)).await;
        assert_eq!(r.code, code::SUCCESS, "a heartbeat is answered: {r:?}");
        let r = conn.call(commit_request(group, topic, 1)).await;
        assert_ne!(
            r.code,
            code::SUCCESS,
            "a client may not commit as {group} on {topic} (it would release or hold waiting messages): {r:?}"
        );
    }
    let r = conn.call(heartbeat_request("poser@1", "posing_group", "InternalProbe")).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let r = conn.call(commit_request("posing_group", "SCHEDULE_TOPIC_XXXX", 1)).await;
    assert_eq!(
        r.code,
        code::TOPIC_NOT_EXIST,
        "a known group may not commit on an internal topic either: {r:?}"
    );

    // The delayed message still reaches its topic, once.
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let r = conn.call(max_offset_request("InternalProbe", 0)).await;
        if r.ext_fields.get("offset") == Some("1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the delayed message was delivered: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_registrations_with_absurd_queue_counts_should_refuse_them_and_route_nothing() {
    // Review H4: readQueueNums = 2^32-1 from any registration made a gRPC QueryRoute build
    // four billion queues. The name server refuses such registrations whole.
    let namesrv = baiji::broker::start_namesrv("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("the name server starts");
    let addr = namesrv.namesrv_addr().expect("its address");
    let mut conn = Conn::open(addr).await;
    let huge =
        register_broker_request_with("evil", 0, "127.0.0.1:10911", "HugeTopic", 4_294_967_295);
    let r = conn.call(huge).await;
    assert_eq!(r.code, code::INVALID_PARAMETER, "absurd queue counts are refused: {r:?}");
    let remark = r.remark.clone().unwrap_or_default();
    assert!(remark.contains("HugeTopic") && remark.contains("1024"), "a clear remark: {remark}");
    assert_eq!(route_addrs(&mut conn, "HugeTopic", "evil").await, None, "nothing is routed");
    let r =
        conn.call(register_broker_request_with("evil", 0, "127.0.0.1:10911", "Edge", 1025)).await;
    assert_eq!(r.code, code::INVALID_PARAMETER, "one past the bound is refused: {r:?}");
    let r =
        conn.call(register_broker_request_with("fine", 0, "127.0.0.1:10911", "Max", 1024)).await;
    assert_eq!(r.code, code::SUCCESS, "the bound itself is accepted: {r:?}");
    // REGISTER_TOPIC_IN_NAMESRV carries queue datas: bounded the same way.
    let mut ext = ExtFields::new();
    ext.insert("topic", "HugeTopic");
    let body = br#"{"brokerDatas":[],"queueDatas":[{"brokerName":"fine","readQueueNums":4294967295,"writeQueueNums":4294967295,"perm":6,"topicSysFlag":0}]}"#;
    let r = conn.call(request(rc::REGISTER_TOPIC_IN_NAMESRV, ext).with_body(body.to_vec())).await;
    assert_eq!(r.code, code::INVALID_PARAMETER, "a topic registration too: {r:?}");
    assert_eq!(route_addrs(&mut conn, "HugeTopic", "fine").await, None, "still nothing routed");
    let r = conn
        .call(request(rc::GET_ROUTEINFO_BY_TOPIC, {
            let mut e = ExtFields::new();
            e.insert("topic", "Max");
            e
        }))
        .await;
    let route = TopicRouteData::from_json_slice(&r.body).expect("a valid route");
    assert_eq!(route.queue_datas[0].read_queue_nums, 1024, "the accepted one is routed");
    namesrv.shutdown().await;
}
