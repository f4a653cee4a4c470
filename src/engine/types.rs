//! The values the engine API takes and returns.

use bytes::Bytes;

use crate::hash::java_string_hash;

/// A message to append: a payload (shared, never copied) plus the metadata the engine filters
/// and retains by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub(crate) payload: Bytes,
    pub(crate) tag: u32,
    pub(crate) timestamp: Option<u64>,
}

impl Message {
    /// A message without tag, stamped with the current time when appended.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Message { payload: payload.into(), tag: 0, timestamp: None }
    }

    /// Sets the tag consumer groups filter by (RocketMQ's tag: hashed like Java's
    /// `String.hashCode`, so a group's filter and the broker agree).
    pub fn with_tag(mut self, tag: &str) -> Self {
        self.tag = java_string_hash(tag) as u32;
        self
    }

    /// Sets the tag by its hash directly (what the broker has after parsing a request).
    pub fn with_tag_hash(mut self, hash: i32) -> Self {
        self.tag = hash as u32;
        self
    }

    /// Overrides the store timestamp (milliseconds since the Unix epoch; `u64::MAX`, which
    /// marks a recovered hole, is stored as `u64::MAX - 1`).
    pub fn with_timestamp(mut self, millis: u64) -> Self {
        self.timestamp = Some(millis.min(crate::queue::HOLE_TIMESTAMP - 1));
        self
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }
}

/// Where an appended message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// The queue.
    pub queue: u32,
    /// Its offset in the queue.
    pub offset: u64,
}

/// A message handed to a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The queue it came from.
    pub queue: u32,
    /// Its offset in that queue.
    pub offset: u64,
    /// Its store timestamp (ms since the Unix epoch).
    pub timestamp: u64,
    /// Its tag hash (0 = none).
    pub tag: u32,
    /// The payload (shared with the producer's buffer and every other group).
    pub payload: Bytes,
}

/// A borrowed view of a stored message, valid inside a read visitor.
#[derive(Debug, Clone, Copy)]
pub struct MessageRef<'a> {
    /// Offset in the queue.
    pub offset: u64,
    /// Store timestamp (ms since the Unix epoch).
    pub timestamp: u64,
    /// Tag hash (0 = none).
    pub tag: u32,
    /// The payload.
    pub payload: &'a Bytes,
}

/// Which messages a consumer group wants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Filter {
    /// Every message.
    #[default]
    All,
    /// Messages whose tag hash is one of these (RocketMQ's `"TagA || TagB"`).
    Tags(Vec<u32>),
}

impl Filter {
    /// A filter accepting the given tag names.
    pub fn tags<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut v: Vec<u32> = names.into_iter().map(|t| java_string_hash(t) as u32).collect();
        v.sort_unstable();
        v.dedup();
        Filter::Tags(v)
    }

    /// A filter accepting these tag hashes.
    pub fn tag_hashes(hashes: impl IntoIterator<Item = i32>) -> Self {
        let mut v: Vec<u32> = hashes.into_iter().map(|h| h as u32).collect();
        v.sort_unstable();
        v.dedup();
        Filter::Tags(v)
    }

    /// Whether a message with this tag hash passes.
    #[inline]
    pub fn matches(&self, tag: u32) -> bool {
        match self {
            Filter::All => true,
            Filter::Tags(t) => t.binary_search(&tag).is_ok(),
        }
    }
}

/// Where a new subscription (or a new broadcasting member) starts reading, per queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartFrom {
    /// The oldest retained message.
    First,
    /// After the newest message: only what is appended from now on.
    #[default]
    Last,
    /// The first message stored at or after this time (ms since the Unix epoch); the end if none.
    Timestamp(u64),
    /// This offset, clamped into the retained range `[first, end]` of each queue.
    Offset(u64),
}

/// How a group shares messages between its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Each message goes to one member; the engine spreads queues over members.
    #[default]
    Clustering,
    /// Every member reads every queue and sees every message.
    Broadcasting,
}

/// What a per-message acknowledgement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The message is now acknowledged by the group.
    Acked,
    /// It already was (or it was committed, or evicted): nothing changed.
    AlreadyAcked,
}

/// Identifies a member of a consumer group. Only the engine makes them, and never the same
/// one twice in a process, so an id names one member of one group and cannot be made up:
///
/// ```compile_fail
/// let forged = baiji::engine::MemberId(3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(u64);

