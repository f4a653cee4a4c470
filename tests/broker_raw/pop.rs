//! POP consumption over raw frames: `POP_MESSAGE`, `ACK_MESSAGE`, `BATCH_ACK_MESSAGE` (both
//! bitset encodings), `CHANGE_MESSAGE_INVISIBLETIME`, `QUERY_ASSIGNMENT`,
//! `SET_MESSAGE_REQUEST_MODE`, and the codes baiji does not serve (`PEEK_MESSAGE`,
//! `NOTIFICATION`, `POLLING_INFO`). Headers are written as rocketmq-client-rust 1.0.0 writes
//! them; receipts (`extraInfo`) are built from the response headers as its
//! `processPopResponse` builds them. Expiry waits are event-driven: a pop with a poll time is
//! parked until the message becomes visible again.

use super::*;
use baiji::remoting::header::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    ExtraInfo, FromExtFields, PopMessageRequestHeader, PopMessageResponseHeader,
};
use baiji::remoting::message::DecodedMessage;

pub(super) const TOPIC: &str = "PopTopic";
pub(super) const GROUP: &str = "pop_group";

/// A broker with `PopTopic` (4 queues) and `pop_group` known from a heartbeat.
async fn pop_broker(tweak: impl FnOnce(&mut BrokerConfig)) -> (RunningBroker, Conn) {
    let broker = start_broker(tweak).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request(TOPIC, 4)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let r = conn.call(heartbeat_request("127.0.0.1@pop", GROUP, TOPIC)).await;
    assert_eq!(r.code, code::SUCCESS, "the heartbeat is accepted: {r:?}");
    (broker, conn)
}

/// A `POP_MESSAGE` of `pop_group` on `PopTopic` (see [`pop_request`]).
pub(super) struct Pop<'a> {
    pub(super) queue: i32,
    pub(super) max: i32,
    pub(super) invisible_ms: i64,
    pub(super) poll_ms: i64,
    pub(super) order: bool,
    pub(super) attempt_id: Option<&'a str>,
}

impl Default for Pop<'_> {
    fn default() -> Self {
        Pop { queue: -1, max: 32, invisible_ms: 60_000, poll_ms: 0, order: false, attempt_id: None }
    }
}

/// The frame of pop `p`, born now.
pub(super) fn pop_request(p: &Pop<'_>) -> RemotingCommand {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as i64;
    let h = PopMessageRequestHeader {
        consumer_group: GROUP,
        topic: TOPIC,
        queue_id: p.queue,
        max_msg_nums: p.max,
        invisible_time: p.invisible_ms,
        poll_time: p.poll_ms,
        born_time: now,
        init_mode: 0,
        exp_type: Some("TAG"),
        exp: Some("*"),
        order: p.order,
        attempt_id: p.attempt_id,
    };
    request(rc::POP_MESSAGE, h.to_ext_fields())
}

/// A popped message and its receipt, as the Rust client keeps them.
#[derive(Debug, Clone)]
pub(super) struct Got {
    pub(super) msg: DecodedMessage,
    pub(super) extra_info: String,
}

/// The group's pop retry topic, where expired messages are revived (RocketMQ's V1 name).
fn retry_topic() -> String {
    format!("%RETRY%{GROUP}_{TOPIC}")
}

impl Got {
    /// The topic the client acks in: `ExtraInfoUtil.getRealTopic` of the receipt's retry flag,
    /// which the client took from the topic the message came with.
    fn real_topic(&self) -> String {
        if self.msg.topic.starts_with("%RETRY%") {
            retry_topic()
        } else {
            TOPIC.to_owned()
        }
    }
}

