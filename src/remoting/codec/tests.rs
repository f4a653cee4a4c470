use super::*;
use crate::remoting::code::request_code;

#[test]
fn given_two_commands_in_one_buffer_when_decoding_should_yield_both_in_order() {
    let mut codec = RemotingCodec::new();
    let mut buf = BytesMut::new();
    let first = RemotingCommand::request(request_code::HEART_BEAT, 1).with_body(&b"{}"[..]);
    let second = RemotingCommand::oneway_request(request_code::UPDATE_CONSUMER_OFFSET, 2);
    codec.encode(&first, &mut buf).expect("encodable");
    codec.encode(second.clone(), &mut buf).expect("encodable");
    assert_eq!(codec.decode(&mut buf).expect("valid"), Some(first));
    assert_eq!(codec.decode(&mut buf).expect("valid"), Some(second));
    assert_eq!(codec.decode(&mut buf).expect("valid"), None, "buffer drained");
}

#[test]
fn given_garbage_when_decoding_should_return_a_frame_error() {
    let mut codec = RemotingCodec::new();
    let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0][..]);
    assert!(matches!(
        codec.decode(&mut buf),
        Err(CodecError::Frame(FrameError::NegativeLength(-1)))
    ));
}
