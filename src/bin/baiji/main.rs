//! The baiji command line: `broker` (with an embedded name server unless `--namesrv-addr` is
//! given), `namesrv` (a standalone name server), `bench` (a load generator for any RocketMQ
//! name server) and `top` (a live view of a cluster).

mod alloc_trim;
#[cfg(feature = "top")]
mod top_ui;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use baiji::broker::{self, BrokerConfig};
use clap::{Args, Parser, Subcommand};

/// Messages are allocated on connection threads and freed by the engine's reaper: mimalloc's
/// cross-thread frees cost about a tenth of glibc's here (measured by the engine benches:
/// 1-producer throughput doubled), and it returns freed memory to the system sooner.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// baiji: an in-memory message broker that RocketMQ clients cannot tell from a persistent one.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a broker; with no flags it also serves an embedded name server on 127.0.0.1:9876.
    Broker(Box<BrokerArgs>),
    /// Runs a standalone name server that brokers (baiji or RocketMQ) register with.
    Namesrv(NamesrvArgs),
    /// Load generator: drives any RocketMQ name server (baiji, rocketmq-broker, Java) with the
    /// raw protocol driver or rocketmq-client-rust, checks every delivery and reports latency
    /// percentiles and throughput.
    #[cfg(feature = "bench")]
    Bench(Box<baiji::bench::BenchArgs>),
    /// A live view of a cluster (any RocketMQ name server): brokers, topics with their rates,
    /// consumer groups with lag and held memory, the memory budget and drops; refreshes every
    /// second, `q` quits.
    #[cfg(feature = "top")]
    Top(top_ui::TopArgs),
    /// A replicated broker set's membership: `status` (what a replica knows of its set) and
    /// `remove ID` (take a replica out, through the leader). Replicas are added by starting
    /// them with `--replica-replaces`.
    #[cfg(feature = "replicas")]
    Replica(ReplicaArgs),
}

/// `baiji replica` flags.
#[cfg(feature = "replicas")]
#[derive(Debug, Args)]
struct ReplicaArgs {
    #[command(subcommand)]
    action: ReplicaAction,
    /// A replica port of the set (host:port, as in its `--replica-peers` entry).
    #[arg(long, global = true)]
    peer: Option<String>,
    /// The set's `replica-secret`, if its ports check one.
    #[arg(long, global = true)]
    replica_secret: Option<String>,
    /// For ports with `replica-tls`: the PEM CA the replicas' certificates chain to.
    #[arg(long, global = true, requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// For ports with `replica-tls`: a PEM certificate from that CA to present.
    #[arg(long, global = true, requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// For ports with `replica-tls`: the PEM key of --tls-cert.
    #[arg(long, global = true, requires = "tls_ca")]
    tls_key: Option<PathBuf>,
}

#[cfg(feature = "replicas")]
#[derive(Debug, Subcommand)]
enum ReplicaAction {
    /// Prints what the replica at `--peer` knows of its set: its role, the leader, the term,
    /// its log and apply indexes, the voters and learners.
    Status,
    /// Takes replica ID out of the set (the leader changes the membership): a voter leaves the
    /// voters, a learner is dropped. Prints the voters left.
    Remove {
        /// The replica id to remove.
        id: u64,
    },
}

