use bytes::BufMut;

use super::*;

fn frame_bytes(length: i32, word: i32, rest: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i32(length);
    b.put_i32(word);
    b.put_slice(rest);
    b
}

#[test]
fn given_complete_frame_when_decoding_should_split_header_and_body_zero_copy() {
    let mut src = frame_bytes(4 + 2 + 3, 2, b"{}abc");
    src.put_slice(b"next");
    let base = src.as_ptr() as usize;
    let frame = decode_frame(&mut src).expect("valid frame").expect("complete frame");
    assert_eq!(frame.serialize_type, SerializeType::Json);
    assert_eq!(&frame.header[..], b"{}");
    assert_eq!(&frame.body[..], b"abc");
    assert_eq!(
        frame.body.as_ptr() as usize,
        base + 10,
        "the body must be a view into the read buffer, not a copy"
    );
    assert_eq!(&src[..], b"next", "only the frame is consumed");
}

#[test]
fn given_partial_frame_when_decoding_should_wait_without_consuming() {
    let full = frame_bytes(4 + 2 + 3, 2, b"{}abc");
    for cut in 0..full.len() {
        let mut src = BytesMut::from(&full[..cut]);
        assert_eq!(decode_frame(&mut src), Ok(None), "cut at {cut} is incomplete");
        assert_eq!(src.len(), cut, "nothing is consumed while waiting");
    }
}

#[test]
fn given_bad_prefixes_when_decoding_should_fail_before_allocating() {
    let cases: [(i32, i32, FrameError); 5] = [
        (-1, 0, FrameError::NegativeLength(-1)),
        (3, 0, FrameError::LengthTooSmall(3)),
        (
            i32::try_from(MAX_FRAME_LEN + 1).unwrap_or(i32::MAX),
            0,
            FrameError::TooLarge { length: MAX_FRAME_LEN + 1, max: MAX_FRAME_LEN },
        ),
        (10, 7, FrameError::HeaderLengthExceedsFrame { header_len: 7, available: 6 }),
        (10, 0x0200_0000, FrameError::UnknownSerializeType(2)),
    ];
    for (length, word, expected) in cases {
        let mut src = frame_bytes(length, word, &[]);
        let capacity = src.capacity();
        assert_eq!(decode_frame(&mut src), Err(expected), "prefix {length}/{word:#x}");
        assert_eq!(src.capacity(), capacity, "a rejected prefix must not reserve memory");
    }
}

#[test]
fn given_huge_announced_frame_when_only_prefix_arrived_should_reserve_little() {
    let length = i32::try_from(MAX_FRAME_LEN).unwrap_or(i32::MAX);
    let mut src = frame_bytes(length, 10, &[]);
    assert_eq!(decode_frame(&mut src), Ok(None));
    assert!(
        src.capacity() <= 4 * RESERVE_CHUNK,
        "reservation must be bounded by arrival, got {}",
        src.capacity()
    );
}

#[test]
fn given_frame_at_size_limit_when_decoding_should_accept() {
    let length = i32::try_from(MAX_FRAME_LEN).unwrap_or(i32::MAX);
    let mut src = frame_bytes(length, 0, &[]);
    src.resize(4 + MAX_FRAME_LEN, 0);
    let frame = decode_frame(&mut src).expect("limit is inclusive").expect("complete");
    assert_eq!(frame.body.len(), MAX_FRAME_LEN - 4);
}
