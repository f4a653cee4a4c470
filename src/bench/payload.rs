//! The stamp at the start of every benchmark payload, and the clock it is measured on.
//!
//! ```text
//! 0        4          8                 16               24
//! | magic  | producer | sequence        | sent at (ns)   | padding to --size ...
//! ```
//! Big-endian. `sent at` counts nanoseconds since the process-wide [`anchor`], so producer and
//! consumer, both in this process, read one monotonic clock.

use std::sync::OnceLock;
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes of the stamp.
pub const STAMP_LEN: usize = 24;

const MAGIC: u32 = 0xBA11_B3C4;

/// What a payload says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Producer lane that sent it.
    pub producer: u32,
    /// Its sequence number on that lane, from 0.
    pub seq: u64,
    /// When it was sent, nanoseconds since the anchor.
    pub sent_ns: u64,
}

fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

/// Nanoseconds since the process-wide anchor.
#[must_use]
pub fn now_ns() -> u64 {
    u64::try_from(anchor().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A payload of `size` bytes (at least [`STAMP_LEN`]) carrying `stamp`.
#[must_use]
pub fn stamp(s: Stamp, size: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(size.max(STAMP_LEN));
    b.put_u32(MAGIC);
    b.put_u32(s.producer);
    b.put_u64(s.seq);
    b.put_u64(s.sent_ns);
    b.resize(size.max(STAMP_LEN), b'x');
    b.freeze()
}

/// Reads the stamp of a payload; `None` if it is not one of ours.
#[must_use]
pub fn read(payload: &[u8]) -> Option<Stamp> {
    let head: &[u8; STAMP_LEN] = payload.get(..STAMP_LEN)?.try_into().ok()?;
    let u32_at = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&head[i..i + 8]);
        u64::from_be_bytes(a)
    };
    if u32_at(0) != MAGIC {
        return None;
    }
    Some(Stamp { producer: u32_at(4), seq: u64_at(8), sent_ns: u64_at(16) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_round_trips_and_pads_to_size() {
        let s = Stamp { producer: 7, seq: 1 << 40, sent_ns: 123_456_789 };
        let p = stamp(s, 128);
        assert_eq!(p.len(), 128, "payload must have the requested size");
        assert_eq!(read(&p), Some(s), "the stamp must read back unchanged");
        assert_eq!(read(&p[..10]), None, "a short payload has no stamp");
        assert_eq!(read(&[0u8; 32]), None, "a foreign payload has no stamp");
    }
}
