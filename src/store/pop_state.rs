//! POP consumption state in the store's journal, so that it survives a restart or a crash
//! (issue 26; docs/restarts.md, "POP state").
//!
//! The engine tells a [`PopJournal`] every change of a group's POP state in a queue, under that
//! queue's lock and before the pop, ack or change of invisible time is answered
//! ([`crate::engine::PopJournal`]'s protocol); [`PopRecords`] writes each change to the
//! store's [`Journal`] as one batch of records (one lock of the journal), and deletes a
//! subscription's records when it ends. A queue's state is its pop position `P` (every offset
//! below it is acknowledged by the group or in flight) and its in-flight entries; the journal
//! keeps the last record of each key, which is the state the engine had when it last changed.
//!
//! # Keys (the store's journal; `u` and `o` are the store's own)
//!
//! | key | value |
//! |---|---|
//! | `p`, group length (u8), group, topic, NUL, queue (u32 BE) | pop position (u64 LE) |
//! | `q`, group length (u8), group, topic, NUL, queue (u32 BE), offset (u64 BE) | pop time (u64 LE), invisible ms (u64 LE), attempts (u32 LE), holder (u8: 0 consumer, 1 consumer who changed the invisible time, 2 the pop's caller) |
//!
//! The group's length comes first (a group name has at most 255 bytes; a topic name has no
//! NUL), so the prefix of one subscription's keys is the prefix of no other's.
//!
//! # Restore
//!
//! At open ([`crate::store::MemoryStore::open`]), after the committed offsets are applied,
//! every group with POP records is subscribed again and each queue with a position gets it
//! back with [`Group::restore_pop`](crate::engine::Group::restore_pop): what it had
//! acknowledged stays acknowledged, what was in flight is in flight under the same receipt and
//! comes back when its invisible time ends. Records that could not be put back (acknowledged
//! by a commit, of a deleted topic, entries of a queue without position) are deleted.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::engine::{PopChange, PopEntry, PopHolder, PopJournal};
use crate::shm::Journal;

/// First byte of a queue's pop position key.
const POSITION: u8 = b'p';
/// First byte of an in-flight entry's key.
const ENTRY: u8 = b'q';
/// Bytes of an entry's value.
const ENTRY_LEN: usize = 21;

/// The keys of one subscription start with this after their first byte: group length, group,
/// topic, NUL. `None` for a group name of more than 255 bytes (the engine refuses those).
fn subscription_prefix(kind: u8, group: &str, topic: &str) -> Option<Vec<u8>> {
    let len = u8::try_from(group.len()).ok()?;
    let mut k = Vec::with_capacity(group.len() + topic.len() + 19);
    k.push(kind);
    k.push(len);
    k.extend_from_slice(group.as_bytes());
    k.extend_from_slice(topic.as_bytes());
    k.push(0);
    Some(k)
}

fn encode_entry(e: &PopEntry) -> [u8; ENTRY_LEN] {
    let mut v = [0u8; ENTRY_LEN];
    v[..8].copy_from_slice(&e.pop_time.to_le_bytes());
    v[8..16].copy_from_slice(&e.invisible_ms.to_le_bytes());
    v[16..20].copy_from_slice(&e.attempts.to_le_bytes());
    v[20] = match e.holder {
        PopHolder::Consumer => 0,
        PopHolder::ConsumerChanged => 1,
        PopHolder::Caller => 2,
    };
    v
}

fn decode_entry(v: &[u8]) -> Option<PopEntry> {
    if v.len() != ENTRY_LEN {
        return None;
    }
    let holder = match v[20] {
        0 => PopHolder::Consumer,
        1 => PopHolder::ConsumerChanged,
        2 => PopHolder::Caller,
        _ => return None,
    };
    Some(PopEntry {
        pop_time: u64::from_le_bytes(v[..8].try_into().ok()?),
        invisible_ms: u64::from_le_bytes(v[8..16].try_into().ok()?),
        attempts: u32::from_le_bytes(v[16..20].try_into().ok()?),
        holder,
    })
}

/// Writes the engine's POP state changes to the store's journal (see the module docs). A
/// change that cannot be written (a full tmpfs) is logged; it holds in memory only, and a
/// restart does not see it.
#[derive(Debug)]
pub(crate) struct PopRecords {
    journal: Arc<Journal>,
}

