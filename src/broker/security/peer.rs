//! One remoting request to a peer broker over TLS, for what a broker asks its peers on its own
//! (the gRPC route's probe of a peer's gRPC port) when the peer's port does not speak
//! plaintext (`--tls-mode enforcing`). The peer's certificate is not verified, as RocketMQ's
//! remoting client does not verify it by default (`tls.client.authServer=false`): this
//! protects the request from being read on the way, not from a peer impersonated, which the
//! signature of the request and the name server's registrations do not cover either.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{aws_lc_rs, CryptoProvider};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio_rustls::TlsConnector;

use crate::remoting::RemotingCommand;

/// Why a request over TLS got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerTlsError {
    /// Connecting, the handshake, writing or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The request could not be encoded, or the answer not decoded.
    #[error("bad frame: {0}")]
    Frame(#[from] crate::remoting::FrameError),
    /// No TLS client configuration could be built.
    #[error("TLS client configuration: {0}")]
    Config(#[from] tokio_rustls::rustls::Error),
    /// No answer within the time allowed.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The peer closed the connection before it answered.
    #[error("the peer closed the connection")]
    Closed,
}

/// Sends `request` to `addr` over TLS and returns its answer, all within `timeout`.
///
/// # Errors
/// [`PeerTlsError`].
pub(crate) async fn request_once_tls(
    addr: &str,
    mut request: RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand, PeerTlsError> {
    let attempt = async {
        let connector = TlsConnector::from(Arc::new(client_config()?));
        let tcp = TcpStream::connect(addr).await?;
        // Any name: the certificate is not verified (see the module's docs); SNI carries it.
        let name = ServerName::try_from("localhost").map_err(std::io::Error::other)?;
        let mut tls = connector.connect(name, tcp).await?;
        request.opaque = 1;
        let mut buf = BytesMut::new();
        request.encode(&mut buf)?;
        tls.write_all(&buf).await?;
        tls.flush().await?;
        buf.clear();
        loop {
            while let Some(resp) = RemotingCommand::decode(&mut buf)? {
                if resp.opaque == request.opaque && resp.is_response() {
                    return Ok(resp);
                }
            }
            if tls.read_buf(&mut buf).await? == 0 {
                return Err(PeerTlsError::Closed);
            }
        }
    };
    tokio::time::timeout(timeout, attempt).await.unwrap_or(Err(PeerTlsError::Timeout(timeout)))
}

fn client_config() -> Result<ClientConfig, PeerTlsError> {
    let provider = Arc::new(aws_lc_rs::default_provider());
    Ok(ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth())
}

/// Accepts whatever certificate the peer presents, checking only that the handshake's
/// signatures are made with its key.
struct AnyCertificate(Arc<CryptoProvider>);

impl fmt::Debug for AnyCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnyCertificate")
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
