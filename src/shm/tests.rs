//! Unit tests of the segment log: files, recovery of every kind of damage, reclamation.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use crossbeam_epoch::Collector;
use proptest::prelude::*;

use super::*;

const OWNER: &str = "test-cluster/broker-a";
const SMALL: usize = 8 << 10;

/// A fresh directory (on tmpfs when there is one), removed when dropped.
pub(crate) struct TestDir(pub(crate) PathBuf);

impl TestDir {
    pub(crate) fn new(tag: &str) -> TestDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = base.join(format!("baiji-shm-unit-{}-{n}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TestDir(p)
    }

    fn segment_file(&self, name: &str, seq: u64) -> PathBuf {
        self.0.join(format!("{name}-{seq:016x}.seg"))
    }

    /// Segment files of `name` (not quarantined ones).
    fn segments(&self, name: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.0)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        v.retain(|p| {
            let f = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
            f.starts_with(&format!("{name}-")) && f.ends_with(".seg")
        });
        v.sort();
        v
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(reclaim: Reclaim) -> LogConfig {
    LogConfig { segment_size: SMALL, reclaim, populate: false, maintenance_thread: false }
}

fn meta(kind: u16, stream: u64, claim: u64) -> RecordMeta {
    RecordMeta { kind, stream, claim }
}

/// Opens log `name`, collecting what recovery hands over.
fn open(
    dir: &Directory,
    name: &str,
    cfg: LogConfig,
) -> (Log, RecoveryReport, Vec<Record>, Vec<TornRecord>) {
    let (mut recs, mut torn) = (Vec::new(), Vec::new());
    let (log, report) = match dir.open_log(name, cfg, Collector::new(), |r| match r {
        Recovered::Record(r) => recs.push(r),
        Recovered::Torn(t) => torn.push(t),
    }) {
        Ok(x) => x,
        Err(e) => panic!("opening log {name}: {e}"),
    };
    (log, report, recs, torn)
}

fn open_dir(p: &Path) -> Directory {
    match Directory::open(p, OWNER) {
        Ok(d) => d,
        Err(e) => panic!("opening {}: {e}", p.display()),
    }
}

/// Appends and commits one record; returns its position.
fn put(log: &Log, m: RecordMeta, payload: &[u8]) -> (Position, Bytes) {
    let h = log.collector().register();
    let g = h.pin();
    let r = match log.append(m, &[payload], &g) {
        Ok(r) => r,
        Err(e) => panic!("append: {e}"),
    };
    let p = r.position();
    (p, r.commit())
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) => panic!("{}: {e}", path.display()),
    };
    if let Err(e) = f.write_all_at(bytes, offset) {
        panic!("{}: {e}", path.display());
    }
}

fn payload_of(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 131 + j * 7) as u8).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// S7: every committed record comes back, in order, with its fields and payload.
    #[test]
    fn given_records_of_random_sizes_when_the_log_is_reopened_should_recover_them_in_order(
        sizes in proptest::collection::vec(0usize..3000, 1..40),
    ) {
        let td = TestDir::new("prop");
        let mut want = Vec::new();
        {
            let dir = open_dir(&td.0);
            let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
            for (i, &len) in sizes.iter().enumerate() {
                let i = i as u64;
                let p = payload_of(i, len);
                let (pos, _) = put(&log, meta((i % 7) as u16, i * 3, i + 100), &p);
                want.push((pos, (i % 7) as u16, i * 3, i + 100, p));
            }
        }
        let dir = open_dir(&td.0);
        let (_log, report, recs, torn) = open(&dir, "messages", config(Reclaim::OnTruncate));
        let got: Vec<_> = recs.iter().map(|r| (r.position, r.kind, r.stream, r.claim, r.payload.to_vec())).collect();
        prop_assert_eq!(got, want, "S7: recovery yields exactly the committed records, in log order");
        prop_assert!(torn.is_empty(), "nothing was torn");
        prop_assert_eq!(report.torn_regions, 0, "no region was skipped");
    }

    /// S7: whatever bytes a segment's body holds, recovery does not panic and serves only
    /// records whose commit mark validates (here: none of the garbage, all of the real ones).
    #[test]
    fn given_random_bytes_in_a_segment_when_reopened_should_serve_only_the_valid_records(
        junk in proptest::collection::vec(any::<u8>(), 64..2000),
        at in 0u64..2000,
    ) {
        let td = TestDir::new("junk");
        let first;
        {
            let dir = open_dir(&td.0);
            let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
            first = put(&log, meta(1, 1, 1), b"before the junk").0;
        }
        let file = td.segment_file("messages", first.segment);
        let offset = 4096 + at; // after the first record, inside the segment
        write_at(&file, offset, &junk);
        let dir = open_dir(&td.0);
        let (_log, _report, recs, _torn) = open(&dir, "messages", config(Reclaim::OnTruncate));
        prop_assert_eq!(recs.len(), 1, "the junk holds no valid record");
        prop_assert_eq!(&recs[0].payload[..], b"before the junk");
    }
}

