//! Transactional messages: half messages, `END_TRANSACTION` and the check-back.
//!
//! As in RocketMQ, a send with `TRAN_MSG=true` (or the sys flag `TRANSACTION_PREPARED`) is
//! stored as a *half message* in the internal topic `RMQ_SYS_TRANS_HALF_TOPIC`, queue 0, with
//! `REAL_TOPIC`, `REAL_QID` and `__transactionId__` (= `UNIQ_KEY`) naming where it goes. Like
//! `SCHEDULE_TOPIC_XXXX` ([`schedule`](super::delay)), the half topic is not in the topic
//! table, so clients can neither route to, pull from nor send to it; half messages live in the
//! store and count against the memory budget.
//!
//! The producer gets the half message's queue offset (`queueOffset`, which it echoes as
//! `tranStateTableOffset`) and offset msgId (which it decodes into `commitLogOffset`). Both
//! name the half message for good: the half topic's uid, queue 0 and that offset.
//!
//! # The pending table and release
//!
//! RocketMQ records each decision in an "op" topic. Here a table of the undecided half
//! messages plays that role, keyed by the half-queue offset the producer was given (its id
//! for good): it holds each message's producer group, `UNIQ_KEY`, store time, immunity, check
//! count and where its record is now. An internal group (`CID_RMQ_SYS_TRANS`) holds the half
//! topic in the store; its committed offset is kept at the lowest position of an undecided
//! record (or the end of the queue when none is), so every decided message below it is
//! released to the reaper.
//!
//! So that an undecided message does not hold every later one in memory, each check pass
//! re-appends the records of the messages it looked at (those past their immunity, and those
//! inside a `CHECK_IMMUNITY_TIME_IN_SECONDS` of their own, as RocketMQ's
//! `putImmunityMsgBackToHalfQueue` does) to the end of the half queue, as RocketMQ re-appends
//! checked messages: the same bytes, shared, at a new position. Their ids do not change; only
//! the table's position does, and the release point moves past everything decided before
//! them. What stays held is the undecided
//! messages themselves and the decided ones younger than the oldest message still inside
//! `transactionTimeOut`.
//!
//! Every transition happens under the table's mutex, and a half message leaves the table
//! exactly once: by a commit (after its real copy was appended), a rollback, a move to
//! `TRANS_CHECK_MAX_TIME_TOPIC`, or because the store evicted it (`drop-oldest`). So a commit
//! that races a check-back answer, or a duplicate `END_TRANSACTION`, finds no entry the second
//! time and is refused (logged and counted), never delivered twice. Appending a half message
//! and inserting its entry also happen under the mutex (the internal group subscribes under it
//! before the first append), so no half message is ever unheld and the release point never
//! passes a message that is not in the table yet.
//!
//! # Check-back
//!
//! Every `transactionCheckInterval` the checker looks at the undecided messages older than
//! their immunity (`CHECK_IMMUNITY_TIME_IN_SECONDS` when longer than `transactionTimeOut`,
//! else `transactionTimeOut`, as RocketMQ's `getImmunityTime`; past its own immunity a
//! message is decided only by a check's answer, `rejectCommitOrRollback`). A message
//! already checked `transactionCheckMax` times moves to `TRANS_CHECK_MAX_TIME_TOPIC`
//! (kept like dead letters), and so does one older than 72 h (RocketMQ's `fileReservedTime`,
//! `needSkip`), immune or not. Otherwise its check count goes up, whether or not a producer of
//! its group is connected (RocketMQ's `needDiscard` counts before looking for one), and, if
//! one is (the heartbeats' producer data), one of those connections gets a one-way
//! `CHECK_TRANSACTION_STATE` with the message as body (real topic and queue restored,
//! `TRANSACTION_CHECK_TIMES` set). So a half message whose group never comes back is moved
//! after `transactionCheckMax` passes, not held for ever. Producers are looked up after the
//! pass has released the table's mutex.
//!
//! Differences from RocketMQ: ages are measured from the broker's store time, not the
//! producer's born time; a checked message keeps the ids it was sent with (RocketMQ's check
//! names the re-appended copy), so the producer's original and checked decisions name the
//! same entry.
//!
//! # Across a restart (`--store-path-root-dir`)
//!
//! With a store that has a journal ([`MessageStore::journal`]), the table itself is journaled:
//! key `h` + the id (u64 BE) holds what [`Half`] holds (see [`encode_half`]). It is put when a
//! half message is stored (before the send is answered), again when a check pass counts a
//! check or moves the record (before the pass releases anything behind the old position), and
//! deleted when the message is decided, moved to `TRANS_CHECK_MAX_TIME_TOPIC` or found evicted.
//! The half topic, its records and the internal group's committed offset come back with the
//! store; at start [`restore`] rebuilds the table from the journal, keeping each entry whose
//! record is still at its position. So an undecided message is checked again (its checks and
//! age continue, and a returning producer is asked at once, see
//! [`Transactions::producer_joined`]), keeps the ids its producer was given, and a decided one
//! is neither delivered again nor checked. The table is journaled rather than rebuilt from the
//! half topic because a re-appended record no longer says which id it belongs to.
//!
//! A commit appends the real copy, then deletes the entry: a crash between the two (a window
//! of one journal write) leaves the message undecided, and the producer's answer to the next
//! check delivers it a second time (at least once, as RocketMQ's op topic gives). Without a
//! journal nothing is written and the table starts empty, as before.

