//! The broker's answers to bad and edge-case input, spoken over a plain TCP socket with
//! `baiji::remoting` types (no client crate): each case is followed by a valid request on the
//! same connection wherever RocketMQ keeps the connection open, so a bad request costs only
//! its own answer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baiji::broker::{BrokerConfig, RunningBroker};
use baiji::remoting::body::{JsonBody, TopicRouteData};
use baiji::remoting::code::{request_code as rc, response_code as code};
use baiji::remoting::header::{
    pull_sys_flag, CreateTopicRequestHeader, PullMessageRequestHeader, SendHeaderVersion,
    ToExtFields,
};
use baiji::remoting::message::decode_records;
use baiji::remoting::{ExtFields, RemotingCommand, SerializeType};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "common/mod.rs"]
mod common;

#[path = "broker_raw/acl.rs"]
mod acl;
#[path = "broker_raw/admin.rs"]
mod admin;
#[path = "broker_raw/admin_lists.rs"]
mod admin_lists;
#[path = "broker_raw/admin_stats.rs"]
mod admin_stats;
#[path = "broker_raw/batch.rs"]
mod batch;
#[path = "broker_raw/crash_suite.rs"]
mod crash_suite;
#[path = "broker_raw/fast.rs"]
mod fast;
#[path = "broker_raw/hardening.rs"]
mod hardening;
#[path = "broker_raw/keep.rs"]
mod keep;
#[path = "broker_raw/limits.rs"]
mod limits;
#[path = "broker_raw/metrics.rs"]
mod metrics;
#[path = "broker_raw/poison.rs"]
mod poison;
#[path = "broker_raw/pop.rs"]
mod pop;
#[path = "broker_raw/recall.rs"]
mod recall;
#[path = "broker_raw/relay.rs"]
mod relay;
#[cfg(feature = "replicas")]
#[path = "broker_raw/replicas.rs"]
mod replicas;
#[path = "broker_raw/reply.rs"]
mod reply;
#[path = "broker_raw/restart.rs"]
mod restart;
#[path = "broker_raw/restart_pop.rs"]
mod restart_pop;
#[path = "broker_raw/restart_state.rs"]
mod restart_state;
#[path = "broker_raw/sql92.rs"]
mod sql92;
#[path = "broker_raw/timer.rs"]
mod timer;
#[path = "broker_raw/tls.rs"]
mod tls;
#[path = "broker_raw/trace.rs"]
mod trace;
#[path = "broker_raw/transactions.rs"]
mod transactions;
// The real rocketmq-client-rust's harness, for the replica suite's mixed load (the same files
// the rocketmq_client target uses; most of it is unused here).
#[path = "rocketmq_client/cluster_support.rs"]
#[allow(dead_code)]
mod cluster_support;
#[path = "support/mod.rs"]
mod support;

/// Bound for any answer the tests wait for (a healthy broker answers in milliseconds).
const PATIENCE: Duration = Duration::from_secs(20);

async fn start_broker(tweak: impl FnOnce(&mut BrokerConfig)) -> RunningBroker {
    common::broker::start(common::broker::loopback(), tweak).await
}

fn broker_addr(b: &RunningBroker) -> SocketAddr {
    b.broker_addr().expect("a broker address")
}

/// One raw connection.
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    next_opaque: i32,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("the broker accepts connections");
        Conn { stream, buf: BytesMut::new(), next_opaque: 1000 }
    }

    fn opaque(&mut self) -> i32 {
        self.next_opaque += 1;
        self.next_opaque
    }

    async fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("the write succeeds");
    }

    async fn write(&mut self, cmd: &RemotingCommand) {
        let mut out = BytesMut::new();
        cmd.encode(&mut out).expect("an encodable command");
        self.write_raw(&out).await;
    }

    /// The next command the broker sends, with the serialize-type byte of its frame; `None` if
    /// nothing arrives within `within`. Panics if the connection closes.
    async fn read_frame(&mut self, within: Duration) -> Option<(u8, RemotingCommand)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let kind = self.buf.get(4).copied();
            if let Some(cmd) =
                RemotingCommand::decode(&mut self.buf).expect("the broker sends valid frames")
            {
                return Some((kind.expect("a decoded frame had a prefix"), cmd));
            }
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) => panic!("the broker closed a connection it must keep open"),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("reading from the broker failed: {e}"),
            }
        }
    }

    /// The response to the request with `opaque`, skipping requests the broker sends on its own
    /// (such as NOTIFY_CONSUMER_IDS_CHANGED).
    async fn response(&mut self, opaque: i32, within: Duration) -> Option<(u8, RemotingCommand)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let (kind, cmd) = self.read_frame(left).await?;
            if cmd.is_response() {
                assert_eq!(
                    cmd.opaque, opaque,
                    "a response echoes the opaque of its request: {cmd:?}"
                );
                return Some((kind, cmd));
            }
        }
    }

    /// Sends `cmd` with a fresh opaque and returns the response.
    async fn call(&mut self, mut cmd: RemotingCommand) -> RemotingCommand {
        cmd.opaque = self.opaque();
        self.write(&cmd).await;
        let (_, resp) = self
            .response(cmd.opaque, PATIENCE)
            .await
            .unwrap_or_else(|| panic!("request {} must be answered", cmd.code));
        resp
    }

    /// Whether the broker closes this connection within `within`.
    async fn closed_within(&mut self, within: Duration) -> bool {
        let mut scratch = [0u8; 1024];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut scratch)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }
}

fn request(code: i32, ext: ExtFields) -> RemotingCommand {
    RemotingCommand::request(code, 0).with_ext_fields(ext)
}

fn create_topic_request(topic: &str, queues: i32) -> RemotingCommand {
    let h = CreateTopicRequestHeader::read_write(topic, queues);
    request(rc::UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())
}

