//! Engine configuration.

use std::time::Duration;

use super::EngineError;

/// Most nodes one read, poll or pop of one queue looks at, filtered-out messages included
/// (or 16 per message asked for, if that is more): bounds the work a filter that rejects long
/// runs makes one call do, under a group's queue lock for polls and pops.
pub(crate) const SCAN_LIMIT: usize = 4096;

/// What an append does when the memory budget has no room (see `design.md`, "Memory budget").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryPolicy {
    /// Refuse the message with [`EngineError::BudgetExceeded`]; nothing accepted is lost.
    /// Each append adds its cost to the budget before it checks it (and takes it back when
    /// refused), so near the edge of the budget concurrent appends can refuse each other
    /// although one of them alone would have fit.
    #[default]
    Reject,
    /// Accept the message and evict the oldest messages (of the same queue first, then of the
    /// same topic, then of any topic), whether or not groups acknowledged them; every group
    /// that had not acknowledged an evicted message counts it in its `dropped` statistic.
    DropOldest,
    /// Async sends wait until the reaper frees room; blocking-free sends fail as with `Reject`.
    Block,
}

impl std::str::FromStr for MemoryPolicy {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self, EngineError> {
        match s {
            "reject" => Ok(MemoryPolicy::Reject),
            "drop-oldest" | "drop_oldest" => Ok(MemoryPolicy::DropOldest),
            "block" => Ok(MemoryPolicy::Block),
            other => Err(EngineError::InvalidConfig(format!(
                "unknown memory policy `{other}` (expected reject, drop-oldest or block)"
            ))),
        }
    }
}

/// How long messages nobody subscribed to are kept, so that a group subscribing "from the first
/// offset" shortly after the producer started still sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Age after which such a message may be reclaimed.
    pub time: Duration,
    /// Per queue, bytes of such messages above which the oldest are reclaimed.
    pub bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { time: Duration::from_secs(60), bytes: 64 * 1024 * 1024 }
    }
}

/// Budget use (per cent) above which acknowledged messages kept by
/// [`EngineConfig::keep_acknowledged`] are freed at once: keeping them must never be what
/// refuses or evicts a new message.
pub const KEEP_YIELDS_AT_PERCENT: u64 = 90;

/// Engine settings. `EngineConfig::default()` is a sane start: 1 GiB budget, `reject`, 4 MiB
/// messages, 60 s / 64 MiB retention, a reaper thread, at most 4,096 subscriptions per topic and
/// 65,536 in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Bytes of payload plus bookkeeping the engine may hold.
    pub memory_budget: u64,
    /// What happens when an append would exceed the budget.
    pub policy: MemoryPolicy,
    /// Largest payload accepted, in bytes.
    pub max_message_size: usize,
    /// Retention of messages on topics (or offsets) no group must see.
    pub retention: Retention,
    /// How long a message every group has acknowledged is kept before the reaper frees it
    /// (zero, the default: at once). Kept messages stay readable by offset, so a broadcasting
    /// member or a new group that starts from the first offset still gets them, as on a
    /// persistent broker. They count against the memory budget, are bounded per queue by
    /// `retention.bytes`, and are the first to go: while the budget is more than
    /// [`KEEP_YIELDS_AT_PERCENT`] % used, the reaper frees them as if nothing were kept.
    /// A topic can have its own ([`TopicHandle::set_keep_acknowledged`](super::TopicHandle::set_keep_acknowledged)).
    pub keep_acknowledged: Duration,
    /// Shortest pause between two reaper passes; the reaper backs off up to
    /// `reaper_max_interval` while there is nothing to reclaim.
    pub reaper_interval: Duration,
    /// Longest pause between two reaper passes.
    pub reaper_max_interval: Duration,
    /// Run the reaper on its own thread. Without it, call [`Engine::reap`](super::Engine::reap).
    pub reaper_thread: bool,
    /// How long a blocking receive spins before it parks the thread.
    pub spin: Duration,
    /// Most subscriptions one topic may have; one more is refused with
    /// [`EngineError::TooManySubscriptions`]. Every subscription holds every later message of
    /// the topic until it acknowledges it, and keeps per-queue state outside the budget.
    pub max_subscriptions_per_topic: usize,
    /// Most subscriptions the engine may have over all topics (refused the same way).
    pub max_subscriptions: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_budget: 1 << 30,
            policy: MemoryPolicy::Reject,
            max_message_size: 4 * 1024 * 1024,
            retention: Retention::default(),
            keep_acknowledged: Duration::ZERO,
            reaper_interval: Duration::from_millis(1),
            reaper_max_interval: Duration::from_millis(20),
            reaper_thread: true,
            spin: Duration::from_micros(50),
            max_subscriptions_per_topic: 4096,
            max_subscriptions: 65_536,
        }
    }
}

impl EngineConfig {
    pub(crate) fn validate(&self) -> Result<(), EngineError> {
        if self.memory_budget == 0 {
            return Err(EngineError::InvalidConfig("memory_budget must be positive".into()));
        }
        if self.max_message_size == 0 {
            return Err(EngineError::InvalidConfig("max_message_size must be positive".into()));
        }
        if self.max_subscriptions_per_topic == 0 || self.max_subscriptions == 0 {
            return Err(EngineError::InvalidConfig(
                "max_subscriptions_per_topic and max_subscriptions must be positive".into(),
            ));
        }
        if self.reaper_interval.is_zero() || self.reaper_max_interval < self.reaper_interval {
            return Err(EngineError::InvalidConfig(
                "reaper_interval must be positive and not above reaper_max_interval".into(),
            ));
        }
        Ok(())
    }
}
