//! What TLS adds per request on the remoting port (criterion).
//!
//! One broker in `permissive` mode (so both connections reach the same port and the same
//! connection code), one plaintext and one TLS connection (rustls/aws-lc-rs, TLS 1.3, an ECDSA P-256
//! certificate generated here), each doing one synchronous round trip at a time:
//! * `tls_cost/{plain,tls}/send_128b` — SEND_MESSAGE of a 128-byte body, answered;
//! * `tls_cost/{plain,tls}/send_16k` — the same with a 16 KiB body (one TLS record's worth);
//! * `tls_cost/handshake` — TCP connect + full TLS handshake + one request (no resumption).
//!
//! Client and broker share one 2-thread runtime, so each figure is the whole round trip's CPU
//! and latency (both ends' encryption and decryption), the difference being TLS's cost.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use baiji::broker::{BrokerConfig, TlsMode};
use baiji::remoting::code::request_code as rc;
use baiji::remoting::header::{SendHeaderVersion, SendMessageRequestHeader};
use baiji::remoting::{ExtFields, RemotingCommand};
use bytes::{Bytes, BytesMut};
use criterion::Criterion;
use rcgen::{CertificateParams, KeyPair};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

fn send_frame(body: &Bytes) -> BytesMut {
    let h = SendMessageRequestHeader {
        producer_group: "bench_producer",
        topic: "TlsBench",
        default_topic: "TBW102",
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: "TAGS\u{1}TagA\u{2}",
        reconsume_times: 0,
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
        broker_name: None,
    };
    let mut ext = ExtFields::new();
    h.write_ext_fields_as(&mut ext, SendHeaderVersion::V1);
    let cmd =
        RemotingCommand::request(rc::SEND_MESSAGE, 1).with_ext_fields(ext).with_body(body.clone());
    let mut out = BytesMut::new();
    cmd.encode(&mut out).expect("encodable");
    out
}

/// Writes `frame` and reads one answer.
async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    frame: &[u8],
    buf: &mut BytesMut,
) {
    s.write_all(frame).await.expect("write");
    s.flush().await.expect("flush");
    loop {
        if let Some(resp) = RemotingCommand::decode(buf).expect("a frame") {
            assert_eq!(resp.code, 0, "the send succeeds: {resp:?}");
            return;
        }
        assert!(s.read_buf(buf).await.expect("read") > 0, "the broker answers");
    }
}

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let dir = std::env::temp_dir().join(format!("baiji-tls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let key = KeyPair::generate().expect("a key");
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("a certificate");
    std::fs::write(dir.join("cert.pem"), cert.pem()).expect("write");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("write");
    let config = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("an address"),
        namesrv_listen: None,
        tls_mode: TlsMode::Permissive,
        tls_cert: Some(dir.join("cert.pem")),
        tls_key: Some(dir.join("key.pem")),
        // The bench's sends are never consumed; keep them from filling the budget.
        retention_bytes: 4 * 1024 * 1024,
        ..BrokerConfig::default()
    };
    let broker = rt.block_on(baiji::broker::start(config)).expect("the broker starts");
    let addr = broker.broker_addr().expect("an address");
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(cert.der().to_vec())).expect("a root");
    let connector = TlsConnector::from(Arc::new(
        ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ));
    let connect_tls = || async {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let name = ServerName::try_from("localhost").expect("a name");
        connector.connect(name, tcp).await.expect("a handshake")
    };
    let mut plain = rt.block_on(TcpStream::connect(addr)).expect("connect");
    plain.set_nodelay(true).expect("nodelay");
    let mut tls = rt.block_on(connect_tls());
    let mut buf = BytesMut::new();
    let mut g = c.benchmark_group("tls_cost");
    for (name, size) in [("send_128b", 128usize), ("send_16k", 16 * 1024)] {
        let frame = send_frame(&Bytes::from(vec![b'x'; size]));
        g.bench_function(format!("plain/{name}"), |b| {
            b.iter(|| rt.block_on(round_trip(&mut plain, black_box(&frame), &mut buf)))
        });
        g.bench_function(format!("tls/{name}"), |b| {
            b.iter(|| rt.block_on(round_trip(&mut tls, black_box(&frame), &mut buf)))
        });
    }
    let frame = send_frame(&Bytes::from_static(&[b'x'; 128]));
    g.bench_function("handshake", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut s = connect_tls().await;
                round_trip(&mut s, &frame, &mut BytesMut::new()).await;
            })
        })
    });
    g.finish();
    rt.block_on(broker.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
    c.final_summary();
}
