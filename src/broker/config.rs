//! Broker configuration: command-line flags and the TOML file share one set of keys
//! (kebab-case, named as RocketMQ names them where RocketMQ has a name).
//!
//! The keys are flat, as users write them; in code they fall into one section per part of the
//! broker, each defined where it is read: [`CoreConfig`] (the core), [`RemotingConfig`] (the
//! remoting face), [`GrpcConfig`] (the gRPC face), [`SecurityConfig`] (ACL and TLS). A file
//! key belongs to exactly one section; a key none knows is refused, as before.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::BrokerError;
use crate::store::EngineConfig;

pub use super::core::config::CoreConfig;
pub use super::remoting::config::RemotingConfig;
pub use super::security::config::SecurityConfig;

/// Everything a broker needs to start. `BrokerConfig::default()` serves RocketMQ clients on
/// 127.0.0.1:10911 with an embedded name server on 127.0.0.1:9876.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(try_from = "ConfigFile")]
pub struct BrokerConfig {
    /// The core's settings.
    pub core: CoreConfig,
    /// ACL and TLS.
    pub security: SecurityConfig,
    /// The remoting face's settings.
    pub remoting: RemotingConfig,
    /// The gRPC face's settings.
    pub grpc: GrpcConfig,
}

/// The gRPC face's settings (one section of [`BrokerConfig`](crate::broker::BrokerConfig)).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct GrpcConfig {
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
}

/// The file's flat keys, each taken by the section that knows it; the rest are refused.
#[derive(Deserialize)]
struct ConfigFile {
    #[serde(flatten)]
    core: CoreConfig,
    #[serde(flatten)]
    security: SecurityConfig,
    #[serde(flatten)]
    remoting: RemotingConfig,
    #[serde(flatten)]
    grpc: GrpcConfig,
    /// Whatever no section took (it must come last).
    #[serde(flatten)]
    unknown: BTreeMap<String, IgnoredAny>,
}

impl TryFrom<ConfigFile> for BrokerConfig {
    type Error = String;

    fn try_from(f: ConfigFile) -> Result<Self, String> {
        if let Some(key) = f.unknown.keys().next() {
            return Err(format!("unknown field `{key}`"));
        }
        Ok(BrokerConfig { core: f.core, security: f.security, remoting: f.remoting, grpc: f.grpc })
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
        self.core.advertised(bound)
    }

    /// The external name servers, parsed.
    ///
    /// # Errors
    /// [`BrokerError::Config`] for an entry that is not `host:port`.
    pub fn namesrv_addrs(&self) -> Result<Vec<String>, BrokerError> {
        self.core.namesrv_addrs().map_err(BrokerError::Config)
    }

    /// The engine configuration these settings imply.
    ///
    /// # Errors
    /// [`BrokerError::Config`] for an unknown memory policy or an invalid value.
    pub fn engine_config(&self) -> Result<EngineConfig, BrokerError> {
        let policy = self.core.memory_policy().map_err(BrokerError::Config)?;
        self.remoting.check().map_err(BrokerError::Config)?;
        self.core.engine_config(policy).map_err(BrokerError::Config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::TlsMode;
    use crate::store::MemoryPolicy;

    #[test]
    fn given_block_policy_when_building_the_engine_config_should_refuse_it() {
        let mut c = BrokerConfig::default();
        c.core.memory_policy = "block".into();
        let e = c.engine_config().unwrap_err().to_string();
        assert!(e.contains("block") && e.contains("reject"), "{e}");
        c.core.memory_policy = "drop-oldest".into();
        assert_eq!(c.engine_config().unwrap().policy, MemoryPolicy::DropOldest);
    }

    #[test]
    fn given_a_toml_file_with_metrics_listen_should_read_it_and_default_to_none() {
        assert_eq!(BrokerConfig::default().core.metrics_listen, None, "off unless asked for");
        let c: BrokerConfig = toml::from_str("metrics-listen = \"127.0.0.1:5557\"").unwrap();
        assert_eq!(c.core.metrics_listen, Some("127.0.0.1:5557".parse().unwrap()));
    }

    #[test]
    fn given_a_toml_file_with_a_store_dir_should_read_it_and_take_none_as_off() {
        assert_eq!(BrokerConfig::default().core.store_dir(), None, "off unless asked for");
        let c: BrokerConfig = toml::from_str("store-path-root-dir = \"/dev/shm/baiji/a\"").unwrap();
        assert_eq!(c.core.store_dir(), Some(std::path::Path::new("/dev/shm/baiji/a")));
        let c: BrokerConfig = toml::from_str("store-path-root-dir = \"none\"").unwrap();
        assert_eq!(c.core.store_dir(), None, "none keeps nothing");
    }

    #[test]
    fn given_a_toml_file_with_inner_credentials_should_read_them() {
        let c: BrokerConfig = toml::from_str(
            r#"inner-client-authentication-credentials = '{"accessKey":"ak","secretKey":"sk"}'"#,
        )
        .unwrap();
        let creds = c.remoting.inner_client_authentication_credentials.expect("credentials");
        assert_eq!((creds.access_key.as_str(), creds.secret_key.as_str()), ("ak", "sk"));
    }

    #[test]
    fn given_a_fast_listen_port_key_should_move_or_disable_the_fast_port() {
        let bound: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let fast = |toml: &str| {
            let c: BrokerConfig = toml::from_str(toml).unwrap();
            c.remoting.fast_addr(bound)
        };
        assert_eq!(fast(""), Some(("127.0.0.1:10909".parse().unwrap(), true)), "listenPort - 2");
        assert_eq!(
            fast("fast-listen-port = 20000"),
            Some(("127.0.0.1:20000".parse().unwrap(), false))
        );
        assert_eq!(fast("fast-listen-port = 0"), None, "0 turns it off");
        let low = BrokerConfig::default().remoting.fast_addr("127.0.0.1:2".parse().unwrap());
        assert_eq!(low, None, "no port 0 derived from port 2");
    }

    #[test]
    fn given_huge_max_message_size_when_building_the_engine_config_should_not_overflow() {
        let mut c = BrokerConfig::default();
        c.core.max_message_size = usize::MAX;
        assert_eq!(c.engine_config().unwrap().max_message_size, usize::MAX);
    }

    #[test]
    fn given_flat_keys_of_every_section_when_reading_a_file_should_fill_each_and_refuse_unknown() {
        let c: BrokerConfig = toml::from_str(
            "listen = \"127.0.0.1:1\"\nbroker-name = \"b\"\ntls-mode = \"permissive\"\n\
             grpc-listen = \"127.0.0.1:2\"\nmemory-budget = 4096\n",
        )
        .expect("flat keys");
        assert_eq!(c.remoting.listen, "127.0.0.1:1".parse().unwrap(), "a remoting key");
        assert_eq!(c.core.broker_name, "b", "a core key");
        assert_eq!(c.security.tls_mode, TlsMode::Permissive, "a security key");
        assert_eq!(c.grpc.grpc_listen, Some("127.0.0.1:2".parse().unwrap()), "a gRPC key");
        assert_eq!(c.core.memory_budget, 4096, "an integer through the flattened sections");
        assert_eq!(c.core.cluster_name, "DefaultCluster", "defaults for what the file leaves out");
        let e = toml::from_str::<BrokerConfig>("lissten = \"127.0.0.1:1\"").unwrap_err();
        assert!(e.to_string().contains("unknown field `lissten`"), "{e}");
        let e = toml::from_str::<BrokerConfig>("grpc-listen-is-default = true").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "not a file key: {e}");
    }
}
