//! The configuration journal (issue 26, phase C's first step): topic configs and subscription
//! group configs in a log of checksummed records in shared memory ([`crate::shm`]), so that a
//! broker started again on the same `--store-path-root-dir` after a crash or a restart has
//! the topics and groups it had, as a RocketMQ broker reads them back from `topics.json` and
//! `subscriptionGroup.json`; and, at a clean stop (SIGTERM, [`RunningBroker::shutdown`]), each
//! topic's end offset and the committed offsets, so that the next run continues the offsets
//! (no client's old offset names a new message) and groups resume where they committed, as
//! RocketMQ's `consumerOffset.json` does. Messages and the rest of the state are not in it
//! yet (docs/restarts.md: phase B), nor are offsets after a crash.
//!
//! [`RunningBroker::shutdown`]: crate::broker::RunningBroker::shutdown
//!
//! # Records
//!
//! One log, `config`, of four kinds (the record's stream is the FNV-1a hash of the name): a topic's config (JSON of [`TopicConfig`]), a topic's
//! deletion (its name), a group's config (`{"name":…,"config":{…}}`) and a group's deletion.
//! Each record's claim is a stamp, one counter for the whole journal, continued after a
//! restart from the highest stamp recovered. Four more kinds mark runs: `START` (written once
//! the start's compaction is done, before serving), and at a clean stop one `STOP_END` per
//! topic, one `STOP_OFFSETS` per group and topic, then `CLEAN_STOP` with their count. The
//! stop is used only when its `CLEAN_STOP` comes after the last `START` and every record it
//! counts is there: a crash after a start, or during the stop, uses none of it.
//!
//! # Why a record is never older than the state it stands for
//!
//! A change is made in the core's tables first, then journaled by [`Writer::topic`] /
//! [`Writer::group`], which read the entity's *current* state under the journal's lock and
//! append it: a config if the entity exists, a deletion if not. Two changes of one entity
//! racing may journal in either order, but the second journaling reads the state after both,
//! so the entity's record with the highest stamp is its state after the last change that was
//! journaled: recovery keeps, per entity, the record with the highest stamp. A change is
//! answered after its record is committed, so an answered change is never lost to a crash;
//! a torn record (a crash while writing it) stands for a change that was not answered.
//!
//! # Compaction
//!
//! When the journal holds more than twice as many records as live entities (and more than
//! [`COMPACT_AFTER`]), [`Writer`] rewrites every live entity under the lock, then gives back
//! every segment before the one the rewrite started in. A record left in that segment or
//! after it is either older than the rewrite (and loses to it by stamp) or newer; a deletion
//! that was freed had, before it, only records of the same entity that were freed too
//! (records are appended in stamp order under the lock). A crash during the rewrite leaves
//! the old segments, which the next compaction frees.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::remoting::body::TopicConfig;
use crate::shm::{Directory, Log, LogConfig, Reclaim, RecordMeta, Recovered, RecoveryReport};
use crate::sync::{lock, Mutex};

/// A topic's config.
const TOPIC_PUT: u16 = 1;
/// A topic's deletion.
const TOPIC_DEL: u16 = 2;
/// A subscription group's config.
const GROUP_PUT: u16 = 3;
/// A subscription group's deletion.
const GROUP_DEL: u16 = 4;
/// A broker started serving (written once at start, after the start's compaction).
const START: u16 = 5;
/// At a clean stop: one topic's end offset (the highest of its queues').
const STOP_END: u16 = 6;
/// At a clean stop: one group's committed offsets on one topic.
const STOP_OFFSETS: u16 = 7;
/// A clean stop is complete: how many `STOP_END` / `STOP_OFFSETS` records it wrote.
const CLEAN_STOP: u16 = 8;

/// Records written since the last compaction below which the journal is never compacted.
pub(crate) const COMPACT_AFTER: u64 = 1024;

