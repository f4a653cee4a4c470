//! One segment: its memory, its reservation cursor and its reference count (see the module
//! essay in `mod.rs`, "Reservation" and "Reclamation").

use std::mem::ManuallyDrop;
use std::path::PathBuf;
use std::ptr::NonNull;

use bytes::Bytes;
use crossbeam_utils::CachePadded;

use super::layout::{SEALED_END_AT, SEGMENT_HEADER};
use super::memory::{Memory, PayloadSource};
use crate::sync::plain::{AtomicU64 as PlainU64, Ordering as PlainOrdering};
use crate::sync::{lock, mutant, Arc, AtomicU64, Mutex, Ordering};

/// One reference in the cursor word: the count lives in the bits above [`UNITS_BITS`].
pub(crate) const REFERENCE: u64 = 1 << UNITS_BITS;
/// Bits of the cursor word that count 8-byte units used. 2^36 units (512 GiB) leave room for
/// every reservation that overshoots a full segment (each writer overshoots a segment at most
/// once, by at most one record) above the largest segment (1 GiB).
const UNITS_BITS: u32 = 36;
const UNITS_MASK: u64 = REFERENCE - 1;

/// Counters of one log (statistics; Relaxed everywhere).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) mapped_bytes: PlainU64,
    pub(crate) live_segments: PlainU64,
    pub(crate) freed_segments: PlainU64,
    pub(crate) freed_bytes: PlainU64,
    pub(crate) appended: PlainU64,
    pub(crate) unlink_failures: PlainU64,
}

impl Counters {
    pub(crate) fn add(c: &PlainU64, n: u64) {
        // Relaxed: a statistic.
        c.fetch_add(n, PlainOrdering::Relaxed);
    }
    pub(crate) fn sub(c: &PlainU64, n: u64) {
        // Relaxed: a statistic.
        c.fetch_sub(n, PlainOrdering::Relaxed);
    }
    pub(crate) fn get(c: &PlainU64) -> u64 {
        // Relaxed: a statistic.
        c.load(PlainOrdering::Relaxed)
    }
}

/// What one log's segments share: the directory identity and the list of segments whose last
/// reference is gone.
pub(crate) struct Shared {
    pub(crate) id: [u8; 16],
    pub(crate) counters: Counters,
    retired: Mutex<Retired>,
    /// The maintenance thread, woken when a segment retires (not under loom).
    pub(crate) maintainer: Mutex<Option<std::thread::Thread>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("counters", &self.counters).finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Retired {
    /// Set by the log's `close`: from then on a last release unmaps and keeps the file.
    closed: bool,
    list: Vec<SegPtr>,
}

impl Shared {
    pub(crate) fn new(id: [u8; 16]) -> Arc<Self> {
        Arc::new(Shared {
            id,
            counters: Counters::default(),
            retired: Mutex::new(Retired::default()),
            maintainer: Mutex::new(None),
        })
    }

    /// A segment's last reference is gone: free it now if the log is closed, else leave it to
    /// the next [`free_retired`](Self::free_retired) (the log's maintenance).
    fn retire(&self, seg: SegPtr) {
        let mut r = lock(&self.retired);
        if r.closed {
            drop(r);
            // SAFETY: the last reference was just released, so nobody else can reach `seg`.
            unsafe { seg.free(false) };
            return;
        }
        r.list.push(seg);
        drop(r);
        if let Some(t) = lock(&self.maintainer).as_ref() {
            t.unpark();
        }
    }

    /// Unmaps and unlinks every retired segment; returns how many.
    pub(crate) fn free_retired(&self) -> u64 {
        let list = std::mem::take(&mut lock(&self.retired).list);
        let n = list.len() as u64;
        for seg in list {
            // SAFETY: a retired segment's last reference is gone and the list was its only
            // owner; taking it out of the list makes us that owner.
            unsafe { seg.free(true) };
        }
        n
    }

