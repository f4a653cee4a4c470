//! Recall (RocketMQ 5.3.2's `RECALL_MESSAGE` 370) over raw frames, as the Java 5.3.2 client
//! writes them: the send answer of a timer message carries `recallHandle`
//! (`RecallMessageHandle.HandleV1`, base64url of `v1 topic brokerName timestamp msgId`), and
//! a recall with it (`producerGroup`, `topic`, `recallHandle`) takes the message back before
//! it is due. Refusals are `RecallMessageProcessor`'s codes and remarks.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE;
use base64::Engine as _;

use super::*;

const TOPIC: &str = "RecallTopic";

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis() as u64
}

/// A V2 send of `body` to queue 1 of `topic` with `UNIQ_KEY=<body>` and `pairs`.
fn send_with(topic: &str, body: &str, pairs: &[(&str, String)]) -> RemotingCommand {
    let mut props = format!("TAGS\u{1}TagR\u{2}UNIQ_KEY\u{1}{body}\u{2}");
    for (k, v) in pairs {
        props.push_str(&format!("{k}\u{1}{v}\u{2}"));
    }
    let mut req = send_v2_request(rc::SEND_MESSAGE_V2, topic, 1, body.as_bytes().to_vec());
    req.ext_fields.insert("i", props.as_str());
    req
}

/// A RECALL_MESSAGE as Java's `MQClientAPIImpl.recallMessage` sends it (with `bname`).
fn recall_request(topic: &str, handle: &str) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("producerGroup", "raw_producer");
    ext.insert("topic", topic);
    ext.insert("recallHandle", handle);
    ext.insert("bname", "baiji-a");
    request(rc::RECALL_MESSAGE, ext)
}

/// The items of a handle: version, topic, broker name, timestamp, message id.
fn items(handle: &str) -> Vec<String> {
    let raw = URL_SAFE.decode(handle).expect("a base64url handle");
    String::from_utf8(raw).expect("UTF-8").split(' ').map(str::to_owned).collect()
}

fn handle(items: &[&str]) -> String {
    URL_SAFE.encode(items.join(" "))
}

/// Sends a timer message due at `due` and returns its recall handle.
async fn send_timer(conn: &mut Conn, body: &str, due: u64) -> String {
    let r = conn.call(send_with(TOPIC, body, &[("TIMER_DELIVER_MS", due.to_string())])).await;
    assert_eq!(r.code, code::SUCCESS, "a timer message is accepted: {r:?}");
    r.ext_fields.get("recallHandle").expect("a timer message's answer has a handle").to_owned()
}

/// Every message of queue 1 of [`TOPIC`].
async fn bodies(conn: &mut Conn) -> Vec<String> {
    let r =
        conn.call(pull_request("recall_reader", TOPIC, 1, 0, 0, pull_sys_flag::SUBSCRIPTION)).await;
    if r.code != code::SUCCESS {
        return Vec::new();
    }
    let msgs = decode_records(&r.body).expect("a pull body decodes");
    msgs.iter().map(|m| String::from_utf8_lossy(&m.body).into_owned()).collect()
}

#[tokio::test]
async fn given_a_timer_message_when_recalled_before_due_should_never_deliver_it_while_the_next_one_arrives(
) {
    let (_broker, mut conn) = broker_with_topic(TOPIC).await;
    // Due in order: the recalled one first, so delivering the kept one (timers go out in due
    // order) means the recalled one's time has come and gone.
    let due = epoch_ms() + 4_000;
    let recalled = send_timer(&mut conn, "recalled", due).await;
    let kept = send_timer(&mut conn, "kept", due + 1).await;
    let it = items(&recalled);
    assert_eq!(it.len(), 5, "v1 topic brokerName timestamp msgId: {it:?}");
    assert_eq!((it[0].as_str(), it[1].as_str()), ("v1", TOPIC));
    assert_eq!(it[2], "baiji-a", "the broker's name");
    assert_eq!(it[3], (due + 1).to_string(), "the due time + 1, as SendMessageProcessor writes");
    assert_eq!(it[4], "recalled", "the message's UNIQ_KEY");

    let r = conn.call(recall_request(TOPIC, &recalled)).await;
    assert_eq!(r.code, code::SUCCESS, "recalled before due: {r:?}");
    assert_eq!(r.ext_fields.get("msgId"), Some("recalled"), "the answer names the message");
    assert_eq!(r.ext_fields.get("MSG_REGION"), Some("DefaultRegion"));
    // Again: RocketMQ cannot tell a recalled message from a waiting one, nor can its clients.
    let r = conn.call(recall_request(TOPIC, &recalled)).await;
    assert_eq!((r.code, r.ext_fields.get("msgId")), (code::SUCCESS, Some("recalled")), "{r:?}");

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = bodies(&mut conn).await;
    while got.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = bodies(&mut conn).await;
    }
    assert_eq!(got, ["kept"], "the kept message arrives, the recalled one never");

    // The kept one is delivered: its handle's time is past.
    let r = conn.call(recall_request(TOPIC, &kept)).await;
    assert_eq!(r.code, code::ILLEGAL_OPERATION, "{r:?}");
    assert_eq!(r.remark.as_deref(), Some("recall failed, timestamp invalid"));
    assert_eq!(bodies(&mut conn).await, ["kept"], "and it is delivered once");
}

