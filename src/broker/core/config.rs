//! The core's section of the broker configuration (file and flag keys stay flat: see
//! [`BrokerConfig`](crate::broker::BrokerConfig)).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;

use crate::store::{EngineConfig, EngineError, MemoryPolicy, Retention};

/// The core's settings: the node's identity, topics, memory, retention, clients, transactions,
/// timers and POP retries (one section of [`BrokerConfig`](crate::broker::BrokerConfig),
/// whose file and flag keys stay flat).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct CoreConfig {
    /// Cluster name (RocketMQ: `brokerClusterName`).
    pub cluster_name: String,
    /// Broker name (RocketMQ: `brokerName`).
    pub broker_name: String,
    /// IP published to clients in routes and message ids (RocketMQ: `brokerIP1`); the listen
    /// address's IP when unset (or 127.0.0.1 if that is unspecified).
    pub broker_ip: Option<IpAddr>,
    /// External name servers, `host:port;host:port` (RocketMQ: `namesrvAddr`). When set, the
    /// broker registers with them instead of embedding one.
    pub namesrv_addr: Option<String>,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); `None` (the default)
    /// serves none (RocketMQ's `metricsExporterType` defaults to `DISABLE` too; its
    /// Prometheus exporter's port is 5557).
    pub metrics_listen: Option<SocketAddr>,
    /// Queues of a topic created from `TBW102` or by an admin without a count
    /// (RocketMQ: `defaultTopicQueueNums`).
    pub default_queues: u32,
    /// Create unknown topics on first send (RocketMQ: `autoCreateTopicEnable`).
    pub auto_create_topic: bool,
    /// Memory budget in bytes (payload plus bookkeeping).
    pub memory_budget: u64,
    /// `reject` (default) or `drop-oldest` (`block`, the in-process API's policy, is refused:
    /// the broker answers every send at once).
    pub memory_policy: String,
    /// Largest message body accepted, bytes (RocketMQ: `maxMessageSize`, 4 MiB).
    pub max_message_size: usize,
    /// How long messages no group holds are kept, seconds.
    pub retention_secs: u64,
    /// Per queue, bytes of messages no group holds that are kept.
    pub retention_bytes: u64,
    /// How long a dead-letter topic (`%DLQ%<group>`) keeps messages nobody consumes, seconds
    /// (RocketMQ keeps them on disk for `fileReservedTime`, 72 h); bounded per queue by
    /// `dlq_retention_bytes` and by the memory budget.
    pub dlq_retention_secs: u64,
    /// Per queue, bytes of unconsumed dead letters kept (the oldest go first).
    pub dlq_retention_bytes: u64,
    /// How long the trace topic (`RMQ_SYS_TRACE_TOPIC`, which no group consumes: the dashboard
    /// and mqadmin look traces up with `QUERY_MESSAGE`) keeps trace records, seconds (RocketMQ
    /// keeps them on disk for `fileReservedTime`, 72 h); bounded per queue by `retention_bytes`
    /// and by the memory budget.
    pub trace_retention_secs: u64,
    /// How long a topic keeps messages every group has acknowledged, seconds (0, the default:
    /// freed at once, as baiji always did). A persistent RocketMQ broker keeps them on disk for
    /// `fileReservedTime` (72 h), so a broadcasting member that starts late, or a new group
    /// reading from the first offset, still finds them; this gives the same for as long as
    /// asked. They count against the memory budget, at most `retention_bytes` per queue, and
    /// are freed first once the budget is 90 % used, so keeping them never refuses a send.
    /// Applies to every topic of the topic table (not to the internal ones: delay levels,
    /// timers, half messages).
    pub keep_acknowledged_secs: u64,
    /// Per topic, how long it keeps acknowledged messages, seconds, overriding
    /// `keep_acknowledged_secs` (TOML: a table `[keep-acknowledged-topics]` of `"Topic" = secs`).
    pub keep_acknowledged_topics: std::collections::BTreeMap<String, u64>,
    /// A client that has not sent a heartbeat for this long is dropped, seconds.
    pub client_expiry_secs: u64,
    /// A clustering group without members stops holding messages after this long, seconds
    /// (0: never).
    pub group_idle_secs: u64,
    /// Most connections served at once per listener (broker and name-server ports each); one
    /// more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A half (transactional) message not committed or rolled back for this long is checked
    /// with its producer, milliseconds (RocketMQ: `transactionTimeOut`, 6000); a message's
    /// `CHECK_IMMUNITY_TIME_IN_SECONDS` overrides it.
    pub transaction_time_out: u64,
    /// Milliseconds between passes of the transaction check (RocketMQ:
    /// `transactionCheckInterval`, 30000 in 5.x).
    pub transaction_check_interval: u64,
    /// Checks of one half message before it moves to `TRANS_CHECK_MAX_TIME_TOPIC` (RocketMQ:
    /// `transactionCheckMax`, 15).
    pub transaction_check_max: u32,
    /// Longest a timer message (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`) may
    /// wait, seconds (RocketMQ: `timerMaxDelaySec`, 3 days); further ahead is refused with
    /// `MESSAGE_ILLEGAL`.
    pub timer_max_delay_sec: u64,
    /// Redeliveries of a popped message after its invisible time expired before it goes to
    /// `%DLQ%<group>` (RocketMQ: the subscription group's `retryMaxTimes`, 16): a message is
    /// popped at most this many times plus one.
    pub pop_retry_max_times: u32,
    /// Most consumer groups one topic may have holding its messages (subscriptions); one more
    /// is refused (`SUBSCRIPTION_GROUP_NOT_EXIST` over remoting, `TOO_MANY_REQUESTS` over
    /// gRPC) until idle ones are released (`group_idle_secs`).
    pub max_groups_per_topic: usize,
    /// Most subscriptions (group × topic) the broker holds in all, refused the same way.
    pub max_subscriptions: usize,
    /// Where the broker keeps its state in memory-mapped files that outlive the process
    /// (RocketMQ: `storePathRootDir`; best a tmpfs directory such as `/dev/shm/baiji/<broker>`,
    /// RAM with no disk I/O). `None` or `none` (the default): nothing outlives the process.
    /// It keeps messages, topic and group configs, committed offsets, POP state, half
    /// messages and timers (README "Restarts"). One broker process per directory: a second is
    /// refused with the holder's pid.
    pub store_path_root_dir: Option<std::path::PathBuf>,
    /// This process's id in its broker set: one of the ids of `replica-peers` (RocketMQ
    /// DLedger: `dLegerSelfId`). Needs `replica-peers`.
    pub replica_id: Option<u64>,
    /// The replicated broker set this process is one of, `id=host:port;id=host:port;...`:
    /// each replica's id (1 or more) and the address of its replica port, where the set's Raft
    /// traffic goes (RocketMQ DLedger: `dLegerPeers`). Three replicas: a send is answered once
    /// two hold it, and the set keeps serving when any one is lost. `None` (the default): a
    /// single broker. README "Replicated broker sets".
    pub replica_peers: Option<String>,
    /// Set on a replica that joins a running broker set in place of the replica with this id
    /// (one that died, or a process that lost its state): it starts empty under its own new
    /// `replica-id`, asks the set's leader to take it in, is caught up from the log or an image
    /// of the set's state, and then replaces that replica as a voter.
    pub replica_replaces: Option<u64>,
    /// Raft entries between two snapshot marks of a broker set's replica; as many are kept
    /// behind the last mark for a follower that was briefly away (default 20,000).
    pub replica_snapshot_logs: u64,
    /// A secret every replica of the set is given: each connection to a replica port opens
    /// with a mutual HMAC-SHA1 challenge over fresh nonces, so a peer without it can neither
    /// vote, nor append, nor join. `None` (the default): the port takes any peer (bind it to a
    /// private network then).
    pub replica_secret: Option<String>,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            cluster_name: "DefaultCluster".into(),
            broker_name: "baiji-a".into(),
            broker_ip: None,
            namesrv_addr: None,
            metrics_listen: None,
            default_queues: 8,
            auto_create_topic: true,
            memory_budget: 1 << 30,
            memory_policy: "reject".into(),
            max_message_size: 4 * 1024 * 1024,
            retention_secs: 60,
            retention_bytes: 64 * 1024 * 1024,
            dlq_retention_secs: 72 * 3600,
            dlq_retention_bytes: 64 * 1024 * 1024,
            trace_retention_secs: 72 * 3600,
            keep_acknowledged_secs: 0,
            keep_acknowledged_topics: std::collections::BTreeMap::new(),
            client_expiry_secs: 120,
            group_idle_secs: 1800,
            max_connections: 10_000,
            transaction_time_out: 6_000,
            transaction_check_interval: 30_000,
            transaction_check_max: 15,
            timer_max_delay_sec: 259_200,
            pop_retry_max_times: 16,
            max_groups_per_topic: EngineConfig::default().max_subscriptions_per_topic,
            max_subscriptions: EngineConfig::default().max_subscriptions,
            store_path_root_dir: None,
            replica_id: None,
            replica_peers: None,
            replica_replaces: None,
            replica_snapshot_logs: 20_000,
            replica_secret: None,
        }
    }
}

