//! The log: the current segment, the switch to the next one, appends and maintenance (see the
//! module essay in `mod.rs`).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_epoch::{Atomic, Collector, Guard, Shared as EpochShared};
use crossbeam_utils::CachePadded;

use super::layout::{commit_crc, prep_crc, record_size, word0, RECORD_HEADER, SEGMENT_HEADER};
use super::segment::{payload_bytes, Counters, SegPtr, Segment, Shared};
use super::{LogConfig, LogStats, Position, Reclaim, RecordMeta, SegmentError};
use crate::sync::plain::{AtomicBool as PlainBool, Ordering as PlainOrdering};
use crate::sync::{lock, mutant, Arc, Mutex, Ordering};

/// Where new segments come from.
pub(crate) enum Source {
    /// Heap memory (loom models, unit tests of the protocol): nothing persists.
    #[cfg(any(test, loom))]
    Heap,
    /// Files in a directory.
    #[cfg(not(loom))]
    Files(super::dir::Files),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(any(test, loom))]
            Source::Heap => f.write_str("Heap"),
            #[cfg(not(loom))]
            Source::Files(files) => files.fmt(f),
        }
    }
}

impl Source {
    /// A new, empty segment holding one reference (the log's hold).
    fn create(
        &self,
        seq: u64,
        config: &LogConfig,
        shared: &Arc<Shared>,
    ) -> Result<SegPtr, SegmentError> {
        match self {
            #[cfg(any(test, loom))]
            Source::Heap => {
                use super::layout::{name_bytes, SegmentHeader, FORMAT_VERSION};
                let mem = super::memory::Memory::heap(config.segment_size);
                let header = SegmentHeader {
                    version: FORMAT_VERSION,
                    id: shared.id,
                    seq,
                    size: config.segment_size as u64,
                    name: name_bytes("heap"),
                };
                // SAFETY: nobody else sees `mem` yet.
                unsafe { mem.write(0, &[&header.encode()]) };
                Ok(Segment::create(mem, seq, shared, None, super::segment::REFERENCE))
            }
            #[cfg(not(loom))]
            Source::Files(files) => files.create(seq, config, shared),
        }
    }
}

/// What recovery found, kept for [`Log::stats`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Recovery {
    pub(crate) records: u64,
    pub(crate) torn: u64,
    pub(crate) regions: u64,
    pub(crate) quarantined: u64,
    pub(crate) elapsed: Duration,
}

/// The switch's state, under its mutex.
struct Switch {
    /// The segment made ahead of need.
    spare: Option<SegPtr>,
    /// The sequence the next new segment gets.
    next_seq: u64,
    /// Replaced segments whose hold the log keeps until `truncate_before` ([`Reclaim::OnTruncate`];
    /// recovered ones included), oldest first.
    held: VecDeque<SegPtr>,
}

pub(crate) struct LogInner {
    shared: Arc<Shared>,
    collector: Collector,
    /// The segment appends go to. Never null while the log is open; the segment it names
    /// holds the log's hold.
    current: CachePadded<Atomic<Segment>>,
    switch: Mutex<Switch>,
    config: LogConfig,
    source: Source,
    closed: PlainBool,
    /// Tells the maintenance thread to end.
    #[cfg(not(loom))]
    stop: PlainBool,
    recovery: Recovery,
}

impl std::fmt::Debug for LogInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("source", &self.source)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A log of records in segments. See the [module docs](super).
#[derive(Debug)]
pub struct Log {
    inner: Arc<LogInner>,
    #[cfg(not(loom))]
    maintainer: Option<std::thread::JoinHandle<()>>,
}

/// A record reserved and filled but not yet committed: recovery counts it as torn until
/// [`commit`](Self::commit). Dropping it abandons the record (its space stays used until its
/// segment is freed).
pub struct Reservation {
    seg: SegPtr,
    at: usize,
    prep: u32,
    claim: u64,
    body: crc32fast::Hasher,
    payload: Bytes,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("position", &self.position())
            .field("claim", &self.claim)
            .field("len", &self.payload.len())
            .finish()
    }
}

impl Reservation {
    fn segment(&self) -> &Segment {
        // SAFETY: `self.payload` owns one of the segment's references for as long as `self`
        // lives.
        unsafe { self.seg.get() }
    }

    /// Where the record is.
    pub fn position(&self) -> Position {
        Position { segment: self.segment().seq(), offset: self.at as u32 }
    }

    /// The record's payload, over the segment's memory (clones share it; the record's space
    /// stays referenced until the last clone is dropped).
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The claim stored last.
    pub fn claim(&self) -> u64 {
        self.claim
    }

