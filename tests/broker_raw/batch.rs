//! Batches (review §1.4, batch row): the whole batch body is checked against
//! `max-message-size` as RocketMQ does, the entry count is capped so the msgId list of the
//! answer always fits a frame, and a stored batch always gets its answer.

use baiji::remoting::message::encode_batch_entry;
use bytes::BytesMut;

use super::*;

fn batch_of(entries: usize, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    for _ in 0..entries {
        encode_batch_entry(&mut b, 0, body, b"").expect("an encodable entry");
    }
    b
}

#[tokio::test]
async fn given_a_batch_whose_whole_body_exceeds_the_maximum_should_answer_message_illegal() {
    let broker = start_broker(|c| c.core.max_message_size = 4096).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("BatchTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    // 64 entries of 100 bytes: each small, together over 4096 bytes.
    let body = batch_of(64, &[b'x'; 100]).freeze();
    let r = conn.call(send_v2_request(rc::SEND_BATCH_MESSAGE, "BatchTopic", 0, body)).await;
    assert_eq!(r.code, code::MESSAGE_ILLEGAL, "the whole batch body is checked: {r:?}");
    let small = batch_of(4, &[b'x'; 100]).freeze();
    let r = conn.call(send_v2_request(rc::SEND_BATCH_MESSAGE, "BatchTopic", 0, small)).await;
    assert_eq!(r.code, code::SUCCESS, "a batch within the limit is stored: {r:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn given_a_batch_of_more_entries_than_the_cap_should_answer_message_illegal_and_store_nothing(
) {
    let broker = start_broker(|c| c.core.max_message_size = 16 * 1024 * 1024).await;
    let mut conn = Conn::open(broker_addr(&broker)).await;
    let r = conn.call(create_topic_request("BatchTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    // 400,000 empty entries (22 bytes each, 8.8 MB): their msgIds alone would be 13 MB.
    let body = batch_of(400_000, b"").freeze();
    let r = conn.call(send_v2_request(rc::SEND_BATCH_MESSAGE, "BatchTopic", 0, body)).await;
    assert_eq!(r.code, code::MESSAGE_ILLEGAL, "the entry count is capped: {r:?}");
    assert!(r.remark.unwrap_or_default().len() < 256, "a short remark");
    let r = conn.call(max_offset_request("BatchTopic", 0)).await;
    assert_eq!(r.ext_fields.get("offset"), Some("0"), "nothing was stored: {r:?}");
    broker.shutdown().await;
}