    /// From now on dropped records never delete a file (an orderly shutdown drops its handles
    /// without meaning that the records are dead). Segments retired before are still freed.
    pub(crate) fn close(&self) -> u64 {
        let list = {
            let mut r = lock(&self.retired);
            r.closed = true;
            std::mem::take(&mut r.list)
        };
        let n = list.len() as u64;
        for seg in list {
            // SAFETY: as in `free_retired`; these died while the log was open.
            unsafe { seg.free(true) };
        }
        n
    }
}

/// One segment (allocated by [`Segment::create`], freed by its last reference).
pub(crate) struct Segment {
    mem: Memory,
    seq: u64,
    /// 8-byte units of record space (the segment's size minus its header).
    cap_units: u64,
    /// References (bits above `UNITS_BITS`) and 8-byte units reserved (below).
    cursor: CachePadded<AtomicU64>,
    /// References given back.
    released: CachePadded<AtomicU64>,
    shared: ManuallyDrop<Arc<Shared>>,
    file: Option<PathBuf>,
    /// Under loom a freed segment is poisoned instead of deallocated, so that a late access
    /// fails the model instead of being undefined behaviour.
    #[cfg(loom)]
    freed: crate::sync::AtomicBool,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("seq", &self.seq)
            .field("size", &self.mem.len())
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// A counted reference to a segment, or (for the log's `current` pointer) an epoch-protected
/// one. Copying it does not count: each owner of a count releases it exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegPtr(NonNull<Segment>);

// SAFETY: a `SegPtr` is an address; the segment behind it is `Sync` (atomics, and fields that
// never change after creation) and lives until its last counted reference is released, which
// any thread may do.
unsafe impl Send for SegPtr {}
// SAFETY: as above; `&SegPtr` gives nothing but the address.
unsafe impl Sync for SegPtr {}

/// What [`Segment::reserve`] found when the record did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// This reservation crossed the end (exactly one does): it wrote the sealed end.
    Crossed,
    /// The segment was already full.
    Already,
}

impl Segment {
    /// A new segment over `mem`, holding `initial` in its cursor word: one reference per
    /// owner the caller hands out (the log's hold at least) and the units already used.
    pub(crate) fn create(
        mem: Memory,
        seq: u64,
        shared: &Arc<Shared>,
        file: Option<PathBuf>,
        initial: u64,
    ) -> SegPtr {
        let size = mem.len() as u64;
        let seg = Box::new(Segment {
            cap_units: (mem.len() - SEGMENT_HEADER) as u64 / 8,
            mem,
            seq,
            cursor: CachePadded::new(AtomicU64::new(initial)),
            released: CachePadded::new(AtomicU64::new(0)),
            shared: ManuallyDrop::new(Arc::clone(shared)),
            file,
            #[cfg(loom)]
            freed: crate::sync::AtomicBool::new(false),
        });
        Counters::add(&shared.counters.live_segments, 1);
        Counters::add(&shared.counters.mapped_bytes, size);
        SegPtr(NonNull::from(Box::leak(seg)))
    }

    /// The cursor word of a recovered segment, which takes no reservation: `refs`
    /// references, every unit used.
    #[cfg(not(loom))]
    pub(crate) fn sealed_cursor(refs: u64, size: usize) -> u64 {
        refs * REFERENCE + ((size - SEGMENT_HEADER) / 8) as u64 + 1
    }

    /// Under loom: fails the model if this segment was already freed.
    #[inline(always)]
    fn check_live(&self) {
        #[cfg(loom)]
        assert!(
            !self.freed.load(Ordering::SeqCst),
            "a freed segment (seq {}) was accessed: reclaimed while still referenced",
            self.seq
        );
    }

    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    pub(crate) fn id(&self) -> &[u8; 16] {
        &self.shared.id
    }

    pub(crate) fn size(&self) -> usize {
        self.mem.len()
    }

    /// The segment's file, if it has one.
    #[cfg(not(loom))]
    pub(crate) fn file(&self) -> Option<&std::path::Path> {
        self.file.as_deref()
    }

    pub(crate) fn mem(&self) -> &Memory {
        self.check_live();
        &self.mem
    }

