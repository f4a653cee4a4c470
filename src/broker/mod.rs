//! The broker: a tokio server speaking RocketMQ's remoting protocol over the [`store`]
//! traits, with an embedded name server.
//!
//! One task per connection reads frames and answers each request through one code → processor
//! table ([`table`]); most requests are answered inline, a pull that must wait (long polling)
//! moves to its own task and answers later through the connection's outgoing channel, so
//! responses may leave out of order, matched by `opaque`. The broker depends on the store
//! traits only, never on the engine: the engine's configuration types it reads from its config
//! file come through `store`'s re-exports, and only the composition root ([`start`], which
//! builds the `MemoryStore`) chooses the concrete store.
//!
//! [`store`]: crate::store

pub mod acl;
mod config;
pub(crate) mod core;
#[cfg(feature = "grpc")]
pub(crate) mod grpc;
pub(crate) mod metrics;
pub(crate) mod remoting;
mod tls;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use thiserror::Error;
use tokio::sync::{mpsc, watch};

pub use self::core::transaction::TransactionStats;
pub use config::BrokerConfig;
pub use tls::{ClientAuth, TlsMode};

use crate::remoting::body::TopicConfig;
use crate::remoting::code::response_code;
use crate::remoting::msgid::UniqKeyGenerator;
use crate::remoting::{ExtFields, RemotingCommand};
use crate::store::{MemoryStore, Store, StoreError};

/// Why the broker could not start or stopped.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// A configuration value is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// Binding or serving failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store could not be created.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// Identifies one client connection.
pub(crate) type ConnId = u64;

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

/// An error response with RocketMQ's code and a remark saying what was wrong.
pub(crate) fn reply_error(req: &RemotingCommand, code: i32, remark: String) -> Reply {
    Reply::now(RemotingCommand::response_to(req, code, Some(remark)))
}

