//! TLS's shared half: the server's certificate chain and key ([`CertStore`], re-read when the
//! files change) and the rustls server built over it ([`server`]). The remoting face's gate
//! (`remoting/tls.rs`: the three modes, the first-byte sniffing, the handshake timeout) uses
//! them; a gRPC TLS port would use the same store.
//!
//! The certificate and key are re-read when either file's modification time or length changes
//! (polled every 500 ms, as the ACL file): new handshakes get the new pair, established
//! sessions keep theirs. A pair that does not load (unreadable, no certificate, a key that does
//! not match) leaves the previous one in force, with a warning (a poll between writing the key
//! and the chain sees such a half-written pair; the next poll loads the whole one). The client
//! CA (`tls-client-ca`) is read once, at start.

use std::path::{Path, PathBuf};

use tokio_rustls::rustls::client::ResolvesClientCert;
use tokio_rustls::rustls::crypto::{aws_lc_rs, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WantsServerCert;
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{
    ClientConfig, ConfigBuilder, RootCertStore, ServerConfig, SignatureScheme,
};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::config::{ClientAuth, SecurityConfig, TlsMode};
use super::watch::{FileStamp, Reload};
use crate::broker::BrokerError;
use crate::sync::{read, write, Arc, RwLock};

/// The first byte of a TLS record carrying a handshake message (a ClientHello opens with it).
pub(crate) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The server's certificate chain and key, as rustls asks for them at each handshake; replaced
/// by [`CertStore::reload_if_changed`] when the files change.
#[derive(Debug)]
pub(crate) struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    stamp: FileStamp,
}

impl CertStore {
    fn load(
        cert_path: &Path,
        key_path: &Path,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, BrokerError> {
        let stamp = FileStamp::of(&[cert_path, key_path]);
        let key = certified_key(cert_path, key_path, &provider)?;
        Ok(CertStore {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            provider,
            current: RwLock::new(Arc::new(key)),
            stamp,
        })
    }

    /// Re-reads the pair if either file changed; keeps the current one if the new one does not
    /// load.
    pub(crate) fn reload_if_changed(&self) {
        if self.stamp.unchanged(&[&self.cert_path, &self.key_path]) {
            return;
        }
        match certified_key(&self.cert_path, &self.key_path, &self.provider) {
            Ok(key) => {
                *write(&self.current) = Arc::new(key);
                tracing::info!(cert = %self.cert_path.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                tracing::warn!(error = %e, "TLS certificate not reloaded; the previous one stays in use")
            }
        }
    }
}

/// A replica port's client side presents the same pair as its server side (`replica-tls`).
impl ResolvesClientCert for CertStore {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&read(&self.current)))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&read(&self.current)))
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

impl Reload for CertStore {
    fn reload_if_changed(&self) {
        CertStore::reload_if_changed(self);
    }
}

/// The TLS server `config` asks for (`None` under `tls-mode disabled`): the acceptor, over
/// a certificate store read from the PEM files (and reloaded by [`CertStore`]'s watch).
///
/// # Errors
/// [`BrokerError::Config`] when a file is missing or unreadable, holds no certificate or key,
/// or the certificate and key do not match.
pub(crate) fn server(
    config: &SecurityConfig,
) -> Result<Option<(TlsAcceptor, Arc<CertStore>)>, BrokerError> {
    if config.tls_mode == TlsMode::Disabled {
        return Ok(None);
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
    let builder = builder_for(config, provider)?;
    let server = builder.with_cert_resolver(Arc::clone(&certs) as Arc<dyn ResolvesServerCert>);
    Ok(Some((TlsAcceptor::from(Arc::new(server)), certs)))
}

/// TLS for a broker set's replica ports (`replica-tls`; `None` when off): an acceptor that
/// requires a client certificate chaining to `tls-client-ca`, and a connector that trusts that
/// CA alone and presents the replica's own `tls-cert`/`tls-key`. Both sides use one
/// certificate store (reloaded as the remoting ports' is).
///
/// # Errors
/// [`BrokerError::Config`] when `tls-cert`, `tls-key` or `tls-client-ca` is missing or does
/// not load.
#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
pub(crate) fn replica(
    config: &SecurityConfig,
) -> Result<Option<(TlsAcceptor, TlsConnector, Arc<CertStore>)>, BrokerError> {
    if !config.replica_tls {
        return Ok(None);
    }
    let cfg = |what: &str| BrokerError::Config(format!("replica-tls needs {what}"));
    let cert_path = config.tls_cert.as_deref().ok_or_else(|| cfg("tls-cert (PEM chain)"))?;
    let key_path = config.tls_key.as_deref().ok_or_else(|| cfg("tls-key (PEM key)"))?;
    let ca_path = config
        .tls_client_ca
        .as_deref()
        .ok_or_else(|| cfg("tls-client-ca (the PEM CA the replicas' certificates chain to)"))?;
    let provider: Arc<CryptoProvider> = Arc::new(aws_lc_rs::default_provider());
    let certs = Arc::new(CertStore::load(cert_path, key_path, Arc::clone(&provider))?);
    let server = builder_for(
        &SecurityConfig { tls_need_client_auth: ClientAuth::Require, ..config.clone() },
        Arc::clone(&provider),
    )?
    .with_cert_resolver(Arc::clone(&certs) as Arc<dyn ResolvesServerCert>);
    let client =
        client_trusting(ca_path, provider)?.with_client_cert_resolver(Arc::clone(&certs) as _);
    Ok(Some((TlsAcceptor::from(Arc::new(server)), TlsConnector::from(Arc::new(client)), certs)))
}

/// A rustls client builder that trusts the CA certificates in `ca_path` alone.
#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
fn client_trusting(
    ca_path: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<ConfigBuilder<ClientConfig, tokio_rustls::rustls::client::WantsClientCert>, BrokerError>
{
    let cfg = |what: String| BrokerError::Config(what);
    let mut roots = RootCertStore::empty();
    for c in read_certs(ca_path)? {
        roots.add(c).map_err(|e| cfg(format!("a CA certificate in {}: {e}", ca_path.display())))?;
    }
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| cfg(format!("TLS protocol versions: {e}")))?
        .with_root_certificates(roots))
}

