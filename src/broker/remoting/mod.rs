//! The remoting face: RocketMQ's remoting protocol over the [core](crate::broker::core).
//!
//! One task per connection ([`server`]) reads frames and answers each request through one
//! code → processor table ([`table`]); most requests are answered inline, a pull or pop that
//! must wait (long polling) moves to its own task and answers later through the connection's
//! outgoing channel, so responses may leave out of order, matched by `opaque`. The processors
//! ([`processor`], one file per RocketMQ request family, and [`namesrv`] for the name server's
//! codes) turn requests into calls on the core and the core's answers and error enums into
//! RocketMQ's response codes and remarks. The [`registrar`] keeps the broker registered with
//! external name servers.
//!
//! What only this face keeps is in [`RemotingState`]: the ACL, the `SET_MESSAGE_REQUEST_MODE`
//! table, the RPC latencies, its connections' outgoing channels and its counters.

pub(crate) mod acl;
pub(crate) mod config;
pub(crate) mod namesrv;
pub(crate) mod processor;
pub(crate) mod registrar;
pub(crate) mod rpc;
pub(crate) mod server;
pub(crate) mod table;
pub(crate) mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch};

use crate::broker::core::clients::{ClientNotify, ConnId};
use crate::broker::security::acl::Acl;
use crate::broker::security::config::SecurityConfig;
use crate::remoting::body::JsonBody;
use crate::remoting::code::{request_code, response_code};
use crate::remoting::{ExtFields, RemotingCommand};
use crate::sync::{lock, read, write, Arc, AtomicU32, AtomicU64, Mutex, Ordering, RwLock};

/// What the connection task sends on a connection's outgoing channel.
pub(crate) type Outgoing = RemotingCommand;

/// The connection a request arrived on.
#[derive(Debug, Clone)]
pub(crate) struct ConnCtx {
    pub(crate) id: ConnId,
    pub(crate) peer: SocketAddr,
    /// Responses that complete later, and broker → client requests. Bounded: a suspended pull
    /// reserves its slot before it waits; notifications that find it full are dropped.
    pub(crate) tx: mpsc::Sender<Outgoing>,
    /// Fires when the broker shuts down (long polls answer at once).
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Permits for suspended pulls (`max-suspended-pulls-per-connection`).
    pub(crate) suspended: Arc<tokio::sync::Semaphore>,
}

/// What a processor did with a request.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Send this response now (boxed: responses are large, results carrying them should not be).
    Now(Box<RemotingCommand>),
    /// No response (one-way request, or one a spawned task will send).
    Nothing,
}

impl Reply {
    /// A response to send now.
    pub(crate) fn now(cmd: RemotingCommand) -> Reply {
        Reply::Now(Box::new(cmd))
    }
}

/// A success response carrying `ext`.
pub(crate) fn ok(req: &RemotingCommand, ext: ExtFields) -> RemotingCommand {
    RemotingCommand::response_to(req, response_code::SUCCESS, None).with_ext_fields(ext)
}

/// A success response carrying `body` as JSON, or `SYSTEM_ERROR` if it cannot be written.
pub(crate) fn json_reply(req: &RemotingCommand, body: &impl JsonBody) -> Reply {
    match body.to_json_bytes() {
        Ok(b) => Reply::now(ok(req, ExtFields::new()).with_body(b)),
        Err(e) => reply_error(req, response_code::SYSTEM_ERROR, e.to_string()),
    }
}

/// An error response with RocketMQ's code and a remark saying what was wrong.
pub(crate) fn reply_error(req: &RemotingCommand, code: i32, remark: String) -> Reply {
    Reply::now(RemotingCommand::response_to(req, code, Some(remark)))
}

/// Counters of what the remoting face did that neither the core nor the store sees.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// One-way sends refused (they cannot be told): nothing disappears uncounted.
    pub(crate) oneway_rejected: AtomicU64,
    /// Frames that could not be parsed (their connection was closed) or whose header was
    /// refused (answered with an error).
    pub(crate) bad_frames: AtomicU64,
    /// Connections closed on accept because `max-connections` were open, or because their
    /// first byte was plaintext under `tls-mode` enforcing (under `disabled` nothing is
    /// sniffed: a TLS handshake is a bad frame there).
    pub(crate) connections_refused: AtomicU64,
    /// Times a connection stopped reading because its unwritten answers reached
    /// `write-buffer-high-water-mark`.
    pub(crate) reads_paused: AtomicU64,
    /// The most bytes one connection has had queued for writing.
    pub(crate) max_queued_write_bytes: AtomicU64,
}

impl Counters {
    /// A statistic's value now.
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        // Relaxed: a statistic, read on its own.
        c.load(Ordering::Relaxed)
    }
}

/// The remoting face's own state (its listeners share it: the broker port and the embedded
/// name server's).
#[derive(Debug)]
pub(crate) struct RemotingState {
    /// This face's settings.
    pub(crate) config: config::RemotingConfig,
    /// The security settings its ports apply.
    pub(crate) security: SecurityConfig,
    /// The ACL (`acl-file`); `None`: every request is served, as without ACL.
    pub(crate) acl: Option<Arc<Acl>>,
    /// `SET_MESSAGE_REQUEST_MODE` data, for `QUERY_ASSIGNMENT`.
    pub(crate) request_modes: processor::pop::RequestModes,
    /// `rocketmq_rpc_latency` (the metrics endpoint).
    pub(crate) rpc: rpc::RpcLatency,
    pub(crate) counters: Counters,
    /// The fast (VIP) port as bound at start (`None`: turned off, or its port was taken);
    /// `GET_BROKER_CONFIG` reports it as `fastListenPort`.
    pub(crate) fast_port: Option<u16>,
    next_opaque: AtomicU32,
    /// The outgoing channel of every open connection, for the requests the broker sends on
    /// its own (`NOTIFY_CONSUMER_IDS_CHANGED`, `CHECK_TRANSACTION_STATE`,
    /// `RESET_CONSUMER_CLIENT_OFFSET`).
    links: RwLock<HashMap<ConnId, mpsc::Sender<Outgoing>>>,
    /// Broker → client requests whose answers someone waits for (`PUSH_REPLY_MESSAGE_TO_CLIENT`),
    /// by opaque: the connection the request went to, and where its answer goes.
    calls: Mutex<HashMap<i32, (ConnId, oneshot::Sender<RemotingCommand>)>>,
}

