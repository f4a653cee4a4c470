//! Broker configuration: command-line flags and the TOML file share one set of keys
//! (kebab-case, named as RocketMQ names them where RocketMQ has a name).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::tls::{ClientAuth, TlsMode};
use super::BrokerError;
use crate::store::{EngineConfig, EngineError, MemoryPolicy, Retention};

/// Everything a broker needs to start. `BrokerConfig::default()` serves RocketMQ clients on
/// 127.0.0.1:10911 with an embedded name server on 127.0.0.1:9876.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct BrokerConfig {
    /// Address the broker listens on (RocketMQ: `listenPort`, default 10911).
    pub listen: SocketAddr,
    /// IP published to clients in routes and message ids (RocketMQ: `brokerIP1`); the listen
    /// address's IP when unset (or 127.0.0.1 if that is unspecified).
    pub broker_ip: Option<IpAddr>,
    /// The embedded name server's address; `None` disables it. Ignored when
    /// `namesrv-addr` is set.
    pub namesrv_listen: Option<SocketAddr>,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); `None` (the default)
    /// serves none (RocketMQ's `metricsExporterType` defaults to `DISABLE` too; its
    /// Prometheus exporter's port is 5557).
    pub metrics_listen: Option<SocketAddr>,
    /// Address of the RocketMQ 5 gRPC endpoint (`apache.rocketmq.v2.MessagingService`, what
    /// the 5.x SDKs speak; the proxy's `grpcServerPort`, 8081); `None` serves none. The
    /// library default is `None`; the `baiji broker` command serves `127.0.0.1:8081` unless
    /// told `--grpc-listen off`. Needs cargo feature `grpc`.
    pub grpc_listen: Option<SocketAddr>,
    /// `grpc_listen` is a default nobody asked for (the `baiji broker` command's 8081 when
    /// neither a flag nor the file names one): if that port is taken — a second broker on the
    /// same host — the broker logs a warning and serves remoting only, instead of refusing to
    /// start. An address that was asked for must bind. Not a file key.
    #[serde(skip)]
    pub grpc_listen_is_default: bool,
    /// RocketMQ plain ACL file (`plain_acl.yml` format, re-read when it changes); `None` (the
    /// default) checks nothing. See README, "Security".
    pub acl_file: Option<std::path::PathBuf>,
    /// The account the broker signs its requests to external name servers with (RocketMQ 5:
    /// `innerClientAuthenticationCredentials`, the same JSON:
    /// `{"accessKey":"...","secretKey":"..."}`); needed when they check ACL (registering is
    /// an admin code there). `None` (the default): unsigned.
    pub inner_client_authentication_credentials: Option<super::acl::Credentials>,
    /// External name servers, `host:port;host:port` (RocketMQ: `namesrvAddr`). When set, the
    /// broker registers with them instead of embedding one.
    pub namesrv_addr: Option<String>,
    /// Cluster name (RocketMQ: `brokerClusterName`).
    pub cluster_name: String,
    /// Broker name (RocketMQ: `brokerName`).
    pub broker_name: String,
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
    /// A client that has not sent a heartbeat for this long is dropped, seconds.
    pub client_expiry_secs: u64,
    /// A clustering group without members stops holding messages after this long, seconds
    /// (0: never).
    pub group_idle_secs: u64,
    /// Longest a suspended pull is held, milliseconds (clients ask for 15 s; their RPC
    /// timeout is 30 s).
    pub long_poll_max_ms: u64,
    /// Seconds between re-registrations with external name servers (RocketMQ:
    /// `registerNameServerPeriod`, 30 s).
    pub register_interval_secs: u64,
    /// Most bytes of messages one pull answers with (RocketMQ:
    /// `maxTransferBytesOnMessageInMemory`, 256 KiB). The client's `maxMsgBytes` is ignored, as
    /// RocketMQ 5 ignores it; the first message is returned whatever its size, and the client
    /// pulls again for the rest.
    pub max_transfer_bytes_on_message_in_memory: usize,
    /// Most messages one pull answers with (RocketMQ: `maxTransferCountOnMessageInMemory`, 32);
    /// fewer if the client asks for fewer.
    pub max_transfer_count_on_message_in_memory: usize,
    /// Most connections served at once per listener (broker and name-server ports each); one
    /// more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A connection with no traffic either way for this long is closed, seconds (RocketMQ:
    /// `serverChannelMaxIdleTimeSeconds`, 120; 0: never).
    pub server_channel_max_idle_time_seconds: u64,
    /// Most pulls one connection may have suspended (long polling); one more is answered at
    /// once, as if its hold had expired.
    pub max_suspended_pulls_per_connection: usize,
    /// While more than this many bytes of one connection's answers wait to be written, the
    /// broker reads no more of its requests (RocketMQ: `writeBufferHighWaterMark`, 4 MiB).
    pub write_buffer_high_water_mark: usize,
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
    /// TLS on the broker port and the embedded name server's (RocketMQ: `tls.server.mode`):
    /// `disabled` (default), `permissive` (TLS and plaintext on one port) or `enforcing`.
    pub tls_mode: TlsMode,
    /// PEM certificate chain the remoting ports present (RocketMQ: `tls.server.certPath`).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `tls-cert` (RocketMQ: `tls.server.keyPath`).
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates client certificates must chain to (RocketMQ:
    /// `tls.server.trustCertPath`); needed when `tls-need-client-auth` is not `none`.
    pub tls_client_ca: Option<PathBuf>,
    /// `none` (default), `optional` or `require` (RocketMQ: `tls.server.need.client.auth`).
    pub tls_need_client_auth: ClientAuth,
    /// A TLS handshake not finished this long after its first byte closes the connection,
    /// milliseconds (Netty's `SslHandler` default, 10000).
    pub tls_handshake_timeout_ms: u64,
    /// How a group whose mode no `SET_MESSAGE_REQUEST_MODE` set reads a topic, as
    /// `QUERY_ASSIGNMENT` tells clients that ask (RocketMQ: `defaultMessageRequestMode`):
    /// `PULL` (default) or `POP`. Only clients with client-side rebalancing off ask.
    pub default_message_request_mode: String,
    /// Redeliveries of a popped message after its invisible time expired before it goes to
    /// `%DLQ%<group>` (RocketMQ: the subscription group's `retryMaxTimes`, 16): a message is
    /// popped at most this many times plus one.
    pub pop_retry_max_times: u32,
}

