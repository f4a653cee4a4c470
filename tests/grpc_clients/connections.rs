//! The gRPC listener's connection bound (`max-connections`), spoken at the HTTP/2 level.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{create_topic, start, start_broker, unique, Sdk, PATIENCE};

/// The HTTP/2 client connection preface; a server answers it with its SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Opens a connection and sends the preface: `Some(stream)` when the server answered,
/// `None` when it closed the connection instead.
async fn open(addr: &str) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).await.expect("the gRPC port accepts TCP");
    s.write_all(PREFACE).await.ok()?;
    let mut buf = [0u8; 64];
    match tokio::time::timeout(PATIENCE, s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(s),
        Ok(_) => None,
        Err(_) => panic!("the gRPC port neither answered nor closed within {PATIENCE:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_max_connections_open_when_one_more_connects_should_close_it_until_one_leaves() {
    let b = start_broker(|c| c.core.max_connections = 1).await;
    let first = open(&b.grpc).await.expect("the first connection is served");
    assert!(open(&b.grpc).await.is_none(), "a connection beyond max-connections is closed");
    assert!(b.running.connections_refused() >= 1, "and counted");
    drop(first);
    // The slot is free once the server saw the first connection close.
    let start = Instant::now();
    loop {
        if open(&b.grpc).await.is_some() {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "a new connection is served once the first left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_connected_producer_when_the_broker_shuts_down_should_not_wait_for_it() {
    let b = start_broker(|_| {}).await;
    let topic = unique("GrpcHold");
    create_topic(&b, &topic, 4).await;
    let args = ["hold", b.grpc.as_str(), topic.as_str(), "120"].map(str::to_owned).to_vec();
    let client = start(Sdk::Python, "producer.py", args).await;
    // The client's Telemetry stream is open and will stay so: a graceful stop that waited for
    // every stream would wait for the client.
    let stopped = tokio::time::timeout(PATIENCE, b.running.shutdown()).await;
    assert!(stopped.is_ok(), "the broker stops within {PATIENCE:?} with a client still connected");
    drop(client);
}

/// A broker on free loopback ports whose gRPC address is `grpc` (`is_default`: the command's
/// default rather than an address somebody asked for).
async fn second_broker(
    grpc: std::net::SocketAddr,
    is_default: bool,
) -> Result<baiji::broker::RunningBroker, baiji::broker::BrokerError> {
    baiji::broker::start(baiji::broker::BrokerConfig {
        remoting: baiji::broker::RemotingConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            namesrv_listen: Some("127.0.0.1:0".parse().expect("an address")),
            ..Default::default()
        },
        grpc: baiji::broker::GrpcConfig {
            grpc_listen: Some(grpc),
            grpc_listen_is_default: is_default,
        },
        ..baiji::broker::BrokerConfig::default()
    })
    .await
}

#[tokio::test]
async fn given_a_taken_grpc_port_when_a_broker_starts_should_refuse_an_asked_for_address_and_go_without_a_default(
) {
    let first = start_broker(|_| {}).await;
    let taken: std::net::SocketAddr = first.grpc.parse().expect("a socket address");
    let asked = second_broker(taken, false).await;
    assert!(asked.is_err(), "an address somebody asked for must bind");
    let second =
        second_broker(taken, true).await.expect("a taken default does not stop the broker");
    assert_eq!(second.grpc_addr(), None, "it serves remoting only");
    assert!(second.broker_addr().is_some());
    second.shutdown().await;
    first.running.shutdown().await;
}

/// The server's first SETTINGS frame after the preface: its `(identifier, value)` pairs.
async fn server_settings(addr: &str) -> Vec<(u16, u32)> {
    let mut s = TcpStream::connect(addr).await.expect("the gRPC port accepts TCP");
    s.write_all(PREFACE).await.expect("the preface is written");
    let mut head = [0u8; 9];
    tokio::time::timeout(PATIENCE, s.read_exact(&mut head))
        .await
        .expect("a frame in time")
        .expect("a frame header");
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    assert_eq!(head[3], 0x4, "the server opens with SETTINGS");
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.expect("the SETTINGS payload");
    payload
        .chunks_exact(6)
        .map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_grpc_connection_when_the_server_settles_its_settings_should_bound_concurrent_streams(
) {
    // review-e77444b M7: tonic's default announced no bound, so one connection could hold any
    // number of parked receives and Telemetry streams.
    let b = start_broker(|_| {}).await;
    let settings = server_settings(&b.grpc).await;
    let max_streams = settings.iter().find(|(id, _)| *id == 0x3).map(|(_, v)| *v);
    assert_eq!(max_streams, Some(200), "SETTINGS_MAX_CONCURRENT_STREAMS: {settings:?}");
    b.running.shutdown().await;
}
