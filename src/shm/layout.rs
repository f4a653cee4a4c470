//! The bytes in a segment: the segment header, the record header and their checksums.
//!
//! Everything is little-endian. A segment is a 128-byte header followed by records, each
//! 8-byte aligned:
//!
//! ```text
//!  segment header (128 B)
//!   0 magic "BAIJISEG"   8 version u32   12 header size u32   16 directory id [16]
//!  32 sequence u64      40 size u64     48 log name [16]     64 header CRC u32 (over 0..64)
//!  72 sealed end u64 (0: not sealed; written once, outside the CRC)   80..128 zero
//!
//!  record header (32 B), then the payload, zero-padded to 8 bytes
//!   word 0  payload length u32 | kind u16 << 32 | RECORD_MAGIC << 48
//!   word 1  stream u64
//!   word 2  claim u64
//!   word 3  prep u32 | commit u32 << 32
//! ```
//!
//! `prep` is the CRC-32 of (directory id, segment sequence, position, words 0 and 1): it makes
//! the header recognisable, and it validates only at the position it was written for, in the
//! directory it was written in, so no payload byte can pass for a header when recovery
//! resynchronises. `commit` is the CRC-32 seeded with `prep` over word 2 and the payload: the
//! record is complete when it validates. Neither is ever stored as 0 ([`nonzero`]), so a zero
//! half means "not written".

/// Magic at the start of every segment file.
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"BAIJISEG";
/// The segment format this build writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Bytes of the segment header; records start here.
pub(crate) const SEGMENT_HEADER: usize = 128;
/// Offset of the header CRC (it covers the bytes before it).
const HEADER_CRC_AT: usize = 64;
/// Offset of the sealed-end word.
pub(crate) const SEALED_END_AT: usize = 72;
/// Bytes of a record header.
pub(crate) const RECORD_HEADER: usize = 32;
/// The top 16 bits of a record's word 0.
pub(crate) const RECORD_MAGIC: u64 = 0xBA1A;
/// Longest log name (it is stored in the segment header).
pub(crate) const MAX_NAME: usize = 16;

/// A CRC that is never 0, so that 0 can mean "not written".
#[inline]
pub(crate) fn nonzero(crc: u32) -> u32 {
    if crc == 0 {
        1
    } else {
        crc
    }
}

/// Word 0 of a record header.
#[inline]
pub(crate) fn word0(len: u32, kind: u16) -> u64 {
    u64::from(len) | u64::from(kind) << 32 | RECORD_MAGIC << 48
}

/// The payload length and kind of a word 0, if it carries the record magic.
#[inline]
pub(crate) fn parse_word0(w0: u64) -> Option<(u32, u16)> {
    (w0 >> 48 == RECORD_MAGIC).then_some((w0 as u32, (w0 >> 32) as u16))
}

/// Bytes a record with `len` payload bytes takes in a segment.
#[inline]
pub(crate) fn record_size(len: usize) -> usize {
    RECORD_HEADER + len.div_ceil(8) * 8
}

/// The `prep` half of word 3 for a header at `at` of segment `seq` in directory `id`.
#[inline]
pub(crate) fn prep_crc(id: &[u8; 16], seq: u64, at: usize, w0: u64, w1: u64) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(id);
    h.update(&seq.to_le_bytes());
    h.update(&(at as u64).to_le_bytes());
    h.update(&w0.to_le_bytes());
    h.update(&w1.to_le_bytes());
    nonzero(h.finalize())
}

/// The `commit` half of word 3, from `prep`, the claim and the payload's own CRC state
/// (`body`, a hasher fed with the payload and nothing else).
#[inline]
pub(crate) fn commit_crc(prep: u32, claim: u64, body: &crc32fast::Hasher) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(prep);
    h.update(&claim.to_le_bytes());
    h.combine(body);
    nonzero(h.finalize())
}

/// [`commit_crc`] over a payload in one piece (recovery).
#[inline]
pub(crate) fn commit_crc_of(prep: u32, claim: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(prep);
    h.update(&claim.to_le_bytes());
    h.update(payload);
    nonzero(h.finalize())
}

/// Fields of a segment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub(crate) version: u32,
    pub(crate) id: [u8; 16],
    pub(crate) seq: u64,
    pub(crate) size: u64,
    pub(crate) name: [u8; MAX_NAME],
}

