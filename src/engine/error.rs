//! The engine's typed errors.

use thiserror::Error;

/// Everything an engine operation can refuse. Misuse never panics and never touches another
/// group's accounting: it ends here.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A durable engine's segment files could not be read or written (a full tmpfs, a
    /// directory that cannot be opened); the operation was not made.
    #[error("message store: {0}")]
    Storage(String),
    /// No topic of that name exists.
    #[error("topic `{0}` does not exist")]
    UnknownTopic(String),
    /// A topic of that name already exists (with another queue count).
    #[error("topic `{topic}` already exists with {queues} queues")]
    TopicExists {
        /// The topic.
        topic: String,
        /// Its queue count.
        queues: u32,
    },
    /// The topic name is empty, too long or has characters outside `[%|a-zA-Z0-9_-]`.
    #[error("invalid topic name `{0}`: 1 to 127 characters from [%|a-zA-Z0-9_-] are allowed")]
    InvalidTopicName(String),
    /// The group name is empty or too long.
    #[error("invalid consumer group name `{0}`: 1 to 255 characters are allowed")]
    InvalidGroupName(String),
    /// A topic needs between 1 and [`MAX_QUEUES`](super::MAX_QUEUES) queues.
    #[error("invalid queue count {0}: a topic has 1 to {max} queues", max = super::MAX_QUEUES)]
    InvalidQueueCount(u32),
    /// The queue id is not one of the topic's queues.
    #[error("queue {queue} is out of range: topic `{topic}` has {queues} queues")]
    QueueOutOfRange {
        /// The topic.
        topic: String,
        /// The queue asked for.
        queue: u32,
        /// How many queues the topic has.
        queues: u32,
    },
    /// The group has no subscription to the topic.
    #[error("consumer group `{group}` is not subscribed to topic `{topic}`")]
    UnknownGroup {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
    },
    /// The group is already subscribed to the topic with another mode.
    #[error("consumer group `{group}` is already subscribed to topic `{topic}` in another mode")]
    GroupModeConflict {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
    },
    /// Subscribing would exceed the engine's cap on subscriptions per topic (`per_topic`) or in
    /// all ([`EngineConfig`](super::EngineConfig)'s `max_subscriptions_per_topic` and
    /// `max_subscriptions`). Nothing was subscribed.
    #[error(
        "consumer group `{group}` cannot subscribe to topic `{topic}`: {limit} subscriptions {}",
        if *per_topic { "on this topic is the limit" } else { "in the engine is the limit" }
    )]
    TooManySubscriptions {
        /// The group.
        group: String,
        /// The topic.
        topic: String,
        /// The limit reached.
        limit: usize,
        /// Whether the topic's limit was reached (else the engine's).
        per_topic: bool,
    },
    /// The message is larger than the engine's limit.
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    MessageTooLarge {
        /// The message's size.
        size: usize,
        /// The configured maximum.
        limit: usize,
    },
    /// The memory budget has no room for the message and the policy is `reject` (or `block`
    /// on a non-async send). Nothing was stored.
    #[error("memory budget exhausted: {used} of {budget} bytes in use, {needed} more needed")]
    BudgetExceeded {
        /// Bytes the message needs.
        needed: u64,
        /// Bytes in use.
        used: u64,
        /// The budget.
        budget: u64,
    },
    /// A per-message acknowledgement named an offset the group never received.
    #[error("offset {offset} of queue {queue} was never delivered to the group")]
    NotDelivered {
        /// The queue.
        queue: u32,
        /// The offset.
        offset: u64,
    },
    /// A commit below the group's committed offset: acknowledgements cannot be taken back.
    #[error("commit to offset {offset} of queue {queue} moves backward: committed is {committed}")]
    CommitBehind {
        /// The queue.
        queue: u32,
        /// The offset asked for.
        offset: u64,
        /// The group's committed offset.
        committed: u64,
    },
    /// A commit or read position past the queue's end.
    #[error("offset {offset} of queue {queue} is beyond the queue's end {end}")]
    OffsetBeyondEnd {
        /// The queue.
        queue: u32,
        /// The offset asked for.
        offset: u64,
        /// The next offset to be written.
        end: u64,
    },
    /// The consumer has left its group (or its group was unsubscribed, or the topic deleted).
    #[error("the consumer has left the group")]
    NotAMember,
    /// An engine configuration value is out of range.
    #[error("invalid engine configuration: {0}")]
    InvalidConfig(String),
    /// A batch append with no message.
    #[error("a batch needs at least one message")]
    EmptyBatch,
    /// The engine was shut down.
    #[error("the engine has been shut down")]
    Closed,
    /// A POP receipt that names no message in flight: acknowledged, redelivered (a newer pop
    /// took it), its invisible time changed (a newer receipt replaced it), or never popped.
    #[error("no message of queue {queue} at offset {offset} is in flight under this receipt")]
    StaleReceipt {
        /// The queue.
        queue: u32,
        /// The offset.
        offset: u64,
    },
}
