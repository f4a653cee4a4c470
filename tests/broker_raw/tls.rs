//! TLS on the remoting port (`--tls-mode`): a rustls client speaking the RocketMQ protocol
//! (rocketmq-client-rust 1.0.0 has TLS only behind its transport's `tls` feature, which its
//! published build leaves off). Certificates are generated here, per test, by rcgen; no key is
//! committed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use baiji::broker::{ClientAuth, TlsMode};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::*;

/// A CA, a server certificate for `localhost`/127.0.0.1 and a client certificate it signed,
/// written as PEM files to a directory removed on drop.
pub(super) struct Pki {
    pub(super) dir: PathBuf,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl Pki {
    pub(super) fn new() -> Pki {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "baiji-tls-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("a CA certificate");
        let server_key = KeyPair::generate().expect("a server key");
        let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("server params")
            .signed_by(&server_key, &ca)
            .expect("a server certificate");
        let client_key = KeyPair::generate().expect("a client key");
        let client = CertificateParams::new(vec!["client.test".to_string()])
            .expect("client params")
            .signed_by(&client_key, &ca)
            .expect("a client certificate");
        std::fs::write(dir.join("server.pem"), server.pem()).expect("write");
        std::fs::write(dir.join("server.key"), server_key.serialize_pem()).expect("write");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
        Pki {
            dir,
            ca_pem: ca.pem(),
            client_cert_pem: client.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    /// Points `c` at the server certificate and key, in `mode`.
    fn configure(&self, c: &mut BrokerConfig, mode: TlsMode) {
        c.security.tls_mode = mode;
        c.security.tls_cert = Some(self.dir.join("server.pem"));
        c.security.tls_key = Some(self.dir.join("server.key"));
    }

    /// A client trusting the CA, showing the client certificate if `with_cert`.
    fn connector(&self, with_cert: bool) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).expect("CA PEM"))
            .expect("a trusted CA");
        let builder = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
        let config = if with_cert {
            let cert =
                CertificateDer::from_pem_slice(self.client_cert_pem.as_bytes()).expect("cert PEM");
            let key =
                PrivateKeyDer::from_pem_slice(self.client_key_pem.as_bytes()).expect("key PEM");
            builder.with_client_auth_cert(vec![cert], key).expect("a client certificate")
        } else {
            builder.with_no_client_auth()
        };
        TlsConnector::from(Arc::new(config))
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One RocketMQ connection over TLS.
struct TlsConn {
    stream: TlsStream<TcpStream>,
    buf: BytesMut,
    next_opaque: i32,
}

impl TlsConn {
    /// Connects and completes the handshake, or says why not.
    async fn open(addr: SocketAddr, connector: &TlsConnector) -> std::io::Result<TlsConn> {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from("localhost").expect("a server name");
        let stream = tokio::time::timeout(PATIENCE, connector.connect(name, tcp))
            .await
            .map_err(|_| std::io::Error::other("handshake not finished in time"))??;
        Ok(TlsConn { stream, buf: BytesMut::new(), next_opaque: 1 })
    }

    /// Sends `cmd` and waits for its answer; an error if the connection fails or closes.
    async fn call(&mut self, mut cmd: RemotingCommand) -> std::io::Result<RemotingCommand> {
        self.next_opaque += 1;
        cmd.opaque = self.next_opaque;
        let mut out = BytesMut::new();
        cmd.encode(&mut out).expect("an encodable command");
        self.stream.write_all(&out).await?;
        self.stream.flush().await?;
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            while let Some(resp) = RemotingCommand::decode(&mut self.buf).expect("a valid frame") {
                if resp.opaque == cmd.opaque {
                    return Ok(resp);
                }
            }
            let n = tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf))
                .await
                .map_err(|_| std::io::Error::other("no answer in time"))??;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}

/// Creates a topic, sends two messages and pulls them back, all over `conn`.
async fn send_and_pull(conn: &mut TlsConn, topic: &str) {
    let r = conn.call(create_topic_request(topic, 4)).await.expect("answered");
    assert_eq!(r.code, code::SUCCESS, "creating a topic over TLS succeeds: {r:?}");
    for body in [&b"tls-0"[..], b"tls-1"] {
        let r = conn.call(send_request(topic, 1, body.to_vec())).await.expect("answered");
        assert_eq!(r.code, code::SUCCESS, "a send over TLS succeeds: {r:?}");
    }
    let r = conn
        .call(pull_request("tls_group", topic, 1, 0, 300, SUB_AND_SUSPEND))
        .await
        .expect("answered");
    assert_eq!(r.code, code::SUCCESS, "a pull over TLS finds the messages: {r:?}");
    let msgs = decode_records(&r.body).expect("a valid pull body");
    let bodies: Vec<&[u8]> = msgs.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, [&b"tls-0"[..], b"tls-1"], "the messages come back over TLS in order");
}