/// The messages of a successful pop, each with the `POP_CK` the client would build.
pub(super) fn popped(r: &RemotingCommand) -> Vec<Got> {
    assert_eq!(r.code, code::SUCCESS, "the pop finds messages: {r:?}");
    let h = PopMessageResponseHeader::from_ext_fields(&r.ext_fields).expect("a pop header");
    let starts = h.start_offset_info.clone().expect("startOffsetInfo is set");
    let offsets = h.msg_offset_info.clone().expect("msgOffsetInfo is set");
    let msgs = decode_records(&r.body).expect("a batch body");
    msgs.into_iter()
        .map(|msg| {
            let q = msg.queue_id;
            // `ExtraInfoUtil.getRetry` of the message's topic: the key's first field.
            let flag = if msg.topic.starts_with("%RETRY%") { "1" } else { "0" };
            let start = starts
                .split(';')
                .find_map(|e| {
                    let f: Vec<&str> = e.split(' ').collect();
                    (f.len() == 3 && f[0] == flag && f[1] == q.to_string()).then(|| f[2].to_owned())
                })
                .unwrap_or_else(|| panic!("startOffsetInfo {starts} names queue {flag}@{q}"));
            let listed = offsets.split(';').any(|e| {
                let f: Vec<&str> = e.split(' ').collect();
                f.len() == 3
                    && f[0] == flag
                    && f[1] == q.to_string()
                    && f[2].split(',').any(|o| o == msg.queue_offset.to_string())
            });
            assert!(
                listed,
                "msgOffsetInfo {offsets} lists offset {} of queue {q}",
                msg.queue_offset
            );
            let extra_info = format!(
                "{start} {} {} {} {flag} baiji-a {q} {}",
                h.pop_time, h.invisible_time, h.revive_qid, msg.queue_offset
            );
            Got { msg, extra_info }
        })
        .collect()
}

/// An `ACK_MESSAGE` of `g` by its receipt.
pub(super) fn ack_request(g: &Got) -> RemotingCommand {
    let topic = g.real_topic();
    let h = AckMessageRequestHeader {
        consumer_group: GROUP,
        topic: &topic,
        queue_id: g.msg.queue_id,
        extra_info: &g.extra_info,
        offset: g.msg.queue_offset,
    };
    request(rc::ACK_MESSAGE, h.to_ext_fields())
}

/// A `CHANGE_MESSAGE_INVISIBLETIME` of `g` by its receipt.
pub(super) fn change_request(g: &Got, invisible_ms: i64) -> RemotingCommand {
    let topic = g.real_topic();
    let h = ChangeInvisibleTimeRequestHeader {
        consumer_group: GROUP,
        topic: &topic,
        queue_id: g.msg.queue_id,
        extra_info: &g.extra_info,
        offset: g.msg.queue_offset,
        invisible_time: invisible_ms,
    };
    request(rc::CHANGE_MESSAGE_INVISIBLETIME, h.to_ext_fields())
}

/// Sends `n` messages to queue `queue` of `PopTopic`, bodies `m0`, `m1`, ….
pub(super) async fn send_n(conn: &mut Conn, queue: i32, n: usize) {
    for i in 0..n {
        let r = conn.call(send_request(TOPIC, queue, format!("m{i}"))).await;
        assert_eq!(r.code, code::SUCCESS, "the send is accepted: {r:?}");
    }
}

fn inflight(b: &RunningBroker) -> u64 {
    b.store().inflight(GROUP, TOPIC)
}

