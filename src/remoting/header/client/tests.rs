use super::*;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::assert_header_round_trip;
use crate::remoting::header::FromExtFields;

#[test]
fn given_client_headers_when_round_tripping_should_be_identical() {
    assert_header_round_trip!(
        UnregisterClientRequestHeader,
        UnregisterClientRequestHeader {
            client_id: "10.0.0.1@123#456",
            producer_group: None,
            consumer_group: Some("CG"),
        }
    );
    assert_header_round_trip!(
        GetConsumerListByGroupRequestHeader,
        GetConsumerListByGroupRequestHeader { consumer_group: "CG" }
    );
    assert_header_round_trip!(
        ConsumerSendMsgBackRequestHeader,
        ConsumerSendMsgBackRequestHeader {
            offset: 1234,
            group: "CG",
            delay_level: 0,
            origin_msg_id: Some("ABC"),
            origin_topic: Some("T"),
            unit_mode: false,
            max_reconsume_times: Some(16),
        }
    );
    assert_header_round_trip!(
        GetTopicStatsInfoRequestHeader,
        GetTopicStatsInfoRequestHeader { topic: "T" }
    );
    assert_header_round_trip!(
        GetConsumeStatsRequestHeader,
        GetConsumeStatsRequestHeader { consumer_group: "CG", topic: Some("T") }
    );
}

#[test]
fn given_ali_ons_send_back_with_raw_numbers_should_decode() {
    let ext: ExtFields = serde_json::from_str(
        r#"{"offset":1234,"group":"CG","delayLevel":0,"originMsgId":"X","originTopic":"T","unitMode":false}"#,
    )
    .expect("JSON");
    let h = ConsumerSendMsgBackRequestHeader::from_ext_fields(&ext).expect("lenient");
    assert_eq!((h.offset, h.delay_level, h.max_reconsume_times), (1234, 0, None));
}