use crate::sync::{lock, read, write, Arc, Mutex, MutexGuard, RwLock};
use crate::sync::{AtomicU64, Ordering};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{watch, Notify};

use super::delay::rewrite_properties;
use super::record::{self, split_physical_offset, Decoded, NewRecord, PutError};
use super::timer;
use super::topics;
use super::Core;
use crate::remoting::body::TopicConfig;
use crate::remoting::message::sys_flag;
use crate::remoting::properties::{self, Routing};
use crate::shm::Journal;
#[cfg(doc)]
use crate::store::MessageStore;
use crate::store::{GroupStore, Retention, StoreError, TopicStore};
use crate::time::now_ms;

/// The internal topic half messages wait in.
pub(crate) const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Where half messages checked `transactionCheckMax` times go.
pub(crate) const CHECK_MAX_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// The internal group whose committed offset releases decided half messages.
pub(crate) const HALF_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// How many times a half message was checked (`PROPERTY_TRANSACTION_CHECK_TIMES`).
pub(crate) const CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
/// Per-message first-check delay, seconds (`PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS`).
pub(crate) const CHECK_IMMUNITY: &str = properties::CHECK_IMMUNITY_TIME_IN_SECONDS;
/// Age past which an undecided half message moves to `TRANS_CHECK_MAX_TIME_TOPIC` whatever
/// its checks and immunity: RocketMQ's `needSkip` (its `fileReservedTime`, 72 h by default,
/// after which the half message's file would be gone).
const FILE_RESERVED_MS: u64 = 72 * 3600 * 1000;
/// Room kept in a half message's properties for `TRANSACTION_CHECK_TIMES=<u32>`, so a check
/// or a move can always add it.
const CHECK_TIMES_ROOM: usize = CHECK_TIMES.len() + 2 + 10;

/// First byte of the journal keys of undecided half messages (`h` + id, u64 BE).
const JOURNAL_PREFIX: u8 = b'h';

/// What the broker knows about one undecided half message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Half {
    /// `PGROUP`: who may decide it, and whom to ask.
    group: String,
    /// `UNIQ_KEY`: the msgId and transactionId of the check.
    uniq: String,
    /// Store time, ms.
    stored_at: u64,
    /// Age at which it is first checked, ms.
    immune_ms: u64,
    /// Whether it set `CHECK_IMMUNITY_TIME_IN_SECONDS`: then, past that age, only an answer to
    /// a check may decide it.
    immunity_set: bool,
    /// Checks sent so far.
    checks: u32,
    /// Offset of its record in the half queue now (moves when re-appended).
    at: u64,
}

/// The undecided half messages by id, and the positions of their records.
#[derive(Debug, Default)]
struct Table {
    /// By the half-queue offset the producer was given.
    halves: BTreeMap<u64, Half>,
    /// Every `Half::at`: the lowest one is the release point.
    positions: BTreeSet<u64>,
    /// `(UNIQ_KEY, id)` of every half message: finds one by its transaction id without a scan
    /// (a key is the client's, so two may share one; the lowest id is found first).
    by_uniq: BTreeSet<(String, u64)>,
    /// How many undecided half messages each producer group has.
    per_group: HashMap<String, usize>,
    /// The internal group's handle, once it holds the half topic (set, under the lock, before
    /// the first half message is appended).
    holder: Option<Arc<dyn GroupStore>>,
}

impl Table {
    fn insert(&mut self, id: u64, half: Half) {
        // Ids are half-queue offsets, never reused: a no-op that keeps the indices exact.
        self.remove(id);
        self.positions.insert(half.at);
        self.by_uniq.insert((half.uniq.clone(), id));
        *self.per_group.entry(half.group.clone()).or_default() += 1;
        self.halves.insert(id, half);
    }

    fn remove(&mut self, id: u64) {
        if let Some(h) = self.halves.remove(&id) {
            self.positions.remove(&h.at);
            self.forget(id, &h);
        }
    }

    /// Drops `h`'s entries in the indices.
    fn forget(&mut self, id: u64, h: &Half) {
        self.by_uniq.remove(&(h.uniq.clone(), id));
        if let Some(n) = self.per_group.get_mut(&h.group) {
            *n -= 1;
            if *n == 0 {
                self.per_group.remove(&h.group);
            }
        }
    }

    /// The id of the lowest undecided half message whose `UNIQ_KEY` is `uniq`.
    #[cfg(feature = "grpc")]
    fn find_uniq(&self, uniq: &str) -> Option<u64> {
        let from = (uniq.to_owned(), 0);
        self.by_uniq.range(from..).next().filter(|(u, _)| u == uniq).map(|(_, id)| *id)
    }
}