/// Counters of what the broker did that the store does not see.
#[derive(Debug, Default)]
pub(crate) struct BrokerCounters {
    /// One-way sends refused (they cannot be told): nothing disappears uncounted.
    pub(crate) oneway_rejected: AtomicU64,
    /// Sends refused for lack of memory (answered with SYSTEM_BUSY).
    pub(crate) sends_rejected: AtomicU64,
    /// Frames that could not be parsed (their connection was closed) or whose header was
    /// refused (answered with an error).
    pub(crate) bad_frames: AtomicU64,
    /// Stored records a read could not write out and stepped over (never for a record the
    /// broker built itself; a read never stalls on one).
    pub(crate) records_skipped: AtomicU64,
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

/// State shared by every connection and task of one broker (or standalone name server).
pub(crate) struct Shared {
    pub(crate) config: BrokerConfig,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) topics: self::core::topics::TopicTable,
    pub(crate) clients: self::core::clients::ClientRegistry,
    pub(crate) locks: self::core::locks::LockManager,
    pub(crate) scheduler: self::core::delay::Scheduler,
    pub(crate) transactions: self::core::transaction::Transactions,
    pub(crate) timers: self::core::timer::Timers,
    pub(crate) routes: remoting::namesrv::RouteTable,
    /// The address clients reach this broker at (routes, message ids).
    pub(crate) store_host: SocketAddr,
    /// The address clients reach this broker's gRPC port at (`None`: no gRPC port); reported
    /// to peers as `grpcServerPort` in GET_BROKER_CONFIG, from which baiji brokers of one
    /// cluster learn each other's gRPC endpoints for `QueryRoute`.
    pub(crate) grpc_endpoint: Option<SocketAddr>,
    pub(crate) counters: BrokerCounters,
    /// `rocketmq_rpc_latency` (the metrics endpoint).
    pub(crate) rpc: metrics::RpcLatency,
    /// Sampled message rates (admin codes).
    pub(crate) rates: self::core::rates::Rates,
    /// Subscription-group configs admins created.
    pub(crate) groups: remoting::processor::group::SubscriptionGroups,
    /// When the broker started, ms since the Unix epoch.
    pub(crate) boot_ms: u64,
    pub(crate) uniq: Mutex<UniqKeyGenerator>,
    /// `CLUSTER` property appended to every message read out.
    pub(crate) cluster_property: Vec<u8>,
    next_opaque: AtomicI32,
    /// Tells the registrar that topics changed.
    pub(crate) topics_changed: watch::Sender<u64>,
    /// Bumped when a popped message may have become visible again without an append (a change
    /// of invisible time, an ack that unblocks an ordered queue): parked pops look again.
    pub(crate) pop_changes: watch::Sender<u64>,
    /// The ACL (`acl-file`); `None`: every request is served, as without ACL.
    pub(crate) acl: Option<acl::Acl>,
    /// `SET_MESSAGE_REQUEST_MODE` data, for `QUERY_ASSIGNMENT`.
    pub(crate) request_modes: remoting::processor::pop::RequestModes,
    /// The gRPC face's clients (Settings, Telemetry streams), keyed by client id; the
    /// transaction checker reaches gRPC producers through it.
    #[cfg(feature = "grpc")]
    pub(crate) grpc_sessions: crate::broker::grpc::session::Sessions,
    /// `auto_renew` deliveries of gRPC consumers, renewed per client id.
    #[cfg(feature = "grpc")]
    pub(crate) renewals: grpc::receipt::Renewals,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("store_host", &self.store_host).finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn next_opaque(&self) -> i32 {
        // Relaxed: request ids only need to differ.
        self.next_opaque.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn new_uniq_key(&self) -> String {
        let now = crate::time::now_ms() as i64;
        self.uniq.lock().unwrap_or_else(|p| p.into_inner()).next_key(now)
    }

    /// Publishes this broker's topics: straight into the embedded name server, and to the
    /// registrar for external ones.
    pub(crate) fn publish_topics(&self) {
        if self.config.namesrv_addr.is_none() {
            let _ = self.routes.register(remoting::namesrv::Registration {
                cluster: self.config.cluster_name.clone(),
                broker_name: self.config.broker_name.clone(),
                broker_id: 0,
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
        let mut config = config;
        // The store decides the real queue count (an existing topic keeps its own).
        if t.queue_count() != queues {
            config.read_queue_nums = t.queue_count();
            config.write_queue_nums = t.queue_count();
        }
        self.topics.put(config.clone());
        for group in self.clients.clustering_groups_of(&config.topic_name) {
            let _ = self.store.subscribe(&group, &config.topic_name);
        }
        self.publish_topics();
        Ok(config)
    }
}

/// A running broker (or standalone name server).
#[derive(Debug)]
pub struct RunningBroker {
    shared: Arc<Shared>,
    broker_addr: Option<SocketAddr>,
    namesrv_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    grpc_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: tokio::task::JoinSet<()>,
}

impl RunningBroker {
    /// The broker's bound address (`None` for a standalone name server).
    pub fn broker_addr(&self) -> Option<SocketAddr> {
        self.broker_addr
    }

    /// The embedded or standalone name server's bound address.
    pub fn namesrv_addr(&self) -> Option<SocketAddr> {
        self.namesrv_addr
    }

    /// The metrics endpoint's bound address (`None` unless `metrics-listen` is set).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The gRPC endpoint's bound address (`None` unless `grpc-listen` is set).
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// The store (statistics, tests).
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.shared.store)
    }

    /// One-way sends refused so far (they could not be answered).
    pub fn oneway_rejected(&self) -> u64 {
        self.shared.counters.oneway_rejected.load(Ordering::Relaxed)
    }

    /// Sends refused for lack of memory so far.
    pub fn sends_rejected(&self) -> u64 {
        self.shared.counters.sends_rejected.load(Ordering::Relaxed)
    }

    /// Frames refused so far: headers over a decoding limit (answered with an error) and
    /// unparseable frames (their connection closed).
    pub fn bad_frames(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.shared.counters.bad_frames.load(Ordering::Relaxed)
    }

    /// Stored records that could not be written out to a consumer and were skipped so far
    /// (each is also logged as a warning). Always 0 unless the store holds records the broker
    /// did not build.
    pub fn records_skipped(&self) -> u64 {
        // Relaxed: a statistic.
        self.shared.counters.records_skipped.load(Ordering::Relaxed)
    }

    /// Connections closed on accept because `max-connections` were open, or because their
    /// first byte was plaintext under `tls-mode` enforcing (under `disabled` nothing is
    /// sniffed: a TLS handshake is a bad frame there).
    pub fn connections_refused(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.shared.counters.connections_refused.load(Ordering::Relaxed)
    }

    /// Times a connection stopped reading requests because its unwritten answers reached
    /// `write-buffer-high-water-mark`.
    pub fn reads_paused(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.shared.counters.reads_paused.load(Ordering::Relaxed)
    }

    /// The most bytes any one connection has had queued for writing since the start.
    pub fn max_queued_write_bytes(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.shared.counters.max_queued_write_bytes.load(Ordering::Relaxed)
    }

    /// Transactional messages: undecided half messages, decisions, refused `END_TRANSACTION`
    /// requests (which producers never see), checks sent.
    pub fn transaction_stats(&self) -> TransactionStats {
        self.shared.transactions.stats()
    }

    /// Timer messages (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`) waiting for
    /// their time.
    pub fn timers_waiting(&self) -> usize {
        self.shared.timers.waiting()
    }

    /// Requests the ACL refused (one-way ones included, which get no answer); 0 without
    /// `acl-file`.
    pub fn acl_refused(&self) -> u64 {
        // Relaxed: a statistic.
        self.shared.acl.as_ref().map_or(0, |a| a.refused.load(crate::sync::Ordering::Relaxed))
    }

    /// Waits until the broker stops (Ctrl-C, or [`shutdown`](Self::shutdown) from elsewhere).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }

    /// Stops accepting, answers in-flight requests (suspended pulls at once), unregisters from
    /// external name servers, closes connections, and waits for all of it.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BrokerError {
    let context = context.into();
    move |source| BrokerError::Io { context, source }
}

impl Shared {
    fn new(config: BrokerConfig, store: Arc<dyn Store>, store_host: SocketAddr) -> Self {
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
        Shared {
            topics: self::core::topics::TopicTable::new(
                config.default_queues,
                config.auto_create_topic,
            ),
            clients: self::core::clients::ClientRegistry::default(),
            locks: self::core::locks::LockManager::default(),
            scheduler: self::core::delay::Scheduler::default(),
            transactions: self::core::transaction::Transactions::default(),
            timers: self::core::timer::Timers::default(),
            routes: remoting::namesrv::RouteTable::default(),
            grpc_endpoint: None,
            store_host,
            counters: BrokerCounters::default(),
            rpc: metrics::RpcLatency::default(),
            rates: self::core::rates::Rates::default(),
            groups: remoting::processor::group::SubscriptionGroups::default(),
            boot_ms: crate::time::now_ms(),
            uniq: Mutex::new(uniq),
            cluster_property,
            next_opaque: AtomicI32::new(1),
            topics_changed: watch::channel(0).0,
            pop_changes: watch::channel(0).0,
            acl: None,
            request_modes: remoting::processor::pop::RequestModes::default(),
            #[cfg(feature = "grpc")]
            grpc_sessions: crate::broker::grpc::session::Sessions::default(),
            #[cfg(feature = "grpc")]
            renewals: grpc::receipt::Renewals::default(),
            config,
            store,
        }
    }
}

/// The TLS gate and the ACL `config` asks for, one code path for the broker's ports and the
/// standalone name server's.
fn security(config: &BrokerConfig) -> Result<(Arc<tls::Gate>, Option<acl::Acl>), BrokerError> {
    let gate = Arc::new(tls::Gate::from_config(config)?);
    let acl = match &config.acl_file {
        Some(path) => Some(acl::Acl::load(path).map_err(BrokerError::Config)?),
        None => None,
    };
    Ok((gate, acl))
}

/// A process-unique value for message-id generation (no `rand` dependency needed).
fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::time::now_ms());
    h.finish() as u32
}

