//! TLS on the remoting ports, with RocketMQ's three modes (`TlsMode` in RocketMQ's remoting):
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
//! TLS one is handed to rustls, whose
//! handshake must finish within `tls-handshake-timeout-ms` (Netty's `SslHandler` default, 10 s).
//! The connection code is the same for both (it is generic over the stream), so every bound
//! of README "Limits" applies to TLS connections too.
//!
//! The certificate and key are re-read when either file's modification time or length changes
//! (polled every 500 ms, as the ACL file): new handshakes get the new pair, established
//! sessions keep theirs. A pair that does not load (unreadable, no certificate, a key that does
//! not match) leaves the previous one in force, with a warning (a poll between writing the key
//! and the chain sees such a half-written pair; the next poll loads the whole one). The client
//! CA (`tls-client-ca`) is read once, at start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::rustls::crypto::{aws_lc_rs, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::acl::stamp_of;
use super::security::config::{ClientAuth, SecurityConfig, TlsMode};
use super::BrokerError;
use crate::sync::RwLock;

/// The first byte of a TLS record carrying a handshake message (a ClientHello opens with it).
pub(crate) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What the accept loop needs to admit a connection: the mode and, unless disabled, the
/// acceptor built from the certificate files (and the store it takes the certificate from).
#[derive(Clone)]
pub(crate) struct Gate {
    pub(crate) mode: TlsMode,
    pub(crate) acceptor: Option<TlsAcceptor>,
    pub(crate) handshake_timeout: Duration,
    pub(crate) certs: Option<Arc<CertStore>>,
}

/// The server's certificate chain and key, as rustls asks for them at each handshake; replaced
/// by [`CertStore::reload_if_changed`] when the files change.
#[derive(Debug)]
pub(crate) struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    stamp: std::sync::Mutex<Stamps>,
}

/// The modification time and length of the certificate and key files when last read.
type Stamps = (Option<(SystemTime, u64)>, Option<(SystemTime, u64)>);

impl CertStore {
    fn load(
        cert_path: &Path,
        key_path: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, BrokerError> {
        let stamp = (stamp_of(cert_path), stamp_of(key_path));
        let key = certified_key(cert_path, key_path, &provider)?;
        Ok(CertStore {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            provider,
            current: RwLock::new(Arc::new(key)),
            stamp: std::sync::Mutex::new(stamp),
        })
    }

    /// Re-reads the pair if either file changed; keeps the current one if the new one does not
    /// load.
    pub(crate) fn reload_if_changed(&self) {
        let now = (stamp_of(&self.cert_path), stamp_of(&self.key_path));
        {
            let mut last = self.stamp.lock().unwrap_or_else(|p| p.into_inner());
            if *last == now {
                return;
            }
            *last = now;
        }
        match certified_key(&self.cert_path, &self.key_path, &self.provider) {
            Ok(key) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
                tracing::info!(cert = %self.cert_path.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS certificate not reloaded; the previous one stays in use")
            }
        }
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner())))
    }
}

/// Reads the chain and key and checks that they belong together.
fn certified_key(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, BrokerError> {
    let certs = read_certs(cert_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
        BrokerError::Config(format!("cannot read a private key from {}: {e}", key_path.display()))
    })?;
    let pair = CertifiedKey::from_der(certs, key, provider).map_err(|e| {
        BrokerError::Config(format!(
            "TLS certificate {} and key {}: {e}",
            cert_path.display(),
            key_path.display()
        ))
    })?;
    // `from_der` lets a pair whose match it cannot tell through; a mismatch it can tell is an
    // error above.
    Ok(pair)
}

/// How often the certificate and key files are checked for changes.
const RELOAD_POLL: Duration = Duration::from_millis(500);

/// Reloads `gate`'s certificate when its files change, until shutdown.
pub(crate) async fn watch_files(gate: Arc<Gate>, mut shutdown: watch::Receiver<bool>) {
    let Some(certs) = &gate.certs else { return };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RELOAD_POLL) => certs.reload_if_changed(),
            _ = shutdown.changed() => return,
        }
    }
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
        if config.tls_mode == TlsMode::Disabled {
            return Ok(Gate::disabled());
        }
        let cfg = |what: String| BrokerError::Config(what);
        let cert_path = config.tls_cert.as_deref().ok_or_else(|| {
            cfg("tls-mode permissive or enforcing needs tls-cert (a PEM certificate chain)".into())
        })?;
        let key_path = config.tls_key.as_deref().ok_or_else(|| {
            cfg("tls-mode permissive or enforcing needs tls-key (a PEM private key)".into())
        })?;
        let provider: Arc<CryptoProvider> = Arc::new(aws_lc_rs::default_provider());
        let certs = Arc::new(CertStore::load(cert_path, key_path, Arc::clone(&provider))?);
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| cfg(format!("TLS protocol versions: {e}")))?;
        let builder = match config.tls_need_client_auth {
            ClientAuth::None => builder.with_no_client_auth(),
            auth => {
                let ca_path = config.tls_client_ca.as_deref().ok_or_else(|| {
                    cfg("tls-need-client-auth optional or require needs tls-client-ca (PEM)".into())
                })?;
                let mut roots = RootCertStore::empty();
                for c in read_certs(ca_path)? {
                    roots.add(c).map_err(|e| {
                        cfg(format!("a CA certificate in {}: {e}", ca_path.display()))
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if auth == ClientAuth::Optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| cfg(format!("client certificate verifier: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let server = builder.with_cert_resolver(Arc::clone(&certs) as Arc<dyn ResolvesServerCert>);
        Ok(Gate {
            mode: config.tls_mode,
            acceptor: Some(TlsAcceptor::from(Arc::new(server))),
            handshake_timeout: Duration::from_millis(config.tls_handshake_timeout_ms.max(1)),
            certs: Some(certs),
        })
    }
}

/// The certificates of a PEM file (at least one).
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, BrokerError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            BrokerError::Config(format!("cannot read certificates from {}: {e}", path.display()))
        })?;
    if certs.is_empty() {
        return Err(BrokerError::Config(format!("no certificate in {}", path.display())));
    }
    Ok(certs)
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