/// Why a broker → client request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) enum CallError {
    /// The connection is closed, or its outgoing channel is full (it does not read).
    #[error("the client's connection is closed or not reading")]
    Unreachable,
    /// No answer came within the time allowed.
    #[error("the client did not answer within {0:?}")]
    TimedOut(Duration),
}

/// A broker → client request sent, waiting for its answer; dropping it forgets the request (a
/// late answer is then ignored).
#[derive(Debug)]
pub(crate) struct PendingCall {
    face: Arc<RemotingState>,
    opaque: i32,
    answer: oneshot::Receiver<RemotingCommand>,
}

impl PendingCall {
    /// The client's answer, waited for at most `within`.
    ///
    /// # Errors
    /// [`CallError`]: the connection closed first, or the time ran out.
    pub(crate) async fn answer(&mut self, within: Duration) -> Result<RemotingCommand, CallError> {
        match tokio::time::timeout(within, &mut self.answer).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(_)) => Err(CallError::Unreachable),
            Err(_) => Err(CallError::TimedOut(within)),
        }
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        lock(&self.face.calls).remove(&self.opaque);
    }
}

impl RemotingState {
    /// The state of a remoting face with `config`, `security` and the ACL it loaded.
    pub(crate) fn new(
        config: config::RemotingConfig,
        security: SecurityConfig,
        acl: Option<Arc<Acl>>,
    ) -> Self {
        RemotingState {
            config,
            security,
            acl,
            request_modes: processor::pop::RequestModes::default(),
            rpc: rpc::RpcLatency::default(),
            counters: Counters::default(),
            fast_port: None,
            next_opaque: AtomicU32::new(1),
            links: RwLock::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
        }
    }

    /// An id for a request the broker sends.
    pub(crate) fn next_opaque(&self) -> i32 {
        // Relaxed: request ids only need to differ.
        self.next_opaque.fetch_add(1, Ordering::Relaxed) as i32
    }

    /// Notes an open connection's outgoing channel.
    pub(crate) fn link(&self, id: ConnId, tx: mpsc::Sender<Outgoing>) {
        write(&self.links).insert(id, tx);
    }

    /// Forgets a closed connection's channel; requests it was sent get no answer now.
    pub(crate) fn unlink(&self, id: ConnId) {
        write(&self.links).remove(&id);
        lock(&self.calls).retain(|_, (conn, _)| *conn != id);
    }

    /// Sends `cmd` (a request, given a fresh opaque here) to connection `conn` and returns the
    /// call waiting for its answer (RocketMQ's `invokeSync` on a client's channel).
    ///
    /// # Errors
    /// [`CallError::Unreachable`] when the connection is closed or its channel is full.
    pub(crate) fn call(
        self: &Arc<Self>,
        conn: ConnId,
        mut cmd: RemotingCommand,
    ) -> Result<PendingCall, CallError> {
        let tx = self.channel(conn).ok_or(CallError::Unreachable)?;
        cmd.opaque = self.next_opaque();
        let (answer_tx, answer) = oneshot::channel();
        lock(&self.calls).insert(cmd.opaque, (conn, answer_tx));
        // Registered before it is sent: the answer cannot come first. The guard forgets it on
        // every path out, this one included.
        let call = PendingCall { face: Arc::clone(self), opaque: cmd.opaque, answer };
        tx.try_send(cmd).map_err(|_| CallError::Unreachable)?;
        Ok(call)
    }

    /// A response that connection `conn` sent: the answer to the call with its opaque, if that
    /// call went to `conn` (another connection cannot answer it) and still waits.
    pub(crate) fn answered(&self, conn: ConnId, resp: RemotingCommand) {
        let mut calls = lock(&self.calls);
        if calls.get(&resp.opaque).is_some_and(|(to, _)| *to == conn) {
            if let Some((_, tx)) = calls.remove(&resp.opaque) {
                drop(calls);
                let _ = tx.send(resp);
            }
        }
    }

    /// The outgoing channel of connection `id`, while it is open.
    pub(crate) fn channel(&self, id: ConnId) -> Option<mpsc::Sender<Outgoing>> {
        read(&self.links).get(&id).cloned()
    }
}

impl ClientNotify for RemotingState {
    fn members_changed(&self, group: &str, conns: &[ConnId]) {
        for tx in conns.iter().filter_map(|c| self.channel(*c)) {
            let mut ext = ExtFields::new();
            ext.insert("consumerGroup", group);
            let cmd = RemotingCommand::oneway_request(
                request_code::NOTIFY_CONSUMER_IDS_CHANGED,
                self.next_opaque(),
            )
            .with_ext_fields(ext);
            // A connection whose channel is full (it does not read) misses this hint; its
            // client rebalances on its own timer as well.
            let _ = tx.try_send(cmd);
        }
    }
}