impl PopRecords {
    /// Records over `journal`.
    pub(crate) fn new(journal: Arc<Journal>) -> Self {
        PopRecords { journal }
    }
}

fn failed_write(what: &str, e: &crate::shm::SegmentError) {
    #[cfg(feature = "broker")]
    tracing::error!("POP state ({what}) could not be journaled, a restart will not see it: {e}");
    let _ = (what, e);
}

impl PopJournal for PopRecords {
    fn record(&self, c: &PopChange<'_>) {
        let Some(mut base) = subscription_prefix(POSITION, c.group, c.topic) else { return };
        base.extend_from_slice(&c.queue.to_be_bytes());
        let position = c.position.map(u64::to_le_bytes);
        let mut keys: Vec<(Vec<u8>, Option<[u8; ENTRY_LEN]>)> = Vec::with_capacity(c.entries.len());
        for (offset, entry) in c.entries {
            let mut k = Vec::with_capacity(base.len() + 8);
            k.push(ENTRY);
            k.extend_from_slice(&base[1..]);
            k.extend_from_slice(&offset.to_be_bytes());
            keys.push((k, entry.as_ref().map(encode_entry)));
        }
        // The position last: a crash between the records leaves entries it does not cover
        // yet, which a restore drops (they are delivered again), never a position that
        // acknowledges an entry whose record is missing.
        let changes = keys
            .iter()
            .map(|(k, v)| (&k[..], v.as_ref().map(|v| &v[..])))
            .chain(position.as_ref().map(|p| (&base[..], Some(&p[..]))));
        if let Err(e) = self.journal.apply(changes) {
            failed_write("a change", &e);
        }
    }

    fn ended(&self, group: &str, topic: &str) {
        if let Err(e) = delete_subscription(&self.journal, group, topic) {
            failed_write("an ended subscription", &e);
        }
    }
}

/// One queue's POP state as the journal has it.
#[derive(Debug, Default)]
pub(crate) struct QueueRecords {
    /// The pop position, if recorded.
    pub(crate) position: Option<u64>,
    /// The in-flight entries, by offset.
    pub(crate) entries: Vec<(u64, PopEntry)>,
}

/// Every subscription's POP records: (group, topic) → queue → its records.
pub(crate) type Records = BTreeMap<(String, String), BTreeMap<u32, QueueRecords>>;

/// A key's subscription, queue and (for an entry) offset; `None` if it is not one of ours.
fn decode_key(k: &[u8]) -> Option<(u8, String, String, u32, Option<u64>)> {
    let (&kind, rest) = k.split_first()?;
    let (&len, rest) = rest.split_first()?;
    let (group, rest) = rest.split_at_checked(usize::from(len))?;
    let nul = rest.iter().position(|b| *b == 0)?;
    let (topic, tail) = (&rest[..nul], &rest[nul + 1..]);
    let queue = u32::from_be_bytes(tail.get(..4)?.try_into().ok()?);
    let offset = match (kind, tail.len()) {
        (POSITION, 4) => None,
        (ENTRY, 12) => Some(u64::from_be_bytes(tail[4..].try_into().ok()?)),
        _ => return None,
    };
    let group = String::from_utf8(group.to_vec()).ok()?;
    let topic = String::from_utf8(topic.to_vec()).ok()?;
    Some((kind, group, topic, queue, offset))
}

/// Reads every POP record of `journal`; records that do not decode are deleted.
pub(crate) fn read(journal: &Journal) -> Records {
    let mut out = Records::new();
    let mut bad: Vec<Vec<u8>> = Vec::new();
    for kind in [POSITION, ENTRY] {
        for (k, v) in journal.entries(&[kind]) {
            let Some((_, group, topic, queue, offset)) = decode_key(&k) else {
                bad.push(k);
                continue;
            };
            let q = out.entry((group, topic)).or_default().entry(queue).or_default();
            match offset {
                None => match v.get(..8).and_then(|b| b.try_into().ok()) {
                    Some(b) => q.position = Some(u64::from_le_bytes(b)),
                    None => bad.push(k),
                },
                Some(offset) => match decode_entry(&v) {
                    Some(e) => q.entries.push((offset, e)),
                    None => bad.push(k),
                },
            }
        }
    }
    forget(journal, bad.iter().map(|k| &k[..]));
    out
}