/// The journal key of the half message `id`.
fn half_key(id: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = JOURNAL_PREFIX;
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

/// A journal value of `h`: position, store time, immunity (u64 LE each), checks (u32 LE),
/// whether the immunity was set (u8), the group's length (u16 LE) and bytes, then `UNIQ_KEY`.
fn encode_half(h: &Half) -> Vec<u8> {
    let group = &h.group.as_bytes()[..h.group.len().min(usize::from(u16::MAX))];
    let mut v = Vec::with_capacity(31 + group.len() + h.uniq.len());
    v.extend_from_slice(&h.at.to_le_bytes());
    v.extend_from_slice(&h.stored_at.to_le_bytes());
    v.extend_from_slice(&h.immune_ms.to_le_bytes());
    v.extend_from_slice(&h.checks.to_le_bytes());
    v.push(u8::from(h.immunity_set));
    v.extend_from_slice(&(group.len() as u16).to_le_bytes());
    v.extend_from_slice(group);
    v.extend_from_slice(h.uniq.as_bytes());
    v
}

/// The id and entry [`half_key`] and [`encode_half`] wrote; `None` for anything else.
fn decode_half(key: &[u8], v: &[u8]) -> Option<(u64, Half)> {
    let id = u64::from_be_bytes(key.strip_prefix(&[JOURNAL_PREFIX])?.try_into().ok()?);
    let u64_at = |i: usize| v.get(i..i + 8)?.try_into().ok().map(u64::from_le_bytes);
    let checks = u32::from_le_bytes(v.get(24..28)?.try_into().ok()?);
    let immunity_set = *v.get(28)? != 0;
    let glen = usize::from(u16::from_le_bytes(v.get(29..31)?.try_into().ok()?));
    let group = std::str::from_utf8(v.get(31..31 + glen)?).ok()?.to_owned();
    let uniq = std::str::from_utf8(v.get(31 + glen..)?).ok()?.to_owned();
    let half = Half {
        group,
        uniq,
        stored_at: u64_at(8)?,
        immune_ms: u64_at(16)?,
        immunity_set,
        checks,
        at: u64_at(0)?,
    };
    Some((id, half))
}

/// Figures about transactional messages (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransactionStats {
    /// Half messages waiting for a decision.
    pub half_messages: u64,
    /// Half messages committed (delivered to their real topic).
    pub committed: u64,
    /// Half messages rolled back (discarded).
    pub rolled_back: u64,
    /// `END_TRANSACTION` requests refused: bad header, no such undecided half message
    /// (already decided, duplicate, unknown id), wrong producer group or state-table offset,
    /// or a commit that could not be stored. Each is also logged.
    pub end_refused: u64,
    /// `CHECK_TRANSACTION_STATE` requests sent to producers.
    pub checks_sent: u64,
    /// Half messages moved to `TRANS_CHECK_MAX_TIME_TOPIC` after `transactionCheckMax` checks.
    pub moved_to_check_max: u64,
}

/// The undecided half messages and the counters (see the module docs).
#[derive(Default)]
pub(crate) struct Transactions {
    pending: Mutex<Table>,
    committed: AtomicU64,
    rolled_back: AtomicU64,
    end_refused: AtomicU64,
    checks_sent: AtomicU64,
    moved: AtomicU64,
    /// Wakes the checker before its next period: a producer group with undecided half
    /// messages has a new live member (see [`Transactions::producer_joined`]).
    wake: Notify,
    /// The faces that reach producers, in the order they registered.
    checkers: RwLock<Vec<Arc<dyn ProducerCheck>>>,
    /// Where the table is journaled (see the module docs); `None` keeps it in memory only.
    journal: Option<Arc<Journal>>,
}

impl Transactions {
    /// An empty table, journaled in `journal` if there is one (see the module docs).
    pub(crate) fn new(journal: Option<Arc<Journal>>) -> Self {
        Transactions { journal, ..Transactions::default() }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        lock(&self.pending)
    }

    /// Journals the entry of `id` (nothing without a journal). Called with the table locked,
    /// so the journal's last record of a key is the table's entry.
    fn keep(&self, id: u64, half: &Half) -> Result<(), crate::shm::SegmentError> {
        match &self.journal {
            Some(j) => j.put(&half_key(id), &encode_half(half)),
            None => Ok(()),
        }
    }

    /// Deletes the journal's entry of `id` (nothing without a journal); a failure is logged:
    /// after a restart the message is then checked again, if its record is still there.
    fn forget(&self, id: u64) {
        if let Some(j) = &self.journal {
            if let Err(e) = j.delete(&half_key(id)) {
                tracing::error!(id, error = %e, "a decided half message could not be journaled");
            }
        }
    }

    /// Adds a face the checker asks for producers (see [`ProducerCheck`]).
    pub(crate) fn register(&self, checker: Arc<dyn ProducerCheck>) {
        write(&self.checkers).push(checker);
    }

    /// A client registered as a producer of `group` (its first heartbeat for the group): if
    /// the group has undecided half messages, the checker runs now rather than at its next
    /// period, so a producer that reconnects is asked within moments, not up to
    /// `transaction-check-interval` later. Messages still inside their check immunity wait for
    /// the period as before.
    pub(crate) fn producer_joined(&self, group: &str) {
        if self.lock().per_group.contains_key(group) {
            self.wake.notify_one();
        }
    }

