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
use crate::sync::{lock, Arc, Mutex};
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

/// The last snapshot taken: what openraft purges the log up to and hands a follower that needs
/// one.
#[derive(Debug, Clone)]
struct Taken {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
}

/// Marks this step's snapshots: metadata only (last applied entry and membership).
const META_ONLY: &[u8] = b"baiji-replica-snapshot:meta-only:1";

/// The state machine openraft drives.
pub(crate) struct Machine {
    core: Weak<Core>,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    taken: Arc<Mutex<Option<Taken>>>,
}

impl Machine {
    pub(crate) fn new(core: Weak<Core>) -> Self {
        Machine {
            core,
            last_applied: None,
            membership: StoredMembership::default(),
            taken: Arc::new(Mutex::new(None)),
        }
    }
}

/// Builds snapshots of the applied state.
pub(crate) struct Builder {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    taken: Arc<Mutex<Option<Taken>>>,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let id = match self.last_applied {
            Some(l) => format!("{}-{}", l.leader_id.term, l.index),
            None => "0-0".to_owned(),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id: id,
        };
        *lock(&self.taken) = Some(Taken { meta: meta.clone() });
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
        _snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        if meta.last_log_id <= self.last_applied {
            // Nothing newer than what this replica holds.
            return Ok(());
        }
        // A snapshot of this step carries no messages: installing it would leave this replica
        // without what it stands for. Refuse (openraft stops this replica's Raft) rather than
        // serve a store that silently differs.
        Err(storage_error(
            "this replica fell behind the leader's retained log and needs a full snapshot, which this version does not send yet: start it empty under a new replica id",
        ))
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        Ok(lock(&self.taken).clone().map(|t| Snapshot {
            meta: t.meta,
            snapshot: Box::new(Cursor::new(META_ONLY.to_vec())),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::{Op, Payload};
    use bytes::Bytes;

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