impl MemberId {
    /// A member id no member of any group of any engine in this process had before.
    pub(crate) fn fresh() -> Self {
        static NEXT: crate::sync::plain::AtomicU64 = crate::sync::plain::AtomicU64::new(1);
        // Relaxed: only uniqueness matters.
        MemberId(NEXT.fetch_add(1, crate::sync::plain::Ordering::Relaxed))
    }
}

/// Per-queue statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue.
    pub queue: u32,
    /// Offset of the oldest retained message (equals `max_offset` when empty).
    pub min_offset: u64,
    /// Offset the next message will get.
    pub max_offset: u64,
    /// Messages retained.
    pub live_messages: u64,
    /// Bytes retained (payload plus node).
    pub bytes: u64,
    /// Messages reclaimed so far (acknowledged, retention expired, or evicted).
    pub reclaimed: u64,
    /// Of those, evicted by the `drop-oldest` policy.
    pub evicted: u64,
    /// Store timestamp of the message at `max_offset - 1`, retained or not (0 when the queue
    /// never held one): what RocketMQ's topic statistics call the last update time.
    pub last_store_timestamp: u64,
    /// Store timestamp of the message at `min_offset - 1`, the last one reclaimed (0 when none
    /// was).
    pub reclaimed_store_timestamp: u64,
}

/// Per-group statistics (one group's subscription to one topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStats {
    /// The group.
    pub group: String,
    /// The topic.
    pub topic: String,
    /// Its mode.
    pub mode: Mode,
    /// Live members.
    pub members: usize,
    /// Messages the group still has to acknowledge.
    pub backlog: u64,
    /// Deliveries to members (redeliveries counted again).
    pub delivered: u64,
    /// Messages acknowledged by the group (by commit, per-message ack or pull position).
    pub acked: u64,
    /// Messages skipped by the group's tag filter (they count as acknowledged).
    pub filtered: u64,
    /// Messages evicted by `drop-oldest` before the group acknowledged them.
    pub dropped: u64,
    /// Committed offset per queue (for broadcasting: the slowest live member's).
    pub committed: Vec<u64>,
}

/// Engine-wide statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineStats {
    /// Bytes in use (payload plus bookkeeping of every live message).
    pub bytes_used: u64,
    /// The budget.
    pub memory_budget: u64,
    /// Live messages in all queues.
    pub live_messages: u64,
    /// Messages reclaimed so far.
    pub reclaimed_messages: u64,
    /// Of those, evicted by `drop-oldest`.
    pub evicted_messages: u64,
    /// Appends refused for lack of memory.
    pub rejected_messages: u64,
    /// Topics.
    pub topics: usize,
}

/// Where a POP group starts reading a queue it never popped (RocketMQ's `ConsumeInitMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PopInit {
    /// The oldest retained message (`MIN`, 0 on the wire).
    Min,
    /// RocketMQ's `MAX` (1): the newest message, or the oldest if the queue never lost one
    /// (RocketMQ starts there when message 0 is still in memory, which for baiji means the
    /// queue was never trimmed).
    #[default]
    Max,
}

/// One POP request on one queue (see [`Group::pop`](super::Group::pop)).
#[derive(Debug, Clone, Copy)]
pub struct PopRequest<'a> {
    /// Most messages to hand out (over all queues the caller pops with one outcome).
    pub max: usize,
    /// How long the popped messages stay invisible to the group, ms.
    pub invisible_ms: u64,
    /// The caller's clock, ms since the Unix epoch: pop times and expiry are computed from it.
    pub now_ms: u64,
    /// Ordered pop: a queue with a popped, unacknowledged message that is still invisible is
    /// blocked (see `attempt_id`).
    pub order: bool,
    /// Ordered pop: a blocked queue whose last batch was popped with this attempt id hands
    /// that batch out again (a client retrying a pop whose answer it lost).
    pub attempt_id: Option<&'a str>,
    /// Most deliveries of one message: a message whose invisible time expired after this
    /// many is dead-lettered (handed back in [`PopOutcome::dead`]; see [`PopPolicy`]).
    pub max_attempts: u32,
    /// Which messages the request wants; the others count as acknowledged by the group.
    pub filter: &'a Filter,
    /// Where a queue the group never popped starts.
    pub init: PopInit,
}

/// A message handed out by a pop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Popped {
    /// The message.
    pub delivery: Delivery,
    /// Which delivery this is to the group: 1 the first time, +1 for each redelivery after
    /// its invisible time expired. (A RocketMQ client's reconsume times is `attempts - 1`.)
    pub attempts: u32,
}

