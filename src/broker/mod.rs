//! The broker: the RocketMQ-compatible server over the [`store`] traits, and the composition
//! root that builds it.
//!
//! ```text
//!            broker (this file: BrokerConfig, start, RunningBroker)
//!              ├── remoting   face: the remoting protocol (server, code table, processors,
//!              │              name server, registrar, the ACL's code rules, the TLS gate)
//!              ├── grpc       face: apache.rocketmq.v2.MessagingService (feature `grpc`)
//!              ├── metrics    the Prometheus endpoint (reads the core and the faces)
//!              ├── security   what both faces' security needs: accounts and signatures, TLS
//!              └── core       the protocol-free state and rules both faces stand on
//!                    └── store   the traits; the engine behind them
//! ```
//!
//! Neither face imports the other, and the core imports neither (`.ci/lint` checks it). The
//! core depends on the store traits only, never on the engine: the engine's configuration
//! types it reads from its config file come through `store`'s re-exports, and only this
//! composition root ([`start`], which builds the `MemoryStore`) chooses the concrete store.
//!
//! [`store`]: crate::store

/// RocketMQ ACL signatures, as `baiji::broker::acl` has always named them (see
/// [`security::sign`]).
pub mod acl {
    pub use super::security::sign::{sign, verify, Credentials, ACCESS_KEY, SIGNATURE};
}
/// A broker set's membership from outside (`baiji replica status|remove`): what a replica
/// knows of its set, and taking a replica out through the leader.
#[cfg(feature = "replicas")]
pub mod replica_admin {
    pub use super::core::replica::admin::{remove, status, ReplicaAdminError, ReplicaStatus};
    pub use super::core::replica::net::{FrameError, Guard};

    /// A guard for `baiji replica` against a set's ports: its `replica-secret` if given, and
    /// TLS (`replica-tls`) if `tls` names the CA the replicas' certificates chain to and a
    /// client certificate and key from it, as `(ca, cert, key)`.
    ///
    /// # Errors
    /// [`BrokerError::Config`](super::BrokerError::Config) when a TLS file does not load.
    pub fn guard(
        secret: Option<&str>,
        tls: Option<(&std::path::Path, &std::path::Path, &std::path::Path)>,
    ) -> Result<Guard, super::BrokerError> {
        let connector = match tls {
            Some((ca, cert, key)) => Some(super::security::tls::replica_client(ca, cert, key)?),
            None => None,
        };
        Ok(Guard::client(secret, connector))
    }
}
mod config;
pub(crate) mod core;
#[cfg(feature = "grpc")]
pub(crate) mod grpc;
#[cfg(test)]
mod layers;
pub(crate) mod metrics;
pub(crate) mod remoting;
pub mod security;

use std::net::SocketAddr;

use thiserror::Error;
use tokio::sync::watch;

pub use self::core::transaction::TransactionStats;
pub use config::{BrokerConfig, CoreConfig, GrpcConfig, RemotingConfig, SecurityConfig};
pub use security::config::{ClientAuth, TlsMode};

use self::core::Core;
use self::remoting::table::Role;
use self::remoting::tls::Gate;
use self::remoting::RemotingState;
use self::security::acl::Acl;
use crate::store::{MemoryStore, Store, StoreError};
use crate::sync::{Arc, Ordering};

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
    /// The store directory (`store-path-root-dir`) cannot be used: held by another process,
    /// another broker's, or a file error.
    #[error("store-path-root-dir: {0}")]
    StoreDir(#[source] crate::shm::SegmentError),
}

/// A running broker (or standalone name server).
#[derive(Debug)]
pub struct RunningBroker {
    core: Arc<Core>,
    remoting: Arc<RemotingState>,
    #[cfg(feature = "grpc")]
    grpc: Option<Arc<grpc::GrpcState>>,
    broker_addr: Option<SocketAddr>,
    fast_addr: Option<SocketAddr>,
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

    /// The fast (VIP) port's bound address (`fast-listen-port`); `None` when turned off, when
    /// its port was in use at start, and for a standalone name server.
    pub fn fast_addr(&self) -> Option<SocketAddr> {
        self.fast_addr
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
        Arc::clone(&self.core.store)
    }

    /// One-way sends refused so far (they could not be answered).
    pub fn oneway_rejected(&self) -> u64 {
        remoting::Counters::get(&self.remoting.counters.oneway_rejected)
    }

    /// Sends refused for lack of memory so far.
    pub fn sends_rejected(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.core.counters.sends_rejected.load(Ordering::Relaxed)
    }

