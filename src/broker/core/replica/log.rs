//! The Raft log of a replica, and its vote, in process memory.
//!
//! What this step keeps: entries from the last purge on, the vote and the committed log id,
//! all behind one mutex (the log is written by openraft's one core task and read by its
//! replication tasks; nothing here is on a lock-free path). A process that dies loses them,
//! which is why a replica that restarts must not rejoin under its old id (README "Replicated
//! broker sets": Raft assumes the log and the vote outlive a restart).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, RaftLogReader, StorageError, Vote};

use super::TypeConfig;
use crate::sync::{lock, Arc, Mutex};

#[derive(Debug, Default)]
struct Inner {
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    last_purged: Option<LogId<u64>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

/// The log store openraft writes; clones share it (a clone is the log reader).
#[derive(Debug, Clone, Default)]
pub(crate) struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        // Entries are cheap to clone: an operation's payloads are reference-counted bytes.
        Ok(lock(&self.inner).entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let inner = lock(&self.inner);
        let last = inner.entries.values().next_back().map(|e| e.log_id).or(inner.last_purged);
        Ok(LogState { last_purged_log_id: inner.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        lock(&self.inner).vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(lock(&self.inner).vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        lock(&self.inner).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(lock(&self.inner).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        {
            let mut inner = lock(&self.inner);
            for e in entries {
                inner.entries.insert(e.log_id.index, e);
            }
        }
        // In memory, an append is "flushed" once it is in the map.
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        lock(&self.inner).entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = lock(&self.inner);
        let keep = inner.entries.split_off(&(log_id.index + 1));
        inner.entries = keep;
        inner.last_purged = Some(log_id);
        Ok(())
    }
}
