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
