//! Offset headers: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
//! SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and
//! GET_EARLIEST_MSG_STORETIME (32).

ext_header! {
    /// A request naming one queue of a topic: the shape of GET_MIN_OFFSET and
    /// GET_EARLIEST_MSG_STORETIME.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct TopicQueueRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
    }
}

/// GET_MIN_OFFSET request.
pub type GetMinOffsetRequestHeader<'a> = TopicQueueRequestHeader<'a>;
/// GET_EARLIEST_MSG_STORETIME request.
pub type GetEarliestMsgStoretimeRequestHeader<'a> = TopicQueueRequestHeader<'a>;

ext_header! {
    /// A response carrying one `offset`: QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET
    /// and SEARCH_OFFSET_BY_TIMESTAMP.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct OffsetResponseHeader {
        /// `offset`.
        pub offset: i64 = "offset",
    }
}

/// QUERY_CONSUMER_OFFSET response.
pub type QueryConsumerOffsetResponseHeader = OffsetResponseHeader;
/// GET_MAX_OFFSET response.
pub type GetMaxOffsetResponseHeader = OffsetResponseHeader;
/// GET_MIN_OFFSET response.
pub type GetMinOffsetResponseHeader = OffsetResponseHeader;
/// SEARCH_OFFSET_BY_TIMESTAMP response.
pub type SearchOffsetResponseHeader = OffsetResponseHeader;

ext_header! {
    /// QUERY_CONSUMER_OFFSET request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct QueryConsumerOffsetRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
        /// `setZeroIfNotFound`: true when absent (the Rust client omits it).
        pub set_zero_if_not_found: bool = "setZeroIfNotFound" [default: true],
    }
}

ext_header! {
    /// UPDATE_CONSUMER_OFFSET request (usually one-way).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct UpdateConsumerOffsetRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
        /// `commitOffset`: the next offset the group will consume.
        pub commit_offset: i64 = "commitOffset",
    }
}

ext_header! {
    /// GET_MAX_OFFSET request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct GetMaxOffsetRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
        /// `committed` (5.x): true when absent.
        pub committed: bool = "committed" [default: true],
    }
}

ext_header! {
    /// SEARCH_OFFSET_BY_TIMESTAMP request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct SearchOffsetRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `queueId`.
        pub queue_id: i32 = "queueId",
        /// `timestamp`, milliseconds.
        pub timestamp: i64 = "timestamp",
        /// `boundaryType` (5.x: `LOWER` / `UPPER`).
        pub boundary_type: Option<&'a str> = "boundaryType",
    }
}

ext_header! {
    /// GET_EARLIEST_MSG_STORETIME response.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct GetEarliestMsgStoretimeResponseHeader {
        /// `timestamp`: store time of the oldest readable message, milliseconds.
        pub timestamp: i64 = "timestamp",
    }
}

#[cfg(test)]
mod tests;