/// Starts a broker with `config` over a fresh in-memory store: binds its listener (and the
/// embedded name server's, or starts registering with external ones) and serves until
/// shut down. Ports 0 pick free ports (see [`RunningBroker::broker_addr`]).
///
/// # Errors
/// [`BrokerError`] when the configuration is invalid or a port cannot be bound.
pub async fn start(config: BrokerConfig) -> Result<RunningBroker, BrokerError> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(config.engine_config()?)?);
    start_with_store(config, store).await
}

/// [`start`] over a store of the caller's choosing.
///
/// # Errors
/// As [`start`].
pub async fn start_with_store(
    config: BrokerConfig,
    store: Arc<dyn Store>,
) -> Result<RunningBroker, BrokerError> {
    let namesrvs = config.namesrv_addrs()?;
    let (gate, acl) = security(&config)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(io(format!("cannot bind the broker to {}", config.listen)))?;
    let bound = listener.local_addr().map_err(io("local address"))?;
    let store_host = config.advertised(bound);
    let namesrv_listener = match (config.namesrv_listen, namesrvs.is_empty()) {
        (Some(addr), true) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(io(format!("cannot bind the embedded name server to {addr}")))?,
        ),
        _ => None,
    };
    let namesrv_addr = match &namesrv_listener {
        Some(l) => Some(l.local_addr().map_err(io("local address"))?),
        None => None,
    };
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(io(format!("cannot bind the metrics endpoint to {addr}")))?,
        ),
        None => None,
    };
    let metrics_addr = match &metrics_listener {
        Some(l) => Some(l.local_addr().map_err(io("local address"))?),
        None => None,
    };
    let grpc_listener = bind_grpc(&config).await?;
    let grpc_addr = match &grpc_listener {
        Some(l) => Some(l.local_addr().map_err(io("local address"))?),
        None => None,
    };
    let mut shared = Shared::new(config, store, store_host);
    shared.acl = acl;
    shared.grpc_endpoint = grpc_addr.map(|bound| shared.config.advertised(bound));
    let shared = Arc::new(shared);
    shared.transactions.register(Arc::new(remoting::processor::transaction::RemotingProducers));
    #[cfg(feature = "grpc")]
    shared.transactions.register(Arc::new(grpc::producer::GrpcProducers));
    for t in shared.topics.all() {
        let _ = shared.store.ensure_topic(&t.topic_name, t.read_queue_nums.max(1));
    }
    shared.publish_topics();
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(tls::watch_files(Arc::clone(&gate), shutdown_rx.clone()));
    tasks.spawn(remoting::server::serve(
        Arc::clone(&shared),
        listener,
        remoting::table::Role::Broker,
        Arc::clone(&gate),
        shutdown_rx.clone(),
    ));
    if let Some(l) = namesrv_listener {
        // RocketMQ's name server takes the same TLS mode; here it is the same accept code.
        tasks.spawn(remoting::server::serve(
            Arc::clone(&shared),
            l,
            remoting::table::Role::NameServer,
            gate,
            shutdown_rx.clone(),
        ));
    }
    if let Some(l) = metrics_listener {
        tasks.spawn(metrics::serve(Arc::clone(&shared), l, shutdown_rx.clone()));
    }
    #[cfg(feature = "grpc")]
    if let (Some(l), Some(endpoint)) = (grpc_listener, shared.grpc_endpoint) {
        tasks.spawn(crate::broker::grpc::serve(
            Arc::clone(&shared),
            l,
            endpoint,
            shutdown_rx.clone(),
        ));
        tasks.spawn(crate::broker::grpc::consumer::renew(Arc::clone(&shared), shutdown_rx.clone()));
    }
    tasks.spawn(self::core::clients::housekeeping(Arc::clone(&shared), shutdown_rx.clone()));
    tasks.spawn(self::core::delay::run(Arc::clone(&shared), shutdown_rx.clone()));
    tasks.spawn(self::core::transaction::run(Arc::clone(&shared), shutdown_rx.clone()));
    tasks.spawn(self::core::timer::run(Arc::clone(&shared), shutdown_rx.clone()));
    tasks.spawn(acl::watch_file(Arc::clone(&shared), shutdown_rx.clone()));
    tasks.spawn(self::core::rates::run(Arc::clone(&shared), shutdown_rx.clone()));
    for addr in namesrvs {
        tasks.spawn(remoting::registrar::run(Arc::clone(&shared), addr, shutdown_rx.clone()));
    }
    tracing::info!(
        broker = %bound,
        advertised = %store_host,
        namesrv = ?namesrv_addr,
        metrics = ?metrics_addr,
        grpc = ?grpc_addr,
        cluster = %shared.config.cluster_name,
        name = %shared.config.broker_name,
        "baiji broker started"
    );
    Ok(RunningBroker {
        shared,
        broker_addr: Some(bound),
        namesrv_addr,
        metrics_addr,
        grpc_addr,
        shutdown,
        tasks,
    })
}

