//! The replicated state machine: the core's store, changed only by committed log entries.
//!
//! Every replica applies the same entries in log order, so a queue gets the same messages at
//! the same offsets with the same store times everywhere: the leader decides everything that
//! could differ (the encoded record with its `UNIQ_KEY`, the queue, the store time, an
//! auto-created topic's queue count and permission) before it proposes, and applying only
//! appends. That is what keeps offsets, message ids and committed offsets valid on whichever
//! replica leads next.

use std::io::Cursor;

use bytes::Bytes;
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::TypeConfig;
use crate::broker::core::Core;
use crate::remoting::body::TopicConfig;
use crate::store::TopicStore;
use crate::sync::{Arc, AtomicBool, Ordering};
// The broker does not build under loom, so std's Weak pairs with the shim's (std) Arc.
use std::sync::Weak;

/// A change of the replicated state, as the leader decided it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Op {
    /// Messages appended to one queue with consecutive offsets (a send is one, a batch many).
    Append {
        /// The topic.
        topic: String,
        /// Its queue count and permission, to create it where it does not exist yet (an
        /// auto-created topic).
        queues: u32,
        /// Its permission bits.
        perm: u32,
        /// The queue.
        queue: u32,
        /// The store time every replica gives them, ms.
        store_time: u64,
        /// The encoded records with their tag hash codes.
        records: Vec<(Payload, i32)>,
    },
    /// A topic created or updated by an admin (`UPDATE_AND_CREATE_TOPIC`): its config as JSON
    /// (RocketMQ's `TopicConfig`), applied as the single broker applies it.
    CreateTopic {
        /// The config, JSON.
        config: String,
    },
    /// Subscription group configs an admin created or replaced, all or none
    /// (`UPDATE_AND_CREATE_SUBSCRIPTIONGROUP` and its list form): each group's name, its config
    /// as a JSON object, and the size its request gave it.
    PutGroups {
        /// `(name, config JSON, size)` of each.
        configs: Vec<(String, String, u64)>,
    },
    /// A consumer group's committed offset of one queue.
    Commit {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The queue.
        queue: u32,
        /// The offset it consumes next.
        offset: u64,
    },
}

/// What applying an [`Op`] gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum OpResult {
    /// A blank or membership entry, or a commit.
    Done,
    /// Where an [`Op::Append`] landed: the topic's uid and the first message's offset.
    Appended {
        /// The topic's uid (in message ids).
        uid: u32,
        /// The offset of the first record.
        first: u64,
    },
    /// What an [`Op::CreateTopic`] left: the topic's queue count (an existing topic keeps its
    /// own).
    Topic {
        /// Its queue count.
        queues: u32,
    },
    /// The store refused it (the same on every replica that holds the same state).
    Refused(String),
}

