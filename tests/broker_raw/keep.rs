//! Keeping acknowledged messages (`keep-acknowledged-secs`, `[keep-acknowledged-topics]`): a
//! queue every group has committed past still serves its messages by offset, so a new group
//! (or a broadcasting member that starts late) from the first offset gets them, as on a
//! persistent broker; without it they are freed at once and such a group finds nothing.

use super::*;

const MESSAGES: i64 = 50;

fn offset_request(code: i32, topic: &str, queue: i32) -> RemotingCommand {
    let mut ext = ExtFields::new();
    ext.insert("topic", topic);
    ext.insert_i64("queueId", i64::from(queue));
    request(code, ext)
}

async fn min_offset(conn: &mut Conn, topic: &str) -> i64 {
    let r = conn.call(offset_request(rc::GET_MIN_OFFSET, topic, 1)).await;
    assert_eq!(r.code, code::SUCCESS, "GET_MIN_OFFSET is answered: {r:?}");
    r.ext_fields.get("offset").and_then(|o| o.parse().ok()).expect("an offset")
}

/// Creates `topic`, sends `MESSAGES` to its queue 1 and has `group` commit past all of them.
async fn sent_and_committed(conn: &mut Conn, topic: &str, group: &str) {
    let r = conn.call(create_topic_request(topic, 4)).await;
    assert_eq!(r.code, code::SUCCESS, "creating a topic succeeds: {r:?}");
    let hb = conn.call(heartbeat_request(&format!("127.0.0.1@{group}"), group, topic)).await;
    assert_eq!(hb.code, code::SUCCESS, "the heartbeat is accepted: {hb:?}");
    for i in 0..MESSAGES {
        let r = conn.call(send_request(topic, 1, format!("m{i}").into_bytes())).await;
        assert_eq!(r.code, code::SUCCESS, "sending succeeds: {r:?}");
    }
    let mut commit = ExtFields::new();
    commit.insert("consumerGroup", group);
    commit.insert("topic", topic);
    commit.insert("queueId", "1");
    commit.insert_i64("commitOffset", MESSAGES);
    let r = conn.call(request(rc::UPDATE_CONSUMER_OFFSET, commit)).await;
    assert_eq!(r.code, code::SUCCESS, "the commit is stored: {r:?}");
}

/// What a group that never committed reads of queue 1 from its first offset, as a Java
/// consumer does: QUERY_CONSUMER_OFFSET, then pulls from the answer (or from the queue's
/// first offset when the broker has none).
async fn new_group_reads(conn: &mut Conn, topic: &str, group: &str) -> usize {
    let mut q = offset_request(rc::QUERY_CONSUMER_OFFSET, topic, 1);
    q.ext_fields.insert("consumerGroup", group);
    q.ext_fields.insert_bool("setZeroIfNotFound", false);
    let r = conn.call(q).await;
    let mut offset = if r.code == code::SUCCESS {
        r.ext_fields.get("offset").and_then(|o| o.parse().ok()).expect("an offset")
    } else {
        min_offset(conn, topic).await
    };
    let mut got = 0;
    loop {
        let r =
            conn.call(pull_request(group, topic, 1, offset, 0, pull_sys_flag::SUBSCRIPTION)).await;
        if r.code != code::SUCCESS {
            return got;
        }
        got += decode_records(&r.body).expect("a valid pull body").len();
        offset = r.ext_fields.get("nextBeginOffset").and_then(|o| o.parse().ok()).expect("next");
    }
}

/// `kept` and `freed` committed, `kept` first; once the reaper has freed `freed` (so a pass
/// ran after both commits), `kept` must still hold all of its messages.
async fn assert_kept_and_freed(broker: &RunningBroker, kept: &str, freed: &str) {
    let mut conn = Conn::open(broker_addr(broker)).await;
    sent_and_committed(&mut conn, kept, "keep_reader").await;
    sent_and_committed(&mut conn, freed, "free_reader").await;
    let deadline = Instant::now() + PATIENCE;
    while min_offset(&mut conn, freed).await != MESSAGES {
        assert!(Instant::now() < deadline, "the topic that keeps nothing is reclaimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(min_offset(&mut conn, kept).await, 0, "acknowledged messages are kept");
    assert_eq!(
        new_group_reads(&mut conn, kept, "late_group").await,
        MESSAGES as usize,
        "a new group from the first offset gets every kept message"
    );
    assert_eq!(
        new_group_reads(&mut conn, freed, "late_group").await,
        0,
        "without keeping, a new group finds nothing of what was acknowledged"
    );
}

#[tokio::test]
async fn given_keep_acknowledged_for_one_topic_when_its_group_committed_should_serve_a_new_group_all(
) {
    let broker = start_broker(|c| {
        c.core.keep_acknowledged_topics.insert("KeptTopic".into(), 3600);
    })
    .await;
    assert_kept_and_freed(&broker, "KeptTopic", "FreedTopic").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn given_keep_acknowledged_broker_wide_when_a_topic_opts_out_should_free_only_that_one() {
    let broker = start_broker(|c| {
        c.core.keep_acknowledged_secs = 3600;
        c.core.keep_acknowledged_topics.insert("OptedOut".into(), 0);
    })
    .await;
    assert_kept_and_freed(&broker, "BrokerWide", "OptedOut").await;
    broker.shutdown().await;
}