/// Binds the gRPC endpoint `grpc-listen` asks for (none when unset).
///
/// # Errors
/// [`BrokerError::Io`] when the port cannot be bound; [`BrokerError::Config`] when it is set
/// in a build without feature `grpc`.
async fn bind_grpc(config: &BrokerConfig) -> Result<Option<tokio::net::TcpListener>, BrokerError> {
    let Some(addr) = config.grpc_listen else { return Ok(None) };
    if !cfg!(feature = "grpc") {
        return Err(BrokerError::Config(format!(
            "grpc-listen {addr}: this build has no gRPC face (cargo feature `grpc`)"
        )));
    }
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if config.grpc_listen_is_default && e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(
                grpc = %addr,
                "the default gRPC port is in use (another broker on this host?): serving \
                 remoting only; give this broker its own --grpc-listen to serve gRPC too"
            );
            Ok(None)
        }
        Err(e) => Err(io(format!("cannot bind the gRPC endpoint to {addr}"))(e)),
    }
}

/// Starts a standalone name server on `listen` (brokers register with it; clients ask it for
/// routes). Registrations expire 120 s after their last renewal or when their connection closes.
///
/// # Errors
/// [`BrokerError::Io`] when the port cannot be bound.
pub async fn start_namesrv(listen: SocketAddr) -> Result<RunningBroker, BrokerError> {
    start_namesrv_with(BrokerConfig { listen, ..BrokerConfig::default() }).await
}

