//! The engine on shared-memory segments (issue 26, phase B; docs/restarts.md): an engine
//! opened with [`Engine::open`](super::Engine::open) keeps every message in a record of a
//! [`crate::shm`] log and its topics and queue heads in a [`Journal`], so that an engine opened
//! again on the same directory, after a clean drop or a crash (`kill -9`, OOM), serves every
//! message whose append had returned, at its queue and offset, with its timestamp and tag.
//!
//! # Records
//!
//! Log `messages`: one record per append (a batch is **one** record, so it comes back whole
//! or not at all), kind [`MESSAGES`], stream `sid << 32 | queue` (the topic's stable id, see
//! below), claim the offset of the record's *last* message. Payload: per message a 16-byte
//! header (timestamp u64 LE, tag u32 LE, length u32 LE) and the message's bytes. The nodes'
//! payloads are slices of the record's payload: no copy after the one into the segment, and
//! the segment stays mapped while any of its messages is linked; when the reaper has freed
//! all of them, the segment file is removed.
//!
//! Journal `engine`: `t<name>` → sid u32, queue count u32, first offset u64 (LE), written when
//! the topic is created and deleted when it is; `n` → the next sid (sids are never reused, so a
//! record of a deleted topic never joins a new one); `h<stream BE>` → the queue's first live
//! offset, written by the reaper after it unlinks nodes and before it frees them (records
//! below it are dead).
//!
//! # Append
//!
//! Reserve and fill the record (claim "none"), then link the node(s) with
//! [`Queue::append_claimed`](crate::queue::Queue::append_claimed), which stores the offset it
//! is about to take as the record's claim before every publishing CAS, then commit the record;
//! the caller is answered after that. A crash image in which a reader could have seen the
//! offset therefore has the claim (committed or torn): see `crate::shm` S3 and the loom model
//! `claim_before_publish_vs_crash_scan`.
//!
//! # Recovery
//!
//! Per queue, records sort by claim. The queue starts at its journaled head (else the topic's
//! first offset) and continues to `max(every committed or torn claim + 1)`; an offset in that
//! range without a committed record (a send never answered) becomes a hole node, which every
//! reader skips and every group counts as filtered. Records below the head, of a deleted
//! topic or of a queue the topic does not have are dropped (and their segments freed).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::topic::Topic;
use super::EngineError;
use crate::queue::{Reclaimer, HOLE_TIMESTAMP};
use crate::shm::{
    Directory, Journal, Log, LogConfig, Quarantined, Recovered, RecoveryReport, SegmentError,
};
use crate::sync::{lock, Arc, Mutex};

/// The record kind of messages.
pub(crate) const MESSAGES: u16 = 1;
/// Bytes before each message in a record.
pub(crate) const ENTRY_HEADER: usize = 16;
/// Bytes of the journal's segments.
const JOURNAL_SEGMENT: usize = 1 << 20;

/// What [`Engine::open`](super::Engine::open) found in its directory.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EngineRecovery {
    /// Topics restored.
    pub topics: usize,
    /// Messages restored into their queues.
    pub messages: u64,
    /// Offsets restored as holes: claimed by an append that never completed (never answered).
    pub holes: u64,
    /// Records of the message log that were torn (a crash during the append) and skipped.
    pub torn_records: u64,
    /// Complete records not restored: below their queue's head (already freed), of a deleted
    /// topic, or undecodable.
    pub dropped_records: u64,
    /// Segment files set aside (renamed `*.quarantine`), with the reason.
    pub quarantined: Vec<Quarantined>,
    /// The message log's own report.
    pub messages_log: RecoveryReport,
    /// The journal's own report.
    pub journal_log: RecoveryReport,
    /// From the start of `open` to an engine ready to append.
    pub elapsed: Duration,
}

/// The durable side of an engine: its message log and its journal.
#[derive(Debug)]
pub(crate) struct Durable {
    pub(crate) log: Log,
    pub(crate) journal: Journal,
    /// The next topic sid (also journaled as `n`). Taken under the topics' write lock.
    next_sid: Mutex<u32>,
    /// Journal writes that failed (a full tmpfs): their change holds in memory only.
    pub(crate) failed_writes: crate::sync::plain::AtomicU64,
}

