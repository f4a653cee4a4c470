use super::*;

#[test]
fn given_lock_request_when_parsing_should_read_the_rust_client_shape() {
    let body = LockBatchRequestBody::from_json_slice(
        br#"{"consumerGroup":"CG","clientId":"ip@x","onlyThisBroker":false,"mqSet":[{"topic":"T","brokerName":"broker-a","queueId":0}]}"#,
    )
    .expect("parses");
    assert_eq!(body.mq_set.len(), 1);
    assert_eq!(body.client_id, "ip@x");
    let json = body.to_json_bytes().expect("serialisable");
    assert_eq!(UnlockBatchRequestBody::from_json_slice(&json).expect("parses"), body);
}

#[test]
fn given_lock_response_when_serialising_should_use_exact_casing() {
    let body = LockBatchResponseBody {
        lock_ok_mq_set: vec![MessageQueue {
            topic: "T".into(),
            broker_name: "broker-a".into(),
            queue_id: 0,
        }],
    };
    let json = body.to_json_bytes().expect("serialisable");
    assert_eq!(
        std::str::from_utf8(&json).expect("UTF-8"),
        r#"{"lockOKMQSet":[{"topic":"T","brokerName":"broker-a","queueId":0}]}"#
    );
    assert_eq!(LockBatchResponseBody::from_json_slice(&json).expect("parses"), body);
}

#[test]
fn given_consumer_list_when_serialising_should_match_java_shape() {
    let body = ConsumerListBody { consumer_id_list: vec!["ip@a".into(), "ip@b".into()] };
    let json = body.to_json_bytes().expect("serialisable");
    assert_eq!(&json[..], br#"{"consumerIdList":["ip@a","ip@b"]}"#);
    assert!(ConsumerListBody::from_json_slice(b"").is_err(), "empty body is an error");
}