#[test]
fn given_an_uncommitted_last_record_when_reopened_should_skip_and_count_it_with_its_claim() {
    let td = TestDir::new("torn");
    {
        let dir = open_dir(&td.0);
        let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
        put(&log, meta(1, 9, 0), b"answered");
        let h = log.collector().register();
        let g = h.pin();
        let mut r = log.append(meta(1, 9, NO_CLAIM), &[b"never answered"], &g).expect("append");
        r.set_claim(1);
        drop(r); // the writer dies before its commit
    }
    let dir = open_dir(&td.0);
    let (_log, report, recs, torn) = open(&dir, "messages", config(Reclaim::OnTruncate));
    assert_eq!(recs.len(), 1, "only the committed record is served");
    assert_eq!(&recs[0].payload[..], b"answered");
    assert_eq!(report.torn_records, 1, "the torn record is counted");
    assert_eq!(torn.len(), 1);
    assert_eq!(
        (torn[0].stream, torn[0].claim, torn[0].corrupt),
        (9, 1, false),
        "S3: its last claim is reported"
    );
}

#[test]
fn given_a_zeroed_commit_mark_when_reopened_should_count_the_record_torn() {
    let td = TestDir::new("zeromark");
    let pos;
    {
        let dir = open_dir(&td.0);
        let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
        put(&log, meta(1, 1, 0), b"first");
        pos = put(&log, meta(1, 1, 1), b"second").0;
        put(&log, meta(1, 1, 2), b"third");
    }
    write_at(&td.segment_file("messages", pos.segment), u64::from(pos.offset) + 28, &[0; 4]);
    let dir = open_dir(&td.0);
    let (_log, report, recs, torn) = open(&dir, "messages", config(Reclaim::OnTruncate));
    let got: Vec<&[u8]> = recs.iter().map(|r| &r.payload[..]).collect();
    assert_eq!(
        got,
        vec![&b"first"[..], b"third"],
        "a record without its commit mark is not served"
    );
    assert_eq!((report.torn_records, torn.len()), (1, 1), "it is counted torn");
}

#[test]
fn given_a_corrupted_payload_byte_when_reopened_should_skip_it_and_keep_the_next_records() {
    let td = TestDir::new("corrupt");
    let pos;
    {
        let dir = open_dir(&td.0);
        let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
        pos = put(&log, meta(1, 1, 0), b"will be damaged").0;
        put(&log, meta(1, 1, 1), b"intact");
    }
    write_at(&td.segment_file("messages", pos.segment), u64::from(pos.offset) + 32 + 3, b"X");
    let dir = open_dir(&td.0);
    let (_log, report, recs, torn) = open(&dir, "messages", config(Reclaim::OnTruncate));
    assert_eq!(recs.len(), 1, "the damaged record is not served");
    assert_eq!(&recs[0].payload[..], b"intact", "the record after it is");
    assert_eq!(report.corrupt_records, 1, "the damage is counted");
    assert!(torn[0].corrupt, "and reported as a corrupt record, not an unfinished one");
}

