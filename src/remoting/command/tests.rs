use super::*;
use crate::remoting::code::{request_code, response_code};

fn send_request(serialize_type: SerializeType) -> RemotingCommand {
    let ext: ExtFields = [
        ("producerGroup", "PG"),
        ("topic", "T"),
        ("queueId", "3"),
        ("properties", "TAGS\u{1}a\u{2}"),
    ]
    .into_iter()
    .collect();
    RemotingCommand {
        code: request_code::SEND_MESSAGE,
        language: LanguageCode::Rust,
        version: 474,
        opaque: 77,
        flag: 0,
        remark: None,
        ext_fields: ext,
        serialize_type,
        body: Bytes::from_static(b"hello"),
    }
}

fn round_trip(cmd: &RemotingCommand) -> RemotingCommand {
    let mut buf = BytesMut::new();
    cmd.encode(&mut buf).expect("encodable");
    let decoded = RemotingCommand::decode(&mut buf).expect("decodable").expect("complete");
    assert!(buf.is_empty(), "exactly one frame was written");
    decoded
}

#[test]
fn given_json_command_when_round_tripping_should_be_identical() {
    let cmd = send_request(SerializeType::Json);
    assert_eq!(round_trip(&cmd), cmd);
}

#[test]
fn given_binary_command_when_round_tripping_should_be_identical() {
    let mut cmd = send_request(SerializeType::RocketMq);
    cmd.remark = Some("détail".into());
    assert_eq!(round_trip(&cmd), cmd);
}

#[test]
fn given_request_when_building_response_should_echo_opaque_and_type() {
    for st in [SerializeType::Json, SerializeType::RocketMq] {
        let req = send_request(st);
        let resp =
            RemotingCommand::response_to(&req, response_code::SYSTEM_ERROR, Some("x".into()));
        assert_eq!(resp.opaque, 77, "responses echo the request opaque");
        assert_eq!(resp.serialize_type, st, "replies use the request's serialize type");
        assert!(resp.is_response() && !resp.is_oneway());
        assert_eq!(resp.language, LanguageCode::Java);
        assert_eq!(resp.version, BROKER_VERSION);
    }
    let notify = RemotingCommand::oneway_request(request_code::NOTIFY_CONSUMER_IDS_CHANGED, 5);
    assert!(notify.is_oneway() && !notify.is_response());
}

#[test]
fn given_body_when_encoding_head_only_should_count_body_in_length() {
    let cmd = send_request(SerializeType::Json);
    let mut head = BytesMut::new();
    cmd.encode_head(&mut head).expect("encodable");
    let mut full = BytesMut::new();
    cmd.encode(&mut full).expect("encodable");
    assert_eq!(&full[..head.len()], &head[..], "head is a prefix of the full frame");
    assert_eq!(full.len(), head.len() + cmd.body.len());
}

#[test]
fn given_oversized_body_when_encoding_should_fail_and_leave_buffer_unchanged() {
    let cmd = send_request(SerializeType::Json).with_body(vec![0u8; MAX_FRAME_LEN]);
    let mut buf = BytesMut::from(&b"keep"[..]);
    assert!(matches!(cmd.encode(&mut buf), Err(FrameError::TooLarge { .. })));
    assert_eq!(&buf[..], b"keep", "a failed encode must not leave partial output");
}
