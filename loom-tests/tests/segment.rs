//! loom models of the shared-memory segment log (`baiji::shm`), one per named race.
//!
//! Under loom a log's segments are heap buffers of loom atomics behind the same code as the
//! mapped files, and a freed segment is poisoned instead of deallocated: touching it fails the
//! model (S4), freeing it twice fails the model (S5), and a segment never freed leaks the
//! `loom::sync::Arc` it holds, which loom reports. A "crash image" is `Log::scan`, run by one
//! thread while the others write: recovery reads what a concurrent thread could read.
//!
//! Each model names the mutant it exists to catch (`.ci/loom-mutants` runs every pair and
//! requires the model to FAIL). Invariants S1–S7 are those of `src/shm/mod.rs`.

mod common;

use baiji::__private::{Queue, Reclaimer};
use baiji::shm::{Log, LogConfig, Reclaim, RecordMeta, Recovered, Reservation, NO_CLAIM};
use bytes::Bytes;
use common::{model, model_capped};
use crossbeam_epoch::Collector;
use loom::sync::Arc;
use loom::thread;

/// Room for two records of [`PAYLOAD`] bytes (128-byte segment header + 2 x 40).
const TWO_RECORDS: usize = 208;
/// Room for one (the smallest segment the log accepts under loom).
const ONE_RECORD: usize = 192;
const PAYLOAD: usize = 8;

fn log(segment_size: usize, reclaim: Reclaim) -> Arc<Log> {
    let config = LogConfig { segment_size, reclaim, populate: false, maintenance_thread: false };
    match Log::in_memory(config, Collector::new()) {
        Ok(l) => Arc::new(l),
        Err(e) => panic!("log config rejected: {e}"),
    }
}

fn meta(stream: u64) -> RecordMeta {
    RecordMeta { kind: 1, stream, claim: NO_CLAIM }
}

fn payload(v: u64) -> [u8; PAYLOAD] {
    v.to_le_bytes()
}

/// Appends and commits `payload(v)` with stream `v` on a fresh handle.
fn put(log: &Log, v: u64) -> Bytes {
    let h = log.collector().register();
    let g = h.pin();
    match log.append(meta(v), &[&payload(v)], &g) {
        Ok(r) => r.commit(),
        Err(e) => panic!("append: {e}"),
    }
}

/// Two threads append and commit records 1 and 2 at once; returns when both are done.
fn two_writers(log: &Arc<Log>) {
    let spawn = |v: u64| {
        let log = Arc::clone(log);
        thread::spawn(move || drop(put(&log, v)))
    };
    let (a, b) = (spawn(1), spawn(2));
    a.join().unwrap();
    b.join().unwrap();
}

/// Every committed record of the log now, as (position, stream, payload value).
fn committed(log: &Log) -> Vec<(baiji::shm::Position, u64, Vec<u8>)> {
    let h = log.collector().register();
    let g = h.pin();
    let mut out = Vec::new();
    let scanned = log.scan(&g, |r| match r {
        Recovered::Record(r) => out.push((r.position, r.stream, r.payload.to_vec())),
        Recovered::Torn(t) => panic!("nothing is torn once every writer committed: {t:?}"),
    });
    if let Err(e) = scanned {
        panic!("scan: {e}");
    }
    out
}

/// S1: two writers reserving in the same segment get disjoint ranges, and each record is
/// recovered once with its own payload.
///
/// Catches `reserve_split` (the reservation as a load and a store instead of one `fetch_add`:
/// both writers take the same range and one record overwrites the other).
#[test]
fn two_writers_reserve_disjoint() {
    model(|| {
        let log = log(TWO_RECORDS, Reclaim::OnTruncate);
        two_writers(&log);
        let mut got = committed(&log);
        got.sort_by_key(|r| r.1);
        assert_eq!(got.len(), 2, "S1: both records are there, neither overwrote the other");
        assert_ne!(got[0].0, got[1].0, "S1: each reservation has its own position");
        for (_, stream, bytes) in &got {
            assert_eq!(bytes[..], payload(*stream), "each record carries its own writer's payload");
        }
    });
}

/// S1 across a segment's end: of two writers racing for the last room in a segment one fits,
/// the other crosses the end, switches to a new segment and lands there; both are recovered
/// and no record reaches past its segment.
///
/// Catches `reserve_past_end` (a reservation that starts inside the segment is accepted even
/// if it ends past it: the write leaves the segment's memory).
#[test]
fn writers_race_across_segment_end() {
    model(|| {
        let log = log(ONE_RECORD, Reclaim::OnTruncate);
        two_writers(&log);
        let got = committed(&log);
        assert_eq!(got.len(), 2, "S1: both records are recovered, one per segment");
        assert_ne!(got[0].0.segment, got[1].0.segment, "the second writer switched segments");
        let mut streams: Vec<u64> = got.iter().map(|r| r.1).collect();
        streams.sort_unstable();
        assert_eq!(streams, vec![1, 2]);
    });
}

