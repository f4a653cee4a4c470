use super::*;
use crate::remoting::ext::ExtFields;
use crate::remoting::header::{FromExtFields, ToExtFields};

#[test]
fn given_a_java_end_transaction_header_when_decoding_should_read_every_field() {
    let mut ext = ExtFields::new();
    for (k, v) in [
        ("topic", "T"),
        ("producerGroup", "pg"),
        ("tranStateTableOffset", "5"),
        ("commitLogOffset", "123"),
        ("commitOrRollback", "8"),
        ("msgId", "ABC"),
        ("transactionId", "ABC"),
        ("bname", "broker-a"),
    ] {
        ext.insert(k, v);
    }
    let h = EndTransactionRequestHeader::from_ext_fields(&ext).unwrap();
    assert_eq!((h.producer_group, h.tran_state_table_offset, h.commit_log_offset), ("pg", 5, 123));
    assert_eq!((h.commit_or_rollback, h.from_transaction_check), (8, false));
    assert_eq!((h.msg_id, h.transaction_id, h.topic), ("ABC", Some("ABC"), Some("T")));
    let written = h.to_ext_fields();
    let round = EndTransactionRequestHeader::from_ext_fields(&written).unwrap();
    assert_eq!(round, h, "encoding and decoding round-trips");
    ext.remove("producerGroup");
    assert!(
        EndTransactionRequestHeader::from_ext_fields(&ext).is_err(),
        "producerGroup is required"
    );
}
