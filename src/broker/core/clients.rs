//! Who is connected: connections, producer and consumer groups from heartbeats, their
//! subscriptions, and the notifications RocketMQ clients rebalance on.
//!
//! A consumer group's membership changes on `HEART_BEAT` (a new client id), `UNREGISTER_CLIENT`,
//! a closed connection or a client that stops sending heartbeats for `client-expiry-secs`;
//! every change sends `NOTIFY_CONSUMER_IDS_CHANGED` to the group's remaining members.
//! Clustering groups also hold messages in the store (until they commit); broadcasting members
//! each get a store member whose read position acknowledges for them.
//!
//! A face whose clients are not connections of this registry (the gRPC face's sessions) lists
//! them through a [`ClientDirectory`]: the admin views (connection lists, consume stats, the
//! group views, the producer table, metrics) show them beside the remoting clients, for as long
//! as that face keeps them. They take no part in the remoting rules (rebalance notifications,
//! `GET_CONSUMER_LIST_BY_GROUP`, store holds): they pop, and the face keeps their state.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::watch;

use super::filter::SqlFilter;
use super::topics::{is_internal_group, is_internal_topic, RETRY_PREFIX};
use super::Core;
use crate::remoting::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, MessageModel, SubscriptionData,
};
use crate::remoting::subscription::TagMatcher;
use crate::remoting::LanguageCode;
use crate::store::{Filter, MemberId, StoreError};
use crate::sync::{read, write, Arc, RwLock};

/// Identifies one client connection of a face (the registry never sees the connection itself).
pub(crate) type ConnId = u64;

/// The face whose connections the registry knows, told when a group's members change (the
/// remoting face sends `NOTIFY_CONSUMER_IDS_CHANGED` to each, and clients rebalance).
pub(crate) trait ClientNotify: Send + Sync {
    /// The members of `group` changed; `conns` are the connections of those that remain.
    fn members_changed(&self, group: &str, conns: &[ConnId]);
}

/// How long a broker → client call waits for the client's answer (RocketMQ's
/// `Broker2Client.callClient`: 10 s).
pub(crate) const CALL_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// What an admin tool asks one consumer through the broker (RocketMQ's
/// `AdminBrokerProcessor.callConsumer`), relayed by the face the consumer is connected to.
#[derive(Debug, Clone)]
pub(crate) enum ConsumerCall {
    /// `GET_CONSUMER_RUNNING_INFO`: how the client runs, with its threads' stacks if `jstack`.
    RunningInfo {
        /// Whether the stacks are asked for (`jstackEnable`).
        jstack: bool,
    },
    /// `CONSUME_MESSAGE_DIRECTLY`: consume this stored message now.
    ConsumeDirectly(DirectMessage),
}

/// A stored message a consumer is asked to consume directly, and where it is stored.
#[derive(Debug, Clone)]
pub(crate) struct DirectMessage {
    /// The stored record.
    pub(crate) record: bytes::Bytes,
    /// Its topic.
    pub(crate) topic: String,
    /// Its queue.
    pub(crate) queue: u32,
    /// Its offset in that queue.
    pub(crate) offset: u64,
    /// When it was stored, ms since the epoch.
    pub(crate) store_timestamp: u64,
}

/// How a consumer consumed a message it was handed directly (RocketMQ's `CMResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsumeResult {
    /// `CR_SUCCESS`.
    Success,
    /// `CR_LATER`.
    Later,
    /// `CR_RETURN_NULL`.
    ReturnNull,
}

impl ConsumeResult {
    /// RocketMQ's name of it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConsumeResult::Success => "CR_SUCCESS",
            ConsumeResult::Later => "CR_LATER",
            ConsumeResult::ReturnNull => "CR_RETURN_NULL",
        }
    }
}

/// A face that keeps clients of its own (the gRPC face's sessions), asked for them whenever an
/// admin view lists clients; a client it no longer keeps (closed, expired) is no longer listed.
pub(crate) trait ClientDirectory: Send + Sync {
    /// Every client the face keeps now.
    fn clients(&self) -> Vec<FaceClient>;
}

