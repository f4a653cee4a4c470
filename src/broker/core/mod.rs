//! The broker's core: its state and rules, with no protocol in it.
//!
//! Topics, consumer groups and their clients, orderly locks, sends, pops, transactions, timers,
//! delay levels, retries and dead letters, the name server's routes and the counters live
//! here, in one [`Core`]. Both faces stand on it (the remoting face in
//! [`broker::remoting`](crate::broker::remoting), the gRPC face in `broker::grpc`), each with
//! its own state; the core names neither. It answers in its own error enums
//! ([`send::SendError`], [`pop::PopError`], …), which each face maps to its own codes, and it
//! reaches back to the faces only through the traits they register: [`ProducerCheck`]
//! (transaction checks), [`ClientNotify`] (membership changes of a group's connections) and
//! [`ConsumerRelay`] (admin tools' calls to a consumer of the other face).
//!
//! # One door for state changes
//!
//! Every change of the broker's state goes through a `Core` method or one of its services:
//! sends ([`send`]), topic creation and deletion ([`Core::create_topic`],
//! [`Core::delete_topic`]), commits, pops, acks and invisible-time changes ([`pop`], the
//! store's group handle), transaction decisions ([`transaction`]), timer and delay releases
//! ([`timer`], [`delay`]), heartbeats and departures ([`clients`]). That is the one place a later
//! journal or replication hooks into.
//!
//! [`ProducerCheck`]: transaction::ProducerCheck
//! [`ClientNotify`]: clients::ClientNotify
//! [`ConsumerRelay`]: clients::ConsumerRelay

pub(crate) mod clients;
pub(crate) mod config;
pub(crate) mod counters;
pub(crate) mod delay;
pub(crate) mod filter;
pub(crate) mod groups;
pub(crate) mod journal;
pub(crate) mod locks;
pub(crate) mod pop;
pub(crate) mod rates;
pub(crate) mod recall;
pub(crate) mod record;
#[cfg(feature = "replicas")]
pub(crate) mod replica;
pub(crate) mod retry;
pub(crate) mod routes;
pub(crate) mod send;
pub(crate) mod timer;
pub(crate) mod topics;
pub(crate) mod transaction;
pub(crate) mod wait;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use tokio::sync::watch;

use self::config::CoreConfig;
use crate::remoting::body::TopicConfig;
use crate::remoting::msgid::UniqKeyGenerator;
use crate::store::{Retention, Store, StoreError, TopicStore};
use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};

/// The broker's state, shared by both faces and the core's own tasks.
pub(crate) struct Core {
    pub(crate) config: CoreConfig,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) topics: topics::TopicTable,
    pub(crate) clients: clients::ClientRegistry,
    pub(crate) locks: locks::LockManager,
    pub(crate) scheduler: delay::Scheduler,
    pub(crate) transactions: transaction::Transactions,
    pub(crate) timers: timer::Timers,
    /// The name server's table: the embedded one's routes (both faces route from it), or a
    /// standalone name server's.
    pub(crate) routes: routes::RouteTable,
    /// The address clients reach this broker's remoting port at (routes, message ids).
    pub(crate) store_host: SocketAddr,
    /// The address clients reach this broker's gRPC port at (`None`: no gRPC port); reported
    /// to peers as `grpcServerPort` in GET_BROKER_CONFIG, from which baiji brokers of one
    /// cluster learn each other's gRPC endpoints for `QueryRoute`.
    pub(crate) grpc_endpoint: Option<SocketAddr>,
    pub(crate) counters: counters::Counters,
    /// Sampled message rates (admin codes).
    pub(crate) rates: rates::Rates,
    /// Subscription-group configs admins created.
    pub(crate) groups: groups::SubscriptionGroups,
    /// When the broker started, ms since the Unix epoch.
    pub(crate) boot_ms: u64,
    uniq: Mutex<UniqKeyGenerator>,
    /// `CLUSTER` property appended to every message read out.
    pub(crate) cluster_property: Vec<u8>,
    /// Tells the registrar that topics changed.
    pub(crate) topics_changed: watch::Sender<u64>,
    /// Bumped when a popped message may have become visible again without an append (a change
    /// of invisible time, an ack that unblocks an ordered queue): parked pops look again.
    pub(crate) pop_changes: watch::Sender<u64>,
    /// Most topics the broker holds before it refuses to auto-create one
    /// ([`send::AUTO_CREATE_TOPIC_LIMIT`]; lower in tests).
    pub(crate) auto_create_limit: usize,
    /// Where topic and group configs are journaled (`store-path-root-dir`), if anywhere.
    pub(crate) journal: Option<journal::ConfigJournal>,
    /// What the store found in `store-path-root-dir` at start (metrics, runtime info).
    pub(crate) recovery: Option<crate::store::EngineRecovery>,
    /// The broker id this broker registers with: 0 for a single broker and a broker set's
    /// leader, the replica id for a follower ([`replica`]).
    broker_id: AtomicU64,
    /// This process's replica of its broker set (`replica-peers`), once started.
    #[cfg(feature = "replicas")]
    pub(crate) replica: std::sync::OnceLock<Arc<replica::Replica>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("store_host", &self.store_host).finish_non_exhaustive()
    }
}

