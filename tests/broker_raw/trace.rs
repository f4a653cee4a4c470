//! Message traces (`RMQ_SYS_TRACE_TOPIC`): created at start with one queue, as RocketMQ's
//! `TopicConfigManager` creates it (`traceTopicEnable`), so it is routed, by the embedded name
//! server and by the external ones the broker registers with, before a traced client sends its
//! first trace record (the Go client does not fall back to `TBW102` for it).

use super::*;

const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

fn route_request(topic: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    request(rc::GET_ROUTEINFO_BY_TOPIC, ext)
}

/// Asserts `r` is a route of `RMQ_SYS_TRACE_TOPIC`: one read-write queue on `broker`.
fn assert_trace_route(r: &RemotingCommand, broker: SocketAddr) {
    assert_eq!(r.code, code::SUCCESS, "the trace topic is routed: {r:?}");
    let route = TopicRouteData::from_json_slice(&r.body).expect("a route body");
    assert_eq!(route.queue_datas.len(), 1, "one broker serves it: {route:?}");
    let q = &route.queue_datas[0];
    assert_eq!(
        (q.read_queue_nums, q.write_queue_nums, q.perm),
        (1, 1, 6),
        "one readable and writable queue, as RocketMQ creates it: {route:?}"
    );
    assert_eq!(
        route.broker_datas[0].broker_addrs.get(&0).map(String::as_str),
        Some(broker.to_string().as_str()),
        "the route names the broker"
    );
}

#[tokio::test]
async fn given_a_fresh_broker_when_asked_for_the_trace_topic_route_should_answer_it_before_any_send(
) {
    // Without auto-creation too: nothing but the start created it.
    let broker = start_broker(|c| c.core.auto_create_topic = false).await;
    let mut ns = Conn::open(broker.namesrv_addr().expect("an embedded name server")).await;
    let r = ns.call(route_request(TRACE_TOPIC)).await;
    assert_trace_route(&r, broker_addr(&broker));
    // A traced client's record goes in, and the trace query finds it by its key.
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let props = "KEYS\u{1}trace-of-msg-1\u{2}";
    let to = ("raw_trace_producer", TRACE_TOPIC, 0, 1);
    let send = common::raw::send(SendHeaderVersion::V2, to, props, &b"Pub\x01..."[..]);
    let r = conn.call(send).await;
    assert_eq!(r.code, code::SUCCESS, "a trace record is accepted: {r:?}");
    let r = conn.call(query_request(TRACE_TOPIC, "trace-of-msg-1")).await;
    assert_eq!(r.code, code::SUCCESS, "QUERY_MESSAGE by key finds the trace record: {r:?}");
    let found = decode_records(&r.body).expect("stored records");
    assert_eq!(found.len(), 1, "the one trace record: {found:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_an_external_name_server_when_the_broker_registers_should_route_the_trace_topic() {
    let ns = baiji::broker::start_namesrv("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("a standalone name server starts");
    let ns_addr = ns.namesrv_addr().expect("its address");
    let broker = start_broker(|c| {
        c.core.namesrv_addr = Some(ns_addr.to_string());
        c.remoting.namesrv_listen = None;
    })
    .await;
    let mut conn = Conn::open(ns_addr).await;
    let deadline = Instant::now() + PATIENCE;
    let r = loop {
        let r = conn.call(route_request(TRACE_TOPIC)).await;
        if r.code == code::SUCCESS || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_trace_route(&r, broker_addr(&broker));
    broker.shutdown().await;
    ns.shutdown().await;
}

/// A `QUERY_MESSAGE` by `key` on `topic`, over all time.
fn query_request(topic: &str, key: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    ext.insert("key", key);
    ext.insert("maxNum", "32");
    ext.insert("beginTimestamp", "0");
    ext.insert("endTimestamp", &i64::MAX.to_string());
    request(rc::QUERY_MESSAGE, ext)
}

fn min_offset_request(topic: &str, queue: i32) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    request(rc::GET_MIN_OFFSET, ext)
}

/// Polls queue 0 of `topic` until its oldest retained offset is past `offset` (its message was
/// let go); panics after [`PATIENCE`].
async fn wait_released(conn: &mut Conn, topic: &str, offset: i64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = conn.call(min_offset_request(topic, 0)).await;
        let min: i64 = r.ext_fields.get("offset").and_then(|o| o.parse().ok()).unwrap_or(-1);
        if min > offset {
            return;
        }
        assert!(Instant::now() < deadline, "{topic}'s message at {offset} is never let go: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One trace record keyed `key` and one ordinary message on a one-queue topic `plain`.
async fn send_both(conn: &mut Conn, plain: &str, key: &str) {
    let props = format!("KEYS\u{1}{key}\u{2}");
    let to = ("raw_trace_producer", TRACE_TOPIC, 0, 1);
    let r = conn.call(common::raw::send(SendHeaderVersion::V2, to, &props, &b"trace"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "a trace record is accepted: {r:?}");
    let to = ("raw_producer", plain, 0, 1);
    let r = conn.call(common::raw::send(SendHeaderVersion::V2, to, "", &b"plain"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "an ordinary message is accepted: {r:?}");
}

#[tokio::test]
async fn given_a_1s_retention_when_ordinary_messages_are_let_go_should_keep_the_trace_records() {
    // RocketMQ keeps the trace topic as long as any commit log (fileReservedTime, 72 h): the
    // broker's retention of unheld messages (1 s here) does not apply to it.
    let broker = start_broker(|c| c.core.retention_secs = 1).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    send_both(&mut conn, "PlainKeptTopic", "trace-kept").await;
    wait_released(&mut conn, "PlainKeptTopic", 0).await;
    let r = conn.call(min_offset_request(TRACE_TOPIC, 0)).await;
    assert_eq!(r.ext_fields.get("offset"), Some("0"), "the trace record is kept: {r:?}");
    let r = conn.call(query_request(TRACE_TOPIC, "trace-kept")).await;
    assert_eq!(r.code, code::SUCCESS, "and found by its key: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_1s_trace_retention_when_trace_records_age_should_let_them_go() {
    let broker = start_broker(|c| c.core.trace_retention_secs = 1).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    send_both(&mut conn, "PlainOutlivesTopic", "trace-gone").await;
    wait_released(&mut conn, TRACE_TOPIC, 0).await;
    let r = conn.call(min_offset_request("PlainOutlivesTopic", 0)).await;
    assert_eq!(r.ext_fields.get("offset"), Some("0"), "the 60 s retention keeps the other: {r:?}");
    broker.shutdown().await;
}
