//! The replica port: Raft's RPCs between the replicas of a broker set, and writes a follower
//! forwards to the leader.
//!
//! With `replica-secret` set, every connection opens with a mutual challenge (both sides prove
//! they hold the secret, over fresh nonces, before any RPC): a peer without it cannot vote,
//! append or join (RocketMQ's HA port accepts any TCP peer: apache/rocketmq#3015).
//! With `replica-tls` the port speaks TLS only, certificates both ways (the acceptor and
//! connector are built by the broker's security layer and handed in through [`Guard`]); the
//! challenge, where set too, runs inside TLS.
//!
//! One frame per request and per answer: a 4-byte big-endian length (of what follows), one
//! byte of kind, and the body in bincode. A connection carries one request at a time (openraft
//! sends one RPC at a time per peer and purpose, and each client here owns its connection), so
//! an answer needs no id. Frames over [`MAX_FRAME`] are refused before anything is allocated
//! for them, and the connection is closed.

use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::machine::{Op, OpResult};
use super::TypeConfig;
use crate::sync::Arc;

/// The largest frame either side accepts: room for `MAX_ENTRIES_PER_APPEND` entries of the
/// largest message a broker takes (the default 4 MiB) with their headers.
pub(crate) const MAX_FRAME: usize = 1 << 30;

const APPEND: u8 = 1;
const VOTE: u8 = 2;
const SNAPSHOT: u8 = 3;
const FORWARD: u8 = 4;
const JOIN: u8 = 5;
const STATUS: u8 = 6;
const REMOVE: u8 = 7;

/// How long connecting to a peer (and its TLS handshake and challenge) may take before it
/// counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// How a replica port's connections are guarded: TLS with certificates both ways
/// (`replica-tls`) and the secret's challenge (`replica-secret`), each where configured. TLS
/// comes first; the challenge then runs inside it.
#[derive(Clone, Default)]
pub struct Guard {
    pub(crate) secret: Option<Arc<str>>,
    /// The server side of TLS (a replica's own port).
    pub(crate) acceptor: Option<TlsAcceptor>,
    /// The client side of TLS (connections to other replica ports).
    pub(crate) connector: Option<TlsConnector>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("secret", &self.secret.is_some())
            .field("tls", &self.connector.is_some())
            .finish()
    }
}

impl Guard {
    /// A guard for the client side only (`baiji replica`): the secret's challenge if given,
    /// and TLS through `connector` if given.
    pub fn client(secret: Option<&str>, connector: Option<TlsConnector>) -> Guard {
        Guard { secret: secret.map(Arc::from), acceptor: None, connector }
    }
}

/// A connection to or from a replica port, plain or in TLS.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}
type Conn = Box<dyn Stream>;

/// The host part of a replica port's `host:port` address, as a TLS server name.
fn server_name(addr: &str) -> Result<ServerName<'static>, FrameError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| FrameError::Bad(format!("replica address {addr}: not a TLS name: {e}")))
}

/// The first bytes of a challenge (a client that sends anything else to a port with a secret
/// is closed).
const HELLO: &[u8; 4] = b"BJR1";
const NONCE: usize = 16;
const MAC: usize = 20;

type HmacSha1 = hmac::Hmac<sha1::Sha1>;

/// HMAC-SHA1 keyed with the secret over `role`, then `a`, then `b`.
fn mac(secret: &str, role: &[u8], a: &[u8], b: &[u8]) -> Option<HmacSha1> {
    use hmac::{KeyInit, Mac};
    let mut m = <HmacSha1 as KeyInit>::new_from_slice(secret.as_bytes()).ok()?;
    m.update(role);
    m.update(a);
    m.update(b);
    Some(m)
}

fn tag(secret: &str, role: &[u8], a: &[u8], b: &[u8]) -> [u8; MAC] {
    use hmac::Mac;
    let mut out = [0u8; MAC];
    if let Some(m) = mac(secret, role, a, b) {
        out.copy_from_slice(&m.finalize().into_bytes());
    }
    out
}

/// Whether `given` is the tag of `role`, `a`, `b` (in constant time).
fn verify(secret: &str, role: &[u8], a: &[u8], b: &[u8], given: &[u8]) -> bool {
    use hmac::Mac;
    mac(secret, role, a, b).is_some_and(|m| m.verify_slice(given).is_ok())
}

/// Fresh random bytes for a challenge, from the kernel.
fn nonce() -> Result<[u8; NONCE], FrameError> {
    use std::io::Read;
    let mut n = [0u8; NONCE];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut n))?;
    Ok(n)
}

