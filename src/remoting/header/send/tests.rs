use super::*;
use crate::remoting::header::assert_header_round_trip;

fn header() -> SendMessageRequestHeader<'static> {
    SendMessageRequestHeader {
        producer_group: "PG",
        topic: "TopicTest",
        default_topic: "TBW102",
        default_topic_queue_nums: 4,
        queue_id: 2,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: "TAGS\u{1}TagA\u{2}",
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: Some(16),
        batch: false,
        broker_name: Some("broker-a"),
    }
}

#[test]
fn given_v1_and_v2_headers_when_round_tripping_should_decode_to_one_struct() {
    assert_header_round_trip!(SendMessageRequestHeader, header());
    let mut v2 = ExtFields::new();
    header().write_ext_fields_as(&mut v2, SendHeaderVersion::V2);
    assert_eq!(SendHeaderVersion::detect(&v2), SendHeaderVersion::V2);
    assert_eq!(v2.get("b"), Some("TopicTest"));
    assert_eq!(SendMessageRequestHeader::from_ext_fields(&v2), Ok(header()));
}

#[test]
fn given_ali_ons_v2_header_when_decoding_should_default_missing_optionals() {
    let ext: ExtFields = serde_json::from_str(
        r#"{"a":"PG","b":"T","c":"TBW102","d":4,"e":1,"f":0,"g":1700000000000,"h":0,"i":"","j":0,"k":false}"#,
    )
    .expect("JSON");
    let h = SendMessageRequestHeader::decode(&ext, SendHeaderVersion::V2).expect("lenient");
    assert_eq!(h.queue_id, 1);
    assert_eq!(h.max_reconsume_times, None);
    assert!(!h.batch);
    assert_eq!(h.broker_name, None);
}

#[test]
fn given_missing_or_bad_required_field_should_name_the_wire_field() {
    let mut ext = header().to_ext_fields();
    ext.insert("queueId", "abc");
    assert_eq!(
        SendMessageRequestHeader::decode(&ext, SendHeaderVersion::V1).map_err(|e| e.to_string()),
        Err("the custom field <queueId> is not a number: abc".to_owned())
    );
    let ext: ExtFields = [("a", "PG")].into_iter().collect();
    assert_eq!(
        SendMessageRequestHeader::decode(&ext, SendHeaderVersion::V2),
        Err(HeaderError::Missing { field: "b" })
    );
}

#[test]
fn given_codes_when_choosing_version_should_follow_rocketmq() {
    assert_eq!(SendHeaderVersion::for_request_code(10), Some(SendHeaderVersion::V1));
    assert_eq!(SendHeaderVersion::for_request_code(320), Some(SendHeaderVersion::V2));
    assert_eq!(SendHeaderVersion::for_request_code(11), None);
}

#[test]
fn given_send_response_when_encoding_should_carry_region_and_trace() {
    let ext = assert_header_round_trip!(
        SendMessageResponseHeader,
        SendMessageResponseHeader {
            msg_id: "7F00000100002A9F0000000000000000".into(),
            queue_id: 1,
            queue_offset: 0,
            transaction_id: None,
            batch_uniq_id: Some("B".into()),
            recall_handle: None,
        }
    );
    assert_eq!(ext.get("MSG_REGION"), Some(DEFAULT_MSG_REGION));
    assert_eq!(ext.get("TRACE_ON"), Some("true"));
    assert_eq!(ext.get("queueOffset"), Some("0"));
    assert!(!ext.contains_key("transactionId"), "unset optionals are omitted");
}
