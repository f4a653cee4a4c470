//! Reading one segment's records back: recovery's scan, also used on live in-memory logs by the
//! loom models as the stand-in for "the memory a crash leaves".

use super::layout::{
    commit_crc_of, parse_word0, prep_crc, record_size, RECORD_HEADER, SEGMENT_HEADER,
};
use super::segment::Segment;
use crate::sync::Ordering;

/// One thing the scan found at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) at: usize,
    pub(crate) len: usize,
    pub(crate) kind: u16,
    pub(crate) stream: u64,
    pub(crate) claim: u64,
    pub(crate) state: State,
}

/// Whether a record with a valid header is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Its commit mark validates.
    Committed,
    /// No commit mark: its writer never finished (or abandoned it).
    Unmarked,
    /// A commit mark that does not validate: the record was damaged after it was written.
    Corrupt,
}

/// What a scan counted besides the records it reported.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Stretches that were no record: a reservation never written, a damaged header, garbage.
    pub(crate) regions: u64,
    /// Where the last record or non-zero byte ended: past it, the segment holds only zeros.
    pub(crate) used_end: usize,
}

/// Bytes compared at once when skipping zeros (a slice comparison: `memcmp`, fast in any
/// build). No header starts inside an all-zero chunk: a header's first word is not zero.
const ZERO_CHUNK: usize = 4096;
static ZEROS: [u8; ZERO_CHUNK] = [0; ZERO_CHUNK];

/// Scans `seg` from its first record to `end` (the sealed end, or the segment's size), calling
/// `visit` for every position whose header validates, in position order.
///
/// `trailing` says whether zero bytes after the last record count as a torn region (in a
/// sealed segment they were reserved; in an unsealed one they are free space). Bytes that
/// never validate are skipped 8 at a time ("resynchronising") until a header does: a header
/// validates only at the position and in the directory it was written for (`layout.rs`), so
/// nothing inside a payload is taken for a record.
///
/// # Safety
/// No thread writes `seg`'s payload bytes non-atomically while the scan runs: recovery (no
/// writer exists yet), or a heap segment (every access is atomic).
pub(crate) unsafe fn scan(
    seg: &Segment,
    end: usize,
    trailing: bool,
    mut visit: impl FnMut(Found),
) -> Tally {
    let mem = seg.mem();
    let end = end.min(mem.len());
    let mut tally = Tally::default();
    // The stretch being skipped, if any: whether it held a non-zero byte.
    let mut region: Option<bool> = None;
    let mut at = SEGMENT_HEADER;
    while at + RECORD_HEADER <= end {
        // Acquire: pairs with the writer's Release stores of `prep` and of the commit mark, so
        // the header words, the claim and the payload they cover are visible.
        let w3 = mem.word(at + 24).load(Ordering::Acquire);
        if let Some(found) = header_at(seg, at, end, w3) {
            let found = match found.state {
                State::Unmarked => found,
                _ => {
                    let commit = (w3 >> 32) as u32;
                    let prep = w3 as u32;
                    // SAFETY: the record is committed (its mark was loaded with Acquire) or
                    // damaged on disk; either way no writer touches it (function contract).
                    let sum = unsafe {
                        mem.with_bytes(at + RECORD_HEADER, found.len, |p| {
                            commit_crc_of(prep, found.claim, p)
                        })
                    };
                    let state = if sum == commit { State::Committed } else { State::Corrupt };
                    Found { state, ..found }
                }
            };
            if region.take().is_some() {
                tally.regions += 1;
            }
            visit(found);
            at += record_size(found.len);
            tally.used_end = at;
            continue;
        }
        // Relaxed: only whether the byte is zero matters, and the scan runs after the writers.
        let nonzero = mem.word(at).load(Ordering::Relaxed) != 0;
        region = Some(region.unwrap_or(false) | nonzero);
        at += 8;
        if nonzero {
            tally.used_end = at;
        } else if w3 == 0 {
            // Free space (the unused tail of a segment): skip whole zero chunks, which hold no
            // header, instead of testing every 8 bytes.
            while at + ZERO_CHUNK <= end && {
                // SAFETY: the function's contract: nobody writes these bytes meanwhile.
                unsafe { mem.with_bytes(at, ZERO_CHUNK, |b| b == &ZEROS[..]) }
            } {
                at += ZERO_CHUNK;
            }
        }
    }
    while at + 8 <= end {
        // Relaxed: as above.
        let nonzero = mem.word(at).load(Ordering::Relaxed) != 0;
        region = Some(region.unwrap_or(false) | nonzero);
        at += 8;
        if nonzero {
            tally.used_end = at;
        }
    }
    if let Some(nonzero) = region {
        if nonzero || trailing {
            tally.regions += 1;
        }
    }
    tally
}

/// The record whose header is at `at`, if its prepared header validates and it fits before
/// `end` (`state` is `Unmarked` when it has no commit mark, else still to be checked).
fn header_at(seg: &Segment, at: usize, end: usize, w3: u64) -> Option<Found> {
    let prep = w3 as u32;
    if prep == 0 {
        return None;
    }
    let mem = seg.mem();
    // Relaxed: ordered after the Acquire load of word 3 by the caller.
    let w0 = mem.word(at).load(Ordering::Relaxed);
    let (len, kind) = parse_word0(w0)?;
    let len = len as usize;
    if at.checked_add(record_size(len))? > end {
        return None;
    }
    // Relaxed: as above.
    let w1 = mem.word(at + 8).load(Ordering::Relaxed);
    if prep_crc(seg.id(), seg.seq(), at, w0, w1) != prep {
        return None;
    }
    // Relaxed: as above.
    let claim = mem.word(at + 16).load(Ordering::Relaxed);
    let state = if w3 >> 32 == 0 { State::Unmarked } else { State::Corrupt };
    Some(Found { at, len, kind, stream: w1, claim, state })
}
