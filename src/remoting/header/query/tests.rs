use super::*;
use crate::remoting::header::assert_header_round_trip;

#[test]
fn given_query_headers_when_round_tripping_should_be_identical() {
    assert_header_round_trip!(
        ViewMessageRequestHeader,
        ViewMessageRequestHeader { offset: 7, topic: None }
    );
    let ext = assert_header_round_trip!(
        QueryMessageRequestHeader,
        QueryMessageRequestHeader {
            topic: "T",
            key: "7F0000010000000000000000000000",
            max_num: 32,
            begin_timestamp: 0,
            end_timestamp: i64::MAX,
            unique_key_query: true,
        }
    );
    assert_eq!(ext.get("_UNIQUE_KEY_QUERY"), Some("true"));
    assert_header_round_trip!(
        QueryMessageResponseHeader,
        QueryMessageResponseHeader {
            index_last_update_timestamp: 1,
            index_last_update_phyoffset: 2,
        }
    );
}
