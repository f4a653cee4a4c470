//! A key-value journal over a [`Log`]: small state (which topics exist, where each queue's head
//! is, which offset a group committed) kept as the last record written for each key, so that
//! it reads back after a restart or a crash (issue 26, phase B; docs/restarts.md).
//!
//! # Records
//!
//! One record per change: kind [`PUT`] (key and value) or [`DEL`] (key), the record's stream
//! the FNV-1a hash of the key, its claim a stamp (one counter for the whole journal, continued
//! after a restart from the highest stamp recovered). Payload: key length (u16 LE), key, value.
//!
//! # Why the last record of a key is its state
//!
//! Changes are made under the journal's mutex, which also holds the in-memory map of the live
//! entries: a change updates the map and appends its record in one critical section, so the
//! records of one key are appended in the order the map took them, and the one with the
//! highest stamp is the key's value in the map. Recovery keeps, per key, the record with the
//! highest stamp, whatever order it meets them in. A change returns after its record's commit:
//! a returned change is never lost to a crash; a torn record (a crash while writing it) stands
//! for a change that never returned. A caller that must journal "the current state" of an
//! entity it changes under its own lock journals while still holding that lock.
//!
//! # Compaction
//!
//! When more than [`COMPACT_AFTER`] records, and more than twice the live keys, were written
//! since the last compaction, the next change rewrites every live entry (under the mutex) and
//! gives back every segment before the one the rewrite started in. A record left in that
//! segment or after it is either older than the rewrite (and loses to it by stamp) or newer; a
//! deletion that was freed had, before it, only records of the same key that were freed too
//! (records are appended in stamp order). A crash during the rewrite leaves the old segments,
//! which the next compaction frees. Every open compacts too (the whole journal is read then).

use std::collections::BTreeMap;

#[cfg(not(loom))]
use super::{Directory, LogConfig, Reclaim, Recovered, RecoveryReport};
use super::{Log, RecordMeta, SegmentError};
use crate::sync::{lock, Mutex};

/// A record setting a key's value.
pub const PUT: u16 = 1;
/// A record deleting a key.
pub const DEL: u16 = 2;

/// Records written since the last compaction below which a journal is never compacted.
pub const COMPACT_AFTER: u64 = 4096;

/// The longest key (its length is a u16 in the record).
pub const MAX_KEY: usize = u16::MAX as usize;

/// What a journal's state is: key to value.
pub type Entries = BTreeMap<Vec<u8>, Vec<u8>>;

/// Figures of a journal, for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Live keys.
    pub keys: u64,
    /// Records written since it was opened (compaction's rewrites included).
    pub written: u64,
    /// Compactions since it was opened.
    pub compactions: u64,
    /// Bytes of its mapped segment files.
    pub mapped_bytes: u64,
}

#[derive(Debug)]
struct State {
    live: Entries,
    stamp: u64,
    since_compaction: u64,
    written: u64,
    compactions: u64,
}

/// A key-value journal in a [`Directory`]. See the [module docs](self).
#[derive(Debug)]
pub struct Journal {
    log: Log,
    state: Mutex<State>,
}

/// The length prefix of a record's payload (the payload is this, the key, the value).
fn key_len(key: &[u8]) -> Result<[u8; 2], SegmentError> {
    let len = u16::try_from(key.len()).map_err(|_| {
        SegmentError::InvalidConfig(format!(
            "a journal key of {} bytes (at most {MAX_KEY})",
            key.len()
        ))
    })?;
    Ok(len.to_le_bytes())
}

#[cfg(not(loom))]
fn decode(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u16::from_le_bytes(payload.get(..2)?.try_into().ok()?) as usize;
    let key = payload.get(2..2 + len)?;
    Some((key, &payload[2 + len..]))
}

impl Journal {
    /// Opens (or creates) journal `name` in `dir`, with segments of `segment_size` bytes, reads
    /// back its entries and compacts it. Returns the journal (its state is the entries read
    /// back; [`get`](Self::get) and [`entries`](Self::entries) answer from it) and the log's
    /// recovery report.
    ///
    /// # Errors
    /// As [`Directory::open_log`]; [`SegmentError::Io`] if the compaction cannot write.
    #[cfg(not(loom))]
    pub fn open(
        dir: &Directory,
        name: &str,
        segment_size: usize,
    ) -> Result<(Journal, RecoveryReport), SegmentError> {
        let config = LogConfig {
            segment_size,
            reclaim: Reclaim::OnTruncate,
            populate: false,
            maintenance_thread: false,
        };
        let mut last: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> = BTreeMap::new();
        let mut stamp = 0;
        // The process's default collector: each write pins it through its thread's own handle
        // (registering a handle per record cost ~440 ns, 40 % of a record).
        let collector = crossbeam_epoch::default_collector().clone();
        let (log, report) = dir.open_log(name, config, collector, |r| {
            let Recovered::Record(r) = r else { return };
            stamp = stamp.max(r.claim);
            let Some((key, value)) = decode(&r.payload) else { return };
            let value = match r.kind {
                PUT => Some(value.to_vec()),
                DEL => None,
                _ => return,
            };
            if !last.get(key).is_some_and(|(s, _)| *s > r.claim) {
                last.insert(key.to_vec(), (r.claim, value));
            }
        })?;
        let live: Entries = last.into_iter().filter_map(|(k, (_, v))| Some((k, v?))).collect();
        let state =
            State { since_compaction: report.records, live, stamp, written: 0, compactions: 0 };
        let j = Journal { log, state: Mutex::new(state) };
        {
            let mut s = lock(&j.state);
            j.compact(&mut s)?;
        }
        Ok((j, report))
    }