    /// Stores a new claim (e.g. the queue offset the caller is about to take). Stored before
    /// the caller's own Release publication, it is in every memory image that has the
    /// publication (S3), so recovery can report it even if the record is never committed.
    pub fn set_claim(&mut self, claim: u64) {
        self.claim = claim;
        // Relaxed: published by the caller's next Release operation (the queue's publishing
        // CAS), which program order puts after this store (S3).
        self.segment().mem().word(self.at + 16).store(claim, Ordering::Relaxed);
    }

    /// Marks the record complete and returns its payload. From here on a crash keeps it.
    pub fn commit(self) -> Bytes {
        let commit = commit_crc(self.prep, self.claim, &self.body);
        let word = u64::from(commit) << 32 | u64::from(self.prep);
        let order = if mutant("commit_relaxed") { Ordering::Relaxed } else { Ordering::Release };
        // Release: pairs with the scan's Acquire load of word 3, so whoever sees the mark sees
        // the header, the claim and the payload it covers (S2).
        self.segment().mem().word(self.at + 24).store(word, order);
        self.payload
    }
}

impl LogInner {
    /// Fills the reserved range `at..` of `seg` and hands the reservation's reference to the
    /// record's `Bytes`.
    fn fill(
        &self,
        seg: SegPtr,
        at: usize,
        meta: RecordMeta,
        parts: &[&[u8]],
        len: usize,
    ) -> Reservation {
        // SAFETY: the reservation that returned `at` gave us one of the segment's references.
        let s = unsafe { seg.get() };
        let mem = s.mem();
        let (w0, w1) = (word0(len as u32, meta.kind), meta.stream);
        // Relaxed (the three): published by the Release store of `prep` below.
        mem.word(at).store(w0, Ordering::Relaxed);
        mem.word(at + 8).store(w1, Ordering::Relaxed);
        mem.word(at + 16).store(meta.claim, Ordering::Relaxed);
        let prep = prep_crc(s.id(), s.seq(), at, w0, w1);
        // Release: pairs with the scan's Acquire load of word 3: a recognisable header has its
        // length, kind, stream and first claim.
        mem.word(at + 24).store(u64::from(prep), Ordering::Release);
        // SAFETY: the reservation owns `at..at + record_size(len)` (S1), and no reader reaches
        // the payload before we hand out its `Bytes` below.
        unsafe { mem.write(at + RECORD_HEADER, parts) };
        let mut body = crc32fast::Hasher::new();
        for p in parts {
            body.update(p);
        }
        // SAFETY: we hand over the reservation's reference; the payload is written and no one
        // writes it again.
        let payload = unsafe { payload_bytes(seg, at + RECORD_HEADER, len) };
        Counters::add(&self.shared.counters.appended, 1);
        Reservation { seg, at, prep, claim: meta.claim, body, payload }
    }

    /// `full` did not take a reservation: make sure a newer segment is current (under the
    /// switch mutex: only one writer makes the switch, the others find it made).
    fn switch_from(&self, full: SegPtr, guard: &Guard) -> Result<(), SegmentError> {
        let mut sw = lock(&self.switch);
        // Acquire: pairs with the Release store below (by an earlier switcher).
        if self.current.load(Ordering::Acquire, guard).as_raw() != full.as_ptr() {
            return Ok(());
        }
        // Acquire: pairs with the Release store in `close`.
        if self.closed.load(PlainOrdering::Acquire) {
            return Err(SegmentError::Closed);
        }
        let next = match sw.spare.take() {
            Some(s) => s,
            None => {
                let s = self.source.create(sw.next_seq, &self.config, &self.shared)?;
                sw.next_seq += 1;
                s
            }
        };
        // Release: pairs with the Acquire load of `current` in `append` (and above): a writer
        // that finds the new segment finds it initialised.
        self.current.store(EpochShared::from(next.as_ptr()), Ordering::Release);
        match self.config.reclaim {
            Reclaim::WhenUnreferenced => release_hold(full, guard),
            Reclaim::OnTruncate => sw.held.push_back(full),
        }
        drop(sw);
        self.spare_wanted();
        Ok(())
    }

    /// The spare was used: have the maintenance thread make the next one, or make it here.
    fn spare_wanted(&self) {
        #[cfg(not(loom))]
        if self.config.maintenance_thread {
            if let Some(t) = lock(&self.shared.maintainer).as_ref() {
                t.unpark();
                return;
            }
        }
        // Without a maintenance thread the switching writer pays; an error is met again (and
        // returned) at the next switch.
        let _ = self.ensure_spare();
    }