/// What pops handed out (accumulated over the queues of one request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PopOutcome {
    /// The pop time of every message handed out (the request's `now_ms`): with the queue and
    /// offset it is the receipt that acknowledges or changes the invisible time
    /// ([`receipt`](Self::receipt)).
    pub pop_time: u64,
    /// Messages handed out, per queue in offset order.
    pub messages: Vec<Popped>,
    /// Messages whose attempts ran out, for the caller to move to its dead-letter queue. Under
    /// [`PopPolicy::IN_PLACE`] (what [`Group::pop`](super::Group::pop) applies) they are
    /// acknowledged by the group already; with [`PopPolicy::dead_letter_pending`] they are
    /// still in flight under their receipt, for the caller to acknowledge once its copy is
    /// stored (or to make visible again after a short time if the copy failed).
    pub dead: Vec<Popped>,
    /// Expired messages handed to the caller for revival ([`PopPolicy::in_place_deliveries`]):
    /// still in flight under their receipt and invisible for [`PopPolicy::lease_ms`]. The
    /// caller copies each to its retry topic and acknowledges it (the original queue moves
    /// on), or makes it visible again after a short time if the copy failed.
    pub revive: Vec<Popped>,
    /// Queues skipped because an ordered pop found them blocked.
    pub blocked: u32,
    /// The earliest time at which a popped message of these queues becomes visible again.
    pub next_expiry: Option<u64>,
    /// Queues whose scan for new messages stopped at the scan limit (4,096 nodes, filtered-out
    /// ones included) with messages left behind it: popping again at once goes on from there.
    pub scan_limited: u32,
    /// Queues that had messages left to hand out but their [`INFLIGHT_LIMIT`] entries in
    /// flight: they give more once an ack frees room ([`PopAck::room_freed`]).
    ///
    /// [`INFLIGHT_LIMIT`]: super::INFLIGHT_LIMIT
    pub inflight_full: u32,
}

impl PopOutcome {
    /// The receipt of `p`, one of this outcome's `messages`, `dead` or `revive`.
    pub fn receipt(&self, p: &Popped) -> PopReceipt {
        PopReceipt { queue: p.delivery.queue, offset: p.delivery.offset, pop_time: self.pop_time }
    }
}

/// What acknowledges or changes the invisible time of a popped message: its queue, its offset
/// and the pop time of its latest delivery (a redelivery, a change of invisible time or a
/// hand-over for revival or dead-lettering gives a newer one, and the older receipt is stale).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PopReceipt {
    /// The queue.
    pub queue: u32,
    /// The offset.
    pub offset: u64,
    /// The pop time of the delivery the receipt is for.
    pub pop_time: u64,
}

/// What a POP acknowledgement did ([`Group::ack_popped`](super::Group::ack_popped)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PopAck {
    /// Acknowledged now, or already.
    pub outcome: AckOutcome,
    /// The queue had [`INFLIGHT_LIMIT`](super::INFLIGHT_LIMIT) entries in flight and now has
    /// room: a pop that stopped for lack of it ([`PopOutcome::inflight_full`]) would get
    /// messages, so parked pops should look again.
    pub room_freed: bool,
}

/// How a pop treats expired in-flight messages ([`Group::pop_with`](super::Group::pop_with)).
///
/// RocketMQ's revive service copies an expired POP message to `%RETRY%<group>_<topic>` and
/// acknowledges the original, so the original queue moves on (`PopReviveService`); baiji
/// redelivers from the message's own queue by default, which keeps a failing message's queue
/// held until it is acknowledged or dead-lettered. This says which to do, message by message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PopPolicy {
    /// Deliveries a message gets from its own queue: an expired message that had this many
    /// (and fewer than the request's `max_attempts`) is handed out in
    /// [`PopOutcome::revive`] instead of being redelivered. `u32::MAX` redelivers in place
    /// always; 1 revives at the first expiry, as RocketMQ does; 2 redelivers once in place
    /// and revives after that.
    pub in_place_deliveries: u32,
    /// Dead letters are handed out still in flight (see [`PopOutcome::dead`]) instead of
    /// acknowledged before they are handed out.
    pub dead_letter_pending: bool,
    /// How long a message handed out for revival or dead-lettering stays invisible (neither
    /// redelivered nor handed out again) while the caller copies it, ms. If the caller has
    /// neither acknowledged it nor changed its invisible time by then, it is expired again
    /// and the next pop hands it out again under a new receipt.
    pub lease_ms: u64,
}