/// Runs `baiji replica`: prints the answer, or returns why there is none.
#[cfg(feature = "replicas")]
async fn replica_command(args: &ReplicaArgs) -> Result<(), String> {
    use baiji::broker::replica_admin;
    let peer =
        args.peer.as_deref().ok_or("--peer HOST:PORT (a replica port of the set) is required")?;
    let tls = match (&args.tls_ca, &args.tls_cert, &args.tls_key) {
        (Some(ca), Some(cert), Some(key)) => Some((ca.as_path(), cert.as_path(), key.as_path())),
        _ => None,
    };
    let guard =
        replica_admin::guard(args.replica_secret.as_deref(), tls).map_err(|e| e.to_string())?;
    match args.action {
        ReplicaAction::Status => {
            let s = replica_admin::status(peer, &guard).await.map_err(|e| e.to_string())?;
            let list = |l: &[(u64, String)]| {
                l.iter().map(|(i, a)| format!("{i}={a}")).collect::<Vec<_>>().join(";")
            };
            println!("replica {} at {peer}: {}", s.id, s.role);
            println!("leader: {}", s.leader.map_or_else(|| "none".to_owned(), |l| l.to_string()));
            println!("term: {}", s.term);
            println!("last log index: {}", s.last_log_index);
            println!("applied index: {}", s.applied_index);
            println!("voters: {}", list(&s.voters));
            println!("learners: {}", list(&s.learners));
        }
        ReplicaAction::Remove { id } => {
            let voters =
                replica_admin::remove(peer, &guard, id).await.map_err(|e| e.to_string())?;
            let v: Vec<String> = voters.iter().map(u64::to_string).collect();
            println!("replica {id} removed; voters: {}", v.join(","));
        }
    }
    Ok(())
}

