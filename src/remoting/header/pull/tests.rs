use super::*;
use crate::remoting::error::HeaderError;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::assert_header_round_trip;
use crate::remoting::header::FromExtFields;

#[test]
fn given_pull_request_when_round_tripping_should_preserve_fields_and_flags() {
    let h = PullMessageRequestHeader {
        consumer_group: "CG",
        topic: "T",
        queue_id: 1,
        queue_offset: 10,
        max_msg_nums: 32,
        sys_flag: pull_sys_flag::SUSPEND | pull_sys_flag::COMMIT_OFFSET,
        commit_offset: 9,
        suspend_timeout_millis: 15_000,
        subscription: Some(""),
        sub_version: 1_700_000_000_000,
        expression_type: "TAG",
        max_msg_bytes: Some(262_144),
    };
    assert!(h.has_suspend() && h.has_commit_offset());
    assert!(!h.has_subscription() && !h.is_lite_pull());
    assert_header_round_trip!(PullMessageRequestHeader, h);
}

#[test]
fn given_ali_ons_pull_without_optionals_should_default_expression_type() {
    let ext: ExtFields = serde_json::from_str(
        r#"{"consumerGroup":"CG","topic":"T","queueId":0,"queueOffset":0,"maxMsgNums":32,"sysFlag":2,"commitOffset":0,"suspendTimeoutMillis":15000,"subVersion":1}"#,
    )
    .expect("JSON");
    let h = PullMessageRequestHeader::from_ext_fields(&ext).expect("lenient");
    assert_eq!(h.expression_type, "TAG");
    assert_eq!(h.subscription, None);
    assert_eq!(h.max_msg_bytes, None);
}

#[test]
fn given_pull_response_when_encoding_should_write_non_negative_decimals() {
    let ext = assert_header_round_trip!(
        PullMessageResponseHeader,
        PullMessageResponseHeader {
            next_begin_offset: 12,
            max_offset: 12,
            ..PullMessageResponseHeader::default()
        }
    );
    assert_eq!(ext.get("suggestWhichBrokerId"), Some("0"));
    assert_eq!(ext.get("nextBeginOffset"), Some("12"));
    let bad: ExtFields = [
        ("suggestWhichBrokerId", "0"),
        ("nextBeginOffset", "-1"),
        ("minOffset", "0"),
        ("maxOffset", "0"),
    ]
    .into_iter()
    .collect();
    assert!(matches!(
        PullMessageResponseHeader::from_ext_fields(&bad),
        Err(HeaderError::OutOfRange { field: "nextBeginOffset", .. })
    ));
}