/// Bytes of each journal segment (configs are small: a group's is at most
/// [`super::groups::MAX_GROUP_CONFIG_BYTES`]).
const SEGMENT_SIZE: usize = 1 << 20;

/// What the journal held when it was opened.
#[derive(Debug, Default)]
pub(crate) struct RecoveredConfigs {
    /// Topic configs, by name.
    pub(crate) topics: BTreeMap<String, TopicConfig>,
    /// Group configs, by name, with the size of their JSON.
    pub(crate) groups: BTreeMap<String, (Map<String, Value>, usize)>,
    /// Whether the last run stopped cleanly (its stop records are complete): then `ends` and
    /// `offsets` are that stop's.
    pub(crate) clean_stop: bool,
    /// Each topic's end offset at the clean stop.
    pub(crate) ends: BTreeMap<String, u64>,
    /// Committed offsets at the clean stop: `(group, topic, queue, offset)`.
    pub(crate) offsets: Vec<(String, String, u32, u64)>,
    /// Complete records whose payload did not decode (from a newer version, or damaged
    /// inside a valid checksum): skipped.
    pub(crate) undecodable: u64,
    /// The log's own report: records, torn records, quarantined files, time.
    pub(crate) report: RecoveryReport,
}

/// What a journal reports to operators (runtime info and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JournalFigures {
    /// Complete records read when it was opened.
    pub(crate) recovered_records: u64,
    /// Torn records skipped then (changes a crash cut short, never answered).
    pub(crate) torn_records: u64,
    /// How long reading it back took.
    pub(crate) recovery_time: std::time::Duration,
    /// Changes that could not be written since (a full tmpfs): not kept over a restart.
    pub(crate) failed_writes: u64,
    /// Bytes of its mapped segment files.
    pub(crate) mapped_bytes: u64,
}

/// The journal: its directory (whose lock it holds) and its log.
#[derive(Debug)]
pub(crate) struct ConfigJournal {
    log: Log,
    state: Mutex<State>,
    /// `(records, torn records, time)` of the recovery at opening.
    recovered: (u64, u64, std::time::Duration),
}

#[derive(Debug)]
struct State {
    /// The last stamp written.
    stamp: u64,
    /// Records written since the last compaction (or since opening).
    since_compaction: u64,
    /// Records that could not be written (a full tmpfs): those changes are not kept.
    failed: u64,
}

/// The entity a record names, for "the last record per entity wins".
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Entity {
    Topic(String),
    Group(String),
}

/// What a config record says of its entity (`None`: deleted).
enum Config {
    Topic(Option<TopicConfig>),
    Group(Option<Map<String, Value>>),
}