/// Broker flags. Each overrides the same key of the `--config` TOML file.
#[derive(Debug, Args)]
struct BrokerArgs {
    /// TOML file with the same keys as these flags (kebab-case).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Address to listen on (host:port).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Port to listen on, keeping the listen host (RocketMQ: listenPort).
    #[arg(long)]
    listen_port: Option<u16>,
    /// The fast (VIP) port, where clients with vipChannelEnabled send (RocketMQ:
    /// fastListenPort; default: the listen port minus 2; 0 turns it off). A port in use is
    /// logged as a warning and the broker serves without it.
    #[arg(long)]
    fast_listen_port: Option<u16>,
    /// IP published to clients in routes and message ids (RocketMQ: brokerIP1).
    #[arg(long)]
    broker_ip: Option<IpAddr>,
    /// External name servers, 'host:port;host:port' (RocketMQ: namesrvAddr). Disables the embedded one.
    #[arg(long)]
    namesrv_addr: Option<String>,
    /// Address of the embedded name server.
    #[arg(long)]
    namesrv_listen: Option<SocketAddr>,
    /// Do not run the embedded name server.
    #[arg(long)]
    no_namesrv: bool,
    /// Serve Prometheus metrics (GET /metrics) on this address, e.g. 127.0.0.1:5557 (off by
    /// default).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Serve the RocketMQ 5 gRPC API (what the 5.x SDKs speak; the proxy's port) on this
    /// address; `off` (or `none`) serves none. Default 127.0.0.1:8081, unless the config
    /// file sets grpc-listen.
    #[arg(long, value_parser = parse_grpc_listen)]
    grpc_listen: Option<GrpcListen>,
    /// ACL and TLS on the broker port and the embedded name server's.
    #[command(flatten)]
    security: SecurityArgs,
    /// The account the broker signs its registrations with, when external name servers check
    /// ACL: '{"accessKey":"...","secretKey":"..."}' (RocketMQ 5:
    /// innerClientAuthenticationCredentials; the account needs admin there).
    #[arg(long)]
    inner_client_authentication_credentials: Option<baiji::broker::acl::Credentials>,
    /// Cluster name (RocketMQ: brokerClusterName).
    #[arg(long)]
    cluster_name: Option<String>,
    /// Broker name (RocketMQ: brokerName).
    #[arg(long)]
    broker_name: Option<String>,
    /// Queues of auto-created topics (RocketMQ: defaultTopicQueueNums).
    #[arg(long)]
    default_queues: Option<u32>,
    /// Refuse sends to unknown topics instead of creating them (RocketMQ: autoCreateTopicEnable=false).
    #[arg(long)]
    no_auto_create_topic: bool,
    /// Memory budget in bytes (payload plus bookkeeping); suffixes k, m, g accepted.
    #[arg(long, value_parser = parse_size)]
    memory_budget: Option<u64>,
    /// What to do when the budget is full: reject (clients get SYSTEM_BUSY and retry) or drop-oldest.
    #[arg(long)]
    memory_policy: Option<String>,
    /// Largest message body, bytes (RocketMQ: maxMessageSize).
    #[arg(long, value_parser = parse_size)]
    max_message_size: Option<u64>,
    /// Seconds to keep messages no consumer group holds.
    #[arg(long)]
    retention_secs: Option<u64>,
    /// Bytes per queue of messages no consumer group holds to keep; suffixes accepted.
    #[arg(long, value_parser = parse_size)]
    retention_bytes: Option<u64>,
    /// Seconds a dead-letter topic (%DLQ%<group>) keeps messages nobody consumed (default 72 h,
    /// RocketMQ's fileReservedTime).
    #[arg(long)]
    dlq_retention_secs: Option<u64>,
    /// Bytes per dead-letter queue kept (default 64m); suffixes accepted.
    #[arg(long, value_parser = parse_size)]
    dlq_retention_bytes: Option<u64>,
    /// Seconds the trace topic (RMQ_SYS_TRACE_TOPIC, which no group consumes) keeps trace
    /// records (default 72 h, RocketMQ's fileReservedTime); at most --retention-bytes per queue.
    #[arg(long)]
    trace_retention_secs: Option<u64>,
    /// Seconds a topic keeps messages every group has acknowledged (default 0: freed at once),
    /// so a late broadcasting member or a new group from the first offset still gets them, as
    /// on a persistent broker; in the memory budget, freed first when it is 90 % used.
    /// Per topic: [keep-acknowledged-topics] in the config file.
    #[arg(long)]
    keep_acknowledged_secs: Option<u64>,
    /// Directory where the broker keeps state that outlives the process, in memory-mapped
    /// files (RocketMQ: storePathRootDir; a tmpfs directory such as /dev/shm/baiji/broker-a is
    /// RAM, no disk I/O); `none` (the default) keeps nothing. It keeps messages, topic and
    /// group configs, committed offsets, POP state, half messages and timers (README
    /// "Restarts"). One broker per directory.
    #[arg(long, value_name = "DIR")]
    store_path_root_dir: Option<std::path::PathBuf>,
    /// This process's id in its broker set, one of --replica-peers' ids (RocketMQ DLedger:
    /// dLegerSelfId).
    #[arg(long)]
    replica_id: Option<u64>,
    /// The broker set this process is one of: 'id=host:port;id=host:port;id=host:port', each
    /// replica's id and replica port (Raft traffic; RocketMQ DLedger: dLegerPeers). Three
    /// processes with one --broker-name and external --namesrv-addr: a send is answered once two
    /// hold it; the leader registers as brokerId 0, followers as their replica id.
    #[arg(long)]
    replica_peers: Option<String>,
    /// Join a running broker set in place of the replica with this id (one that died or lost
    /// its state): this process starts empty under its own new --replica-id (listed in
    /// --replica-peers with the set's live replicas), is caught up by the leader and then
    /// replaces that replica as a voter.
    #[arg(long)]
    replica_replaces: Option<u64>,
    /// Raft entries between two snapshot marks of a replica (default 20000); as many are kept
    /// for a follower that was briefly away.
    #[arg(long)]
    replica_snapshot_logs: Option<u64>,
    /// A secret all replicas of the set share: connections to a replica port prove both ends
    /// hold it (mutual HMAC challenge) before any Raft traffic. Prefer the config file's
    /// replica-secret (a flag shows in the process list).
    #[arg(long)]
    replica_secret: Option<String>,
    /// TLS on the replica port, both ways authenticated: each replica presents --tls-cert and
    /// --tls-key (as server and as client) and accepts only peers whose certificates chain to
    /// --tls-client-ca; a peer's certificate must name the host of its --replica-peers entry.
    #[arg(long)]
    replica_tls: bool,
    /// PULL (default) or POP: how QUERY_ASSIGNMENT tells clients without client-side
    /// rebalancing to read a group's queues (RocketMQ: defaultMessageRequestMode).
    #[arg(long)]
    default_message_request_mode: Option<String>,
    /// Redeliveries of a popped message before it goes to %DLQ%<group> (default 16,
    /// RocketMQ's retryMaxTimes).
    #[arg(long)]
    pop_retry_max_times: Option<u32>,
    /// Seconds after which a clustering group without members stops holding messages (0: never).
    #[arg(long)]
    group_idle_secs: Option<u64>,
    /// Most bytes of messages one pull returns (default 256k; the first message always goes);
    /// suffixes accepted (RocketMQ: maxTransferBytesOnMessageInMemory).
    #[arg(long, value_parser = parse_size)]
    max_transfer_bytes_on_message_in_memory: Option<u64>,
    /// Most messages one pull returns (default 32; RocketMQ: maxTransferCountOnMessageInMemory).
    #[arg(long)]
    max_transfer_count_on_message_in_memory: Option<usize>,
    /// Most connections served at once per listener (default 10000); more are closed at once.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Close a connection idle (no traffic either way) this long, seconds (default 120; 0:
    /// never; RocketMQ: serverChannelMaxIdleTimeSeconds).
    #[arg(long)]
    server_channel_max_idle_time_seconds: Option<u64>,
    /// Most suspended (long-polling) pulls per connection (default 1024); more are answered at once.
    #[arg(long)]
    max_suspended_pulls_per_connection: Option<usize>,
    /// Stop reading a connection's requests while this many bytes of its answers wait to be
    /// written (default 4m; RocketMQ: writeBufferHighWaterMark); suffixes accepted.
    #[arg(long, value_parser = parse_size)]
    write_buffer_high_water_mark: Option<u64>,
    /// Milliseconds after which an undecided transactional (half) message is checked with its
    /// producer (default 6000; RocketMQ: transactionTimeOut).
    #[arg(long)]
    transaction_time_out: Option<u64>,
    /// Milliseconds between transaction checks (default 30000; RocketMQ: transactionCheckInterval).
    #[arg(long)]
    transaction_check_interval: Option<u64>,
    /// Checks of a half message before it moves to TRANS_CHECK_MAX_TIME_TOPIC (default 15;
    /// RocketMQ: transactionCheckMax).
    #[arg(long)]
    transaction_check_max: Option<u32>,
    /// Longest a timer message may wait, seconds (default 259200, 3 days; RocketMQ:
    /// timerMaxDelaySec); further ahead is refused.
    #[arg(long)]
    timer_max_delay_sec: Option<u64>,
}