#[tokio::test]
async fn given_messages_in_every_queue_when_popping_queue_minus_one_should_hand_each_out_once_until_acked(
) {
    let (broker, mut conn) = pop_broker(|_| {}).await;
    for q in 0..4 {
        send_n(&mut conn, q, 2).await;
    }
    let got = popped(&conn.call(pop_request(&Pop::default())).await);
    let mut seen: Vec<(i32, i64)> =
        got.iter().map(|g| (g.msg.queue_id, g.msg.queue_offset)).collect();
    seen.sort_unstable();
    assert_eq!(seen.len(), 8, "queue -1 pops every queue: {seen:?}");
    seen.dedup();
    assert_eq!(seen.len(), 8, "no message twice in one pop");
    assert!(got.iter().all(|g| g.msg.reconsume_times == 0), "first deliveries");
    let again = conn.call(pop_request(&Pop::default())).await;
    assert_eq!(again.code, code::PULL_NOT_FOUND, "popped messages are invisible: {again:?}");
    assert!(
        PopMessageResponseHeader::from_ext_fields(&again.ext_fields).is_ok(),
        "a not-found answer still carries the pop header the Rust client decodes"
    );
    for g in &got {
        let r = conn.call(ack_request(g)).await;
        assert_eq!(r.code, code::SUCCESS, "the ack is accepted: {r:?}");
    }
    let r = conn.call(ack_request(&got[0])).await;
    assert_eq!(r.code, code::SUCCESS, "acking twice is harmless: {r:?}");
    assert_eq!(inflight(&broker), 0, "nothing in flight once all are acked");
}

#[tokio::test]
async fn given_popped_messages_when_scraped_should_count_them_as_messages_out_of_the_group() {
    let (broker, mut conn) =
        pop_broker(|c| c.core.metrics_listen = Some("127.0.0.1:0".parse().expect("an address")))
            .await;
    send_n(&mut conn, 1, 3).await;
    send_n(&mut conn, 2, 2).await;
    let got = popped(&conn.call(pop_request(&Pop::default())).await);
    assert_eq!(got.len(), 5, "every message is popped");
    let addr = broker.metrics_addr().expect("metrics are served");
    let (_, text) = super::metrics::http_get(addr, "/metrics").await;
    let with = [r#"topic="PopTopic""#, r#"consumer_group="pop_group""#];
    let out = super::metrics::value(&text, "rocketmq_messages_out_total", &with);
    assert_eq!(out, 5.0, "pops count as messages out, as pulls do");
    let bytes = super::metrics::value(&text, "rocketmq_throughput_out_total", &with);
    assert!(bytes > 0.0, "and their bytes");
}

#[tokio::test]
async fn given_unacked_message_when_its_invisible_time_expires_should_redeliver_it_with_reconsume_times_plus_one(
) {
    let (broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 0, 1).await;
    let first = popped(&conn.call(pop_request(&Pop { invisible_ms: 300, ..Pop::default() })).await);
    // Parked until the message is visible again (woken by its expiry, not by polling).
    let again = popped(&conn.call(pop_request(&Pop { poll_ms: 10_000, ..Pop::default() })).await);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].msg.body, first[0].msg.body, "the same message");
    assert_eq!(again[0].msg.reconsume_times, 1, "a redelivery counts one reconsume more");
    assert_eq!(again[0].msg.topic, retry_topic(), "revived as RocketMQ revives");
    assert_eq!(again[0].msg.queue_id, 0, "the retry topic's one queue");
    // The original was acknowledged when it was revived: an ack of its receipt is answered
    // as RocketMQ answers one whose checkpoint is gone, and acknowledges nothing else.
    let stale = conn.call(ack_request(&first[0])).await;
    assert_eq!(stale.code, code::SUCCESS, "{stale:?}");
    assert_eq!(broker.store().inflight(GROUP, &retry_topic()), 1, "the copy is still in flight");
    let r = conn.call(ack_request(&again[0])).await;
    assert_eq!(r.code, code::SUCCESS, "the newest receipt acknowledges: {r:?}");
    assert_eq!(broker.store().inflight(GROUP, &retry_topic()), 0);
}