/// Whether the broker closes `stream` (EOF or reset) within the patience, after it wrote `bytes`.
async fn closed_by_broker(mut stream: TcpStream, bytes: &[u8]) -> bool {
    let _ = stream.write_all(bytes).await;
    let mut sink = [0u8; 256];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// A plaintext GET_MAX_OFFSET frame exactly as the clients write it.
fn plain_frame() -> Vec<u8> {
    let mut out = BytesMut::new();
    max_offset_request("TlsTopic", 0).encode(&mut out).expect("an encodable command");
    out.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_permissive_mode_should_serve_tls_and_plaintext_clients_on_one_port() {
    let pki = Pki::new();
    let broker = start_broker(|c| pki.configure(c, TlsMode::Permissive)).await;
    let mut tls = TlsConn::open(broker_addr(&broker), &pki.connector(false))
        .await
        .expect("a TLS handshake succeeds under permissive");
    send_and_pull(&mut tls, "TlsTopic").await;
    let mut plain = Conn::open(broker_addr(&broker)).await;
    let r = plain.call(max_offset_request("TlsTopic", 1)).await;
    assert_eq!(r.code, code::SUCCESS, "plaintext is served under permissive: {r:?}");
    assert_eq!(r.ext_fields.get("offset"), Some("2"), "and sees the TLS client's sends: {r:?}");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_enforcing_mode_should_serve_tls_and_close_plaintext_on_both_ports() {
    let pki = Pki::new();
    let broker = start_broker(|c| pki.configure(c, TlsMode::Enforcing)).await;
    let mut tls = TlsConn::open(broker_addr(&broker), &pki.connector(false))
        .await
        .expect("a TLS handshake succeeds under enforcing");
    send_and_pull(&mut tls, "TlsTopic").await;
    let plain = TcpStream::connect(broker_addr(&broker)).await.expect("connects");
    assert!(
        closed_by_broker(plain, &plain_frame()).await,
        "a plaintext request is refused (connection closed) under enforcing"
    );
    let namesrv = broker.namesrv_addr().expect("an embedded name server");
    let plain = TcpStream::connect(namesrv).await.expect("connects");
    assert!(
        closed_by_broker(plain, &plain_frame()).await,
        "the embedded name server refuses plaintext under enforcing too"
    );
    assert_eq!(broker.connections_refused(), 2, "both counted as refused connections");
    let mut ns =
        TlsConn::open(namesrv, &pki.connector(false)).await.expect("TLS to the name server");
    let mut ext = ExtFields::new();
    ext.insert("topic", "TlsTopic");
    let r = ns.call(request(rc::GET_ROUTEINFO_BY_TOPIC, ext)).await.expect("answered");
    assert_eq!(r.code, code::SUCCESS, "the name server answers routes over TLS: {r:?}");
    // The TLS connection is still served after the refusals.
    let r = tls.call(max_offset_request("TlsTopic", 1)).await.expect("answered");
    assert_eq!(r.ext_fields.get("offset"), Some("2"), "{r:?}");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_disabled_mode_should_refuse_a_tls_handshake_and_serve_plaintext() {
    let pki = Pki::new();
    let broker = start_broker(|c| c.security.tls_mode = TlsMode::Disabled).await;
    let refused = TlsConn::open(broker_addr(&broker), &pki.connector(false)).await;
    assert!(refused.is_err(), "a TLS handshake is refused under disabled");
    assert_eq!(
        (broker.connections_refused(), broker.bad_frames()),
        (0, 1),
        "nothing is sniffed under disabled: the ClientHello is an unparseable frame (its length \
         is over the limit), closed at its first 4 bytes"
    );
    let mut plain = Conn::open(broker_addr(&broker)).await;
    let r = plain.call(create_topic_request("TlsTopic", 4)).await;
    assert_eq!(r.code, code::SUCCESS, "plaintext is served under disabled: {r:?}");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_required_client_auth_should_refuse_a_client_without_a_certificate() {
    let pki = Pki::new();
    let broker = start_broker(|c| {
        pki.configure(c, TlsMode::Enforcing);
        c.security.tls_client_ca = Some(pki.dir.join("ca.pem"));
        c.security.tls_need_client_auth = ClientAuth::Require;
    })
    .await;
    // Under TLS 1.3 the client's handshake ends before the server has judged its (missing)
    // certificate: the refusal shows on the first request at the latest.
    let refused = match TlsConn::open(broker_addr(&broker), &pki.connector(false)).await {
        Err(_) => true,
        Ok(mut conn) => conn.call(create_topic_request("TlsTopic", 4)).await.is_err(),
    };
    assert!(refused, "a client without a certificate is refused when one is required");
    let mut with_cert = TlsConn::open(broker_addr(&broker), &pki.connector(true))
        .await
        .expect("a client with a certificate signed by the CA is admitted");
    send_and_pull(&mut with_cert, "TlsTopic").await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tls_handshake_that_stalls_should_close_it_after_the_handshake_timeout() {
    let pki = Pki::new();
    let broker = start_broker(|c| {
        pki.configure(c, TlsMode::Permissive);
        c.security.tls_handshake_timeout_ms = 300;
    })
    .await;
    let stalled = TcpStream::connect(broker_addr(&broker)).await.expect("connects");
    // The first bytes of a TLS record header (handshake, TLS 1.0 record version), then nothing.
    assert!(
        closed_by_broker(stalled, &[0x16, 0x03, 0x01]).await,
        "a handshake that stalls is closed (well before the 120 s idle time)"
    );
    let mut tls = TlsConn::open(broker_addr(&broker), &pki.connector(false)).await.expect("TLS");
    send_and_pull(&mut tls, "TlsTopic").await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_tls_mode_without_a_certificate_should_refuse_to_start() {
    let config = BrokerConfig {
        security: baiji::broker::SecurityConfig {
            tls_mode: TlsMode::Enforcing,
            ..Default::default()
        },
        remoting: baiji::broker::RemotingConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            namesrv_listen: None,
            ..Default::default()
        },
        ..BrokerConfig::default()
    };
    let Err(e) = baiji::broker::start(config).await else {
        panic!("a broker in enforcing mode without a certificate must not start");
    };
    assert!(e.to_string().contains("tls-cert"), "the error names the missing flag: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_standalone_name_server_in_enforcing_mode_should_answer_over_tls_and_close_plaintext(
) {
    let pki = Pki::new();
    let mut config = BrokerConfig {
        remoting: baiji::broker::RemotingConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            ..Default::default()
        },
        ..Default::default()
    };
    pki.configure(&mut config, TlsMode::Enforcing);
    let namesrv = baiji::broker::start_namesrv_with(config).await.expect("the name server starts");
    let addr = namesrv.namesrv_addr().expect("its address");
    let mut tls = TlsConn::open(addr, &pki.connector(false)).await.expect("a TLS handshake");
    let mut ext = ExtFields::new();
    ext.insert("topic", "TBW102");
    let r = tls.call(request(rc::GET_ROUTEINFO_BY_TOPIC, ext)).await.expect("answered");
    assert_eq!(r.code, code::TOPIC_NOT_EXIST, "the name server answers over TLS: {r:?}");
    let plain = TcpStream::connect(addr).await.expect("connects");
    assert!(
        closed_by_broker(plain, &plain_frame()).await,
        "the standalone name server refuses plaintext under enforcing"
    );
    assert_eq!(namesrv.connections_refused(), 1, "counted as a refused connection");
    namesrv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_certificate_files_change_should_handshake_with_the_new_pair_and_keep_sessions() {
    let (old, new) = (Pki::new(), Pki::new());
    let broker = start_broker(|c| old.configure(c, TlsMode::Enforcing)).await;
    let addr = broker_addr(&broker);
    let mut session = TlsConn::open(addr, &old.connector(false)).await.expect("the first pair");
    send_and_pull(&mut session, "TlsTopic").await;
    assert!(
        TlsConn::open(addr, &new.connector(false)).await.is_err(),
        "a client trusting only the new CA refuses the first certificate"
    );
    // A poll between these two copies sees a mismatched pair and keeps the first one.
    std::fs::copy(new.dir.join("server.key"), old.dir.join("server.key")).expect("copy");
    std::fs::copy(new.dir.join("server.pem"), old.dir.join("server.pem")).expect("copy");
    let deadline = Instant::now() + PATIENCE;
    loop {
        if TlsConn::open(addr, &new.connector(false)).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "new handshakes use the new pair within the patience");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = session.call(max_offset_request("TlsTopic", 1)).await.expect("the old session");
    assert_eq!(r.ext_fields.get("offset"), Some("2"), "an established session is kept: {r:?}");
    // A chain that no longer loads leaves the current pair in use.
    std::fs::write(old.dir.join("server.pem"), "not a certificate").expect("write");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        TlsConn::open(addr, &new.connector(false)).await.is_ok(),
        "a broken certificate file keeps the last good pair"
    );
    broker.shutdown().await;
}

/// The HTTP/2 client preface a plaintext gRPC client opens with.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A broker with a gRPC port on a free loopback port, adjusted by `tweak`.
async fn grpc_broker(tweak: impl FnOnce(&mut BrokerConfig)) -> RunningBroker {
    common::broker::start(common::broker::with_grpc(), tweak).await
}

/// `connector`'s config offering ALPN `h2`, as gRPC clients do.
fn h2(mut config: ClientConfig) -> TlsConnector {
    config.alpn_protocols = vec![b"h2".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// A client config trusting exactly `roots`.
fn trusting(roots: RootCertStore) -> ClientConfig {
    ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// Handshakes with the gRPC port as `name`; the negotiated ALPN protocol and the server's
/// end-entity certificate.
async fn grpc_handshake(
    addr: SocketAddr,
    connector: &TlsConnector,
    name: &str,
) -> std::io::Result<(Option<Vec<u8>>, CertificateDer<'static>)> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned()).expect("a server name");
    let tls = tokio::time::timeout(PATIENCE, connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::other("handshake not finished in time"))??;
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let cert = session.peer_certificates().and_then(|c| c.first()).expect("a certificate");
    Ok((alpn, cert.clone().into_owned()))
}

/// A verifier that accepts any certificate (to read the one a server presents).
#[derive(Debug)]
struct AnyCert(Arc<tokio_rustls::rustls::crypto::CryptoProvider>);

impl tokio_rustls::rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: tokio_rustls::rustls::pki_types::UnixTime,
    ) -> Result<tokio_rustls::rustls::client::danger::ServerCertVerified, tokio_rustls::rustls::Error>
    {
        Ok(tokio_rustls::rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
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
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        tokio_rustls::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client config that accepts whatever certificate the server presents.
fn accepting_any_certificate() -> ClientConfig {
    let provider = Arc::new(aws_lc_rs::default_provider());
    ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_no_tls_settings_when_a_tls_client_connects_to_the_grpc_port_should_serve_a_self_signed_certificate_and_h2(
) {
    // The 5.x SDKs turn TLS on by default; Apache's proxy answers it on the gRPC port with a
    // certificate it made itself. baiji's gRPC port was plaintext only.
    let broker = grpc_broker(|_| {}).await;
    let addr = broker.grpc_addr().expect("a gRPC port");
    let any = accepting_any_certificate();
    let (alpn, cert) = grpc_handshake(addr, &h2(any), "127.0.0.1").await.expect("a TLS handshake");
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "HTTP/2 negotiated, as gRPC needs");
    // Self-signed, for the loopback address: it verifies against itself as the only root.
    let mut roots = RootCertStore::empty();
    roots.add(cert).expect("the presented certificate as a root");
    let strict = h2(trusting(roots));
    grpc_handshake(addr, &strict, "127.0.0.1").await.expect("valid for 127.0.0.1");
    grpc_handshake(addr, &strict, "localhost").await.expect("valid for localhost");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_tls_files_when_a_tls_client_connects_to_the_grpc_port_should_present_them_beside_plaintext(
) {
    let pki = Pki::new();
    let broker = grpc_broker(|c| pki.configure(c, TlsMode::Disabled)).await;
    let addr = broker.grpc_addr().expect("a gRPC port");
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).expect("CA PEM"))
        .expect("a trusted CA");
    let (alpn, _) = grpc_handshake(addr, &h2(trusting(roots)), "localhost")
        .await
        .expect("the configured certificate verifies against its CA");
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let plain = TcpStream::connect(addr).await.expect("a connection");
    assert!(
        !closed_by_broker(plain, H2_PREFACE).await,
        "permissive: plaintext HTTP/2 is served on the same port"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_grpc_tls_enforcing_when_a_plaintext_client_connects_should_close_it() {
    let broker = grpc_broker(|c| c.security.grpc_tls_mode = Some(TlsMode::Enforcing)).await;
    let addr = broker.grpc_addr().expect("a gRPC port");
    let plain = TcpStream::connect(addr).await.expect("a connection");
    assert!(closed_by_broker(plain, H2_PREFACE).await, "plaintext is closed");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_grpc_tls_disabled_when_a_tls_client_connects_should_not_handshake() {
    let broker = grpc_broker(|c| c.security.grpc_tls_mode = Some(TlsMode::Disabled)).await;
    let addr = broker.grpc_addr().expect("a gRPC port");
    let any = accepting_any_certificate();
    assert!(grpc_handshake(addr, &h2(any), "127.0.0.1").await.is_err(), "plaintext only");
    broker.shutdown().await;
}
