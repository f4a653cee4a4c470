//! Replicated broker sets: three baiji processes with one broker name, one Raft group
//! (openraft), the core's store as the state machine.
//!
//! # What a replica does
//! - The leader decides a send as a single broker would (checks, topic, queue, `UNIQ_KEY`,
//!   the encoded record, the store time: [`send::plan_message`](super::send::plan_message)),
//!   proposes it as one log entry ([`machine::Op::Append`]) and answers `SEND_OK` once a quorum
//!   (two of three) holds the entry and it is applied: the answer's offset is the one applying
//!   gave, the same on every replica.
//! - Every replica applies committed entries in log order to its own store
//!   ([`machine::apply_op`]), so queues, offsets, store times and message ids are identical;
//!   consumers may read from any of them.
//! - Offset commits are log entries too ([`machine::Op::Commit`]); a follower forwards a commit
//!   it receives to the leader over the replica port.
//! - The leader registers with the name servers as `brokerId 0`, a follower as its replica id
//!   (as RocketMQ's DLedger mode does); the role is watched from openraft's metrics and every
//!   change re-registers at once. A follower refuses sends with `SERVICE_NOT_AVAILABLE`, and
//!   so does a leader that cannot reach a quorum within [`WRITE_TIMEOUT`]: producers retry
//!   both on another broker.
//!
//! # The replica port
//! Raft's RPCs, forwarded commits and joins travel on each replica's own port ([`net`]), in
//! frames bounded to 1 GiB; with `replica-secret` every connection first proves both ends hold
//! it.
//!
//! # Membership
//! A new replica joins as itself asks ([`net`]'s join: a learner, caught up from the log or an
//! image of the set's state, then a voter in place of the one it replaces); an admin reads a
//! replica's view of the set and removes a replica through the leader ([`admin`]).
//!
//! # What this step does not do yet (README "Replicated broker sets")
//! Half, delayed and timer messages, dead letters and POP state are not replicated: a broker
//! set refuses them rather than hold them on one replica. The Raft log and vote live in process
//! memory: a replica whose process dies must come back empty under a new id.

pub(crate) mod admin;
pub(crate) mod log;
pub(crate) mod machine;
pub(crate) mod net;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft, ServerState, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;

use self::machine::{Machine, Op, OpResult, Payload};
use super::send::{plan_batch, plan_message, Batch, Incoming, SendError, Stored, StoredBatch};
use super::Core;
use crate::sync::{Arc, AtomicBool, Ordering};
use crate::time::now_ms;

openraft::declare_raft_types!(
    /// The types of a broker set's Raft group: entries are [`Op`]s, applying one gives an
    /// [`OpResult`]; node ids are replica ids, a node is its replica port's address.
    pub(crate) TypeConfig: D = Op, R = OpResult
);

/// How long a write waits for the set to hold it before the client is told
/// `SERVICE_NOT_AVAILABLE` (RocketMQ's `slaveTimeout` for a sync master is 3 s too). The entry
/// may still commit later: a producer that retries then stores the message twice, which
/// at-least-once allows.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a write was not held by the set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReplicaError {
    /// This replica is a follower.
    #[error("broker set follower (replica {0}): send to the leader, brokerId 0")]
    NotLeader(u64),
    /// No leader is known (an election, or too few replicas up).
    #[error("the broker set has no leader now (an election is running, or fewer than two of its three replicas are up)")]
    NoLeader,
    /// No quorum held it in time.
    #[error(
        "the broker set did not hold it within {0:?}: fewer than two of its three replicas answer"
    )]
    Timeout(Duration),
    /// Anything else openraft or the replica port reported.
    #[error("replication failed: {0}")]
    Other(String),
}

/// A replica's role and progress, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaFigures {
    /// Its replica id.
    pub(crate) id: u64,
    /// Whether it leads.
    pub(crate) leading: bool,
    /// Its Raft term.
    pub(crate) term: u64,
    /// The index of its last log entry (0: none).
    pub(crate) last_log_index: u64,
    /// The index of the last entry applied to its store (0: none).
    pub(crate) applied_index: u64,
    /// Voters in the membership it knows.
    pub(crate) voters: usize,
}

/// This process's replica of its broker set.
pub(crate) struct Replica {
    id: u64,
    raft: Raft<TypeConfig>,
    leader: AtomicBool,
    /// The connection commits are forwarded over, with the leader it goes to.
    forward: tokio::sync::Mutex<Option<(u64, net::Peer)>>,
    /// How its connections to other replica ports are guarded.
    guard: net::Guard,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("id", &self.id).field("leader", &self.is_leader()).finish()
    }
}