/// Why a topic cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// It does not exist (or is not routed: the internal topics are not).
    Unknown,
    /// Its permission forbids reading.
    Forbidden,
}

/// The remark for `what` (e.g. "POP consumption is") refused on a broker set.
pub(crate) fn not_replicated_remark(what: &str) -> String {
    format!("{what} not replicated by baiji's broker sets yet (README \"Replicated broker sets\")")
}

/// A process-unique value for message-id generation (no `rand` dependency needed).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::time::now_ms());
    h.finish() as u32
}

impl Core {
    /// The core of a broker over `store`, whose clients reach it at `store_host`.
    pub(crate) fn new(config: CoreConfig, store: Arc<dyn Store>, store_host: SocketAddr) -> Self {
        let ip = match store_host.ip() {
            std::net::IpAddr::V4(ip) => ip,
            std::net::IpAddr::V6(_) => std::net::Ipv4Addr::LOCALHOST,
        };
        let uniq =
            UniqKeyGenerator::new(ip, std::process::id(), rand_u32(), crate::time::now_ms() as i64);
        let mut cluster_property = Vec::new();
        let _ = crate::remoting::properties::write_pair(
            &mut cluster_property,
            crate::remoting::properties::CLUSTER,
            &config.cluster_name,
        );
        Core {
            topics: topics::TopicTable::new(config.default_queues, config.auto_create_topic),
            clients: clients::ClientRegistry::default(),
            locks: locks::LockManager::default(),
            scheduler: delay::Scheduler::default(),
            transactions: transaction::Transactions::new(store.journal()),
            timers: timer::Timers::new(store.journal()),
            routes: routes::RouteTable::default(),
            grpc_endpoint: None,
            store_host,
            counters: counters::Counters::default(),
            rates: rates::Rates::default(),
            groups: groups::SubscriptionGroups::default(),
            boot_ms: crate::time::now_ms(),
            uniq: Mutex::new(uniq),
            cluster_property,
            topics_changed: watch::channel(0).0,
            pop_changes: watch::channel(0).0,
            config,
            store,
            auto_create_limit: send::AUTO_CREATE_TOPIC_LIMIT,
            journal: None,
            recovery: None,
            broker_id: AtomicU64::new(0),
            #[cfg(feature = "replicas")]
            replica: std::sync::OnceLock::new(),
        }
    }

    /// The broker id this broker registers with (0: it takes sends).
    pub(crate) fn broker_id(&self) -> u64 {
        // Relaxed: a value read whole; a registration that races a change is followed by the
        // one the change triggers.
        self.broker_id.load(Ordering::Relaxed)
    }

    /// Sets the broker id and, if it changed, registers again at once.
    #[cfg_attr(not(feature = "replicas"), allow(dead_code))]
    pub(crate) fn set_broker_id(&self, id: u64) {
        // Relaxed: see `broker_id`; the registrar is woken after the store.
        if self.broker_id.swap(id, Ordering::Relaxed) != id {
            self.topics_changed.send_modify(|v| *v += 1);
        }
    }