/// What a face's client is, as the admin views list it (Apache's proxy registers gRPC clients
/// with its broker the same way: producers in one producer group per topic they publish to,
/// consumers in their group with their subscriptions).
#[derive(Debug, Clone)]
pub(crate) enum FaceRole {
    /// A producer, in the producer groups named.
    Producer(Vec<String>),
    /// A member of consumer group `group`.
    Consumer {
        /// The consumer group.
        group: String,
        /// How it consumes.
        consume_type: ConsumeType,
        /// Its subscriptions.
        subscriptions: Vec<SubscriptionData>,
    },
    /// Neither yet (no Settings).
    Unknown,
}

/// One client of a face.
#[derive(Debug, Clone)]
pub(crate) struct FaceClient {
    /// Id, address, language and version.
    pub(crate) conn: ClientConn,
    /// When it was last heard from, ms since the Unix epoch.
    pub(crate) last_seen_ms: u64,
    /// What it is.
    pub(crate) role: FaceRole,
}

impl FaceClient {
    fn consumer_of(&self, group: &str) -> Option<(&ConsumeType, &[SubscriptionData])> {
        match &self.role {
            FaceRole::Consumer { group: g, consume_type, subscriptions } if g == group => {
                Some((consume_type, subscriptions.as_slice()))
            }
            _ => None,
        }
    }
}

/// A relayed consumer's answer, in the terms the admin codes report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConsumerAnswer {
    /// To [`ConsumerCall::RunningInfo`]: what the client told (its threads' stacks).
    RunningInfo {
        /// The stacks, if the client sent them.
        jstack: Option<String>,
    },
    /// To [`ConsumerCall::ConsumeDirectly`]: how it consumed the message (`None`: it did not
    /// say, as RocketMQ's proxy leaves `consumeResult` unset for other answers).
    Consumed(Option<ConsumeResult>),
}

/// Why a relayed call got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum RelayError {
    /// The client's stream is closed, or it does not read it.
    #[error("the client's stream is closed or not reading")]
    Unreachable,
    /// No answer came within the time allowed.
    #[error("the client did not answer within {0:?}")]
    TimedOut(Duration),
    /// The client refused (RocketMQ's proxy: `NO_PERMISSION`, "forbidden to verify message").
    #[error("forbidden to verify message")]
    Forbidden,
    /// The client answered with an error (RocketMQ's proxy: `SYSTEM_ERROR`, "verify message
    /// failed").
    #[error("verify message failed")]
    Failed,
}

/// A relayed call in flight.
pub(crate) type RelayFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ConsumerAnswer, RelayError>> + Send>>;

/// A face whose consumers the registry does not hold (the gRPC face's sessions), reached for
/// [`ConsumerCall`]s that arrive on another face (mqadmin and the dashboard speak remoting).
pub(crate) trait ConsumerRelay: Send + Sync {
    /// Sends `call` to client `client_id` if it is this face's consumer of `group`; `None` when
    /// it is not (the caller answers "not online"). The future waits for the answer.
    fn call(&self, group: &str, client_id: &str, call: ConsumerCall) -> Option<RelayFuture>;
}

/// One producer client as `GET_ALL_PRODUCER_INFO` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProducerClient {
    /// Id, address, language and version.
    pub(crate) conn: ClientConn,
    /// When it was last heard from, ms since the Unix epoch.
    pub(crate) last_seen_ms: u64,
}

/// The engine filter for a broker-side tag matcher.
pub(crate) fn filter_of(m: &TagMatcher) -> Filter {
    match m {
        TagMatcher::All => Filter::All,
        TagMatcher::Names(names) => Filter::tags(names.iter().map(String::as_str)),
        TagMatcher::Codes(codes) => Filter::tag_hashes(codes.iter().copied()),
    }
}

/// A consumer group's subscription to one topic, as its latest heartbeat described it.
#[derive(Debug, Clone)]
pub(crate) struct Subscription {
    pub(crate) data: SubscriptionData,
    pub(crate) filter: Filter,
    /// The compiled SQL92 filter of an SQL92 subscription.
    pub(crate) sql: Option<SqlFilter>,
}

#[derive(Debug)]
struct Member {
    conn: ConnId,
    last_seen: Instant,
    /// Broadcasting: the store member per subscribed topic.
    broadcast: HashMap<String, MemberId>,
}