/// The key of queue `queue`'s entry at `offset` of `group` in `topic`.
pub(crate) fn entry_key(group: &str, topic: &str, queue: u32, offset: u64) -> Option<Vec<u8>> {
    let mut k = subscription_prefix(ENTRY, group, topic)?;
    k.extend_from_slice(&queue.to_be_bytes());
    k.extend_from_slice(&offset.to_be_bytes());
    Some(k)
}

/// The key of queue `queue`'s position of `group` in `topic`.
pub(crate) fn position_key(group: &str, topic: &str, queue: u32) -> Option<Vec<u8>> {
    let mut k = subscription_prefix(POSITION, group, topic)?;
    k.extend_from_slice(&queue.to_be_bytes());
    Some(k)
}

/// Deletes `keys` (a failure is logged: the records are then read again at the next open).
pub(crate) fn forget<'a>(journal: &Journal, keys: impl IntoIterator<Item = &'a [u8]>) {
    if let Err(e) = journal.apply(keys.into_iter().map(|k| (k, None))) {
        #[cfg(feature = "broker")]
        tracing::warn!("stale POP records could not be deleted: {e}");
        let _ = e;
    }
}

/// Deletes every record of `group`'s subscription to `topic`.
fn delete_subscription(
    journal: &Journal,
    group: &str,
    topic: &str,
) -> Result<(), crate::shm::SegmentError> {
    for kind in [POSITION, ENTRY] {
        if let Some(prefix) = subscription_prefix(kind, group, topic) {
            journal.delete_prefix(&prefix)?;
        }
    }
    Ok(())
}