    /// Commits a consumer group's offset: at once on a single broker; on a replica of a broker
    /// set, through the set in the background (a failure is logged: the consumer commits again
    /// with its next pull or its next persist, as it does after any lost commit).
    ///
    /// # Errors
    /// The store's refusal (a single broker).
    pub(crate) fn commit_offset(
        &self,
        group: &str,
        topic: &str,
        queue: u32,
        offset: u64,
    ) -> Result<(), StoreError> {
        #[cfg(feature = "replicas")]
        if let Some(replica) = self.replica() {
            let (replica, group, topic) = (Arc::clone(replica), group.to_owned(), topic.to_owned());
            tokio::spawn(async move {
                if let Err(e) = replica.commit(&group, &topic, queue, offset).await {
                    tracing::debug!(%group, %topic, queue, offset, "commit not replicated: {e}");
                }
            });
            return Ok(());
        }
        self.store.commit(group, topic, queue, offset)
    }

    /// Refuses `what` on a replica of a broker set, where it is not replicated yet: held on
    /// one replica only, it would differ from the others' state (README "Replicated broker
    /// sets"). `Ok` on a single broker.
    pub(crate) fn unreplicated(&self, what: &str) -> Result<(), String> {
        #[cfg(feature = "replicas")]
        if self.replica().is_some() {
            return Err(not_replicated_remark(what));
        }
        let _ = what;
        Ok(())
    }

    /// This process's replica of its broker set, if it is one.
    #[cfg(feature = "replicas")]
    pub(crate) fn replica(&self) -> Option<&Arc<replica::Replica>> {
        self.replica.get()
    }

    /// A new `UNIQ_KEY` for a message whose producer sent none.
    pub(crate) fn new_uniq_key(&self) -> String {
        let now = crate::time::now_ms() as i64;
        lock(&self.uniq).next_key(now)
    }

    /// Publishes this broker's topics: straight into the embedded name server, and to the
    /// registrar for external ones.
    pub(crate) fn publish_topics(&self) {
        if self.config.namesrv_addr.is_none() {
            let _ = self.routes.register(routes::Registration {
                cluster: self.config.cluster_name.clone(),
                broker_name: self.config.broker_name.clone(),
                broker_id: self.broker_id(),
                addr: self.store_host.to_string(),
                topics: self.topics.all(),
                conn: None,
                replace_topics: true,
            });
        }
        self.topics_changed.send_modify(|v| *v += 1);
    }

    /// Creates a topic in the store and the topic table (if needed), subscribes the groups
    /// that already asked for it, and publishes the change. Returns its config.
    pub(crate) fn create_topic(&self, config: TopicConfig) -> Result<TopicConfig, StoreError> {
        let queues = config.read_queue_nums.max(config.write_queue_nums).max(1);
        let t = self.store.ensure_topic(&config.topic_name, queues)?;
        if let Some(r) = self.own_retention(&config.topic_name) {
            t.set_retention(r);
        }
        t.set_keep_acknowledged(self.keep_acknowledged(&config.topic_name));
        let mut config = config;
        // The store decides the real queue count (an existing topic keeps its own).
        if t.queue_count() != queues {
            config.read_queue_nums = t.queue_count();
            config.write_queue_nums = t.queue_count();
        }
        self.topics.put(config.clone());
        self.journal_topic(&config.topic_name);
        for group in self.clients.clustering_groups_of(&config.topic_name) {
            let _ = self.store.subscribe(&group, &config.topic_name);
        }
        self.publish_topics();
        Ok(config)
    }

    /// Deletes a topic and everything in it, and publishes the change.
    pub(crate) fn delete_topic(&self, topic: &str) {
        self.topics.remove(topic);
        self.journal_topic(topic);
        let _ = self.store.delete_topic(topic);
        self.publish_topics();
    }

