//! Transactional messages over raw frames (issue 12): half messages stay invisible until a
//! one-way END_TRANSACTION (37) commits them, rollbacks discard them, refusals are counted, and
//! undecided ones are checked with CHECK_TRANSACTION_STATE (39) on a producer connection.
//! Frames carry what the Java client writes: TRAN_MSG/PGROUP properties and sys flag 4 on the
//! send, the one-way flag and `EndTransactionRequestHeader`'s fields on END_TRANSACTION.

use baiji::broker::TransactionStats;
use baiji::remoting::message::DecodedMessage;
use baiji::remoting::msgid::decode_offset_msg_id;

use super::*;

const TOPIC: &str = "TxTopic";
const GROUP: &str = "tx_producer_group";

/// A SEND_MESSAGE_V2 of a half message, as a Java `TransactionMQProducer` sends it.
fn half_send(queue: i32, body: &str, uniq: &str) -> RemotingCommand {
    half_send_with(queue, body, uniq, "")
}

/// [`half_send`] with `extra` (whole `key\u{1}value\u{2}` pairs) before the last property.
fn half_send_with(queue: i32, body: &str, uniq: &str, extra: &str) -> RemotingCommand {
    let props = format!(
        "TAGS\u{1}TagT\u{2}KEYS\u{1}k-{uniq}\u{2}TRAN_MSG\u{1}true\u{2}PGROUP\u{1}{GROUP}\u{2}UNIQ_KEY\u{1}{uniq}\u{2}{extra}WAIT\u{1}true"
    );
    let mut ext = ExtFields::new();
    for (k, v) in [
        ("a", GROUP),
        ("b", TOPIC),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", &queue.to_string()),
        ("f", "4"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", &props),
        ("j", "0"),
        ("k", "false"),
        ("m", "false"),
        ("bname", "baiji-a"),
    ] {
        ext.insert(k, v);
    }
    request(rc::SEND_MESSAGE_V2, ext).with_body(body.as_bytes().to_vec())
}

/// What a send answered that END_TRANSACTION echoes.
#[derive(Debug, Clone)]
struct HalfSent {
    queue_offset: i64,
    commit_log_offset: i64,
    msg_id: String,
}

async fn send_half(conn: &mut Conn, queue: i32, body: &str, uniq: &str) -> HalfSent {
    send_half_with(conn, queue, body, uniq, "").await
}

/// [`send_half`] with extra properties (see [`half_send_with`]).
async fn send_half_with(
    conn: &mut Conn,
    queue: i32,
    body: &str,
    uniq: &str,
    extra: &str,
) -> HalfSent {
    let r = conn.call(half_send_with(queue, body, uniq, extra)).await;
    assert_eq!(r.code, code::SUCCESS, "a half message is stored: {r:?}");
    assert_eq!(
        r.ext_fields.get("transactionId"),
        Some(uniq),
        "the answer's transactionId is the UNIQ_KEY: {r:?}"
    );
    assert_eq!(
        r.ext_fields.get("queueId"),
        Some(queue.to_string().as_str()),
        "the answer names the real queue: {r:?}"
    );
    let queue_offset: i64 =
        r.ext_fields.get("queueOffset").and_then(|o| o.parse().ok()).expect("a queueOffset");
    let id = decode_offset_msg_id(r.ext_fields.get("msgId").expect("an offset msgId"))
        .expect("the msgId decodes as an offset msgId");
    HalfSent { queue_offset, commit_log_offset: id.commit_log_offset, msg_id: uniq.to_string() }
}

/// A one-way END_TRANSACTION as the Java producer sends it after its local transaction.
fn end_transaction(sent: &HalfSent, group: &str, state: i32, from_check: bool) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", TOPIC);
    ext.insert("producerGroup", group);
    ext.insert_i64("tranStateTableOffset", sent.queue_offset);
    ext.insert_i64("commitLogOffset", sent.commit_log_offset);
    ext.insert_i64("commitOrRollback", i64::from(state));
    ext.insert_bool("fromTransactionCheck", from_check);
    ext.insert("msgId", &sent.msg_id);
    ext.insert("transactionId", &sent.msg_id);
    ext.insert("bname", "baiji-a");
    RemotingCommand::oneway_request(rc::END_TRANSACTION, 0).with_ext_fields(ext)
}

const COMMIT: i32 = 8;
const ROLLBACK: i32 = 12;
const UNKNOWN: i32 = 0;

/// Writes a one-way request (no answer comes).
async fn oneway(conn: &mut Conn, mut cmd: RemotingCommand) {
    cmd.opaque = conn.opaque();
    conn.write(&cmd).await;
}

