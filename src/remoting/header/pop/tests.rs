use super::*;
use crate::remoting::header::assert_header_round_trip;

#[test]
fn given_rust_client_receipt_when_parsing_should_read_every_field_and_rebuild_it() {
    let s = "5 1700000000000 60000 0 0 broker-a 3 7";
    let e = ExtraInfo::parse(s).expect("a well-formed receipt");
    assert_eq!((e.ck_queue_offset, e.pop_time, e.queue_id), (5, 1_700_000_000_000, 3));
    assert_eq!(e.queue_offset, Some(7));
    assert_eq!(e.build(), s, "build is parse's inverse");
    assert!(ExtraInfo::parse("5 x").is_none(), "malformed receipts are refused");
}

#[test]
fn given_pop_headers_when_round_tripping_should_preserve_fields() {
    let h = PopMessageRequestHeader {
        consumer_group: "G",
        topic: "T",
        queue_id: -1,
        max_msg_nums: 32,
        invisible_time: 60_000,
        poll_time: 15_000,
        born_time: 1,
        init_mode: 1,
        exp_type: Some("TAG"),
        exp: Some("*"),
        order: true,
        attempt_id: Some("a"),
    };
    assert_header_round_trip!(PopMessageRequestHeader, h);
    let r = PopMessageResponseHeader {
        pop_time: 9,
        invisible_time: 60_000,
        revive_qid: 0,
        rest_num: 0,
        start_offset_info: Some("0 1 4".into()),
        msg_offset_info: Some("0 1 4,5".into()),
        order_count_info: None,
    };
    assert_header_round_trip!(PopMessageResponseHeader, r);
}
