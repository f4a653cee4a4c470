//! Hardening: every input a client can send is answered within bounds, and nothing wedges
//! (bounded pull responses, client-driven state within limits, backpressure, the name
//! server's registrations per connection).

use super::*;

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
fn register_broker_request(name: &str, id: i64, addr: &str, topic: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"filterServerList":[],"topicConfigSerializeWrapper":{{"dataVersion":{{"counter":1,"stateVersion":0,"timestamp":1700000000000}},"topicConfigTable":{{"{topic}":{{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"{topic}","topicSysFlag":0,"writeQueueNums":4}}}}}}}}"#
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
async fn route_addrs(
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
