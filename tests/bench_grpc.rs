//! `baiji bench --driver grpc` against an in-process broker over loopback: the gRPC driver's
//! producers (SendMessage, concurrent calls on one HTTP/2 connection) and SimpleConsumers
//! (ReceiveMessage, AckMessage) move every message, and the report counts them.

use std::time::Duration;

use baiji::bench::grpc::GrpcDriver;
use baiji::bench::{run, BenchArgs, ConsumeMode, SendMode};

/// Messages sent after the warm-up.
const COUNT: u64 = 3_000;

fn args(namesrv: &str, grpc: &str) -> BenchArgs {
    BenchArgs {
        namesrv: namesrv.to_string(),
        driver: "grpc".into(),
        grpc_endpoint: grpc.to_string(),
        system: "baiji".into(),
        workload: "test".into(),
        topic: None,
        queues: 4,
        producers: 2,
        mode: SendMode::Async,
        inflight: 8,
        batch: 1,
        groups: 2,
        members: 2,
        size: 128,
        rate: 0,
        duration: 0.0,
        count: Some(COUNT),
        warmup: 0.5,
        backlog: false,
        consume: ConsumeMode::Pop,
        // Generous: a slow CI machine must not turn into a failure.
        drain_timeout: 60.0,
        broker_pid: None,
        extra_pid: Vec::new(),
        tcp_probe: 0,
        settle: 0.0,
        json: None,
        quiet: true,
    }
}

#[path = "common/mod.rs"]
mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_grpc_driver_when_benchmarking_should_deliver_every_message_to_every_group() {
    let config = common::broker::with_grpc();
    let broker = baiji::broker::start(config).await.expect("the broker starts on free ports");
    let namesrv = broker.namesrv_addr().expect("an embedded name server").to_string();
    let grpc = broker.grpc_addr().expect("a gRPC endpoint").to_string();
    let a = args(&namesrv, &grpc);

    let report = tokio::time::timeout(
        Duration::from_secs(240),
        run(&a, GrpcDriver::new(&a.namesrv, &a.grpc_endpoint)),
    )
    .await
    .expect("the run ends")
    .expect("the gRPC driver runs");

    assert_eq!(report.driver, "grpc", "the report names the driver");
    assert_eq!(report.send_errors, 0, "no SendMessage fails: {report:?}");
    // The measured window's edges are read while lanes send: about COUNT, not exactly.
    assert!(report.sent_measured >= COUNT * 9 / 10, "the measured messages are sent: {report:?}");
    assert!(report.sent_total >= report.sent_measured, "warm-up messages come on top");
    assert!(report.send_rtt.count > 0, "sends are timed: {report:?}");
    assert_eq!(report.groups.len(), 2, "both groups report");
    for g in &report.groups {
        assert_eq!(g.received, report.sent_total, "group {} receives every message", g.group);
        assert_eq!((g.lost, g.duplicated), (0, 0), "group {}: nothing lost or twice", g.group);
    }
    assert!(
        report.e2e.count > 0 && report.e2e.count <= 2 * report.sent_total,
        "end-to-end latency is measured on deliveries: {report:?}"
    );
    assert!(report.e2e.p50 > 0.0, "a delivery takes time: {report:?}");
    broker.shutdown().await;
}