    /// Counts a refused `END_TRANSACTION`.
    pub(crate) fn refused(&self) {
        // Relaxed: a statistic.
        self.end_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// The figures now.
    pub(crate) fn stats(&self) -> TransactionStats {
        let half_messages = self.lock().halves.len() as u64;
        // Relaxed: statistics, each read on its own.
        TransactionStats {
            half_messages,
            committed: self.committed.load(Ordering::Relaxed),
            rolled_back: self.rolled_back.load(Ordering::Relaxed),
            end_refused: self.end_refused.load(Ordering::Relaxed),
            checks_sent: self.checks_sent.load(Ordering::Relaxed),
            moved_to_check_max: self.moved.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for Transactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactions").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

/// Whether a send is a half message: `TRAN_MSG=true` (what RocketMQ's broker looks at) or the
/// prepared transaction type in the sys flag.
pub(crate) fn is_half(sys_flag: i32, props: &Routing<'_>) -> bool {
    sys_flag & sys_flag::TRANSACTION_TYPE_MASK == sys_flag::TRANSACTION_PREPARED
        || props.tran_msg.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The producer group a half message names (`PGROUP`), if any.
pub(crate) fn producer_group<'a>(props: &Routing<'a>) -> Option<&'a str> {
    props.pgroup.filter(|g| !g.is_empty())
}

/// When a half message is first checked, ms, and whether it set its own immunity
/// (`CHECK_IMMUNITY_TIME_IN_SECONDS`): as RocketMQ's `getImmunityTime`, never sooner than
/// `transactionTimeOut`.
fn immunity(props: &[u8], timeout_ms: u64) -> (u64, bool) {
    match properties::find(props, CHECK_IMMUNITY) {
        Some(v) => {
            let ms = v.trim().parse::<u64>().map_or(0, |secs| secs.saturating_mul(1000));
            (ms.max(timeout_ms), true)
        }
        None => (timeout_ms, false),
    }
}

/// The half topic, created and held by the internal group on first use. Called with the
/// table locked, so no half message is appended before the group holds the topic.
fn half_topic(core: &Core, pending: &mut Table) -> Result<Arc<dyn TopicStore>, StoreError> {
    let t = match core.store.topic(HALF_TOPIC) {
        Some(t) => t,
        None => core.store.ensure_topic(HALF_TOPIC, 1)?,
    };
    if pending.holder.is_none() {
        pending.holder = Some(core.store.holder(HALF_GROUP, HALF_TOPIC)?);
        if core.transactions.journal.is_some() {
            // A committed offset journaled before the first half message: the store holds
            // the half topic for the group again after a restart (it re-subscribes the
            // groups that committed).
            release(core, t.as_ref(), pending);
        }
    }
    Ok(t)
}

/// Moves the internal group's committed offset to the lowest undecided record (or the end of
/// the queue), releasing every decided one below it. Called with the table locked.
fn release(core: &Core, topic: &dyn TopicStore, pending: &Table) {
    let upto = match pending.positions.first() {
        Some(first) => *first,
        None => topic.offsets(0).map_or(0, |(_, max)| max),
    };
    let committed = match &pending.holder {
        Some(holder) => holder.commit(0, upto),
        None => core.store.commit(HALF_GROUP, HALF_TOPIC, 0, upto),
    };
    if let Err(e) = committed {
        tracing::warn!(error = %e, "cannot release decided half messages");
    }
}

/// Stores a half message bound for `real_topic`/`real_queue` (`routing` is the view of
/// `rec.properties`, `uniq` its `UNIQ_KEY`). Returns the half topic's uid and the half
/// message's offset (queue 0).
///
/// # Errors
/// [`PutError::Record`] when the properties with what the broker adds would not fit a record,
/// [`StoreError::Full`] under `reject` when less than a sixteenth of the budget is free (a
/// commit appends its real copy while the half message is still held, as a delay's delivery
/// does: see [`ensure_delivery_room`](super::delay::ensure_delivery_room)), or the store's
/// error.
pub(crate) fn prepare(
    core: &Core,
    real_topic: &str,
    real_queue: u32,
    rec: &NewRecord<'_>,
    routing: &Routing<'_>,
    uniq: &str,
) -> Result<(u32, u64), PutError> {
    super::delay::ensure_delivery_room(core)?;
    let group = producer_group(routing).unwrap_or_default().to_owned();
    let qid = real_queue.to_string();
    let props = rewrite_properties(
        rec.properties,
        &[properties::DELAY],
        &[
            (properties::REAL_TOPIC, real_topic),
            (properties::REAL_QID, &qid),
            (properties::TRANSACTION_ID, uniq),
        ],
    );
    let (immune_ms, immunity_set) = immunity(&props, core.config.transaction_time_out);
    let stored = record::encode(
        &NewRecord {
            sys_flag: rec.sys_flag & !sys_flag::TRANSACTION_TYPE_MASK,
            properties: &props,
            ..*rec
        },
        core.cluster_property.len() + CHECK_TIMES_ROOM,
    )?;
    let tag = properties::tags_code(&props);
    let uniq = uniq.to_owned();
    let now = now_ms();
    let mut pending = core.transactions.lock();
    let topic = half_topic(core, &mut pending)?;
    let offset = topic.append(0, stored, tag, now)?;
    let half = Half { group, uniq, stored_at: now, immune_ms, immunity_set, checks: 0, at: offset };
    if let Err(e) = core.transactions.keep(offset, &half) {
        // Not answered as stored: the record is released like a decided one.
        release(core, topic.as_ref(), &pending);
        return Err(PutError::Store(StoreError::Other(format!(
            "the half message could not be journaled: {e}"
        ))));
    }
    pending.insert(offset, half);
    Ok((topic.uid(), offset))
}

/// A producer's decision on a half message, as `END_TRANSACTION` carries it (RocketMQ's
/// `EndTransactionRequestHeader`, without its protocol).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decision<'a> {
    /// The producer group that decides (`PGROUP` of the message).
    pub(crate) producer_group: &'a str,
    /// The half message's queue offset the producer was given.
    pub(crate) tran_state_table_offset: i64,
    /// The half message's commit-log offset (from its offset msgId).
    pub(crate) commit_log_offset: i64,
    /// Commit (`true`) or roll back.
    pub(crate) commit: bool,
    /// Whether it answers a check (a message past its own immunity waits for one).
    pub(crate) from_transaction_check: bool,
}

/// Why a decision was refused (logged and counted; a producer's one-way `END_TRANSACTION`
/// never sees it). `Display` is RocketMQ's remark.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EndError {
    /// No undecided half message at that offset (already decided, duplicate, unknown id).
    #[error("Find prepared transaction message failed")]
    NotFound,
    /// The producer group is not the message's.
    #[error("The producer group wrong")]
    WrongGroup,
    /// The state-table offset is not the message's.
    #[error("The transaction state table offset wrong")]
    WrongOffset,
    /// Past its own `CHECK_IMMUNITY_TIME_IN_SECONDS`, only a check's answer decides it
    /// (RocketMQ's `rejectCommitOrRollback`).
    #[error("the message is past its CHECK_IMMUNITY_TIME_IN_SECONDS: it waits for the check")]
    PastImmunity,
    /// The committed copy could not be stored (the message stays undecided; the producer is
    /// asked again at the next check).
    #[error("{0}")]
    Commit(String),
    /// The committed copy found the memory budget full (as above).
    #[error("{0}")]
    Busy(StoreError),
    /// The committed copy's timer is illegal (RocketMQ's `WHEEL_TIMER_MSG_ILLEGAL`, answered
    /// `MESSAGE_ILLEGAL`): the message stays undecided, as RocketMQ keeps the half message.
    #[error("{0}")]
    IllegalTimer(String),
}

/// What became of a decision.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Committed or rolled back.
    Done,
    /// Refused (counted): why.
    Refused(EndError),
}