/// openraft's settings for a broker set on one LAN: heartbeats every 100 ms and an election
/// after 600–1200 ms without one, so a lost leader is replaced within about two seconds; a
/// snapshot mark every `snapshot_logs` entries (`replica-snapshot-logs`), with as many entries
/// kept behind it for followers that were briefly away. A replica further behind, or one that
/// joins, gets an image of the set's state taken when it is sent.
fn raft_config(cluster: &str, snapshot_logs: u64) -> Result<openraft::Config, String> {
    openraft::Config {
        cluster_name: cluster.to_owned(),
        heartbeat_interval: 100,
        election_timeout_min: 600,
        election_timeout_max: 1200,
        max_payload_entries: 64,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_logs.max(1)),
        max_in_snapshot_log_to_keep: snapshot_logs,
        ..Default::default()
    }
    .validate()
    .map_err(|e| format!("replica settings: {e}"))
}

impl Replica {
    /// Starts this process's replica: binds its replica port, starts openraft with the set's
    /// membership, and watches its role (re-registering with the name servers on a change).
    ///
    /// # Errors
    /// A message for a replica port that cannot be bound or openraft refusing to start.
    pub(crate) async fn start(
        core: &Arc<Core>,
        id: u64,
        peers: &BTreeMap<u64, String>,
        tls: Option<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector)>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Arc<Replica>, String> {
        let own = peers.get(&id).ok_or_else(|| format!("replica {id} is not in its set"))?;
        let listener = TcpListener::bind(own.as_str())
            .await
            .map_err(|e| format!("replica port {own}: {e}"))?;
        let config =
            Arc::new(raft_config(&core.config.broker_name, core.config.replica_snapshot_logs)?);
        let log = log::LogStore::default();
        let machine = Machine::new(Arc::downgrade(core));
        let (acceptor, connector) = tls.unzip();
        let guard = net::Guard {
            secret: core.config.replica_secret.as_deref().map(Arc::from),
            acceptor,
            connector,
        };
        let network = net::Network { guard: guard.clone() };
        let raft = Raft::new(id, config, network, log, machine)
            .await
            .map_err(|e| format!("replica {id}: {e}"))?;
        tokio::spawn(net::serve(listener, raft.clone(), guard.clone(), shutdown.clone()));
        match core.config.replica_replaces {
            // A replica that joins a running set asks its leader to take it in.
            Some(replaces) => {
                let others: Vec<(u64, String)> =
                    peers.iter().filter(|(i, _)| **i != id).map(|(i, a)| (*i, a.clone())).collect();
                let ask =
                    ask_to_join(id, own.clone(), replaces, others, guard.clone(), shutdown.clone());
                tokio::spawn(ask);
            }
            // A new set: the replica with the lowest id proposes the first membership at once,
            // the others only if it has not reached them within `FIRST_ELECTION` (it is down):
            // all three at once would elect one and hand over to a higher id in the first term,
            // and a client that read the route in between would send to a follower. Where a
            // log exists already, openraft refuses the proposal, which is fine.
            None => {
                let members: BTreeMap<u64, BasicNode> =
                    peers.iter().map(|(i, a)| (*i, BasicNode::new(a))).collect();
                let first = peers.keys().next() == Some(&id);
                let raft = raft.clone();
                let mut stop = shutdown.clone();
                tokio::spawn(async move {
                    if !first {
                        tokio::select! {
                            _ = tokio::time::sleep(FIRST_ELECTION) => {}
                            _ = stop.changed() => return,
                        }
                        if raft.is_initialized().await.unwrap_or(true) {
                            return;
                        }
                    }
                    if let Err(e) = raft.initialize(members).await {
                        tracing::debug!(replica = id, "replica: not initialized again: {e}");
                    }
                });
            }
        }
        let replica = Arc::new(Replica {
            id,
            raft,
            leader: AtomicBool::new(false),
            forward: tokio::sync::Mutex::new(None),
            guard,
        });
        core.set_broker_id(id);
        tokio::spawn(watch_role(Arc::clone(core), Arc::clone(&replica), shutdown));
        tracing::info!(replica = id, port = %own, peers = ?peers, "replica started");
        Ok(replica)
    }

    /// Its role and progress, as openraft last reported them.
    pub(crate) fn figures(&self) -> ReplicaFigures {
        let m = self.raft.metrics().borrow().clone();
        ReplicaFigures {
            id: self.id,
            leading: self.is_leader(),
            term: m.current_term,
            last_log_index: m.last_log_index.unwrap_or(0),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            voters: m.membership_config.membership().voter_ids().count(),
        }
    }

    /// Whether this replica leads its set now.
    pub(crate) fn is_leader(&self) -> bool {
        // Relaxed: a hint for refusing early; openraft decides for real on each write.
        self.leader.load(Ordering::Relaxed)
    }