/// The configuration name of a memory policy (`memory-policy`).
pub(crate) fn policy_name(p: MemoryPolicy) -> &'static str {
    match p {
        MemoryPolicy::Reject => "reject",
        MemoryPolicy::DropOldest => "drop-oldest",
        MemoryPolicy::Block => "block",
    }
}

/// Replicas a broker set has (R3): fewer cannot elect safely after a loss, more is not offered.
pub(crate) const REPLICAS: usize = 3;

/// A broker set as `replica-id` and `replica-peers` name it: this process's id, and every
/// replica's id with its replica port's address.
pub(crate) type ReplicaSet = (u64, std::collections::BTreeMap<u64, String>);

impl CoreConfig {
    /// The broker set this process is one of: its own id and every replica's id with the
    /// address of its replica port. `None` for a single broker.
    ///
    /// # Errors
    /// A message for `replica-peers` that is not `id=host:port` entries, a repeated id, a
    /// count other than [`REPLICAS`], or a `replica-id` that is missing or not among them.
    pub(crate) fn replica_set(&self) -> Result<Option<ReplicaSet>, String> {
        let Some(peers) = self.replica_peers.as_deref() else {
            return match self.replica_id {
                Some(_) => Err("replica-id needs replica-peers".into()),
                None => Ok(None),
            };
        };
        let mut set = std::collections::BTreeMap::new();
        for entry in peers.split([';', ',']).map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || format!("replica-peers: `{entry}` is not id=host:port (id 1 or more)");
            let (id, addr) = entry.split_once('=').ok_or_else(bad)?;
            let id: u64 = id.trim().trim_start_matches('n').parse().map_err(|_| bad())?;
            let addr = addr.trim();
            if id == 0 || addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).is_none() {
                return Err(bad());
            }
            if set.insert(id, addr.to_owned()).is_some() {
                return Err(format!("replica-peers: id {id} is named twice"));
            }
        }
        if set.len() != REPLICAS {
            return Err(format!(
                "replica-peers names {} replicas; a broker set has {REPLICAS} (two of them hold every acknowledged message)",
                set.len()
            ));
        }
        let id = self.replica_id.ok_or("replica-peers needs replica-id (this process's id)")?;
        if !set.contains_key(&id) {
            return Err(format!("replica-id {id} is not one of replica-peers' ids"));
        }
        if self.replica_replaces == Some(id) {
            return Err(format!("replica-replaces names this replica's own id {id}"));
        }
        Ok(Some((id, set)))
    }

    /// Bytes of each message segment file in the store directory: a 64th of the memory budget
    /// (16 MiB for the default 1 GiB), at least 1 MiB and room for the largest message, at
    /// most 64 MiB. The current segment's free tail and the spare one are held (and counted)
    /// ahead of need, so this is what the directory costs an idle broker, twice.
    pub fn segment_size(&self) -> usize {
        let largest = self.max_message_size.saturating_add(64 * 1024 + 48);
        let floor = largest.max(1 << 20).next_multiple_of(4096);
        let share = usize::try_from(self.memory_budget / 64).unwrap_or(usize::MAX);
        share.clamp(floor, (64 << 20).max(floor)).next_multiple_of(4096)
    }

    /// The store directory, `None` when unset or `none`.
    pub fn store_dir(&self) -> Option<&std::path::Path> {
        self.store_path_root_dir.as_deref().filter(|p| p.as_os_str() != "none")
    }

    /// The address clients are told to connect to, for a port bound at `bound`.
    pub fn advertised(&self, bound: SocketAddr) -> SocketAddr {
        let ip = self.broker_ip.unwrap_or(if bound.ip().is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            bound.ip()
        });
        SocketAddr::new(ip, bound.port())
    }

    /// The external name servers, parsed.
    ///
    /// # Errors
    /// The reason, for an entry that is not `host:port`.
    pub fn namesrv_addrs(&self) -> Result<Vec<String>, String> {
        let Some(list) = &self.namesrv_addr else { return Ok(Vec::new()) };
        let addrs: Vec<String> =
            list.split(';').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
        for a in &addrs {
            let ok =
                a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(format!("namesrv-addr entry `{a}` is not host:port"));
            }
        }
        if addrs.is_empty() {
            return Err("namesrv-addr is empty".into());
        }
        Ok(addrs)
    }

    /// The memory policy `memory-policy` names, if the broker serves it.
    ///
    /// # Errors
    /// The reason, for an unknown policy or `block`.
    pub(crate) fn memory_policy(&self) -> Result<MemoryPolicy, String> {
        let policy: MemoryPolicy =
            self.memory_policy.parse().map_err(|e: EngineError| e.to_string())?;
        if policy == MemoryPolicy::Block {
            // Every broker append is synchronous, so `block` would behave exactly like
            // `reject` (review 3.4): refuse it rather than let it pretend to wait.
            return Err(
                "memory-policy block is the in-process API's policy (an async send waits for \
                 room); the broker answers every send at once: use reject (clients get \
                 SYSTEM_BUSY and retry) or drop-oldest"
                    .into(),
            );
        }
        Ok(policy)
    }

    /// The engine configuration these settings imply, under `policy`.
    ///
    /// # Errors
    /// The reason, for a queue count out of range.
    pub(crate) fn engine_config(&self, policy: MemoryPolicy) -> Result<EngineConfig, String> {
        if self.default_queues == 0 || self.default_queues > crate::store::MAX_QUEUES {
            return Err(format!(
                "default-queues must be between 1 and {}",
                crate::store::MAX_QUEUES
            ));
        }
        Ok(EngineConfig {
            memory_budget: self.memory_budget,
            policy,
            // The engine counts the whole stored record; leave room for headers and properties.
            max_message_size: self.max_message_size.saturating_add(64 * 1024),
            retention: Retention {
                time: Duration::from_secs(self.retention_secs),
                bytes: self.retention_bytes,
            },
            max_subscriptions_per_topic: self.max_groups_per_topic.max(1),
            max_subscriptions: self.max_subscriptions.max(1),
            ..EngineConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::CoreConfig;

    fn set(id: Option<u64>, peers: Option<&str>) -> Result<Option<(u64, Vec<u64>)>, String> {
        let c = CoreConfig {
            replica_id: id,
            replica_peers: peers.map(str::to_owned),
            ..CoreConfig::default()
        };
        c.replica_set().map(|o| o.map(|(id, m)| (id, m.keys().copied().collect())))
    }

    #[test]
    fn given_replica_peers_when_parsing_should_take_three_ids_and_refuse_the_rest_with_a_reason() {
        assert_eq!(set(None, None), Ok(None), "a single broker");
        let three = "1=127.0.0.1:40911;2=127.0.0.1:40912;n3=127.0.0.1:40913";
        assert_eq!(set(Some(2), Some(three)), Ok(Some((2, vec![1, 2, 3]))));
        let e = |id, peers| set(id, peers).expect_err("refused");
        assert!(e(Some(4), Some(three)).contains("not one of"));
        assert!(e(None, Some(three)).contains("needs replica-id"));
        assert!(e(Some(1), None).contains("needs replica-peers"));
        assert!(e(Some(1), Some("1=a:1;2=b:2")).contains("has 3"));
        assert!(e(Some(1), Some("1=a:1;1=b:2;3=c:3")).contains("twice"));
        assert!(e(Some(1), Some("1=a:1;0=b:2;3=c:3")).contains("id=host:port"));
        assert!(e(Some(1), Some("1=a:1;2=b;3=c:3")).contains("id=host:port"));
    }
}
