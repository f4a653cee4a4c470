use super::*;

fn route() -> TopicRouteData {
    TopicRouteData {
        order_topic_conf: None,
        queue_datas: vec![QueueData {
            broker_name: "broker-a".into(),
            read_queue_nums: 4,
            write_queue_nums: 4,
            perm: 6,
            topic_sys_flag: 0,
        }],
        broker_datas: vec![BrokerData {
            cluster: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_addrs: BTreeMap::from([(MASTER_ID, "127.0.0.1:10911".to_owned())]),
            zone_name: None,
            enable_acting_master: false,
        }],
        filter_server_table: BTreeMap::new(),
    }
}

#[test]
fn given_route_when_serialising_should_match_the_standard_form() {
    let json = route().to_json_bytes().expect("serialisable");
    assert_eq!(
        std::str::from_utf8(&json).expect("UTF-8"),
        r#"{"orderTopicConf":null,"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],"brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{"0":"127.0.0.1:10911"},"zoneName":null,"enableActingMaster":false}],"filterServerTable":{}}"#,
        "every field the Rust client requires, with quoted integer keys"
    );
    assert_eq!(TopicRouteData::from_json_slice(&json).expect("parses"), route());
}

#[test]
fn given_old_java_route_when_parsing_should_accept_missing_fields_and_old_names() {
    let json = br#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"b"}],"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":8,"topicSynFlag":1,"writeQueueNums":8}]}"#;
    let r = TopicRouteData::from_json_slice(json).expect("lenient");
    assert_eq!(r.queue_datas.first().map(|q| q.topic_sys_flag), Some(1));
    assert_eq!(
        r.broker_datas.first().and_then(|b| b.broker_addrs.get(&MASTER_ID)).map(String::as_str),
        Some("10.0.0.1:10911")
    );
}