    fn ensure_spare(&self) -> Result<(), SegmentError> {
        let mut sw = lock(&self.switch);
        // Acquire: pairs with the Release store in `close`.
        if sw.spare.is_some() || self.closed.load(PlainOrdering::Acquire) {
            return Ok(());
        }
        let s = self.source.create(sw.next_seq, &self.config, &self.shared)?;
        sw.next_seq += 1;
        sw.spare = Some(s);
        Ok(())
    }

    fn maintain(&self) -> Result<u64, SegmentError> {
        let freed = self.shared.free_retired();
        self.ensure_spare()?;
        Ok(freed)
    }
}

/// Gives the log's hold on `seg` back once no writer that could have loaded it as `current`
/// is still pinned (S4).
fn release_hold(seg: SegPtr, guard: &Guard) {
    if mutant("hold_released_early") {
        // The bug: a writer that loaded `current` before the switch may still add a
        // reference to a segment whose count already reached its end.
        // SAFETY: the hold is ours (this is the mutant's bug, not its safety).
        unsafe { seg.get() }.release();
        return;
    }
    guard.defer(move || {
        // SAFETY: the hold is still held: this is its release.
        unsafe { seg.get() }.release();
    });
}

impl Log {
    /// Starts a log over `source`: `held` are recovered segments kept until truncation, the
    /// first new segment gets `first_seq`.
    pub(crate) fn start(
        shared: Arc<Shared>,
        collector: Collector,
        config: LogConfig,
        source: Source,
        first_seq: u64,
        held: Vec<SegPtr>,
        recovery: Recovery,
    ) -> Result<Log, SegmentError> {
        let first = source.create(first_seq, &config, &shared)?;
        let inner = Arc::new(LogInner {
            shared,
            collector,
            current: CachePadded::new(Atomic::null()),
            switch: Mutex::new(Switch { spare: None, next_seq: first_seq + 1, held: held.into() }),
            config,
            source,
            closed: PlainBool::new(false),
            #[cfg(not(loom))]
            stop: PlainBool::new(false),
            recovery,
        });
        // Release: the log is shared by whatever moves it to other threads; this pairs with
        // the Acquire loads of `current` all the same.
        inner.current.store(EpochShared::from(first.as_ptr()), Ordering::Release);
        #[cfg(not(loom))]
        let maintainer =
            if inner.config.maintenance_thread { Some(spawn_maintainer(&inner)?) } else { None };
        Ok(Log {
            inner,
            #[cfg(not(loom))]
            maintainer,
        })
    }

    /// A log in heap memory, for the loom models and the protocol's unit tests: nothing
    /// persists, and [`scan`](Self::scan) reads it while writers run.
    ///
    /// # Errors
    /// [`SegmentError::InvalidConfig`].
    #[cfg(any(test, loom))]
    pub fn in_memory(config: LogConfig, collector: Collector) -> Result<Log, SegmentError> {
        validate(&config)?;
        let config = LogConfig { maintenance_thread: false, ..config };
        Log::start(
            Shared::new([0x5a; 16]),
            collector,
            config,
            Source::Heap,
            1,
            Vec::new(),
            Recovery::default(),
        )
    }

    /// The epoch collector whose guards [`append`](Self::append) takes.
    pub fn collector(&self) -> &Collector {
        &self.inner.collector
    }

    /// The largest payload one record can carry.
    pub fn max_payload(&self) -> usize {
        self.inner.config.segment_size - SEGMENT_HEADER - RECORD_HEADER
    }