/// A topic's journal key.
fn topic_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(b't');
    k.extend_from_slice(name.as_bytes());
    k
}

/// A queue head's journal key.
pub(crate) fn head_key(stream: u64) -> [u8; 9] {
    let mut k = [b'h'; 9];
    k[1..].copy_from_slice(&stream.to_be_bytes());
    k
}

/// The record stream of queue `queue` of the topic with sid `sid`.
pub(crate) fn stream_of(sid: u32, queue: u32) -> u64 {
    u64::from(sid) << 32 | u64::from(queue)
}

/// A message's header in a record.
pub(crate) fn entry_header(timestamp: u64, tag: u32, len: usize) -> [u8; ENTRY_HEADER] {
    let mut h = [0u8; ENTRY_HEADER];
    h[..8].copy_from_slice(&timestamp.to_le_bytes());
    h[8..12].copy_from_slice(&tag.to_le_bytes());
    h[12..].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// The messages of a record's payload: `(timestamp, tag, bytes)` each; `None` if it does not
/// decode (from another version, or damaged inside a valid checksum).
fn decode_entries(payload: &Bytes) -> Option<Vec<(u64, u32, Bytes)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let h = payload.get(at..at + ENTRY_HEADER)?;
        let ts = u64::from_le_bytes(h[..8].try_into().ok()?);
        let tag = u32::from_le_bytes(h[8..12].try_into().ok()?);
        let len = u32::from_le_bytes(h[12..16].try_into().ok()?) as usize;
        let start = at + ENTRY_HEADER;
        let end = start.checked_add(len).filter(|e| *e <= payload.len())?;
        if ts == HOLE_TIMESTAMP {
            return None;
        }
        out.push((ts, tag, payload.slice(start..end)));
        at = end;
    }
    (!out.is_empty()).then_some(out)
}

pub(crate) fn storage(e: SegmentError) -> EngineError {
    EngineError::Storage(e.to_string())
}

/// A topic as the journal has it.
struct TopicEntry {
    sid: u32,
    queues: u32,
    first: u64,
}

fn decode_topic(v: &[u8]) -> Option<TopicEntry> {
    Some(TopicEntry {
        sid: u32::from_le_bytes(v.get(..4)?.try_into().ok()?),
        queues: u32::from_le_bytes(v.get(4..8)?.try_into().ok()?),
        first: u64::from_le_bytes(v.get(8..16)?.try_into().ok()?),
    })
}

fn encode_topic(sid: u32, queues: u32, first: u64) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(&sid.to_le_bytes());
    v[4..8].copy_from_slice(&queues.to_le_bytes());
    v[8..].copy_from_slice(&first.to_le_bytes());
    v
}

/// What one queue's recovery collects.
#[derive(Default)]
struct QueueRecords {
    /// `(claim, record payload)` of complete records.
    records: Vec<(u64, Bytes)>,
    /// One past the highest claim seen (complete or torn).
    end: u64,
}

/// The topics a durable engine starts with, and the durable side itself.
pub(crate) struct Opened {
    pub(crate) durable: Durable,
    pub(crate) topics: HashMap<String, Arc<Topic>>,
    /// Budget bytes the restored messages take.
    pub(crate) used: u64,
    pub(crate) recovery: EngineRecovery,
}

