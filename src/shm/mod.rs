//! Shared-memory segments: a log of checksummed records in memory-mapped files that outlive
//! the process (issue 26; the design of all three phases is `docs/restarts.md`).
//!
//! This layer knows nothing of topics, queues or RocketMQ. It gives its caller (the engine,
//! from phase B on) four things: a [`Directory`] that one process at a time may open, logs in
//! it whose [`Log::append`] is lock-free and multi-writer, the recovery of every complete
//! record after a crash, and the return of a segment's memory once nothing refers to it.
//!
//! ```no_run
//! use baiji::shm::{Directory, LogConfig, Recovered, RecordMeta};
//! use crossbeam_epoch::Collector;
//!
//! # fn main() -> Result<(), baiji::shm::SegmentError> {
//! let dir = Directory::open("/dev/shm/baiji/example", "DefaultCluster/broker-a")?;
//! let mut kept = Vec::new();
//! let (log, report) = dir.open_log("messages", LogConfig::default(), Collector::new(), |r| {
//!     if let Recovered::Record(r) = r {
//!         kept.push(r); // its payload is a `Bytes` over the mapping, no copy
//!     }
//! })?;
//! println!("recovered {} records, skipped {} torn ones", report.records, report.torn_records);
//!
//! let handle = log.collector().register();
//! let guard = handle.pin();
//! let mut r = log.append(RecordMeta { kind: 1, stream: 7, claim: 0 }, &[b"hello"], &guard)?;
//! r.set_claim(42); // e.g. the queue offset, stored before the caller publishes it
//! let payload = r.commit(); // complete: recovered after a crash from here on
//! assert_eq!(&payload[..], b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! # The crash model
//!
//! The files live in a tmpfs directory: RAM, whose pages the kernel keeps when the process
//! dies. A `kill -9` stops every thread at some point of its program; every store a thread
//! performed before that point is in the pages, and a store is performed no later than any
//! store that follows it with Release ordering. Recovery therefore sees, for each writer, a
//! prefix of its stores in the order this module's Release stores impose, and the loom models
//! stand for it with a thread that scans the memory while the writers run. (On a disk, the
//! kernel's writeback keeps what reached it: the checksums still reject whatever is torn.)
//!
//! # Records and segments
//!
//! A log is a series of segment files of a fixed size, numbered by a sequence. Each record is
//! 8-byte aligned: a 32-byte header (length and kind, the caller's `stream` key, the caller's
//! `claim`, and two CRC halves, `prep` and `commit`) and its payload (`layout.rs` has the
//! bytes). `prep` validates the header where it was written and nowhere else (the position
//! and the directory's random identity are inside it); `commit` validates header, claim and
//! payload together.
//!
//! # Protocol
//!
//! **Reserve** (any number of writers, lock-free): one `fetch_add` on the current segment's
//! cursor word adds a reference (high bits) and the record's size in 8-byte units (low bits).
//! If the old units plus the record's fit in the segment, the writer owns that range. If not,
//! it gives its reference back; the one reservation that crossed the end (its old units were
//! inside) writes the segment's sealed end, a hint for recovery; every writer that did not fit
//! switches: under the log's switch mutex (once per segment), whoever still finds the full
//! segment current installs the spare (made ahead of need by the maintenance) or makes one,
//! then everyone retries on the new segment.
//!
//! **Fill**: words 0–2, then `prep` with Release (the header is now recognisable), then the
//! payload; the payload's CRC is computed while copying it. **Claim**: the caller may store a
//! new claim (the queue offset it is about to take) any number of times before committing; a
//! claim stored before the caller publishes its message is in the crash image whenever the
//! publication is. **Commit**: the `commit` half, with Release. The caller answers its client
//! only after this: a crash image with the answer has the whole record.
//!
//! **Reclaim**: a segment's references are the log's *hold* (taken at creation), one per
//! record (owned by the record's `Bytes`: the last clone's drop gives it back), and, briefly,
//! one per reservation that did not fit. The hold is given back when the segment stops being
//! current ([`Reclaim::WhenUnreferenced`], message logs) or when [`Log::truncate_before`]
//! passes it ([`Reclaim::OnTruncate`], journals), and always through the epoch
//! (`Guard::defer`): a writer that loaded `current` before the switch may still add a
//! reference, so the hold goes only after every such writer has unpinned. The release that
//! makes the count of releases equal the count of references is the last one: it retires the
//! segment, and [`Log::maintain`] unmaps it and removes its file. After [`Log::close`] a last
//! release only unmaps: handles dropped at shutdown are no verdict on the records.
//!
//! # Segment state machine
//!
//! | state | cursor | who moves it on |
//! |---|---|---|
//! | spare | one reference (the hold), no units | the switcher makes it current |
//! | current | reservations arrive | the writer crossing the end seals it |
//! | sealed | units past the end | a full writer replaces it under the switch mutex |
//! | replaced | the hold's release is deferred (or kept for truncation) | the epoch, or `truncate_before` |
//! | draining | records' references outstanding | each record's last `Bytes` drop |
//! | retired | releases = references | `maintain` (or `close`) |
//! | freed | — | — |
//!
//! # Invariants (cited as S1–S7 in models and comments)
//!
//! * **S1 Disjoint.** Reservations that fit own disjoint ranges inside their segment.
//! * **S2 Complete.** A record whose commit mark can be seen has its header, claim and payload
//!   visible too: its `commit` CRC validates.
//! * **S3 Claimed.** A claim stored before the caller's Release publication is in every memory
//!   image that has the publication, under a valid `prep`.
//! * **S4 No early free.** A segment is freed only when no record's `Bytes`, no reservation and
//!   no writer that loaded it as `current` can still reach it.
//! * **S5 Once.** Exactly one release retires a segment, and it is freed once.
//! * **S6 Kept at close.** After `close`, no file is removed by a last release.
//! * **S7 Recovery.** Recovery yields exactly the records whose commit mark validates, in
//!   (segment, position) order, counts the rest, and never panics on what it finds.
//!
//! # Memory orderings
//!
//! | operation | ordering | pairs with |
//! |---|---|---|
//! | reservation `fetch_add` on the cursor | Relaxed | nothing: the RMW order alone makes ranges disjoint (S1); its count reaches the last release through the epoch and the `released` chain |
//! | words 0–2, payload copy | Relaxed / plain | published by the `prep` and commit stores |
//! | `prep` store (word 3) | Release | the scan's Acquire load of word 3 |
//! | claim store | Relaxed | published by the caller's own Release (the queue's publishing CAS) (S3) |
//! | commit store (word 3) | Release | the scan's Acquire load of word 3 (S2) |
//! | `current` store / load | Release / Acquire | a writer reaching a new segment sees it initialised |
//! | `released` `fetch_add` | AcqRel | each other: the last releaser sees every owner's accesses and the final reference count (S4, S5) |
//! | cursor load in `release` | Acquire | ordered after the reservations by the chain above |
//! | the hold's deferred release | epoch (SeqCst fences inside crossbeam-epoch) | every writer pinned when `current` still named the segment (S4) |
//!
//! # Recovery
//!
//! [`Directory::open_log`] reads every segment of the log by sequence: a file whose header is
//! not this format's, not this directory's, or whose size is not its header's is renamed
//! `*.quarantine` (the reason goes into the [`RecoveryReport`]) and nothing of it is served.
//! In the others, a record whose header validates is skipped by its length; if its commit
//! mark validates it is handed to the caller, else it is counted torn (unmarked) or corrupt
//! (a mark that does not validate) and its claim reported; bytes that are no header are
//! skipped 8 at a time to the next header that validates (one torn region). Recovered
//! segments take no more records: appends go to a new segment.

