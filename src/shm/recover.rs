//! Turning what the scan finds in one segment into [`Recovered`] items.

use bytes::Bytes;

use super::layout::{RECORD_HEADER, SEGMENT_HEADER};
use super::scan::{scan, State};
use super::segment::{payload_bytes, SegPtr, Segment};
use super::{Position, Record, Recovered, TornRecord};

/// What one segment held.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentTally {
    pub(crate) records: u64,
    pub(crate) torn: u64,
    pub(crate) corrupt: u64,
    pub(crate) regions: u64,
    /// Where the last record or non-zero byte ended: only zeros follow.
    pub(crate) used_end: usize,
}

impl SegmentTally {
    /// Whether the segment held nothing at all (no record, nothing torn, no garbage).
    #[cfg(not(loom))]
    pub(crate) fn is_empty(&self) -> bool {
        SegmentTally { used_end: 0, ..*self } == SegmentTally::default()
    }
}

/// Visits every record of `seg` in position order. With `take_references`, each record's
/// payload is a `Bytes` over the segment owning a new reference (recovery); without, a copy
/// (a scan of a live log).
///
/// # Safety
/// As [`scan`]: no thread writes the segment's payloads non-atomically meanwhile.
pub(crate) unsafe fn visit_segment(
    seg: &Segment,
    take_references: bool,
    visit: &mut dyn FnMut(Recovered),
) -> SegmentTally {
    let size = seg.size();
    let hint = seg.sealed_end();
    // The sealed end is outside the header's CRC: trust it only if it is a possible end.
    let sealed = hint % 8 == 0 && hint >= SEGMENT_HEADER as u64 && hint <= size as u64;
    let end = if sealed { hint as usize } else { size };
    let mut t = SegmentTally::default();
    let seq = seg.seq();
    let on_found = |f: super::scan::Found| {
        let position = Position { segment: seq, offset: f.at as u32 };
        match f.state {
            State::Committed => {
                let at = f.at + RECORD_HEADER;
                let payload = if take_references {
                    seg.add_reference();
                    // SAFETY: we hand over the reference just added; a committed
                    // payload is never written again.
                    unsafe { payload_bytes(SegPtr::of(seg), at, f.len) }
                } else {
                    // SAFETY: committed (the scan loaded its mark with Acquire).
                    unsafe { seg.mem().with_bytes(at, f.len, Bytes::copy_from_slice) }
                };
                t.records += 1;
                visit(Recovered::Record(Record {
                    position,
                    kind: f.kind,
                    stream: f.stream,
                    claim: f.claim,
                    payload,
                }));
            }
            State::Unmarked | State::Corrupt => {
                let corrupt = f.state == State::Corrupt;
                if corrupt {
                    t.corrupt += 1;
                } else {
                    t.torn += 1;
                }
                visit(Recovered::Torn(TornRecord {
                    position,
                    kind: f.kind,
                    stream: f.stream,
                    claim: f.claim,
                    corrupt,
                }));
            }
        }
    };
    // SAFETY: the caller's contract is scan's.
    let tally = unsafe { scan(seg, end, sealed, on_found) };
    t.regions = tally.regions;
    t.used_end = tally.used_end;
    t
}
