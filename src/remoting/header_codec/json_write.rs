//! A minimal JSON writer for the response header, the one JSON document written per reply.
//!
//! Going through `serde_json::Value` would allocate a tree per response; going through a
//! `Serialize` derive would need an owned mirror struct. Writing the eight known keys by hand
//! into the outgoing buffer costs no allocation at all. Only strings need care: RFC 8259 requires
//! `"` and `\` and the control characters below U+0020 to be escaped; everything else, including
//! non-ASCII UTF-8, may be written as is.

use bytes::{BufMut, BytesMut};

/// Appends `s` as a quoted, escaped JSON string.
pub(crate) fn write_str(dst: &mut BytesMut, s: &str) {
    dst.reserve(s.len() + 2);
    dst.put_u8(b'"');
    let bytes = s.as_bytes();
    let mut run_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        if let Some(run) = bytes.get(run_start..i) {
            dst.put_slice(run);
        }
        match escape {
            Some(seq) => dst.put_slice(seq),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                dst.put_slice(b"\\u00");
                dst.put_u8(HEX[usize::from(b >> 4)]);
                dst.put_u8(HEX[usize::from(b & 0x0f)]);
            }
        }
        run_start = i + 1;
    }
    if let Some(run) = bytes.get(run_start..) {
        dst.put_slice(run);
    }
    dst.put_u8(b'"');
}

/// Appends the decimal form of `v` (what both Java and JavaScript print for an integer).
pub(crate) fn write_i64(dst: &mut BytesMut, v: i64) {
    dst.put_slice(itoa::Buffer::new().format(v).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(s: &str) -> String {
        let mut dst = BytesMut::new();
        write_str(&mut dst, s);
        String::from_utf8(dst.to_vec()).expect("writer output is UTF-8")
    }

    #[test]
    fn given_special_characters_when_writing_string_should_produce_json_that_round_trips() {
        for s in [
            "",
            "plain",
            "quote\" and backslash\\",
            "line\nbreak\ttab\r\u{8}\u{c}",
            "nul\u{0}\u{1f}",
            "unicode 中文 ✓",
            "\u{7f}",
        ] {
            let json = written(s);
            let back: String =
                serde_json::from_str(&json).expect("escaped output must be valid JSON");
            assert_eq!(back, s, "string must survive the hand-written escaper: {json}");
        }
    }

    #[test]
    fn given_extreme_integers_when_formatting_should_match_std() {
        for v in [0, 1, -1, 9, 10, 475, i64::from(i32::MIN), i64::MAX, i64::MIN] {
            let mut dst = BytesMut::new();
            write_i64(&mut dst, v);
            assert_eq!(&dst[..], v.to_string().as_bytes(), "decimal form of {v}");
        }
    }
}