mod layout;
mod log;
mod memory;
mod recover;
mod scan;
mod segment;

#[cfg(not(loom))]
mod dir;
pub mod journal;

#[cfg(all(test, not(loom)))]
pub(crate) mod tests;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;

#[cfg(not(loom))]
pub use dir::{Directory, Identity};
pub use journal::Journal;
pub use log::{Log, Reservation};

/// A claim meaning "none yet" (what [`RecordMeta::claim`] may start as).
pub const NO_CLAIM: u64 = u64::MAX;

/// Errors of the segment layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentError {
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// Another process (or another [`Directory`] in this one) holds the directory's lock.
    #[error("{} is in use by process {}", path.display(), pid.map_or_else(|| "(pid not yet written)".to_string(), |p| p.to_string()))]
    Locked {
        /// The directory.
        path: PathBuf,
        /// The holder's pid, as it wrote it in the lock file.
        pid: Option<u32>,
    },
    /// The directory was initialised for another owner.
    #[error("{} belongs to {found:?}, not to {expected:?}", path.display())]
    ForeignOwner {
        /// The directory.
        path: PathBuf,
        /// The owner its identity names.
        found: String,
        /// The owner that tried to open it.
        expected: String,
    },
    /// The directory's identity file is damaged or of an unknown format.
    #[error("{}: {reason}", path.display())]
    BadIdentity {
        /// The identity file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The owner tag is empty, too long or not printable ASCII.
    #[error("invalid owner tag {0:?}: 1 to 200 printable ASCII characters")]
    InvalidOwner(String),
    /// A log name outside `[a-z0-9_]{1,16}`.
    #[error("invalid log name {0:?}: 1 to 16 of a-z, 0-9 and _")]
    InvalidName(String),
    /// The log is already open in this directory.
    #[error("log {0:?} is already open in this directory")]
    AlreadyOpen(String),
    /// A setting out of range.
    #[error("invalid log configuration: {0}")]
    InvalidConfig(String),
    /// A record larger than a segment can hold.
    #[error("a record of {len} bytes is larger than a segment holds ({limit})")]
    RecordTooLarge {
        /// The payload's size.
        len: usize,
        /// The largest payload a segment holds.
        limit: usize,
    },
    /// The guard was not pinned in the log's collector ([`Log::collector`]).
    #[error("the guard is not pinned in the log's epoch collector")]
    ForeignGuard,
    /// The log was closed.
    #[error("the log is closed")]
    Closed,
}