/// [`delete_subscription`], a failure logged (the records are then read again at the next
/// open, and dropped there if the topic is gone).
pub(crate) fn forget_subscription(journal: &Journal, group: &str, topic: &str) {
    if let Err(e) = delete_subscription(journal, group, topic) {
        #[cfg(feature = "broker")]
        tracing::warn!("stale POP records could not be deleted: {e}");
        let _ = e;
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::engine::{EngineConfig, Filter, PopInit, PopOutcome, PopRequest};
    use crate::shm::tests::TestDir;
    use crate::shm::Directory;
    use crate::store::{ConsumerOffsets, MemoryStore, MessageStore, PopConsumption, PopReceipt};

    fn open(d: &TestDir) -> (MemoryStore, Directory) {
        let dir = Directory::open(&d.0, "c/b").expect("directory");
        let config = EngineConfig {
            reaper_thread: false,
            max_message_size: 16 << 10,
            ..EngineConfig::default()
        };
        let (store, _) = MemoryStore::open(config, &dir, 64 << 10).expect("store");
        (store, dir)
    }

    fn pop(store: &MemoryStore, topic: &str, now_ms: u64) -> (Vec<u64>, u64) {
        let req = PopRequest {
            max: 16,
            invisible_ms: 10_000,
            now_ms,
            order: false,
            attempt_id: None,
            max_attempts: 16,
            filter: &Filter::All,
            init: PopInit::Min,
        };
        let g = store.pop_group("G", topic).expect("a group");
        let mut out = PopOutcome::default();
        g.pop(0, &req, &mut out).expect("pops");
        (out.messages.iter().map(|m| m.delivery.offset).collect(), out.pop_time)
    }

    fn topic_with(store: &MemoryStore, name: &str, messages: usize) {
        let t = store.ensure_topic_from(name, 1, 0).expect("a topic");
        for i in 0..messages {
            t.append(0, Bytes::from(format!("m{i}")), 0, 1).expect("appended");
        }
    }

    fn receipt(offset: u64, pop_time: u64) -> PopReceipt {
        PopReceipt { queue: 0, offset, pop_time }
    }

    #[test]
    fn given_pops_and_acks_when_the_store_is_opened_again_should_give_the_group_its_state_back() {
        let d = TestDir::new("pop-restore");
        {
            let (store, _dir) = open(&d);
            topic_with(&store, "T", 4);
            let (got, at) = pop(&store, "T", 1000);
            assert_eq!(got, [0, 1, 2, 3]);
            for off in [0, 2] {
                store.pop_ack("G", "T", receipt(off, at)).expect("acked");
            }
        }
        let (store, _dir) = open(&d);
        assert_eq!(store.inflight("G", "T"), 2, "1 and 3 are in flight again");
        assert_eq!(pop(&store, "T", 2000).0, Vec::<u64>::new(), "nothing before 11 s");
        let ack = store.pop_ack("G", "T", receipt(3, 1000)).expect("a receipt from before");
        assert_eq!(ack.outcome, crate::engine::AckOutcome::Acked);
        assert_eq!(pop(&store, "T", 11_000).0, [1], "the unacknowledged one, then");
        let records = read(&store.journal().expect("a journal"));
        let q = &records[&("G".to_owned(), "T".to_owned())][&0];
        assert_eq!(q.position, Some(4));
        let inflight: Vec<(u64, u64)> =
            q.entries.iter().map(|(o, e)| (*o, e.attempts.into())).collect();
        assert_eq!(inflight, [(1, 2)], "journaled since the restart too");
    }

    #[test]
    fn given_popped_messages_below_a_commit_when_opened_again_should_not_put_them_back_in_flight() {
        let d = TestDir::new("pop-commit");
        {
            let (store, _dir) = open(&d);
            topic_with(&store, "T", 4);
            assert_eq!(pop(&store, "T", 1000).0, [0, 1, 2, 3]);
            // The same group name commits (a pull consumer): 0 and 1 are consumed.
            store.commit("G", "T", 0, 2).expect("committed");
        }
        let (store, _dir) = open(&d);
        assert_eq!(store.inflight("G", "T"), 2, "2 and 3 only");
        assert_eq!(pop(&store, "T", 11_000).0, [2, 3], "0 and 1 never come back");
    }

    #[test]
    fn given_records_that_cannot_be_restored_when_opened_should_delete_them() {
        let d = TestDir::new("pop-stale");
        {
            let (store, _dir) = open(&d);
            topic_with(&store, "T", 2);
            topic_with(&store, "U", 2);
            pop(&store, "T", 1000);
            pop(&store, "U", 1000);
            store.unsubscribe("G", "U");
            let j = store.journal().expect("a journal");
            assert!(!read(&j).contains_key(&("G".to_owned(), "U".to_owned())), "ended");
            let e = encode_entry(&PopEntry {
                pop_time: 1,
                invisible_ms: 1,
                attempts: 1,
                holder: PopHolder::Caller,
            });
            // A topic that is gone, an entry without position, a key that does not decode.
            let gone = entry_key("G", "Gone", 0, 0).expect("a key");
            let lone = entry_key("H", "T", 0, 1).expect("a key");
            j.put(&gone, &e).expect("put");
            j.put(&lone, &e).expect("put");
            j.put(b"q\x09bad", b"").expect("put");
        }
        let (store, _dir) = open(&d);
        assert_eq!(store.restore_pop_state(), 2, "G's two messages of T are in flight again");
        assert_eq!(store.restore_pop_state(), 0, "once");
        let j = store.journal().expect("a journal");
        let left: Vec<Vec<u8>> =
            [ENTRY, POSITION].iter().flat_map(|k| j.entries(&[*k])).map(|(k, _)| k).collect();
        let keep =
            [entry_key("G", "T", 0, 0), entry_key("G", "T", 0, 1), position_key("G", "T", 0)];
        let keep: Vec<Vec<u8>> = keep.into_iter().flatten().collect();
        assert_eq!(left, keep, "only G's records of T are left");
        assert_eq!(store.inflight("G", "T"), 2);
    }

    #[test]
    fn given_group_names_that_prefix_each_other_should_keep_their_records_apart() {
        for (g, t, q, off) in [("a", "bT", 1, Some(7)), ("ab", "T", 1, None), ("", "T", 0, None)] {
            let k = match off {
                Some(o) => entry_key(g, t, q, o),
                None => position_key(g, t, q),
            }
            .expect("a key");
            let (_, group, topic, queue, offset) = decode_key(&k).expect("decodes");
            assert_eq!((group.as_str(), topic.as_str(), queue, offset), (g, t, q, off));
        }
        let a = subscription_prefix(ENTRY, "a", "bT").expect("a prefix");
        let ab = entry_key("ab", "T", 0, 0).expect("a key");
        assert!(!ab.starts_with(&a), "group a on bT is not group ab on T");
        assert_eq!(subscription_prefix(ENTRY, &"g".repeat(256), "T"), None);
    }
}
