use super::*;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::assert_header_round_trip;
use crate::remoting::header::FromExtFields;

#[test]
fn given_offset_headers_when_round_tripping_should_be_identical() {
    assert_header_round_trip!(
        TopicQueueRequestHeader,
        TopicQueueRequestHeader { topic: "T", queue_id: 3 }
    );
    assert_header_round_trip!(OffsetResponseHeader, OffsetResponseHeader { offset: -1 });
    assert_header_round_trip!(
        QueryConsumerOffsetRequestHeader,
        QueryConsumerOffsetRequestHeader {
            consumer_group: "CG",
            topic: "T",
            queue_id: 0,
            set_zero_if_not_found: false,
        }
    );
    assert_header_round_trip!(
        UpdateConsumerOffsetRequestHeader,
        UpdateConsumerOffsetRequestHeader {
            consumer_group: "CG",
            topic: "T",
            queue_id: 1,
            commit_offset: 99,
        }
    );
    assert_header_round_trip!(
        GetMaxOffsetRequestHeader,
        GetMaxOffsetRequestHeader { topic: "T", queue_id: 1, committed: false }
    );
    assert_header_round_trip!(
        SearchOffsetRequestHeader,
        SearchOffsetRequestHeader {
            topic: "T",
            queue_id: 1,
            timestamp: 1_700_000_000_000,
            boundary_type: Some("LOWER"),
        }
    );
    assert_header_round_trip!(
        GetEarliestMsgStoretimeResponseHeader,
        GetEarliestMsgStoretimeResponseHeader { timestamp: 5 }
    );
}

#[test]
fn given_rust_client_query_without_set_zero_should_default_to_true() {
    let ext: ExtFields =
        [("consumerGroup", "CG"), ("topic", "T"), ("queueId", "0")].into_iter().collect();
    let h = QueryConsumerOffsetRequestHeader::from_ext_fields(&ext).expect("lenient");
    assert!(h.set_zero_if_not_found, "absent setZeroIfNotFound means true");
    let h = GetMaxOffsetRequestHeader::from_ext_fields(&ext).expect("lenient");
    assert!(h.committed);
}