/// A SEND_MESSAGE (V1 header) of `body` with tag `TagA` to `queue` of `topic`.
fn send_request(topic: &str, queue: i32, body: impl Into<bytes::Bytes>) -> RemotingCommand {
    let to = ("raw_producer", topic, queue, 4);
    common::raw::send(SendHeaderVersion::V1, to, "TAGS\u{1}TagA\u{2}", body)
}

fn max_offset_request(topic: &str, queue: i32) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    request(rc::GET_MAX_OFFSET, ext)
}

/// A pull that carries its own subscription (`*`), as a lite pull consumer sends it.
fn pull_request(
    group: &str,
    topic: &str,
    queue: i32,
    offset: i64,
    suspend_ms: i64,
    flags: i32,
) -> RemotingCommand {
    let h = PullMessageRequestHeader {
        consumer_group: group,
        topic,
        queue_id: queue,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: flags,
        commit_offset: 0,
        suspend_timeout_millis: suspend_ms,
        subscription: Some("*"),
        sub_version: 0,
        expression_type: "TAG",
        max_msg_bytes: None,
    };
    request(rc::PULL_MESSAGE, h.to_ext_fields())
}

const SUB_AND_SUSPEND: i32 = pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND;

/// A heartbeat that makes `group` a clustering consumer of `topic` with subscription `*`.
fn heartbeat_request(client_id: &str, group: &str, topic: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"clientID":"{client_id}","producerDataSet":[],"consumerDataSet":[{{"groupName":"{group}","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{{"classFilterMode":false,"topic":"{topic}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}}],"unitMode":false}}],"heartbeatFingerprint":0,"withoutSub":false}}"#
    );
    request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes())
}

/// A broker with `topic` (4 queues) created over `conn`.
async fn broker_with_topic(topic: &str) -> (RunningBroker, Conn) {
    let broker = start_broker(|_| {}).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request(topic, 4)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    (broker, conn)
}

/// Asserts that `conn` is still served: a valid request gets its answer.
async fn assert_still_served(conn: &mut Conn, topic: &str) {
    let r = conn.call(max_offset_request(topic, 0)).await;
    assert_eq!(r.code, code::SUCCESS, "the connection still serves valid requests: {r:?}");
}