    /// Frames refused so far: headers over a decoding limit (answered with an error) and
    /// unparseable frames (their connection closed).
    pub fn bad_frames(&self) -> u64 {
        remoting::Counters::get(&self.remoting.counters.bad_frames)
    }

    /// Stored records that could not be written out to a consumer and were skipped so far
    /// (each is also logged as a warning). Always 0 unless the store holds records the broker
    /// did not build.
    pub fn records_skipped(&self) -> u64 {
        // Relaxed: a statistic.
        self.core.counters.records_skipped.load(Ordering::Relaxed)
    }

    /// Connections closed on accept because `max-connections` were open, or because their
    /// first byte was plaintext under `tls-mode` enforcing (under `disabled` nothing is
    /// sniffed: a TLS handshake is a bad frame there).
    pub fn connections_refused(&self) -> u64 {
        let remoting = remoting::Counters::get(&self.remoting.counters.connections_refused);
        #[cfg(feature = "grpc")]
        let grpc = self.grpc.as_ref().map_or(0, |g| g.connections_refused());
        #[cfg(not(feature = "grpc"))]
        let grpc = 0;
        remoting + grpc
    }

    /// Times a connection stopped reading requests because its unwritten answers reached
    /// `write-buffer-high-water-mark`.
    pub fn reads_paused(&self) -> u64 {
        remoting::Counters::get(&self.remoting.counters.reads_paused)
    }

    /// The most bytes any one connection has had queued for writing since the start.
    pub fn max_queued_write_bytes(&self) -> u64 {
        remoting::Counters::get(&self.remoting.counters.max_queued_write_bytes)
    }

    /// Transactional messages: undecided half messages, decisions, refused `END_TRANSACTION`
    /// requests (which producers never see), checks sent.
    pub fn transaction_stats(&self) -> TransactionStats {
        self.core.transactions.stats()
    }

    /// Timer messages (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`) waiting for
    /// their time.
    pub fn timers_waiting(&self) -> usize {
        self.core.timers.waiting()
    }

    /// Requests and gRPC calls the ACL refused (one-way ones included, which get no answer); 0
    /// without `acl-file`.
    pub fn acl_refused(&self) -> u64 {
        self.remoting.acl.as_ref().map_or(0, |a| remoting::Counters::get(&a.refused))
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
        // Nothing is served any more: the offsets are final.
        self.core.journal_clean_stop();
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BrokerError {
    let context = context.into();
    move |source| BrokerError::Io { context, source }
}

/// The TLS gate and the ACL `config` asks for, one code path for the broker's ports and the
/// standalone name server's.
fn security(config: &SecurityConfig) -> Result<(Arc<Gate>, Option<Arc<Acl>>), BrokerError> {
    let gate = Arc::new(Gate::from_config(config)?);
    let acl = match &config.acl_file {
        Some(path) => Some(Arc::new(Acl::load(path).map_err(BrokerError::Config)?)),
        None => None,
    };
    Ok((gate, acl))
}

/// The gRPC port's TLS ([`security::tls::grpc_server`]), over a self-signed certificate for
/// `localhost`, the loopback addresses and `endpoint`'s address when no `tls-cert` is set,
/// which the log says.
#[cfg(feature = "grpc")]
fn grpc_tls(
    config: &SecurityConfig,
    endpoint: SocketAddr,
) -> Result<Option<security::tls::GrpcTls>, BrokerError> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let ip = endpoint.ip().to_string();
    if !names.contains(&ip) {
        names.push(ip);
    }
    let tls = security::tls::grpc_server(config, &names)?;
    match &tls {
        Some(t) if t.certs.is_none() => tracing::warn!(
            mode = ?t.mode,
            names = ?t.self_signed,
            "gRPC TLS: no tls-cert configured; serving a self-signed certificate made at start \
             (as Apache's proxy does); set tls-cert and tls-key for one clients can verify"
        ),
        Some(t) => tracing::info!(mode = ?t.mode, "gRPC TLS: serving tls-cert"),
        None => tracing::info!("gRPC TLS disabled: plaintext only"),
    }
    Ok(tls)
}

/// Reloads the ACL file and the TLS certificate when they change, until shutdown.
fn watch_security(
    gate: &Gate,
    face: &RemotingState,
    tasks: &mut tokio::task::JoinSet<()>,
    shutdown: &watch::Receiver<bool>,
) {
    if let Some(certs) = &gate.certs {
        tasks.spawn(security::watch::poll(Arc::clone(certs) as _, shutdown.clone()));
    }
    if let Some(acl) = &face.acl {
        tasks.spawn(security::watch::poll(Arc::clone(acl) as _, shutdown.clone()));
    }
}

/// Starts a broker with `config` over a fresh in-memory store: binds its listener (and the
/// embedded name server's, or starts registering with external ones) and serves until
/// shut down. Ports 0 pick free ports (see [`RunningBroker::broker_addr`]).
///
/// # Errors
/// [`BrokerError`] when the configuration is invalid or a port cannot be bound.
pub async fn start(config: BrokerConfig) -> Result<RunningBroker, BrokerError> {
    let Some(path) = config.core.store_dir() else {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(config.engine_config()?)?);
        return start_inner(config, store, None).await;
    };
    // First of what can be refused at start: a directory another broker holds.
    let owner = format!("{}/{}", config.core.cluster_name, config.core.broker_name);
    let dir = crate::shm::Directory::open(path, &owner).map_err(BrokerError::StoreDir)?;
    let engine = config.engine_config()?;
    let segment_size = config.core.segment_size();
    let (store, recovery) = MemoryStore::open(engine, &dir, segment_size)?;
    tracing::info!(
        "store {}: {} topics, {} messages restored in {:.3} s ({} torn records skipped, {} \
         holes, {} records dropped, {} segment files set aside)",
        path.display(),
        recovery.topics,
        recovery.messages,
        recovery.elapsed.as_secs_f64(),
        recovery.torn_records,
        recovery.holes,
        recovery.dropped_records,
        recovery.quarantined.len()
    );
    for q in &recovery.quarantined {
        tracing::warn!("store: set aside {}: {}", q.file.display(), q.reason);
    }
    start_inner(config, Arc::new(store), Some((dir, recovery))).await
}