/// Opens the journal and the message log in `dir` and rebuilds the topics (see the module
/// docs). `cost` gives a restored message's budget cost from its payload length (a hole's is
/// `cost(0)`: the reaper gives back a node's cost for holes too).
pub(crate) fn open(
    dir: &Directory,
    segment_size: usize,
    collector: &crossbeam_epoch::Collector,
    reclaimer: &Arc<Reclaimer>,
    cost: impl Fn(usize) -> u64,
) -> Result<Opened, EngineError> {
    let started = Instant::now();
    let (journal, journal_log) = Journal::open(dir, "engine", JOURNAL_SEGMENT).map_err(storage)?;
    let mut recovery = EngineRecovery { journal_log, ..EngineRecovery::default() };
    let mut next_sid = journal
        .get(b"n")
        .and_then(|v| Some(u32::from_le_bytes(v.get(..4)?.try_into().ok()?)))
        .unwrap_or(1);
    // sid -> (name, queue count, first offset)
    let mut by_sid: HashMap<u32, (String, u32, u64)> = HashMap::new();
    for (k, v) in journal.entries(b"t") {
        let (Ok(name), Some(t)) = (String::from_utf8(k[1..].to_vec()), decode_topic(&v)) else {
            continue;
        };
        next_sid = next_sid.max(t.sid.saturating_add(1));
        by_sid.insert(t.sid, (name, t.queues, t.first));
    }
    let heads: HashMap<u64, u64> = journal
        .entries(b"h")
        .into_iter()
        .filter_map(|(k, v)| {
            let stream = u64::from_be_bytes(k.get(1..9)?.try_into().ok()?);
            Some((stream, u64::from_le_bytes(v.get(..8)?.try_into().ok()?)))
        })
        .collect();
    let mut queues: BTreeMap<u64, QueueRecords> = BTreeMap::new();
    let mut dropped = 0u64;
    let config = LogConfig { segment_size, ..LogConfig::default() };
    let (log, report) = dir
        .open_log("messages", config, collector.clone(), |r| {
            let (stream, claim, complete) = match r {
                Recovered::Record(rec) if rec.kind == MESSAGES => {
                    (rec.stream, rec.claim, Some(rec.payload))
                }
                Recovered::Torn(t) if t.kind == MESSAGES => (t.stream, t.claim, None),
                _ => {
                    dropped += 1;
                    return;
                }
            };
            let (sid, queue) = ((stream >> 32) as u32, stream as u32);
            let known = by_sid.get(&sid).is_some_and(|(_, n, _)| queue < *n);
            if !known || claim == crate::shm::NO_CLAIM {
                dropped += u64::from(complete.is_some());
                return;
            }
            let q = queues.entry(stream).or_default();
            q.end = q.end.max(claim.saturating_add(1));
            if let Some(payload) = complete {
                q.records.push((claim, payload));
            }
        })
        .map_err(storage)?;
    recovery.torn_records = report.torn_records + report.corrupt_records;
    recovery.quarantined = report.quarantined.clone();
    recovery.messages_log = report;
    let mut topics = HashMap::new();
    let mut used = 0u64;
    let handle = collector.register();
    for (sid, (name, count, first)) in by_sid {
        let starts: Vec<u64> = (0..count)
            .map(|q| heads.get(&stream_of(sid, q)).copied().unwrap_or(first).max(first))
            .collect();
        let topic = Topic::with_starts(name.clone(), sid, &starts, reclaimer);
        for (q, eq) in topic.queues.iter().enumerate() {
            let Some(mut found) = queues.remove(&stream_of(sid, q as u32)) else { continue };
            found.records.sort_unstable_by_key(|(claim, _)| *claim);
            let guard = handle.pin();
            let mut next = starts[q];
            let mut bytes = 0u64;
            for (claim, payload) in found.records {
                let Some(entries) = decode_entries(&payload) else {
                    dropped += 1;
                    continue;
                };
                let n = entries.len() as u64;
                let Some(base) = (claim + 1).checked_sub(n) else {
                    dropped += 1;
                    continue;
                };
                if claim < next {
                    // Below the head (freed before the crash) or a duplicate claim.
                    dropped += 1;
                    continue;
                }
                while next < base {
                    eq.q.append(Bytes::new(), HOLE_TIMESTAMP, 0, &guard);
                    bytes += cost(0);
                    recovery.holes += 1;
                    next += 1;
                }
                for (i, (ts, tag, body)) in entries.into_iter().enumerate() {
                    if base + (i as u64) < next {
                        continue;
                    }
                    bytes += cost(body.len());
                    eq.q.append(body, ts, tag, &guard);
                    recovery.messages += 1;
                    next += 1;
                }
            }
            while next < found.end {
                eq.q.append(Bytes::new(), HOLE_TIMESTAMP, 0, &guard);
                bytes += cost(0);
                recovery.holes += 1;
                next += 1;
            }
            // Relaxed: the engine is not shared yet.
            eq.bytes_in.fetch_add(bytes, crate::sync::plain::Ordering::Relaxed);
            used += bytes;
        }
        topics.insert(name, Arc::new(topic));
    }
    dropped += queues.values().map(|q| q.records.len() as u64).sum::<u64>();
    recovery.dropped_records = dropped;
    recovery.topics = topics.len();
    recovery.elapsed = started.elapsed();
    let durable = Durable {
        log,
        journal,
        next_sid: Mutex::new(next_sid),
        failed_writes: crate::sync::plain::AtomicU64::new(0),
    };
    Ok(Opened { durable, topics, used, recovery })
}