/// S2: a record whose commit mark a concurrent reader (the crash image) can see has its
/// payload visible too: a scan racing the writer finds it unmarked or complete, never marked
/// but failing its checksum.
///
/// Catches `commit_relaxed` (the commit mark stored Relaxed: the scan can see the mark before
/// the payload words and report a corrupt record where the writer had finished).
#[test]
fn commit_mark_vs_crash_scan() {
    model(|| {
        let log = log(TWO_RECORDS, Reclaim::OnTruncate);
        let writer = {
            let log = Arc::clone(&log);
            thread::spawn(move || drop(put(&log, 0x0102_0304_0506_0708)))
        };
        let h = log.collector().register();
        let g = h.pin();
        let scanned = log.scan(&g, |r| match r {
            Recovered::Record(r) => {
                assert_eq!(
                    r.payload[..],
                    payload(0x0102_0304_0506_0708),
                    "S2: a committed record is whole"
                )
            }
            Recovered::Torn(t) => {
                assert!(
                    !t.corrupt,
                    "S2: a visible commit mark always validates (found a corrupt record)"
                )
            }
        });
        assert!(scanned.is_ok());
        drop(g);
        writer.join().unwrap();
    });
}

/// S3 applied to the queue, the durable append: (1) reserve and fill a record, (2) link the
/// message with `Queue::append_claimed`, which stores the offset it is about to take as the
/// record's claim before each publishing CAS, (3) commit. An offset a reader has seen linked
/// is, in every crash image taken after that, covered by a record's claim, committed or torn,
/// so recovery never gives an offset a consumer may have seen to another message. One producer
/// appends a single message, the other a batch of two under one record (claiming the batch's
/// last offset); a reader walks the queue, then scans the log. Once all are done, each record's
/// claim is the last offset its producer got (also after a lost CAS and a second attempt).
///
/// Catches `claim_after_publish` (the claim stored only after the publishing CAS succeeded:
/// the reader sees the offset linked while its record still claims nothing).
///
/// Kept small: the records are reserved and filled on the main thread before the producers
/// start (the fill racing a crash scan is `commit_mark_vs_crash_scan`'s), and the producers
/// link under `unprotected` guards (nothing is unlinked or freed here): with epoch pins on all
/// three threads even the bound-1 exploration ran past 200 s. The reader is a spawned thread,
/// not the main one: loom's DPOR remembers only an object's last access, and a reader on the
/// main thread ran its walk before either producer in every explored schedule (it never saw a
/// node, so the mutant survived). Bound 3: about 35 CPU-seconds, 54-58 s wall at load 5-7;
/// the mutant needs one preemption (the producer's, between its CAS and its claim) and is
/// caught in 0.02 s (measured 2026-12-05).
#[test]
fn claim_before_publish_vs_crash_scan() {
    model(|| {
        let log = log(TWO_RECORDS, Reclaim::OnTruncate);
        // Offsets from 1: under loom the index stride is 2, so in either order only the batch
        // records an index entry (offset 2).
        let q = Arc::new(Queue::new(1, Reclaimer::new()));
        // Step 1 of both appends: stream 1 is the single message's record, stream 2 the
        // batch's; neither claims anything yet.
        let (single, batch) = {
            let h = log.collector().register();
            let g = h.pin();
            let reserve = |stream: u64| match log.append(meta(stream), &[&payload(stream)], &g) {
                Ok(r) => r,
                Err(e) => panic!("append: {e}"),
            };
            (reserve(1), reserve(2))
        };
        // Steps 2 and 3; returns (stream, the last offset it got, the committed payload).
        let produce = |mut r: Reservation, stream: u64| {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                // SAFETY: nothing is unlinked from the queue or freed while the model runs (no
                // reaper), so the guard has nothing to protect.
                let g = unsafe { crossbeam_epoch::unprotected() };
                let mut claim = |offset: u64| r.set_claim(offset);
                let last = if stream == 2 {
                    let batch =
                        [(Bytes::from_static(b"b0"), 0, 0), (Bytes::from_static(b"b1"), 0, 0)];
                    match q.append_batch_claimed(batch, g, &mut claim) {
                        Some(a) => a.offset + 1,
                        None => panic!("a non-empty batch is appended"),
                    }
                } else {
                    q.append_claimed(Bytes::from_static(b"a"), 0, 0, g, &mut claim).offset
                };
                (stream, last, r.commit()) // only now would the producer be answered
            })
        };
        let producers = [produce(single, 1), produce(batch, 2)];
        let reader = {
            let (log, q) = (Arc::clone(&log), Arc::clone(&q));
            thread::spawn(move || {
                let h = log.collector().register();
                let g = h.pin();
                let mut seen = None;
                let mut n = q.head(&g);
                while let Some(next) = n.next(&g) {
                    seen = Some(next.offset());
                    n = next;
                }
                // The crash image, taken after the walk: the highest claim of any record.
                let mut claimed = None;
                let scanned = log.scan(&g, |r| {
                    let claim = match r {
                        Recovered::Record(r) => r.claim,
                        Recovered::Torn(t) => t.claim,
                    };
                    if claim != NO_CLAIM {
                        claimed = claimed.max(Some(claim));
                    }
                });
                assert!(scanned.is_ok());
                if let Some(seen) = seen {
                    assert!(
                        claimed.is_some_and(|c| c >= seen),
                        "S3: offset {seen} was seen linked, but the crash image claims only \
                         {claimed:?}"
                    );
                }
            })
        };
        reader.join().unwrap();

        let mut want = Vec::new();
        let mut kept = Vec::new(); // the records' payloads, held until the last scan
        for p in producers {
            let (stream, last, bytes) = p.join().unwrap();
            assert_eq!(bytes[..], payload(stream));
            want.push((stream, last));
            kept.push(bytes);
        }
        let h = log.collector().register();
        let mut got = Vec::new();
        let scanned = log.scan(&h.pin(), |r| match r {
            Recovered::Record(r) => got.push((r.stream, r.claim)),
            Recovered::Torn(t) => panic!("nothing is torn once every writer committed: {t:?}"),
        });
        assert!(scanned.is_ok());
        got.sort_unstable();
        assert_eq!(got, want, "each record claims the last offset its producer got");
    });
}