/// Why a segment header was not accepted.
#[cfg(not(loom))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderFault {
    /// Not a segment at all, or its header was overwritten.
    Magic,
    /// The header's checksum does not match: overwritten or torn.
    Checksum,
    /// Written by another format version.
    Version(u32),
}

impl SegmentHeader {
    /// The header's bytes, CRC included (the sealed-end word and the rest are zero).
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER] {
        let mut b = [0u8; SEGMENT_HEADER];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(SEGMENT_HEADER as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.id);
        b[32..40].copy_from_slice(&self.seq.to_le_bytes());
        b[40..48].copy_from_slice(&self.size.to_le_bytes());
        b[48..64].copy_from_slice(&self.name);
        let crc = crc32fast::hash(&b[..HEADER_CRC_AT]);
        b[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a header (the checksum first, then the version: a header of another version is
    /// reported as such only if its bytes are intact).
    #[cfg(not(loom))]
    pub(crate) fn decode(b: &[u8; SEGMENT_HEADER]) -> Result<Self, HeaderFault> {
        if b[0..8] != SEGMENT_MAGIC {
            return Err(HeaderFault::Magic);
        }
        let crc = u32::from_le_bytes([b[64], b[65], b[66], b[67]]);
        if crc32fast::hash(&b[..HEADER_CRC_AT]) != crc {
            return Err(HeaderFault::Checksum);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let version = u32_at(8);
        if version != FORMAT_VERSION || u32_at(12) as usize != SEGMENT_HEADER {
            return Err(HeaderFault::Version(version));
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[16..32]);
        let mut name = [0u8; MAX_NAME];
        name.copy_from_slice(&b[48..64]);
        Ok(SegmentHeader { version, id, seq: u64_at(32), size: u64_at(40), name })
    }
}

/// A log name as stored in a segment header (zero-padded).
pub(crate) fn name_bytes(name: &str) -> [u8; MAX_NAME] {
    let mut b = [0u8; MAX_NAME];
    let n = name.len().min(MAX_NAME);
    b[..n].copy_from_slice(&name.as_bytes()[..n]);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_crc_from_a_combined_body_equals_the_crc_recovery_computes() {
        for len in [0usize, 1, 7, 8, 9, 128, 4096, 5000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let mut body = crc32fast::Hasher::new();
            body.update(&payload[..len / 2]);
            body.update(&payload[len / 2..]);
            assert_eq!(
                commit_crc(0x1234_5678, 42, &body),
                commit_crc_of(0x1234_5678, 42, &payload),
                "the writer's combined CRC must be the one recovery recomputes (len {len})"
            );
        }
    }

    #[test]
    fn a_header_validates_only_at_its_own_position_and_directory() {
        let id = [7u8; 16];
        let (w0, w1) = (word0(100, 3), 99);
        let p = prep_crc(&id, 5, 128, w0, w1);
        assert_ne!(p, prep_crc(&id, 5, 136, w0, w1), "another position gives another prep");
        assert_ne!(p, prep_crc(&id, 6, 128, w0, w1), "another segment gives another prep");
        assert_ne!(p, prep_crc(&[8u8; 16], 5, 128, w0, w1), "another directory too");
    }

    #[test]
    fn segment_header_round_trips_and_rejects_damage() {
        let h = SegmentHeader {
            version: FORMAT_VERSION,
            id: [1; 16],
            seq: 9,
            size: 1 << 20,
            name: name_bytes("messages"),
        };
        let mut b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h.clone()), "a header decodes to itself");
        b[33] ^= 1;
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderFault::Checksum), "a flipped bit is seen");
        b[0] = b'X';
        assert_eq!(SegmentHeader::decode(&b), Err(HeaderFault::Magic), "no magic, no segment");
        let mut v = SegmentHeader { version: 2, ..h }.encode();
        assert_eq!(SegmentHeader::decode(&v), Err(HeaderFault::Version(2)), "other versions");
        v[SEALED_END_AT] = 0xff;
        assert_eq!(
            SegmentHeader::decode(&v),
            Err(HeaderFault::Version(2)),
            "the sealed end is outside the CRC"
        );
    }

    #[test]
    fn word0_carries_length_kind_and_magic() {
        assert_eq!(parse_word0(word0(4096, 7)), Some((4096, 7)));
        assert_eq!(parse_word0(0), None, "a zero word is no header");
        assert_eq!(record_size(0), 32);
        assert_eq!(record_size(1), 40);
        assert_eq!(record_size(128), 160);
    }
}
