use super::*;
use crate::remoting::RemotingCommand;

fn header(ext: &[(&str, &str)], remark: Option<&str>) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(310, -5);
    cmd.flag = 2;
    cmd.remark = remark.map(str::to_owned);
    cmd.ext_fields = ext.iter().copied().collect();
    cmd
}

#[test]
fn given_java_layout_when_encoding_should_match_byte_for_byte() {
    let cmd = header(&[("a", "PG")], Some("r"));
    let mut dst = BytesMut::new();
    encode(&cmd.header_ref(), &mut dst).expect("encodable");
    let mut expected = vec![0x01, 0x36, 0x00, 0x01, 0xDB];
    expected.extend_from_slice(&(-5i32).to_be_bytes());
    expected.extend_from_slice(&2i32.to_be_bytes());
    expected.extend_from_slice(&1i32.to_be_bytes());
    expected.push(b'r');
    expected.extend_from_slice(&(2 + 1 + 4 + 2i32).to_be_bytes());
    expected.extend_from_slice(&[0, 1, b'a', 0, 0, 0, 2, b'P', b'G']);
    assert_eq!(&dst[..], &expected[..], "code 310, JAVA, version 475 (0x01DB)");
}

#[test]
fn given_encoded_header_when_decoding_should_round_trip() {
    let cmd = header(&[("a", "PG"), ("b", "Topic"), ("empty", "")], None);
    let mut dst = BytesMut::new();
    encode(&cmd.header_ref(), &mut dst).expect("encodable");
    let parts = decode(&dst).expect("decodable");
    assert_eq!(parts.code, 310);
    assert_eq!(parts.opaque, -5);
    assert_eq!(parts.flag, 2);
    assert_eq!(parts.remark, None, "zero remark length means no remark");
    assert_eq!(parts.ext_fields, cmd.ext_fields);
}

#[test]
fn given_hostile_lengths_when_decoding_should_fail_without_panicking() {
    let mut fixed = vec![0u8; 13];
    fixed.extend_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(
        decode(&fixed).err(),
        Some(FrameError::MalformedBinaryHeader("remark exceeds the header"))
    );
    let mut neg = vec![0u8; 13];
    neg.extend_from_slice(&(-1i32).to_be_bytes());
    assert!(decode(&neg).is_err(), "negative remark length");
    let mut bad_ext = vec![0u8; 17];
    bad_ext.extend_from_slice(&3i32.to_be_bytes());
    bad_ext.extend_from_slice(&[0x7f, 0xff, b'k']);
    assert_eq!(
        decode(&bad_ext).err(),
        Some(FrameError::MalformedBinaryHeader("extFields key exceeds the block"))
    );
    assert!(decode(&[0; 12]).is_err(), "truncated fixed part");
}

#[test]
fn given_values_beyond_16_bits_when_encoding_should_refuse() {
    let mut cmd = header(&[], None);
    cmd.code = 200_050;
    let mut dst = BytesMut::new();
    assert_eq!(
        encode(&cmd.header_ref(), &mut dst),
        Err(FrameError::FieldOutOfRange { field: "code", value: 200_050 })
    );
}