#[tokio::test]
async fn given_changed_invisible_time_when_using_both_receipts_should_refuse_the_old_and_accept_the_new(
) {
    let (broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 0, 1).await;
    let got = popped(&conn.call(pop_request(&Pop::default())).await);
    let r = conn.call(change_request(&got[0], 120_000)).await;
    assert_eq!(r.code, code::SUCCESS, "the change is accepted: {r:?}");
    let h = ChangeInvisibleTimeResponseHeader::from_ext_fields(&r.ext_fields).expect("a header");
    let old = ExtraInfo::parse(&got[0].extra_info).expect("a receipt");
    assert!(h.pop_time > old.pop_time as u64, "a new receipt: {h:?}");
    assert_eq!(h.invisible_time, 120_000);
    // The client rebuilds the receipt with the response's pop time and the message's offset.
    let renewed = Got {
        msg: got[0].msg.clone(),
        extra_info: ExtraInfo {
            ck_queue_offset: got[0].msg.queue_offset,
            pop_time: h.pop_time as i64,
            invisible_time: h.invisible_time,
            queue_offset: Some(got[0].msg.queue_offset),
            ..old
        }
        .build(),
    };
    let r = conn.call(change_request(&got[0], 0)).await;
    assert_eq!(r.code, code::NO_MESSAGE, "the old receipt cannot change it again: {r:?}");
    let r = conn.call(ack_request(&got[0])).await;
    assert_eq!(r.code, code::NO_MESSAGE, "the old receipt cannot acknowledge: {r:?}");
    assert_eq!(inflight(&broker), 1, "still in flight under the new receipt");
    let r = conn.call(ack_request(&renewed)).await;
    assert_eq!(r.code, code::SUCCESS, "the new receipt acknowledges: {r:?}");
    assert_eq!(inflight(&broker), 0);
}