/// The server's side of the challenge.
async fn challenged<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &str,
) -> Result<(), FrameError> {
    let mut hello = [0u8; 4 + NONCE];
    s.read_exact(&mut hello).await?;
    if &hello[..4] != HELLO {
        return Err(FrameError::Bad("a connection without the replica challenge".into()));
    }
    let theirs = &hello[4..];
    let ours = nonce()?;
    let mut answer = [0u8; NONCE + MAC];
    answer[..NONCE].copy_from_slice(&ours);
    answer[NONCE..].copy_from_slice(&tag(secret, b"server", theirs, &ours));
    s.write_all(&answer).await?;
    let mut proof = [0u8; MAC];
    s.read_exact(&mut proof).await?;
    if !verify(secret, b"client", &ours, theirs, &proof) {
        return Err(FrameError::Bad("a peer that does not hold the replica secret".into()));
    }
    Ok(())
}

/// The client's side of the challenge.
async fn challenge<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &str,
) -> Result<(), FrameError> {
    let ours = nonce()?;
    let mut hello = [0u8; 4 + NONCE];
    hello[..4].copy_from_slice(HELLO);
    hello[4..].copy_from_slice(&ours);
    s.write_all(&hello).await?;
    let mut answer = [0u8; NONCE + MAC];
    s.read_exact(&mut answer).await?;
    let (theirs, proof) = answer.split_at(NONCE);
    if !verify(secret, b"server", &ours, theirs, proof) {
        return Err(FrameError::Bad("a replica port that does not hold the replica secret".into()));
    }
    s.write_all(&tag(secret, b"client", theirs, &ours)).await?;
    Ok(())
}

/// Why a frame could not be exchanged.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The connection failed or closed.
    #[error("replica connection: {0}")]
    Io(#[from] std::io::Error),
    /// A frame that is not one of ours.
    #[error("replica connection: {0}")]
    Bad(String),
    /// The peer did not answer in time.
    #[error("replica connection: no answer within {0:?}")]
    Timeout(Duration),
}

async fn write_frame<S: AsyncWrite + Unpin>(
    s: &mut S,
    kind: u8,
    body: &[u8],
) -> Result<(), FrameError> {
    let len = u32::try_from(body.len() + 1)
        .ok()
        .filter(|l| (*l as usize) <= MAX_FRAME)
        .ok_or_else(|| FrameError::Bad(format!("a frame of {} bytes is too large", body.len())))?;
    let mut head = [0u8; 5];
    head[..4].copy_from_slice(&len.to_be_bytes());
    head[4] = kind;
    s.write_all(&head).await?;
    s.write_all(body).await?;
    Ok(())
}

async fn read_frame<S: AsyncRead + Unpin>(s: &mut S) -> Result<(u8, Vec<u8>), FrameError> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(FrameError::Bad(format!("a frame length of {len} bytes")));
    }
    let mut body = vec![0u8; len - 1];
    s.read_exact(&mut body).await?;
    Ok((head[4], body))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, FrameError> {
    bincode::serialize(v).map_err(|e| FrameError::Bad(format!("encoding: {e}")))
}

fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, FrameError> {
    bincode::deserialize(b).map_err(|e| FrameError::Bad(format!("decoding: {e}")))
}