impl Durable {
    /// Journals a new topic and returns its sid (the caller holds the topics' write lock).
    pub(crate) fn create_topic(
        &self,
        name: &str,
        queues: u32,
        first: u64,
    ) -> Result<u32, EngineError> {
        let mut next = lock(&self.next_sid);
        let sid = *next;
        if sid == u32::MAX {
            return Err(EngineError::Storage("every topic id has been used".into()));
        }
        let following = (sid + 1).to_le_bytes();
        let value = encode_topic(sid, queues, first);
        let key = topic_key(name);
        self.journal
            .put_all([(&b"n"[..], &following[..]), (&key[..], &value[..])])
            .map_err(storage)?;
        *next = sid + 1;
        Ok(sid)
    }

    /// Journals a topic's deletion: its key and its queues' heads go.
    pub(crate) fn delete_topic(&self, name: &str, sid: u32) -> Result<(), EngineError> {
        self.journal.delete(&topic_key(name)).map_err(storage)?;
        let mut prefix = vec![b'h'];
        prefix.extend_from_slice(&sid.to_be_bytes());
        if let Err(e) = self.journal.delete_prefix(&prefix) {
            self.failed(&e);
        }
        Ok(())
    }

    /// Journals queues' first live offsets, `(stream, first)` each, in one journal call
    /// (before the nodes below them are freed).
    pub(crate) fn heads_moved(&self, heads: &[(u64, u64)]) {
        let entries: Vec<([u8; 9], [u8; 8])> =
            heads.iter().map(|(stream, first)| (head_key(*stream), first.to_le_bytes())).collect();
        let changes = entries.iter().map(|(k, v)| (&k[..], &v[..]));
        if let Err(e) = self.journal.put_all(changes) {
            self.failed(&e);
        }
    }