#[test]
fn given_garbage_over_a_header_when_reopened_should_resynchronise_on_the_next_record() {
    let td = TestDir::new("resync");
    let pos;
    {
        let dir = open_dir(&td.0);
        let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
        pos = put(&log, meta(1, 1, 0), &[0xAB; 100]).0;
        put(&log, meta(1, 1, 1), b"after");
    }
    write_at(&td.segment_file("messages", pos.segment), u64::from(pos.offset), &[0x5C; 16]);
    let dir = open_dir(&td.0);
    let (_log, report, recs, _) = open(&dir, "messages", config(Reclaim::OnTruncate));
    assert_eq!(recs.len(), 1, "the record whose header is garbage is lost, never misread");
    assert_eq!(&recs[0].payload[..], b"after", "the scan finds the next header");
    assert_eq!(report.torn_regions, 1, "the skipped stretch is counted once");
}

#[test]
fn given_a_copy_of_a_record_inside_a_payload_when_reopened_should_not_take_it_for_a_record() {
    let td = TestDir::new("inner");
    let (first, copy);
    {
        let dir = open_dir(&td.0);
        let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
        first = put(&log, meta(1, 1, 0), b"a real record").0;
        // A payload that carries the exact bytes of the first record (header included).
        let mut raw = vec![0u8; 48];
        let f = std::fs::File::open(td.segment_file("messages", first.segment)).expect("open");
        f.read_exact_at(&mut raw, u64::from(first.offset)).expect("read");
        copy = put(&log, meta(1, 1, 1), &[&[0u8; 8][..], &raw].concat()).0;
    }
    // Destroy the outer record's header: the scan now walks through its payload.
    write_at(&td.segment_file("messages", copy.segment), u64::from(copy.offset), &[0xEE; 32]);
    let dir = open_dir(&td.0);
    let (_log, _report, recs, _) = open(&dir, "messages", config(Reclaim::OnTruncate));
    assert_eq!(recs.len(), 1, "a record's bytes at another position never validate");
    assert_eq!(recs[0].position, first);
}

/// Writes one record in a fresh directory and returns its segment file's path.
fn one_segment(td: &TestDir) -> PathBuf {
    let dir = open_dir(&td.0);
    let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
    let (pos, _) = put(&log, meta(1, 1, 0), b"in the damaged segment");
    // A second segment that stays healthy.
    let h = log.collector().register();
    let g = h.pin();
    let big = vec![1u8; log.max_payload()];
    log.append(meta(1, 2, 0), &[&big], &g).expect("append").commit();
    drop(g);
    drop(log);
    td.segment_file("messages", pos.segment)
}

fn reopen_expecting_quarantine(td: &TestDir, file: &Path, why: &str, reason_says: &str) {
    let dir = open_dir(&td.0);
    let (_log, report, recs, _) = open(&dir, "messages", config(Reclaim::OnTruncate));
    assert_eq!(report.quarantined.len(), 1, "{why}: the segment is quarantined");
    let q = &report.quarantined[0];
    assert!(q.file.to_string_lossy().ends_with(".seg.quarantine"), "{why}: renamed aside ({q:?})");
    assert!(!file.exists(), "{why}: the original name is gone");
    assert_eq!(recs.len(), 1, "{why}: the healthy segment is still served");
    assert_eq!(recs[0].stream, 2);
    assert!(
        q.reason.contains(reason_says),
        "{why}: the reason says what is wrong ({:?})",
        q.reason
    );
}

#[test]
fn given_a_truncated_segment_when_reopened_should_quarantine_it_and_serve_the_others() {
    let td = TestDir::new("trunc");
    let file = one_segment(&td);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .expect("open")
        .set_len(1000)
        .expect("truncate");
    reopen_expecting_quarantine(&td, &file, "truncated", "truncated: 1000 bytes");
}

#[test]
fn given_a_segment_from_another_directory_when_reopened_should_quarantine_it() {
    let td = TestDir::new("foreign");
    let other = TestDir::new("foreign-src");
    let file = one_segment(&td);
    let foreign = one_segment(&other);
    std::fs::copy(&foreign, &file).expect("copy the other directory's segment over ours");
    reopen_expecting_quarantine(&td, &file, "another directory", "belongs to directory");
}