    /// Proposes `op` here (the leader) and returns what applying it gave.
    async fn propose(&self, op: Op) -> Result<OpResult, ReplicaError> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.raft.client_write(op)).await {
            Err(_) => Err(ReplicaError::Timeout(WRITE_TIMEOUT)),
            Ok(Ok(resp)) => Ok(resp.data),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(if f.leader_id.is_some() {
                    ReplicaError::NotLeader(self.id)
                } else {
                    ReplicaError::NoLeader
                })
            }
            Ok(Err(e)) => Err(ReplicaError::Other(e.to_string())),
        }
    }

    /// Proposes `op` wherever the leader is: here, or forwarded to it over the replica port.
    async fn write_anywhere(&self, op: Op) -> Result<OpResult, ReplicaError> {
        if self.is_leader() {
            return self.propose(op).await;
        }
        let Some(leader) = self.raft.current_leader().await else {
            return Err(ReplicaError::NoLeader);
        };
        if leader == self.id {
            return self.propose(op).await;
        }
        let addr = {
            let m = self.raft.metrics().borrow().membership_config.clone();
            m.membership().get_node(&leader).map(|n| n.addr.clone())
        };
        let Some(addr) = addr else { return Err(ReplicaError::NoLeader) };
        let mut slot = self.forward.lock().await;
        if slot.as_ref().map(|(id, _)| *id) != Some(leader) {
            *slot = Some((leader, net::Peer::new(leader, addr, self.guard.clone())));
        }
        let Some((_, peer)) = slot.as_mut() else { return Err(ReplicaError::NoLeader) };
        match peer.forward(&op, WRITE_TIMEOUT).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(ReplicaError::Other(e)),
            Err(e) => Err(ReplicaError::Other(e.to_string())),
        }
    }

    /// Stores one message through the set (see the module docs).
    ///
    /// # Errors
    /// [`SendError`]: the single broker's refusals, and [`SendError::Unavailable`] on a
    /// follower or without a quorum.
    pub(crate) async fn send(&self, core: &Core, m: &Incoming<'_>) -> Result<Stored, SendError> {
        if !self.is_leader() {
            return Err(SendError::Unavailable(ReplicaError::NotLeader(self.id).to_string()));
        }
        let planned = plan_message(core, m)?;
        let (uid, first) = self.append(core, &planned).await?;
        Ok(planned.stored(core, uid, first))
    }

    /// Stores a batch through the set, all or none.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub(crate) async fn send_batch(
        &self,
        core: &Core,
        b: &Batch<'_>,
    ) -> Result<StoredBatch, SendError> {
        if !self.is_leader() {
            return Err(SendError::Unavailable(ReplicaError::NotLeader(self.id).to_string()));
        }
        let planned = plan_batch(core, b)?;
        let (uid, first) = self.append(core, &planned).await?;
        Ok(planned.stored_batch(core, uid, first))
    }

    async fn append(&self, core: &Core, p: &super::send::Planned) -> Result<(u32, u64), SendError> {
        let name = p.topic.name();
        let perm = core.topics.get_perm_counted(name).map_or(super::topics::perm::RW, |(p, _)| p);
        let op = Op::Append {
            topic: name.to_owned(),
            queues: p.topic.queue_count(),
            perm,
            queue: p.queue,
            store_time: now_ms(),
            records: p.records.iter().map(|(b, t)| (Payload(b.clone()), *t)).collect(),
        };
        match self.propose(op).await {
            Ok(OpResult::Appended { uid, first }) => Ok((uid, first)),
            Ok(OpResult::Refused(why)) => Err(SendError::Unavailable(why)),
            Ok(other) => Err(SendError::Unavailable(format!("an append applied as {other:?}"))),
            Err(e) => Err(SendError::Unavailable(e.to_string())),
        }
    }

    /// Creates (or updates) a topic through the set, from any replica (an admin's
    /// `UPDATE_AND_CREATE_TOPIC`); returns the topic's queue count.
    ///
    /// # Errors
    /// [`ReplicaError`] when the set did not hold it, or `Other` with the store's refusal.
    pub(crate) async fn create_topic(
        &self,
        config: &crate::remoting::body::TopicConfig,
    ) -> Result<u32, ReplicaError> {
        let config =
            serde_json::to_string(config).map_err(|e| ReplicaError::Other(e.to_string()))?;
        match self.write_anywhere(Op::CreateTopic { config }).await? {
            OpResult::Topic { queues } => Ok(queues),
            OpResult::Refused(why) => Err(ReplicaError::Other(why)),
            other => Err(ReplicaError::Other(format!("a topic creation applied as {other:?}"))),
        }
    }

    /// Creates or replaces subscription group configs through the set, all or none, from any
    /// replica (an admin's `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP`).
    ///
    /// # Errors
    /// [`ReplicaError`] when the set did not hold them, or `Other` with the refusal.
    pub(crate) async fn put_groups(
        &self,
        configs: Vec<(String, serde_json::Map<String, serde_json::Value>, usize)>,
    ) -> Result<(), ReplicaError> {
        let mut encoded = Vec::with_capacity(configs.len());
        for (name, config, size) in configs {
            let json =
                serde_json::to_string(&config).map_err(|e| ReplicaError::Other(e.to_string()))?;
            encoded.push((name, json, size as u64));
        }
        match self.write_anywhere(Op::PutGroups { configs: encoded }).await? {
            OpResult::Refused(why) => Err(ReplicaError::Other(why)),
            _ => Ok(()),
        }
    }

    /// Commits a consumer group's offset through the set, from any replica.
    ///
    /// # Errors
    /// [`ReplicaError`] when the set did not hold it.
    pub(crate) async fn commit(
        &self,
        group: &str,
        topic: &str,
        queue: u32,
        offset: u64,
    ) -> Result<(), ReplicaError> {
        let op = Op::Commit { group: group.to_owned(), topic: topic.to_owned(), queue, offset };
        match self.write_anywhere(op).await? {
            OpResult::Refused(why) => Err(ReplicaError::Other(why)),
            _ => Ok(()),
        }
    }
}