/// A TLS client for `baiji replica` against replica ports with `replica-tls`: trusts the CA in
/// `ca`, presents the certificate `cert` with its key `key`.
///
/// # Errors
/// [`BrokerError::Config`] when a file does not load or the pair does not match.
#[cfg_attr(not(feature = "replicas"), allow(dead_code))]
pub(crate) fn replica_client(
    ca: &Path,
    cert: &Path,
    key: &Path,
) -> Result<TlsConnector, BrokerError> {
    let provider: Arc<CryptoProvider> = Arc::new(aws_lc_rs::default_provider());
    let chain = read_certs(cert)?;
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        BrokerError::Config(format!("cannot read a private key from {}: {e}", key.display()))
    })?;
    let client =
        client_trusting(ca, provider)?.with_client_auth_cert(chain, private).map_err(|e| {
            BrokerError::Config(format!(
                "certificate {} and key {}: {e}",
                cert.display(),
                key.display()
            ))
        })?;
    Ok(TlsConnector::from(Arc::new(client)))
}

/// A rustls server builder with the protocol versions and the client authentication
/// `config` asks for.
fn builder_for(
    config: &SecurityConfig,
    provider: Arc<CryptoProvider>,
) -> Result<ConfigBuilder<ServerConfig, WantsServerCert>, BrokerError> {
    let cfg = |what: String| BrokerError::Config(what);
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| cfg(format!("TLS protocol versions: {e}")))?;
    Ok(match config.tls_need_client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let ca_path = config.tls_client_ca.as_deref().ok_or_else(|| {
                cfg("tls-need-client-auth optional or require needs tls-client-ca (PEM)".into())
            })?;
            let mut roots = RootCertStore::empty();
            for c in read_certs(ca_path)? {
                roots
                    .add(c)
                    .map_err(|e| cfg(format!("a CA certificate in {}: {e}", ca_path.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier =
                verifier.build().map_err(|e| cfg(format!("client certificate verifier: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    })
}

/// The gRPC port's TLS server ([`SecurityConfig::grpc_tls`]; `None` when disabled).
#[cfg(feature = "grpc")]
#[derive(Clone)]
pub(crate) struct GrpcTls {
    /// `permissive` or `enforcing`.
    pub(crate) mode: TlsMode,
    /// The acceptor: HTTP/2 only (ALPN `h2`, which gRPC clients require).
    pub(crate) acceptor: TlsAcceptor,
    /// The store of `tls-cert`/`tls-key`, to be watched; `None` for a self-signed certificate.
    pub(crate) certs: Option<Arc<CertStore>>,
    /// The names a self-signed certificate was made for (empty when the files are used).
    pub(crate) self_signed: Vec<String>,
}

/// The gRPC port's TLS server: over `tls-cert`/`tls-key` when they are set (reloaded as the
/// remoting ports' are), else over a certificate made at start for `names` (the hosts and
/// addresses the broker is reached at), self-signed as Apache's proxy makes one when none is
/// configured. ALPN offers `h2` only.
///
/// # Errors
/// [`BrokerError::Config`] for files that do not load, a missing client CA, or a certificate
/// that cannot be made.
#[cfg(feature = "grpc")]
pub(crate) fn grpc_server(
    config: &SecurityConfig,
    names: &[String],
) -> Result<Option<GrpcTls>, BrokerError> {
    let mode = config.grpc_tls();
    if mode == TlsMode::Disabled {
        return Ok(None);
    }
    let provider: Arc<CryptoProvider> = Arc::new(aws_lc_rs::default_provider());
    let builder = builder_for(config, Arc::clone(&provider))?;
    let (mut server, certs, self_signed) = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => {
            let certs = Arc::new(CertStore::load(cert, key, provider)?);
            let resolver = Arc::clone(&certs) as Arc<dyn ResolvesServerCert>;
            (builder.with_cert_resolver(resolver), Some(certs), Vec::new())
        }
        (None, None) => {
            let (chain, key) = self_signed_pair(names)?;
            let server = builder.with_single_cert(chain, key).map_err(|e| {
                BrokerError::Config(format!("the self-signed gRPC certificate: {e}"))
            })?;
            (server, None, names.to_vec())
        }
        _ => {
            return Err(BrokerError::Config(
                "tls-cert and tls-key go together (the gRPC port needs both, or neither for a \
                 self-signed certificate)"
                    .into(),
            ))
        }
    };
    server.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(GrpcTls { mode, acceptor: TlsAcceptor::from(Arc::new(server)), certs, self_signed }))
}

#[cfg(feature = "grpc")]
impl std::fmt::Debug for GrpcTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTls")
            .field("mode", &self.mode)
            .field("self_signed", &self.self_signed)
            .finish_non_exhaustive()
    }
}

/// A self-signed certificate for `names` (DNS names or IP addresses) and its key.
#[cfg(feature = "grpc")]
fn self_signed_pair(
    names: &[String],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), BrokerError> {
    let made = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| BrokerError::Config(format!("cannot make a self-signed certificate: {e}")))?;
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
        .map_err(|e| BrokerError::Config(format!("the self-signed certificate's key: {e}")))?;
    Ok((vec![made.cert.der().clone()], key))
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
