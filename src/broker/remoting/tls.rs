//! The remoting ports' TLS gate, with RocketMQ's three modes (`TlsMode` in RocketMQ's
//! remoting):
//!
//! * `disabled` (default): plaintext only, and nothing is sniffed (no extra syscall per
//!   connection): a TLS ClientHello is read as a frame whose 4-byte length (`16 03 0x ..`,
//!   about 369 MB) is over the frame limit, so the connection is closed as for any unparseable
//!   frame (counted in `bad_frames`);
//! * `permissive`: the first byte decides, so TLS and plaintext clients share one port;
//! * `enforcing`: TLS only; a plaintext connection is closed.
//!
//! Under `permissive` and `enforcing` the first byte is peeked (not consumed) before anything
//! else runs, so a plaintext connection reaches the connection code byte for byte as before; a
//! TLS one is handed to rustls (the shared [`security::tls`](crate::broker::security::tls)
//! server and certificate store), whose handshake must finish within
//! `tls-handshake-timeout-ms` (Netty's `SslHandler` default, 10 s). The connection code is the
//! same for both (it is generic over the stream), so every bound of README "Limits" applies
//! to TLS connections too.

use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::broker::security::config::{SecurityConfig, TlsMode};
use crate::broker::security::tls::{self, CertStore};
use crate::broker::BrokerError;
use crate::sync::Arc;

pub(crate) use crate::broker::security::tls::TLS_HANDSHAKE_RECORD;

/// What the accept loop needs to admit a connection: the mode and, unless disabled, the
/// acceptor built from the certificate files (and the store it takes the certificate from).
#[derive(Clone)]
pub(crate) struct Gate {
    pub(crate) mode: TlsMode,
    pub(crate) acceptor: Option<TlsAcceptor>,
    pub(crate) handshake_timeout: Duration,
    pub(crate) certs: Option<Arc<CertStore>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("mode", &self.mode)
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// Plaintext only (the default).
    pub(crate) fn disabled() -> Self {
        Gate {
            mode: TlsMode::Disabled,
            acceptor: None,
            handshake_timeout: Duration::ZERO,
            certs: None,
        }
    }

    /// Builds the gate the configuration asks for, reading the PEM files.
    ///
    /// # Errors
    /// [`BrokerError::Config`] when a file is missing or unreadable, holds no certificate or
    /// key, or the certificate and key do not match.
    pub(crate) fn from_config(config: &SecurityConfig) -> Result<Self, BrokerError> {
        match tls::server(config)? {
            None => Ok(Gate::disabled()),
            Some((acceptor, certs)) => Ok(Gate {
                mode: config.tls_mode,
                acceptor: Some(acceptor),
                handshake_timeout: Duration::from_millis(config.tls_handshake_timeout_ms.max(1)),
                certs: Some(certs),
            }),
        }
    }
}

/// Waits for the first byte of a new connection without consuming it; `None` if the peer
/// closed (or the socket failed) before sending one.
pub(crate) async fn first_byte(stream: &TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match stream.peek(&mut b).await {
        Ok(1) => Some(b[0]),
        _ => None,
    }
}