/// The configuration name of a memory policy (`memory-policy`).
pub(crate) fn policy_name(p: MemoryPolicy) -> &'static str {
    match p {
        MemoryPolicy::Reject => "reject",
        MemoryPolicy::DropOldest => "drop-oldest",
        MemoryPolicy::Block => "block",
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 10911),
            broker_ip: None,
            namesrv_listen: Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9876)),
            metrics_listen: None,
            grpc_listen: None,
            grpc_listen_is_default: false,
            acl_file: None,
            inner_client_authentication_credentials: None,
            namesrv_addr: None,
            cluster_name: "DefaultCluster".into(),
            broker_name: "baiji-a".into(),
            default_queues: 8,
            auto_create_topic: true,
            memory_budget: 1 << 30,
            memory_policy: "reject".into(),
            max_message_size: 4 * 1024 * 1024,
            retention_secs: 60,
            retention_bytes: 64 * 1024 * 1024,
            dlq_retention_secs: 72 * 3600,
            dlq_retention_bytes: 64 * 1024 * 1024,
            client_expiry_secs: 120,
            group_idle_secs: 1800,
            long_poll_max_ms: 25_000,
            register_interval_secs: 30,
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            max_transfer_count_on_message_in_memory: 32,
            max_connections: 10_000,
            server_channel_max_idle_time_seconds: 120,
            max_suspended_pulls_per_connection: 1024,
            write_buffer_high_water_mark: 4 * 1024 * 1024,
            transaction_time_out: 6_000,
            transaction_check_interval: 30_000,
            transaction_check_max: 15,
            timer_max_delay_sec: 259_200,
            tls_mode: TlsMode::Disabled,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_need_client_auth: ClientAuth::None,
            tls_handshake_timeout_ms: 10_000,
            default_message_request_mode: "PULL".into(),
            pop_retry_max_times: 16,
        }
    }
}

impl BrokerConfig {
    /// Reads a TOML file with the same keys as the command-line flags.
    ///
    /// # Errors
    /// [`BrokerError::Config`] if the file cannot be read or parsed.
    pub fn from_toml_file(path: &Path) -> Result<Self, BrokerError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BrokerError::Config(format!("cannot read {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| BrokerError::Config(format!("{}: {e}", path.display())))
    }

    /// The address clients are told to connect to.
    pub fn advertised(&self, bound: SocketAddr) -> SocketAddr {
        let ip = self.broker_ip.unwrap_or(if bound.ip().is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            bound.ip()
        });
        SocketAddr::new(ip, bound.port())
    }