/// Commits or rolls back the undecided half message whose `UNIQ_KEY` (its transaction id) is
/// `uniq`, as [`end`] does for the `END_TRANSACTION` its producer would send: for producers that
/// know a message by its transaction id only (the gRPC face). The table indexes its half
/// messages by that id, so finding one costs a lookup, not a scan.
///
/// Returns `None` when no undecided half message has that id.
#[cfg(feature = "grpc")]
pub(crate) fn end_by_transaction_id(
    core: &Core,
    uniq: &str,
    commit: bool,
    from_transaction_check: bool,
) -> Option<Ended> {
    let uid = core.store.topic(HALF_TOPIC)?.uid();
    let (id, group) = {
        let pending = core.transactions.lock();
        let id = pending.find_uniq(uniq)?;
        (id, pending.halves.get(&id)?.group.clone())
    };
    let d = Decision {
        producer_group: &group,
        tran_state_table_offset: i64::try_from(id).ok()?,
        commit_log_offset: record::physical_offset(uid, 0, id),
        commit,
        from_transaction_check,
    };
    Some(end(core, &d))
}

/// A record with the fields of a decoded one, `sys_flag` and `props`.
fn renewed<'a>(d: &Decoded<'a>, sys_flag: i32, props: &'a [u8]) -> NewRecord<'a> {
    NewRecord {
        flag: d.flag,
        sys_flag,
        born_timestamp: d.born_timestamp,
        born_host: d.born_host,
        reconsume_times: d.reconsume_times,
        body: d.body,
        properties: props,
    }
}

/// Appends the committed copy of a half message to its real topic and queue: `REAL_TOPIC`,
/// `REAL_QID` and `TRAN_MSG` removed, the sys flag's transaction type COMMIT.
fn deliver_committed(core: &Core, half: &[u8]) -> Result<(), EndError> {
    let refuse = EndError::Commit;
    let d = record::decode(half).ok_or_else(|| refuse("the half message is malformed".into()))?;
    let real_topic = properties::find(d.properties, properties::REAL_TOPIC)
        .ok_or_else(|| refuse("the half message has no REAL_TOPIC".into()))?;
    let topic = core
        .store
        .topic(real_topic)
        .ok_or_else(|| refuse(format!("the topic {real_topic} of the half message is gone")))?;
    let asked: u32 = properties::find(d.properties, properties::REAL_QID)
        .and_then(|q| q.trim().parse().ok())
        .unwrap_or(0);
    let queue = if asked < topic.queue_count() { asked } else { 0 };
    let committed = rewrite_properties(
        d.properties,
        &[properties::REAL_TOPIC, properties::REAL_QID, properties::TRAN_MSG],
        &[],
    );
    let mut props = Cow::Borrowed(&committed[..]);
    let flag = (d.sys_flag & !sys_flag::TRANSACTION_TYPE_MASK) | sys_flag::TRANSACTION_COMMIT;
    // As RocketMQ 5 (`HookUtils.handleScheduleMessage` takes COMMIT like NOT): a delay level or
    // a timer on the committed copy makes it wait, not the half message. An illegal timer
    // refuses the commit (`WHEEL_TIMER_MSG_ILLEGAL`) and the half message stays undecided: it
    // is neither delivered at once nor lost.
    let routing = Routing::parse(&committed);
    let wait = timer::wait_of(&mut props, &routing, now_ms(), core.config.timer_max_delay_sec)
        .map_err(EndError::IllegalTimer)?;
    let rec = renewed(&d, flag, &props);
    let tag = properties::tags_code(&props);
    let stored = timer::store(core, wait, &topic, queue, &rec, tag).map(|_| ());
    match stored {
        Ok(()) => Ok(()),
        Err(PutError::Store(e @ StoreError::Full { .. })) => Err(EndError::Busy(e)),
        Err(PutError::Store(e)) => Err(refuse(e.to_string())),
        Err(PutError::Record(e)) => Err(refuse(e.to_string())),
    }
}