/// When a segment's memory goes back to the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reclaim {
    /// Once it is no longer current and every record's `Bytes` is dropped (message logs: a
    /// message's record lives as long as its node).
    #[default]
    WhenUnreferenced,
    /// Once [`Log::truncate_before`] passes it and every record's `Bytes` is dropped
    /// (journals: records are dead when a snapshot covers them, not when dropped).
    OnTruncate,
}

/// A log's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Bytes of each new segment file: a multiple of 4096 from 8 KiB to 1 GiB (under loom: a
    /// multiple of 8 from 192 bytes). Recovered segments keep the size they were made with.
    pub segment_size: usize,
    /// When segments are freed.
    pub reclaim: Reclaim,
    /// Map segments with `MAP_POPULATE` (no page faults on the append path).
    pub populate: bool,
    /// Run a maintenance thread that makes the spare segment ahead of need and frees retired
    /// segments. Without it, the writer that switches segments makes the next spare and the
    /// caller calls [`Log::maintain`]. Ignored under loom.
    pub maintenance_thread: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_size: if cfg!(loom) { 512 } else { 64 << 20 },
            reclaim: Reclaim::WhenUnreferenced,
            populate: true,
            maintenance_thread: !cfg!(loom),
        }
    }
}

/// The caller's header fields of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMeta {
    /// What the record is (the caller's numbering).
    pub kind: u16,
    /// The caller's key, e.g. which queue a message belongs to.
    pub stream: u64,
    /// The caller's sequence, e.g. the queue offset, or [`NO_CLAIM`]; it may change until the
    /// commit ([`Reservation::set_claim`]).
    pub claim: u64,
}

/// Where a record is: its segment's sequence and its byte offset there. Orders like the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The segment's sequence number.
    pub segment: u64,
    /// The record's byte offset in the segment.
    pub offset: u32,
}

/// A complete record found by recovery.
#[derive(Debug, Clone)]
pub struct Record {
    /// Where it is.
    pub position: Position,
    /// Its kind.
    pub kind: u16,
    /// Its stream key.
    pub stream: u64,
    /// Its last claim.
    pub claim: u64,
    /// Its payload, over the mapping; it keeps the segment mapped (and, in a
    /// [`Reclaim::WhenUnreferenced`] log, its file) until the last clone is dropped.
    pub payload: Bytes,
}

/// A record whose header is valid but which is not complete: never served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornRecord {
    /// Where it is.
    pub position: Position,
    /// Its kind.
    pub kind: u16,
    /// Its stream key.
    pub stream: u64,
    /// The last claim its writer stored (the caller keeps its sequences above it: a claim
    /// stored before publication may have been seen).
    pub claim: u64,
    /// It carried a commit mark that does not validate (damaged after it was written), rather
    /// than none (its writer never finished).
    pub corrupt: bool,
}

/// What recovery hands the caller, in (segment, position) order.
#[derive(Debug, Clone)]
pub enum Recovered {
    /// A complete record.
    Record(Record),
    /// An incomplete one (counted, never served).
    Torn(TornRecord),
}

/// A segment file recovery set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// Its new name (`*.quarantine`), or its name if renaming failed.
    pub file: PathBuf,
    /// Why, for the operator.
    pub reason: String,
}

/// What one log's recovery found.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Segment files recovered (quarantined ones not included).
    pub segments: u64,
    /// Complete records handed to the caller.
    pub records: u64,
    /// Records whose writer never committed them (skipped, never served).
    pub torn_records: u64,
    /// Records whose commit mark does not validate (skipped, never served).
    pub corrupt_records: u64,
    /// Stretches that held no valid header (a reservation never written, garbage); skipped.
    pub torn_regions: u64,
    /// Segment files renamed `*.quarantine`, with the reason.
    pub quarantined: Vec<Quarantined>,
    /// Files deleted: leftovers of a segment creation a crash interrupted, and empty segments.
    pub removed_files: u64,
    /// How long recovery took.
    pub elapsed: Duration,
}

/// Counters of one log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Bytes of segments mapped now (current, spare, and those still referenced).
    pub mapped_bytes: u64,
    /// Segments mapped now.
    pub live_segments: u64,
    /// Segments freed since the log was opened.
    pub freed_segments: u64,
    /// Bytes of the segments freed (and unlinked) since the log was opened.
    pub freed_bytes: u64,
    /// Records appended since the log was opened.
    pub appended_records: u64,
    /// Records recovery handed over.
    pub recovered_records: u64,
    /// Torn and corrupt records recovery skipped.
    pub torn_records: u64,
    /// Torn regions recovery skipped.
    pub torn_regions: u64,
    /// Segment files recovery quarantined.
    pub quarantined_segments: u64,
    /// How long recovery took.
    pub recovery_time: Duration,
    /// Freed segments whose file could not be removed.
    pub unlink_failures: u64,
}