    /// The byte bound of one pull's messages: the configured one, kept below the frame limit
    /// with room for the response header.
    pub(crate) fn pull_max_bytes(&self) -> usize {
        const HEADER_ROOM: usize = 1024 * 1024;
        self.max_transfer_bytes_on_message_in_memory
            .clamp(1, crate::remoting::frame::MAX_FRAME_LEN - HEADER_ROOM)
    }

    /// The cap on suspended pulls of one connection, kept to what a channel can hold.
    pub(crate) fn suspended_pull_cap(&self) -> usize {
        self.max_suspended_pulls_per_connection.min(1 << 20)
    }

    /// The message-count bound of one pull (at least one).
    /// Whether groups pop by default (`default-message-request-mode = "POP"`).
    pub(crate) fn pop_by_default(&self) -> bool {
        self.default_message_request_mode.eq_ignore_ascii_case("POP")
    }

    pub(crate) fn pull_max_count(&self) -> usize {
        self.max_transfer_count_on_message_in_memory.max(1)
    }

    /// The external name servers, parsed.
    ///
    /// # Errors
    /// [`BrokerError::Config`] for an entry that is not `host:port`.
    pub fn namesrv_addrs(&self) -> Result<Vec<String>, BrokerError> {
        let Some(list) = &self.namesrv_addr else { return Ok(Vec::new()) };
        let addrs: Vec<String> =
            list.split(';').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
        for a in &addrs {
            let ok =
                a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(BrokerError::Config(format!(
                    "namesrv-addr entry `{a}` is not host:port"
                )));
            }
        }
        if addrs.is_empty() {
            return Err(BrokerError::Config("namesrv-addr is empty".into()));
        }
        Ok(addrs)
    }

    /// The engine configuration these settings imply.
    ///
    /// # Errors
    /// [`BrokerError::Config`] for an unknown memory policy or an invalid value.
    pub fn engine_config(&self) -> Result<EngineConfig, BrokerError> {
        let policy: MemoryPolicy = self
            .memory_policy
            .parse()
            .map_err(|e: EngineError| BrokerError::Config(e.to_string()))?;
        if policy == MemoryPolicy::Block {
            // Every broker append is synchronous, so `block` would behave exactly like
            // `reject` (review 3.4): refuse it rather than let it pretend to wait.
            return Err(BrokerError::Config(
                "memory-policy block is the in-process API's policy (an async send waits for \
                 room); the broker answers every send at once: use reject (clients get \
                 SYSTEM_BUSY and retry) or drop-oldest"
                    .into(),
            ));
        }
        if !["PULL", "POP"]
            .iter()
            .any(|m| self.default_message_request_mode.eq_ignore_ascii_case(m))
        {
            return Err(BrokerError::Config(format!(
                "default-message-request-mode must be PULL or POP, not `{}`",
                self.default_message_request_mode
            )));
        }
        if self.default_queues == 0 || self.default_queues > crate::store::MAX_QUEUES {
            return Err(BrokerError::Config(format!(
                "default-queues must be between 1 and {}",
                crate::store::MAX_QUEUES
            )));
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
            ..EngineConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_block_policy_when_building_the_engine_config_should_refuse_it() {
        let c = BrokerConfig { memory_policy: "block".into(), ..BrokerConfig::default() };
        let e = c.engine_config().unwrap_err().to_string();
        assert!(e.contains("block") && e.contains("reject"), "{e}");
        let c = BrokerConfig { memory_policy: "drop-oldest".into(), ..BrokerConfig::default() };
        assert_eq!(c.engine_config().unwrap().policy, MemoryPolicy::DropOldest);
    }

    #[test]
    fn given_a_toml_file_with_metrics_listen_should_read_it_and_default_to_none() {
        assert_eq!(BrokerConfig::default().metrics_listen, None, "off unless asked for");
        let c: BrokerConfig = toml::from_str("metrics-listen = \"127.0.0.1:5557\"").unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:5557".parse().unwrap()));
    }

    #[test]
    fn given_a_toml_file_with_inner_credentials_should_read_them() {
        let c: BrokerConfig = toml::from_str(
            r#"inner-client-authentication-credentials = '{"accessKey":"ak","secretKey":"sk"}'"#,
        )
        .unwrap();
        let creds = c.inner_client_authentication_credentials.expect("credentials");
        assert_eq!((creds.access_key.as_str(), creds.secret_key.as_str()), ("ak", "sk"));
    }

    #[test]
    fn given_huge_max_message_size_when_building_the_engine_config_should_not_overflow() {
        let c = BrokerConfig { max_message_size: usize::MAX, ..BrokerConfig::default() };
        assert_eq!(c.engine_config().unwrap().max_message_size, usize::MAX);
    }
}