/// Sends `bytes` on a fresh connection and checks that the broker closes it, while a
/// connection opened before and one opened after keep being served.
async fn assert_closes_only_that_connection(bytes: &[u8]) {
    let (broker, mut other) = broker_with_topic("RawTopic").await;
    let mut bad = Conn::open(broker_addr(&broker)).await;
    bad.write_raw(bytes).await;
    assert!(
        bad.closed_within(PATIENCE).await,
        "a connection that sent an unparseable frame is closed"
    );
    assert_still_served(&mut other, "RawTopic").await;
    let mut fresh = Conn::open(broker_addr(&broker)).await;
    assert_still_served(&mut fresh, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_frame_with_a_negative_length_when_received_should_close_only_that_connection() {
    assert_closes_only_that_connection(&[0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 2, b'{', b'}']).await;
}

#[tokio::test]
async fn given_a_frame_longer_than_16_mib_when_received_should_close_only_that_connection() {
    assert_closes_only_that_connection(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 2, b'{', b'}']).await;
}

#[tokio::test]
async fn given_a_header_longer_than_its_frame_when_received_should_close_only_that_connection() {
    assert_closes_only_that_connection(&[0, 0, 0, 6, 0, 0, 0, 100, b'{', b'}']).await;
}

#[tokio::test]
async fn given_a_header_that_is_not_json_when_received_should_close_only_that_connection() {
    let header = b"this is not json";
    let mut frame = Vec::new();
    frame.extend_from_slice(&(4 + header.len() as i32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as i32).to_be_bytes());
    frame.extend_from_slice(header);
    assert_closes_only_that_connection(&frame).await;
}

#[tokio::test]
async fn given_an_unknown_serialize_type_when_received_should_close_only_that_connection() {
    let header = br#"{"code":30,"opaque":1}"#;
    let mut frame = Vec::new();
    frame.extend_from_slice(&(4 + header.len() as i32).to_be_bytes());
    frame.extend_from_slice(&((7 << 24) | header.len() as i32).to_be_bytes());
    frame.extend_from_slice(header);
    assert_closes_only_that_connection(&frame).await;
}

#[tokio::test]
async fn given_an_unknown_request_code_when_sent_should_answer_request_code_not_supported_with_its_opaque(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let req = RemotingCommand::request(9_999, 4_242);
    conn.write(&req).await;
    let (_, r) = conn.response(4_242, PATIENCE).await.expect("an unknown code is answered");
    assert_eq!(
        r.code,
        code::REQUEST_CODE_NOT_SUPPORTED,
        "an unknown request code is not supported: {r:?}"
    );
    assert!(r.is_response(), "the answer is flagged as a response");
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_topic_name_with_illegal_characters_when_sending_should_answer_system_error() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(send_request("bad topic!", 0, &b"x"[..])).await;
    assert_eq!(
        r.code,
        code::SYSTEM_ERROR,
        "a topic name outside ^[%|a-zA-Z0-9_-]+$ is refused: {r:?}"
    );
    assert!(
        r.remark.as_deref().unwrap_or("").contains("illegal characters"),
        "the remark says why: {r:?}"
    );
    let ok = conn.call(send_request("RawTopic", 0, &b"fine"[..])).await;
    assert_eq!(ok.code, code::SUCCESS, "a valid send on the same connection succeeds: {ok:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_topic_name_longer_than_127_when_sending_should_answer_system_error() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(send_request(&"T".repeat(128), 0, &b"x"[..])).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a topic name over 127 characters is refused: {r:?}");
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_reserved_topic_when_sending_should_answer_no_permission() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    for reserved in ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "OFFSET_MOVED_EVENT"] {
        let r = conn.call(send_request(reserved, 0, &b"x"[..])).await;
        assert_eq!(r.code, code::NO_PERMISSION, "sending to {reserved} is forbidden: {r:?}");
    }
    let ok = conn.call(send_request("RawTopic", 0, &b"fine"[..])).await;
    assert_eq!(ok.code, code::SUCCESS, "a valid send on the same connection succeeds: {ok:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_system_topic_when_creating_it_should_answer_system_error() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    for system in ["TBW102", "SCHEDULE_TOPIC_XXXX", "rmq_sys_anything"] {
        let r = conn.call(create_topic_request(system, 4)).await;
        assert_eq!(
            r.code,
            code::SYSTEM_ERROR,
            "an admin cannot create the system topic {system}: {r:?}"
        );
    }
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_body_over_the_maximum_size_when_sending_should_answer_message_illegal() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let max = BrokerConfig::default().core.max_message_size;
    let r = conn.call(send_request("RawTopic", 0, vec![b'x'; max + 1])).await;
    assert_eq!(r.code, code::MESSAGE_ILLEGAL, "a body over maxMessageSize is illegal: {r:?}");
    let ok = conn.call(send_request("RawTopic", 0, vec![b'x'; max])).await;
    assert_eq!(ok.code, code::SUCCESS, "a body of exactly maxMessageSize is accepted: {ok:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_queue_id_out_of_range_when_sending_should_answer_system_error() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(send_request("RawTopic", 4, &b"x"[..])).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "queue 4 of a 4-queue topic does not exist: {r:?}");
    assert!(
        r.remark.as_deref().unwrap_or("").contains("queueId"),
        "the remark names the queue: {r:?}"
    );
    let ok = conn.call(send_request("RawTopic", 3, &b"x"[..])).await;
    assert_eq!(ok.code, code::SUCCESS, "the last queue takes the message: {ok:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_queue_id_out_of_range_when_pulling_or_asking_offsets_should_answer_system_error() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn
        .call(pull_request("raw_group", "RawTopic", 7, 0, 0, pull_sys_flag::SUBSCRIPTION))
        .await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "pulling queue 7 of a 4-queue topic is illegal: {r:?}");
    let r = conn
        .call(pull_request("raw_group", "RawTopic", -1, 0, 0, pull_sys_flag::SUBSCRIPTION))
        .await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a negative queue id is illegal: {r:?}");
    let r = conn.call(max_offset_request("RawTopic", 4)).await;
    assert_eq!(
        r.code,
        code::SYSTEM_ERROR,
        "asking the max offset of queue 4 of 4 is illegal: {r:?}"
    );
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_send_without_its_topic_field_when_sent_should_answer_system_error_naming_the_field(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut req = send_request("RawTopic", 0, &b"x"[..]);
    assert!(req.ext_fields.remove("topic"), "the header had a topic");
    let r = conn.call(req).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a send without its topic is refused: {r:?}");
    assert!(
        r.remark.as_deref().unwrap_or("").contains("topic"),
        "the remark names the missing field: {r:?}"
    );
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_malformed_number_in_a_header_when_sent_should_answer_system_error_naming_the_field(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut req = send_request("RawTopic", 0, &b"x"[..]);
    req.ext_fields.insert("queueId", "zero");
    let r = conn.call(req).await;
    assert_eq!(
        r.code,
        code::SYSTEM_ERROR,
        "a send whose queueId is not a number is refused: {r:?}"
    );
    assert!(
        r.remark.as_deref().unwrap_or("").contains("queueId"),
        "the remark names the field: {r:?}"
    );
    let mut req = max_offset_request("RawTopic", 0);
    req.ext_fields.insert("queueId", "99999999999999999999");
    let r = conn.call(req).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a queueId beyond i32 is refused: {r:?}");
    assert!(
        r.remark.as_deref().unwrap_or("").contains("queueId"),
        "the remark names the field: {r:?}"
    );
    let mut req = pull_request("raw_group", "RawTopic", 0, 0, 0, pull_sys_flag::SUBSCRIPTION);
    req.ext_fields.remove("consumerGroup");
    let r = conn.call(req).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a pull without its group is refused: {r:?}");
    assert!(
        r.remark.as_deref().unwrap_or("").contains("consumerGroup"),
        "the remark names the field: {r:?}"
    );
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_group_without_heartbeat_when_pulling_without_a_subscription_should_answer_subscription_not_exist(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(pull_request("unknown_group", "RawTopic", 0, 0, 0, 0)).await;
    assert_eq!(
        r.code,
        code::SUBSCRIPTION_NOT_EXIST,
        "a pull that names no subscription needs the group's heartbeat: {r:?}"
    );
    // Once the group sent a heartbeat, the same pull is served on the same connection.
    let hb = conn.call(heartbeat_request("127.0.0.1@raw", "unknown_group", "RawTopic")).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    let r = conn.call(pull_request("unknown_group", "RawTopic", 0, 0, 0, 0)).await;
    assert_eq!(
        r.code,
        code::PULL_NOT_FOUND,
        "the registered group's pull of an empty queue finds nothing: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_heartbeat_for_another_topic_when_pulling_without_a_subscription_should_answer_subscription_not_exist(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(create_topic_request("OtherTopic", 4)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a second topic succeeds: {r:?}");
    let hb = conn.call(heartbeat_request("127.0.0.1@raw", "raw_group", "OtherTopic")).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    let r = conn.call(pull_request("raw_group", "RawTopic", 0, 0, 0, 0)).await;
    assert_eq!(
        r.code,
        code::SUBSCRIPTION_NOT_EXIST,
        "the group never subscribed to this topic: {r:?}"
    );
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_one_way_requests_when_sent_should_answer_none_of_them() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    // A one-way send (stored), a one-way unknown code and a one-way bad send (both refused)…
    let mut ok = send_request("RawTopic", 0, &b"one-way"[..]);
    ok.flag = RemotingCommand::FLAG_ONEWAY;
    ok.opaque = 1;
    conn.write(&ok).await;
    let mut unknown = RemotingCommand::request(9_999, 2);
    unknown.flag = RemotingCommand::FLAG_ONEWAY;
    conn.write(&unknown).await;
    let mut bad = send_request("SCHEDULE_TOPIC_XXXX", 0, &b"refused"[..]);
    bad.flag = RemotingCommand::FLAG_ONEWAY;
    bad.opaque = 3;
    conn.write(&bad).await;
    // …then an answered request: the first response on the connection must be its own.
    let probe = max_offset_request("RawTopic", 0);
    let r = conn.call(probe).await;
    assert_eq!(r.code, code::SUCCESS, "the request after the one-way ones is answered: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("1"), "the one-way send was stored: {r:?}");
    assert_eq!(broker.oneway_rejected(), 1, "the refused one-way send is counted");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_request_with_the_binary_header_when_answered_should_use_the_binary_header() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut req = max_offset_request("RawTopic", 0);
    req.serialize_type = SerializeType::RocketMq;
    req.opaque = 77;
    conn.write(&req).await;
    let (kind, r) = conn.response(77, PATIENCE).await.expect("a binary request is answered");
    assert_eq!(kind, 1, "the reply to a ROCKETMQ-serialized request is ROCKETMQ-serialized");
    assert_eq!(r.serialize_type, SerializeType::RocketMq, "the decoded reply is binary");
    assert_eq!(r.code, code::SUCCESS, "the binary request is served: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("0"), "the binary reply carries its fields: {r:?}");
    // The next JSON request on the same connection gets a JSON reply.
    let mut json = max_offset_request("RawTopic", 0);
    json.opaque = 78;
    conn.write(&json).await;
    let (kind, r) = conn.response(78, PATIENCE).await.expect("a JSON request is answered");
    assert_eq!(kind, 0, "the reply to a JSON request is JSON");
    assert_eq!(r.code, code::SUCCESS, "the JSON request is served: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_the_name_server_when_asked_for_routes_should_answer_tbw102_and_topic_not_exist_for_unknown_topics(
) {
    let broker = start_broker(|_| {}).await;
    let mut ns = Conn::open(broker.namesrv_addr().expect("an embedded name server")).await;
    let mut ext = ExtFields::new();
    ext.insert("topic", "TBW102");
    let r = ns.call(request(rc::GET_ROUTEINFO_BY_TOPIC, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "TBW102 has a route while auto-creation is on: {r:?}");
    let route = TopicRouteData::from_json_slice(&r.body).expect("a route body");
    assert_eq!(route.queue_datas.len(), 1, "one broker serves TBW102: {route:?}");
    assert_eq!(
        route.queue_datas[0].perm, 7,
        "TBW102 is readable, writable and inheritable: {route:?}"
    );
    assert_eq!(
        route.broker_datas[0].broker_addrs.get(&0).map(String::as_str),
        Some(broker_addr(&broker).to_string().as_str()),
        "the route names the broker's master address"
    );
    let text = String::from_utf8_lossy(&r.body);
    for field in ["filterServerTable", "enableActingMaster"] {
        assert!(
            text.contains(field),
            "the route JSON has {field}, which the Rust client requires: {text}"
        );
    }
    let mut ext = ExtFields::new();
    ext.insert("topic", "NoSuchTopic");
    let r = ns.call(request(rc::GET_ROUTEINFO_BY_TOPIC, ext)).await;
    assert_eq!(r.code, code::TOPIC_NOT_EXIST, "an unknown topic has no route: {r:?}");
    assert!(r.body.is_empty(), "TOPIC_NOT_EXIST carries no route body");
    let r = ns.call(request(rc::GET_ROUTEINFO_BY_TOPIC, ExtFields::new())).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a route query without its topic is refused: {r:?}");
    let r = ns.call(RemotingCommand::request(rc::SEND_MESSAGE, 0)).await;
    assert_eq!(
        r.code,
        code::REQUEST_CODE_NOT_SUPPORTED,
        "the name server does not take sends: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_an_empty_queue_when_a_suspended_pull_times_out_should_answer_pull_not_found_after_holding_it(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let started = Instant::now();
    let r = conn.call(pull_request("raw_group", "RawTopic", 0, 0, 300, SUB_AND_SUSPEND)).await;
    let held = started.elapsed();
    assert_eq!(r.code, code::PULL_NOT_FOUND, "a pull of an empty queue finds nothing: {r:?}");
    assert_eq!(r.ext_fields.get("nextBeginOffset"), Some("0"), "it starts again at 0: {r:?}");
    assert!(
        held >= Duration::from_millis(290),
        "a suspended pull is held for its suspend timeout before it answers not found (held {held:?})"
    );
    assert_still_served(&mut conn, "RawTopic").await;
    // Without the suspend flag the same pull answers at once (no hold): still PULL_NOT_FOUND.
    let r = conn
        .call(pull_request("raw_group", "RawTopic", 0, 0, 300, pull_sys_flag::SUBSCRIPTION))
        .await;
    assert_eq!(
        r.code,
        code::PULL_NOT_FOUND,
        "an unsuspended pull of an empty queue finds nothing: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_never_trimmed_queue_when_pulling_beyond_its_end_should_answer_pull_offset_moved_to_the_start(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    for i in 0..3 {
        let r = conn.call(send_request("RawTopic", 1, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    // RocketMQ's rule for an offset beyond the end of a queue that was never trimmed: back to
    // 0 (what clients need after an in-memory broker restarted under them).
    let r = conn.call(pull_request("raw_group", "RawTopic", 1, 10, 300, SUB_AND_SUSPEND)).await;
    assert_eq!(r.code, code::PULL_OFFSET_MOVED, "an offset beyond the end has moved: {r:?}");
    assert_eq!(
        r.ext_fields.get("nextBeginOffset"),
        Some("0"),
        "a never-trimmed queue sends the consumer back to its start: {r:?}"
    );
    assert_eq!(r.ext_fields.get("maxOffset"), Some("3"), "the reply carries the max offset: {r:?}");
    assert_eq!(r.ext_fields.get("minOffset"), Some("0"), "the reply carries the min offset: {r:?}");
    // An offset beyond the end of a queue never written also moves (to 0).
    let r = conn.call(pull_request("raw_group", "RawTopic", 2, 5, 300, SUB_AND_SUSPEND)).await;
    assert_eq!(r.code, code::PULL_OFFSET_MOVED, "an offset beyond an empty queue has moved: {r:?}");
    assert_eq!(r.ext_fields.get("nextBeginOffset"), Some("0"), "back to the start: {r:?}");
    // And the messages are there from offset 0.
    let r = conn.call(pull_request("raw_group", "RawTopic", 1, 0, 300, SUB_AND_SUSPEND)).await;
    assert_eq!(r.code, code::SUCCESS, "pulling from 0 finds the messages: {r:?}");
    let msgs = decode_records(&r.body).expect("a valid pull body");
    let bodies: Vec<&[u8]> = msgs.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [&b"m0"[..], b"m1", b"m2"], "the messages come back in order");
    assert_eq!(
        r.ext_fields.get("nextBeginOffset"),
        Some("3"),
        "the next pull starts after them: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_trimmed_queue_when_pulling_beyond_its_end_should_answer_pull_offset_moved_to_the_end(
) {
    let broker = start_broker(|c| c.core.retention_secs = 0).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("RawTopic", 4)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let hb = conn.call(heartbeat_request("127.0.0.1@raw", "trim_group", "RawTopic")).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    for i in 0..3 {
        let r = conn.call(send_request("RawTopic", 1, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let mut commit = ExtFields::new();
    commit.insert("consumerGroup", "trim_group");
    commit.insert("topic", "RawTopic");
    commit.insert("queueId", "1");
    commit.insert("commitOffset", "3");
    let r = conn.call(request(rc::UPDATE_CONSUMER_OFFSET, commit)).await;
    assert_eq!(r.code, code::SUCCESS, "the commit is stored: {r:?}");
    // The reaper reclaims what the only group committed: the queue is trimmed to 3.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut ext = ExtFields::new();
        ext.insert("topic", "RawTopic");
        ext.insert("queueId", "1");
        let r = conn.call(request(rc::GET_MIN_OFFSET, ext)).await;
        if r.ext_fields.get("offset") == Some("3") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "committed messages are reclaimed: {r:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = conn.call(pull_request("trim_group", "RawTopic", 1, 10, 300, SUB_AND_SUSPEND)).await;
    assert_eq!(r.code, code::PULL_OFFSET_MOVED, "an offset beyond the end has moved: {r:?}");
    assert_eq!(
        r.ext_fields.get("nextBeginOffset"),
        Some("3"),
        "a trimmed queue sends the consumer to its end: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_suspended_pull_when_a_message_is_appended_should_answer_success_before_the_hold_expires(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(send_request("RawTopic", 0, &b"first"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    // Park a pull at the end of queue 0 for up to 20 s.
    let mut pull = pull_request("raw_group", "RawTopic", 0, 1, 20_000, SUB_AND_SUSPEND);
    pull.opaque = 500;
    conn.write(&pull).await;
    assert!(
        conn.response(500, Duration::from_millis(200)).await.is_none(),
        "a pull at the end of a queue is held, not answered at once"
    );
    // Another client appends: the held pull answers with the message, long before 20 s.
    let mut producer = Conn::open(broker_addr(&broker)).await;
    let r = producer.call(send_request("RawTopic", 0, &b"second"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    let (_, r) = conn
        .response(500, Duration::from_secs(10))
        .await
        .expect("an append wakes the held pull well before its 20 s hold expires");
    assert_eq!(r.code, code::SUCCESS, "the woken pull finds the new message: {r:?}");
    let msgs = decode_records(&r.body).expect("a valid pull body");
    assert_eq!(msgs.len(), 1, "exactly the appended message: {msgs:?}");
    assert_eq!(&msgs[0].body[..], b"second", "the appended message is delivered");
    assert_eq!(msgs[0].queue_offset, 1, "at the offset the pull waited at");
    // An append to another queue does not wake a pull parked on queue 0.
    let mut pull = pull_request("raw_group", "RawTopic", 0, 2, 20_000, SUB_AND_SUSPEND);
    pull.opaque = 501;
    conn.write(&pull).await;
    let r = producer.call(send_request("RawTopic", 3, &b"elsewhere"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    assert!(
        conn.response(501, Duration::from_millis(300)).await.is_none(),
        "an append to queue 3 leaves the pull on queue 0 parked"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_write_only_topic_when_pulling_should_answer_no_permission() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut create = create_topic_request("WriteOnly", 4);
    create.ext_fields.insert("perm", "2");
    let r = conn.call(create).await;
    assert_eq!(r.code, code::SUCCESS, "creating a write-only topic succeeds: {r:?}");
    let r = conn.call(send_request("WriteOnly", 0, &b"kept"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "a write-only topic takes messages: {r:?}");
    let r = conn
        .call(pull_request("raw_group", "WriteOnly", 0, 0, 0, pull_sys_flag::SUBSCRIPTION))
        .await;
    assert_eq!(
        r.code,
        code::NO_PERMISSION,
        "pulling from a topic without the read permission is forbidden: {r:?}"
    );
    assert!(r.body.is_empty(), "a forbidden pull carries no messages");
    let r = conn
        .call(pull_request("raw_group", "RawTopic", 0, 0, 0, pull_sys_flag::SUBSCRIPTION))
        .await;
    assert_eq!(
        r.code,
        code::PULL_NOT_FOUND,
        "a readable topic is pulled on the same connection: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_valid_request_followed_by_garbage_in_one_write_should_answer_the_request_then_close(
) {
    let (broker, _keep) = broker_with_topic("RawTopic").await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let mut req = max_offset_request("RawTopic", 0);
    req.opaque = 9;
    let mut bytes = BytesMut::new();
    req.encode(&mut bytes).expect("encodable");
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    conn.write_raw(&bytes).await;
    let (_, r) =
        conn.response(9, PATIENCE).await.expect("the request before the garbage is answered");
    assert_eq!(r.code, code::SUCCESS, "the valid request is served: {r:?}");
    assert!(conn.closed_within(PATIENCE).await, "then the connection is closed");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_requests_split_across_writes_and_pipelined_should_answer_each_with_its_opaque() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut bytes = BytesMut::new();
    for (opaque, queue) in [(21, 0), (22, 9), (23, 1)] {
        let mut req = max_offset_request("RawTopic", queue);
        req.opaque = opaque;
        req.encode(&mut bytes).expect("encodable");
    }
    // One byte at a time: a partial frame waits for the rest, it is not an error.
    for b in bytes.iter() {
        conn.write_raw(&[*b]).await;
    }
    for (opaque, expected) in [(21, code::SUCCESS), (22, code::SYSTEM_ERROR), (23, code::SUCCESS)] {
        let (_, r) =
            conn.response(opaque, PATIENCE).await.expect("each pipelined request is answered");
        assert_eq!(r.code, expected, "request {opaque} gets its own answer: {r:?}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_an_ali_ons_style_header_with_raw_json_numbers_should_be_served_and_answered_in_json()
{
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    // ali-ons: language JAVA, version 121, no serializeTypeCurrentRPC, numbers and booleans
    // unquoted in extFields.
    let header = br#"{"code":30,"language":"JAVA","opaque":31,"flag":0,"version":121,"extFields":{"topic":"RawTopic","queueId":0,"committed":true}}"#;
    let mut frame = Vec::new();
    frame.extend_from_slice(&(4 + header.len() as i32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as i32).to_be_bytes());
    frame.extend_from_slice(header);
    conn.write_raw(&frame).await;
    let (kind, r) = conn.response(31, PATIENCE).await.expect("an ali-ons request is answered");
    assert_eq!(kind, 0, "ali-ons is answered in JSON");
    assert_eq!(r.code, code::SUCCESS, "raw JSON numbers in extFields are accepted: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("0"), "the answer carries the offset: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_pull_with_the_commit_offset_flag_should_store_the_offset_for_the_group() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    for i in 0..5 {
        let r = conn.call(send_request("RawTopic", 2, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let hb = conn.call(heartbeat_request("127.0.0.1@raw", "commit_group", "RawTopic")).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    let mut pull = pull_request(
        "commit_group",
        "RawTopic",
        2,
        3,
        1_000,
        pull_sys_flag::COMMIT_OFFSET | pull_sys_flag::SUSPEND,
    );
    pull.ext_fields.insert("commitOffset", "3");
    let r = conn.call(pull).await;
    assert_eq!(r.code, code::SUCCESS, "the pull from 3 finds messages: {r:?}");
    let mut query = ExtFields::new();
    query.insert("consumerGroup", "commit_group");
    query.insert("topic", "RawTopic");
    query.insert("queueId", "2");
    let r = conn.call(request(rc::QUERY_CONSUMER_OFFSET, query)).await;
    assert_eq!(r.code, code::SUCCESS, "the group has a committed offset: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("3"), "the pull's commitOffset was stored: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_group_that_never_committed_when_querying_its_offset_should_follow_rocketmqs_rules()
{
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(send_request("RawTopic", 0, &b"m"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    let query = |queue: &str, set_zero: Option<&str>| {
        let mut ext = ExtFields::new();
        ext.insert("consumerGroup", "new_group");
        ext.insert("topic", "RawTopic");
        ext.insert("queueId", queue);
        if let Some(z) = set_zero {
            ext.insert("setZeroIfNotFound", z);
        }
        request(rc::QUERY_CONSUMER_OFFSET, ext)
    };
    let r = conn.call(query("0", None)).await;
    assert_eq!(r.code, code::SUCCESS, "a never-trimmed queue answers 0 for a new group: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("0"), "the new group starts at 0: {r:?}");
    let r = conn.call(query("1", None)).await;
    assert_eq!(
        r.code,
        code::QUERY_NOT_FOUND,
        "an empty queue has no offset for a new group: {r:?}"
    );
    let r = conn.call(query("0", Some("false"))).await;
    assert_eq!(r.code, code::QUERY_NOT_FOUND, "setZeroIfNotFound=false answers not found: {r:?}");
    // A one-way commit of a group a heartbeat made known is stored (and not answered).
    let hb = conn.call(heartbeat_request("127.0.0.1@raw", "new_group", "RawTopic")).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    let mut ext = ExtFields::new();
    ext.insert("consumerGroup", "new_group");
    ext.insert("topic", "RawTopic");
    ext.insert("queueId", "0");
    ext.insert("commitOffset", "1");
    let mut commit = request(rc::UPDATE_CONSUMER_OFFSET, ext);
    commit.flag = RemotingCommand::FLAG_ONEWAY;
    conn.write(&commit).await;
    let r = conn.call(query("0", Some("false"))).await;
    assert_eq!(r.code, code::SUCCESS, "the one-way commit was stored: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("1"), "the committed offset is answered: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_group_members_joining_and_leaving_should_list_them_and_notify_the_others() {
    let (broker, mut first) = broker_with_topic("RawTopic").await;
    let mut second = Conn::open(broker_addr(&broker)).await;
    let list = || {
        let mut ext = ExtFields::new();
        ext.insert("consumerGroup", "members");
        request(rc::GET_CONSUMER_LIST_BY_GROUP, ext)
    };
    let r = first.call(list()).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a group without members has no consumer list: {r:?}");
    let r = first.call(heartbeat_request("127.0.0.1@one", "members", "RawTopic")).await;
    assert_eq!(r.code, code::SUCCESS, "the first heartbeat is accepted: {r:?}");
    let r = second.call(heartbeat_request("127.0.0.1@two", "members", "RawTopic")).await;
    assert_eq!(r.code, code::SUCCESS, "the second heartbeat is accepted: {r:?}");
    // The first member is told that the group changed.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (_, cmd) = first
            .read_frame(left)
            .await
            .expect("the first member is notified that the group changed");
        if !cmd.is_response() && cmd.code == rc::NOTIFY_CONSUMER_IDS_CHANGED {
            assert!(cmd.is_oneway(), "NOTIFY_CONSUMER_IDS_CHANGED is one-way");
            assert_eq!(cmd.ext_fields.get("consumerGroup"), Some("members"), "it names the group");
            break;
        }
    }
    let r = first.call(list()).await;
    assert_eq!(r.code, code::SUCCESS, "the group has members: {r:?}");
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        body.contains("127.0.0.1@one") && body.contains("127.0.0.1@two"),
        "both members are listed: {body}"
    );
    let mut ext = ExtFields::new();
    ext.insert("clientID", "127.0.0.1@two");
    ext.insert("consumerGroup", "members");
    let r = second.call(request(rc::UNREGISTER_CLIENT, ext)).await;
    assert_eq!(r.code, code::SUCCESS, "unregistering succeeds: {r:?}");
    let r = first.call(list()).await;
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert!(!body.contains("127.0.0.1@two"), "an unregistered member is no longer listed: {body}");
    // A member whose connection closes leaves too.
    drop(first);
    let mut third = Conn::open(broker_addr(&broker)).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = third.call(list()).await;
        if r.code == code::SYSTEM_ERROR {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a member whose connection closed leaves its group: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_malformed_heartbeat_body_should_answer_system_error_and_stay_open() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(request(rc::HEART_BEAT, ExtFields::new()).with_body(&b"{not json"[..])).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a heartbeat whose body is not JSON is refused: {r:?}");
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_tag_subscription_when_no_message_matches_should_answer_pull_retry_immediately_past_them(
) {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    for i in 0..4 {
        let r = conn.call(send_request("RawTopic", 0, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let mut pull = pull_request("tag_group", "RawTopic", 0, 0, 300, SUB_AND_SUSPEND);
    pull.ext_fields.insert("subscription", "TagB || TagC");
    let r = conn.call(pull).await;
    assert_eq!(
        r.code,
        code::PULL_RETRY_IMMEDIATELY,
        "messages that all miss the filter are skipped: {r:?}"
    );
    assert_eq!(
        r.ext_fields.get("nextBeginOffset"),
        Some("4"),
        "the next pull starts past them: {r:?}"
    );
    assert!(r.body.is_empty(), "no message is delivered");
    let mut pull = pull_request("tag_group", "RawTopic", 0, 0, 300, SUB_AND_SUSPEND);
    pull.ext_fields.insert("subscription", "TagB || TagA");
    let r = conn.call(pull).await;
    assert_eq!(r.code, code::SUCCESS, "a matching tag is delivered: {r:?}");
    assert_eq!(decode_records(&r.body).expect("a valid pull body").len(), 4, "all four match TagA");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_negative_pull_offset_should_answer_pull_offset_moved_to_the_first_offset() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(send_request("RawTopic", 0, &b"m"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    for queue in [0, 1] {
        let r =
            conn.call(pull_request("raw_group", "RawTopic", queue, -1, 300, SUB_AND_SUSPEND)).await;
        assert_eq!(
            r.code,
            code::PULL_OFFSET_MOVED,
            "an offset below the first one has moved (queue {queue}): {r:?}"
        );
        assert_eq!(
            r.ext_fields.get("nextBeginOffset"),
            Some("0"),
            "the consumer is sent to the first offset: {r:?}"
        );
    }
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_properties_over_32767_bytes_when_sending_should_answer_message_illegal() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut req = send_request("RawTopic", 0, &b"x"[..]);
    let props = format!("TAGS\u{1}TagA\u{2}big\u{1}{}\u{2}", "p".repeat(40_000));
    req.ext_fields.insert("properties", &props);
    let r = conn.call(req).await;
    assert_eq!(r.code, code::MESSAGE_ILLEGAL, "properties over 32767 bytes are illegal: {r:?}");
    assert_still_served(&mut conn, "RawTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_parked_pull_when_the_broker_shuts_down_should_answer_it_and_close() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut pull = pull_request("raw_group", "RawTopic", 0, 0, 20_000, SUB_AND_SUSPEND);
    pull.opaque = 600;
    conn.write(&pull).await;
    assert!(
        conn.response(600, Duration::from_millis(200)).await.is_none(),
        "a pull of an empty queue is parked"
    );
    let stopping = tokio::spawn(broker.shutdown());
    let (_, r) = conn.response(600, PATIENCE).await.expect("shutting down answers the parked pull");
    assert_eq!(r.code, code::PULL_NOT_FOUND, "the parked pull found nothing: {r:?}");
    assert!(conn.closed_within(PATIENCE).await, "then the broker closes the connection");
    tokio::time::timeout(PATIENCE, stopping)
        .await
        .expect("the broker finishes shutting down")
        .expect("the shutdown task");
}

/// A SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request with the short field names.
fn send_v2_request(
    code: i32,
    topic: &str,
    queue: i32,
    body: impl Into<bytes::Bytes>,
) -> RemotingCommand {
    let mut ext = ExtFields::new();
    for (k, v) in [
        ("a", "raw_producer"),
        ("b", topic),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", &queue.to_string()),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", "TAGS\u{1}TagV2\u{2}KEYS\u{1}k1 k2\u{2}"),
        ("j", "0"),
        ("k", "false"),
        ("m", if code == rc::SEND_BATCH_MESSAGE { "true" } else { "false" }),
    ] {
        ext.insert(k, v);
    }
    request(code, ext).with_body(body)
}

#[tokio::test]
async fn given_a_send_with_the_v2_header_should_store_the_message_with_its_properties() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let r = conn.call(send_v2_request(rc::SEND_MESSAGE_V2, "RawTopic", 1, &b"v2 body"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "a SEND_MESSAGE_V2 is stored: {r:?}");
    assert_eq!(r.ext_fields.get("queueId"), Some("1"), "on the queue it named: {r:?}");
    assert_eq!(r.ext_fields.get("queueOffset"), Some("0"), "at the queue's first offset: {r:?}");
    let r = conn
        .call(pull_request("raw_group", "RawTopic", 1, 0, 0, pull_sys_flag::SUBSCRIPTION))
        .await;
    assert_eq!(r.code, code::SUCCESS, "the message is pulled: {r:?}");
    let msgs = decode_records(&r.body).expect("a valid pull body");
    assert_eq!(msgs.len(), 1, "one message: {msgs:?}");
    assert_eq!(&msgs[0].body[..], b"v2 body", "the body is kept");
    let props = String::from_utf8_lossy(&msgs[0].properties).into_owned();
    for p in ["TAGS\u{1}TagV2", "KEYS\u{1}k1 k2", "UNIQ_KEY\u{1}"] {
        assert!(
            props.contains(p),
            "the stored properties have {p:?} (the broker adds UNIQ_KEY): {props:?}"
        );
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_batch_to_a_retry_topic_should_answer_message_illegal() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    let mut body = BytesMut::new();
    for i in 0..3 {
        baiji::remoting::message::encode_batch_entry(&mut body, 0, format!("b{i}").as_bytes(), b"")
            .expect("an encodable entry");
    }
    let r = conn
        .call(send_v2_request(
            rc::SEND_BATCH_MESSAGE,
            "%RETRY%some_group",
            0,
            body.clone().freeze(),
        ))
        .await;
    assert_eq!(r.code, code::MESSAGE_ILLEGAL, "a batch may not go to a retry topic: {r:?}");
    let r = conn.call(send_v2_request(rc::SEND_BATCH_MESSAGE, "RawTopic", 2, body.freeze())).await;
    assert_eq!(r.code, code::SUCCESS, "the same batch to a normal topic is stored: {r:?}");
    assert_eq!(
        r.ext_fields.get("queueOffset"),
        Some("0"),
        "the batch starts at the queue's first offset: {r:?}"
    );
    let ids = r.ext_fields.get("msgId").unwrap_or_default();
    assert_eq!(
        ids.split(',').count(),
        3,
        "the reply has the id of every message of the batch: {ids}"
    );
    let r = conn.call(max_offset_request("RawTopic", 2)).await;
    assert_eq!(
        r.ext_fields.get("offset"),
        Some("3"),
        "the batch took three consecutive offsets: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_pull_with_max_msg_nums_should_return_at_most_that_many_and_continue_after_them() {
    let (broker, mut conn) = broker_with_topic("RawTopic").await;
    for i in 0..5 {
        let r = conn.call(send_request("RawTopic", 0, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let mut pull = pull_request("raw_group", "RawTopic", 0, 1, 0, pull_sys_flag::SUBSCRIPTION);
    pull.ext_fields.insert("maxMsgNums", "2");
    let r = conn.call(pull).await;
    assert_eq!(r.code, code::SUCCESS, "the pull finds messages: {r:?}");
    let msgs = decode_records(&r.body).expect("a valid pull body");
    let offsets: Vec<i64> = msgs.iter().map(|m| m.queue_offset).collect();
    assert_eq!(offsets, [1, 2], "at most maxMsgNums messages, from the offset asked");
    assert_eq!(
        r.ext_fields.get("nextBeginOffset"),
        Some("3"),
        "the next pull continues after them: {r:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_dead_letters_when_unheld_messages_expire_should_keep_the_dlq_for_its_own_retention()
{
    // Messages no group holds expire at once here; dead letters must not (72 h by default).
    let broker = start_broker(|c| c.core.retention_secs = 0).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let hb = conn.call(heartbeat_request("127.0.0.1@raw", "dlq_group", "RawTopic")).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat creates %RETRY%dlq_group: {hb:?}");
    // A retry past the group's maximum, as a client sends it when its send-back failed.
    let mut dead = send_request("%RETRY%dlq_group", 0, &b"poison"[..]);
    dead.ext_fields.insert("reconsumeTimes", "17");
    let r = conn.call(dead).await;
    assert_eq!(r.code, code::SUCCESS, "the dead letter is stored: {r:?}");
    let r = conn.call(create_topic_request("PlainTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let r = conn.call(send_request("PlainTopic", 0, &b"unheld"[..])).await;
    assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    // Wait for a reaper pass that saw both: the unheld plain message is gone.
    let min_offset = |topic: &str| {
        let mut ext = ExtFields::new();
        ext.insert("topic", topic);
        ext.insert("queueId", "0");
        request(rc::GET_MIN_OFFSET, ext)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = conn.call(min_offset("PlainTopic")).await;
        if r.ext_fields.get("offset") == Some("1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "unheld messages expire: {r:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = conn.call(min_offset("%DLQ%dlq_group")).await;
    assert_eq!(r.ext_fields.get("offset"), Some("0"), "the dead letter is still there: {r:?}");
    let r = conn.call(max_offset_request("%DLQ%dlq_group", 0)).await;
    assert_eq!(r.ext_fields.get("offset"), Some("1"), "one dead letter: {r:?}");
    broker.shutdown().await;
}
