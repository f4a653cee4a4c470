//! Client membership, retry and admin-statistics headers: UNREGISTER_CLIENT (35),
//! GET_CONSUMER_LIST_BY_GROUP (38), NOTIFY_CONSUMER_IDS_CHANGED (40), CONSUMER_SEND_MSG_BACK
//! (36), GET_TOPIC_STATS_INFO (202) and GET_CONSUME_STATS (208).

ext_header! {
    /// UNREGISTER_CLIENT request: the client leaves a producer and/or consumer group.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct UnregisterClientRequestHeader<'a> {
        /// `clientID`.
        pub client_id: &'a str = "clientID",
        /// `producerGroup`.
        pub producer_group: Option<&'a str> = "producerGroup",
        /// `consumerGroup`.
        pub consumer_group: Option<&'a str> = "consumerGroup",
    }
}

ext_header! {
    /// A request naming one consumer group: GET_CONSUMER_LIST_BY_GROUP and
    /// NOTIFY_CONSUMER_IDS_CHANGED share this shape.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct GetConsumerListByGroupRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
    }
}

/// NOTIFY_CONSUMER_IDS_CHANGED request (broker → client, one-way).
pub type NotifyConsumerIdsChangedRequestHeader<'a> = GetConsumerListByGroupRequestHeader<'a>;

ext_header! {
    /// CONSUMER_SEND_MSG_BACK request: redeliver a consumed message later (or dead-letter it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct ConsumerSendMsgBackRequestHeader<'a> {
        /// `offset`: commit-log offset of the consumed message.
        pub offset: i64 = "offset",
        /// `group`: the consumer group.
        pub group: &'a str = "group",
        /// `delayLevel`: 0 lets the broker choose, negative sends straight to the DLQ.
        pub delay_level: i32 = "delayLevel",
        /// `originMsgId`: the client's msgId (UNIQ_KEY).
        pub origin_msg_id: Option<&'a str> = "originMsgId",
        /// `originTopic`.
        pub origin_topic: Option<&'a str> = "originTopic",
        /// `unitMode`; false when absent.
        pub unit_mode: bool = "unitMode" [default: false],
        /// `maxReconsumeTimes`; absent means the group's default.
        pub max_reconsume_times: Option<i32> = "maxReconsumeTimes",
    }
}

ext_header! {
    /// GET_TOPIC_STATS_INFO request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct GetTopicStatsInfoRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
    }
}

ext_header! {
    /// GET_CONSUME_STATS request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct GetConsumeStatsRequestHeader<'a> {
        /// `consumerGroup`.
        pub consumer_group: &'a str = "consumerGroup",
        /// `topic`: one topic, or all the group's topics when absent or empty.
        pub topic: Option<&'a str> = "topic" [nonempty],
    }
}

#[cfg(test)]
mod tests;