    /// Reserves `units` 8-byte units and one reference with a single atomic add; returns the
    /// byte offset of the range it owns, or why it did not fit (its reference is then
    /// already given back).
    #[inline]
    pub(crate) fn reserve(&self, units: u64) -> Result<usize, Full> {
        self.check_live();
        // The mutant `reserve_no_reference`: the bug of a reservation that takes room but no
        // reference, so its segment can be freed while it is being filled.
        let add = if mutant("reserve_no_reference") { units } else { REFERENCE + units };
        let old = if mutant("reserve_split") {
            // The bug: a load and a store instead of one read-modify-write, so two writers can
            // both take the same range.
            let v = self.cursor.load(Ordering::Relaxed);
            crate::sync::spin_hint();
            self.cursor.store(v + add, Ordering::Relaxed);
            v
        } else {
            // Relaxed: the read-modify-write alone makes the ranges disjoint (they are cut
            // from one modification order). The counts it adds are read by the last release,
            // which happens after every reservation through the epoch and the `released`
            // chain (see `release`); the range's bytes are published by the commit mark.
            self.cursor.fetch_add(add, Ordering::Relaxed)
        };
        let used = old & UNITS_MASK;
        let fits = if mutant("reserve_past_end") {
            // The bug: a record that starts inside the segment is accepted even if it ends
            // past it.
            used < self.cap_units
        } else {
            used + units <= self.cap_units
        };
        if fits {
            return Ok(SEGMENT_HEADER + used as usize * 8);
        }
        let crossed = used <= self.cap_units;
        if crossed {
            // Relaxed: a hint for recovery (which runs after every writer is gone): every
            // reservation that fits ends at or before here.
            self.mem.word(SEALED_END_AT).store(SEGMENT_HEADER as u64 + used * 8, Ordering::Relaxed);
        }
        self.release();
        Err(if crossed { Full::Crossed } else { Full::Already })
    }

    /// Adds one reference to a segment that takes no reservations (recovery).
    pub(crate) fn add_reference(&self) {
        self.check_live();
        // Relaxed: recovery is single-threaded; whoever receives the reference gets it with
        // the record, through whatever hands the record over.
        self.cursor.fetch_add(REFERENCE, Ordering::Relaxed);
    }

    /// The sealed-end hint (0 when the segment was not sealed).
    pub(crate) fn sealed_end(&self) -> u64 {
        // Relaxed: read by recovery, after every writer is gone.
        self.mem().word(SEALED_END_AT).load(Ordering::Relaxed)
    }

    /// Where the next reservation would start, capped at the segment's end.
    pub(crate) fn tail(&self) -> usize {
        // Relaxed: a position for the caller's bookkeeping (a snapshot cut), not a claim on
        // the space; the records before it are those whose reservations it saw.
        let used = (self.cursor.load(Ordering::Relaxed) & UNITS_MASK).min(self.cap_units);
        SEGMENT_HEADER + used as usize * 8
    }

    /// Gives back one reference; the one that gives back the last retires the segment.
    ///
    /// While the log holds the segment (its hold is one of the references) the count of
    /// releases stays below the count of references, so no release but the last can see them
    /// equal; the hold is given back only when no writer can reach the segment any more
    /// (through the epoch), so after it the count of references no longer grows.
    pub(crate) fn release(&self) {
        self.check_live();
        // AcqRel: Release publishes this owner's reads of the segment to the last releaser
        // (which unmaps it); Acquire makes the last releaser see every earlier release and,
        // through the hold's release, every reservation (it is the RMW chain both pair with).
        let r = self.released.fetch_add(1, Ordering::AcqRel) + 1;
        // Acquire: pairs with nothing by itself; the chain above orders the reservations
        // before this load (see the function docs), so it reads their final count.
        let refs = self.cursor.load(Ordering::Acquire) >> UNITS_BITS;
        if r == refs {
            self.shared.retire(SegPtr::of(self));
        }
    }
}

impl SegPtr {
    /// The pointer to `seg` (counting nothing: the caller decides which reference it is).
    pub(crate) fn of(seg: &Segment) -> SegPtr {
        SegPtr(NonNull::from(seg))
    }