#[derive(Debug)]
struct ConsumerGroup {
    model: MessageModel,
    /// Push or pull, as the latest heartbeat said (admin answers).
    consume_type: ConsumeType,
    /// Where the group starts without an offset, as the latest heartbeat said.
    from_where: ConsumeFromWhere,
    members: BTreeMap<String, Member>,
    subscriptions: HashMap<String, Subscription>,
    /// When the last member left (clustering groups release their holds after a while).
    empty_since: Option<Instant>,
}

#[derive(Debug)]
struct Conn {
    /// The peer's address (admin answers).
    peer: std::net::SocketAddr,
    /// Language and version of the client's last heartbeat (admin answers).
    language: LanguageCode,
    version: i32,
    /// The client id the latest request message sent on this connection named as its
    /// requester (`REPLY_TO_CLIENT`): where replies to it go if that client never sent a
    /// producer heartbeat here.
    requester: Option<String>,
}

/// One client connection as the admin codes report it (RocketMQ's `Connection`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientConn {
    pub(crate) client_id: String,
    pub(crate) addr: String,
    pub(crate) language: LanguageCode,
    pub(crate) version: i32,
}

/// What the admin codes report of a consumer group.
#[derive(Debug, Clone)]
pub(crate) struct GroupView {
    pub(crate) conns: Vec<ClientConn>,
    pub(crate) subscriptions: Vec<SubscriptionData>,
    pub(crate) consume_type: ConsumeType,
    pub(crate) model: MessageModel,
    pub(crate) from_where: ConsumeFromWhere,
}

#[derive(Debug, Default)]
struct Registry {
    conns: HashMap<ConnId, Conn>,
    groups: HashMap<String, ConsumerGroup>,
    producers: HashMap<String, BTreeMap<String, (ConnId, Instant)>>,
}

/// The registry (see the module docs).
#[derive(Default)]
pub(crate) struct ClientRegistry {
    inner: RwLock<Registry>,
    /// Told of membership changes (see [`ClientNotify`]); set once the face starts.
    notify: OnceLock<Arc<dyn ClientNotify>>,
    /// The face whose consumers are not registered here (see [`ConsumerRelay`]).
    relay: OnceLock<Arc<dyn ConsumerRelay>>,
    /// The other face's clients (see [`ClientDirectory`]); set once that face starts.
    directory: OnceLock<Arc<dyn ClientDirectory>>,
}

impl std::fmt::Debug for ClientRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRegistry").finish_non_exhaustive()
    }
}

/// What a membership change requires afterwards (done outside the registry lock).
#[derive(Debug, Default)]
struct Effects {
    /// Groups whose member set changed: notify these connections.
    notify: Vec<(String, Vec<ConnId>)>,
    /// Store members of broadcasting clients that left.
    broadcast_left: Vec<(String, String, MemberId)>,
    /// `(group, client)` pairs that left: their orderly locks are released.
    left: Vec<(String, String)>,
}