    fn failed(&self, e: &SegmentError) {
        // Relaxed: a statistic.
        let before = self.failed_writes.fetch_add(1, crate::sync::plain::Ordering::Relaxed);
        #[cfg(feature = "broker")]
        if before == 0 || before.is_power_of_two() {
            tracing::error!(
                "engine journal: a change could not be written ({e}); it holds in memory but \
                 not over a restart ({} such failures)",
                before + 1
            );
        }
        let _ = (e, before);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use crate::engine::{Engine, EngineConfig, EngineError, Message, Retention};
    use crate::shm::tests::TestDir;
    use crate::shm::{Directory, RecordMeta};

    const SEGMENT: usize = 64 << 10;

    pub(super) fn config() -> EngineConfig {
        EngineConfig {
            reaper_thread: false,
            max_message_size: 16 << 10,
            retention: Retention { time: Duration::from_secs(3600), bytes: u64::MAX },
            ..EngineConfig::default()
        }
    }

    pub(super) fn open(d: &TestDir) -> (Engine, super::EngineRecovery) {
        let dir = Directory::open(&d.0, "c/b").expect("directory");
        Engine::open(config(), &dir, SEGMENT).expect("engine")
    }

    /// Every retained message of `queue`: (offset, timestamp, tag, payload).
    fn messages(e: &Engine, topic: &str, queue: u32) -> Vec<(u64, u64, u32, Bytes)> {
        let mut v = Vec::new();
        let t = e.topic(topic).expect("topic");
        let first = t.queue_stats(queue).expect("stats").min_offset;
        t.read(queue, first, usize::MAX, &crate::engine::Filter::All, |m| {
            v.push((m.offset, m.timestamp, m.tag, m.payload.clone()));
            true
        })
        .expect("read");
        v
    }

    #[test]
    fn given_appends_and_a_batch_when_reopened_should_serve_each_at_its_offset() {
        let d = TestDir::new("durable-back");
        let before;
        {
            let (e, r) = open(&d);
            assert_eq!(r.messages, 0);
            e.create_topic("T", 2).expect("topic");
            let t = e.topic("T").expect("handle");
            for i in 0..50u64 {
                let m = Message::new(format!("m{i}")).with_tag("a").with_timestamp(1000 + i);
                t.append((i % 2) as u32, m).expect("append");
            }
            let batch = (0..5).map(|i| Message::new(format!("b{i}")).with_tag("b")).collect();
            let r = t.append_batch(1, batch).expect("batch");
            assert_eq!(r.offset, 25);
            before = (messages(&e, "T", 0), messages(&e, "T", 1));
        }
        let (e, r) = open(&d);
        assert_eq!(r.topics, 1);
        assert_eq!(r.messages, 55, "{r:?}");
        assert_eq!((r.holes, r.torn_records), (0, 0));
        assert_eq!((messages(&e, "T", 0), messages(&e, "T", 1)), before);
        let t = e.topic("T").expect("handle");
        let next = t.append(1, Message::new("after")).expect("append after reopening");
        assert_eq!(next.offset, 30, "offsets continue after the batch");
    }

    #[test]
    fn given_a_topic_made_at_given_starts_when_reopened_should_keep_each_queues_offsets() {
        // A replica installing another's queues makes each queue start at its own offset; an
        // empty queue must come back at its start (its head), not at the lowest one.
        let d = TestDir::new("durable-starts");
        {
            let (e, _) = open(&d);
            e.ensure_topic_at("S", &[5, 0, 9]).expect("topic");
            let t = e.topic("S").expect("handle");
            assert_eq!(t.append(0, Message::new("a")).expect("append").offset, 5);
            assert_eq!(t.append(1, Message::new("b")).expect("append").offset, 0);
            assert_eq!(t.queue_stats(2).expect("stats").max_offset, 9, "empty, at its start");
            assert!(matches!(e.ensure_topic_at("Z", &[]), Err(EngineError::InvalidQueueCount(0))));
        }
        let (e, _) = open(&d);
        let t = e.topic("S").expect("handle");
        assert_eq!(messages(&e, "S", 0).first().map(|m| m.0), Some(5));
        assert_eq!(t.append(2, Message::new("c")).expect("append").offset, 9);
        assert_eq!(t.append(1, Message::new("d")).expect("append").offset, 1);
    }

    #[test]
    fn given_reclaimed_messages_when_reopened_should_not_serve_them_and_should_free_segments() {
        let d = TestDir::new("durable-reap");
        let body = vec![7u8; 1000];
        {
            let (e, _) = open(&d);
            e.create_topic("R", 1).expect("topic");
            let t = e.topic("R").expect("handle");
            for _ in 0..300 {
                t.append(0, Message::new(body.clone())).expect("append");
            }
            let files = |d: &TestDir| {
                std::fs::read_dir(&d.0)
                    .expect("dir")
                    .filter(|e| {
                        e.as_ref()
                            .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("messages-"))
                    })
                    .count()
            };
            let full = files(&d);
            assert!(full >= 5, "300 KB in 64 KiB segments: {full} files");
            // Keep the last 10: retention by bytes of unheld messages.
            t.set_retention(Retention { time: Duration::from_secs(3600), bytes: 10 * 1100 });
            e.reap();
            e.reap();
            std::thread::sleep(Duration::from_millis(50));
            e.reap();
            let left = messages(&e, "R", 0);
            assert!(left.len() <= 12 && !left.is_empty(), "{} left", left.len());
            assert!(files(&d) <= 3, "drained segments are removed: {} of {full} left", files(&d));
        }
        let (e, r) = open(&d);
        let live: u64 = messages(&e, "R", 0)
            .iter()
            .map(|m| m.3.len() as u64 + super::super::topic::node_cost(true))
            .sum();
        assert_eq!(e.bytes_used(), 2 * SEGMENT as u64 + live, "restored messages and two segments");
        let back = messages(&e, "R", 0);
        assert!(back.len() <= 12, "freed messages stay freed: {} back ({r:?})", back.len());
        assert_eq!(back.last().map(|m| m.0), Some(299));
        let t = e.topic("R").expect("handle");
        assert_eq!(t.append(0, Message::new("x")).expect("append").offset, 300);
        t.set_retention(Retention { time: Duration::from_secs(3600), bytes: 0 });
        e.reap();
        assert_eq!(e.bytes_used(), 2 * SEGMENT as u64, "all reclaimed: back to the two segments");
    }