impl PopPolicy {
    /// Redelivery from the message's own queue only, dead letters acknowledged before they
    /// are handed out: [`Group::pop`](super::Group::pop)'s behaviour.
    pub const IN_PLACE: PopPolicy =
        PopPolicy { in_place_deliveries: u32::MAX, dead_letter_pending: false, lease_ms: 0 };
}

impl Default for PopPolicy {
    fn default() -> Self {
        PopPolicy::IN_PLACE
    }
}

/// Who holds a popped, unacknowledged message (see [`Group::pop_with`](super::Group::pop_with)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopHolder {
    /// The consumer it was popped to.
    Consumer,
    /// The consumer it was popped to, who changed its invisible time since (an ordered
    /// repeat keeps the deadline it chose).
    ConsumerChanged,
    /// The caller of the pop that handed it out for revival or dead-lettering.
    Caller,
}

/// One popped, unacknowledged message of a queue, as a [`PopJournal`] is told it and as
/// [`Group::restore_pop`](super::Group::restore_pop) takes it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PopEntry {
    /// The pop time of its latest delivery (with its queue and offset, its receipt), ms.
    pub pop_time: u64,
    /// How long after `pop_time` it stays invisible, ms.
    pub invisible_ms: u64,
    /// Deliveries to the group so far.
    pub attempts: u32,
    /// Who holds it.
    pub holder: PopHolder,
}

impl PopEntry {
    /// When it becomes visible again (the pop that finds it expired redelivers or hands it
    /// over), ms since the Unix epoch.
    pub fn deadline(&self) -> u64 {
        self.pop_time.saturating_add(self.invisible_ms)
    }
}

/// What changed in one queue's POP state, as a [`PopJournal`] is told it.
#[derive(Debug, Clone, Copy)]
pub struct PopChange<'a> {
    /// The group.
    pub group: &'a str,
    /// The topic.
    pub topic: &'a str,
    /// The queue.
    pub queue: u32,
    /// The queue's pop position, when it moved (or was set by the queue's first pop): every
    /// offset below it is acknowledged by the group or in flight.
    pub position: Option<u64>,
    /// In-flight entries that changed, by offset: `Some` the entry now (popped, redelivered,
    /// handed over, its invisible time changed), `None` no longer in flight (acknowledged,
    /// dead-lettered, or gone from the queue).
    pub entries: &'a [(u64, Option<PopEntry>)],
}

/// Where an engine reports every change of its groups' POP state, so that it can be kept
/// over a restart ([`Engine::set_pop_journal`](super::Engine::set_pop_journal); the store
/// opened on a directory journals it, see `docs/restarts.md`).
///
/// # Protocol
///
/// [`record`](Self::record) is called with the queue's lock held, after the change and before
/// the pop, ack or change of invisible time returns: the changes of one queue reach the
/// journal in the order they were made, and a caller is answered only after its change was
/// recorded. [`ended`](Self::ended) is called when a subscription ends (unsubscribed, released
/// as idle, its topic deleted), with its membership lock held, after every queue of it was
/// settled (nothing of it is recorded afterwards) and before a new subscription of the same
/// group to the topic can be made (`Engine::subscribe` waits for that lock of an ended
/// predecessor). Neither may call back into the engine.
///
/// The state of a queue is its position `P` and its in-flight entries: an offset below `P`
/// that is not in flight is acknowledged. Replaying the last position and the last entry of
/// each offset recorded gives it back ([`Group::restore_pop`](super::Group::restore_pop)).
pub trait PopJournal: Send + Sync + std::fmt::Debug {
    /// One change of one queue's POP state.
    fn record(&self, change: &PopChange<'_>);
    /// The subscription of `group` to `topic` ended: its POP state is gone.
    fn ended(&self, group: &str, topic: &str);
}

/// What [`Group::restore_pop`](super::Group::restore_pop) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PopRestored {
    /// Entries put back in flight.
    pub inflight: usize,
    /// Offsets below the position acknowledged (neither in flight nor acknowledged before).
    pub acked: u64,
    /// Entries not put back, whose records a journal may delete: acknowledged already (below
    /// a commit), at or past the position, or no longer in the queue (a hole, or evicted).
    pub dropped: Vec<u64>,
}