/// [`start`] over a store of the caller's choosing.
///
/// # Errors
/// As [`start`].
pub async fn start_with_store(
    config: BrokerConfig,
    store: Arc<dyn Store>,
) -> Result<RunningBroker, BrokerError> {
    start_inner(config, store, None).await
}

async fn start_inner(
    config: BrokerConfig,
    store: Arc<dyn Store>,
    opened: Option<(crate::shm::Directory, crate::engine::EngineRecovery)>,
) -> Result<RunningBroker, BrokerError> {
    let namesrvs = config.namesrv_addrs()?;
    let replica_set = config.core.replica_set().map_err(BrokerError::Config)?;
    #[cfg(not(feature = "replicas"))]
    if replica_set.is_some() {
        return Err(BrokerError::Config(
            "replica-peers needs a baiji built with the `replicas` feature (part of `cli`)".into(),
        ));
    }
    let (gate, acl) = security(&config.security)?;
    #[cfg(feature = "replicas")]
    let replica_tls = match replica_set {
        Some(_) => security::tls::replica(&config.security)?,
        None => None,
    };
    #[cfg(not(feature = "replicas"))]
    if config.security.replica_tls && replica_set.is_none() {
        return Err(BrokerError::Config("replica-tls needs replica-peers".into()));
    }
    // First of what can be refused at start: a directory another broker holds.
    let journal = match (config.core.store_dir(), &opened) {
        (Some(_), Some((dir, _))) => {
            Some(self::core::journal::ConfigJournal::open_in(dir).map_err(BrokerError::StoreDir)?)
        }
        (Some(dir), None) => {
            let owner = format!("{}/{}", config.core.cluster_name, config.core.broker_name);
            Some(
                self::core::journal::ConfigJournal::open(dir, &owner)
                    .map_err(BrokerError::StoreDir)?,
            )
        }
        (None, _) => None,
    };
    let listen = config.remoting.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(io(format!("cannot bind the broker to {listen}")))?;
    let bound = listener.local_addr().map_err(io("local address"))?;
    let store_host = config.advertised(bound);
    let namesrv_listener = match (config.remoting.namesrv_listen, namesrvs.is_empty()) {
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
    let metrics_listener = match config.core.metrics_listen {
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
    let grpc_listener = bind_grpc(&config.grpc).await?;
    let grpc_addr = match &grpc_listener {
        Some(l) => Some(l.local_addr().map_err(io("local address"))?),
        None => None,
    };
    // Last: a port asked for explicitly (name server, metrics, gRPC) is never taken by the
    // fast port, whose default is only derived.
    let fast_listener = bind_fast(&config.remoting, bound).await?;
    let fast_addr = match &fast_listener {
        Some(l) => Some(l.local_addr().map_err(io("local address"))?),
        None => None,
    };
    let grpc_endpoint = grpc_addr.map(|bound| config.core.advertised(bound));
    #[cfg(feature = "grpc")]
    let grpc_tls = match grpc_endpoint {
        Some(endpoint) => grpc_tls(&config.security, endpoint)?,
        None => None,
    };
    let BrokerConfig {
        core: core_config,
        security: security_config,
        remoting: remoting_config,
        ..
    } = config;
    let mut core = Core::new(core_config, store, store_host);
    core.grpc_endpoint = grpc_endpoint;
    if let Some((journal, recovered)) = journal {
        core.restore(journal, recovered);
    }
    core.recovery = opened.map(|(_, recovery)| recovery);
    let core = Arc::new(core);
    let mut face = RemotingState::new(remoting_config, security_config, acl);
    face.fast_port = fast_addr.map(|a| a.port());
    let face = Arc::new(face);
    core.clients.set_notify(Arc::clone(&face) as _);
    core.transactions
        .register(Arc::new(remoting::processor::transaction::RemotingProducers(Arc::clone(&face))));
    #[cfg(feature = "grpc")]
    let grpc = grpc_listener.is_some().then(|| {
        // The same ACL object: one file watch, one refusal count for both faces.
        Arc::new(grpc::GrpcState {
            acl: face.acl.clone(),
            peer_credentials: face.config.inner_client_authentication_credentials.clone(),
            ..grpc::GrpcState::default()
        })
    });
    #[cfg(feature = "grpc")]
    if let Some(g) = &grpc {
        core.transactions.register(Arc::new(grpc::producer::GrpcProducers(Arc::clone(g))));
        let relay = grpc::relay::GrpcConsumers { grpc: Arc::clone(g), store_host: core.store_host };
        core.clients.set_relay(Arc::new(relay));
        core.clients.set_directory(Arc::new(grpc::directory::GrpcClients(Arc::clone(g))));
    }
    core.open();
    core.compact_journal();
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    self::core::spawn_tasks(&core, &mut tasks, &shutdown_rx);
    // A replica joins its broker set before the broker port takes a send.
    #[cfg(feature = "replicas")]
    if let Some((id, peers)) = replica_set {
        let replica = self::core::replica::Replica::start(
            &core,
            id,
            &peers,
            replica_tls.as_ref().map(|(a, c, _)| (a.clone(), c.clone())),
            shutdown_rx.clone(),
        )
        .await
        .map_err(BrokerError::Config)?;
        if let Some((_, _, certs)) = replica_tls {
            tasks.spawn(security::watch::poll(certs as _, shutdown_rx.clone()));
        }
        let _ = core.replica.set(replica);
    }
    // The remoting face: the broker port and its fast port, the embedded name server's, the
    // registrar.
    watch_security(&gate, &face, &mut tasks, &shutdown_rx);
    tasks.spawn(remoting::server::serve(
        Arc::clone(&core),
        Arc::clone(&face),
        listener,
        Role::Broker,
        Arc::clone(&gate),
        shutdown_rx.clone(),
    ));
    if let Some(l) = fast_listener {
        // RocketMQ's fast server: the broker's processors, ACL and TLS gate, another port.
        tasks.spawn(remoting::server::serve(
            Arc::clone(&core),
            Arc::clone(&face),
            l,
            Role::Broker,
            Arc::clone(&gate),
            shutdown_rx.clone(),
        ));
    }
    if let Some(l) = namesrv_listener {
        // RocketMQ's name server takes the same TLS mode; here it is the same accept code.
        tasks.spawn(remoting::server::serve(
            Arc::clone(&core),
            Arc::clone(&face),
            l,
            Role::NameServer,
            gate,
            shutdown_rx.clone(),
        ));
    }
    for addr in namesrvs {
        tasks.spawn(remoting::registrar::run(
            Arc::clone(&core),
            Arc::clone(&face),
            addr,
            shutdown_rx.clone(),
        ));
    }
    // The gRPC face.
    #[cfg(feature = "grpc")]
    if let (Some(l), Some(endpoint), Some(g)) = (grpc_listener, core.grpc_endpoint, &grpc) {
        let timeout =
            std::time::Duration::from_millis(face.security.tls_handshake_timeout_ms.max(1));
        if let Some(certs) = grpc_tls.as_ref().and_then(|t| t.certs.as_ref()) {
            tasks.spawn(security::watch::poll(Arc::clone(certs) as _, shutdown_rx.clone()));
        }
        tasks.spawn(grpc::serve(
            Arc::clone(&core),
            Arc::clone(g),
            l,
            grpc_tls.map(|t| (t, timeout)),
            endpoint,
            shutdown_rx.clone(),
        ));
        tasks.spawn(grpc::consumer::renew(Arc::clone(&core), Arc::clone(g), shutdown_rx.clone()));
    }
    if let Some(l) = metrics_listener {
        tasks.spawn(metrics::serve(Arc::clone(&core), Arc::clone(&face), l, shutdown_rx.clone()));
    }
    tracing::info!(
        broker = %bound,
        fast = ?fast_addr,
        advertised = %store_host,
        namesrv = ?namesrv_addr,
        metrics = ?metrics_addr,
        grpc = ?grpc_addr,
        cluster = %core.config.cluster_name,
        name = %core.config.broker_name,
        "baiji broker started"
    );
    Ok(RunningBroker {
        core,
        remoting: face,
        #[cfg(feature = "grpc")]
        grpc,
        broker_addr: Some(bound),
        fast_addr,
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
async fn bind_grpc(config: &GrpcConfig) -> Result<Option<tokio::net::TcpListener>, BrokerError> {
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

/// Binds the fast (VIP) port `config` asks for, beside the broker port bound at `bound` (none
/// when turned off). A port in use, or a derived port (`listen`'s minus 2) that cannot be bound
/// for any reason, is a warning: the broker serves without it, as only clients with
/// `vipChannelEnabled` use it.
///
/// # Errors
/// [`BrokerError::Io`] when a port asked for explicitly cannot be bound for another reason
/// (no permission, an address not on this host).
async fn bind_fast(
    config: &RemotingConfig,
    bound: SocketAddr,
) -> Result<Option<tokio::net::TcpListener>, BrokerError> {
    let Some((addr, derived)) = config.fast_addr(bound) else { return Ok(None) };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => Ok(Some(l)),
        Err(e) if derived || e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::warn!(
                fast = %addr,
                broker = %bound,
                error = %e,
                "the fast (VIP) port cannot be bound: serving without it; clients with \
                 vipChannelEnabled (the dashboard, Java clients up to 4.4) cannot reach this \
                 broker; give it a free port with --fast-listen-port, or 0 to turn it off"
            );
            Ok(None)
        }
        Err(e) => Err(io(format!("cannot bind the fast (VIP) port to {addr}"))(e)),
    }
}

/// Starts a standalone name server on `listen` (brokers register with it; clients ask it for
/// routes). Registrations expire 120 s after their last renewal or when their connection closes.
///
/// # Errors
/// [`BrokerError::Io`] when the port cannot be bound.
pub async fn start_namesrv(listen: SocketAddr) -> Result<RunningBroker, BrokerError> {
    let mut config = BrokerConfig::default();
    config.remoting.listen = listen;
    start_namesrv_with(config).await
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
    let (gate, acl) = security(&config.security)?;
    let listen = config.remoting.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(io(format!("cannot bind the name server to {listen}")))?;
    let bound = listener.local_addr().map_err(io("local address"))?;
    let mut config = config;
    config.core.auto_create_topic = false;
    config.core.namesrv_addr = None;
    config.remoting.namesrv_listen = None;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(config.engine_config()?)?);
    let BrokerConfig {
        core: core_config,
        security: security_config,
        remoting: remoting_config,
        ..
    } = config;
    let core = Arc::new(Core::new(core_config, store, bound));
    let face = Arc::new(RemotingState::new(remoting_config, security_config, acl));
    core.clients.set_notify(Arc::clone(&face) as _);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(remoting::server::serve(
        Arc::clone(&core),
        Arc::clone(&face),
        listener,
        Role::NameServer,
        Arc::clone(&gate),
        shutdown_rx.clone(),
    ));
    watch_security(&gate, &face, &mut tasks, &shutdown_rx);
    tasks.spawn(namesrv_expiry(Arc::clone(&core), shutdown_rx));
    tracing::info!(namesrv = %bound, acl = face.acl.is_some(), tls = ?face.security.tls_mode, "baiji name server started");
    Ok(RunningBroker {
        core,
        remoting: face,
        #[cfg(feature = "grpc")]
        grpc: None,
        broker_addr: None,
        fast_addr: None,
        namesrv_addr: Some(bound),
        metrics_addr: None,
        grpc_addr: None,
        shutdown,
        tasks,
    })
}

async fn namesrv_expiry(core: Arc<Core>, mut shutdown: watch::Receiver<bool>) {
    let ttl = std::time::Duration::from_secs(120);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
            _ = shutdown.changed() => return,
        }
        for name in core.routes.expire(ttl) {
            tracing::info!(broker = %name, "broker registration expired");
        }
    }
}