/// Waits until the broker's transaction figures satisfy `ok`.
async fn wait_stats(
    broker: &RunningBroker,
    what: &str,
    ok: impl Fn(&TransactionStats) -> bool,
) -> TransactionStats {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let s = broker.transaction_stats();
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every message of `queue` of the real topic from offset 0.
async fn pull_all(conn: &mut Conn, queue: i32) -> Vec<DecodedMessage> {
    let r = conn
        .call(pull_request("tx_consumer", TOPIC, queue, 0, 0, pull_sys_flag::SUBSCRIPTION))
        .await;
    if r.code == code::SUCCESS {
        decode_records(&r.body).expect("a valid pull body")
    } else {
        Vec::new()
    }
}

fn prop<'a>(m: &'a DecodedMessage, key: &str) -> Option<&'a str> {
    baiji::remoting::properties::find(&m.properties, key)
}

async fn tx_broker(tweak: impl FnOnce(&mut BrokerConfig)) -> (RunningBroker, Conn) {
    let broker = start_broker(tweak).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request(TOPIC, 4)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    (broker, conn)
}

#[tokio::test]
async fn given_a_half_message_when_committed_should_deliver_it_once_as_an_ordinary_message() {
    let (broker, mut conn) = tx_broker(|_| {}).await;
    let sent = send_half(&mut conn, 2, "pay 10", "7F0000010001000000000000000000A1").await;
    assert!(pull_all(&mut conn, 2).await.is_empty(), "a half message is invisible to consumers");
    let half = conn
        .call(pull_request(
            "tx_consumer",
            "RMQ_SYS_TRANS_HALF_TOPIC",
            0,
            0,
            0,
            pull_sys_flag::SUBSCRIPTION,
        ))
        .await;
    assert_ne!(half.code, code::SUCCESS, "the half topic cannot be pulled: {half:?}");
    let s = broker.transaction_stats();
    assert_eq!(s.half_messages, 1, "one half message waits: {s:?}");

    oneway(&mut conn, end_transaction(&sent, GROUP, COMMIT, false)).await;
    wait_stats(&broker, "the commit is applied", |s| s.committed == 1).await;
    let msgs = pull_all(&mut conn, 2).await;
    assert_eq!(msgs.len(), 1, "the committed message is delivered once: {msgs:?}");
    let m = &msgs[0];
    assert_eq!((m.topic.as_str(), m.queue_id), (TOPIC, 2), "on its real topic and queue");
    assert_eq!(&m.body[..], b"pay 10", "with its body");
    assert_eq!(m.sys_flag & 0xC, COMMIT, "its sys flag says COMMIT: {:#x}", m.sys_flag);
    assert_eq!(prop(m, "UNIQ_KEY"), Some(sent.msg_id.as_str()), "its msgId is kept");
    assert_eq!(prop(m, "__transactionId__"), Some(sent.msg_id.as_str()), "as its transactionId");
    assert_eq!(prop(m, "PGROUP"), Some(GROUP), "PGROUP is kept");
    assert_eq!(prop(m, "TAGS"), Some("TagT"), "its tag is kept");
    for gone in ["TRAN_MSG", "REAL_TOPIC", "REAL_QID"] {
        assert_eq!(prop(m, gone), None, "{gone} is cleared on commit");
    }

    // The same decision again (a duplicate, or a check answer racing the first one).
    oneway(&mut conn, end_transaction(&sent, GROUP, COMMIT, true)).await;
    let s = wait_stats(&broker, "a second commit is refused", |s| s.end_refused == 1).await;
    assert_eq!((s.committed, s.half_messages), (1, 0), "released exactly once: {s:?}");
    assert_eq!(pull_all(&mut conn, 2).await.len(), 1, "still exactly one delivery");
    assert_eq!(
        broker.store().committed("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0),
        Some(1),
        "the decided half message no longer holds memory"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_half_message_when_rolled_back_should_discard_it() {
    let (broker, mut conn) = tx_broker(|_| {}).await;
    let sent = send_half(&mut conn, 1, "cancel me", "7F0000010001000000000000000000B1").await;
    oneway(&mut conn, end_transaction(&sent, GROUP, ROLLBACK, false)).await;
    let s = wait_stats(&broker, "the rollback is applied", |s| s.rolled_back == 1).await;
    assert_eq!(s.half_messages, 0, "nothing waits any more: {s:?}");
    assert!(pull_all(&mut conn, 1).await.is_empty(), "a rolled-back message is never delivered");
    oneway(&mut conn, end_transaction(&sent, GROUP, COMMIT, false)).await;
    let s =
        wait_stats(&broker, "a commit after the rollback is refused", |s| s.end_refused == 1).await;
    assert_eq!(s.committed, 0, "{s:?}");
    assert!(pull_all(&mut conn, 1).await.is_empty(), "still nothing delivered");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_end_transactions_that_fail_validation_should_count_them_and_keep_the_message_half() {
    let (broker, mut conn) = tx_broker(|_| {}).await;
    let sent = send_half(&mut conn, 0, "x", "7F0000010001000000000000000000C1").await;
    oneway(&mut conn, end_transaction(&sent, "another_group", COMMIT, false)).await;
    wait_stats(&broker, "a wrong producer group is refused", |s| s.end_refused == 1).await;
    let wrong_offset = HalfSent { queue_offset: sent.queue_offset + 1, ..sent.clone() };
    oneway(&mut conn, end_transaction(&wrong_offset, GROUP, COMMIT, false)).await;
    wait_stats(&broker, "a wrong state-table offset is refused", |s| s.end_refused == 2).await;
    let nowhere = HalfSent { commit_log_offset: 12_345, ..sent.clone() };
    oneway(&mut conn, end_transaction(&nowhere, GROUP, COMMIT, false)).await;
    wait_stats(&broker, "an unknown commit-log offset is refused", |s| s.end_refused == 3).await;
    let mut no_group = end_transaction(&sent, GROUP, COMMIT, false);
    no_group.ext_fields.remove("producerGroup");
    oneway(&mut conn, no_group).await;
    wait_stats(&broker, "a header without producerGroup is refused", |s| s.end_refused == 4).await;
    // An unknown state is only logged; the connection is still served and nothing was decided.
    oneway(&mut conn, end_transaction(&sent, GROUP, UNKNOWN, false)).await;
    assert_still_served(&mut conn, TOPIC).await;
    let s = broker.transaction_stats();
    assert_eq!((s.half_messages, s.committed, s.end_refused), (1, 0, 4), "still half: {s:?}");
    assert!(pull_all(&mut conn, 0).await.is_empty(), "nothing delivered");
    // A request that asks for an answer (Go never sets the one-way flag) gets RocketMQ's.
    let mut answered = end_transaction(&sent, "another_group", COMMIT, false);
    answered.flag = 0;
    let r = conn.call(answered).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "a wrong group is a SYSTEM_ERROR: {r:?}");
    assert_eq!(r.remark.as_deref(), Some("The producer group wrong"), "RocketMQ's remark");
    let mut answered = end_transaction(&sent, GROUP, COMMIT, false);
    answered.flag = 0;
    let r = conn.call(answered).await;
    assert_eq!(r.code, code::SUCCESS, "the right decision is applied: {r:?}");
    assert_eq!(pull_all(&mut conn, 0).await.len(), 1, "and delivered");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_half_message_without_pgroup_should_refuse_it() {
    let (broker, mut conn) = tx_broker(|_| {}).await;
    let mut no_group = half_send(0, "x", "7F0000010001000000000000000000D1");
    let props = "TRAN_MSG\u{1}true\u{2}UNIQ_KEY\u{1}7F0000010001000000000000000000D1\u{2}";
    no_group.ext_fields.insert("i", props);
    let r = conn.call(no_group).await;
    assert_eq!(r.code, code::MESSAGE_ILLEGAL, "a half message needs PGROUP: {r:?}");
    let s = broker.transaction_stats();
    assert_eq!(s.half_messages, 0, "nothing stored: {s:?}");
    broker.shutdown().await;
}

/// A heartbeat that makes this connection a producer of [`GROUP`].
fn producer_heartbeat(client_id: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"clientID":"{client_id}","producerDataSet":[{{"groupName":"{GROUP}"}},{{"groupName":"CLIENT_INNER_PRODUCER"}}],"consumerDataSet":[],"heartbeatFingerprint":0,"withoutSub":false}}"#
    );
    request(rc::HEART_BEAT, ExtFields::new()).with_body(body.into_bytes())
}

/// The next CHECK_TRANSACTION_STATE the broker sends on `conn`.
async fn next_check(conn: &mut Conn) -> RemotingCommand {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (_, cmd) = conn.read_frame(left).await.expect("the broker checks the transaction");
        if !cmd.is_response() && cmd.code == rc::CHECK_TRANSACTION_STATE {
            return cmd;
        }
    }
}

