use super::*;
use crate::remoting::body::MASTER_ID;

#[test]
fn given_register_body_when_serialising_should_carry_every_field_the_rust_namesrv_requires() {
    let mut body = RegisterBrokerBody::default();
    body.topic_config_serialize_wrapper
        .topic_config_table
        .insert("T".into(), TopicConfig::new("T", 4, 4));
    body.topic_config_serialize_wrapper.data_version =
        DataVersion { state_version: 0, timestamp: 1_700_000_000_000, counter: 1 };
    let json = body.to_json_bytes().expect("serialisable");
    let text = std::str::from_utf8(&json).expect("UTF-8");
    assert_eq!(
        text,
        r#"{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{}}},"dataVersion":{"stateVersion":0,"timestamp":1700000000000,"counter":1},"topicQueueMappingInfoMap":{},"topicQueueMappingDetailMap":{},"mappingDataVersion":{"stateVersion":0,"timestamp":0,"counter":0}},"filterServerList":[]}"#
    );
    assert_eq!(RegisterBrokerBody::from_json_slice(&json).expect("parses"), body);
}

#[test]
fn given_cluster_info_when_round_tripping_should_be_identical() {
    let info = ClusterInfo {
        broker_addr_table: BTreeMap::from([(
            "broker-a".to_owned(),
            BrokerData {
                cluster: "DefaultCluster".into(),
                broker_name: "broker-a".into(),
                broker_addrs: BTreeMap::from([(MASTER_ID, "127.0.0.1:10911".to_owned())]),
                zone_name: None,
                enable_acting_master: false,
            },
        )]),
        cluster_addr_table: BTreeMap::from([(
            "DefaultCluster".to_owned(),
            vec!["broker-a".to_owned()],
        )]),
    };
    let json = info.to_json_bytes().expect("serialisable");
    assert_eq!(ClusterInfo::from_json_slice(&json).expect("parses"), info);
    let list = TopicList { topic_list: vec!["T".into()], broker_addr: None };
    let json = list.to_json_bytes().expect("serialisable");
    assert_eq!(TopicList::from_json_slice(&json).expect("parses"), list);
}