    /// Takes `journal` as this core's and puts what it held into the tables (before
    /// [`open`](Self::open) creates the store's topics for them).
    pub(crate) fn restore(
        &mut self,
        journal: journal::ConfigJournal,
        recovered: journal::RecoveredConfigs,
    ) {
        let (topics, groups) = (recovered.topics.len(), recovered.groups.len());
        for (name, config) in recovered.topics {
            // After a clean stop the queues continue from where the last run ended them.
            if let Some(end) = recovered.ends.get(&name) {
                let queues = config.read_queue_nums.max(config.write_queue_nums).max(1);
                if let Err(e) = self.store.ensure_topic_from(&name, queues, *end) {
                    tracing::error!(topic = %name, "configuration journal: topic not restored: {e}");
                }
            }
            self.topics.put(config);
        }
        let mut offsets = 0;
        for (group, topic, queue, offset) in &recovered.offsets {
            if self.store.commit(group, topic, *queue, *offset).is_ok() {
                offsets += 1;
            }
        }
        for (name, (config, size)) in recovered.groups {
            if let Err(e) = self.groups.put(name.clone(), config, size) {
                tracing::error!(group = %name, "configuration journal: a group not restored: {e}");
            }
        }
        let r = &recovered.report;
        tracing::info!(
            topics,
            groups,
            clean_stop = recovered.clean_stop,
            offsets,
            records = r.records,
            torn = r.torn_records,
            undecodable = recovered.undecodable,
            quarantined = r.quarantined.len(),
            ms = r.elapsed.as_millis() as u64,
            "configuration journal: topics and subscription groups restored"
        );
        for q in &r.quarantined {
            tracing::warn!(file = %q.file.display(), "configuration journal: {}", q.reason);
        }
        self.journal = Some(journal);
    }

    /// Journals topic `name`'s current state (see [`journal`]); nothing without a store
    /// directory.
    fn journal_topic(&self, name: &str) {
        let Some(j) = &self.journal else { return };
        let mut w = j.writer();
        w.topic(name, self.topics.get(name).as_ref());
        self.compact_if_due(&mut w);
    }

    /// Journals subscription group `name`'s current config (or its deletion); nothing without
    /// a store directory.
    pub(crate) fn journal_group(&self, name: &str) {
        let Some(j) = &self.journal else { return };
        let mut w = j.writer();
        w.group(name, self.groups.get(name));
        self.compact_if_due(&mut w);
    }

    fn compact_if_due(&self, w: &mut journal::Writer<'_>) {
        if w.wants_compaction(self.topics.len() + self.groups.len()) {
            w.compact(&self.topics.all(), &self.groups.all());
        }
    }

    /// Rewrites the journal from the tables (at start, after [`open`](Self::open): the
    /// journal then holds exactly the configs in force).
    pub(crate) fn compact_journal(&self) {
        if let Some(j) = &self.journal {
            let mut w = j.writer();
            w.compact(&self.topics.all(), &self.groups.all());
            w.start();
        }
    }

    /// At a clean stop (nothing is served any more): journals each topic's end offset and the
    /// committed offsets, for the next run to continue from (see [`journal`]).
    pub(crate) fn journal_clean_stop(&self) {
        let Some(j) = &self.journal else { return };
        let mut w = j.writer();
        let mut written = 0u64;
        let mut complete = true;
        for t in self.topics.all() {
            let Some(store) = self.store.topic(&t.topic_name) else { continue };
            let end = (0..store.queue_count()).filter_map(|q| store.offsets(q).ok()).map(|o| o.1);
            if w.stop_end(&t.topic_name, end.max().unwrap_or(0)) {
                written += 1;
            } else {
                complete = false;
            }
        }
        let mut by_group: BTreeMap<(String, String), Vec<(u32, u64)>> = BTreeMap::new();
        for (group, topic, queue, offset) in self.store.committed_all() {
            // The internal topics' groups (delay levels, timers, half messages) start over
            // with their topics.
            if self.topics.get_perm(&topic).is_some() {
                by_group.entry((group, topic)).or_default().push((queue, offset));
            }
        }
        for ((group, topic), offsets) in by_group {
            if w.stop_offsets(&group, &topic, offsets) {
                written += 1;
            } else {
                complete = false;
            }
        }
        if complete && w.clean_stop(written) {
            tracing::info!(
                records = written,
                "configuration journal: end and committed offsets kept"
            );
        }
    }

    /// The topic a pull or pop reads, with its counters, in the one lookup both make: only
    /// routed topics are readable (the internal ones are not), and only with the read
    /// permission.
    ///
    /// # Errors
    /// [`Unreadable`].
    pub(crate) fn readable_topic(
        &self,
        name: &str,
    ) -> Result<(Arc<dyn TopicStore>, Arc<counters::TopicCounters>), Unreadable> {
        let routed = self.topics.get_perm_counted(name);
        let Some(((perm_bits, counters), topic)) =
            routed.and_then(|r| Some((r, self.store.topic(name)?)))
        else {
            return Err(Unreadable::Unknown);
        };
        if perm_bits & topics::perm::READ == 0 {
            return Err(Unreadable::Forbidden);
        }
        Ok((topic, counters))
    }

