use super::*;

#[test]
fn given_short_buffer_when_reading_wider_int_should_return_none_and_not_advance() {
    let mut r = Reader::new(&[0, 1, 2]);
    assert_eq!(r.i32(), None, "a 4-byte read from 3 bytes must fail");
    assert_eq!(r.position(), 0, "a failed read must not consume anything");
    assert_eq!(r.i16(), Some(1));
    assert_eq!(r.u8(), Some(2));
    assert_eq!(r.remaining(), 0);
    assert_eq!(r.take(1), None);
}

#[test]
fn given_huge_length_when_taking_should_not_overflow() {
    let mut r = Reader::new(&[0; 4]);
    r.pos = 2;
    assert_eq!(r.take_range(usize::MAX), None, "offset overflow must be a short read");
}
