//! Request and response codes.
//!
//! Plain `i32` constants rather than enums: a code arriving from a peer may be one baiji does not
//! know, and the broker must still answer it with `REQUEST_CODE_NOT_SUPPORTED` and the request's
//! opaque. The broker builds its one `code → processor` table from [`request_code`]; each module's
//! `ALL` lists every code with its RocketMQ name, which gives log-friendly names ([`request_code::name`])
//! and lets a test prove the table has no duplicates.
//!
//! Values are those of Apache RocketMQ's `RequestCode` / `ResponseCode`.

macro_rules! codes {
    ($($(#[doc = $doc:literal])+ $name:ident = $value:expr;)+) => {
        $( $(#[doc = $doc])+ pub const $name: i32 = $value; )+

        /// Every code of this family with its RocketMQ name, in declaration order.
        pub const ALL: &[(i32, &str)] = &[$(($value, stringify!($name))),+];

        /// RocketMQ name of `code`, for logs; `None` for a code this table does not know.
        #[must_use]
        pub fn name(code: i32) -> Option<&'static str> {
            ALL.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
        }
    };
}

/// Request codes (the `code` of a command whose flag lacks the response bit).
pub mod request_code {
    codes! {
        /// Send one message, V1 header (long field names); the Rust client's default.
        SEND_MESSAGE = 10;
        /// Pull messages from one queue (push and pull consumers), with long polling.
        PULL_MESSAGE = 11;
        /// Query messages by key or unique key.
        QUERY_MESSAGE = 12;
        /// Query a broker offset (admin).
        QUERY_BROKER_OFFSET = 13;
        /// Read a consumer group's committed offset of one queue.
        QUERY_CONSUMER_OFFSET = 14;
        /// Commit a consumer group's offset of one queue, usually one-way.
        UPDATE_CONSUMER_OFFSET = 15;
        /// Create or update one topic (admin).
        UPDATE_AND_CREATE_TOPIC = 17;
        /// Create or update several topics (admin).
        UPDATE_AND_CREATE_TOPIC_LIST = 18;
        /// Dump all topic configs (admin).
        GET_ALL_TOPIC_CONFIG = 21;
        /// Change broker settings (admin): a properties body.
        UPDATE_BROKER_CONFIG = 25;
        /// Read the broker configuration (admin).
        GET_BROKER_CONFIG = 26;
        /// Read broker runtime statistics (admin).
        GET_BROKER_RUNTIME_INFO = 28;
        /// First offset whose store time is at or after a timestamp (CONSUME_FROM_TIMESTAMP).
        SEARCH_OFFSET_BY_TIMESTAMP = 29;
        /// Next offset to be written in a queue (CONSUME_FROM_LAST_OFFSET on first boot).
        GET_MAX_OFFSET = 30;
        /// Smallest offset still readable in a queue.
        GET_MIN_OFFSET = 31;
        /// Store time of the oldest readable message of a queue.
        GET_EARLIEST_MSG_STORETIME = 32;
        /// Read one message by commit-log offset (decoded from an offset msgId).
        VIEW_MESSAGE_BY_ID = 33;
        /// Client heartbeat: producer and consumer groups and subscriptions.
        HEART_BEAT = 34;
        /// Client leaves a producer and/or consumer group.
        UNREGISTER_CLIENT = 35;
        /// Send a consumed message back for retry (or to the dead-letter queue).
        CONSUMER_SEND_MSG_BACK = 36;
        /// Commit or roll back a transactional (half) message (one-way).
        END_TRANSACTION = 37;
        /// Client ids of a consumer group, for client-side rebalance.
        GET_CONSUMER_LIST_BY_GROUP = 38;
        /// Broker asks a producer for a transaction's state (broker → client).
        CHECK_TRANSACTION_STATE = 39;
        /// Broker tells a group's members to rebalance (broker → client, one-way).
        NOTIFY_CONSUMER_IDS_CHANGED = 40;
        /// Lock queues for orderly consumption.
        LOCK_BATCH_MQ = 41;
        /// Release queue locks.
        UNLOCK_BATCH_MQ = 42;
        /// Dump all consumer offsets (admin).
        GET_ALL_CONSUMER_OFFSET = 43;
        /// Check that the broker can evaluate a subscription expression (non-TAG only).
        CHECK_CLIENT_CONFIG = 46;
        /// Store a key/value in the name server.
        PUT_KV_CONFIG = 100;
        /// Read a key/value from the name server.
        GET_KV_CONFIG = 101;
        /// Delete a key/value from the name server.
        DELETE_KV_CONFIG = 102;
        /// Broker registers its topics with a name server.
        REGISTER_BROKER = 103;
        /// Broker leaves a name server.
        UNREGISTER_BROKER = 104;
        /// Route data of one topic (name server).
        GET_ROUTEINFO_BY_TOPIC = 105;
        /// Brokers and clusters known to a name server.
        GET_BROKER_CLUSTER_INFO = 106;
        /// Create or update a subscription group (admin).
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200;
        /// Every subscription group's config (admin).
        GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201;
        /// Per-queue min/max offsets of a topic (admin).
        GET_TOPIC_STATS_INFO = 202;
        /// Connections of a consumer group (admin).
        GET_CONSUMER_CONNECTION_LIST = 203;
        /// Connections of a producer group (admin).
        GET_PRODUCER_CONNECTION_LIST = 204;
        /// Remove a broker's write permission in the name server.
        WIPE_WRITE_PERM_OF_BROKER = 205;
        /// All topic names known to the name server.
        GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206;
        /// Delete a subscription group (admin).
        DELETE_SUBSCRIPTIONGROUP = 207;
        /// Consumer progress of a group (admin).
        GET_CONSUME_STATS = 208;
        /// Delete a topic from a broker (admin).
        DELETE_TOPIC_IN_BROKER = 215;
        /// Delete a topic from the name server (admin).
        DELETE_TOPIC_IN_NAMESRV = 216;
        /// A broker adds one topic's queues to its routes (rocketmq-rust brokers' default
        /// instead of an incremental REGISTER_BROKER).
        REGISTER_TOPIC_IN_NAMESRV = 217;
        /// Broker asks a client to reset its offsets (broker → client).
        RESET_CONSUMER_CLIENT_OFFSET = 220;
        /// Broker asks a client for its consumer status (broker → client).
        GET_CONSUMER_STATUS_FROM_CLIENT = 221;
        /// Admin asks a broker to reset a group's offsets to a time (admin).
        INVOKE_BROKER_TO_RESET_OFFSET = 222;
        /// Topics of a cluster (name server).
        GET_TOPICS_BY_CLUSTER = 224;
        /// Create or update several subscription groups (admin; `mqadmin updateSubGroupList`).
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST = 225;
        /// Consumer groups of a topic (admin).
        QUERY_TOPIC_CONSUME_BY_WHO = 300;
        /// Per queue, the time span of a topic's retained messages and a group's progress.
        QUERY_CONSUME_TIME_SPAN = 303;
        /// The clusters and brokers a name server knows, which RocketMQ counts as system topics.
        GET_SYSTEM_TOPIC_LIST_FROM_NS = 304;
        /// A broker's system topics.
        GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305;
        /// Broker asks a client for its consumer running info (broker → client).
        GET_CONSUMER_RUNNING_INFO = 307;
        /// Broker asks a client to consume one message directly (broker → client).
        CONSUME_MESSAGE_DIRECTLY = 309;
        /// Send one message, V2 header (short field names `a`..`n`).
        SEND_MESSAGE_V2 = 310;
        /// One stats item's minute, hour and day figures (admin; the dashboard's collector).
        VIEW_BROKER_STATS_DATA = 315;
        /// Every group's consume stats on this broker (admin `brokerConsumeStats`).
        GET_BROKER_CONSUME_STATS = 317;
        /// Send a batch of messages (V2 header, batch body).
        SEND_BATCH_MESSAGE = 320;
        /// Broker asks the name server for its data version before re-registering.
        QUERY_DATA_VERSION = 322;
        /// Send a reply message of request/reply, V1 header.
        SEND_REPLY_MESSAGE = 324;
        /// Send a reply message of request/reply, V2 header.
        SEND_REPLY_MESSAGE_V2 = 325;
        /// Broker pushes a reply to the requesting client (broker → client).
        PUSH_REPLY_MESSAGE_TO_CLIENT = 326;
        /// Give a broker's write permission back in the name server.
        ADD_WRITE_PERM_OF_BROKER = 327;
        /// Every producer group's clients (admin `producer`).
        GET_ALL_PRODUCER_INFO = 328;
        /// Read one topic's config.
        GET_TOPIC_CONFIG = 351;
        /// Read one subscription group's config (admin).
        GET_SUBSCRIPTIONGROUP_CONFIG = 352;
        /// Pull for the lite pull consumer (same semantics as `PULL_MESSAGE`).
        LITE_PULL_MESSAGE = 361;
        /// Recall a timer message before it is due, by the handle its send answer carried
        /// (RocketMQ 5.3.2).
        RECALL_MESSAGE = 370;
        /// Server-side queue assignment (only with client rebalance disabled).
        QUERY_ASSIGNMENT = 400;
        /// Switch a group between pull and pop mode.
        SET_MESSAGE_REQUEST_MODE = 401;
        /// Every group's request mode (what `SET_MESSAGE_REQUEST_MODE` stored).
        GET_ALL_MESSAGE_REQUEST_MODE = 402;
        /// Broker heartbeat to the name server (5.x).
        BROKER_HEARTBEAT = 904;
        /// Delete several topics (admin; RocketMQ's batch `DELETE_TOPIC_IN_BROKER`, what
        /// rocketmq-admin-cli's `deleteTopic` sends), body `{"topicList":[…]}`.
        DELETE_TOPIC_IN_BROKER_LIST = 5002;
        /// Delete several subscription groups (admin; rocketmq-rust's `deleteSubGroup`), body
        /// `{"groupNameList":[…],"cleanOffset":…}`.
        DELETE_SUBSCRIPTIONGROUP_LIST = 5003;
        /// POP consumption: pop messages of one queue or all (-1) (5.x `RequestCode`; RocketMQ
        /// 5.0's short codes 3442-3447 and 3543 were replaced by these).
        POP_MESSAGE = 200050;
        /// POP consumption: acknowledge one popped message by its `extraInfo`.
        ACK_MESSAGE = 200051;
        /// POP consumption: peek without popping (answered `REQUEST_CODE_NOT_SUPPORTED`).
        PEEK_MESSAGE = 200052;
        /// POP consumption: change a popped message's invisible time.
        CHANGE_MESSAGE_INVISIBLETIME = 200053;
        /// POP consumption: ask whether messages are available (answered
        /// `REQUEST_CODE_NOT_SUPPORTED`).
        NOTIFICATION = 200054;
        /// POP consumption: count of parked pops (answered `REQUEST_CODE_NOT_SUPPORTED`).
        POLLING_INFO = 200055;
        /// POP consumption: acknowledge many popped messages (JSON body, bitsets).
        BATCH_ACK_MESSAGE = 200151;
    }
}

/// Response codes (the `code` of a command with the response bit set).
pub mod response_code {
    codes! {
        /// Success.
        SUCCESS = 0;
        /// Generic failure (bad topic name, bad queue id, exception while processing).
        SYSTEM_ERROR = 1;
        /// Flow control; producers retry on another broker.
        SYSTEM_BUSY = 2;
        /// Unknown request code; the connection stays open.
        REQUEST_CODE_NOT_SUPPORTED = 3;
        /// Transaction failed.
        TRANSACTION_FAILED = 4;
        /// Send stored but flush timed out (clients treat it as sent).
        FLUSH_DISK_TIMEOUT = 10;
        /// Send stored but no slave available (clients treat it as sent).
        SLAVE_NOT_AVAILABLE = 11;
        /// Send stored but slave flush timed out (clients treat it as sent).
        FLUSH_SLAVE_TIMEOUT = 12;
        /// Message rejected: body or properties too large, batch to a retry topic, topic too long.
        MESSAGE_ILLEGAL = 13;
        /// Store not writable.
        SERVICE_NOT_AVAILABLE = 14;
        /// Request version not supported.
        VERSION_NOT_SUPPORTED = 15;
        /// Broker or topic not writable/readable, or a forbidden topic.
        NO_PERMISSION = 16;
        /// Topic unknown (no route in the name server, or not created on the broker).
        TOPIC_NOT_EXIST = 17;
        /// Topic already exists.
        TOPIC_EXIST_ALREADY = 18;
        /// Pull found no new message (client status NO_NEW_MSG).
        PULL_NOT_FOUND = 19;
        /// Pull scanned messages but none matched the filter (NO_MATCHED_MSG).
        PULL_RETRY_IMMEDIATELY = 20;
        /// Pull offset illegal (OFFSET_ILLEGAL); `nextBeginOffset` says where to go.
        PULL_OFFSET_MOVED = 21;
        /// No committed offset, or no message for a query.
        QUERY_NOT_FOUND = 22;
        /// Subscription expression does not parse.
        SUBSCRIPTION_PARSE_FAILED = 23;
        /// No heartbeat subscription for the group and topic.
        SUBSCRIPTION_NOT_EXIST = 24;
        /// The broker's subscription is older than the pull's `subVersion`.
        SUBSCRIPTION_NOT_LATEST = 25;
        /// Subscription group unknown and not auto-created.
        SUBSCRIPTION_GROUP_NOT_EXIST = 26;
        /// SQL92 filter data missing.
        FILTER_DATA_NOT_EXIST = 27;
        /// SQL92 filter data outdated.
        FILTER_DATA_NOT_LATEST = 28;
        /// Invalid request parameter.
        INVALID_PARAMETER = 29;
        /// Transaction check answer: commit.
        TRANSACTION_SHOULD_COMMIT = 200;
        /// Transaction check answer: roll back.
        TRANSACTION_SHOULD_ROLLBACK = 201;
        /// Transaction check answer: unknown (sic, Java's spelling).
        TRANSACTION_STATE_UNKNOW = 202;
        /// Transaction check answer: wrong group.
        TRANSACTION_STATE_GROUP_WRONG = 203;
        /// Missing buyer id (unit mode; in the producers' retry set).
        NO_BUYER_ID = 204;
        /// Not in the current unit (unit mode; in the producers' retry set).
        NOT_IN_CURRENT_UNIT = 205;
        /// Consumer not online.
        CONSUMER_NOT_ONLINE = 206;
        /// Direct consumption timed out.
        CONSUME_MSG_TIMEOUT = 207;
        /// No message (pop).
        NO_MESSAGE = 208;
        /// Too many pending pop requests.
        POLLING_FULL = 209;
        /// Pop long polling timed out.
        POLLING_TIMEOUT = 210;
        /// Broker does not exist.
        BROKER_NOT_EXIST = 211;
        /// Broker dispatch not complete.
        BROKER_DISPATCH_NOT_COMPLETE = 212;
        /// Group consumes in broadcasting mode.
        BROADCAST_CONSUMPTION = 213;
        /// Flow control (clients retry a pull after 20 ms).
        FLOW_CONTROL = 215;
        /// Not the leader for the queue.
        NOT_LEADER_FOR_QUEUE = 501;
        /// Illegal operation.
        ILLEGAL_OPERATION = 604;
        /// Client-side only: unknown RPC failure.
        RPC_UNKNOWN = -1000;
        /// Client-side only: no address.
        RPC_ADDR_IS_NULL = -1002;
        /// Client-side only: write to channel failed.
        RPC_SEND_TO_CHANNEL_FAILED = -1004;
        /// Client-side only: RPC timed out.
        RPC_TIME_OUT = -1006;
        /// Server is shutting down; reconnect elsewhere.
        GO_AWAY = 1500;
        /// Controller: fenced master epoch.
        CONTROLLER_FENCED_MASTER_EPOCH = 2000;
        /// Controller: fenced sync-state-set epoch.
        CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001;
        /// Controller: invalid master.
        CONTROLLER_INVALID_MASTER = 2002;
        /// Controller: invalid replicas.
        CONTROLLER_INVALID_REPLICAS = 2003;
        /// Controller: master not available.
        CONTROLLER_MASTER_NOT_AVAILABLE = 2004;
        /// Controller: invalid request.
        CONTROLLER_INVALID_REQUEST = 2005;
        /// Controller: broker not alive.
        CONTROLLER_BROKER_NOT_ALIVE = 2006;
        /// Controller: not the leader.
        CONTROLLER_NOT_LEADER = 2007;
        /// Controller: broker metadata missing.
        CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008;
        /// Controller: invalid clean of broker metadata.
        CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009;
        /// Controller: broker must register first.
        CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010;
        /// Controller: master still exists.
        CONTROLLER_MASTER_STILL_EXIST = 2011;
        /// Controller: master election failed.
        CONTROLLER_ELECT_MASTER_FAILED = 2012;
        /// Controller: altering the sync-state set failed.
        CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013;
        /// Controller: invalid broker id.
        CONTROLLER_BROKER_ID_INVALID = 2014;
        /// Controller: JRaft internal error.
        CONTROLLER_JRAFT_INTERNAL_ERROR = 2015;
        /// Controller: broker live info missing.
        CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016;
        /// ACL 2.0: user does not exist.
        USER_NOT_EXIST = 3001;
        /// ACL 2.0: policy does not exist.
        POLICY_NOT_EXIST = 3002;
    }
}

#[cfg(test)]
mod tests;