/// Message bytes in an [`Op`]: serialized as one byte string (not a list of numbers), and
/// shared, not copied, between the log and the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Payload(pub(crate) Bytes);

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Payload;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("message bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Payload, E> {
                Ok(Payload(Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Payload, E> {
                Ok(Payload(Bytes::from(v)))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// Applies one operation to the core's store.
pub(crate) fn apply_op(core: &Core, op: Op) -> OpResult {
    match op {
        Op::Append { topic, queues, perm, queue, store_time, records } => {
            let t = match core.store.topic(&topic) {
                Some(t) => t,
                None => {
                    let mut c = TopicConfig::new(&topic, queues, queues);
                    c.perm = perm;
                    if let Err(e) = core.create_topic(c) {
                        return OpResult::Refused(e.to_string());
                    }
                    match core.store.topic(&topic) {
                        Some(t) => t,
                        None => return OpResult::Refused(format!("topic {topic} is gone")),
                    }
                }
            };
            append(t.as_ref(), queue, store_time, records)
        }
        Op::CreateTopic { config } => match serde_json::from_str::<TopicConfig>(&config) {
            Ok(c) => match core.create_topic(c) {
                Ok(c) => OpResult::Topic { queues: c.read_queue_nums },
                Err(e) => OpResult::Refused(e.to_string()),
            },
            Err(e) => OpResult::Refused(format!("a topic config that does not parse: {e}")),
        },
        Op::PutGroups { configs } => {
            let mut parsed = Vec::with_capacity(configs.len());
            for (name, json, size) in configs {
                match serde_json::from_str(&json) {
                    Ok(config) => {
                        parsed.push((name, config, usize::try_from(size).unwrap_or(usize::MAX)))
                    }
                    Err(e) => return OpResult::Refused(format!("group {name}'s config: {e}")),
                }
            }
            match core.put_group_configs(parsed) {
                Ok(()) => OpResult::Done,
                Err(e) => OpResult::Refused(e.to_string()),
            }
        }
        Op::Commit { group, topic, queue, offset } => {
            match core.store.commit(&group, &topic, queue, offset) {
                Ok(()) => OpResult::Done,
                Err(e) => OpResult::Refused(e.to_string()),
            }
        }
    }
}

fn append(
    t: &dyn TopicStore,
    queue: u32,
    store_time: u64,
    records: Vec<(Payload, i32)>,
) -> OpResult {
    let r = if records.len() == 1 {
        let Some((Payload(bytes), tag)) = records.into_iter().next() else {
            return OpResult::Refused("an empty append".into());
        };
        t.append(queue, bytes, tag, store_time)
    } else {
        t.append_batch(queue, records.into_iter().map(|(p, tag)| (p.0, tag)).collect(), store_time)
    };
    match r {
        Ok(first) => OpResult::Appended { uid: t.uid(), first },
        Err(e) => OpResult::Refused(e.to_string()),
    }
}

/// A replica's whole replicated state, as a snapshot carries it: every topic that is not
/// internal with each queue's retained messages (offset, store time, tag hash, record), every
/// committed offset, and the subscription group configs.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Image {
    topics: Vec<ImageTopic>,
    commits: Vec<(String, String, u32, u64)>,
    /// Subscription group configs an admin created: `(name, config JSON)`.
    groups: Vec<(String, String)>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ImageTopic {
    name: String,
    perm: u32,
    queues: Vec<ImageQueue>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ImageQueue {
    /// The offset of its first message (its end when it holds none).
    start: u64,
    /// `(store time, tag hash, record)` of each message from `start` on, consecutive.
    messages: Vec<(u64, i32, Payload)>,
}

/// Messages read per call while an image is taken.
const IMAGE_BATCH: usize = 1024;

/// Takes the image of `core`'s store. Runs on the state machine's task, so no entry is applied
/// meanwhile: the image is the state after the last applied entry.
pub(crate) fn take_image(core: &Core) -> Image {
    let groups = core
        .groups
        .all()
        .into_iter()
        .filter_map(|(name, config)| serde_json::to_string(&config).ok().map(|j| (name, j)))
        .collect();
    let mut image = Image { topics: Vec::new(), commits: core.store.committed_all(), groups };
    for (name, _) in core.store.topics() {
        if super::super::topics::is_internal_topic(&name) {
            continue;
        }
        let Some(t) = core.store.topic(&name) else { continue };
        let perm = core.topics.get(&name).map_or(super::super::topics::perm::RW, |c| c.perm);
        let mut queues = Vec::new();
        for q in 0..t.queue_count() {
            queues.push(image_queue(t.as_ref(), q));
        }
        image.topics.push(ImageTopic { name, perm, queues });
    }
    image
}

fn image_queue(t: &dyn TopicStore, q: u32) -> ImageQueue {
    let (min, max) = t.offsets(q).unwrap_or((0, 0));
    let mut queue = ImageQueue { start: max, messages: Vec::new() };
    let mut at = min;
    while at < max {
        let mut expected = None;
        let outcome = t.read(q, at, IMAGE_BATCH, &crate::store::Filter::All, &mut |m| {
            if queue.messages.is_empty() {
                queue.start = m.offset;
            } else if Some(m.offset) != expected {
                // A hole (a record torn by a crash of a stored broker): the copy keeps what
                // follows it, consecutive, as a queue must be.
                queue.messages.clear();
                queue.start = m.offset;
            }
            expected = Some(m.offset + 1);
            queue.messages.push((m.store_timestamp, m.tag, Payload(m.record.clone())));
            true
        });
        match outcome {
            Ok(o) if o.next_offset > at => at = o.next_offset,
            _ => break,
        }
    }
    queue
}

/// Replaces this replica's topics of `image` with its copies, and takes its commits.
///
/// # Errors
/// A message when the store refuses a topic or a message lands at another offset than its
/// copy's: the replica must not serve a store that differs.
pub(crate) fn install_image(core: &Core, image: Image) -> Result<(), String> {
    for t in image.topics {
        if core.store.topic(&t.name).is_some() {
            core.store.delete_topic(&t.name).map_err(|e| format!("topic {}: {e}", t.name))?;
        }
        let starts: Vec<u64> = t.queues.iter().map(|q| q.start).collect();
        let topic = core
            .store
            .ensure_topic_at(&t.name, &starts)
            .map_err(|e| format!("topic {}: {e}", t.name))?;
        for (q, queue) in (0u32..).zip(t.queues) {
            for (expected, (store_time, tag, Payload(record))) in
                (queue.start..).zip(queue.messages)
            {
                let at = topic
                    .append(q, record, tag, store_time)
                    .map_err(|e| format!("topic {} queue {q}: {e}", t.name))?;
                if at != expected {
                    return Err(format!(
                        "topic {} queue {q}: a message copied to offset {at}, not {expected}",
                        t.name
                    ));
                }
            }
        }
        let queues = topic.queue_count();
        let mut c = TopicConfig::new(&t.name, queues, queues);
        c.perm = t.perm;
        core.create_topic(c).map_err(|e| format!("topic {}: {e}", t.name))?;
    }
    for (group, topic, queue, offset) in image.commits {
        let _ = core.store.commit(&group, &topic, queue, offset);
    }
    let mut groups = Vec::with_capacity(image.groups.len());
    for (name, json) in image.groups {
        let config = serde_json::from_str(&json).map_err(|e| format!("group {name}: {e}"))?;
        groups.push((name, config, json.len()));
    }
    if !groups.is_empty() {
        core.put_group_configs(groups).map_err(|e| format!("group configs: {e}"))?;
    }
    Ok(())
}

/// What a snapshot that was only taken to purge the log carries (its image is taken when a
/// replica needs it: [`RaftStateMachine::get_current_snapshot`]).
const META_ONLY: &[u8] = b"baiji-replica-snapshot:meta-only:1";

/// The state machine openraft drives.
pub(crate) struct Machine {
    core: Weak<Core>,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    /// Whether a snapshot was taken (and the log may be purged up to it).
    taken: Arc<AtomicBool>,
}

impl Machine {
    pub(crate) fn new(core: Weak<Core>) -> Self {
        Machine {
            core,
            last_applied: None,
            membership: StoredMembership::default(),
            taken: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// The metadata of a snapshot at `last_applied` with `membership`; its id is the term and index
/// followed by `suffix` (`-image` for one that carries the set's state).
fn snapshot_meta(
    last_applied: Option<LogId<u64>>,
    membership: &StoredMembership<u64, openraft::BasicNode>,
    suffix: &str,
) -> SnapshotMeta<u64, openraft::BasicNode> {
    let (term, index) = last_applied.map_or((0, 0), |l| (l.leader_id.term, l.index));
    SnapshotMeta {
        last_log_id: last_applied,
        last_membership: membership.clone(),
        snapshot_id: format!("{term}-{index}{suffix}"),
    }
}

/// Builds snapshots of the applied state.
pub(crate) struct Builder {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    /// Whether a snapshot was taken (and the log may be purged up to it).
    taken: Arc<AtomicBool>,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let meta = snapshot_meta(self.last_applied, &self.membership, "");
        // Relaxed: read on the state machine's task after openraft saw this snapshot built.
        self.taken.store(true, Ordering::Relaxed);
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(META_ONLY.to_vec())) })
    }
}

fn storage_error(what: &str) -> StorageError<u64> {
    StorageError::from(StorageIOError::write_state_machine(AnyError::error(what)))
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Builder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, openraft::BasicNode>), StorageError<u64>>
    {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<OpResult>, StorageError<u64>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let core = self.core.upgrade();
        let mut out = Vec::new();
        for e in entries {
            self.last_applied = Some(e.log_id);
            out.push(match e.payload {
                EntryPayload::Blank => OpResult::Done,
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(e.log_id), m);
                    OpResult::Done
                }
                EntryPayload::Normal(op) => match &core {
                    Some(core) => {
                        let r = apply_op(core, op);
                        if let OpResult::Refused(why) = &r {
                            tracing::error!(index = e.log_id.index, "replica: a committed entry was refused by this replica's store: {why}");
                        }
                        r
                    }
                    // The broker is shutting down.
                    None => OpResult::Refused("the broker is stopping".into()),
                },
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        Builder {
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            taken: self.taken.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        if meta.last_log_id <= self.last_applied {
            // Nothing newer than what this replica holds.
            return Ok(());
        }
        let image: Image = bincode::deserialize(snapshot.get_ref())
            .map_err(|e| storage_error(&format!("a snapshot that is not an image: {e}")))?;
        let Some(core) = self.core.upgrade() else {
            return Err(storage_error("the broker is stopping"));
        };
        install_image(&core, image).map_err(|e| storage_error(&format!("snapshot: {e}")))?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        // Relaxed: see `build_snapshot`.
        self.taken.store(true, Ordering::Relaxed);
        tracing::info!(last = ?meta.last_log_id, "replica: installed a snapshot of the set's state");
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        // Relaxed: see `build_snapshot`. A replica that installed a snapshot has one too
        // (openraft asks it for one once it leads), and so has any that applied an entry: the
        // image of its state is always at hand.
        if !self.taken.load(Ordering::Relaxed) && self.last_applied.is_none() {
            return Ok(None);
        }
        // The image of now, on this task (no entry applies meanwhile), under the metadata of
        // now: a replica that installs it continues from the entry after the last applied one,
        // which the log still holds (it is purged only up to the last snapshot taken, which is
        // no later).
        let Some(core) = self.core.upgrade() else { return Ok(None) };
        let image = take_image(&core);
        let data =
            bincode::serialize(&image).map_err(|e| storage_error(&format!("snapshot: {e}")))?;
        let meta = snapshot_meta(self.last_applied, &self.membership, "-image");
        Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) }))
    }
}

#[cfg(test)]
mod tests {
    use super::{install_image, take_image, Op, Payload};
    use crate::broker::core::Core;
    use crate::broker::BrokerConfig;
    use crate::store::{Filter, MemoryStore, Store};
    use crate::sync::Arc;
    use bytes::Bytes;

    fn core() -> Core {
        let config = BrokerConfig::default();
        let store = MemoryStore::new(config.engine_config().expect("an engine config"));
        let store: Arc<dyn Store> = Arc::new(store.expect("a store"));
        let core = Core::new(config.core, store, "127.0.0.1:10911".parse().expect("an addr"));
        core.open();
        core
    }

    /// (offset, store time, tag, record) of every message of `topic`'s `queue`.
    fn held(core: &Core, topic: &str, queue: u32) -> (u64, Vec<(u64, u64, i32, Bytes)>) {
        let t = core.store.topic(topic).expect("the topic");
        let (min, max) = t.offsets(queue).expect("offsets");
        let mut v = Vec::new();
        t.read(queue, min, 1 << 20, &Filter::All, &mut |m| {
            v.push((m.offset, m.store_timestamp, m.tag, m.record.clone()));
            true
        })
        .expect("read");
        (max, v)
    }

    #[test]
    fn given_an_image_of_a_store_when_installed_on_an_empty_one_should_hold_the_same_queues() {
        let a = core();
        let t = a.store.ensure_topic("Img", 3).expect("topic");
        // Store times of now: within the default retention (nothing here holds queue 0).
        let now = crate::time::now_ms();
        for i in 0..40u64 {
            let record = Bytes::from(format!("m{i}"));
            t.append((i % 2) as u32, record, i as i32, now + i).expect("append");
        }
        a.store.subscribe("g", "Img").expect("subscribe");
        a.store.commit("g", "Img", 1, 7).expect("commit");
        let (name, config) = crate::broker::core::groups::parse_config(
            br#"{"groupName":"img_group","retryMaxTimes":5}"#,
        )
        .expect("a group config");
        a.put_group_config(name, config, 40).expect("a group config put");
        let image = take_image(&a);
        let wire = bincode::serialize(&image).expect("encodes");
        let b = core();
        install_image(&b, bincode::deserialize(&wire).expect("decodes")).expect("installed");
        for q in 0..3 {
            // The same messages at the same offsets with the same store times and tags. What
            // the original freed after the commit may still be retained by the copy (its
            // retention frees it later): compare from the original's first retained offset.
            let (end, original) = held(&a, "Img", q);
            let (copy_end, mut copy) = held(&b, "Img", q);
            let first = original.first().map_or(end, |m| m.0);
            copy.retain(|m| m.0 >= first);
            assert_eq!((copy_end, copy), (end, original), "queue {q}");
        }
        assert_eq!(b.store.committed("g", "Img", 1), Some(7));
        assert_eq!(b.groups.get("img_group"), a.groups.get("img_group"), "the group config");
        assert!(b.groups.get("img_group").is_some());
        let next = b.store.topic("Img").expect("topic").append(0, Bytes::from("n"), 0, 1);
        assert_eq!(next.expect("append"), 20, "the copy continues at the original's end");
    }

    #[test]
    fn given_an_append_when_encoded_for_the_replica_port_should_carry_its_bytes_raw_and_decode_equal(
    ) {
        let body = Bytes::from(vec![7u8; 1000]);
        let op = Op::Append {
            topic: "T".into(),
            queues: 4,
            perm: 6,
            queue: 2,
            store_time: 42,
            records: vec![(Payload(body.clone()), 9)],
        };
        let wire = bincode::serialize(&op).expect("encodes");
        assert!(wire.len() < 1100, "payload bytes raw, not a list of numbers: {}", wire.len());
        match bincode::deserialize::<Op>(&wire).expect("decodes") {
            Op::Append { topic, queues, perm, queue, store_time, records } => {
                assert_eq!((topic.as_str(), queues, perm, queue, store_time), ("T", 4, 6, 2, 42));
                assert_eq!(records, vec![(Payload(body), 9)]);
            }
            other => panic!("an append: {other:?}"),
        }
    }
}
