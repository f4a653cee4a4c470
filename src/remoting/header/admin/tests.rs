use super::*;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::assert_header_round_trip;
use crate::remoting::header::FromExtFields;

#[test]
fn given_admin_headers_when_round_tripping_should_be_identical() {
    assert_header_round_trip!(
        GetRouteInfoRequestHeader,
        GetRouteInfoRequestHeader { topic: "T", accept_standard_json_only: true }
    );
    assert_header_round_trip!(
        RegisterBrokerRequestHeader,
        RegisterBrokerRequestHeader {
            broker_name: "broker-a",
            broker_addr: "127.0.0.1:10911",
            cluster_name: "DefaultCluster",
            ha_server_addr: "127.0.0.1:10912",
            broker_id: 0,
            heartbeat_timeout_millis: Some(120_000),
            enable_acting_master: Some(false),
            compressed: false,
            body_crc32: 12345,
        }
    );
    assert_header_round_trip!(
        RegisterBrokerResponseHeader,
        RegisterBrokerResponseHeader {
            ha_server_addr: None,
            master_addr: Some("127.0.0.1:10911".into()),
        }
    );
    assert_header_round_trip!(
        UnregisterBrokerRequestHeader,
        UnregisterBrokerRequestHeader {
            broker_name: "b",
            broker_addr: "a:1",
            cluster_name: "c",
            broker_id: 0,
        }
    );
    assert_header_round_trip!(
        CreateTopicRequestHeader,
        CreateTopicRequestHeader {
            topic: "T",
            default_topic: Some("TBW102"),
            read_queue_nums: 8,
            write_queue_nums: 8,
            perm: 6,
            topic_filter_type: "SINGLE_TAG",
            topic_sys_flag: 0,
            order: false,
            attributes: None,
            force: false,
        }
    );
    assert_header_round_trip!(DeleteTopicRequestHeader, DeleteTopicRequestHeader { topic: "T" });
}

#[test]
fn given_ali_ons_create_topic_with_raw_values_should_decode() {
    let ext: ExtFields = serde_json::from_str(
        r#"{"topic":"T","defaultTopic":"TBW102","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicFilterType":"SINGLE_TAG"}"#,
    )
    .expect("JSON");
    let h = CreateTopicRequestHeader::from_ext_fields(&ext).expect("lenient");
    assert_eq!((h.read_queue_nums, h.perm, h.order), (4, 6, false));
}