    #[test]
    fn given_a_deleted_topic_when_reopened_should_stay_deleted_and_its_name_start_afresh() {
        let d = TestDir::new("durable-delete");
        {
            let (e, _) = open(&d);
            e.create_topic("D", 1).expect("topic");
            e.topic("D").expect("h").append(0, Message::new("old")).expect("append");
            e.create_topic("K", 1).expect("topic");
            e.topic("K").expect("h").append(0, Message::new("kept")).expect("append");
            e.delete_topic("D").expect("delete");
        }
        {
            let (e, r) = open(&d);
            assert_eq!(e.topics(), vec![("K".to_string(), 1)]);
            assert_eq!(r.dropped_records, 1, "the deleted topic's record: {r:?}");
            e.create_topic("D", 1).expect("again");
            e.topic("D").expect("h").append(0, Message::new("new")).expect("append");
        }
        let (e, _) = open(&d);
        let got: Vec<Bytes> = messages(&e, "D", 0).into_iter().map(|m| m.3).collect();
        assert_eq!(got, vec![Bytes::from("new")], "the old topic's message never joins the new");
    }

    #[test]
    fn given_appends_torn_by_a_crash_when_reopened_should_make_their_offsets_holes() {
        let d = TestDir::new("durable-torn");
        {
            let (e, _) = open(&d);
            e.create_topic("H", 1).expect("topic");
            let t = e.topic("H").expect("h");
            t.append(0, Message::new("one")).expect("append");
            // What a crash between the publishing CAS and the commit leaves: a record that
            // claimed offset 1 and never committed, then a later answered append at 2.
            let d = e.inner.durable.as_ref().expect("durable");
            let guard = e.inner.pin();
            let meta =
                RecordMeta { kind: super::MESSAGES, stream: super::stream_of(1, 0), claim: 1 };
            let header = super::entry_header(5, 0, 4);
            let torn = d.log.append(meta, &[&header, b"torn"], &guard).expect("reserve");
            drop(guard);
            std::mem::forget(torn);
            let guard = e.inner.pin();
            let meta =
                RecordMeta { kind: super::MESSAGES, stream: super::stream_of(1, 0), claim: 2 };
            let header = super::entry_header(6, 0, 5);
            let r = d.log.append(meta, &[&header, b"three"], &guard).expect("reserve");
            drop(r.commit());
            // And the last record torn too: a batch of two that claimed offsets 3 and 4.
            let meta =
                RecordMeta { kind: super::MESSAGES, stream: super::stream_of(1, 0), claim: 4 };
            let header = super::entry_header(7, 0, 4);
            let torn = d.log.append(meta, &[&header, b"last"], &guard).expect("reserve");
            std::mem::forget(torn);
        }
        let (e, r) = open(&d);
        assert_eq!((r.torn_records, r.holes, r.messages), (2, 3, 2), "{r:?}");
        let got: Vec<(u64, Bytes)> = messages(&e, "H", 0).into_iter().map(|m| (m.0, m.3)).collect();
        assert_eq!(got, vec![(0, Bytes::from("one")), (2, Bytes::from("three"))]);
        let t = e.topic("H").expect("h");
        assert!(t.get(0, 1, |_| ()).expect("get").is_none(), "a hole is no message");
        assert_eq!(
            t.append(0, Message::new("four")).expect("append").offset,
            5,
            "no offset a torn record claimed is reused"
        );
        t.set_retention(Retention { time: Duration::from_secs(3600), bytes: 0 });
        e.reap();
        assert_eq!(e.bytes_used(), 2 * SEGMENT as u64, "holes are counted and given back too");
    }

