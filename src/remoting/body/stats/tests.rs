use super::*;

fn mq(queue_id: i32) -> MessageQueue {
    MessageQueue { topic: "T".into(), broker_name: "b".into(), queue_id }
}

#[test]
fn given_topic_stats_when_round_tripping_should_key_by_queue_json() {
    let table = TopicStatsTable {
        offset_table: vec![(
            mq(0),
            TopicOffset { min_offset: 0, max_offset: 10, last_update_timestamp: 5 },
        )],
        topic_put_tps: 0.5,
    };
    let json = table.to_json_bytes().expect("serialisable");
    assert_eq!(
        std::str::from_utf8(&json).expect("UTF-8"),
        r#"{"offsetTable":{"{\"topic\":\"T\",\"brokerName\":\"b\",\"queueId\":0}":{"minOffset":0,"maxOffset":10,"lastUpdateTimestamp":5}},"topicPutTps":0.5}"#
    );
    assert_eq!(TopicStatsTable::from_json_slice(&json).expect("parses"), table);
}

#[test]
fn given_consume_stats_when_round_tripping_should_be_identical() {
    let stats = ConsumeStats {
        offset_table: vec![
            (mq(0), OffsetWrapper::default()),
            (
                mq(1),
                OffsetWrapper {
                    broker_offset: 9,
                    consumer_offset: 7,
                    pull_offset: 8,
                    last_timestamp: 1,
                },
            ),
        ],
        consume_tps: 1.5,
        held_bytes: Some(10),
        dropped_messages: None,
    };
    let json = stats.to_json_bytes().expect("serialisable");
    assert_eq!(ConsumeStats::from_json_slice(&json).expect("parses"), stats);
}