#[derive(Debug, Args)]
struct NamesrvArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9876")]
    listen: SocketAddr,
    /// Port to listen on, keeping the listen host.
    #[arg(long)]
    listen_port: Option<u16>,
    /// ACL and TLS on the name server's port.
    #[command(flatten)]
    security: SecurityArgs,
}

/// ACL and TLS flags, the same for `broker` and `namesrv` (one code path behind them).
#[derive(Debug, Args)]
struct SecurityArgs {
    /// RocketMQ plain ACL file (plain_acl.yml format), re-read when it changes (off by default).
    #[arg(long)]
    acl_file: Option<std::path::PathBuf>,
    /// TLS on the remoting ports: disabled (default), permissive
    /// (TLS and plaintext on one port, told apart by the first byte) or enforcing (TLS only).
    #[arg(long)]
    tls_mode: Option<baiji::broker::TlsMode>,
    /// PEM certificate chain for TLS (RocketMQ: tls.server.certPath).
    #[arg(long)]
    tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert (RocketMQ: tls.server.keyPath).
    #[arg(long)]
    tls_key: Option<std::path::PathBuf>,
    /// PEM CA certificates that client certificates must chain to (RocketMQ:
    /// tls.server.trustCertPath).
    #[arg(long)]
    tls_client_ca: Option<std::path::PathBuf>,
    /// Client certificates: none (default), optional or require (RocketMQ:
    /// tls.server.need.client.auth); optional and require need --tls-client-ca.
    #[arg(long)]
    tls_need_client_auth: Option<baiji::broker::ClientAuth>,
    /// Close a connection whose TLS handshake has not finished this long after it began,
    /// milliseconds (default 10000).
    #[arg(long)]
    tls_handshake_timeout_ms: Option<u64>,
    /// TLS on the gRPC port: permissive (TLS and plaintext on one port, the default unless
    /// --tls-mode is enforcing), enforcing or disabled. With no --tls-cert, a self-signed
    /// certificate is made at start (as Apache's proxy does).
    #[arg(long)]
    grpc_tls_mode: Option<baiji::broker::TlsMode>,
}

