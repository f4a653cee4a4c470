//! Name-server and topic-administration headers: GET_ROUTEINFO_BY_TOPIC (105), REGISTER_BROKER
//! (103), UNREGISTER_BROKER (104), UPDATE_AND_CREATE_TOPIC (17) and DELETE_TOPIC_IN_BROKER /
//! _IN_NAMESRV (215/216).

ext_header! {
    /// GET_ROUTEINFO_BY_TOPIC request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct GetRouteInfoRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `acceptStandardJsonOnly`; false when absent (baiji emits standard JSON regardless),
        /// written only when true.
        pub accept_standard_json_only: bool = "acceptStandardJsonOnly" [default: false, sparse],
    }
}

ext_header! {
    /// REGISTER_BROKER request (broker → name server); the body is a
    /// [`RegisterBrokerBody`](crate::remoting::body::RegisterBrokerBody).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct RegisterBrokerRequestHeader<'a> {
        /// `brokerName`.
        pub broker_name: &'a str = "brokerName",
        /// `brokerAddr`, `ip:port` clients dial.
        pub broker_addr: &'a str = "brokerAddr",
        /// `clusterName`.
        pub cluster_name: &'a str = "clusterName",
        /// `haServerAddr`, `ip:port` (unused by baiji but required).
        pub ha_server_addr: &'a str = "haServerAddr",
        /// `brokerId`: 0 for a master.
        pub broker_id: i64 = "brokerId",
        /// `heartbeatTimeoutMillis`.
        pub heartbeat_timeout_millis: Option<i64> = "heartbeatTimeoutMillis",
        /// `enableActingMaster`.
        pub enable_acting_master: Option<bool> = "enableActingMaster",
        /// `compressed`: the body is deflated (baiji never sends that).
        pub compressed: bool = "compressed" [default: false],
        /// `bodyCrc32`: CRC32 of the body `& 0x7FFFFFFF`, or 0 (also when absent) to skip the
        /// check.
        pub body_crc32: i32 = "bodyCrc32" [default: 0],
    }
}

ext_header! {
    /// REGISTER_BROKER response.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct RegisterBrokerResponseHeader {
        /// `haServerAddr` of the master.
        pub ha_server_addr: Option<String> = "haServerAddr",
        /// `masterAddr`.
        pub master_addr: Option<String> = "masterAddr",
    }
}

ext_header! {
    /// UNREGISTER_BROKER request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct UnregisterBrokerRequestHeader<'a> {
        /// `brokerName`.
        pub broker_name: &'a str = "brokerName",
        /// `brokerAddr`.
        pub broker_addr: &'a str = "brokerAddr",
        /// `clusterName`.
        pub cluster_name: &'a str = "clusterName",
        /// `brokerId`.
        pub broker_id: i64 = "brokerId",
    }
}

ext_header! {
    /// UPDATE_AND_CREATE_TOPIC request (`CreateTopicRequestHeader`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct CreateTopicRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
        /// `defaultTopic`.
        pub default_topic: Option<&'a str> = "defaultTopic",
        /// `readQueueNums`.
        pub read_queue_nums: i32 = "readQueueNums",
        /// `writeQueueNums`.
        pub write_queue_nums: i32 = "writeQueueNums",
        /// `perm`: PermName bits (READ 4, WRITE 2, INHERIT 1).
        pub perm: i32 = "perm",
        /// `topicFilterType`: `SINGLE_TAG` when absent or empty.
        pub topic_filter_type: &'a str = "topicFilterType" [default: "SINGLE_TAG"],
        /// `topicSysFlag`; 0 when absent.
        pub topic_sys_flag: i32 = "topicSysFlag" [default: 0],
        /// `order`; false when absent.
        pub order: bool = "order" [default: false],
        /// `attributes` (5.x, `+key=value,...`).
        pub attributes: Option<&'a str> = "attributes",
        /// `force` (5.x); false when absent.
        pub force: bool = "force" [default: false],
    }
}

impl<'a> CreateTopicRequestHeader<'a> {
    /// What a client's `createTopic` sends: `queues` read and write queues, read-write
    /// permission, single-tag filtering, `TBW102` as the template.
    pub fn read_write(topic: &'a str, queues: i32) -> Self {
        CreateTopicRequestHeader {
            topic,
            default_topic: Some("TBW102"),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: 6,
            topic_filter_type: "SINGLE_TAG",
            topic_sys_flag: 0,
            order: false,
            attributes: None,
            force: false,
        }
    }
}

ext_header! {
    /// DELETE_TOPIC_IN_BROKER / DELETE_TOPIC_IN_NAMESRV request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct DeleteTopicRequestHeader<'a> {
        /// `topic`.
        pub topic: &'a str = "topic",
    }
}

#[cfg(test)]
mod tests;