#[tokio::test]
async fn given_bad_recalls_should_answer_rocketmqs_refusals_and_keep_the_message_waiting() {
    let (broker, mut conn) = broker_with_topic(TOPIC).await;
    let r = conn.call(create_topic_request("OtherTopic", 4)).await;
    assert_eq!(r.code, code::SUCCESS, "{r:?}");
    let due = epoch_ms() + 3_600_000;
    let good = send_timer(&mut conn, "waiting", due).await;
    let ts = (due + 1).to_string();
    let cases: [(&str, String, i32, &str); 7] = [
        (TOPIC, "not a handle!".into(), code::ILLEGAL_OPERATION, "recall handle is invalid"),
        (
            TOPIC,
            handle(&["v2", TOPIC, "baiji-a", &ts, "waiting"]),
            code::ILLEGAL_OPERATION,
            "recall handle is invalid",
        ),
        (
            TOPIC,
            handle(&["v1", TOPIC, "baiji-a", &ts]),
            code::ILLEGAL_OPERATION,
            "recall handle is invalid",
        ),
        ("OtherTopic", good.clone(), code::ILLEGAL_OPERATION, "recall failed, topic not match"),
        (
            TOPIC,
            handle(&["v1", TOPIC, "broker-b", &ts, "waiting"]),
            code::ILLEGAL_OPERATION,
            "recall failed, broker service not available",
        ),
        (
            TOPIC,
            handle(&["v1", TOPIC, "baiji-a", "1700000000000", "waiting"]),
            code::ILLEGAL_OPERATION,
            "recall failed, timestamp invalid",
        ),
        (
            "NoSuchTopic",
            good.clone(),
            code::TOPIC_NOT_EXIST,
            "recall failed, the topic[NoSuchTopic] not exist",
        ),
    ];
    for (topic, h, want, remark) in &cases {
        let r = conn.call(recall_request(topic, h)).await;
        assert_eq!((r.code, r.remark.as_deref()), (*want, Some(*remark)), "{topic} {h}: {r:?}");
    }
    // A well-formed handle of a message that never waited: RocketMQ's answer is success.
    let unknown = handle(&["v1", TOPIC, "baiji-a", &ts, "never-sent"]);
    let r = conn.call(recall_request(TOPIC, &unknown)).await;
    assert_eq!((r.code, r.ext_fields.get("msgId")), (code::SUCCESS, Some("never-sent")), "{r:?}");
    // Without its handle field: the header's required field is named.
    let mut no_handle = recall_request(TOPIC, "");
    no_handle.ext_fields.remove("recallHandle");
    let r = conn.call(no_handle).await;
    assert_eq!(r.code, code::SYSTEM_ERROR, "{r:?}");
    assert!(r.remark.as_deref().unwrap_or_default().contains("recallHandle"), "{r:?}");
    // None of these took the waiting message: its own handle still recalls it.
    assert_eq!(broker.timers_waiting(), 1, "still waiting");
    let r = conn.call(recall_request(TOPIC, &good)).await;
    assert_eq!((r.code, r.ext_fields.get("msgId")), (code::SUCCESS, Some("waiting")), "{r:?}");
    assert_eq!(broker.timers_waiting(), 0, "taken out of the timer index");
}

#[tokio::test]
async fn given_messages_that_are_no_timers_when_sent_should_answer_no_recall_handle() {
    let (_broker, mut conn) = broker_with_topic(TOPIC).await;
    let timer = send_timer(&mut conn, "timer", epoch_ms() + 3_600_000).await;
    assert!(!timer.is_empty(), "a timer message's answer has one");
    for (body, pairs) in [
        ("normal", vec![]),
        ("level", vec![("DELAY", "3".to_string())]),
        ("past", vec![("TIMER_DELIVER_MS", "1700000000000".to_string())]),
    ] {
        let r = conn.call(send_with(TOPIC, body, &pairs)).await;
        assert_eq!(r.code, code::SUCCESS, "{r:?}");
        // As RocketMQ: only a message waiting in the timer wheel can be recalled.
        assert_eq!(r.ext_fields.get("recallHandle"), None, "{body}: {r:?}");
    }
}