    #[test]
    fn given_a_second_engine_on_the_directory_should_refuse_it() {
        let d = TestDir::new("durable-second");
        let (_e, _) = open(&d);
        match Directory::open(&d.0, "c/b") {
            Err(crate::shm::SegmentError::Locked { pid, .. }) => {
                assert_eq!(pid, Some(std::process::id()))
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        let other = TestDir::new("durable-small");
        let other_dir = Directory::open(&other.0, "c/b").expect("directory");
        let small = Engine::open(config(), &other_dir, 8192);
        assert!(
            matches!(small, Err(EngineError::InvalidConfig(_))),
            "a message must fit a segment"
        );
    }
}

#[cfg(test)]
mod damage_tests {
    use std::os::unix::fs::FileExt;

    use crate::engine::{Engine, Message};
    use crate::shm::tests::TestDir;

    use super::tests::open;

    fn message_segments(d: &TestDir) -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(&d.0)
            .expect("dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let f = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
                f.starts_with("messages-") && f.ends_with(".seg")
            })
            .collect();
        v.sort();
        v
    }

    /// 200 messages of 1000 bytes on one queue: about four 64 KiB segments.
    fn fill(d: &TestDir) {
        let (e, _) = open(d);
        e.create_topic("Z", 1).expect("topic");
        let t = e.topic("Z").expect("handle");
        for i in 0..200u32 {
            let mut body = vec![0u8; 1000];
            body[..4].copy_from_slice(&i.to_le_bytes());
            t.append(0, Message::new(body)).expect("append");
        }
    }

    fn bodies(e: &Engine) -> Vec<(u64, u32)> {
        let t = e.topic("Z").expect("topic");
        let first = t.queue_stats(0).expect("stats").min_offset;
        let mut v = Vec::new();
        t.read(0, first, usize::MAX, &crate::engine::Filter::All, |m| {
            let id = u32::from_le_bytes(m.payload[..4].try_into().expect("4 bytes"));
            v.push((m.offset, id));
            true
        })
        .expect("read");
        v
    }

    #[test]
    fn given_a_corrupted_record_when_reopened_should_skip_only_it() {
        let d = TestDir::new("durable-corrupt");
        fill(&d);
        let first = &message_segments(&d)[0];
        // A byte inside the first record's payload (after the 128-byte segment header and the
        // 32-byte record header): its checksum no longer validates.
        let f = std::fs::OpenOptions::new().write(true).open(first).expect("open segment");
        f.write_at(&[0xff], 128 + 32 + 20).expect("damage");
        let (e, r) = open(&d);
        assert_eq!(r.torn_records, 1, "the damaged record is counted: {r:?}");
        let got = bodies(&e);
        assert_eq!(got.len(), 199, "every other message is served");
        assert!(got.iter().all(|(o, id)| *o == u64::from(*id) && *o != 0), "each at its offset");
        assert_eq!(r.holes, 1, "its offset is a hole, never reused");
    }

    #[test]
    fn given_a_truncated_or_foreign_segment_when_reopened_should_set_it_aside_and_serve_the_rest() {
        let d = TestDir::new("durable-truncated");
        fill(&d);
        let segs = message_segments(&d);
        assert!(segs.len() >= 3, "several segments: {segs:?}");
        // The second one truncated (a file cut short), the third one from another directory.
        let f = std::fs::OpenOptions::new().write(true).open(&segs[1]).expect("open");
        f.set_len(4096).expect("truncate");
        let other = TestDir::new("durable-foreign");
        fill(&other);
        std::fs::copy(&message_segments(&other)[2], &segs[2]).expect("copy a foreign segment");
        let (e, r) = open(&d);
        assert_eq!(r.quarantined.len(), 2, "both set aside with a reason: {:?}", r.quarantined);
        assert!(r.quarantined.iter().all(|q| !q.reason.is_empty()));
        let got = bodies(&e);
        assert!(!got.is_empty() && got.len() < 200, "what is valid is served: {}", got.len());
        assert!(got.iter().all(|(o, id)| *o == u64::from(*id)), "each at its own offset");
        let t = e.topic("Z").expect("topic");
        assert_eq!(t.append(0, Message::new("x")).expect("append").offset, 200, "no reuse");
    }
}