/// Serves the replica port until shutdown: each connection's requests in order.
pub(crate) async fn serve(
    listener: TcpListener,
    raft: Raft<TypeConfig>,
    guard: Guard,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                let raft = raft.clone();
                let mut stop = shutdown.clone();
                let guard = guard.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        r = serve_connection(stream, raft, guard) => {
                            if let Err(e) = r {
                                if !matches!(&e, FrameError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof) {
                                    tracing::debug!(%peer, "replica port: {e}");
                                }
                            }
                        }
                        _ = stop.changed() => {}
                    }
                });
            }
            Err(e) => {
                tracing::warn!("replica port: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The server's side of a new connection: the TLS handshake and the challenge, as `guard`
/// asks.
async fn admit(s: TcpStream, guard: &Guard) -> Result<Conn, FrameError> {
    let mut s: Conn = match &guard.acceptor {
        Some(tls) => Box::new(tls.accept(s).await?),
        None => Box::new(s),
    };
    if let Some(secret) = &guard.secret {
        challenged(&mut s, secret).await?;
    }
    Ok(s)
}

async fn serve_connection(
    s: TcpStream,
    raft: Raft<TypeConfig>,
    guard: Guard,
) -> Result<(), FrameError> {
    let mut s = match tokio::time::timeout(CONNECT_TIMEOUT, admit(s, &guard)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!("replica port: refused a connection: {e}");
            return Ok(());
        }
        Err(_) => return Err(FrameError::Timeout(CONNECT_TIMEOUT)),
    };
    loop {
        let (kind, body) = read_frame(&mut s).await?;
        let answer = match kind {
            APPEND => encode(&raft.append_entries(decode(&body)?).await)?,
            VOTE => encode(&raft.vote(decode(&body)?).await)?,
            SNAPSHOT => encode(&raft.install_snapshot(decode(&body)?).await)?,
            FORWARD => {
                let op: Op = decode(&body)?;
                let r: Result<OpResult, String> = match raft.client_write(op).await {
                    Ok(resp) => Ok(resp.data),
                    Err(e) => Err(e.to_string()),
                };
                encode(&r)?
            }
            JOIN => {
                let (id, addr, replaces): (u64, String, u64) = decode(&body)?;
                encode(&join(&raft, id, addr, replaces).await)?
            }
            STATUS => encode(&super::admin::status_of(&raft))?,
            REMOVE => {
                let id: u64 = decode(&body)?;
                encode(&super::admin::remove_here(&raft, id).await)?
            }
            other => return Err(FrameError::Bad(format!("unknown request kind {other}"))),
        };
        write_frame(&mut s, kind, &answer).await?;
    }
}

/// Takes replica `id` at `addr` into the set in place of voter `replaces`, if this replica
/// leads: first as a learner, answered once it has caught up (from the log, or a snapshot of
/// the set's state), then as a voter in a membership without `replaces`.
async fn join(raft: &Raft<TypeConfig>, id: u64, addr: String, replaces: u64) -> Result<(), String> {
    let own = raft.metrics().borrow().id;
    if raft.current_leader().await != Some(own) {
        return Err(format!("replica {own} does not lead the set"));
    }
    tracing::info!(replica = id, %addr, replaces, "replica: a replica joins; catching it up as a learner");
    raft.add_learner(id, BasicNode::new(&addr), true).await.map_err(|e| e.to_string())?;
    let voters: std::collections::BTreeSet<u64> = {
        let m = raft.metrics().borrow().membership_config.clone();
        m.membership().voter_ids().filter(|v| *v != replaces).chain([id]).collect()
    };
    raft.change_membership(voters.clone(), false).await.map_err(|e| e.to_string())?;
    tracing::info!(replica = id, replaces, ?voters, "replica: joined as a voter");
    Ok(())
}

/// A client of one peer's replica port: connects when first used and again after a failure.
pub(crate) struct Peer {
    /// Its replica id (named in the remote errors it returns).
    target: u64,
    addr: String,
    guard: Guard,
    conn: Option<Conn>,
}

impl Peer {
    pub(crate) fn new(target: u64, addr: String, guard: Guard) -> Self {
        Peer { target, addr, guard, conn: None }
    }

    /// Sends one request and waits for its answer, for at most `timeout`.
    pub(crate) async fn call<Q: Serialize, A: DeserializeOwned>(
        &mut self,
        kind: u8,
        req: &Q,
        timeout: Duration,
    ) -> Result<A, FrameError> {
        let body = encode(req)?;
        let r = tokio::time::timeout(timeout, self.exchange(kind, &body)).await;
        let r = match r {
            Ok(r) => r,
            Err(_) => Err(FrameError::Timeout(timeout)),
        };
        match r {
            Ok(answer) => decode(&answer),
            Err(e) => {
                // Whatever was half sent or half read, the connection cannot be reused.
                self.conn = None;
                Err(e)
            }
        }
    }

    async fn exchange(&mut self, kind: u8, body: &[u8]) -> Result<Vec<u8>, FrameError> {
        if self.conn.is_none() {
            let connect = async {
                let s = TcpStream::connect(self.addr.as_str()).await?;
                let _ = s.set_nodelay(true);
                let mut s: Conn = match &self.guard.connector {
                    Some(tls) => Box::new(tls.connect(server_name(&self.addr)?, s).await?),
                    None => Box::new(s),
                };
                if let Some(secret) = &self.guard.secret {
                    challenge(&mut s, secret).await?;
                }
                Ok::<_, FrameError>(s)
            };
            let s = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .map_err(|_| FrameError::Timeout(CONNECT_TIMEOUT))??;
            self.conn = Some(s);
        }
        let Some(s) = self.conn.as_mut() else {
            return Err(FrameError::Bad("not connected".into()));
        };
        write_frame(s, kind, body).await?;
        let (got, answer) = read_frame(s).await?;
        if got != kind {
            return Err(FrameError::Bad(format!("answer of kind {got} to a request of {kind}")));
        }
        Ok(answer)
    }

    /// Asks this peer to take replica `id` at `addr` into the set in place of `replaces`
    /// (only the leader does: see `join`).
    pub(crate) async fn join(
        &mut self,
        id: u64,
        addr: &str,
        replaces: u64,
        timeout: Duration,
    ) -> Result<Result<(), String>, FrameError> {
        self.call(JOIN, &(id, addr.to_owned(), replaces), timeout).await
    }

    /// Asks this peer what it knows of its set.
    pub(crate) async fn status(
        &mut self,
        timeout: Duration,
    ) -> Result<super::admin::ReplicaStatus, FrameError> {
        self.call(STATUS, &(), timeout).await
    }

    /// Asks this peer (the leader) to take replica `id` out of the set; answers the voters left.
    pub(crate) async fn remove(
        &mut self,
        id: u64,
        timeout: Duration,
    ) -> Result<Result<Vec<u64>, String>, FrameError> {
        self.call(REMOVE, &id, timeout).await
    }

    /// Forwards a write to this peer (the leader) and returns what applying it gave.
    pub(crate) async fn forward(
        &mut self,
        op: &Op,
        timeout: Duration,
    ) -> Result<Result<OpResult, String>, FrameError> {
        self.call(FORWARD, op, timeout).await
    }
}

fn rpc_error<E: std::error::Error>(e: FrameError) -> RPCError<u64, BasicNode, E> {
    match e {
        FrameError::Io(io) => RPCError::Unreachable(Unreachable::new(&io)),
        other => RPCError::Network(NetworkError::new(&other)),
    }
}

/// Makes openraft's per-peer clients (guarded as the replica port is).
#[derive(Debug, Clone, Default)]
pub(crate) struct Network {
    pub(crate) guard: Guard,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Peer {
        Peer::new(target, node.addr.clone(), self.guard.clone())
    }
}

impl Peer {
    /// One Raft RPC: the peer answers `Result<A, RaftError<u64, E>>`; its error comes back as
    /// openraft's remote error of node `target`, a failed exchange as unreachable or network.
    async fn raft_rpc<Q, A, E>(
        &mut self,
        kind: u8,
        req: &Q,
        option: RPCOption,
    ) -> Result<A, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Q: Serialize,
        A: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let r: Result<A, RaftError<u64, E>> =
            self.call(kind, req, option.hard_ttl()).await.map_err(rpc_error)?;
        r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.raft_rpc(APPEND, &rpc, option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.raft_rpc(SNAPSHOT, &rpc, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.raft_rpc(VOTE, &rpc, option).await
    }
}

#[cfg(test)]
mod tests {
    use super::{challenge, challenged};
    use tokio::net::{TcpListener, TcpStream};

    /// Runs the challenge between a server holding `server` and a client holding `client`;
    /// what each side concluded.
    async fn run(server: &str, client: &str) -> (bool, bool) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let server = server.to_owned();
        let s = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            challenged(&mut s, &server).await.is_ok()
        });
        let mut c = TcpStream::connect(addr).await.expect("connect");
        let c_ok = challenge(&mut c, client).await.is_ok();
        drop(c);
        (s.await.expect("server side"), c_ok)
    }

    #[tokio::test]
    async fn given_the_replica_secret_when_connecting_should_pass_both_sides_and_refuse_a_wrong_one(
    ) {
        assert_eq!(run("s3cret", "s3cret").await, (true, true), "the same secret: both pass");
        let (server, client) = run("s3cret", "guess").await;
        assert!(!client, "the client finds the port does not hold its secret");
        assert!(!server, "the server refuses a client without its secret");
    }

    #[tokio::test]
    async fn given_a_port_with_a_secret_when_a_peer_sends_a_frame_without_the_challenge_should_refuse_it(
    ) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let s = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.expect("accept");
            challenged(&mut s, "s3cret").await.is_ok()
        });
        let mut c = TcpStream::connect(addr).await.expect("connect");
        // A vote request as a peer without the secret would frame it.
        let mut frame = vec![0, 0, 0, 17, 2];
        frame.extend_from_slice(&[0u8; 16]);
        tokio::io::AsyncWriteExt::write_all(&mut c, &frame).await.expect("write");
        assert!(!s.await.expect("server side"), "refused before any RPC");
    }
}
