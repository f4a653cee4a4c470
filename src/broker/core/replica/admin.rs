//! Membership of a broker set from outside (`baiji replica status|remove`): any replica's port
//! answers what it knows of the set; the leader takes a replica out.
//!
//! Adding a replica is the joining process's own request (`replica-replaces`): it asks the
//! leader to catch it up and to make it a voter in place of the one it replaces.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::{ChangeMembers, Raft, ServerState};
use serde::{Deserialize, Serialize};

use super::net::{FrameError, Guard, Peer};
use super::TypeConfig;

/// How long one admin request may wait for its answer (a removal waits for the set to hold
/// the new membership).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What one replica knows of its broker set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaStatus {
    /// The answering replica's id.
    pub id: u64,
    /// Its role: `Leader`, `Follower`, `Candidate` or `Learner`.
    pub role: String,
    /// The leader it knows, if any.
    pub leader: Option<u64>,
    /// Its Raft term.
    pub term: u64,
    /// The index of its last log entry (0: none).
    pub last_log_index: u64,
    /// The index of the last entry applied to its store (0: none).
    pub applied_index: u64,
    /// The voters, with their replica ports' addresses.
    pub voters: Vec<(u64, String)>,
    /// Replicas being caught up before they become voters.
    pub learners: Vec<(u64, String)>,
}

/// Why an admin request failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaAdminError {
    /// The replica port could not be reached or answered something else.
    #[error("{addr}: {source}")]
    Port {
        /// The replica port asked.
        addr: String,
        /// What failed.
        #[source]
        source: FrameError,
    },
    /// The set refused the request (with its reason).
    #[error("refused: {0}")]
    Refused(String),
}

/// What replica `raft` knows of its set.
pub(crate) fn status_of(raft: &Raft<TypeConfig>) -> ReplicaStatus {
    let m = raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voter_ids: BTreeSet<u64> = membership.voter_ids().collect();
    let (mut voters, mut learners) = (Vec::new(), Vec::new());
    for (id, node) in membership.nodes() {
        let entry = (*id, node.addr.clone());
        if voter_ids.contains(id) {
            voters.push(entry);
        } else {
            learners.push(entry);
        }
    }
    ReplicaStatus {
        id: m.id,
        role: match m.state {
            ServerState::Leader => "Leader",
            ServerState::Follower => "Follower",
            ServerState::Candidate => "Candidate",
            ServerState::Learner => "Learner",
            ServerState::Shutdown => "Shutdown",
        }
        .to_owned(),
        leader: m.current_leader,
        term: m.current_term,
        last_log_index: m.last_log_index.unwrap_or(0),
        applied_index: m.last_applied.map_or(0, |l| l.index),
        voters,
        learners,
    }
}

/// Takes replica `id` out of the set, if this replica leads: a voter leaves the voters (a set
/// of three then needs both others for a quorum), a learner is dropped. A leader that removes
/// itself steps down once the new membership is held. Answers the voters left.
pub(crate) async fn remove_here(raft: &Raft<TypeConfig>, id: u64) -> Result<Vec<u64>, String> {
    let status = status_of(raft);
    if status.leader != Some(status.id) {
        return Err(format!("replica {} does not lead the set", status.id));
    }
    let is_voter = status.voters.iter().any(|(v, _)| *v == id);
    let is_learner = status.learners.iter().any(|(l, _)| *l == id);
    if !is_voter && !is_learner {
        let known: Vec<u64> =
            status.voters.iter().chain(&status.learners).map(|(i, _)| *i).collect();
        return Err(format!("replica {id} is not in the set (its replicas: {known:?})"));
    }
    if is_voter && status.voters.len() == 1 {
        return Err(format!("replica {id} is the set's last voter"));
    }
    let ids = BTreeSet::from([id]);
    let change =
        if is_voter { ChangeMembers::RemoveVoters(ids) } else { ChangeMembers::RemoveNodes(ids) };
    let r = raft.change_membership(change, false).await.map_err(|e| e.to_string())?;
    tracing::info!(replica = id, "replica: removed from the broker set by an admin");
    let voters = r
        .membership
        .as_ref()
        .map(|m| m.voter_ids().collect())
        .unwrap_or_else(|| status_of(raft).voters.iter().map(|(v, _)| *v).collect());
    Ok(voters)
}

/// Asks the replica port at `addr` what it knows of its set, through `guard` (the set's secret
/// and TLS, where its ports check them).
///
/// # Errors
/// [`ReplicaAdminError::Port`] when the port cannot be reached, refuses the secret or answers
/// something that is not a status.
pub async fn status(addr: &str, guard: &Guard) -> Result<ReplicaStatus, ReplicaAdminError> {
    let mut peer = Peer::new(0, addr.to_owned(), guard.clone());
    peer.status(ADMIN_TIMEOUT)
        .await
        .map_err(|source| ReplicaAdminError::Port { addr: addr.to_owned(), source })
}

/// Takes replica `id` out of the set the replica port at `addr` belongs to: asks that port for
/// the leader and the leader to remove it. Returns the voters left.
///
/// # Errors
/// [`ReplicaAdminError::Port`] when a port cannot be reached; [`ReplicaAdminError::Refused`]
/// when the set has no leader now, `id` is not one of its replicas, or it is the last voter.
pub async fn remove(addr: &str, guard: &Guard, id: u64) -> Result<Vec<u64>, ReplicaAdminError> {
    let known = status(addr, guard).await?;
    let Some(leader) = known.leader else {
        return Err(ReplicaAdminError::Refused(
            "the set has no leader now (an election is running, or too few replicas are up)".into(),
        ));
    };
    let leader_addr =
        known.voters.iter().find(|(v, _)| *v == leader).map(|(_, a)| a.clone()).ok_or_else(
            || ReplicaAdminError::Refused(format!("the leader {leader} is not among the voters")),
        )?;
    let mut peer = Peer::new(leader, leader_addr.clone(), guard.clone());
    match peer.remove(id, ADMIN_TIMEOUT).await {
        Ok(Ok(voters)) => Ok(voters),
        Ok(Err(why)) => Err(ReplicaAdminError::Refused(why)),
        Err(source) => Err(ReplicaAdminError::Port { addr: leader_addr, source }),
    }
}