#[test]
fn given_a_segment_of_another_format_version_when_reopened_should_quarantine_it() {
    let td = TestDir::new("version");
    let file = one_segment(&td);
    let mut raw = [0u8; layout::SEGMENT_HEADER];
    std::fs::File::open(&file).expect("open").read_exact_at(&mut raw, 0).expect("read");
    let mut h = layout::SegmentHeader::decode(&raw).expect("a valid header");
    h.version = 99;
    write_at(&file, 0, &h.encode());
    reopen_expecting_quarantine(&td, &file, "another version", "format version 99");
}

#[test]
fn given_an_overwritten_segment_header_when_reopened_should_quarantine_it() {
    let td = TestDir::new("overwritten");
    let file = one_segment(&td);
    write_at(&file, 20, b"scribble");
    reopen_expecting_quarantine(&td, &file, "overwritten header", "checksum");
}

#[test]
fn given_a_locked_directory_when_opened_again_should_refuse_naming_the_pid() {
    let td = TestDir::new("lock");
    let first = open_dir(&td.0);
    match Directory::open(&td.0, OWNER) {
        Err(SegmentError::Locked { pid, .. }) => {
            assert_eq!(pid, Some(std::process::id()), "the error names the holder's pid")
        }
        other => panic!("a second opener must be refused, got {other:?}"),
    }
    drop(first);
    assert!(Directory::open(&td.0, OWNER).is_ok(), "the lock goes with its holder");
}

#[test]
fn given_a_directory_of_another_owner_when_opened_should_refuse() {
    let td = TestDir::new("owner");
    drop(open_dir(&td.0));
    match Directory::open(&td.0, "other-cluster/broker-b") {
        Err(SegmentError::ForeignOwner { found, expected, .. }) => {
            assert_eq!((found.as_str(), expected.as_str()), (OWNER, "other-cluster/broker-b"))
        }
        other => panic!("another owner must be refused, got {other:?}"),
    }
}

#[test]
fn given_a_damaged_identity_when_opened_should_refuse() {
    let td = TestDir::new("identity");
    let id = open_dir(&td.0).identity().clone();
    let path = td.0.join("IDENTITY");
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, text.replace(&id.owner, "test-cluster/broker-z")).expect("write");
    assert!(
        matches!(Directory::open(&td.0, OWNER), Err(SegmentError::BadIdentity { .. })),
        "an edited identity fails its checksum"
    );
}

#[test]
fn given_a_log_open_when_opened_again_in_the_same_directory_should_refuse() {
    let td = TestDir::new("twice");
    let dir = open_dir(&td.0);
    let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
    let again = dir.open_log("messages", config(Reclaim::OnTruncate), Collector::new(), |_| {});
    assert!(matches!(again, Err(SegmentError::AlreadyOpen(_))), "one log, one writer");
    drop(log);
    assert!(dir
        .open_log("messages", config(Reclaim::OnTruncate), Collector::new(), |_| {})
        .is_ok());
}

#[test]
fn given_a_foreign_guard_or_an_oversized_record_when_appending_should_refuse() {
    let td = TestDir::new("refuse");
    let dir = open_dir(&td.0);
    let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
    let other = Collector::new();
    let h = other.register();
    assert!(
        matches!(log.append(meta(1, 1, 1), &[b"x"], &h.pin()), Err(SegmentError::ForeignGuard)),
        "a guard of another collector does not protect the log's segments"
    );
    let h = log.collector().register();
    let big = vec![0u8; log.max_payload() + 1];
    assert!(matches!(
        log.append(meta(1, 1, 1), &[&big], &h.pin()),
        Err(SegmentError::RecordTooLarge { .. })
    ));
    let max = vec![0u8; log.max_payload()];
    assert!(
        log.append(meta(1, 1, 1), &[&max], &h.pin()).is_ok(),
        "a record filling a segment fits"
    );
}

