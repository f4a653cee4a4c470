//! The security section of the broker configuration: the ACL file and TLS (file and flag keys
//! stay flat: see [`BrokerConfig`](crate::broker::BrokerConfig)).

use std::path::PathBuf;

use serde::Deserialize;

/// Which connections a remoting port accepts (RocketMQ: `tls.server.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// Plaintext only; TLS handshakes are refused.
    #[default]
    Disabled,
    /// TLS and plaintext on the same port, told apart by the first byte.
    Permissive,
    /// TLS only; plaintext connections are refused.
    Enforcing,
}

impl std::str::FromStr for TlsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "disabled" => Ok(TlsMode::Disabled),
            "permissive" => Ok(TlsMode::Permissive),
            "enforcing" => Ok(TlsMode::Enforcing),
            other => Err(format!(
                "unknown TLS mode `{other}` (expected disabled, permissive or enforcing)"
            )),
        }
    }
}

/// Whether TLS clients must show a certificate (RocketMQ: `tls.server.need.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    None,
    /// A client certificate is asked for and verified if shown; clients without one are served.
    Optional,
    /// A client certificate signed by `tls-client-ca` is required.
    Require,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(ClientAuth::None),
            "optional" => Ok(ClientAuth::Optional),
            "require" => Ok(ClientAuth::Require),
            other => Err(format!(
                "unknown client-auth setting `{other}` (expected none, optional or require)"
            )),
        }
    }
}

/// The ACL and TLS settings (one section of [`BrokerConfig`](crate::broker::BrokerConfig)):
/// they apply to the remoting ports today; the accounts and the certificate store they load
/// are shared, for the gRPC port to use too.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct SecurityConfig {
    /// RocketMQ plain ACL file (`plain_acl.yml` format, re-read when it changes); `None` (the
    /// default) checks nothing. See README, "Security".
    pub acl_file: Option<std::path::PathBuf>,
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
    /// TLS on the gRPC port. `None` (the default) follows `tls-mode` where that is
    /// `permissive` or `enforcing`, and is `permissive` otherwise: the RocketMQ 5 SDKs turn
    /// TLS on by default, and Apache's proxy answers TLS and plaintext on one port
    /// ([`SecurityConfig::grpc_tls`]).
    pub grpc_tls_mode: Option<TlsMode>,
    /// TLS on a broker set's replica ports (`replica-peers`): TLS only, both ways
    /// authenticated. Each replica presents `tls-cert`/`tls-key` as server and as client, and
    /// accepts only peers whose certificates chain to `tls-client-ca`; a replica checks that a
    /// peer's certificate names the host of its `replica-peers` address. Off by default.
    pub replica_tls: bool,
}

impl SecurityConfig {
    /// The TLS mode of the gRPC port (see [`grpc_tls_mode`](Self::grpc_tls_mode)).
    #[must_use]
    pub fn grpc_tls(&self) -> TlsMode {
        match (self.grpc_tls_mode, self.tls_mode) {
            (Some(m), _) => m,
            (None, TlsMode::Disabled) => TlsMode::Permissive,
            (None, m) => m,
        }
    }
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            acl_file: None,
            tls_mode: TlsMode::Disabled,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_need_client_auth: ClientAuth::None,
            tls_handshake_timeout_ms: 10_000,
            grpc_tls_mode: None,
            replica_tls: false,
        }
    }
}