impl SecurityArgs {
    /// Sets the keys given on the command line, leaving the others as they are.
    fn apply(self, c: &mut BrokerConfig) {
        if self.acl_file.is_some() {
            c.security.acl_file = self.acl_file;
        }
        if let Some(v) = self.tls_mode {
            c.security.tls_mode = v;
        }
        if self.grpc_tls_mode.is_some() {
            c.security.grpc_tls_mode = self.grpc_tls_mode;
        }
        if self.tls_cert.is_some() {
            c.security.tls_cert = self.tls_cert;
        }
        if self.tls_key.is_some() {
            c.security.tls_key = self.tls_key;
        }
        if self.tls_client_ca.is_some() {
            c.security.tls_client_ca = self.tls_client_ca;
        }
        if let Some(v) = self.tls_need_client_auth {
            c.security.tls_need_client_auth = v;
        }
        if let Some(v) = self.tls_handshake_timeout_ms {
            c.security.tls_handshake_timeout_ms = v;
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 512m, 2g, 1048576)"))?;
    n.checked_mul(mul).ok_or_else(|| format!("`{s}` is too large"))
}

/// Where `baiji broker` serves gRPC when neither the flag nor the config file says.
const DEFAULT_GRPC_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8081);

/// `--grpc-listen`: an address, or off.
#[derive(Debug, Clone, Copy)]
enum GrpcListen {
    Off,
    At(SocketAddr),
}

fn parse_grpc_listen(s: &str) -> Result<GrpcListen, String> {
    if s.eq_ignore_ascii_case("off") || s.eq_ignore_ascii_case("none") {
        return Ok(GrpcListen::Off);
    }
    s.parse().map(GrpcListen::At).map_err(|e| format!("`{s}` is not host:port or off: {e}"))
}