/// S4/S5, the reclamation race with a stale writer: a writer that loaded the full segment as
/// `current` before another writer replaced it still adds (and gives back) a reference there,
/// while the replacing writer drops the segment's last record and runs the maintenance. The
/// segment is freed exactly once, after the stale writer is done with it.
///
/// Catches `hold_released_early` (the log's hold given back at the switch instead of through
/// the epoch: the last record's drop frees the segment under the stale writer).
#[test]
fn stale_writer_vs_last_release() {
    model_capped(2, || {
        let log = log(ONE_RECORD, Reclaim::WhenUnreferenced);
        let first = put(&log, 1); // fills the first segment
        let switcher = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let second = put(&log, 2); // finds it full, switches
                drop(first); // the first segment's last record
                let h = log.collector().register();
                for _ in 0..3 {
                    h.pin().flush();
                }
                assert!(log.maintain().is_ok());
                second
            })
        };
        let stale = put(&log, 3);
        let second = switcher.join().unwrap();
        assert_eq!(second[..], payload(2));
        assert_eq!(stale[..], payload(3), "S4: the stale writer's record is intact");
        drop((second, stale));
        let log = Arc::try_unwrap(log).unwrap_or_else(|_| panic!("the log has one owner left"));
        drop(log); // loom's leak check: every segment's `Arc` was dropped, i.e. each was freed
    });
}

/// S4, the reclamation race with a writer still filling: the writer reserved in a segment and
/// unpinned its guard before committing (its reservation is what keeps the segment), while
/// another writer replaces the segment, drops its other record and runs the maintenance.
///
/// Catches `reserve_no_reference` (a reservation that takes units but no reference: the
/// segment's count reaches its end while the writer is still filling, and it is freed under it).
#[test]
fn last_release_while_writer_fills() {
    model_capped(2, || {
        let log = log(TWO_RECORDS, Reclaim::WhenUnreferenced);
        let first = put(&log, 1);
        let filler = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let h = log.collector().register();
                let r = {
                    let g = h.pin();
                    match log.append(meta(2), &[&payload(2)], &g) {
                        Ok(r) => r,
                        Err(e) => panic!("append: {e}"),
                    }
                }; // unpinned: only the reservation keeps its segment now
                let bytes = r.commit();
                assert_eq!(bytes[..], payload(2), "S4: the payload is intact after the commit");
            })
        };
        let other = put(&log, 3); // may find the segment full and switch
        drop(first);
        let h = log.collector().register();
        for _ in 0..3 {
            h.pin().flush();
        }
        assert!(log.maintain().is_ok());
        filler.join().unwrap();
        assert_eq!(other[..], payload(3));
        drop((other, h));
        let log = Arc::try_unwrap(log).unwrap_or_else(|_| panic!("the log has one owner left"));
        drop(log);
    });
}
