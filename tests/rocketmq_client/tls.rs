//! TLS with the real client: rocketmq-client-rust 1.0.0 with `enable_tls` (its transport's
//! `tls` feature, switched on by this crate's dev-dependency on rocketmq-transport), verifying
//! the broker's certificate against a CA generated here (rcgen; no key is committed). The
//! client speaks TLS to the name server and to the broker alike, as RocketMQ's does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baiji::broker::TlsMode;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rocketmq_client_rust::{
    ClientConfig, ClientRuntime, DefaultMQProducer, DefaultMQPushConsumer, MQPushConsumer,
};
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;
use rocketmq_transport::api::{TlsClientConfig, TlsConfig};

use crate::completeness_support::*;

/// Bound for every wait (a healthy run takes a few seconds).
const PATIENCE: Duration = Duration::from_secs(60);

/// A CA and a server certificate for 127.0.0.1/localhost, as PEM files in a directory removed
/// on drop.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir =
            std::env::temp_dir().join(format!("baiji-tls-client-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("a key"))
            .expect("a CA certificate");
        let key = KeyPair::generate().expect("a server key");
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("server params")
            .signed_by(&key, &ca)
            .expect("a server certificate");
        std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
        std::fs::write(dir.join("server.pem"), cert.pem()).expect("write");
        std::fs::write(dir.join("server.key"), key.serialize_pem()).expect("write");
        Pki { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The tests' client settings, with TLS (verifying the server against the test CA) if `tls`.
fn config(namesrv: &str, instance: &str, pki: &Pki, tls: bool) -> ClientConfig {
    let tls_config = TlsConfig {
        enable: tls,
        test_mode_enable: false,
        client: TlsClientConfig {
            auth_server: true,
            trust_cert_path: Some(pki.path("ca.pem").display().to_string()),
            ..TlsClientConfig::default()
        },
        ..TlsConfig::default()
    };
    ClientConfig::builder()
        .namesrv_addr(namesrv)
        .client_ip("127.0.0.1")
        .instance_name(instance)
        .poll_name_server_interval(10_000)
        .heartbeat_broker_interval(10_000)
        .persist_consumer_offset_interval(1_000)
        .enable_tls(tls)
        .tls_config(tls_config)
        .build()
        .expect("valid client config")
}

async fn started_producer(
    rt: &Arc<ClientRuntime>,
    namesrv: &str,
    group: &str,
    pki: &Pki,
    tls: bool,
) -> DefaultMQProducer {
    let mut p = DefaultMQProducer::builder(Arc::clone(rt))
        .client_config(config(namesrv, &format!("{group}-producer"), pki, tls))
        .producer_group(group)
        .name_server_addr(namesrv)
        .send_msg_timeout(5_000)
        .retry_times_when_send_failed(0)
        .build();
    p.start().await.expect("the producer starts");
    p
}

/// A TLS producer creates a topic and sends; a TLS push consumer receives every message.
async fn send_and_consume_over_tls(b: &TestBroker, pki: &Pki, rt: &Arc<ClientRuntime>, tag: &str) {
    let topic = format!("tls_topic_{tag}");
    let mut p = started_producer(rt, &b.namesrv, &format!("tls_producer_{tag}"), pki, true).await;
    create_topic(&mut p, &topic, 4).await;
    let log = Log::default();
    let consumer = format!("tls-consumer-{tag}");
    let mut c = DefaultMQPushConsumer::builder(Arc::clone(rt))
        .client_config(config(&b.namesrv, &consumer, pki, true))
        .consumer_group(format!("tls_group_{tag}"))
        .name_server_addr(&b.namesrv)
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .consume_message_batch_max_size(1)
        .build();
    c.subscribe(&topic, "*").await.expect("subscribe");
    c.register_message_listener_concurrently(recording_listener(&consumer, &log));
    c.start().await.expect("the consumer starts over TLS");
    let mut sent = std::collections::HashSet::new();
    for i in 0..5 {
        let body = format!("tls-{tag}-{i}");
        sent.insert(send(&p, message(&topic, &body, "TagA", &[], &[])).await);
    }
    assert!(
        eventually(PATIENCE, || sent.is_subset(&log.uniq_set(None))).await,
        "every message sent over TLS is consumed over TLS"
    );
    c.shutdown().await;
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_enforcing_tls_the_real_client_should_send_and_consume_over_tls_and_a_plaintext_one_fail(
) {
    let pki = Pki::new("enforcing");
    let b = start_broker(|c| {
        c.security.tls_mode = TlsMode::Enforcing;
        c.security.tls_cert = Some(pki.path("server.pem"));
        c.security.tls_key = Some(pki.path("server.key"));
    })
    .await;
    let rt = client_runtime("tls-enforcing");
    send_and_consume_over_tls(&b, &pki, &rt, "enforcing").await;

    let plain = started_producer(&rt, &b.namesrv, "plain_producer", &pki, false).await;
    let refused = plain.send(message("tls_topic_enforcing", "plain", "TagA", &[], &[])).await;
    assert!(
        !matches!(refused, Ok(Some(_))),
        "a plaintext client gets no send through under enforcing: {refused:?}"
    );
    assert!(b.broker.connections_refused() >= 1, "its connections were refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_permissive_tls_the_real_client_should_be_served_with_and_without_tls() {
    let pki = Pki::new("permissive");
    let b = start_broker(|c| {
        c.security.tls_mode = TlsMode::Permissive;
        c.security.tls_cert = Some(pki.path("server.pem"));
        c.security.tls_key = Some(pki.path("server.key"));
    })
    .await;
    let rt = client_runtime("tls-permissive");
    send_and_consume_over_tls(&b, &pki, &rt, "permissive").await;
    let plain = started_producer(&rt, &b.namesrv, "plain_producer_p", &pki, false).await;
    send(&plain, message("tls_topic_permissive", "plain", "TagA", &[], &[])).await;
}