#[test]
fn given_a_crash_during_segment_creation_when_reopened_should_remove_the_leftover() {
    let td = TestDir::new("tmp");
    drop(open_dir(&td.0));
    let tmp = td.0.join("messages-00000000000000aa.seg.tmp");
    std::fs::write(&tmp, [0u8; 100]).expect("write");
    let dir = open_dir(&td.0);
    let (log, report, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
    assert!(!tmp.exists(), "the half-made segment is removed");
    assert_eq!(report.removed_files, 1);
    // The next segment is numbered after every segment seen, never reusing a name.
    let (pos, _) = put(&log, meta(1, 1, 1), b"x");
    assert_eq!(pos.segment, 1, "leftovers do not take sequence numbers");
}

#[test]
fn given_concurrent_writers_when_reopened_should_recover_exactly_the_committed_records() {
    let td = TestDir::new("threads");
    let mut want = BTreeMap::new();
    let mut abandoned = 0;
    {
        let dir = open_dir(&td.0);
        let (log, ..) = open(&dir, "messages", config(Reclaim::OnTruncate));
        let per_thread = 400u64;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u64)
                .map(|t| {
                    let log = &log;
                    s.spawn(move || {
                        let h = log.collector().register();
                        let mut mine = Vec::new();
                        for i in 0..per_thread {
                            let g = h.pin();
                            let p = payload_of(t * 1000 + i, (i as usize * 37) % 700);
                            let mut r =
                                log.append(meta(2, t, NO_CLAIM), &[&p], &g).expect("append");
                            r.set_claim(i);
                            if i % 5 == 0 {
                                continue; // abandoned: never committed
                            }
                            r.commit();
                            mine.push(((t, i), p));
                        }
                        mine
                    })
                })
                .collect();
            for h in handles {
                for (k, p) in h.join().expect("writer thread") {
                    want.insert(k, p);
                }
            }
        });
        abandoned += 4 * per_thread / 5;
        assert!(log.stats().live_segments > 10, "the writers crossed many segment ends");
    }
    let dir = open_dir(&td.0);
    let (_log, report, recs, torn) = open(&dir, "messages", config(Reclaim::OnTruncate));
    let got: BTreeMap<(u64, u64), Vec<u8>> =
        recs.iter().map(|r| ((r.stream, r.claim), r.payload.to_vec())).collect();
    assert_eq!(got.len(), recs.len(), "S1: no record was recovered twice");
    assert_eq!(got, want, "S7: exactly the committed records come back, each with its own payload");
    assert_eq!(torn.len() as u64, abandoned, "every abandoned record is counted torn");
    assert_eq!(report.torn_records, abandoned);
}

#[test]
fn given_released_records_when_maintained_should_remove_the_segment_file() {
    let td = TestDir::new("reclaim");
    let dir = open_dir(&td.0);
    let (log, ..) = open(&dir, "messages", config(Reclaim::WhenUnreferenced));
    // Two 3000-byte records fill an 8 KiB segment: six records take three segments.
    let records: Vec<(Position, Bytes)> =
        (0..6).map(|i| put(&log, meta(1, 1, i), &[7u8; 3000])).collect();
    let file = td.segment_file("messages", records[0].0.segment);
    assert_eq!(records[5].0.segment, records[0].0.segment + 2, "three segments are used");
    let before = log.stats();
    drop(records);
    for _ in 0..4 {
        log.collector().register().pin().flush();
    }
    let freed = log.maintain().expect("maintain");
    assert_eq!(freed, 2, "the two replaced segments whose records are all dropped are freed");
    assert!(!file.exists(), "and its file removed");
    let after = log.stats();
    assert!(
        after.freed_segments >= 1 && after.mapped_bytes < before.mapped_bytes,
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        after.freed_bytes,
        after.freed_segments * SMALL as u64,
        "freed bytes count whole segments"
    );
}

#[test]
fn given_a_live_record_when_its_segment_is_replaced_should_keep_the_file_until_it_is_dropped() {
    let td = TestDir::new("pinned");
    let dir = open_dir(&td.0);
    let (log, ..) = open(&dir, "messages", config(Reclaim::WhenUnreferenced));
    let (first, live) = put(&log, meta(1, 1, 0), b"still needed");
    for i in 0..10 {
        drop(put(&log, meta(1, 1, i), &[1u8; 3000]));
    }
    for _ in 0..4 {
        log.collector().register().pin().flush();
    }
    log.maintain().expect("maintain");
    let file = td.segment_file("messages", first.segment);
    assert!(file.exists(), "S4: a segment with a live record is never freed");
    assert_eq!(&live[..], b"still needed", "and its payload stays readable");
    drop(live);
    log.maintain().expect("maintain");
    assert!(!file.exists(), "once the last record is dropped the file goes");
}