    /// The retention of a topic that keeps what no group holds longer than others: the trace
    /// topic keeps its records `trace_retention_secs` (72 h, RocketMQ's `fileReservedTime`), at
    /// most `retention_bytes` per queue. `None`: the broker's retention.
    pub(crate) fn own_retention(&self, topic: &str) -> Option<Retention> {
        (topic == topics::TRACE_TOPIC).then(|| Retention {
            time: std::time::Duration::from_secs(self.config.trace_retention_secs),
            bytes: self.config.retention_bytes,
        })
    }

    /// How long a topic of the topic table keeps messages every group acknowledged: its entry
    /// in `keep_acknowledged_topics`, else `keep_acknowledged_secs` (0: freed at once).
    pub(crate) fn keep_acknowledged(&self, topic: &str) -> std::time::Duration {
        let secs = self
            .config
            .keep_acknowledged_topics
            .get(topic)
            .copied()
            .unwrap_or(self.config.keep_acknowledged_secs);
        std::time::Duration::from_secs(secs)
    }

    /// The topics a RocketMQ broker creates at start for its clients (`TopicConfigManager`'s
    /// `init`), so that they are routed before any client sends: `RMQ_SYS_TRACE_TOPIC` with one
    /// queue (RocketMQ's `traceTopicEnable`; the Go client sends its first trace records
    /// without auto-creation, so the topic must be in the route table already) and the
    /// cluster's reply topic, `<cluster>_REPLY_TOPIC`, with one queue (where repliers send
    /// replies, also without auto-creation).
    fn system_topics(&self) -> Vec<TopicConfig> {
        vec![
            TopicConfig::new(topics::TRACE_TOPIC, 1, 1),
            TopicConfig::new(topics::reply_topic(&self.config.cluster_name), 1, 1),
        ]
    }

    /// Creates the start-up topics ([`system_topics`](Self::system_topics)) and the store's
    /// topics for the topic table's configs (at start) and publishes them; over a store that
    /// kept its state (a journal), gives the POP groups their state back once the topics'
    /// settings are in force ([`crate::store::PopConsumption::restore_pop_state`]) and rebuilds
    /// the undecided half messages and the waiting timers from it ([`transaction::restore`],
    /// [`timer::restore`]).
    pub(crate) fn open(&self) {
        for t in self.system_topics() {
            if self.topics.get_perm(&t.topic_name).is_none() {
                self.topics.put(t);
            }
        }
        for t in self.topics.all() {
            let Ok(topic) = self.store.ensure_topic(&t.topic_name, t.read_queue_nums.max(1)) else {
                continue;
            };
            if let Some(r) = self.own_retention(&t.topic_name) {
                topic.set_retention(r);
            }
            topic.set_keep_acknowledged(self.keep_acknowledged(&t.topic_name));
        }
        // Once the topics keep what they keep: the acknowledgements given back free messages.
        let restored = self.store.restore_pop_state();
        if restored > 0 {
            tracing::info!("POP state restored: {restored} popped messages still in flight");
        }
        transaction::restore(self);
        timer::restore(self);
        self.publish_topics();
    }
}

/// Starts the core's own tasks (client expiry, delay levels, transaction checks, timers,
/// rates) on `tasks`, each until `shutdown`.
pub(crate) fn spawn_tasks(
    core: &Arc<Core>,
    tasks: &mut tokio::task::JoinSet<()>,
    shutdown: &watch::Receiver<bool>,
) {
    tasks.spawn(clients::housekeeping(Arc::clone(core), shutdown.clone()));
    tasks.spawn(delay::run(Arc::clone(core), shutdown.clone()));
    tasks.spawn(transaction::run(Arc::clone(core), shutdown.clone()));
    tasks.spawn(timer::run(Arc::clone(core), shutdown.clone()));
    tasks.spawn(rates::run(Arc::clone(core), shutdown.clone()));
}