/// A config record decoded once: its entity and that entity's state; `None` when the payload
/// does not decode.
fn decode_config(kind: u16, payload: &[u8]) -> Option<(Entity, Config)> {
    let name = || std::str::from_utf8(payload).ok().map(str::to_string);
    Some(match kind {
        TOPIC_PUT => {
            let c = serde_json::from_slice::<TopicConfig>(payload).ok()?;
            (Entity::Topic(c.topic_name.clone()), Config::Topic(Some(c)))
        }
        TOPIC_DEL => (Entity::Topic(name()?), Config::Topic(None)),
        GROUP_PUT => {
            let g = serde_json::from_slice::<GroupRecord>(payload).ok()?;
            (Entity::Group(g.name), Config::Group(Some(g.config)))
        }
        GROUP_DEL => (Entity::Group(name()?), Config::Group(None)),
        _ => return None,
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct GroupRecord {
    name: String,
    config: Map<String, Value>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct EndRecord {
    topic: String,
    end: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct OffsetsRecord {
    group: String,
    topic: String,
    /// `(queue, offset)`.
    offsets: Vec<(u32, u64)>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StopRecord {
    records: u64,
}

impl ConfigJournal {
    /// Opens (or creates) the journal in the directory `path`, owned by `owner`
    /// (`cluster/broker`), and reads back what it holds.
    ///
    /// # Errors
    /// The directory's refusals ([`crate::shm::SegmentError::Locked`] with the holder's pid,
    /// another owner, a damaged identity) and file errors.
    pub(crate) fn open(
        path: &Path,
        owner: &str,
    ) -> Result<(Self, RecoveredConfigs), crate::shm::SegmentError> {
        let dir = Directory::open(path, owner)?;
        Self::open_in(&dir)
    }

    /// As [`open`](Self::open), in a directory already open (the store's): the journal's log
    /// keeps the directory's lock for as long as it lives.
    pub(crate) fn open_in(
        dir: &Directory,
    ) -> Result<(Self, RecoveredConfigs), crate::shm::SegmentError> {
        let config = LogConfig {
            segment_size: SEGMENT_SIZE,
            reclaim: Reclaim::OnTruncate,
            populate: false,
            maintenance_thread: false,
        };
        let mut last: BTreeMap<Entity, (u64, Config)> = BTreeMap::new();
        let mut run_records: Vec<(u64, u16, bytes::Bytes)> = Vec::new();
        let mut unreadable = 0;
        let mut stamp = 0;
        let (log, report) =
            dir.open_log("config", config, crossbeam_epoch::Collector::new(), |r| {
                let Recovered::Record(r) = r else { return };
                stamp = stamp.max(r.claim);
                if matches!(r.kind, START | STOP_END | STOP_OFFSETS | CLEAN_STOP) {
                    run_records.push((r.claim, r.kind, r.payload));
                    return;
                }
                let Some((entity, config)) = decode_config(r.kind, &r.payload) else {
                    unreadable += 1;
                    return;
                };
                if !last.get(&entity).is_some_and(|(s, _)| *s > r.claim) {
                    last.insert(entity, (r.claim, config));
                }
            })?;
        let mut out =
            RecoveredConfigs { report, undecodable: unreadable, ..RecoveredConfigs::default() };
        last_clean_stop(run_records, &mut out);
        for (entity, (_, config)) in last {
            match (entity, config) {
                (Entity::Topic(name), Config::Topic(Some(c))) => {
                    out.topics.insert(name, c);
                }
                (Entity::Group(name), Config::Group(Some(c))) => {
                    let size = serde_json::to_vec(&c).map_or(0, |v| v.len());
                    out.groups.insert(name, (c, size));
                }
                _ => {} // deleted
            }
        }
        let state = State { stamp, since_compaction: out.report.records, failed: 0 };
        let r = &out.report;
        let recovered = (r.records, r.torn_records, r.elapsed);
        Ok((ConfigJournal { log, state: Mutex::new(state), recovered }, out))
    }

    /// The journal's writer: holds its lock (see the module documentation) until dropped.
    pub(crate) fn writer(&self) -> Writer<'_> {
        let handle = self.log.collector().register();
        Writer { journal: self, state: lock(&self.state), handle }
    }

    /// Its figures now.
    pub(crate) fn figures(&self) -> JournalFigures {
        let (recovered_records, torn_records, recovery_time) = self.recovered;
        JournalFigures {
            recovered_records,
            torn_records,
            recovery_time,
            failed_writes: lock(&self.state).failed,
            mapped_bytes: self.log.stats().mapped_bytes,
        }
    }
}

/// Writes records under the journal's lock.
pub(crate) struct Writer<'a> {
    journal: &'a ConfigJournal,
    state: crate::sync::MutexGuard<'a, State>,
    /// This writer's handle on the log's epoch collector.
    handle: crossbeam_epoch::LocalHandle,
}

impl Writer<'_> {
    /// Journals topic `name`'s current state: `config` if it exists, else its deletion.
    pub(crate) fn topic(&mut self, name: &str, config: Option<&TopicConfig>) {
        match config.map(serde_json::to_vec) {
            Some(Ok(json)) => self.append(TOPIC_PUT, name, &json),
            Some(Err(e)) => self.failed(format!("topic {name}: {e}")),
            None => self.append(TOPIC_DEL, name, name.as_bytes()),
        }
    }

    /// Journals group `name`'s current state: `config` if an admin created it, else its
    /// deletion.
    pub(crate) fn group(&mut self, name: &str, config: Option<Map<String, Value>>) {
        match config {
            Some(config) => {
                let record = GroupRecord { name: name.to_string(), config };
                match serde_json::to_vec(&record) {
                    Ok(json) => self.append(GROUP_PUT, name, &json),
                    Err(e) => self.failed(format!("group {name}: {e}")),
                }
            }
            None => self.append(GROUP_DEL, name, name.as_bytes()),
        }
    }

    /// Marks the start of a run (after the start's compaction, before serving): a clean stop
    /// recorded before it is used up.
    pub(crate) fn start(&mut self) {
        self.append(START, "", &[]);
    }

    /// At a clean stop: `topic`'s end offset. Whether it was written.
    pub(crate) fn stop_end(&mut self, topic: &str, end: u64) -> bool {
        let record = EndRecord { topic: topic.to_string(), end };
        self.append_json(STOP_END, topic, &record)
    }

    /// At a clean stop: `group`'s committed offsets on `topic`. Whether it was written.
    pub(crate) fn stop_offsets(
        &mut self,
        group: &str,
        topic: &str,
        offsets: Vec<(u32, u64)>,
    ) -> bool {
        let record = OffsetsRecord { group: group.to_string(), topic: topic.to_string(), offsets };
        self.append_json(STOP_OFFSETS, group, &record)
    }

    /// Completes a clean stop of `records` records (the ones [`stop_end`](Self::stop_end)
    /// and [`stop_offsets`](Self::stop_offsets) wrote).
    pub(crate) fn clean_stop(&mut self, records: u64) -> bool {
        self.append_json(CLEAN_STOP, "", &StopRecord { records })
    }

    /// Whether the journal should be compacted now, `live` entities being in the tables.
    pub(crate) fn wants_compaction(&self, live: usize) -> bool {
        let live = live as u64;
        self.state.since_compaction > COMPACT_AFTER.max(live.saturating_mul(2))
    }

    /// Rewrites every live entity, then frees the segments before the rewrite.
    pub(crate) fn compact(
        &mut self,
        topics: &[TopicConfig],
        groups: &BTreeMap<String, Map<String, Value>>,
    ) {
        let guard = self.handle.pin();
        let Ok(start) = self.journal.log.position(&guard) else { return };
        let failed = self.state.failed;
        for t in topics {
            self.topic(&t.topic_name, Some(t));
        }
        for (name, config) in groups {
            self.group(name, Some(config.clone()));
        }
        if self.state.failed != failed {
            // Part of the rewrite is missing: the old records must stay.
            return;
        }
        let _ = self.journal.log.truncate_before(start.segment, &guard);
        drop(guard);
        // The holds go through the epoch: this writer's handle is the only one of the collector
        // (writers exist one at a time, under the lock we hold), so once it is unpinned a few
        // flushes run the deferred releases, and `maintain` frees the segments.
        for _ in 0..4 {
            self.handle.pin().flush();
        }
        let _ = self.journal.log.maintain();
        self.state.since_compaction = (topics.len() + groups.len()) as u64;
    }

    fn append_json(&mut self, kind: u16, name: &str, record: &impl serde::Serialize) -> bool {
        let failed = self.state.failed;
        match serde_json::to_vec(record) {
            Ok(json) => self.append(kind, name, &json),
            Err(e) => self.failed(format!("{name}: {e}")),
        }
        self.state.failed == failed
    }

    fn append(&mut self, kind: u16, name: &str, payload: &[u8]) {
        let stream = crate::hash::fnv1a_64(name.as_bytes());
        let claim = self.state.stamp + 1;
        let guard = self.handle.pin();
        match self.journal.log.append(RecordMeta { kind, stream, claim }, &[payload], &guard) {
            Ok(r) => {
                drop(r.commit());
                self.state.stamp = claim;
                self.state.since_compaction += 1;
            }
            Err(e) => self.failed(e.to_string()),
        }
        drop(guard);
        let _ = self.journal.log.maintain();
    }

    fn failed(&mut self, why: String) {
        self.state.failed += 1;
        tracing::error!(
            "configuration journal: a change could not be written ({why}); it holds in memory \
             but will not be there after a restart"
        );
    }
}

/// Fills `out`'s clean-stop fields from the run records (`START`, `STOP_*`, `CLEAN_STOP`):
/// the last `CLEAN_STOP` after the last `START`, if the records between them are all there.
/// A `START` that compaction freed took every older record with it (records go in stamp
/// order), so the stop records after it are then all that is left.
fn last_clean_stop(mut records: Vec<(u64, u16, bytes::Bytes)>, out: &mut RecoveredConfigs) {
    records.sort_by_key(|(claim, ..)| *claim);
    let started = records.iter().rev().find(|(_, k, _)| *k == START).map_or(0, |(c, ..)| *c);
    let Some((stopped, _, stop)) =
        records.iter().rev().find(|(c, k, _)| *k == CLEAN_STOP && *c > started)
    else {
        return;
    };
    let Ok(stop) = serde_json::from_slice::<StopRecord>(stop) else {
        out.undecodable += 1;
        return;
    };
    let mut ends = BTreeMap::new();
    let mut offsets = Vec::new();
    let mut found = 0;
    for (_, kind, payload) in records.iter().filter(|(c, ..)| *c > started && c < stopped) {
        match *kind {
            STOP_END => match serde_json::from_slice::<EndRecord>(payload) {
                Ok(e) => {
                    ends.insert(e.topic, e.end);
                    found += 1;
                }
                Err(_) => out.undecodable += 1,
            },
            STOP_OFFSETS => match serde_json::from_slice::<OffsetsRecord>(payload) {
                Ok(o) => {
                    for (q, off) in o.offsets {
                        offsets.push((o.group.clone(), o.topic.clone(), q, off));
                    }
                    found += 1;
                }
                Err(_) => out.undecodable += 1,
            },
            _ => {}
        }
    }
    if found == stop.records {
        out.clean_stop = true;
        out.ends = ends;
        out.offsets = offsets;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::shm::tests::TestDir;

    fn group_config(retries: i64) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("retryMaxTimes".into(), Value::from(retries));
        m
    }

    #[test]
    fn given_changes_when_reopened_should_hold_each_entitys_last_state() {
        let d = TestDir::new("journal");
        {
            let (j, got) = ConfigJournal::open(&d.0, "c/b").expect("opened");
            assert!(got.topics.is_empty() && got.groups.is_empty(), "a new journal is empty");
            let mut w = j.writer();
            w.topic("A", Some(&TopicConfig::new("A", 4, 4)));
            w.topic("B", Some(&TopicConfig::new("B", 2, 2)));
            w.topic("A", Some(&TopicConfig::new("A", 8, 8)));
            w.topic("B", None);
            w.group("g1", Some(group_config(3)));
            w.group("g2", Some(group_config(5)));
            w.group("g2", None);
            // Dropped without close: as after a crash, every committed record is kept.
        }
        let (j, got) = ConfigJournal::open(&d.0, "c/b").expect("reopened");
        assert_eq!(got.topics.keys().collect::<Vec<_>>(), ["A"], "B was deleted");
        assert_eq!(got.topics["A"].read_queue_nums, 8, "A's last config");
        assert_eq!(got.groups.keys().collect::<Vec<_>>(), ["g1"], "g2 was deleted");
        assert_eq!(got.groups["g1"].0["retryMaxTimes"], 3);
        assert_eq!((got.undecodable, got.report.torn_records), (0, 0));
        let f = j.figures();
        assert_eq!((f.recovered_records, f.failed_writes), (7, 0), "{f:?}");
        assert!(f.mapped_bytes > 0, "{f:?}");
        // Stamps continue: a change after the restart wins over the records before it.
        j.writer().topic("A", None);
        drop(j);
        let (_, got) = ConfigJournal::open(&d.0, "c/b").expect("reopened again");
        assert!(got.topics.is_empty(), "the deletion after the restart holds: {:?}", got.topics);
    }

    #[test]
    fn given_a_clean_stop_should_give_its_offsets_once_and_never_after_a_crash() {
        let d = TestDir::new("journal-stop");
        {
            let (j, got) = ConfigJournal::open(&d.0, "c/b").expect("opened");
            assert!(!got.clean_stop, "a new journal has no stop");
            let mut w = j.writer();
            w.topic("A", Some(&TopicConfig::new("A", 2, 2)));
            w.start();
            assert!(w.stop_end("A", 42));
            assert!(w.stop_offsets("g", "A", vec![(0, 40), (1, 42)]));
            assert!(w.clean_stop(2));
        }
        let (j, got) = ConfigJournal::open(&d.0, "c/b").expect("reopened");
        assert!(got.clean_stop, "the stop is complete");
        assert_eq!(got.ends.get("A"), Some(&42));
        assert_eq!(
            got.offsets,
            [("g".to_string(), "A".to_string(), 0, 40), ("g".to_string(), "A".to_string(), 1, 42)]
        );
        // The next run starts, then crashes: the stop before its start is not used again.
        j.writer().start();
        drop(j);
        let (j, got) = ConfigJournal::open(&d.0, "c/b").expect("reopened after a crash");
        assert!(!got.clean_stop, "a crash after a start keeps no offsets");
        assert_eq!(got.topics.len(), 1, "the configs are kept all the same");
        // A stop cut short (fewer records than it counts) is not used either.
        let mut w = j.writer();
        assert!(w.stop_end("A", 50));
        assert!(w.clean_stop(2));
        drop(w);
        drop(j);
        let (_, got) = ConfigJournal::open(&d.0, "c/b").expect("reopened after a torn stop");
        assert!(!got.clean_stop, "an incomplete stop is not used");
    }

    #[test]
    fn given_a_second_opener_should_refuse_it_naming_the_holder() {
        let d = TestDir::new("journal");
        let _held = ConfigJournal::open(&d.0, "c/b").expect("opened");
        let e = ConfigJournal::open(&d.0, "c/b").expect_err("refused");
        assert!(e.to_string().contains("in use by process"), "{e}");
    }

    #[test]
    fn given_many_changes_when_compacted_should_free_segments_and_keep_the_state() {
        let d = TestDir::new("journal");
        let live: Vec<TopicConfig> =
            (0..10).map(|i| TopicConfig::new(format!("T{i}"), 1, 1)).collect();
        {
            let (j, _) = ConfigJournal::open(&d.0, "c/b").expect("opened");
            let mut w = j.writer();
            // Churn: enough records of created-then-deleted topics to fill several segments.
            for i in 0..20_000 {
                let name = format!("Churn{i}");
                w.topic(&name, Some(&TopicConfig::new(&name, 1, 1)));
                w.topic(&name, None);
            }
            for t in &live {
                w.topic(&t.topic_name, Some(t));
            }
            assert!(w.wants_compaction(live.len()), "40k records for 10 live topics");
            let before = j.log.stats().live_segments;
            w.compact(&live, &BTreeMap::new());
            assert!(!w.wants_compaction(live.len()), "compacted");
            drop(w);
            let after = j.log.stats().live_segments;
            assert!(after < before, "segments are freed: {before} -> {after}");
        }
        let (_, got) = ConfigJournal::open(&d.0, "c/b").expect("reopened");
        assert_eq!(
            got.topics.len(),
            10,
            "every live topic, no churned one: {:?}",
            got.topics.keys()
        );
    }
}