/// How long a replica of a new set waits for the lowest id to propose the first membership
/// before it proposes it itself.
const FIRST_ELECTION: Duration = Duration::from_secs(3);

/// How long a joining replica's request may take: the leader answers once it has caught up.
const JOIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Asks each other replica in turn to take this one into the set in place of `replaces` until
/// the leader has (see `net::join`).
async fn ask_to_join(
    id: u64,
    own: String,
    replaces: u64,
    others: Vec<(u64, String)>,
    guard: net::Guard,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut peers: Vec<net::Peer> =
        others.into_iter().map(|(id, a)| net::Peer::new(id, a, guard.clone())).collect();
    loop {
        for peer in &mut peers {
            let asked = tokio::select! {
                r = peer.join(id, &own, replaces, JOIN_TIMEOUT) => r,
                _ = shutdown.changed() => return,
            };
            match asked {
                Ok(Ok(())) => {
                    tracing::info!(replica = id, replaces, "replica: joined the broker set");
                    return;
                }
                Ok(Err(why)) => tracing::debug!(replica = id, "replica: join: {why}"),
                Err(e) => tracing::debug!(replica = id, "replica: join: {e}"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// How often a leader registers again while it leads (besides the registrar's own interval).
const LEADER_REGISTER_EVERY: Duration = Duration::from_secs(2);

/// A leader registers again soon after taking over and then every [`LEADER_REGISTER_EVERY`]
/// while it leads: a leader it deposed may register as `brokerId 0` after it did (a pending
/// registration, or one sent as it wakes from a pause) and then, following, under its own id,
/// which takes `brokerId 0` out of the route (the name server keeps one entry per address);
/// this bounds that gap to two seconds instead of the registration interval (30 s).
async fn register_again(core: Arc<Core>, replica: Arc<Replica>, term: u64) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    // One loop per leadership: a later term (led again after a loss) has its own.
    while replica.is_leader() && replica.raft.metrics().borrow().current_term == term {
        core.topics_changed.send_modify(|v| *v += 1);
        tokio::time::sleep(LEADER_REGISTER_EVERY).await;
    }
}

/// Follows openraft's view of this replica's role: the broker id it registers with (0 leading,
/// its replica id following), and a re-registration at every change.
async fn watch_role(core: Arc<Core>, replica: Arc<Replica>, mut shutdown: watch::Receiver<bool>) {
    let mut metrics = replica.raft.metrics();
    let mut was = None;
    loop {
        let (state, leader, term) = {
            let m = metrics.borrow();
            (m.state, m.current_leader, m.current_term)
        };
        let leading = state == ServerState::Leader;
        if was != Some(leading) {
            // Relaxed: see `is_leader`.
            replica.leader.store(leading, Ordering::Relaxed);
            core.set_broker_id(if leading { 0 } else { replica.id });
            tracing::info!(replica = replica.id, term, leader = ?leader, "replica: {}", if leading { "leading the broker set (brokerId 0)" } else { "following" });
            was = Some(leading);
            if leading {
                tokio::spawn(register_again(Arc::clone(&core), Arc::clone(&replica), term));
            }
        }
        tokio::select! {
            r = metrics.changed() => if r.is_err() { return },
            _ = shutdown.changed() => {
                let _ = replica.raft.shutdown().await;
                return;
            }
        }
    }
}