#[tokio::test]
async fn given_popped_batch_when_batch_acking_with_java_base64_and_rust_byte_array_bitsets_should_ack_the_set_bits(
) {
    let (broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 0, 3).await;
    let got = popped(&conn.call(pop_request(&Pop { queue: 0, ..Pop::default() })).await);
    assert_eq!(got.len(), 3);
    let e = ExtraInfo::parse(&got[0].extra_info).expect("a receipt");
    let ack = |bits: &str| {
        format!(
            r#"{{"c":"{GROUP}","t":"{TOPIC}","r":"0","so":{},"q":0,"rq":0,"pt":{},"it":{},"b":{bits}}}"#,
            e.ck_queue_offset, e.pop_time, e.invisible_time
        )
    };
    // Java (fastjson): base64 of BitSet.toByteArray(); bits 0 and 2 = [0b101] = "BQ==".
    let java = format!(r#"{{"brokerName":"baiji-a","acks":[{}]}}"#, ack(r#""BQ==""#));
    let r = conn
        .call(request(rc::BATCH_ACK_MESSAGE, ExtFields::new()).with_body(java.into_bytes()))
        .await;
    assert_eq!(r.code, code::SUCCESS, "the Java batch ack is accepted: {r:?}");
    assert_eq!(inflight(&broker), 1, "bits 0 and 2 acknowledged offsets so and so + 2");
    // Rust client: the u64 words of a BitVec as an array of bytes; bit 1 = [2, 0, …].
    let rust = format!(r#"{{"brokerName":"baiji-a","acks":[{}]}}"#, ack("[2,0,0,0,0,0,0,0]"));
    let r = conn
        .call(request(rc::BATCH_ACK_MESSAGE, ExtFields::new()).with_body(rust.into_bytes()))
        .await;
    assert_eq!(r.code, code::SUCCESS, "the Rust batch ack is accepted: {r:?}");
    assert_eq!(inflight(&broker), 0, "bit 1 acknowledged the last one");
}

#[tokio::test]
async fn given_ordered_pop_when_queue_has_an_invisible_message_should_block_it_unless_the_attempt_id_repeats(
) {
    let (_broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 0, 3).await;
    let ordered =
        |max, attempt_id| Pop { queue: 0, max, order: true, attempt_id, ..Pop::default() };
    let r = conn.call(pop_request(&ordered(2, Some("a1")))).await;
    let h = PopMessageResponseHeader::from_ext_fields(&r.ext_fields).expect("a pop header");
    assert_eq!(h.revive_qid, 999, "ordered pops are marked by reviveQid 999");
    assert_eq!(
        h.order_count_info.as_deref(),
        Some("0 qo0%0 0;0 qo0%1 0;0 0 0"),
        "orderCountInfo per message, then per queue"
    );
    let first = popped(&r);
    assert_eq!(first.len(), 2);
    let blocked = conn.call(pop_request(&ordered(2, Some("a2")))).await;
    assert_eq!(blocked.code, code::PULL_NOT_FOUND, "the queue is blocked: {blocked:?}");
    let repeat = popped(&conn.call(pop_request(&ordered(2, Some("a1")))).await);
    let offsets: Vec<i64> = repeat.iter().map(|g| g.msg.queue_offset).collect();
    assert_eq!(offsets, [0, 1], "the same attempt id gets the same batch");
    for g in &repeat {
        assert_eq!(conn.call(ack_request(g)).await.code, code::SUCCESS);
    }
    let next = popped(&conn.call(pop_request(&ordered(2, Some("a3")))).await);
    assert_eq!(next.len(), 1, "unblocked once the batch is acked");
    assert_eq!(next[0].msg.queue_offset, 2);
}

#[tokio::test]
async fn given_message_never_acked_when_its_attempts_run_out_should_move_it_to_the_group_dlq() {
    let (broker, mut conn) = pop_broker(|c| c.core.pop_retry_max_times = 1).await;
    send_n(&mut conn, 0, 1).await;
    let quick = Pop { invisible_ms: 200, poll_ms: 10_000, ..Pop::default() };
    let first = popped(&conn.call(pop_request(&quick)).await);
    assert_eq!(first[0].msg.reconsume_times, 0);
    let second = popped(&conn.call(pop_request(&quick)).await);
    assert_eq!(second[0].msg.reconsume_times, 1, "one redelivery allowed");
    let third = conn.call(pop_request(&Pop { poll_ms: 2_000, ..quick })).await;
    assert_eq!(third.code, code::POLLING_TIMEOUT, "no third delivery: {third:?}");
    let dlq = format!("%DLQ%{GROUP}");
    let r = conn.call(max_offset_request(&dlq, 0)).await;
    assert_eq!(r.code, code::SUCCESS, "the dead-letter topic exists: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("1"), "one dead letter");
    assert_eq!(inflight(&broker), 0, "a dead letter is no longer in flight");
    let retry = broker.store().inflight(GROUP, &retry_topic());
    assert_eq!(retry, 0, "nor in the retry topic");
}

/// The messages the broker retains once its reaper got to `want` (or after 10 s, whatever
/// the count is then).
async fn live_messages_reaching(b: &RunningBroker, want: u64) -> u64 {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let live = b.store().memory().live_messages;
        if live == want || std::time::Instant::now() > until {
            return live;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn given_a_poison_message_when_it_expires_should_revive_it_and_free_the_rest_of_its_queue() {
    // review-e77444b H7: an expired message was redelivered from its own queue, so it held
    // every later message of the queue in memory until it was acknowledged or dead-lettered
    // (attempts x invisible time), although the group acknowledged them as it went.
    let (broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 0, 5).await;
    let quick = Pop { queue: 0, invisible_ms: 300, ..Pop::default() };
    let first = popped(&conn.call(pop_request(&quick)).await);
    assert_eq!(first.len(), 5);
    for g in &first[1..] {
        let r = conn.call(ack_request(g)).await;
        assert_eq!(r.code, code::SUCCESS, "the ack is accepted: {r:?}");
    }
    let parked = Pop { queue: 0, poll_ms: 10_000, ..Pop::default() };
    let again = popped(&conn.call(pop_request(&parked)).await);
    assert_eq!(again.len(), 1, "the failing one comes back");
    assert_eq!(again[0].msg.body, first[0].msg.body);
    assert_eq!(again[0].msg.topic, retry_topic());
    assert_eq!(
        live_messages_reaching(&broker, 1).await,
        1,
        "its own queue moved on: only the retry copy is retained while the consumer has it"
    );
    let r = conn.call(ack_request(&again[0])).await;
    assert_eq!(r.code, code::SUCCESS, "acknowledged in the retry topic: {r:?}");
    assert_eq!(live_messages_reaching(&broker, 0).await, 0, "nothing held any more");
    let nothing = conn.call(pop_request(&Pop { queue: 0, ..Pop::default() })).await;
    assert_eq!(nothing.code, code::PULL_NOT_FOUND, "done: {nothing:?}");
}

#[tokio::test]
async fn given_parked_pop_when_a_message_is_appended_should_answer_with_it() {
    let (broker, mut conn) = pop_broker(|_| {}).await;
    let mut producer = Conn::open(broker_addr(&broker)).await;
    let mut req = pop_request(&Pop { poll_ms: 15_000, ..Pop::default() });
    req.opaque = conn.opaque();
    conn.write(&req).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    send_n(&mut producer, 2, 1).await;
    let (_, r) = conn.response(req.opaque, PATIENCE).await.expect("the parked pop is answered");
    let got = popped(&r);
    assert_eq!(got.len(), 1, "woken by the append");
    assert_eq!(got[0].msg.queue_id, 2);
}

#[tokio::test]
async fn given_too_many_messages_asked_when_popping_should_answer_invalid_parameter() {
    let (_broker, mut conn) = pop_broker(|_| {}).await;
    let r = conn.call(pop_request(&Pop { max: 33, ..Pop::default() })).await;
    assert_eq!(r.code, code::INVALID_PARAMETER, "maxMsgNums is at most 32: {r:?}");
}

fn query_assignment(client: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"topic":"{TOPIC}","consumerGroup":"{GROUP}","clientId":"{client}","strategyName":"AVG","messageModel":"CLUSTERING"}}"#
    );
    request(rc::QUERY_ASSIGNMENT, ExtFields::new()).with_body(body.into_bytes())
}

fn modes(r: &RemotingCommand) -> Vec<(i32, String)> {
    assert_eq!(r.code, code::SUCCESS, "QUERY_ASSIGNMENT is answered: {r:?}");
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("a JSON body");
    let mut out: Vec<(i32, String)> = v["messageQueueAssignments"]
        .as_array()
        .expect("an array of assignments")
        .iter()
        .map(|a| {
            (
                a["messageQueue"]["queueId"].as_i64().expect("a queue id") as i32,
                a["mode"].as_str().expect("a mode").to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn given_request_mode_set_to_pop_when_querying_assignment_should_assign_every_queue_in_pop_mode(
) {
    let (_broker, mut conn) = pop_broker(|_| {}).await;
    let pull = modes(&conn.call(query_assignment("127.0.0.1@pop")).await);
    assert_eq!(pull.len(), 4, "the only client gets every queue");
    assert!(pull.iter().all(|(_, m)| m == "PULL"), "PULL by default: {pull:?}");
    let body = format!(
        r#"{{"topic":"{TOPIC}","consumerGroup":"{GROUP}","mode":"POP","popShareQueueNum":0}}"#
    );
    let r = conn
        .call(request(rc::SET_MESSAGE_REQUEST_MODE, ExtFields::new()).with_body(body.into_bytes()))
        .await;
    assert_eq!(r.code, code::SUCCESS, "the mode is set: {r:?}");
    let pop = modes(&conn.call(query_assignment("127.0.0.1@other")).await);
    assert_eq!(pop.len(), 4, "in POP mode every client reads every queue");
    assert!(pop.iter().all(|(_, m)| m == "POP"), "{pop:?}");
}

#[tokio::test]
async fn given_broker_default_mode_pop_when_querying_assignment_should_answer_pop() {
    let (_broker, mut conn) =
        pop_broker(|c| c.remoting.default_message_request_mode = "POP".into()).await;
    let pop = modes(&conn.call(query_assignment("127.0.0.1@pop")).await);
    assert!(!pop.is_empty() && pop.iter().all(|(_, m)| m == "POP"), "{pop:?}");
}

#[tokio::test]
async fn given_peek_notification_or_polling_info_when_sent_should_answer_request_code_not_supported(
) {
    let (_broker, mut conn) = pop_broker(|_| {}).await;
    for c in [rc::PEEK_MESSAGE, rc::NOTIFICATION, rc::POLLING_INFO] {
        let mut ext = ExtFields::new();
        ext.insert("consumerGroup", GROUP);
        ext.insert("topic", TOPIC);
        ext.insert_i64("queueId", 0);
        let r = conn.call(request(c, ext)).await;
        assert_eq!(r.code, code::REQUEST_CODE_NOT_SUPPORTED, "code {c}: {r:?}");
    }
}

#[tokio::test]
async fn given_a_huge_invisible_time_when_popping_or_changing_should_clamp_it_to_12_hours() {
    // review-e77444b H7: a client popping with invisibleTime 9e18 and crashing would pin its
    // queue (and every later message of it) for ever.
    const TWELVE_HOURS: i64 = 12 * 3600 * 1000;
    let (_broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 0, 1).await;
    let r = conn
        .call(pop_request(&Pop { invisible_ms: 9_000_000_000_000_000_000, ..Pop::default() }))
        .await;
    let h = PopMessageResponseHeader::from_ext_fields(&r.ext_fields).expect("a pop header");
    assert_eq!(h.invisible_time as i64, TWELVE_HOURS, "the pop's invisible time: {r:?}");
    let got = popped(&r);
    let r = conn.call(change_request(&got[0], i64::MAX)).await;
    assert_eq!(r.code, code::SUCCESS, "the change is accepted: {r:?}");
    let h = ChangeInvisibleTimeResponseHeader::from_ext_fields(&r.ext_fields).expect("a header");
    assert_eq!(h.invisible_time, TWELVE_HOURS, "the change's invisible time");
}

#[tokio::test]
async fn given_a_sql92_pop_behind_a_long_non_matching_backlog_when_parked_should_go_on_popping() {
    // review-e77444b M5: a pop that popped 32 non-matching messages (acknowledged by the
    // filter) parked for an append although the backlog went on; the match waited a poll per
    // 32 messages (here it was never reached within the poll).
    let (_broker, mut conn) = pop_broker(|_| {}).await;
    for (i, color) in (0..100).map(|i| (i, "red")).chain([(100, "blue")]) {
        let props = format!("TAGS\u{1}TagA\u{2}color\u{1}{color}\u{2}");
        let to = ("raw_producer", TOPIC, 0, 4);
        let r =
            conn.call(common::raw::send(SendHeaderVersion::V1, to, &props, format!("m{i}"))).await;
        assert_eq!(r.code, code::SUCCESS, "the send is accepted: {r:?}");
    }
    let mut req = pop_request(&Pop { queue: 0, poll_ms: 3_000, ..Pop::default() });
    req.ext_fields.insert("expType", "SQL92");
    req.ext_fields.insert("exp", "color = 'blue'");
    let got = popped(&conn.call(req).await);
    assert_eq!(got.len(), 1, "only the match");
    assert_eq!(got[0].msg.queue_offset, 100, "found behind the 100 rejected ones");
}

/// A pop of `group` (which no heartbeat announced).
fn pop_as(group: &str, p: &Pop<'_>) -> RemotingCommand {
    let mut req = pop_request(p);
    req.ext_fields.insert("consumerGroup", group);
    req
}

#[tokio::test]
async fn given_a_group_no_heartbeat_announced_when_popping_should_create_it_on_first_use() {
    // review-e77444b L9: RocketMQ's autoCreateSubscriptionGroup (default true).
    let (_broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 1, 1).await;
    let got = popped(&conn.call(pop_as("never_announced_group", &Pop::default())).await);
    assert_eq!(got.len(), 1, "the new group pops the retained message");
    let mut ack = ack_request(&got[0]);
    ack.ext_fields.insert("consumerGroup", "never_announced_group");
    let r = conn.call(ack).await;
    assert_eq!(r.code, code::SUCCESS, "and acknowledges it: {r:?}");
}

#[tokio::test]
async fn given_a_pop_only_group_when_idle_for_group_idle_secs_should_stop_holding_messages() {
    // review-e77444b H3: a group that only pops (no heartbeat, no member) was held for ever.
    let (broker, mut conn) = pop_broker(|c| c.core.group_idle_secs = 1).await;
    let before = broker.store().subscription_count().0;
    let r = conn.call(pop_as("passing_group", &Pop::default())).await;
    assert_eq!(r.code, code::PULL_NOT_FOUND, "nothing to pop yet: {r:?}");
    assert_eq!(broker.store().subscription_count().0, before + 1, "the pop subscribed it");
    let released = common::wait::poll(PATIENCE, Duration::from_millis(100), || async {
        broker.store().subscription_count().0 == before
    })
    .await;
    assert!(released.is_ok(), "released after group-idle-secs without activity");
    assert_eq!(
        broker.store().subscription_count().0,
        before,
        "the heartbeating group is the registry's to release"
    );
}

#[tokio::test]
async fn given_a_batch_ack_naming_more_than_4096_messages_should_refuse_it_and_ack_nothing() {
    // review-e77444b L8: every set bit was one locked engine ack run inline, ~1e8 per body.
    let (broker, mut conn) = pop_broker(|_| {}).await;
    send_n(&mut conn, 0, 1).await;
    let got = popped(&conn.call(pop_request(&Pop { queue: 0, ..Pop::default() })).await);
    let e = ExtraInfo::parse(&got[0].extra_info).expect("a receipt");
    let bytes = vec!["255"; 520].join(",");
    let body = format!(
        r#"{{"brokerName":"baiji-a","acks":[{{"c":"{GROUP}","t":"{TOPIC}","r":"0","so":{},"q":0,"rq":0,"pt":{},"it":{},"b":[{bytes}]}}]}}"#,
        e.ck_queue_offset, e.pop_time, e.invisible_time
    );
    let r = conn
        .call(request(rc::BATCH_ACK_MESSAGE, ExtFields::new()).with_body(body.into_bytes()))
        .await;
    assert_eq!(r.code, code::INVALID_PARAMETER, "4160 set bits are refused: {r:?}");
    assert_eq!(inflight(&broker), 1, "nothing acknowledged");
}

#[tokio::test]
async fn given_a_pop_only_group_that_popped_when_released_as_idle_should_leave_no_series_in_the_metrics(
) {
    // review-e77444b L6: a group released as idle kept its per-group counters, so every
    // throwaway group stayed in the metrics (and used up the per-topic room for groups).
    let (broker, mut conn) = pop_broker(|c| {
        c.core.group_idle_secs = 1;
        c.core.metrics_listen = Some("127.0.0.1:0".parse().expect("an address"));
    })
    .await;
    let metrics = broker.metrics_addr().expect("the endpoint is bound");
    send_n(&mut conn, 1, 1).await;
    let got = popped(&conn.call(pop_as("passing_group", &Pop::default())).await);
    assert_eq!(got.len(), 1);
    let mut ack = ack_request(&got[0]);
    ack.ext_fields.insert("consumerGroup", "passing_group");
    let r = conn.call(ack).await;
    assert_eq!(r.code, code::SUCCESS, "acknowledged: {r:?}");
    let (_, text) = super::metrics::http_get(metrics, "/metrics").await;
    let series = |text: &str| text.lines().filter(|l| l.contains("\"passing_group\"")).count();
    assert!(series(&text) > 0, "the group's series while it is there:\n{text}");
    let gone = common::wait::poll(PATIENCE, Duration::from_millis(200), || async {
        series(&super::metrics::http_get(metrics, "/metrics").await.1) == 0
    })
    .await;
    assert!(gone.is_ok(), "released after group-idle-secs: no series of it left");
}