/// Commits or rolls back the half message a decision names, after RocketMQ's checks
/// (`checkPrepareMessage`): the message is undecided, `PGROUP` equals `producerGroup`, its
/// offset equals `tranStateTableOffset`; and (`rejectCommitOrRollback`) a message with its own
/// `CHECK_IMMUNITY_TIME_IN_SECONDS` is past it only decided by a check's answer. Refusals are
/// counted; the caller logs them.
pub(crate) fn end(core: &Core, d: &Decision<'_>) -> Ended {
    match decide(core, d) {
        Ok(()) => Ended::Done,
        Err(e) => {
            core.transactions.refused();
            Ended::Refused(e)
        }
    }
}

fn decide(core: &Core, h: &Decision<'_>) -> Result<(), EndError> {
    let commit = h.commit;
    let Some(topic) = core.store.topic(HALF_TOPIC) else { return Err(EndError::NotFound) };
    let offset = match split_physical_offset(h.commit_log_offset) {
        Some((uid, 0, offset)) if uid == topic.uid() => offset,
        _ => return Err(EndError::NotFound),
    };
    let mut pending = core.transactions.lock();
    let Some(half) = pending.halves.get(&offset) else { return Err(EndError::NotFound) };
    if half.group != h.producer_group {
        return Err(EndError::WrongGroup);
    }
    if i64::try_from(offset).ok() != Some(h.tran_state_table_offset) {
        return Err(EndError::WrongOffset);
    }
    if !h.from_transaction_check
        && half.immunity_set
        && now_ms().saturating_sub(half.stored_at) > half.immune_ms
    {
        // RocketMQ's `rejectCommitOrRollback`: past its own immunity the message waits for
        // the check.
        return Err(EndError::PastImmunity);
    }
    match core.store.get(topic.as_ref(), 0, half.at) {
        Some((rec, _)) if commit => {
            // Refused: still undecided, the producer is asked again at the next check.
            deliver_committed(core, &rec)?;
        }
        Some(_) => {}
        None => {
            // Evicted under `drop-oldest`: nothing left to decide.
            pending.remove(offset);
            core.transactions.forget(offset);
            release(core, topic.as_ref(), &pending);
            return Err(EndError::NotFound);
        }
    }
    pending.remove(offset);
    core.transactions.forget(offset);
    release(core, topic.as_ref(), &pending);
    drop(pending);
    let counter =
        if commit { &core.transactions.committed } else { &core.transactions.rolled_back };
    // Relaxed: a statistic.
    counter.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A face that can ask a transaction's producer for its decision: the remoting face sends
/// `CHECK_TRANSACTION_STATE` on a producer's connection, the gRPC face a
/// `RecoverOrphanedTransactionCommand` on its Telemetry stream. Each face registers one
/// ([`Transactions::register`]); the checker asks them in the order they registered, and the
/// first that knows a live producer of the message's group gets the check.
pub(crate) trait ProducerCheck: Send + Sync {
    /// A live producer of `group` this face can reach, if any. Called after a check pass has
    /// released the half-message table (so its cost never stalls sends and decisions); it
    /// must not block.
    fn producer(&self, core: &Core, group: &str) -> Option<Box<dyn CheckProducer>>;
}

/// One producer a check goes to (see [`ProducerCheck`]).
pub(crate) trait CheckProducer: Send {
    /// Sends it the check of `half`, without waiting. Returns whether the check was queued (a
    /// producer that does not read its connection or stream misses it; the next pass asks
    /// again).
    fn ask(&self, core: &Core, half: &HalfCheck<'_>) -> bool;
}

/// An undecided half message a producer is asked about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HalfCheck<'a> {
    /// The half topic's uid (with queue 0 and `offset`, the message's commit-log offset).
    pub(crate) topic_uid: u32,
    /// Its offset in the half queue as the producer was given it (its id for good).
    pub(crate) offset: u64,
    /// Its record, decoded.
    pub(crate) record: Decoded<'a>,
    /// When it was stored, ms since the epoch.
    pub(crate) stored_at: u64,
    /// Its `UNIQ_KEY` (message id and transaction id).
    pub(crate) uniq: &'a str,
    /// Checks counted so far, this one included (a pass with no producer connected counts
    /// one too).
    pub(crate) checks: u32,
}

/// One check to send, gathered under the table's lock; its producer is looked up and asked
/// after it.
struct Check {
    group: String,
    offset: u64,
    record: Bytes,
    stored_at: u64,
    uniq: String,
    checks: u32,
}

/// Stores a copy of a half message, checked `checks` times, in `TRANS_CHECK_MAX_TIME_TOPIC`.
fn move_to_check_max(core: &Core, half: &[u8], checks: u32) -> Result<(), PutError> {
    let Some(d) = record::decode(half) else { return Ok(()) };
    let n = checks.to_string();
    let props = rewrite_properties(d.properties, &[], &[(CHECK_TIMES, &n)]);
    let rec = record::encode(&renewed(&d, d.sys_flag, &props), core.cluster_property.len())?;
    if core.topics.get_perm(CHECK_MAX_TOPIC).is_none() {
        // A topic of the table, read and write, as RocketMQ's `createTopicOfTranCheckMaxTime`
        // makes it: what was given up on can be read (and queried by key) like any topic.
        let mut c = TopicConfig::new(CHECK_MAX_TOPIC, 1, 1);
        c.perm = topics::perm::RW;
        if let Err(e) = core.create_topic(c) {
            tracing::warn!(error = ?e, "{CHECK_MAX_TOPIC} cannot be registered; stored unrouted");
        }
    }
    let topic = core.store.ensure_topic(CHECK_MAX_TOPIC, 1)?;
    topic.set_retention(Retention {
        time: Duration::from_secs(core.config.dlq_retention_secs),
        bytes: core.config.dlq_retention_bytes,
    });
    topic.append(0, rec, properties::tags_code(&props), now_ms())?;
    Ok(())
}

/// One pass of the checker (see the module docs).
fn check_pass(core: &Core) {
    let Some(topic) = core.store.topic(HALF_TOPIC) else { return };
    let now = now_ms();
    let max = core.config.transaction_check_max;
    let mut checks = Vec::new();
    let mut pending = core.transactions.lock();
    let mut end = topic.offsets(0).map_or(0, |(_, end)| end);
    let mut gone = Vec::new();
    // Entries whose checks or position changed: journaled before anything is released (only
    // collected when there is a journal).
    let journaled = core.transactions.journal.is_some();
    let mut changed = Vec::new();
    let Table { halves, positions, .. } = &mut *pending;
    for (&id, half) in halves.iter_mut() {
        let age = now.saturating_sub(half.stored_at);
        let immune = age < half.immune_ms;
        if immune && !half.immunity_set {
            // Younger than `transactionTimeOut`: it holds what follows it for that long at
            // most (RocketMQ's pass stops at such a message).
            continue;
        }
        let Some((record, _)) = core.store.get(topic.as_ref(), 0, half.at) else {
            tracing::warn!(id, "an undecided half message was evicted");
            gone.push(id);
            continue;
        };
        let too_old = age > FILE_RESERVED_MS;
        if immune && !too_old {
            // Inside its own `CHECK_IMMUNITY_TIME_IN_SECONDS`: not checked yet, but moved to
            // the end below, as RocketMQ's `putImmunityMsgBackToHalfQueue` does, so it never
            // holds the messages behind it for as long as its immunity lasts.
        } else if half.checks >= max || too_old {
            match move_to_check_max(core, &record, half.checks) {
                Ok(()) => {
                    tracing::info!(id, group = %half.group, checks = half.checks, age_ms = age, "a half message checked too often (or older than {FILE_RESERVED_MS} ms) moved to {CHECK_MAX_TOPIC}");
                    // Relaxed: a statistic.
                    core.transactions.moved.fetch_add(1, Ordering::Relaxed);
                    gone.push(id);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(id, error = ?e, "cannot move a half message to {CHECK_MAX_TOPIC}; trying again later");
                }
            }
        } else {
            // Counted whether or not a producer is connected, as RocketMQ's `needDiscard`
            // counts before `resolveHalfMsg` looks for a channel: a group that never comes
            // back uses up its checks and the message moves on.
            half.checks += 1;
            if journaled {
                changed.push(id);
            }
            checks.push(Check {
                group: half.group.clone(),
                offset: id,
                record: record.clone(),
                stored_at: half.stored_at,
                uniq: half.uniq.clone(),
                checks: half.checks,
            });
        }
        if half.at + 1 < end {
            // Behind it may be decided messages: move its record to the end so they go.
            match topic.append(0, record, 0, now) {
                Ok(at) => {
                    positions.remove(&half.at);
                    positions.insert(at);
                    half.at = at;
                    end = at + 1;
                    if journaled && changed.last() != Some(&id) {
                        changed.push(id);
                    }
                }
                Err(e) => {
                    tracing::debug!(id, error = %e, "a half message cannot move to the end yet")
                }
            }
        }
    }
    for id in gone {
        pending.remove(id);
        core.transactions.forget(id);
    }
    let mut kept = true;
    for id in changed {
        let Some(half) = pending.halves.get(&id) else { continue };
        if let Err(e) = core.transactions.keep(id, half) {
            // The journal still names the old position: it must stay held.
            tracing::error!(id, error = %e, "a checked half message could not be journaled; nothing is released this pass");
            kept = false;
        }
    }
    if kept {
        release(core, topic.as_ref(), &pending);
    }
    drop(pending);
    for c in checks {
        let Some(to) = check_target(core, &c.group) else {
            tracing::debug!(id = c.offset, group = %c.group, checks = c.checks, "no producer of the group is connected: the check is counted, not sent");
            continue;
        };
        let Some(record) = record::decode(&c.record) else { continue };
        let half = HalfCheck {
            topic_uid: topic.uid(),
            offset: c.offset,
            record,
            stored_at: c.stored_at,
            uniq: &c.uniq,
            checks: c.checks,
        };
        // Counted when queued, as RocketMQ counts checks whatever their fate.
        if to.ask(core, &half) {
            // Relaxed: a statistic.
            core.transactions.checks_sent.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A live producer of `group` to check with: the first registered face that knows one.
fn check_target(core: &Core, group: &str) -> Option<Box<dyn CheckProducer>> {
    let checkers = read(&core.transactions.checkers).clone();
    checkers.iter().find_map(|c| c.producer(core, group))
}

/// Rebuilds the table of undecided half messages from the journal at start (see the module
/// docs): each entry whose record is still in the half topic at its position comes back, the
/// others' keys are deleted, and the internal group holds the half topic again. Nothing
/// without a journal, or when nothing was journaled.
pub(crate) fn restore(core: &Core) {
    let Some(journal) = &core.transactions.journal else { return };
    let entries = journal.entries(&[JOURNAL_PREFIX]);
    let Some(topic) = core.store.topic(HALF_TOPIC) else {
        if !entries.is_empty() {
            tracing::warn!(
                entries = entries.len(),
                "the half topic is gone: its journaled half messages are forgotten"
            );
            if let Err(e) = journal.delete_prefix(&[JOURNAL_PREFIX]) {
                tracing::error!(error = %e, "forgotten half messages could not be journaled");
            }
        }
        return;
    };
    let mut pending = core.transactions.lock();
    if pending.holder.is_none() {
        match core.store.holder(HALF_GROUP, HALF_TOPIC) {
            Ok(h) => pending.holder = Some(h),
            Err(e) => {
                tracing::error!(error = %e, "the half topic cannot be held: undecided half messages are not restored");
                return;
            }
        }
    }
    let (mut restored, mut lost) = (0usize, 0usize);
    for (key, value) in entries {
        let back = decode_half(&key, &value)
            .filter(|(_, half)| core.store.get(topic.as_ref(), 0, half.at).is_some());
        match back {
            Some((id, half)) => {
                pending.insert(id, half);
                restored += 1;
            }
            None => {
                lost += 1;
                if let Err(e) = journal.delete(&key) {
                    tracing::error!(error = %e, "a lost half message could not be journaled");
                }
            }
        }
    }
    release(core, topic.as_ref(), &pending);
    if restored + lost > 0 {
        tracing::info!(
            restored,
            lost,
            "undecided half messages restored (lost: their records were no longer stored)"
        );
    }
}

/// Checks undecided half messages every `transaction-check-interval`, and when a producer of a
/// group with undecided ones joins, until shutdown.
pub(crate) async fn run(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    let period = Duration::from_millis(core.config.transaction_check_interval.max(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = core.transactions.wake.notified() => {}
            _ = shutdown.changed() => return,
        }
        check_pass(&core);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_an_immunity_property_when_reading_it_should_never_be_shorter_than_the_timeout() {
        let with = |v: &str| format!("{CHECK_IMMUNITY}\x01{v}\x02").into_bytes();
        assert_eq!(immunity(&with("10"), 6_000), (10_000, true), "seconds, when longer");
        assert_eq!(immunity(&with("2"), 6_000), (6_000, true), "never below transactionTimeOut");
        assert_eq!(immunity(&with("x"), 6_000), (6_000, true), "unparseable: the timeout");
        assert_eq!(immunity(b"TAGS\x01A\x02", 6_000), (6_000, false), "absent: the timeout");
    }

    fn half(group: &str, uniq: &str, at: u64) -> Half {
        Half {
            group: group.into(),
            uniq: uniq.into(),
            stored_at: 0,
            immune_ms: 0,
            immunity_set: false,
            checks: 0,
            at,
        }
    }

    #[test]
    fn given_halves_when_inserted_and_removed_should_keep_the_indices_exact() {
        // Review M10: lookups by transaction id and by group are index reads, not scans.
        let mut t = Table::default();
        t.insert(5, half("g1", "U", 5));
        t.insert(3, half("g1", "U", 3));
        t.insert(7, half("g2", "V", 7));
        #[cfg(feature = "grpc")]
        {
            assert_eq!(t.find_uniq("U"), Some(3), "a shared key finds the lowest id");
            assert_eq!(t.find_uniq("V"), Some(7));
            assert_eq!(t.find_uniq("UV"), None, "no prefix match");
        }
        assert_eq!(t.per_group.get("g1"), Some(&2));
        t.remove(3);
        t.remove(7);
        #[cfg(feature = "grpc")]
        assert_eq!(t.find_uniq("U"), Some(5), "the other half with the key remains");
        assert_eq!(t.per_group.get("g1"), Some(&1));
        assert!(!t.per_group.contains_key("g2"), "a group without halves is forgotten");
        t.remove(5);
        assert!(t.by_uniq.is_empty() && t.per_group.is_empty() && t.positions.is_empty());
    }

    #[test]
    fn given_a_half_entry_when_journaled_should_decode_to_the_same_entry_and_refuse_garbage() {
        let mut h = half("pg", "7F00000100010000000000000000ABCD", 42);
        h.stored_at = 1_700_000_000_123;
        h.immune_ms = 6_000;
        h.immunity_set = true;
        h.checks = 3;
        let (key, value) = (half_key(7), encode_half(&h));
        assert_eq!(decode_half(&key, &value), Some((7, h.clone())));
        let empty = half("", "", 0);
        assert_eq!(decode_half(&half_key(0), &encode_half(&empty)), Some((0, empty)));
        assert_eq!(decode_half(b"o\0\0\0\0\0\0\0\x07", &value), None, "another prefix");
        assert_eq!(decode_half(&key[..8], &value), None, "a short key");
        for cut in [0, 10, 28, 30, 32] {
            assert_eq!(decode_half(&key, &value[..cut]), None, "cut at {cut}");
        }
    }

    #[test]
    fn given_sends_when_classifying_should_see_half_messages_by_property_or_sys_flag() {
        let half = |flag, props: &[u8]| is_half(flag, &Routing::parse(props));
        assert!(half(0, b"TRAN_MSG\x01true\x02PGROUP\x01g\x02"));
        assert!(half(0, b"TRAN_MSG\x01TRUE\x02"), "Boolean.parseBoolean ignores case");
        assert!(half(sys_flag::TRANSACTION_PREPARED, b""));
        assert!(!half(sys_flag::TRANSACTION_COMMIT, b"TRAN_MSG\x01false\x02"));
        assert!(!half(0, b"TAGS\x01A\x02"));
        assert_eq!(producer_group(&Routing::parse(b"PGROUP\x01pg\x02")), Some("pg"));
        assert_eq!(producer_group(&Routing::parse(b"PGROUP\x01\x02")), None);
    }
}
