use super::*;

#[test]
fn given_ipv4_store_host_when_encoding_should_produce_java_compatible_id() {
    let addr: SocketAddr = "127.0.0.1:10911".parse().expect("addr");
    let id = encode_offset_msg_id(addr, 0x1234);
    assert_eq!(id, "7F00000100002A9F0000000000001234", "ip + port(i32) + offset(i64)");
    let decoded = decode_offset_msg_id(&id.to_lowercase()).expect("lower case accepted");
    assert_eq!(decoded, OffsetMsgId { store_host: addr, commit_log_offset: 0x1234 });
}

#[test]
fn given_ipv6_store_host_when_round_tripping_should_be_56_digits() {
    let addr: SocketAddr = "[2001:db8::1]:10911".parse().expect("addr");
    let id = encode_offset_msg_id(addr, i64::MAX);
    assert_eq!(id.len(), OFFSET_MSG_ID_V6_LEN);
    assert_eq!(
        decode_offset_msg_id(&id),
        Ok(OffsetMsgId { store_host: addr, commit_log_offset: i64::MAX })
    );
}

#[test]
fn given_bad_ids_when_decoding_should_name_the_problem() {
    assert_eq!(decode_offset_msg_id(""), Err(MsgIdError::BadLength(0)));
    assert_eq!(decode_offset_msg_id("7F"), Err(MsgIdError::BadLength(2)));
    assert_eq!(
        decode_offset_msg_id("7F00000100002A9F000000000000123G"),
        Err(MsgIdError::BadHex(31))
    );
    assert_eq!(
        decode_offset_msg_id("7F000001FFFFFFFF0000000000001234"),
        Err(MsgIdError::InvalidPort(-1))
    );
    assert!(decode_offset_msg_id("é7F00000100002A9F000000000000123").is_err());
}

#[test]
fn given_generator_when_generating_should_follow_java_layout_and_count() {
    let mut g = UniqKeyGenerator::new(Ipv4Addr::new(10, 0, 0, 7), 0x0001_ABCD, 0xDEAD_BEEF, 1_000);
    let a = g.next_key(1_500);
    let b = g.next_key(1_500);
    assert_eq!(a, "0A000007ABCDDEADBEEF000001F40000", "ip, pid low 16, instance, elapsed, counter");
    assert_eq!(&b[..28], &a[..28]);
    assert!(b.ends_with("0001"), "counter increments");
    assert_eq!(a.len(), UNIQ_KEY_LEN);
}