/// [`start_namesrv`] on `config.listen`, with the ACL (`acl-file`, the name server's rules of
/// the permission matrix) and TLS (`tls-*`) of `config`, through the same code as the
/// broker's ports; the connection bounds (`max-connections`, idle time, write high-water
/// mark) apply too. Keys about topics, messages and registration are ignored.
///
/// # Errors
/// [`BrokerError::Io`] when the port cannot be bound; [`BrokerError::Config`] for an
/// unreadable ACL file or TLS certificate.
pub async fn start_namesrv_with(config: BrokerConfig) -> Result<RunningBroker, BrokerError> {
    let (gate, acl) = security(&config)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(io(format!("cannot bind the name server to {}", config.listen)))?;
    let bound = listener.local_addr().map_err(io("local address"))?;
    let config = BrokerConfig {
        auto_create_topic: false,
        namesrv_listen: None,
        namesrv_addr: None,
        ..config
    };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(config.engine_config()?)?);
    let mut shared = Shared::new(config, store, bound);
    shared.acl = acl;
    let shared = Arc::new(shared);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(remoting::server::serve(
        Arc::clone(&shared),
        listener,
        remoting::table::Role::NameServer,
        Arc::clone(&gate),
        shutdown_rx.clone(),
    ));
    tasks.spawn(acl::watch_file(Arc::clone(&shared), shutdown_rx.clone()));
    tasks.spawn(tls::watch_files(gate, shutdown_rx.clone()));
    tasks.spawn(namesrv_expiry(Arc::clone(&shared), shutdown_rx));
    tracing::info!(namesrv = %bound, acl = shared.acl.is_some(), tls = ?shared.config.tls_mode, "baiji name server started");
    Ok(RunningBroker {
        shared,
        broker_addr: None,
        namesrv_addr: Some(bound),
        metrics_addr: None,
        grpc_addr: None,
        shutdown,
        tasks,
    })
}

async fn namesrv_expiry(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let ttl = std::time::Duration::from_secs(120);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
            _ = shutdown.changed() => return,
        }
        for name in shared.routes.expire(ttl) {
            tracing::info!(broker = %name, "broker registration expired");
        }
    }
}