    /// The segment.
    ///
    /// # Safety
    /// The caller holds one of its references, or an epoch guard pinned while the segment
    /// was reachable from the log's `current` (the log's hold is released only through the
    /// epoch).
    #[inline]
    pub(crate) unsafe fn get<'a>(self) -> &'a Segment {
        // SAFETY: the function contract keeps the allocation alive for `'a`.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn as_ptr(self) -> *const Segment {
        self.0.as_ptr()
    }

    /// # Safety
    /// `p` came from [`SegPtr::as_ptr`] of a live segment (see [`get`](Self::get)).
    pub(crate) unsafe fn from_ptr(p: *const Segment) -> Option<SegPtr> {
        NonNull::new(p as *mut Segment).map(SegPtr)
    }

    /// Unmaps the segment and, if `unlink`, removes its file.
    ///
    /// # Safety
    /// The caller owns the segment: its last reference is gone and nobody else holds this
    /// pointer.
    unsafe fn free(self, unlink: bool) {
        // SAFETY: the caller owns the segment (function contract).
        let seg = unsafe { self.get() };
        let c = &seg.shared.counters;
        Counters::sub(&c.live_segments, 1);
        Counters::sub(&c.mapped_bytes, seg.mem.len() as u64);
        Counters::add(&c.freed_segments, 1);
        if unlink {
            Counters::add(&c.freed_bytes, seg.mem.len() as u64);
            if let Some(f) = &seg.file {
                if std::fs::remove_file(f).is_err() {
                    Counters::add(&c.unlink_failures, 1);
                }
            }
        }
        #[cfg(not(loom))]
        {
            // SAFETY: the allocation came from `Box::leak` in `create` and the caller owns it;
            // dropping it unmaps the memory and drops the `Shared` it held.
            let mut b = unsafe { Box::from_raw(self.0.as_ptr()) };
            // SAFETY: dropped exactly once, here.
            unsafe { ManuallyDrop::drop(&mut b.shared) };
        }
        #[cfg(loom)]
        {
            let was = seg.freed.swap(true, Ordering::SeqCst);
            assert!(!was, "a segment was freed twice: two releases both saw themselves last");
            // SAFETY: the caller owns the segment; the `Arc` is dropped once (the swap above
            // fails the model on a second free) and never touched again, so loom's leak check
            // sees every segment freed.
            unsafe { ManuallyDrop::drop(&mut (*self.0.as_ptr()).shared) };
        }
    }
}

/// The owner behind a record's `Bytes`: the payload's bytes and one reference to their
/// segment, given back when the last clone of the `Bytes` is dropped.
struct RecordOwner {
    seg: SegPtr,
    src: PayloadSource,
}

// SAFETY: the payload pointer is into a mapping that this owner's reference keeps alive, and
// the bytes behind it are never written again (a committed or reserved-and-filled record), so
// reading them from another thread is fine; releasing the reference is thread-safe.
unsafe impl Send for RecordOwner {}

impl AsRef<[u8]> for RecordOwner {
    fn as_ref(&self) -> &[u8] {
        match &self.src {
            #[cfg(not(loom))]
            // SAFETY: the reference this owner holds keeps the mapping alive, and the bytes
            // were written before the owner was made and are never written again.
            PayloadSource::Mapped(p, len) => unsafe { std::slice::from_raw_parts(*p, *len) },
            #[cfg(any(test, loom))]
            PayloadSource::Copied(v) => v,
        }
    }
}

impl Drop for RecordOwner {
    fn drop(&mut self) {
        // SAFETY: this owner holds one reference, given back exactly once, here.
        unsafe { self.seg.get() }.release();
    }
}

/// The payload `at..at + len` of `seg` as `Bytes`, owning one of the segment's references.
///
/// # Safety
/// The caller hands over one reference it holds, and the bytes are written and never written
/// again.
pub(crate) unsafe fn payload_bytes(seg: SegPtr, at: usize, len: usize) -> Bytes {
    // SAFETY: the caller holds a reference (function contract).
    let s = unsafe { seg.get() };
    // SAFETY: the bytes are written and immutable (function contract).
    let src = unsafe { s.mem().payload(at, len) };
    Bytes::from_owner(RecordOwner { seg, src })
}
