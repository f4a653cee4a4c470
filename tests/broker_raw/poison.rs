//! No poison records (review §1.2): a message is refused when the properties the broker adds
//! (UNIQ_KEY, retry and delay properties, CLUSTER on delivery) would push it past the 32767-byte
//! limit, and a pull never stalls on a stored record it cannot write out.

use baiji::remoting::header::ConsumerSendMsgBackRequestHeader;
use baiji::remoting::message::DecodedMessage;
use bytes::{BufMut, Bytes};

use super::*;

/// Properties of exactly `len` bytes: `TAGS=TagA`, the given pairs, then one padding pair; the
/// last pair has no trailing separator, as Java 4.9.1–5.1.4 writes them.
fn properties_of_len(len: usize, pairs: &[(&str, &str)]) -> String {
    let mut p = String::from("TAGS\u{1}TagA");
    for (k, v) in pairs {
        p.push('\u{2}');
        p.push_str(k);
        p.push('\u{1}');
        p.push_str(v);
    }
    p.push_str("\u{2}PAD\u{1}");
    let pad = len.checked_sub(p.len()).expect("room for the padding");
    p.push_str(&"x".repeat(pad));
    assert_eq!(p.len(), len);
    p
}

fn send_with_properties(topic: &str, props: &str, body: &'static [u8]) -> RemotingCommand {
    let mut req = send_request(topic, 0, body);
    req.ext_fields.insert("properties", props);
    req
}

/// Pulls queue 0 of `topic` from `from`, following `nextBeginOffset`, until a message whose
/// body is `body` arrives (`Some`) or the patience runs out (`None`). Every answer must be one
/// a consumer can act on.
async fn pull_until_body(
    conn: &mut Conn,
    group: &str,
    topic: &str,
    from: i64,
    body: &[u8],
) -> Option<DecodedMessage> {
    let deadline = Instant::now() + PATIENCE;
    let mut offset = from;
    while Instant::now() < deadline {
        let r =
            conn.call(pull_request(group, topic, 0, offset, 0, pull_sys_flag::SUBSCRIPTION)).await;
        let next: i64 = r
            .ext_fields
            .get("nextBeginOffset")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("every pull answer carries nextBeginOffset: {r:?}"));
        if r.code == code::SUCCESS {
            let msgs = decode_records(&r.body).expect("a pull body decodes");
            if let Some(m) = msgs.into_iter().find(|m| &m.body[..] == body) {
                return Some(m);
            }
        } else if r.code == code::PULL_NOT_FOUND || next == offset {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        offset = next;
    }
    None
}

