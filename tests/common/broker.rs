//! A broker on free loopback ports, for the harnesses that start one in-process
//! (`broker_raw`, `rocketmq_client`, `grpc_clients`, `bench_grpc`): each `#[path]`-includes this
//! file and adjusts the configuration with its own `tweak`.

use baiji::broker::{BrokerConfig, RunningBroker};

/// The configuration of a broker on free loopback ports with its embedded name server on
/// another (no gRPC port: `with_grpc` adds one; no fast port: `with_fast_port` adds it).
///
/// The fast port is off here although it is on by default: at `listenPort - 2` of a port the
/// kernel picked, it would take a port no test asked for, which another test running at the
/// same time may have just found free and be about to bind.
pub(crate) fn loopback() -> BrokerConfig {
    let mut c = BrokerConfig::default();
    c.remoting.listen = "127.0.0.1:0".parse().expect("an address");
    c.remoting.namesrv_listen = Some("127.0.0.1:0".parse().expect("an address"));
    c.remoting.fast_listen_port = Some(0);
    c
}

/// Turns the fast (VIP) port back on at its default, `listenPort - 2` (what a broker does
/// unless told otherwise).
pub(crate) fn with_fast_port(c: &mut BrokerConfig) {
    c.remoting.fast_listen_port = None;
}

/// [`loopback`] with a gRPC port on a free loopback port too.
pub(crate) fn with_grpc() -> BrokerConfig {
    let mut c = loopback();
    c.grpc.grpc_listen = Some("127.0.0.1:0".parse().expect("an address"));
    c
}

/// Starts a broker over `config` adjusted by `tweak`.
pub(crate) async fn start(
    mut config: BrokerConfig,
    tweak: impl FnOnce(&mut BrokerConfig),
) -> RunningBroker {
    tweak(&mut config);
    baiji::broker::start(config).await.expect("the broker starts on free ports")
}