fn broker_config(a: BrokerArgs) -> Result<BrokerConfig, String> {
    let mut c = match &a.config {
        Some(path) => BrokerConfig::from_toml_file(path).map_err(|e| e.to_string())?,
        None => BrokerConfig::default(),
    };
    if let Some(v) = a.listen {
        c.remoting.listen = v;
    }
    if let Some(p) = a.listen_port {
        c.remoting.listen.set_port(p);
    }
    if a.fast_listen_port.is_some() {
        c.remoting.fast_listen_port = a.fast_listen_port;
    }
    if a.broker_ip.is_some() {
        c.core.broker_ip = a.broker_ip;
    }
    if a.namesrv_addr.is_some() {
        c.core.namesrv_addr = a.namesrv_addr;
    }
    if a.namesrv_listen.is_some() {
        c.remoting.namesrv_listen = a.namesrv_listen;
    }
    if a.no_namesrv {
        c.remoting.namesrv_listen = None;
    }
    if a.metrics_listen.is_some() {
        c.core.metrics_listen = a.metrics_listen;
    }
    match a.grpc_listen {
        Some(GrpcListen::Off) => c.grpc.grpc_listen = None,
        Some(GrpcListen::At(addr)) => c.grpc.grpc_listen = Some(addr),
        None if c.grpc.grpc_listen.is_none() => {
            c.grpc.grpc_listen = Some(DEFAULT_GRPC_LISTEN);
            c.grpc.grpc_listen_is_default = true;
        }
        None => {}
    }
    a.security.apply(&mut c);
    if a.inner_client_authentication_credentials.is_some() {
        c.remoting.inner_client_authentication_credentials =
            a.inner_client_authentication_credentials;
    }
    if let Some(v) = a.cluster_name {
        c.core.cluster_name = v;
    }
    if let Some(v) = a.broker_name {
        c.core.broker_name = v;
    }
    if let Some(v) = a.default_queues {
        c.core.default_queues = v;
    }
    if a.no_auto_create_topic {
        c.core.auto_create_topic = false;
    }
    if let Some(v) = a.memory_budget {
        c.core.memory_budget = v;
    }
    if let Some(v) = a.memory_policy {
        c.core.memory_policy = v;
    }
    if let Some(v) = a.max_message_size {
        c.core.max_message_size =
            usize::try_from(v).map_err(|_| "max-message-size is too large".to_string())?;
    }
    if let Some(v) = a.retention_secs {
        c.core.retention_secs = v;
    }
    if let Some(v) = a.retention_bytes {
        c.core.retention_bytes = v;
    }
    if let Some(v) = a.dlq_retention_secs {
        c.core.dlq_retention_secs = v;
    }
    if let Some(v) = a.dlq_retention_bytes {
        c.core.dlq_retention_bytes = v;
    }
    if let Some(v) = a.trace_retention_secs {
        c.core.trace_retention_secs = v;
    }
    if let Some(v) = a.keep_acknowledged_secs {
        c.core.keep_acknowledged_secs = v;
    }
    if a.replica_id.is_some() {
        c.core.replica_id = a.replica_id;
    }
    if a.replica_peers.is_some() {
        c.core.replica_peers = a.replica_peers.clone();
    }
    if a.replica_replaces.is_some() {
        c.core.replica_replaces = a.replica_replaces;
    }
    if let Some(v) = a.replica_snapshot_logs {
        c.core.replica_snapshot_logs = v;
    }
    if a.replica_secret.is_some() {
        c.core.replica_secret = a.replica_secret.clone();
    }
    if a.replica_tls {
        c.security.replica_tls = true;
    }
    if let Some(v) = &a.store_path_root_dir {
        c.core.store_path_root_dir = Some(v.clone());
    }
    if let Some(v) = a.default_message_request_mode {
        c.remoting.default_message_request_mode = v;
    }
    if let Some(v) = a.pop_retry_max_times {
        c.core.pop_retry_max_times = v;
    }
    if let Some(v) = a.group_idle_secs {
        c.core.group_idle_secs = v;
    }
    if let Some(v) = a.max_transfer_bytes_on_message_in_memory {
        c.remoting.max_transfer_bytes_on_message_in_memory = usize::try_from(v)
            .map_err(|_| "max-transfer-bytes-on-message-in-memory is too large".to_string())?;
    }
    if let Some(v) = a.max_transfer_count_on_message_in_memory {
        c.remoting.max_transfer_count_on_message_in_memory = v;
    }
    if let Some(v) = a.max_connections {
        c.core.max_connections = v;
    }
    if let Some(v) = a.server_channel_max_idle_time_seconds {
        c.remoting.server_channel_max_idle_time_seconds = v;
    }
    if let Some(v) = a.max_suspended_pulls_per_connection {
        c.remoting.max_suspended_pulls_per_connection = v;
    }
    if let Some(v) = a.write_buffer_high_water_mark {
        c.remoting.write_buffer_high_water_mark = usize::try_from(v)
            .map_err(|_| "write-buffer-high-water-mark is too large".to_string())?;
    }
    if let Some(v) = a.transaction_time_out {
        c.core.transaction_time_out = v;
    }
    if let Some(v) = a.transaction_check_interval {
        c.core.transaction_check_interval = v;
    }
    if let Some(v) = a.transaction_check_max {
        c.core.transaction_check_max = v;
    }
    if let Some(v) = a.timer_max_delay_sec {
        c.core.timer_max_delay_sec = v;
    }
    Ok(c)
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM.
async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM");
            None
        }
    };
    let term = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = tokio::signal::ctrl_c() => match r {
            Ok(()) => tracing::info!("Ctrl-C: shutting down"),
            Err(e) => tracing::warn!(error = %e, "cannot listen for Ctrl-C; shutting down"),
        },
        () = term => tracing::info!("SIGTERM: shutting down"),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The screen is the output: no log lines over it.
    #[cfg(feature = "top")]
    if let Command::Top(args) = &cli.command {
        return match top_ui::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("baiji top: {e}");
                ExitCode::FAILURE
            }
        };
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(
            |_| {
                #[cfg(feature = "bench")]
                if matches!(cli.command, Command::Bench(_)) {
                    return tracing_subscriber::EnvFilter::new("warn");
                }
                #[cfg(feature = "replicas")]
                if matches!(cli.command, Command::Replica(_)) {
                    return tracing_subscriber::EnvFilter::new("warn");
                }
                tracing_subscriber::EnvFilter::new("info")
            },
        ))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(alloc_trim::on_park)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("baiji: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    #[cfg(feature = "bench")]
    if let Command::Bench(args) = &cli.command {
        return match runtime.block_on(baiji::bench::run_cli(args)) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("baiji bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    #[cfg(feature = "replicas")]
    if let Command::Replica(args) = &cli.command {
        return match runtime.block_on(replica_command(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("baiji replica: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let result = runtime.block_on(async {
        let running = match cli.command {
            Command::Broker(args) => {
                let config = broker_config(*args)?;
                let running = broker::start(config).await.map_err(|e| e.to_string())?;
                alloc_trim::spawn(running.store());
                running
            }
            Command::Namesrv(args) => {
                let mut config = BrokerConfig {
                    remoting: baiji::broker::RemotingConfig {
                        listen: args.listen,
                        ..Default::default()
                    },
                    ..BrokerConfig::default()
                };
                if let Some(p) = args.listen_port {
                    config.remoting.listen.set_port(p);
                }
                args.security.apply(&mut config);
                broker::start_namesrv_with(config).await.map_err(|e| e.to_string())?
            }
            #[cfg(feature = "bench")]
            Command::Bench(_) => return Ok(()),
            #[cfg(feature = "top")]
            Command::Top(_) => return Ok(()),
            #[cfg(feature = "replicas")]
            Command::Replica(_) => return Ok(()),
        };
        wait_for_signal().await;
        running.shutdown().await;
        tracing::info!("stopped");
        Ok::<(), String>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baiji: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> BrokerConfig {
        let cli = Cli::try_parse_from(["baiji", "broker"].iter().chain(args)).expect("valid flags");
        match cli.command {
            Command::Broker(a) => broker_config(*a).expect("a valid config"),
            _ => panic!("the broker subcommand"),
        }
    }

    #[test]
    fn given_no_grpc_flag_when_starting_the_broker_should_serve_grpc_on_the_proxy_port() {
        assert_eq!(config(&[]).grpc.grpc_listen, Some(DEFAULT_GRPC_LISTEN));
        assert!(
            config(&[]).grpc.grpc_listen_is_default,
            "a default: a second broker may go without"
        );
        assert!(!config(&["--grpc-listen", "127.0.0.1:8081"]).grpc.grpc_listen_is_default);
        assert_eq!(DEFAULT_GRPC_LISTEN.to_string(), "127.0.0.1:8081");
    }

    #[test]
    fn given_fast_listen_port_flags_should_move_or_disable_the_fast_port() {
        let fast = |args: &[&str]| config(args).remoting.fast_listen_port;
        assert_eq!(fast(&[]), None, "unset: RocketMQ's default, listenPort - 2");
        assert_eq!(fast(&["--fast-listen-port", "20909"]), Some(20909));
        assert_eq!(fast(&["--fast-listen-port", "0"]), Some(0), "0 turns it off");
    }

    #[test]
    fn given_grpc_listen_flags_should_move_or_disable_the_grpc_port() {
        let at = config(&["--grpc-listen", "0.0.0.0:9081"]).grpc.grpc_listen;
        assert_eq!(at, Some("0.0.0.0:9081".parse().expect("an address")));
        assert_eq!(config(&["--grpc-listen", "off"]).grpc.grpc_listen, None);
        assert_eq!(config(&["--grpc-listen", "NONE"]).grpc.grpc_listen, None);
        assert!(Cli::try_parse_from(["baiji", "broker", "--grpc-listen", "nowhere"]).is_err());
    }
}