#[tokio::test]
async fn given_properties_only_the_broker_pushes_past_the_limit_when_sending_should_refuse_or_keep_the_queue_flowing(
) {
    let (broker, mut conn) = broker_with_topic("PoisonTopic").await;
    // 32767 - 41 bytes without UNIQ_KEY: the broker's 42-byte UNIQ_KEY makes 32768.
    let first = conn
        .call(send_with_properties("PoisonTopic", &properties_of_len(32_767 - 41, &[]), b"big"))
        .await;
    let next = conn.call(send_with_properties("PoisonTopic", "TAGS\u{1}TagA", b"normal")).await;
    assert_eq!(next.code, code::SUCCESS, "a normal send succeeds: {next:?}");
    let delivered = pull_until_body(&mut conn, "poison_group", "PoisonTopic", 0, b"normal").await;
    assert!(
        first.code == code::MESSAGE_ILLEGAL || delivered.is_some(),
        "a message the broker cannot deliver is refused with MESSAGE_ILLEGAL ({first:?}), or at \
         least the queue keeps flowing past it (the next message was {delivered:?})"
    );
    assert_eq!(first.code, code::MESSAGE_ILLEGAL, "the final properties are checked: {first:?}");
    assert!(delivered.is_some(), "the next message is delivered");
    assert_eq!(broker.records_skipped(), 0, "nothing the broker built needs skipping");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_delayed_message_whose_schedule_properties_exceed_the_limit_should_refuse_it_or_deliver_it(
) {
    let (broker, mut conn) = broker_with_topic("PoisonTopic").await;
    // Fits with CLUSTER (23 bytes); with REAL_TOPIC and REAL_QID (34 bytes) added on the way
    // through the schedule topic it is over 32767 bytes even without CLUSTER.
    let uniq = "7F00000100002A9F0000000000000001";
    let props = properties_of_len(32_742, &[("UNIQ_KEY", uniq), ("DELAY", "1")]);
    let first = conn.call(send_with_properties("PoisonTopic", &props, b"delayed")).await;
    let delivered = if first.code == code::SUCCESS {
        pull_until_body(&mut conn, "poison_group", "PoisonTopic", 0, b"delayed").await
    } else {
        None
    };
    assert!(
        first.code == code::MESSAGE_ILLEGAL || delivered.is_some(),
        "a delayed message the broker cannot deliver is refused with MESSAGE_ILLEGAL \
         ({first:?}), or it is delivered when due"
    );
    let next = conn.call(send_with_properties("PoisonTopic", "TAGS\u{1}TagA", b"normal")).await;
    assert_eq!(next.code, code::SUCCESS, "a normal send succeeds: {next:?}");
    assert!(
        pull_until_body(&mut conn, "poison_group", "PoisonTopic", 0, b"normal").await.is_some(),
        "the queue keeps flowing"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_message_whose_properties_grow_past_the_limit_on_send_back_should_refuse_it_or_deliver_the_retry(
) {
    let (broker, mut conn) = broker_with_topic("PoisonTopic").await;
    // Fits with CLUSTER, but not with RETRY_TOPIC, ORIGIN_MESSAGE_ID and the delay properties.
    let uniq = "7F00000100002A9F0000000000000002";
    let props = properties_of_len(32_700, &[("UNIQ_KEY", uniq)]);
    let sent = conn.call(send_with_properties("PoisonTopic", &props, b"consumed")).await;
    assert_eq!(sent.code, code::SUCCESS, "the original message fits: {sent:?}");
    let m = pull_until_body(&mut conn, "retry_group", "PoisonTopic", 0, b"consumed")
        .await
        .expect("the original message is delivered");
    let h = ConsumerSendMsgBackRequestHeader {
        offset: m.physical_offset,
        group: "retry_group",
        delay_level: 1,
        origin_msg_id: Some(uniq),
        origin_topic: Some("PoisonTopic"),
        unit_mode: false,
        max_reconsume_times: Some(16),
    };
    let back = conn.call(request(rc::CONSUMER_SEND_MSG_BACK, h.to_ext_fields())).await;
    let retried = if back.code == code::SUCCESS {
        pull_until_body(&mut conn, "retry_group", "%RETRY%retry_group", 0, b"consumed").await
    } else {
        None
    };
    assert!(
        back.code == code::MESSAGE_ILLEGAL || retried.is_some(),
        "a send-back whose retry could not be delivered is refused with MESSAGE_ILLEGAL \
         ({back:?}), or the retry is delivered"
    );
    broker.shutdown().await;
}

/// A stored record in the broker's layout (see `src/broker/core/record.rs`) with `props_len` bytes
/// of properties: more than 32767 cannot be written out in RocketMQ's layout.
fn raw_record(body: &[u8], props_len: u16) -> Bytes {
    let mut b = bytes::BytesMut::new();
    b.put_i32(0); // flag
    b.put_i32(0); // sys flag
    b.put_i64(1_700_000_000_000); // born timestamp
    b.put_i32(0); // reconsume times
    b.put_i32(0); // body CRC
    b.put_u8(4);
    b.put_slice(&[127, 0, 0, 1]);
    b.put_i32(4000);
    b.put_u32(u32::try_from(body.len()).expect("a short body"));
    b.put_slice(body);
    b.put_u16(props_len);
    b.put_bytes(b'p', usize::from(props_len));
    b.freeze()
}

#[tokio::test]
async fn given_stored_records_that_cannot_be_written_out_when_pulling_should_skip_and_count_them() {
    let (broker, mut conn) = broker_with_topic("PoisonTopic").await;
    let topic = broker.store().topic("PoisonTopic").expect("the topic exists");
    // Stored now: a store time of 1 ms after the epoch is past any retention, and the reaper
    // could take the records before the pull looks at them (seen once in 7 runs).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    topic.append(0, raw_record(b"too long", 40_000), 0, now).expect("stored");
    topic.append(0, Bytes::from_static(b"not a record"), 0, now).expect("stored");
    let sent = conn.call(send_with_properties("PoisonTopic", "TAGS\u{1}TagA", b"normal")).await;
    assert_eq!(sent.code, code::SUCCESS, "a normal send succeeds: {sent:?}");
    let delivered = pull_until_body(&mut conn, "poison_group", "PoisonTopic", 0, b"normal").await;
    assert!(delivered.is_some(), "a pull steps over records it cannot write out");
    assert_eq!(delivered.map(|m| m.queue_offset), Some(2), "the normal message is at offset 2");
    assert_eq!(broker.records_skipped(), 2, "each skipped record is counted");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_reconsume_count_near_i32_max_when_sent_back_should_answer_without_overflowing() {
    let (broker, mut conn) = broker_with_topic("PoisonTopic").await;
    let mut send = send_with_properties("PoisonTopic", "TAGS\u{1}TagA", b"again");
    send.ext_fields.insert_i64("reconsumeTimes", i64::from(i32::MAX - 1));
    let sent = conn.call(send).await;
    assert_eq!(sent.code, code::SUCCESS, "any reconsume count is stored: {sent:?}");
    let m = pull_until_body(&mut conn, "overflow_group", "PoisonTopic", 0, b"again")
        .await
        .expect("delivered");
    assert_eq!(m.reconsume_times, i32::MAX - 1);
    let h = ConsumerSendMsgBackRequestHeader {
        offset: m.physical_offset,
        group: "overflow_group",
        delay_level: 0,
        origin_msg_id: None,
        origin_topic: Some("PoisonTopic"),
        unit_mode: false,
        max_reconsume_times: Some(i32::MAX),
    };
    let back = conn.call(request(rc::CONSUMER_SEND_MSG_BACK, h.to_ext_fields())).await;
    assert_eq!(back.code, code::SUCCESS, "delay 3 + count saturates at the top level: {back:?}");
    assert_still_served(&mut conn, "PoisonTopic").await;
    broker.shutdown().await;
}