    /// Sets `key` to `value`; returns once the record is committed. Setting the value a key
    /// already has writes nothing.
    ///
    /// # Errors
    /// [`SegmentError::InvalidConfig`] for a key over [`MAX_KEY`] bytes;
    /// [`SegmentError::RecordTooLarge`]; [`SegmentError::Io`] (a full tmpfs), or
    /// [`SegmentError::Closed`]: the change is then not made.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), SegmentError> {
        let mut s = lock(&self.state);
        if s.live.get(key).is_some_and(|v| v == value) {
            return Ok(());
        }
        self.append(&mut s, PUT, key, value)?;
        s.live.insert(key.to_vec(), value.to_vec());
        self.after_change(&mut s)
    }

    /// Sets several keys at once (one lock, one record each).
    ///
    /// # Errors
    /// As [`put`](Self::put); the entries before the failing one are made.
    pub fn put_all<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<(), SegmentError> {
        let mut s = lock(&self.state);
        for (key, value) in entries {
            if s.live.get(key).is_some_and(|v| v == value) {
                continue;
            }
            self.append(&mut s, PUT, key, value)?;
            s.live.insert(key.to_vec(), value.to_vec());
        }
        self.after_change(&mut s)
    }

    /// Makes several changes at once (one lock, one record each): `Some(value)` sets the key,
    /// `None` deletes it, in the order given. A change that changes nothing writes nothing.
    ///
    /// # Errors
    /// As [`put`](Self::put); the changes before the failing one are made.
    pub fn apply<'a>(
        &self,
        changes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<(), SegmentError> {
        let mut s = lock(&self.state);
        for (key, value) in changes {
            match value {
                Some(value) => {
                    if s.live.get(key).is_some_and(|v| v == value) {
                        continue;
                    }
                    self.append(&mut s, PUT, key, value)?;
                    s.live.insert(key.to_vec(), value.to_vec());
                }
                None => {
                    if !s.live.contains_key(key) {
                        continue;
                    }
                    self.append(&mut s, DEL, key, &[])?;
                    s.live.remove(key);
                }
            }
        }
        self.after_change(&mut s)
    }

    /// Deletes `key` (nothing is written if it has no value).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn delete(&self, key: &[u8]) -> Result<(), SegmentError> {
        let mut s = lock(&self.state);
        if !s.live.contains_key(key) {
            return Ok(());
        }
        self.append(&mut s, DEL, key, &[])?;
        s.live.remove(key);
        self.after_change(&mut s)
    }

    /// Deletes every key that starts with `prefix`.
    ///
    /// # Errors
    /// As [`put`](Self::put); the deletions before the failing one are made.
    pub fn delete_prefix(&self, prefix: &[u8]) -> Result<(), SegmentError> {
        let mut s = lock(&self.state);
        let keys: Vec<Vec<u8>> = s
            .live
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.append(&mut s, DEL, &key, &[])?;
            s.live.remove(&key);
        }
        self.after_change(&mut s)
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        lock(&self.state).live.get(key).cloned()
    }

    /// Every entry whose key starts with `prefix`, in key order.
    pub fn entries(&self, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let s = lock(&self.state);
        s.live
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Its figures now.
    pub fn stats(&self) -> JournalStats {
        let s = lock(&self.state);
        JournalStats {
            keys: s.live.len() as u64,
            written: s.written,
            compactions: s.compactions,
            mapped_bytes: self.log.stats().mapped_bytes,
        }
    }

    /// Stops writes; the files are kept (as [`Log::close`]).
    pub fn close(&self) {
        self.log.close();
    }

    fn append(
        &self,
        s: &mut State,
        kind: u16,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), SegmentError> {
        let len = key_len(key)?;
        let claim = s.stamp + 1;
        let stream = crate::hash::fnv1a_64(key);
        let guard = self.pin();
        let r = self.log.append(RecordMeta { kind, stream, claim }, &[&len, key, value], &guard)?;
        drop(r.commit());
        s.stamp = claim;
        s.since_compaction += 1;
        s.written += 1;
        Ok(())
    }

    /// Pins the log's collector: the default one, through the thread's own handle (see
    /// `open`); under loom (where there is no default collector) a handle of the log's.
    fn pin(&self) -> crossbeam_epoch::Guard {
        #[cfg(not(loom))]
        {
            crossbeam_epoch::pin()
        }
        #[cfg(loom)]
        {
            // A guard outlives the handle it came from.
            self.log.collector().register().pin()
        }
    }

    fn after_change(&self, s: &mut State) -> Result<(), SegmentError> {
        if s.since_compaction > COMPACT_AFTER.max(2 * s.live.len() as u64) {
            self.compact(s)?;
        }
        let _ = self.log.maintain();
        Ok(())
    }

    /// Rewrites every live entry, then gives back the segments before the rewrite's first.
    fn compact(&self, s: &mut State) -> Result<(), SegmentError> {
        let start = {
            let guard = self.pin();
            self.log.position(&guard)?
        };
        let live = std::mem::take(&mut s.live);
        let mut result = Ok(());
        for (k, v) in &live {
            if let Err(e) = self.append(s, PUT, k, v) {
                result = Err(e);
                break;
            }
        }
        s.live = live;
        result?;
        {
            let guard = self.pin();
            self.log.truncate_before(start.segment, &guard)?;
        }
        // The holds' releases were deferred through the epoch; other threads pin the default
        // collector only for moments (journal writes), so a few flushes run them, and
        // `maintain` frees the segments (a release an epoch still pinned delays runs at a
        // later collection, and the next change's `maintain` frees its segment).
        for _ in 0..4 {
            self.pin().flush();
        }
        let _ = self.log.maintain();
        s.since_compaction = s.live.len() as u64;
        s.compactions += 1;
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shm::tests::TestDir;

    fn dir(tag: &str) -> (TestDir, Directory) {
        let d = TestDir::new(tag);
        let dir = Directory::open(&d.0, "c/b").expect("opened");
        (d, dir)
    }

    #[test]
    fn given_puts_and_deletes_when_reopened_should_hold_each_keys_last_value() {
        let (d, directory) = dir("last");
        {
            let (j, _) = Journal::open(&directory, "j", 8192).expect("opened");
            j.put(b"a", b"1").expect("put");
            j.put(b"b", b"2").expect("put");
            j.put(b"a", b"3").expect("put");
            j.put(b"c/1", b"x").expect("put");
            j.put(b"c/2", b"y").expect("put");
            j.delete(b"b").expect("delete");
            j.delete_prefix(b"c/").expect("delete prefix");
            j.put(b"c/3", b"z").expect("put");
        }
        drop(directory);
        let directory = Directory::open(&d.0, "c/b").expect("reopened");
        let (j, report) = Journal::open(&directory, "j", 8192).expect("reopened");
        assert!(report.records >= 8, "every record read back: {report:?}");
        assert_eq!(j.get(b"a").as_deref(), Some(&b"3"[..]));
        assert_eq!(j.get(b"b"), None, "a deleted key stays deleted");
        assert_eq!(j.entries(b"c/"), vec![(b"c/3".to_vec(), b"z".to_vec())]);
    }

    #[test]
    fn given_many_changes_should_compact_and_keep_the_state() {
        let (d, directory) = dir("compact");
        {
            let (j, _) = Journal::open(&directory, "j", 8192).expect("opened");
            for i in 0..20_000u32 {
                let key = format!("k{}", i % 10);
                j.put(key.as_bytes(), &i.to_le_bytes()).expect("put");
            }
            let s = j.stats();
            assert!(s.compactions >= 3, "compacted: {s:?}");
            // Without compaction 20,000 records of 40 bytes fill ~98 segments; with it, at
            // most one interval's records (COMPACT_AFTER x 40 bytes, 20 segments) and a spare.
            assert!(s.mapped_bytes <= 24 * 8192, "old segments freed: {s:?}");
        }
        drop(directory);
        let directory = Directory::open(&d.0, "c/b").expect("reopened");
        let (j, report) = Journal::open(&directory, "j", 8192).expect("reopened");
        assert!(report.records < 6000, "compaction left few records: {report:?}");
        for i in 0..10u32 {
            let want = (19_990 + i).to_le_bytes();
            assert_eq!(j.get(format!("k{i}").as_bytes()).as_deref(), Some(&want[..]));
        }
    }

    #[test]
    fn given_the_same_value_should_write_nothing() {
        let (_d, directory) = dir("same");
        let (j, _) = Journal::open(&directory, "j", 8192).expect("opened");
        j.put(b"k", b"v").expect("put");
        let before = j.stats().written;
        j.put(b"k", b"v").expect("put");
        j.delete(b"absent").expect("delete");
        assert_eq!(j.stats().written, before);
    }
}
