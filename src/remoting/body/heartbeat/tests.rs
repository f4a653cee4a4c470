use super::*;

/// A heartbeat as rocketmq-client-rust 1.0.0 sends it (reference section 5.7, with the
/// elided parts filled in).
const RUST_CLIENT_HEARTBEAT: &str = r#"{"clientID":"192.168.1.10@12345#1700000000000","producerDataSet":[{"groupName":"PG"},{"groupName":"CLIENT_INNER_PRODUCER"}],"consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000000,"expressionType":"TAG"},{"classFilterMode":false,"topic":"%RETRY%CG","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000001,"expressionType":"TAG"}],"unitMode":false}],"heartbeatFingerprint":0,"withoutSub":false}"#;

/// A heartbeat as ali-ons sends it: no expressionType, fingerprint or withoutSub.
const ALI_ONS_HEARTBEAT: &str = r#"{"clientID":"10.0.0.5@4242","consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"topic":"T","subString":"*","classFilterMode":false,"tagsSet":[],"codeSet":[],"subVersion":1700000000000}],"unitMode":false}],"producerDataSet":[]}"#;

#[test]
fn given_rust_client_heartbeat_when_parsing_should_read_every_field() {
    let hb = HeartbeatData::from_json_slice(RUST_CLIENT_HEARTBEAT.as_bytes()).expect("parses");
    assert_eq!(hb.client_id, "192.168.1.10@12345#1700000000000");
    assert_eq!(hb.producer_data_set.len(), 2);
    let cg = hb.consumer_data_set.first().expect("one consumer group");
    assert_eq!(cg.consume_type, ConsumeType::ConsumePassively);
    assert_eq!(cg.message_model, MessageModel::Clustering);
    assert_eq!(cg.consume_from_where, ConsumeFromWhere::ConsumeFromLastOffset);
    assert_eq!(cg.subscription_data_set.len(), 2);
    let retry = cg.subscription_data_set.get(1).expect("retry subscription");
    assert_eq!(retry.topic, "%RETRY%CG");
    assert_eq!(retry.sub_string, "*");
    assert_eq!(retry.sub_version, 1_700_000_000_001);
    assert_eq!(retry.expression_type, ExpressionType::Tag);
    let back = HeartbeatData::from_json_slice(&hb.to_json_bytes().expect("serialisable"))
        .expect("re-parses");
    assert_eq!(back, hb, "heartbeat round trip");
}

/// A heartbeat as rocketmq-client-go v2.1 sends it (client-wire-facts row 14): `codeSet`
/// as JSON strings, `subVersion` in nanoseconds, the raw `subString`, no fingerprint, and
/// the hard-coded `consumeType:"PUSH"` (kept as an unknown name).
const GO_CLIENT_HEARTBEAT: &str = r#"{"clientID":"10.0.0.7@12345#1700000000000000000","producerDataSet":[{"groupName":"PG"}],"consumerDataSet":[{"groupName":"CG","consumeType":"PUSH","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"TagA || TagB","tagsSet":["TagA","TagB"],"codeSet":["2598919","2598920"],"subVersion":1700000000123456789,"expressionType":"TAG"},{"classFilterMode":false,"topic":"%RETRY%CG","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000123456790,"expressionType":"TAG"}],"unitMode":false}]}"#;

#[test]
fn given_go_client_heartbeat_when_parsing_should_read_string_codes_and_nanosecond_versions() {
    let hb = HeartbeatData::from_json_slice(GO_CLIENT_HEARTBEAT.as_bytes()).expect("parses");
    let sub = hb
        .consumer_data_set
        .first()
        .and_then(|c| c.subscription_data_set.first())
        .expect("subscription");
    assert_eq!(sub.code_set, vec![2_598_919, 2_598_920], "codes given as strings");
    assert_eq!(sub.tags_set, vec!["TagA".to_string(), "TagB".to_string()]);
    assert_eq!(sub.sub_version, 1_700_000_000_123_456_789, "nanoseconds fit");
    let cg = hb.consumer_data_set.first().expect("one consumer group");
    assert_eq!(cg.consume_type, ConsumeType::Other("PUSH".into()));
    assert_eq!(cg.message_model, MessageModel::Clustering);
    let mixed = HeartbeatData::from_json_slice(
        br#"{"consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T","codeSet":[1,"-2"," 3",null,"x"]}]}]}"#,
    )
    .expect("ints, strings and junk codes are all tolerated");
    let sub = mixed
        .consumer_data_set
        .first()
        .and_then(|c| c.subscription_data_set.first())
        .expect("subscription");
    assert_eq!(sub.code_set, vec![1, -2, 3], "unparsable codes are skipped");
}

#[test]
fn given_go_2_0_heartbeat_with_producer_names_as_strings_when_parsing_should_read_them() {
    // rocketmq-client-go 2.0 declares `type producerData string`: the set is a list of names.
    let hb = HeartbeatData::from_json_slice(
        br#"{"clientID":"10.0.0.7@1","producerDataSet":["PG",{"groupName":"PG2"},7],"consumerDataSet":[{"groupName":"CG","consumeType":"PUSH","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[],"unitMode":false}]}"#,
    )
    .expect("a Go 2.0 heartbeat parses");
    let names: Vec<&str> = hb.producer_data_set.iter().map(|p| p.group_name.as_str()).collect();
    assert_eq!(names, ["PG", "PG2", ""], "names, objects, and junk as an empty name");
    assert_eq!(hb.consumer_data_set.len(), 1);
}

#[test]
fn given_ali_ons_heartbeat_when_parsing_should_default_missing_fields() {
    let hb = HeartbeatData::from_json_slice(ALI_ONS_HEARTBEAT.as_bytes()).expect("parses");
    let sub = hb
        .consumer_data_set
        .first()
        .and_then(|c| c.subscription_data_set.first())
        .expect("subscription");
    assert_eq!(sub.expression_type, ExpressionType::Tag, "missing expressionType is TAG");
    assert_eq!(hb.heartbeat_fingerprint, 0);
    assert!(!hb.without_sub);
}

#[test]
fn given_unknown_enum_names_and_nulls_when_parsing_should_not_fail() {
    let hb = HeartbeatData::from_json_slice(
        br#"{"clientID":null,"consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_SOMEHOW","messageModel":null,"consumeFromWhere":3,"subscriptionDataSet":null}],"extra":{"x":1}}"#,
    )
    .expect("lenient");
    let cg = hb.consumer_data_set.first().expect("group");
    assert_eq!(cg.consume_type, ConsumeType::Other("CONSUME_SOMEHOW".into()));
    assert_eq!(cg.message_model, MessageModel::Clustering, "null is the default");
    assert_eq!(cg.consume_from_where, ConsumeFromWhere::Other("3".into()));
    assert!(cg.subscription_data_set.is_empty());
    let json = serde_json::to_string(&cg.consume_type).expect("serialisable");
    assert_eq!(json, r#""CONSUME_SOMEHOW""#, "unknown names are kept verbatim");
}

#[test]
fn given_check_client_config_body_when_round_tripping_should_be_identical() {
    let body = CheckClientConfigBody {
        client_id: "c".into(),
        group: "g".into(),
        subscription_data: SubscriptionData {
            topic: "T".into(),
            sub_string: "a > 1".into(),
            expression_type: ExpressionType::Sql92,
            ..SubscriptionData::default()
        },
        namespace: None,
    };
    let json = body.to_json_bytes().expect("serialisable");
    assert_eq!(CheckClientConfigBody::from_json_slice(&json).expect("parses"), body);
}