impl ClientRegistry {
    fn write(&self) -> crate::sync::RwLockWriteGuard<'_, Registry> {
        write(&self.inner)
    }

    fn read(&self) -> crate::sync::RwLockReadGuard<'_, Registry> {
        read(&self.inner)
    }

    /// Sets the face told of membership changes (once; later calls change nothing).
    pub(crate) fn set_notify(&self, notify: Arc<dyn ClientNotify>) {
        let _ = self.notify.set(notify);
    }

    /// Sets the face reached for consumers not registered here (once; later calls change
    /// nothing). Only the gRPC face sets one.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) fn set_relay(&self, relay: Arc<dyn ConsumerRelay>) {
        let _ = self.relay.set(relay);
    }

    /// The face reached for consumers not registered here, if one is set.
    pub(crate) fn relay(&self) -> Option<&Arc<dyn ConsumerRelay>> {
        self.relay.get()
    }

    /// The connection of client `client_id` in consumer group `group` and the version its
    /// heartbeat carried, while it is open (RocketMQ's `ConsumerManager.findChannel`).
    pub(crate) fn consumer_channel(&self, group: &str, client_id: &str) -> Option<(ConnId, i32)> {
        let r = self.read();
        let conn = r.groups.get(group)?.members.get(client_id)?.conn;
        r.conns.get(&conn).map(|c| (conn, c.version))
    }

    /// Sets the face whose own clients the admin views list too (once; later calls change
    /// nothing).
    pub(crate) fn set_directory(&self, directory: Arc<dyn ClientDirectory>) {
        let _ = self.directory.set(directory);
    }

    /// The other face's clients now (none without one).
    pub(crate) fn face_clients(&self) -> Vec<FaceClient> {
        self.directory.get().map(|d| d.clients()).unwrap_or_default()
    }

    /// A connection opened (from `peer`).
    pub(crate) fn open(&self, id: ConnId, peer: std::net::SocketAddr) {
        let conn = Conn { peer, language: LanguageCode::Java, version: 0, requester: None };
        self.write().conns.insert(id, conn);
    }

    /// Records the language and version a client's heartbeat carried on connection `id`.
    pub(crate) fn note_client(&self, id: ConnId, language: LanguageCode, version: i32) {
        if let Some(c) = self.write().conns.get_mut(&id) {
            c.language = language;
            c.version = version;
        }
    }

    fn client_conn(r: &Registry, client_id: &str, conn: ConnId) -> Option<ClientConn> {
        r.conns.get(&conn).map(|c| ClientConn {
            client_id: client_id.to_string(),
            addr: c.peer.to_string(),
            language: c.language,
            version: c.version,
        })
    }

    /// A consumer group's live members and subscriptions (`GET_CONSUMER_CONNECTION_LIST`),
    /// the other face's members included; `None` when neither a heartbeat nor a member of the
    /// other face made the group known. A group of the other face's clients only is shown as
    /// Apache's proxy registers them: clustering, from the last offset.
    pub(crate) fn group_view(&self, group: &str) -> Option<GroupView> {
        let face: Vec<FaceClient> =
            self.face_clients().into_iter().filter(|c| c.consumer_of(group).is_some()).collect();
        let r = self.read();
        let mut view = match r.groups.get(group) {
            Some(g) => GroupView {
                conns: g
                    .members
                    .iter()
                    .filter_map(|(id, m)| Self::client_conn(&r, id, m.conn))
                    .collect(),
                subscriptions: g.subscriptions.values().map(|s| s.data.clone()).collect(),
                consume_type: g.consume_type.clone(),
                model: g.model.clone(),
                from_where: g.from_where.clone(),
            },
            None => {
                let first = face.first()?.consumer_of(group)?;
                GroupView {
                    conns: Vec::new(),
                    subscriptions: Vec::new(),
                    consume_type: first.0.clone(),
                    model: MessageModel::Clustering,
                    from_where: ConsumeFromWhere::ConsumeFromLastOffset,
                }
            }
        };
        drop(r);
        for c in &face {
            if let Some((_, subs)) = c.consumer_of(group) {
                for sd in subs {
                    if !view.subscriptions.iter().any(|s| s.topic == sd.topic) {
                        view.subscriptions.push(sd.clone());
                    }
                }
                view.conns.push(c.conn.clone());
            }
        }
        view.subscriptions.sort_by(|a, b| a.topic.cmp(&b.topic));
        Some(view)
    }

    /// A producer group's live clients (`GET_PRODUCER_CONNECTION_LIST`), the other face's
    /// included.
    pub(crate) fn producer_conns(&self, group: &str) -> Vec<ClientConn> {
        let mut conns: Vec<ClientConn> = {
            let r = self.read();
            r.producers
                .get(group)
                .map(|m| {
                    m.iter().filter_map(|(id, (c, _))| Self::client_conn(&r, id, *c)).collect()
                })
                .unwrap_or_default()
        };
        for c in self.face_clients() {
            if matches!(&c.role, FaceRole::Producer(groups) if groups.iter().any(|g| g == group)) {
                conns.push(c.conn);
            }
        }
        conns
    }

    /// Every producer group with its live clients, the other face's included
    /// (`GET_ALL_PRODUCER_INFO`).
    pub(crate) fn producer_table(&self) -> BTreeMap<String, Vec<ProducerClient>> {
        let now = Instant::now();
        let now_ms = crate::time::now_ms();
        let mut table: BTreeMap<String, Vec<ProducerClient>> = BTreeMap::new();
        {
            let r = self.read();
            for (group, members) in &r.producers {
                for (id, (c, seen)) in members {
                    if let Some(conn) = Self::client_conn(&r, id, *c) {
                        let ago = now.saturating_duration_since(*seen).as_millis() as u64;
                        let last_seen_ms = now_ms.saturating_sub(ago);
                        table
                            .entry(group.clone())
                            .or_default()
                            .push(ProducerClient { conn, last_seen_ms });
                    }
                }
            }
        }
        for c in self.face_clients() {
            if let FaceRole::Producer(groups) = &c.role {
                for g in groups {
                    let p = ProducerClient { conn: c.conn.clone(), last_seen_ms: c.last_seen_ms };
                    table.entry(g.clone()).or_default().push(p);
                }
            }
        }
        table
    }

    /// Every consumer group a heartbeat made known or a client of the other face is a member
    /// of, sorted.
    pub(crate) fn consumer_groups(&self) -> Vec<String> {
        let mut v: Vec<String> = self.read().groups.keys().cloned().collect();
        v.extend(self.face_clients().into_iter().filter_map(|c| match c.role {
            FaceRole::Consumer { group, .. } => Some(group),
            _ => None,
        }));
        v.sort();
        v.dedup();
        v
    }

    /// The connections of a consumer group's live members (one per connection).
    pub(crate) fn member_conns(&self, group: &str) -> Vec<ConnId> {
        member_conns(&self.read(), group)
    }

    /// Topics a consumer group subscribes to (its heartbeats' subscriptions and those of its
    /// members of the other face), sorted.
    pub(crate) fn topics_of(&self, group: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .read()
            .groups
            .get(group)
            .map(|g| g.subscriptions.keys().cloned().collect())
            .unwrap_or_default();
        for c in self.face_clients() {
            if let Some((_, subs)) = c.consumer_of(group) {
                v.extend(subs.iter().map(|s| s.topic.clone()));
            }
        }
        v.sort();
        v.dedup();
        v
    }

    /// Consumer groups subscribed to `topic` (`QUERY_TOPIC_CONSUME_BY_WHO`), the other face's
    /// included, sorted.
    pub(crate) fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .read()
            .groups
            .iter()
            .filter(|(_, g)| g.subscriptions.contains_key(topic))
            .map(|(n, _)| n.clone())
            .collect();
        for c in self.face_clients() {
            if let FaceRole::Consumer { group, subscriptions, .. } = c.role {
                if subscriptions.iter().any(|s| s.topic == topic) {
                    v.push(group);
                }
            }
        }
        v.sort();
        v.dedup();
        v
    }

    /// A connection closed: every client on it leaves its groups.
    pub(crate) fn close(&self, core: &Core, id: ConnId) {
        let effects = {
            let mut r = self.write();
            r.conns.remove(&id);
            for p in r.producers.values_mut() {
                p.retain(|_, (c, _)| *c != id);
            }
            r.producers.retain(|_, p| !p.is_empty());
            remove_members(&mut r, |_, _, m| m.conn == id)
        };
        apply(core, effects);
    }

    /// Registers what a heartbeat says. Returns nothing; notifications are sent from here.
    pub(crate) fn heartbeat(&self, core: &Core, conn: ConnId, hb: &HeartbeatData) {
        let now = Instant::now();
        let mut subscribe: Vec<(String, String)> = Vec::new();
        let mut broadcast_join: Vec<(String, String, String)> = Vec::new();
        // Filters are built before the write lock is taken; under it, entries are only moved
        // in (the heartbeat processor bounds how many there are).
        // The broker's internal groups and topics are not for clients (topics::is_internal_*):
        // such entries are left out, as if the heartbeat had not named them.
        let prepared: Vec<(&ConsumerData, Vec<Subscription>)> = hb
            .consumer_data_set
            .iter()
            .filter(|c| !is_internal_group(&c.group_name))
            .map(|c| {
                let subs = c
                    .subscription_data_set
                    .iter()
                    .filter(|sd| !is_internal_topic(&sd.topic))
                    .map(|sd| Subscription {
                        data: sd.clone(),
                        filter: filter_of(&TagMatcher::for_subscription(sd)),
                        sql: super::filter::of_subscription(sd),
                    })
                    .collect();
                (c, subs)
            })
            .collect();
        let mut joined = Vec::new();
        let effects = {
            let mut r = self.write();
            for p in &hb.producer_data_set {
                let before = r
                    .producers
                    .entry(p.group_name.clone())
                    .or_default()
                    .insert(hb.client_id.clone(), (conn, now));
                if before.is_none() {
                    joined.push(p.group_name.as_str());
                }
            }
            let mut effects = Effects::default();
            for (c, subs) in prepared {
                let changed = upsert_consumer(
                    &mut r,
                    conn,
                    &hb.client_id,
                    (c, subs),
                    now,
                    &mut subscribe,
                    &mut broadcast_join,
                );
                if changed {
                    let conns = member_conns(&r, &c.group_name);
                    effects.notify.push((c.group_name.clone(), conns));
                }
            }
            effects
        };
        // After the registry's lock: the checker takes the transaction table's lock, then this
        // registry's (producer_channel), so the reverse order here could deadlock.
        for group in joined {
            core.transactions.producer_joined(group);
        }
        for (group, topic) in subscribe {
            match core.store.subscribe(&group, &topic) {
                Ok(()) | Err(StoreError::UnknownTopic(_)) => {}
                // Over max-groups-per-topic / max-subscriptions: the group can still pull, but
                // the broker does not hold messages for it (said once per heartbeat).
                Err(e) => {
                    tracing::warn!(%group, %topic, error = %e, "heartbeat subscription not held")
                }
            }
        }
        for (group, topic, client) in broadcast_join {
            if core.store.topic(&topic).is_none() {
                continue;
            }
            if let Ok(id) = core.store.add_broadcast_member(&group, &topic) {
                let mut r = self.write();
                let stale = r
                    .groups
                    .get_mut(&group)
                    .and_then(|g| g.members.get_mut(&client))
                    .and_then(|m| m.broadcast.insert(topic.clone(), id));
                drop(r);
                if let Some(old) = stale {
                    core.store.remove_broadcast_member(&group, &topic, old);
                }
            }
        }
        apply(core, effects);
    }

    /// `UNREGISTER_CLIENT`: the client leaves the named groups.
    pub(crate) fn unregister(
        &self,
        core: &Core,
        client_id: &str,
        producer: Option<&str>,
        consumer: Option<&str>,
    ) {
        let effects = {
            let mut r = self.write();
            if let Some(p) = producer {
                if let Some(g) = r.producers.get_mut(p) {
                    g.remove(client_id);
                    if g.is_empty() {
                        r.producers.remove(p);
                    }
                }
            }
            match consumer {
                Some(group) => remove_members(&mut r, |g, id, _| g == group && id == client_id),
                None => Effects::default(),
            }
        };
        apply(core, effects);
    }

    /// Drops clients whose last heartbeat is older than `ttl`; releases clustering groups that
    /// have had no member for `idle` (if non-zero).
    fn expire(&self, core: &Core, ttl: Duration, idle: Duration) {
        let now = Instant::now();
        let (effects, released) = {
            let mut r = self.write();
            for p in r.producers.values_mut() {
                p.retain(|_, (_, seen)| now.duration_since(*seen) < ttl);
            }
            r.producers.retain(|_, p| !p.is_empty());
            let effects = remove_members(&mut r, |_, _, m| now.duration_since(m.last_seen) >= ttl);
            let mut released = Vec::new();
            if !idle.is_zero() {
                r.groups.retain(|name, g| {
                    let gone = g.members.is_empty()
                        && g.empty_since.is_some_and(|t| now.duration_since(t) >= idle);
                    if gone && g.model == MessageModel::Clustering {
                        released.extend(g.subscriptions.keys().map(|t| (name.clone(), t.clone())));
                    }
                    !gone
                });
            }
            (effects, released)
        };
        for (group, topic) in released {
            tracing::info!(%group, %topic, "group idle: its messages are no longer held");
            core.store.unsubscribe(&group, &topic);
        }
        apply(core, effects);
    }

    /// One live connection of producer group `group` (the one that heartbeated last), for
    /// `CHECK_TRANSACTION_STATE`.
    pub(crate) fn producer_conn(&self, group: &str) -> Option<ConnId> {
        let r = self.read();
        let members = r.producers.get(group)?;
        let mut live: Vec<&(ConnId, Instant)> = members.values().collect();
        live.sort_by_key(|(_, seen)| std::cmp::Reverse(*seen));
        live.iter().find(|(conn, _)| r.conns.contains_key(conn)).map(|(conn, _)| *conn)
    }

    /// Notes that connection `id` sent a request message (request/reply) whose requester is
    /// `client_id`: the client is on this connection.
    pub(crate) fn note_requester(&self, id: ConnId, client_id: &str) {
        let known = self.read().conns.get(&id).map(|c| c.requester.as_deref() == Some(client_id));
        if known == Some(false) {
            if let Some(c) = self.write().conns.get_mut(&id) {
                c.requester = Some(client_id.to_string());
            }
        }
    }

    /// The connection of client `client_id`, while it is open: where a reply to its request
    /// goes. The one its latest producer heartbeat came on (RocketMQ's
    /// `ProducerManager.findChannel`), else the one its latest request message came on (the Go
    /// client v2.1.2 sends no heartbeat before its first `Request` to an existing topic, and its
    /// first timed one only 30 s after start, so RocketMQ's lookup alone misses its replies).
    pub(crate) fn producer_client_conn(&self, client_id: &str) -> Option<ConnId> {
        let r = self.read();
        let heartbeat = r
            .producers
            .values()
            .filter_map(|members| members.get(client_id))
            .filter(|(conn, _)| r.conns.contains_key(conn))
            .max_by_key(|(_, seen)| *seen)
            .map(|(conn, _)| *conn);
        heartbeat.or_else(|| {
            r.conns
                .iter()
                .find(|(_, c)| c.requester.as_deref() == Some(client_id))
                .map(|(id, _)| *id)
        })
    }

    /// Client ids of a consumer group's live members, sorted.
    pub(crate) fn consumer_ids(&self, group: &str) -> Vec<String> {
        self.read()
            .groups
            .get(group)
            .map(|g| g.members.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The subscription of `group` to `topic`, and whether the group broadcasts. `Err(true)`
    /// when the group is unknown, `Err(false)` when it has no subscription to the topic.
    pub(crate) fn subscription(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<(Subscription, MessageModel), bool> {
        let r = self.read();
        let g = r.groups.get(group).ok_or(true)?;
        let sub = g.subscriptions.get(topic).ok_or(false)?;
        Ok((sub.clone(), g.model.clone()))
    }

    /// The store member of a broadcasting client for `topic`, if any.
    pub(crate) fn broadcast_member(
        &self,
        group: &str,
        topic: &str,
        conn: ConnId,
    ) -> Option<MemberId> {
        let r = self.read();
        let g = r.groups.get(group)?;
        g.members.values().filter(|m| m.conn == conn).find_map(|m| m.broadcast.get(topic).copied())
    }

    /// Clustering groups subscribed to `topic` (they must hold it once it exists).
    pub(crate) fn clustering_groups_of(&self, topic: &str) -> Vec<String> {
        self.read()
            .groups
            .iter()
            .filter(|(_, g)| {
                g.model != MessageModel::Broadcasting && g.subscriptions.contains_key(topic)
            })
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Whether a heartbeat made `group` known (it stays known until it is released as idle).
    pub(crate) fn knows_group(&self, group: &str) -> bool {
        self.read().groups.contains_key(group)
    }

    /// The model of a consumer group, if known.
    pub(crate) fn model(&self, group: &str) -> Option<MessageModel> {
        self.read().groups.get(group).map(|g| g.model.clone())
    }

    /// Every consumer group with its number of member clients, the other face's included, by
    /// name (metrics).
    pub(crate) fn consumer_group_members(&self) -> Vec<(String, usize)> {
        let mut members: BTreeMap<String, usize> =
            self.read().groups.iter().map(|(name, g)| (name.clone(), g.members.len())).collect();
        for c in self.face_clients() {
            if let FaceRole::Consumer { group, .. } = c.role {
                *members.entry(group).or_default() += 1;
            }
        }
        members.into_iter().collect()
    }

    /// Distinct producer clients registered by heartbeats or kept by the other face (metrics).
    pub(crate) fn producer_client_count(&self) -> usize {
        let mut ids: Vec<String> =
            self.read().producers.values().flat_map(|g| g.keys().cloned()).collect();
        ids.extend(
            self.face_clients()
                .into_iter()
                .filter(|c| matches!(c.role, FaceRole::Producer(_)))
                .map(|c| c.conn.client_id),
        );
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
}

fn member_conns(r: &Registry, group: &str) -> Vec<ConnId> {
    let Some(g) = r.groups.get(group) else { return Vec::new() };
    let mut conns: Vec<ConnId> = g.members.values().map(|m| m.conn).collect();
    conns.sort_unstable();
    conns.dedup();
    conns.retain(|c| r.conns.contains_key(c));
    conns
}

/// Inserts or refreshes one consumer of a heartbeat; returns whether the group's member set
/// changed. Collects the store subscriptions and broadcasting joins to perform afterwards.
fn upsert_consumer(
    r: &mut Registry,
    conn: ConnId,
    client: &str,
    (c, subs): (&ConsumerData, Vec<Subscription>),
    now: Instant,
    subscribe: &mut Vec<(String, String)>,
    broadcast_join: &mut Vec<(String, String, String)>,
) -> bool {
    let g = r.groups.entry(c.group_name.clone()).or_insert_with(|| ConsumerGroup {
        model: c.message_model.clone(),
        consume_type: c.consume_type.clone(),
        from_where: c.consume_from_where.clone(),
        members: BTreeMap::new(),
        subscriptions: HashMap::new(),
        empty_since: None,
    });
    g.model = c.message_model.clone();
    g.consume_type = c.consume_type.clone();
    g.from_where = c.consume_from_where.clone();
    g.empty_since = None;
    let mut changed = false;
    let member = g.members.entry(client.to_string()).or_insert_with(|| {
        changed = true;
        Member { conn, last_seen: now, broadcast: HashMap::new() }
    });
    member.conn = conn;
    member.last_seen = now;
    let broadcasting = c.message_model == MessageModel::Broadcasting;
    for sub in subs {
        let topic = sub.data.topic.clone();
        if broadcasting {
            if !member.broadcast.contains_key(&topic) && !topic.starts_with(RETRY_PREFIX) {
                broadcast_join.push((c.group_name.clone(), topic.clone(), client.to_string()));
            }
        } else {
            subscribe.push((c.group_name.clone(), topic.clone()));
        }
        let newer = g
            .subscriptions
            .get(&topic)
            .map_or(true, |old| old.data.sub_version <= sub.data.sub_version);
        if newer {
            g.subscriptions.insert(topic, sub);
        }
    }
    changed
}

/// Removes every member for which `gone(group, client id, member)` holds.
fn remove_members(r: &mut Registry, gone: impl Fn(&str, &str, &Member) -> bool) -> Effects {
    let mut effects = Effects::default();
    let now = Instant::now();
    let names: Vec<String> = r.groups.keys().cloned().collect();
    for name in names {
        let Some(g) = r.groups.get_mut(&name) else { continue };
        let leaving: Vec<String> = g
            .members
            .iter()
            .filter(|(id, m)| gone(&name, id, m))
            .map(|(id, _)| id.clone())
            .collect();
        if leaving.is_empty() {
            continue;
        }
        for id in &leaving {
            effects.left.push((name.clone(), id.clone()));
            if let Some(m) = g.members.remove(id) {
                for (topic, member) in m.broadcast {
                    effects.broadcast_left.push((name.clone(), topic, member));
                }
            }
        }
        if g.members.is_empty() {
            g.empty_since = Some(now);
        }
        let conns = member_conns(r, &name);
        effects.notify.push((name, conns));
    }
    effects
}

fn apply(core: &Core, effects: Effects) {
    for (group, client) in &effects.left {
        core.locks.release(group, client);
    }
    for (group, topic, member) in effects.broadcast_left {
        core.store.remove_broadcast_member(&group, &topic, member);
    }
    if let Some(notify) = core.clients.notify.get() {
        for (group, conns) in effects.notify {
            notify.members_changed(&group, &conns);
        }
    }
}

/// Expires silent clients and releases idle groups (heartbeating ones here, POP-only ones
/// through [`Core::release_idle_groups`]) every few seconds until shutdown.
pub(crate) async fn housekeeping(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    let ttl = Duration::from_secs(core.config.client_expiry_secs.max(1));
    let idle = Duration::from_secs(core.config.group_idle_secs);
    let period = Duration::from_secs(5).min(ttl / 2).max(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.changed() => return,
        }
        core.clients.expire(&core, ttl, idle);
        core.release_idle_groups(crate::time::now_ms());
        core.locks.purge(Instant::now());
    }
}