#[test]
fn given_a_closed_log_when_records_are_dropped_should_keep_every_file() {
    let td = TestDir::new("close");
    let dir = open_dir(&td.0);
    let (log, ..) = open(&dir, "messages", config(Reclaim::WhenUnreferenced));
    let kept: Vec<(Position, Bytes)> =
        (0..8).map(|i| put(&log, meta(1, 1, i), &[3u8; 3000])).collect();
    // Every segment that holds a record (the empty spare may go).
    let files: Vec<PathBuf> =
        kept.iter().map(|(p, _)| td.segment_file("messages", p.segment)).collect();
    log.close();
    drop(kept);
    drop(log);
    for f in &files {
        assert!(f.exists(), "S6: {} survives an orderly shutdown", f.display());
    }
    let (_log, report, recs, _) = open(&dir, "messages", config(Reclaim::WhenUnreferenced));
    assert_eq!(recs.len(), 8, "every record is there after the restart ({report:?})");
}

#[test]
fn given_a_journal_log_when_truncated_should_free_only_the_segments_before() {
    let td = TestDir::new("journal");
    let dir = open_dir(&td.0);
    let (log, ..) = open(&dir, "journal", config(Reclaim::OnTruncate));
    let positions: Vec<Position> =
        (0..12).map(|i| put(&log, meta(3, 0, i), &[5u8; 2500]).0).collect();
    let cut = positions[7].segment;
    for _ in 0..4 {
        log.collector().register().pin().flush();
    }
    log.maintain().expect("maintain");
    assert!(
        td.segment_file("journal", positions[0].segment).exists(),
        "dropped journal records are kept"
    );
    let h = log.collector().register();
    let n = log.truncate_before(cut, &h.pin()).expect("truncate");
    assert!(n >= 1);
    for _ in 0..4 {
        h.pin().flush();
    }
    log.maintain().expect("maintain");
    for p in &positions {
        let exists = td.segment_file("journal", p.segment).exists();
        assert_eq!(
            exists,
            p.segment >= cut,
            "segment {} is freed iff it is before the cut",
            p.segment
        );
    }
}

#[test]
fn given_the_maintenance_thread_when_segments_fill_should_prepare_spares_and_free_retired() {
    let td = TestDir::new("thread");
    let dir = open_dir(&td.0);
    let cfg = LogConfig { maintenance_thread: true, ..config(Reclaim::WhenUnreferenced) };
    let (log, ..) = open(&dir, "messages", cfg);
    for i in 0..50 {
        drop(put(&log, meta(1, 1, i), &[9u8; 3000]));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while log.stats().freed_segments < 20 && std::time::Instant::now() < deadline {
        log.collector().register().pin().flush();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let s = log.stats();
    assert!(s.freed_segments >= 20, "the thread frees what is dead without being asked ({s:?})");
    assert!(
        td.segments("messages").len() <= 4,
        "only the current, the spare and a few draining stay"
    );
}

#[test]
fn given_an_in_memory_log_when_scanned_should_see_committed_and_torn_records() {
    let log =
        Log::in_memory(LogConfig { segment_size: SMALL, ..LogConfig::default() }, Collector::new())
            .expect("log");
    let h = log.collector().register();
    let g = h.pin();
    log.append(meta(1, 4, 0), &[b"done"], &g).expect("append").commit();
    let mut half = log.append(meta(1, 4, NO_CLAIM), &[b"half"], &g).expect("append");
    half.set_claim(1);
    let mut seen = Vec::new();
    log.scan(&g, |r| seen.push(r)).expect("scan");
    assert_eq!(seen.len(), 2);
    assert!(matches!(&seen[0], Recovered::Record(r) if &r.payload[..] == b"done"));
    assert!(matches!(&seen[1], Recovered::Torn(t) if t.claim == 1 && !t.corrupt));
    drop(half);
}
