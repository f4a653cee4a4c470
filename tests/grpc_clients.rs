//! The RocketMQ 5 SDKs against baiji's gRPC face (`--grpc-listen`): real clients, installed by
//! `.ci/test` (Python `rocketmq-python-client` 5.1.2 in `.tools/py`, Node.js
//! `rocketmq-client-nodejs` 1.0.8 in `tests/node`, Rust `rocketmq` 5.0.0 behind the
//! `tests/grpc_rust5` driver), run as child processes against an in-process broker on
//! loopback; what they sent is then read back over the remoting protocol.
//!
//! `support` is the harness (broker, client processes, remoting reads); each other module is
//! one family of RPCs.

#[path = "common/mod.rs"]
mod common;

#[path = "grpc_clients/acl.rs"]
mod acl;
#[path = "grpc_clients/admin.rs"]
mod admin;
#[path = "grpc_clients/cluster.rs"]
mod cluster;
#[path = "grpc_clients/connections.rs"]
mod connections;
#[path = "grpc_clients/consumer.rs"]
mod consumer;
#[path = "grpc_clients/producer.rs"]
mod producer;
#[path = "grpc_clients/relay.rs"]
mod relay;
#[path = "grpc_clients/support.rs"]
mod support;