    /// Reserves a record for the concatenation of `parts`, writes its header and payload, and
    /// returns the reservation, to [`commit`](Reservation::commit) once the caller has done
    /// what must precede it (e.g. [`set_claim`](Reservation::set_claim) and linking the
    /// message). Lock-free, except for the switch to a new segment (once per segment).
    ///
    /// # Errors
    /// [`SegmentError::ForeignGuard`] if `guard` was not pinned in [`collector`](Self::collector);
    /// [`SegmentError::RecordTooLarge`]; [`SegmentError::Closed`]; [`SegmentError::Io`] if a new
    /// segment was needed and could not be made (a full tmpfs).
    pub fn append(
        &self,
        meta: RecordMeta,
        parts: &[&[u8]],
        guard: &Guard,
    ) -> Result<Reservation, SegmentError> {
        let inner = &*self.inner;
        if guard.collector() != Some(&inner.collector) {
            return Err(SegmentError::ForeignGuard);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_payload() {
            return Err(SegmentError::RecordTooLarge { len, limit: self.max_payload() });
        }
        // Relaxed: a best-effort refusal; an append racing `close` may still land (it is kept).
        if inner.closed.load(PlainOrdering::Relaxed) {
            return Err(SegmentError::Closed);
        }
        let units = (record_size(len) / 8) as u64;
        loop {
            // Acquire: pairs with the Release store of a new segment in `switch_from`.
            let cur = inner.current.load(Ordering::Acquire, guard);
            // The pointer is never null while the log is open (`&self` keeps it open).
            // SAFETY: the segment named by `current` holds the log's hold, whose release is
            // deferred through the epoch past `guard` once it is replaced (S4).
            let Some(seg) = (unsafe { SegPtr::from_ptr(cur.as_raw()) }) else {
                return Err(SegmentError::Closed);
            };
            // SAFETY: as above.
            let s = unsafe { seg.get() };
            match s.reserve(units) {
                Ok(at) => return Ok(inner.fill(seg, at, meta, parts, len)),
                Err(_) => inner.switch_from(seg, guard)?,
            }
        }
    }

    /// Where the next record would go: records reserved before this call are before it (a
    /// snapshot's cut).
    ///
    /// # Errors
    /// [`SegmentError::ForeignGuard`], [`SegmentError::Closed`].
    pub fn position(&self, guard: &Guard) -> Result<Position, SegmentError> {
        if guard.collector() != Some(&self.inner.collector) {
            return Err(SegmentError::ForeignGuard);
        }
        // Acquire: pairs with the Release store in `switch_from`.
        let cur = self.inner.current.load(Ordering::Acquire, guard);
        // SAFETY: as in `append`.
        let Some(seg) = (unsafe { SegPtr::from_ptr(cur.as_raw()) }) else {
            return Err(SegmentError::Closed);
        };
        // SAFETY: as in `append`.
        let s = unsafe { seg.get() };
        Ok(Position { segment: s.seq(), offset: s.tail() as u32 })
    }

    /// Gives back the log's hold on every segment before `segment` ([`Reclaim::OnTruncate`]):
    /// each is freed once the records' `Bytes` still referring to it are dropped. A no-op for
    /// [`Reclaim::WhenUnreferenced`] logs, which hold no replaced segment.
    ///
    /// # Errors
    /// [`SegmentError::ForeignGuard`].
    pub fn truncate_before(&self, segment: u64, guard: &Guard) -> Result<u64, SegmentError> {
        if guard.collector() != Some(&self.inner.collector) {
            return Err(SegmentError::ForeignGuard);
        }
        let mut sw = lock(&self.inner.switch);
        let mut n = 0;
        while let Some(&seg) = sw.held.front() {
            // SAFETY: the log's hold on it is still held (it is in `held`).
            if unsafe { seg.get() }.seq() >= segment {
                break;
            }
            sw.held.pop_front();
            release_hold(seg, guard);
            n += 1;
        }
        Ok(n)
    }

    /// Frees the segments whose last reference is gone (unmaps them, removes their files) and
    /// makes the spare segment if there is none. The maintenance thread does this by itself;
    /// without it, call it now and then (the engine's reaper will). Returns the segments freed.
    ///
    /// # Errors
    /// [`SegmentError::Io`] if the spare could not be made (what was retired is freed anyway).
    pub fn maintain(&self) -> Result<u64, SegmentError> {
        self.inner.maintain()
    }

    /// Stops appends (they get [`SegmentError::Closed`]) and keeps every file from now on:
    /// dropping records after this never removes a segment (an orderly shutdown drops its
    /// handles without meaning that the records are dead). Dropping the log closes it.
    pub fn close(&self) {
        // Release: pairs with the Acquire loads in `switch_from` and `ensure_spare`.
        self.inner.closed.store(true, PlainOrdering::Release);
        self.inner.shared.close();
    }

    /// The log's counters.
    pub fn stats(&self) -> LogStats {
        let c = &self.inner.shared.counters;
        let r = &self.inner.recovery;
        LogStats {
            mapped_bytes: Counters::get(&c.mapped_bytes),
            live_segments: Counters::get(&c.live_segments),
            freed_segments: Counters::get(&c.freed_segments),
            freed_bytes: Counters::get(&c.freed_bytes),
            appended_records: Counters::get(&c.appended),
            recovered_records: r.records,
            torn_records: r.torn,
            torn_regions: r.regions,
            quarantined_segments: r.quarantined,
            recovery_time: r.elapsed,
            unlink_failures: Counters::get(&c.unlink_failures),
        }
    }

    /// Scans every segment the log still holds (the current one, and those kept for
    /// truncation) as recovery would after a crash now, without taking references: payloads
    /// are copies. For the loom models (the crash image, read while writers run) and tests.
    ///
    /// # Errors
    /// [`SegmentError::ForeignGuard`].
    ///
    /// # Panics
    /// On a file-backed log with appends running (the scan would race their payload copies):
    /// use it on [`in_memory`](Self::in_memory) logs, or when no append runs.
    #[cfg(any(test, loom))]
    pub fn scan(
        &self,
        guard: &Guard,
        mut visit: impl FnMut(super::Recovered),
    ) -> Result<(), SegmentError> {
        if guard.collector() != Some(&self.inner.collector) {
            return Err(SegmentError::ForeignGuard);
        }
        let mut segs: Vec<SegPtr> = lock(&self.inner.switch).held.iter().copied().collect();
        // Acquire: pairs with the Release store in `switch_from`.
        let cur = self.inner.current.load(Ordering::Acquire, guard);
        // SAFETY: as in `append`.
        segs.extend(unsafe { SegPtr::from_ptr(cur.as_raw()) });
        for seg in segs {
            // SAFETY: a segment that was held or current when we looked keeps the log's hold
            // at least until `guard` is dropped: `truncate_before` and the switch give the
            // hold back through the epoch (S4).
            let s = unsafe { seg.get() };
            // SAFETY: heap segments are only accessed atomically (the documented use).
            unsafe { super::recover::visit_segment(s, false, &mut visit) };
        }
        Ok(())
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        // Let deferred hold releases run while the files may still be removed: a segment that
        // died before the shutdown should not outlive it.
        for _ in 0..3 {
            self.inner.collector.register().pin().flush();
        }
        let _ = self.inner.shared.free_retired();
        self.close();
        #[cfg(not(loom))]
        if let Some(h) = self.maintainer.take() {
            // Release: pairs with the Acquire load in the maintenance loop.
            self.inner.stop.store(true, PlainOrdering::Release);
            h.thread().unpark();
            let _ = h.join();
        }
        // No append can run any more (we are the last handle and the maintenance thread is
        // gone), so the holds are given back directly, not through the epoch.
        let guard = &self.inner.collector.register().pin();
        // AcqRel: pairs with the Release store of the last switch (we give its segment's hold
        // back, so we must see it initialised); nobody loads `current` after this.
        let cur = self.inner.current.swap(EpochShared::null(), Ordering::AcqRel, guard);
        let mut sw = lock(&self.inner.switch);
        let mut holds: Vec<SegPtr> = sw.held.drain(..).collect();
        // SAFETY: `current` named a live segment holding the log's hold, now ours to give back.
        holds.extend(unsafe { SegPtr::from_ptr(cur.as_raw()) });
        if let Some(spare) = sw.spare.take() {
            #[cfg(not(loom))]
            // SAFETY: the spare holds the log's hold and nothing else: no record is in it.
            if let Some(f) = unsafe { spare.get() }.file() {
                let _ = std::fs::remove_file(f);
            }
            holds.push(spare);
        }
        drop(sw);
        for seg in holds {
            // SAFETY: each is one hold of the log, released exactly once, here.
            unsafe { seg.get() }.release();
        }
    }
}

#[cfg(not(loom))]
fn spawn_maintainer(inner: &Arc<LogInner>) -> Result<std::thread::JoinHandle<()>, SegmentError> {
    let inner = Arc::clone(inner);
    std::thread::Builder::new()
        .name("baiji-shm".into())
        .spawn(move || {
            *lock(&inner.shared.maintainer) = Some(std::thread::current());
            // Acquire: pairs with the Release store in `Log::drop`.
            while !inner.stop.load(PlainOrdering::Acquire) {
                // An error (no room for the spare) is met again by the next switch, which
                // returns it to its writer.
                let _ = inner.maintain();
                std::thread::park_timeout(Duration::from_millis(100));
            }
            *lock(&inner.shared.maintainer) = None;
        })
        .map_err(|e| {
            SegmentError::InvalidConfig(format!("cannot spawn the maintenance thread: {e}"))
        })
}

/// Checks a configuration.
pub(crate) fn validate(config: &LogConfig) -> Result<(), SegmentError> {
    let s = config.segment_size;
    let ok = if cfg!(loom) {
        s % 8 == 0 && s >= SEGMENT_HEADER + 64
    } else {
        s % 4096 == 0 && (8 << 10..=1 << 30).contains(&s)
    };
    if ok {
        Ok(())
    } else {
        let want = if cfg!(loom) {
            "a multiple of 8 from 192 bytes"
        } else {
            "a multiple of 4096 from 8 KiB to 1 GiB"
        };
        Err(SegmentError::InvalidConfig(format!("segment_size {s}: {want}")))
    }
}