fn fast_checks(c: &mut BrokerConfig) {
    c.core.transaction_time_out = 200;
    c.core.transaction_check_interval = 100;
}

#[tokio::test]
async fn given_an_undecided_half_message_should_check_its_producer_with_the_message_and_commit_on_its_answer(
) {
    let (broker, mut conn) = tx_broker(fast_checks).await;
    let r = conn.call(producer_heartbeat("127.0.0.1@tx")).await;
    assert_eq!(r.code, code::SUCCESS, "the producer heartbeat is accepted: {r:?}");
    let uniq = "7F0000010001000000000000000000E1";
    let sent = send_half(&mut conn, 3, "check me", uniq).await;
    oneway(&mut conn, end_transaction(&sent, GROUP, UNKNOWN, false)).await;

    let check = next_check(&mut conn).await;
    assert!(check.is_oneway(), "CHECK_TRANSACTION_STATE is one-way: {check:?}");
    let ext = |k: &str| check.ext_fields.get(k).map(str::to_owned);
    assert_eq!(ext("topic").as_deref(), Some("RMQ_SYS_TRANS_HALF_TOPIC"), "the half topic");
    assert_eq!(ext("tranStateTableOffset"), Some(sent.queue_offset.to_string()));
    assert_eq!(ext("commitLogOffset"), Some(sent.commit_log_offset.to_string()));
    assert_eq!(ext("msgId").as_deref(), Some(uniq), "msgId is the UNIQ_KEY");
    assert_eq!(ext("transactionId").as_deref(), Some(uniq), "so is transactionId");
    assert_eq!(ext("bname").as_deref(), Some("baiji-a"), "the broker names itself");
    let offset_id = decode_offset_msg_id(&ext("offsetMsgId").expect("an offsetMsgId"))
        .expect("offsetMsgId decodes");
    assert_eq!(offset_id.commit_log_offset, sent.commit_log_offset, "and names the half message");
    let body = decode_records(&check.body).expect("the body is a stored message");
    assert_eq!(body.len(), 1, "one message");
    let m = &body[0];
    assert_eq!((m.topic.as_str(), m.queue_id), (TOPIC, 3), "real topic and queue restored");
    assert_eq!(m.queue_offset, sent.queue_offset, "at the half message's offset");
    assert_eq!(m.physical_offset, sent.commit_log_offset, "and commit-log offset");
    assert_eq!(&m.body[..], b"check me");
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq));
    assert_eq!(prop(m, "PGROUP"), Some(GROUP), "the producer finds itself by PGROUP");
    assert_eq!(prop(m, "TRANSACTION_CHECK_TIMES"), Some("1"), "the first check");
    assert!(pull_all(&mut conn, 3).await.is_empty(), "still invisible while checked");

    // The producer answers as rocketmq-client does: the check header echoed.
    let echoed = HalfSent {
        queue_offset: ext("tranStateTableOffset").and_then(|o| o.parse().ok()).expect("offset"),
        commit_log_offset: ext("commitLogOffset").and_then(|o| o.parse().ok()).expect("offset"),
        msg_id: uniq.to_string(),
    };
    let mut answer = end_transaction(&echoed, GROUP, COMMIT, true);
    answer.ext_fields.insert("topic", "RMQ_SYS_TRANS_HALF_TOPIC");
    oneway(&mut conn, answer).await;
    wait_stats(&broker, "the check's answer commits", |s| s.committed == 1).await;
    let msgs = pull_all(&mut conn, 3).await;
    assert_eq!(msgs.len(), 1, "delivered once: {msgs:?}");
    assert_eq!(prop(&msgs[0], "TRAN_MSG"), None, "as an ordinary message");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_producer_that_never_decides_should_move_the_message_after_the_maximum_checks() {
    let (broker, mut conn) = tx_broker(|c| {
        fast_checks(c);
        c.core.transaction_check_max = 2;
    })
    .await;
    let r = conn.call(producer_heartbeat("127.0.0.1@tx")).await;
    assert_eq!(r.code, code::SUCCESS, "the producer heartbeat is accepted: {r:?}");
    send_half(&mut conn, 0, "never decided", "7F0000010001000000000000000000F1").await;
    for n in 1..=2 {
        let check = next_check(&mut conn).await;
        let m = &decode_records(&check.body).expect("a stored message")[0];
        assert_eq!(prop(m, "TRANSACTION_CHECK_TIMES"), Some(n.to_string().as_str()), "check {n}");
    }
    let s = wait_stats(&broker, "the message moves", |s| s.moved_to_check_max == 1).await;
    assert_eq!((s.half_messages, s.checks_sent), (0, 2), "checked twice, then moved: {s:?}");
    let moved = broker.store().topic("TRANS_CHECK_MAX_TIME_TOPIC").expect("the topic exists");
    assert_eq!(moved.offsets(0).expect("queue 0"), (0, 1), "it holds the message");
    assert!(pull_all(&mut conn, 0).await.is_empty(), "never delivered");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_no_producer_connected_when_checking_should_count_the_checks_and_move_the_message_after_the_maximum(
) {
    // Review H2: RocketMQ counts a check (needDiscard) before it looks for a producer, so a
    // half message whose group never heartbeats is moved after transactionCheckMax checks
    // instead of being held for ever.
    let (broker, mut conn) = tx_broker(|c| {
        fast_checks(c);
        c.core.transaction_check_max = 2;
    })
    .await;
    send_half(&mut conn, 0, "orphan", "7F0000010001000000000000000000A2").await;
    let s = wait_stats(&broker, "the orphan moves", |s| s.moved_to_check_max == 1).await;
    assert_eq!((s.half_messages, s.checks_sent), (0, 0), "moved without any check sent: {s:?}");
    let moved = broker.store().topic("TRANS_CHECK_MAX_TIME_TOPIC").expect("the topic exists");
    assert_eq!(moved.offsets(0).expect("queue 0"), (0, 1), "it holds the message");
    // A topic of the table, as RocketMQ's createTopicOfTranCheckMaxTime makes it: a consumer
    // (or mqadmin) reads what was given up on.
    let r = conn
        .call(pull_request(
            "tx_audit",
            "TRANS_CHECK_MAX_TIME_TOPIC",
            0,
            0,
            0,
            pull_sys_flag::SUBSCRIPTION,
        ))
        .await;
    assert_eq!(r.code, code::SUCCESS, "TRANS_CHECK_MAX_TIME_TOPIC is readable: {r:?}");
    let given_up = decode_records(&r.body).expect("a valid pull body");
    assert_eq!(given_up.len(), 1);
    assert_eq!(&given_up[0].body[..], b"orphan");
    assert_eq!(
        half_released(&broker),
        broker
            .store()
            .topic("RMQ_SYS_TRANS_HALF_TOPIC")
            .and_then(|t| t.offsets(0).ok())
            .map_or(0, |o| o.1),
        "the half queue holds nothing any more"
    );
    assert!(pull_all(&mut conn, 0).await.is_empty(), "never delivered");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_long_check_interval_when_a_producer_of_the_group_connects_should_check_it_at_once()
{
    // One pass a minute: only the producer's arrival can bring the check within PATIENCE.
    let (broker, mut conn) = tx_broker(|c| {
        c.core.transaction_time_out = 200;
        c.core.transaction_check_interval = 60_000;
    })
    .await;
    let uniq = "7F0000010001000000000000000000A5";
    send_half(&mut conn, 0, "waiting for its producer", uniq).await;
    tokio::time::sleep(Duration::from_millis(400)).await; // past its 200 ms immunity
    let mut producer = Conn::open(broker_addr(&broker)).await;
    let r = producer.call(producer_heartbeat("127.0.0.1@returning")).await;
    assert_eq!(r.code, code::SUCCESS, "the producer heartbeat is accepted: {r:?}");
    let check = next_check(&mut producer).await;
    let m = &decode_records(&check.body).expect("a stored message")[0];
    assert_eq!(prop(m, "UNIQ_KEY"), Some(uniq), "the waiting message is checked");
    assert_eq!(broker.transaction_stats().checks_sent, 1, "once");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_an_undecided_half_message_when_later_ones_are_decided_should_release_them_and_keep_its_ids(
) {
    let (broker, mut conn) = tx_broker(|c| {
        fast_checks(c);
        // Counted without a producer (review H2): enough checks not to move it meanwhile.
        c.core.transaction_check_max = 10_000;
    })
    .await;
    // Nobody will ever be asked about the first one (no producer is connected).
    let stuck = send_half(&mut conn, 0, "undecided", "7F0000010001000000000000000000A3").await;
    let decided = send_half(&mut conn, 1, "decided", "7F0000010001000000000000000000A4").await;
    oneway(&mut conn, end_transaction(&decided, GROUP, ROLLBACK, false)).await;
    wait_stats(&broker, "the second one is rolled back", |s| s.rolled_back == 1).await;
    let released = || {
        broker.store().committed("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0).unwrap_or(0)
    };
    let deadline = Instant::now() + PATIENCE;
    while released() <= 1 {
        assert!(
            Instant::now() < deadline,
            "a decided half message is released even behind an undecided one (released up to {})",
            released()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The undecided one keeps the ids its producer was given.
    let s = broker.transaction_stats();
    assert_eq!(s.half_messages, 1, "the first one is still undecided: {s:?}");
    oneway(&mut conn, end_transaction(&stuck, GROUP, COMMIT, false)).await;
    wait_stats(&broker, "it is committed by its original ids", |s| s.committed == 1).await;
    let msgs = pull_all(&mut conn, 0).await;
    assert_eq!(msgs.len(), 1, "and delivered once: {msgs:?}");
    assert_eq!(&msgs[0].body[..], b"undecided");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_message_past_its_own_check_immunity_should_refuse_a_producer_decision_but_take_a_check_answer(
) {
    let (broker, mut conn) = tx_broker(|c| c.core.transaction_time_out = 100).await;
    let uniq = "7F0000010001000000000000000000A5";
    let mut send = half_send(2, "immune", uniq);
    let props = format!(
        "CHECK_IMMUNITY_TIME_IN_SECONDS\u{1}1\u{2}{}",
        send.ext_fields.get("i").expect("properties")
    );
    send.ext_fields.insert("i", &props);
    let r = conn.call(send).await;
    assert_eq!(r.code, code::SUCCESS, "a half message is stored: {r:?}");
    let sent = HalfSent {
        queue_offset: r.ext_fields.get("queueOffset").and_then(|o| o.parse().ok()).expect("offset"),
        commit_log_offset: decode_offset_msg_id(r.ext_fields.get("msgId").expect("msgId"))
            .expect("an offset msgId")
            .commit_log_offset,
        msg_id: uniq.to_string(),
    };
    // Past its 1 s immunity (the broker's check interval, 30 s, does not come by).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut late = end_transaction(&sent, GROUP, COMMIT, false);
    late.flag = 0;
    let r = conn.call(late).await;
    assert_eq!(r.code, 604, "the producer's late decision is ILLEGAL_OPERATION: {r:?}");
    let s = broker.transaction_stats();
    assert_eq!((s.half_messages, s.end_refused), (1, 1), "it stays half, refusal counted: {s:?}");
    oneway(&mut conn, end_transaction(&sent, GROUP, COMMIT, true)).await;
    wait_stats(&broker, "a check's answer decides it", |s| s.committed == 1).await;
    assert_eq!(pull_all(&mut conn, 2).await.len(), 1, "delivered once");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_small_memory_budget_when_half_messages_fill_it_should_refuse_more_until_they_are_decided(
) {
    let (broker, mut conn) = tx_broker(|c| c.core.memory_budget = 256 * 1024).await;
    let body = "h".repeat(8 * 1024);
    let mut stored = Vec::new();
    let refused = loop {
        assert!(stored.len() < 64, "a 256 KiB budget cannot hold 64 half messages of 8 KiB");
        let uniq = format!("7F00000100010000000000000000{:04X}", stored.len());
        let r = conn.call(half_send(0, &body, &uniq)).await;
        if r.code != code::SUCCESS {
            break r;
        }
        let sent = HalfSent {
            queue_offset: r.ext_fields.get("queueOffset").and_then(|o| o.parse().ok()).expect("o"),
            commit_log_offset: decode_offset_msg_id(r.ext_fields.get("msgId").expect("msgId"))
                .expect("an offset msgId")
                .commit_log_offset,
            msg_id: uniq,
        };
        stored.push(sent);
    };
    assert_eq!(
        refused.code,
        code::SYSTEM_BUSY,
        "half messages count against the budget: {refused:?}"
    );
    assert!(!stored.is_empty(), "some half messages fit");
    let s = broker.transaction_stats();
    assert_eq!(s.half_messages, stored.len() as u64, "every stored one waits: {s:?}");
    for sent in &stored {
        oneway(&mut conn, end_transaction(sent, GROUP, ROLLBACK, false)).await;
    }
    let n = stored.len() as u64;
    wait_stats(&broker, "every one is rolled back", |s| s.rolled_back == n).await;
    // Decided half messages are released: the memory comes back and sends are taken again.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = conn.call(half_send(0, &body, "7F0000010001000000000000000000FF")).await;
        if r.code == code::SUCCESS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rolled-back half messages give their memory back: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_concurrent_first_half_messages_when_unheld_messages_expire_at_once_should_keep_every_one(
) {
    for round in 0..3 {
        // Messages no group holds are reclaimed at once: a half message stored before the
        // internal group holds the half topic would be gone.
        let broker = start_broker(|c| c.core.retention_secs = 0).await;
        let mut admin = Conn::open(broker_addr(&broker)).await;
        let r = admin.call(create_topic_request(TOPIC, 4)).await;
        assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
        let mut senders = Vec::new();
        for i in 0..8 {
            let addr = broker_addr(&broker);
            senders.push(tokio::spawn(async move {
                let mut conn = Conn::open(addr).await;
                let uniq = format!("7F000001000100000000000000{round:02X}{i:04X}");
                send_half(&mut conn, 0, "first", &uniq).await
            }));
        }
        let mut sent = Vec::new();
        for t in senders {
            sent.push(t.await.expect("a sender task"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        for s in &sent {
            oneway(&mut admin, end_transaction(s, GROUP, COMMIT, false)).await;
        }
        let s = wait_stats(&broker, "every commit is applied or refused", |s| {
            s.committed + s.end_refused == 8
        })
        .await;
        assert_eq!(s.committed, 8, "round {round}: every half message was kept: {s:?}");
        broker.shutdown().await;
    }
}

#[tokio::test]
async fn given_a_committed_half_message_with_a_timer_should_deliver_it_when_due_not_at_commit() {
    // RocketMQ 5 applies timers (and delay levels) to the committed copy, not the half message
    // (`HookUtils.handleScheduleMessage` takes transaction types NOT and COMMIT).
    let (broker, mut conn) = tx_broker(|_| {}).await;
    let sent = send_half_with(
        &mut conn,
        3,
        "later",
        "7F0000010001000000000000000000E1",
        "TIMER_DELAY_SEC\u{1}5\u{2}",
    )
    .await;
    assert_eq!(broker.timers_waiting(), 0, "a half message is not a timer yet");
    oneway(&mut conn, end_transaction(&sent, GROUP, COMMIT, false)).await;
    wait_stats(&broker, "the commit is applied", |s| s.committed == 1).await;
    assert_eq!(broker.timers_waiting(), 1, "the committed copy waits for its time");
    let deadline = Instant::now() + PATIENCE;
    let msgs = loop {
        let msgs = pull_all(&mut conn, 3).await;
        if !msgs.is_empty() || Instant::now() > deadline {
            break msgs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(msgs.len(), 1, "delivered once when due: {msgs:?}");
    assert_eq!(&msgs[0].body[..], b"later");
    assert_eq!(prop(&msgs[0], "UNIQ_KEY"), Some(sent.msg_id.as_str()), "its msgId is kept");
    broker.shutdown().await;
}

/// The offset up to which the internal group released the half queue.
fn half_released(broker: &RunningBroker) -> u64 {
    broker.store().committed("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0).unwrap_or(0)
}

#[tokio::test]
async fn given_a_half_message_with_a_long_check_immunity_should_not_hold_later_decided_ones() {
    // Review H1: a message inside its own CHECK_IMMUNITY_TIME_IN_SECONDS is moved to the end
    // of the half queue (RocketMQ's putImmunityMsgBackToHalfQueue), so it never pins the
    // decided messages behind it for a day.
    let (broker, mut conn) = tx_broker(fast_checks).await;
    let immune = send_half_with(
        &mut conn,
        0,
        "for tomorrow",
        "7F0000010001000000000000000000B7",
        "CHECK_IMMUNITY_TIME_IN_SECONDS\u{1}86400\u{2}",
    )
    .await;
    let decided = send_half(&mut conn, 1, "decided", "7F0000010001000000000000000000B8").await;
    oneway(&mut conn, end_transaction(&decided, GROUP, ROLLBACK, false)).await;
    wait_stats(&broker, "the second one is rolled back", |s| s.rolled_back == 1).await;
    let deadline = Instant::now() + PATIENCE;
    while half_released(&broker) < 2 {
        assert!(
            Instant::now() < deadline,
            "an immune half message holds the decided one behind it (released up to {})",
            half_released(&broker)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = broker.transaction_stats();
    assert_eq!((s.half_messages, s.checks_sent), (1, 0), "immune: waiting, never checked: {s:?}");
    // Still inside its immunity, its producer decides it by the ids it was given.
    oneway(&mut conn, end_transaction(&immune, GROUP, COMMIT, false)).await;
    wait_stats(&broker, "it is committed by its original ids", |s| s.committed == 1).await;
    let msgs = pull_all(&mut conn, 0).await;
    assert_eq!(msgs.len(), 1, "and delivered once: {msgs:?}");
    assert_eq!(&msgs[0].body[..], b"for tomorrow");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_an_internal_group_when_an_admin_deletes_it_should_refuse_and_keep_its_messages() {
    // Review H6: CID_RMQ_SYS_* groups hold the half, delay and timer queues; deleting one
    // with cleanOffset released every waiting message. RocketMQ refuses system groups.
    let (broker, mut conn) = tx_broker(|_| {}).await;
    let sent = send_half(&mut conn, 2, "kept", "7F0000010001000000000000000000B9").await;
    for group in ["CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_SCHEDULE", "CID_RMQ_SYS_WHEEL_TIMER"] {
        for clean in [true, false] {
            let mut ext = ExtFields::new();
            ext.insert("groupName", group);
            ext.insert_bool("cleanOffset", clean);
            let r = conn.call(request(rc::DELETE_SUBSCRIPTIONGROUP, ext)).await;
            assert_eq!(r.code, code::SYSTEM_ERROR, "{group} (clean {clean}) is refused: {r:?}");
            let remark = r.remark.unwrap_or_default();
            assert!(remark.contains(group) && remark.contains("system group"), "{remark}");
            let body =
                format!(r#"{{"groupNameList":["a_group","{group}"],"cleanOffset":{clean}}}"#);
            let list = request(rc::DELETE_SUBSCRIPTIONGROUP_LIST, ExtFields::new())
                .with_body(body.into_bytes());
            let r = conn.call(list).await;
            assert_eq!(r.code, code::SYSTEM_ERROR, "a list naming {group} is refused: {r:?}");
        }
    }
    oneway(&mut conn, end_transaction(&sent, GROUP, COMMIT, false)).await;
    wait_stats(&broker, "the half message is still there to commit", |s| s.committed == 1).await;
    assert_eq!(pull_all(&mut conn, 2).await.len(), 1, "and delivered once");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_half_messages_filling_the_budget_when_one_is_committed_should_still_deliver_it() {
    // Review M1: half messages are held to the delivery reserve (1/16 of the budget), as
    // delays and timers are, since a commit appends its real copy before the half message is
    // released; without it the budget fills with halves and no commit can ever land.
    let (broker, mut conn) = tx_broker(|c| c.core.memory_budget = 256 * 1024).await;
    let body = "m".repeat(8 * 1024);
    let mut stored = Vec::new();
    loop {
        assert!(stored.len() < 64, "a 256 KiB budget cannot hold 64 half messages of 8 KiB");
        let uniq = format!("7F00000100010000000000000001{:04X}", stored.len());
        let r = conn.call(half_send(1, &body, &uniq)).await;
        if r.code != code::SUCCESS {
            assert_eq!(r.code, code::SYSTEM_BUSY, "the budget refuses: {r:?}");
            break;
        }
        stored.push(HalfSent {
            queue_offset: r.ext_fields.get("queueOffset").and_then(|o| o.parse().ok()).expect("o"),
            commit_log_offset: decode_offset_msg_id(r.ext_fields.get("msgId").expect("msgId"))
                .expect("an offset msgId")
                .commit_log_offset,
            msg_id: uniq,
        });
    }
    assert!(!stored.is_empty(), "some half messages fit");
    let mut commit = end_transaction(&stored[0], GROUP, COMMIT, false);
    commit.flag = 0;
    let r = conn.call(commit).await;
    assert_eq!(r.code, code::SUCCESS, "the commit finds room for its real copy: {r:?}");
    assert_eq!(pull_all(&mut conn, 1).await.len(), 1, "and is delivered");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_half_message_with_an_illegal_timer_when_committed_should_refuse_and_keep_it_half()
{
    // Review M8: RocketMQ refuses such a commit (WHEEL_TIMER_MSG_ILLEGAL, answered
    // MESSAGE_ILLEGAL) and keeps the half message; it was delivered at once.
    let (broker, mut conn) = tx_broker(|c| c.core.timer_max_delay_sec = 10).await;
    let sent = send_half_with(
        &mut conn,
        3,
        "too far",
        "7F0000010001000000000000000000BA",
        "TIMER_DELAY_SEC\u{1}11\u{2}",
    )
    .await;
    let mut commit = end_transaction(&sent, GROUP, COMMIT, false);
    commit.flag = 0;
    let r = conn.call(commit).await;
    assert_eq!(r.code, code::MESSAGE_ILLEGAL, "the commit is refused: {r:?}");
    assert!(
        r.remark.as_deref().is_some_and(|m| m.starts_with("timer message illegal")),
        "with RocketMQ's remark: {r:?}"
    );
    let s = broker.transaction_stats();
    assert_eq!((s.half_messages, s.committed, s.end_refused), (1, 0, 1), "still half: {s:?}");
    assert_eq!(broker.timers_waiting(), 0, "no timer waits");
    assert!(pull_all(&mut conn, 3).await.is_empty(), "nothing delivered");
    // The producer can still roll it back.
    oneway(&mut conn, end_transaction(&sent, GROUP, ROLLBACK, false)).await;
    wait_stats(&broker, "the rollback is applied", |s| s.rolled_back == 1).await;
    broker.shutdown().await;
}
