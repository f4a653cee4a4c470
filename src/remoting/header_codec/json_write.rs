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
mod tests;
